//! The store's tables in the redb file, and how values are encoded.
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `meta` | `"format"`, `"next_seq"` | `u64` |
//! | `records` | `(partition, seq)` | MessagePack [`OutboxRecord`](ferry_core::outbox::OutboxRecord) |
//! | `dedup` | `(partition, envelope id, binding)` | seq of the pending record |
//! | `leases` | partition | MessagePack [`LeaseToken`](ferry_core::outbox::LeaseToken) |
//! | `dead_letters` | id | MessagePack [`DeadLetter`](ferry_core::dlq::DeadLetter) |
//!
//! Records and dead letters share one sequence (`next_seq`), so every id
//! the store hands out is unique and grows with time.

use ferry_core::outbox::StoreError;
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub const RECORDS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("records");
pub const DEDUP: TableDefinition<(&str, &str, &str), u64> = TableDefinition::new("dedup");
pub const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("leases");
pub const DEAD_LETTERS: TableDefinition<u64, &[u8]> = TableDefinition::new("dead_letters");

/// `meta["format"]`: the layout above. A file with another number is
/// refused rather than misread.
pub const FORMAT: u64 = 1;
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
