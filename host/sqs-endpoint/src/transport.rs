//! [`SqsEndpoint`], the `sqs_endpoint` entry in the daemon's transport
//! table: routes to and from the queues this daemon serves.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use ferry_config::Config;
use ferry_core::TransportError;
use ferry_core::fidelity::Probe;
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;
use ferry_transport_sqs::config::{MAX_MESSAGE_BYTES, SqsReceiverConfig, SqsSenderConfig};

use crate::Topics;
use crate::bridge::{EndpointReceiver, EndpointSender, channel};
use crate::config::{SqsEndpointReceiverConfig, SqsEndpointSenderConfig};

/// The queues of this daemon's `[endpoints.sqs]` (`type = "sqs_endpoint"`).
/// It serves from the daemon's [`Topics`], handed over as
/// [`Parts::services`].
pub struct SqsEndpoint;

/// The SQS receiver whose envelope mapping an endpoint receiver shares
/// (for `ferry test` and `ferry validate --explain`).
fn as_sqs_receiver(config: &SqsEndpointReceiverConfig) -> SqsReceiverConfig {
    SqsReceiverConfig {
        queue_url: None,
        queue_name: Some(config.queue.clone()),
        endpoint_url: None,
        region: None,
        wait_time_seconds: 20,
        max_messages: config.max_messages,
        visibility_timeout: config.visibility_timeout,
        sns_unwrap: !config.topic.is_empty(),
    }
}

/// The SQS sender whose envelope mapping an endpoint sender shares.
fn as_sqs_sender(config: &SqsEndpointSenderConfig) -> SqsSenderConfig {
    SqsSenderConfig {
        queue_url: None,
        queue_name: (!config.queue.is_empty()).then(|| config.queue.clone()),
        endpoint_url: None,
        region: None,
        max_message_bytes: MAX_MESSAGE_BYTES,
        message_group_header: config.message_group_header.clone(),
        default_message_group: config.default_message_group.clone(),
        batch_size: ferry_transport_sqs::config::DEFAULT_BATCH_SIZE,
        batch_linger_ms: ferry_transport_sqs::config::DEFAULT_BATCH_LINGER_MS,
    }
}

fn topics<'a>(parts: &'a Parts<'_>) -> Result<&'a Arc<Topics>, String> {
    parts
        .services
        .get::<Arc<Topics>>()
        .ok_or_else(|| "type = \"sqs_endpoint\" works in the daemon that runs [endpoints.sqs], not from the CLI".into())
}

#[async_trait]
impl TypedTransport for SqsEndpoint {
    type ReceiverConfig = SqsEndpointReceiverConfig;
    type SenderConfig = SqsEndpointSenderConfig;
    const KIND: &'static str = "sqs_endpoint";

    fn check_receiver(&self, _: &str, config: &SqsEndpointReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &SqsEndpointSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn needs_section(&self) -> Option<&'static str> {
        Some("endpoints.sqs")
    }

    fn receiver(
        &self,
        name: &str,
        config: &SqsEndpointReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(EndpointReceiver::new(name, config.clone(), topics(parts)?.clone(), parts.metrics.clone())))
    }

    fn sender(
        &self,
        name: &str,
        config: &SqsEndpointSenderConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Sender>, String> {
        let queues = topics(parts)?.queues.clone();
        Ok(Arc::new(EndpointSender::new(name, config.clone(), queues, parts.metrics.clone())))
    }

    async fn probe_receiver(&self, _: &str, config: &SqsEndpointReceiverConfig) -> Result<String, TransportError> {
        Ok(format!("queue {} of this daemon's [endpoints.sqs]", config.queue))
    }

    async fn probe_sender(&self, _: &str, _: &SqsEndpointSenderConfig) -> Result<String, TransportError> {
        Ok("this daemon's [endpoints.sqs]".into())
    }

    /// As an SQS receiver reads the same message, with the subject the
    /// endpoint's queue gives it.
    fn fixture_receive(
        &self,
        config: &SqsEndpointReceiverConfig,
        input: Value,
        now: Timestamp,
    ) -> Result<Admitted, String> {
        ferry_transport_sqs::fixture::receive(input, &as_sqs_receiver(config), now).map(|admitted| match admitted {
            Admitted::Envelope(mut e) => {
                e.subject.get_or_insert_with(|| channel(&config.queue, None));
                Admitted::Envelope(e)
            }
            other => other,
        })
    }

    fn fixture_send(
        &self,
        config: &SqsEndpointSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        ferry_transport_sqs::fixture::send(&as_sqs_sender(config), msg)
    }

    fn fidelity_probe(&self, _: &SqsEndpointReceiverConfig) -> Probe {
        ferry_transport_sqs::transport::fidelity_probe()
    }
}

/// The (topic, receiver) of every `sqs_endpoint` receiver a route uses
/// that receives from a topic: the routes the endpoint attaches to its
/// topics (a receiver left in the config but in no route would collect
/// messages that nothing ever takes).
pub fn topic_receivers(config: &Config) -> BTreeSet<(String, String)> {
    config
        .routes
        .iter()
        .filter_map(|route| {
            let receiver = config.receivers.get(&route.receiver).filter(|r| r.kind == SqsEndpoint::KIND)?;
            let receiver: SqsEndpointReceiverConfig = receiver.parse().ok()?;
            (!receiver.topic.is_empty()).then(|| (receiver.topic.clone(), route.receiver.clone()))
        })
        .collect()
}
