//! The store's tables in the redb file, and how values are encoded.
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `meta` | `"format"`, `"next_seq"` | `u64` |
//! | `records` | `(partition, seq)` | MessagePack [`OutboxRecord`](ferry_core::outbox::OutboxRecord) |
//! | `dedup_keys` | `(partition, envelope id, binding, address)` | kept until (ms; `i64::MAX` while pending) |
//! | `dedup_expiry` | `(kept until, partition, envelope id, binding, address)` | `()` |
//! | `leases` | partition | MessagePack [`LeaseToken`](ferry_core::outbox::LeaseToken) |
//! | `dead_letters` | id | MessagePack [`DeadLetter`](ferry_core::dlq::DeadLetter) |
//! | `depths` | partition | pending records (absent: none) |
//! | `records_kv` | `(space, key)` | bytes of the [`RecordStore`](ferry_core::records::RecordStore) port (the SQS endpoint's queues) |
//!
//! Records and dead letters share one sequence (`next_seq`), so every id
//! the store hands out is unique and grows with time.
//!
//! A duplicate key is held while its record is pending and, once the record
//! completes, for the route's `dedup_window_secs`; `dedup_expiry` orders the
//! completed keys by the time they may go, so the writer removes expired
//! ones without scanning the rest.

use ferry_core::outbox::StoreError;
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub const RECORDS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("records");
pub const DEDUP: TableDefinition<(&str, &str, &str, &str), i64> = TableDefinition::new("dedup_keys");
pub const DEDUP_EXPIRY: TableDefinition<(i64, &str, &str, &str, &str), ()> = TableDefinition::new("dedup_expiry");
/// The duplicate-key table of format 1, keyed without the address.
pub const DEDUP_V1: &str = "dedup";
/// `dedup_keys` value while the record is pending.
pub const PENDING: i64 = i64::MAX;
pub const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("leases");
pub const DEAD_LETTERS: TableDefinition<u64, &[u8]> = TableDefinition::new("dead_letters");
/// Pending records per partition, changed in the commit that adds or
/// removes them, so opening the store need not count them.
pub const DEPTHS: TableDefinition<&str, u64> = TableDefinition::new("depths");

/// The keyed records of ferry's own state beside the outbox. A file of an
/// earlier ferry gains the table at open; the format stays the same, as
/// nothing else changed.
pub const RECORDS_KV: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("records_kv");

/// `meta["format"]`: the layout above. Files of format 1 (duplicate keys
/// without the address, forgotten at completion) and 2 (no `depths`) are
/// upgraded at open, once; any other number is refused rather than
/// misread.
pub const FORMAT: u64 = 3;
pub const FORMAT_KEY: &str = "format";
pub const NEXT_SEQ_KEY: &str = "next_seq";

/// The file inside `store.path`.
pub const FILE_NAME: &str = "ferry.redb";
/// The directory the sled store (ferry before redb) used inside `store.path`.
pub const SLED_DIR: &str = "sled";

pub fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    rmp_serde::to_vec_named(v).map_err(io)
}

pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StoreError> {
    rmp_serde::from_slice(bytes).map_err(io)
}
