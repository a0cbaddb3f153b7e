//! The watchdog: whether the daemon is stuck, for `/healthz`,
//! `ferry_stalled`, the log, and the report a shutdown that timed out
//! prints before the process exits.
//!
//! It looks at three things:
//! - the oldest store operation in flight (a commit or read that does not
//!   return: the disk, or the engine, is stuck);
//! - the async runtime's heartbeat, a task that ticks every 250 ms (a
//!   worker thread that is blocked, or a runtime that is frozen);
//! - each route's last progress while it has work (messages in flight or
//!   outbox records pending).
//!
//! The first two past `admin.stall_secs` make the daemon stalled: only a
//! restart can help, so `/healthz` answers 503 and a liveness probe
//! restarts it. A route that stopped moving is reported (in `/healthz`'s
//! body and the log) but does not fail the probe by itself: a target broker
//! that is down stops a route too, and restarting ferry would not help.
//!
//! The checks run on a thread of their own, so they go on when the runtime
//! does not; if the runtime is frozen, `/healthz` (served by it) does not
//! answer at all, which a probe also counts as a failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_core::metrics::Metrics;
use ferry_envelope::Timestamp;
use ferry_store::Store;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::runtime::readiness::SharedReadiness;

/// How often the runtime's heartbeat ticks and the watchdog looks.
const BEAT: Duration = Duration::from_millis(250);
const CHECK: Duration = Duration::from_secs(1);

/// What the watchdog found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub stalled: bool,
    /// Why, one line per cause.
    pub reasons: Vec<String>,
    /// The oldest store operation in flight: `{op, seconds, in_flight}`.
    pub store_oldest_op: Option<serde_json::Value>,
    /// Seconds since the runtime's heartbeat last ran.
    pub runtime_lag_seconds: f64,
    /// Routes that have work and have not moved for `stall_secs`.
    pub routes_not_moving: Vec<String>,
}

pub struct Watchdog {
    stall_after: Duration,
    store: Arc<dyn Store>,
    metrics: Metrics,
    readiness: SharedReadiness,
    started: Instant,
    /// Milliseconds after `started` of the last heartbeat.
    last_beat: AtomicU64,
    latest: Mutex<Report>,
}

impl Watchdog {
    pub fn new(stall_secs: u64, store: Arc<dyn Store>, metrics: Metrics, readiness: SharedReadiness) -> Arc<Self> {
        Arc::new(Self {
            stall_after: Duration::from_secs(stall_secs),
            store,
            metrics,
            readiness,
            started: Instant::now(),
            last_beat: AtomicU64::new(0),
            latest: Mutex::new(Report::default()),
        })
    }

    /// Starts the heartbeat task (on the runtime) and the checking thread
    /// (off it). Both end with `stop`.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) -> std::io::Result<()> {
        let beat = self.clone();
        let beat_stop = stop.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(BEAT);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = beat_stop.cancelled() => return,
                    _ = tick.tick() => beat.last_beat.store(beat.elapsed_ms(), Ordering::Relaxed),
                }
            }
        });
        let check = self.clone();
        std::thread::Builder::new().name("ferry-watchdog".into()).spawn(move || {
            let mut was_stalled = false;
            while !stop.is_cancelled() {
                std::thread::sleep(CHECK);
                let report = check.check();
                if report.stalled && !was_stalled {
                    error!(reasons = ?report.reasons, "ferry is stalled; /healthz answers 503");
                } else if !report.stalled && was_stalled {
                    info!("ferry is no longer stalled");
                }
                if !report.routes_not_moving.is_empty() && report.routes_not_moving != check.latest().routes_not_moving
                {
                    warn!(routes = ?report.routes_not_moving, "routes with work have not moved");
                }
                was_stalled = report.stalled;
                *check.latest.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = report;
            }
        })?;
        Ok(())
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The last report of the checking thread.
    pub fn latest(&self) -> Report {
        self.latest.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Looks now.
    pub fn check(&self) -> Report {
        let mut report = Report::default();
        if self.store.broken() {
            report.reasons.push("the store's writer thread stopped (a panic; see the log)".into());
        }
        if let Some(stuck) = self.store.oldest_operation() {
            if stuck.age >= self.stall_after {
                report.reasons.push(format!(
                    "store operation {} has run for {:.1} s ({} in flight)",
                    stuck.op,
                    stuck.age.as_secs_f64(),
                    stuck.in_flight
                ));
            }
            report.store_oldest_op = Some(serde_json::json!({
                "op": stuck.op, "seconds": stuck.age.as_secs_f64(), "in_flight": stuck.in_flight
            }));
        }
        let lag_ms = self.elapsed_ms().saturating_sub(self.last_beat.load(Ordering::Relaxed));
        let lag = Duration::from_millis(lag_ms).saturating_sub(BEAT);
        report.runtime_lag_seconds = lag.as_secs_f64();
        if lag >= self.stall_after {
            report.reasons.push(format!("the async runtime has not run its heartbeat for {:.1} s", lag.as_secs_f64()));
        }
        report.routes_not_moving = self.routes_not_moving();
        report.stalled = !report.reasons.is_empty();
        self.metrics.stalled.set(i64::from(report.stalled));
        report
    }

    fn routes_not_moving(&self) -> Vec<String> {
        let routes = match self.readiness.read() {
            Ok(r) => r.routes.clone(),
            Err(poisoned) => poisoned.into_inner().routes.clone(),
        };
        let stats = ferry_core::outbox::OutboxStore::stats(self.store.as_ref());
        let now = Timestamp::now().as_millis() as f64 / 1000.0;
        let m = &self.metrics;
        routes
            .into_iter()
            .filter(|route| {
                let prefix = format!("{route}/");
                let pending = stats.iter().any(|p| p.partition.starts_with(&prefix) && p.depth > 0);
                let labels = ferry_core::metrics::RouteLabels::new(route);
                let has_work = m.in_flight.get_or_create(&labels).get() > 0 || pending;
                let last = m.route_last_progress.get_or_create(&labels).get();
                // Never moved yet: measure from the watchdog's start.
                let since = if last > 0.0 { now - last } else { self.started.elapsed().as_secs_f64() };
                has_work && since >= self.stall_after.as_secs_f64()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::readiness::Readiness;
    use ferry_core::outbox::{NewRecord, OutboxStore};
    use ferry_store::{Fault, Op, RedbStore, StoreOptions};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_store_call_and_a_route_that_stopped_moving_are_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metrics = Metrics::new();
        let options = StoreOptions { fault: Some(Fault::Hang(Op::Persist)), ..Default::default() };
        let store = RedbStore::open(dir.path(), options).expect("open");
        let readiness: SharedReadiness = Arc::new(std::sync::RwLock::new(Readiness {
            transports: Vec::new(),
            routes: vec!["r".into(), "idle".into()],
            bindings: Vec::new(),
        }));
        let watchdog = Watchdog::new(1, store.clone(), metrics.clone(), readiness);
        let stop = CancellationToken::new();
        watchdog.start(stop.clone()).expect("start");
        assert!(!watchdog.check().stalled, "nothing is stuck yet");

        metrics.in_flight.get_or_create(&ferry_core::metrics::RouteLabels::new("r")).set(1);
        let hung = tokio::spawn({
            let store = store.clone();
            async move {
                let envelope = ferry_envelope::Envelope::new("m1", &b"x"[..]);
                let record = NewRecord {
                    partition: "r/b".into(),
                    route: "r".into(),
                    binding: "b".into(),
                    address: "a".into(),
                    envelope,
                };
                store.persist(vec![record]).await
            }
        });
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let report = watchdog.check();
        assert!(report.stalled, "{report:?}");
        assert!(report.reasons.iter().any(|r| r.contains("store operation persist")), "{report:?}");
        assert_eq!(report.routes_not_moving, vec!["r".to_owned()], "only the route with work is listed");
        assert_eq!(metrics.stalled.get(), 1);
        assert!(report.runtime_lag_seconds < 1.0, "the runtime itself is fine: {report:?}");
        hung.abort();
        stop.cancel();
    }
}
