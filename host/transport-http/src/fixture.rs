//! Fixture messages for `ferry test`: an HTTP request as a test file writes
//! it (`headers`, `payload` or `payload_base64`), turned into an envelope by
//! the receiver's own mapping, and the request a sender makes of an
//! outbound message, written as JSON.

use std::collections::BTreeMap;

use ferry_config::{HttpReceiverConfig, HttpSenderConfig};
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
