//! Route runtime tests with in-memory fakes for the transports.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use ferry_envelope::HeaderValue;

use super::*;
use crate::dlq::DeadLetter;
use crate::ports::{DeliverySink, HeaderMapper, OutboundMessage, Processor, Sender};

#[derive(Debug, Clone, PartialEq)]
enum Settled {
    Acked(String),
    Rejected(String),
    Released(String),
}

type Log = Arc<Mutex<Vec<Settled>>>;

struct FakeHandle {
    id: String,
    log: Log,
    /// Redeliveries so far, for sources that count them.
    count: Option<u32>,
    /// When the source takes the delivery back on its own.
    gone_at: Option<tokio::time::Instant>,
}

#[async_trait]
impl DeliveryHandle for FakeHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.log.lock().expect("lock").push(Settled::Acked(self.id.clone()));
        Ok(())
    }
    async fn release(self: Box<Self>, _after: Duration, _reason: &str) -> Result<(), TransportError> {
        self.log.lock().expect("lock").push(Settled::Released(self.id.clone()));
        Ok(())
    }
    async fn reject(self: Box<Self>, _reason: &str) -> Result<(), TransportError> {
        self.log.lock().expect("lock").push(Settled::Rejected(self.id.clone()));
        Ok(())
    }
    fn redelivery_count(&self) -> Option<u32> {
        self.count
    }
    fn gone(&self) -> Option<bool> {
        self.gone_at.map(|at| tokio::time::Instant::now() >= at)
    }
}

/// Emits the given envelopes once, then waits for shutdown.
struct FakeReceiver {
    envelopes: Mutex<Vec<Envelope>>,
    log: Log,
}

#[async_trait]
impl Receiver for FakeReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let envelopes = std::mem::take(&mut *self.envelopes.lock().expect("lock"));
        for envelope in envelopes {
            let count = envelope.headers.get("test.count").and_then(|v| match v {
                ferry_envelope::HeaderValue::Integer(n) => u32::try_from(*n).ok(),
                _ => None,
            });
            let gone_at = envelope.headers.get("test.gone-after-ms").and_then(|v| match v {
                ferry_envelope::HeaderValue::Integer(ms) => {
                    Some(tokio::time::Instant::now() + Duration::from_millis(u64::try_from(*ms).ok()?))
                }
                _ => None,
            });
            let handle = Box::new(FakeHandle { id: envelope.id.clone(), log: self.log.clone(), count, gone_at });
            if sink.send(Delivery::new(envelope, handle)).await.is_err() {
                break;
            }
        }
        shutdown.cancelled().await;
        Ok(())
    }
}

/// Records sends; fails according to a script of results, then succeeds.
#[derive(Default)]
struct FakeSender {
    sent: Mutex<Vec<OutboundMessage>>,
    script: Mutex<VecDeque<Result<(), TransportError>>>,
    attempts: AtomicUsize,
}

#[async_trait]
impl Sender for FakeSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let next = self.script.lock().expect("lock").pop_front().unwrap_or(Ok(()));
        if next.is_ok() {
            self.sent.lock().expect("lock").push(msg);
        }
        next
    }
}

#[derive(Default)]
struct MemoryDlq {
    entries: Mutex<Vec<DeadLetter>>,
}

#[async_trait]
impl DeadLetterStore for MemoryDlq {
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()> {
        self.entries.lock().expect("lock").push(entry);
        Ok(())
    }
}

struct FixedProcessor(Result<Verdict, ProcessError>);

#[async_trait]
impl Processor for FixedProcessor {
    fn name(&self) -> &str {
        "fixed"
    }
    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        (envelope, self.0.clone())
    }
}

struct Harness {
    route: Arc<Route>,
    log: Log,
    senders: Vec<Arc<FakeSender>>,
    dlq: Arc<MemoryDlq>,
}

fn policy() -> RoutePolicy {
    RoutePolicy {
        max_in_flight: 4,
        backoff: Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(50),
            multiplier: 2.0,
            jitter: 0.0,
        },
        dispatch_mode: DispatchMode::Single,
        on_expired: FailureAction::Drop,
        on_permanent_failure: FailureAction::Dlq,
        max_replay_attempts: 5,
        max_outage: None,
        trust_bridge_headers: false,
        max_hops: 8,
        dedup_window: Duration::from_secs(300),
        max_outbox_depth: 10_000,
        outbox_partitions: 1,
        unstable_identity: UnstableIdentity::CountContent,
    }
}

fn harness(
    envelopes: Vec<Envelope>,
    processors: Vec<SharedProcessor>,
    n_bindings: usize,
    policy: RoutePolicy,
) -> Harness {
    let log: Log = Arc::default();
    let senders: Vec<Arc<FakeSender>> = (0..n_bindings).map(|_| Arc::new(FakeSender::default())).collect();
    let bindings = senders
        .iter()
        .enumerate()
        .map(|(i, s)| Binding {
            id: format!("b{i}"),
            sender: s.clone(),
            address: format!("out/{i}"),
            header_mapper: None,
            meters: Default::default(),
            availability: Default::default(),
        })
        .collect();
    let dlq = Arc::new(MemoryDlq::default());
    let route = Arc::new(Route {
        id: "r1".into(),
        source_id: "in".into(),
        receiver: Arc::new(FakeReceiver { envelopes: Mutex::new(envelopes), log: log.clone() }),
        processors: processors.into(),
        bindings,
        policy,
        dlq: dlq.clone(),
        mode: Mode::DirectHold,
        metrics: Metrics::new(),
        clock: crate::clock::Clock::tokio(),
        meters: Default::default(),
        memory: Default::default(),
        gate: Default::default(),
    });
    Harness { route, log, senders, dlq }
}

/// Runs the route until `n` deliveries settled, then shuts it down.
async fn run_until_settled(h: &Harness, n: usize) {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(h.route.clone().run(shutdown.clone()));
    for _ in 0..2000 {
        if h.log.lock().expect("lock").len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    task.await.expect("join").expect("route result");
}

fn env(id: &str) -> Envelope {
    let mut e = Envelope::new(id, &b"{}"[..]);
    e.subject = Some("order.created".into());
    e
}

#[tokio::test(start_paused = true)]
async fn direct_hold_acks_only_after_the_send_and_keeps_the_subject() {
    let h = harness(vec![env("m1")], vec![], 1, policy());
    run_until_settled(&h, 1).await;
    let sent = h.senders[0].sent.lock().expect("lock").clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].address, "out/0");
    assert_eq!(sent[0].envelope.subject.as_deref(), Some("order.created"));
    assert_eq!(sent[0].envelope.text_header("x-bridge.route-id"), Some("r1"));
    assert_eq!(sent[0].envelope.text_header("x-bridge.source-id"), Some("in"));
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
    let text = h.route.metrics.render();
    assert!(text.contains("ferry_delivery_latency_seconds_count{route=\"r1\"} 1"), "{text}");
    assert!(text.contains("ferry_message_age_at_egress_seconds_count{route=\"r1\",binding=\"b0\"} 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn transient_send_failures_are_retried_before_the_ack() {
    let h = harness(vec![env("m1")], vec![], 1, policy());
    h.senders[0]
        .script
        .lock()
        .expect("lock")
        .extend([Err(TransportError::transient("broker down")), Err(TransportError::transient("broker down"))]);
    run_until_settled(&h, 1).await;
    assert_eq!(h.senders[0].attempts.load(Ordering::SeqCst), 3);
    assert_eq!(h.senders[0].sent.lock().expect("lock").len(), 1);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
    assert_eq!(h.route.metrics.retried.get_or_create(&ReasonLabels::new("r1", "send")).get(), 2);
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_retry_releases_instead_of_acking() {
    let mut p = policy();
    p.backoff.initial = Duration::from_secs(60);
    p.backoff.max = Duration::from_secs(60);
    let h = harness(vec![env("m1")], vec![], 1, p);
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("broker down")));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(h.route.clone().run(shutdown.clone()));
    for _ in 0..400 {
        if h.senders[0].attempts.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    task.await.expect("join").expect("route");
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("m1".into())]);
}

#[tokio::test(start_paused = true)]
async fn permanent_failure_dead_letters_with_binding_and_address_then_acks() {
    let h = harness(vec![env("m1")], vec![], 1, policy());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::permanent("topic too long")));
    run_until_settled(&h, 1).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].binding.as_deref(), Some("b0"));
    assert_eq!(dlq[0].address.as_deref(), Some("out/0"));
    assert_eq!(dlq[0].envelope.subject.as_deref(), Some("order.created"));
    assert_eq!(dlq[0].reason, FailureReason::SendRejected);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
}

#[tokio::test(start_paused = true)]
async fn processor_drop_acks_without_sending_or_dead_lettering() {
    let drop: SharedProcessor = Arc::new(FixedProcessor(Ok(Verdict::Drop("not temp".into()))));
    let h = harness(vec![env("m1")], vec![drop], 1, policy());
    run_until_settled(&h, 1).await;
    assert!(h.senders[0].sent.lock().expect("lock").is_empty());
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
    assert_eq!(h.route.metrics.dropped.get_or_create(&ReasonLabels::new("r1", "filtered")).get(), 1);
}

#[tokio::test(start_paused = true)]
async fn processor_reject_goes_to_the_dlq_with_its_reason_code() {
    let reject: SharedProcessor =
        Arc::new(FixedProcessor(Err(ProcessError::Reject(Failure::new(FailureReason::PluginTrap, "boom")))));
    let h = harness(vec![env("m1")], vec![reject], 1, policy());
    run_until_settled(&h, 1).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].reason, FailureReason::PluginTrap);
    assert!(dlq[0].binding.is_none());
}

#[tokio::test(start_paused = true)]
async fn routed_addresses_replace_binding_addresses_but_not_the_subject() {
    let route: SharedProcessor = Arc::new(FixedProcessor(Ok(Verdict::Route(vec!["a/1".into(), "a/2".into()]))));
    let mut p = policy();
    p.dispatch_mode = DispatchMode::FanOut;
    let h = harness(vec![env("m1")], vec![route], 2, p);
    run_until_settled(&h, 1).await;
    for s in &h.senders {
        let sent = s.sent.lock().expect("lock").clone();
        let addrs: Vec<_> = sent.iter().map(|m| m.address.as_str()).collect();
        assert_eq!(addrs, ["a/1", "a/2"]);
        assert!(sent.iter().all(|m| m.envelope.subject.as_deref() == Some("order.created")));
    }
}

#[tokio::test(start_paused = true)]
async fn fan_out_retries_only_the_binding_that_failed() {
    let mut p = policy();
    p.dispatch_mode = DispatchMode::FanOut;
    let h = harness(vec![env("m1")], vec![], 2, p);
    h.senders[1].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    assert_eq!(h.senders[0].attempts.load(Ordering::SeqCst), 1);
    assert_eq!(h.senders[1].attempts.load(Ordering::SeqCst), 2);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
}

/// A delivery of `id` from a source that counts redeliveries, `count`
/// times delivered before.
fn redelivered(id: &str, count: i64) -> Envelope {
    let mut e = env(id);
    e.set_header("test.count", HeaderValue::Integer(count));
    e
}

#[tokio::test(start_paused = true)]
async fn a_fan_out_redelivery_goes_only_to_the_bindings_that_did_not_take_it() {
    let mut p = policy();
    p.dispatch_mode = DispatchMode::FanOut;
    p.max_in_flight = 1;
    let h = harness(vec![redelivered("m1", 0), redelivered("m1", 1)], vec![], 2, p);
    h.senders[1].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 2).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("m1".into()), Settled::Acked("m1".into())]);
    assert_eq!(h.senders[0].sent.lock().expect("lock").len(), 1, "the binding that took it gets no duplicate");
    assert_eq!(h.senders[1].sent.lock().expect("lock").len(), 1);
    let skipped = h.route.metrics.fanout_skipped.get_or_create(&crate::metrics::labels(&[("route", "r1")])).get();
    assert_eq!(skipped, 1);
    assert!(h.route.memory.is_empty(), "forgotten once settled");
}

#[tokio::test(start_paused = true)]
async fn a_redelivery_the_route_cannot_recognise_goes_to_every_binding_and_is_counted() {
    let mut p = policy();
    p.dispatch_mode = DispatchMode::FanOut;
    let mut e = redelivered("minted", 1);
    e.derive_header(ferry_envelope::names::GENERATED_ID, HeaderValue::Boolean(true));
    let h = harness(vec![e], vec![], 2, p);
    run_until_settled(&h, 1).await;
    let resent = h.route.metrics.fanout_resent.get_or_create(&crate::metrics::labels(&[("route", "r1")])).get();
    assert_eq!(resent, 2, "both copies may duplicate an earlier delivery's");
}

#[tokio::test(start_paused = true)]
async fn a_source_that_retries_in_process_has_a_replay_budget() {
    let mut p = policy();
    p.max_replay_attempts = 3;
    let h = harness(vec![env("held")], vec![], 1, p);
    for _ in 0..100 {
        h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    }
    run_until_settled(&h, 1).await;
    assert_eq!(h.senders[0].attempts.load(Ordering::SeqCst), 4, "the first attempt and three replays");
    let dlq = h.dlq.entries.lock().expect("lock");
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].reason, FailureReason::ReplayExhausted);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("held".into())], "dead-lettered, then acknowledged");
}

#[tokio::test(start_paused = true)]
async fn an_outage_delays_a_held_message_without_spending_its_budget() {
    let mut p = policy();
    p.max_replay_attempts = 2;
    let h = harness(vec![env("waits")], vec![], 1, p);
    for _ in 0..20 {
        h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::unavailable("not connected")));
    }
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("refused once")));
    run_until_settled(&h, 1).await;
    assert_eq!(h.senders[0].sent.lock().expect("lock").len(), 1, "delivered once the target was back");
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("waits".into())]);
}

#[tokio::test(start_paused = true)]
async fn single_dispatch_uses_only_the_first_binding() {
    let h = harness(vec![env("m1")], vec![], 2, policy());
    run_until_settled(&h, 1).await;
    assert_eq!(h.senders[0].sent.lock().expect("lock").len(), 1);
    assert!(h.senders[1].sent.lock().expect("lock").is_empty());
}

#[tokio::test(start_paused = true)]
async fn expired_messages_follow_on_expired() {
    let mut expired = env("old");
    expired.expires_at = Some(Timestamp(1));
    let mut p = policy();
    p.on_expired = FailureAction::Dlq;
    let h = harness(vec![expired.clone()], vec![], 1, p);
    run_until_settled(&h, 1).await;
    assert!(h.senders[0].sent.lock().expect("lock").is_empty());
    assert_eq!(h.dlq.entries.lock().expect("lock")[0].reason, FailureReason::Expired);

    let h = harness(vec![expired], vec![], 1, policy());
    run_until_settled(&h, 1).await;
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
    assert_eq!(h.route.metrics.dropped.get_or_create(&ReasonLabels::new("r1", "expired")).get(), 1);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Rejected("old".into())], "dropped = refused at the source");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_permanent_failure_rejects_the_source_only_when_no_binding_got_it() {
    let mut p = policy();
    p.on_permanent_failure = FailureAction::Drop;
    p.dispatch_mode = DispatchMode::FanOut;
    let h = harness(vec![env("some")], vec![], 2, p.clone());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::permanent("no route")));
    run_until_settled(&h, 1).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("some".into())], "the other binding has it");

    let h = harness(vec![env("none")], vec![], 2, p);
    for s in &h.senders {
        s.script.lock().expect("lock").push_back(Err(TransportError::permanent("no route")));
    }
    run_until_settled(&h, 1).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Rejected("none".into())]);
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
}

#[tokio::test(start_paused = true)]
async fn spoofed_reserved_headers_never_reach_the_sender() {
    let mut e = env("m1");
    e.set_header("x-bridge.tenant-id", "spoof");
    e.set_header("n", HeaderValue::Integer(3));
    let h = harness(vec![e], vec![], 1, policy());
    run_until_settled(&h, 1).await;
    let sent = h.senders[0].sent.lock().expect("lock").clone();
    assert!(!sent[0].envelope.headers.contains_key("x-bridge.tenant-id"));
    assert_eq!(sent[0].envelope.headers.get("n"), Some(&HeaderValue::Integer(3)));
    assert!(sent[0].envelope.headers.contains_key("x-bridge.correlation-id"));
}

#[tokio::test(start_paused = true)]
async fn max_in_flight_bounds_concurrent_handling() {
    struct Slow {
        now: AtomicUsize,
        peak: AtomicUsize,
    }
    #[async_trait]
    impl Processor for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        async fn process(&self, e: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            (e, Ok(Verdict::Pass))
        }
    }
    let slow = Arc::new(Slow { now: AtomicUsize::new(0), peak: AtomicUsize::new(0) });
    let envs = (0..20).map(|i| env(&format!("m{i}"))).collect();
    let h = harness(envs, vec![slow.clone()], 1, policy());
    run_until_settled(&h, 20).await;
    assert_eq!(h.log.lock().expect("lock").len(), 20);
    let peak = slow.peak.load(Ordering::SeqCst);
    assert!((2..=4).contains(&peak), "peak {peak}");
}

#[tokio::test(start_paused = true)]
async fn a_message_that_expires_while_waiting_to_retry_follows_on_expired() {
    let mut e = env("m1");
    e.expires_at = Some(Timestamp::now().plus(Duration::from_millis(150)));
    let mut p = policy();
    p.on_expired = FailureAction::Dlq;
    let h = harness(vec![e], vec![], 1, p);
    h.senders[0].script.lock().expect("lock").extend((0..100).map(|_| Err(TransportError::transient("down"))));
    run_until_settled(&h, 1).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].reason, FailureReason::Expired);
    assert_eq!(dlq[0].binding.as_deref(), Some("b0"));
    assert!(h.senders[0].sent.lock().expect("lock").is_empty());
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
}

#[tokio::test(start_paused = true)]
async fn a_counted_source_gets_the_message_back_until_max_replay_attempts_then_dlq() {
    let mut first = env("m1");
    first.set_header("test.count", HeaderValue::Integer(1));
    let h = harness(vec![first], vec![], 1, policy());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("m1".into())]);
    assert!(h.dlq.entries.lock().expect("lock").is_empty());

    let mut last = env("m1");
    last.set_header("test.count", HeaderValue::Integer(5));
    let h = harness(vec![last], vec![], 1, policy());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].reason, FailureReason::ReplayExhausted);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
}

/// Records what it is told after each send attempt.
#[derive(Default)]
struct Observer {
    outcomes: Mutex<Vec<SendOutcome>>,
}

#[async_trait]
impl Processor for Observer {
    fn name(&self) -> &str {
        "observer"
    }
    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        (envelope, Ok(Verdict::Pass))
    }
    fn settles(&self) -> bool {
        true
    }
    async fn settled(&self, _envelope: &Envelope, outcome: &SendOutcome) {
        self.outcomes.lock().expect("lock").push(outcome.clone());
    }
}

#[tokio::test(start_paused = true)]
async fn a_settling_processor_hears_every_send_attempt() {
    let observer = Arc::new(Observer::default());
    let h = harness(vec![env("m1"), env("m2")], vec![observer.clone()], 1, policy());
    h.senders[0].script.lock().expect("lock").extend([
        Err(TransportError::transient("broker down")),
        Ok(()),
        Err(TransportError::permanent("no such queue")),
    ]);
    run_until_settled(&h, 2).await;
    let mut outcomes = observer.outcomes.lock().expect("lock").clone();
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        outcomes,
        vec![
            SendOutcome::Delivered,
            SendOutcome::Failed("broker down".into()),
            SendOutcome::Rejected("no such queue".into()),
        ]
    );
}

/// Renames `kind` to `type`, sends to `mapped/<binding>`, refuses
/// messages with a `refuse` header and asks for a retry once on `flaky`.
#[derive(Default)]
struct Mapper {
    retried: AtomicUsize,
}

#[async_trait]
impl HeaderMapper for Mapper {
    fn name(&self) -> &str {
        "mapper"
    }
    async fn map(
        &self,
        mut envelope: Envelope,
        binding: &str,
        _address: &str,
    ) -> (Envelope, Result<Option<String>, ProcessError>) {
        if envelope.headers.contains_key("refuse") {
            return (
                envelope,
                Err(ProcessError::Reject(Failure::new(FailureReason::PluginRejected, "refused by mapper"))),
            );
        }
        if envelope.headers.contains_key("flaky") && self.retried.fetch_add(1, Ordering::SeqCst) == 0 {
            return (envelope, Err(ProcessError::Retry { after: Duration::from_millis(1), reason: "later".into() }));
        }
        if let Some(v) = envelope.headers.remove("kind") {
            envelope.headers.insert("type".into(), v);
        }
        (envelope, Ok(Some(format!("mapped/{binding}"))))
    }
}

#[tokio::test(start_paused = true)]
async fn a_header_mapper_changes_only_its_bindings_copy() {
    let mut ok = env("ok");
    ok.set_header("kind", "temp");
    let mut flaky = env("flaky");
    flaky.set_header("flaky", "1");
    let mut refused = env("refused");
    refused.set_header("refuse", "1");
    let mut h =
        harness(vec![ok, flaky, refused], vec![], 2, RoutePolicy { dispatch_mode: DispatchMode::FanOut, ..policy() });
    let route = Arc::get_mut(&mut h.route).expect("unshared");
    route.bindings[0].header_mapper = Some(Arc::new(Mapper::default()));
    run_until_settled(&h, 3).await;

    let mapped = h.senders[0].sent.lock().expect("lock").clone();
    let plain = h.senders[1].sent.lock().expect("lock").clone();
    let ok_mapped = mapped.iter().find(|m| m.envelope.id == "ok").expect("ok sent through the mapper");
    assert_eq!(ok_mapped.address, "mapped/b0");
    assert_eq!(ok_mapped.envelope.text_header("type"), Some("temp"));
    assert_eq!(ok_mapped.envelope.text_header("kind"), None);
    let ok_plain = plain.iter().find(|m| m.envelope.id == "ok").expect("ok sent to b1");
    assert_eq!(ok_plain.address, "out/1");
    assert_eq!(ok_plain.envelope.text_header("kind"), Some("temp"), "the other binding's copy is untouched");
    assert!(mapped.iter().any(|m| m.envelope.id == "flaky"), "a mapper retry is retried like a send");
    assert!(!mapped.iter().any(|m| m.envelope.id == "refused"));
    assert!(plain.iter().any(|m| m.envelope.id == "refused"));
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!((dlq[0].reason.as_str(), dlq[0].binding.as_deref()), ("header_mapper", Some("b0")));
}

struct Named(&'static str);

#[async_trait]
impl Processor for Named {
    fn name(&self) -> &str {
        self.0
    }
    async fn process(&self, mut envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        envelope.set_header("chain", self.0);
        (envelope, Ok(Verdict::Pass))
    }
}

#[test]
fn a_swapped_chain_serves_new_loads_while_old_snapshots_stay() {
    let chain = Chain::new(vec![Arc::new(Named("old"))]);
    let before = chain.load();
    chain.swap(vec![Arc::new(Named("new"))]);
    assert_eq!(before[0].name(), "old");
    assert_eq!(chain.load()[0].name(), "new");
}

#[tokio::test(start_paused = true)]
async fn a_generated_id_is_released_by_default_and_failed_as_unstable_identity_when_asked() {
    let generated = || {
        let mut e = env("gen-1");
        e.set_header("test.count", HeaderValue::Integer(0));
        e.derive_header(ferry_envelope::names::GENERATED_ID, HeaderValue::Boolean(true));
        e
    };
    let h = harness(vec![generated()], vec![], 1, policy());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("gen-1".into())]);

    let fail = RoutePolicy { unstable_identity: UnstableIdentity::Fail, ..policy() };
    let h = harness(vec![generated()], vec![], 1, fail.clone());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].reason, FailureReason::UnstableIdentity);
    assert!(dlq[0].detail.contains("down"), "{}", dlq[0].detail);
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("gen-1".into())]);

    // A processor's retry request goes the same way.
    let retry =
        Arc::new(FixedProcessor(Err(ProcessError::Retry { after: Duration::from_millis(1), reason: "busy".into() })));
    let h = harness(vec![generated()], vec![retry], 1, fail.clone());
    run_until_settled(&h, 1).await;
    assert_eq!(h.dlq.entries.lock().expect("lock")[0].reason, FailureReason::UnstableIdentity);

    // A stable id at the same source is released as usual, and a source
    // that holds messages (no count) is never affected.
    let mut stable = env("m1");
    stable.set_header("test.count", HeaderValue::Integer(0));
    let h = harness(vec![stable], vec![], 1, fail.clone());
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("m1".into())]);
    let mut held = env("gen-2");
    held.derive_header(ferry_envelope::names::GENERATED_ID, HeaderValue::Boolean(true));
    let h = harness(vec![held], vec![], 1, fail);
    h.senders[0].script.lock().expect("lock").push_back(Err(TransportError::transient("down")));
    run_until_settled(&h, 1).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("gen-2".into())]);
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
}

/// A target that is down (every send unavailable) until `until`, then
/// takes everything.
struct DownUntil {
    until: tokio::time::Instant,
    attempts: AtomicUsize,
    sent: Mutex<Vec<String>>,
}

impl DownUntil {
    fn new(down: Duration) -> Arc<Self> {
        Arc::new(Self {
            until: tokio::time::Instant::now() + down,
            attempts: AtomicUsize::new(0),
            sent: Mutex::default(),
        })
    }
}

#[async_trait]
impl Sender for DownUntil {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if tokio::time::Instant::now() < self.until {
            return Err(TransportError::unavailable("connection refused"));
        }
        self.sent.lock().expect("lock").push(msg.envelope.id.clone());
        Ok(())
    }
}

/// The harness's route with binding `index` sending through `sender`.
fn with_sender(mut h: Harness, index: usize, sender: Arc<dyn Sender>) -> Harness {
    let route = Arc::get_mut(&mut h.route).expect("not shared yet");
    route.bindings[index].sender = sender;
    h
}

/// Runs the route until `n` deliveries settled or `bound` of (paused) time
/// passed, then shuts it down.
async fn run_for(h: &Harness, n: usize, bound: Duration) {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(h.route.clone().run(shutdown.clone()));
    let end = tokio::time::Instant::now() + bound;
    while h.log.lock().expect("lock").len() < n && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    task.await.expect("join").expect("route result");
}

#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_the_whole_budget_delays_messages_and_never_fails_them() {
    // A source that counts redeliveries (SQS, AMQP, NATS) and one that does
    // not (MQTT): both keep the message through 10 minutes of outage, with
    // the budget (5 replays, about 3 s of backoff) never touched.
    for count in [Some(0), None] {
        let messages: Vec<Envelope> = (0..3)
            .map(|i| {
                let mut e = env(&format!("m{i}"));
                if let Some(c) = count {
                    e.set_header("test.count", HeaderValue::Integer(c));
                }
                e
            })
            .collect();
        let target = DownUntil::new(Duration::from_secs(600));
        let mut p = policy();
        p.backoff.initial = Duration::from_millis(100);
        p.backoff.max = Duration::from_secs(60);
        let h = with_sender(harness(messages, vec![], 1, p), 0, target.clone());
        run_for(&h, 3, Duration::from_secs(900)).await;
        let mut log = h.log.lock().expect("lock").clone();
        log.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(log, ["m0", "m1", "m2"].map(|m| Settled::Acked(m.into())), "{count:?}");
        assert!(h.dlq.entries.lock().expect("lock").is_empty());
        assert_eq!(target.sent.lock().expect("lock").len(), 3);
        // One probe at a time, at the backoff's pace and at most
        // MAX_PROBE_INTERVAL apart (about 6 probes to reach it, then one
        // every 5 s): not one send per message per backoff step.
        let attempts = target.attempts.load(Ordering::SeqCst);
        assert!((600 / 5..=600 / 5 + 20).contains(&attempts), "{attempts} attempts");
        let text = h.route.metrics.render();
        assert!(!text.contains("ferry_messages_retried_total"), "{text}");
        assert!(text.contains("ferry_binding_available{route=\"r1\",binding=\"b0\"} 1"), "{text}");
        let unavailable = Metrics::count(&h.route.metrics.send_unavailable, &[("route", "r1"), ("binding", "b0")]);
        assert_eq!(unavailable as usize, attempts - 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_delivery_the_source_took_back_during_an_outage_is_let_go_not_sent() {
    // m1's channel closes 10 s into a 60 s outage (RabbitMQ's
    // consumer_timeout): the route lets it go then, without waiting for the
    // target, and never sends that copy; m2 waits and goes.
    let mut m1 = env("m1");
    m1.set_header("test.count", HeaderValue::Integer(0));
    m1.set_header("test.gone-after-ms", HeaderValue::Integer(10_000));
    let mut m2 = env("m2");
    m2.set_header("test.count", HeaderValue::Integer(0));
    let target = DownUntil::new(Duration::from_secs(60));
    let h = with_sender(harness(vec![m1, m2], vec![], 1, policy()), 0, target.clone());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(h.route.clone().run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("m1".into())]);
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Released("m1".into()), Settled::Acked("m2".into())]);
    assert_eq!(*target.sent.lock().expect("lock"), vec!["m2".to_owned()]);
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
    let text = h.route.metrics.render();
    assert!(!text.contains("ferry_messages_retried_total"), "{text}");
    shutdown.cancel();
    task.await.expect("join").expect("route result");
}

#[tokio::test(start_paused = true)]
async fn the_gauge_shows_an_outage_while_it_lasts() {
    let target = DownUntil::new(Duration::from_secs(60));
    let h = with_sender(harness(vec![env("m1")], vec![], 1, policy()), 0, target.clone());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(h.route.clone().run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(Metrics::gauge(&h.route.metrics.binding_available, &[("route", "r1"), ("binding", "b0")]), 0);
    let down = h.route.unavailable_bindings();
    assert_eq!(down.len(), 1);
    assert_eq!(down[0].0, "b0");
    assert!(h.log.lock().expect("lock").is_empty());
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(Metrics::gauge(&h.route.metrics.binding_available, &[("route", "r1"), ("binding", "b0")]), 1);
    assert!(h.route.unavailable_bindings().is_empty());
    assert_eq!(*h.log.lock().expect("lock"), vec![Settled::Acked("m1".into())]);
    shutdown.cancel();
    task.await.expect("join").expect("route result");
}

#[tokio::test(start_paused = true)]
async fn max_outage_secs_dead_letters_what_is_held_as_target_unavailable() {
    let mut p = policy();
    p.max_outage = Some(Duration::from_secs(20));
    let mut counted = env("m1");
    counted.set_header("test.count", HeaderValue::Integer(0));
    let target = DownUntil::new(Duration::from_secs(3600));
    let h = with_sender(harness(vec![counted, env("m2")], vec![], 1, p), 0, target.clone());
    run_for(&h, 2, Duration::from_secs(60)).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 2);
    assert!(dlq.iter().all(|d| d.reason == FailureReason::TargetUnavailable), "{dlq:?}");
    assert_eq!(dlq[0].binding.as_deref(), Some("b0"));
    let mut log = h.log.lock().expect("lock").clone();
    log.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(log, vec![Settled::Acked("m1".into()), Settled::Acked("m2".into())]);
    let text = h.route.metrics.render();
    assert!(
        text.contains("ferry_messages_dead_lettered_total{route=\"r1\",reason=\"target_unavailable\"} 2"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn fan_out_with_one_binding_down_keeps_the_other_flowing() {
    let messages: Vec<Envelope> = (0..5).map(|i| env(&format!("m{i}"))).collect();
    let down = DownUntil::new(Duration::from_secs(120));
    let up = DownUntil::new(Duration::ZERO);
    let h = harness(messages, vec![], 2, RoutePolicy { dispatch_mode: DispatchMode::FanOut, ..policy() });
    let h = with_sender(with_sender(h, 0, down.clone()), 1, up.clone());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(h.route.clone().run(shutdown.clone()));
    tokio::time::sleep(Duration::from_secs(60)).await;
    // The binding that is up took the copies of every message the route
    // holds (max_in_flight = 4); none is settled, since the other copy of
    // each is still held, and the fifth waits at the source.
    assert_eq!(up.sent.lock().expect("lock").len(), 4);
    assert!(down.sent.lock().expect("lock").is_empty());
    assert!(h.log.lock().expect("lock").is_empty());
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(down.sent.lock().expect("lock").len(), 5);
    assert_eq!(up.sent.lock().expect("lock").len(), 5, "the binding that took its copies gets none twice");
    assert_eq!(h.log.lock().expect("lock").len(), 5);
    assert!(h.dlq.entries.lock().expect("lock").is_empty());
    shutdown.cancel();
    task.await.expect("join").expect("route result");
}

#[tokio::test(start_paused = true)]
async fn a_poison_message_still_dead_letters_while_the_others_flow() {
    // The target refuses m1 for itself (transient, every time) and takes
    // the others: m1 spends its budget and is dead-lettered; the others
    // are acknowledged.
    let h = harness(vec![env("ok1"), env("m1"), env("ok2")], vec![], 1, policy());
    struct Picky(Arc<FakeSender>);
    #[async_trait]
    impl Sender for Picky {
        async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
            if msg.envelope.id == "m1" {
                return Err(TransportError::transient("422 unprocessable"));
            }
            self.0.send(msg).await
        }
    }
    let inner = Arc::new(FakeSender::default());
    let h = with_sender(h, 0, Arc::new(Picky(inner.clone())));
    run_for(&h, 3, Duration::from_secs(120)).await;
    let dlq = h.dlq.entries.lock().expect("lock").clone();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].envelope.id, "m1");
    assert_eq!(dlq[0].reason, FailureReason::ReplayExhausted);
    assert_eq!(inner.sent.lock().expect("lock").len(), 2);
    assert_eq!(h.log.lock().expect("lock").len(), 3);
}
