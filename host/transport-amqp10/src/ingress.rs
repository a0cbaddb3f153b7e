//! AMQP 1.0 message -> envelope: the rules of seed 000 ("AMQP 1.0 into the
//! envelope").

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::types::messaging::{Body, Message, MessageId};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};

/// Header-name prefix of the AMQP 1.0 properties ferry maps.
pub const PREFIX: &str = "amqp10.";
pub const MESSAGE_ID: &str = "amqp10.message-id";
pub const SUBJECT: &str = "amqp10.subject";
pub const CORRELATION_ID: &str = "amqp10.correlation-id";
pub const CONTENT_TYPE: &str = "amqp10.content-type";
pub const CONTENT_ENCODING: &str = "amqp10.content-encoding";
pub const TO: &str = "amqp10.to";
pub const REPLY_TO: &str = "amqp10.reply-to";
pub const GROUP_ID: &str = "amqp10.group-id";
pub const GROUP_SEQUENCE: &str = "amqp10.group-sequence";
pub const REPLY_TO_GROUP_ID: &str = "amqp10.reply-to-group-id";
pub const CREATION_TIME: &str = "amqp10.creation-time";
pub const ABSOLUTE_EXPIRY_TIME: &str = "amqp10.absolute-expiry-time";
pub const DELIVERY_COUNT: &str = "amqp10.delivery-count";
/// Service Bus message annotations (any broker that sends them).
pub const ENQUEUED_TIME: &str = "amqp10.enqueued-time";
pub const SEQUENCE_NUMBER: &str = "amqp10.sequence-number";
pub const PARTITION_KEY: &str = "amqp10.partition-key";
pub const SCHEDULED_ENQUEUE_TIME: &str = "amqp10.scheduled-enqueue-time";
pub const LOCKED_UNTIL: &str = "amqp10.locked-until";

/// The message annotations read into headers: the annotation, its header.
pub const ANNOTATIONS: [(&str, &str); 5] = [
    ("x-opt-enqueued-time", ENQUEUED_TIME),
    ("x-opt-sequence-number", SEQUENCE_NUMBER),
    ("x-opt-partition-key", PARTITION_KEY),
    ("x-opt-scheduled-enqueue-time", SCHEDULED_ENQUEUE_TIME),
    ("x-opt-locked-until", LOCKED_UNTIL),
];

/// Why a message cannot become an envelope. It is rejected at the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poison {
    /// An amqp-sequence body, or an amqp-value that is not text or binary.
    UnsupportedBody(&'static str),
    /// Payload over the receiver's `max_message_bytes`.
    TooLarge(usize),
}

impl Poison {
    /// The metrics label.
    pub fn label(&self) -> &'static str {
        match self {
            Poison::UnsupportedBody(_) => "unsupported_body",
            Poison::TooLarge(_) => "too_large",
        }
    }

    /// The description sent with the rejection.
    pub fn describe(&self) -> String {
        match self {
            Poison::UnsupportedBody(kind) => {
                format!("ferry accepts data sections or a text/binary amqp-value body, not {kind}")
            }
            Poison::TooLarge(n) => format!("message body of {n} bytes is over the receiver's max_message_bytes"),
        }
    }
}

/// A converted message and what could not be carried.
#[derive(Debug)]
pub struct Ingress {
    pub envelope: Envelope,
    /// The broker's delivery-count (deliveries before this one).
    pub delivery_count: u32,
    /// Application properties that have no header form (described values,
    /// decimals); counted, not fatal.
    pub dropped_headers: u32,
}

/// A message id as text: a UUID in its usual form, a number in decimal,
/// binary in hex.
pub fn id_text(id: &MessageId) -> String {
    match id {
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => uuid::Uuid::from_bytes(*u.as_ref()).to_string(),
        MessageId::Binary(b) => hex::encode(b.as_slice()),
        MessageId::String(s) => s.clone(),
    }
}

/// A message id as a typed header value, for ids carried as they are
/// (correlation-id): text and UUIDs become text, numbers integers, binary
/// stays bytes.
fn id_value(id: &MessageId) -> HeaderValue {
    match id {
        MessageId::Ulong(n) => {
            i64::try_from(*n).map_or_else(|_| HeaderValue::Text(n.to_string()), HeaderValue::Integer)
        }
        MessageId::Binary(b) => HeaderValue::Bytes(Bytes::copy_from_slice(b.as_slice())),
        other => HeaderValue::Text(id_text(other)),
    }
}

/// An application-property value as a header value; `None` when it has no
/// header form.
pub(crate) fn simple_value(v: &SimpleValue) -> Option<HeaderValue> {
    Some(match v {
        SimpleValue::Bool(b) => HeaderValue::Boolean(*b),
        SimpleValue::Ubyte(n) => HeaderValue::Integer(i64::from(*n)),
        SimpleValue::Ushort(n) => HeaderValue::Integer(i64::from(*n)),
        SimpleValue::Uint(n) => HeaderValue::Integer(i64::from(*n)),
        SimpleValue::Ulong(n) => {
            i64::try_from(*n).map_or_else(|_| HeaderValue::Text(n.to_string()), HeaderValue::Integer)
        }
        SimpleValue::Byte(n) => HeaderValue::Integer(i64::from(*n)),
        SimpleValue::Short(n) => HeaderValue::Integer(i64::from(*n)),
        SimpleValue::Int(n) => HeaderValue::Integer(i64::from(*n)),
        SimpleValue::Long(n) => HeaderValue::Integer(*n),
        SimpleValue::Float(f) => HeaderValue::Float(f64::from(f.0)),
        SimpleValue::Double(f) => HeaderValue::Float(f.0),
        SimpleValue::Char(c) => HeaderValue::Text(c.to_string()),
        SimpleValue::Timestamp(t) => HeaderValue::Time(Timestamp(t.milliseconds())),
        SimpleValue::Uuid(u) => HeaderValue::Text(uuid::Uuid::from_bytes(*u.as_ref()).to_string()),
        SimpleValue::Binary(b) => HeaderValue::Text(hex::encode(b.as_slice())),
        SimpleValue::String(s) => HeaderValue::Text(s.clone()),
        SimpleValue::Symbol(s) => HeaderValue::Text(s.0.clone()),
        SimpleValue::Null
        | SimpleValue::Decimal32(_)
        | SimpleValue::Decimal64(_)
        | SimpleValue::Decimal128(_)
        | SimpleValue::Described(_) => return None,
    })
}

/// The payload: data sections joined, or a text/binary amqp-value.
fn payload(body: &Body<Value>, max_bytes: usize) -> Result<Bytes, Poison> {
    let bytes = match body {
        Body::Data(sections) => {
            let total: usize = sections.iter().map(|d| d.0.len()).sum();
            if total > max_bytes {
                return Err(Poison::TooLarge(total));
            }
            let mut buf = BytesMut::with_capacity(total);
            for d in sections.iter() {
                buf.extend_from_slice(d.0.as_slice());
            }
            buf.freeze()
        }
        Body::Value(v) => match &v.0 {
            Value::String(s) => Bytes::copy_from_slice(s.as_bytes()),
            Value::Binary(b) => Bytes::copy_from_slice(b.as_slice()),
            Value::Null => Bytes::new(),
            _ => return Err(Poison::UnsupportedBody("an amqp-value that is not text or binary")),
        },
        Body::Sequence(_) => return Err(Poison::UnsupportedBody("amqp-sequence sections")),
        Body::Empty => Bytes::new(),
    };
    if bytes.len() > max_bytes {
        return Err(Poison::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// Converts one received message. `now` is the receive time.
pub fn to_envelope(message: &Message<Body<Value>>, max_bytes: usize, now: Timestamp) -> Result<Ingress, Poison> {
    let mut envelope = Envelope::new(String::new(), payload(&message.body, max_bytes)?);
    envelope.created_at = now;
    let mut dropped_headers = 0;

    if let Some(app) = &message.application_properties {
        for (name, value) in app.0.iter() {
            if name.starts_with(PREFIX) {
                continue;
            }
            match simple_value(value) {
                Some(v) => {
                    envelope.headers.insert(name.clone(), v);
                }
                None => dropped_headers += 1,
            }
        }
    }

    if let Some(annotations) = &message.message_annotations {
        for (key, value) in annotations.0.iter() {
            let fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(key) = key else { continue };
            let Some((_, header)) = ANNOTATIONS.iter().find(|(name, _)| *name == key.0) else { continue };
            let value = match value {
                Value::Timestamp(t) => Some(HeaderValue::Time(Timestamp(t.milliseconds()))),
                Value::Long(n) => Some(HeaderValue::Integer(*n)),
                Value::String(s) => Some(HeaderValue::Text(s.clone())),
                _ => None,
            };
            match value {
                Some(value) => envelope.set_header(*header, value),
                None => dropped_headers += 1,
            }
        }
    }

    let delivery_count = message.header.as_ref().map_or(0, |h| h.delivery_count);
    envelope.set_header(DELIVERY_COUNT, HeaderValue::Integer(i64::from(delivery_count)));
    let ttl = message.header.as_ref().and_then(|h| h.ttl);

    let props = message.properties.as_ref();
    match props.and_then(|p| p.message_id.as_ref()) {
        Some(id) => {
            envelope.id = id_text(id);
            envelope.set_header(MESSAGE_ID, envelope.id.clone());
        }
        None => {
            envelope.id = uuid::Uuid::new_v4().to_string();
            envelope.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
        }
    }
    if let Some(p) = props {
        if let Some(subject) = &p.subject {
            envelope.subject = Some(subject.clone());
            envelope.set_header(SUBJECT, subject.clone());
        }
        if let Some(id) = &p.correlation_id {
            let value = id_value(id);
            if let HeaderValue::Text(text) = &value {
                envelope.derive_header(names::CORRELATION_ID, text.clone());
            }
            envelope.set_header(CORRELATION_ID, value);
        }
        if let Some(ct) = &p.content_type {
            envelope.set_header(CONTENT_TYPE, ct.0.clone());
            envelope.derive_header(names::CONTENT_TYPE, ct.0.clone());
        }
        if let Some(ce) = &p.content_encoding {
            envelope.set_header(CONTENT_ENCODING, ce.0.clone());
        }
        if let Some(to) = &p.to {
            envelope.set_header(TO, to.clone());
        }
        if let Some(reply_to) = &p.reply_to {
            envelope.set_header(REPLY_TO, reply_to.clone());
        }
        if let Some(g) = &p.group_id {
            envelope.set_header(GROUP_ID, g.clone());
        }
        if let Some(seq) = p.group_sequence {
            envelope.set_header(GROUP_SEQUENCE, HeaderValue::Integer(i64::from(seq)));
        }
        if let Some(g) = &p.reply_to_group_id {
            envelope.set_header(REPLY_TO_GROUP_ID, g.clone());
        }
        if let Some(t) = &p.creation_time {
            envelope.created_at = Timestamp(t.milliseconds());
            envelope.set_header(CREATION_TIME, HeaderValue::Time(envelope.created_at));
        }
        if let Some(t) = &p.absolute_expiry_time {
            envelope.expires_at = Some(Timestamp(t.milliseconds()));
            envelope.set_header(ABSOLUTE_EXPIRY_TIME, HeaderValue::Time(Timestamp(t.milliseconds())));
        }
    }
    if envelope.expires_at.is_none()
        && let Some(ttl) = ttl
    {
        envelope.expires_at = Some(now.plus(std::time::Duration::from_millis(u64::from(ttl))));
    }
    Ok(Ingress { envelope, delivery_count, dropped_headers })
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Data, Header, Properties};
    use fe2o3_amqp::types::primitives::{Binary, OrderedMap, Symbol, Timestamp as AmqpTime, Uuid};

    use super::*;

    fn message(props: Option<Properties>, app: &[(&str, SimpleValue)], body: Body<Value>) -> Message<Body<Value>> {
        let mut map = OrderedMap::new();
        for (k, v) in app {
            map.insert((*k).to_owned(), v.clone());
        }
        Message {
            header: Some(Header { delivery_count: 2, ttl: Some(60_000), ..Default::default() }),
            delivery_annotations: None,
            message_annotations: None,
            properties: props,
            application_properties: Some(ApplicationProperties(map)),
            body,
            footer: None,
        }
    }

    pub(crate) fn full_properties() -> Properties {
        Properties {
            message_id: Some(MessageId::Ulong(42)),
            user_id: None,
            to: Some("dest".into()),
            subject: Some("order.created".into()),
            reply_to: Some("replies".into()),
            correlation_id: Some(MessageId::Binary(Binary::from(vec![0u8, 1, 0xff]))),
            content_type: Some(Symbol::from("application/json")),
            content_encoding: Some(Symbol::from("gzip")),
            absolute_expiry_time: Some(AmqpTime::from_milliseconds(2_000_000)),
            creation_time: Some(AmqpTime::from_milliseconds(1_000_000)),
            group_id: Some("g1".into()),
            group_sequence: Some(7),
            reply_to_group_id: Some("rg".into()),
        }
    }

    #[test]
    fn properties_map_to_identity_subject_times_and_headers() {
        let body = Body::Data(vec![Data(Binary::from(b"he".to_vec())), Data(Binary::from(b"llo".to_vec()))].into());
        let m = message(Some(full_properties()), &[], body);
        let i = to_envelope(&m, 1024, Timestamp(5)).expect("converts");
        let e = &i.envelope;
        assert_eq!(e.payload().as_ref(), b"hello");
        assert_eq!(e.id, "42");
        assert_eq!(e.text_header(MESSAGE_ID), Some("42"));
        assert_eq!(e.subject.as_deref(), Some("order.created"));
        assert_eq!(e.text_header(SUBJECT), Some("order.created"));
        assert_eq!(e.headers.get(CORRELATION_ID), Some(&HeaderValue::Bytes(Bytes::from_static(&[0, 1, 0xff]))));
        assert!(e.derived_header(names::CORRELATION_ID).is_none(), "binary correlation ids are not bridge ids");
        assert_eq!(e.text_header(CONTENT_TYPE), Some("application/json"));
        assert_eq!(e.derived_header(names::CONTENT_TYPE).and_then(HeaderValue::as_text), Some("application/json"));
        assert_eq!(e.text_header(CONTENT_ENCODING), Some("gzip"));
        assert_eq!(e.text_header(TO), Some("dest"));
        assert_eq!(e.text_header(REPLY_TO), Some("replies"));
        assert_eq!(e.text_header(GROUP_ID), Some("g1"));
        assert_eq!(e.headers.get(GROUP_SEQUENCE), Some(&HeaderValue::Integer(7)));
        assert_eq!(e.text_header(REPLY_TO_GROUP_ID), Some("rg"));
        assert_eq!(e.created_at, Timestamp(1_000_000));
        assert_eq!(e.expires_at, Some(Timestamp(2_000_000)), "absolute expiry wins over the header ttl");
        assert_eq!(e.headers.get(DELIVERY_COUNT), Some(&HeaderValue::Integer(2)));
        assert_eq!(i.delivery_count, 2);
    }

    #[test]
    fn ids_become_text_and_a_missing_id_is_generated() {
        let uuid = uuid::Uuid::new_v4();
        assert_eq!(id_text(&MessageId::Uuid(Uuid::from(*uuid.as_bytes()))), uuid.to_string());
        assert_eq!(id_text(&MessageId::Binary(Binary::from(vec![0xab, 0x01]))), "ab01");
        assert_eq!(id_text(&MessageId::String("x".into())), "x");
        let m = message(None, &[], Body::Value(AmqpValue(Value::String("t".into()))));
        let a = to_envelope(&m, 1024, Timestamp(5)).expect("converts").envelope;
        let b = to_envelope(&m, 1024, Timestamp(5)).expect("converts").envelope;
        assert_ne!(a.id, b.id);
        assert_eq!(a.derived_header(names::GENERATED_ID), Some(&HeaderValue::Boolean(true)));
        assert_eq!(a.payload().as_ref(), b"t");
        assert_eq!(a.expires_at, Some(Timestamp(60_005)), "header ttl sets expiry without absolute-expiry-time");
    }

    #[test]
    fn application_properties_keep_types_and_lose_reserved_names() {
        let uuid = uuid::Uuid::new_v4();
        let app = [
            ("n", SimpleValue::Long(-3)),
            ("flag", SimpleValue::Bool(true)),
            ("bin", SimpleValue::Binary(Binary::from(vec![0xde, 0xad]))),
            ("id", SimpleValue::Uuid(Uuid::from(*uuid.as_bytes()))),
            ("when", SimpleValue::Timestamp(AmqpTime::from_milliseconds(9))),
            ("x-bridge.tenant-id", SimpleValue::String("evil".into())),
            ("amqp10.subject", SimpleValue::String("spoof".into())),
            ("nothing", SimpleValue::Null),
        ];
        let m = message(None, &app, Body::Value(AmqpValue(Value::Binary(Binary::from(vec![1u8])))));
        let i = to_envelope(&m, 1024, Timestamp(5)).expect("converts");
        let e = &i.envelope;
        assert_eq!(e.headers.get("n"), Some(&HeaderValue::Integer(-3)));
        assert_eq!(e.headers.get("flag"), Some(&HeaderValue::Boolean(true)));
        assert_eq!(e.text_header("bin"), Some("dead"));
        assert_eq!(e.text_header("id"), Some(uuid.to_string().as_str()));
        assert_eq!(e.headers.get("when"), Some(&HeaderValue::Time(Timestamp(9))));
        // Handed to the route, whose header rules decide.
        assert_eq!(e.text_header("x-bridge.tenant-id"), Some("evil"));
        assert!(!e.headers.contains_key("amqp10.subject"));
        assert_eq!(i.dropped_headers, 1);
    }

    #[test]
    fn other_bodies_and_oversized_ones_are_poison() {
        let m = message(None, &[], Body::Value(AmqpValue(Value::Long(1))));
        assert!(matches!(to_envelope(&m, 1024, Timestamp(0)), Err(Poison::UnsupportedBody(_))));
        let m = message(None, &[], Body::Data(vec![Data(Binary::from(vec![0u8; 10]))].into()));
        assert_eq!(to_envelope(&m, 9, Timestamp(0)).expect_err("too large"), Poison::TooLarge(10));
    }

    #[test]
    fn service_bus_annotations_become_headers() {
        use fe2o3_amqp::types::messaging::MessageAnnotations;
        let mut m = message(None, &[], Body::Value(AmqpValue(Value::String("t".into()))));
        m.message_annotations = Some(
            MessageAnnotations::builder()
                .insert(Symbol::from("x-opt-enqueued-time"), AmqpTime::from_milliseconds(1_000))
                .insert(Symbol::from("x-opt-sequence-number"), Value::Long(77))
                .insert(Symbol::from("x-opt-partition-key"), Value::String("p1".into()))
                .insert(Symbol::from("x-opt-scheduled-enqueue-time"), AmqpTime::from_milliseconds(2_000))
                .insert(Symbol::from("x-opt-locked-until"), AmqpTime::from_milliseconds(3_000))
                .insert(Symbol::from("x-opt-other"), Value::Long(1))
                .insert(Symbol::from("x-opt-sequence-number-bad"), Value::Long(1))
                .build(),
        );
        let e = to_envelope(&m, 1024, Timestamp(5)).expect("converts").envelope;
        assert_eq!(e.headers.get(ENQUEUED_TIME), Some(&HeaderValue::Time(Timestamp(1_000))));
        assert_eq!(e.headers.get(SEQUENCE_NUMBER), Some(&HeaderValue::Integer(77)));
        assert_eq!(e.text_header(PARTITION_KEY), Some("p1"));
        assert_eq!(e.headers.get(SCHEDULED_ENQUEUE_TIME), Some(&HeaderValue::Time(Timestamp(2_000))));
        assert_eq!(e.headers.get(LOCKED_UNTIL), Some(&HeaderValue::Time(Timestamp(3_000))));
        assert_eq!(e.headers.keys().filter(|k| k.starts_with("x-opt")).count(), 0, "other annotations stay out");
    }
}
