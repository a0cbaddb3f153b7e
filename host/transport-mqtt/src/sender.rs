//! [`MqttSender`]: publishes and completes each send on the broker's
//! acknowledgement — PUBACK for QoS 1, PUBCOMP for QoS 2, the write for
//! QoS 0.
//!
//! rumqttc reports the packet id it gave each publish as an
//! `Outgoing::Publish(pkid)` event, in the order the publishes were
//! requested. The sender therefore queues one waiter per publish under a
//! lock that also orders the requests, pairs waiters with packet ids as
//! the events arrive, and completes them on the acknowledgement. A lost
//! connection fails every waiter of that connection as transient (the
//! route retries; the broker may then see a duplicate, never a loss), and
//! the next connection is a fresh client with a clean session, so nothing
//! of the old one is replayed behind the waiters' backs.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{MqttConnection, MqttSenderConfig};
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::backoff::sleep_or_shutdown;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::Timestamp;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, PubRecReason};
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::connection::{options, reconnect_backoff, redacted};
use crate::egress::prepare;

type Waiter = oneshot::Sender<Result<(), TransportError>>;

/// Waiters of one connection that have not been given a packet id yet.
struct Queued {
    dead: bool,
    waiters: VecDeque<Waiter>,
}

/// One live connection.
struct Connection {
    client: AsyncClient,
    /// The broker's Maximum Packet Size from CONNACK (0 = no limit).
    max_packet: AtomicU32,
    queued: Mutex<Queued>,
    /// Orders "queue a waiter" with "hand the publish to the client".
    submit: tokio::sync::Mutex<()>,
}

impl Connection {
    fn fail_all(&self, reason: &str) {
        let waiters = match self.queued.lock() {
            Ok(mut q) => {
                q.dead = true;
                std::mem::take(&mut q.waiters)
            }
            Err(_) => return,
        };
        for w in waiters {
            let _ = w.send(Err(TransportError::unavailable(reason.to_owned())));
        }
    }
}

struct Shared {
    name: String,
    config: MqttSenderConfig,
    connection: MqttConnection,
    current: Mutex<Option<Arc<Connection>>>,
    metrics: Metrics,
}

/// An MQTT 5 publisher used by one or more bindings.
pub struct MqttSender {
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl MqttSender {
    /// Creates the sender and starts connecting in the background.
    pub fn start(name: &str, config: MqttSenderConfig, metrics: Metrics) -> Result<Self, TransportError> {
        let connection = config.connection(name);
        options(&connection)?;
        let shared = Arc::new(Shared { name: name.to_owned(), config, connection, current: Mutex::new(None), metrics });
        let stop = CancellationToken::new();
        let task = tokio::spawn(connection_loop(shared.clone(), stop.clone()));
        Ok(Self { shared, stop, task: Mutex::new(Some(task)) })
    }

    fn qos(&self) -> QoS {
        match self.shared.config.qos {
            0 => QoS::AtMostOnce,
            1 => QoS::AtLeastOnce,
            _ => QoS::ExactlyOnce,
        }
    }

    /// Waits until the first connection is up (for tests and start-up
    /// ordering); false on timeout.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.shared.current.lock().map(|c| c.is_some()).unwrap_or(false) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

#[async_trait]
impl Sender for MqttSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let shared = &self.shared;
        let publish = prepare(&shared.config, &msg, Timestamp::now())?;
        let conn = shared
            .current
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .ok_or_else(|| TransportError::unavailable(format!("mqtt sender {} is not connected", shared.name)))?;
        // Counted once per message and binding, not on every retry.
        if publish.non_text_dropped > 0 && msg.counts_losses() {
            shared
                .metrics
                .counter_family(&crate::NON_STRING_HEADER_DROPPED)
                .get_or_create(&ferry_core::metrics::labels(&[("sender", &shared.name)]))
                .inc_by(u64::from(publish.non_text_dropped));
        }
        let limit = conn.max_packet.load(Ordering::Relaxed);
        if limit > 0 && publish.packet_size() > limit as usize {
            // A packet over the broker's limit would only break the
            // connection on every retry: it can never be sent.
            return Err(TransportError::permanent(format!(
                "message of {} bytes exceeds the broker's maximum packet size of {limit} bytes",
                publish.packet_size()
            )));
        }
        let (tx, rx) = oneshot::channel();
        {
            let _order = conn.submit.lock().await;
            match conn.queued.lock() {
                Ok(mut q) if !q.dead => q.waiters.push_back(tx),
                _ => return Err(TransportError::unavailable("connection lost")),
            }
            if let Err(e) = conn
                .client
                .publish_with_properties(
                    publish.topic,
                    self.qos(),
                    shared.config.retain,
                    publish.payload,
                    publish.properties,
                )
                .await
            {
                // Never handed to the client, so no packet id will come for
                // it: take the waiter back (it is the newest, as the submit
                // lock is held) to keep waiters and publishes paired.
                if let Ok(mut q) = conn.queued.lock() {
                    q.waiters.pop_back();
                }
                return Err(TransportError::unavailable(format!("publish not queued: {e}")));
            }
        }
        match tokio::time::timeout(Duration::from_millis(shared.config.ack_timeout_ms), rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(TransportError::unavailable("connection closed before the broker acknowledged")),
            Err(_) => Err(TransportError::unavailable(format!(
                "no acknowledgement within {} ms",
                shared.config.ack_timeout_ms
            ))),
        }
    }

    async fn close(&self) {
        self.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for MqttSender {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn ack_error(reason: &str, permanent: bool) -> TransportError {
    if permanent {
        TransportError::permanent(format!("broker refused the publish: {reason}"))
    } else {
        TransportError::transient(format!("broker did not accept the publish: {reason}"))
    }
}

fn puback_result(reason: PubAckReason) -> Result<(), TransportError> {
    match reason {
        PubAckReason::Success | PubAckReason::NoMatchingSubscribers => Ok(()),
        PubAckReason::NotAuthorized | PubAckReason::TopicNameInvalid | PubAckReason::PayloadFormatInvalid => {
            Err(ack_error(&format!("{reason:?}"), true))
        }
        other => Err(ack_error(&format!("{other:?}"), false)),
    }
}

fn pubrec_result(reason: PubRecReason) -> Result<(), TransportError> {
    match reason {
        PubRecReason::Success | PubRecReason::NoMatchingSubscribers => Ok(()),
        PubRecReason::NotAuthorized | PubRecReason::TopicNameInvalid | PubRecReason::PayloadFormatInvalid => {
            Err(ack_error(&format!("{reason:?}"), true))
        }
        other => Err(ack_error(&format!("{other:?}"), false)),
    }
}

async fn connection_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let name = shared.name.as_str();
    let backoff = reconnect_backoff(&shared.connection);
    let labels = ferry_core::metrics::labels(&[("kind", "mqtt"), ("role", "sender"), ("name", name)]);
    let qos = shared.config.qos;
    let mut failures: u32 = 0;
    while !stop.is_cancelled() {
        let mut opts = match options(&shared.connection) {
            Ok(o) => o,
            Err(e) => {
                warn!(sender = name, error = %e, "cannot build client options");
                return;
            }
        };
        opts.set_clean_start(true);
        opts.set_request_channel_capacity(1024);
        let (client, mut events): (AsyncClient, EventLoop) = AsyncClient::new(opts, 1024);
        let conn = Arc::new(Connection {
            client,
            max_packet: AtomicU32::new(0),
            queued: Mutex::new(Queued { dead: false, waiters: VecDeque::new() }),
            submit: tokio::sync::Mutex::new(()),
        });
        let mut by_pkid: HashMap<u16, Waiter> = HashMap::new();
        let error = loop {
            let event = tokio::select! {
                _ = stop.cancelled() => break None,
                e = events.poll() => e,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    failures = 0;
                    let limit = ack.properties.as_ref().and_then(|p| p.max_packet_size).unwrap_or(0);
                    conn.max_packet.store(limit, Ordering::Relaxed);
                    info!(sender = name, url = %redacted(&shared.connection.url), "connected");
                    shared.metrics.connections.get_or_create(&labels).inc();
                    shared.metrics.connected.get_or_create(&labels).set(1);
                    if let Ok(mut current) = shared.current.lock() {
                        *current = Some(conn.clone());
                    }
                }
                Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                    let waiter = conn.queued.lock().ok().and_then(|mut q| q.waiters.pop_front());
                    match waiter {
                        Some(w) if qos == 0 => {
                            let _ = w.send(Ok(()));
                        }
                        Some(w) => {
                            by_pkid.insert(pkid, w);
                        }
                        None => warn!(sender = name, pkid, "publish without a waiting send"),
                    }
                }
                Ok(Event::Incoming(Packet::PubAck(ack))) => {
                    if let Some(w) = by_pkid.remove(&ack.pkid) {
                        let _ = w.send(puback_result(ack.reason));
                    }
                }
                Ok(Event::Incoming(Packet::PubRec(rec))) => {
                    let result = pubrec_result(rec.reason);
                    if result.is_err()
                        && let Some(w) = by_pkid.remove(&rec.pkid)
                    {
                        let _ = w.send(result);
                    }
                }
                Ok(Event::Incoming(Packet::PubComp(comp))) => {
                    if let Some(w) = by_pkid.remove(&comp.pkid) {
                        let _ = w.send(Ok(()));
                    }
                }
                Ok(Event::Incoming(Packet::Disconnect(d))) => {
                    debug!(sender = name, reason = ?d.reason_code, "broker sent disconnect");
                }
                Ok(_) => {}
                Err(e) => break Some(e.to_string()),
            }
        };
        if let Ok(mut current) = shared.current.lock()
            && current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn))
        {
            *current = None;
        }
        shared.metrics.connected.get_or_create(&labels).set(0);
        let reason = error.clone().unwrap_or_else(|| "sender closed".to_owned());
        conn.fail_all(&format!("mqtt connection lost: {reason}"));
        for (_, w) in by_pkid.drain() {
            let _ = w.send(Err(TransportError::unavailable(format!(
                "mqtt connection lost before the acknowledgement: {reason}"
            ))));
        }
        match error {
            None => {
                let _ = conn.client.disconnect().await;
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while let Ok(ev) = events.poll().await {
                        if matches!(ev, Event::Outgoing(Outgoing::Disconnect)) {
                            break;
                        }
                    }
                })
                .await;
                info!(sender = name, "disconnected");
            }
            Some(e) => {
                let delay = backoff.next(&mut failures);
                warn!(sender = name, error = %e, retry_in_ms = delay.as_millis() as u64, "connection lost; reconnecting");
                sleep_or_shutdown(delay, &stop).await;
            }
        }
    }
}
