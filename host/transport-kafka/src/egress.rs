//! Envelope -> Kafka record.
//!
//! - The topic: the binding's address, or the sender's `topic` when it is
//!   empty, a template over text headers; what it expands to must be a
//!   topic name ([`topic_problem`]), so a header cannot name anything
//!   else: otherwise the message is unroutable.
//! - The key: the text of the `key_header` header, when the message has
//!   it; none otherwise.
//! - Headers, in this order: the identity (`id_header`), `content_type`,
//!   `gobridge.subject`, then one per envelope header. Kafka header values
//!   are bytes, so a bytes header crosses as it is; text as its UTF-8; a
//!   number, flag or time as text (a time as epoch milliseconds). The
//!   bridge's private bookkeeping and a header named like the identity
//!   header or `content_type` are left out (the latter counted).

use bytes::Bytes;
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{bytes_of, text_of};
use ferry_envelope::names;

use crate::config::{KafkaSenderConfig, topic_problem};

/// The header that carries the content type.
pub const CONTENT_TYPE: &str = "content_type";

/// A record ready for the producer.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub topic: String,
    pub key: Option<Bytes>,
    pub payload: Bytes,
    pub headers: Vec<(String, Bytes)>,
    /// Headers left out because their name is one of the sender's own.
    pub dropped: u32,
}

/// The record a sender with `config` makes of `msg`.
pub fn prepare(config: &KafkaSenderConfig, msg: &OutboundMessage) -> Result<Record, TransportError> {
    let envelope = &msg.envelope;
    let template = match (msg.address.as_str(), config.topic.as_deref()) {
        ("", Some(topic)) => topic,
        ("", None) => return Err(TransportError::unroutable("the binding has no address and the sender no topic")),
        (address, _) => address,
    };
    // Each value must add something: an empty one could join two parts of
    // the name into one that means something else.
    if let Some(name) = ferry_core::address::names(template)
        .into_iter()
        .find(|name| envelope.headers.get(*name).is_some_and(|v| text_of(v).is_empty()))
    {
        return Err(TransportError::unroutable(format!("header {name:?} is empty: it cannot be part of a topic")));
    }
    let topic = ferry_core::address::expand(template, envelope)?;
    if let Some(why) = topic_problem(&topic) {
        return Err(TransportError::unroutable(format!("topic {topic:?}: {why}")));
    }
    let key = envelope.headers.get(&config.key_header).map(|v| Bytes::from(text_of(v)));
    let mut headers: Vec<(String, Bytes)> = Vec::with_capacity(envelope.headers.len() + 3);
    headers.push((config.id_header.clone(), Bytes::from(envelope.id.clone())));
    if let Some(ct) = envelope.headers.get(names::CONTENT_TYPE) {
        headers.push((CONTENT_TYPE.to_owned(), Bytes::from(text_of(ct))));
    }
    if let Some(subject) = &envelope.subject {
        headers.push((names::SUBJECT_CARRIER.to_owned(), Bytes::from(subject.clone())));
    }
    let mut dropped = 0;
    for (name, value) in envelope.headers.iter() {
        let name = name.as_str();
        if name == names::SUBJECT_CARRIER || name == names::CONTENT_TYPE || names::is_private(name) {
            continue;
        }
        if name == config.id_header || name == CONTENT_TYPE {
            dropped += 1;
            continue;
        }
        headers.push((name.to_owned(), bytes_of(value)));
    }
    Ok(Record { topic, key, payload: envelope.payload().clone(), headers, dropped })
}

#[cfg(test)]
mod tests {
    use ferry_envelope::{Envelope, HeaderValue, Timestamp};

    use super::*;

    fn config(extra: &str) -> KafkaSenderConfig {
        ferry_core::transport::read_part(
            "kafka",
            &format!("brokers = \"k:9092\"\ntopic = \"out\"\n{extra}"),
            |_| Ok(()),
        )
        .expect("config")
    }

    fn header<'a>(r: &'a Record, name: &str) -> Option<&'a [u8]> {
        r.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_ref())
    }

    #[test]
    fn identity_key_subject_and_typed_headers_cross() {
        let mut e = Envelope::new("m-1", &b"{}"[..]);
        e.subject = Some("reading".into());
        e.set_header("x-bridge.ordering-key", "device-7");
        e.set_header("n", HeaderValue::Integer(3));
        e.set_header("at", HeaderValue::Time(Timestamp(1_700_000_000_123)));
        e.set_header("raw", HeaderValue::Bytes(Bytes::from_static(&[0xff, 0])));
        e.set_header(names::CONTENT_TYPE, "application/json");
        let r = prepare(&config(""), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(
            (r.topic.as_str(), r.key.as_deref(), r.payload.as_ref()),
            ("out", Some(&b"device-7"[..]), &b"{}"[..])
        );
        assert_eq!(r.headers[0], ("message_id".to_owned(), Bytes::from_static(b"m-1")));
        assert_eq!(header(&r, CONTENT_TYPE), Some(&b"application/json"[..]));
        assert_eq!(header(&r, names::SUBJECT_CARRIER), Some(&b"reading"[..]));
        assert_eq!(header(&r, "n"), Some(&b"3"[..]));
        assert_eq!(header(&r, "at"), Some(&b"1700000000123"[..]));
        assert_eq!(header(&r, "raw"), Some(&[0xff, 0][..]));
        assert_eq!(r.dropped, 0);
    }

    #[test]
    fn no_key_header_means_no_key_and_own_names_are_dropped() {
        let mut e = Envelope::new("m-2", &b"x"[..]);
        e.set_header("message_id", "forged");
        e.set_header("tenant", "acme");
        let r = prepare(&config("key_header = \"tenant\""), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(r.key.as_deref(), Some(&b"acme"[..]));
        assert_eq!(r.headers.iter().filter(|(n, _)| n == "message_id").count(), 1, "{:?}", r.headers);
        assert_eq!(header(&r, "message_id"), Some(&b"m-2"[..]));
        assert_eq!(r.dropped, 1);
        let r = prepare(&config(""), &OutboundMessage::new(Envelope::new("m-3", &b"x"[..]), "")).expect("prepared");
        assert_eq!(r.key, None);
    }

    #[test]
    fn a_topic_template_may_only_make_a_topic_name() {
        let mut e = Envelope::new("m-4", &b"x"[..]);
        e.set_header("site", "north");
        let r = prepare(&config(""), &OutboundMessage::new(e.clone(), "readings.{site}")).expect("prepared");
        assert_eq!(r.topic, "readings.north");
        for bad in ["a b", "x/y", ""] {
            e.set_header("site", bad);
            let err = prepare(&config(""), &OutboundMessage::new(e.clone(), "readings.{site}")).expect_err(bad);
            assert_eq!(err.class, ferry_core::error::ErrorClass::Permanent, "{bad}");
        }
        let err = prepare(&config(""), &OutboundMessage::new(e, "readings.{missing}")).expect_err("missing");
        assert_eq!(err.class, ferry_core::error::ErrorClass::Permanent);
    }
}
