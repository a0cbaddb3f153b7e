//! {{name}}: a ferry transport component (world `transport`): a receiver
//! and a sender for an HTTP polling queue. Change `poll`, `settle` and
//! `send` to speak your system's protocol.
//!
//! The queue it speaks to as written:
//! - receive: `GET {url}` answers `{"messages": [{"id", "content"}]}`
//!   (content in base64); a message stays invisible for the queue's
//!   timeout;
//! - acknowledge: `DELETE {url}/{id}`; a release leaves it to come back;
//! - send: `POST {url}` with `{"content": "<base64>"}`.
//!
//! Config (a `type = "component"` receiver's or sender's `config`):
//!
//! ```toml
//! [receivers.orders]
//! type = "component"
//! component = "{{name}}"
//! allow_hosts = ["queue.internal:443"]
//! config = { url = "https://queue.internal/v1/queues/orders/messages", token = "${QUEUE_TOKEN}" }
//! ```
//!
//! Build the component with `./build` (it writes `{{name}}.wasm`); run
//! the tests with `cargo test`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ferry_plugin_sdk::transport::{self, Outbound, Received, ReceiverInfo, SendResult, Settlement};
use ferry_plugin_sdk::{HeaderValue, Plugin, RetryAfter};
use serde::Deserialize;

/// The most of one answer read.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The queue's messages URL.
    url: String,
    /// Sent as `Authorization: Bearer …` when given.
    #[serde(default)]
    token: Option<String>,
}

pub struct Queue(Config);

impl Plugin for Queue {
    type Config = Config;

    fn init(config: Config) -> Result<Self, String> {
        if !(config.url.starts_with("http://") || config.url.starts_with("https://")) {
            return Err(format!("url: {:?} is not an http(s) URL", config.url));
        }
        let url = config.url.trim_end_matches('/').to_owned();
        Ok(Self(Config { url, ..config }))
    }
}

/// The URL of one message: its id as exactly one path segment. An id that
/// cannot be one (empty, `.`, `..`) names no message, so a queue that hands
/// one out cannot make an acknowledgement reach another URL.
pub fn message_url(base: &str, id: &str) -> Result<String, String> {
    if matches!(id, "" | "." | "..") {
        return Err(format!("message id {id:?} names no message"));
    }
    let mut segment = String::new();
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            segment.push(char::from(b));
        } else {
            segment.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(format!("{base}/{segment}"))
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    messages: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    id: String,
    content: String,
}

/// A queue message as the host gets it; `None` for one whose id names no
/// message (left on the queue).
fn received(base: &str, item: Item) -> Option<Received> {
    message_url(base, &item.id).ok()?;
    let payload = STANDARD.decode(item.content.trim()).unwrap_or_else(|_| item.content.into_bytes());
    let mut message = transport::envelope(item.id.clone(), payload);
    message.headers.push(("{{name}}.message-id".into(), HeaderValue::Text(item.id.clone())));
    // The queue does not count deliveries: the host holds a failed message
    // and retries it in process.
    Some(Received { token: item.id, message, redeliveries: None })
}

impl Queue {
    fn call(&self, method: &str, url: &str, body: Option<String>) -> Result<(u16, Vec<u8>), String> {
        let auth = self.0.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        request(method, url, &headers, body.unwrap_or_default().as_bytes())
    }
}

#[cfg(target_arch = "wasm32")]
fn request(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    transport::http::request(method, url, headers, body, MAX_ANSWER_BYTES).map(|r| (r.status, r.body))
}

#[cfg(not(target_arch = "wasm32"))]
fn request(method: &str, url: &str, _: &[(&str, &str)], _: &[u8]) -> Result<(u16, Vec<u8>), String> {
    Err(format!("{method} {url}: no network outside a component"))
}

impl transport::Receiver for Queue {
    fn info(&self) -> ReceiverInfo {
        // A token is the message id: any instance can settle it, so the
        // host settles beside the polling instance.
        ReceiverInfo { extend_every_ms: None, settle_anywhere: true }
    }

    fn poll(&self, max: u32, _wait_ms: u32) -> Result<Vec<Received>, String> {
        let mut taken = Vec::new();
        while taken.len() < max as usize {
            let (status, body) = match self.call("GET", &self.0.url, None) {
                Ok(answer) => answer,
                Err(_) if !taken.is_empty() => break,
                Err(e) => return Err(e),
            };
            if !(200..300).contains(&status) {
                if !taken.is_empty() {
                    break;
                }
                return Err(format!("GET answered {status}"));
            }
            let answer: Answer = serde_json::from_slice(&body).map_err(|e| format!("unreadable answer: {e}"))?;
            if answer.messages.is_empty() {
                break;
            }
            let room = max as usize - taken.len();
            taken.extend(answer.messages.into_iter().take(room).filter_map(|m| received(&self.0.url, m)));
        }
        Ok(taken)
    }

    fn settle(&self, token: &str, settlement: Settlement) -> Result<(), String> {
        if let Settlement::Release(_) = settlement {
            return Ok(()); // back after the queue's timeout
        }
        let (status, _) = self.call("DELETE", &message_url(&self.0.url, token)?, None)?;
        if (200..300).contains(&status) || status == 404 { Ok(()) } else { Err(format!("DELETE answered {status}")) }
    }
}

impl transport::Sender for Queue {
    fn send(&self, batch: Vec<Outbound>) -> Vec<SendResult> {
        batch
            .iter()
            .map(|out| {
                let body = serde_json::json!({ "content": STANDARD.encode(&out.message.payload) }).to_string();
                match self.call("POST", &self.0.url, Some(body)) {
                    Ok((status, _)) if (200..300).contains(&status) => SendResult::Accepted,
                    Ok((status, _)) if status == 408 || status == 429 || status >= 500 => {
                        let reason = format!("POST answered {status}");
                        // The queue takes nothing now (not "this message
                        // failed"): the host holds messages for it and
                        // spends no replay budget.
                        if matches!(status, 408 | 429 | 502 | 503 | 504) {
                            transport::unavailable(&reason);
                        }
                        SendResult::Transient(RetryAfter { delay_ms: 1000, reason })
                    }
                    Ok((status, body)) => {
                        let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
                        SendResult::Permanent(format!("POST answered {status}: {text}"))
                    }
                    // Nothing reached the queue.
                    Err(e) => {
                        transport::unavailable(&e);
                        SendResult::Transient(RetryAfter { delay_ms: 1000, reason: e })
                    }
                }
            })
            .collect()
    }
}

ferry_plugin_sdk::export_transport!(Queue, Queue);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_checked() {
        let open = |json: &str| ferry_plugin_sdk::start::<Queue>(json).map(|_| ());
        assert!(open(r#"{"url": "http://q.test/messages/", "token": "k"}"#).is_ok());
        assert!(open(r#"{"url": "ftp://q.test"}"#).expect_err("scheme").starts_with("url:"));
        assert!(open(r#"{"url": "http://q.test", "other": 1}"#).is_err());
    }

    #[test]
    fn a_message_id_is_one_path_segment() {
        assert_eq!(message_url("http://q.test/m", "a-1").expect("plain"), "http://q.test/m/a-1");
        assert_eq!(message_url("http://q.test/m", "../x").expect("encoded"), "http://q.test/m/..%2Fx");
        for id in ["", ".", ".."] {
            assert!(message_url("http://q.test/m", id).is_err(), "{id:?}");
        }
    }

    #[test]
    fn content_is_base64() {
        let item = Item { id: "m-1".into(), content: STANDARD.encode("hello") };
        let r = received("http://q.test/m", item).expect("received");
        assert_eq!((r.token.as_str(), r.message.payload.as_slice()), ("m-1", b"hello".as_slice()));
        assert!(received("http://q.test/m", Item { id: "..".into(), content: String::new() }).is_none());
    }
}
