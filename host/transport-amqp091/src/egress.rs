//! Envelope -> AMQP 0-9-1 publish.
//!
//! | envelope | AMQP 0-9-1 |
//! | --- | --- |
//! | binding address (a template: `orders.{region}`) | routing key; the sender's `routing_key` only when the address is empty |
//! | `exchange_header` header, with `exchange_from_header` | exchange; else the sender's `exchange` |
//! | `amqp091.message-id` header, else identity | `message_id` |
//! | subject | header `gobridge.subject` |
//! | `amqp091.correlation-id`, else `x-bridge.correlation-id` | `correlation_id` |
//! | `amqp091.content-type`, else `x-bridge.content-type` | `content_type` |
//! | `amqp091.reply-to`, `.content-encoding`, `.type`, `.app-id` | the property of that name |
//! | `amqp091.priority` (0-255) | `priority` |
//! | creation time | `timestamp` (seconds) |
//! | expiry | `expiration` (ms left, at least 1) |
//! | sender `persistent` | `delivery_mode` 2 (else 1) |
//! | other headers | headers table, types kept (times become AMQP timestamps, which hold seconds); `amqp091.*` and private headers are not sent; names over 255 bytes are dropped and counted |

use crate::config::Amqp091SenderConfig;
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, ByteArray, FieldTable, LongString, ShortString};

use crate::connection::short;
use crate::ingress::{
    APP_ID, CONTENT_ENCODING, CONTENT_TYPE, CORRELATION_ID, MESSAGE_ID, PREFIX, PRIORITY, REPLY_TO, TYPE,
};

/// A publish ready for the channel.
#[derive(Debug, Clone)]
pub struct Publish {
    pub exchange: ShortString,
    pub routing_key: ShortString,
    pub properties: BasicProperties,
    /// Headers that could not be sent (name too long), counted.
    pub dropped_headers: u32,
}

/// An envelope value as an AMQP field value.
pub(crate) fn to_amqp(value: &HeaderValue) -> AMQPValue {
    match value {
        HeaderValue::Text(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        HeaderValue::Integer(n) => AMQPValue::LongLongInt(*n),
        HeaderValue::Float(f) => AMQPValue::Double(*f),
        HeaderValue::Boolean(b) => AMQPValue::Boolean(*b),
        HeaderValue::Time(t) => AMQPValue::Timestamp(u64::try_from(t.as_millis().div_euclid(1000)).unwrap_or(0)),
        HeaderValue::Bytes(b) => AMQPValue::ByteArray(ByteArray::from(b.to_vec())),
    }
}

/// The publish a sender with `config` makes of `msg`: the address template
/// expanded, then [`to_publish`].
pub fn prepare(config: &Amqp091SenderConfig, msg: &OutboundMessage, now: Timestamp) -> Result<Publish, TransportError> {
    let address = ferry_core::address::expand(&msg.address, &msg.envelope)?;
    to_publish(&msg.envelope, &address, config, now)
}

/// Builds the publish for `envelope` sent to `address` (already a plain
/// string; templates are expanded by the caller).
pub fn to_publish(
    envelope: &Envelope,
    address: &str,
    config: &Amqp091SenderConfig,
    now: Timestamp,
) -> Result<Publish, TransportError> {
    let routing_key = if address.is_empty() { config.routing_key.as_str() } else { address };
    let exchange = if config.exchange_from_header {
        match envelope.headers.get(&config.exchange_header) {
            Some(HeaderValue::Text(x)) => x.as_str(),
            Some(other) => {
                return Err(TransportError::permanent(format!(
                    "header {:?} names the exchange but is {}, not text",
                    config.exchange_header,
                    other.kind()
                )));
            }
            None => config.exchange.as_str(),
        }
    } else {
        config.exchange.as_str()
    };

    let mut p = BasicProperties::default()
        .with_delivery_mode(if config.persistent { 2 } else { 1 })
        .with_timestamp(u64::try_from(envelope.created_at.as_millis().div_euclid(1000)).unwrap_or(0));
    let id = envelope.text_header(MESSAGE_ID).unwrap_or(&envelope.id);
    p = p.with_message_id(short("message id", id)?);
    let text = |primary: &str, fallback: Option<&str>| {
        envelope.text_header(primary).or_else(|| fallback.and_then(|f| envelope.text_header(f)))
    };
    if let Some(c) = text(CORRELATION_ID, Some(names::CORRELATION_ID)) {
        p = p.with_correlation_id(short("correlation id", c)?);
    }
    if let Some(c) = text(CONTENT_TYPE, Some(names::CONTENT_TYPE)) {
        p = p.with_content_type(short("content type", c)?);
    }
    if let Some(v) = text(REPLY_TO, None) {
        p = p.with_reply_to(short("reply-to", v)?);
    }
    if let Some(v) = text(CONTENT_ENCODING, None) {
        p = p.with_content_encoding(short("content encoding", v)?);
    }
    if let Some(v) = text(TYPE, None) {
        p = p.with_type(short("type", v)?);
    }
    if let Some(v) = text(APP_ID, None) {
        p = p.with_app_id(short("app id", v)?);
    }
    if let Some(HeaderValue::Integer(n)) = envelope.headers.get(PRIORITY) {
        let n = u8::try_from(*n)
            .map_err(|_| TransportError::permanent(format!("{PRIORITY} {n} is not a priority (0..=255)")))?;
        p = p.with_priority(n);
    }
    if let Some(left) = envelope.remaining_ttl(now) {
        p = p.with_expiration(short("expiration", &left.as_millis().max(1).to_string())?);
    }

    let mut headers = FieldTable::default();
    let mut dropped_headers = 0;
    if let Some(subject) = &envelope.subject {
        headers.insert(names::SUBJECT_CARRIER.into(), AMQPValue::LongString(LongString::from(subject.as_str())));
    }
    for (name, value) in &envelope.headers {
        if name.starts_with(PREFIX) || names::is_private(name) || name == names::SUBJECT_CARRIER {
            continue;
        }
        match ShortString::try_new(name.as_str()) {
            Ok(key) => {
                headers.insert(key, to_amqp(value));
            }
            Err(_) => dropped_headers += 1,
        }
    }
    if !headers.inner().is_empty() {
        p = p.with_headers(headers);
    }
    Ok(Publish {
        exchange: short("exchange", exchange)?,
        routing_key: short("routing key", routing_key)?,
        properties: p,
        dropped_headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress;

    fn config() -> Amqp091SenderConfig {
        Amqp091SenderConfig {
            url: "amqp://127.0.0.1".into(),
            tls: None,
            exchange: "default-x".into(),
            exchange_type: None,
            exchange_passive: false,
            routing_key: "fallback".into(),
            exchange_from_header: false,
            exchange_header: "amqp091.exchange".into(),
            mandatory: true,
            persistent: true,
            send_timeout_ms: 1000,
            reconnect_initial_ms: 100,
            reconnect_max_ms: 1000,
        }
    }

    #[test]
    fn a_message_survives_egress_then_ingress() {
        let mut e = Envelope::new("env-1", &b"body"[..]);
        e.subject = Some("order.created".into());
        e.created_at = Timestamp(1_700_000_000_123);
        e.expires_at = Some(Timestamp(1_700_000_060_000));
        e.set_header("n", HeaderValue::Integer(5));
        e.set_header("ok", HeaderValue::Boolean(false));
        e.set_header("raw", HeaderValue::Bytes(bytes::Bytes::from_static(&[9])));
        e.set_header(names::CORRELATION_ID, "corr");
        e.set_header(names::CONTENT_TYPE, "text/plain");
        e.set_header(names::ROUTE_ID, "private");
        e.set_header(REPLY_TO, "replies");
        e.set_header(PRIORITY, HeaderValue::Integer(7));
        e.set_header("amqp091.routing-key", "from-source");
        let publish = to_publish(&e, "orders.eu", &config(), Timestamp(1_700_000_000_000)).expect("maps");
        assert_eq!(publish.routing_key.as_str(), "orders.eu");
        assert_eq!(publish.exchange.as_str(), "default-x");
        let p = &publish.properties;
        assert_eq!(p.message_id().as_ref().map(ShortString::as_str), Some("env-1"));
        assert_eq!(p.expiration().as_ref().map(ShortString::as_str), Some("60000"));
        assert_eq!(*p.delivery_mode(), Some(2));
        let back = ingress::to_envelope("default-x", "orders.eu", false, p, b"body", Timestamp(0)).envelope;
        assert_eq!(back.id, "env-1");
        assert_eq!(back.subject.as_deref(), Some("order.created"));
        assert_eq!(back.created_at, Timestamp(1_700_000_000_000), "AMQP 0-9-1 timestamps hold seconds");
        assert_eq!(back.headers.get("n"), Some(&HeaderValue::Integer(5)));
        assert_eq!(back.headers.get("ok"), Some(&HeaderValue::Boolean(false)));
        assert_eq!(back.headers.get("raw"), Some(&HeaderValue::Bytes(bytes::Bytes::from_static(&[9]))));
        assert_eq!(back.text_header(names::CORRELATION_ID), Some("corr"));
        assert_eq!(back.text_header(CONTENT_TYPE), Some("text/plain"));
        assert_eq!(back.text_header(REPLY_TO), Some("replies"));
        assert_eq!(back.headers.get(PRIORITY), Some(&HeaderValue::Integer(7)));
        assert!(!back.headers.contains_key(names::ROUTE_ID));
        assert_eq!(back.text_header("amqp091.routing-key"), Some("orders.eu"), "the delivery's own key, not a header");
    }

    #[test]
    fn exchange_from_header_and_fallbacks_and_limits() {
        let mut c = config();
        c.exchange_from_header = true;
        let mut e = Envelope::new("id", &b""[..]);
        assert_eq!(to_publish(&e, "", &c, Timestamp(0)).expect("maps").routing_key.as_str(), "fallback");
        assert_eq!(to_publish(&e, "", &c, Timestamp(0)).expect("maps").exchange.as_str(), "default-x");
        e.set_header("amqp091.exchange", "from-header");
        assert_eq!(to_publish(&e, "", &c, Timestamp(0)).expect("maps").exchange.as_str(), "from-header");
        let long = "k".repeat(256);
        assert!(!to_publish(&e, &long, &c, Timestamp(0)).expect_err("long key").is_transient());
        e.set_header(PRIORITY, HeaderValue::Integer(300));
        assert!(!to_publish(&e, "", &c, Timestamp(0)).expect_err("bad priority").is_transient());
    }
}
