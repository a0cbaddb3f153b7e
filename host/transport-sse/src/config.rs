//! `[receivers.NAME]` and `[senders.NAME]` with `type = "sse"`: a sender
//! that serves server-sent event streams and a receiver that follows one.
//! Both write and read the JSON wire format themselves, so their tables
//! have a `wire_format` key of their own (default `"json"`).

use ferry_config::{Secret, WireFormat};
use ferry_core::transport::{Claim, KeyProblem};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn json() -> WireFormat {
    WireFormat::Json
}
fn default_replay_events() -> usize {
    1024
}
fn default_keepalive_ms() -> u64 {
    15_000
}
fn default_retry_ms() -> u64 {
    1_000
}
fn default_max_clients() -> usize {
    256
}
fn default_max_event_bytes() -> usize {
    1024 * 1024
}
fn default_dedup_events() -> usize {
    10_000
}
fn default_idle_timeout_ms() -> u64 {
    60_000
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_reconnect_initial_ms() -> u64 {
    200
}
fn default_reconnect_max_ms() -> u64 {
    10_000
}

/// `type = "sse"` sender: ferry serves each stream at `GET
/// /stream/{name}` on `listen` to any number of clients. A message is one
/// event: `id:` its message id, `event:` its subject when it has one,
/// `data:` the JSON wire format (whose `gobridge.subject` header carries
/// the subject too). A send succeeds once the event is in the stream's
/// replay buffer: clients connected then get it once (at most once per
/// client); a client that reconnects with `Last-Event-ID` gets what it
/// missed while that is still in the buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SseSenderConfig {
    /// Address to listen on, `host:port` (for example `127.0.0.1:8090`).
    /// Port 0 takes a free port, announced on stdout and listed on
    /// `/readyz`.
    pub listen: String,
    /// The stream a binding with an empty address sends to. Default: the
    /// sender's name. A binding's address names another stream of the
    /// same sender.
    #[serde(default)]
    pub stream: Option<String>,
    /// Clients must send `Authorization: Bearer <token>`; others get 401.
    /// Default: no token asked.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Events each stream keeps for clients that reconnect with
    /// `Last-Event-ID`. Default 1024.
    #[serde(default = "default_replay_events")]
    pub replay_events: usize,
    /// A comment line goes to idle clients this often, in milliseconds, so
    /// proxies and clients see the stream alive. Default 15000.
    #[serde(default = "default_keepalive_ms")]
    pub keepalive_ms: u64,
    /// The reconnect delay told to clients (`retry:`), in milliseconds.
    /// Default 1000.
    #[serde(default = "default_retry_ms")]
    pub retry_ms: u64,
    /// Clients served at once; more get 503. Default 256.
    #[serde(default = "default_max_clients")]
    pub max_clients: usize,
    /// `"json"` (default): `data:` is the JSON wire format, headers and
    /// body. `"none"`: `data:` is the payload alone, which must be UTF-8
    /// (another payload is refused for good).
    #[serde(default = "json")]
    pub wire_format: WireFormat,
}

/// `type = "sse"` receiver: ferry follows a server-sent event stream at
/// `url`; each event is a message. The stream is read again after a lost
/// connection with `Last-Event-ID`, the id of the last event before which
/// the route had settled everything, so nothing the route has not settled
/// is skipped; the events the server sends again that ferry already took
/// (by event id, among the last `dedup_events`) are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SseReceiverConfig {
    /// The stream's `http://` or `https://` URL.
    pub url: String,
    /// TLS files for `https://`: `{ ca_file, cert_file, key_file }` (PEM):
    /// `ca_file` adds a private CA to the system's, `cert_file` and
    /// `key_file` authenticate the client. Default: the system's CAs.
    #[serde(default)]
    pub tls: Option<ferry_config::TlsConfig>,
    /// Sent as `Authorization: Bearer <token>`. Default: none.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// The `Last-Event-ID` of the first connection: the stream resumes
    /// after this event. Default: none (the server's live edge).
    #[serde(default)]
    pub last_event_id: Option<String>,
    /// A file where the receiver keeps the id of the last event before
    /// which its route had settled everything; read at start as the first
    /// `Last-Event-ID` (over `last_event_id`), so a restart resumes there.
    /// At least once: events settled after it come again. Default: none (a
    /// restart starts at `last_event_id`).
    #[serde(default)]
    pub position_file: Option<String>,
    /// An event larger than this (or a line that does not end within it)
    /// drops the connection, which is made again. Default 1 MiB.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
    /// Event ids remembered to leave out what a reconnection sends again.
    /// Default 10000.
    #[serde(default = "default_dedup_events")]
    pub dedup_events: usize,
    /// No byte (not even a keep-alive comment) for this long, in
    /// milliseconds, and the connection is made again. Default 60000.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Connection timeout in milliseconds. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// First reconnect delay in milliseconds; each further one doubles, with
    /// ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
    /// `"json"` (default): `data:` that is the JSON wire format gives the
    /// message's headers and body, other data is the body. `"none"`: the
    /// data is the body.
    #[serde(default = "json")]
    pub wire_format: WireFormat,
}

/// A stream name: what `GET /stream/{name}` takes as one path segment.
pub fn stream_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b))
        && name != "."
        && name != ".."
}

impl SseSenderConfig {
    /// Every key's own rule.
    pub fn check(&self) -> Result<(), KeyProblem> {
        self.address()?;
        if let Some(stream) = &self.stream
            && !stream_name_ok(stream)
        {
            return Err(KeyProblem::new("stream", STREAM_RULE));
        }
        for (key, value) in [
            ("replay_events", self.replay_events as u64),
            ("keepalive_ms", self.keepalive_ms),
            ("max_clients", self.max_clients as u64),
        ] {
            KeyProblem::at_least_one(key, value)?;
        }
        check_secret(self.bearer_token.as_ref())
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

/// What a stream name may be.
pub const STREAM_RULE: &str = "must be 1 to 200 letters, digits, '-', '_', '.' or '~' (one URL path segment)";

impl SseReceiverConfig {
    /// Every key's own rule; `url` parsed as the client parses it.
    pub fn check(&self) -> Result<(), KeyProblem> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| KeyProblem::new("url", e))?;
        if !["http", "https"].contains(&url.scheme()) {
            return Err(KeyProblem::new("url", "must be an http:// or https:// URL"));
        }
        KeyProblem::tls(self.tls.as_ref(), url.scheme() == "https", "https://")?;
        if let Some(id) = &self.last_event_id
            && id.contains(['\r', '\n', '\0'])
        {
            return Err(KeyProblem::new("last_event_id", "cannot hold a line break or NUL"));
        }
        for (key, value) in [
            ("max_event_bytes", self.max_event_bytes as u64),
            ("dedup_events", self.dedup_events as u64),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
        ] {
            KeyProblem::at_least_one(key, value)?;
        }
        KeyProblem::reconnect(self.reconnect_initial_ms, self.reconnect_max_ms)?;
        check_secret(self.bearer_token.as_ref())
    }
}

/// A token that is set must not be empty (an unset variable, say).
fn check_secret(secret: Option<&Secret>) -> Result<(), KeyProblem> {
    if secret.is_some_and(|s| s.expose().is_empty()) {
        return Err(KeyProblem::new("bearer_token", "is empty; leave it out to turn it off"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(text: &str) -> Result<SseSenderConfig, String> {
        let config: SseSenderConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.check().map_err(|p| p.key)?;
        Ok(config)
    }

    fn receiver(text: &str) -> Result<SseReceiverConfig, String> {
        let config: SseReceiverConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.check().map_err(|p| p.key)?;
        Ok(config)
    }

    #[test]
    fn defaults_read_as_documented() {
        let s = sender("listen = \"127.0.0.1:0\"").expect("sender");
        assert_eq!((s.replay_events, s.keepalive_ms, s.retry_ms, s.max_clients), (1024, 15_000, 1_000, 256));
        assert_eq!(s.wire_format, WireFormat::Json);
        assert!(s.claims().is_empty(), "port 0 is never claimed");
        let r = receiver("url = \"http://127.0.0.1:1/stream/a\"").expect("receiver");
        assert_eq!((r.max_event_bytes, r.dedup_events, r.idle_timeout_ms), (1 << 20, 10_000, 60_000));
        assert_eq!(r.wire_format, WireFormat::Json);
    }

    #[test]
    fn each_bad_key_is_named() {
        for (text, key) in [
            ("listen = \"localhost\"", "listen"),
            ("listen = \"127.0.0.1:1\"\nstream = \"a/b\"", "stream"),
            ("listen = \"127.0.0.1:1\"\nreplay_events = 0", "replay_events"),
            ("listen = \"127.0.0.1:1\"\nbearer_token = \"\"", "bearer_token"),
        ] {
            assert_eq!(sender(text).err().as_deref(), Some(key), "{text}");
        }
        for (text, key) in [
            ("url = \"ftp://x/\"", "url"),
            ("url = \"not a url\"", "url"),
            ("url = \"http://x/\"\nlast_event_id = \"a\\nb\"", "last_event_id"),
            ("url = \"http://x/\"\nmax_event_bytes = 0", "max_event_bytes"),
            ("url = \"http://x/\"\nreconnect_initial_ms = 0", "reconnect_initial_ms"),
            ("url = \"http://x/\"\ntls = { ca_file = \"/ca\" }", "tls"),
        ] {
            assert_eq!(receiver(text).err().as_deref(), Some(key), "{text}");
        }
        assert!(sender("listen = \"127.0.0.1:1\"\nport = 1").is_err(), "unknown keys are refused");
        receiver("url = \"https://x/\"\ntls = { ca_file = \"/ca\" }").expect("TLS files for https://");
    }

    #[test]
    fn stream_names_are_one_path_segment() {
        for good in ["orders", "a.b-c_d~e", "0"] {
            assert!(stream_name_ok(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(201)] {
            assert!(!stream_name_ok(bad), "{bad}");
        }
    }
}
