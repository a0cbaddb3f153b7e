//! [`Sse`], this crate's entry in the daemon's transport table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::fidelity::{EXTRA, Find, ID, Probe, SUBJECT, feature, table, text, typed_features, typed_headers};
use ferry_core::ports::{OutboundMessage, Receiver, Sender};
use ferry_core::transport::{Claim, KeyProblem, Parts, TypedTransport};
use ferry_core::wire::toml_value::Value;
use ferry_core::wire::{Admitted, View, header_of};
use ferry_envelope::{Envelope, Timestamp};

use crate::config::{SseReceiverConfig, SseSenderConfig};
use crate::{SseReceiver, SseSender, fixture};

/// Server-sent events (`type = "sse"`).
pub struct Sse;

#[async_trait]
impl TypedTransport for Sse {
    type ReceiverConfig = SseReceiverConfig;
    type SenderConfig = SseSenderConfig;
    const KIND: &'static str = "sse";

    fn check_receiver(&self, _: &str, config: &SseReceiverConfig) -> Result<(), KeyProblem> {
        config.check()
    }

    fn check_sender(&self, name: &str, config: &SseSenderConfig) -> Result<(), KeyProblem> {
        config.check()?;
        // Without `stream`, the sender's name is its stream's: it must be
        // one path segment for a client to ask for it.
        if config.stream.is_none() && !crate::config::stream_name_ok(name) {
            return Err(KeyProblem::new(
                "stream",
                format!("is needed: the sender's name {name:?} is no stream name (it {})", crate::config::STREAM_RULE),
            ));
        }
        Ok(())
    }

    fn sender_claims(&self, _: &str, config: &SseSenderConfig, _: &str) -> Vec<Claim> {
        config.claims()
    }

    fn receiver(&self, name: &str, config: &SseReceiverConfig, parts: &Parts<'_>) -> Result<Arc<dyn Receiver>, String> {
        Ok(Arc::new(SseReceiver::new(name, config.clone(), parts.metrics.clone())))
    }

    fn sender(&self, name: &str, config: &SseSenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        let listeners = parts.services.get::<ferry_core::listeners::Listeners>().cloned();
        Ok(SseSender::start(name, config.clone(), parts.metrics.clone(), listeners)?)
    }

    /// The event's data is the wire format (or the body), read here.
    fn receiver_reads_wire_format(&self) -> bool {
        true
    }

    fn sender_writes_wire_format(&self) -> bool {
        true
    }

    /// Opens the stream and reads its answer's head, not an event.
    async fn probe_receiver(&self, _: &str, config: &SseReceiverConfig) -> Result<String, TransportError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TransportError::permanent(e.to_string()))?;
        let mut request = client.get(&config.url).header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(token) = &config.bearer_token {
            request = request.bearer_auth(token.expose());
        }
        let response = request.send().await.map_err(|e| TransportError::transient(format!("cannot connect: {e}")))?;
        let status = response.status();
        let content_type =
            response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !status.is_success() {
            return Err(TransportError::transient(format!("the server answered {status}")));
        }
        if !content_type.starts_with("text/event-stream") {
            return Err(TransportError::permanent(format!("the answer is {content_type:?}, not text/event-stream")));
        }
        Ok(format!("{status}, {content_type}"))
    }

    async fn probe_sender(&self, _: &str, config: &SseSenderConfig) -> Result<String, TransportError> {
        ferry_core::listeners::probe(&config.listen).await
    }

    fn fixture_receive(&self, config: &SseReceiverConfig, input: Value, now: Timestamp) -> Result<Admitted, String> {
        fixture::receive(input, config, now)
    }

    fn fixture_send(
        &self,
        config: &SseSenderConfig,
        msg: &OutboundMessage,
        _: Timestamp,
    ) -> Result<View, TransportError> {
        fixture::send(config, msg)
    }

    fn receiver_secrets(&self, config: &SseReceiverConfig) -> Vec<String> {
        config.bearer_token.iter().map(|s| s.expose().to_owned()).collect()
    }

    fn sender_secrets(&self, config: &SseSenderConfig) -> Vec<String> {
        config.bearer_token.iter().map(|s| s.expose().to_owned()).collect()
    }

    fn fidelity_probe(&self, _: &SseReceiverConfig) -> Probe {
        // Headers travel in the data's wire-format document.
        let mut doc = Envelope::new(ID, &b"{}"[..]);
        doc.subject = Some(SUBJECT.to_owned());
        for (name, value) in typed_headers() {
            if let Ok(value) = header_of(&name, &value) {
                doc.set_header(name, value);
            }
        }
        let data = String::from_utf8_lossy(&ferry_core::json_wire::encode(&doc)).into_owned();
        let input = table(&[("id".into(), text(ID)), ("event".into(), text("message")), ("data".into(), text(&data))]);
        let mut features = vec![
            feature("identity (event id)", Find::Value(ID)),
            feature("subject (gobridge.subject)", Find::Value(SUBJECT)),
        ];
        features.extend(typed_features());
        features.push(feature("other headers (12)", Find::Extras));
        Probe { input, features, extras_in: EXTRA + 6 }
    }

    fn sender_warning(&self, _: &SseSenderConfig) -> Option<&'static str> {
        Some(
            "a send is done once the event is in the stream's replay buffer: a client that is not connected then and does not resume in time, or falls more than replay_events behind, never gets it",
        )
    }

    fn outage_note(&self) -> &'static str {
        "none: a send is accepted once the event is in the stream's replay buffer, whether or not a client is connected"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_whose_name_is_no_stream_name_must_name_its_stream() {
        let bare: SseSenderConfig = toml::from_str("listen = \"127.0.0.1:0\"").expect("config");
        assert!(Sse.check_sender("feed", &bare).is_ok());
        assert_eq!(Sse.check_sender("my feed/x", &bare).map_err(|p| p.key), Err("stream".to_owned()));
        let named: SseSenderConfig = toml::from_str("listen = \"127.0.0.1:0\"\nstream = \"feed\"").expect("config");
        assert!(Sse.check_sender("my feed/x", &named).is_ok());
    }
}
