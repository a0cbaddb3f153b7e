//! Fixture messages for `ferry test`: an HTTP request as a test file writes
//! it (`headers`, `payload` or `payload_base64`), turned into an envelope by
//! the receiver's own mapping, and the request a sender makes of an
//! outbound message, written as JSON.

use std::collections::BTreeMap;

use crate::config::{HttpReceiverConfig, HttpSenderConfig, SimplemqReceiverConfig, SimplemqSenderConfig};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::{self, Admitted, View, toml_value::Value as Toml};
use ferry_envelope::Timestamp;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::json;

use crate::receiver::to_envelope;
use crate::sender::request_headers;

/// A request as the receiver gets it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
}

/// The envelope the receiver makes of `input`; a malformed wire-format
/// body is refused as the receiver refuses it (400).
pub fn receive(input: Toml, config: &HttpReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = Input::deserialize(input).map_err(|e| format!("http input: {e}"))?;
    let body = wire::payload_of(input.payload.as_deref(), input.payload_base64.as_deref())?;
    let mut headers = HeaderMap::new();
    for (name, value) in &input.headers {
        let n = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|e| format!("http headers: {name:?}: {e}"))?;
        let v = HeaderValue::from_bytes(value.as_bytes()).map_err(|e| format!("http headers: {name}: {e}"))?;
        headers.append(n, v);
    }
    Ok(match to_envelope(&headers, body, config, now) {
        Ok((envelope, _)) => Admitted::Envelope(envelope),
        Err(why) => Admitted::Refused { reason: "malformed_wire_format".into(), detail: why },
    })
}

/// The request a sender with `config` makes of `msg`, as JSON: `method`,
/// `url`, `headers` and `payload` (the body).
pub fn send(config: &HttpSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let template = if msg.address.is_empty() { config.url.clone().unwrap_or_default() } else { msg.address.clone() };
    let url = ferry_core::address::expand(&template, &msg.envelope)?;
    let (headers, _) = request_headers(&msg.envelope, config);
    let shown: View =
        headers.iter().map(|(n, v)| (n.as_str().to_owned(), json!(String::from_utf8_lossy(v.as_bytes())))).collect();
    let mut v = View::new();
    v.insert("method".into(), json!(config.method));
    v.insert("url".into(), json!(url));
    v.insert("headers".into(), shown.into());
    wire::put_payload(&mut v, msg.envelope.payload());
    Ok(v)
}

/// A SimpleMQ message as the receiver gets it: `message_id`, and the
/// `content` as the queue holds it (base64), or its decoded `payload`
/// (text), or `headers` and `payload` written as the JSON wire format
/// (typed values as in other fixtures).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueInput {
    #[serde(default)]
    message_id: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    headers: Option<BTreeMap<String, Toml>>,
}

/// The envelope a SimpleMQ receiver makes of `input`.
pub fn receive_simplemq(input: Toml, config: &SimplemqReceiverConfig, now: Timestamp) -> Result<Admitted, String> {
    let input = QueueInput::deserialize(input).map_err(|e| format!("simplemq input: {e}"))?;
    let payload = match input.headers {
        Some(headers) => {
            let mut doc = View::new();
            for (name, value) in &headers {
                doc.insert(name.clone(), wire::header_value(&wire::header_of(name, value)?));
            }
            Some(json!({ "headers": doc, "body": input.payload.unwrap_or_default() }).to_string())
        }
        None => input.payload,
    };
    let content = match (input.content, payload) {
        (Some(c), None) => c,
        (None, Some(p)) => wire::base64(p.as_bytes()),
        (None, None) => String::new(),
        (Some(_), Some(_)) => return Err("simplemq input: give content or payload, not both".into()),
    };
    let id = input.message_id.unwrap_or_else(|| "0193b878-1b25-7775-87f5-9c698206a7e7".into());
    let (envelope, _) =
        crate::simplemq::to_envelope(&id, &content, now.as_millis(), config.wire_format, config.headers);
    if config.require_rabbitmq_headers && !crate::simplemq::has_destination(&envelope) {
        return Ok(Admitted::Refused {
            reason: "missing_rabbitmq_headers".into(),
            detail: "no rabbitmq.exchange and rabbitmq.routing_key".into(),
        });
    }
    Ok(Admitted::Envelope(envelope))
}

/// What a SimpleMQ sender puts on the queue for `msg`, as JSON: `queue`,
/// `content` (base64), and the content decoded: `document` when it is
/// JSON (the wire format), else `payload`.
pub fn send_simplemq(config: &SimplemqSenderConfig, msg: &OutboundMessage) -> Result<View, TransportError> {
    let queue = if msg.address.is_empty() {
        config.queue.clone().unwrap_or_default()
    } else {
        ferry_core::address::expand(&msg.address, &msg.envelope)?
    };
    let content = crate::simplemq::content_of(&msg.envelope, config.wire_format, config.headers);
    let decoded = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &content).unwrap_or_default();
    let mut v = View::new();
    v.insert("queue".into(), json!(queue));
    v.insert("content".into(), json!(content));
    match serde_json::from_slice::<serde_json::Value>(&decoded) {
        Ok(doc @ serde_json::Value::Object(_)) => {
            v.insert("document".into(), doc);
        }
        _ => wire::put_payload(&mut v, &decoded),
    }
    Ok(v)
}
