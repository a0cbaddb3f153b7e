//! `[receivers.NAME]` and `[senders.NAME]` of this crate's transports:
//! `type = "http"`, a receiver that takes webhooks (each POST a message)
//! and a sender that calls one, and `type = "simplemq"`, Sakura Cloud's
//! HTTP queue. Both read and write the JSON wire format themselves where
//! they do, so their tables have a `wire_format` key of their own.

use ferry_config::{Secret, TlsConfig, WireFormat};
use ferry_core::transport::{Claim, KeyProblem};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    pub bearer_token: Option<Secret>,
    /// Callers must send `X-Ferry-Signature: sha256=<hex HMAC-SHA256 of
    /// the body with this secret>`, else 401.
    #[serde(default)]
    pub hmac_secret: Option<Secret>,
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
    pub bearer_token: Option<Secret>,
    /// Sends `X-Ferry-Signature: sha256=<hex HMAC-SHA256 of the body>`.
    #[serde(default)]
    pub hmac_secret: Option<Secret>,
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
    pub api_key: Secret,
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
    pub api_key: Secret,
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

impl HttpReceiverConfig {
    /// Every key's own rule.
    pub fn check(&self) -> Result<(), KeyProblem> {
        self.address()?;
        if !self.path.starts_with('/') {
            return Err(KeyProblem::new("path", "must start with /"));
        }
        check_header_prefix(&self.header_prefix)?;
        for (key, value) in [
            ("max_body_bytes", self.max_body_bytes as u64),
            ("read_timeout_ms", self.read_timeout_ms),
            ("reply_timeout_ms", self.reply_timeout_ms),
            ("max_connections", self.max_connections as u64),
        ] {
            KeyProblem::at_least_one(key, value)?;
        }
        check_secret(self.bearer_token.as_ref().map(Secret::expose), "bearer_token")?;
        check_secret(self.hmac_secret.as_ref().map(Secret::expose), "hmac_secret")
    }

    /// `listen` as an address.
    pub fn address(&self) -> Result<std::net::SocketAddr, KeyProblem> {
        KeyProblem::listen_address("listen", &self.listen)
    }

    /// The address it listens on, which no other listener may share.
    pub fn claims(&self) -> Vec<Claim> {
        Claim::listen_at("listen", &self.listen)
    }
}

impl HttpSenderConfig {
    /// Every key's own rule; `url`, a template, is parsed once its headers
    /// are filled in.
    pub fn check(&self) -> Result<(), KeyProblem> {
        if let Some(url) = &self.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(KeyProblem::new("url", "must be an http:// or https:// URL"));
            }
            KeyProblem::tls(self.tls.as_ref(), url.starts_with("https://"), "https://")?;
        }
        if !["POST", "PUT", "PATCH"].contains(&self.method.as_str()) {
            return Err(KeyProblem::new("method", "must be POST, PUT or PATCH"));
        }
        check_header_prefix(&self.header_prefix)?;
        KeyProblem::at_least_one("timeout_ms", self.timeout_ms)?;
        KeyProblem::at_least_one("connect_timeout_ms", self.connect_timeout_ms)?;
        check_secret(self.bearer_token.as_ref().map(Secret::expose), "bearer_token")?;
        check_secret(self.hmac_secret.as_ref().map(Secret::expose), "hmac_secret")
    }
}

impl SimplemqReceiverConfig {
    /// Every key's own rule; `api_url` parsed as the client parses it.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_simplemq_queue(&self.queue, "queue")?;
        check_simplemq_api(&self.api_url, self.api_key.expose(), self.tls.as_ref())?;
        if !(1..=64).contains(&self.pollers) {
            return Err(KeyProblem::new("pollers", "must be between 1 and 64"));
        }
        for (key, value) in [
            ("polling_interval_ms", self.polling_interval_ms),
            ("extend_every_secs", self.extend_every_secs),
            ("timeout_ms", self.timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
        ] {
            KeyProblem::at_least_one(key, value)?;
        }
        if self.require_rabbitmq_headers && self.headers != SimplemqHeaders::Mqbridge {
            return Err(KeyProblem::new(
                "require_rabbitmq_headers",
                "needs headers = \"mqbridge\" (the rabbitmq.* names)",
            ));
        }
        Ok(())
    }
}

impl SimplemqSenderConfig {
    /// Every key's own rule; `api_url` parsed as the client parses it.
    pub fn check(&self) -> Result<(), KeyProblem> {
        if let Some(queue) = &self.queue {
            check_simplemq_queue(queue, "queue")?;
        }
        check_simplemq_api(&self.api_url, self.api_key.expose(), self.tls.as_ref())?;
        KeyProblem::at_least_one("timeout_ms", self.timeout_ms)?;
        KeyProblem::at_least_one("connect_timeout_ms", self.connect_timeout_ms)
    }
}

/// An HTTP header-name prefix: lowercase token characters, not empty.
fn check_header_prefix(prefix: &str) -> Result<(), KeyProblem> {
    let token = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "!#$%&'*+-.^_`|~".contains(c);
    if prefix.is_empty() || !prefix.chars().all(token) {
        return Err(KeyProblem::new(
            "header_prefix",
            "must be a non-empty lowercase HTTP header-name prefix such as x-ferry-",
        ));
    }
    Ok(())
}

/// A secret that is set must not be empty (an unset variable, say).
fn check_secret(secret: Option<&str>, key: &str) -> Result<(), KeyProblem> {
    if secret.is_some_and(str::is_empty) {
        return Err(KeyProblem::new(key, "is empty; leave it out to turn it off"));
    }
    Ok(())
}

/// Whether `name` is a SimpleMQ queue name: 5 to 64 letters and digits,
/// single hyphens inside (the API's pattern). The SimpleMQ sender checks a
/// binding's expanded address with it too.
pub fn simplemq_queue_name_ok(name: &str) -> bool {
    (5..=64).contains(&name.len())
        && name.split('-').all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// A SimpleMQ queue name, or a problem with `key`.
fn check_simplemq_queue(queue: &str, key: &str) -> Result<(), KeyProblem> {
    if !simplemq_queue_name_ok(queue) {
        return Err(KeyProblem::new(
            key,
            format!("{queue:?} is not a SimpleMQ queue name (5 to 64 letters and digits, single hyphens inside)"),
        ));
    }
    Ok(())
}

fn check_simplemq_api(api_url: &str, api_key: &str, tls: Option<&TlsConfig>) -> Result<(), KeyProblem> {
    if !(api_url.starts_with("http://") || api_url.starts_with("https://")) {
        return Err(KeyProblem::new("api_url", "must be an http:// or https:// URL"));
    }
    reqwest::Url::parse(api_url).map_err(|e| KeyProblem::new("api_url", e))?;
    KeyProblem::tls(tls, api_url.starts_with("https://"), "https://")?;
    check_secret(Some(api_key), "api_key")
}

#[cfg(test)]
mod tests {
    use ferry_config::PartTable;

    use super::*;

    const RECEIVER: &str = "listen = \"127.0.0.1:8080\"\n";
    const SENDER: &str = "url = \"https://hooks.example/{tenant}\"\n";
    const SMQ_RECEIVER: &str = "queue = \"orders-in\"\napi_key = \"k\"\n";
    const SMQ_SENDER: &str = "api_key = \"k\"\n";

    /// The part as the daemon hands it over (with `wire_format`: every
    /// half but the HTTP sender reads or writes it itself), then checked;
    /// on failure the key below the part's.
    fn read<T: serde::de::DeserializeOwned>(
        kind: &str,
        text: &str,
        check: fn(&T) -> Result<(), KeyProblem>,
    ) -> Result<T, String> {
        let keys: toml::Table = toml::from_str(text).expect("toml");
        let part = PartTable::new(kind, keys).expect("part");
        let config: T = part.parse_with_wire_format().map_err(|e| e.path)?;
        check(&config).map_err(|p| p.key)?;
        Ok(config)
    }

    /// As [`read`], for the HTTP sender (the daemon packs the wire format
    /// for it).
    fn read_sender(text: &str) -> Result<HttpSenderConfig, String> {
        let keys: toml::Table = toml::from_str(text).expect("toml");
        let config: HttpSenderConfig = PartTable::new("http", keys).expect("part").parse().map_err(|e| e.path)?;
        config.check().map_err(|p| p.key)?;
        Ok(config)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let r = read("http", RECEIVER, HttpReceiverConfig::check).expect("valid");
        assert_eq!((r.path.as_str(), r.header_prefix.as_str(), r.wire_format), ("/", "x-ferry-", WireFormat::None));
        assert_eq!((r.max_body_bytes, r.reply_timeout_ms, r.max_connections), (1024 * 1024, 30_000, 1024));
        let r = read("http", &format!("{RECEIVER}wire_format = \"json\""), HttpReceiverConfig::check).expect("valid");
        assert_eq!(r.wire_format, WireFormat::Json, "the receiver reads the wire format itself");
        let s = read_sender(SENDER).expect("valid");
        assert_eq!((s.method.as_str(), s.timeout_ms, s.connect_timeout_ms), ("POST", 10_000, 5_000));

        // SimpleMQ's content is the wire format unless it says otherwise.
        let q = read("simplemq", SMQ_RECEIVER, SimplemqReceiverConfig::check).expect("valid");
        assert!(!format!("{q:?}").contains("\"k\""), "the API key never prints: {q:?}");
        assert_eq!((q.wire_format, q.headers, q.pollers), (WireFormat::Json, SimplemqHeaders::Ferry, 1));
        assert_eq!(q.api_url, "https://simplemq.tk1b.api.sacloud.jp");
        let q = read("simplemq", &format!("{SMQ_SENDER}wire_format = \"none\""), SimplemqSenderConfig::check);
        assert_eq!(q.expect("valid").wire_format, WireFormat::None);
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        let http = |extra: &str| read("http", &format!("{RECEIVER}{extra}"), HttpReceiverConfig::check).err();
        for (extra, key) in [
            ("path = \"in\"", "path"),
            ("header_prefix = \"X-Up\"", "header_prefix"),
            ("max_body_bytes = 0", "max_body_bytes"),
            ("reply_timeout_ms = 0", "reply_timeout_ms"),
            ("bearer_token = \"\"", "bearer_token"),
            ("hmac_secret = \"\"", "hmac_secret"),
        ] {
            assert_eq!(http(extra).as_deref(), Some(key), "{extra}");
        }
        let nowhere = read("http", "listen = \"localhost\"", HttpReceiverConfig::check).err();
        assert_eq!(nowhere.as_deref(), Some("listen"));

        let sender = |text: &str| read_sender(text).err();
        for (text, key) in [
            ("url = \"ftp://h/\"", "url"),
            ("url = \"http://h/\"\ntls = { ca_file = \"/ca\" }", "tls"),
            ("method = \"GET\"", "method"),
            ("timeout_ms = 0", "timeout_ms"),
            ("wire_format = \"json\"\nmethod = \"GET\"", "method"),
        ] {
            assert_eq!(sender(text).as_deref(), Some(key), "{text}");
        }

        let smq = |text: &str| read("simplemq", text, SimplemqReceiverConfig::check).err();
        for (text, key) in [
            ("queue = \"abc\"\napi_key = \"k\"", "queue"),
            ("queue = \"orders-in\"\napi_key = \"\"", "api_key"),
            ("queue = \"orders-in\"\napi_key = \"k\"\napi_url = \"simplemq\"", "api_url"),
            ("queue = \"orders-in\"\napi_key = \"k\"\napi_url = \"http://[::1\"", "api_url"),
            ("queue = \"orders-in\"\napi_key = \"k\"\npollers = 65", "pollers"),
            ("queue = \"orders-in\"\napi_key = \"k\"\nrequire_rabbitmq_headers = true", "require_rabbitmq_headers"),
        ] {
            assert_eq!(smq(text).as_deref(), Some(key), "{text}");
        }
        let bad_queue = read("simplemq", "api_key = \"k\"\nqueue = \"a_b_c_d\"", SimplemqSenderConfig::check);
        assert_eq!(bad_queue.err().as_deref(), Some("queue"));
    }

    #[test]
    fn a_receiver_claims_its_listen_address_but_not_port_0() {
        let claims = |listen: &str| {
            let r = read("http", &format!("listen = {listen:?}"), HttpReceiverConfig::check).expect("valid");
            r.claims().into_iter().map(|c| (c.key, c.what)).collect::<Vec<_>>()
        };
        assert_eq!(claims("127.0.0.1:8080"), [("listen".into(), "listen address 127.0.0.1:8080".into())]);
        assert!(claims("127.0.0.1:0").is_empty(), "each port 0 gets a port of its own");
    }

    #[test]
    fn simplemq_queue_names_follow_the_api() {
        assert!(simplemq_queue_name_ok("my-own-queue-00"));
        assert!(!simplemq_queue_name_ok("abc"));
        assert!(!simplemq_queue_name_ok("bad--name"));
        assert!(!simplemq_queue_name_ok("-start"));
        assert!(!simplemq_queue_name_ok("under_score"));
    }
}
