//! Headers -> SQS message attributes, and the MD5 digests SQS reports.

use std::collections::BTreeMap;

use ferry_core::TransportError;
use ferry_envelope::{Envelope, HeaderValue, names};
use md5::{Digest, Md5};

/// SQS's limit of message attributes per message (Subject included).
pub const MAX_ATTRIBUTES: usize = 10;
/// The attribute that carries the logical subject.
pub const SUBJECT: &str = "Subject";

/// One attribute value as SQS types it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    String(String),
    Number(String),
    Binary(Vec<u8>),
}

impl AttributeValue {
    pub fn data_type(&self) -> &'static str {
        match self {
            AttributeValue::String(_) => "String",
            AttributeValue::Number(_) => "Number",
            AttributeValue::Binary(_) => "Binary",
        }
    }

    fn value_len(&self) -> usize {
        match self {
            AttributeValue::String(s) | AttributeValue::Number(s) => s.len(),
            AttributeValue::Binary(b) => b.len(),
        }
    }

    /// Bytes this attribute costs against `max_message_bytes`: its name,
    /// type and value.
    pub fn cost(&self, name: &str) -> usize {
        name.len() + self.data_type().len() + self.value_len()
    }
}

/// The attributes chosen for one message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selection {
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Headers that qualified but were left out (SQSDroppedAttributes).
    pub dropped: u32,
}

/// Priority group of a header: 0 trace and idempotency, 1 everything
/// else, 2 bridge-to-bridge.
fn group(name: &str) -> u8 {
    match name {
        "traceparent" | "tracestate" | names::IDEMPOTENCY_KEY => 0,
        names::CORRELATION_ID
        | names::CAUSATION_ID
        | names::TENANT_ID
        | names::FORWARDED_FROM
        | names::FORWARDED_HOP => 2,
        _ => 1,
    }
}

/// Whether every SQS accepts `name` as an attribute name: ASCII letters
/// and digits, `-`, `_`, `.`, as AWS documents it and emulators (moto,
/// LocalStack) check it. What a sender sends.
pub fn valid_name(name: &str) -> bool {
    name_shape(name, char::is_ascii_alphanumeric)
}

/// Whether AWS itself takes `name`: it also takes letters and digits
/// outside ASCII (`attr.1øßä`), whatever its documentation says. What the
/// SQS endpoint accepts, since it answers as AWS does.
pub fn valid_name_as_aws_takes_it(name: &str) -> bool {
    name_shape(name, |c: &char| c.is_alphanumeric())
}

fn name_shape(name: &str, letter: impl Fn(&char) -> bool) -> bool {
    let lower = name.to_ascii_lowercase();
    !name.is_empty()
        && name.len() <= 256
        && name.chars().all(|c| letter(&c) || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
}

/// Whether every character is one SQS accepts in a body or string value:
/// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
pub fn valid_text(s: &str) -> bool {
    s.chars().all(
        |c| matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..),
    )
}

fn to_attribute(value: &HeaderValue) -> Option<AttributeValue> {
    Some(match value {
        HeaderValue::Text(s) => AttributeValue::String(s.clone()),
        HeaderValue::Integer(i) => AttributeValue::Number(i.to_string()),
        HeaderValue::Float(f) if f.is_finite() => AttributeValue::Number(f.to_string()),
        HeaderValue::Float(f) => AttributeValue::String(f.to_string()),
        HeaderValue::Boolean(b) => AttributeValue::String(b.to_string()),
        HeaderValue::Time(t) => AttributeValue::Number(t.as_millis().to_string()),
        HeaderValue::Bytes(b) => {
            if b.is_empty() {
                return None;
            }
            AttributeValue::Binary(b.to_vec())
        }
    })
}

/// The message body: the payload as SQS text, or a permanent error.
pub fn body(envelope: &Envelope) -> Result<String, TransportError> {
    let text = std::str::from_utf8(envelope.payload())
        .map_err(|_| TransportError::permanent("payload is not UTF-8 text; SQS bodies are text"))?;
    if text.is_empty() {
        return Err(TransportError::permanent("SQS refuses an empty body"));
    }
    if !valid_text(text) {
        return Err(TransportError::permanent("payload contains characters SQS refuses"));
    }
    Ok(text.to_owned())
}

/// Chooses the attributes for `envelope` whose body is `body_len` bytes:
/// Subject first (when the envelope has one), then the headers by priority
/// group and name, keeping each one that still fits the ten-attribute and
/// `max_bytes` budgets. A header that does not fit is skipped; a later,
/// smaller one may still be kept. Private bookkeeping headers are never
/// candidates; a header SQS cannot carry counts as dropped.
pub fn select(envelope: &Envelope, body_len: usize, max_bytes: usize) -> Selection {
    let mut selection = Selection::default();
    let mut budget = max_bytes.saturating_sub(body_len);
    let mut keep = |selection: &mut Selection, name: &str, value: AttributeValue| {
        let cost = value.cost(name);
        if selection.attributes.len() < MAX_ATTRIBUTES && cost <= budget {
            budget -= cost;
            selection.attributes.insert(name.to_owned(), value);
        } else {
            selection.dropped += 1;
        }
    };
    if let Some(subject) = &envelope.subject {
        if valid_text(subject) {
            keep(&mut selection, SUBJECT, AttributeValue::String(subject.clone()));
        } else {
            selection.dropped += 1;
        }
    }
    let mut candidates: Vec<(u8, &str, &HeaderValue)> = envelope
        .headers
        .iter()
        .filter(|(name, _)| !names::is_private(name))
        .filter(|(name, _)| !(envelope.subject.is_some() && name.as_str() == SUBJECT))
        .map(|(name, value)| (group(name), name.as_str(), value))
        .collect();
    candidates.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    for (_, name, value) in candidates {
        match to_attribute(value) {
            Some(v)
                if valid_name(name) && !matches!(&v, AttributeValue::String(s) if !valid_text(s) || s.is_empty()) =>
            {
                keep(&mut selection, name, v)
            }
            _ => selection.dropped += 1,
        }
    }
    selection
}

/// Hex MD5 of the body, as SQS reports it in MD5OfMessageBody.
pub fn md5_of_body(body: &str) -> String {
    hex(&Md5::digest(body.as_bytes()))
}

/// AWS's MD5OfMessageAttributes: over the attributes sorted by name, each
/// as length-prefixed name, length-prefixed data type, a transport byte
/// (1 string/number, 2 binary) and the length-prefixed value.
pub fn md5_of_attributes<'a>(attributes: impl IntoIterator<Item = (&'a str, &'a str, AttrBytes<'a>)>) -> String {
    let mut sorted: Vec<_> = attributes.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    fn field(md5: &mut Md5, bytes: &[u8]) {
        md5.update((bytes.len() as u32).to_be_bytes());
        md5.update(bytes);
    }
    let mut md5 = Md5::new();
    for (name, data_type, value) in sorted {
        field(&mut md5, name.as_bytes());
        field(&mut md5, data_type.as_bytes());
        match value {
            AttrBytes::Text(s) => {
                md5.update([1u8]);
                field(&mut md5, s.as_bytes());
            }
            AttrBytes::Binary(b) => {
                md5.update([2u8]);
                field(&mut md5, b);
            }
        }
    }
    hex(&md5.finalize())
}

/// An attribute value as the MD5 sees it.
#[derive(Debug, Clone, Copy)]
pub enum AttrBytes<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
}

/// MD5 of our own selection, to compare with what SQS returns.
pub fn md5_of_selection(selection: &Selection) -> Option<String> {
    if selection.attributes.is_empty() {
        return None;
    }
    Some(md5_of_attributes(selection.attributes.iter().map(|(name, v)| {
        let bytes = match v {
            AttributeValue::String(s) | AttributeValue::Number(s) => AttrBytes::Text(s),
            AttributeValue::Binary(b) => AttrBytes::Binary(b),
        };
        (name.as_str(), v.data_type(), bytes)
    })))
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_envelope::Timestamp;

    fn envelope_with(headers: &[(&str, HeaderValue)]) -> Envelope {
        let mut e = Envelope::new("id", &b"body"[..]);
        for (k, v) in headers {
            e.set_header(*k, v.clone());
        }
        e
    }

    fn text(s: &str) -> HeaderValue {
        HeaderValue::Text(s.into())
    }

    #[test]
    fn fourteen_headers_keep_trace_first_then_alphabetical_then_bridge_headers() {
        let mut e = envelope_with(&[
            ("traceparent", text("00-abc-def-01")),
            ("tracestate", text("k=v")),
            ("x-bridge.idempotency-key", text("idem")),
            ("x-bridge.correlation-id", text("corr")),
            ("x-bridge.tenant-id", text("acme")),
            ("mqtt.message-id", text("m-1")),
            ("zeta", text("z")),
            ("alpha", text("a")),
            ("beta", text("b")),
            ("gamma", text("g")),
            ("delta", text("d")),
            ("mqtt.qos", HeaderValue::Integer(1)),
            ("x-bridge.route-id", text("private")),
            ("x-bridge.source-id", text("private")),
        ]);
        e.subject = Some("order.created".into());
        let s = select(&e, 4, 1 << 20);
        let kept: Vec<&str> = s.attributes.keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            [
                "Subject",
                "alpha",
                "beta",
                "delta",
                "gamma",
                "mqtt.message-id",
                "mqtt.qos",
                "traceparent",
                "tracestate",
                "x-bridge.idempotency-key"
            ]
        );
        // zeta, correlation-id and tenant-id qualified but did not fit; the
        // private route/source ids were never candidates.
        assert_eq!(s.dropped, 3);
        assert_eq!(s.attributes["mqtt.qos"], AttributeValue::Number("1".into()));
    }

    #[test]
    fn the_byte_budget_skips_a_large_header_but_keeps_a_later_small_one() {
        let e = envelope_with(&[("a-big", text(&"x".repeat(500))), ("b-small", text("s"))]);
        let s = select(&e, 1000, 1100);
        assert!(!s.attributes.contains_key("a-big"));
        assert_eq!(s.attributes["b-small"], AttributeValue::String("s".into()));
        assert_eq!(s.dropped, 1);
        // Exactly at the limit still fits: 7 (name) + 6 (type) + 1 (value).
        let s = select(&envelope_with(&[("b-small", text("s"))]), 1086, 1100);
        assert_eq!(s.attributes.len(), 1);
        let s = select(&envelope_with(&[("b-small", text("s"))]), 1087, 1100);
        assert_eq!(s.attributes.len(), 0);
    }

    #[test]
    fn headers_sqs_cannot_carry_are_dropped_and_counted() {
        let e = envelope_with(&[
            ("AWS.reserved", text("x")),
            ("bad name", text("x")),
            ("ctl", text("a\u{1}b")),
            ("empty-bytes", HeaderValue::Bytes(Default::default())),
            ("when", HeaderValue::Time(Timestamp(5))),
            ("raw", HeaderValue::Bytes(vec![0u8, 1].into())),
        ]);
        let s = select(&e, 4, 1 << 20);
        assert_eq!(s.attributes.keys().collect::<Vec<_>>(), ["raw", "when"]);
        assert_eq!(s.attributes["when"], AttributeValue::Number("5".into()));
        assert_eq!(s.dropped, 4);
    }

    #[test]
    fn bodies_must_be_text_sqs_accepts() {
        let mut e = Envelope::new("id", &b"ok"[..]);
        assert_eq!(body(&e).ok().as_deref(), Some("ok"));
        e.set_payload(vec![0xff, 0xfe]);
        assert!(!body(&e).expect_err("not utf-8").is_transient());
        e.set_payload(&b"a\x00b"[..]);
        assert!(!body(&e).expect_err("NUL").is_transient());
    }

    #[test]
    fn md5_digests_match_aws_reference_values() {
        // Reference digests computed with the AWS algorithm.
        assert_eq!(md5_of_body("hello"), "5d41402abc4b2a76b9719d911017c592");
        let one = md5_of_attributes([("a", "String", AttrBytes::Text("b"))]);
        assert_eq!(one, reference(&[("a", "String", 1, b"b")]));
        let mixed =
            md5_of_attributes([("z", "Binary", AttrBytes::Binary(&[1, 2])), ("n", "Number", AttrBytes::Text("42"))]);
        assert_eq!(mixed, reference(&[("n", "Number", 1, b"42"), ("z", "Binary", 2, &[1, 2])]));
    }

    /// An independent spelling of the algorithm, for the test above.
    fn reference(sorted: &[(&str, &str, u8, &[u8])]) -> String {
        let mut buf = Vec::new();
        for (name, ty, transport, value) in sorted {
            buf.extend((name.len() as u32).to_be_bytes());
            buf.extend(name.as_bytes());
            buf.extend((ty.len() as u32).to_be_bytes());
            buf.extend(ty.as_bytes());
            buf.push(*transport);
            buf.extend((value.len() as u32).to_be_bytes());
            buf.extend(*value);
        }
        hex(&Md5::digest(&buf))
    }
}
