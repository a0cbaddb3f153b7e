//! Fixture messages for `ferry test`: a stream entry as a test file writes
//! it, turned into an envelope by the receiver's own mapping, and the
//! `XADD` a sender makes of an outbound message, written as JSON.

use std::collections::BTreeMap;

use crate::config::{RedisStreamsReceiverConfig, RedisStreamsSenderConfig};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value};
use ferry_envelope::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::egress::prepare;
use crate::ingress::{Fields, Incoming, to_envelope};

/// A stream entry as a receiver gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    /// The payload field's value (or `payload_base64`); leave both out for
    /// an entry without one.
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    /// The other fields: a table, or an array of `[name, value]` pairs to
    /// keep order and repeat a name.
    #[serde(default)]
    fields: Pairs,
    /// The entry id (default `<the test's time in ms>-0`).
    #[serde(default)]
    id: Option<String>,
    /// Deliveries so far, this one included (default 1).
    #[serde(default = "one")]
    delivered: i64,
}

fn one() -> i64 {
    1
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

/// The envelope the receiver makes of `input`, or its refusal.
pub fn receive(input: Value, config: &RedisStreamsReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("redis_streams input: {e}"))?;
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if input.payload.is_some() || input.payload_base64.is_some() {
        let payload = wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
        fields.push((config.payload_field.as_bytes().to_vec(), payload.to_vec()));
    }
    let pairs = match input.fields {
        Pairs::Table(t) => t.into_iter().collect(),
        Pairs::List(l) => l,
    };
    fields.extend(pairs.into_iter().map(|(k, v)| (k.into_bytes(), v.into_bytes())));
    let m = Incoming {
        stream: config.stream.clone(),
        id: input.id.unwrap_or_else(|| format!("{}-0", now.0)),
        fields,
        delivered: input.delivered,
    };
    let limits =
        Fields { payload: &config.payload_field, id: &config.id_field, max_payload_bytes: config.max_payload_bytes };
    Ok(match to_envelope(&m, limits) {
        Ok(converted) => Admitted::Envelope(converted.envelope),
        Err(poison) => Admitted::Refused {
            reason: poison.label().to_owned(),
            detail:
                "the receiver acknowledges this entry without delivery and counts it in ferry_ingress_rejected_total"
                    .into(),
        },
    })
}

/// The `XADD` a sender with `config` makes of `msg`, as JSON: `stream`,
/// `maxlen` when it trims, the payload field's value as `payload` (or
/// `payload_base64`), and the other fields as `fields` (UTF-8 values) and
/// `fields_base64` (the others).
pub fn send(config: &RedisStreamsSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let out = prepare(config, msg)?;
    let mut v = View::new();
    v.insert("stream".into(), json!(out.stream));
    if let Some(n) = out.maxlen {
        v.insert("maxlen".into(), json!(n));
    }
    if let Some((_, payload)) = out.fields.iter().find(|(name, _)| *name == config.payload_field) {
        wire::put_payload(&mut v, payload);
    }
    let fields = out.fields.iter().filter(|(name, _)| *name != config.payload_field);
    wire::put_pairs(&mut v, "fields", fields.map(|(name, value)| (name.as_str(), value.as_ref())));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver() -> RedisStreamsReceiverConfig {
        toml::from_str("url = \"redis://127.0.0.1\"\nstream = \"s\"\ngroup = \"g\"").expect("config")
    }

    #[test]
    fn a_fixture_entry_goes_through_the_receivers_mapping() {
        let input: Value =
            toml::from_str("payload = \"hi\"\nid = \"5-0\"\nfields = { message_id = \"m-1\", kind = \"t\" }")
                .expect("toml");
        let Admitted::Envelope(e) = receive(input, &receiver(), Timestamp(0)).expect("read") else { panic!("refused") };
        assert_eq!(e.id, "m-1");
        assert_eq!(e.payload().as_ref(), b"hi");
        assert_eq!(e.text_header("kind"), Some("t"));
        assert_eq!(e.text_header("redis.id"), Some("5-0"));
    }

    #[test]
    fn an_unknown_key_is_an_error() {
        let input: Value = toml::from_str("topic = \"t\"").expect("toml");
        assert!(receive(input, &receiver(), Timestamp(0)).is_err());
    }
}
