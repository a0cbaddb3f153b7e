//! SimpleMQ as a transport component: the same API calls as ferry's native
//! `type = "simplemq"` adapter, made through `wasi:http`, so that its tests
//! run against both (issue 35's proof that a transport can be a plug-in).
//!
//! - Receiver: `GET /v1/queues/{queue}/messages` takes one message at a
//!   time (it stays invisible for the queue's visibility timeout) until the
//!   queue is empty or `max` are taken; `ack` and `reject` delete it
//!   (`DELETE …/messages/{id}`), `release` leaves it to come back after its
//!   timeout, and `extend` (every `extend_every_secs`) keeps it invisible
//!   (`PUT …/messages/{id}`).
//! - Sender: `POST /v1/queues/{queue}/messages` `{"content": "<base64>"}`
//!   to the binding's address or `queue`.
//!
//! The content is the payload in base64. With the part's `wire_format =
//! "json"` the host packs and unpacks the JSON wire format around it, so
//! typed headers cross as they do through the native adapter. mqbridge's
//! header names (`headers = "mqbridge"`) are the native adapter's alone.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ferry_plugin_sdk::transport::{self, Envelope, Outbound, Received, ReceiverInfo, SendResult, Settlement};
use ferry_plugin_sdk::{HeaderValue, Plugin, RetryAfter};
use serde::Deserialize;

/// The longest content a message may have (base64 characters).
pub const MAX_CONTENT_CHARS: usize = 256_000;
/// The most of one answer read.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

fn default_api_url() -> String {
    "https://simplemq.tk1b.api.sacloud.jp".to_owned()
}

fn default_extend_every_secs() -> u64 {
    30
}

/// The receiver's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverConfig {
    pub queue: String,
    pub api_key: String,
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// How often a held message's visibility is extended. Default 30.
    #[serde(default = "default_extend_every_secs")]
    pub extend_every_secs: u64,
}

/// The sender's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SenderConfig {
    /// For messages whose binding has no address.
    #[serde(default)]
    pub queue: Option<String>,
    pub api_key: String,
    #[serde(default = "default_api_url")]
    pub api_url: String,
}

pub struct SimplemqReceiver(ReceiverConfig);

pub struct SimplemqSender(SenderConfig);

impl Plugin for SimplemqReceiver {
    type Config = ReceiverConfig;

    fn init(config: ReceiverConfig) -> Result<Self, String> {
        check_queue(&config.queue)?;
        check_api_url(&config.api_url)?;
        if config.extend_every_secs == 0 {
            return Err("extend_every_secs: must be at least 1".into());
        }
        Ok(Self(config))
    }
}

impl Plugin for SimplemqSender {
    type Config = SenderConfig;

    fn init(config: SenderConfig) -> Result<Self, String> {
        if let Some(queue) = &config.queue {
            check_queue(queue)?;
        }
        check_api_url(&config.api_url)?;
        Ok(Self(config))
    }
}

/// SimpleMQ's queue names: 5 to 64 letters, digits and single hyphens.
pub fn queue_name_ok(name: &str) -> bool {
    (5..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

fn check_queue(queue: &str) -> Result<(), String> {
    if queue_name_ok(queue) {
        Ok(())
    } else {
        Err(format!("queue: {queue:?} is not a SimpleMQ queue name (5 to 64 letters, digits and single hyphens)"))
    }
}

fn check_api_url(url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!("api_url: {url:?} is not an http(s) URL"))
    }
}

fn messages_url(api_url: &str, queue: &str) -> String {
    format!("{}/v1/queues/{queue}/messages", api_url.trim_end_matches('/'))
}

/// A message id as exactly one path segment of its own queue's URL: every
/// byte but the unreserved ones percent-encoded; an id that cannot be one
/// segment (empty, `.`, `..`) is refused.
pub fn message_url(api_url: &str, queue: &str, id: &str) -> Result<String, String> {
    if matches!(id, "" | "." | "..") {
        return Err(format!("message id {id:?} cannot name a message"));
    }
    let mut segment = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            segment.push(char::from(b));
        } else {
            segment.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(format!("{}/{segment}", messages_url(api_url, queue)))
}

/// Whether an answer's status means "try again later".
fn transient(status: u16) -> bool {
    matches!(status, 408 | 429) || status >= 500
}

/// Whether an answer says the service takes nothing now, not that it
/// refused this message: the host then holds messages for it and spends no
/// replay budget (the HTTP sender's classes).
fn says_unavailable(status: u16) -> bool {
    matches!(status, 408 | 429 | 502 | 503 | 504)
}

/// The delay an answer asks for (`Retry-After`), else 1 s.
fn retry_after_ms(response: &Answer) -> u64 {
    response.retry_after.as_deref().and_then(|v| retry_after_at(v, ferry_plugin_sdk::now())).unwrap_or(1000)
}

/// A `Retry-After` value as milliseconds to wait at `now_ms`: delay-seconds
/// or an HTTP date (one already past is no wait); `None` when it is
/// neither.
fn retry_after_at(value: &str, now_ms: i64) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    let at_ms = i64::try_from(at.as_millis()).unwrap_or(i64::MAX);
    Some(u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0))
}

/// What a call answered, as far as this component reads it.
struct Answer {
    status: u16,
    /// The `Retry-After` header, as sent.
    retry_after: Option<String>,
    body: Vec<u8>,
}

#[cfg(target_arch = "wasm32")]
fn call(method: &str, url: &str, api_key: &str, body: Option<&str>) -> Result<Answer, String> {
    let auth = format!("Bearer {api_key}");
    let mut headers = vec![("authorization", auth.as_str())];
    if body.is_some() {
        headers.push(("content-type", "application/json"));
    }
    let r = transport::http::request(method, url, &headers, body.unwrap_or("").as_bytes(), MAX_ANSWER_BYTES)?;
    let retry_after = r.header("retry-after").map(str::to_owned);
    Ok(Answer { status: r.status, retry_after, body: r.body })
}

#[cfg(not(target_arch = "wasm32"))]
fn call(method: &str, url: &str, _api_key: &str, _body: Option<&str>) -> Result<Answer, String> {
    Err(format!("{method} {url}: no network outside a component"))
}

#[derive(Deserialize)]
struct ReceiveAnswer {
    #[serde(default)]
    messages: Vec<QueueMessage>,
}

#[derive(Deserialize)]
struct QueueMessage {
    id: String,
    content: String,
    #[serde(default)]
    created_at: i64,
}

/// The envelope of a message: its content decoded from base64 (content
/// that is not base64 is taken as it is), the SimpleMQ id as identity and
/// as `simplemq.message-id`.
pub fn to_envelope(id: &str, content: &str, created_at: i64) -> Envelope {
    let payload = STANDARD.decode(content.trim()).unwrap_or_else(|_| content.as_bytes().to_vec());
    let mut envelope = transport::envelope(id, payload);
    envelope.headers.push(("simplemq.message-id".into(), HeaderValue::Text(id.to_owned())));
    envelope.created_at = created_at.max(0);
    envelope
}

impl SimplemqReceiver {
    fn take_one(&self) -> Result<Option<QueueMessage>, String> {
        let c = &self.0;
        let answer = call("GET", &messages_url(&c.api_url, &c.queue), &c.api_key, None)?;
        if !(200..300).contains(&answer.status) {
            return Err(format!("SimpleMQ receive answered {}", answer.status));
        }
        let received: ReceiveAnswer =
            serde_json::from_slice(&answer.body).map_err(|e| format!("SimpleMQ receive: unreadable answer: {e}"))?;
        Ok(received.messages.into_iter().next())
    }
}

impl transport::Receiver for SimplemqReceiver {
    fn info(&self) -> ReceiverInfo {
        // A token is the message id: any instance can delete or extend it.
        ReceiverInfo { extend_every_ms: Some(self.0.extend_every_secs.saturating_mul(1000)), settle_anywhere: true }
    }

    fn poll(&self, max: u32, _wait_ms: u32) -> Result<Vec<Received>, String> {
        let mut taken = Vec::new();
        while taken.len() < max as usize {
            let message = match self.take_one() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                // What was taken is handed over; the failure shows next time.
                Err(_) if !taken.is_empty() => break,
                Err(e) => return Err(e),
            };
            if message_url(&self.0.api_url, &self.0.queue, &message.id).is_err() {
                // Never settled: it comes back after its timeout.
                ferry_plugin_sdk::log::warn(&format!(
                    "SimpleMQ message id {:?} names no URL; left on the queue",
                    message.id
                ));
                continue;
            }
            let envelope = to_envelope(&message.id, &message.content, message.created_at);
            taken.push(Received { token: message.id, message: envelope, redeliveries: None });
        }
        Ok(taken)
    }

    fn settle(&self, token: &str, settlement: Settlement) -> Result<(), String> {
        let c = &self.0;
        match settlement {
            // Not deleted: it comes back after the visibility timeout.
            Settlement::Release(_) => Ok(()),
            Settlement::Ack | Settlement::Reject(_) => {
                let answer = call("DELETE", &message_url(&c.api_url, &c.queue, token)?, &c.api_key, None)?;
                if (200..300).contains(&answer.status) || answer.status == 404 {
                    Ok(())
                } else {
                    Err(format!("SimpleMQ delete answered {}", answer.status))
                }
            }
        }
    }

    fn extend(&self, tokens: &[String]) -> Result<(), String> {
        let c = &self.0;
        let mut failed = Vec::new();
        for token in tokens {
            match call("PUT", &message_url(&c.api_url, &c.queue, token)?, &c.api_key, None) {
                Ok(a) if (200..300).contains(&a.status) => {}
                Ok(a) => failed.push(format!("{token}: {}", a.status)),
                Err(e) => failed.push(format!("{token}: {e}")),
            }
        }
        if failed.is_empty() { Ok(()) } else { Err(format!("visibility not extended: {}", failed.join(", "))) }
    }
}

impl SimplemqSender {
    fn send_one(&self, out: &Outbound) -> SendResult {
        let c = &self.0;
        let queue = if out.address.is_empty() {
            match &c.queue {
                Some(q) => q.clone(),
                None => return SendResult::Permanent("binding has no address and the sender has no queue".into()),
            }
        } else {
            out.address.clone()
        };
        if !queue_name_ok(&queue) {
            return SendResult::Permanent(format!(
                "{queue:?} is not a SimpleMQ queue name (5 to 64 letters, digits and single hyphens)"
            ));
        }
        let content = STANDARD.encode(&out.message.payload);
        if content.len() > MAX_CONTENT_CHARS {
            return SendResult::Permanent(format!(
                "content is {} base64 characters, over SimpleMQ's {MAX_CONTENT_CHARS}",
                content.len()
            ));
        }
        let body = serde_json::json!({ "content": content }).to_string();
        match call("POST", &messages_url(&c.api_url, &queue), &c.api_key, Some(&body)) {
            Ok(a) if (200..300).contains(&a.status) => SendResult::Accepted,
            Ok(a) if transient(a.status) => {
                let reason = format!("SimpleMQ send answered {}", a.status);
                if says_unavailable(a.status) {
                    transport::unavailable(&reason);
                }
                SendResult::Transient(RetryAfter { delay_ms: retry_after_ms(&a), reason })
            }
            Ok(a) => {
                let text: String = String::from_utf8_lossy(&a.body).chars().take(200).collect();
                SendResult::Permanent(format!("SimpleMQ send answered {}: {text}", a.status))
            }
            // Nothing reached the service (refused, reset, timed out).
            Err(e) => {
                let reason = format!("SimpleMQ send: {e}");
                transport::unavailable(&reason);
                SendResult::Transient(RetryAfter { delay_ms: 1000, reason })
            }
        }
    }
}

impl transport::Sender for SimplemqSender {
    fn send(&self, batch: Vec<Outbound>) -> Vec<SendResult> {
        batch.iter().map(|out| self.send_one(out)).collect()
    }
}

ferry_plugin_sdk::export_transport!(SimplemqReceiver, SimplemqSender);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_is_one_path_segment_of_its_own_queue() {
        let url = |id: &str| message_url("http://mq.test/", "orders", id);
        assert_eq!(url("m-1").expect("plain"), "http://mq.test/v1/queues/orders/messages/m-1");
        assert_eq!(
            url("../../other-queue/messages/victim").expect("encoded"),
            "http://mq.test/v1/queues/orders/messages/..%2F..%2Fother-queue%2Fmessages%2Fvictim"
        );
        assert_eq!(url("x?y=1#f").expect("encoded"), "http://mq.test/v1/queues/orders/messages/x%3Fy%3D1%23f");
        for id in ["", ".", ".."] {
            assert!(url(id).is_err(), "{id:?}");
        }
    }

    #[test]
    fn content_is_base64_and_the_id_is_the_identity() {
        let e = to_envelope("smq-1", &STANDARD.encode("hello"), 1_700_000_000_000);
        assert_eq!(e.id, "smq-1");
        assert_eq!(e.payload, b"hello");
        assert_eq!(e.created_at, 1_700_000_000_000);
        assert_eq!(e.headers, vec![("simplemq.message-id".to_owned(), HeaderValue::Text("smq-1".into()))]);
        assert_eq!(to_envelope("smq-2", "not base64!", 0).payload, b"not base64!");
    }

    #[test]
    fn a_service_out_of_reach_is_unavailable_and_a_bad_message_is_not() {
        use ferry_plugin_sdk::testing::target_unavailable;
        use transport::Sender as _;
        let sender = ferry_plugin_sdk::start::<SimplemqSender>(
            &serde_json::json!({ "queue": "orders", "api_key": "k" }).to_string(),
        )
        .expect("open");
        let out = |queue: &str| Outbound { message: transport::envelope("m-1", b"x".to_vec()), address: queue.into() };
        // Natively nothing is reached, as with a refused connection.
        let results = sender.send(vec![out("")]);
        assert!(matches!(&results[..], [SendResult::Transient(_)]), "{results:?}");
        assert!(target_unavailable().is_some_and(|r| r.contains("no network")));
        let results = sender.send(vec![out("x")]);
        assert!(matches!(&results[..], [SendResult::Permanent(_)]), "{results:?}");
        assert_eq!(target_unavailable(), None);
        assert!(says_unavailable(503) && says_unavailable(429) && !says_unavailable(500));
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let date_ms = 784_111_777_000;
        assert_eq!(retry_after_at("7", date_ms), Some(7000));
        assert_eq!(retry_after_at(" 0 ", date_ms), Some(0));
        assert_eq!(retry_after_at("Sun, 06 Nov 1994 08:49:37 GMT", date_ms - 30_000), Some(30_000));
        assert_eq!(retry_after_at("Sun, 06 Nov 1994 08:49:37 GMT", date_ms + 5_000), Some(0), "past: no wait");
        assert_eq!(retry_after_at("soon", date_ms), None);
    }

    #[test]
    fn configs_are_checked_at_open() {
        let open = |json: serde_json::Value| ferry_plugin_sdk::start::<SimplemqReceiver>(&json.to_string()).map(|_| ());
        assert!(open(serde_json::json!({ "queue": "orders", "api_key": "k" })).is_ok());
        assert!(open(serde_json::json!({ "queue": "a", "api_key": "k" })).expect_err("short").starts_with("queue:"));
        assert!(open(serde_json::json!({ "queue": "orders" })).expect_err("no key").contains("api_key"));
        assert!(
            open(serde_json::json!({ "queue": "orders", "api_key": "k", "api_url": "ftp://x" }))
                .expect_err("scheme")
                .starts_with("api_url:")
        );
    }
}
