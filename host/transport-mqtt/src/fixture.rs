//! Fixture messages for `ferry test`: an MQTT publish as a test file writes
//! it, turned into an envelope by the receiver's own ingress mapping, and
//! the publish a sender makes of an outbound message, written as JSON.

use std::collections::BTreeMap;

use crate::config::{MqttReceiverConfig, MqttSenderConfig};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value};
use ferry_envelope::Timestamp;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Publish, PublishProperties};
use serde::Deserialize;
use serde_json::json;

use crate::egress::{OutboundPublish, prepare};
use crate::ingress::to_envelope;

/// An MQTT publish as a receiver gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    topic: String,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    #[serde(default = "one")]
    qos: u8,
    #[serde(default)]
    retain: bool,
    #[serde(default)]
    properties: Properties,
    /// A table, or an array of `[name, value]` pairs to keep order and
    /// repeat a name.
    #[serde(default)]
    user_properties: UserProperties,
}

fn one() -> u8 {
    1
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Properties {
    content_type: Option<String>,
    correlation_data: Option<String>,
    correlation_data_base64: Option<String>,
    response_topic: Option<String>,
    message_expiry_interval: Option<u32>,
    payload_format_indicator: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum UserProperties {
    Table(BTreeMap<String, String>),
    Pairs(Vec<(String, String)>),
}

impl Default for UserProperties {
    fn default() -> Self {
        UserProperties::Pairs(Vec::new())
    }
}

/// The envelope the receiver makes of `input`, or its refusal.
pub fn receive(input: Value, config: &MqttReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("mqtt input: {e}"))?;
    let payload = wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
    let p = input.properties;
    let correlation_data = if p.correlation_data.is_some() || p.correlation_data_base64.is_some() {
        let data = wire::payload_of(p.correlation_data.as_deref(), p.correlation_data_base64.as_deref());
        Some(data.map_err(|e| format!("correlation data: {e}"))?)
    } else {
        None
    };
    let user_properties = match input.user_properties {
        UserProperties::Table(t) => t.into_iter().collect(),
        UserProperties::Pairs(p) => p,
    };
    let properties = PublishProperties {
        payload_format_indicator: p.payload_format_indicator,
        message_expiry_interval: p.message_expiry_interval,
        topic_alias: None,
        response_topic: p.response_topic,
        correlation_data,
        user_properties,
        subscription_identifiers: Vec::new(),
        content_type: p.content_type,
    };
    let qos = match input.qos {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        2 => QoS::ExactlyOnce,
        n => return Err(format!("mqtt input: qos is 0, 1 or 2, not {n}")),
    };
    let mut publish = Publish::new(input.topic, qos, payload, Some(properties));
    publish.retain = input.retain;
    Ok(match to_envelope(&publish, config.max_payload_bytes, now) {
        Ok(ingress) => Admitted::Envelope(ingress.envelope),
        Err(poison) => Admitted::Refused {
            reason: poison.label().to_owned(),
            detail: "the receiver drops and acknowledges this publish (ferry_mqtt_ingress_poison_dropped_total)".into(),
        },
    })
}

/// The publish a sender with `config` makes of `msg`, as JSON: `topic`,
/// `qos`, `retain`, `properties`, `user_properties` (a table; an array of
/// pairs when a name repeats) and `payload`.
pub fn send(config: &MqttSenderConfig, msg: &OutboundMessage, now: Timestamp) -> Result<View, TransportError> {
    Ok(view(&prepare(config, msg, now)?, config.qos, config.retain))
}

fn view(publish: &OutboundPublish, qos: u8, retain: bool) -> View {
    let mut v = View::new();
    v.insert("topic".into(), json!(publish.topic));
    v.insert("qos".into(), json!(qos));
    v.insert("retain".into(), json!(retain));
    let p = &publish.properties;
    let mut props = View::new();
    wire::put(&mut props, "content_type", p.content_type.clone());
    wire::put(&mut props, "correlation_data", p.correlation_data.as_deref().map(wire::bytes_value));
    wire::put(&mut props, "response_topic", p.response_topic.clone());
    wire::put(&mut props, "message_expiry_interval", p.message_expiry_interval);
    wire::put(&mut props, "payload_format_indicator", p.payload_format_indicator);
    v.insert("properties".into(), props.into());
    let mut names: Vec<&str> = p.user_properties.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    let repeats = names.windows(2).any(|w| w[0] == w[1]);
    let user = if repeats {
        json!(p.user_properties)
    } else {
        p.user_properties.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<View>().into()
    };
    v.insert("user_properties".into(), user);
    wire::put_payload(&mut v, &publish.payload);
    v
}
