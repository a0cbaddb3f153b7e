//! [`Kafka`], this crate's entry in the daemon's transport table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{CONTENT_TYPE, EXTRA, Find, ID, Probe, SUBJECT, TEXT_VALUE, extras, feature, table, text};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::config::{Cluster, KafkaReceiverConfig, KafkaSenderConfig};
use crate::{KafkaReceiver, KafkaSender, egress, fixture};

/// Kafka (`type = "kafka"`).
pub struct Kafka;

/// How long a `--connect` probe waits for the cluster.
const PROBE_WAIT: Duration = Duration::from_secs(10);

/// The cluster's brokers and, for each of `topics`, its partitions, as a
/// sentence (asked off the async workers: the call blocks).
async fn cluster_facts(cluster: Cluster<'_>, topics: Vec<String>) -> Result<String, TransportError> {
    let (brokers, config) = (cluster.brokers.to_owned(), cluster.client_config());
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer =
            config.create().map_err(|e| TransportError::permanent(format!("the Kafka client: {e}")))?;
        let metadata = client
            .fetch_metadata(None, PROBE_WAIT)
            .map_err(|e| TransportError::unavailable(format!("no answer from {brokers}: {e}")))?;
        let mut facts = vec![format!("Kafka cluster of {} brokers", metadata.brokers().len())];
        for topic in topics {
            match metadata.topics().iter().find(|t| t.name() == topic) {
                Some(t) if t.error().is_none() => {
                    facts.push(format!("topic {topic:?}: {} partitions", t.partitions().len()))
                }
                _ => facts.push(format!("topic {topic:?} does not exist (yet)")),
            }
        }
        Ok(facts.join("; "))
    })
    .await
    .map_err(|e| TransportError::transient(format!("the probe stopped: {e}")))?
}

#[async_trait]
impl TypedTransport for Kafka {
    type ReceiverConfig = KafkaReceiverConfig;
    type SenderConfig = KafkaSenderConfig;
    const KIND: &'static str = "kafka";

    fn check_receiver(&self, _: &str, config: &KafkaReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &KafkaSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver(
        &self,
        name: &str,
        config: &KafkaReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(KafkaReceiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &KafkaSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(KafkaSender::start(name, config.clone(), parts.metrics)?)
    }

    async fn probe_receiver(&self, _: &str, config: &KafkaReceiverConfig) -> Result<String, TransportError> {
        cluster_facts(config.cluster(), config.topics.clone()).await
    }

    async fn probe_sender(&self, _: &str, config: &KafkaSenderConfig) -> Result<String, TransportError> {
        let topics = config.topic.iter().filter(|t| !t.contains('{')).cloned().collect();
        cluster_facts(config.cluster(), topics).await
    }

    fn fixture_receive(&self, config: &KafkaReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &KafkaSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn fidelity_probe(&self, config: &KafkaReceiverConfig) -> Probe {
        let mut headers: Vec<(String, Value)> = vec![
            (config.id_header.clone(), text(ID)),
            (egress::CONTENT_TYPE.into(), text(CONTENT_TYPE)),
            ("gobridge.subject".into(), text(SUBJECT)),
            ("probe-text".into(), text(TEXT_VALUE)),
        ];
        headers.extend(extras().into_iter().map(|(k, v)| (k, text(&v))));
        let input = table(&[("payload".into(), text("{}")), ("headers".into(), table(&headers))]);
        let features = vec![
            feature("identity (id header)", Find::Value(ID)),
            feature("subject (gobridge.subject header)", Find::Value(SUBJECT)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("header", Find::Name("probe-text")),
            feature("other headers (12)", Find::Extras),
        ];
        Probe { input, features, extras_in: EXTRA + 1 }
    }

    fn lossy_note(&self) -> &'static str {
        "a header named like the sender's identity header or content_type cannot be sent"
    }

    fn outage_note(&self) -> &'static str {
        "a record the cluster did not take within delivery_timeout_ms, no broker reachable, the local queue full, or authentication refused"
    }
}
