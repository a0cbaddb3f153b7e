//! What the watchdog reads: every store operation in flight with its start
//! time, and the time each finished one took.
//!
//! An operation counts as in flight from the moment a caller asks until it
//! has its answer; the writer thread also says when it started its current
//! commit, so a commit that hangs is seen even when every caller has given
//! up waiting.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferry_core::metrics::HistogramFamily;
use prometheus_client::metrics::histogram::Histogram;

/// The store operations, as `ferry_store_op_seconds{op}` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Persist,
    AcquireLease,
    Claim,
    Complete,
    Replay,
    Release,
    DeadLetterPut,
    DeadLetterRemove,
    DeadLetterRead,
    /// A change to the keyed records (the SQS endpoint).
    RecordWrite,
    /// A read of the keyed records.
    RecordRead,
    /// One group commit on the writer thread.
    Commit,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::Persist,
        Op::AcquireLease,
        Op::Claim,
        Op::Complete,
        Op::Replay,
        Op::Release,
        Op::DeadLetterPut,
        Op::DeadLetterRemove,
        Op::DeadLetterRead,
        Op::RecordWrite,
        Op::RecordRead,
        Op::Commit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Persist => "persist",
            Op::AcquireLease => "acquire_lease",
            Op::Claim => "claim",
            Op::Complete => "complete",
            Op::Replay => "replay",
            Op::Release => "release",
            Op::DeadLetterPut => "dead_letter_put",
            Op::DeadLetterRemove => "dead_letter_remove",
            Op::DeadLetterRead => "dead_letter_read",
            Op::RecordWrite => "record_write",
            Op::RecordRead => "record_read",
            Op::Commit => "commit",
        }
    }
}

/// The oldest operation still running.
#[derive(Debug, Clone, PartialEq)]
pub struct Stuck {
    pub op: &'static str,
    pub age: Duration,
    /// Operations in flight in all.
    pub in_flight: usize,
}

pub struct Tracker {
    next: AtomicU64,
    running: Mutex<HashMap<u64, (Op, Instant)>>,
    /// Per-op histograms, resolved once (`None` without metrics).
    timers: Option<HashMap<Op, Histogram>>,
}

impl Tracker {
    pub fn new(family: Option<&HistogramFamily>) -> Self {
        let timers = family.map(|f| {
            Op::ALL
                .iter()
                .map(|op| (*op, f.get_or_create(&ferry_core::metrics::labels(&[("op", op.name())])).clone()))
                .collect()
        });
        Self { next: AtomicU64::new(1), running: Mutex::new(HashMap::new()), timers }
    }

    /// Registers an operation until the guard is dropped.
    pub fn start(&self, op: Op) -> Running<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, (op, started));
        Running { tracker: self, id, op, started }
    }

    pub fn oldest(&self) -> Option<Stuck> {
        let running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let in_flight = running.len();
        running.values().min_by_key(|(_, started)| *started).map(|(op, started)| Stuck {
            op: op.name(),
            age: started.elapsed(),
            in_flight,
        })
    }
}

/// An operation in flight; dropping it records its time.
pub struct Running<'a> {
    tracker: &'a Tracker,
    id: u64,
    op: Op,
    started: Instant,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.tracker.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.id);
        if let Some(h) = self.tracker.timers.as_ref().and_then(|t| t.get(&self.op)) {
            h.observe(self.started.elapsed().as_secs_f64());
        }
    }
}
