//! Fixture records for `ferry test`: a record as a test file writes it,
//! turned into an envelope by the receiver's own mapping, and the record
//! a sender makes of an outbound message, written as JSON.

use std::collections::BTreeMap;

use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value};
use ferry_envelope::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::config::{KafkaReceiverConfig, KafkaSenderConfig};
use crate::egress::prepare;
use crate::ingress::{Incoming, Poison, to_envelope};

/// A record as a receiver gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    /// The value (or `payload_base64`); leave both out for none.
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    /// The record's key.
    #[serde(default)]
    key: Option<String>,
    /// The record headers: a table, or an array of `[name, value]` pairs
    /// to keep order and repeat a name.
    #[serde(default)]
    headers: Pairs,
    /// The topic (default: the receiver's first).
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    partition: i32,
    #[serde(default)]
    offset: i64,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Pairs {
    Table(BTreeMap<String, String>),
    List(Vec<(String, String)>),
}

impl Default for Pairs {
    fn default() -> Self {
        Pairs::List(Vec::new())
    }
}

/// The envelope the receiver makes of `input`, or its refusal; the
/// record's timestamp is the test's time.
pub fn receive(input: Value, config: &KafkaReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("kafka input: {e}"))?;
    let payload = if input.payload.is_some() || input.payload_base64.is_some() {
        Some(wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?.to_vec())
    } else {
        None
    };
    let headers = match input.headers {
        Pairs::Table(t) => t.into_iter().collect(),
        Pairs::List(l) => l,
    };
    let m = Incoming {
        topic: input.topic.or_else(|| config.topics.first().cloned()).unwrap_or_default(),
        partition: input.partition,
        offset: input.offset,
        timestamp: Some(now.0),
        key: input.key.map(String::into_bytes),
        payload,
        headers: headers.into_iter().map(|(k, v)| (k, Some(v.into_bytes()))).collect(),
    };
    Ok(match to_envelope(&m, &config.id_header, config.max_payload_bytes) {
        Ok(converted) => Admitted::Envelope(converted.envelope),
        Err(Poison::PayloadTooLarge) => Admitted::Refused {
            reason: "too_large".into(),
            detail: "the receiver passes over this record (its offset is committed) without delivery".into(),
        },
    })
}

/// The record a sender with `config` makes of `msg`, as JSON: `topic`,
/// `key` when it has one, `payload` (or `payload_base64`), and the
/// headers as `headers` (UTF-8 values) and `headers_base64` (the others).
pub fn send(config: &KafkaSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let out = prepare(config, msg)?;
    let mut v = View::new();
    v.insert("topic".into(), json!(out.topic));
    if let Some(key) = &out.key {
        v.insert("key".into(), json!(String::from_utf8_lossy(key)));
    }
    wire::put_payload(&mut v, &out.payload);
    wire::put_pairs(&mut v, "headers", out.headers.iter().map(|(name, value)| (name.as_str(), value.as_ref())));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use ferry_envelope::Envelope;

    use super::*;

    fn receiver() -> KafkaReceiverConfig {
        ferry_core::transport::read_part("kafka", "brokers = \"k:9092\"\ntopics = [\"orders\"]\ngroup = \"g\"", |_| {
            Ok(())
        })
        .expect("config")
    }

    #[test]
    fn a_fixture_record_goes_through_the_receivers_mapping() {
        let input: Value = toml::from_str(
            "payload = \"hi\"\nkey = \"d-7\"\noffset = 5\nheaders = { message_id = \"m-1\", kind = \"t\" }",
        )
        .expect("toml");
        let Admitted::Envelope(e) = receive(input, &receiver(), Timestamp(9)).expect("read") else { panic!("refused") };
        assert_eq!((e.id.as_str(), e.payload().as_ref()), ("m-1", &b"hi"[..]));
        assert_eq!((e.text_header("kind"), e.text_header("kafka.key")), (Some("t"), Some("d-7")));
        assert_eq!((e.text_header("kafka.topic"), e.created_at), (Some("orders"), Timestamp(9)));
        let input: Value = toml::from_str("stream = \"s\"").expect("toml");
        assert!(receive(input, &receiver(), Timestamp(0)).is_err(), "an unknown key is an error");
    }

    #[test]
    fn an_outbound_message_is_shown_as_its_record() {
        let config: KafkaSenderConfig =
            ferry_core::transport::read_part("kafka", "brokers = \"k:9092\"\ntopic = \"out\"", |_| Ok(()))
                .expect("config");
        let mut e = Envelope::new("m-1", &b"{}"[..]);
        e.set_header("x-bridge.ordering-key", "d-7");
        let v = send(&config, &OutboundMessage::new(e, "")).expect("view");
        assert_eq!(v["topic"], "out");
        assert_eq!(v["key"], "d-7");
        assert_eq!(v["payload"], "{}");
        assert_eq!(v["headers"]["message_id"], "m-1");
    }
}
