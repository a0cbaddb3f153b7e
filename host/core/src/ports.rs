//! The ports adapters implement. Transports and the plugin host live in
//! other crates and plug in here as `Arc<dyn …>`, so tests can swap in fakes.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_envelope::{Envelope, Timestamp};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{Failure, TransportError};

/// One received message: the envelope and the transport's handle to settle it.
pub struct Delivery {
    pub envelope: Envelope,
    pub handle: Box<dyn DeliveryHandle>,
    /// Set when the receiver found the message damaged in a way a later
    /// receive may cure (an SQS digest mismatch): the route retries it like
    /// a transient failure and fails it with this reason once the source's
    /// redelivery count reaches `max_replay_attempts`.
    pub defect: Option<Failure>,
}

impl Delivery {
    pub fn new(envelope: Envelope, handle: Box<dyn DeliveryHandle>) -> Self {
        Self { envelope, handle, defect: None }
    }

    /// A delivery the route must not send on (see [`Delivery::defect`]).
    pub fn damaged(envelope: Envelope, handle: Box<dyn DeliveryHandle>, defect: Failure) -> Self {
        Self { envelope, handle, defect: Some(defect) }
    }
}

/// Transport-native acknowledgement of one received message.
#[async_trait]
pub trait DeliveryHandle: Send + Sync {
    /// Done with the message: the source may forget it (MQTT PUBACK/PUBREC,
    /// SQS DeleteMessage, AMQP accepted/ack).
    async fn ack(self: Box<Self>) -> Result<(), TransportError>;

    /// Not done: leave the message at the source so that it comes back. A
    /// transport that can delay redelivery (SQS visibility) uses `after`;
    /// one that cannot (MQTT) leaves it unacknowledged, and the broker
    /// resends it when the session reconnects.
    async fn release(self: Box<Self>, after: Duration, reason: &str) -> Result<(), TransportError>;

    /// Done with the message, which failed for good and was dropped: the
    /// source forgets it, but may note the refusal (AMQP `rejected`, which
    /// a queue's dead-letter exchange can catch). Defaults to [`ack`].
    ///
    /// [`ack`]: DeliveryHandle::ack
    async fn reject(self: Box<Self>, reason: &str) -> Result<(), TransportError> {
        let _ = reason;
        self.ack().await
    }

    /// Ask the source to keep the message reserved until `until`.
    async fn extend(&self, until: Timestamp) -> Result<(), TransportError> {
        let _ = until;
        Ok(())
    }

    /// Whether the message may be held while a target is in an outage,
    /// for as long as it lasts. False where someone waits for the answer
    /// (an HTTP caller): the message is released at once instead, and the
    /// caller retries.
    fn holds_through_outages(&self) -> bool {
        true
    }

    /// How many times the source has delivered this message before, when
    /// the transport knows.
    fn redelivery_count(&self) -> Option<u32> {
        None
    }

    /// Whether the source already took this delivery back (the channel or
    /// link it came on closed: RabbitMQ's `consumer_timeout`, a lost
    /// connection). Settling it does nothing and the source delivers it
    /// again, so a route holding it through an outage lets it go rather than
    /// send a copy that is already on its way back. `None`: the source
    /// cannot tell (the route then never asks again).
    fn gone(&self) -> Option<bool> {
        None
    }
}

/// Where a receiver hands its deliveries. Bounded: a full sink makes the
/// receiver wait, which is the route's backpressure.
pub type DeliverySink = mpsc::Sender<Delivery>;

/// Waits until the route can take at least one delivery; how many it can
/// take now. `None` when the route or `shutdown` stopped. Receivers that
/// fetch in batches (SQS) ask for no more than this.
pub async fn room(sink: &DeliverySink, shutdown: &CancellationToken) -> Option<usize> {
    tokio::select! {
        _ = shutdown.cancelled() => None,
        permit = sink.reserve() => match permit {
            Ok(p) => {
                drop(p);
                Some(sink.capacity().max(1))
            }
            Err(_) => None,
        },
    }
}

/// Waits until the route can take `want` deliveries (at most what it can
/// ever hold, at least one); how many it can take now. `None` when the
/// route or `shutdown` stopped.
///
/// For receivers that pay a round trip per read: a full route frees one
/// place per settled message, and reading whenever one place is free
/// reads one message per round trip, which caps the route at the
/// server's round-trip rate. Waiting for a batch costs nothing while the
/// route is full (what it holds is queued work), and never waits
/// forever: the route empties its queue as its messages settle.
pub async fn room_for(sink: &DeliverySink, want: usize, shutdown: &CancellationToken) -> Option<usize> {
    let want = want.clamp(1, sink.max_capacity());
    tokio::select! {
        _ = shutdown.cancelled() => None,
        permits = sink.reserve_many(want) => match permits {
            Ok(p) => {
                drop(p);
                Some(sink.capacity().max(want))
            }
            Err(_) => None,
        },
    }
}

/// Reads deliveries from a transport until `shutdown` fires.
#[async_trait]
pub trait Receiver: Send + Sync {
    /// Runs until cancelled. Connection loss is handled inside (reconnect
    /// with backoff); an error return means the receiver cannot go on.
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError>;
}

/// An envelope and the transport destination chosen for it. The address
/// travels beside the envelope and never overwrites its subject.
#[derive(Debug, Clone)]
pub struct OutboundMessage {
    pub envelope: Envelope,
    pub address: String,
    /// Earlier attempts to send this copy (0 on the first). Senders count
    /// what they drop from a message (headers a transport cannot carry)
    /// only on the first attempt, so a retry does not count it again.
    pub attempt: u32,
}

impl OutboundMessage {
    /// A first attempt.
    pub fn new(envelope: Envelope, address: impl Into<String>) -> Self {
        Self { envelope, address: address.into(), attempt: 0 }
    }

    /// Whether counters of what this copy loses should count it.
    pub fn counts_losses(&self) -> bool {
        self.attempt == 0
    }
}

/// Sends messages to one transport.
#[async_trait]
pub trait Sender: Send + Sync {
    /// Succeeds once the broker has accepted the message durably enough for
    /// the transport's settings (e.g. MQTT PUBACK for QoS 1).
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError>;

    /// Closes connections after in-flight sends finished.
    async fn close(&self) {}
}

/// What a processor decided for a message it could handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Continue to the next processor and the bindings.
    Pass,
    /// Acknowledge and send nowhere (not dead-lettered).
    Drop(String),
    /// Send to these addresses instead of the bindings' own.
    Route(Vec<String>),
}

/// Why a processor could not handle a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessError {
    /// Try again after the delay.
    Retry { after: Duration, reason: String },
    /// Never processable: dead-letter or drop per policy.
    Reject(Failure),
}

/// How one attempt to send a message to its bindings ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Every planned binding accepted it (or it is in the outbox).
    Delivered,
    /// A binding failed for now; the message will be retried.
    Failed(String),
    /// A binding refused it for good.
    Rejected(String),
}

/// A step of a route's processor chain (a WebAssembly plugin in practice).
#[async_trait]
pub trait Processor: Send + Sync {
    /// The name used in logs, metrics and dead-letter reasons.
    fn name(&self) -> &str;

    /// Processes the envelope, which the processor may change, and returns
    /// it with the decision.
    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>);

    /// Whether [`Processor::settled`] wants to be called.
    fn settles(&self) -> bool {
        false
    }

    /// Told after each attempt to send a message this processor passed.
    async fn settled(&self, _envelope: &Envelope, _outcome: &SendOutcome) {}
}

/// Runs per binding on the outbound copy of a message: may change its
/// headers and subject, and choose the address.
#[async_trait]
pub trait HeaderMapper: Send + Sync {
    fn name(&self) -> &str;

    /// Maps the copy for `binding` planned for `address`; `Ok(Some(a))`
    /// sends it to `a` instead.
    async fn map(
        &self,
        envelope: Envelope,
        binding: &str,
        address: &str,
    ) -> (Envelope, Result<Option<String>, ProcessError>);
}

/// Shared handle types.
pub type SharedSender = Arc<dyn Sender>;
pub type SharedProcessor = Arc<dyn Processor>;
pub type SharedHeaderMapper = Arc<dyn HeaderMapper>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn room_for_waits_for_a_batch_not_for_one_place() {
        let (sink, _rx) = mpsc::channel::<Delivery>(8);
        let stop = CancellationToken::new();
        // A full route: eight places taken.
        let mut taken = Vec::new();
        for _ in 0..8 {
            taken.push(sink.reserve().await.expect("open"));
        }
        let wait = room_for(&sink, 4, &stop);
        tokio::pin!(wait);
        for _ in 0..3 {
            taken.pop();
            assert!(
                tokio::time::timeout(Duration::from_millis(20), &mut wait).await.is_err(),
                "room for {} is not a batch of 4",
                sink.capacity()
            );
        }
        taken.pop();
        let room = tokio::time::timeout(Duration::from_secs(5), &mut wait).await.expect("a batch is free");
        assert_eq!(room, Some(4));
    }

    #[tokio::test]
    async fn room_for_more_than_the_route_holds_is_all_of_it() {
        let (sink, _rx) = mpsc::channel::<Delivery>(4);
        let stop = CancellationToken::new();
        assert_eq!(room_for(&sink, 100, &stop).await, Some(4));
        assert_eq!(room_for(&sink, 0, &stop).await, Some(4));
    }

    #[tokio::test]
    async fn room_for_ends_with_shutdown_or_the_route() {
        let (sink, rx) = mpsc::channel::<Delivery>(2);
        let stop = CancellationToken::new();
        let held = sink.reserve_many(2).await.expect("open");
        stop.cancel();
        assert_eq!(room_for(&sink, 1, &stop).await, None);
        drop(held);
        drop(rx);
        assert_eq!(room_for(&sink, 1, &CancellationToken::new()).await, None);
    }
}
