//! Envelope -> `XADD`.
//!
//! - The stream: the binding's address, or the sender's `stream` when it
//!   is empty, a template whose `{name}` values must each be one key
//!   segment ([`ferry_core::address::key_segment`]): a header cannot
//!   reach another part of the key space.
//! - Fields, in this order: the identity field, the payload field,
//!   `content_type`, `gobridge.subject`, then one field per header. Redis
//!   values are bytes, so a bytes header crosses as it is; a number, flag
//!   or time goes as text (a time as epoch milliseconds).
//! - Left out: the bridge-owned `redis.*` headers, private bookkeeping,
//!   and a header named like one of the sender's own fields (the identity
//!   field, the payload field or `content_type`), which is counted.

use crate::config::RedisStreamsSenderConfig;
use bytes::Bytes;
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{bytes_of, text_of};
use ferry_envelope::names;

use crate::ingress::{CONTENT_TYPE, OWNED};

/// An `XADD` ready for the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub stream: String,
    /// `MAXLEN ~` when the sender trims.
    pub maxlen: Option<u64>,
    pub fields: Vec<(String, Bytes)>,
    /// Headers left out because their name is one of the sender's fields.
    pub dropped: u32,
}

impl Outgoing {
    /// The command.
    pub fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.stream);
        if let Some(n) = self.maxlen {
            cmd.arg("MAXLEN").arg("~").arg(n);
        }
        cmd.arg("*");
        for (name, value) in &self.fields {
            cmd.arg(name).arg(value.as_ref());
        }
        cmd
    }
}

/// The stream of `address` (or `default` when it is empty) for `msg`.
fn resolve_stream(address: &str, default: Option<&str>, msg: &OutboundMessage) -> Result<String, TransportError> {
    let template = if address.is_empty() {
        default.ok_or_else(|| TransportError::permanent("binding has no address and the sender has no stream"))?
    } else {
        address
    };
    ferry_core::address::expand_key(template, &msg.envelope)
}

/// The `XADD` a sender with `config` makes of `msg`.
pub fn prepare(config: &RedisStreamsSenderConfig, msg: &OutboundMessage) -> Result<Outgoing, TransportError> {
    let envelope = &msg.envelope;
    let stream = resolve_stream(&msg.address, config.stream.as_deref(), msg)?;
    let mut fields: Vec<(String, Bytes)> = Vec::with_capacity(envelope.headers.len() + 4);
    fields.push((config.id_field.clone(), Bytes::from(envelope.id.clone())));
    fields.push((config.payload_field.clone(), envelope.payload().clone()));
    if let Some(ct) = envelope.headers.get(names::CONTENT_TYPE) {
        fields.push((CONTENT_TYPE.to_owned(), Bytes::from(text_of(ct))));
    }
    if let Some(subject) = &envelope.subject {
        fields.push((names::SUBJECT_CARRIER.to_owned(), Bytes::from(subject.clone())));
    }
    let ours = [config.id_field.as_str(), config.payload_field.as_str(), CONTENT_TYPE];
    let mut dropped = 0;
    for (name, value) in envelope.headers.iter() {
        let name = name.as_str();
        if OWNED.contains(&name) || name == names::SUBJECT_CARRIER || names::is_private(name) {
            continue;
        }
        if ours.contains(&name) {
            dropped += 1;
            continue;
        }
        fields.push((name.to_owned(), bytes_of(value)));
    }
    Ok(Outgoing { stream, maxlen: config.maxlen, fields, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_envelope::{Envelope, HeaderValue, Timestamp};

    fn config(extra: &str) -> RedisStreamsSenderConfig {
        toml::from_str(&format!("url = \"redis://127.0.0.1\"\nstream = \"out\"\n{extra}")).expect("config")
    }

    fn field<'a>(o: &'a Outgoing, name: &str) -> Option<&'a [u8]> {
        o.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_ref())
    }

    #[test]
    fn identity_payload_subject_and_typed_headers_become_fields() {
        let mut e = Envelope::new("m-1", &b"{}"[..]);
        e.subject = Some("reading".into());
        e.set_header("kind", "temp");
        e.set_header("n", HeaderValue::Integer(3));
        e.set_header("at", HeaderValue::Time(Timestamp(1_700_000_000_123)));
        e.set_header("raw", HeaderValue::Bytes(Bytes::from_static(&[0xff, 0])));
        e.set_header(names::CONTENT_TYPE, "application/json");
        let o = prepare(&config(""), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(o.stream, "out");
        assert_eq!(o.fields[0], ("message_id".to_owned(), Bytes::from_static(b"m-1")));
        assert_eq!(o.fields[1], ("payload".to_owned(), Bytes::from_static(b"{}")));
        assert_eq!(field(&o, "kind"), Some(&b"temp"[..]));
        assert_eq!(field(&o, "n"), Some(&b"3"[..]));
        assert_eq!(field(&o, "at"), Some(&b"1700000000123"[..]));
        assert_eq!(field(&o, "raw"), Some(&[0xff, 0][..]), "bytes cross as they are");
        assert_eq!(field(&o, "content_type"), Some(&b"application/json"[..]));
        assert_eq!(field(&o, "gobridge.subject"), Some(&b"reading"[..]));
        assert_eq!(o.dropped, 0);
    }

    #[test]
    fn owned_and_colliding_headers_never_go_out() {
        let mut e = Envelope::new("m-1", &b"real"[..]);
        e.set_header("redis.stream", "from.the.source");
        e.set_header("payload", "forged payload");
        e.set_header("message_id", "forged id");
        let o = prepare(&config(""), &OutboundMessage::new(e, "")).expect("prepared");
        assert_eq!(o.fields.len(), 2, "{:?}", o.fields);
        assert_eq!(field(&o, "payload"), Some(&b"real"[..]));
        assert_eq!(field(&o, "message_id"), Some(&b"m-1"[..]));
        assert_eq!(o.dropped, 2);
    }

    #[test]
    fn maxlen_trims_and_fields_are_renamed() {
        let o = prepare(
            &config("maxlen = 1000\npayload_field = \"body\"\nid_field = \"id\""),
            &OutboundMessage::new(Envelope::new("m-1", &b"x"[..]), ""),
        )
        .expect("prepared");
        assert_eq!(o.maxlen, Some(1000));
        assert_eq!(field(&o, "body"), Some(&b"x"[..]));
        assert_eq!(field(&o, "id"), Some(&b"m-1"[..]));
        let packed = o.command().get_packed_command();
        let text = String::from_utf8_lossy(&packed);
        assert!(text.contains("MAXLEN\r\n$1\r\n~\r\n$4\r\n1000"), "{text}");
    }

    #[test]
    fn stream_templates_take_one_segment_per_header() {
        let mut e = Envelope::new("m-1", &b""[..]);
        e.set_header("tenant", "acme");
        let o = prepare(&config(""), &OutboundMessage::new(e.clone(), "events:{tenant}")).expect("ok");
        assert_eq!(o.stream, "events:acme");
        e.set_header("tenant", "acme:admin");
        assert!(prepare(&config(""), &OutboundMessage::new(e, "events:{tenant}")).is_err());
    }
}
