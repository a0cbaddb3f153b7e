//! `type = "nats"`: NATS JetStream receivers (a durable pull consumer) and
//! senders (JetStream publish, or core NATS).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{TlsConfig, WireFormat};

/// `type = "nats"` receiver: a durable pull consumer on a JetStream stream.
/// A message is acknowledged only after its route is done with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsReceiverConfig {
    /// `nats://[user:password@]host[:port]` (port 4222), or `tls://` for
    /// TLS. Several servers of one cluster: separated by commas, each read
    /// by the client's own parser (`ferry validate` names one it cannot
    /// read); the client reaches whichever answers.
    pub url: String,
    /// TLS files for `tls://`: `{ ca_file, cert_file, key_file }` (PEM),
    /// every key optional. Without `ca_file` the system's roots verify the
    /// server.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The JetStream stream to consume.
    pub stream: String,
    /// The durable consumer's name. Instances of ferry naming the same
    /// consumer share its messages (competing consumers). Default
    /// `ferry-<receiver name>`.
    #[serde(default)]
    pub consumer: Option<String>,
    /// Subjects of the stream this consumer takes (wildcards allowed); all
    /// of the stream's when empty. Used when ferry creates the consumer.
    #[serde(default)]
    pub filter_subjects: Vec<String>,
    /// Use the consumer as it is, never create or change it (it must exist,
    /// be a pull consumer and acknowledge explicitly). Default false: it is
    /// created when missing, with explicit acknowledgements.
    #[serde(default)]
    pub consumer_passive: bool,
    /// The consumer's ack wait in seconds, when ferry creates it: a message
    /// not acknowledged within it is delivered again. While ferry holds a
    /// message it sends a progress acknowledgement (`+WPI`) every half of
    /// it. Default 30.
    #[serde(default = "default_ack_wait_secs")]
    pub ack_wait_secs: u64,
    /// Larger payloads are poison: terminated at the server (`+TERM`) and
    /// counted. Default 8 MiB.
    #[serde(default = "default_max_payload_bytes")]
    pub max_payload_bytes: usize,
    /// First reconnect delay in milliseconds; each further one doubles, with
    /// ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
}

/// `type = "nats"` sender: publishes to JetStream and waits for the
/// stream's acknowledgement, or to core NATS (`jetstream = false`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsSenderConfig {
    /// `nats://[user:password@]host[:port]` (port 4222), or `tls://` for
    /// TLS. Several servers of one cluster: separated by commas, each read
    /// by the client's own parser (`ferry validate` names one it cannot
    /// read); the client reaches whichever answers.
    pub url: String,
    /// TLS files for `tls://`: `{ ca_file, cert_file, key_file }` (PEM),
    /// every key optional. Without `ca_file` the system's roots verify the
    /// server.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Subject for bindings whose address is empty; a binding's address (a
    /// template over text headers, like the other senders') names it
    /// otherwise.
    #[serde(default)]
    pub subject: Option<String>,
    /// Publish to JetStream and count a send done when the stream
    /// acknowledged it (`Nats-Msg-Id` is the message's identity, so the
    /// stream's duplicate window drops ferry's own resends). `false`: core
    /// NATS, done once written to the connection: at most once, a message
    /// is lost when no subscriber is listening. Default true.
    #[serde(default = "default_true")]
    pub jetstream: bool,
    /// How long to wait for the stream's acknowledgement, in milliseconds,
    /// before the send counts as a transient failure (retried). Default
    /// 10000.
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
    /// First reconnect delay in milliseconds; each further one doubles, with
    /// ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
}

fn default_ack_wait_secs() -> u64 {
    30
}
fn default_max_payload_bytes() -> usize {
    8 * 1024 * 1024
}
fn default_reconnect_initial_ms() -> u64 {
    200
}
fn default_reconnect_max_ms() -> u64 {
    10_000
}
fn default_ack_timeout_ms() -> u64 {
    10_000
}
fn default_true() -> bool {
    true
}

impl NatsReceiverConfig {
    /// The durable consumer's name: `consumer`, else `ferry-<name>`.
    pub fn consumer_name(&self, receiver: &str) -> String {
        self.consumer.clone().unwrap_or_else(|| format!("ferry-{receiver}"))
    }
}

/// A NATS URL list as the client takes it: each entry `nats://` or
/// `tls://` (or a bare `host[:port]`) with a host.
pub(crate) fn check_url(urls: &str, tls: Option<&TlsConfig>, key: &str) -> Result<(), crate::ConfigError> {
    let bad = |why: String| crate::ConfigError::new(format!("{key}.url"), why);
    let mut any_tls = false;
    for url in urls.split(',').map(str::trim) {
        let rest = match url.split_once("://") {
            Some(("nats", rest)) => rest,
            Some(("tls", rest)) => {
                any_tls = true;
                rest
            }
            Some((scheme, _)) => return Err(bad(format!("{scheme}:// is not nats:// or tls://"))),
            None => url,
        };
        let authority = rest.split('/').next().unwrap_or(rest);
        let host = authority.rsplit('@').next().unwrap_or(authority);
        if host.is_empty() || host.starts_with(':') {
            return Err(bad(format!("{url:?} has no host")));
        }
    }
    if let Some(t) = tls {
        if !any_tls {
            return Err(crate::ConfigError::new(format!("{key}.tls"), "needs a tls:// url"));
        }
        if t.cert_file.is_some() != t.key_file.is_some() {
            return Err(crate::ConfigError::new(format!("{key}.tls"), "cert_file and key_file go together"));
        }
    }
    Ok(())
}

/// A NATS subject a message can be published to: not empty, no spaces or
/// control characters, no empty tokens, and (unless `wildcards`) no `*` or
/// `>`.
pub fn subject_problem(subject: &str, wildcards: bool) -> Option<String> {
    if subject.is_empty() {
        return Some("the subject is empty".into());
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("subject {subject:?} contains whitespace or a control character"));
    }
    if subject.split('.').any(str::is_empty) {
        return Some(format!("subject {subject:?} has an empty token"));
    }
    if !wildcards && subject.split('.').any(|t| t == "*" || t == ">") {
        return Some(format!("subject {subject:?} contains a wildcard; a message is published to one subject"));
    }
    None
}

/// A stream or consumer name as JetStream allows it: not empty, no
/// whitespace, `.`, `*`, `>`, `/` or `\`.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || ".*>/\\".contains(c)) {
        return Some(format!("{name:?} may not contain whitespace, '.', '*', '>', '/' or '\\'"));
    }
    None
}
