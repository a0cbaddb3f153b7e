//! ferry's shared store on PostgreSQL: the `shared_outbox` records, their
//! leases and the dead letters of every instance that names one database
//! (`[store] type = "postgres"`).
//!
//! What it keeps, and how (tables in [`migrations`]):
//! - **Persist** is a group commit: the records of every `persist` call
//!   waiting at the time go in one multi-row `INSERT … SELECT FROM unnest(…)`
//!   (one round trip, one commit). The unique index on (partition, envelope
//!   id, binding, address) suppresses duplicates with `ON CONFLICT`; a key
//!   whose dedup window has run out is taken as a new record. The same
//!   statement `NOTIFY`s each partition that got records, which wakes its
//!   drainer in whichever instance holds it.
//! - **Leases** have a time to live judged by the database's clock
//!   (`expires_at = now() + ttl`); the version is the fencing token. Claims
//!   take the lease row `FOR SHARE` and need it current and unexpired;
//!   completions and replays need its version current; all in the same
//!   statement as the change, so a holder that lost its lease can change
//!   nothing, however late its statements arrive.
//! - **Instances** mark themselves alive in `ferry_instances` each time a
//!   route looks at the leases, so each can hold its share.
//! - **Depth and age** (`depth`, `oldest`, `stats`, read on the hot path)
//!   come from a view refreshed every second and adjusted in between by
//!   this instance's own persists and completions.
//!
//! Every call runs on tokio's workers as network I/O; none blocks one. A
//! call that does not come back shows in [`PgStore::oldest_operation`], so
//! the watchdog reports the daemon stalled.

pub mod migrations;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::outbox::{
    LeaseToken, LeaseView, NewRecord, OutboxRecord, OutboxStore, PartitionStats, Persisted, StoreError,
};
use ferry_core::records::RecordChange;
use ferry_envelope::Timestamp;
use tokio::sync::{Notify, broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;
use tracing::{debug, info, warn};

use crate::health::{Op, Stuck, Tracker};
use crate::layout::{decode, encode, io};
use crate::{OpenError, StoreOptions, StoredDeadLetter};

/// Rows one group commit inserts at most.
const MAX_GROUP_ROWS: usize = 4096;
/// Persist calls that may wait for the committer.
const QUEUE: usize = 8192;
/// Group commits in flight at once.
const COMMITTERS: usize = 4;
/// How often the depth view is read again, and expired keys swept.
const REFRESH: Duration = Duration::from_secs(1);
const SWEEP_EVERY: Duration = Duration::from_secs(10);
const SWEEP_MAX: i64 = 10_000;
/// Instances not seen for this long are removed from `ferry_instances`.
const FORGET_INSTANCES_AFTER_SECS: f64 = 3600.0;
/// The channels records and lease releases are announced on.
const RECORDS_CHANNEL: &str = "ferry_outbox";
const LEASES_CHANNEL: &str = "ferry_lease";
/// The channel the SQS endpoint announces queue changes on (the queue's
/// name; see [`SharedDb`]).
pub const SQS_CHANNEL: &str = "ferry_sqs";

/// What the SQS endpoint needs to keep its queues in this database so that
/// every instance serves them: the pool, and the names announced on
/// [`SQS_CHANNEL`] by any instance (an empty name after the `LISTEN`
/// connection was lost and regained: anything may have changed).
#[derive(Clone)]
pub struct SharedDb {
    pub pool: Pool,
    pub sqs_changes: broadcast::Sender<String>,
}

/// Depth and oldest record of a partition, as last seen.
#[derive(Debug, Clone, Copy, Default)]
struct Depth {
    depth: u64,
    oldest_ms: Option<i64>,
}

struct Inner {
    pool: Pool,
    tracker: Tracker,
    depths: Mutex<BTreeMap<String, Depth>>,
    arrivals: Mutex<HashMap<String, Arc<Notify>>>,
    lease_changes: Arc<Notify>,
    sqs_changes: broadcast::Sender<String>,
}

/// The PostgreSQL store. Background tasks (the committer, the listener, the
/// depth view) end when it is dropped.
pub struct PgStore {
    inner: Arc<Inner>,
    commits: mpsc::Sender<Grouped<(Vec<NewRecord>, i64), Persisted>>,
    completions: mpsc::Sender<Grouped<Completion, Option<u64>>>,
    /// Where it is, without the password, for messages.
    target: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A call waiting for the statement its group runs as one: what it asks,
/// how many rows that is, and where its answer goes.
struct Grouped<Q, A> {
    ask: Q,
    rows: usize,
    reply: oneshot::Sender<Result<A, StoreError>>,
}

/// A record sent (or dead-lettered) under a lease version, its key kept for
/// `keep_ms` (0: forgotten now).
struct Completion {
    seq: i64,
    partition: String,
    version: i64,
    keep_ms: f64,
}

/// Hands `ask` to a group runner and waits for its answer.
async fn grouped<Q, A>(runner: &mpsc::Sender<Grouped<Q, A>>, ask: Q, rows: usize) -> Result<A, StoreError> {
    let (reply, answer) = oneshot::channel();
    runner.send(Grouped { ask, rows, reply }).await.map_err(|_| io("the store's committer has stopped"))?;
    answer.await.map_err(|_| io("the store's committer has stopped"))?
}

/// `host:port/database` of a connection config, for messages.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(config.get_user().unwrap_or("")))
}

/// A database error: refused by the server (`Io`, counted against the
/// message like a failing disk), or the server out of reach (`Unavailable`:
/// the route waits for it).
fn db(e: tokio_postgres::Error) -> StoreError {
    if let Some(refused) = e.as_db_error() {
        StoreError::Io(format!("postgres: {} ({})", refused.message(), refused.code().code()))
    } else {
        StoreError::Unavailable(format!("postgres: {e}"))
    }
}

/// No connection from the pool: the database is out of reach.
fn no_connection(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("postgres: {e}"))
}

impl PgStore {
    /// Connects to the database at `url`, brings its schema up to date and
    /// starts the background tasks. `pool_size` connections at most; with
    /// `options.listen`, one more for `LISTEN`.
    pub async fn open(url: &str, pool_size: usize, options: StoreOptions) -> Result<Arc<Self>, OpenError> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| OpenError::Other { path: "store.url".into(), detail: e.to_string() })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("ferry");
        }
        let target = describe(&config);
        let failed = |detail: String| OpenError::Postgres { target: target.clone(), detail };
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = Manager::from_config(config.clone(), NoTls, manager_config);
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| failed(e.to_string()))?;
        {
            let mut client = pool.get().await.map_err(|e| failed(e.to_string()))?;
            let applied = migrations::migrate(&mut client).await.map_err(|e| failed(e.to_string()))?;
            if !applied.is_empty() {
                info!(store = %target, versions = ?applied, "store schema migrated");
            }
        }
        let inner = Arc::new(Inner {
            pool,
            tracker: Tracker::new(options.op_seconds.as_ref()),
            depths: Mutex::default(),
            arrivals: Mutex::default(),
            lease_changes: Arc::new(Notify::new()),
            sqs_changes: broadcast::channel(1024).0,
        });
        inner.refresh_depths().await.map_err(|e| failed(e.to_string()))?;
        let (commits, persists) = mpsc::channel(QUEUE);
        let (completions, completes) = mpsc::channel(QUEUE);
        let (for_inserts, for_completes) = (inner.clone(), inner.clone());
        let mut tasks = vec![
            tokio::spawn(run_groups(persists, move |asks| {
                let inner = for_inserts.clone();
                async move { inner.insert_group(&asks).await }
            })),
            tokio::spawn(run_groups(completes, move |asks| {
                let inner = for_completes.clone();
                async move { inner.complete_group(asks).await }
            })),
            tokio::spawn(keep_view(inner.clone())),
        ];
        if options.listen {
            tasks.push(tokio::spawn(listen(inner.clone(), config, target.clone())));
        }
        Ok(Arc::new(Self { inner, commits, completions, target, tasks }))
    }

    /// `host:port/database`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The pool and the SQS endpoint's change announcements.
    pub fn shared_db(&self) -> SharedDb {
        SharedDb { pool: self.inner.pool.clone(), sqs_changes: self.inner.sqs_changes.clone() }
    }

    /// The oldest store operation still running, if any.
    pub fn oldest_operation(&self) -> Option<Stuck> {
        self.inner.tracker.oldest()
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.pool.get().await.map_err(no_connection)
    }

    /// Dead letters, oldest first, optionally of one route.
    pub async fn dead_letters(&self, route: Option<&str>, limit: usize) -> Result<Vec<StoredDeadLetter>, StoreError> {
        let _running = self.inner.tracker.start(Op::DeadLetterRead);
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT id, entry FROM ferry_dead_letters WHERE ($1::text IS NULL OR route = $1) ORDER BY id LIMIT $2",
                &[&route, &limit],
            )
            .await
            .map_err(db)?;
        rows.iter()
            .map(|row| Ok(StoredDeadLetter { id: row.get::<_, i64>(0) as u64, entry: decode(row.get(1))? }))
            .collect()
    }

    /// One dead letter.
    pub async fn dead_letter(&self, id: u64) -> Result<Option<StoredDeadLetter>, StoreError> {
        let _running = self.inner.tracker.start(Op::DeadLetterRead);
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT entry FROM ferry_dead_letters WHERE id = $1", &[&(id as i64)])
            .await
            .map_err(db)?;
        row.map(|row| Ok(StoredDeadLetter { id, entry: decode(row.get(0))? })).transpose()
    }

    /// Removes dead letters; returns how many existed.
    pub async fn remove_dead_letters(&self, ids: &[u64]) -> Result<usize, StoreError> {
        let _running = self.inner.tracker.start(Op::DeadLetterRemove);
        let ids: Vec<i64> = ids.iter().map(|id| *id as i64).collect();
        let client = self.client().await?;
        let n = client.execute("DELETE FROM ferry_dead_letters WHERE id = ANY($1)", &[&ids]).await.map_err(db)?;
        Ok(n as usize)
    }

    /// Applies a change to the keyed records in one transaction.
    pub async fn commit_records(&self, change: RecordChange) -> Result<(), StoreError> {
        if change.is_empty() {
            return Ok(());
        }
        let _running = self.inner.tracker.start(Op::RecordWrite);
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(db)?;
        for (space, key) in &change.deletes {
            txn.execute("DELETE FROM ferry_records WHERE space = $1 AND key = $2", &[space, key]).await.map_err(db)?;
        }
        for (space, key, value) in &change.puts {
            txn.execute(
                "INSERT INTO ferry_records (space, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (space, key) DO UPDATE SET value = EXCLUDED.value",
                &[space, key, value],
            )
            .await
            .map_err(db)?;
        }
        txn.commit().await.map_err(db)
    }

    /// Every record of a space, in key order.
    pub async fn load_records(&self, space: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let _running = self.inner.tracker.start(Op::RecordRead);
        let client = self.client().await?;
        let rows = client
            .query("SELECT key, value FROM ferry_records WHERE space = $1 ORDER BY key COLLATE \"C\"", &[&space])
            .await
            .map_err(db)?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// How many dead letters there are.
    pub async fn dead_letter_count(&self) -> Result<u64, StoreError> {
        let _running = self.inner.tracker.start(Op::DeadLetterRead);
        let client = self.client().await?;
        let row = client.query_one("SELECT count(*) FROM ferry_dead_letters", &[]).await.map_err(db)?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// Depth and age of every partition, read now.
    pub async fn fresh_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        self.inner.refresh_depths().await?;
        Ok(self.stats())
    }

    /// Whether the lease `token` of `partition` is still current; the
    /// current version when it is not.
    async fn lease_is(&self, partition: &str, token: &LeaseToken) -> Result<Result<(), u64>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT version FROM ferry_leases WHERE partition = $1", &[&partition])
            .await
            .map_err(db)?;
        let current = row.map_or(0, |r| r.get::<_, i64>(0) as u64);
        Ok(if current == token.version { Ok(()) } else { Err(current) })
    }

    async fn reschedule(
        &self,
        record: &OutboxRecord,
        token: &LeaseToken,
        next_attempt_ms: i64,
        failed: bool,
    ) -> Result<u32, StoreError> {
        let _running = self.inner.tracker.start(if failed { Op::Replay } else { Op::Release });
        let client = self.client().await?;
        let row = client
            .query_opt(
                "UPDATE ferry_outbox
                    SET replay_count = replay_count + $4,
                        first_failure_ms = CASE WHEN $4 > 0 THEN COALESCE(first_failure_ms, $5) ELSE first_failure_ms END,
                        next_attempt_ms = $3,
                        claimed_by = 0
                  WHERE seq = $1 AND kept_until IS NULL
                    AND EXISTS (SELECT 1 FROM ferry_leases WHERE partition = $2 AND version = $6 FOR SHARE)
                  RETURNING replay_count",
                &[
                    &(record.seq as i64),
                    &record.partition,
                    &next_attempt_ms,
                    &i32::from(failed),
                    &Timestamp::now().as_millis(),
                    &(token.version as i64),
                ],
            )
            .await
            .map_err(db)?;
        match row {
            Some(row) => Ok(row.get::<_, i32>(0) as u32),
            None => match self.lease_is(&record.partition, token).await? {
                // Completed meanwhile: nothing to put back.
                Ok(()) => Ok(record.replay_count),
                Err(current) => Err(stale(&record.partition, token, current)),
            },
        }
    }
}

fn stale(partition: &str, token: &LeaseToken, current: u64) -> StoreError {
    StoreError::StaleFencingToken { partition: partition.to_owned(), presented: token.version, current }
}

impl Inner {
    async fn refresh_depths(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(no_connection)?;
        let rows = client
            .query(
                "SELECT partition, count(*), min(created_ms) FROM ferry_outbox WHERE kept_until IS NULL GROUP BY partition",
                &[],
            )
            .await
            .map_err(db)?;
        let fresh: BTreeMap<String, Depth> =
            rows.iter().map(|r| (r.get(0), Depth { depth: r.get::<_, i64>(1) as u64, oldest_ms: r.get(2) })).collect();
        *self.depths.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        Ok(())
    }

    fn wake(&self, partition: &str) {
        let arrivals = self.arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = arrivals.get(partition) {
            n.notify_one();
        }
    }

    /// Inserts one group's records; answers (stored, duplicates) per request.
    async fn insert_group(&self, group: &[(Vec<NewRecord>, i64)]) -> Result<Vec<Persisted>, StoreError> {
        let _running = self.tracker.start(Op::Persist);
        let mut seen: HashSet<(&str, &str, &str, &str)> = HashSet::new();
        let (mut partitions, mut routes, mut bindings, mut addresses, mut ids, mut envelopes, mut created) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        for (records, created_ms) in group {
            for r in records {
                let key = (r.partition.as_str(), r.envelope.id.as_str(), r.binding.as_str(), r.address.as_str());
                if !seen.insert(key) {
                    continue;
                }
                partitions.push(r.partition.as_str());
                routes.push(r.route.as_str());
                bindings.push(r.binding.as_str());
                addresses.push(r.address.as_str());
                ids.push(r.envelope.id.as_str());
                envelopes.push(encode(&r.envelope)?);
                created.push(*created_ms);
            }
        }
        let client = self.pool.get().await.map_err(no_connection)?;
        let statement = client
            .prepare_cached(
                "WITH stored AS (
                     INSERT INTO ferry_outbox AS o
                         (partition, route, binding, address, envelope_id, envelope, created_ms, next_attempt_ms)
                     SELECT p, r, b, a, i, e, c, c
                       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::bigint[])
                            AS t(p, r, b, a, i, e, c)
                     ON CONFLICT (partition, envelope_id, binding, address) DO UPDATE
                        SET seq = nextval('ferry_outbox_seq'), route = EXCLUDED.route, envelope = EXCLUDED.envelope,
                            replay_count = 0, created_ms = EXCLUDED.created_ms,
                            next_attempt_ms = EXCLUDED.next_attempt_ms, first_failure_ms = NULL,
                            claimed_by = 0, kept_until = NULL
                      WHERE o.kept_until IS NOT NULL AND o.kept_until <= now()
                     RETURNING o.partition, o.envelope_id, o.binding, o.address
                 )
                 SELECT partition, envelope_id, binding, address, pg_notify('ferry_outbox', partition) FROM stored",
            )
            .await
            .map_err(db)?;
        let rows = client
            .query(&statement, &[&partitions, &routes, &bindings, &addresses, &ids, &envelopes, &created])
            .await
            .map_err(db)?;
        let mut stored: HashSet<(String, String, String, String)> =
            rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
        {
            let mut depths = self.depths.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (p, _, _, _) in &stored {
                depths.entry(p.clone()).or_default().depth += 1;
            }
        }
        let mut answers = Vec::with_capacity(group.len());
        for (records, _) in group {
            let mut done = Persisted::default();
            for r in records {
                let key = (r.partition.clone(), r.envelope.id.clone(), r.binding.clone(), r.address.clone());
                if stored.remove(&key) {
                    done.stored += 1;
                } else {
                    done.duplicates += 1;
                }
            }
            answers.push(done);
        }
        Ok(answers)
    }
}

impl Inner {
    /// Completes a group of records in one statement: each only if its
    /// lease version is current (the lease row taken `FOR SHARE`). Answers
    /// per completion: `None` done (or done before), `Some(current)` when
    /// the lease has moved on.
    async fn complete_group(&self, group: Vec<Completion>) -> Result<Vec<Option<u64>>, StoreError> {
        let _running = self.tracker.start(Op::Complete);
        let seqs: Vec<i64> = group.iter().map(|c| c.seq).collect();
        let partitions: Vec<&str> = group.iter().map(|c| c.partition.as_str()).collect();
        let versions: Vec<i64> = group.iter().map(|c| c.version).collect();
        let keeps: Vec<f64> = group.iter().map(|c| c.keep_ms).collect();
        let client = self.pool.get().await.map_err(no_connection)?;
        let statement = client
            .prepare_cached(
                "WITH done AS (
                     SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::float8[])
                            AS t(seq, partition, version, keep_ms)
                 ), fenced AS (
                     SELECT d.seq, d.partition, d.keep_ms FROM done d
                       JOIN ferry_leases l ON l.partition = d.partition AND l.version = d.version
                        FOR SHARE OF l
                 ), forgotten AS (
                     DELETE FROM ferry_outbox o USING fenced f
                      WHERE o.seq = f.seq AND f.keep_ms = 0 AND o.kept_until IS NULL
                     RETURNING o.seq, o.partition
                 ), kept AS (
                     UPDATE ferry_outbox o
                        SET kept_until = now() + f.keep_ms * interval '1 millisecond', envelope = NULL
                       FROM fenced f
                      WHERE o.seq = f.seq AND f.keep_ms > 0 AND o.kept_until IS NULL
                     RETURNING o.seq, o.partition
                 ), changed AS (
                     SELECT seq FROM forgotten UNION ALL SELECT seq FROM kept
                 )
                 SELECT f.seq, c.seq IS NOT NULL FROM fenced f LEFT JOIN changed c ON c.seq = f.seq",
            )
            .await
            .map_err(db)?;
        let rows = client.query(&statement, &[&seqs, &partitions, &versions, &keeps]).await.map_err(db)?;
        let mut fenced: HashMap<i64, bool> = HashMap::with_capacity(rows.len());
        for row in &rows {
            fenced.insert(row.get(0), row.get(1));
        }
        {
            let mut depths = self.depths.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for c in group.iter().filter(|c| fenced.get(&c.seq) == Some(&true)) {
                let d = depths.entry(c.partition.clone()).or_default();
                d.depth = d.depth.saturating_sub(1);
            }
        }
        // Those the lease check turned away: stale, unless the lease is
        // still theirs (then the record was already completed).
        let refused: Vec<&str> =
            group.iter().filter(|c| !fenced.contains_key(&c.seq)).map(|c| c.partition.as_str()).collect();
        let mut current: HashMap<String, i64> = HashMap::new();
        if !refused.is_empty() {
            let rows = client
                .query("SELECT partition, version FROM ferry_leases WHERE partition = ANY($1)", &[&refused])
                .await
                .map_err(db)?;
            current = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        }
        Ok(group
            .iter()
            .map(|c| {
                if fenced.contains_key(&c.seq) {
                    return None;
                }
                let now = current.get(&c.partition).copied().unwrap_or(0);
                (now != c.version).then_some(now as u64)
            })
            .collect())
    }
}

/// Runs grouped calls: takes every call waiting (up to [`MAX_GROUP_ROWS`]
/// rows), has `run` answer them in one statement, and answers each caller.
/// Up to [`COMMITTERS`] groups are in flight.
async fn run_groups<Q, A, F, Fut>(mut rx: mpsc::Receiver<Grouped<Q, A>>, run: F)
where
    Q: Send + 'static,
    A: Send + 'static,
    F: Fn(Vec<Q>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StoreError>> + Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(COMMITTERS));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let mut rows = first.rows;
        let mut group = vec![first];
        while rows < MAX_GROUP_ROWS {
            match rx.try_recv() {
                Ok(next) => {
                    rows += next.rows;
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let (asks, replies): (Vec<Q>, Vec<_>) = group.into_iter().map(|g| (g.ask, g.reply)).unzip();
        let work = run(asks);
        tokio::spawn(async move {
            match work.await {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Refreshes the depth view every second and sweeps expired duplicate
/// keys and long-gone instances now and then.
async fn keep_view(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sweep = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        if let Err(e) = inner.refresh_depths().await {
            debug!(error = %e, "cannot refresh the outbox depths");
        }
        if last_sweep.elapsed() < SWEEP_EVERY {
            continue;
        }
        last_sweep = tokio::time::Instant::now();
        let swept = async {
            let client = inner.pool.get().await.map_err(no_connection)?;
            let keys = client
                .execute(
                    "DELETE FROM ferry_outbox WHERE seq IN
                         (SELECT seq FROM ferry_outbox WHERE kept_until <= now() LIMIT $1)",
                    &[&SWEEP_MAX],
                )
                .await
                .map_err(db)?;
            client
                .execute(
                    "DELETE FROM ferry_instances WHERE expires_at < now() - $1 * interval '1 second'",
                    &[&FORGET_INSTANCES_AFTER_SECS],
                )
                .await
                .map_err(db)?;
            Ok::<_, StoreError>(keys)
        };
        match swept.await {
            Ok(0) => {}
            Ok(n) => debug!(keys = n, "expired duplicate keys removed"),
            Err(e) => debug!(error = %e, "cannot sweep expired duplicate keys"),
        }
    }
}

/// Listens for other instances' records and lease releases, reconnecting
/// when the connection drops; after a reconnection every drainer is woken
/// (a notification may have been missed meanwhile).
async fn listen(inner: Arc<Inner>, config: tokio_postgres::Config, target: String) {
    let mut wait = Duration::from_millis(200);
    loop {
        match config.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut notes) = mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    loop {
                        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
                        match message {
                            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                if tx.send((n.channel().to_owned(), n.payload().to_owned())).is_err() {
                                    return None;
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return Some(e),
                            None => return None,
                        }
                    }
                });
                let listening = client
                    .batch_execute(&format!("LISTEN {RECORDS_CHANNEL}; LISTEN {LEASES_CHANNEL}; LISTEN {SQS_CHANNEL}"))
                    .await;
                if let Err(e) = listening {
                    warn!(store = %target, error = %e, "cannot LISTEN for other instances' records; drainers poll");
                    driver.abort();
                } else {
                    wait = Duration::from_millis(200);
                    // Anything announced before LISTEN took effect.
                    inner.wake_all();
                    while let Some((channel, payload)) = notes.recv().await {
                        if channel == RECORDS_CHANNEL {
                            inner.wake(&payload);
                        } else if channel == SQS_CHANNEL {
                            // No receiver (no endpoint) is no error.
                            let _ = inner.sqs_changes.send(payload);
                        } else {
                            inner.lease_changes.notify_waiters();
                        }
                    }
                    if let Ok(Some(e)) = driver.await {
                        warn!(store = %target, error = %e, "the LISTEN connection dropped; reconnecting");
                    }
                }
                drop(client);
            }
            Err(e) => warn!(store = %target, error = %e, "cannot connect to LISTEN for other instances' records"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

impl Inner {
    fn wake_all(&self) {
        for n in self.arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values() {
            n.notify_one();
        }
        self.lease_changes.notify_waiters();
        let _ = self.sqs_changes.send(String::new());
    }
}

#[async_trait]
impl OutboxStore for PgStore {
    async fn persist(&self, records: Vec<NewRecord>) -> Result<Persisted, StoreError> {
        if records.is_empty() {
            return Ok(Persisted::default());
        }
        let rows = records.len();
        grouped(&self.commits, (records, Timestamp::now().as_millis()), rows).await
    }

    async fn acquire_lease(
        &self,
        partition: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<LeaseToken>, StoreError> {
        let _running = self.inner.tracker.start(Op::AcquireLease);
        let client = self.client().await?;
        let row = client
            .query_opt(
                "INSERT INTO ferry_leases AS l (partition, owner, version, expires_at)
                 VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
                 ON CONFLICT (partition) DO UPDATE
                    SET owner = EXCLUDED.owner, version = l.version + 1, expires_at = EXCLUDED.expires_at
                  WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
                 RETURNING version",
                &[&partition, &owner, &(ttl.as_millis() as f64)],
            )
            .await
            .map_err(db)?;
        Ok(row.map(|r| LeaseToken { owner: owner.to_owned(), version: r.get::<_, i64>(0) as u64 }))
    }

    async fn renew_lease(&self, partition: &str, token: &LeaseToken, ttl: Duration) -> Result<bool, StoreError> {
        let _running = self.inner.tracker.start(Op::AcquireLease);
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE ferry_leases SET expires_at = now() + $3 * interval '1 millisecond'
                  WHERE partition = $1 AND version = $2",
                &[&partition, &(token.version as i64), &(ttl.as_millis() as f64)],
            )
            .await
            .map_err(db)?;
        Ok(n == 1)
    }

    async fn release_lease(&self, partition: &str, token: &LeaseToken) -> Result<(), StoreError> {
        let _running = self.inner.tracker.start(Op::AcquireLease);
        let client = self.client().await?;
        client
            .query(
                "WITH released AS (
                     UPDATE ferry_leases SET expires_at = now() WHERE partition = $1 AND version = $2 RETURNING partition
                 )
                 SELECT pg_notify('ferry_lease', partition) FROM released",
                &[&partition, &(token.version as i64)],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn lease_view(&self, owner: &str, ttl: Duration, partitions: &[String]) -> Result<LeaseView, StoreError> {
        let _running = self.inner.tracker.start(Op::AcquireLease);
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO ferry_instances (owner, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')
                 ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                &[&owner, &(ttl.as_millis() as f64)],
            )
            .await
            .map_err(db)?;
        let live = client
            .query_one("SELECT count(*) FROM ferry_instances WHERE expires_at > now()", &[])
            .await
            .map_err(db)?
            .get::<_, i64>(0);
        let rows = client
            .query(
                "SELECT partition, owner FROM ferry_leases WHERE partition = ANY($1) AND expires_at > now()",
                &[&partitions],
            )
            .await
            .map_err(db)?;
        Ok(LeaseView {
            live_owners: live.max(1) as usize,
            holders: rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
        })
    }

    async fn leave(&self, owner: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.execute("DELETE FROM ferry_instances WHERE owner = $1", &[&owner]).await.map_err(db)?;
        Ok(())
    }

    async fn claim(
        &self,
        partition: &str,
        token: &LeaseToken,
        limit: usize,
        now_ms: i64,
    ) -> Result<Vec<OutboxRecord>, StoreError> {
        let _running = self.inner.tracker.start(Op::Claim);
        let version = token.version as i64;
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "WITH lease AS (
                     SELECT 1 FROM ferry_leases
                      WHERE partition = $1 AND version = $2 AND expires_at > now() FOR SHARE
                 ), picked AS (
                     SELECT seq FROM ferry_outbox
                      WHERE partition = $1 AND kept_until IS NULL AND claimed_by <> $2 AND next_attempt_ms <= $3
                        AND EXISTS (SELECT 1 FROM lease)
                      ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED
                 )
                 UPDATE ferry_outbox o SET claimed_by = $2 FROM picked WHERE o.seq = picked.seq
                 RETURNING o.seq, o.route, o.binding, o.address, o.envelope, o.replay_count, o.created_ms,
                           o.next_attempt_ms, o.first_failure_ms",
            )
            .await
            .map_err(db)?;
        let rows = client.query(&statement, &[&partition, &version, &now_ms, &(limit as i64)]).await.map_err(db)?;
        if rows.is_empty() {
            // Nothing due, or the lease is not this token's (any more).
            let row = client
                .query_opt("SELECT version, expires_at > now() FROM ferry_leases WHERE partition = $1", &[&partition])
                .await
                .map_err(db)?;
            return match row {
                Some(r) if r.get::<_, i64>(0) == version && r.get::<_, bool>(1) => Ok(Vec::new()),
                Some(r) => Err(stale(partition, token, r.get::<_, i64>(0) as u64)),
                None => Err(stale(partition, token, 0)),
            };
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let envelope: Option<&[u8]> = r.get(4);
            let Some(envelope) = envelope else { continue };
            out.push(OutboxRecord {
                seq: r.get::<_, i64>(0) as u64,
                partition: partition.to_owned(),
                route: r.get(1),
                binding: r.get(2),
                address: r.get(3),
                envelope: decode(envelope)?,
                replay_count: r.get::<_, i32>(5) as u32,
                created_ms: r.get(6),
                next_attempt_ms: r.get(7),
                first_failure_ms: r.get(8),
                claimed_by: token.version,
            });
        }
        out.sort_by_key(|r| r.seq);
        Ok(out)
    }

    async fn complete(&self, record: &OutboxRecord, token: &LeaseToken, keep_key: Duration) -> Result<(), StoreError> {
        let completion = Completion {
            seq: record.seq as i64,
            partition: record.partition.clone(),
            version: token.version as i64,
            keep_ms: keep_key.as_millis() as f64,
        };
        match grouped(&self.completions, completion, 1).await? {
            None => Ok(()),
            Some(current) => Err(stale(&record.partition, token, current)),
        }
    }

    async fn replay(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<u32, StoreError> {
        self.reschedule(record, token, next_attempt_ms, true).await
    }

    async fn release(&self, record: &OutboxRecord, token: &LeaseToken, next_attempt_ms: i64) -> Result<(), StoreError> {
        self.reschedule(record, token, next_attempt_ms, false).await.map(|_| ())
    }

    fn depth(&self, partition: &str) -> u64 {
        let depths = self.inner.depths.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        depths.get(partition).map_or(0, |d| d.depth)
    }

    fn oldest(&self, partition: &str) -> Option<i64> {
        let depths = self.inner.depths.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        depths.get(partition).and_then(|d| d.oldest_ms)
    }

    fn stats(&self) -> Vec<PartitionStats> {
        let depths = self.inner.depths.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        depths
            .iter()
            .filter(|(_, d)| d.depth > 0)
            .map(|(p, d)| PartitionStats { partition: p.clone(), depth: d.depth, oldest_ms: d.oldest_ms })
            .collect()
    }

    fn arrivals(&self, partition: &str) -> Option<Arc<Notify>> {
        let mut arrivals = self.inner.arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(arrivals.entry(partition.to_owned()).or_insert_with(|| Arc::new(Notify::new())).clone())
    }

    fn lease_changes(&self) -> Option<Arc<Notify>> {
        Some(self.inner.lease_changes.clone())
    }
}

#[async_trait]
impl DeadLetterStore for PgStore {
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()> {
        let _running = self.inner.tracker.start(Op::DeadLetterPut);
        let value = encode(&entry).map_err(std::io::Error::other)?;
        let client = self.client().await.map_err(std::io::Error::other)?;
        client
            .execute("INSERT INTO ferry_dead_letters (route, entry) VALUES ($1, $2)", &[&entry.route, &value])
            .await
            .map_err(|e| std::io::Error::other(db(e)))?;
        Ok(())
    }
}
