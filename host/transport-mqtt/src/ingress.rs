//! MQTT publish -> envelope: the rules of seed 000 ("MQTT into the
//! envelope") and seed 002 (MQTT ingress headers).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Publish;

/// Delivered topic (bridge-owned).
pub const TOPIC: &str = "mqtt.topic";
/// Delivered QoS (bridge-owned).
pub const QOS: &str = "mqtt.qos";
/// Delivered RETAIN flag (bridge-owned).
pub const RETAINED: &str = "mqtt.retained";
/// Identity carrier between ferry peers.
pub const MESSAGE_ID: &str = "mqtt.message-id";
/// Response topic.
pub const RESPONSE_TOPIC: &str = "mqtt.response-topic";
/// Adapter-internal marker; always stripped from inbound publishes.
pub const GENERATED_ID_PROPERTY: &str = "mqtt.generated-id";

/// Most user properties a publish may carry before it is poison.
pub const MAX_USER_PROPERTIES: usize = 128;
/// Longest admitted user-property key or value, in UTF-8 bytes.
pub const MAX_HEADER_BYTES: usize = 256;

/// Why a publish was refused whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    TooManyUserProperties,
    PayloadTooLarge,
    TopicNotUtf8,
}

impl Poison {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Poison::TooManyUserProperties => "too_many_user_properties",
            Poison::PayloadTooLarge => "payload_too_large",
            Poison::TopicNotUtf8 => "topic_not_utf8",
        }
    }
}

/// A converted publish and what was refused on the way.
#[derive(Debug)]
pub struct Ingress {
    pub envelope: Envelope,
    /// User properties refused by the admission rules (counted on
    /// MQTTIngressHeaderDropped).
    pub dropped_headers: u32,
}

/// Whether a string may become a header key or value: at most 256 bytes,
/// no control characters. (UTF-8 validity is guaranteed by the type; the
/// MQTT decoder refuses invalid UTF-8 before we see it.)
pub fn is_safe(s: &str) -> bool {
    s.len() <= MAX_HEADER_BYTES && !s.chars().any(char::is_control)
}

fn qos_number(q: QoS) -> i64 {
    match q {
        QoS::AtMostOnce => 0,
        QoS::AtLeastOnce => 1,
        QoS::ExactlyOnce => 2,
    }
}

/// Converts one publish. `now` is the receive time.
pub fn to_envelope(publish: &Publish, max_payload_bytes: usize, now: Timestamp) -> Result<Ingress, Poison> {
    let props = publish.properties.as_ref();
    let user_properties: &[(String, String)] = props.map(|p| p.user_properties.as_slice()).unwrap_or(&[]);
    if user_properties.len() > MAX_USER_PROPERTIES {
        return Err(Poison::TooManyUserProperties);
    }
    if publish.payload.len() > max_payload_bytes {
        return Err(Poison::PayloadTooLarge);
    }
    let topic = std::str::from_utf8(&publish.topic).map_err(|_| Poison::TopicNotUtf8)?.to_owned();

    let mut envelope = Envelope::new(String::new(), publish.payload.clone());
    envelope.created_at = now;
    let mut dropped_headers = 0;
    let mut message_id: Option<&str> = None;
    for (key, value) in user_properties {
        match key.as_str() {
            MESSAGE_ID => {
                if is_safe(value) && !value.is_empty() {
                    message_id = Some(value);
                }
            }
            names::SUBJECT_CARRIER => {
                if is_safe(value) && !value.is_empty() {
                    envelope.subject = Some(value.clone());
                }
            }
            GENERATED_ID_PROPERTY | TOPIC | QOS | RETAINED => {}
            _ if !is_safe(key) || !is_safe(value) => dropped_headers += 1,
            _ => {
                envelope.headers.insert(key.clone(), HeaderValue::Text(value.clone()));
            }
        }
    }

    envelope.set_header(TOPIC, topic);
    envelope.set_header(QOS, HeaderValue::Integer(qos_number(publish.qos)));
    envelope.set_header(RETAINED, HeaderValue::Boolean(publish.retain));

    let mut correlation_identity = None;
    // Zero-length Correlation Data names nothing: it is treated as absent,
    // not as one identity every such publish would share.
    if let Some(data) = props.and_then(|p| p.correlation_data.as_ref()).filter(|d| !d.is_empty()) {
        match std::str::from_utf8(data) {
            Ok(text) if is_safe(text) && !text.is_empty() => {
                envelope.derive_header(names::CORRELATION_ID, text);
                correlation_identity = Some(text.to_owned());
            }
            _ => {
                let encoded = URL_SAFE_NO_PAD.encode(data);
                envelope.derive_header(names::CORRELATION_DATA, encoded.clone());
                correlation_identity = Some(format!("mqtt-bin:{encoded}"));
            }
        }
    }

    envelope.id = match (message_id, correlation_identity) {
        (Some(id), _) => id.to_owned(),
        (None, Some(id)) => id,
        (None, None) => {
            envelope.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
            uuid::Uuid::new_v4().to_string()
        }
    };
    envelope.set_header(MESSAGE_ID, envelope.id.clone());

    if let Some(p) = props {
        if let Some(ct) = &p.content_type {
            envelope.derive_header(names::CONTENT_TYPE, ct.clone());
        }
        if let Some(rt) = &p.response_topic {
            envelope.set_header(RESPONSE_TOPIC, rt.clone());
        }
        if let Some(secs) = p.message_expiry_interval {
            envelope.expires_at = Some(now.plus(std::time::Duration::from_secs(u64::from(secs))));
        }
    }
    Ok(Ingress { envelope, dropped_headers })
}

/// Decodes the binary correlation data a header carries.
pub fn decode_correlation_data(encoded: &str) -> Option<Bytes> {
    URL_SAFE_NO_PAD.decode(encoded).ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::v5::mqttbytes::v5::PublishProperties;

    fn publish(props: PublishProperties, payload: &[u8]) -> Publish {
        let mut p = Publish::new("sensors/a", QoS::AtLeastOnce, payload.to_vec(), Some(props));
        p.retain = true;
        p
    }

    fn props(user: &[(&str, &str)]) -> PublishProperties {
        PublishProperties {
            user_properties: user.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn reserved_mqtt_headers_cannot_be_spoofed() {
        let p = publish(
            props(&[("mqtt.topic", "evil"), ("mqtt.qos", "2"), ("mqtt.retained", "false"), ("x-bridge.route-id", "x")]),
            b"",
        );
        let i = to_envelope(&p, 1024, Timestamp(0)).expect("converts");
        assert_eq!(i.envelope.text_header("mqtt.topic"), Some("sensors/a"));
        assert_eq!(i.envelope.headers.get("mqtt.qos"), Some(&HeaderValue::Integer(1)));
        assert_eq!(i.envelope.headers.get("mqtt.retained"), Some(&HeaderValue::Boolean(true)));
        // Handed to the route, whose header rules decide (and stamp their own).
        assert_eq!(i.envelope.text_header("x-bridge.route-id"), Some("x"));
        assert_eq!(i.dropped_headers, 0, "anti-spoof drops are not counted");
    }

    #[test]
    fn admission_rules_count_unsafe_properties_and_last_value_wins() {
        let long = "v".repeat(257);
        let p = publish(
            props(&[("a", "1"), ("a", "2"), ("ctl", "x\ny"), ("big", &long), ("location", "Malmö"), (&long, "k")]),
            b"",
        );
        let i = to_envelope(&p, 1024, Timestamp(0)).expect("converts");
        assert_eq!(i.envelope.text_header("a"), Some("2"));
        assert_eq!(i.envelope.text_header("location"), Some("Malmö"));
        assert!(!i.envelope.headers.contains_key("ctl"));
        assert!(!i.envelope.headers.contains_key("big"));
        assert_eq!(i.dropped_headers, 3);
        let exactly = "v".repeat(256);
        let p = publish(props(&[("edge", &exactly)]), b"");
        assert_eq!(
            to_envelope(&p, 1024, Timestamp(0)).expect("ok").envelope.text_header("edge"),
            Some(exactly.as_str())
        );
    }

    #[test]
    fn poison_when_too_many_properties_or_too_large() {
        let many: Vec<(String, String)> = (0..129).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        let p = publish(PublishProperties { user_properties: many.clone(), ..Default::default() }, b"");
        assert_eq!(to_envelope(&p, 1024, Timestamp(0)).err(), Some(Poison::TooManyUserProperties));
        let p = publish(PublishProperties { user_properties: many[..128].to_vec(), ..Default::default() }, b"");
        assert!(to_envelope(&p, 1024, Timestamp(0)).is_ok());
        let p = publish(props(&[]), &[0u8; 11]);
        assert_eq!(to_envelope(&p, 10, Timestamp(0)).err(), Some(Poison::PayloadTooLarge));
        assert!(to_envelope(&p, 11, Timestamp(0)).is_ok());
    }

    #[test]
    fn identity_precedence() {
        let mut pr = props(&[("mqtt.message-id", "m-1"), ("mqtt.generated-id", "true")]);
        pr.correlation_data = Some(Bytes::from_static(b"corr"));
        let i = to_envelope(&publish(pr, b""), 1024, Timestamp(0)).expect("ok");
        assert_eq!(i.envelope.id, "m-1");
        assert_eq!(i.envelope.derived_header("x-bridge.correlation-id").and_then(HeaderValue::as_text), Some("corr"));
        assert!(i.envelope.derived_header("x-bridge.generated-id").is_none());

        let mut pr = props(&[]);
        pr.correlation_data = Some(Bytes::from_static(&[0, 159, 255]));
        let i = to_envelope(&publish(pr, b""), 1024, Timestamp(0)).expect("ok");
        assert_eq!(i.envelope.id, "mqtt-bin:AJ__");
        assert_eq!(i.envelope.derived_header("x-bridge.correlation-data").and_then(HeaderValue::as_text), Some("AJ__"));
        assert_eq!(decode_correlation_data("AJ__").as_deref(), Some(&[0u8, 159, 255][..]));

        let mut empty = props(&[]);
        empty.correlation_data = Some(Bytes::new());
        let e1 = to_envelope(&publish(empty.clone(), b"x"), 1024, Timestamp(0)).expect("ok");
        let e2 = to_envelope(&publish(empty, b"x"), 1024, Timestamp(0)).expect("ok");
        assert_ne!(e1.envelope.id, e2.envelope.id, "empty correlation data is no identity");
        assert!(!e1.envelope.id.starts_with("mqtt-bin:"));
        assert_eq!(e1.envelope.derived_header("x-bridge.generated-id"), Some(&HeaderValue::Boolean(true)));
        assert!(e1.envelope.derived_header("x-bridge.correlation-data").is_none());

        let a = to_envelope(&publish(props(&[]), b"same"), 1024, Timestamp(0)).expect("ok");
        let b = to_envelope(&publish(props(&[]), b"same"), 1024, Timestamp(0)).expect("ok");
        assert_ne!(a.envelope.id, b.envelope.id);
        assert_eq!(a.envelope.derived_header("x-bridge.generated-id"), Some(&HeaderValue::Boolean(true)));
        assert_eq!(a.envelope.text_header("mqtt.message-id"), Some(a.envelope.id.as_str()));
    }

    #[test]
    fn subject_content_type_response_topic_and_expiry() {
        let mut pr = props(&[("gobridge.subject", "order.created")]);
        pr.content_type = Some("application/json".into());
        pr.response_topic = Some("replies/1".into());
        pr.message_expiry_interval = Some(30);
        let i = to_envelope(&publish(pr, b"{}"), 1024, Timestamp(1_000)).expect("ok");
        assert_eq!(i.envelope.subject.as_deref(), Some("order.created"));
        assert!(!i.envelope.headers.contains_key("gobridge.subject"));
        assert_eq!(
            i.envelope.derived_header("x-bridge.content-type").and_then(HeaderValue::as_text),
            Some("application/json")
        );
        assert_eq!(i.envelope.text_header("mqtt.response-topic"), Some("replies/1"));
        assert_eq!(i.envelope.expires_at, Some(Timestamp(31_000)));
        let unsafe_subject = props(&[("gobridge.subject", "a\u{0}b")]);
        let i = to_envelope(&publish(unsafe_subject, b""), 1024, Timestamp(0)).expect("ok");
        assert_eq!(i.envelope.subject, None);
        assert_eq!(i.dropped_headers, 0);
    }
}
