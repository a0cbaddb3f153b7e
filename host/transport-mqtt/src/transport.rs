//! [`Mqtt`], this crate's entry in the daemon's transport table.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{
    CONTENT_TYPE, CORRELATION, EXTRA, Find, ID, Probe, REPLY_TO, SUBJECT, TEXT_VALUE, extras, feature, table, text,
};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{Claim, KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

use crate::config::{MqttReceiverConfig, MqttSenderConfig};
use crate::{MqttReceiver, MqttSender, connection, fixture};

/// MQTT 5 (`type = "mqtt"`).
pub struct Mqtt;

#[async_trait]
impl TypedTransport for Mqtt {
    type ReceiverConfig = MqttReceiverConfig;
    type SenderConfig = MqttSenderConfig;
    const KIND: &'static str = "mqtt";

    fn check_receiver(&self, _: &str, config: &MqttReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &MqttSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver_claims(&self, name: &str, config: &MqttReceiverConfig, instance: &str) -> Vec<Claim> {
        config.clone().for_instance(instance, name).claims(name)
    }

    fn sender_claims(&self, name: &str, config: &MqttSenderConfig, instance: &str) -> Vec<Claim> {
        config.clone().for_instance(instance, name).claims(name)
    }

    fn receiver(
        &self,
        name: &str,
        config: &MqttReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        let window = u16::try_from(parts.max_in_flight).unwrap_or(u16::MAX);
        let config = config.clone().for_instance(parts.instance, name);
        Ok(Arc::new(MqttReceiver::new(name, config, window, parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &MqttSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        let config = config.clone().for_instance(parts.instance, name);
        Ok(Arc::new(MqttSender::start(name, config, parts.metrics.clone()).map_err(|e| e.to_string())?))
    }

    async fn probe_receiver(&self, name: &str, config: &MqttReceiverConfig) -> Result<String, TransportError> {
        connection::probe(&config.connection(name)).await.map(|()| "connected".to_owned())
    }

    async fn probe_sender(&self, name: &str, config: &MqttSenderConfig) -> Result<String, TransportError> {
        connection::probe(&config.connection(name)).await.map(|()| "connected".to_owned())
    }

    fn fixture_receive(&self, config: &MqttReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &MqttSenderConfig,
        msg: &OutboundMessage,
        now: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg, now)
    }

    fn fidelity_probe(&self, _: &MqttReceiverConfig) -> Probe {
        let mut user: Vec<(String, Value)> = vec![
            ("mqtt.message-id".into(), text(ID)),
            ("gobridge.subject".into(), text(SUBJECT)),
            ("probe-text".into(), text(TEXT_VALUE)),
        ];
        user.extend(extras().into_iter().map(|(k, v)| (k, text(&v))));
        let input = table(&[
            ("topic".into(), text("probe/topic/7f3a")),
            ("payload".into(), text("{}")),
            (
                "properties".into(),
                table(&[
                    ("content_type".into(), text(CONTENT_TYPE)),
                    ("correlation_data".into(), text(CORRELATION)),
                    ("response_topic".into(), text(REPLY_TO)),
                    ("message_expiry_interval".into(), Value::Integer(3600)),
                ]),
            ),
            ("user_properties".into(), table(&user)),
        ]);
        let features = vec![
            feature("identity (mqtt.message-id)", Find::Value(ID)),
            feature("subject (gobridge.subject)", Find::Value(SUBJECT)),
            feature("source topic", Find::Value("probe/topic/7f3a")),
            feature("correlation data", Find::Value(CORRELATION)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("response topic", Find::Value(REPLY_TO)),
            feature("expiry (message expiry interval)", Find::Expiry),
            feature("user property", Find::Name("probe-text")),
            feature("other user properties (13)", Find::Extras),
        ];
        Probe { input, features, extras_in: EXTRA + 1 }
    }

    fn lossy_note(&self) -> &'static str {
        "MQTT user properties are text: typed values are dropped"
    }

    fn lost_note(&self, find: Find) -> Option<&'static str> {
        match find {
            Find::Name(_) => Some("MQTT user properties are text; other value types are dropped"),
            Find::Expiry => Some("the target gets no expiry"),
            _ => None,
        }
    }

    fn outage_note(&self) -> &'static str {
        "not connected, the connection lost before the acknowledgement, or no acknowledgement within ack_timeout_ms"
    }
}
