//! A stream entry -> envelope.
//!
//! - The payload field (`payload_field`) is the payload; an entry without
//!   it has an empty payload.
//! - The identity field (`id_field`) is the identity. Without it the
//!   identity is `<stream>:<entry id>`, the stream's own name for the
//!   entry, which a redelivery keeps.
//! - `content_type` is the envelope's content type; `gobridge.subject` its
//!   subject.
//! - Every other field is a header: text when its value is UTF-8, bytes
//!   otherwise. A name that repeats keeps its text values joined with
//!   `", "` (as HTTP joins them). A field whose name is not UTF-8 cannot
//!   be a header: it is left out and counted.
//! - The stream, the entry id, the delivery count and the time the stream
//!   stored the entry (the id's milliseconds) are the bridge-owned
//!   `redis.*` headers; fields of those names are ignored.

use bytes::Bytes;
use ferry_core::wire::{add_repeated, text_or_bytes};
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};

use crate::entry::id_millis;

/// The stream the entry was read from (bridge-owned).
pub const STREAM: &str = "redis.stream";
/// The entry's id in that stream (bridge-owned).
pub const ID: &str = "redis.id";
/// How many times the group has delivered it, this time included
/// (bridge-owned).
pub const DELIVERED: &str = "redis.delivered";
/// When the stream stored it (bridge-owned).
pub const TIMESTAMP: &str = "redis.timestamp";
/// The field of the content type.
pub const CONTENT_TYPE: &str = "content_type";

/// The bridge-owned headers, set from the entry itself.
pub const OWNED: [&str; 4] = [STREAM, ID, DELIVERED, TIMESTAMP];

/// What a receiver read of one entry, before it is an envelope.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub stream: String,
    pub id: String,
    /// In the order they were added; a name may repeat.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// Deliveries so far, this one included (1 the first time).
    pub delivered: i64,
}

/// The receiver's field names and limit.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    pub payload: &'a str,
    pub id: &'a str,
    pub max_payload_bytes: usize,
}

/// Why an entry was refused whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    PayloadTooLarge,
}

impl Poison {
    /// The metrics label (`ferry_ingress_rejected_total{reason}`).
    pub fn label(self) -> &'static str {
        match self {
            Poison::PayloadTooLarge => "too_large",
        }
    }
}

/// An envelope and how many fields could not become headers.
#[derive(Debug)]
pub struct Converted {
    pub envelope: Envelope,
    pub dropped: u32,
}

/// Converts one entry.
pub fn to_envelope(m: &Incoming, fields: Fields<'_>) -> Result<Converted, Poison> {
    let payload = m.fields.iter().find(|(f, _)| f.as_slice() == fields.payload.as_bytes()).map(|(_, v)| v);
    if payload.is_some_and(|p| p.len() > fields.max_payload_bytes) {
        return Err(Poison::PayloadTooLarge);
    }
    let mut envelope = Envelope::new(String::new(), payload.map_or_else(Bytes::new, |p| Bytes::copy_from_slice(p)));
    let stored = id_millis(&m.id).map(Timestamp);
    if let Some(at) = stored {
        envelope.created_at = at;
    }
    let mut id: Option<String> = None;
    let mut dropped = 0;
    let mut headers: Vec<(String, HeaderValue)> = Vec::new();
    let mut payload_seen = false;
    for (name, value) in &m.fields {
        let Ok(name) = std::str::from_utf8(name) else {
            dropped += 1;
            continue;
        };
        if name == fields.payload {
            if payload_seen {
                dropped += 1;
            }
            payload_seen = true;
            continue;
        }
        let text = std::str::from_utf8(value).ok();
        if name == fields.id {
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
    envelope.set_header(STREAM, m.stream.clone());
    envelope.set_header(ID, m.id.clone());
    envelope.set_header(DELIVERED, HeaderValue::Integer(m.delivered));
    if let Some(at) = stored {
        envelope.set_header(TIMESTAMP, HeaderValue::Time(at));
    }
    envelope.id = id.unwrap_or_else(|| format!("{}:{}", m.stream, m.id));
    Ok(Converted { envelope, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: Fields<'static> = Fields { payload: "payload", id: "message_id", max_payload_bytes: 1024 };

    fn incoming(fields: &[(&str, &[u8])]) -> Incoming {
        Incoming {
            stream: "orders".into(),
            id: "1700000000123-0".into(),
            fields: fields.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec())).collect(),
            delivered: 2,
        }
    }

    #[test]
    fn the_identity_is_the_id_field_else_the_streams_entry_id() {
        let c = to_envelope(&incoming(&[("message_id", b"m-1"), ("payload", b"{}")]), FIELDS).expect("admitted");
        assert_eq!(c.envelope.id, "m-1");
        assert_eq!(c.envelope.payload().as_ref(), b"{}");
        assert!(c.envelope.headers.get("message_id").is_none());
        let c = to_envelope(&incoming(&[("payload", b"{}")]), FIELDS).expect("admitted");
        assert_eq!(c.envelope.id, "orders:1700000000123-0", "stable across redeliveries");
    }

    #[test]
    fn fields_become_text_or_bytes_headers_and_repeats_are_joined() {
        let c =
            to_envelope(&incoming(&[("kind", b"temp"), ("tag", b"a"), ("tag", b"b"), ("raw", &[0xff, 0x00])]), FIELDS)
                .expect("admitted");
        let e = &c.envelope;
        assert_eq!(e.text_header("kind"), Some("temp"));
        assert_eq!(e.text_header("tag"), Some("a, b"));
        assert_eq!(e.headers.get("raw"), Some(&HeaderValue::Bytes(Bytes::from_static(&[0xff, 0x00]))));
        assert!(e.payload().is_empty(), "no payload field: an empty payload");
        assert_eq!(e.text_header(STREAM), Some("orders"));
        assert_eq!(e.text_header(ID), Some("1700000000123-0"));
        assert_eq!(e.headers.get(DELIVERED), Some(&HeaderValue::Integer(2)));
        assert_eq!(e.headers.get(TIMESTAMP), Some(&HeaderValue::Time(Timestamp(1_700_000_000_123))));
        assert_eq!(e.created_at, Timestamp(1_700_000_000_123));
        assert_eq!(c.dropped, 0);
    }

    #[test]
    fn forged_owned_headers_are_ignored_and_unnamed_fields_counted() {
        let mut m = incoming(&[("redis.stream", b"forged"), ("redis.delivered", b"1")]);
        m.fields.push((vec![0xff], b"x".to_vec()));
        let c = to_envelope(&m, FIELDS).expect("admitted");
        assert_eq!(c.envelope.text_header(STREAM), Some("orders"));
        assert_eq!(c.envelope.headers.get(DELIVERED), Some(&HeaderValue::Integer(2)));
        assert_eq!(c.dropped, 1);
    }

    #[test]
    fn content_type_and_subject_carrier_are_the_envelopes() {
        let c = to_envelope(&incoming(&[("content_type", b"application/json"), ("gobridge.subject", b"s")]), FIELDS)
            .expect("admitted");
        let e = &c.envelope;
        assert_eq!(e.derived_header(names::CONTENT_TYPE), Some(&HeaderValue::Text("application/json".into())));
        assert_eq!(e.subject.as_deref(), Some("s"));
        assert!(e.headers.get("content_type").is_none());
    }

    #[test]
    fn a_payload_over_the_limit_is_poison() {
        let tight = Fields { max_payload_bytes: 1, ..FIELDS };
        assert_eq!(to_envelope(&incoming(&[("payload", b"too big")]), tight).err(), Some(Poison::PayloadTooLarge));
    }
}
