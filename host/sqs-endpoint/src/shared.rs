//! The queues on a shared store (PostgreSQL), served by every instance on
//! it at once: the state is in the database's tables (migration 3 of the
//! store), not in any instance's memory.
//!
//! - A message is a row of `ferry_sqs_messages`; its visibility, receive
//!   count and latest receipt are columns. A receive on a standard queue
//!   claims rows with `FOR UPDATE SKIP LOCKED` and updates them in the same
//!   statement, so two instances never hand out one message at once, and
//!   neither waits for the other.
//! - A FIFO queue's sends and receives take a transaction-scoped advisory
//!   lock on the queue: sequence numbers are committed in order, a receive
//!   sees every group as it is (one in flight holds its group back), and
//!   the deduplication window (`ferry_sqs_dedup`) is checked and written
//!   under the same lock.
//! - Redrive moves a message past `maxReceiveCount` to the dead-letter
//!   queue in the receive's transaction; retention is enforced on receive
//!   and swept by [`Shared::sweep`].
//! - Long polls wait for the queue's name on the store's `ferry_sqs`
//!   channel (`NOTIFY`, sent by whichever instance changed the queue),
//!   re-checking every [`RECHECK`] in case a notification was lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use ferry_core::clock::Clock;
use ferry_store::postgres::{SQS_CHANNEL, SharedDb};
use tokio::sync::{Notify, broadcast};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use crate::error::SqsError;
use crate::model::{DEDUP_WINDOW_MS, Redrive};
use crate::queues::QueueStore;
use crate::records::{
    Depth, Identity, Outgoing, QueueMeta, ReceiveOptions, Received, SendResult, Stored, decode, encode, parse_receipt,
    receipt_handle,
};

/// The longest a long poll sleeps without looking at the queue again.
const RECHECK: Duration = Duration::from_secs(2);
/// Messages one receive moves to a dead-letter queue at most.
const REDRIVE_BATCH: i64 = 100;

const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended('ferry_sqs/' || $1::text, 0))";
const NOTIFY: &str = "SELECT pg_notify($1, $2)";
const DEPTH_COLUMNS: &str = "count(m.seq) FILTER (WHERE m.receive_count > 0 AND m.visible_at_ms > $1), \
     count(m.seq) FILTER (WHERE m.receive_count = 0 AND m.visible_at_ms > $1), \
     count(m.seq) FILTER (WHERE m.visible_at_ms <= $1), min(m.sent_ms)";
const INSERT: &str = "INSERT INTO ferry_sqs_messages (queue, seq, grp, sent_ms, visible_at_ms, stored) \
     SELECT $1::text, s, g, $2::bigint, v, b FROM unnest($3::bigint[], $4::text[], $5::bigint[], $6::bytea[]) AS t(s, g, v, b)";
/// Standard queues: the oldest visible messages nobody else is taking.
const PICK: &str = "WITH picked AS ( \
         SELECT seq FROM ferry_sqs_messages \
         WHERE queue = $1 AND visible_at_ms <= $2 AND sent_ms > $3 AND receive_count < $4 \
         ORDER BY seq LIMIT $5 FOR UPDATE SKIP LOCKED) \
     UPDATE ferry_sqs_messages m \
     SET receive_count = m.receive_count + 1, first_receive_ms = COALESCE(m.first_receive_ms, $2), \
         visible_at_ms = $6, receipt = $7 \
     FROM picked WHERE m.queue = $1 AND m.seq = picked.seq \
     RETURNING m.seq, m.stored, m.receive_count, m.first_receive_ms, m.source_arn";
/// FIFO queues: the messages the scan chose, under the queue's lock.
const TAKE: &str = "UPDATE ferry_sqs_messages \
     SET receive_count = receive_count + 1, first_receive_ms = COALESCE(first_receive_ms, $2), \
         visible_at_ms = $3, receipt = $4 \
     WHERE queue = $1 AND seq = ANY($5) \
     RETURNING seq, stored, receive_count, first_receive_ms, source_arn";
/// Standard queues: visible messages received `maxReceiveCount` times.
const DEAD: &str = "SELECT seq FROM ferry_sqs_messages \
     WHERE queue = $1 AND receive_count > 0 AND receive_count >= $3 AND visible_at_ms <= $2 \
     ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED";
/// Moves messages to a dead-letter queue, in their order, visible at once,
/// marked with the queue they came from, with their receive count and
/// first receive (as in AWS).
const MOVE: &str = "WITH moved AS ( \
         DELETE FROM ferry_sqs_messages WHERE queue = $1 AND seq = ANY($2) \
         RETURNING seq, grp, sent_ms, stored, receive_count, first_receive_ms) \
     INSERT INTO ferry_sqs_messages \
         (queue, seq, grp, sent_ms, visible_at_ms, stored, source_arn, receive_count, first_receive_ms) \
     SELECT $3::text, nextval('ferry_sqs_seq'), grp, sent_ms, $4::bigint, stored, $5::text, receive_count, \
         first_receive_ms FROM (SELECT * FROM moved ORDER BY seq) AS o";

fn db(e: tokio_postgres::Error) -> SqsError {
    // A queue deleted while a message was being added to it.
    if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) {
        return SqsError::no_queue();
    }
    SqsError::internal(format!("postgres: {e}"))
}

/// The receive side of a queue, as a FIFO scan sees each message.
struct Head {
    seq: i64,
    group: Option<String>,
    visible_at_ms: i64,
    receive_count: i32,
    sent_ms: i64,
}

/// The queues in PostgreSQL.
pub(crate) struct Shared {
    pool: Pool,
    identity: Identity,
    /// Long polls waiting, by queue.
    waiters: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    listener: tokio::task::JoinHandle<()>,
    clock: Clock,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

fn lock(waiters: &Mutex<HashMap<String, Arc<Notify>>>) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
    waiters.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn meta_of<C: GenericClient>(c: &C, name: &str, lock: &str) -> Result<QueueMeta, SqsError> {
    let row = c
        .query_opt(&format!("SELECT meta FROM ferry_sqs_queues WHERE name = $1{lock}"), &[&name])
        .await
        .map_err(db)?
        .ok_or_else(SqsError::no_queue)?;
    decode("ferry_sqs_queues", name, row.get::<_, &[u8]>(0)).map_err(SqsError::internal)
}

async fn names<C: GenericClient>(c: &C) -> Result<HashSet<String>, SqsError> {
    let rows = c.query("SELECT name FROM ferry_sqs_queues", &[]).await.map_err(db)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

async fn notify<C: GenericClient>(c: &C, name: &str) -> Result<(), SqsError> {
    c.execute(NOTIFY, &[&SQS_CHANNEL, &name]).await.map_err(db).map(|_| ())
}

fn depth(row: &Row, first: usize) -> Depth {
    Depth {
        in_flight: row.get::<_, i64>(first) as u64,
        delayed: row.get::<_, i64>(first + 1) as u64,
        visible: row.get::<_, i64>(first + 2) as u64,
        oldest_ms: row.get(first + 3),
    }
}

impl Shared {
    /// The queues in `db`'s tables; long polls wake on `db`'s
    /// announcements.
    pub fn new(db: SharedDb, identity: Identity, clock: Clock) -> Self {
        let waiters: Arc<Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
        let mut changes = db.sqs_changes.subscribe();
        let weak = Arc::downgrade(&waiters);
        let listener = tokio::spawn(async move {
            loop {
                let name = match changes.recv().await {
                    Ok(name) => name,
                    // Some were missed: wake every poll.
                    Err(broadcast::error::RecvError::Lagged(_)) => String::new(),
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let Some(waiters) = weak.upgrade() else { return };
                let waiters = lock(&waiters);
                if name.is_empty() {
                    waiters.values().for_each(|n| n.notify_waiters());
                } else if let Some(n) = waiters.get(&name) {
                    n.notify_waiters();
                }
            }
        });
        Self { pool: db.pool, identity, waiters, listener, clock }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, SqsError> {
        self.pool.get().await.map_err(|e| SqsError::internal(format!("postgres: {e}")))
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().as_millis()
    }

    fn waiter(&self, name: &str) -> Arc<Notify> {
        lock(&self.waiters).entry(name.to_owned()).or_default().clone()
    }

    pub async fn meta(&self, name: &str) -> Result<QueueMeta, SqsError> {
        meta_of(&self.client().await?, name, "").await
    }

    /// Changes a queue's description under its row lock.
    async fn update_meta(
        &self,
        name: &str,
        change: impl FnOnce(&mut QueueMeta, &HashSet<String>) -> Result<(), SqsError>,
    ) -> Result<(), SqsError> {
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(db)?;
        let known = names(&txn).await?;
        let mut meta = meta_of(&txn, name, " FOR UPDATE").await?;
        change(&mut meta, &known)?;
        txn.execute("UPDATE ferry_sqs_queues SET meta = $2 WHERE name = $1", &[&name, &encode(&meta)])
            .await
            .map_err(db)?;
        txn.commit().await.map_err(db)
    }

    /// FIFO: chooses up to `max` of the `candidates` (group, seq) a group
    /// at a time, least recently served first ([`crate::model::fifo_order`]),
    /// and records the groups chosen as served now. Under the queue's lock.
    async fn serve_groups(
        &self,
        txn: &tokio_postgres::Transaction<'_>,
        name: &str,
        candidates: &[(&str, i64)],
        max: usize,
    ) -> Result<Vec<i64>, SqsError> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut groups: Vec<&str> = candidates.iter().map(|(g, _)| *g).collect();
        groups.sort_unstable();
        groups.dedup();
        let served: HashMap<String, i64> = txn
            .query("SELECT grp, served FROM ferry_sqs_groups WHERE queue = $1 AND grp = ANY($2)", &[&name, &groups])
            .await
            .map_err(db)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let chosen = crate::model::fifo_order(candidates, |g| served.get(g).copied(), max);
        let mut taken: Vec<&str> = candidates.iter().filter(|(_, seq)| chosen.contains(seq)).map(|(g, _)| *g).collect();
        taken.sort_unstable();
        taken.dedup();
        if !taken.is_empty() {
            // One receive serves its groups at one moment of the clock.
            txn.execute(
                "INSERT INTO ferry_sqs_groups (queue, grp, served) \
                 SELECT $1::text, g, s FROM unnest($2::text[]) AS t(g), (SELECT nextval('ferry_sqs_seq') AS s) AS now \
                 ON CONFLICT (queue, grp) DO UPDATE SET served = EXCLUDED.served",
                &[&name, &taken],
            )
            .await
            .map_err(db)?;
        }
        Ok(chosen)
    }

    /// One pass over a queue, in one transaction: the messages taken, when
    /// the next one becomes visible, and the queue's own long-poll wait
    /// (ReceiveMessageWaitTimeSeconds, read with the rest of its
    /// description).
    async fn take(
        &self,
        name: &str,
        options: &ReceiveOptions,
    ) -> Result<(Vec<Received>, Option<i64>, Duration), SqsError> {
        let now = self.now_ms();
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(db)?;
        let meta = meta_of(&txn, name, "").await?;
        let fifo = meta.fifo();
        let until = now + options.visibility_s.unwrap_or_else(|| meta.int("VisibilityTimeout")) * 1000;
        let cut = now - meta.int("MessageRetentionPeriod") * 1000;
        let queue_wait = Duration::from_secs(meta.int("ReceiveMessageWaitTimeSeconds") as u64);
        // A dead-letter queue deleted after the policy was set (or the
        // queue itself): SQS keeps such messages where they are.
        let redrive = match meta.redrive(&self.identity).filter(|p| p.target != name) {
            Some(p) if meta_of(&txn, &p.target, "").await.is_ok() => Some(p),
            _ => None,
        };
        let nonce = format!("{:016x}", rand::random::<u64>());
        let max = options.max as i64;
        // FIFO: the order the receive chose (a group at a time).
        let mut order: Vec<i64> = Vec::new();
        let (rows, next_ms) = if fifo {
            txn.execute(LOCK, &[&name]).await.map_err(db)?;
            let heads: Vec<Head> = txn
                .query(
                    "SELECT seq, grp, visible_at_ms, receive_count, sent_ms FROM ferry_sqs_messages \
                     WHERE queue = $1 ORDER BY seq",
                    &[&name],
                )
                .await
                .map_err(db)?
                .iter()
                .map(|r| Head {
                    seq: r.get(0),
                    group: r.get(1),
                    visible_at_ms: r.get(2),
                    receive_count: r.get(3),
                    sent_ms: r.get(4),
                })
                .collect();
            let (candidates, expired, dead, next_ms) = scan_fifo(&heads, now, cut, redrive.as_ref());
            let chosen = self.serve_groups(&txn, name, &candidates, options.max).await?;
            if !expired.is_empty() {
                txn.execute("DELETE FROM ferry_sqs_messages WHERE queue = $1 AND seq = ANY($2)", &[&name, &expired])
                    .await
                    .map_err(db)?;
            }
            if let Some(policy) = &redrive {
                self.move_dead(&txn, name, &dead, policy, now).await?;
            }
            let rows = txn.query(TAKE, &[&name, &now, &until, &nonce, &chosen]).await.map_err(db)?;
            order = chosen;
            (rows, next_ms)
        } else {
            let max_count = match &redrive {
                Some(policy) => {
                    let dead: Vec<i64> = txn
                        .query(DEAD, &[&name, &now, &(policy.max_receive_count as i32), &REDRIVE_BATCH])
                        .await
                        .map_err(db)?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    self.move_dead(&txn, name, &dead, policy, now).await?;
                    policy.max_receive_count as i32
                }
                None => i32::MAX,
            };
            let rows = txn.query(PICK, &[&name, &now, &cut, &max_count, &max, &until, &nonce]).await.map_err(db)?;
            let next_ms = if rows.is_empty() {
                txn.query_one(
                    "SELECT min(visible_at_ms) FROM ferry_sqs_messages WHERE queue = $1 AND visible_at_ms > $2",
                    &[&name, &now],
                )
                .await
                .map_err(db)?
                .get(0)
            } else {
                None
            };
            (rows, next_ms)
        };
        txn.commit().await.map_err(db)?;
        let mut got = rows
            .iter()
            .map(|row| {
                let seq: i64 = row.get(0);
                let key = format!("{name}/{seq}");
                let mut stored: Stored =
                    decode("ferry_sqs_messages", &key, row.get::<_, &[u8]>(1)).map_err(SqsError::internal)?;
                stored.sequence = fifo.then_some(seq as u64);
                stored.source_arn = row.get(4);
                Ok((
                    seq,
                    Received {
                        stored: Arc::new(stored),
                        receipt_handle: receipt_handle(name, seq as u64, &nonce),
                        receive_count: row.get::<_, i32>(2) as u32,
                        first_receive_ms: row.get::<_, Option<i64>>(3).unwrap_or(now),
                    },
                ))
            })
            .collect::<Result<Vec<_>, SqsError>>()?;
        got.sort_by_key(
            |(seq, _)| if fifo { order.iter().position(|s| s == seq).unwrap_or(usize::MAX) } else { *seq as usize },
        );
        Ok((got.into_iter().map(|(_, r)| r).collect(), next_ms, queue_wait))
    }

    async fn move_dead<C: GenericClient>(
        &self,
        txn: &C,
        name: &str,
        dead: &[i64],
        policy: &Redrive,
        now: i64,
    ) -> Result<(), SqsError> {
        if dead.is_empty() {
            return Ok(());
        }
        let source = self.identity.arn(name);
        txn.execute(MOVE, &[&name, &dead, &policy.target, &now, &source]).await.map_err(db)?;
        notify(txn, &policy.target).await
    }
}

#[async_trait::async_trait]
impl QueueStore for Shared {
    async fn list(&self, prefix: &str) -> Result<Vec<String>, SqsError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT name FROM ferry_sqs_queues WHERE starts_with(name, $1) ORDER BY name", &[&prefix])
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn exists(&self, name: &str) -> Result<bool, SqsError> {
        let client = self.client().await?;
        let row = client.query_opt("SELECT 1 FROM ferry_sqs_queues WHERE name = $1", &[&name]).await.map_err(db)?;
        Ok(row.is_some())
    }

    async fn create(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<bool, SqsError> {
        let client = self.client().await?;
        let known = names(&client).await?;
        let dlq_exists = |arn: &str| self.identity.key_of_arn(arn).is_some_and(|k| known.contains(&k));
        QueueMeta::check_new(name, &attributes, &dlq_exists)?;
        let meta = QueueMeta::new(name, attributes.clone(), tags, self.now_ms());
        let added = client
            .execute(
                "INSERT INTO ferry_sqs_queues (name, meta) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[&name, &encode(&meta)],
            )
            .await
            .map_err(db)?;
        if added == 1 {
            return Ok(true);
        }
        meta_of(&client, name, "").await?.same_as(&attributes)?;
        Ok(false)
    }

    async fn delete(&self, name: &str) -> Result<(), SqsError> {
        let client = self.client().await?;
        if client.execute("DELETE FROM ferry_sqs_queues WHERE name = $1", &[&name]).await.map_err(db)? == 0 {
            return Err(SqsError::no_queue());
        }
        // Long polls on it answer that it is gone.
        notify(&client, name).await
    }

    async fn purge(&self, name: &str) -> Result<(), SqsError> {
        let now = self.now_ms();
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(db)?;
        let started = txn
            .execute(
                "UPDATE ferry_sqs_queues SET purged_ms = $2::bigint \
                 WHERE name = $1 AND (purged_ms IS NULL OR purged_ms <= $2::bigint - 60000)",
                &[&name, &now],
            )
            .await
            .map_err(db)?;
        if started == 0 {
            meta_of(&txn, name, "").await?;
            return Err(SqsError::purge_in_progress(&self.identity.arn(name)));
        }
        txn.execute("DELETE FROM ferry_sqs_messages WHERE queue = $1", &[&name]).await.map_err(db)?;
        // A purge forgets the deduplication ids too, as in AWS.
        txn.execute("DELETE FROM ferry_sqs_dedup WHERE queue = $1", &[&name]).await.map_err(db)?;
        txn.commit().await.map_err(db)
    }

    async fn attributes(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        let client = self.client().await?;
        let meta = meta_of(&client, name, "").await?;
        let row = client
            .query_one(
                &format!("SELECT {DEPTH_COLUMNS} FROM ferry_sqs_messages m WHERE m.queue = $2"),
                &[&self.now_ms(), &name],
            )
            .await
            .map_err(db)?;
        Ok(meta.report(&depth(&row, 0), self.identity.arn(name)))
    }

    async fn depths(&self) -> Result<Vec<(String, Depth)>, SqsError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT q.name, {DEPTH_COLUMNS} FROM ferry_sqs_queues q \
                     LEFT JOIN ferry_sqs_messages m ON m.queue = q.name GROUP BY q.name ORDER BY q.name"
                ),
                &[&self.now_ms()],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), depth(r, 1))).collect())
    }

    async fn set_attributes(&self, name: &str, attributes: BTreeMap<String, String>) -> Result<(), SqsError> {
        self.update_meta(name, |meta, known| {
            let dlq_exists = |arn: &str| self.identity.key_of_arn(arn).is_some_and(|k| known.contains(&k));
            meta.set(attributes, &dlq_exists, self.now_ms())
        })
        .await
    }

    async fn retag(&self, name: &str, set: BTreeMap<String, String>, remove: &[String]) -> Result<(), SqsError> {
        self.update_meta(name, |meta, _| meta.retag(set, remove)).await
    }

    /// Sends messages to one queue, in one transaction; each answer in the
    /// order given.
    async fn send(&self, name: &str, messages: Vec<Outgoing>) -> Result<Vec<SendResult>, SqsError> {
        let now = self.now_ms();
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(db)?;
        let meta = meta_of(&txn, name, "").await?;
        let fifo = meta.fifo();
        let queue_delay = meta.int("DelaySeconds");
        if fifo {
            txn.execute(LOCK, &[&name]).await.map_err(db)?;
            txn.execute("DELETE FROM ferry_sqs_dedup WHERE queue = $1 AND until_ms <= $2", &[&name, &now])
                .await
                .map_err(db)?;
        }
        let count = messages.len() as i32;
        let mut seqs: Vec<i64> = txn
            .query("SELECT nextval('ferry_sqs_seq') FROM generate_series(1, $1)", &[&count])
            .await
            .map_err(db)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        seqs.sort_unstable();
        let mut results = Vec::with_capacity(messages.len());
        let (mut rows, mut groups, mut visible, mut blobs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (m, seq) in messages.into_iter().zip(seqs) {
            let delay = m.delay_s.unwrap_or(queue_delay);
            let stored = m.into_stored(now, fifo.then_some(seq as u64));
            if fifo {
                let dedup_id = meta.dedup_key(stored.group.as_deref(), stored.dedup_id.as_deref().unwrap_or_default());
                let fresh = txn
                    .execute(
                        "INSERT INTO ferry_sqs_dedup (queue, dedup_id, until_ms, message_id, sequence) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (queue, dedup_id) DO NOTHING",
                        &[&name, &dedup_id, &(now + DEDUP_WINDOW_MS), &stored.id, &seq],
                    )
                    .await
                    .map_err(db)?;
                if fresh == 0 {
                    let row = txn
                        .query_one(
                            "SELECT message_id, sequence FROM ferry_sqs_dedup WHERE queue = $1 AND dedup_id = $2",
                            &[&name, &dedup_id],
                        )
                        .await
                        .map_err(db)?;
                    let sequence: Option<i64> = row.get(1);
                    results.push(SendResult { message_id: row.get(0), sequence: sequence.map(|s| s as u64) });
                    continue;
                }
            }
            results.push(SendResult { message_id: stored.id.clone(), sequence: stored.sequence });
            rows.push(seq);
            groups.push(stored.group.clone());
            visible.push(now + delay * 1000);
            blobs.push(encode(&stored));
        }
        if !rows.is_empty() {
            txn.execute(INSERT, &[&name, &now, &rows, &groups, &visible, &blobs]).await.map_err(db)?;
            notify(&txn, name).await?;
        }
        txn.commit().await.map_err(db)?;
        Ok(results)
    }

    /// Receives up to `options.max` messages, waiting up to
    /// `options.wait` (else the queue's ReceiveMessageWaitTimeSeconds) for
    /// the first.
    async fn receive(&self, name: &str, options: ReceiveOptions) -> Result<Vec<Received>, SqsError> {
        let notify = self.waiter(name);
        let started = tokio::time::Instant::now();
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (got, next_ms, queue_wait) = self.take(name, &options).await?;
            let deadline = started + options.wait.unwrap_or(queue_wait);
            let now = tokio::time::Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            let mut wake = deadline.min(now + RECHECK);
            if let Some(next) = next_ms {
                wake = wake.min(now + Duration::from_millis((next - self.now_ms()).max(1) as u64));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Deletes received messages, one answer per handle. A handle whose
    /// message is already gone, or that is not the latest receipt,
    /// succeeds, as in SQS.
    async fn delete_messages(&self, name: &str, handles: &[String]) -> Result<Vec<Result<(), SqsError>>, SqsError> {
        let client = self.client().await?;
        let meta = meta_of(&client, name, "").await?;
        let parsed: Vec<Result<(u64, String), SqsError>> = handles.iter().map(|h| parse_receipt(name, h)).collect();
        // A FIFO queue refuses the latest handle of a message whose
        // visibility ran out: the message is its group's again.
        let mut expired: Vec<i64> = Vec::new();
        if meta.fifo() {
            let (seqs, receipts): (Vec<i64>, Vec<String>) =
                parsed.iter().flatten().map(|(seq, nonce)| (*seq as i64, nonce.clone())).unzip();
            let now = self.now_ms();
            expired = client
                .query(
                    "SELECT m.seq FROM ferry_sqs_messages m JOIN unnest($2::bigint[], $3::text[]) AS h(seq, receipt) \
                     ON m.seq = h.seq AND m.receipt = h.receipt WHERE m.queue = $1 AND m.visible_at_ms <= $4",
                    &[&name, &seqs, &receipts, &now],
                )
                .await
                .map_err(db)?
                .iter()
                .map(|r| r.get(0))
                .collect();
        }
        let (mut seqs, mut receipts) = (Vec::new(), Vec::new());
        let answers = parsed
            .into_iter()
            .map(|p| {
                let (seq, nonce) = p?;
                if expired.contains(&(seq as i64)) {
                    return Err(SqsError::receipt_expired());
                }
                seqs.push(seq as i64);
                receipts.push(nonce);
                Ok(())
            })
            .collect();
        if !seqs.is_empty() {
            let deleted = client
                .execute(
                    "DELETE FROM ferry_sqs_messages m USING unnest($2::bigint[], $3::text[]) AS h(seq, receipt) \
                     WHERE m.queue = $1 AND m.seq = h.seq AND m.receipt = h.receipt",
                    &[&name, &seqs, &receipts],
                )
                .await
                .map_err(db)?;
            // A FIFO group the message held back can go on.
            if deleted > 0 && meta.fifo() {
                notify(&client, name).await?;
            }
        }
        Ok(answers)
    }

    /// Changes how long a received message stays invisible, counted from
    /// now.
    async fn change_visibility(&self, name: &str, handle: &str, timeout_s: i64) -> Result<(), SqsError> {
        let client = self.client().await?;
        meta_of(&client, name, "").await?;
        let (seq, nonce) = parse_receipt(name, handle)?;
        let now = self.now_ms();
        let changed = client
            .execute(
                "UPDATE ferry_sqs_messages SET visible_at_ms = $4 \
                 WHERE queue = $1 AND seq = $2 AND receipt = $3 AND receive_count > 0 AND visible_at_ms > $5",
                &[&name, &(seq as i64), &nonce, &(now + timeout_s * 1000), &now],
            )
            .await
            .map_err(db)?;
        if changed == 0 {
            // A stale handle changes nothing (and AWS answers 200); a
            // message no longer in the queue is an error.
            let exists = client
                .query_opt("SELECT 1 FROM ferry_sqs_messages WHERE queue = $1 AND seq = $2", &[&name, &(seq as i64)])
                .await
                .map_err(db)?
                .is_some();
            return if exists { Ok(()) } else { Err(SqsError::message_gone(handle)) };
        }
        if timeout_s == 0 {
            notify(&client, name).await?;
        }
        Ok(())
    }

    /// Removes the messages past their queue's retention period and the
    /// deduplication entries past their window.
    async fn sweep(&self) -> Result<(), SqsError> {
        let now = self.now_ms();
        let client = self.client().await?;
        for row in client.query("SELECT name, meta FROM ferry_sqs_queues", &[]).await.map_err(db)? {
            let name: String = row.get(0);
            let meta: QueueMeta =
                decode("ferry_sqs_queues", &name, row.get::<_, &[u8]>(1)).map_err(SqsError::internal)?;
            let cut = now - meta.int("MessageRetentionPeriod") * 1000;
            client
                .execute("DELETE FROM ferry_sqs_messages WHERE queue = $1 AND sent_ms <= $2", &[&name, &cut])
                .await
                .map_err(db)?;
        }
        client.execute("DELETE FROM ferry_sqs_dedup WHERE until_ms <= $1", &[&now]).await.map_err(db)?;
        Ok(())
    }

    async fn tags(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        Ok(self.meta(name).await?.tags)
    }

    async fn queue_kind(&self, name: &str) -> Result<(bool, bool, i64), SqsError> {
        Ok(self.meta(name).await?.kind())
    }

    fn is_shared(&self) -> bool {
        true
    }
}

/// A FIFO queue's receive: visible messages in order, up to `max`, of the
/// groups not held back (a group is held while one of its messages is in
/// flight or not yet visible). Returns the chosen, the expired and the
/// dead (for the dead-letter queue), and when the next message becomes
/// visible.
#[allow(clippy::type_complexity)]
fn scan_fifo<'h>(
    heads: &'h [Head],
    now: i64,
    cut: i64,
    redrive: Option<&Redrive>,
) -> (Vec<(&'h str, i64)>, Vec<i64>, Vec<i64>, Option<i64>) {
    let (mut chosen, mut expired, mut dead) = (Vec::new(), Vec::new(), Vec::new());
    let mut held: HashSet<&str> = HashSet::new();
    let mut next_ms: Option<i64> = None;
    for m in heads {
        if m.sent_ms <= cut {
            expired.push(m.seq);
            continue;
        }
        let group = m.group.as_deref();
        if group.is_some_and(|g| held.contains(g)) {
            continue;
        }
        if m.visible_at_ms > now {
            next_ms = Some(next_ms.map_or(m.visible_at_ms, |n| n.min(m.visible_at_ms)));
            held.extend(group);
            continue;
        }
        if redrive.is_some_and(|p| m.receive_count as u32 >= p.max_receive_count) {
            dead.push(m.seq);
            held.extend(group);
            continue;
        }
        // Later messages of its group may come in the same receive, after
        // it (as SQS hands them out); the next receive finds the group
        // held by them.
        if let Some(g) = group {
            chosen.push((g, m.seq));
        }
    }
    (chosen, expired, dead, next_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(seq: i64, group: &str, visible_at_ms: i64, receive_count: i32) -> Head {
        Head { seq, group: Some(group.into()), visible_at_ms, receive_count, sent_ms: 1_000 }
    }

    #[test]
    fn a_fifo_scan_keeps_group_order_and_skips_held_groups() {
        let heads =
            [head(1, "a", 0, 0), head(2, "a", 0, 0), head(3, "b", 50, 1), head(4, "b", 0, 0), head(5, "c", 0, 0)];
        let (chosen, expired, dead, next) = scan_fifo(&heads, 10, 0, None);
        let chosen: Vec<i64> = chosen.iter().map(|(_, seq)| *seq).collect();
        assert_eq!(chosen, vec![1, 2, 5]);
        assert!(expired.is_empty() && dead.is_empty());
        assert_eq!(next, Some(50));
        // Expired messages go, and a message past maxReceiveCount is dead
        // and holds its group.
        let policy = Redrive { target: "dlq".into(), max_receive_count: 2 };
        let heads = [head(1, "a", 0, 2), head(2, "a", 0, 0), head(3, "b", 0, 0)];
        let (chosen, _, dead, _) = scan_fifo(&heads, 10, 0, Some(&policy));
        let chosen: Vec<i64> = chosen.iter().map(|(_, seq)| *seq).collect();
        assert_eq!((chosen, dead), (vec![3], vec![1]));
        let (_, expired, _, _) = scan_fifo(&heads, 10, 5_000, None);
        assert_eq!(expired, vec![1, 2, 3]);
    }
}
