//! The route runtime: receiver -> ingress header rules -> expiry check ->
//! processor chain -> destination resolution -> bindings. In `direct_hold`
//! mode the source message is held until every binding accepted it; in
//! `shared_outbox` mode it is acknowledged once its dispatch plans are
//! durable in the outbox, and a drainer per binding sends them (see
//! [`outbox`](self::outbox)).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferry_config::{DeliveryMode, DispatchMode, FailureAction, UnstableIdentity};
use ferry_envelope::{Envelope, Timestamp};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::TransportError;
use crate::backoff::{Backoff, sleep_or_shutdown};
use crate::dlq::{DeadLetter, DeadLetterStore};
use crate::headers::apply_ingress_rules;
use crate::metrics::Metrics;
use crate::ports::{
    Delivery, DeliveryHandle, OutboundMessage, ProcessError, Receiver, SendOutcome, SharedHeaderMapper,
    SharedProcessor, SharedSender, Verdict,
};
use crate::trace::DeliveryTrace;

mod outbox;
pub use outbox::{Outbox, partition_of};

/// A concrete destination: a sender and the address to use with it.
#[derive(Clone)]
pub struct Binding {
    pub id: String,
    pub sender: SharedSender,
    /// Transport destination (may be a template the sender expands).
    pub address: String,
    /// Runs on each outbound copy for this binding before it is sent.
    pub header_mapper: Option<SharedHeaderMapper>,
}

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
    pub trust_bridge_headers: bool,
    pub delivery_mode: DeliveryMode,
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
            trust_bridge_headers: c.trust_bridge_headers,
            delivery_mode: c.delivery_mode,
            max_outbox_depth: c.max_outbox_depth,
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
    /// The outbox, for `shared_outbox` routes.
    pub outbox: Option<Outbox>,
    pub metrics: Metrics,
}

/// A send that failed for good at one binding.
struct BindingFailure {
    binding: String,
    address: String,
    /// Short reason code for the DLQ and metrics.
    code: &'static str,
    detail: String,
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
        let running = self.metrics.route_running.get_or_create(&crate::metrics::labels(&[("route", &self.id)])).clone();
        let drainers_stop = CancellationToken::new();
        let mut drainers = JoinSet::new();
        if let Some(outbox) = self.outbox.clone() {
            for index in 0..self.bindings.len() {
                drainers.spawn(self.clone().drain(outbox.clone(), index, drainers_stop.clone()));
            }
        }
        running.set(1);
        info!(route = %self.id, "route started");

        loop {
            if !self.wait_for_outbox_room(&shutdown).await {
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
            handlers.spawn(async move {
                route.handle(delivery, &stop).await;
                drop(permit);
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
        let Delivery { mut envelope, handle } = delivery;
        let span = info_span!(
            "delivery",
            route = %self.id,
            message_id = %envelope.id,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty
        );
        let trace = DeliveryTrace::start(&self.id, &self.source_id, &envelope, &span);
        let route = self.id.as_str();
        Metrics::inc(&self.metrics.received, &[("route", route)]);
        let gauge = self.metrics.in_flight.get_or_create(&crate::metrics::labels(&[("route", route)])).clone();
        gauge.inc();
        let arrived = std::time::Instant::now();
        async {
            apply_ingress_rules(&mut envelope, &self.id, &self.source_id, self.policy.trust_bridge_headers);
            let settle = self.decide(envelope, handle.as_ref(), &trace, shutdown).await;
            let outcome = settle.name();
            self.settle(handle, settle).await;
            self.mark_progress();
            debug!(outcome, "settled");
            trace.end(outcome);
            self.metrics
                .delivery_latency
                .get_or_create(&crate::metrics::labels(&[("route", route)]))
                .observe(arrived.elapsed().as_secs_f64());
        }
        .instrument(span)
        .await;
        gauge.dec();
    }

    /// Records that the route moved (see `ferry_route_last_progress_seconds`).
    fn mark_progress(&self) {
        let now = Timestamp::now().as_millis() as f64 / 1000.0;
        self.metrics.route_last_progress.get_or_create(&crate::metrics::labels(&[("route", &self.id)])).set(now);
    }

    async fn decide(
        &self,
        envelope: Envelope,
        handle: &dyn DeliveryHandle,
        trace: &DeliveryTrace,
        shutdown: &CancellationToken,
    ) -> Settle {
        let route = self.id.as_str();
        let first_seen = Timestamp::now();
        if envelope.is_expired_at(first_seen) {
            Metrics::inc(&self.metrics.expired, &[("route", route)]);
            return self
                .fail_permanently(
                    envelope,
                    None,
                    self.policy.on_expired,
                    "expired",
                    "message expired before delivery",
                    1,
                    first_seen,
                    shutdown,
                )
                .await;
        }

        // The chain runs again from the ingress copy after a retry request.
        let chain = self.processors.load();
        let mut attempt: u32 = 0;
        let (envelope, routed) = loop {
            match self.run_chain(&chain, envelope.clone()).await {
                Ok(ChainOutcome::Continue(env, routed)) => break (env, routed),
                Ok(ChainOutcome::Dropped(reason)) => {
                    debug!(%reason, "dropped by processor");
                    Metrics::inc(&self.metrics.dropped, &[("route", route), ("reason", "filtered")]);
                    return Settle::Ack;
                }
                Err((env, ProcessError::Reject(reason))) => {
                    let (code, detail) = split_reason(&reason);
                    return self
                        .fail_permanently(
                            env,
                            None,
                            self.policy.on_permanent_failure,
                            code,
                            detail,
                            attempt + 1,
                            first_seen,
                            shutdown,
                        )
                        .await;
                }
                Err((env, ProcessError::Retry { after, reason })) => {
                    Metrics::inc(&self.metrics.retried, &[("route", route), ("reason", "processor")]);
                    debug!(%reason, ?after, "processor asked for a retry");
                    if let Some(settle) = self.retry_later(&env, handle, after, &reason, first_seen, shutdown).await {
                        return settle;
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        };

        let plans = self.plan(routed);
        if plans.is_empty() {
            Metrics::inc(&self.metrics.dropped, &[("route", route), ("reason", "no_destination")]);
            return Settle::Ack;
        }
        if let Some(outbox) = &self.outbox {
            // Only a settling processor needs the message after it is
            // persisted: copy it for them alone.
            let settling = chain.iter().any(|p| p.settles()).then(|| envelope.clone());
            let settle = self.persist(outbox, envelope, plans, handle, trace, first_seen, shutdown).await;
            if let (Some(envelope), Settle::Ack) = (&settling, &settle) {
                tell_settled(&chain, envelope, &SendOutcome::Delivered).await;
            }
            return settle;
        }
        self.dispatch(&chain, envelope, plans, handle, trace, first_seen, shutdown).await
    }

    /// The copy for `binding` as its header mapper leaves it, and the
    /// address to send it to.
    async fn map_copy(
        &self,
        binding: &Binding,
        envelope: Envelope,
        address: &str,
    ) -> Result<(Envelope, String), ProcessError> {
        let Some(mapper) = &binding.header_mapper else { return Ok((envelope, address.to_owned())) };
        match mapper.map(envelope, &binding.id, address).await {
            (env, Ok(None)) => Ok((env, address.to_owned())),
            (env, Ok(Some(chosen))) => Ok((env, chosen)),
            (_, Err(e)) => Err(e),
        }
    }

    /// Sends to every planned binding, retrying transient failures, and
    /// dead-letters (or drops) the bindings that failed for good.
    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        &self,
        chain: &[SharedProcessor],
        envelope: Envelope,
        mut pending: Vec<Plan>,
        handle: &dyn DeliveryHandle,
        trace: &DeliveryTrace,
        first_seen: Timestamp,
        shutdown: &CancellationToken,
    ) -> Settle {
        let route = self.id.as_str();
        let planned = pending.len();
        let mut failures = Vec::new();
        let mut attempt: u32 = 0;
        loop {
            let mut still_pending = Vec::new();
            let mut last_error = String::new();
            let failed_before = failures.len();
            for plan in pending {
                let binding = &self.bindings[plan.binding];
                let (mut outbound, address) = match self.map_copy(binding, envelope.clone(), &plan.address).await {
                    Ok(mapped) => mapped,
                    Err(ProcessError::Retry { reason, .. }) => {
                        warn!(binding = %binding.id, %reason, "header mapper asked for a retry");
                        last_error = reason;
                        still_pending.push(plan);
                        continue;
                    }
                    Err(ProcessError::Reject(reason)) => {
                        warn!(binding = %binding.id, %reason, "header mapper refused the message");
                        failures.push(BindingFailure {
                            binding: binding.id.clone(),
                            address: plan.address,
                            code: "header_mapper",
                            detail: reason,
                            action: self.policy.on_permanent_failure,
                        });
                        continue;
                    }
                };
                let send_trace = trace.send(&binding.id, &address, &mut outbound);
                let result = binding.sender.send(OutboundMessage { envelope: outbound, address }).await;
                send_trace.end(result.as_ref().err());
                match result {
                    Ok(()) => {
                        Metrics::inc(&self.metrics.sent, &[("route", route), ("binding", &binding.id)]);
                        let age_ms = Timestamp::now().as_millis().saturating_sub(envelope.created_at.as_millis());
                        self.metrics
                            .age_at_egress
                            .get_or_create(&crate::metrics::labels(&[("route", route), ("binding", &binding.id)]))
                            .observe(age_ms.max(0) as f64 / 1000.0);
                    }
                    Err(error) if error.is_transient() => {
                        warn!(binding = %binding.id, address = %plan.address, %error, attempt, "send failed, will retry");
                        last_error = error.reason;
                        still_pending.push(plan);
                    }
                    Err(error) => {
                        warn!(binding = %binding.id, address = %plan.address, %error, "send failed permanently");
                        failures.push(BindingFailure {
                            binding: binding.id.clone(),
                            address: plan.address,
                            code: "send_rejected",
                            detail: error.reason,
                            action: self.policy.on_permanent_failure,
                        });
                    }
                }
            }
            let outcome = if let Some(f) = failures.get(failed_before) {
                SendOutcome::Rejected(f.detail.clone())
            } else if !still_pending.is_empty() {
                SendOutcome::Failed(last_error.clone())
            } else {
                SendOutcome::Delivered
            };
            tell_settled(chain, &envelope, &outcome).await;
            if still_pending.is_empty() {
                break;
            }
            Metrics::inc(&self.metrics.retried, &[("route", route), ("reason", "send")]);
            let delay = self.policy.backoff.delay(attempt);
            match self.source_retry(&envelope, handle, delay, &last_error) {
                SourceRetry::Release(settle) => return settle,
                SourceRetry::Unstable => {
                    let detail = format!("{UNSTABLE_IDENTITY}: {last_error}");
                    let action = self.policy.on_permanent_failure;
                    failures.extend(self.fail_all(still_pending, "unstable_identity", &detail, action));
                    break;
                }
                SourceRetry::Exhausted(count) => {
                    let detail = format!("delivered {} times without success: {last_error}", count + 1);
                    let action = self.policy.on_permanent_failure;
                    failures.extend(self.fail_all(still_pending, "replay_exhausted", &detail, action));
                    break;
                }
                SourceRetry::Hold => {}
            }
            if !sleep_or_shutdown(delay, shutdown).await {
                return Settle::Release { after: delay, reason: last_error };
            }
            attempt = attempt.saturating_add(1);
            if envelope.is_expired_at(Timestamp::now()) {
                // Stale data is not delivered late: what is still pending
                // follows on_expired, like a message that arrived expired.
                Metrics::inc(&self.metrics.expired, &[("route", route)]);
                let detail = format!("message expired while waiting to retry: {last_error}");
                failures.extend(self.fail_all(still_pending, "expired", &detail, self.policy.on_expired));
                break;
            }
            pending = still_pending;
        }

        // The source hears of a refusal only when no binding got the message
        // and it was dropped, not kept in the DLQ.
        let every_binding_failed = failures.len() == planned;
        let mut settle = Settle::Ack;
        for failure in failures {
            let outcome = self
                .fail_permanently(
                    envelope.clone(),
                    Some((failure.binding, failure.address)),
                    failure.action,
                    failure.code,
                    &failure.detail,
                    attempt + 1,
                    first_seen,
                    shutdown,
                )
                .await;
            match outcome {
                Settle::Release { .. } => settle = outcome,
                Settle::Reject(_) if every_binding_failed && matches!(settle, Settle::Ack) => settle = outcome,
                _ => {}
            }
        }
        settle
    }

    /// The same failure for every plan still pending.
    fn fail_all(
        &self,
        pending: Vec<Plan>,
        code: &'static str,
        detail: &str,
        action: FailureAction,
    ) -> Vec<BindingFailure> {
        pending
            .into_iter()
            .map(|plan| BindingFailure {
                binding: self.bindings[plan.binding].id.clone(),
                address: plan.address,
                code,
                detail: detail.to_owned(),
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
        handle: &dyn DeliveryHandle,
        delay: Duration,
        reason: &str,
        first_seen: Timestamp,
        shutdown: &CancellationToken,
    ) -> Option<Settle> {
        match self.source_retry(envelope, handle, delay, reason) {
            SourceRetry::Release(settle) => return Some(settle),
            SourceRetry::Unstable => {
                let action = self.policy.on_permanent_failure;
                let detail = format!("{UNSTABLE_IDENTITY}: {reason}");
                let settle = self
                    .fail_permanently(
                        envelope.clone(),
                        None,
                        action,
                        "unstable_identity",
                        &detail,
                        1,
                        first_seen,
                        shutdown,
                    )
                    .await;
                return Some(settle);
            }
            SourceRetry::Exhausted(count) => {
                let action = self.policy.on_permanent_failure;
                let settle = self
                    .fail_permanently(
                        envelope.clone(),
                        None,
                        action,
                        "replay_exhausted",
                        reason,
                        count + 1,
                        first_seen,
                        shutdown,
                    )
                    .await;
                return Some(settle);
            }
            SourceRetry::Hold => {}
        }
        if sleep_or_shutdown(delay, shutdown).await {
            None
        } else {
            Some(Settle::Release { after: delay, reason: reason.to_owned() })
        }
    }

    /// How a transient failure is retried. Sources that redeliver with a
    /// count (SQS, AMQP) get the message back after the delay, until the
    /// count reaches `max_replay_attempts`; then it has failed for good.
    /// Sources without a count (MQTT) hold it here and retry in process.
    fn source_retry(
        &self,
        envelope: &Envelope,
        handle: &dyn DeliveryHandle,
        after: Duration,
        reason: &str,
    ) -> SourceRetry {
        match handle.redelivery_count() {
            None => SourceRetry::Hold,
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

    /// Dead-letters or drops a message per `action`. A dead letter that
    /// cannot be stored is retried; if the route stops meanwhile the source
    /// message is released, never acknowledged.
    #[allow(clippy::too_many_arguments)]
    async fn fail_permanently(
        &self,
        envelope: Envelope,
        binding: Option<(String, String)>,
        action: FailureAction,
        reason: &str,
        detail: &str,
        attempts: u32,
        first_failure: Timestamp,
        shutdown: &CancellationToken,
    ) -> Settle {
        let route = self.id.as_str();
        match action {
            FailureAction::Drop => {
                warn!(%reason, %detail, "message dropped");
                let label = if reason == "expired" { "expired" } else { "permanent_failure" };
                Metrics::inc(&self.metrics.dropped, &[("route", route), ("reason", label)]);
                Settle::Reject(format!("{reason}: {detail}"))
            }
            FailureAction::Dlq => {
                let (binding, address) = binding.unzip();
                let entry = DeadLetter {
                    route: self.id.clone(),
                    binding,
                    address,
                    reason: reason.to_owned(),
                    detail: detail.to_owned(),
                    attempts,
                    first_failure,
                    last_failure: Timestamp::now(),
                    envelope,
                };
                let mut attempt = 0;
                loop {
                    match self.dlq.put(entry.clone()).await {
                        Ok(()) => {
                            warn!(%reason, %detail, "message dead-lettered");
                            Metrics::inc(&self.metrics.dead_lettered, &[("route", route), ("reason", reason)]);
                            return Settle::Ack;
                        }
                        Err(e) => {
                            let delay = self.policy.backoff.delay(attempt);
                            warn!(error = %e, "cannot write dead letter, will retry");
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

    async fn settle(&self, handle: Box<dyn DeliveryHandle>, settle: Settle) {
        match settle {
            Settle::Ack => match handle.ack().await {
                Ok(()) => Metrics::inc(&self.metrics.acked, &[("route", &self.id)]),
                Err(error) => warn!(%error, "acknowledgement failed; the source will redeliver"),
            },
            Settle::Reject(reason) => match handle.reject(&reason).await {
                Ok(()) => Metrics::inc(&self.metrics.acked, &[("route", &self.id)]),
                Err(error) => warn!(%error, "rejection failed; the source will redeliver"),
            },
            Settle::Release { after, reason } => {
                if let Err(error) = handle.release(after, &reason).await {
                    warn!(%error, "release failed; the source will redeliver");
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

    fn plan(&self, routed: Option<Vec<String>>) -> Vec<Plan> {
        let chosen = match self.policy.dispatch_mode {
            DispatchMode::Single => 0..self.bindings.len().min(1),
            DispatchMode::FanOut => 0..self.bindings.len(),
        };
        let mut plans = Vec::new();
        for binding in chosen {
            match &routed {
                Some(addresses) => {
                    plans.extend(addresses.iter().map(|a| Plan { binding, address: a.clone() }));
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

/// Splits `code: detail` reasons (as the plugin host reports traps) into a
/// short code for metrics and the full text.
fn split_reason(reason: &str) -> (&str, &str) {
    match reason.split_once(": ") {
        Some((code, _)) if !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
            (code, reason)
        }
        _ => ("rejected", reason),
    }
}

/// Sleeps; false when shutdown came first.
#[cfg(test)]
mod tests;
