//! The HTTP transport's keys (`type = "http"`): a receiver that takes
//! webhooks (each POST a message) and a sender that calls one. Documented
//! here and in the book.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TlsConfig;

/// How payloads are written on a transport (`wire_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WireFormat {
    /// The payload is the message body; headers travel as the transport's
    /// own headers.
    #[default]
    None,
    /// The JSON wire format of seed 004: `{"headers": {...}, "body": "...",
    /// "body_encoding": "base64"?}`. What is not that JSON is read as a
    /// plain body with no headers.
    Json,
}

fn default_header_prefix() -> String {
    "x-ferry-".to_owned()
}
fn default_path() -> String {
    "/".to_owned()
}
fn default_max_body_bytes() -> usize {
    1024 * 1024
}
fn default_read_timeout_ms() -> u64 {
    10_000
}
fn default_reply_timeout_ms() -> u64 {
    30_000
}
fn default_busy_retry_after_secs() -> u64 {
    1
}
fn default_max_connections() -> usize {
    1024
}
fn default_method() -> String {
    "POST".to_owned()
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_pool_idle_per_host() -> usize {
    32
}

/// `type = "http"` receiver: ferry listens, and each POST to `path` is one
/// message. The reply waits for the route (the book's HTTP page lists the
/// status codes): nothing is acknowledged to the caller before it is safe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpReceiverConfig {
    /// Address to listen on, `host:port` (for example `127.0.0.1:8080`).
    /// Port 0 picks a free one, announced as in [Listening on port
    /// 0](../operating/port-0.md#listening-on-port-0) and kept when the
    /// route restarts while the port is free. Two receivers cannot share
    /// one.
    pub listen: String,
    /// The path messages are POSTed to (default `/`); a request to another
    /// path gets 404, another method 405.
    #[serde(default = "default_path")]
    pub path: String,
    /// Request headers whose names start with this become message headers,
    /// the prefix removed (`X-Ferry-Kind: temp` is `kind = "temp"`), all as
    /// text. Default `x-ferry-`.
    #[serde(default = "default_header_prefix")]
    pub header_prefix: String,
    /// Larger bodies are refused with 413 (before they are read, when
    /// `Content-Length` says so). Default 1 MiB.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// The request head and then the body must each arrive within this many
    /// milliseconds, else the connection is closed (head) or answered 408
    /// (body): slow clients cannot hold connections open. Default 10000.
    #[serde(default = "default_read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// How long a request waits for the route to finish with its message
    /// before the reply is 503 (the route may still deliver it; a caller
    /// that retries should send an `Idempotency-Key`). Default 30000.
    #[serde(default = "default_reply_timeout_ms")]
    pub reply_timeout_ms: u64,
    /// `Retry-After` of the 503 given while the route has `max_in_flight`
    /// messages under way. Default 1.
    #[serde(default = "default_busy_retry_after_secs")]
    pub busy_retry_after_secs: u64,
    /// Connections served at once; more wait in the listen backlog. Default
    /// 1024.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Callers must send `Authorization: Bearer <token>`, else 401
    /// (compared in constant time). A secret: `${VAR}` or `{ file = "…" }`;
    /// `ferry render` masks it.
    #[serde(default)]
    pub bearer_token: Option<String>,
    /// Callers must send `X-Ferry-Signature: sha256=<hex HMAC-SHA256 of
    /// the body with this secret>`, else 401.
    #[serde(default)]
    pub hmac_secret: Option<String>,
    /// `"json"`: bodies are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document); a malformed document is refused with 400,
    /// and what is not that JSON is a plain body. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
}

/// `type = "http"` sender: each message is one request to `url` (or the
/// binding's address, a URL template). 2xx is success; 408, 429 and 5xx
/// are transient (honouring `Retry-After`); other statuses are permanent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSenderConfig {
    /// `http://` or `https://` URL for bindings whose address is empty; a
    /// template over text headers like other addresses
    /// (`https://hooks.example/{tenant}`). Each header's value goes in
    /// percent-encoded as one path segment or query value (`/`, `?`, `#`,
    /// `%` and every other character but letters, digits and `-._~`
    /// encoded), so a publisher's header cannot change the path, start a
    /// query or name another host; a value that is empty, `.` or `..` fails
    /// the copy as unroutable. A binding's address, when set, is the URL
    /// template instead.
    #[serde(default)]
    pub url: Option<String>,
    /// `POST` (default), `PUT` or `PATCH`.
    #[serde(default = "default_method")]
    pub method: String,
    /// Message headers go out as HTTP headers under this prefix. Typed
    /// values are written as text (a time as epoch milliseconds, bytes as
    /// base64); a header HTTP cannot carry (a name that is not a token, a
    /// value with control characters) is left out and counted in
    /// `ferry_http_header_dropped_total`. Default `x-ferry-`.
    #[serde(default = "default_header_prefix")]
    pub header_prefix: String,
    /// Send the bridge's own `x-bridge.*` headers too (to another ferry
    /// whose route trusts them); bookkeeping (`x-bridge.route-id`, …) never
    /// leaves. Default false.
    #[serde(default)]
    pub bridge_headers: bool,
    /// Whole request timeout in milliseconds; a timeout is transient
    /// (retried). Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Connect timeout in milliseconds; a refused or timed-out connection
    /// is transient. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Idle connections kept per host for reuse (keep-alive). Default 32.
    #[serde(default = "default_pool_idle_per_host")]
    pub pool_idle_per_host: usize,
    /// TLS files for `https://`: `{ ca_file, cert_file, key_file }` as for
    /// the other transports, every key optional. Without `ca_file` the
    /// system's roots verify the server.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Sends `Authorization: Bearer <token>`.
    #[serde(default)]
    pub bearer_token: Option<String>,
    /// Sends `X-Ferry-Signature: sha256=<hex HMAC-SHA256 of the body>`.
    #[serde(default)]
    pub hmac_secret: Option<String>,
    /// `"json"`: the body is the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) of the
    /// message (headers and body in one document). Default `"none"`: the
    /// body is the payload.
    #[serde(default)]
    pub wire_format: WireFormat,
}

fn default_simplemq_api_url() -> String {
    "https://simplemq.tk1b.api.sacloud.jp".to_owned()
}
fn default_polling_interval_ms() -> u64 {
    1000
}
fn default_pollers() -> usize {
    1
}
fn default_extend_every_secs() -> u64 {
    10
}
fn default_json() -> WireFormat {
    WireFormat::Json
}

/// How a SimpleMQ message's headers are named (`headers`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SimplemqHeaders {
    /// As ferry names them.
    #[default]
    Ferry,
    /// As mqbridge (seed 004) names them: `rabbitmq.exchange`,
    /// `rabbitmq.routing_key`, `rabbitmq.reply_to`,
    /// `rabbitmq.correlation_id`, `rabbitmq.content_type`,
    /// `rabbitmq.message_id` for the AMQP 0-9-1 metadata, and
    /// `rabbitmq.header.<key>` for the rest; all values text.
    Mqbridge,
}

/// `type = "simplemq"` receiver: polls one SimpleMQ queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimplemqReceiverConfig {
    /// The queue name (5 to 64 letters and digits, single hyphens inside).
    pub queue: String,
    /// The queue's API key (`Authorization: Bearer`). A secret: `${VAR}` or
    /// `{ file = "…" }`; `ferry render` masks it.
    pub api_key: String,
    /// The message API's endpoint (a local stand-in in tests). Default
    /// `https://simplemq.tk1b.api.sacloud.jp`.
    #[serde(default = "default_simplemq_api_url")]
    pub api_url: String,
    /// Sleep between receives while the queue is empty, in milliseconds; a
    /// receive that returned a message is followed by the next at once.
    /// Default 1000.
    #[serde(default = "default_polling_interval_ms")]
    pub polling_interval_ms: u64,
    /// Receive loops run at once (1..64); each call returns one message, so
    /// more pollers keep more messages under way. Default 1.
    #[serde(default = "default_pollers")]
    pub pollers: usize,
    /// While the route holds a message, its visibility timeout is extended
    /// (`PUT …/messages/{id}`) this often, in seconds; keep it under the
    /// queue's timeout. Default 10.
    #[serde(default = "default_extend_every_secs")]
    pub extend_every_secs: u64,
    /// Timeout of one API call in milliseconds; a timeout is retried.
    /// Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Connect timeout in milliseconds. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// TLS files for an `https://` endpoint (`{ ca_file, cert_file,
    /// key_file }`, as for the other transports; optional).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// `"ferry"` (default) or `"mqbridge"`: the content's headers use
    /// mqbridge's names (see
    /// [SimpleMQ](../transports/simplemq.md#simplemq)).
    #[serde(default)]
    pub headers: SimplemqHeaders,
    /// With `headers = "mqbridge"`: a message without `rabbitmq.exchange`
    /// and `rabbitmq.routing_key` is dropped (deleted from the queue) and
    /// counted
    /// (`ferry_ingress_rejected_total{reason="missing_rabbitmq_headers"}`),
    /// as mqbridge does on its way to RabbitMQ. Default false.
    #[serde(default)]
    pub require_rabbitmq_headers: bool,
    /// `"json"` (default): the content (after base64) is the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format); `"none"`:
    /// the content is the body.
    #[serde(default = "default_json")]
    pub wire_format: WireFormat,
}

/// `type = "simplemq"` sender: sends to the binding's queue (its address)
/// or `queue`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimplemqSenderConfig {
    /// Queue for bindings whose address is empty; a binding's address (a
    /// template) names the queue otherwise.
    #[serde(default)]
    pub queue: Option<String>,
    /// The API key (`Authorization: Bearer`); SimpleMQ issues one per
    /// queue, so a sender serves the queue(s) its key opens (one sender per
    /// destination queue, as in mqbridge). A secret: `${VAR}` or `{ file =
    /// "…" }`; `ferry render` masks it.
    pub api_key: String,
    /// The message API's endpoint (a local stand-in in tests). Default
    /// `https://simplemq.tk1b.api.sacloud.jp`.
    #[serde(default = "default_simplemq_api_url")]
    pub api_url: String,
    /// Timeout of one API call in milliseconds; a timeout is transient
    /// (retried). Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Connect timeout in milliseconds. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// TLS files for an `https://` endpoint (`{ ca_file, cert_file,
    /// key_file }`, as for the other transports; optional).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// `"ferry"` (default) or `"mqbridge"`: headers are written under
    /// mqbridge's names, all as text.
    #[serde(default)]
    pub headers: SimplemqHeaders,
    /// `"json"` (default): the content is the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format),
    /// base64-encoded; `"none"`: the body alone, base64-encoded.
    #[serde(default = "default_json")]
    pub wire_format: WireFormat,
}
