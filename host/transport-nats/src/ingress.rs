//! A JetStream message -> envelope.
//!
//! - Headers become text headers; a name that repeats
//!   keeps its values joined with `", "` (as HTTP joins them).
//! - `Nats-Msg-Id` is the identity. Without it the identity is
//!   `<stream>:<sequence>`, the stream's own name for the message, which a
//!   redelivery keeps.
//! - JetStream's own headers (`Nats-…`, any case) are not headers of the
//!   message: they steer the server (`Nats-Expected-Last-Sequence`,
//!   `Nats-Rollup`, …) and never cross to another transport.
//! - `Content-Type` is the envelope's content type; `gobridge.subject` its
//!   subject.
//! - The subject the message was published on, its stream, stream
//!   sequence, delivery count and the stream's time are the bridge-owned
//!   `nats.*` headers; a publisher's headers of those names are ignored.

use bytes::Bytes;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};

/// The subject the message was published on (bridge-owned).
pub const SUBJECT: &str = "nats.subject";
/// The stream it was read from (bridge-owned).
pub const STREAM: &str = "nats.stream";
/// Its sequence in that stream (bridge-owned).
pub const SEQUENCE: &str = "nats.sequence";
/// How many times the consumer has delivered it, this time included
/// (bridge-owned).
pub const DELIVERED: &str = "nats.delivered";
/// When the stream stored it (bridge-owned).
pub const TIMESTAMP: &str = "nats.timestamp";
/// JetStream's identity header: the stream drops a second message with
/// the same id inside its duplicate window.
pub const MSG_ID: &str = "Nats-Msg-Id";
/// The content type's header.
pub const CONTENT_TYPE: &str = "Content-Type";

/// The bridge-owned headers, set from the message itself.
pub const OWNED: [&str; 5] = [SUBJECT, STREAM, SEQUENCE, DELIVERED, TIMESTAMP];

/// Whether `name` is one of NATS's own headers (`Nats-…`, any case).
pub fn is_nats_header(name: &str) -> bool {
    name.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("nats-"))
}

/// What a receiver read of one message, before it is an envelope.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub subject: String,
    /// A name may repeat (its values in the order they came).
    pub headers: Vec<(String, String)>,
    pub payload: Bytes,
    pub stream: String,
    pub sequence: u64,
    /// Deliveries so far, this one included (1 the first time).
    pub delivered: i64,
    /// When the stream stored it.
    pub published: Timestamp,
}

/// Why a message was refused whole.
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

/// Converts one message; `max_payload_bytes` is the receiver's limit.
pub fn to_envelope(m: &Incoming, max_payload_bytes: usize) -> Result<Envelope, Poison> {
    if m.payload.len() > max_payload_bytes {
        return Err(Poison::PayloadTooLarge);
    }
    let mut envelope = Envelope::new(String::new(), m.payload.clone());
    envelope.created_at = m.published;
    let mut id: Option<&str> = None;
    let mut headers: Vec<(&str, String)> = Vec::new();
    for (name, value) in &m.headers {
        if name.eq_ignore_ascii_case(MSG_ID) {
            if id.is_none() && !value.is_empty() {
                id = Some(value);
            }
            continue;
        }
        if is_nats_header(name) || OWNED.contains(&name.as_str()) {
            continue;
        }
        if name.eq_ignore_ascii_case(CONTENT_TYPE) {
            if !value.is_empty() {
                envelope.derive_header(names::CONTENT_TYPE, value.clone());
            }
        } else if name == names::SUBJECT_CARRIER {
            if !value.is_empty() {
                envelope.subject = Some(value.clone());
            }
        } else if let Some((_, joined)) = headers.iter_mut().find(|(n, _)| *n == name.as_str()) {
            joined.push_str(", ");
            joined.push_str(value);
        } else {
            headers.push((name, value.clone()));
        }
    }
    for (name, value) in headers {
        envelope.headers.insert(name.to_owned(), HeaderValue::Text(value));
    }
    envelope.set_header(SUBJECT, m.subject.clone());
    envelope.set_header(STREAM, m.stream.clone());
    envelope.set_header(SEQUENCE, HeaderValue::Integer(i64::try_from(m.sequence).unwrap_or(i64::MAX)));
    envelope.set_header(DELIVERED, HeaderValue::Integer(m.delivered));
    envelope.set_header(TIMESTAMP, HeaderValue::Time(m.published));
    envelope.id = match id {
        Some(id) => id.to_owned(),
        None => format!("{}:{}", m.stream, m.sequence),
    };
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(headers: &[(&str, &str)]) -> Incoming {
        Incoming {
            subject: "orders.eu".into(),
            headers: headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            payload: Bytes::from_static(b"{}"),
            stream: "ORDERS".into(),
            sequence: 42,
            delivered: 3,
            published: Timestamp(1_700_000_000_123),
        }
    }

    #[test]
    fn the_identity_is_the_msg_id_else_the_streams_sequence() {
        let e = to_envelope(&incoming(&[("Nats-Msg-Id", "m-1")]), 1024).expect("admitted");
        assert_eq!(e.id, "m-1");
        assert!(e.derived_header(names::GENERATED_ID).is_none());
        let e = to_envelope(&incoming(&[]), 1024).expect("admitted");
        assert_eq!(e.id, "ORDERS:42", "stable across redeliveries");
        assert!(e.headers.get(MSG_ID).is_none());
    }

    #[test]
    fn headers_cross_as_text_and_repeated_names_are_joined() {
        let e = to_envelope(&incoming(&[("kind", "temp"), ("tag", "a"), ("tag", "b")]), 1024).expect("admitted");
        assert_eq!(e.text_header("kind"), Some("temp"));
        assert_eq!(e.text_header("tag"), Some("a, b"));
        assert_eq!(e.text_header(SUBJECT), Some("orders.eu"));
        assert_eq!(e.text_header(STREAM), Some("ORDERS"));
        assert_eq!(e.headers.get(SEQUENCE), Some(&HeaderValue::Integer(42)));
        assert_eq!(e.headers.get(DELIVERED), Some(&HeaderValue::Integer(3)));
        assert_eq!(e.headers.get(TIMESTAMP), Some(&HeaderValue::Time(Timestamp(1_700_000_000_123))));
        assert_eq!(e.created_at, Timestamp(1_700_000_000_123));
    }

    #[test]
    fn nats_control_headers_and_forged_owned_headers_do_not_cross() {
        let e = to_envelope(
            &incoming(&[
                ("Nats-Expected-Last-Sequence", "7"),
                ("nats-rollup", "all"),
                ("nats.subject", "forged"),
                ("nats.sequence", "1"),
            ]),
            1024,
        )
        .expect("admitted");
        assert!(e.headers.keys().all(|k| !is_nats_header(k)), "{:?}", e.headers);
        assert_eq!(e.text_header(SUBJECT), Some("orders.eu"));
        assert_eq!(e.headers.get(SEQUENCE), Some(&HeaderValue::Integer(42)));
    }

    #[test]
    fn content_type_and_subject_carrier_are_the_envelopes() {
        let e = to_envelope(&incoming(&[("Content-Type", "application/json"), ("gobridge.subject", "s")]), 1024)
            .expect("admitted");
        assert_eq!(e.derived_header(names::CONTENT_TYPE), Some(&HeaderValue::Text("application/json".into())));
        assert_eq!(e.subject.as_deref(), Some("s"));
        assert!(e.headers.get("Content-Type").is_none());
    }

    #[test]
    fn a_payload_over_the_limit_is_poison() {
        assert_eq!(to_envelope(&incoming(&[]), 1).err(), Some(Poison::PayloadTooLarge));
    }
}
