//! Fixture messages for `ferry test`: an SQS message as a test file writes
//! it, turned into an envelope by the receiver's own ingress mapping, and
//! the batch entry a sender makes of an outbound message, written as JSON.

use std::collections::BTreeMap;

use crate::config::{SqsReceiverConfig, SqsSenderConfig};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value as Toml};
use ferry_envelope::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::attributes::AttributeValue;
use crate::ingress::convert;
use crate::sender::{prepare, target_of};

/// A message as ReceiveMessage returns it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[serde(default)]
    message_id: Option<String>,
    /// The body (SQS bodies are text).
    #[serde(default)]
    payload: String,
    /// `name = "text"` (String), `name = 3` (Number), or
    /// `name = { type = "Number.int", value = "3" }` /
    /// `{ type = "Binary", base64 = "…" }`.
    #[serde(default)]
    message_attributes: BTreeMap<String, Toml>,
    /// System attributes by their SQS names (`SentTimestamp`,
    /// `ApproximateReceiveCount`, `MessageGroupId`, …), as text.
    #[serde(default)]
    attributes: BTreeMap<String, String>,
}

fn attribute(name: &str, value: &Toml) -> Result<MessageAttributeValue, String> {
    let b = MessageAttributeValue::builder();
    let b = match value {
        Toml::String(s) => b.data_type("String").string_value(s),
        Toml::Integer(n) => b.data_type("Number").string_value(n.to_string()),
        Toml::Float(f) => b.data_type("Number").string_value(f.to_string()),
        Toml::Table(t) => {
            let kind = t.get("type").and_then(Toml::as_str).ok_or_else(|| format!("{name}: give a type"))?;
            match (t.get("value").and_then(Toml::as_str), t.get("base64").and_then(Toml::as_str)) {
                (Some(v), None) => b.data_type(kind).string_value(v),
                (None, Some(b64)) => {
                    let bytes = wire::payload_of(None, Some(b64)).map_err(|e| format!("{name}: {e}"))?;
                    b.data_type(kind).binary_value(Blob::new(bytes.to_vec()))
                }
                _ => return Err(format!("{name}: give value (text) or base64 (binary)")),
            }
        }
        _ => return Err(format!("{name}: an attribute is a string, a number or {{ type, value | base64 }}")),
    };
    b.build().map_err(|e| format!("{name}: {e}"))
}

/// The envelope the receiver makes of `input`.
pub fn receive(input: Toml, config: &SqsReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("sqs input: {e}"))?;
    let mut m = Message::builder().body(input.payload);
    if let Some(id) = input.message_id {
        m = m.message_id(id);
    }
    for (name, value) in &input.message_attributes {
        m = m.message_attributes(name, attribute(name, value).map_err(|e| format!("sqs message_attributes: {e}"))?);
    }
    for (name, value) in input.attributes {
        m = m.attributes(MessageSystemAttributeName::from(name.as_str()), value);
    }
    Ok(Admitted::Envelope(convert(&m.build(), config.sns_unwrap, now)))
}

/// The entry a sender with `config` makes of `msg`, as JSON: `queue`,
/// `message_attributes` (`{ type, value }` or `{ type, base64 }`),
/// `message_group_id` and `message_deduplication_id` on FIFO queues, and
/// `payload` (the body).
pub fn send(config: &SqsSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let target = target_of(config);
    let prepared = prepare(config, &target, msg)?;
    let mut v = View::new();
    v.insert("queue".into(), json!(target.label()));
    let attributes: View = prepared
        .selection
        .attributes
        .iter()
        .map(|(name, value)| {
            let shown = match value {
                AttributeValue::String(s) | AttributeValue::Number(s) => {
                    json!({ "type": value.data_type(), "value": s })
                }
                AttributeValue::Binary(b) => json!({ "type": value.data_type(), "base64": wire::base64(b) }),
            };
            (name.clone(), shown)
        })
        .collect();
    v.insert("message_attributes".into(), attributes.into());
    wire::put(&mut v, "message_group_id", prepared.group_id);
    wire::put(&mut v, "message_deduplication_id", prepared.dedup_id);
    v.insert("payload".into(), json!(prepared.body));
    Ok(v)
}
