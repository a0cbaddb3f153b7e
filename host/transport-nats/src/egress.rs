//! Envelope -> NATS publish.
//!
//! - The subject: the binding's address, or the sender's `subject` when it
//!   is empty, a template whose `{name}` values must each be one subject
//!   token ([`ferry_core::address::subject_token`]): a header cannot add
//!   tokens or wildcards.
//! - `Nats-Msg-Id` is the envelope's identity, so a stream's duplicate
//!   window drops ferry's own resends.
//! - Headers go out as text (a time as epoch milliseconds, bytes as
//!   base64), but for the bridge-owned `nats.*` ones, private bookkeeping
//!   and NATS's own `Nats-…` names, which steer the server
//!   (`Nats-Rollup` would purge a stream) and are never taken from a
//!   message. A header NATS cannot carry (a name with a space, `:` or a
//!   non-ASCII character, a value with a line break) is left out and
//!   counted.
//! - The content type goes out as `Content-Type`, the subject as
//!   `gobridge.subject`.

use crate::config::NatsSenderConfig;
use bytes::Bytes;
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::text_of;
use ferry_envelope::{Envelope, names};

use crate::ingress::{CONTENT_TYPE, MSG_ID, OWNED, is_nats_header};

/// A publish ready for the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub subject: String,
    /// In order; `Nats-Msg-Id` first.
    pub headers: Vec<(String, String)>,
    pub payload: Bytes,
    /// Headers left out because NATS cannot carry them.
    pub dropped: u32,
}

/// Whether NATS can carry `name` as a header name: printable ASCII without
/// `:`, not empty.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic() && c != ':')
}

/// Whether NATS can carry `value` as a header value: no line breaks.
pub fn valid_value(value: &str) -> bool {
    !value.contains(['\r', '\n'])
}

/// The subject of `address` (or `default` when it is empty) for `envelope`.
pub fn resolve_subject(address: &str, default: Option<&str>, envelope: &Envelope) -> Result<String, TransportError> {
    let template = if address.is_empty() {
        default.ok_or_else(|| TransportError::permanent("binding has no address and the sender has no subject"))?
    } else {
        address
    };
    let subject = ferry_core::address::expand_subject(template, envelope)?;
    if let Some(why) = crate::config::subject_problem(&subject, false) {
        return Err(TransportError::unroutable(why));
    }
    Ok(subject)
}

/// Headers never taken from the envelope's own.
fn skipped(name: &str) -> bool {
    OWNED.contains(&name) || name == names::SUBJECT_CARRIER || names::is_private(name)
}

/// The publish a sender with `config` makes of `msg`.
pub fn prepare(config: &NatsSenderConfig, msg: &OutboundMessage) -> Result<Outgoing, TransportError> {
    let envelope = &msg.envelope;
    let subject = resolve_subject(&msg.address, config.subject.as_deref(), envelope)?;
    let mut headers: Vec<(String, String)> = Vec::with_capacity(envelope.headers.len() + 2);
    let mut dropped = 0;
    let mut put = |name: &str, value: String| {
        if valid_name(name) && valid_value(&value) {
            headers.push((name.to_owned(), value));
        } else {
            dropped += 1;
        }
    };
    put(MSG_ID, envelope.id.clone());
    let content_type = envelope.headers.get(names::CONTENT_TYPE).map(text_of);
    let has_content_type = content_type.is_some();
    if let Some(ct) = content_type {
        put(CONTENT_TYPE, ct);
    }
    if let Some(subject) = &envelope.subject {
        put(names::SUBJECT_CARRIER, subject.clone());
    }
    let mut control = 0;
    for (name, value) in envelope.headers.iter() {
        if skipped(name) || (has_content_type && name.eq_ignore_ascii_case(CONTENT_TYPE)) {
            continue;
        }
        if is_nats_header(name) {
            control += 1;
            continue;
        }
        put(name.as_str(), text_of(value));
    }
    let dropped = dropped + control;
    Ok(Outgoing { subject, headers, payload: envelope.payload().clone(), dropped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_envelope::HeaderValue;

    fn config() -> NatsSenderConfig {
        toml::from_str("url = \"nats://127.0.0.1:4222\"\nsubject = \"out.default\"").expect("config")
    }

    fn header<'a>(o: &'a Outgoing, name: &str) -> Option<&'a str> {
        o.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn identity_subject_and_typed_headers_go_out_as_text() {
        let mut e = Envelope::new("m-1", &b"{}"[..]);
        e.subject = Some("reading".into());
        e.set_header("kind", "temp");
        e.set_header("n", HeaderValue::Integer(3));
        e.set_header("at", HeaderValue::Time(ferry_envelope::Timestamp(1_700_000_000_123)));
        e.set_header(names::CONTENT_TYPE, "application/json");
        let o = prepare(&config(), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(o.subject, "out.default");
        assert_eq!(o.headers[0], (MSG_ID.to_owned(), "m-1".to_owned()));
        assert_eq!(header(&o, "kind"), Some("temp"));
        assert_eq!(header(&o, "n"), Some("3"));
        assert_eq!(header(&o, "at"), Some("1700000000123"));
        assert_eq!(header(&o, "Content-Type"), Some("application/json"));
        assert_eq!(header(&o, "gobridge.subject"), Some("reading"));
        assert_eq!(o.dropped, 0);
    }

    #[test]
    fn nats_control_headers_from_another_transport_never_go_out() {
        let mut e = Envelope::new("m-1", &b""[..]);
        e.set_header("Nats-Rollup", "all");
        e.set_header("nats-expected-last-sequence", "1");
        e.set_header("Nats-Msg-Id", "forged");
        e.set_header("nats.subject", "from.the.source");
        let o = prepare(&config(), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(o.headers, vec![(MSG_ID.to_owned(), "m-1".to_owned())]);
        assert_eq!(o.dropped, 3);
    }

    #[test]
    fn headers_nats_cannot_carry_are_counted() {
        let mut e = Envelope::new("m-1", &b""[..]);
        e.set_header("has space", "x");
        e.set_header("colon:name", "x");
        e.set_header("line", "a\r\nInjected: yes");
        e.set_header("fine", "ok");
        let o = prepare(&config(), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(o.dropped, 3);
        assert_eq!(header(&o, "fine"), Some("ok"));
        assert!(o.headers.iter().all(|(n, v)| valid_name(n) && valid_value(v)));
    }

    #[test]
    fn subject_templates_take_one_token_per_header() {
        let mut e = Envelope::new("m-1", &b""[..]);
        e.set_header("region", "eu");
        assert_eq!(
            prepare(&config(), &OutboundMessage::new(e.clone(), "orders.{region}")).expect("ok").subject,
            "orders.eu"
        );
        e.set_header("region", "eu.admin");
        assert!(prepare(&config(), &OutboundMessage::new(e.clone(), "orders.{region}")).is_err());
        assert!(prepare(&config(), &OutboundMessage::new(e, "orders.*")).is_err(), "a wildcard subject");
    }
}
