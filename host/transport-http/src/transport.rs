//! [`Http`] and [`Simplemq`], this crate's entries in the daemon's
//! transport table.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{
    CONTENT_TYPE, CORRELATION, EXTRA, Find, ID, Probe, REPLY_TO, SUBJECT, TEXT_VALUE, extras, feature, table, text,
    typed_features, typed_headers,
};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{Claim, KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

use crate::config::{
    HttpReceiverConfig, HttpSenderConfig, SimplemqHeaders, SimplemqReceiverConfig, SimplemqSenderConfig,
};
use crate::{HttpReceiver, HttpSender, SimplemqReceiver, SimplemqSender, fixture, probe};

/// Webhooks in and out (`type = "http"`).
pub struct Http;

/// Sakura Cloud's SimpleMQ (`type = "simplemq"`).
pub struct Simplemq;

#[async_trait]
impl TypedTransport for Http {
    type ReceiverConfig = HttpReceiverConfig;
    type SenderConfig = HttpSenderConfig;
    const KIND: &'static str = "http";

    fn check_receiver(&self, _: &str, config: &HttpReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &HttpSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver_claims(&self, _: &str, config: &HttpReceiverConfig, _: &str) -> Vec<Claim> {
        config.claims()
    }

    fn receiver(
        &self,
        name: &str,
        config: &HttpReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        let listeners = parts.services.get::<ferry_core::listeners::Listeners>().cloned();
        Ok(Arc::new(HttpReceiver::new(name, config.clone(), parts.durable_first, parts.metrics.clone(), listeners)))
    }

    fn sender(&self, name: &str, config: &HttpSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(HttpSender::start(name, config.clone(), parts.metrics.clone()).map_err(|e| e.to_string())?)
    }

    /// A malformed body is its caller's 400, so the receiver reads it.
    fn receiver_reads_wire_format(&self) -> bool {
        true
    }

    async fn probe_receiver(&self, _: &str, config: &HttpReceiverConfig) -> Result<String, TransportError> {
        ferry_core::listeners::probe(&config.listen).await
    }

    async fn probe_sender(&self, _: &str, config: &HttpSenderConfig) -> Result<String, TransportError> {
        match &config.url {
            Some(url) => probe::target(url).await,
            None => Ok("no url configured (bindings name theirs)".into()),
        }
    }

    fn fixture_receive(&self, config: &HttpReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &HttpSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn receiver_secrets(&self, config: &HttpReceiverConfig) -> Vec<String> {
        config.bearer_token.iter().chain(&config.hmac_secret).map(|s| s.expose().to_owned()).collect()
    }

    fn sender_secrets(&self, config: &HttpSenderConfig) -> Vec<String> {
        config.bearer_token.iter().chain(&config.hmac_secret).map(|s| s.expose().to_owned()).collect()
    }

    fn fidelity_probe(&self, config: &HttpReceiverConfig) -> Probe {
        // HTTP headers are text: the prefix marks the message's own.
        let prefix = config.header_prefix.as_str();
        let mut headers: Vec<(String, Value)> = vec![
            ("Idempotency-Key".into(), text(ID)),
            ("Content-Type".into(), text(CONTENT_TYPE)),
            (format!("{prefix}gobridge.subject"), text(SUBJECT)),
            (format!("{prefix}probe-text"), text(TEXT_VALUE)),
        ];
        headers.extend(extras().into_iter().map(|(k, v)| (format!("{prefix}{k}"), text(&v))));
        let input = table(&[("payload".into(), text("{}")), ("headers".into(), table(&headers))]);
        let features = vec![
            feature("identity (Idempotency-Key)", Find::Value(ID)),
            feature("subject (gobridge.subject header)", Find::Value(SUBJECT)),
            feature("content type", Find::Value(CONTENT_TYPE)),
            feature("header", Find::Name("probe-text")),
            feature("other headers (12)", Find::Extras),
        ];
        Probe { input, features, extras_in: EXTRA + 1 }
    }

    fn outage_note(&self) -> &'static str {
        "a refused or reset connection, DNS, TLS, a connect or request timeout, or 408, 429, 502, 503, 504"
    }
}

#[async_trait]
impl TypedTransport for Simplemq {
    type ReceiverConfig = SimplemqReceiverConfig;
    type SenderConfig = SimplemqSenderConfig;
    const KIND: &'static str = "simplemq";

    fn check_receiver(&self, _: &str, config: &SimplemqReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, _: &str, config: &SimplemqSenderConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn receiver(
        &self,
        name: &str,
        config: &SimplemqReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(SimplemqReceiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &SimplemqSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        Ok(SimplemqSender::start(name, config.clone(), parts.metrics.clone()).map_err(|e| e.to_string())?)
    }

    /// SimpleMQ carries no headers: its content is the wire format (in
    /// mqbridge's names when asked), read and written here.
    fn receiver_reads_wire_format(&self) -> bool {
        true
    }

    fn sender_writes_wire_format(&self) -> bool {
        true
    }

    // Not a receive: that would hide a message for its visibility timeout.
    async fn probe_receiver(&self, _: &str, config: &SimplemqReceiverConfig) -> Result<String, TransportError> {
        probe::target(&config.api_url).await
    }

    async fn probe_sender(&self, _: &str, config: &SimplemqSenderConfig) -> Result<String, TransportError> {
        probe::target(&config.api_url).await
    }

    fn fixture_receive(
        &self,
        config: &SimplemqReceiverConfig,
        input: Value,
        now: Timestamp,
    ) -> Result<Admitted, String> {
        fixture::receive_simplemq(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &SimplemqSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send_simplemq(config, msg)
    }

    fn receiver_secrets(&self, config: &SimplemqReceiverConfig) -> Vec<String> {
        vec![config.api_key.expose().to_owned()]
    }

    fn sender_secrets(&self, config: &SimplemqSenderConfig) -> Vec<String> {
        vec![config.api_key.expose().to_owned()]
    }

    fn fidelity_probe(&self, config: &SimplemqReceiverConfig) -> Probe {
        // Headers travel in the content's JSON document.
        let mqbridge = config.headers == SimplemqHeaders::Mqbridge;
        let name = |k: &str| if mqbridge { format!("rabbitmq.header.{k}") } else { k.to_owned() };
        let mut headers: Vec<(String, Value)> =
            vec![("gobridge.subject".into(), text(SUBJECT)), (name("probe-text"), text(TEXT_VALUE))];
        if mqbridge {
            for (k, v) in [
                ("rabbitmq.message_id", ID),
                ("rabbitmq.correlation_id", CORRELATION),
                ("rabbitmq.content_type", CONTENT_TYPE),
                ("rabbitmq.reply_to", REPLY_TO),
                ("rabbitmq.exchange", "probe-exchange-7f3a"),
                ("rabbitmq.routing_key", "probe.key.7f3a"),
            ] {
                headers.push((k.into(), text(v)));
            }
        } else {
            headers.extend(typed_headers().into_iter().filter(|(k, _)| k != "probe-text"));
        }
        headers.extend(extras().into_iter().map(|(k, v)| (name(&k), text(&v))));
        let input = table(&[
            ("message_id".into(), text(ID)),
            ("payload".into(), text("{}")),
            ("headers".into(), table(&headers)),
        ]);
        let mut features = if mqbridge {
            vec![
                feature("identity (rabbitmq.message_id)", Find::Value(ID)),
                feature("subject (gobridge.subject)", Find::Value(SUBJECT)),
                feature("correlation id", Find::Value(CORRELATION)),
                feature("content type", Find::Value(CONTENT_TYPE)),
                feature("reply-to", Find::Value(REPLY_TO)),
                feature("routing key", Find::Value("probe.key.7f3a")),
                feature("exchange", Find::Value("probe-exchange-7f3a")),
                feature("header", Find::Name("probe-text")),
            ]
        } else {
            let mut f = vec![
                feature("identity (SimpleMQ message id)", Find::Value(ID)),
                feature("subject (gobridge.subject)", Find::Value(SUBJECT)),
            ];
            f.extend(typed_features());
            f
        };
        features.push(feature("other headers (12)", Find::Extras));
        Probe { input, features, extras_in: if mqbridge { EXTRA + 1 } else { EXTRA + 6 } }
    }

    fn outage_note(&self) -> &'static str {
        "a refused or reset connection, DNS, TLS, a connect or request timeout, or 408, 429, 502, 503, 504"
    }
}
