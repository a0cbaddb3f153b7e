//! The outbox port (`shared_outbox` delivery): a route persists its resolved
//! dispatch plans as records and acknowledges the source; a drainer per
//! partition (route + binding) claims records under a lease, sends them and
//! completes them.
//!
//! Rules every store keeps (seed 001):
//! - a record carries its address apart from the envelope, whose subject is
//!   never touched;
//! - [`OutboxStore::persist`] returns only once the records are durable, and
//!   a (partition, envelope id, binding, address) that is pending, or was
//!   completed less than its dedup window ago, is not stored twice;
//! - every guarded write (claim, complete, replay) checks the caller's lease
//!   version: a stale one is refused with [`StoreError::StaleFencingToken`],
//!   so two drainers can never both complete or replay a partition's records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_envelope::Envelope;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A record to persist.
#[derive(Debug, Clone)]
pub struct NewRecord {
    /// `<route>/<binding>`: what one drainer owns.
    pub partition: String,
    pub route: String,
    pub binding: String,
    /// Transport destination, kept apart from the envelope.
    pub address: String,
    pub envelope: Envelope,
}

/// A persisted record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// Store-wide sequence number (ordering within a partition).
    pub seq: u64,
    pub partition: String,
    pub route: String,
    pub binding: String,
    pub address: String,
    pub envelope: Envelope,
    /// Transient failures so far.
    pub replay_count: u32,
    /// When the record was persisted (ms since the epoch).
    pub created_ms: i64,
    /// Not to be sent before this time (ms since the epoch).
    pub next_attempt_ms: i64,
    /// When the first send failed, if one did.
    pub first_failure_ms: Option<i64>,
    /// The lease version that claimed it last (0: never claimed).
    pub claimed_by: u64,
}

impl OutboxRecord {
    /// A record as [`OutboxStore::persist`] stores `new`: sequence `seq`,
    /// due at once, never tried or claimed.
    pub fn stored(new: &NewRecord, seq: u64, created_ms: i64) -> Self {
        Self {
            seq,
            partition: new.partition.clone(),
            route: new.route.clone(),
            binding: new.binding.clone(),
            address: new.address.clone(),
            envelope: new.envelope.clone(),
            replay_count: 0,
            created_ms,
            next_attempt_ms: created_ms,
            first_failure_ms: None,
            claimed_by: 0,
        }
    }
}

/// Single-active ownership of a partition: the version grows with every
/// acquisition, and only the newest may write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseToken {
    pub owner: String,
    pub version: u64,
}

/// Depth and age of one partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStats {
    pub partition: String,
    pub depth: u64,
    /// Creation time of the oldest pending record (ms since the epoch).
    pub oldest_ms: Option<i64>,
}

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum StoreError {
    #[error("stale fencing token for {partition}: version {presented} presented, {current} holds the lease")]
    StaleFencingToken { partition: String, presented: u64, current: u64 },
    #[error("store: {0}")]
    Io(String),
    /// The store could not be reached (a database that is down or cut
    /// off): not the fault of what was being written, so a route holds
    /// the message and tries again rather than counting it a failure.
    #[error("store unreachable: {0}")]
    Unavailable(String),
}

/// What [`OutboxStore::persist`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Persisted {
    pub stored: usize,
    /// Records skipped because the same (partition, id, binding, address)
    /// is pending or was completed within its dedup window.
    pub duplicates: usize,
}

/// The outbox store. Every method that touches the disk is `async` and
/// must not block the caller's thread: an implementation runs its I/O on
/// threads of its own, so a slow or stuck disk delays the outbox but never
/// the async workers (heartbeats, other routes, the admin server, signal
/// handling). The cheap in-memory reads (`depth`, `oldest`, `stats`) may
/// take a short lock.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Stores the records atomically and returns once they are durable.
    async fn persist(&self, records: Vec<NewRecord>) -> Result<Persisted, StoreError>;
    /// Takes the partition's lease for `owner` for `ttl` when it is free,
    /// expired or already `owner`'s; the version grows by one with every
    /// grant, fencing out every earlier holder. `None`: another owner holds
    /// it and it has not expired. Durable when it returns. A store only one
    /// process can open (the embedded one) grants it always.
    async fn acquire_lease(
        &self,
        partition: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseToken>, StoreError>;
    /// Extends a held lease to `ttl` from now; false when it is no longer
    /// this token's (another owner took it).
    async fn renew_lease(&self, partition: &str, token: &LeaseToken, ttl: Duration) -> Result<bool, StoreError>;
    /// Gives a held lease up at once, so another instance may take it
    /// without waiting for it to expire.
    async fn release_lease(&self, partition: &str, token: &LeaseToken) -> Result<(), StoreError>;
    /// Marks `owner` alive for `ttl` and tells how many owners are alive and
    /// who holds an unexpired lease on each of `partitions`.
    async fn lease_view(&self, owner: &str, ttl: Duration, partitions: &[String]) -> Result<LeaseView, StoreError>;
    /// Says `owner` is gone (a clean stop), so the others count it out at
    /// once rather than after its last `lease_view` expires.
    async fn leave(&self, _owner: &str) -> Result<(), StoreError> {
        Ok(())
    }
    /// Up to `limit` records due at `now_ms` and not claimed under this
    /// token yet, oldest first, marked as claimed by it.
    async fn claim(
        &self,
        partition: &str,
        token: &LeaseToken,
        limit: usize,
        now_ms: i64,
    ) -> Result<Vec<OutboxRecord>, StoreError>;
    /// Removes a record that was sent, or dead-lettered; durable when it
    /// returns, so a crash after it does not send the record again. Its
    /// duplicate key is kept for `keep_key` more (zero: forgotten now), so a
    /// source redelivery within that window is suppressed.
    async fn complete(&self, record: &OutboxRecord, token: &LeaseToken, keep_key: Duration) -> Result<(), StoreError>;
    /// Puts a record back for another attempt at `next_attempt_ms`, counting
    /// the failure; returns the new replay count.
    async fn replay(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<u32, StoreError>;
    /// Puts a record back for `next_attempt_ms` without counting a failure
    /// (nothing was attempted: the sender had no connection).
    async fn release(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<(), StoreError>;
    /// Pending records in a partition.
    fn depth(&self, partition: &str) -> u64;
    /// Creation time of a partition's oldest pending record.
    fn oldest(&self, partition: &str) -> Option<i64>;
    /// Depth and oldest record of every partition with records.
    fn stats(&self) -> Vec<PartitionStats>;
    /// Signalled when records for `partition` arrive from another process
    /// (a store shared by several instances); `None` when only this process
    /// writes.
    fn arrivals(&self, _partition: &str) -> Option<Arc<Notify>> {
        None
    }
    /// Signalled when another process gives a lease up.
    fn lease_changes(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// Who holds what, as [`OutboxStore::lease_view`] saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// Owners alive (this one included).
    pub live_owners: usize,
    /// Partition -> owner of its unexpired lease; free partitions are absent.
    pub holders: BTreeMap<String, String>,
}

/// The partition a record of `envelope_id` goes to among a binding's
/// `count` partitions: `<route>/<binding>` for the first, `<route>/<binding>/<k>`
/// for the others, `k` picked by an FNV-1a hash of the id, so every instance
/// (and every restart) puts one message in the same partition and the
/// duplicate key catches a redelivery.
pub fn partition_for(route: &str, binding: &str, envelope_id: &str, count: u32) -> String {
    if count <= 1 {
        return partition_name(route, binding, 0);
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in envelope_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    partition_name(route, binding, (hash % u64::from(count)) as u32)
}

/// Partition `k` of a binding (see [`partition_for`]).
pub fn partition_name(route: &str, binding: &str, k: u32) -> String {
    if k == 0 { format!("{route}/{binding}") } else { format!("{route}/{binding}/{k}") }
}
