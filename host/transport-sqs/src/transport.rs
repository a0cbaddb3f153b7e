//! [`Sqs`], this crate's entry in the daemon's transport table.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{Find, ID, Probe, SUBJECT, TEXT_VALUE, extras, feature, table, text};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

use crate::client::probe;
use crate::config::{SqsReceiverConfig, SqsSenderConfig};
use crate::{SqsReceiver, SqsSender, fixture};

/// AWS SQS (`type = "sqs"`).
pub struct Sqs;

#[async_trait]
impl TypedTransport for Sqs {
    type ReceiverConfig = SqsReceiverConfig;
    type SenderConfig = SqsSenderConfig;
    const KIND: &'static str = "sqs";

    fn check_receiver(&self, _: &str, config: &SqsReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &SqsSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver(&self, name: &str, config: &SqsReceiverConfig, parts: &Parts<'_>) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(SqsReceiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &SqsSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(SqsSender::start(name, config.clone(), parts.metrics.clone()))
    }

    async fn probe_receiver(&self, _: &str, config: &SqsReceiverConfig) -> Result<String, TransportError> {
        probe(&crate::receiver::target_of(config)).await
    }

    async fn probe_sender(&self, _: &str, config: &SqsSenderConfig) -> Result<String, TransportError> {
        if config.queue_url.is_none() && config.queue_name.is_none() {
            return Ok("no queue configured (bindings name theirs)".into());
        }
        probe(&crate::sender::target_of(config)).await
    }

    fn fixture_receive(&self, config: &SqsReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &SqsSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn fidelity_probe(&self, _: &SqsReceiverConfig) -> Probe {
        fidelity_probe()
    }

    fn lossy_note(&self) -> &'static str {
        "SQS carries 10 message attributes, chosen by priority: trace and idempotency first"
    }

    fn lost_note(&self, find: Find) -> Option<&'static str> {
        match find {
            Find::Expiry => Some("SQS has no per-message expiry; it may be delivered late"),
            Find::Name(_) => Some("over SQS's 10 attributes, or a type SQS cannot carry"),
            _ => None,
        }
    }

    fn outage_note(&self) -> &'static str {
        "no answer (connection, DNS, timeout), throttling, or a 5xx"
    }
}

/// The `--explain` probe of an SQS message (the SQS endpoint's receivers
/// read the same).
pub fn fidelity_probe() -> Probe {
    // SQS takes ten attributes: the subject, three typed, six more.
    let mut attributes: Vec<(String, Value)> = vec![
        ("Subject".into(), text(SUBJECT)),
        ("probe-text".into(), text(TEXT_VALUE)),
        ("probe-int".into(), Value::Integer(4242)),
        ("probe-bytes".into(), table(&[("type".into(), text("Binary")), ("base64".into(), text("AP8Q"))])),
    ];
    attributes.extend(extras().into_iter().take(6).map(|(k, v)| (k, text(&v))));
    let input = table(&[
        ("message_id".into(), text(ID)),
        ("payload".into(), text("{}")),
        ("message_attributes".into(), table(&attributes)),
    ]);
    let features = vec![
        feature("identity (MessageId)", Find::Value(ID)),
        feature("subject (Subject attribute)", Find::Value(SUBJECT)),
        feature("String attribute", Find::Name("probe-text")),
        feature("Number attribute", Find::Name("probe-int")),
        feature("Binary attribute", Find::Name("probe-bytes")),
        feature("attributes besides Subject (9)", Find::Extras),
    ];
    Probe { input, features, extras_in: 9 }
}
