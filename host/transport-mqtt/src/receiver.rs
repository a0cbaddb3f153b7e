//! [`MqttReceiver`]: subscribes on a persistent session with manual acks.
//!
//! A QoS 1/2 publish is acknowledged (PUBACK/PUBREC) only when the route
//! acks its delivery. A delivery that is released, or whose connection was
//! lost before the ack, is not acknowledged at all: the broker keeps it in
//! the session and sends it again when the receiver reconnects (clean start
//! off, session expiry from the config). Each connection is a fresh rumqttc
//! client, so an ack can never reach a connection other than the one the
//! publish arrived on.
//!
//! With `connections = N` the receiver keeps N such sessions at once, each
//! under a client id of its own and all in one shared subscription, so the
//! broker's cap on unacknowledged messages per client applies N times.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::config::{MqttConnection, MqttReceiverConfig};
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::backoff::sleep_or_shutdown;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Timestamp;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, Publish};
use rumqttc::v5::{AsyncClient, Event};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::connection::{options, reconnect_backoff, redacted};
use crate::ingress::to_envelope;

/// How long a stopping receiver waits for the broker to read its last acks
/// and close the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Room above `max_payload_bytes` for the rest of a PUBLISH packet.
const PACKET_OVERHEAD: usize = 1 << 20;
/// MQTT's largest packet.
const MQTT_MAX_PACKET: usize = 268_435_455;

/// An MQTT 5 subscription feeding one route.
pub struct MqttReceiver {
    name: String,
    config: MqttReceiverConfig,
    connection: MqttConnection,
    /// Messages the broker may send before we ack (MQTT Receive Maximum).
    receive_maximum: u16,
    metrics: Metrics,
}

impl MqttReceiver {
    pub fn new(name: &str, config: MqttReceiverConfig, receive_maximum: u16, metrics: Metrics) -> Self {
        let connection = config.connection(name);
        Self { name: name.to_owned(), config, connection, receive_maximum: receive_maximum.max(1), metrics }
    }

    fn qos(&self) -> QoS {
        to_qos(self.config.qos)
    }

    fn client_options(&self, client_id: &str) -> Result<rumqttc::v5::MqttOptions, TransportError> {
        let connection = MqttConnection { client_id: client_id.to_owned(), ..self.connection.clone() };
        let mut o = options(&connection)?;
        o.set_clean_start(false);
        o.set_session_expiry_interval(Some(self.config.session_expiry_secs));
        o.set_manual_acks(true);
        o.set_receive_maximum(Some(self.receive_maximum));
        let max_packet = self.config.max_payload_bytes.saturating_add(PACKET_OVERHEAD).min(MQTT_MAX_PACKET);
        o.set_max_packet_size(Some(u32::try_from(max_packet).unwrap_or(u32::MAX)));
        o.set_request_channel_capacity(usize::from(self.receive_maximum) * 2 + 16);
        Ok(o)
    }

    /// Handles one publish: poison is acked, counted and gives `None`;
    /// anything else becomes a delivery for the route.
    async fn on_publish(&self, publish: Publish, client: &AsyncClient, alive: &Arc<AtomicBool>) -> Option<Delivery> {
        let receiver = self.name.as_str();
        match to_envelope(&publish, self.config.max_payload_bytes, Timestamp::now()) {
            Ok(ingress) => {
                if ingress.dropped_headers > 0 {
                    self.metrics
                        .counter_family(&crate::INGRESS_HEADER_DROPPED)
                        .get_or_create(&ferry_core::metrics::labels(&[("receiver", receiver)]))
                        .inc_by(u64::from(ingress.dropped_headers));
                }
                let handle =
                    MqttDeliveryHandle { client: client.clone(), publish: Some(publish), alive: alive.clone() };
                Some(Delivery::new(ingress.envelope, Box::new(handle)))
            }
            Err(poison) => {
                warn!(receiver, reason = poison.label(), "poison publish dropped");
                Metrics::inc(
                    &self.metrics.counter_family(&crate::INGRESS_POISON_DROPPED),
                    &[("receiver", receiver), ("reason", poison.label())],
                );
                if publish.qos != QoS::AtMostOnce
                    && let Err(e) = client.ack(&publish).await
                {
                    warn!(receiver, error = %e, "could not acknowledge poison publish");
                }
                None
            }
        }
    }
}

fn to_qos(q: u8) -> QoS {
    match q {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

#[async_trait]
impl Receiver for MqttReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let ids = self.config.client_ids(&self.name);
        let subscriptions = self.config.subscriptions(&self.name);
        let up = AtomicUsize::new(0);
        let sessions = ids.iter().map(|id| self.session(id, &subscriptions, ids.len(), &up, &sink, &shutdown));
        for result in futures_util::future::join_all(sessions).await {
            result?;
        }
        Ok(())
    }
}

impl MqttReceiver {
    /// One session under `client_id`, reconnecting until `shutdown`. `up`
    /// counts the sessions connected; the receiver is connected (the gauge
    /// `/readyz` reads) while all `of` are.
    async fn session(
        &self,
        client_id: &str,
        subscriptions: &[String],
        of: usize,
        up: &AtomicUsize,
        sink: &DeliverySink,
        shutdown: &CancellationToken,
    ) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let backoff = reconnect_backoff(&self.connection);
        let labels = ferry_core::metrics::labels(&[("kind", "mqtt"), ("role", "receiver"), ("name", receiver)]);
        let mut failures: u32 = 0;
        let mut accepting = true;
        let mut counted = false;
        let went_down = |counted: &mut bool| {
            if std::mem::take(counted) {
                up.fetch_sub(1, Ordering::SeqCst);
            }
            self.metrics.connected.get_or_create(&labels).set(0);
        };
        while !shutdown.is_cancelled() {
            let (client, mut events) =
                AsyncClient::new(self.client_options(client_id)?, usize::from(self.receive_maximum) * 2 + 16);
            let alive = Arc::new(AtomicBool::new(true));
            let mut session_present = false;
            // Deliveries the route has no room for yet. The event loop is
            // polled all the same: it is what sends the acknowledgements
            // that make room (the broker's receive maximum bounds this).
            let mut backlog: VecDeque<Delivery> = VecDeque::new();
            let stopped = loop {
                let event = tokio::select! {
                    _ = shutdown.cancelled() => break true,
                    permit = sink.reserve(), if accepting && !backlog.is_empty() => {
                        match (permit, backlog.pop_front()) {
                            (Ok(permit), Some(delivery)) => permit.send(delivery),
                            // The route stopped taking deliveries; what
                            // arrives now stays unacknowledged for the
                            // next session.
                            _ => accepting = false,
                        }
                        continue;
                    }
                    e = events.poll() => e,
                };
                match event {
                    Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                        failures = 0;
                        session_present = ack.session_present;
                        let filters = subscriptions.iter().map(|t| Filter::new(t.clone(), self.qos()));
                        if let Err(e) = client.subscribe_many(filters).await {
                            warn!(receiver, error = %e, "subscribe request failed");
                        }
                    }
                    Ok(Event::Incoming(Packet::SubAck(ack))) => {
                        for (topic, code) in subscriptions.iter().zip(&ack.return_codes) {
                            if !matches!(code, rumqttc::v5::mqttbytes::v5::SubscribeReasonCode::Success(_)) {
                                warn!(receiver, %topic, ?code, "broker refused subscription");
                            }
                        }
                        // Connected means subscribed: from here on what is
                        // published to the topics reaches this receiver.
                        info!(receiver, client_id, url = %redacted(&self.connection.url), session_present, "connected");
                        self.metrics.connections.get_or_create(&labels).inc();
                        if !std::mem::replace(&mut counted, true) && up.fetch_add(1, Ordering::SeqCst) + 1 == of {
                            self.metrics.connected.get_or_create(&labels).set(1);
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(publish))) => {
                        if accepting && let Some(delivery) = self.on_publish(publish, &client, &alive).await {
                            backlog.push_back(delivery);
                        }
                    }
                    Ok(other) => debug!(receiver, event = ?other, "mqtt event"),
                    Err(e) => {
                        alive.store(false, Ordering::SeqCst);
                        went_down(&mut counted);
                        let delay = backoff.next(&mut failures);
                        warn!(receiver, client_id, error = %e, retry_in_ms = delay.as_millis() as u64, "connection lost; reconnecting");
                        sleep_or_shutdown(delay, shutdown).await;
                        break false;
                    }
                }
            };
            if stopped {
                // Every delivery was settled before the route cancelled us;
                // flush the queued acks, disconnect, and wait for the broker
                // to close the connection: only then has it read the acks.
                // Leaving earlier races the next session under the same
                // client id (a restart), whose CONNECT the broker may take
                // before it reads the old socket, resending what was acked.
                let _ = client.disconnect().await;
                let flush = async { while events.poll().await.is_ok() {} };
                let _ = tokio::time::timeout(CLOSE_GRACE, flush).await;
                alive.store(false, Ordering::SeqCst);
                went_down(&mut counted);
                info!(receiver, client_id, "disconnected");
            }
        }
        Ok(())
    }
}

/// Settles one publish on the connection it arrived on.
struct MqttDeliveryHandle {
    client: AsyncClient,
    publish: Option<Publish>,
    alive: Arc<AtomicBool>,
}

#[async_trait]
impl DeliveryHandle for MqttDeliveryHandle {
    async fn ack(mut self: Box<Self>) -> Result<(), TransportError> {
        let Some(publish) = self.publish.take() else {
            return Ok(());
        };
        if publish.qos == QoS::AtMostOnce {
            return Ok(());
        }
        if !self.alive.load(Ordering::SeqCst) {
            return Err(TransportError::transient("connection lost before the ack; the broker will redeliver"));
        }
        self.client.ack(&publish).await.map_err(|e| TransportError::transient(format!("ack not sent: {e}")))
    }

    async fn release(self: Box<Self>, _after: Duration, reason: &str) -> Result<(), TransportError> {
        // MQTT has no negative ack: leaving the publish unacknowledged keeps
        // it in the broker's session until the next connection.
        debug!(%reason, "mqtt delivery released unacknowledged");
        Ok(())
    }
}
