//! Fixture events for `ferry test`: an event as a test file writes it
//! (`data`, `event`, `id`), turned into an envelope by the receiver's own
//! mapping, and the event a sender writes of an outbound message, as JSON
//! (`stream`, `id`, `event`, and `data`: the wire-format document as JSON,
//! or the text).

use ferry_config::WireFormat;
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{Admitted, View, toml_value::Value};
use ferry_envelope::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::config::{SseReceiverConfig, SseSenderConfig};
use crate::ingress::{DEFAULT_TYPE, Incoming, to_envelope};
use crate::sender::field_value;

/// An event as a receiver reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    data: String,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

/// The envelope the receiver makes of `input`.
pub fn receive(input: Value, config: &SseReceiverConfig, _now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("sse input: {e}"))?;
    let incoming = Incoming {
        event: input.event.unwrap_or_else(|| DEFAULT_TYPE.to_owned()),
        data: input.data,
        id: input.id.unwrap_or_default(),
    };
    let (envelope, _, _) = to_envelope(&incoming, config.wire_format);
    Ok(Admitted::Envelope(envelope))
}

/// The event a sender with `config` writes of `msg`.
pub fn send(config: &SseSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let envelope = &msg.envelope;
    let stream = if msg.address.is_empty() { config.stream.clone() } else { Some(msg.address.clone()) };
    let mut v = View::new();
    if let Some(stream) = stream {
        v.insert("stream".into(), json!(stream));
    }
    v.insert("id".into(), json!(field_value(&envelope.id)));
    if let Some(subject) = envelope.subject.as_deref().filter(|s| !s.is_empty()) {
        v.insert("event".into(), json!(field_value(subject)));
    }
    // The same checks as the sender's (a payload it refuses is refused here).
    let _ = crate::sender::event_of(msg, config.wire_format)?;
    let data = match config.wire_format {
        WireFormat::Json => serde_json::from_slice(&ferry_core::json_wire::encode(envelope)).unwrap_or_default(),
        WireFormat::None => json!(String::from_utf8_lossy(envelope.payload())),
    };
    v.insert("data".into(), data);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_envelope::Envelope;

    fn receiver() -> SseReceiverConfig {
        toml::from_str("url = \"http://127.0.0.1:1/stream/s\"").expect("config")
    }

    #[test]
    fn a_fixture_event_goes_through_the_receivers_mapping() {
        let input: Value =
            toml::from_str("data = '{\"headers\":{\"kind\":\"t\"},\"body\":\"hi\"}'\nid = \"e-1\"\nevent = \"price\"")
                .expect("toml");
        let Admitted::Envelope(e) = receive(input, &receiver(), Timestamp(0)).expect("read") else { panic!("refused") };
        assert_eq!(e.id, "e-1");
        assert_eq!(e.payload().as_ref(), b"hi");
        assert_eq!(e.text_header("kind"), Some("t"));
        assert_eq!(e.subject.as_deref(), Some("price"));
        let input: Value = toml::from_str("topic = \"t\"").expect("toml");
        assert!(receive(input, &receiver(), Timestamp(0)).is_err(), "unknown keys and no data are refused");
    }

    #[test]
    fn the_sent_event_shows_its_document() {
        let config: SseSenderConfig = toml::from_str("listen = \"127.0.0.1:0\"\nstream = \"s\"").expect("config");
        let mut e = Envelope::new("m-1", &b"body"[..]);
        e.subject = Some("a.b".into());
        e.set_header("kind", "t");
        let v = send(&config, &OutboundMessage::new(e, "")).expect("send");
        assert_eq!(v["stream"], "s");
        assert_eq!(v["id"], "m-1");
        assert_eq!(v["event"], "a.b");
        assert_eq!(v["data"]["headers"]["kind"], "t");
        assert_eq!(v["data"]["body"], "body");
    }
}
