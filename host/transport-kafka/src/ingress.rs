//! A Kafka record -> envelope.
//!
//! - The record's value is the payload (none: empty); larger than
//!   `max_payload_bytes` is poison.
//! - The identity header (`id_header`, default `message_id`) is the
//!   identity. Without it the identity is `<topic>-<partition>-<offset>`,
//!   the log's own name for the record, which a redelivery keeps (so the
//!   outbox's dedup catches a replay).
//! - `content_type` is the envelope's content type; `gobridge.subject` its
//!   subject.
//! - Every other record header is a header: text when its value is UTF-8,
//!   bytes otherwise, empty text when it has no value. A name that repeats
//!   keeps its text values joined with `", "`; a repeat that is bytes is
//!   left out and counted.
//! - The topic, partition, offset, key (text or bytes, as a header) and
//!   the record's timestamp (also the envelope's creation time) are the
//!   bridge-owned `kafka.*` headers; record headers of those names are
//!   ignored.

use bytes::Bytes;
use ferry_core::wire::{add_repeated, text_or_bytes};
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use rdkafka::Message;
use rdkafka::message::Headers;

use crate::egress::CONTENT_TYPE;

/// The topic the record was read from (bridge-owned).
pub const TOPIC: &str = "kafka.topic";
/// Its partition (bridge-owned).
pub const PARTITION: &str = "kafka.partition";
/// Its offset in that partition (bridge-owned).
pub const OFFSET: &str = "kafka.offset";
/// Its key (bridge-owned).
pub const KEY: &str = "kafka.key";
/// Its timestamp (bridge-owned).
pub const TIMESTAMP: &str = "kafka.timestamp";

/// The bridge-owned headers, set from the record itself.
pub const OWNED: [&str; 5] = [TOPIC, PARTITION, OFFSET, KEY, TIMESTAMP];

/// What a receiver read of one record, before it is an envelope.
#[derive(Debug, Clone, Default)]
pub struct Incoming {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch, when the record has a timestamp.
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Incoming {
    /// The parts of a record the envelope is made of.
    pub fn of(m: &impl Message) -> Self {
        let headers = m
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        Self {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            payload: m.payload().map(<[u8]>::to_vec),
            headers,
        }
    }
}

/// Why a record cannot be a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    PayloadTooLarge,
}

/// An envelope made of a record, and how many record headers were left
/// out.
#[derive(Debug)]
pub struct Converted {
    pub envelope: Envelope,
    pub dropped: u32,
}

/// The envelope of record `m`, its identity read from `id_header`.
pub fn to_envelope(m: &Incoming, id_header: &str, max_payload_bytes: usize) -> Result<Converted, Poison> {
    let payload = m.payload.as_deref().unwrap_or_default();
    if payload.len() > max_payload_bytes {
        return Err(Poison::PayloadTooLarge);
    }
    let mut envelope = Envelope::new(String::new(), Bytes::copy_from_slice(payload));
    let stamped = m.timestamp.filter(|t| *t >= 0).map(Timestamp);
    if let Some(at) = stamped {
        envelope.created_at = at;
    }
    let mut id: Option<String> = None;
    let mut dropped = 0;
    let mut headers: Vec<(String, HeaderValue)> = Vec::new();
    for (name, value) in &m.headers {
        let name = name.as_str();
        let value = value.as_deref().unwrap_or_default();
        let text = std::str::from_utf8(value).ok();
        if name == id_header {
            if id.is_none()
                && let Some(v) = text.filter(|v| !v.is_empty())
            {
                id = Some(v.to_owned());
            }
            continue;
        }
        if OWNED.contains(&name) {
            continue;
        }
        match (name, text) {
            (CONTENT_TYPE, Some(ct)) if !ct.is_empty() => envelope.derive_header(names::CONTENT_TYPE, ct.to_owned()),
            (names::SUBJECT_CARRIER, Some(s)) if !s.is_empty() => envelope.subject = Some(s.to_owned()),
            (CONTENT_TYPE | names::SUBJECT_CARRIER, _) => {}
            _ => {
                if !add_repeated(&mut headers, name, text_or_bytes(value)) {
                    dropped += 1;
                }
            }
        }
    }
    for (name, value) in headers {
        envelope.headers.insert(name, value);
    }
    envelope.set_header(TOPIC, m.topic.clone());
    envelope.set_header(PARTITION, HeaderValue::Integer(i64::from(m.partition)));
    envelope.set_header(OFFSET, HeaderValue::Integer(m.offset));
    if let Some(key) = &m.key {
        envelope.set_header(KEY, text_or_bytes(key));
    }
    if let Some(at) = stamped {
        envelope.set_header(TIMESTAMP, HeaderValue::Time(at));
    }
    envelope.id = id.unwrap_or_else(|| format!("{}-{}-{}", m.topic, m.partition, m.offset));
    Ok(Converted { envelope, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(headers: &[(&str, Option<&[u8]>)]) -> Incoming {
        Incoming {
            topic: "orders".into(),
            partition: 2,
            offset: 41,
            timestamp: Some(1_700_000_000_123),
            key: Some(b"device-7".to_vec()),
            payload: Some(b"{}".to_vec()),
            headers: headers.iter().map(|(k, v)| ((*k).to_owned(), v.map(<[u8]>::to_vec))).collect(),
        }
    }

    #[test]
    fn the_identity_is_the_id_header_else_the_records_place_in_the_log() {
        let c = to_envelope(&incoming(&[("message_id", Some(b"m-1"))]), "message_id", 1024).expect("admitted");
        assert_eq!(c.envelope.id, "m-1");
        assert!(c.envelope.headers.get("message_id").is_none());
        let c = to_envelope(&incoming(&[("message_id", Some(b""))]), "message_id", 1024).expect("admitted");
        assert_eq!(c.envelope.id, "orders-2-41", "stable across redeliveries");
    }

    #[test]
    fn headers_become_text_or_bytes_and_the_record_its_kafka_headers() {
        let c = to_envelope(
            &incoming(&[
                ("kind", Some(b"temp")),
                ("tag", Some(b"a")),
                ("tag", Some(b"b")),
                ("raw", Some(&[0xff, 0x00])),
                ("none", None),
                ("gobridge.subject", Some(b"reading")),
                ("content_type", Some(b"application/json")),
            ]),
            "message_id",
            1024,
        )
        .expect("admitted");
        let e = &c.envelope;
        assert_eq!(e.text_header("kind"), Some("temp"));
        assert_eq!(e.text_header("tag"), Some("a, b"));
        assert_eq!(e.headers.get("raw"), Some(&HeaderValue::Bytes(Bytes::from_static(&[0xff, 0x00]))));
        assert_eq!(e.text_header("none"), Some(""));
        assert_eq!(e.subject.as_deref(), Some("reading"));
        assert_eq!(e.payload().as_ref(), b"{}");
        assert_eq!(e.text_header(TOPIC), Some("orders"));
        assert_eq!(e.headers.get(PARTITION), Some(&HeaderValue::Integer(2)));
        assert_eq!(e.headers.get(OFFSET), Some(&HeaderValue::Integer(41)));
        assert_eq!(e.text_header(KEY), Some("device-7"));
        assert_eq!(e.headers.get(TIMESTAMP), Some(&HeaderValue::Time(Timestamp(1_700_000_000_123))));
        assert_eq!(e.created_at, Timestamp(1_700_000_000_123));
        assert_eq!(c.dropped, 0);
    }

    #[test]
    fn forged_kafka_headers_are_ignored_and_a_large_payload_is_poison() {
        let c = to_envelope(
            &incoming(&[
                ("kafka.offset", Some(b"0")),
                ("kafka.topic", Some(b"other")),
                ("tag", Some(b"a")),
                ("tag", Some(&[0xff])),
            ]),
            "message_id",
            1024,
        )
        .expect("admitted");
        assert_eq!(c.envelope.headers.get(OFFSET), Some(&HeaderValue::Integer(41)));
        assert_eq!(c.envelope.text_header(TOPIC), Some("orders"));
        assert_eq!(c.dropped, 1, "a bytes repeat of a text header");
        assert_eq!(to_envelope(&incoming(&[]), "message_id", 1).err(), Some(Poison::PayloadTooLarge));
    }
}
