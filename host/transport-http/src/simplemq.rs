//! SimpleMQ (Sakura Cloud's HTTP message queue), by its published message
//! API: `POST /v1/queues/{queue}/messages` `{"content": "<base64>"}` sends,
//! `GET` of the same path receives at most one message (which stays
//! invisible for the queue's visibility timeout), `PUT
//! …/messages/{id}` extends that timeout, `DELETE …/messages/{id}`
//! acknowledges. Every call carries `Authorization: Bearer <api key>` (one
//! key per queue). Failures are classified as every HTTP sender's are (see
//! [`failure`](crate::sender::failure)).
//!
//! Content is base64 text; by default it holds the JSON wire format of
//! seed 004, so headers cross a queue that has none. With
//! `headers = "mqbridge"` the headers use mqbridge's names
//! (`rabbitmq.exchange`, `rabbitmq.routing_key`, `rabbitmq.header.<key>`,
//! …), so ferry can replace mqbridge without touching the producers and
//! consumers on the SimpleMQ side.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use ferry_config::WireFormat;

use crate::config::{SimplemqHeaders, SimplemqReceiverConfig, SimplemqSenderConfig, simplemq_queue_name_ok};
use ferry_core::TransportError;
use ferry_core::backoff::sleep_or_shutdown;
use ferry_core::json_wire::{self, Decoded, Unpacked};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, OutboundMessage, Receiver, Sender};
use ferry_envelope::{Envelope, Timestamp, names};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::sender::BodyEnd;

/// The longest content a message may have (base64 characters).
pub const MAX_CONTENT_CHARS: usize = 256_000;

/// mqbridge's header names (seed 004) and the envelope headers they map to.
pub mod mqbridge {
    pub const EXCHANGE: &str = "rabbitmq.exchange";
    pub const ROUTING_KEY: &str = "rabbitmq.routing_key";
    pub const REPLY_TO: &str = "rabbitmq.reply_to";
    pub const CORRELATION_ID: &str = "rabbitmq.correlation_id";
    pub const CONTENT_TYPE: &str = "rabbitmq.content_type";
    pub const MESSAGE_ID: &str = "rabbitmq.message_id";
    /// `rabbitmq.header.<key>`: an AMQP header of the message.
    pub const HEADER_PREFIX: &str = "rabbitmq.header.";

    /// Each mqbridge name and the AMQP 0-9-1 envelope header it stands for.
    pub const PAIRS: [(&str, &str); 6] = [
        (EXCHANGE, "amqp091.exchange"),
        (ROUTING_KEY, "amqp091.routing-key"),
        (REPLY_TO, "amqp091.reply-to"),
        (CORRELATION_ID, "amqp091.correlation-id"),
        (CONTENT_TYPE, "amqp091.content-type"),
        (MESSAGE_ID, "amqp091.message-id"),
    ];
}

/// Headers that stay as they are in mqbridge's format (W3C trace context).
const TOP_LEVEL: [&str; 2] = ["traceparent", "tracestate"];

fn messages_url(api_url: &str, queue: &str) -> String {
    format!("{}/v1/queues/{queue}/messages", api_url.trim_end_matches('/'))
}

/// The URL of one received message (to delete it or extend its
/// visibility). The id is the API's, so it goes in as exactly one path
/// segment: an id such as `../../other-queue/messages/victim`, `x#frag` or
/// `x?y=1` names that message on this queue and nothing else. An id that
/// cannot be one segment (empty, `.`, `..`) is refused.
fn message_url(api_url: &str, queue: &str, id: &str) -> Result<String, TransportError> {
    Ok(format!("{}/{}", messages_url(api_url, queue), ferry_core::address::url_segment(id)?))
}

/// The most of one receive answer read: SimpleMQ's largest message is
/// 256 KiB of base64 content, so this is room for it many times over.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

fn unreachable_error(what: &str, e: &reqwest::Error) -> TransportError {
    crate::sender::no_answer(&format!("SimpleMQ {what}"), e)
}

#[derive(Debug, Deserialize)]
struct Received {
    #[serde(default)]
    messages: Vec<Message>,
}

#[derive(Debug, Deserialize)]
struct Message {
    id: String,
    content: String,
    #[serde(default)]
    created_at: i64,
}

/// The envelope of a received message: its content decoded from base64,
/// then, with `wire_format = "json"`, the document's headers and body (a
/// content that is not the format is a plain body), then mqbridge's names
/// mapped (`headers = "mqbridge"`). The identity is `rabbitmq.message_id`
/// when mqbridge's headers carry one, else the SimpleMQ message id.
pub fn to_envelope(
    id: &str,
    content: &str,
    created_at: i64,
    wire: WireFormat,
    headers: SimplemqHeaders,
) -> (Envelope, Option<Unpacked>) {
    let (body, decoded_ok) = match STANDARD.decode(content.trim()) {
        Ok(b) => (Bytes::from(b), true),
        // Not base64 after all: the content itself, marked malformed.
        Err(_) => (Bytes::copy_from_slice(content.as_bytes()), false),
    };
    let mut envelope = Envelope::new(id, Bytes::new());
    if created_at > 0 {
        envelope.created_at = Timestamp(created_at);
    }
    envelope.set_header("simplemq.message-id", id);
    let outcome = match wire {
        WireFormat::None => {
            envelope.set_payload(body);
            None
        }
        WireFormat::Json if !decoded_ok => {
            envelope.set_payload(body);
            Some(Unpacked::Malformed)
        }
        WireFormat::Json => match json_wire::decode(&body) {
            Decoded::Wire { headers, body } => {
                json_wire::apply(&mut envelope, headers, body);
                Some(Unpacked::Wire)
            }
            Decoded::Plain => {
                envelope.set_payload(body);
                Some(Unpacked::Plain)
            }
            Decoded::Malformed(_) => {
                envelope.set_payload(body);
                Some(Unpacked::Malformed)
            }
        },
    };
    if headers == SimplemqHeaders::Mqbridge {
        from_mqbridge(&mut envelope);
    }
    (envelope, outcome)
}

/// mqbridge's names to the envelope's: `rabbitmq.exchange` becomes
/// `amqp091.exchange` and so on, `rabbitmq.header.<key>` becomes `<key>`
/// (`rabbitmq.header.gobridge.subject` the subject), and
/// `rabbitmq.message_id` the identity.
fn from_mqbridge(envelope: &mut Envelope) {
    for (theirs, ours) in mqbridge::PAIRS {
        if let Some(v) = envelope.headers.remove(theirs) {
            envelope.set_header(ours, v);
        }
    }
    if let Some(id) = envelope.text_header("amqp091.message-id").filter(|s| !s.is_empty()) {
        envelope.id = id.to_owned();
    }
    let custom: Vec<String> =
        envelope.headers.keys().filter(|k| k.starts_with(mqbridge::HEADER_PREFIX)).cloned().collect();
    for name in custom {
        if let Some(v) = envelope.headers.remove(&name) {
            let key = &name[mqbridge::HEADER_PREFIX.len()..];
            match v {
                ferry_envelope::HeaderValue::Text(subject) if key == names::SUBJECT_CARRIER => {
                    envelope.subject = Some(subject);
                }
                v => envelope.set_header(key, v),
            }
        }
    }
}

/// The envelope's headers under mqbridge's names, all text (mqbridge reads
/// a map of strings): AMQP 0-9-1 metadata as `rabbitmq.*` (the message id
/// from `amqp091.message-id`, else the identity), other headers as
/// `rabbitmq.header.<key>` (the subject as `rabbitmq.header.gobridge.subject`),
/// the bridge's own left out, W3C trace context as it is.
fn to_mqbridge(envelope: &Envelope) -> Envelope {
    let mut out = Envelope::new(envelope.id.clone(), envelope.payload().clone());
    out.created_at = envelope.created_at;
    for (theirs, ours) in mqbridge::PAIRS {
        if let Some(v) = envelope.headers.get(ours) {
            out.set_header(theirs, ferry_core::wire::text_of(v));
        }
    }
    if !out.headers.contains_key(mqbridge::MESSAGE_ID) {
        out.set_header(mqbridge::MESSAGE_ID, envelope.id.clone());
    }
    for (name, value) in envelope.headers.iter() {
        if TOP_LEVEL.contains(&name.as_str()) {
            out.set_header(name.clone(), ferry_core::wire::text_of(value));
        } else if !name.starts_with("amqp091.") && !name.starts_with("simplemq.") && !names::is_reserved(name) {
            out.set_header(format!("{}{name}", mqbridge::HEADER_PREFIX), ferry_core::wire::text_of(value));
        }
    }
    // As an AMQP header of that name would be (ferry's subject carrier).
    if let Some(subject) = &envelope.subject {
        out.set_header(format!("{}{}", mqbridge::HEADER_PREFIX, names::SUBJECT_CARRIER), subject.clone());
    }
    out
}

/// Whether mqbridge's two required headers were there (`rabbitmq.exchange`
/// may be empty: the default exchange).
pub(crate) fn has_destination(envelope: &Envelope) -> bool {
    ["amqp091.exchange", "amqp091.routing-key"].iter().all(|h| envelope.headers.contains_key(*h))
}

/// The content a sender puts on the queue for `envelope`: the JSON wire
/// format (in mqbridge's names with `headers = "mqbridge"`) or the payload,
/// as base64.
pub fn content_of(envelope: &Envelope, wire: WireFormat, headers: SimplemqHeaders) -> String {
    let body = match (wire, headers) {
        (WireFormat::None, _) => envelope.payload().clone(),
        (WireFormat::Json, SimplemqHeaders::Ferry) => {
            // The id of the queue it came from is no header of the message.
            let mut copy = envelope.clone();
            copy.headers.retain(|name, _| !name.starts_with("simplemq."));
            json_wire::encode(&copy)
        }
        (WireFormat::Json, SimplemqHeaders::Mqbridge) => json_wire::encode(&to_mqbridge(envelope)),
    };
    STANDARD.encode(&body)
}

/// `type = "simplemq"` sender.
pub struct SimplemqSender {
    name: String,
    config: SimplemqSenderConfig,
    client: reqwest::Client,
}

impl SimplemqSender {
    pub fn start(name: &str, config: SimplemqSenderConfig, metrics: Metrics) -> Result<Arc<Self>, TransportError> {
        let client = crate::sender::client(config.timeout_ms, config.connect_timeout_ms, None, config.tls.as_ref())?;
        let gauge = labels(&[("kind", "simplemq"), ("role", "sender"), ("name", name)]);
        metrics.connected.get_or_create(&gauge).set(1);
        Ok(Arc::new(Self { name: name.to_owned(), config, client }))
    }
}

#[async_trait]
impl Sender for SimplemqSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let queue = if msg.address.is_empty() {
            self.config
                .queue
                .clone()
                .ok_or_else(|| TransportError::permanent("binding has no address and the sender has no queue"))?
        } else {
            ferry_core::address::expand(&msg.address, &msg.envelope)?
        };
        if !simplemq_queue_name_ok(&queue) {
            return Err(TransportError::unroutable(format!(
                "{queue:?} is not a SimpleMQ queue name (5 to 64 letters, digits and single hyphens)"
            )));
        }
        let content = content_of(&msg.envelope, self.config.wire_format, self.config.headers);
        if content.len() > MAX_CONTENT_CHARS {
            return Err(TransportError::permanent(format!(
                "content is {} base64 characters, over SimpleMQ's {MAX_CONTENT_CHARS}",
                content.len()
            )));
        }
        let body = serde_json::json!({ "content": content }).to_string();
        let response = self
            .client
            .post(messages_url(&self.config.api_url, &queue))
            .bearer_auth(self.config.api_key.expose())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| unreachable_error("send", &e))?;
        if response.status().is_success() {
            debug!(sender = %self.name, %queue, "sent to SimpleMQ");
            return Ok(());
        }
        Err(crate::sender::failure("SimpleMQ send", response).await)
    }
}

/// `type = "simplemq"` receiver.
pub struct SimplemqReceiver {
    name: String,
    config: SimplemqReceiverConfig,
    metrics: Metrics,
}

impl SimplemqReceiver {
    pub fn new(name: &str, config: SimplemqReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics }
    }
}

/// What one receive call gave.
enum Polled {
    Message(Message),
    Empty,
}

impl SimplemqReceiver {
    async fn poll(&self, client: &reqwest::Client) -> Result<Polled, TransportError> {
        let response = client
            .get(messages_url(&self.config.api_url, &self.config.queue))
            .bearer_auth(self.config.api_key.expose())
            .send()
            .await
            .map_err(|e| unreachable_error("receive", &e))?;
        if !response.status().is_success() {
            return Err(crate::sender::failure("SimpleMQ receive", response).await);
        }
        let bytes = match crate::sender::read_capped(response, MAX_ANSWER_BYTES).await {
            (bytes, BodyEnd::Complete) => bytes,
            (_, BodyEnd::Truncated) => {
                return Err(TransportError::transient(format!(
                    "SimpleMQ receive: the answer is over {MAX_ANSWER_BYTES} bytes; not read further"
                )));
            }
            (_, BodyEnd::Failed(e)) => return Err(unreachable_error("receive", &e)),
        };
        let received: Received = serde_json::from_slice(&bytes)
            .map_err(|e| TransportError::transient(format!("SimpleMQ receive: unreadable answer: {e}")))?;
        Ok(received.messages.into_iter().next().map_or(Polled::Empty, Polled::Message))
    }

    /// One poller: receives until `shutdown`, sleeping `polling_interval_ms`
    /// only when the queue is empty, backing off on errors.
    async fn poller(&self, client: &reqwest::Client, sink: &DeliverySink, shutdown: &CancellationToken) {
        let receiver = self.name.as_str();
        let interval = Duration::from_millis(self.config.polling_interval_ms);
        let backoff = ferry_core::backoff::Backoff::reconnect(200, 30_000);
        let mut failures: u32 = 0;
        let gauge = labels(&[("kind", "simplemq"), ("role", "receiver"), ("name", receiver)]);
        while !shutdown.is_cancelled() {
            let polled = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = self.poll(client) => p,
            };
            match polled {
                Ok(Polled::Empty) => {
                    failures = 0;
                    self.metrics.connected.get_or_create(&gauge).set(1);
                    if !sleep_or_shutdown(interval, shutdown).await {
                        break;
                    }
                }
                Ok(Polled::Message(m)) => {
                    failures = 0;
                    self.metrics.connected.get_or_create(&gauge).set(1);
                    let url = match message_url(&self.config.api_url, &self.config.queue, &m.id) {
                        Ok(url) => url,
                        Err(e) => {
                            // Never settled: it comes back after the queue's
                            // visibility timeout, and is refused again.
                            warn!(receiver, message_id = %m.id, reason = %e.reason, "SimpleMQ message with an id no URL can name; left on the queue");
                            Metrics::inc(
                                &self.metrics.ingress_rejected,
                                &[("kind", "simplemq"), ("receiver", receiver), ("reason", "bad_id")],
                            );
                            continue;
                        }
                    };
                    let (envelope, outcome) =
                        to_envelope(&m.id, &m.content, m.created_at, self.config.wire_format, self.config.headers);
                    if let Some(outcome) = outcome {
                        Metrics::inc(
                            &self.metrics.wire_format_read,
                            &[("receiver", receiver), ("outcome", outcome.label())],
                        );
                    }
                    let handle = SimplemqHandle::hold(self, client.clone(), url);
                    if self.config.require_rabbitmq_headers && !has_destination(&envelope) {
                        // mqbridge's rule on the way to RabbitMQ: dropped,
                        // not retried, and counted.
                        warn!(receiver, message_id = %envelope.id, "SimpleMQ message without rabbitmq.exchange and rabbitmq.routing_key; dropped");
                        Metrics::inc(
                            &self.metrics.ingress_rejected,
                            &[("kind", "simplemq"), ("receiver", receiver), ("reason", "missing_rabbitmq_headers")],
                        );
                        if let Err(e) = handle.delete().await {
                            warn!(receiver, error = %e, "could not delete the dropped message; it will come back");
                        }
                        continue;
                    }
                    if sink.send(Delivery::new(envelope, Box::new(handle))).await.is_err() {
                        // The route stopped: the message comes back after
                        // its visibility timeout.
                        break;
                    }
                }
                Err(e) => {
                    let delay = e.retry_after.unwrap_or_default().max(backoff.next(&mut failures));
                    warn!(receiver, queue = %self.config.queue, error = %e, retry_in_ms = delay.as_millis() as u64, "SimpleMQ receive failed");
                    if !e.is_transient() {
                        self.metrics.connected.get_or_create(&gauge).set(0);
                    }
                    if !sleep_or_shutdown(delay, shutdown).await {
                        break;
                    }
                }
            }
        }
    }
}

#[async_trait]
impl Receiver for SimplemqReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let client = crate::sender::client(
            self.config.timeout_ms,
            self.config.connect_timeout_ms,
            None,
            self.config.tls.as_ref(),
        )?;
        info!(receiver = %self.name, queue = %self.config.queue, pollers = self.config.pollers, "polling SimpleMQ");
        let pollers = (0..self.config.pollers.max(1)).map(|_| self.poller(&client, &sink, &shutdown));
        futures_util::future::join_all(pollers).await;
        let gauge = labels(&[("kind", "simplemq"), ("role", "receiver"), ("name", &self.name)]);
        self.metrics.connected.get_or_create(&gauge).set(0);
        Ok(())
    }
}

/// A received message held by the route: its visibility is extended every
/// `extend_every_secs` until it is settled; ack and reject delete it;
/// release stops extending, so it comes back after the visibility timeout.
struct SimplemqHandle {
    client: reqwest::Client,
    url: String,
    api_key: ferry_config::Secret,
    keeper: CancellationToken,
}

impl SimplemqHandle {
    /// Holds the message at `url` ([`message_url`]).
    fn hold(receiver: &SimplemqReceiver, client: reqwest::Client, url: String) -> Self {
        let keeper = CancellationToken::new();
        let every = Duration::from_secs(receiver.config.extend_every_secs);
        let (c, u, key, stop) = (client.clone(), url.clone(), receiver.config.api_key.clone(), keeper.clone());
        let name = receiver.name.clone();
        tokio::spawn(async move {
            while sleep_or_shutdown(every, &stop).await {
                match c.put(&u).bearer_auth(key.expose()).send().await {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => warn!(receiver = %name, status = %r.status(), "SimpleMQ visibility not extended"),
                    Err(e) => warn!(receiver = %name, error = %e, "SimpleMQ visibility not extended"),
                }
            }
        });
        Self { client, url, api_key: receiver.config.api_key.clone(), keeper }
    }

    async fn delete(&self) -> Result<(), TransportError> {
        self.keeper.cancel();
        let response = self
            .client
            .delete(&self.url)
            .bearer_auth(self.api_key.expose())
            .send()
            .await
            .map_err(|e| unreachable_error("delete", &e))?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(crate::sender::failure("SimpleMQ delete", response).await)
    }
}

impl Drop for SimplemqHandle {
    fn drop(&mut self) {
        self.keeper.cancel();
    }
}

#[async_trait]
impl DeliveryHandle for SimplemqHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.delete().await
    }

    async fn release(self: Box<Self>, _after: Duration, reason: &str) -> Result<(), TransportError> {
        debug!(%reason, "SimpleMQ message released: it comes back after its visibility timeout");
        self.keeper.cancel();
        Ok(())
    }

    async fn extend(&self, _until: Timestamp) -> Result<(), TransportError> {
        // SimpleMQ extends by the queue's own timeout; the keeper does it.
        Ok(())
    }
}

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
        assert_eq!(url("victim#frag").expect("encoded"), "http://mq.test/v1/queues/orders/messages/victim%23frag");
        assert_eq!(url("x?y=1").expect("encoded"), "http://mq.test/v1/queues/orders/messages/x%3Fy%3D1");
        for id in ["", ".", ".."] {
            assert!(url(id).is_err(), "{id:?}");
        }
        // What reqwest sends is what was built: no segment is climbed out of.
        let parsed = reqwest::Url::parse(&url("../victim").expect("encoded")).expect("parses");
        assert_eq!(parsed.path(), "/v1/queues/orders/messages/..%2Fvictim");
    }

    #[test]
    fn mqbridge_names_map_both_ways() {
        let doc = serde_json::json!({
            "headers": {
                "rabbitmq.exchange": "orders-x", "rabbitmq.routing_key": "orders.created",
                "rabbitmq.reply_to": "replies", "rabbitmq.correlation_id": "c-1",
                "rabbitmq.content_type": "application/json", "rabbitmq.message_id": "m-1",
                "rabbitmq.header.x-custom": "v", "traceparent": "00-abc-def-01"
            },
            "body": "{}"
        });
        let content = STANDARD.encode(doc.to_string());
        let (e, outcome) = to_envelope("smq-id", &content, 0, WireFormat::Json, SimplemqHeaders::Mqbridge);
        assert_eq!(outcome, Some(Unpacked::Wire));
        assert_eq!(e.id, "m-1", "rabbitmq.message_id first");
        assert_eq!(e.text_header("amqp091.exchange"), Some("orders-x"));
        assert_eq!(e.text_header("amqp091.routing-key"), Some("orders.created"));
        assert_eq!(e.text_header("amqp091.reply-to"), Some("replies"));
        assert_eq!(e.text_header("x-custom"), Some("v"));
        assert_eq!(e.payload().as_ref(), b"{}");

        let back = content_of(&e, WireFormat::Json, SimplemqHeaders::Mqbridge);
        let doc: serde_json::Value = serde_json::from_slice(&STANDARD.decode(back).expect("base64")).expect("json");
        let h = &doc["headers"];
        assert_eq!(h["rabbitmq.exchange"], "orders-x");
        assert_eq!(h["rabbitmq.routing_key"], "orders.created");
        assert_eq!(h["rabbitmq.message_id"], "m-1");
        assert_eq!(h["rabbitmq.header.x-custom"], "v");
        assert_eq!(h["traceparent"], "00-abc-def-01");
        assert!(h.get("rabbitmq.header.simplemq.message-id").is_none());
    }

    #[test]
    fn the_simplemq_id_is_the_identity_without_a_message_id_header() {
        let content = STANDARD.encode(r#"{"headers": {"rabbitmq.exchange": ""}, "body": "x"}"#);
        let (e, _) = to_envelope("smq-1", &content, 0, WireFormat::Json, SimplemqHeaders::Mqbridge);
        assert_eq!(e.id, "smq-1");
        assert_eq!(e.text_header("amqp091.exchange"), Some(""), "the default exchange may be named");
        let (plain, outcome) =
            to_envelope("smq-2", &STANDARD.encode("hello"), 0, WireFormat::Json, SimplemqHeaders::Ferry);
        assert_eq!(outcome, Some(Unpacked::Plain));
        assert_eq!(plain.payload().as_ref(), b"hello");
    }
}
