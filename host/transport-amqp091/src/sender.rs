//! [`Amqp091Sender`]: publishes with publisher confirms on a supervised
//! connection.
//!
//! A supervisor task connects with backoff, opens a confirm-mode channel
//! (declaring or checking the exchange when `exchange_type` is set) and
//! hands it to sends, which publish concurrently and each wait for their
//! own confirm. Outcomes: ack = done; ack with the message returned
//! (mandatory, no queue bound) = permanent "unroutable"; nack = transient;
//! a missing exchange (404) = permanent for that message; anything else,
//! or no confirm within `send_timeout_ms`, = transient, and the channel is
//! replaced.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ferry_config::Amqp091SenderConfig;
use ferry_core::TransportError;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::Timestamp;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Confirmation, Connection};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::connection::{close, is_not_found, open, short};
use crate::egress::to_publish;
use crate::receiver::exchange_kind;

/// An AMQP 0-9-1 publisher shared by every binding that names it.
pub struct Amqp091Sender {
    shared: Arc<Shared>,
    supervisor: std::sync::Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    name: String,
    config: Amqp091SenderConfig,
    metrics: Metrics,
    active: Mutex<Option<Active>>,
    generation: AtomicU64,
    /// The generation of the last link reported broken.
    broken: watch::Sender<u64>,
    stop: CancellationToken,
}

struct Active {
    generation: u64,
    connection: Arc<Connection>,
    channel: Channel,
}

impl Amqp091Sender {
    /// Starts connecting in the background. Must run inside a tokio runtime.
    pub fn start(name: &str, config: Amqp091SenderConfig, metrics: Metrics) -> Arc<Self> {
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            config,
            metrics,
            active: Mutex::new(None),
            generation: AtomicU64::new(0),
            broken: watch::Sender::new(0),
            stop: CancellationToken::new(),
        });
        let supervisor = tokio::spawn(supervise(shared.clone()));
        Arc::new(Self { shared, supervisor: std::sync::Mutex::new(Some(supervisor)) })
    }
}

async fn connect(shared: &Shared) -> Result<(Connection, Channel), TransportError> {
    let connection = open(&shared.config.url, &shared.name).await?;
    let setup = async {
        let err = |what: &str, e: lapin::Error| TransportError::transient(format!("{what}: {e}"));
        let channel = connection.create_channel().await.map_err(|e| err("open channel", e))?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| err("confirm.select", e))?;
        let c = &shared.config;
        if let Some(kind) = &c.exchange_type {
            let options = ExchangeDeclareOptions { passive: c.exchange_passive, durable: true, ..Default::default() };
            channel
                .exchange_declare(short("exchange", &c.exchange)?, exchange_kind(kind), options, FieldTable::default())
                .await
                .map_err(|e| err(&format!("declare exchange {:?}", c.exchange), e))?;
        }
        Ok(channel)
    };
    match setup.await {
        Ok(channel) => Ok((connection, channel)),
        Err(e) => {
            close(&connection).await;
            Err(e)
        }
    }
}

async fn supervise(shared: Arc<Shared>) {
    let name = shared.name.as_str();
    let url = ferry_core::redact::url(&shared.config.url);
    let backoff =
        ferry_core::backoff::Backoff::reconnect(shared.config.reconnect_initial_ms, shared.config.reconnect_max_ms);
    let labels = ferry_core::metrics::labels(&[("kind", "amqp091"), ("role", "sender"), ("name", name)]);
    let mut failures: u32 = 0;
    loop {
        let connected = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = connect(&shared) => r,
        };
        match connected {
            Ok((connection, channel)) => {
                failures = 0;
                let generation = shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
                let connection = Arc::new(connection);
                *shared.active.lock().await = Some(Active { generation, connection: connection.clone(), channel });
                info!(sender = name, %url, exchange = %shared.config.exchange, "connected");
                shared.metrics.connections.get_or_create(&labels).inc();
                shared.metrics.connected.get_or_create(&labels).set(1);
                // Also notice a connection that dies while idle.
                let idle_check = async {
                    loop {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        if !connection.status().connected() {
                            break;
                        }
                    }
                };
                tokio::select! {
                    _ = shared.stop.cancelled() => {}
                    _ = broken_reported(&shared, generation) => {}
                    _ = idle_check => {}
                }
                shared.metrics.connected.get_or_create(&labels).set(0);
                let current = shared.active.lock().await.take();
                if let Some(active) = current {
                    close(&active.connection).await;
                }
                if shared.stop.is_cancelled() {
                    info!(sender = name, "disconnected");
                    break;
                }
                warn!(sender = name, %url, "connection lost; reconnecting");
            }
            Err(e) => {
                let delay = backoff.delay(failures);
                failures = failures.saturating_add(1);
                warn!(sender = name, %url, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot connect; retrying");
                tokio::select! {
                    _ = shared.stop.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Resolves once the link of `generation` is reported broken; reports about
/// older links are ignored.
async fn broken_reported(shared: &Shared, generation: u64) {
    let mut rx = shared.broken.subscribe();
    let _ = rx.wait_for(|g| *g == generation).await;
}

impl Shared {
    /// Retires the channel of `generation` if it is still current and wakes
    /// the supervisor; later reports about the same channel do nothing.
    async fn mark_broken(&self, generation: u64) {
        let retired = {
            let mut active = self.active.lock().await;
            if active.as_ref().is_some_and(|a| a.generation == generation) { active.take() } else { None }
        };
        if let Some(old) = retired {
            self.broken.send_replace(generation);
            tokio::spawn(async move { close(&old.connection).await });
        }
    }
}

#[async_trait]
impl Sender for Amqp091Sender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let shared = &self.shared;
        let address = ferry_core::address::expand(&msg.address, &msg.envelope)?;
        let publish = to_publish(&msg.envelope, &address, &shared.config, Timestamp::now())?;
        if publish.dropped_headers > 0 {
            shared
                .metrics
                .amqp_header_dropped
                .get_or_create(&ferry_core::metrics::labels(&[
                    ("kind", "amqp091"),
                    ("name", &shared.name),
                    ("direction", "egress"),
                ]))
                .inc_by(u64::from(publish.dropped_headers));
        }
        let (generation, channel) = {
            let guard = shared.active.lock().await;
            let Some(active) = guard.as_ref() else {
                return Err(TransportError::transient("not connected to the broker"));
            };
            (active.generation, active.channel.clone())
        };
        let options = BasicPublishOptions { mandatory: shared.config.mandatory, ..Default::default() };
        let exchange = publish.exchange.as_str().to_owned();
        let timeout = Duration::from_millis(shared.config.send_timeout_ms);
        let attempt = async {
            channel
                .basic_publish(
                    publish.exchange,
                    publish.routing_key,
                    options,
                    msg.envelope.payload(),
                    publish.properties,
                )
                .await?
                .await
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(Confirmation::Ack(None))) => Ok(()),
            Ok(Ok(Confirmation::Ack(Some(returned)))) => Err(TransportError::permanent(format!(
                "unroutable: exchange {exchange:?} returned the message ({} {})",
                returned.reply_code, returned.reply_text
            ))),
            Ok(Ok(Confirmation::Nack(_))) => Err(TransportError::transient("broker nacked the message")),
            Ok(Ok(Confirmation::NotRequested)) => {
                shared.mark_broken(generation).await;
                Err(TransportError::transient("channel is not in confirm mode"))
            }
            Ok(Err(e)) => {
                shared.mark_broken(generation).await;
                if is_not_found(&e) {
                    Err(TransportError::permanent(format!("exchange {exchange:?} does not exist: {e}")))
                } else {
                    Err(TransportError::transient(format!("publish failed: {e}")))
                }
            }
            Err(_) => {
                shared.mark_broken(generation).await;
                Err(TransportError::transient(format!("no confirm from the broker within {} ms", timeout.as_millis())))
            }
        }
    }

    async fn close(&self) {
        self.shared.stop.cancel();
        let handle = self.supervisor.lock().ok().and_then(|mut h| h.take());
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }
}
