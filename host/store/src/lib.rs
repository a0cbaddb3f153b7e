//! ferry's stores: the `shared_outbox` records with their leases, and the
//! dead-letter queue. Two engines behind one [`Store`] trait:
//! - [`RedbStore`] (this module), embedded on [redb], in one file
//!   `<store.path>/ferry.redb` that one process opens;
//! - [`postgres::PgStore`], on a PostgreSQL database shared by every
//!   instance that names it.
//!
//! [`open`] opens the one a config names. The rest of this page is about
//! the embedded store.
//!
//! Modules:
//! - [`layout`]: the tables and how values are encoded;
//! - `writer`: the one thread that changes the file, in group commits;
//! - `index`: the in-memory view of pending records that `claim`,
//!   `depth` and `stats` read;
//! - [`health`]: the operations in flight, for the watchdog and
//!   `ferry_store_op_seconds`.
//!
//! Durability is explicit. Every change (persisting records, taking a
//! lease, completing or replaying a record, writing or removing a dead
//! letter) returns only after a redb commit with `Durability::Immediate`
//! that covers it, so anything that lets a source message be acknowledged
//! is on disk first. Commits are grouped: one commit covers every change
//! that arrived while the previous one ran.
//!
//! What survives what:
//! - a process crash (SIGKILL, OOM): every change whose call returned. A
//!   record being sent when the process died is sent again at the next
//!   start (a duplicate, never a loss): at most what was in flight;
//! - a power loss or kernel crash: the same, as far as the disk honours
//!   fsync; redb's commits are atomic, so the file opens at the last
//!   complete commit. A disk that acknowledges writes it has not stored
//!   (some consumer drives, some virtual disks) can lose the last commits.
//!
//! No store call blocks an async worker: changes are requests to the writer
//! thread, reads run on tokio's blocking pool. redb locks the file: one
//! process at a time.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::clock::Clock;
use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::metrics::HistogramFamily;
use ferry_core::outbox::{
    LeaseToken, LeaseView, NewRecord, OutboxRecord, OutboxStore, PartitionStats, Persisted, StoreError,
};
use ferry_core::records::{RecordChange, RecordStore};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

pub mod health;
mod index;
pub mod layout;
pub mod postgres;
mod writer;

pub use health::{Op, Stuck};
/// Outbox records of a partition the embedded store holds in memory at most.
pub const OUTBOX_WINDOW: usize = index::WINDOW;
pub use writer::Fault;

use health::Tracker;
use index::Index;
use layout::{
    DEAD_LETTERS, DEDUP, DEDUP_EXPIRY, DEPTHS, FORMAT, FORMAT_KEY, LEASES, META, NEXT_SEQ_KEY, RECORDS, RECORDS_KV,
    decode, encode, io,
};
use writer::{Action, Answer, Request, Writer};

/// A dead letter with the id the CLI names it by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDeadLetter {
    pub id: u64,
    #[serde(flatten)]
    pub entry: DeadLetter,
}

/// How to open the store.
#[derive(Default, Clone)]
pub struct StoreOptions {
    /// Where to record each operation's time (`ferry_store_op_seconds`).
    pub op_seconds: Option<HistogramFamily>,
    /// An injected fault, for tests (embedded store).
    pub fault: Option<Fault>,
    /// PostgreSQL: `LISTEN` for other instances' records and lease
    /// releases (a running daemon; not the CLI).
    pub listen: bool,
    /// Where the embedded store reads "now" (a record's creation, a key's
    /// window, a first failure): the wall clock in the daemon, tokio's
    /// paused clock in tests. PostgreSQL keeps its leases and windows on
    /// the database server's clock.
    pub clock: Clock,
}

/// Which store to open.
#[derive(Debug, Clone)]
pub enum Engine {
    /// The embedded store in this directory.
    Embedded { dir: std::path::PathBuf },
    /// A PostgreSQL database.
    Postgres { url: String, pool_size: usize },
}

/// Opens the store `engine` names.
pub async fn open(engine: &Engine, options: StoreOptions) -> Result<Arc<dyn Store>, OpenError> {
    match engine {
        Engine::Embedded { dir } => {
            let dir = dir.clone();
            let store = tokio::task::spawn_blocking(move || RedbStore::open(&dir, options))
                .await
                .map_err(|e| OpenError::Other { path: "store.path".into(), detail: e.to_string() })??;
            Ok(store)
        }
        Engine::Postgres { url, pool_size } => Ok(postgres::PgStore::open(url, *pool_size, options).await?),
    }
}

/// What the daemon and the `ferry dlq` / `ferry outbox` commands need of a
/// store beyond the route's ports.
#[async_trait]
pub trait Store: OutboxStore + DeadLetterStore + RecordStore {
    /// `embedded` or `postgres`.
    fn kind(&self) -> &'static str;
    /// The oldest store operation still running, if any (the watchdog).
    fn oldest_operation(&self) -> Option<Stuck>;
    /// Whether the store can no longer change anything until a restart.
    fn broken(&self) -> bool {
        false
    }
    /// Dead letters, oldest first, optionally of one route.
    async fn dead_letters(&self, route: Option<&str>, limit: usize) -> Result<Vec<StoredDeadLetter>, StoreError>;
    /// The database of a store every instance shares (the SQS endpoint
    /// keeps its queues in tables of its own there); `None` for the
    /// embedded store.
    fn shared_db(&self) -> Option<postgres::SharedDb> {
        None
    }
    /// One dead letter.
    async fn dead_letter(&self, id: u64) -> Result<Option<StoredDeadLetter>, StoreError>;
    /// Removes dead letters durably; returns how many existed.
    async fn remove_dead_letters(&self, ids: &[u64]) -> Result<usize, StoreError>;
    /// How many dead letters there are.
    async fn dead_letter_count(&self) -> Result<u64, StoreError>;
    /// Depth and age of every partition, as of now (a shared store's
    /// `stats` may be a second old).
    async fn fresh_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        Ok(self.stats())
    }
}

#[async_trait]
impl Store for RedbStore {
    fn kind(&self) -> &'static str {
        "embedded"
    }
    fn oldest_operation(&self) -> Option<Stuck> {
        RedbStore::oldest_operation(self)
    }
    fn broken(&self) -> bool {
        self.writer_stopped()
    }
    async fn dead_letters(&self, route: Option<&str>, limit: usize) -> Result<Vec<StoredDeadLetter>, StoreError> {
        RedbStore::dead_letters(self, route, limit).await
    }
    async fn dead_letter(&self, id: u64) -> Result<Option<StoredDeadLetter>, StoreError> {
        RedbStore::dead_letter(self, id).await
    }
    async fn remove_dead_letters(&self, ids: &[u64]) -> Result<usize, StoreError> {
        RedbStore::remove_dead_letters(self, ids).await
    }
    async fn dead_letter_count(&self) -> Result<u64, StoreError> {
        RedbStore::dead_letter_count(self).await
    }
}

#[async_trait]
impl Store for postgres::PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }
    fn oldest_operation(&self) -> Option<Stuck> {
        postgres::PgStore::oldest_operation(self)
    }
    fn shared_db(&self) -> Option<postgres::SharedDb> {
        Some(postgres::PgStore::shared_db(self))
    }
    async fn dead_letters(&self, route: Option<&str>, limit: usize) -> Result<Vec<StoredDeadLetter>, StoreError> {
        postgres::PgStore::dead_letters(self, route, limit).await
    }
    async fn dead_letter(&self, id: u64) -> Result<Option<StoredDeadLetter>, StoreError> {
        postgres::PgStore::dead_letter(self, id).await
    }
    async fn remove_dead_letters(&self, ids: &[u64]) -> Result<usize, StoreError> {
        postgres::PgStore::remove_dead_letters(self, ids).await
    }
    async fn dead_letter_count(&self) -> Result<u64, StoreError> {
        postgres::PgStore::dead_letter_count(self).await
    }
    async fn fresh_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        postgres::PgStore::fresh_stats(self).await
    }
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the store at {path} is in use by another process (a running ferry?)")]
    Locked { path: String },
    #[error(
        "{path} holds a store in the old sled layout, which this ferry cannot read. Drain it with the ferry \
         that wrote it (`ferry outbox stats` shows no records; replay or purge what `ferry dlq list` shows), \
         then move the directory {path}/sled away, or point store.path at a new directory"
    )]
    OldLayout { path: String },
    #[error("{path} is a store of format {found}; this ferry reads format {FORMAT}")]
    Format { path: String, found: u64 },
    #[error("cannot open the store at {path}: {detail}")]
    Other { path: String, detail: String },
    #[error("cannot open the PostgreSQL store at {target}: {detail}")]
    Postgres { target: String, detail: String },
}

struct Shared {
    db: Arc<Database>,
    index: Arc<Mutex<Index>>,
    tracker: Arc<Tracker>,
    fault: Option<Fault>,
    clock: Clock,
    /// Set when the writer thread ended while the store was still in use
    /// (a panic in it): every change fails from then on.
    writer_stopped: Arc<AtomicBool>,
}

/// The store. Cheap to share behind an `Arc`; the writer thread ends once
/// the last handle is gone.
pub struct RedbStore {
    shared: Arc<Shared>,
    requests: mpsc::Sender<Request>,
}

impl RedbStore {
    /// Opens (or creates) the store in the directory `dir`.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Arc<Self>, OpenError> {
        let path = dir.display().to_string();
        let other = |e: &dyn std::fmt::Display| OpenError::Other { path: path.clone(), detail: e.to_string() };
        if dir.join(layout::SLED_DIR).exists() {
            return Err(OpenError::OldLayout { path });
        }
        std::fs::create_dir_all(dir).map_err(|e| other(&e))?;
        let db =
            Database::builder().set_cache_size(64 << 20).create(dir.join(layout::FILE_NAME)).map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => OpenError::Locked { path: path.clone() },
                e => other(&e),
            })?;
        let next_seq = init(&db).map_err(|e| match e {
            InitError::Format(found) => OpenError::Format { path: path.clone(), found },
            InitError::Store(e) => other(&e),
        })?;
        let index = writer::load_index(&db).map_err(|e| other(&e))?;
        let db = Arc::new(db);
        let shared = Arc::new(Shared {
            db: db.clone(),
            index: Arc::new(Mutex::new(index)),
            tracker: Arc::new(Tracker::new(options.op_seconds.as_ref())),
            fault: options.fault,
            clock: options.clock,
            writer_stopped: Arc::new(AtomicBool::new(false)),
        });
        let (requests, rx) = mpsc::channel(writer::QUEUE);
        let stopped = shared.writer_stopped.clone();
        let writer = Writer {
            db,
            index: shared.index.clone(),
            tracker: shared.tracker.clone(),
            next_seq,
            fault: options.fault,
            swept_ms: None,
        };
        std::thread::Builder::new()
            .name("ferry-store".into())
            .spawn(move || {
                let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.run(rx))).is_err();
                if panicked {
                    stopped.store(true, Ordering::SeqCst);
                    tracing::error!("the store's writer thread panicked; no change can be stored until ferry restarts");
                }
            })
            .map_err(|e| other(&e))?;
        Ok(Arc::new(Self { shared, requests }))
    }

    /// The oldest store operation still running, if any.
    pub fn oldest_operation(&self) -> Option<Stuck> {
        self.shared.tracker.oldest()
    }

    /// Outbox records held in memory (at most the window per partition).
    pub fn records_in_memory(&self) -> usize {
        self.index().held()
    }

    /// Whether the writer thread died (a panic): the store cannot change
    /// anything any more and only a restart helps.
    pub fn writer_stopped(&self) -> bool {
        self.shared.writer_stopped.load(Ordering::SeqCst)
    }

    /// Sends a change to the writer and waits for the commit that covers it.
    async fn change(&self, action: Action) -> Result<Answer, StoreError> {
        let _running = self.shared.tracker.start(action.op());
        let (reply, answer) = oneshot::channel();
        let now_ms = self.shared.clock.now().as_millis();
        self.requests
            .send(Request { action, now_ms, reply })
            .await
            .map_err(|_| io("the store's writer has stopped"))?;
        answer.await.map_err(|_| io("the store's writer has stopped"))?
    }

    /// Runs a read on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        op: Op,
        f: impl FnOnce(&Shared) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let _running = self.shared.tracker.start(op);
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            if shared.fault == Some(Fault::Hang(op)) {
                writer::hang();
            }
            f(&shared)
        })
        .await
        .map_err(io)?
    }

    /// Dead letters, oldest first, optionally of one route.
    pub async fn dead_letters(&self, route: Option<&str>, limit: usize) -> Result<Vec<StoredDeadLetter>, StoreError> {
        let route = route.map(str::to_owned);
        self.read(Op::DeadLetterRead, move |s| {
            let txn = s.db.begin_read().map_err(io)?;
            let table = txn.open_table(DEAD_LETTERS).map_err(io)?;
            let mut out = Vec::new();
            for item in table.iter().map_err(io)? {
                if out.len() >= limit {
                    break;
                }
                let (key, value) = item.map_err(io)?;
                let entry: DeadLetter = decode(value.value())?;
                if route.as_ref().is_some_and(|r| *r != entry.route) {
                    continue;
                }
                out.push(StoredDeadLetter { id: key.value(), entry });
            }
            Ok(out)
        })
        .await
    }

    /// One dead letter.
    pub async fn dead_letter(&self, id: u64) -> Result<Option<StoredDeadLetter>, StoreError> {
        self.read(Op::DeadLetterRead, move |s| {
            let txn = s.db.begin_read().map_err(io)?;
            let table = txn.open_table(DEAD_LETTERS).map_err(io)?;
            match table.get(id).map_err(io)? {
                Some(v) => Ok(Some(StoredDeadLetter { id, entry: decode(v.value())? })),
                None => Ok(None),
            }
        })
        .await
    }

    /// Removes dead letters durably; returns how many existed.
    pub async fn remove_dead_letters(&self, ids: &[u64]) -> Result<usize, StoreError> {
        match self.change(Action::RemoveDeadLetters { ids: ids.to_vec() }).await? {
            Answer::Removed(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }

    /// How many dead letters there are.
    pub async fn dead_letter_count(&self) -> Result<u64, StoreError> {
        self.read(Op::DeadLetterRead, |s| {
            let txn = s.db.begin_read().map_err(io)?;
            txn.open_table(DEAD_LETTERS).map_err(io)?.len().map_err(io)
        })
        .await
    }

    /// A completion or reschedule that did not reach the disk leaves the
    /// record pending: it becomes claimable again, so it is sent again
    /// (a duplicate, never a loss) rather than stuck until a restart.
    fn unclaim_on_failure<T>(&self, record: &OutboxRecord, result: &Result<T, StoreError>) {
        if matches!(result, Err(StoreError::Io(_) | StoreError::Unavailable(_))) {
            self.index().unclaim(&record.partition, &[record.seq]);
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.shared.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl RecordStore for RedbStore {
    async fn commit(&self, change: RecordChange) -> Result<(), StoreError> {
        if change.is_empty() {
            return Ok(());
        }
        match self.change(Action::Records(change)).await? {
            Answer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn load(&self, space: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let space = space.to_owned();
        self.read(Op::RecordRead, move |s| {
            let txn = s.db.begin_read().map_err(io)?;
            let table = txn.open_table(RECORDS_KV).map_err(io)?;
            let mut out = Vec::new();
            for item in table.range((space.as_str(), "")..).map_err(io)? {
                let (key, value) = item.map_err(io)?;
                let (item_space, item_key) = key.value();
                if item_space != space {
                    break;
                }
                out.push((item_key.to_owned(), value.value().to_vec()));
            }
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl RecordStore for postgres::PgStore {
    async fn commit(&self, change: RecordChange) -> Result<(), StoreError> {
        self.commit_records(change).await
    }
    async fn load(&self, space: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.load_records(space).await
    }
}

fn unexpected(answer: Answer) -> StoreError {
    io(format!("the store's writer answered {answer:?} to another request"))
}

enum InitError {
    Format(u64),
    Store(StoreError),
}

/// Creates the tables of a new file and checks the format of an old one;
/// returns the next sequence number.
fn init_failed(e: impl std::fmt::Display) -> InitError {
    InitError::Store(io(e))
}

fn init(db: &Database) -> Result<u64, InitError> {
    let txn = db.begin_write().map_err(init_failed)?;
    let next_seq;
    {
        let mut meta = txn.open_table(META).map_err(init_failed)?;
        let format = meta.get(FORMAT_KEY).map_err(init_failed)?.map(|v| v.value());
        match format {
            Some(1) => {
                upgrade_from_v1(&txn)?;
                count_depths(&txn)?;
                meta.insert(FORMAT_KEY, FORMAT).map_err(init_failed)?;
            }
            Some(2) => {
                count_depths(&txn)?;
                meta.insert(FORMAT_KEY, FORMAT).map_err(init_failed)?;
            }
            Some(f) if f != FORMAT => return Err(InitError::Format(f)),
            Some(_) => {}
            None => {
                meta.insert(FORMAT_KEY, FORMAT).map_err(init_failed)?;
            }
        }
        next_seq = meta.get(NEXT_SEQ_KEY).map_err(init_failed)?.map_or(1, |v| v.value());
        txn.open_table(RECORDS).map_err(init_failed)?;
        txn.open_table(DEDUP).map_err(init_failed)?;
        txn.open_table(DEDUP_EXPIRY).map_err(init_failed)?;
        txn.open_table(LEASES).map_err(init_failed)?;
        txn.open_table(DEAD_LETTERS).map_err(init_failed)?;
        txn.open_table(DEPTHS).map_err(init_failed)?;
        txn.open_table(RECORDS_KV).map_err(init_failed)?;
    }
    txn.commit().map_err(init_failed)?;
    Ok(next_seq)
}

/// Format 2 kept no depth counters: they are counted once, here; every
/// later open reads them instead of the records.
fn count_depths(txn: &redb::WriteTransaction) -> Result<(), InitError> {
    let records = txn.open_table(RECORDS).map_err(init_failed)?;
    let mut depths: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for item in records.iter().map_err(init_failed)? {
        let (key, _) = item.map_err(init_failed)?;
        *depths.entry(key.value().0.to_owned()).or_default() += 1;
    }
    let mut table = txn.open_table(DEPTHS).map_err(init_failed)?;
    for (partition, depth) in depths {
        table.insert(partition.as_str(), depth).map_err(init_failed)?;
    }
    Ok(())
}

/// Format 1 kept duplicate keys without the address: they are rebuilt from
/// the pending records (completed keys were not kept then).
fn upgrade_from_v1(txn: &redb::WriteTransaction) -> Result<(), InitError> {
    let old: redb::TableDefinition<(&str, &str, &str), u64> = redb::TableDefinition::new(layout::DEDUP_V1);
    txn.delete_table(old).map_err(init_failed)?;
    let records = txn.open_table(RECORDS).map_err(init_failed)?;
    let mut keys = txn.open_table(DEDUP).map_err(init_failed)?;
    for item in records.iter().map_err(init_failed)? {
        let (_, value) = item.map_err(init_failed)?;
        let r: OutboxRecord = decode(value.value()).map_err(InitError::Store)?;
        let key = (r.partition.as_str(), r.envelope.id.as_str(), r.binding.as_str(), r.address.as_str());
        keys.insert(key, layout::PENDING).map_err(init_failed)?;
    }
    Ok(())
}

#[async_trait]
impl OutboxStore for RedbStore {
    async fn persist(&self, records: Vec<NewRecord>) -> Result<Persisted, StoreError> {
        let action = Action::Persist { records };
        match self.change(action).await? {
            Answer::Persisted(p) => Ok(p),
            other => Err(unexpected(other)),
        }
    }

    /// One process opens the file, so a lease is always granted: the new
    /// version fences out any earlier holder (a route being replaced by a
    /// reload), and there is no time to live to keep.
    async fn acquire_lease(
        &self,
        partition: &str,
        owner: &str,
        _ttl: Duration,
    ) -> Result<Option<LeaseToken>, StoreError> {
        let action = Action::AcquireLease { partition: partition.to_owned(), owner: owner.to_owned() };
        match self.change(action).await? {
            Answer::Lease(token) => Ok(Some(token)),
            other => Err(unexpected(other)),
        }
    }

    async fn renew_lease(&self, partition: &str, token: &LeaseToken, _ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.index().lease(partition) == token.version)
    }

    async fn release_lease(&self, _partition: &str, _token: &LeaseToken) -> Result<(), StoreError> {
        Ok(())
    }

    /// This process is the only owner there can be.
    async fn lease_view(&self, _owner: &str, _ttl: Duration, _partitions: &[String]) -> Result<LeaseView, StoreError> {
        Ok(LeaseView { live_owners: 1, holders: Default::default() })
    }

    async fn claim(
        &self,
        partition: &str,
        token: &LeaseToken,
        limit: usize,
        now_ms: i64,
    ) -> Result<Vec<OutboxRecord>, StoreError> {
        let version = token.version;
        // A partition's oldest records wait in memory; a backlog beyond
        // them is read from the file, in order, as they drain.
        let refill = self.index().wants_refill(partition);
        if let Some((after, room)) = refill {
            let owned = partition.to_owned();
            let (loaded, to_end) =
                self.read(Op::Claim, move |s| writer::read_window(&s.db, &owned, after, room)).await?;
            self.index().fill(partition, after, loaded, to_end);
        }
        let seqs =
            self.index().claim(partition, version, limit, now_ms).map_err(|stale| StoreError::StaleFencingToken {
                partition: partition.to_owned(),
                presented: version,
                current: stale.current,
            })?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let owned = partition.to_owned();
        let wanted = seqs.clone();
        let read = self
            .read(Op::Claim, move |s| {
                let txn = s.db.begin_read().map_err(io)?;
                let table = txn.open_table(RECORDS).map_err(io)?;
                let mut out = Vec::with_capacity(wanted.len());
                for seq in wanted {
                    if let Some(v) = table.get((owned.as_str(), seq)).map_err(io)? {
                        let mut record: OutboxRecord = decode(v.value())?;
                        record.claimed_by = version;
                        out.push(record);
                    }
                }
                Ok(out)
            })
            .await;
        if read.is_err() {
            self.index().unclaim(partition, &seqs);
        }
        read
    }

    async fn complete(&self, record: &OutboxRecord, token: &LeaseToken, keep_key: Duration) -> Result<(), StoreError> {
        let action = Action::Complete {
            partition: record.partition.clone(),
            seq: record.seq,
            envelope_id: record.envelope.id.clone(),
            binding: record.binding.clone(),
            address: record.address.clone(),
            version: token.version,
            keep_key,
        };
        let done = self.change(action).await.map(|_| ());
        self.unclaim_on_failure(record, &done);
        done
    }

    async fn replay(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<u32, StoreError> {
        reschedule(self, record, token, next_attempt_ms, true).await
    }

    async fn release(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<(), StoreError> {
        reschedule(self, record, token, next_attempt_ms, false).await.map(|_| ())
    }

    fn depth(&self, partition: &str) -> u64 {
        self.index().depth(partition)
    }

    fn oldest(&self, partition: &str) -> Option<i64> {
        self.index().oldest(partition)
    }

    fn stats(&self) -> Vec<PartitionStats> {
        self.index().stats()
    }
}

async fn reschedule(
    store: &RedbStore,
    record: &OutboxRecord,
    token: &LeaseToken,
    next_attempt_ms: i64,
    failed: bool,
) -> Result<u32, StoreError> {
    let action = Action::Reschedule {
        partition: record.partition.clone(),
        seq: record.seq,
        version: token.version,
        next_attempt_ms,
        failed,
        replay_count: record.replay_count,
    };
    let done = match store.change(action).await {
        Ok(Answer::ReplayCount(n)) => Ok(n),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    store.unclaim_on_failure(record, &done);
    done
}

#[async_trait]
impl DeadLetterStore for RedbStore {
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()> {
        let value = encode(&entry).map_err(std::io::Error::other)?;
        self.change(Action::PutDeadLetter { value }).await.map(|_| ()).map_err(std::io::Error::other)
    }
}
