//! The route runtime: receiver -> ingress header rules -> expiry check ->
//! processor chain -> destination resolution -> bindings. In `direct_hold`
//! mode the source message is held until every binding accepted it; in
//! `shared_outbox` mode it is acknowledged once its dispatch plans are
//! durable in the outbox, and a drainer per binding sends them (see
//! [`outbox`](self::outbox)).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferry_config::{DispatchMode, FailureAction, UnstableIdentity};
use ferry_envelope::{Envelope, Timestamp};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::TransportError;
use crate::backoff::{Backoff, sleep_or_shutdown};
use crate::clock::Clock;
use crate::dlq::{DeadLetter, DeadLetterStore};
use crate::failure::{Failure, FailureReason};
use crate::headers::apply_ingress_rules;
use crate::metrics::{Metrics, ReasonLabels, RouteLabels};
use crate::ports::{Delivery, DeliveryHandle, ProcessError, Receiver, SendOutcome, SharedProcessor, Verdict};
use crate::tap::TapPoint;
use crate::trace::DeliveryTrace;

mod availability;
mod binding;
mod gate;
mod outbox;

pub use availability::{Availability, MAX_PROBE_INTERVAL, Pass, Transition};
pub use binding::{Binding, SendContext, Sent};
pub use gate::Gate;
pub use outbox::{Leasing, Outbox, partition_of};

/// A route's processor chain. A hot reload swaps in a new chain for new
/// deliveries; each delivery keeps the chain it started with, so in-flight
/// messages finish on the old processors and none is handled twice.
#[derive(Default)]
pub struct Chain(RwLock<Arc<Vec<SharedProcessor>>>);

impl Chain {
    pub fn new(processors: Vec<SharedProcessor>) -> Self {
        Self(RwLock::new(Arc::new(processors)))
    }

    /// The current chain.
    pub fn load(&self) -> Arc<Vec<SharedProcessor>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the chain for deliveries that start from now on.
    pub fn swap(&self, processors: Vec<SharedProcessor>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(processors);
    }
}

impl From<Vec<SharedProcessor>> for Chain {
    fn from(processors: Vec<SharedProcessor>) -> Self {
        Self::new(processors)
    }
}

/// Per-route behaviour.
#[derive(Debug, Clone)]
pub struct RoutePolicy {
    pub max_in_flight: usize,
    pub backoff: Backoff,
    pub dispatch_mode: DispatchMode,
    pub on_expired: FailureAction,
    pub on_permanent_failure: FailureAction,
    /// Redeliveries a source with a delivery count gets before the message
    /// is treated as permanently failed.
    pub max_replay_attempts: u32,
    /// A binding's outage this long dead-letters the messages held for it
    /// (`target_unavailable`); `None` holds them for as long as it lasts.
    pub max_outage: Option<Duration>,
    pub trust_bridge_headers: bool,
    /// Trusted routes: a message that arrives having crossed this many
    /// bridges already is dropped as a loop (`loop_detected`).
    pub max_hops: u32,
    /// `shared_outbox`: how long a sent record's duplicate key is kept, so
    /// a source redelivery after the send is suppressed too.
    pub dedup_window: Duration,
    /// `shared_outbox`: partitions per binding (each with its own lease
    /// and drainer).
    pub outbox_partitions: u32,
    /// `shared_outbox`: a binding's partition holding this many records
    /// stops the route from taking deliveries until it drains.
    pub max_outbox_depth: usize,
    /// Transient failures of messages with generated ids at sources that
    /// redeliver: released (counted by content) or failed for good.
    pub unstable_identity: UnstableIdentity,
}

impl RoutePolicy {
    /// The policy a route's config describes.
    pub fn from_config(c: &ferry_config::RouteConfig) -> Self {
        Self {
            max_in_flight: c.max_in_flight,
            backoff: Backoff::from(&c.backoff),
            dispatch_mode: c.dispatch_mode,
            on_expired: c.on_expired,
            on_permanent_failure: c.on_permanent_failure,
            max_replay_attempts: c.max_replay_attempts,
            max_outage: c.max_outage_secs.map(Duration::from_secs),
            trust_bridge_headers: c.trust_bridge_headers,
            max_hops: c.max_hops,
            dedup_window: Duration::from_secs(c.dedup_window_secs),
            max_outbox_depth: c.max_outbox_depth,
            outbox_partitions: c.outbox_partitions,
            unstable_identity: c.unstable_identity,
        }
    }
}

/// One configured route, ready to run.
pub struct Route {
    pub id: String,
    /// The receiver's name, stamped as `x-bridge.source-id`.
    pub source_id: String,
    pub receiver: Arc<dyn Receiver>,
    pub processors: Chain,
    pub bindings: Vec<Binding>,
    pub policy: RoutePolicy,
    pub dlq: Arc<dyn DeadLetterStore>,
    pub mode: Mode,
    pub metrics: Metrics,
    /// Where the route reads the time (expiry, retry schedules).
    pub clock: Clock,
    /// The route's metric handles, resolved on first use.
    pub meters: Meters,
    /// What earlier deliveries of a message did (attempts, copies accepted),
    /// by stable identity (`DeliveryMemory::default()` when building a
    /// route).
    pub memory: crate::ledger::DeliveryMemory,
    /// Paused or running, and the deliveries held ([`Gate`]; the daemon
    /// keeps one per route id across reloads).
    pub gate: Gate,
}

/// A route's per-message metric handles, resolved once instead of building
/// a label set for every increment (`Meters::default()` when building a
/// route).
#[derive(Default)]
pub struct Meters(std::sync::OnceLock<RouteMeters>);

struct RouteMeters {
    received: crate::metrics::CounterHandle,
    acked: crate::metrics::CounterHandle,
    expired: crate::metrics::CounterHandle,
    in_flight: crate::metrics::GaugeHandle,
    latency: crate::metrics::HistogramHandle,
    progress: crate::metrics::FloatGaugeHandle,
    /// Counters by reason (dropped, retried, dead-lettered), each resolved
    /// on its first use.
    reasons: RwLock<Vec<(Count, String, crate::metrics::CounterHandle)>>,
}

/// The route's counters that have a reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    Dropped,
    Retried,
    DeadLettered,
}

/// How a route delivers (`delivery_mode`); the route dispatches on it.
#[derive(Clone)]
pub enum Mode {
    /// The source message is held until every binding accepted its copy.
    DirectHold,
    /// The copies are made durable in the outbox, then the source is
    /// acknowledged; drainers send them.
    SharedOutbox(Outbox),
}

/// A message, or one binding's copy of it, that failed for good.
struct Failed {
    envelope: Envelope,
    /// The binding and address, when the failure was at a binding.
    at: Option<(String, String)>,
    failure: Failure,
    action: FailureAction,
    attempts: u32,
    first_failure: Timestamp,
}

/// A send that failed for good at one binding.
struct BindingFailure {
    binding: String,
    address: String,
    failure: Failure,
    action: FailureAction,
}

/// How handling a delivery ended, before the source is settled.
enum Settle {
    Ack,
    /// Failed for good and dropped: settled as refused where the source
    /// can say so.
    Reject(String),
    Release {
        after: Duration,
        reason: String,
    },
}

impl Settle {
    fn name(&self) -> &'static str {
        match self {
            Settle::Ack => "ack",
            Settle::Reject(_) => "reject",
            Settle::Release { .. } => "release",
        }
    }
}

/// What to do with a transient failure (see [`Route::source_retry`]).
enum SourceRetry {
    Hold,
    Release(Settle),
    Exhausted(u32),
    /// A generated id at a redelivering source, under
    /// `unstable_identity = "fail"`.
    Unstable,
}

/// One planned send.
struct Plan {
    binding: usize,
    address: String,
}

/// What every step of one delivery needs beside the message.
struct Attempt<'a> {
    handle: &'a dyn DeliveryHandle,
    trace: &'a DeliveryTrace,
    /// When the route first saw the message.
    first_seen: Timestamp,
    shutdown: &'a CancellationToken,
    /// The message's identity when it is stable (not generated): the key of
    /// the route's [`DeliveryMemory`](crate::ledger::DeliveryMemory).
    identity: Option<&'a str>,
    /// What earlier deliveries of it left there.
    recalled: Option<crate::ledger::Remembered>,
}

impl Attempt<'_> {
    /// Attempts earlier deliveries of this message made, as far as the
    /// route remembers.
    fn earlier_attempts(&self) -> u32 {
        self.recalled.as_ref().map_or(0, |r| r.attempts)
    }
}

/// How often a delivery held through an outage checks that its source
/// still holds it for the route.
const TAKEN_BACK_CHECK: Duration = Duration::from_millis(500);

/// Resolves once the source has taken `handle`'s delivery back
/// ([`DeliveryHandle::gone`]); never for a source that cannot tell, which
/// costs no timer.
async fn taken_back(handle: &dyn DeliveryHandle) {
    if handle.gone().is_none() {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(TAKEN_BACK_CHECK).await;
        if handle.gone() == Some(true) {
            return;
        }
    }
}

impl Route {
    /// Runs the route until `shutdown` fires, then stops taking deliveries,
    /// lets in-flight ones finish (or releases them unacknowledged if they
    /// are waiting to retry) and returns once the receiver has closed.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), TransportError> {
        let (tx, mut rx) = mpsc::channel::<Delivery>(self.policy.max_in_flight);
        let receiver_stop = CancellationToken::new();
        let receiver = self.receiver.clone();
        let receiver_token = receiver_stop.clone();
        let mut receiver_task = tokio::spawn(async move { receiver.run(tx, receiver_token).await });
        let permits = Arc::new(Semaphore::new(self.policy.max_in_flight));
        let mut handlers = JoinSet::new();
        let mut receiver_result = None;
        let running = self.metrics.route_running.get_or_create(&RouteLabels::new(&self.id)).clone();
        let drainers_stop = CancellationToken::new();
        let mut drainers = JoinSet::new();
        if let Mode::SharedOutbox(outbox) = &self.mode {
            drainers.spawn(self.clone().keep_leases(outbox.clone(), drainers_stop.clone()));
        }
        running.set(1);
        for binding in &self.bindings {
            self.show_availability(binding);
        }
        info!(route = %self.id, "route started");

        loop {
            if !self.wait_for_outbox_room(&shutdown).await {
                break;
            }
            // Paused: take nothing; what the receiver has stays at the
            // source, unacknowledged.
            if !self.gate.opened(&shutdown).await {
                break;
            }
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let delivery = tokio::select! {
                _ = shutdown.cancelled() => break,
                // Paused while waiting: nothing was taken.
                _ = self.gate.closed() => continue,
                res = &mut receiver_task, if receiver_result.is_none() => {
                    receiver_result = Some(res);
                    break;
                }
                d = rx.recv() => match d {
                    Some(d) => d,
                    None => break,
                },
            };
            let route = self.clone();
            let stop = shutdown.clone();
            let held = self.gate.hold();
            handlers.spawn(async move {
                route.handle(delivery, &stop).await;
                drop(permit);
                drop(held);
            });
            while handlers.try_join_next().is_some() {}
        }

        // Deliveries not yet started are released: dropping their handles
        // leaves them unacknowledged at the source.
        drop(rx);
        while handlers.join_next().await.is_some() {}
        receiver_stop.cancel();
        let result = match receiver_result {
            Some(r) => r,
            None => receiver_task.await,
        };
        // Records stay in the outbox for the next start.
        drainers_stop.cancel();
        while drainers.join_next().await.is_some() {}
        running.set(0);
        info!(route = %self.id, "route stopped");
        match result {
            Ok(r) => r,
            Err(e) => Err(TransportError::permanent(format!("receiver task failed: {e}"))),
        }
    }

    /// Handles one delivery from arrival to ack or release.
    pub async fn handle(&self, delivery: Delivery, shutdown: &CancellationToken) {
        let Delivery { mut envelope, handle, defect } = delivery;
        // A span per delivery costs about a tenth of the daemon's CPU under
        // load (the log layer formats its fields into a string), so it is
        // opened only when spans are exported or debug logging is on. The
        // warnings a delivery can log name its route and message id
        // themselves.
        let span = if crate::trace::enabled() || tracing::enabled!(tracing::Level::DEBUG) {
            info_span!(
                "delivery",
                route = %self.id,
                message_id = %envelope.id,
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty
            )
        } else {
            tracing::Span::none()
        };
        let trace = DeliveryTrace::start(&self.id, &self.source_id, &envelope, &span);
        let route = self.id.as_str();
        let meters = self.meters();
        meters.received.inc();
        meters.in_flight.inc();
        let arrived = std::time::Instant::now();
        // For the warnings of settling, after the envelope has moved on.
        let message_id = envelope.id.clone();
        async {
            let hops = apply_ingress_rules(&mut envelope, &self.id, &self.source_id, self.policy.trust_bridge_headers);
            self.metrics.taps.offer(route, TapPoint::Ingress, None, &[], &envelope);
            let identity =
                (!envelope.headers.contains_key(ferry_envelope::names::GENERATED_ID)).then(|| envelope.id.clone());
            let recalled = identity.as_deref().and_then(|id| self.memory.recall(id));
            let remembered = recalled.is_some();
            let attempt = Attempt {
                handle: handle.as_ref(),
                trace: &trace,
                first_seen: self.clock.now(),
                shutdown,
                identity: identity.as_deref(),
                recalled,
            };
            let settle = if hops > self.policy.max_hops {
                warn!(
                    route,
                    message_id = %envelope.id,
                    hops,
                    max_hops = self.policy.max_hops,
                    "message crossed more bridges than max_hops; dropped as a loop"
                );
                self.count(Count::Dropped, FailureReason::LoopDetected.as_str());
                Settle::Ack
            } else if let Some(defect) = defect {
                self.refuse_damaged(envelope, defect, &attempt).await
            } else {
                self.decide(envelope, &attempt).await
            };
            let outcome = settle.name();
            if remembered
                && !matches!(settle, Settle::Release { .. })
                && let Some(id) = identity.as_deref()
            {
                self.memory.forget(id);
            }
            self.settle(handle, settle, &message_id).await;
            self.mark_progress();
            debug!(outcome, "settled");
            trace.end(outcome);
            meters.latency.observe(arrived.elapsed().as_secs_f64());
        }
        .instrument(span)
        .await;
        meters.in_flight.dec();
    }

    /// Records that the route moved (see `ferry_route_last_progress_seconds`).
    fn mark_progress(&self) {
        let now = Timestamp::now().as_millis() as f64 / 1000.0; // wall time, for the metric
        self.meters().progress.set(now);
    }

    fn meters(&self) -> &RouteMeters {
        self.meters.0.get_or_init(|| {
            let labels = RouteLabels::new(&self.id);
            let m = &self.metrics;
            RouteMeters {
                received: m.received.get_or_create(&labels).clone(),
                acked: m.acked.get_or_create(&labels).clone(),
                expired: m.expired.get_or_create(&labels).clone(),
                in_flight: m.in_flight.get_or_create(&labels).clone(),
                latency: m.delivery_latency.get_or_create(&labels).clone(),
                progress: m.route_last_progress.get_or_create(&labels).clone(),
                reasons: RwLock::default(),
            }
        })
    }

    /// Counts one message on the route's `count` counter for `reason`,
    /// through a handle resolved once per reason.
    pub(crate) fn count(&self, count: Count, reason: &str) {
        let meters = self.meters();
        let cached =
            meters.reasons.read().ok().and_then(|r| {
                r.iter().find(|(c, r, _)| *c == count && r == reason).map(|(_, _, counter)| counter.clone())
            });
        let counter = match cached {
            Some(counter) => counter,
            None => {
                let family = match count {
                    Count::Dropped => &self.metrics.dropped,
                    Count::Retried => &self.metrics.retried,
                    Count::DeadLettered => &self.metrics.dead_lettered,
                };
                let counter = family.get_or_create(&ReasonLabels::new(&self.id, reason)).clone();
                if let Ok(mut r) = meters.reasons.write() {
                    r.push((count, reason.to_owned(), counter.clone()));
                }
                counter
            }
        };
        counter.inc();
    }

    /// Counts a message found expired.
    pub(crate) fn count_expired(&self) {
        self.meters().expired.inc();
    }

    /// The labels, metrics and trace a binding's send needs.
    fn send_context<'a>(&'a self, trace: &'a DeliveryTrace) -> SendContext<'a> {
        SendContext { route: &self.id, metrics: &self.metrics, trace }
    }

    /// A message the receiver found damaged (see [`Delivery::defect`]): given
    /// back to the source with the route's backoff until its redelivery
    /// count reaches `max_replay_attempts`, then failed for good with the
    /// defect as its reason. It is never sent on.
    async fn refuse_damaged(&self, envelope: Envelope, defect: Failure, at: &Attempt<'_>) -> Settle {
        self.count(Count::Retried, defect.reason.as_str());
        let count = at.handle.redelivery_count().unwrap_or(0);
        if count < self.policy.max_replay_attempts {
            let after = self.policy.backoff.delay(count);
            debug!(%defect, count, ?after, "damaged message given back to the source");
            return Settle::Release { after, reason: defect.to_string() };
        }
        let action = self.policy.on_permanent_failure;
        self.fail_whole(envelope, defect, action, count.saturating_add(1), at).await
    }

    /// Fails the whole message (no binding of its own) for good, per `action`.
    async fn fail_whole(
        &self,
        envelope: Envelope,
        failure: Failure,
        action: FailureAction,
        attempts: u32,
        at: &Attempt<'_>,
    ) -> Settle {
        let failed = Failed { envelope, at: None, failure, action, attempts, first_failure: at.first_seen };
        self.fail_permanently(failed, at.shutdown).await
    }

    async fn decide(&self, envelope: Envelope, at: &Attempt<'_>) -> Settle {
        let route = self.id.as_str();
        if envelope.is_expired_at(at.first_seen) {
            self.count_expired();
            let failure = Failure::new(FailureReason::Expired, "message expired before delivery");
            return self.fail_whole(envelope, failure, self.policy.on_expired, 1, at).await;
        }

        // The chain runs again from the ingress copy after a retry request.
        let chain = self.processors.load();
        let mut attempt: u32 = 0;
        let (envelope, routed) = loop {
            match self.run_chain(&chain, envelope.clone()).await {
                Ok(ChainOutcome::Continue(env, routed)) => break (env, routed),
                Ok(ChainOutcome::Dropped(reason)) => {
                    debug!(%reason, "dropped by processor");
                    self.count(Count::Dropped, "filtered");
                    return Settle::Ack;
                }
                Err((env, ProcessError::Reject(failure))) => {
                    let action = self.policy.on_permanent_failure;
                    return self.fail_whole(env, failure, action, attempt + 1, at).await;
                }
                Err((env, ProcessError::Retry { after, reason })) => {
                    self.count(Count::Retried, "processor");
                    debug!(%reason, ?after, "processor asked for a retry");
                    // A processor's retry is its own policy, not a failed send.
                    if let Some(settle) = self.retry_later(&env, 0, after, &reason, at).await {
                        return settle;
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        };

        let plans = self.plan(routed);
        if self.metrics.taps.open_count() > 0 {
            let addresses: Vec<&str> = plans.iter().map(|p| p.address.as_str()).collect();
            self.metrics.taps.offer(route, TapPoint::AfterProcessors, None, &addresses, &envelope);
        }
        if plans.is_empty() {
            self.count(Count::Dropped, "no_destination");
            return Settle::Ack;
        }
        match &self.mode {
            // Settling processors hear each send's outcome from the drainer.
            Mode::SharedOutbox(outbox) => self.persist(outbox, envelope, plans, at).await,
            Mode::DirectHold => self.dispatch(&chain, envelope, plans, at).await,
        }
    }

    /// Sends to every planned binding, retrying transient failures, and
    /// dead-letters (or drops) the bindings that failed for good.
    async fn dispatch(
        &self,
        chain: &[SharedProcessor],
        envelope: Envelope,
        mut pending: Vec<Plan>,
        at: &Attempt<'_>,
    ) -> Settle {
        let route = self.id.as_str();
        let planned = pending.len();
        let mut failures = Vec::new();
        let mut attempt: u32 = 0;
        let cx = self.send_context(at.trace);
        // Attempts before this delivery (a source's redeliveries) count too.
        let earlier = at.handle.redelivery_count().unwrap_or(0).max(at.earlier_attempts());
        // A redelivery goes only to the bindings that did not take it
        // before (the fan-out rule); without a memory of it every binding
        // gets it again, and those copies are counted as possible duplicates.
        let mut accepted: Vec<(usize, String)> = Vec::new();
        // Sends that reached a target and failed there (not an outage).
        let mut failed: u32 = 0;
        match &at.recalled {
            Some(r) if !r.accepted.is_empty() => {
                let before = pending.len();
                pending.retain(|p| !r.accepted.iter().any(|(b, a)| *b == p.binding && *a == p.address));
                let skipped = before - pending.len();
                if skipped > 0 {
                    self.count_fanout(&self.metrics.fanout_skipped, skipped);
                }
                accepted.clone_from(&r.accepted);
                if pending.is_empty() {
                    debug!(route, message_id = %envelope.id, "every binding took this message on an earlier delivery");
                    return Settle::Ack;
                }
            }
            None if planned > 1 && at.handle.redelivery_count().is_some_and(|n| n > 0) => {
                self.count_fanout(&self.metrics.fanout_resent, planned);
            }
            _ => {}
        }
        // Sends made of this message here, for the senders' loss counts.
        let mut tries: u32 = 0;
        // Leave to send to a binding in an outage: its turn to probe came.
        let mut probe: Option<(usize, Pass)> = None;
        loop {
            let mut still_pending = Vec::new();
            // Plans for bindings whose target is unavailable: held, not
            // failed.
            let mut held = Vec::new();
            let mut last_error = String::new();
            // The longest wait a target asked for (HTTP Retry-After).
            let mut not_before = Duration::ZERO;
            let failed_before = failures.len();
            let mut reached = false;
            let mut sent_any = false;
            // The longest wait a target that is down asked for.
            let mut unavailable_wait = Duration::ZERO;
            for plan in pending {
                let binding = &self.bindings[plan.binding];
                let pass = match probe.take_if(|(b, _)| *b == plan.binding) {
                    Some((_, pass)) => Some(pass),
                    None => binding.availability.try_pass(),
                };
                let Some(pass) = pass else {
                    held.push(plan);
                    continue;
                };
                sent_any = true;
                let sent = binding.deliver(cx, envelope.clone(), &plan.address, earlier.saturating_add(tries)).await;
                self.observe(binding, &sent, &envelope.id);
                drop(pass);
                match sent {
                    Sent::Accepted => accepted.push((plan.binding, plan.address)),
                    Sent::Transient { reason, not_before: Some(wait), after } => {
                        reached |= after.is_none();
                        warn!(route, message_id = %envelope.id, binding = %binding.id, address = %plan.address, error = %reason, attempt, retry_after_ms = wait.as_millis() as u64, "send failed, will retry");
                        last_error = reason;
                        not_before = not_before.max(wait);
                        still_pending.push(plan);
                    }
                    Sent::Transient { reason, after, .. } => {
                        reached |= after.is_none();
                        warn!(route, message_id = %envelope.id, binding = %binding.id, address = %plan.address, error = %reason, attempt, "send failed, will retry");
                        last_error = reason;
                        still_pending.push(plan);
                    }
                    Sent::Unavailable { reason, not_before } => {
                        unavailable_wait = unavailable_wait.max(not_before.unwrap_or_default());
                        debug!(route, message_id = %envelope.id, binding = %binding.id, address = %plan.address, error = %reason, "target unavailable; the message is held");
                        last_error = reason;
                        held.push(plan);
                    }
                    Sent::Failed(failure) => {
                        warn!(route, message_id = %envelope.id, binding = %binding.id, address = %plan.address, %failure, "send failed permanently");
                        failures.push(BindingFailure {
                            binding: binding.id.clone(),
                            address: plan.address,
                            failure,
                            action: self.policy.on_permanent_failure,
                        });
                    }
                }
            }
            if sent_any {
                tries = tries.saturating_add(1);
                let outcome = if let Some(f) = failures.get(failed_before) {
                    SendOutcome::Rejected(f.failure.detail.clone())
                } else if !still_pending.is_empty() || !held.is_empty() {
                    SendOutcome::Failed(last_error.clone())
                } else {
                    SendOutcome::Delivered
                };
                tell_settled(chain, &envelope, &outcome).await;
            }
            if still_pending.is_empty() && held.is_empty() {
                break;
            }
            if !still_pending.is_empty() {
                // A target answered about this message and may take it later:
                // this spends the replay budget.
                self.count(Count::Retried, "send");
                if reached {
                    failed = failed.saturating_add(1);
                }
                let delay = self.policy.backoff.delay(attempt).max(not_before);
                match self.source_retry(&envelope, at, failed, delay, &last_error) {
                    SourceRetry::Release(settle) => {
                        self.remember(at, failed, &accepted);
                        return settle;
                    }
                    SourceRetry::Unstable => {
                        let failure =
                            Failure::new(FailureReason::UnstableIdentity, format!("{UNSTABLE_IDENTITY}: {last_error}"));
                        failures.extend(self.fail_all(
                            std::mem::take(&mut still_pending),
                            &failure,
                            self.policy.on_permanent_failure,
                        ));
                    }
                    SourceRetry::Exhausted(count) => {
                        let detail = format!("delivered {} times without success: {last_error}", count + 1);
                        let failure = Failure::new(FailureReason::ReplayExhausted, detail);
                        failures.extend(self.fail_all(
                            std::mem::take(&mut still_pending),
                            &failure,
                            self.policy.on_permanent_failure,
                        ));
                    }
                    SourceRetry::Hold => {}
                }
                if !still_pending.is_empty() {
                    if !sleep_or_shutdown(delay, at.shutdown).await {
                        self.remember(at, failed, &accepted);
                        return Settle::Release { after: delay, reason: last_error };
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
            if still_pending.is_empty() && !held.is_empty() {
                // An outage, not a failure of this message: it waits for the
                // binding here (the source keeps it reserved), however long
                // that takes, unless the route set max_outage_secs.
                held = self.outage_over(held, &mut failures);
                let Some(first) = held.first().map(|p| p.binding) else { break };
                if !at.handle.holds_through_outages() {
                    // Someone waits for the answer: told to come back when
                    // the next probe may go.
                    self.remember(at, failed, &accepted);
                    let after = self.bindings[first].availability.next_probe_in().unwrap_or_default();
                    return Settle::Release {
                        after: after.max(unavailable_wait),
                        reason: format!("target unavailable: {last_error}"),
                    };
                }
                // The target asked not to be tried again sooner (an HTTP
                // Retry-After): this message waits that long even if another
                // send ends the outage first.
                if !unavailable_wait.is_zero() && !sleep_or_shutdown(unavailable_wait, at.shutdown).await {
                    self.remember(at, failed, &accepted);
                    return Settle::Release { after: unavailable_wait, reason: last_error };
                }
                let waited = tokio::select! {
                    waited = self.wait_available(first, at.shutdown) => waited,
                    () = taken_back(at.handle) => {
                        self.remember(at, failed, &accepted);
                        return self.let_go(&envelope.id, &last_error);
                    }
                };
                match waited {
                    Some(pass) => probe = Some((first, pass)),
                    None if at.shutdown.is_cancelled() => {
                        self.remember(at, failed, &accepted);
                        let reason = format!("the route stopped while its target was unavailable: {last_error}");
                        return Settle::Release { after: self.policy.backoff.delay(0), reason };
                    }
                    // max_outage_secs came: the next round fails what is held.
                    None => {}
                }
            }
            if envelope.is_expired_at(self.clock.now()) {
                // Stale data is not delivered late: what is still pending
                // follows on_expired, like a message that arrived expired.
                self.count_expired();
                let detail = format!("message expired while waiting to retry: {last_error}");
                let failure = Failure::new(FailureReason::Expired, detail);
                still_pending.append(&mut held);
                failures.extend(self.fail_all(still_pending, &failure, self.policy.on_expired));
                break;
            }
            still_pending.append(&mut held);
            pending = still_pending;
            if at.handle.gone() == Some(true) {
                self.remember(at, failed, &accepted);
                return self.let_go(&envelope.id, &last_error);
            }
        }

        // The source hears of a refusal only when no binding got the message
        // and it was dropped, not kept in the DLQ.
        let every_binding_failed = failures.len() == planned;
        let mut settle = Settle::Ack;
        for f in failures {
            let failed = Failed {
                envelope: envelope.clone(),
                at: Some((f.binding, f.address)),
                failure: f.failure,
                action: f.action,
                attempts: attempt + 1,
                first_failure: at.first_seen,
            };
            let outcome = self.fail_permanently(failed, at.shutdown).await;
            match outcome {
                Settle::Release { .. } => settle = outcome,
                Settle::Reject(_) if every_binding_failed && matches!(settle, Settle::Ack) => settle = outcome,
                _ => {}
            }
        }
        settle
    }

    /// A delivery the source took back while the route waited to send it
    /// again: sending it would only make a copy of one already on its way
    /// back, so the route lets it go (the release reaches nobody and counts
    /// nothing).
    fn let_go(&self, message_id: &str, last_error: &str) -> Settle {
        debug!(route = %self.id, %message_id, "the source took this delivery back while it waited; it comes again");
        Settle::Release { after: Duration::ZERO, reason: format!("taken back by the source: {last_error}") }
    }

    /// Tells binding `binding`'s availability how the send of `message_id`
    /// through it ended; logs and shows (`ferry_binding_available`) an
    /// outage's start (naming the send that found it) and end once each.
    pub(crate) fn observe(&self, binding: &Binding, sent: &Sent, message_id: &str) {
        let transition = match sent {
            Sent::Unavailable { not_before, .. } => {
                self.metrics.send_unavailable.get_or_create(&self.binding_labels(binding)).inc();
                binding.availability.unreachable(&self.policy.backoff, *not_before)
            }
            // The header mapper asked for a delay: nothing was sent.
            Sent::Transient { after: Some(_), .. } => return,
            _ => binding.availability.reached(),
        };
        if transition != Transition::Same {
            let reason = match sent {
                Sent::Unavailable { reason, .. } => reason.as_str(),
                _ => "",
            };
            availability::log_transition(&self.id, &binding.id, transition, (message_id, reason));
            self.show_availability(binding);
        }
    }

    /// Sets a binding's `ferry_binding_available` gauge.
    fn show_availability(&self, binding: &Binding) {
        let up = i64::from(binding.availability.is_available());
        self.metrics.binding_available.get_or_create(&self.binding_labels(binding)).set(up);
    }

    fn binding_labels(&self, binding: &Binding) -> crate::metrics::Labels {
        crate::metrics::labels(&[("route", &self.id), ("binding", &binding.id)])
    }

    /// The bindings whose target is in an outage now, with how long it has
    /// lasted (for `/readyz`).
    pub fn unavailable_bindings(&self) -> Vec<(String, Duration)> {
        self.bindings.iter().filter_map(|b| b.availability.down_for().map(|d| (b.id.clone(), d))).collect()
    }

    /// Waits until binding `index` may be sent to again (its outage ended or
    /// its turn to probe came). `None` when `shutdown` fired or the route's
    /// `max_outage_secs` came first.
    async fn wait_available(&self, index: usize, shutdown: &CancellationToken) -> Option<Pass> {
        let availability = &self.bindings[index].availability;
        match self.policy.max_outage {
            None => availability.pass(shutdown).await,
            Some(limit) => {
                let left = limit.saturating_sub(availability.down_for().unwrap_or_default());
                tokio::time::timeout(left, availability.pass(shutdown)).await.ok().flatten()
            }
        }
    }

    /// The held plans whose binding's outage has lasted `max_outage_secs`
    /// fail for good (`target_unavailable`); the others are returned.
    fn outage_over(&self, held: Vec<Plan>, failures: &mut Vec<BindingFailure>) -> Vec<Plan> {
        let mut kept = Vec::new();
        for plan in held {
            let binding = &self.bindings[plan.binding];
            match self.outage_exceeded(binding) {
                Some(failure) => failures.push(BindingFailure {
                    binding: binding.id.clone(),
                    address: plan.address,
                    failure,
                    action: self.policy.on_permanent_failure,
                }),
                None => kept.push(plan),
            }
        }
        kept
    }

    /// The failure of a copy held for `binding` when its outage has lasted
    /// the route's `max_outage_secs`.
    fn outage_exceeded(&self, binding: &Binding) -> Option<Failure> {
        let limit = self.policy.max_outage?;
        let down = binding.availability.down_for().filter(|d| *d >= limit)?;
        let detail =
            format!("the target has been unavailable for {} s (max_outage_secs = {})", down.as_secs(), limit.as_secs());
        Some(Failure::new(FailureReason::TargetUnavailable, detail))
    }

    /// Remembers a message that goes back to its source unfinished: the
    /// failed sends made (earlier deliveries' and this one's `failed`) and
    /// the copies accepted, for its next delivery. Only a stable identity
    /// can be recognised again.
    fn remember(&self, at: &Attempt<'_>, failed: u32, accepted: &[(usize, String)]) {
        if let Some(id) = at.identity {
            self.memory.remember(id, at.earlier_attempts().saturating_add(failed), accepted);
        }
    }

    /// Adds `n` to one of the route's fan-out counters.
    fn count_fanout(&self, family: &crate::metrics::CounterFamily, n: usize) {
        family.get_or_create(&crate::metrics::labels(&[("route", &self.id)])).inc_by(n as u64);
    }

    /// The same failure for every plan still pending.
    fn fail_all(&self, pending: Vec<Plan>, failure: &Failure, action: FailureAction) -> Vec<BindingFailure> {
        pending
            .into_iter()
            .map(|plan| BindingFailure {
                binding: self.bindings[plan.binding].id.clone(),
                address: plan.address,
                failure: failure.clone(),
                action,
            })
            .collect()
    }

    /// A transient failure of the whole message: released to a source that
    /// counts redeliveries, dead-lettered (or dropped) once that count is
    /// used up, or held here for `delay`. `None` means: try again now.
    async fn retry_later(
        &self,
        envelope: &Envelope,
        failed: u32,
        delay: Duration,
        reason: &str,
        at: &Attempt<'_>,
    ) -> Option<Settle> {
        let (failure, attempts) = match self.source_retry(envelope, at, failed, delay, reason) {
            SourceRetry::Release(settle) => return Some(settle),
            SourceRetry::Unstable => {
                (Failure::new(FailureReason::UnstableIdentity, format!("{UNSTABLE_IDENTITY}: {reason}")), 1)
            }
            SourceRetry::Exhausted(count) => (Failure::new(FailureReason::ReplayExhausted, reason), count + 1),
            SourceRetry::Hold => {
                if sleep_or_shutdown(delay, at.shutdown).await {
                    return None;
                }
                return Some(Settle::Release { after: delay, reason: reason.to_owned() });
            }
        };
        let action = self.policy.on_permanent_failure;
        Some(self.fail_whole(envelope.clone(), failure, action, attempts, at).await)
    }

    /// How a transient failure is retried. Sources that redeliver with a
    /// count (SQS, AMQP) get the message back after the delay, until the
    /// count reaches `max_replay_attempts`; then it has failed for good.
    /// Sources without a count (MQTT, SimpleMQ, HTTP) hold it here and
    /// retry in process, under the same budget: `failed` (this delivery's
    /// sends that reached a target and failed there) plus the ones the
    /// route remembers of earlier deliveries of a stable identity. A send
    /// that found its sender disconnected (an outage: nothing was sent) and
    /// a processor's retry do not spend it: an outage delays a message, it
    /// never fails it.
    fn source_retry(
        &self,
        envelope: &Envelope,
        at: &Attempt<'_>,
        failed: u32,
        after: Duration,
        reason: &str,
    ) -> SourceRetry {
        match at.handle.redelivery_count() {
            None => {
                let made = at.earlier_attempts().saturating_add(failed);
                if made > self.policy.max_replay_attempts {
                    SourceRetry::Exhausted(made.saturating_sub(1))
                } else {
                    SourceRetry::Hold
                }
            }
            Some(_)
                if self.policy.unstable_identity == UnstableIdentity::Fail
                    && envelope.headers.contains_key(ferry_envelope::names::GENERATED_ID) =>
            {
                SourceRetry::Unstable
            }
            Some(count) if count < self.policy.max_replay_attempts => {
                SourceRetry::Release(Settle::Release { after, reason: reason.to_owned() })
            }
            Some(count) => SourceRetry::Exhausted(count),
        }
    }

    /// Dead-letters or drops a message per its action. A dead letter that
    /// cannot be stored is retried; if the route stops meanwhile the source
    /// message is released, never acknowledged.
    async fn fail_permanently(&self, failed: Failed, shutdown: &CancellationToken) -> Settle {
        let route = self.id.as_str();
        let Failed { envelope, at, failure, action, attempts, first_failure } = failed;
        let reason = failure.reason.as_str();
        match action {
            FailureAction::Drop => {
                warn!(route, message_id = %envelope.id, reason, detail = %failure.detail, "message dropped");
                let label = if failure.reason == FailureReason::Expired { "expired" } else { "permanent_failure" };
                self.count(Count::Dropped, label);
                Settle::Reject(failure.to_string())
            }
            FailureAction::Dlq => {
                let (binding, address) = at.unzip();
                let entry = DeadLetter {
                    route: self.id.clone(),
                    binding,
                    address,
                    reason: failure.reason,
                    detail: failure.detail,
                    attempts,
                    first_failure,
                    last_failure: self.clock.now(),
                    envelope,
                };
                let mut attempt = 0;
                loop {
                    match self.dlq.put(entry.clone()).await {
                        Ok(()) => {
                            warn!(route, message_id = %entry.envelope.id, reason, detail = %entry.detail, "message dead-lettered");
                            self.count(Count::DeadLettered, reason);
                            return Settle::Ack;
                        }
                        Err(e) => {
                            let delay = self.policy.backoff.delay(attempt);
                            warn!(route, message_id = %entry.envelope.id, error = %e, "cannot write dead letter, will retry");
                            if !sleep_or_shutdown(delay, shutdown).await {
                                return Settle::Release { after: delay, reason: format!("dead-letter store: {e}") };
                            }
                            attempt += 1;
                        }
                    }
                }
            }
        }
    }

    async fn settle(&self, handle: Box<dyn DeliveryHandle>, settle: Settle, message_id: &str) {
        let route = self.id.as_str();
        match settle {
            Settle::Ack => match handle.ack().await {
                Ok(()) => {
                    self.meters().acked.inc();
                }
                Err(error) => warn!(route, message_id, %error, "acknowledgement failed; the source will redeliver"),
            },
            Settle::Reject(reason) => match handle.reject(&reason).await {
                Ok(()) => {
                    self.meters().acked.inc();
                }
                Err(error) => warn!(route, message_id, %error, "rejection failed; the source will redeliver"),
            },
            Settle::Release { after, reason } => {
                if let Err(error) = handle.release(after, &reason).await {
                    warn!(route, message_id, %error, "release failed; the source will redeliver");
                }
            }
        }
    }

    async fn run_chain(
        &self,
        chain: &[SharedProcessor],
        mut env: Envelope,
    ) -> Result<ChainOutcome, (Envelope, ProcessError)> {
        let mut routed = None;
        for p in chain {
            let (next, result) = p.process(env).await;
            env = next;
            match result {
                Ok(Verdict::Pass) => {}
                Ok(Verdict::Drop(reason)) => {
                    return Ok(ChainOutcome::Dropped(format!("{}: {reason}", p.name())));
                }
                Ok(Verdict::Route(addresses)) => routed = Some(addresses),
                Err(e) => return Err((env, e)),
            }
        }
        Ok(ChainOutcome::Continue(env, routed))
    }

    /// One plan per chosen binding and address. A processor's route verdict
    /// replaces the bindings' own addresses; the same address named twice
    /// is one plan.
    fn plan(&self, routed: Option<Vec<String>>) -> Vec<Plan> {
        let chosen = match self.policy.dispatch_mode {
            DispatchMode::Single => 0..self.bindings.len().min(1),
            DispatchMode::FanOut => 0..self.bindings.len(),
        };
        let mut plans: Vec<Plan> = Vec::new();
        for binding in chosen {
            match &routed {
                Some(addresses) => {
                    for address in addresses {
                        if !plans.iter().any(|p| p.binding == binding && p.address == *address) {
                            plans.push(Plan { binding, address: address.clone() });
                        }
                    }
                }
                None => plans.push(Plan { binding, address: self.bindings[binding].address.clone() }),
            }
        }
        plans
    }
}

const UNSTABLE_IDENTITY: &str = "the source gave no message id, so its redeliveries cannot be counted by id; not recycled (unstable_identity = \"fail\")";

/// Tells the processors that want to know how a send attempt ended.
async fn tell_settled(chain: &[SharedProcessor], envelope: &Envelope, outcome: &SendOutcome) {
    for p in chain.iter().filter(|p| p.settles()) {
        p.settled(envelope, outcome).await;
    }
}

enum ChainOutcome {
    Continue(Envelope, Option<Vec<String>>),
    Dropped(String),
}

#[cfg(test)]
mod tests;
