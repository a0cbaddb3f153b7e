//! Fixture messages for `ferry test`: a JetStream message as a test file
//! writes it, turned into an envelope by the receiver's own mapping, and
//! the publish a sender makes of an outbound message, written as JSON.

use std::collections::BTreeMap;

use crate::config::{NatsReceiverConfig, NatsSenderConfig};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value};
use ferry_envelope::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::egress::prepare;
use crate::ingress::{Incoming, to_envelope};

/// A JetStream message as a receiver gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    subject: String,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    /// A table, or an array of `[name, value]` pairs to keep order and
    /// repeat a name.
    #[serde(default)]
    headers: Headers,
    /// The stream's sequence of the message (default 1).
    #[serde(default = "one")]
    sequence: u64,
    /// Deliveries so far, this one included (default 1).
    #[serde(default = "one_i64")]
    delivered: i64,
    /// When the stream stored it, in milliseconds since the epoch (default:
    /// the test's time).
    #[serde(default)]
    published_ms: Option<i64>,
}

fn one() -> u64 {
    1
}

fn one_i64() -> i64 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Headers {
    Table(BTreeMap<String, String>),
    Pairs(Vec<(String, String)>),
}

impl Default for Headers {
    fn default() -> Self {
        Headers::Pairs(Vec::new())
    }
}

/// The envelope the receiver makes of `input`, or its refusal.
pub fn receive(input: Value, config: &NatsReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("nats input: {e}"))?;
    let payload = wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
    let headers = match input.headers {
        Headers::Table(t) => t.into_iter().collect(),
        Headers::Pairs(p) => p,
    };
    let m = Incoming {
        subject: input.subject,
        headers,
        payload,
        stream: config.stream.clone(),
        sequence: input.sequence,
        delivered: input.delivered,
        published: input.published_ms.map_or(now, Timestamp),
    };
    Ok(match to_envelope(&m, config.max_payload_bytes) {
        Ok(envelope) => Admitted::Envelope(envelope),
        Err(poison) => Admitted::Refused {
            reason: poison.label().to_owned(),
            detail: "the receiver terminates this message (+TERM) and counts it in ferry_ingress_rejected_total".into(),
        },
    })
}

/// The publish a sender with `config` makes of `msg`, as JSON: `subject`,
/// `headers` (a table; an array of pairs when a name repeats) and
/// `payload`.
pub fn send(config: &NatsSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let out = prepare(config, msg)?;
    let mut v = View::new();
    v.insert("subject".into(), json!(out.subject));
    let mut names: Vec<&str> = out.headers.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    let repeats = names.windows(2).any(|w| w[0] == w[1]);
    let headers = if repeats {
        json!(out.headers)
    } else {
        out.headers.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<View>().into()
    };
    v.insert("headers".into(), headers);
    wire::put_payload(&mut v, &out.payload);
    Ok(v)
}
