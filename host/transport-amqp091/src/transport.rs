//! [`Amqp091`], this crate's entry in the daemon's transport table.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{
    CONTENT_TYPE, CORRELATION, EXTRA, Find, ID, Probe, REPLY_TO, SUBJECT, feature, table, text, typed_features,
    typed_headers,
};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

use crate::config::{Amqp091ReceiverConfig, Amqp091SenderConfig};
use crate::{Amqp091Receiver, Amqp091Sender, connection, fixture};

/// AMQP 0-9-1, RabbitMQ's own protocol (`type = "amqp091"`).
pub struct Amqp091;

#[async_trait]
impl TypedTransport for Amqp091 {
    type ReceiverConfig = Amqp091ReceiverConfig;
    type SenderConfig = Amqp091SenderConfig;
    const KIND: &'static str = "amqp091";

    fn check_receiver(&self, _: &str, config: &Amqp091ReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &Amqp091SenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver(
        &self,
        name: &str,
        config: &Amqp091ReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(Amqp091Receiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &Amqp091SenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(Amqp091Sender::start(name, config.clone(), parts.metrics.clone()))
    }

    async fn probe_receiver(&self, _: &str, config: &Amqp091ReceiverConfig) -> Result<String, TransportError> {
        // A queue the receiver declares itself need not exist yet.
        let queue = config.queue_passive.then_some(config.queue.as_str());
        connection::probe(&config.url, config.tls.as_ref(), queue).await
    }

    async fn probe_sender(&self, _: &str, config: &Amqp091SenderConfig) -> Result<String, TransportError> {
        connection::probe(&config.url, config.tls.as_ref(), None).await
    }

    fn fixture_receive(
        &self,
        config: &Amqp091ReceiverConfig,
        input: Value,
        now: Timestamp,
    ) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &Amqp091SenderConfig,
        msg: &OutboundMessage,
        now: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg, now)
    }

    fn fidelity_probe(&self, _: &Amqp091ReceiverConfig) -> Probe {
        let mut headers = typed_headers();
        headers.push(("gobridge.subject".into(), text(SUBJECT)));
        let input = table(&[
            ("exchange".into(), text("probe-exchange-7f3a")),
            ("routing_key".into(), text("probe.key.7f3a")),
            ("payload".into(), text("{}")),
            (
                "properties".into(),
                table(&[
                    ("message_id".into(), text(ID)),
                    ("correlation_id".into(), text(CORRELATION)),
                    ("content_type".into(), text(CONTENT_TYPE)),
                    ("reply_to".into(), text(REPLY_TO)),
                    ("type".into(), text("probe-type-7f3a")),
                    ("app_id".into(), text("probe-app-7f3a")),
                    ("expiration".into(), text("3600000")),
                ]),
            ),
            ("headers".into(), table(&headers)),
        ]);
        let mut features = vec![
            feature("identity (message_id)", Find::Value(ID)),
            feature("subject (gobridge.subject)", Find::Value(SUBJECT)),
            feature("routing key", Find::Value("probe.key.7f3a")),
            feature("exchange", Find::Value("probe-exchange-7f3a")),
            feature("correlation id", Find::Value(CORRELATION)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("reply-to", Find::Value(REPLY_TO)),
            feature("type", Find::Value("probe-type-7f3a")),
            feature("app id", Find::Value("probe-app-7f3a")),
            feature("expiry (expiration)", Find::Expiry),
        ];
        features.extend(typed_features());
        features.push(feature("headers (18)", Find::Extras));
        Probe { input, features, extras_in: EXTRA + 6 }
    }

    fn outage_note(&self) -> &'static str {
        "not connected, the channel or connection closed under the publish, a basic.nack, or no confirm within send_timeout_ms"
    }
}
