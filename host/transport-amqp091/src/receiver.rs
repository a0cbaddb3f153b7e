//! [`Amqp091Receiver`]: consumes one queue with manual acks.
//!
//! At connect it sets `basic.qos(prefetch)`, declares the queue (durable,
//! or passively), declares or checks the exchange and binds each routing
//! key, then consumes. A delivery is acked when the route is done with it.
//! A retry is a `basic.nack` with requeue after the route's backoff; the
//! receiver counts releases per message (by `message_id`, or a fingerprint
//! of the content when there is none; quorum queues' `x-delivery-count` is
//! used too, less the returns that were not releases), so the route sees a growing redelivery count and dead-letters
//! the message at `max_replay_attempts` instead of cycling it forever. A
//! message that failed for good and was dropped (`on_permanent_failure =
//! "drop"`) is rejected without requeue, so a queue's dead-letter exchange
//! catches it; one written to ferry's DLQ is acked. A body over
//! `max_message_bytes` is rejected without requeue (the queue's
//! dead-letter exchange gets it, if it has one) and counted, and so is a
//! message with a short string (its `message_id`, a header name) whose
//! bytes are not UTF-8 (`undecodable`): it cannot cross as sent, and left on
//! the queue it would come back for ever. After a lost
//! connection the broker requeues every unacked message itself.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Amqp091ReceiverConfig;
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::backoff::sleep_or_shutdown;
use ferry_core::ledger::{RedeliveryLedger, Tracked, fingerprint};
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Timestamp;
use futures_lite::StreamExt;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, Consumer, ExchangeKind};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::connection::{close, close_with, open};
use crate::ingress::{from_delivery, undecodable_field};
use crate::settle::Settler;

/// An AMQP 0-9-1 queue consumer feeding one route.
pub struct Amqp091Receiver {
    name: String,
    config: Amqp091ReceiverConfig,
    metrics: Metrics,
    ledger: Arc<RedeliveryLedger>,
}

/// The RabbitMQ exchange kind for a config name.
pub fn exchange_kind(name: &str) -> ExchangeKind {
    match name {
        "fanout" => ExchangeKind::Fanout,
        "topic" => ExchangeKind::Topic,
        "headers" => ExchangeKind::Headers,
        _ => ExchangeKind::Direct,
    }
}

impl Amqp091Receiver {
    pub fn new(name: &str, config: Amqp091ReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics, ledger: Arc::default() }
    }

    /// Connects and sets up the topology and the consumer.
    async fn consume(&self) -> Result<(Connection, Channel, Consumer), TransportError> {
        let connection = open(&self.config.url, &self.name, self.config.tls.as_ref()).await?;
        match self.setup(&connection).await {
            Ok((channel, consumer)) => Ok((connection, channel, consumer)),
            Err(e) => {
                close(&connection).await;
                Err(e)
            }
        }
    }

    async fn setup(&self, connection: &Connection) -> Result<(Channel, Consumer), TransportError> {
        let c = &self.config;
        let err = |what: &str, e: lapin::Error| TransportError::transient(format!("{what}: {e}"));
        let channel = connection.create_channel().await.map_err(|e| err("open channel", e))?;
        let prefetch = u16::try_from(c.prefetch).unwrap_or(u16::MAX);
        channel.basic_qos(prefetch, BasicQosOptions::default()).await.map_err(|e| err("basic.qos", e))?;
        let queue = crate::connection::short("queue", &c.queue)?;
        let options = QueueDeclareOptions { passive: c.queue_passive, durable: true, ..Default::default() };
        let mut arguments = FieldTable::default();
        if c.single_active_consumer {
            arguments.insert("x-single-active-consumer".into(), lapin::types::AMQPValue::Boolean(true));
        }
        channel
            .queue_declare(queue.clone(), options, arguments)
            .await
            .map_err(|e| err(&format!("declare queue {:?}", c.queue), e))?;
        if let Some(exchange) = &c.exchange {
            let x = crate::connection::short("exchange", exchange)?;
            let options = ExchangeDeclareOptions { passive: c.exchange_passive, durable: true, ..Default::default() };
            channel
                .exchange_declare(x.clone(), exchange_kind(&c.exchange_type), options, FieldTable::default())
                .await
                .map_err(|e| err(&format!("declare exchange {exchange:?}"), e))?;
            for key in c.routing_key.keys() {
                let k = crate::connection::short("routing key", &key)?;
                channel
                    .queue_bind(queue.clone(), x.clone(), k, QueueBindOptions::default(), FieldTable::default())
                    .await
                    .map_err(|e| err(&format!("bind {:?} to {exchange:?} with {key:?}", c.queue), e))?;
            }
        }
        let tag = format!("ferry-{}-{}", self.name, &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let consumer = channel
            .basic_consume(queue, tag.as_str().into(), BasicConsumeOptions::default(), FieldTable::default())
            .await
            .map_err(|e| err("basic.consume", e))?;
        Ok((channel, consumer))
    }

    /// Rejects a delivery the route never sees, without requeue (the
    /// queue's dead-letter exchange gets it, if it has one), and counts it
    /// in `ferry_ingress_rejected_total` with `reason`.
    async fn refuse(&self, d: &lapin::message::Delivery, reason: &str, settler: &Settler) {
        Metrics::inc(
            &self.metrics.ingress_rejected,
            &[("kind", "amqp091"), ("receiver", &self.name), ("reason", reason)],
        );
        if let Err(e) = settler.reject(d.delivery_tag).await {
            warn!(receiver = %self.name, reason, error = %e, "could not reject a message the route cannot take");
        }
    }

    /// Turns one delivery into a route delivery; oversized and undecodable
    /// messages are rejected here and yield nothing.
    async fn on_delivery(&self, d: lapin::message::Delivery, settler: &Settler) -> Option<Delivery> {
        if d.data.len() > self.config.max_message_bytes {
            warn!(receiver = %self.name, bytes = d.data.len(), "message over max_message_bytes rejected");
            self.refuse(&d, "too_large", settler).await;
            return None;
        }
        if let Some(field) = undecodable_field(&d.exchange, &d.routing_key, &d.properties) {
            warn!(receiver = %self.name, field = %field, "message with bytes that are not UTF-8 rejected as undecodable");
            self.refuse(&d, "undecodable", settler).await;
            return None;
        }
        let ingress = from_delivery(&d, Timestamp::now());
        if ingress.dropped_headers > 0 {
            self.metrics
                .amqp_header_dropped
                .get_or_create(&ferry_core::metrics::labels(&[
                    ("kind", "amqp091"),
                    ("name", &self.name),
                    ("direction", "ingress"),
                ]))
                .inc_by(u64::from(ingress.dropped_headers));
        }
        let key = if ingress.has_id {
            format!("id:{}", ingress.envelope.id)
        } else {
            fingerprint(&[
                d.exchange.as_str().as_bytes(),
                d.routing_key.as_str().as_bytes(),
                format!("{:?}", d.properties).as_bytes(),
                &d.data,
            ])
        };
        let tracked = self.ledger.track(key, ingress.delivery_count);
        let handle = Amqp091DeliveryHandle { tag: Some(d.delivery_tag), settler: settler.clone(), tracked };
        Some(Delivery::new(ingress.envelope, Box::new(handle)))
    }
}

#[async_trait]
impl Receiver for Amqp091Receiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let url = ferry_core::redact::url(&self.config.url);
        let backoff =
            ferry_core::backoff::Backoff::reconnect(self.config.reconnect_initial_ms, self.config.reconnect_max_ms);
        let labels = ferry_core::metrics::labels(&[("kind", "amqp091"), ("role", "receiver"), ("name", receiver)]);
        let mut failures: u32 = 0;
        'connect: while !shutdown.is_cancelled() {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = self.consume() => r,
            };
            let reason = match connected {
                Ok((connection, channel, mut consumer)) => {
                    failures = 0;
                    info!(receiver, %url, queue = %self.config.queue, "connected");
                    self.metrics.connections.get_or_create(&labels).inc();
                    self.metrics.connected.get_or_create(&labels).set(1);
                    let settler = Settler::start(channel.clone());
                    let reason = loop {
                        let next = tokio::select! {
                            _ = shutdown.cancelled() => break None,
                            n = consumer.next() => n,
                        };
                        match next {
                            Some(Ok(d)) => {
                                let Some(delivery) = self.on_delivery(d, &settler).await else { continue };
                                let sent = tokio::select! {
                                    _ = shutdown.cancelled() => break None,
                                    s = sink.send(delivery) => s,
                                };
                                if sent.is_err() {
                                    // The route stopped; what is unacked goes
                                    // back to the queue with the connection.
                                    stop(&connection, &channel, &consumer, &settler).await;
                                    self.metrics.connected.get_or_create(&labels).set(0);
                                    shutdown.cancelled().await;
                                    break 'connect;
                                }
                            }
                            Some(Err(e)) => break Some(e.to_string()),
                            None => break Some("the broker cancelled the consumer".to_owned()),
                        }
                    };
                    self.metrics.connected.get_or_create(&labels).set(0);
                    stop(&connection, &channel, &consumer, &settler).await;
                    match reason {
                        None => {
                            info!(receiver, "disconnected");
                            break;
                        }
                        Some(r) => r,
                    }
                }
                Err(e) => e.reason,
            };
            let delay = backoff.next(&mut failures);
            warn!(receiver, %url, error = %reason, retry_in_ms = delay.as_millis() as u64, "connection lost; reconnecting");
            if !sleep_or_shutdown(delay, &shutdown).await {
                break;
            }
        }
        Ok(())
    }
}

/// How long cancelling the consumer may take when stopping.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(2);

/// Stops consuming and closes: cancels the consumer first, so the broker
/// sends no delivery into a closing channel (lapin takes that for a
/// connection error), writes the acks the route already gave, then closes;
/// the broker requeues whatever is still unacked.
async fn stop(connection: &Connection, channel: &Channel, consumer: &Consumer, settler: &Settler) {
    if connection.status().connected() {
        let cancel = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default());
        let _ = tokio::time::timeout(CANCEL_TIMEOUT, cancel).await;
    }
    settler.flush().await;
    close_with(connection, channel).await;
}

/// Acks or requeues one delivery on the channel it came on, through the
/// channel's [`Settler`].
struct Amqp091DeliveryHandle {
    /// `None` once settled.
    tag: Option<u64>,
    settler: Settler,
    tracked: Tracked,
}

#[async_trait]
impl DeliveryHandle for Amqp091DeliveryHandle {
    async fn ack(mut self: Box<Self>) -> Result<(), TransportError> {
        let Some(tag) = self.tag.take() else { return Ok(()) };
        self.tracked.settled();
        self.settler.ack(tag).await
    }

    async fn release(mut self: Box<Self>, after: Duration, reason: &str) -> Result<(), TransportError> {
        let Some(tag) = self.tag.take() else { return Ok(()) };
        // A release on a closed channel reaches nobody: the broker took the
        // delivery back on its own, and that is not an attempt.
        if !self.settler.is_gone() {
            self.tracked.released();
        }
        debug!(%reason, after_ms = after.as_millis() as u64, "amqp091 delivery will be requeued");
        // The delivery holds its prefetch slot until the nack, so waiting
        // cannot pull more than `prefetch` messages; no range ack passes it
        // meanwhile (see `settle`).
        let settler = self.settler.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            settler.requeue(tag);
        });
        Ok(())
    }

    async fn reject(mut self: Box<Self>, reason: &str) -> Result<(), TransportError> {
        let Some(tag) = self.tag.take() else { return Ok(()) };
        self.tracked.settled();
        debug!(%reason, "amqp091 delivery rejected without requeue");
        self.settler.reject(tag).await
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.tracked.count())
    }

    fn gone(&self) -> Option<bool> {
        Some(self.settler.is_gone())
    }
}

impl Drop for Amqp091DeliveryHandle {
    /// A delivery dropped unsettled goes back to the queue now rather than
    /// when the channel closes, so later acks can range past it.
    fn drop(&mut self) {
        if let Some(tag) = self.tag.take() {
            self.settler.requeue(tag);
        }
    }
}
