//! Routes to and from endpoint queues: a receiver `type = "sqs_endpoint"`
//! consumes what applications send to a queue, a sender puts a route's
//! messages where applications receive them. Both go straight to the
//! [`Engine`] (no HTTP in between) and map envelopes exactly as the SQS
//! transport does (attributes, system attributes, the 10-attribute budget,
//! FIFO ids).
//!
//! The default subject follows seed 003's channel grammar: `sqs.{name}`,
//! and on a FIFO queue `sqs.{name}.g.{enc(group)}` (`name` ends in `.fifo`),
//! `enc` percent-encoding every byte outside `[a-zA-Z0-9_-]`; a receiver
//! on a topic gives `sns.{topic}`. A `Subject` attribute, when a message
//! has one, wins. A receiver on a topic unwraps the Notification as the SQS
//! transport's `sns_unwrap` does (`sns.TopicArn`, `sns.Subject`, …).

use std::sync::Arc;
use std::time::Duration;

use crate::config::{SqsEndpointReceiverConfig, SqsEndpointSenderConfig};
use async_trait::async_trait;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use ferry_core::TransportError;
use ferry_core::ledger::{RedeliveryLedger, Tracked};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, OutboundMessage, Receiver, Sender};
use ferry_envelope::Timestamp;
use ferry_transport_sqs::attributes::{AttributeValue, body, select};
use ferry_transport_sqs::ingress::convert;
use ferry_transport_sqs::sender::dedup_id;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::engine::{Engine, Outgoing, ReceiveOptions, Received};
use crate::error::{ErrorKind, SqsError};
use crate::model::{Attr, AttrValue, MAX_MESSAGE_BYTES};
use crate::sns::topics::Topics;

/// The sender id messages a route sends carry.
pub const SENDER_ID: &str = "ferry";

/// `enc` of seed 003: every byte outside `[a-zA-Z0-9_-]` as `%XX`.
pub fn enc(group: &str) -> String {
    let mut out = String::with_capacity(group.len());
    for b in group.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The default subject of a message of `queue` in `group`.
pub fn channel(queue: &str, group: Option<&str>) -> String {
    match group {
        Some(g) if queue.ends_with(".fifo") => format!("sqs.{queue}.g.{}", enc(g)),
        _ => format!("sqs.{queue}"),
    }
}

/// A received message as the SQS SDK would have returned it, so the SQS
/// transport's ingress mapping applies unchanged.
pub fn as_sdk_message(r: &Received) -> Message {
    let s = &r.stored;
    let mut b = Message::builder().message_id(&s.id).receipt_handle(&r.receipt_handle).body(&s.body);
    for a in &s.attributes {
        let v = MessageAttributeValue::builder().data_type(&a.data_type);
        let v = match &a.value {
            AttrValue::Text(t) => v.string_value(t),
            AttrValue::Binary(bytes) => v.binary_value(Blob::new(bytes.clone())),
        };
        if let Ok(v) = v.build() {
            b = b.message_attributes(&a.name, v);
        }
    }
    let mut system = vec![
        (MessageSystemAttributeName::SenderId, s.sender_id.clone()),
        (MessageSystemAttributeName::SentTimestamp, s.sent_ms.to_string()),
        (MessageSystemAttributeName::ApproximateReceiveCount, r.receive_count.to_string()),
        (MessageSystemAttributeName::ApproximateFirstReceiveTimestamp, r.first_receive_ms.to_string()),
    ];
    let optional = [
        (MessageSystemAttributeName::AwsTraceHeader, s.trace_header.clone()),
        (MessageSystemAttributeName::MessageGroupId, s.group.clone()),
        (MessageSystemAttributeName::MessageDeduplicationId, s.dedup_id.clone()),
        (MessageSystemAttributeName::SequenceNumber, s.sequence.map(crate::model::sequence_number)),
        (MessageSystemAttributeName::DeadLetterQueueSourceArn, s.source_arn.clone()),
    ];
    system.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v?))));
    for (k, v) in system {
        b = b.attributes(k, v);
    }
    b.build()
}

/// `type = "sqs_endpoint"` receiver: from a queue, or (`topic`) from an
/// SNS topic through a queue of the route's own.
pub struct EndpointReceiver {
    name: String,
    config: SqsEndpointReceiverConfig,
    engine: Arc<Engine>,
    topics: Arc<Topics>,
    metrics: Metrics,
    /// Receive counts less the returns that were not releases of ours.
    ledger: Arc<RedeliveryLedger>,
}

impl EndpointReceiver {
    pub fn new(name: &str, config: SqsEndpointReceiverConfig, topics: Arc<Topics>, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, engine: topics.queues.clone(), topics, metrics, ledger: Arc::default() }
    }

    /// The queue to receive from: the configured one, or the route's own
    /// queue on its topic (attached now if it was not).
    async fn queue(&self, shutdown: &CancellationToken) -> Option<String> {
        if self.config.topic.is_empty() {
            return Some(self.config.queue.clone());
        }
        loop {
            match self.topics.attach(&self.config.topic, &self.name).await {
                Ok(queue) => return Some(queue),
                Err(e) => {
                    warn!(receiver = %self.name, topic = %self.config.topic, error = %e,
                        "cannot attach to the topic; retrying in 1 s");
                    if !ferry_core::backoff::sleep_or_shutdown(Duration::from_secs(1), shutdown).await {
                        return None;
                    }
                }
            }
        }
    }
}

#[async_trait]
impl Receiver for EndpointReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let Some(queue) = self.queue(&shutdown).await else { return Ok(()) };
        let queue = queue.as_str();
        let from_topic = !self.config.topic.is_empty();
        let gauge = labels(&[("kind", "sqs_endpoint"), ("role", "receiver"), ("name", receiver)]);
        info!(receiver, queue, "connected; receiving from the SQS endpoint");
        self.metrics.connected.get_or_create(&gauge).set(1);
        while !shutdown.is_cancelled() {
            let Some(room) = ferry_core::ports::room(&sink, &shutdown).await else {
                break;
            };
            let options = ReceiveOptions {
                max: room.min(self.config.max_messages as usize).max(1),
                visibility_s: Some(i64::from(self.config.visibility_timeout)),
                wait: Some(Duration::from_secs(20)),
            };
            let got = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = self.engine.receive(queue, options) => r,
            };
            let messages = match got {
                Ok(m) => {
                    self.metrics.connected.get_or_create(&gauge).set(1);
                    m
                }
                Err(e) => {
                    // A queue deleted under the route: wait for it to come back.
                    self.metrics.connected.get_or_create(&gauge).set(0);
                    warn!(receiver, queue, error = %e, "cannot receive from the endpoint queue; retrying in 1 s");
                    if !ferry_core::backoff::sleep_or_shutdown(Duration::from_secs(1), &shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            for r in messages {
                let mut envelope = convert(&as_sdk_message(&r), from_topic, Timestamp::now());
                if envelope.subject.is_none() {
                    envelope.subject = Some(if from_topic {
                        format!("sns.{}", self.config.topic)
                    } else {
                        channel(queue, r.stored.group.as_deref())
                    });
                }
                // A return made by the visibility running out while held is
                // counted by the queue and left out by the ledger.
                let tracked = self.ledger.track(r.stored.id.clone(), Some(r.receive_count.saturating_sub(1)));
                let handle = EndpointHandle::start(
                    self.engine.clone(),
                    queue.to_owned(),
                    r.receipt_handle.clone(),
                    tracked,
                    self.config.visibility_timeout,
                );
                if sink.send(Delivery::new(envelope, Box::new(handle))).await.is_err() {
                    break;
                }
            }
        }
        self.metrics.connected.get_or_create(&gauge).set(0);
        Ok(())
    }
}

/// Settles one message of an endpoint queue; keeps it invisible while the
/// route holds it.
struct EndpointHandle {
    engine: Arc<Engine>,
    queue: String,
    receipt: String,
    tracked: Tracked,
    heartbeat: CancellationToken,
}

impl EndpointHandle {
    fn start(engine: Arc<Engine>, queue: String, receipt: String, tracked: Tracked, visibility: i32) -> Self {
        let heartbeat = CancellationToken::new();
        let stop = heartbeat.clone();
        let (e, q, r) = (engine.clone(), queue.clone(), receipt.clone());
        tokio::spawn(async move {
            let period = Duration::from_millis(u64::from(visibility.max(1).unsigned_abs()) * 500);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(period) => {}
                }
                if let Err(err) = e.change_visibility(&q, &r, i64::from(visibility)).await {
                    debug!(queue = %q, error = %err, "visibility heartbeat failed");
                }
            }
        });
        Self { engine, queue, receipt, tracked, heartbeat }
    }
}

impl Drop for EndpointHandle {
    fn drop(&mut self) {
        self.heartbeat.cancel();
    }
}

fn transport_error(e: SqsError) -> TransportError {
    if matches!(e.kind, ErrorKind::Internal | ErrorKind::NonExistentQueue) {
        TransportError::transient(e.to_string())
    } else {
        TransportError::permanent(e.to_string())
    }
}

#[async_trait]
impl DeliveryHandle for EndpointHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.settled();
        let answers = self.engine.delete_messages(&self.queue, std::slice::from_ref(&self.receipt)).await;
        match answers.map_err(transport_error)?.into_iter().next() {
            Some(Err(e)) => Err(transport_error(e)),
            _ => Ok(()),
        }
    }

    async fn release(self: Box<Self>, after: Duration, _reason: &str) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.released();
        let seconds = after.as_secs().min(43_200) as i64;
        match self.engine.change_visibility(&self.queue, &self.receipt, seconds).await {
            // No longer in the queue (purged, past its retention): nothing
            // to give back. (A handle gone stale changes nothing and is Ok.)
            Err(e) if e.kind == ErrorKind::MessageGone => Ok(()),
            other => other.map_err(transport_error),
        }
    }

    async fn extend(&self, until: Timestamp) -> Result<(), TransportError> {
        let seconds = ((until.as_millis() - Timestamp::now().as_millis()) / 1000).clamp(0, 43_200);
        self.engine.change_visibility(&self.queue, &self.receipt, seconds).await.map_err(transport_error)
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.tracked.count())
    }
}

/// `type = "sqs_endpoint"` sender.
pub struct EndpointSender {
    name: String,
    config: SqsEndpointSenderConfig,
    engine: Arc<Engine>,
    metrics: Metrics,
}

impl EndpointSender {
    /// The endpoint's queues are in this process: the sender is connected
    /// from the start, as `/readyz` wants every sender to be (as the HTTP
    /// sender, which has no connection of its own either).
    pub fn new(name: &str, config: SqsEndpointSenderConfig, engine: Arc<Engine>, metrics: Metrics) -> Self {
        let gauge = labels(&[("kind", "sqs_endpoint"), ("role", "sender"), ("name", name)]);
        metrics.connected.get_or_create(&gauge).set(1);
        Self { name: name.to_owned(), config, engine, metrics }
    }
}

#[async_trait]
impl Sender for EndpointSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let queue = if msg.address.is_empty() { self.config.queue.as_str() } else { msg.address.as_str() };
        let (fifo, _, max_size) = self.engine.queue_kind(queue).await.map_err(transport_error)?;
        let envelope = &msg.envelope;
        let text = body(envelope)?;
        let max = usize::try_from(max_size).unwrap_or(MAX_MESSAGE_BYTES);
        if text.len() > max {
            return Err(TransportError::permanent(format!(
                "body is {} bytes, over the queue's MaximumMessageSize {max}",
                text.len()
            )));
        }
        let selection = select(envelope, text.len(), max);
        if selection.dropped > 0 && msg.counts_losses() {
            self.metrics
                .counter_family(&ferry_transport_sqs::DROPPED_ATTRIBUTES)
                .get_or_create(&labels(&[("sender", &self.name)]))
                .inc_by(u64::from(selection.dropped));
        }
        let attributes = selection
            .attributes
            .into_iter()
            .map(|(name, v)| {
                let data_type = v.data_type().to_owned();
                let value = match v {
                    AttributeValue::String(s) | AttributeValue::Number(s) => AttrValue::Text(s),
                    AttributeValue::Binary(b) => AttrValue::Binary(b),
                };
                Attr { name, data_type, value }
            })
            .collect();
        let (group, dedup) = if fifo {
            let group = envelope
                .text_header(&self.config.message_group_header)
                .filter(|g| !g.is_empty() && g.len() <= 128)
                .unwrap_or(&self.config.default_message_group)
                .to_owned();
            (Some(group), Some(dedup_id(envelope)))
        } else {
            (None, None)
        };
        let outgoing = Outgoing {
            body: text,
            attributes,
            trace_header: None,
            delay_s: None,
            group,
            dedup_id: dedup,
            sender_id: SENDER_ID.to_owned(),
        };
        self.engine.send(queue, vec![outgoing]).await.map(|_| ()).map_err(transport_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_follow_the_seed_grammar() {
        assert_eq!(channel("orders", None), "sqs.orders");
        assert_eq!(channel("orders", Some("ignored on standard queues")), "sqs.orders");
        assert_eq!(channel("tasks.fifo", Some("g1")), "sqs.tasks.fifo.g.g1");
        assert_eq!(channel("tasks.fifo", Some("order/42")), "sqs.tasks.fifo.g.order%2F42");
        assert_eq!(enc("a b.c~é"), "a%20b%2Ec%7E%C3%A9");
    }
}
