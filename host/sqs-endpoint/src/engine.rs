//! The queues: registry, messages, visibility, FIFO groups, deduplication
//! and redrive. [`Engine`] is what the actions and routes call; it keeps
//! the queues in one of two places:
//! - on the embedded store, in this process's memory, written through to
//!   the store ([`Local`], below), since one process has that store;
//! - on a shared store (PostgreSQL), in the database's tables, which every
//!   instance on it serves at once ([`crate::shared`]).
//!
//! The rest of this page is about the first.
//!
//! Every change is on disk before the call that made it returns: a
//! `SendMessage` is answered only once its message is committed, so an app
//! that heard "sent" never loses the message to a crash. Reads (receive,
//! attributes) are served from memory; what a receive changes (receipt,
//! visibility, count) is committed before the messages are handed out, so
//! a restart never shows a received message as never received.
//!
//! Records (spaces of the store's keyed records):
//! - `sqs.queue`: name → [`QueueMeta`];
//! - `sqs.message`: `name/seq` → [`Stored`] (what was sent; never changes);
//! - `sqs.delivery`: `name/seq` → [`Delivery`] (visibility and counts);
//! - `sqs.dedup`: `name/dedup-id` → [`DedupEntry`] (FIFO, five minutes).
//!
//! The lock over the state is a plain mutex held only for in-memory work,
//! never across an await; store commits happen outside it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferry_core::clock::Clock;
use ferry_core::outbox::StoreError;
use ferry_core::records::{RecordChange, RecordStore};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use ferry_store::postgres::SharedDb;

use crate::error::{ErrorKind, SqsError};
use crate::model::{DEDUP_WINDOW_MS, Redrive};
use crate::queues::QueueStore;
pub use crate::records::{Depth, Identity, Outgoing, QueueMeta, ReceiveOptions, Received, SendResult, Stored};
use crate::records::{decode, encode, parse_receipt, receipt_handle};
use crate::shared::Shared;

const QUEUES: &str = "sqs.queue";
const MESSAGES: &str = "sqs.message";
const DELIVERIES: &str = "sqs.delivery";
const DEDUP: &str = "sqs.dedup";

/// What receiving has done to a message.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Delivery {
    /// Not receivable before (ms).
    pub visible_at_ms: i64,
    pub receive_count: u32,
    pub first_receive_ms: Option<i64>,
    /// The nonce of the latest receipt handle.
    pub receipt: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct DedupEntry {
    until_ms: i64,
    message_id: String,
    sequence: Option<u64>,
}

struct Message {
    stored: Arc<Stored>,
    delivery: Delivery,
    /// Not yet on disk: not receivable, and on a FIFO queue it holds its
    /// group back so order is kept.
    committed: bool,
}

impl Message {
    fn in_flight(&self, now: i64) -> bool {
        self.delivery.receive_count > 0 && self.delivery.visible_at_ms > now
    }
}

struct Queue {
    meta: QueueMeta,
    messages: BTreeMap<u64, Message>,
    dedup: HashMap<String, DedupEntry>,
    notify: Arc<Notify>,
    purged_ms: Option<i64>,
    /// FIFO: when each message group was last served, on the queue's
    /// receive clock (not kept across restarts: every group starts as
    /// never served).
    served: HashMap<String, i64>,
    receives: i64,
}

impl Queue {
    fn fifo(&self) -> bool {
        self.meta.fifo()
    }

    fn int(&self, name: &str) -> i64 {
        self.meta.int(name)
    }

    fn redrive(&self, identity: &Identity) -> Option<Redrive> {
        self.meta.redrive(identity)
    }
}

struct State {
    queues: BTreeMap<String, Queue>,
    next_seq: u64,
}

/// The queues in this process's memory, written through to the store (the
/// embedded store: one process serves them).
pub(crate) struct Local {
    state: Mutex<State>,
    store: Arc<dyn RecordStore>,
    pub identity: Identity,
    clock: Clock,
}

fn message_key(queue: &str, seq: u64) -> String {
    format!("{queue}/{seq:020}")
}

fn internal(e: StoreError) -> SqsError {
    SqsError::internal(e)
}

/// Hands out message `seq` of queue `name`: a new receipt, its receive
/// count and first receive, invisible for `visibility` seconds.
fn deliver(name: &str, seq: u64, m: &mut Message, now: i64, visibility: i64, change: &mut RecordChange) -> Received {
    let nonce = format!("{:016x}", rand::random::<u64>());
    m.delivery.receive_count += 1;
    m.delivery.first_receive_ms.get_or_insert(now);
    m.delivery.visible_at_ms = now + visibility * 1000;
    m.delivery.receipt = Some(nonce.clone());
    change.put(DELIVERIES, message_key(name, seq), encode(&m.delivery));
    Received {
        stored: m.stored.clone(),
        receipt_handle: receipt_handle(name, seq, &nonce),
        receive_count: m.delivery.receive_count,
        first_receive_ms: m.delivery.first_receive_ms.unwrap_or(now),
    }
}

impl Local {
    /// Loads every queue from the store.
    pub async fn open(store: Arc<dyn RecordStore>, identity: Identity, clock: Clock) -> Result<Self, StoreError> {
        let mut queues = BTreeMap::new();
        for (key, bytes) in store.load(QUEUES).await? {
            let meta: QueueMeta = decode(QUEUES, &key, &bytes)?;
            queues.insert(
                meta.name.clone(),
                Queue {
                    meta,
                    messages: BTreeMap::new(),
                    dedup: HashMap::new(),
                    notify: Arc::new(Notify::new()),
                    purged_ms: None,
                    served: HashMap::new(),
                    receives: 0,
                },
            );
        }
        let mut deliveries: HashMap<String, Delivery> = HashMap::new();
        for (key, bytes) in store.load(DELIVERIES).await? {
            let delivery = decode(DELIVERIES, &key, &bytes)?;
            deliveries.insert(key, delivery);
        }
        let mut next_seq = 1;
        let mut orphans = RecordChange::default();
        for (key, bytes) in store.load(MESSAGES).await? {
            let Some((name, seq)) = key.rsplit_once('/').and_then(|(n, s)| Some((n, s.parse::<u64>().ok()?))) else {
                continue;
            };
            next_seq = next_seq.max(seq + 1);
            let delivery = deliveries.remove(&key);
            let Some(queue) = queues.get_mut(name) else {
                orphans.delete(MESSAGES, key.clone());
                orphans.delete(DELIVERIES, key);
                continue;
            };
            let stored: Stored = decode(MESSAGES, &key, &bytes)?;
            let delivery = delivery.unwrap_or(Delivery { visible_at_ms: stored.sent_ms, ..Delivery::default() });
            queue.messages.insert(seq, Message { stored: Arc::new(stored), delivery, committed: true });
        }
        let now = clock.now().as_millis();
        for (key, bytes) in store.load(DEDUP).await? {
            let entry: DedupEntry = decode(DEDUP, &key, &bytes)?;
            // Queue names hold no `/`; deduplication ids may.
            match key.split_once('/').and_then(|(name, id)| Some((queues.get_mut(name)?, id))) {
                Some((queue, id)) if entry.until_ms > now => {
                    queue.dedup.insert(id.to_owned(), entry);
                }
                _ => orphans.delete(DEDUP, key),
            }
        }
        store.commit(orphans).await?;
        Ok(Self { state: Mutex::new(State { queues, next_seq }), store, identity, clock })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// Queue names, in order, starting with `prefix`.
    pub fn list(&self, prefix: &str) -> Vec<String> {
        self.lock().queues.keys().filter(|n| n.starts_with(prefix)).cloned().collect()
    }

    pub fn exists(&self, name: &str) -> bool {
        self.lock().queues.contains_key(name)
    }

    async fn create_named(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<bool, SqsError> {
        let meta = {
            let mut state = self.lock();
            let dlq_exists = |arn: &str| self.identity.key_of_arn(arn).is_some_and(|k| state.queues.contains_key(&k));
            QueueMeta::check_new(name, &attributes, &dlq_exists)?;
            if let Some(existing) = state.queues.get(name) {
                existing.meta.same_as(&attributes)?;
                return Ok(false);
            }
            let meta = QueueMeta::new(name, attributes, tags, self.now_ms());
            state.queues.insert(
                name.to_owned(),
                Queue {
                    meta: meta.clone(),
                    messages: BTreeMap::new(),
                    dedup: HashMap::new(),
                    notify: Arc::new(Notify::new()),
                    purged_ms: None,
                    served: HashMap::new(),
                    receives: 0,
                },
            );
            meta
        };
        let mut change = RecordChange::default();
        change.put(QUEUES, name, encode(&meta));
        if let Err(e) = self.store.commit(change).await {
            self.lock().queues.remove(name);
            return Err(internal(e));
        }
        Ok(true)
    }

    /// Deletes a queue and its messages.
    pub async fn delete(&self, name: &str) -> Result<(), SqsError> {
        let queue = self.lock().queues.remove(name).ok_or_else(SqsError::no_queue)?;
        queue.notify.notify_waiters();
        let mut change = RecordChange::default();
        change.delete(QUEUES, name);
        for seq in queue.messages.keys() {
            change.delete(MESSAGES, message_key(name, *seq));
            change.delete(DELIVERIES, message_key(name, *seq));
        }
        for id in queue.dedup.keys() {
            change.delete(DEDUP, format!("{name}/{id}"));
        }
        self.store.commit(change).await.map_err(internal)
    }

    /// Removes every message (at most once a minute, as SQS allows).
    pub async fn purge(&self, name: &str) -> Result<(), SqsError> {
        let change = {
            let mut state = self.lock();
            let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
            let now = self.now_ms();
            if queue.purged_ms.is_some_and(|at| now - at < 60_000) {
                return Err(SqsError::purge_in_progress(&self.identity.arn(name)));
            }
            queue.purged_ms = Some(now);
            let mut change = RecordChange::default();
            for seq in std::mem::take(&mut queue.messages).into_keys() {
                change.delete(MESSAGES, message_key(name, seq));
                change.delete(DELIVERIES, message_key(name, seq));
            }
            // A purge forgets the deduplication ids too, as in AWS.
            for id in std::mem::take(&mut queue.dedup).into_keys() {
                change.delete(DEDUP, format!("{name}/{id}"));
            }
            change
        };
        self.store.commit(change).await.map_err(internal)
    }

    /// A queue's attributes: what was set, the defaults, and the computed
    /// ones.
    pub fn attributes(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        let state = self.lock();
        let queue = state.queues.get(name).ok_or_else(SqsError::no_queue)?;
        Ok(queue.meta.report(&depth_of(queue, self.now_ms()), self.identity.arn(name)))
    }

    /// Depth of every queue (the metrics).
    pub fn depths(&self) -> Vec<(String, Depth)> {
        let now = self.now_ms();
        self.lock().queues.iter().map(|(name, q)| (name.clone(), depth_of(q, now))).collect()
    }

    pub async fn set_attributes(&self, name: &str, attributes: BTreeMap<String, String>) -> Result<(), SqsError> {
        let meta = {
            let mut state = self.lock();
            let mut meta = state.queues.get(name).ok_or_else(SqsError::no_queue)?.meta.clone();
            let dlq_exists = |arn: &str| self.identity.key_of_arn(arn).is_some_and(|k| state.queues.contains_key(&k));
            meta.set(attributes, &dlq_exists, self.now_ms())?;
            let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
            queue.meta = meta.clone();
            meta
        };
        let mut change = RecordChange::default();
        change.put(QUEUES, name, encode(&meta));
        self.store.commit(change).await.map_err(internal)
    }

    pub fn tags(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        let state = self.lock();
        Ok(state.queues.get(name).ok_or_else(SqsError::no_queue)?.meta.tags.clone())
    }

    /// Adds tags (`Some`) or removes them (`None`).
    pub async fn retag(&self, name: &str, set: BTreeMap<String, String>, remove: &[String]) -> Result<(), SqsError> {
        let meta = {
            let mut state = self.lock();
            let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
            let mut meta = queue.meta.clone();
            meta.retag(set, remove)?;
            queue.meta = meta.clone();
            meta
        };
        let mut change = RecordChange::default();
        change.put(QUEUES, name, encode(&meta));
        self.store.commit(change).await.map_err(internal)
    }

    /// Whether the queue is FIFO and deduplicates by content.
    pub fn queue_kind(&self, name: &str) -> Result<(bool, bool, i64), SqsError> {
        let state = self.lock();
        let q = state.queues.get(name).ok_or_else(SqsError::no_queue)?;
        Ok(q.meta.kind())
    }

    /// Sends messages to one queue; each answer in the order given. The
    /// messages are on disk when this returns `Ok`.
    pub async fn send(&self, name: &str, messages: Vec<Outgoing>) -> Result<Vec<SendResult>, SqsError> {
        let now = self.now_ms();
        let mut results = Vec::with_capacity(messages.len());
        let mut change = RecordChange::default();
        let mut added = Vec::new();
        let mut dedup_added = Vec::new();
        let notify = {
            let mut guard = self.lock();
            let state = &mut *guard;
            let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
            let fifo = queue.fifo();
            let queue_delay = queue.int("DelaySeconds");
            queue.dedup.retain(|_, e| e.until_ms > now);
            for m in messages {
                if fifo {
                    let dedup_id = queue.meta.dedup_key(m.group.as_deref(), m.dedup_id.as_deref().unwrap_or_default());
                    if let Some(entry) = queue.dedup.get(&dedup_id) {
                        results.push(SendResult { message_id: entry.message_id.clone(), sequence: entry.sequence });
                        continue;
                    }
                }
                let seq = state.next_seq;
                state.next_seq += 1;
                let delay = m.delay_s.unwrap_or(queue_delay);
                let stored = m.into_stored(now, fifo.then_some(seq));
                let delivery = Delivery { visible_at_ms: now + delay * 1000, ..Delivery::default() };
                let key = message_key(name, seq);
                change.put(MESSAGES, key.clone(), encode(&stored));
                change.put(DELIVERIES, key, encode(&delivery));
                if fifo {
                    let dedup_id =
                        queue.meta.dedup_key(stored.group.as_deref(), stored.dedup_id.as_deref().unwrap_or_default());
                    let entry = DedupEntry {
                        until_ms: now + DEDUP_WINDOW_MS,
                        message_id: stored.id.clone(),
                        sequence: Some(seq),
                    };
                    change.put(DEDUP, format!("{name}/{dedup_id}"), encode(&entry));
                    queue.dedup.insert(dedup_id.clone(), entry);
                    dedup_added.push(dedup_id);
                }
                results.push(SendResult { message_id: stored.id.clone(), sequence: stored.sequence });
                queue.messages.insert(seq, Message { stored: Arc::new(stored), delivery, committed: false });
                added.push(seq);
            }
            queue.notify.clone()
        };
        let committed = self.store.commit(change).await;
        {
            let mut state = self.lock();
            if let Some(queue) = state.queues.get_mut(name) {
                for seq in &added {
                    match committed {
                        Ok(()) => {
                            if let Some(m) = queue.messages.get_mut(seq) {
                                m.committed = true;
                            }
                        }
                        Err(_) => {
                            queue.messages.remove(seq);
                        }
                    }
                }
                if committed.is_err() {
                    for id in &dedup_added {
                        queue.dedup.remove(id);
                    }
                }
            }
        }
        committed.map_err(internal)?;
        notify.notify_waiters();
        Ok(results)
    }

    /// Receives up to `options.max` messages, waiting up to
    /// `options.wait` (else the queue's ReceiveMessageWaitTimeSeconds) for
    /// the first.
    pub async fn receive(&self, name: &str, options: ReceiveOptions) -> Result<Vec<Received>, SqsError> {
        let (notify, wait) = {
            let state = self.lock();
            let queue = state.queues.get(name).ok_or_else(SqsError::no_queue)?;
            let wait = options.wait.unwrap_or(Duration::from_secs(queue.int("ReceiveMessageWaitTimeSeconds") as u64));
            (queue.notify.clone(), wait)
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (got, change, next_ms) = self.take(name, &options)?;
            if !change.is_empty() {
                self.store.commit(change).await.map_err(internal)?;
            }
            let now = tokio::time::Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            let mut wake = deadline;
            if let Some(next) = next_ms {
                let wait_ms = (next - self.now_ms()).max(1) as u64;
                wake = wake.min(now + Duration::from_millis(wait_ms));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// One pass over a queue: the messages taken, the change that records
    /// it, and when the next message becomes visible.
    #[allow(clippy::type_complexity)]
    fn take(
        &self,
        name: &str,
        options: &ReceiveOptions,
    ) -> Result<(Vec<Received>, RecordChange, Option<i64>), SqsError> {
        let now = self.now_ms();
        let mut guard = self.lock();
        let state = &mut *guard;
        // A dead-letter queue deleted after the policy was set (or the queue
        // itself): SQS keeps such messages where they are, and so do we.
        let redrive = state
            .queues
            .get(name)
            .ok_or_else(SqsError::no_queue)?
            .redrive(&self.identity)
            .filter(|p| p.target != name && state.queues.contains_key(&p.target));
        let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
        let fifo = queue.fifo();
        let visibility = options.visibility_s.unwrap_or_else(|| queue.int("VisibilityTimeout"));
        let retention_ms = queue.int("MessageRetentionPeriod") * 1000;
        let mut change = RecordChange::default();
        let mut got = Vec::new();
        let mut expired = Vec::new();
        let mut dead = Vec::new();
        let mut blocked: HashSet<String> = HashSet::new();
        let mut next_ms: Option<i64> = None;
        // FIFO: the messages the receive may take, by group, in send order.
        let mut candidates: Vec<(String, u64)> = Vec::new();
        for (seq, m) in &mut queue.messages {
            // A full receive returns at once: no need to look further.
            if got.len() >= options.max {
                break;
            }
            if m.stored.sent_ms + retention_ms <= now {
                expired.push(*seq);
                continue;
            }
            let group = if fifo { m.stored.group.clone() } else { None };
            if let Some(g) = &group
                && blocked.contains(g)
            {
                continue;
            }
            if !m.committed || m.delivery.visible_at_ms > now {
                if m.committed {
                    next_ms = Some(next_ms.map_or(m.delivery.visible_at_ms, |n| n.min(m.delivery.visible_at_ms)));
                }
                if let Some(g) = group {
                    blocked.insert(g);
                }
                continue;
            }
            if let Some(policy) = &redrive
                && m.delivery.receive_count >= policy.max_receive_count
            {
                dead.push((*seq, policy.target.clone()));
                if let Some(g) = group {
                    blocked.insert(g);
                }
                continue;
            }
            match group {
                // A FIFO receive chooses among every group's head run.
                Some(g) => candidates.push((g, *seq)),
                None => got.push(deliver(name, *seq, m, now, visibility, &mut change)),
            }
        }
        if fifo {
            let pairs: Vec<(&str, u64)> = candidates.iter().map(|(g, seq)| (g.as_str(), *seq)).collect();
            let chosen = crate::model::fifo_order(&pairs, |g| queue.served.get(g).copied(), options.max);
            queue.receives += 1;
            for seq in chosen {
                if let Some(m) = queue.messages.get_mut(&seq) {
                    if let Some(g) = &m.stored.group {
                        queue.served.insert(g.clone(), queue.receives);
                    }
                    got.push(deliver(name, seq, m, now, visibility, &mut change));
                }
            }
        }
        for seq in expired {
            queue.messages.remove(&seq);
            change.delete(MESSAGES, message_key(name, seq));
            change.delete(DELIVERIES, message_key(name, seq));
        }
        let source_arn = self.identity.arn(name);
        let mut moved = Vec::new();
        for (seq, target) in dead {
            if let Some(m) = queue.messages.remove(&seq) {
                change.delete(MESSAGES, message_key(name, seq));
                change.delete(DELIVERIES, message_key(name, seq));
                moved.push((m, target));
            }
        }
        for (m, target) in moved {
            let new_seq = state.next_seq;
            state.next_seq += 1;
            // The target exists: checked above, under the same lock.
            let Some(dlq) = state.queues.get_mut(&target) else {
                continue;
            };
            let mut stored = (*m.stored).clone();
            stored.source_arn = Some(source_arn.clone());
            stored.sequence = dlq.fifo().then_some(new_seq);
            // Its receive count (and first receive) go with it, as in AWS.
            let delivery = Delivery {
                visible_at_ms: now,
                receive_count: m.delivery.receive_count,
                first_receive_ms: m.delivery.first_receive_ms,
                receipt: None,
            };
            let key = message_key(&target, new_seq);
            change.put(MESSAGES, key.clone(), encode(&stored));
            change.put(DELIVERIES, key, encode(&delivery));
            dlq.messages.insert(new_seq, Message { stored: Arc::new(stored), delivery, committed: true });
            dlq.notify.notify_waiters();
        }
        Ok((got, change, next_ms))
    }

    /// Deletes received messages, one answer per handle, in one commit. A
    /// handle whose message is already gone succeeds, as in SQS.
    pub async fn delete_messages(&self, name: &str, handles: &[String]) -> Result<Vec<Result<(), SqsError>>, SqsError> {
        let mut answers = Vec::with_capacity(handles.len());
        let change = {
            let mut state = self.lock();
            let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
            let mut change = RecordChange::default();
            let mut unblocked = false;
            let (fifo, now) = (queue.fifo(), self.now_ms());
            for handle in handles {
                let answer = parse_receipt(name, handle).and_then(|(seq, nonce)| {
                    match queue.messages.get(&seq) {
                        // Not the latest receipt (the message came back and
                        // was received again, or the handle was made up):
                        // as SQS says, the call succeeds but the message
                        // may stay.
                        Some(m) if m.delivery.receipt.as_deref() != Some(nonce.as_str()) => Ok(()),
                        // A FIFO queue refuses a handle whose visibility
                        // ran out: the message is its group's again.
                        Some(m) if fifo && !m.in_flight(now) => Err(SqsError::receipt_expired()),
                        Some(m) => {
                            unblocked |= m.stored.group.is_some();
                            queue.messages.remove(&seq);
                            change.delete(MESSAGES, message_key(name, seq));
                            change.delete(DELIVERIES, message_key(name, seq));
                            Ok(())
                        }
                        None => Ok(()),
                    }
                });
                answers.push(answer);
            }
            if unblocked {
                queue.notify.notify_waiters();
            }
            change
        };
        self.store.commit(change).await.map_err(internal)?;
        Ok(answers)
    }

    /// Changes how long a received message stays invisible, counted from
    /// now.
    pub async fn change_visibility(&self, name: &str, handle: &str, timeout_s: i64) -> Result<(), SqsError> {
        let (change, notify) = {
            let mut state = self.lock();
            let queue = state.queues.get_mut(name).ok_or_else(SqsError::no_queue)?;
            let (seq, nonce) = parse_receipt(name, handle)?;
            let now = self.now_ms();
            let m = queue.messages.get_mut(&seq).ok_or_else(|| SqsError::message_gone(handle))?;
            // A stale handle (its visibility ran out, or the message was
            // received again since): AWS answers 200 and nothing changes.
            if !m.in_flight(now) || m.delivery.receipt.as_deref() != Some(nonce.as_str()) {
                return Ok(());
            }
            m.delivery.visible_at_ms = now + timeout_s * 1000;
            let mut change = RecordChange::default();
            change.put(DELIVERIES, message_key(name, seq), encode(&m.delivery));
            (change, queue.notify.clone())
        };
        self.store.commit(change).await.map_err(internal)?;
        if timeout_s == 0 {
            notify.notify_waiters();
        }
        Ok(())
    }
}

fn depth_of(queue: &Queue, now: i64) -> Depth {
    let mut depth = Depth::default();
    for m in queue.messages.values().filter(|m| m.committed) {
        depth.oldest_ms = Some(depth.oldest_ms.map_or(m.stored.sent_ms, |o| o.min(m.stored.sent_ms)));
        if m.in_flight(now) {
            depth.in_flight += 1;
        } else if m.delivery.visible_at_ms > now {
            depth.delayed += 1;
        } else {
            depth.visible += 1;
        }
    }
    depth
}

#[async_trait::async_trait]
impl QueueStore for Local {
    async fn list(&self, prefix: &str) -> Result<Vec<String>, SqsError> {
        Ok(Local::list(self, prefix))
    }

    async fn exists(&self, name: &str) -> Result<bool, SqsError> {
        Ok(Local::exists(self, name))
    }

    async fn create(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<bool, SqsError> {
        self.create_named(name, attributes, tags).await
    }

    async fn delete(&self, name: &str) -> Result<(), SqsError> {
        Local::delete(self, name).await
    }

    async fn purge(&self, name: &str) -> Result<(), SqsError> {
        Local::purge(self, name).await
    }

    async fn attributes(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        Local::attributes(self, name)
    }

    async fn depths(&self) -> Result<Vec<(String, Depth)>, SqsError> {
        Ok(Local::depths(self))
    }

    async fn set_attributes(&self, name: &str, attributes: BTreeMap<String, String>) -> Result<(), SqsError> {
        Local::set_attributes(self, name, attributes).await
    }

    async fn tags(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        Local::tags(self, name)
    }

    async fn retag(&self, name: &str, set: BTreeMap<String, String>, remove: &[String]) -> Result<(), SqsError> {
        Local::retag(self, name, set, remove).await
    }

    async fn queue_kind(&self, name: &str) -> Result<(bool, bool, i64), SqsError> {
        Local::queue_kind(self, name)
    }

    async fn send(&self, name: &str, messages: Vec<Outgoing>) -> Result<Vec<SendResult>, SqsError> {
        Local::send(self, name, messages).await
    }

    async fn receive(&self, name: &str, options: ReceiveOptions) -> Result<Vec<Received>, SqsError> {
        Local::receive(self, name, options).await
    }

    async fn delete_messages(&self, name: &str, handles: &[String]) -> Result<Vec<Result<(), SqsError>>, SqsError> {
        Local::delete_messages(self, name, handles).await
    }

    async fn change_visibility(&self, name: &str, handle: &str, timeout_s: i64) -> Result<(), SqsError> {
        Local::change_visibility(self, name, handle, timeout_s).await
    }

    /// The memory engine drops expired messages and entries as it meets them.
    async fn sweep(&self) -> Result<(), SqsError> {
        Ok(())
    }

    fn is_shared(&self) -> bool {
        false
    }
}

/// The queues, wherever they are kept (see the module's page).
pub struct Engine {
    queues: Box<dyn QueueStore>,
    pub identity: Identity,
    clock: Clock,
    receives: AtomicUsize,
}

/// Takes one from `count` when dropped (a receive that ended or was
/// cancelled with its connection).
fn decrement_on_drop(count: &AtomicUsize) -> impl Drop + '_ {
    struct Sub<'a>(&'a AtomicUsize);
    impl Drop for Sub<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    Sub(count)
}

impl Engine {
    /// The queues of the embedded store, loaded into memory. `clock` is
    /// where every window (delay, visibility, retention, deduplication)
    /// reads the time: the wall clock in the daemon, tokio's in tests.
    pub async fn open(store: Arc<dyn RecordStore>, identity: Identity, clock: Clock) -> Result<Arc<Self>, StoreError> {
        let local = Local::open(store, identity.clone(), clock).await?;
        Ok(Arc::new(Self { queues: Box::new(local), identity, clock, receives: AtomicUsize::new(0) }))
    }

    /// The queues in a shared store's tables, which every instance on that
    /// store serves.
    pub fn open_shared(db: SharedDb, identity: Identity, clock: Clock) -> Arc<Self> {
        Arc::new(Self {
            queues: Box::new(Shared::new(db, identity.clone(), clock)),
            identity,
            clock,
            receives: AtomicUsize::new(0),
        })
    }

    /// ReceiveMessage calls under way (long polls waiting, mostly): what a
    /// test waits on before sending to a poll it started.
    pub fn receives_in_progress(&self) -> usize {
        self.receives.load(Ordering::SeqCst)
    }

    /// "Now" on the engine's clock, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.clock.now().as_millis()
    }

    /// Whether other instances serve these queues too.
    pub fn is_shared(&self) -> bool {
        self.queues.is_shared()
    }

    /// Queue names, in order, starting with `prefix`.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, SqsError> {
        self.queues.list(prefix).await
    }

    pub async fn exists(&self, name: &str) -> Result<bool, SqsError> {
        self.queues.exists(name).await
    }

    /// Creates a queue, or finds the one of that name when its attributes
    /// are the same. Returns whether it was created.
    pub async fn create(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<bool, SqsError> {
        let (region, bare) = self.identity.split(name);
        if !crate::model::valid_queue_name(bare) || !crate::records::valid_region(region) {
            return Err(SqsError::bad_queue_name());
        }
        self.create_named(name, attributes, tags).await
    }

    async fn create_named(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<bool, SqsError> {
        self.queues.create(name, attributes, tags).await
    }

    /// A queue of ferry's own (a route's subscription to a topic): its
    /// name is one no API call can give or reach (see
    /// [`crate::model::is_internal`]). Created when missing.
    pub async fn declare_internal(&self, name: &str) -> Result<(), SqsError> {
        self.create_named(name, BTreeMap::new(), BTreeMap::new()).await.map(|_| ())
    }

    /// Declares a queue from config: created when missing, left as it is
    /// otherwise (the API may have changed its attributes since).
    pub async fn declare(&self, name: &str, attributes: BTreeMap<String, String>) -> Result<(), SqsError> {
        if self.exists(name).await? {
            return Ok(());
        }
        match self.create(name, attributes, BTreeMap::new()).await {
            // Another instance declared it meanwhile, perhaps changed.
            Err(e) if e.kind == ErrorKind::QueueAlreadyExists => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Deletes a queue and its messages.
    pub async fn delete(&self, name: &str) -> Result<(), SqsError> {
        self.queues.delete(name).await
    }

    /// Removes every message (at most once a minute, as SQS allows).
    pub async fn purge(&self, name: &str) -> Result<(), SqsError> {
        self.queues.purge(name).await
    }

    /// A queue's attributes: what was set, the defaults, and the computed
    /// ones.
    pub async fn attributes(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        self.queues.attributes(name).await
    }

    /// Depth of every queue (the metrics).
    pub async fn depths(&self) -> Result<Vec<(String, Depth)>, SqsError> {
        self.queues.depths().await
    }

    pub async fn set_attributes(&self, name: &str, attributes: BTreeMap<String, String>) -> Result<(), SqsError> {
        self.queues.set_attributes(name, attributes).await
    }

    pub async fn tags(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError> {
        self.queues.tags(name).await
    }

    /// Adds tags (`set`) and removes them (`remove`).
    pub async fn retag(&self, name: &str, set: BTreeMap<String, String>, remove: &[String]) -> Result<(), SqsError> {
        self.queues.retag(name, set, remove).await
    }

    /// Whether the queue is FIFO, whether it deduplicates by content, and
    /// its largest message.
    pub async fn queue_kind(&self, name: &str) -> Result<(bool, bool, i64), SqsError> {
        self.queues.queue_kind(name).await
    }

    /// Sends messages to one queue; each answer in the order given. The
    /// messages are on disk when this returns `Ok`.
    pub async fn send(&self, name: &str, messages: Vec<Outgoing>) -> Result<Vec<SendResult>, SqsError> {
        self.queues.send(name, messages).await
    }

    /// Receives up to `options.max` messages, waiting up to
    /// `options.wait` (else the queue's ReceiveMessageWaitTimeSeconds) for
    /// the first.
    pub async fn receive(&self, name: &str, options: ReceiveOptions) -> Result<Vec<Received>, SqsError> {
        // From here on a send to the queue reaches this call: it finds the
        // message on its first look, or the send wakes it.
        self.receives.fetch_add(1, Ordering::SeqCst);
        let _done = decrement_on_drop(&self.receives);
        self.queues.receive(name, options).await
    }

    /// Deletes received messages, one answer per handle. A handle whose
    /// message is already gone succeeds, as in SQS.
    pub async fn delete_messages(&self, name: &str, handles: &[String]) -> Result<Vec<Result<(), SqsError>>, SqsError> {
        self.queues.delete_messages(name, handles).await
    }

    /// Changes how long a received message stays invisible, counted from
    /// now.
    pub async fn change_visibility(&self, name: &str, handle: &str, timeout_s: i64) -> Result<(), SqsError> {
        if !(0..=43_200).contains(&timeout_s) {
            return Err(SqsError::invalid_value(
                "VisibilityTimeout",
                timeout_s,
                "must be between 0 and 43200, if provided",
            ));
        }
        self.queues.change_visibility(name, handle, timeout_s).await
    }

    /// Housekeeping between requests: a shared store's expired messages
    /// and deduplication entries go (the memory engine drops them as it
    /// meets them).
    pub async fn sweep(&self) -> Result<(), SqsError> {
        self.queues.sweep().await
    }
}
