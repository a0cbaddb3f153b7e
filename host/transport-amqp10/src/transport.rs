//! [`Amqp10`], this crate's entry in the daemon's transport table.

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

use crate::config::{Amqp10ReceiverConfig, Amqp10SenderConfig, ServiceBusKeys};
use crate::{Amqp10Receiver, Amqp10Sender, connection, fixture};

/// AMQP 1.0 (`type = "amqp10"`).
pub struct Amqp10;

/// `ferry validate --connect`: connects (for Service Bus, puts a token for
/// the entity too).
async fn probe(
    name: &str,
    keys: ServiceBusKeys<'_>,
    tls: Option<&ferry_config::TlsConfig>,
) -> Result<String, TransportError> {
    let sas = keys.sas();
    let metrics = ferry_core::metrics::Metrics::new();
    let claims =
        sas.as_ref().map(|sas| connection::Claims { sas, entity: keys.address, metrics: &metrics, part: name });
    connection::probe(keys.url, tls, claims).await?;
    Ok(if sas.is_some() { "connected; $cbs took the SAS token" } else { "connected" }.to_owned())
}

#[async_trait]
impl TypedTransport for Amqp10 {
    type ReceiverConfig = Amqp10ReceiverConfig;
    type SenderConfig = Amqp10SenderConfig;
    const KIND: &'static str = "amqp10";

    fn check_receiver(&self, _: &str, config: &Amqp10ReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &Amqp10SenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver(
        &self,
        name: &str,
        config: &Amqp10ReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(Amqp10Receiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &Amqp10SenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(Amqp10Sender::start(name, config.clone(), parts.metrics.clone()))
    }

    async fn probe_receiver(&self, name: &str, config: &Amqp10ReceiverConfig) -> Result<String, TransportError> {
        probe(name, config.service_bus(), config.tls.as_ref()).await
    }

    async fn probe_sender(&self, name: &str, config: &Amqp10SenderConfig) -> Result<String, TransportError> {
        probe(name, config.service_bus(), config.tls.as_ref()).await
    }

    fn receiver_secrets(&self, config: &Amqp10ReceiverConfig) -> Vec<String> {
        config.sas_key.iter().map(|k| k.expose().to_owned()).collect()
    }

    fn sender_secrets(&self, config: &Amqp10SenderConfig) -> Vec<String> {
        config.sas_key.iter().map(|k| k.expose().to_owned()).collect()
    }

    fn fixture_receive(&self, config: &Amqp10ReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &Amqp10SenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn fidelity_probe(&self, _: &Amqp10ReceiverConfig) -> Probe {
        let input = table(&[
            ("payload".into(), text("{}")),
            ("header".into(), table(&[("ttl".into(), Value::Integer(3_600_000))])),
            (
                "properties".into(),
                table(&[
                    ("message_id".into(), text(ID)),
                    ("correlation_id".into(), text(CORRELATION)),
                    ("subject".into(), text(SUBJECT)),
                    ("content_type".into(), text(CONTENT_TYPE)),
                    ("reply_to".into(), text(REPLY_TO)),
                    ("to".into(), text("probe-to-7f3a")),
                    ("group_id".into(), text("probe-group-7f3a")),
                ]),
            ),
            ("application_properties".into(), table(&typed_headers())),
            ("message_annotations".into(), table(&[("x-opt-partition-key".into(), text("probe-partition-7f3a"))])),
        ]);
        let mut features = vec![
            feature("identity (message-id)", Find::Value(ID)),
            feature("subject", Find::Value(SUBJECT)),
            feature("correlation id", Find::Value(CORRELATION)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("reply-to", Find::Value(REPLY_TO)),
            feature("to", Find::Value("probe-to-7f3a")),
            feature("group id", Find::Value("probe-group-7f3a")),
            feature("partition key (x-opt-partition-key)", Find::Value("probe-partition-7f3a")),
            feature("expiry (ttl)", Find::Expiry),
        ];
        features.extend(typed_features().into_iter().map(|mut f| {
            f.what = match f.what {
                "text header" => "text application property",
                "integer header" => "integer application property",
                "float header" => "float application property",
                "boolean header" => "boolean application property",
                "time header" => "timestamp application property",
                _ => "binary application property",
            };
            f
        }));
        features.push(feature("application properties (18)", Find::Extras));
        Probe { input, features, extras_in: EXTRA + 6 }
    }

    fn outage_note(&self) -> &'static str {
        "not connected, the link or session gone, resource-limit-exceeded, or no outcome within send_timeout_ms"
    }
}
