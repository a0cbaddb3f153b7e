//! [`KafkaSender`]: an idempotent producer; a send is done when the
//! record's delivery report says the cluster has it (`acks=all`).
//!
//! Idempotence (`enable.idempotence`) lets librdkafka retry a batch
//! within `delivery_timeout_ms` without writing it twice; a record ferry
//! sends again after that (a retry after a lost report, an outbox record
//! replayed after a crash) is a second record, which the identity header
//! lets a reader drop.
//!
//! Outcomes, classified once ([`classify`]): a cluster that cannot be
//! reached or that refuses the client (timed out, all brokers down, name
//! resolution, the local queue full, authentication) is *unavailable*: the
//! route holds the message and spends no replay on it. What the record
//! itself gets wrong (too large, an invalid topic or record, a policy) is
//! permanent. The rest is transient.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::metrics::{GaugeHandle, Metrics, labels};
use ferry_core::ports::{OutboundMessage, Sender};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::config::KafkaSenderConfig;
use crate::egress::prepare;

/// How often the sender asks the cluster for its metadata while it runs
/// (readiness follows the answer).
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(2);

/// A Kafka producer used by one or more bindings.
pub struct KafkaSender {
    name: String,
    config: KafkaSenderConfig,
    producer: FutureProducer,
    stop: CancellationToken,
}

/// The librdkafka settings of a sender `name` with `config`.
pub fn client_config(name: &str, config: &KafkaSenderConfig) -> ClientConfig {
    let mut c = config.cluster().client_config();
    c.set("client.id", format!("ferry-{name}"))
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", config.delivery_timeout_ms.to_string())
        .set("linger.ms", config.linger_ms.to_string());
    c
}

impl KafkaSender {
    /// The sender; its producer connects in the background from now on,
    /// and `ferry_connected{kind="kafka",role="sender",name}` follows
    /// whether the cluster answers.
    pub fn start(name: &str, config: KafkaSenderConfig, metrics: &Metrics) -> Result<Arc<Self>, String> {
        let producer: FutureProducer =
            client_config(name, &config).create().map_err(|e| format!("the Kafka producer: {e}"))?;
        let connected =
            metrics.connected.get_or_create(&labels(&[("kind", "kafka"), ("role", "sender"), ("name", name)])).clone();
        connected.set(0);
        let sender = Arc::new(Self { name: name.to_owned(), config, producer, stop: CancellationToken::new() });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&sender);
            let ask = move || Some(weak.upgrade()?.producer.client().fetch_metadata(None, CHECK_EVERY).is_ok());
            runtime.spawn(watch(ask, sender.stop.clone(), connected));
        }
        Ok(sender)
    }
}

/// Runs `ask` every [`CHECK_EVERY`] (off the async workers: it blocks)
/// and sets `connected` from its answer: whether the cluster answered a
/// metadata request. Ends when `ask` gives `None` (the client is gone) or
/// `stop` is cancelled.
pub(crate) async fn watch(
    ask: impl Fn() -> Option<bool> + Send + Sync + 'static,
    stop: CancellationToken,
    connected: GaugeHandle,
) {
    let ask = Arc::new(ask);
    loop {
        let asking = ask.clone();
        let Ok(Some(answered)) = tokio::task::spawn_blocking(move || asking()).await else { return };
        connected.set(i64::from(answered));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

/// A failed send as the route understands it.
pub fn classify(error: &KafkaError) -> TransportError {
    use RDKafkaErrorCode as C;
    let reason = format!("Kafka: {error}");
    match error.rdkafka_error_code() {
        Some(
            C::MessageTimedOut
            | C::AllBrokersDown
            | C::BrokerTransportFailure
            | C::Resolve
            | C::QueueFull
            | C::Authentication
            | C::SaslAuthenticationFailed
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::Fatal,
        ) => TransportError::unavailable(reason),
        Some(
            C::BadMessage
            | C::InvalidMessage
            | C::InvalidMessageSize
            | C::MessageSizeTooLarge
            | C::InvalidTopic
            | C::InvalidRecord
            | C::PolicyViolation
            | C::UnsupportedForMessageFormat
            | C::InvalidArgument,
        ) => TransportError::permanent(reason),
        _ => TransportError::transient(reason),
    }
}

#[async_trait]
impl Sender for KafkaSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let record = prepare(&self.config, &msg)?;
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in &record.headers {
            headers = headers.insert(Header { key: key.as_str(), value: Some(value.as_ref()) });
        }
        let mut out: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&record.topic).payload(record.payload.as_ref()).headers(headers);
        if let Some(key) = &record.key {
            out = out.key(key.as_ref());
        }
        // Waits for room in the local queue at most as long as a record may
        // wait for the cluster.
        let queue_wait = Duration::from_millis(self.config.delivery_timeout_ms);
        match self.producer.send(out, queue_wait).await {
            Ok(delivery) => {
                debug!(sender = %self.name, topic = %record.topic, partition = delivery.partition,
                       offset = delivery.offset, "delivered");
                Ok(())
            }
            Err((error, _)) => Err(classify(&error)),
        }
    }

    /// Waits (off the async workers) for what is queued to be delivered,
    /// at most one delivery timeout.
    async fn close(&self) {
        self.stop.cancel();
        let producer = self.producer.clone();
        let wait = Duration::from_millis(self.config.delivery_timeout_ms);
        let _ = tokio::task::spawn_blocking(move || producer.flush(wait)).await;
    }
}

impl Drop for KafkaSender {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
