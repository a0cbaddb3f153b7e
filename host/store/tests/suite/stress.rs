//! The outbox under load, as the hang of issue 13 needed it: a
//! `shared_outbox` route at full speed with 256 deliveries in flight,
//! fan-out to two bindings (so every message is two records), a drainer
//! per binding claiming, sending and completing concurrently, 1 % of sends
//! failing transiently (replays), and a `max_outbox_depth` that the flood
//! reaches (backpressure), all on the real store on disk.
//!
//! It fails when nothing moves for 10 s (the hang) or when any message is
//! not acknowledged at the source or not sent to both bindings. CI runs
//! 20,000 messages; `just chaos` runs 200,000 (`FERRY_STRESS_MESSAGES`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ferry_config::{DispatchMode, FailureAction, UnstableIdentity};
use ferry_core::TransportError;
use ferry_core::backoff::Backoff;
use ferry_core::dlq::DeadLetterStore;
use ferry_core::metrics::Metrics;
use ferry_core::outbox::OutboxStore;
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, OutboundMessage, Receiver, Sender};
use ferry_core::route::{Binding, Leasing, Mode, Outbox, Route, RoutePolicy};
use ferry_envelope::Envelope;
use ferry_store::{RedbStore, Store, StoreOptions};
use ferry_tests::pg;
use tokio_util::sync::CancellationToken;

const IN_FLIGHT: usize = 256;
const NO_PROGRESS_LIMIT: Duration = Duration::from_secs(10);

fn messages() -> usize {
    std::env::var("FERRY_STRESS_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// Per message: how many times the source saw it acknowledged or released.
struct SourceLog {
    acked: Vec<AtomicU8>,
    acks: AtomicUsize,
    releases: AtomicUsize,
}

struct Handle {
    index: usize,
    log: Arc<SourceLog>,
}

#[async_trait]
impl DeliveryHandle for Handle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.log.acked[self.index].fetch_add(1, Ordering::Relaxed);
        self.log.acks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    async fn release(self: Box<Self>, _after: Duration, _reason: &str) -> Result<(), TransportError> {
        self.log.releases.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Emits `n` 1 KiB messages as fast as the route takes them.
struct FloodReceiver {
    n: usize,
    log: Arc<SourceLog>,
}

#[async_trait]
impl Receiver for FloodReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let payload = bytes::Bytes::from(vec![b'x'; 1024]);
        for index in 0..self.n {
            let envelope = Envelope::new(format!("m-{index}"), payload.clone());
            let handle = Box::new(Handle { index, log: self.log.clone() });
            if sink.send(Delivery::new(envelope, handle)).await.is_err() {
                break;
            }
        }
        shutdown.cancelled().await;
        Ok(())
    }
}

/// Records what arrived; every hundredth attempt fails transiently.
struct CountingSender {
    seen: Vec<AtomicU8>,
    sends: AtomicUsize,
    attempts: AtomicUsize,
}

#[async_trait]
impl Sender for CountingSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        if self.attempts.fetch_add(1, Ordering::Relaxed) % 100 == 99 {
            return Err(TransportError::transient("injected transient failure"));
        }
        let index: usize =
            msg.envelope.id.trim_start_matches("m-").parse().map_err(|e| TransportError::permanent(format!("{e}")))?;
        self.seen[index].fetch_add(1, Ordering::Relaxed);
        self.sends.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
        Ok(())
    }
}

fn counters(n: usize) -> Vec<AtomicU8> {
    (0..n).map(|_| AtomicU8::new(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_outbox_fan_out_under_full_load_loses_nothing_and_never_stalls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metrics = Metrics::new();
    let options = StoreOptions { op_seconds: Some(metrics.store_op_seconds.clone()), ..Default::default() };
    let store = RedbStore::open(dir.path(), options).expect("open the store");
    flood(store, metrics, messages(), 1).await;
}

/// The same on PostgreSQL, with four partitions per binding (four drainers
/// each, on leases of their own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_outbox_on_postgres_under_full_load_loses_nothing_and_never_stalls() {
    let db = pg::TestDb::new().await;
    let metrics = Metrics::new();
    let options =
        StoreOptions { op_seconds: Some(metrics.store_op_seconds.clone()), listen: true, ..Default::default() };
    let store = ferry_store::postgres::PgStore::open(&db.url, 8, options).await.expect("open the store");
    flood(store, metrics, messages() / 4, 4).await;
    db.drop().await;
}

/// Total pending records of a binding over its partitions.
fn depth(store: &dyn Store, binding: &str) -> u64 {
    store.stats().iter().filter(|p| p.partition.starts_with(&format!("stress/{binding}"))).map(|p| p.depth).sum()
}

async fn flood(store: Arc<dyn Store>, metrics: Metrics, n: usize, partitions: u32) {
    let log = Arc::new(SourceLog { acked: counters(n), acks: AtomicUsize::new(0), releases: AtomicUsize::new(0) });
    let senders: Vec<Arc<CountingSender>> = (0..2)
        .map(|_| {
            Arc::new(CountingSender { seen: counters(n), sends: AtomicUsize::new(0), attempts: AtomicUsize::new(0) })
        })
        .collect();
    let bindings = senders
        .iter()
        .enumerate()
        .map(|(i, s)| Binding {
            id: format!("b{i}"),
            sender: s.clone(),
            address: format!("out-{i}"),
            header_mapper: None,
            meters: Default::default(),
            availability: Default::default(),
        })
        .collect();
    let route = Arc::new(Route {
        id: "stress".into(),
        source_id: "flood".into(),
        receiver: Arc::new(FloodReceiver { n, log: log.clone() }),
        processors: Vec::new().into(),
        bindings,
        policy: RoutePolicy {
            max_in_flight: IN_FLIGHT,
            backoff: Backoff {
                initial: Duration::from_millis(5),
                max: Duration::from_millis(50),
                multiplier: 2.0,
                jitter: 0.2,
            },
            dispatch_mode: DispatchMode::FanOut,
            on_expired: FailureAction::Dlq,
            on_permanent_failure: FailureAction::Dlq,
            max_replay_attempts: 50,
            max_outage: None,
            trust_bridge_headers: false,
            max_hops: 8,
            dedup_window: Duration::from_secs(300),
            max_outbox_depth: 5_000,
            outbox_partitions: partitions,
            unstable_identity: UnstableIdentity::CountContent,
        },
        dlq: store.clone() as Arc<dyn DeadLetterStore>,
        mode: Mode::SharedOutbox(Outbox::new(
            store.clone() as Arc<dyn OutboxStore>,
            Leasing::new("stress", Duration::from_secs(15)),
        )),
        metrics: metrics.clone(),
        clock: ferry_core::clock::Clock::System,
        meters: Default::default(),
        memory: Default::default(),
        gate: Default::default(),
    });
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(route.clone().run(shutdown.clone()));

    let sent = |i: usize| senders[i].sends.load(Ordering::Relaxed);
    let progress = || log.acks.load(Ordering::Relaxed) + sent(0) + sent(1);
    let done = || log.acks.load(Ordering::Relaxed) >= n && sent(0) >= n && sent(1) >= n;
    let started = Instant::now();
    let (mut last, mut last_move) = (0, Instant::now());
    while !done() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = progress();
        if now != last {
            (last, last_move) = (now, Instant::now());
        } else if last_move.elapsed() >= NO_PROGRESS_LIMIT {
            panic!(
                "no progress for {:?}: {} of {n} acknowledged, {} and {} sent, depths {} and {}, oldest store op {:?}",
                NO_PROGRESS_LIMIT,
                log.acks.load(Ordering::Relaxed),
                sent(0),
                sent(1),
                depth(store.as_ref(), "b0"),
                depth(store.as_ref(), "b1"),
                store.oldest_operation(),
            );
        }
    }
    let elapsed = started.elapsed();
    // Completions land after the sends they follow: wait for both
    // partitions to empty before stopping.
    ferry_tests::eventually("both partitions empty", || {
        let depths = (depth(store.as_ref(), "b0"), depth(store.as_ref(), "b1"));
        if depths == (0, 0) { Ok(()) } else { Err(depths) }
    })
    .await;
    shutdown.cancel();
    task.await.expect("join").expect("route");

    let unacked: Vec<usize> = (0..n).filter(|i| log.acked[*i].load(Ordering::Relaxed) == 0).collect();
    assert!(
        unacked.is_empty(),
        "{} messages never acknowledged, e.g. {:?}",
        unacked.len(),
        &unacked[..5.min(unacked.len())]
    );
    assert_eq!(log.releases.load(Ordering::Relaxed), 0, "the store never refused a persist");
    for (b, sender) in senders.iter().enumerate() {
        let missing: Vec<usize> = (0..n).filter(|i| sender.seen[*i].load(Ordering::Relaxed) == 0).collect();
        assert!(
            missing.is_empty(),
            "binding b{b} never got {} messages, e.g. {:?}",
            missing.len(),
            &missing[..5.min(missing.len())]
        );
        let twice = (0..n).filter(|i| sender.seen[*i].load(Ordering::Relaxed) > 1).count();
        assert_eq!(twice, 0, "binding b{b}: without a crash nothing is sent twice");
    }
    assert_eq!((depth(store.as_ref(), "b0"), depth(store.as_ref(), "b1")), (0, 0), "every record completed");
    assert_eq!(
        store.dead_letter_count().await.expect("count"),
        0,
        "transient failures were replayed, not dead-lettered"
    );
    let rendered = metrics.render();
    assert!(rendered.contains("ferry_store_op_seconds_count{op=\"persist\"}"), "store timings are recorded");
    eprintln!(
        "stress ({}): {n} messages x 2 bindings in {:.1} s ({:.0} msgs/s), {} + {} send attempts",
        store.kind(),
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        senders[0].attempts.load(Ordering::Relaxed),
        senders[1].attempts.load(Ordering::Relaxed),
    );
}
