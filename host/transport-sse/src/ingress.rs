//! An event -> envelope.
//!
//! - With `wire_format = "json"` (the default), `data:` that is the JSON
//!   wire format gives the message's headers, subject and body; other data
//!   is the body, and data meant as the format but broken is the body too
//!   (logged and counted as malformed). With `"none"` the data is the body.
//! - The event's id is the message's identity; an event without one gets
//!   a generated identity (and cannot be resumed from or deduplicated).
//! - The event's type, when it is not the default `message`, is the
//!   subject unless the document names one.
//! - The event's type and id are the bridge-owned headers `sse.event` and
//!   `sse.id`; a document's headers of those names are overwritten.

use bytes::Bytes;
use ferry_config::WireFormat;
use ferry_core::json_wire::{self, Decoded, Unpacked};
use ferry_envelope::{Envelope, HeaderValue, names};

/// The event's type (bridge-owned).
pub const EVENT: &str = "sse.event";
/// The event's id (bridge-owned).
pub const ID: &str = "sse.id";

/// The type of an event that names none.
pub const DEFAULT_TYPE: &str = "message";

/// One event as the decoder gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Incoming {
    pub event: String,
    pub data: String,
    pub id: String,
}

/// The envelope of `event`, how its data was read, and why it was
/// malformed when it was.
pub fn to_envelope(event: &Incoming, format: WireFormat) -> (Envelope, Unpacked, Option<String>) {
    let mut envelope = Envelope::new(String::new(), Bytes::from(event.data.clone().into_bytes()));
    let (read, why) = match format {
        WireFormat::None => (Unpacked::Plain, None),
        WireFormat::Json => match json_wire::decode(event.data.as_bytes()) {
            Decoded::Wire { headers, body } => {
                json_wire::apply(&mut envelope, headers, body);
                (Unpacked::Wire, None)
            }
            Decoded::Plain => (Unpacked::Plain, None),
            Decoded::Malformed(why) => (Unpacked::Malformed, Some(why)),
        },
    };
    if envelope.subject.is_none() && !event.event.is_empty() && event.event != DEFAULT_TYPE {
        envelope.subject = Some(event.event.clone());
    }
    envelope.set_header(EVENT, event.event.clone());
    if event.id.is_empty() {
        envelope.headers.remove(ID);
        envelope.id = uuid::Uuid::new_v4().to_string();
        envelope.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
    } else {
        envelope.set_header(ID, event.id.clone());
        envelope.id = event.id.clone();
    }
    (envelope, read, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(event: &str, id: &str, data: &str) -> Incoming {
        Incoming { event: event.into(), data: data.into(), id: id.into() }
    }

    #[test]
    fn the_wire_format_gives_headers_subject_and_body() {
        let data = r#"{"headers":{"kind":"temp","n":3,"gobridge.subject":"a.b","sse.id":"forged"},"body":"21.5"}"#;
        let (e, read, why) = to_envelope(&event("other", "m-1", data), WireFormat::Json);
        assert_eq!((read, why), (Unpacked::Wire, None));
        assert_eq!(e.id, "m-1");
        assert_eq!(e.payload().as_ref(), b"21.5");
        assert_eq!(e.subject.as_deref(), Some("a.b"), "the document's subject wins over the event type");
        assert_eq!(e.text_header("kind"), Some("temp"));
        assert_eq!(e.headers.get("n"), Some(&HeaderValue::Integer(3)));
        assert_eq!(e.text_header(ID), Some("m-1"), "a document cannot forge the event's id");
        assert_eq!(e.text_header(EVENT), Some("other"));
    }

    #[test]
    fn other_data_is_the_body_and_the_event_type_the_subject() {
        let (e, read, _) = to_envelope(&event("price", "7", "not json"), WireFormat::Json);
        assert_eq!(read, Unpacked::Plain);
        assert_eq!(e.payload().as_ref(), b"not json");
        assert_eq!(e.subject.as_deref(), Some("price"));
        let (e, _, _) = to_envelope(&event(DEFAULT_TYPE, "8", "x"), WireFormat::Json);
        assert_eq!(e.subject, None, "the default type is no subject");
        let (e, read, _) = to_envelope(&event("t", "9", r#"{"headers":{},"body":"b"}"#), WireFormat::None);
        assert_eq!((read, e.payload().as_ref()), (Unpacked::Plain, &br#"{"headers":{},"body":"b"}"#[..]));
    }

    #[test]
    fn broken_documents_stay_the_body_and_say_why() {
        let (e, read, why) = to_envelope(&event("m", "1", r#"{"body":"x","body_encoding":"rot13"}"#), WireFormat::Json);
        assert_eq!(read, Unpacked::Malformed);
        assert!(why.is_some_and(|w| w.contains("rot13")));
        assert_eq!(e.payload().as_ref(), br#"{"body":"x","body_encoding":"rot13"}"#);
    }

    #[test]
    fn an_event_without_an_id_gets_a_generated_identity() {
        let (a, _, _) = to_envelope(&event(DEFAULT_TYPE, "", "x"), WireFormat::Json);
        let (b, _, _) = to_envelope(&event(DEFAULT_TYPE, "", "x"), WireFormat::Json);
        assert_ne!(a.id, b.id);
        assert_eq!(a.derived_header(names::GENERATED_ID), Some(&HeaderValue::Boolean(true)));
        assert!(a.headers.get(ID).is_none());
    }
}
