//! A binding and the one way a copy of a message is sent to it.
//!
//! [`Binding::deliver`] is the only send path: direct dispatch, the outbox
//! drainer and `ferry dlq replay` all call it, so a copy gets the same
//! header mapper, address, span, metrics and classification whichever path
//! sends it.

use std::time::Duration;

use ferry_envelope::{Envelope, Timestamp};
use tracing::{debug, warn};

use crate::failure::{Failure, FailureReason};
use crate::metrics::Metrics;
use crate::ports::{OutboundMessage, ProcessError, SharedHeaderMapper, SharedSender};
use crate::trace::DeliveryTrace;

/// A concrete destination: a sender and the address to use with it.
#[derive(Clone)]
pub struct Binding {
    pub id: String,
    pub sender: SharedSender,
    /// Transport destination (may be a template the sender expands).
    pub address: String,
    /// Runs on each outbound copy for this binding before it is sent.
    pub header_mapper: Option<SharedHeaderMapper>,
    /// Metric handles, resolved on the first send (`Default::default()`).
    pub meters: BindingMeters,
    /// Whether its target takes messages now, shared by every copy sent
    /// through it (`Default::default()`).
    pub availability: super::Availability,
}

/// A binding's per-send metric handles for the route that sends through it.
#[derive(Default, Clone)]
pub struct BindingMeters(
    std::sync::Arc<std::sync::OnceLock<(crate::metrics::CounterHandle, crate::metrics::HistogramHandle)>>,
);

/// How one attempt to send a binding's copy ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// The target accepted it.
    Accepted,
    /// The target as a whole cannot take messages now: nothing reached it,
    /// or it said so for everything. Not a failure of the message: it does
    /// not use up a replay; the binding is in an outage until a send
    /// reaches it again.
    /// `not_before` when the target asked not to be tried again sooner.
    Unavailable { reason: String, not_before: Option<Duration> },
    /// Try again later: `after` when the header mapper named a delay (not
    /// a failed send); `not_before` when the target failed and asked not to
    /// be tried again sooner (an HTTP `Retry-After`).
    Transient { after: Option<Duration>, not_before: Option<Duration>, reason: String },
    /// Never deliverable to this binding.
    Failed(Failure),
}

/// Who is sending, for labels and logs.
#[derive(Clone, Copy)]
pub struct SendContext<'a> {
    pub route: &'a str,
    pub metrics: &'a Metrics,
    pub trace: &'a DeliveryTrace,
}

impl Binding {
    /// Maps the copy with the header mapper, sends it, and counts and traces
    /// the send. `attempt` counts earlier attempts of this copy (0 on the
    /// first), so what a sender drops from it is counted once.
    pub async fn deliver(&self, cx: SendContext<'_>, envelope: Envelope, address: &str, attempt: u32) -> Sent {
        let created = envelope.created_at;
        let (mut outbound, address) = match &self.header_mapper {
            None => (envelope, address.to_owned()),
            Some(mapper) => match mapper.map(envelope, &self.id, address).await {
                (env, Ok(None)) => (env, address.to_owned()),
                (env, Ok(Some(chosen))) => (env, chosen),
                (_, Err(ProcessError::Retry { after, reason })) => {
                    debug!(binding = %self.id, %reason, "header mapper asked for a retry");
                    return Sent::Transient { after: Some(after), not_before: None, reason };
                }
                (env, Err(ProcessError::Reject(failure))) => {
                    warn!(route = cx.route, message_id = %env.id, binding = %self.id, %failure, "header mapper refused the message");
                    // A mapper's own refusal is named for the mapper; a
                    // trap or deadline keeps its reason.
                    let reason = match failure.reason {
                        FailureReason::PluginRejected => FailureReason::HeaderMapper,
                        other => other,
                    };
                    return Sent::Failed(Failure::new(reason, failure.detail));
                }
            },
        };
        if cx.metrics.taps.open_count() > 0 {
            // The address as the sender will expand it (a template's
            // `{header}`s filled in), or as written when it cannot be.
            let expanded = crate::address::expand(&address, &outbound).unwrap_or_else(|_| address.clone());
            cx.metrics.taps.offer(cx.route, crate::tap::TapPoint::Egress, Some(&self.id), &[&expanded], &outbound);
        }
        let span = cx.trace.send(&self.id, &address, &mut outbound);
        let result = self.sender.send(OutboundMessage { envelope: outbound, address, attempt }).await;
        span.end(result.as_ref().err());
        match result {
            Ok(()) => {
                let (sent, age) = self.meters.0.get_or_init(|| {
                    let labels = crate::metrics::BindingLabels::new(cx.route, &self.id);
                    (
                        cx.metrics.sent.get_or_create(&labels).clone(),
                        cx.metrics.age_at_egress.get_or_create(&labels).clone(),
                    )
                });
                sent.inc();
                let age_ms = Timestamp::now().as_millis().saturating_sub(created.as_millis());
                age.observe(age_ms.max(0) as f64 / 1000.0);
                Sent::Accepted
            }
            Err(e) if e.is_unavailable() => Sent::Unavailable { not_before: e.retry_after, reason: e.reason },
            Err(e) if e.is_transient() => Sent::Transient { after: None, not_before: e.retry_after, reason: e.reason },
            Err(e) => Sent::Failed(e.failure()),
        }
    }
}
