//! Fixture messages for `ferry test`: an AMQP 0-9-1 delivery as a test file
//! writes it, turned into an envelope by the receiver's own ingress
//! mapping, and the publish a sender makes of an outbound message, written
//! as JSON.

use std::collections::BTreeMap;

use crate::config::{Amqp091ReceiverConfig, Amqp091SenderConfig};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value};
use ferry_envelope::Timestamp;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use serde::Deserialize;
use serde_json::json;

use crate::egress::{Publish, prepare, to_amqp};
use crate::ingress::{from_amqp, to_envelope};

/// A delivery as a consumer gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[serde(default)]
    exchange: String,
    /// Defaults to the receiver's queue name (the default exchange's key).
    #[serde(default)]
    routing_key: Option<String>,
    #[serde(default)]
    redelivered: bool,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    #[serde(default)]
    properties: Properties,
    #[serde(default)]
    headers: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Properties {
    message_id: Option<String>,
    correlation_id: Option<String>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    reply_to: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    app_id: Option<String>,
    user_id: Option<String>,
    /// Seconds since the epoch.
    timestamp: Option<u64>,
    /// Milliseconds, as text (`"5000"`), as AMQP writes it.
    expiration: Option<String>,
    priority: Option<u8>,
    delivery_mode: Option<u8>,
}

fn short(field: &str, s: String) -> Result<ShortString, String> {
    ShortString::try_new(s).map_err(|_| format!("amqp091 input: {field} is over 255 bytes"))
}

/// The envelope the receiver makes of `input`, or its refusal.
pub fn receive(input: Value, config: &Amqp091ReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("amqp091 input: {e}"))?;
    let payload = wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
    let p = input.properties;
    let mut props = BasicProperties::default();
    let texts = [
        ("message_id", p.message_id),
        ("correlation_id", p.correlation_id),
        ("content_type", p.content_type),
        ("content_encoding", p.content_encoding),
        ("reply_to", p.reply_to),
        ("type", p.kind),
        ("app_id", p.app_id),
        ("user_id", p.user_id),
        ("expiration", p.expiration),
    ];
    for (field, value) in texts {
        let Some(value) = value else { continue };
        let value = short(field, value)?;
        props = match field {
            "message_id" => props.with_message_id(value),
            "correlation_id" => props.with_correlation_id(value),
            "content_type" => props.with_content_type(value),
            "content_encoding" => props.with_content_encoding(value),
            "reply_to" => props.with_reply_to(value),
            "type" => props.with_type(value),
            "app_id" => props.with_app_id(value),
            "user_id" => props.with_user_id(value),
            _ => props.with_expiration(value),
        };
    }
    if let Some(t) = p.timestamp {
        props = props.with_timestamp(t);
    }
    if let Some(n) = p.priority {
        props = props.with_priority(n);
    }
    if let Some(n) = p.delivery_mode {
        props = props.with_delivery_mode(n);
    }
    if !input.headers.is_empty() {
        let mut table = FieldTable::default();
        for (name, value) in &input.headers {
            let value = wire::header_of(name, value).map_err(|e| format!("amqp091 input headers: {e}"))?;
            table.insert(short("header name", name.clone())?, to_amqp(&value));
        }
        props = props.with_headers(table);
    }
    if payload.len() > config.max_message_bytes {
        return Ok(Admitted::Refused {
            reason: "too_large".into(),
            detail: format!(
                "{} bytes, over max_message_bytes {}; the receiver rejects it (ferry_ingress_rejected_total)",
                payload.len(),
                config.max_message_bytes
            ),
        });
    }
    let routing_key = input.routing_key.unwrap_or_else(|| config.queue.clone());
    let ingress = to_envelope(&input.exchange, &routing_key, input.redelivered, &props, &payload, now);
    Ok(Admitted::Envelope(ingress.envelope))
}

/// The publish a sender with `config` makes of `msg`, as JSON: `exchange`,
/// `routing_key`, `properties`, `headers` (types kept as JSON can) and
/// `payload`.
pub fn send(config: &Amqp091SenderConfig, msg: &OutboundMessage, now: Timestamp) -> Result<View, TransportError> {
    Ok(view(&prepare(config, msg, now)?, msg))
}

fn view(publish: &Publish, msg: &OutboundMessage) -> View {
    let mut v = View::new();
    v.insert("exchange".into(), json!(publish.exchange.as_str()));
    v.insert("routing_key".into(), json!(publish.routing_key.as_str()));
    let p = &publish.properties;
    let text = |s: &Option<ShortString>| s.as_ref().map(|s| s.as_str().to_owned());
    let mut props = View::new();
    wire::put(&mut props, "message_id", text(p.message_id()));
    wire::put(&mut props, "correlation_id", text(p.correlation_id()));
    wire::put(&mut props, "content_type", text(p.content_type()));
    wire::put(&mut props, "content_encoding", text(p.content_encoding()));
    wire::put(&mut props, "reply_to", text(p.reply_to()));
    wire::put(&mut props, "type", text(p.kind()));
    wire::put(&mut props, "app_id", text(p.app_id()));
    wire::put(&mut props, "expiration", text(p.expiration()));
    wire::put(&mut props, "timestamp", *p.timestamp());
    wire::put(&mut props, "priority", *p.priority());
    wire::put(&mut props, "delivery_mode", *p.delivery_mode());
    v.insert("properties".into(), props.into());
    let headers: View = p
        .headers()
        .as_ref()
        .map(|t| t.inner().iter().map(|(k, value)| (k.as_str().to_owned(), amqp_json(value))).collect())
        .unwrap_or_default();
    v.insert("headers".into(), headers.into());
    wire::put_payload(&mut v, msg.envelope.payload());
    v
}

fn amqp_json(value: &AMQPValue) -> serde_json::Value {
    match from_amqp(value) {
        Some(h) => wire::header_value(&h),
        None => json!(format!("{value:?}")),
    }
}
