//! [`Amqp091Sender`]: publishes with publisher confirms on a supervised
//! connection.
//!
//! A [`Supervisor`] connects with backoff, opens a confirm-mode channel
//! (declaring or checking the exchange when `exchange_type` is set) and
//! hands it to sends, which publish concurrently and each wait for their
//! own confirm. Outcomes: ack = done; ack with the message returned
//! (mandatory, no queue bound) = permanent "unroutable"; nack = transient;
//! a missing exchange (404) = permanent for that message; anything else,
//! or no confirm within `send_timeout_ms`, = transient, and the channel is
//! replaced.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Amqp091SenderConfig;
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_core::supervisor::{BoxFuture, Identity, SupervisedLink, Supervisor};
use ferry_envelope::Timestamp;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Confirmation, Connection};

use crate::connection::{close, close_with, is_not_found, open, short};
use crate::egress::prepare;
use crate::receiver::exchange_kind;

/// An AMQP 0-9-1 publisher shared by every binding that names it.
pub struct Amqp091Sender {
    name: String,
    config: Amqp091SenderConfig,
    metrics: Metrics,
    supervisor: Arc<Supervisor<ConfirmChannel>>,
}

/// A connection with its confirm-mode channel.
struct ConfirmChannel {
    connection: Connection,
    channel: Channel,
}

impl SupervisedLink for ConfirmChannel {
    fn is_closed(&self) -> bool {
        !self.connection.status().connected()
    }

    fn close(self) -> BoxFuture<'static, ()> {
        Box::pin(async move { close_with(&self.connection, &self.channel).await })
    }
}

impl Amqp091Sender {
    /// Starts connecting in the background. Must run inside a tokio runtime.
    pub fn start(name: &str, config: Amqp091SenderConfig, metrics: Metrics) -> Arc<Self> {
        let identity = Identity {
            kind: "amqp091",
            name: name.to_owned(),
            describe: format!("{} exchange {:?}", ferry_core::redact::url(&config.url), config.exchange),
        };
        let backoff = ferry_core::backoff::Backoff::reconnect(config.reconnect_initial_ms, config.reconnect_max_ms);
        let (for_connect, sender_name) = (config.clone(), name.to_owned());
        let connect = move || -> BoxFuture<'static, Result<ConfirmChannel, TransportError>> {
            let (config, name) = (for_connect.clone(), sender_name.clone());
            Box::pin(async move { connect(&config, &name).await })
        };
        let supervisor = Supervisor::start(identity, backoff, metrics.clone(), connect);
        Arc::new(Self { name: name.to_owned(), config, metrics, supervisor })
    }
}

async fn connect(c: &Amqp091SenderConfig, name: &str) -> Result<ConfirmChannel, TransportError> {
    let connection = open(&c.url, name, c.tls.as_ref()).await?;
    let setup = async {
        let err = |what: &str, e: lapin::Error| TransportError::transient(format!("{what}: {e}"));
        let channel = connection.create_channel().await.map_err(|e| err("open channel", e))?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| err("confirm.select", e))?;
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
        Ok(channel) => Ok(ConfirmChannel { connection, channel }),
        Err(e) => {
            close(&connection).await;
            Err(e)
        }
    }
}

#[async_trait]
impl Sender for Amqp091Sender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let publish = prepare(&self.config, &msg, Timestamp::now())?;
        // Counted once per message and binding, not on every retry.
        if publish.dropped_headers > 0 && msg.counts_losses() {
            self.metrics
                .amqp_header_dropped
                .get_or_create(&ferry_core::metrics::labels(&[
                    ("kind", "amqp091"),
                    ("name", &self.name),
                    ("direction", "egress"),
                ]))
                .inc_by(u64::from(publish.dropped_headers));
        }
        let (generation, channel) = {
            let guard = self.supervisor.active().await;
            let Some(active) = guard.as_ref() else {
                return Err(TransportError::unavailable("not connected to the broker"));
            };
            (active.generation, active.link.channel.clone())
        };
        let options = BasicPublishOptions { mandatory: self.config.mandatory, ..Default::default() };
        let exchange = publish.exchange.as_str().to_owned();
        let timeout = Duration::from_millis(self.config.send_timeout_ms);
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
            // A nack is the broker failing (a queue process down, a queue
            // full with `reject-publish`, the channel closing under
            // pending confirms), not a verdict on this message.
            Ok(Ok(Confirmation::Nack(_))) => Err(TransportError::unavailable("broker nacked the message")),
            Ok(Ok(Confirmation::NotRequested)) => {
                self.supervisor.mark_broken(generation).await;
                Err(TransportError::unavailable("channel is not in confirm mode"))
            }
            Ok(Err(e)) => {
                self.supervisor.mark_broken(generation).await;
                if is_not_found(&e) {
                    Err(TransportError::permanent(format!("exchange {exchange:?} does not exist: {e}")))
                } else {
                    // The channel or connection closed under the publish.
                    Err(TransportError::unavailable(format!("publish failed: {e}")))
                }
            }
            Err(_) => {
                self.supervisor.mark_broken(generation).await;
                Err(TransportError::unavailable(format!(
                    "no confirm from the broker within {} ms",
                    timeout.as_millis()
                )))
            }
        }
    }

    async fn close(&self) {
        self.supervisor.close().await;
    }
}
