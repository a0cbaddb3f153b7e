//! Envelope -> MQTT publish: the rules of seed 000 ("MQTT out of the
//! envelope").

use crate::config::MqttSenderConfig;
use bytes::Bytes;
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use crate::ingress::{MESSAGE_ID, QOS, RESPONSE_TOPIC, RETAINED, TOPIC, decode_correlation_data};

/// Longest topic, property or user property MQTT can carry.
pub const MAX_STRING_BYTES: usize = 65_535;

/// A publish ready to hand to the client.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundPublish {
    pub topic: String,
    pub payload: Bytes,
    pub properties: PublishProperties,
    /// Headers dropped because they are not text (MQTTNonStringHeaderDropped).
    pub non_text_dropped: u32,
}

impl OutboundPublish {
    /// An upper estimate of the PUBLISH packet's size on the wire, to
    /// compare with the broker's Maximum Packet Size.
    pub fn packet_size(&self) -> usize {
        let p = &self.properties;
        let user: usize = p.user_properties.iter().map(|(k, v)| 5 + k.len() + v.len()).sum();
        let optional = p.correlation_data.as_ref().map_or(0, |c| 3 + c.len())
            + p.content_type.as_ref().map_or(0, |c| 3 + c.len())
            + p.response_topic.as_ref().map_or(0, |r| 3 + r.len())
            + 5;
        // Fixed header (5), topic (2 + len), packet id (2), property length (4).
        5 + 2 + self.topic.len() + 2 + 4 + user + optional + self.payload.len()
    }
}

/// Expands an address template: each `{name}` becomes the text header of
/// that exact name. An empty address means `default_topic`.
pub fn resolve_topic(
    address: &str,
    default_topic: Option<&str>,
    envelope: &Envelope,
) -> Result<String, TransportError> {
    let template = if address.is_empty() {
        default_topic
            .ok_or_else(|| TransportError::permanent("binding has no address and the sender has no default_topic"))?
    } else {
        address
    };
    let topic = ferry_core::address::expand(template, envelope)?;
    if topic.is_empty() {
        return Err(TransportError::unroutable(format!("topic template {template:?} gave an empty topic")));
    }
    if topic.contains(['+', '#', '\u{0}']) {
        return Err(TransportError::unroutable(format!(
            "topic {topic:?} contains a wildcard or NUL; cannot publish to it"
        )));
    }
    check_len("topic", &topic)?;
    Ok(topic)
}

fn check_len(what: &str, s: &str) -> Result<(), TransportError> {
    if s.len() > MAX_STRING_BYTES {
        return Err(TransportError::permanent(format!("{what} is {} bytes, over MQTT's 65535", s.len())));
    }
    Ok(())
}

/// Headers never sent as user properties: bridge-owned MQTT metadata, the
/// identity carrier (the identity always wins), fields mapped onto native
/// properties, and private bookkeeping.
fn skipped(name: &str) -> bool {
    matches!(name, TOPIC | QOS | RETAINED | MESSAGE_ID | RESPONSE_TOPIC | names::SUBJECT_CARRIER)
        || name == names::CORRELATION_ID
        || names::is_private(name)
}

/// The publish a sender with `config` makes of `msg`: the address template
/// expanded (or the sender's `default_topic`), then [`to_publish`].
pub fn prepare(
    config: &MqttSenderConfig,
    msg: &OutboundMessage,
    now: Timestamp,
) -> Result<OutboundPublish, TransportError> {
    let topic = resolve_topic(&msg.address, config.default_topic.as_deref(), &msg.envelope)?;
    to_publish(&msg.envelope, topic, now)
}

/// Builds the publish for `envelope` on `topic`.
pub fn to_publish(envelope: &Envelope, topic: String, now: Timestamp) -> Result<OutboundPublish, TransportError> {
    let mut properties = PublishProperties::default();
    let mut user = vec![(MESSAGE_ID.to_owned(), envelope.id.clone())];
    if let Some(subject) = &envelope.subject {
        user.push((names::SUBJECT_CARRIER.to_owned(), subject.clone()));
    }
    let mut non_text_dropped = 0;
    for (name, value) in &envelope.headers {
        if skipped(name) {
            continue;
        }
        match value {
            HeaderValue::Text(v) => user.push((name.clone(), v.clone())),
            _ => non_text_dropped += 1,
        }
    }
    for (k, v) in &user {
        check_len("user property name", k)?;
        check_len(&format!("user property {k:?}"), v)?;
    }
    properties.user_properties = user;

    let binary = envelope.text_header(names::CORRELATION_DATA).and_then(decode_correlation_data);
    properties.correlation_data = match binary {
        Some(bytes) => Some(bytes),
        None => envelope.text_header(names::CORRELATION_ID).map(|s| Bytes::copy_from_slice(s.as_bytes())),
    };
    if let Some(data) = &properties.correlation_data
        && data.len() > MAX_STRING_BYTES
    {
        return Err(TransportError::permanent("correlation data is over MQTT's 65535 bytes"));
    }
    if let Some(ct) = envelope.text_header(names::CONTENT_TYPE) {
        check_len("content type", ct)?;
        properties.content_type = Some(ct.to_owned());
    }
    if let Some(rt) = envelope.text_header(RESPONSE_TOPIC) {
        check_len("response topic", rt)?;
        properties.response_topic = Some(rt.to_owned());
    }
    if let Some(remaining) = envelope.remaining_ttl(now) {
        let secs = remaining.as_millis().div_ceil(1000).max(1);
        properties.message_expiry_interval = Some(u32::try_from(secs).unwrap_or(u32::MAX));
    }
    Ok(OutboundPublish { topic, payload: envelope.payload().clone(), properties, non_text_dropped })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Envelope {
        let mut e = Envelope::new("id-1", &b"body"[..]);
        e.subject = Some("order.created".into());
        e.set_header("mqtt.topic", "sensors/a");
        e.set_header("mqtt.qos", HeaderValue::Integer(1));
        e.set_header("mqtt.message-id", "ignored");
        e.set_header("kind", "temp");
        e.set_header("count", HeaderValue::Integer(4));
        e.set_header("at", HeaderValue::Time(Timestamp(5)));
        e.set_header("x-bridge.route-id", "r1");
        e.set_header("x-bridge.correlation-id", "corr-1");
        e.set_header("x-bridge.tenant-id", "acme");
        e
    }

    #[test]
    fn topic_templates_use_text_headers_and_fail_permanently_when_missing() {
        let e = env();
        assert_eq!(resolve_topic("bridged/{mqtt.topic}", None, &e).expect("ok"), "bridged/sensors/a");
        assert_eq!(resolve_topic("", Some("fallback"), &e).expect("ok"), "fallback");
        assert!(!resolve_topic("x/{nope}", None, &e).expect_err("missing").is_transient());
        assert!(!resolve_topic("x/{count}", None, &e).expect_err("not text").is_transient());
        assert!(resolve_topic("", None, &e).is_err());
        assert!(resolve_topic("a/#", None, &e).is_err());
        assert!(resolve_topic(&"t".repeat(65_536), None, &e).is_err());
    }

    #[test]
    fn identity_wins_and_non_text_headers_are_counted() {
        let p = to_publish(&env(), "t".into(), Timestamp(0)).expect("ok");
        let user: Vec<(&str, &str)> =
            p.properties.user_properties.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(user[0], ("mqtt.message-id", "id-1"));
        assert!(user.contains(&("gobridge.subject", "order.created")));
        assert!(user.contains(&("kind", "temp")));
        assert!(user.contains(&("x-bridge.tenant-id", "acme")));
        assert!(
            !user
                .iter()
                .any(|(k, _)| *k == "mqtt.topic" || *k == "x-bridge.route-id" || *k == "x-bridge.correlation-id")
        );
        assert_eq!(user.iter().filter(|(k, _)| *k == "mqtt.message-id").count(), 1);
        assert_eq!(p.non_text_dropped, 2, "count and at are not text; mqtt.qos is skipped, not counted");
        assert_eq!(p.properties.correlation_data.as_deref(), Some(&b"corr-1"[..]));
    }

    #[test]
    fn binary_correlation_data_wins_and_expiry_is_at_least_one_second() {
        let mut e = env();
        e.set_header("x-bridge.correlation-data", "AJ__");
        e.expires_at = Some(Timestamp(1_200));
        let p = to_publish(&e, "t".into(), Timestamp(1_000)).expect("ok");
        assert_eq!(p.properties.correlation_data.as_deref(), Some(&[0u8, 159, 255][..]));
        assert_eq!(p.properties.message_expiry_interval, Some(1));
        e.expires_at = Some(Timestamp(31_000));
        let p = to_publish(&e, "t".into(), Timestamp(1_000)).expect("ok");
        assert_eq!(p.properties.message_expiry_interval, Some(30));
    }

    #[test]
    fn oversized_user_property_fails_permanently() {
        let mut e = env();
        e.set_header("huge", "x".repeat(65_536));
        assert!(!to_publish(&e, "t".into(), Timestamp(0)).expect_err("too big").is_transient());
    }
}
