//! AMQP 0-9-1 delivery -> envelope.
//!
//! | AMQP 0-9-1 | envelope |
//! | --- | --- |
//! | `message_id` property | identity and `amqp091.message-id`; without one a random id is minted and `x-bridge.generated-id` set |
//! | body | payload, unchanged |
//! | `gobridge.subject` header | subject (the header is consumed) |
//! | delivery routing key / exchange / redelivered flag | `amqp091.routing-key` / `amqp091.exchange` / `amqp091.redelivered` |
//! | `correlation_id`, `reply_to`, `content_type`, `content_encoding`, `type`, `app_id`, `user_id` | `amqp091.<name>` (text); content type also `x-bridge.content-type`, correlation id also `x-bridge.correlation-id` |
//! | `timestamp` (seconds) | creation time and `amqp091.timestamp` (a time) |
//! | `expiration` (ms, relative) | expiry (receive time + ms) and `amqp091.expiration` |
//! | `priority`, `delivery_mode` | `amqp091.priority`, `amqp091.delivery-mode` (numbers) |
//! | headers table | headers with types kept: strings text (bytes when not UTF-8), numbers, booleans, timestamps as times, byte arrays as bytes; names starting `amqp091.` and the `x-bridge.*` names the adapter derives itself dropped (other `x-bridge.*` names go to the route, whose header rules decide); nested tables, arrays, decimals and voids dropped and counted |

use bytes::Bytes;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, message::Delivery};

pub const PREFIX: &str = "amqp091.";
pub const ROUTING_KEY: &str = "amqp091.routing-key";
pub const EXCHANGE: &str = "amqp091.exchange";
pub const REDELIVERED: &str = "amqp091.redelivered";
pub const MESSAGE_ID: &str = "amqp091.message-id";
pub const CORRELATION_ID: &str = "amqp091.correlation-id";
pub const REPLY_TO: &str = "amqp091.reply-to";
pub const CONTENT_TYPE: &str = "amqp091.content-type";
pub const CONTENT_ENCODING: &str = "amqp091.content-encoding";
pub const TYPE: &str = "amqp091.type";
pub const APP_ID: &str = "amqp091.app-id";
pub const USER_ID: &str = "amqp091.user-id";
pub const TIMESTAMP: &str = "amqp091.timestamp";
pub const EXPIRATION: &str = "amqp091.expiration";
pub const PRIORITY: &str = "amqp091.priority";
pub const DELIVERY_MODE: &str = "amqp091.delivery-mode";
/// The delivery count quorum queues stamp on redeliveries.
pub const X_DELIVERY_COUNT: &str = "x-delivery-count";

/// A converted delivery and what could not be carried.
#[derive(Debug)]
pub struct Ingress {
    pub envelope: Envelope,
    /// Headers with no envelope form, counted.
    pub dropped_headers: u32,
    /// The broker's delivery count (quorum queues), when present.
    pub delivery_count: Option<u32>,
    /// Whether the message carried its own id.
    pub has_id: bool,
}

/// A header value as an envelope value; `None` when it has no form.
pub fn from_amqp(value: &AMQPValue) -> Option<HeaderValue> {
    Some(match value {
        AMQPValue::Boolean(b) => HeaderValue::Boolean(*b),
        AMQPValue::ShortShortInt(n) => HeaderValue::Integer(i64::from(*n)),
        AMQPValue::ShortShortUInt(n) => HeaderValue::Integer(i64::from(*n)),
        AMQPValue::ShortInt(n) => HeaderValue::Integer(i64::from(*n)),
        AMQPValue::ShortUInt(n) => HeaderValue::Integer(i64::from(*n)),
        AMQPValue::LongInt(n) => HeaderValue::Integer(i64::from(*n)),
        AMQPValue::LongUInt(n) => HeaderValue::Integer(i64::from(*n)),
        AMQPValue::LongLongInt(n) => HeaderValue::Integer(*n),
        AMQPValue::Float(f) => HeaderValue::Float(f64::from(*f)),
        AMQPValue::Double(f) => HeaderValue::Float(*f),
        AMQPValue::ShortString(s) => HeaderValue::Text(s.as_str().to_owned()),
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(text) => HeaderValue::Text(text.to_owned()),
            Err(_) => HeaderValue::Bytes(Bytes::copy_from_slice(s.as_bytes())),
        },
        AMQPValue::Timestamp(secs) => HeaderValue::Time(seconds(*secs)),
        AMQPValue::ByteArray(b) => HeaderValue::Bytes(Bytes::copy_from_slice(b.as_slice())),
        AMQPValue::DecimalValue(_) | AMQPValue::FieldArray(_) | AMQPValue::FieldTable(_) | AMQPValue::Void => {
            return None;
        }
    })
}

/// An AMQP timestamp (seconds, any u64 a publisher chose) as a time:
/// saturating, so a time past the year 292 million is the latest one, not
/// an overflow (found by the fuzz target `amqp091_properties`).
fn seconds(secs: u64) -> Timestamp {
    Timestamp(i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000))
}

fn text_of(value: &AMQPValue) -> Option<String> {
    match from_amqp(value) {
        Some(HeaderValue::Text(s)) => Some(s),
        _ => None,
    }
}

/// Converts a delivery's parts. `now` is the receive time.
pub fn to_envelope(
    exchange: &str,
    routing_key: &str,
    redelivered: bool,
    properties: &BasicProperties,
    data: &[u8],
    now: Timestamp,
) -> Ingress {
    let mut envelope = Envelope::new(String::new(), Bytes::copy_from_slice(data));
    envelope.created_at = now;
    let mut dropped_headers = 0;
    let mut delivery_count = None;
    let empty = FieldTable::default();
    for (name, value) in properties.headers().as_ref().unwrap_or(&empty).inner() {
        let name = name.as_str();
        if name == names::SUBJECT_CARRIER {
            envelope.subject = text_of(value).filter(|s| !s.is_empty());
            continue;
        }
        if name == X_DELIVERY_COUNT
            && let Some(HeaderValue::Integer(n)) = from_amqp(value)
        {
            delivery_count = u32::try_from(n).ok();
        }
        if name.starts_with(PREFIX) {
            continue;
        }
        match from_amqp(value) {
            Some(v) => {
                envelope.headers.insert(name.to_owned(), v);
            }
            None => dropped_headers += 1,
        }
    }

    envelope.set_header(ROUTING_KEY, routing_key);
    envelope.set_header(EXCHANGE, exchange);
    envelope.set_header(REDELIVERED, HeaderValue::Boolean(redelivered));

    let p = properties;
    let id = p.message_id().as_ref().map(|s| s.as_str().to_owned()).filter(|s| !s.is_empty());
    let has_id = id.is_some();
    match id {
        Some(id) => {
            envelope.set_header(MESSAGE_ID, id.clone());
            envelope.id = id;
        }
        None => {
            envelope.id = uuid::Uuid::new_v4().to_string();
            envelope.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
        }
    }
    let texts = [
        (CORRELATION_ID, p.correlation_id()),
        (REPLY_TO, p.reply_to()),
        (CONTENT_TYPE, p.content_type()),
        (CONTENT_ENCODING, p.content_encoding()),
        (TYPE, p.kind()),
        (APP_ID, p.app_id()),
        (USER_ID, p.user_id()),
        (EXPIRATION, p.expiration()),
    ];
    for (name, value) in texts {
        if let Some(v) = value {
            envelope.set_header(name, v.as_str());
        }
    }
    if let Some(ct) = p.content_type() {
        envelope.derive_header(names::CONTENT_TYPE, ct.as_str());
    }
    if let Some(c) = p.correlation_id().as_ref().filter(|c| !c.as_str().is_empty()) {
        envelope.derive_header(names::CORRELATION_ID, c.as_str());
    }
    if let Some(secs) = p.timestamp() {
        envelope.created_at = seconds(*secs);
        envelope.set_header(TIMESTAMP, HeaderValue::Time(envelope.created_at));
    }
    if let Some(ms) = p.expiration().as_ref().and_then(|e| e.as_str().parse::<u64>().ok()) {
        envelope.expires_at = Some(now.plus(std::time::Duration::from_millis(ms)));
    }
    if let Some(n) = p.priority() {
        envelope.set_header(PRIORITY, HeaderValue::Integer(i64::from(*n)));
    }
    if let Some(n) = p.delivery_mode() {
        envelope.set_header(DELIVERY_MODE, HeaderValue::Integer(i64::from(*n)));
    }
    Ingress { envelope, dropped_headers, delivery_count, has_id }
}

/// Converts a lapin delivery.
pub fn from_delivery(d: &Delivery, now: Timestamp) -> Ingress {
    to_envelope(d.exchange.as_str(), d.routing_key.as_str(), d.redelivered, &d.properties, &d.data, now)
}

/// The first field of a delivery whose bytes on the wire were not UTF-8:
/// the exchange, the routing key, a short-string property, or a header's
/// name or short-string value at any depth. Such a message cannot cross
/// as it was sent (the vendored parser decoded it lossily so the frame
/// could be read at all), so the receiver refuses it as `undecodable`.
pub fn undecodable_field(exchange: &ShortString, routing_key: &ShortString, p: &BasicProperties) -> Option<String> {
    if exchange.is_undecodable() {
        return Some("exchange".into());
    }
    if routing_key.is_undecodable() {
        return Some("routing key".into());
    }
    let texts = [
        ("content_type", p.content_type()),
        ("content_encoding", p.content_encoding()),
        ("message_id", p.message_id()),
        ("correlation_id", p.correlation_id()),
        ("reply_to", p.reply_to()),
        ("expiration", p.expiration()),
        ("type", p.kind()),
        ("user_id", p.user_id()),
        ("app_id", p.app_id()),
        ("cluster_id", p.cluster_id()),
    ];
    if let Some((name, _)) = texts.iter().find(|(_, v)| v.as_ref().is_some_and(ShortString::is_undecodable)) {
        return Some(format!("property {name}"));
    }
    let (is_name, path) = p.headers().as_ref().and_then(undecodable_in_table)?;
    let path = format!("headers.{path}");
    Some(if is_name { format!("header name {path:?}") } else { format!("header {path:?}") })
}

/// Where in `table` a short string was not UTF-8: whether it is a name,
/// and its path below `table`. The path is built only for what is found,
/// so a delivery whose headers are all fine allocates nothing here.
fn undecodable_in_table(table: &FieldTable) -> Option<(bool, String)> {
    table.inner().iter().find_map(|(name, value)| {
        if name.is_undecodable() {
            return Some((true, name.to_string()));
        }
        undecodable_in_value(value).map(|(is_name, below)| (is_name, format!("{name}{below}")))
    })
}

fn undecodable_in_value(value: &AMQPValue) -> Option<(bool, String)> {
    match value {
        AMQPValue::ShortString(s) if s.is_undecodable() => Some((false, String::new())),
        AMQPValue::FieldTable(t) => undecodable_in_table(t).map(|(is_name, below)| (is_name, format!(".{below}"))),
        AMQPValue::FieldArray(a) => a
            .as_slice()
            .iter()
            .enumerate()
            .find_map(|(i, v)| undecodable_in_value(v).map(|(is_name, below)| (is_name, format!("[{i}]{below}")))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use lapin::types::{ByteArray, FieldArray, LongString};

    use super::*;

    #[test]
    fn a_timestamp_far_in_the_future_saturates() {
        let props = BasicProperties::default().with_timestamp(u64::MAX / 2);
        let i = to_envelope("", "q", false, &props, b"", Timestamp(0));
        assert_eq!(i.envelope.created_at, Timestamp(i64::MAX));
        assert_eq!(from_amqp(&AMQPValue::Timestamp(u64::MAX)), Some(HeaderValue::Time(Timestamp(i64::MAX))));
    }

    #[test]
    fn a_field_whose_bytes_were_not_utf8_is_found_at_any_depth() {
        let bad = || ShortString::from_wire(vec![b'a', 0xff]);
        let ok = ShortString::from("fine");
        let plain = BasicProperties::default().with_message_id("m-1".into());
        assert_eq!(undecodable_field(&ok, &ok, &plain), None);
        assert_eq!(undecodable_field(&ok, &bad(), &plain).as_deref(), Some("routing key"));
        let props = BasicProperties::default().with_message_id(bad());
        assert_eq!(undecodable_field(&ok, &ok, &props).as_deref(), Some("property message_id"));
        let mut headers = FieldTable::default();
        headers.insert(bad(), AMQPValue::Boolean(true));
        let found = undecodable_field(&ok, &ok, &BasicProperties::default().with_headers(headers));
        assert!(found.is_some_and(|f| f.starts_with("header name")));
        let mut inner = FieldTable::default();
        inner.insert("k".into(), AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::ShortString(bad())])));
        let mut headers = FieldTable::default();
        headers.insert("outer".into(), AMQPValue::FieldTable(inner));
        let found = undecodable_field(&ok, &ok, &BasicProperties::default().with_headers(headers));
        assert_eq!(found.as_deref(), Some("header \"headers.outer.k[0]\""));
    }

    #[test]
    fn properties_headers_and_subject_map_with_types() {
        let mut headers = FieldTable::default();
        headers.insert("gobridge.subject".into(), AMQPValue::LongString("order.created".into()));
        headers.insert("n".into(), AMQPValue::LongInt(-4));
        headers.insert("flag".into(), AMQPValue::Boolean(true));
        headers.insert("at".into(), AMQPValue::Timestamp(7));
        headers.insert("raw".into(), AMQPValue::ByteArray(ByteArray::from(vec![1u8, 2])));
        headers.insert("bin".into(), AMQPValue::LongString(LongString::from(vec![0xffu8, 0xfe])));
        headers.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::default()));
        headers.insert("x-bridge.route-id".into(), AMQPValue::LongString("spoof".into()));
        headers.insert("amqp091.routing-key".into(), AMQPValue::LongString("spoof".into()));
        let props = BasicProperties::default()
            .with_message_id("m-1".into())
            .with_correlation_id("c-1".into())
            .with_content_type("application/json".into())
            .with_timestamp(1_700_000_000)
            .with_expiration("5000".into())
            .with_priority(3)
            .with_headers(headers);
        let i = to_envelope("ex", "orders.eu", true, &props, b"body", Timestamp(1_000));
        let e = &i.envelope;
        assert_eq!(e.id, "m-1");
        assert!(i.has_id);
        assert_eq!(e.subject.as_deref(), Some("order.created"));
        assert!(!e.headers.contains_key("gobridge.subject"));
        assert_eq!(e.text_header(ROUTING_KEY), Some("orders.eu"));
        assert_eq!(e.text_header(EXCHANGE), Some("ex"));
        assert_eq!(e.headers.get(REDELIVERED), Some(&HeaderValue::Boolean(true)));
        assert_eq!(e.text_header(CORRELATION_ID), Some("c-1"));
        assert_eq!(e.derived_header(names::CORRELATION_ID).and_then(HeaderValue::as_text), Some("c-1"));
        assert_eq!(e.derived_header(names::CONTENT_TYPE).and_then(HeaderValue::as_text), Some("application/json"));
        assert_eq!(e.created_at, Timestamp(1_700_000_000_000));
        assert_eq!(e.expires_at, Some(Timestamp(6_000)));
        assert_eq!(e.headers.get(PRIORITY), Some(&HeaderValue::Integer(3)));
        assert_eq!(e.headers.get("n"), Some(&HeaderValue::Integer(-4)));
        assert_eq!(e.headers.get("flag"), Some(&HeaderValue::Boolean(true)));
        assert_eq!(e.headers.get("at"), Some(&HeaderValue::Time(Timestamp(7_000))));
        assert_eq!(e.headers.get("raw"), Some(&HeaderValue::Bytes(Bytes::from_static(&[1, 2]))));
        assert_eq!(e.headers.get("bin"), Some(&HeaderValue::Bytes(Bytes::from_static(&[0xff, 0xfe]))));
        // Handed to the route, whose header rules decide.
        assert_eq!(e.text_header("x-bridge.route-id"), Some("spoof"));
        assert_eq!(i.dropped_headers, 1, "x-death (an array) has no envelope form");
    }

    #[test]
    fn a_message_without_id_gets_a_generated_one() {
        let a = to_envelope("", "q", false, &BasicProperties::default(), b"", Timestamp(1));
        let b = to_envelope("", "q", false, &BasicProperties::default(), b"", Timestamp(1));
        assert_ne!(a.envelope.id, b.envelope.id);
        assert!(!a.has_id);
        assert_eq!(a.envelope.derived_header(names::GENERATED_ID), Some(&HeaderValue::Boolean(true)));
        assert_eq!(a.envelope.created_at, Timestamp(1));
    }
}
