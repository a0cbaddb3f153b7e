//! The JSON wire format of seed 004 (`wire_format = "json"`): a message's
//! headers and body in one JSON document, for transports that carry no
//! headers (an HTTP queue) or a leg that must keep them through one.
//!
//! ```json
//! {"headers": {"kind": "temp", "count": 3}, "body": "21.5"}
//! {"headers": {}, "body": "AP8Q", "body_encoding": "base64"}
//! ```
//!
//! - `body` is the payload as a string when it is UTF-8, else its base64
//!   with `"body_encoding": "base64"`.
//! - Header values keep their JSON types: text is a string, integers and
//!   floats are numbers, booleans are booleans. A time is written as
//!   `{"time_ms": <ms since the epoch>}` and bytes as `{"base64": "…"}`,
//!   the notation of `ferry test` fixtures; both read back typed.
//! - The subject travels as the header `gobridge.subject` (as on MQTT).
//!   The bookkeeping headers a route stamps again on the other side
//!   (`x-bridge.route-id`, `x-bridge.source-id`, `x-bridge.generated-id`)
//!   are left out.
//!
//! Reading: a payload that is not a JSON object, or an object with keys
//! other than `headers`, `body` and `body_encoding`, or one without `body`,
//! is a plain body with no headers (seed 004's backward compatibility).
//! An object that is meant as this format (only those keys, `body` among
//! them) but breaks it (a header value of another type, an unknown
//! `body_encoding`, base64 that does not decode) is malformed.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::TransportError;
use crate::metrics::Metrics;
use crate::ports::{Delivery, DeliverySink, OutboundMessage, Receiver, Sender, SharedSender};

/// The top-level keys of the format.
const KEYS: [&str; 3] = ["headers", "body", "body_encoding"];

/// Headers the other side's route stamps again; not written.
const NOT_WRITTEN: [&str; 3] = [names::ROUTE_ID, names::SOURCE_ID, names::GENERATED_ID];

/// The content type of an encoded message.
pub const CONTENT_TYPE: &str = "application/json";

/// What a payload read as the wire format turned out to be.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// The format: these headers (the subject among them as
    /// `gobridge.subject`) and this body.
    Wire { headers: Vec<(String, HeaderValue)>, body: Bytes },
    /// Not the format: the payload is the body, with no headers.
    Plain,
    /// Meant as the format but broken, for this reason.
    Malformed(String),
}

/// The JSON document of `envelope`: its headers (and subject) and payload.
pub fn encode(envelope: &Envelope) -> Bytes {
    let mut headers = Map::new();
    for (name, value) in envelope.headers.iter() {
        if !NOT_WRITTEN.contains(&name.as_str()) {
            headers.insert(name.clone(), crate::wire::header_value(value));
        }
    }
    if let Some(subject) = &envelope.subject {
        headers.insert(names::SUBJECT_CARRIER.to_owned(), Value::String(subject.clone()));
    }
    let mut doc = Map::new();
    doc.insert("headers".into(), Value::Object(headers));
    match std::str::from_utf8(envelope.payload()) {
        Ok(text) => {
            doc.insert("body".into(), Value::String(text.to_owned()));
        }
        Err(_) => {
            doc.insert("body".into(), Value::String(STANDARD.encode(envelope.payload())));
            doc.insert("body_encoding".into(), Value::String("base64".into()));
        }
    }
    // A map of strings and numbers always serializes.
    Bytes::from(serde_json::to_vec(&Value::Object(doc)).unwrap_or_default())
}

/// Reads `payload` as the wire format.
pub fn decode(payload: &[u8]) -> Decoded {
    // Cheap test first: a JSON object starts with `{` after whitespace.
    if payload.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Decoded::Plain;
    }
    let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(payload) else {
        return Decoded::Plain;
    };
    if !doc.contains_key("body") || doc.keys().any(|k| !KEYS.contains(&k.as_str())) {
        return Decoded::Plain;
    }
    match parts(doc) {
        Ok((headers, body)) => Decoded::Wire { headers, body },
        Err(why) => Decoded::Malformed(why),
    }
}

type Parts = (Vec<(String, HeaderValue)>, Bytes);

fn parts(mut doc: Map<String, Value>) -> Result<Parts, String> {
    let Some(Value::String(body)) = doc.remove("body") else {
        return Err("body is not a string".into());
    };
    let body = match doc.remove("body_encoding") {
        None | Some(Value::Null) => Bytes::from(body.into_bytes()),
        Some(Value::String(e)) if e == "base64" => {
            Bytes::from(STANDARD.decode(body.trim()).map_err(|e| format!("body is not base64: {e}"))?)
        }
        Some(other) => return Err(format!("body_encoding {other} is not \"base64\"")),
    };
    let headers = match doc.remove("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => {
            map.into_iter().map(|(name, v)| header(&name, v).map(|v| (name, v))).collect::<Result<_, _>>()?
        }
        Some(_) => return Err("headers is not an object".into()),
    };
    Ok((headers, body))
}

fn header(name: &str, value: Value) -> Result<HeaderValue, String> {
    Ok(match value {
        Value::String(s) => HeaderValue::Text(s),
        Value::Bool(b) => HeaderValue::Boolean(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => HeaderValue::Integer(i),
            None => HeaderValue::Float(n.as_f64().ok_or_else(|| format!("header {name}: number out of range"))?),
        },
        Value::Object(o) if o.len() == 1 && o.contains_key("time_ms") => match o.get("time_ms").and_then(Value::as_i64)
        {
            Some(ms) => HeaderValue::Time(Timestamp(ms)),
            None => return Err(format!("header {name}: time_ms is not an integer")),
        },
        Value::Object(o) if o.len() == 1 && o.contains_key("base64") => match o.get("base64").and_then(Value::as_str) {
            Some(b64) => HeaderValue::Bytes(
                STANDARD.decode(b64.trim()).map_err(|e| format!("header {name}: base64 does not decode: {e}"))?.into(),
            ),
            None => return Err(format!("header {name}: base64 is not a string")),
        },
        other => {
            return Err(format!(
                "header {name}: {} is not a string, number, boolean, {{\"time_ms\": …}} or {{\"base64\": …}}",
                kind_of(&other)
            ));
        }
    })
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
        _ => "the value",
    }
}

/// How [`unpack`] read an envelope's payload, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpacked {
    Wire,
    Plain,
    Malformed,
}

impl Unpacked {
    pub fn label(self) -> &'static str {
        match self {
            Unpacked::Wire => "wire",
            Unpacked::Plain => "plain",
            Unpacked::Malformed => "malformed",
        }
    }
}

/// Replaces `envelope`'s payload with the body of the wire-format document
/// it holds and adds its headers (over those the transport gave; the
/// subject from `gobridge.subject`). A plain or malformed payload is left
/// as it is; the reason comes back with `Malformed`.
pub fn unpack(envelope: &mut Envelope) -> (Unpacked, Option<String>) {
    match decode(envelope.payload()) {
        Decoded::Plain => (Unpacked::Plain, None),
        Decoded::Malformed(why) => (Unpacked::Malformed, Some(why)),
        Decoded::Wire { headers, body } => {
            apply(envelope, headers, body);
            (Unpacked::Wire, None)
        }
    }
}

/// Installs a decoded document in `envelope`: its headers over the
/// envelope's (the subject from `gobridge.subject`) and its body.
///
/// The document's headers are the publisher's, whatever their names: an
/// `x-bridge.*` name among them is stripped by the route unless it trusts
/// bridge headers, like any reserved header a publisher sends. The content
/// type the transport gave described the document, not the body inside,
/// so it is dropped from what the adapter derived.
pub fn apply(envelope: &mut Envelope, headers: Vec<(String, HeaderValue)>, body: Bytes) {
    envelope.forget_derived(names::CONTENT_TYPE);
    for (name, value) in headers {
        if name == names::SUBJECT_CARRIER {
            if let HeaderValue::Text(s) = value {
                envelope.subject = Some(s);
            }
        } else {
            envelope.set_header(name, value);
        }
    }
    envelope.set_payload(body);
}

/// The copy of `envelope` a sender with `wire_format = "json"` sends: the
/// document as payload and `application/json` as content type. Headers
/// stay, so address templates still see them and transports that carry
/// headers carry them as well.
pub fn pack(envelope: &Envelope) -> Envelope {
    let mut packed = envelope.clone();
    packed.set_payload(encode(envelope));
    packed.set_header(names::CONTENT_TYPE, CONTENT_TYPE);
    packed
}

/// A receiver whose payloads carry the wire format: each delivery is
/// unpacked ([`unpack`]) before the route sees it, and counted in
/// `ferry_wire_format_read_total`. A malformed payload goes on as a plain
/// body (and is logged), so a producer's mistake is never lost.
pub struct UnpackingReceiver {
    inner: Arc<dyn Receiver>,
    name: String,
    metrics: Metrics,
}

impl UnpackingReceiver {
    pub fn new(inner: Arc<dyn Receiver>, name: &str, metrics: Metrics) -> Self {
        Self { inner, name: name.to_owned(), metrics }
    }
}

#[async_trait]
impl Receiver for UnpackingReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        // One slot: the route's own sink stays the backpressure.
        let (tx, mut rx) = mpsc::channel::<Delivery>(1);
        let receiver = self.name.as_str();
        let forward = async {
            while let Some(mut delivery) = rx.recv().await {
                let (outcome, why) = unpack(&mut delivery.envelope);
                Metrics::inc(&self.metrics.wire_format_read, &[("receiver", receiver), ("outcome", outcome.label())]);
                if let Some(why) = why {
                    warn!(receiver, message_id = %delivery.envelope.id, reason = %why, "malformed wire-format payload; passed on as a plain body");
                }
                if sink.send(delivery).await.is_err() {
                    break;
                }
            }
        };
        let (result, ()) = tokio::join!(self.inner.run(tx, shutdown), forward);
        result
    }
}

/// A sender with `wire_format = "json"`: sends [`pack`]ed copies.
pub struct PackingSender {
    inner: SharedSender,
}

impl PackingSender {
    pub fn new(inner: SharedSender) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl Sender for PackingSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let envelope = pack(&msg.envelope);
        self.inner.send(OutboundMessage { envelope, ..msg }).await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Envelope {
        let mut e = Envelope::new("id-1", &b"21.5"[..]);
        e.subject = Some("reading.taken".into());
        e.set_header("kind", "temp");
        e.set_header("count", HeaderValue::Integer(3));
        e.set_header("ratio", HeaderValue::Float(0.5));
        e.set_header("ok", HeaderValue::Boolean(true));
        e.set_header("at", HeaderValue::Time(Timestamp(1_700_000_000_123)));
        e.set_header("raw", HeaderValue::Bytes(Bytes::from_static(&[0, 255, 16])));
        e.set_header(names::ROUTE_ID, "r1");
        e.set_header(names::GENERATED_ID, HeaderValue::Boolean(true));
        e
    }

    #[test]
    fn typed_headers_subject_and_text_bodies_round_trip() {
        let e = env();
        let doc: Value = serde_json::from_slice(&encode(&e)).expect("json");
        assert_eq!(doc["body"], "21.5");
        assert!(doc.get("body_encoding").is_none(), "set only for bodies that are not UTF-8");
        assert_eq!(doc["headers"]["count"], 3);
        assert_eq!(doc["headers"]["ok"], true);
        assert_eq!(doc["headers"]["at"]["time_ms"], 1_700_000_000_123i64);
        assert_eq!(doc["headers"]["raw"]["base64"], "AP8Q");
        assert!(doc["headers"].get(names::ROUTE_ID).is_none());
        assert!(doc["headers"].get(names::GENERATED_ID).is_none());

        let mut back = Envelope::new("other", encode(&e));
        assert_eq!(unpack(&mut back), (Unpacked::Wire, None));
        assert_eq!(back.payload().as_ref(), b"21.5");
        assert_eq!(back.subject.as_deref(), Some("reading.taken"));
        for name in ["kind", "count", "ratio", "ok", "at", "raw"] {
            assert_eq!(back.headers.get(name), e.headers.get(name), "{name}");
        }
        assert!(!back.headers.contains_key(names::SUBJECT_CARRIER));
    }

    #[test]
    fn a_documents_reserved_headers_are_the_publishers_and_an_untrusted_route_strips_them() {
        let doc = br#"{"headers": {"x-bridge.correlation-id": "forged", "x-bridge.correlation-data": "Zm9yZ2Vk",
            "x-bridge.content-type": "forged/type", "x-bridge.generated-id": true, "kind": "temp"}, "body": "x"}"#;
        let mut e = Envelope::new("id-1", &doc[..]);
        e.derive_header(names::CONTENT_TYPE, CONTENT_TYPE);
        e.derive_header(names::CORRELATION_ID, "native");
        assert_eq!(unpack(&mut e).0, Unpacked::Wire);
        assert!(e.derived_header(names::CONTENT_TYPE).is_none(), "the wrapper's content type is not the body's");
        crate::headers::apply_ingress_rules(&mut e, "r", "in", false);
        assert_eq!(e.text_header(names::CORRELATION_ID), Some("native"));
        for name in [names::CORRELATION_DATA, names::CONTENT_TYPE, names::GENERATED_ID] {
            assert!(!e.headers.contains_key(name), "{name} was forged through the document");
        }
        assert_eq!(e.text_header("kind"), Some("temp"));
    }

    #[test]
    fn binary_bodies_are_base64_with_body_encoding() {
        let e = Envelope::new("b", &[0u8, 159, 146, 150][..]);
        let doc: Value = serde_json::from_slice(&encode(&e)).expect("json");
        assert_eq!(doc["body_encoding"], "base64");
        let mut back = Envelope::new("b", encode(&e));
        unpack(&mut back);
        assert_eq!(back.payload().as_ref(), &[0u8, 159, 146, 150]);
    }

    #[test]
    fn what_is_not_the_format_is_a_plain_body() {
        for plain in [
            &b"hello"[..],
            b"",
            b"[1,2]",
            b"{\"temperature\": 21}",
            b"{\"body\": \"x\", \"extra\": 1}",
            b"{not json",
            &[0xff, 0xfe],
        ] {
            assert_eq!(decode(plain), Decoded::Plain, "{:?}", String::from_utf8_lossy(plain));
            let mut e = Envelope::new("p", Bytes::copy_from_slice(plain));
            assert_eq!(unpack(&mut e).0, Unpacked::Plain);
            assert_eq!(e.payload().as_ref(), plain);
        }
        // Headers are optional, as in seed 004.
        assert!(matches!(decode(b"{\"body\": \"x\"}"), Decoded::Wire { .. }));
    }

    #[test]
    fn a_broken_document_is_malformed_with_the_reason() {
        for (doc, why) in [
            (&b"{\"body\": 5}"[..], "body is not a string"),
            (b"{\"body\": \"x\", \"body_encoding\": \"hex\"}", "body_encoding"),
            (b"{\"body\": \"***\", \"body_encoding\": \"base64\"}", "not base64"),
            (b"{\"body\": \"x\", \"headers\": [1]}", "headers is not an object"),
            (b"{\"body\": \"x\", \"headers\": {\"a\": null}}", "header a: null"),
            (b"{\"body\": \"x\", \"headers\": {\"a\": {\"b\": 1}}}", "header a: an object"),
            (b"{\"body\": \"x\", \"headers\": {\"t\": {\"time_ms\": \"soon\"}}}", "time_ms"),
        ] {
            match decode(doc) {
                Decoded::Malformed(reason) => assert!(reason.contains(why), "{reason:?} names {why:?}"),
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(doc)),
            }
        }
    }

    #[test]
    fn packing_keeps_headers_for_the_address_and_marks_json() {
        let e = env();
        let packed = pack(&e);
        assert_eq!(packed.text_header("kind"), Some("temp"));
        assert_eq!(packed.text_header(names::CONTENT_TYPE), Some(CONTENT_TYPE));
        assert_eq!(packed.id, e.id);
        let mut back = Envelope::new("x", packed.payload().clone());
        unpack(&mut back);
        assert_eq!(back.payload(), e.payload());
    }
}
