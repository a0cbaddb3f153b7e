//! The writer thread: every change to the store is a request to it, and it
//! applies them in group commits.
//!
//! It takes the first waiting request, then every other request that is
//! already queued (up to [`MAX_GROUP`]), applies them all in one redb write
//! transaction, commits it with `Durability::Immediate` (on disk when
//! `commit` returns), and only then updates the in-memory index and answers
//! each caller. Requests that arrive while a commit runs wait for the next
//! one, which covers all of them: a busy store pays one commit per group,
//! not per message, and a completion rides the same commit as the persists
//! beside it.
//!
//! The thread is the store's only writer and no async worker ever waits on
//! it synchronously: callers await a oneshot answer. If a commit hangs, the
//! outbox stops, but nothing else does, and the watchdog sees it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_core::outbox::{LeaseToken, NewRecord, OutboxRecord, Persisted, StoreError};
use ferry_core::records::RecordChange;
use redb::{Database, ReadableDatabase, ReadableTable, Table, WriteTransaction};
use tokio::sync::{mpsc, oneshot};

use crate::health::{Op, Tracker};
use crate::index::{Effect, Index, Loaded};
use crate::layout::{
    DEAD_LETTERS, DEDUP, DEDUP_EXPIRY, DEPTHS, LEASES, META, NEXT_SEQ_KEY, PENDING, RECORDS, RECORDS_KV, decode,
    encode, io,
};

/// Requests applied in one commit at most.
pub const MAX_GROUP: usize = 4096;
/// Requests that may wait for the writer; callers wait for room beyond it.
pub const QUEUE: usize = 8192;
/// How often the writer removes expired duplicate keys, and how many at most
/// per commit (the rest wait for the next sweep).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Whether expired duplicate keys are swept now: a second after the last
/// sweep, or at once when the clock went back (set back by an operator or
/// NTP) by a second or more, so clean-up never waits for the clock to
/// catch up with a sweep time from its future.
fn sweep_due(swept_ms: Option<i64>, now_ms: i64) -> bool {
    swept_ms.is_none_or(|at| now_ms.saturating_sub(at).unsigned_abs() >= SWEEP_EVERY.as_millis() as u64)
}
const SWEEP_MAX: usize = 65_536;

/// A change to make.
pub enum Action {
    /// New records, created at the request's `now_ms`.
    Persist {
        records: Vec<NewRecord>,
    },
    AcquireLease {
        partition: String,
        owner: String,
    },
    Complete {
        partition: String,
        seq: u64,
        envelope_id: String,
        binding: String,
        address: String,
        version: u64,
        /// How long the duplicate key outlives the record.
        keep_key: Duration,
    },
    Reschedule {
        partition: String,
        seq: u64,
        version: u64,
        next_attempt_ms: i64,
        failed: bool,
        replay_count: u32,
    },
    PutDeadLetter {
        value: Vec<u8>,
    },
    RemoveDeadLetters {
        ids: Vec<u64>,
    },
    Records(RecordChange),
}

impl Action {
    pub fn op(&self) -> Op {
        match self {
            Action::Persist { .. } => Op::Persist,
            Action::AcquireLease { .. } => Op::AcquireLease,
            Action::Complete { .. } => Op::Complete,
            Action::Reschedule { failed: true, .. } => Op::Replay,
            Action::Reschedule { failed: false, .. } => Op::Release,
            Action::PutDeadLetter { .. } => Op::DeadLetterPut,
            Action::RemoveDeadLetters { .. } => Op::DeadLetterRemove,
            Action::Records(_) => Op::RecordWrite,
        }
    }
}

/// What a change answered.
#[derive(Debug)]
pub enum Answer {
    Persisted(Persisted),
    Lease(LeaseToken),
    Done,
    ReplayCount(u32),
    Removed(usize),
}

pub struct Request {
    pub action: Action,
    /// The caller's "now" (the store's clock), in Unix milliseconds: when a
    /// key's window starts, when a record first failed, when keys expire.
    pub now_ms: i64,
    pub reply: oneshot::Sender<Result<Answer, StoreError>>,
}

/// A fault to inject (tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The writer hangs for good on the first request of this kind, as a
    /// store that deadlocks inside itself would.
    Hang(Op),
    /// Every commit holding a request of this kind fails, as on a full or
    /// failing disk.
    Fail(Op),
}

pub struct Writer {
    pub db: Arc<Database>,
    pub index: Arc<Mutex<Index>>,
    pub tracker: Arc<Tracker>,
    pub next_seq: u64,
    pub fault: Option<Fault>,
    /// When expired duplicate keys were last removed (the store's clock,
    /// Unix milliseconds).
    pub swept_ms: Option<i64>,
}

struct Tables<'t> {
    meta: Table<'t, &'static str, u64>,
    records: Table<'t, (&'static str, u64), &'static [u8]>,
    dedup: Table<'t, (&'static str, &'static str, &'static str, &'static str), i64>,
    dedup_expiry: Table<'t, (i64, &'static str, &'static str, &'static str, &'static str), ()>,
    leases: Table<'t, &'static str, &'static [u8]>,
    dead_letters: Table<'t, u64, &'static [u8]>,
    depths: Table<'t, &'static str, u64>,
    records_kv: Table<'t, (&'static str, &'static str), &'static [u8]>,
    /// Records added (or removed) per partition by this transaction, added
    /// to `depths` before it commits.
    depth_delta: HashMap<String, i64>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            meta: txn.open_table(META).map_err(io)?,
            records: txn.open_table(RECORDS).map_err(io)?,
            dedup: txn.open_table(DEDUP).map_err(io)?,
            dedup_expiry: txn.open_table(DEDUP_EXPIRY).map_err(io)?,
            leases: txn.open_table(LEASES).map_err(io)?,
            dead_letters: txn.open_table(DEAD_LETTERS).map_err(io)?,
            depths: txn.open_table(DEPTHS).map_err(io)?,
            records_kv: txn.open_table(RECORDS_KV).map_err(io)?,
            depth_delta: HashMap::new(),
        })
    }

    /// Writes the depth changes of this transaction to `depths`.
    fn write_depths(&mut self) -> Result<(), StoreError> {
        for (partition, delta) in std::mem::take(&mut self.depth_delta) {
            let old = self.depths.get(partition.as_str()).map_err(io)?.map_or(0, |v| v.value());
            let new = old.saturating_add_signed(delta);
            if new == 0 {
                self.depths.remove(partition.as_str()).map_err(io)?;
            } else {
                self.depths.insert(partition.as_str(), new).map_err(io)?;
            }
        }
        Ok(())
    }

    fn lease_version(&self, partition: &str) -> Result<u64, StoreError> {
        match self.leases.get(partition).map_err(io)? {
            Some(v) => Ok(decode::<LeaseToken>(v.value())?.version),
            None => Ok(0),
        }
    }

    /// A logical refusal (not a storage failure) when `version` does not
    /// hold the partition's lease.
    fn check_lease(&self, partition: &str, version: u64) -> Result<Result<(), StoreError>, StoreError> {
        let current = self.lease_version(partition)?;
        if current == version {
            Ok(Ok(()))
        } else {
            Ok(Err(StoreError::StaleFencingToken { partition: partition.to_owned(), presented: version, current }))
        }
    }
}

impl Writer {
    /// Serves requests until every sender is gone.
    pub fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        while let Some(first) = requests.blocking_recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match requests.try_recv() {
                    Ok(r) => group.push(r),
                    Err(_) => break,
                }
            }
            self.commit_group(group);
        }
    }

    fn commit_group(&mut self, group: Vec<Request>) {
        let tracker = self.tracker.clone();
        let running = tracker.start(Op::Commit);
        let first_seq = self.next_seq;
        let now_ms = group.iter().map(|r| r.now_ms).max().unwrap_or_default();
        let (actions, replies): (Vec<(Action, i64)>, Vec<_>) =
            group.into_iter().map(|r| ((r.action, r.now_ms), r.reply)).unzip();
        let mut effects = Vec::new();
        match self.write(&actions, now_ms, &mut effects) {
            Ok(answers) => {
                {
                    let mut index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    for effect in effects {
                        index.apply(effect);
                    }
                }
                drop(running);
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                // Nothing of the group is on disk: every caller hears so.
                self.next_seq = first_seq;
                drop(running);
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Applies the actions in one transaction and commits it. The outer
    /// error is a storage failure that sinks the whole group; each inner
    /// result is one action's own answer.
    fn write(
        &mut self,
        actions: &[(Action, i64)],
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Vec<Result<Answer, StoreError>>, StoreError> {
        let mut txn = self.db.begin_write().map_err(io)?;
        txn.set_durability(redb::Durability::Immediate).map_err(io)?;
        let mut answers = Vec::with_capacity(actions.len());
        {
            let mut tables = Tables::open(&txn)?;
            let seq_before = self.next_seq;
            for (action, action_now_ms) in actions {
                if self.fault == Some(Fault::Hang(action.op())) {
                    hang();
                }
                if self.fault == Some(Fault::Fail(action.op())) {
                    return Err(io("injected failure"));
                }
                answers.push(self.apply(&mut tables, action, *action_now_ms, effects)?);
            }
            if self.next_seq != seq_before {
                tables.meta.insert(NEXT_SEQ_KEY, self.next_seq).map_err(io)?;
            }
            tables.write_depths()?;
            if sweep_due(self.swept_ms, now_ms) {
                self.swept_ms = Some(now_ms);
                sweep_expired_keys(&mut tables, now_ms)?;
            }
        }
        txn.commit().map_err(io)?;
        Ok(answers)
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    fn apply(
        &mut self,
        t: &mut Tables<'_>,
        action: &Action,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Result<Answer, StoreError>, StoreError> {
        match action {
            Action::Persist { records } => {
                let created_ms = &now_ms;
                let mut done = Persisted::default();
                for r in records {
                    let key = (r.partition.as_str(), r.envelope.id.as_str(), r.binding.as_str(), r.address.as_str());
                    let kept = t.dedup.get(key).map_err(io)?.map(|v| v.value());
                    match kept {
                        Some(until) if until > *created_ms => {
                            done.duplicates += 1;
                            continue;
                        }
                        // Past its window, not swept yet: the key is free.
                        Some(until) => {
                            t.dedup_expiry.remove((until, key.0, key.1, key.2, key.3)).map_err(io)?;
                        }
                        None => {}
                    }
                    let seq = self.take_seq();
                    let record = OutboxRecord::stored(r, seq, *created_ms);
                    t.records.insert((r.partition.as_str(), seq), encode(&record)?.as_slice()).map_err(io)?;
                    t.dedup.insert(key, PENDING).map_err(io)?;
                    *t.depth_delta.entry(r.partition.clone()).or_default() += 1;
                    effects.push(Effect::Insert { partition: r.partition.clone(), seq, created_ms: *created_ms });
                    done.stored += 1;
                }
                Ok(Ok(Answer::Persisted(done)))
            }
            Action::AcquireLease { partition, owner } => {
                let version = t.lease_version(partition)? + 1;
                let token = LeaseToken { owner: owner.clone(), version };
                t.leases.insert(partition.as_str(), encode(&token)?.as_slice()).map_err(io)?;
                effects.push(Effect::Lease { partition: partition.clone(), version });
                Ok(Ok(Answer::Lease(token)))
            }
            Action::Complete { partition, seq, envelope_id, binding, address, version, keep_key } => {
                if let Err(stale) = t.check_lease(partition, *version)? {
                    return Ok(Err(stale));
                }
                let existed = t.records.remove((partition.as_str(), *seq)).map_err(io)?.is_some();
                if existed {
                    *t.depth_delta.entry(partition.clone()).or_default() -= 1;
                    let key = (partition.as_str(), envelope_id.as_str(), binding.as_str(), address.as_str());
                    if keep_key.is_zero() {
                        t.dedup.remove(key).map_err(io)?;
                    } else {
                        let until = now_ms.saturating_add(keep_key.as_millis() as i64);
                        t.dedup.insert(key, until).map_err(io)?;
                        t.dedup_expiry.insert((until, key.0, key.1, key.2, key.3), ()).map_err(io)?;
                    }
                    effects.push(Effect::Remove { partition: partition.clone(), seq: *seq });
                }
                Ok(Ok(Answer::Done))
            }
            Action::Reschedule { partition, seq, version, next_attempt_ms, failed, replay_count } => {
                if let Err(stale) = t.check_lease(partition, *version)? {
                    return Ok(Err(stale));
                }
                let key = (partition.as_str(), *seq);
                let stored = t.records.get(key).map_err(io)?.map(|v| decode::<OutboxRecord>(v.value()));
                let Some(stored) = stored else {
                    // Completed meanwhile: nothing to put back.
                    return Ok(Ok(Answer::ReplayCount(*replay_count)));
                };
                let mut stored = stored?;
                if *failed {
                    stored.replay_count = stored.replay_count.saturating_add(1);
                    stored.first_failure_ms.get_or_insert(now_ms);
                }
                stored.next_attempt_ms = *next_attempt_ms;
                t.records.insert(key, encode(&stored)?.as_slice()).map_err(io)?;
                effects.push(Effect::Reschedule {
                    partition: partition.clone(),
                    seq: *seq,
                    next_attempt_ms: *next_attempt_ms,
                });
                Ok(Ok(Answer::ReplayCount(stored.replay_count)))
            }
            Action::PutDeadLetter { value } => {
                let id = self.take_seq();
                t.dead_letters.insert(id, value.as_slice()).map_err(io)?;
                Ok(Ok(Answer::Done))
            }
            Action::RemoveDeadLetters { ids } => {
                let mut removed = 0;
                for id in ids {
                    if t.dead_letters.remove(*id).map_err(io)?.is_some() {
                        removed += 1;
                    }
                }
                Ok(Ok(Answer::Removed(removed)))
            }
            Action::Records(change) => {
                for (space, key) in &change.deletes {
                    t.records_kv.remove((space.as_str(), key.as_str())).map_err(io)?;
                }
                for (space, key, value) in &change.puts {
                    t.records_kv.insert((space.as_str(), key.as_str()), value.as_slice()).map_err(io)?;
                }
                Ok(Ok(Answer::Done))
            }
        }
    }
}

/// Removes up to [`SWEEP_MAX`] duplicate keys whose window ended before
/// `now_ms`.
fn sweep_expired_keys(t: &mut Tables<'_>, now_ms: i64) -> Result<(), StoreError> {
    let mut expired = Vec::new();
    for item in t.dedup_expiry.range(..(now_ms, "", "", "", "")).map_err(io)?.take(SWEEP_MAX) {
        let (key, _) = item.map_err(io)?;
        let (until, p, id, b, a) = key.value();
        expired.push((until, p.to_owned(), id.to_owned(), b.to_owned(), a.to_owned()));
    }
    for (until, p, id, b, a) in &expired {
        t.dedup_expiry.remove((*until, p.as_str(), id.as_str(), b.as_str(), a.as_str())).map_err(io)?;
        let key = (p.as_str(), id.as_str(), b.as_str(), a.as_str());
        // A key persisted again since is pending (or kept anew): leave it.
        if t.dedup.get(key).map_err(io)?.is_some_and(|v| v.value() == *until) {
            t.dedup.remove(key).map_err(io)?;
        }
    }
    Ok(())
}

/// Blocks this thread for good (an injected fault).
pub fn hang() -> ! {
    loop {
        std::thread::park();
    }
}

/// Reads what the index needs from the file at open: each partition's
/// depth counter, lease version and oldest record's creation time — one
/// read per partition, however many records wait.
pub fn load_index(db: &Database) -> Result<Index, StoreError> {
    let txn = db.begin_read().map_err(io)?;
    let mut index = Index::default();
    let mut leases: HashMap<String, u64> = HashMap::new();
    for item in txn.open_table(LEASES).map_err(io)?.iter().map_err(io)? {
        let (key, value) = item.map_err(io)?;
        leases.insert(key.value().to_owned(), decode::<LeaseToken>(value.value())?.version);
    }
    let records = txn.open_table(RECORDS).map_err(io)?;
    for item in txn.open_table(DEPTHS).map_err(io)?.iter().map_err(io)? {
        let (key, value) = item.map_err(io)?;
        let partition = key.value();
        let oldest = match records.range((partition, 0)..=(partition, u64::MAX)).map_err(io)?.next() {
            Some(first) => Some(decode::<OutboxRecord>(first.map_err(io)?.1.value())?.created_ms),
            None => None,
        };
        index.load_partition(partition, value.value(), leases.remove(partition).unwrap_or(0), oldest);
    }
    for (partition, version) in leases {
        index.load_partition(&partition, 0, version, None);
    }
    Ok(index)
}

/// Up to `max` records of `partition` after seq `after`, oldest first, as
/// the window needs them; and whether the read reached the last one.
pub fn read_window(db: &Database, partition: &str, after: u64, max: usize) -> Result<(Vec<Loaded>, bool), StoreError> {
    let txn = db.begin_read().map_err(io)?;
    let records = txn.open_table(RECORDS).map_err(io)?;
    let mut out = Vec::with_capacity(max.min(1024));
    let mut range = records.range((partition, after.saturating_add(1))..=(partition, u64::MAX)).map_err(io)?;
    for item in range.by_ref() {
        let (key, value) = item.map_err(io)?;
        let record: OutboxRecord = decode(value.value())?;
        out.push((key.value().1, record.created_ms, record.next_attempt_ms));
        if out.len() >= max {
            return Ok((out, range.next().is_none()));
        }
    }
    Ok((out, true))
}

#[cfg(test)]
mod tests {
    use super::sweep_due;

    #[test]
    fn a_sweep_is_due_each_second_and_at_once_after_the_clock_went_back() {
        assert!(sweep_due(None, 0), "the first commit sweeps");
        assert!(!sweep_due(Some(10_000), 10_999));
        assert!(sweep_due(Some(10_000), 11_000));
        // Set back an hour: clean-up does not wait an hour for the clock.
        assert!(sweep_due(Some(3_600_000 + 10_000), 10_000));
        // A jitter under a second backwards waits like any other.
        assert!(!sweep_due(Some(10_000), 9_500));
    }
}
