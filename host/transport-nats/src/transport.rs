//! [`Nats`], this crate's entry in the daemon's transport table.

use std::sync::Arc;

use crate::config::{NatsReceiverConfig, NatsSenderConfig};
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{CONTENT_TYPE, EXTRA, Find, ID, Probe, SUBJECT, TEXT_VALUE, extras, feature, table, text};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

use crate::connection::probe;
use crate::{NatsReceiver, NatsSender, fixture, ingress};

/// NATS JetStream (`type = "nats"`).
pub struct Nats;

#[async_trait]
impl TypedTransport for Nats {
    type ReceiverConfig = NatsReceiverConfig;
    type SenderConfig = NatsSenderConfig;
    const KIND: &'static str = "nats";

    fn check_receiver(&self, name: &str, config: &NatsReceiverConfig) -> Result<(), KeyProblem> {
        config.check(name)
    }

    fn check_sender(&self, _: &str, config: &NatsSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver_secrets(&self, config: &NatsReceiverConfig) -> Vec<String> {
        config.access().secrets()
    }

    fn sender_secrets(&self, config: &NatsSenderConfig) -> Vec<String> {
        config.access().secrets()
    }

    fn receiver(
        &self,
        name: &str,
        config: &NatsReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(NatsReceiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &NatsSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(NatsSender::start(name, config.clone(), parts.metrics.clone()))
    }

    /// Reads the stream and the consumer without taking a message (a pull
    /// would hide it for the ack wait).
    async fn probe_receiver(&self, name: &str, config: &NatsReceiverConfig) -> Result<String, TransportError> {
        let client = probe(config.access()).await?;
        let js = async_nats::jetstream::new(client);
        let mut stream = js
            .get_stream(&config.stream)
            .await
            .map_err(|e| TransportError::transient(format!("stream {:?}: {e}", config.stream)))?;
        let messages = stream.info().await.map(|i| i.state.messages).unwrap_or_default();
        let consumer = config.consumer_name(name);
        let found = match stream.consumer_info(&consumer).await {
            Ok(info) => format!("consumer {consumer:?} has {} pending", info.num_pending),
            Err(_) if config.consumer_passive => {
                return Err(TransportError::permanent(format!(
                    "consumer {consumer:?} does not exist and consumer_passive says not to create it"
                )));
            }
            Err(_) => format!("consumer {consumer:?} will be created"),
        };
        Ok(format!("stream {:?} holds {messages} messages; {found}", config.stream))
    }

    async fn probe_sender(&self, _: &str, config: &NatsSenderConfig) -> Result<String, TransportError> {
        let client = probe(config.access()).await?;
        let version = client.server_info().version;
        let fixed = config.subject.as_deref().filter(|s| !s.contains('{'));
        match (config.jetstream, fixed) {
            (false, _) => Ok(format!("core NATS on server {version}: at most once")),
            (true, Some(subject)) => {
                let js = async_nats::jetstream::new(client);
                let stream = js
                    .stream_by_subject(subject)
                    .await
                    .map_err(|e| TransportError::transient(format!("no stream takes subject {subject:?}: {e}")))?;
                Ok(format!("server {version}; stream {stream:?} takes subject {subject:?}"))
            }
            (true, None) => Ok(format!("server {version}; the bindings' subjects are checked as messages go")),
        }
    }

    fn fixture_receive(&self, config: &NatsReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &NatsSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn sender_warning(&self, config: &NatsSenderConfig) -> Option<&'static str> {
        (!config.jetstream).then_some(
            "core NATS (jetstream = false): a send is done once written, so a message no subscriber is \
             listening for is lost; at most once",
        )
    }

    fn fidelity_probe(&self, _: &NatsReceiverConfig) -> Probe {
        let mut headers: Vec<(String, Value)> = vec![
            (ingress::MSG_ID.into(), text(ID)),
            (ingress::CONTENT_TYPE.into(), text(CONTENT_TYPE)),
            ("gobridge.subject".into(), text(SUBJECT)),
            ("probe-text".into(), text(TEXT_VALUE)),
        ];
        headers.extend(extras().into_iter().map(|(k, v)| (k, text(&v))));
        let input = table(&[
            ("subject".into(), text("probe.in")),
            ("payload".into(), text("{}")),
            ("headers".into(), table(&headers)),
        ]);
        let features = vec![
            feature("identity (Nats-Msg-Id)", Find::Value(ID)),
            feature("subject (gobridge.subject header)", Find::Value(SUBJECT)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("header", Find::Name("probe-text")),
            feature("other headers (12)", Find::Extras),
        ];
        Probe { input, features, extras_in: EXTRA + 1 }
    }

    fn lossy_note(&self) -> &'static str {
        "NATS headers are text: a name with a space, ':' or a non-ASCII character cannot be sent"
    }

    fn outage_note(&self) -> &'static str {
        "not connected, no stream answering for the subject (no responders), no PubAck in time, or max ack pending"
    }
}
