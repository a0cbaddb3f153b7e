//! Fixture messages for `ferry test`: an AMQP 1.0 message as a test file
//! writes it, turned into an envelope by the receiver's own ingress
//! mapping, and the message a sender makes of an outbound message, written
//! as JSON.

use std::collections::BTreeMap;

use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Data, Header, Message, MessageId, Priority, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Symbol, Timestamp as AmqpTime, Value};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value as Toml};
use ferry_envelope::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::config::{Amqp10ReceiverConfig, Amqp10SenderConfig};
use crate::egress::{check_address, simple, to_message};
use crate::ingress::{id_text, simple_value, to_envelope};

/// A message as a receiving link gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    /// The body as one data section (text).
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    /// The body as an amqp-value holding this string instead.
    #[serde(default)]
    amqp_value: Option<String>,
    #[serde(default)]
    header: HeaderInput,
    #[serde(default)]
    properties: PropertiesInput,
    #[serde(default)]
    application_properties: BTreeMap<String, Toml>,
    /// Message annotations (`x-opt-enqueued-time = 1700000000000`): text,
    /// or a number, which is a time for the annotations ferry reads as
    /// times.
    #[serde(default)]
    message_annotations: BTreeMap<String, Toml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderInput {
    durable: Option<bool>,
    priority: Option<u8>,
    ttl: Option<u32>,
    delivery_count: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PropertiesInput {
    message_id: Option<Id>,
    correlation_id: Option<Id>,
    subject: Option<String>,
    to: Option<String>,
    reply_to: Option<String>,
    content_type: Option<String>,
    content_encoding: Option<String>,
    group_id: Option<String>,
    group_sequence: Option<u32>,
    reply_to_group_id: Option<String>,
    /// Milliseconds since the epoch.
    creation_time: Option<i64>,
    absolute_expiry_time: Option<i64>,
}

/// A message id: text, or a number (ulong).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Id {
    Number(u64),
    Text(String),
}

impl From<Id> for MessageId {
    fn from(id: Id) -> Self {
        match id {
            Id::Number(n) => MessageId::Ulong(n),
            Id::Text(s) => MessageId::String(s),
        }
    }
}

/// The envelope the receiver makes of `input`, or its refusal.
pub fn receive(input: Toml, config: &Amqp10ReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("amqp10 input: {e}"))?;
    let body = match input.amqp_value {
        Some(_) if input.payload.is_some() || input.payload_base64.is_some() => {
            return Err("amqp10 input: give a payload or an amqp_value, not both".into());
        }
        Some(text) => Body::Value(AmqpValue(Value::String(text))),
        None => {
            let payload = wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
            Body::Data(vec![Data(Binary::from(payload.to_vec()))].into())
        }
    };
    let h = input.header;
    let header = Header {
        durable: h.durable.unwrap_or(false),
        priority: Priority(h.priority.unwrap_or(4)),
        ttl: h.ttl,
        first_acquirer: false,
        delivery_count: h.delivery_count.unwrap_or(0),
    };
    let p = input.properties;
    let properties = Properties {
        message_id: p.message_id.map(MessageId::from),
        user_id: None,
        to: p.to,
        subject: p.subject,
        reply_to: p.reply_to,
        correlation_id: p.correlation_id.map(MessageId::from),
        content_type: p.content_type.map(Symbol::from),
        content_encoding: p.content_encoding.map(Symbol::from),
        absolute_expiry_time: p.absolute_expiry_time.map(AmqpTime::from_milliseconds),
        creation_time: p.creation_time.map(AmqpTime::from_milliseconds),
        group_id: p.group_id,
        group_sequence: p.group_sequence,
        reply_to_group_id: p.reply_to_group_id,
    };
    let mut app = OrderedMap::new();
    for (name, value) in &input.application_properties {
        let value = wire::header_of(name, value).map_err(|e| format!("amqp10 application_properties: {e}"))?;
        app.insert(name.clone(), simple(&value));
    }
    let mut annotations = fe2o3_amqp::types::messaging::MessageAnnotations::builder();
    for (name, value) in &input.message_annotations {
        let is_time = crate::ingress::ANNOTATIONS
            .iter()
            .any(|(annotation, header)| annotation == name && (header.ends_with("time") || header.ends_with("until")));
        let value = match value {
            Toml::String(s) => Value::String(s.clone()),
            Toml::Integer(n) if is_time => Value::Timestamp(AmqpTime::from_milliseconds(*n)),
            Toml::Integer(n) => Value::Long(*n),
            other => return Err(format!("amqp10 message_annotations: {name} = {other} is not text or a number")),
        };
        annotations = annotations.insert(Symbol::from(name.as_str()), value);
    }
    let message = Message {
        header: Some(header),
        delivery_annotations: None,
        message_annotations: (!input.message_annotations.is_empty()).then(|| annotations.build()),
        properties: Some(properties),
        application_properties: (!app.is_empty()).then_some(ApplicationProperties(app)),
        body,
        footer: None,
    };
    Ok(match to_envelope(&message, config.max_message_bytes, now) {
        Ok(ingress) => Admitted::Envelope(ingress.envelope),
        Err(poison) => Admitted::Refused {
            reason: poison.label().to_owned(),
            detail: format!("{}; the receiver rejects it at the broker", poison.describe()),
        },
    })
}

/// The message a sender with `config` makes of `msg`, as JSON: `address`,
/// `header`, `properties`, `application_properties` (types kept as JSON
/// can) and `payload`.
pub fn send(config: &Amqp10SenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    check_address(config, &msg.address)?;
    let m = to_message(&msg.envelope, config.durable, config.profile)?;
    let mut v = View::new();
    v.insert("address".into(), json!(config.address));
    let mut header = View::new();
    if let Some(h) = &m.header {
        header.insert("durable".into(), json!(h.durable));
        header.insert("priority".into(), json!(h.priority.0));
        wire::put(&mut header, "ttl", h.ttl);
    }
    v.insert("header".into(), header.into());
    let mut props = View::new();
    if let Some(p) = &m.properties {
        let id = |id: &Option<MessageId>| id.as_ref().map(id_json);
        wire::put(&mut props, "message_id", id(&p.message_id));
        wire::put(&mut props, "correlation_id", id(&p.correlation_id));
        wire::put(&mut props, "subject", p.subject.clone());
        wire::put(&mut props, "to", p.to.clone());
        wire::put(&mut props, "reply_to", p.reply_to.clone());
        wire::put(&mut props, "content_type", p.content_type.as_ref().map(|s| s.0.clone()));
        wire::put(&mut props, "content_encoding", p.content_encoding.as_ref().map(|s| s.0.clone()));
        wire::put(&mut props, "group_id", p.group_id.clone());
        wire::put(&mut props, "group_sequence", p.group_sequence);
        wire::put(&mut props, "reply_to_group_id", p.reply_to_group_id.clone());
        wire::put(&mut props, "creation_time", p.creation_time.as_ref().map(AmqpTime::milliseconds));
        wire::put(&mut props, "absolute_expiry_time", p.absolute_expiry_time.as_ref().map(AmqpTime::milliseconds));
    }
    v.insert("properties".into(), props.into());
    let app: View = m
        .application_properties
        .as_ref()
        .map(|a| a.0.iter().map(|(k, value)| (k.clone(), simple_json(value))).collect())
        .unwrap_or_default();
    v.insert("application_properties".into(), app.into());
    if let Some(annotations) = &m.message_annotations {
        let shown: View = annotations
            .0
            .iter()
            .map(|(k, value)| {
                let key = match k {
                    fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s) => s.0.clone(),
                    fe2o3_amqp::types::messaging::annotations::OwnedKey::Ulong(n) => n.to_string(),
                };
                let value = match value {
                    Value::String(s) => json!(s),
                    Value::Timestamp(t) => json!(t.milliseconds()),
                    other => json!(format!("{other:?}")),
                };
                (key, value)
            })
            .collect();
        v.insert("message_annotations".into(), shown.into());
    }
    wire::put_payload(&mut v, m.body.0.as_slice());
    Ok(v)
}

fn id_json(id: &MessageId) -> serde_json::Value {
    match id {
        MessageId::Ulong(n) => json!(n),
        MessageId::Binary(b) => json!({ "base64": wire::base64(b.as_slice()) }),
        other => json!(id_text(other)),
    }
}

fn simple_json(value: &SimpleValue) -> serde_json::Value {
    match value {
        // Bytes are shown as bytes here (ingress turns them into hex text).
        SimpleValue::Binary(b) => json!({ "base64": wire::base64(b.as_slice()) }),
        other => simple_value(other).map_or_else(|| json!(format!("{other:?}")), |h| wire::header_value(&h)),
    }
}
