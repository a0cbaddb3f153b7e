//! ferry's embedded store on sled: the `shared_outbox` records with their
//! leases, and the dead-letter queue.
//!
//! Durability is explicit. A write is in sled's memory until a flush; every
//! operation that lets a source message be acknowledged (persisting outbox
//! records, writing a dead letter) waits for a flush that covers it. Flushes
//! are grouped: while one runs, the writes that arrive wait for the next,
//! which then covers all of them, so a busy route pays one fsync per group,
//! not per message.
//!
//! What survives what:
//! - a process crash (SIGKILL, OOM): every record and dead letter whose
//!   write returned; completions and claims made in the last moments before
//!   the crash may be lost, so those records are sent again (a duplicate,
//!   never a loss);
//! - a power loss: the same, as far as the disk honours fsync.
//!
//! Layout: tree `outbox` holds `r/<partition>\0<seq>` → record,
//! `i/<partition>\0<envelope id>\0<binding>` → seq (duplicate suppression)
//! and `l/<partition>` → lease; tree `dlq` holds `<seq>` → dead letter.
//! Values are MessagePack. sled locks its directory: one process at a time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::outbox::{LeaseToken, NewRecord, OutboxRecord, OutboxStore, PartitionStats, Persisted, StoreError};
use ferry_envelope::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

/// A dead letter with the id the CLI names it by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDeadLetter {
    pub id: u64,
    #[serde(flatten)]
    pub entry: DeadLetter,
}

/// The store. Cheap to share behind an `Arc`.
pub struct SledStore {
    db: sled::Db,
    outbox: sled::Tree,
    dlq: sled::Tree,
    depths: Mutex<HashMap<String, u64>>,
    /// Serialises the outbox's check-then-write operations (duplicate
    /// check, lease check); each write itself is one atomic batch. One
    /// process owns the store, so a mutex is all the isolation needed and
    /// costs less than sled's optimistic transactions with their retries.
    writes: Mutex<()>,
    commit: Arc<GroupCommit>,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the store at {path} is in use by another process (a running ferry?)")]
    Locked { path: String },
    #[error("cannot open the store at {path}: {detail}")]
    Other { path: String, detail: String },
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    rmp_serde::to_vec_named(v).map_err(io)
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StoreError> {
    rmp_serde::from_slice(bytes).map_err(io)
}

fn record_prefix(partition: &str) -> Vec<u8> {
    format!("r/{partition}\0").into_bytes()
}

fn record_key(partition: &str, seq: u64) -> Vec<u8> {
    let mut k = record_prefix(partition);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn index_key(partition: &str, id: &str, binding: &str) -> Vec<u8> {
    format!("i/{partition}\0{id}\0{binding}").into_bytes()
}

fn lease_key(partition: &str) -> Vec<u8> {
    format!("l/{partition}").into_bytes()
}

fn now_ms() -> i64 {
    Timestamp::now().as_millis()
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Arc<Self>, OpenError> {
        let path = dir.display().to_string();
        let db = sled::Config::new().path(dir).open().map_err(|e| match e {
            sled::Error::Io(ref io) if io.kind() == std::io::ErrorKind::WouldBlock => {
                OpenError::Locked { path: path.clone() }
            }
            sled::Error::Io(ref io) if io.to_string().contains("lock") => OpenError::Locked { path: path.clone() },
            other => OpenError::Other { path: path.clone(), detail: other.to_string() },
        })?;
        let other = |e: sled::Error| OpenError::Other { path: path.clone(), detail: e.to_string() };
        let outbox = db.open_tree("outbox").map_err(other)?;
        let dlq = db.open_tree("dlq").map_err(other)?;
        let mut depths: HashMap<String, u64> = HashMap::new();
        for item in outbox.scan_prefix(b"r/") {
            let (key, _) = item.map_err(other)?;
            if let Some(partition) = key.get(2..key.len().saturating_sub(9)) {
                *depths.entry(String::from_utf8_lossy(partition).into_owned()).or_default() += 1;
            }
        }
        let commit = GroupCommit::start(db.clone());
        Ok(Arc::new(Self { db, outbox, dlq, depths: Mutex::new(depths), writes: Mutex::new(()), commit }))
    }

    /// Waits until everything written so far is on disk.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.commit.durable().await
    }

    fn add_depth(&self, partition: &str, delta: i64) {
        if let Ok(mut d) = self.depths.lock() {
            let entry = d.entry(partition.to_owned()).or_default();
            *entry = entry.saturating_add_signed(delta);
        }
    }

    /// Dead letters, oldest first, optionally of one route.
    pub fn dead_letters(&self, route: Option<&str>, limit: usize) -> Result<Vec<StoredDeadLetter>, StoreError> {
        let mut out = Vec::new();
        for item in self.dlq.iter() {
            if out.len() >= limit {
                break;
            }
            let (key, value) = item.map_err(io)?;
            let entry: DeadLetter = decode(&value)?;
            if route.is_some_and(|r| r != entry.route) {
                continue;
            }
            out.push(StoredDeadLetter { id: seq_of(&key), entry });
        }
        Ok(out)
    }

    /// One dead letter.
    pub fn dead_letter(&self, id: u64) -> Result<Option<StoredDeadLetter>, StoreError> {
        match self.dlq.get(id.to_be_bytes()).map_err(io)? {
            Some(v) => Ok(Some(StoredDeadLetter { id, entry: decode(&v)? })),
            None => Ok(None),
        }
    }

    /// Removes dead letters durably; returns how many existed.
    pub async fn remove_dead_letters(&self, ids: &[u64]) -> Result<usize, StoreError> {
        let mut removed = 0;
        for id in ids {
            if self.dlq.remove(id.to_be_bytes()).map_err(io)?.is_some() {
                removed += 1;
            }
        }
        self.flush().await?;
        Ok(removed)
    }

    /// How many dead letters there are.
    pub fn dead_letter_count(&self) -> usize {
        self.dlq.len()
    }

    /// Unclaims a record for `next_attempt_ms`, counting a failed attempt
    /// when `failed`; returns the replay count.
    fn reschedule(
        &self,
        record: &OutboxRecord,
        token: &LeaseToken,
        next_attempt_ms: i64,
        failed: bool,
    ) -> Result<u32, StoreError> {
        let _guard = self.lock();
        self.check_lease(&record.partition, token)?;
        let key = record_key(&record.partition, record.seq);
        let Some(value) = self.outbox.get(&key).map_err(io)? else {
            return Ok(record.replay_count);
        };
        let mut stored: OutboxRecord = decode(&value)?;
        if failed {
            stored.replay_count = stored.replay_count.saturating_add(1);
            stored.first_failure_ms.get_or_insert(now_ms());
        }
        stored.next_attempt_ms = next_attempt_ms;
        stored.claimed_by = 0;
        self.outbox.insert(key, encode(&stored)?).map_err(io)?;
        Ok(stored.replay_count)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fails unless `token` holds the partition's lease. Call with the
    /// write lock held.
    fn check_lease(&self, partition: &str, token: &LeaseToken) -> Result<(), StoreError> {
        let current = match self.outbox.get(lease_key(partition)).map_err(io)? {
            Some(v) => decode::<LeaseToken>(&v)?.version,
            None => 0,
        };
        if current != token.version {
            return Err(StoreError::StaleFencingToken {
                partition: partition.to_owned(),
                presented: token.version,
                current,
            });
        }
        Ok(())
    }
}

fn seq_of(key: &[u8]) -> u64 {
    let tail = &key[key.len().saturating_sub(8)..];
    let mut b = [0u8; 8];
    b[8 - tail.len()..].copy_from_slice(tail);
    u64::from_be_bytes(b)
}

#[async_trait]
impl OutboxStore for SledStore {
    async fn persist(&self, records: Vec<NewRecord>) -> Result<Persisted, StoreError> {
        let created = now_ms();
        let mut prepared = Vec::with_capacity(records.len());
        for r in records {
            let seq = self.db.generate_id().map_err(io)?;
            let record = OutboxRecord {
                seq,
                partition: r.partition,
                route: r.route,
                binding: r.binding,
                address: r.address,
                envelope: r.envelope,
                replay_count: 0,
                created_ms: created,
                next_attempt_ms: created,
                first_failure_ms: None,
                claimed_by: 0,
            };
            let value = encode(&record)?;
            prepared.push((record, value));
        }
        let stored: Vec<bool> = {
            let _guard = self.lock();
            let mut batch = sled::Batch::default();
            let mut fresh = std::collections::HashSet::new();
            let mut stored = Vec::with_capacity(prepared.len());
            for (record, value) in &prepared {
                let index = index_key(&record.partition, &record.envelope.id, &record.binding);
                if !fresh.insert(index.clone()) || self.outbox.contains_key(&index).map_err(io)? {
                    stored.push(false);
                    continue;
                }
                batch.insert(index, &record.seq.to_be_bytes());
                batch.insert(record_key(&record.partition, record.seq), value.as_slice());
                stored.push(true);
            }
            self.outbox.apply_batch(batch).map_err(io)?;
            stored
        };
        let mut result = Persisted::default();
        for ((record, _), stored) in prepared.iter().zip(stored) {
            if stored {
                result.stored += 1;
                self.add_depth(&record.partition, 1);
            } else {
                result.duplicates += 1;
            }
        }
        if result.stored > 0 {
            self.commit.durable().await?;
        }
        Ok(result)
    }

    fn acquire_lease(&self, partition: &str, owner: &str) -> Result<LeaseToken, StoreError> {
        let _guard = self.lock();
        let version = match self.outbox.get(lease_key(partition)).map_err(io)? {
            Some(v) => decode::<LeaseToken>(&v)?.version,
            None => 0,
        };
        let token = LeaseToken { owner: owner.to_owned(), version: version + 1 };
        self.outbox.insert(lease_key(partition), encode(&token)?).map_err(io)?;
        Ok(token)
    }

    fn claim(
        &self,
        partition: &str,
        token: &LeaseToken,
        limit: usize,
        now_ms: i64,
    ) -> Result<Vec<OutboxRecord>, StoreError> {
        let mut due = Vec::new();
        for item in self.outbox.scan_prefix(record_prefix(partition)) {
            if due.len() >= limit {
                break;
            }
            let (_, value) = item.map_err(io)?;
            let record: OutboxRecord = decode(&value)?;
            if record.claimed_by != token.version && record.next_attempt_ms <= now_ms {
                due.push(record);
            }
        }
        let _guard = self.lock();
        self.check_lease(partition, token)?;
        let mut batch = sled::Batch::default();
        let mut claimed = Vec::with_capacity(due.len());
        for mut record in due {
            let key = record_key(partition, record.seq);
            // Completed meanwhile: nothing to claim.
            if !self.outbox.contains_key(&key).map_err(io)? {
                continue;
            }
            record.claimed_by = token.version;
            batch.insert(key, encode(&record)?);
            claimed.push(record);
        }
        self.outbox.apply_batch(batch).map_err(io)?;
        Ok(claimed)
    }

    fn complete(&self, record: &OutboxRecord, token: &LeaseToken) -> Result<(), StoreError> {
        let removed = {
            let _guard = self.lock();
            self.check_lease(&record.partition, token)?;
            let key = record_key(&record.partition, record.seq);
            let existed = self.outbox.contains_key(&key).map_err(io)?;
            let mut batch = sled::Batch::default();
            batch.remove(key);
            batch.remove(index_key(&record.partition, &record.envelope.id, &record.binding));
            self.outbox.apply_batch(batch).map_err(io)?;
            existed
        };
        if removed {
            self.add_depth(&record.partition, -1);
        }
        Ok(())
    }

    fn replay(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<u32, StoreError> {
        self.reschedule(record, token, next_attempt_ms, true)
    }

    fn release(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<(), StoreError> {
        self.reschedule(record, token, next_attempt_ms, false).map(|_| ())
    }

    fn depth(&self, partition: &str) -> u64 {
        self.depths.lock().ok().and_then(|d| d.get(partition).copied()).unwrap_or(0)
    }

    fn oldest(&self, partition: &str) -> Result<Option<i64>, StoreError> {
        match self.outbox.scan_prefix(record_prefix(partition)).next() {
            Some(item) => {
                let (_, v) = item.map_err(io)?;
                Ok(Some(decode::<OutboxRecord>(&v)?.created_ms))
            }
            None => Ok(None),
        }
    }

    fn stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        let partitions: Vec<(String, u64)> = match self.depths.lock() {
            Ok(d) => d.iter().filter(|(_, n)| **n > 0).map(|(p, n)| (p.clone(), *n)).collect(),
            Err(_) => Vec::new(),
        };
        let mut out = Vec::new();
        for (partition, depth) in partitions {
            let oldest_ms = self.oldest(&partition)?;
            out.push(PartitionStats { partition, depth, oldest_ms });
        }
        out.sort_by(|a, b| a.partition.cmp(&b.partition));
        Ok(out)
    }
}

#[async_trait]
impl DeadLetterStore for SledStore {
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()> {
        let id = self.db.generate_id().map_err(std::io::Error::other)?;
        let value = encode(&entry).map_err(std::io::Error::other)?;
        self.dlq.insert(id.to_be_bytes(), value).map_err(std::io::Error::other)?;
        self.commit.durable().await.map_err(std::io::Error::other)
    }
}

/// Group commit: writers register, one flush at a time covers everything
/// registered before it started.
struct GroupCommit {
    registered: AtomicU64,
    flushed: watch::Sender<(u64, Option<String>)>,
    wake: Arc<Notify>,
}

impl GroupCommit {
    fn start(db: sled::Db) -> Arc<Self> {
        let (flushed, _) = watch::channel((0, None));
        let wake = Arc::new(Notify::new());
        let commit = Arc::new(Self { registered: AtomicU64::new(0), flushed, wake: wake.clone() });
        let weak = Arc::downgrade(&commit);
        // The task ends (and lets go of the database) once the store is
        // dropped: the store's Drop wakes it.
        tokio::spawn(async move {
            loop {
                let notified = wake.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let Some(commit) = weak.upgrade() else { return };
                    let target = commit.registered.load(Ordering::SeqCst);
                    if target != commit.flushed.borrow().0 {
                        let error = db.flush_async().await.err().map(|e| e.to_string());
                        commit.flushed.send_replace((target, error));
                        continue;
                    }
                }
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), notified).await;
            }
        });
        commit
    }

    /// Returns once a flush started after this call has finished.
    async fn durable(&self) -> Result<(), StoreError> {
        let mine = self.registered.fetch_add(1, Ordering::SeqCst) + 1;
        let mut rx = self.flushed.subscribe();
        self.wake.notify_one();
        let state = rx.wait_for(|(done, _)| *done >= mine).await.map_err(io)?;
        match &state.1 {
            Some(e) => Err(StoreError::Io(format!("flush failed: {e}"))),
            None => Ok(()),
        }
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        self.commit.wake.notify_one();
    }
}
