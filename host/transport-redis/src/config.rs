//! `[receivers.NAME]` and `[senders.NAME]` with `type = "redis_streams"`:
//! Redis Streams receivers (a consumer group,
//! acknowledged after the route) and senders (`XADD`).

use ferry_config::TlsConfig;
use ferry_core::transport::KeyProblem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `type = "redis_streams"` receiver: a consumer in a consumer group of one
/// stream. An entry is acknowledged (`XACK`) only after its route is done
/// with it; while ferry holds it, its idle time is reset so no other
/// consumer claims it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisStreamsReceiverConfig {
    /// `redis://[user:password@]host[:port][/db]` (port 6379), or
    /// `rediss://` for TLS.
    pub url: String,
    /// TLS files for `rediss://`: `{ ca_file, cert_file, key_file }` (PEM),
    /// every key optional. Without `ca_file` the system's roots verify the
    /// server.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The stream's key.
    pub stream: String,
    /// The consumer group. Instances of ferry naming the same group share
    /// its entries (competing consumers).
    pub group: String,
    /// This consumer's name in the group: one per instance. Default: the
    /// instance id (`[instance] id`).
    #[serde(default)]
    pub consumer: Option<String>,
    /// Use the group as it is, never create it (it must exist). Default
    /// false: the group (and the stream) are created when missing.
    #[serde(default)]
    pub group_passive: bool,
    /// Where a group ferry creates starts: `"oldest"`, every entry the
    /// stream holds, or `"newest"`, only entries added from then on.
    /// Default `"oldest"`.
    #[serde(default)]
    pub start_from: StartFrom,
    /// An entry pending this long without a heartbeat is claimed by a live
    /// consumer of the group (`XAUTOCLAIM`): what a stopped or killed
    /// instance held, and what ferry itself released for a retry. While
    /// ferry holds an entry it resets the entry's idle time every third of
    /// this. Default 30000.
    #[serde(default = "default_claim_idle_ms")]
    pub claim_idle_ms: u64,
    /// The field holding the payload. The entry's other fields are headers.
    /// An entry without it has an empty payload. Default `"payload"`.
    #[serde(default = "default_payload_field")]
    pub payload_field: String,
    /// The field holding the message's identity. Without it the identity
    /// is `<stream>:<entry id>`, which stays the same when the entry is
    /// delivered again. Default `"message_id"`.
    #[serde(default = "default_id_field")]
    pub id_field: String,
    /// Larger payloads are poison: acknowledged without delivery and
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
}

/// Where a consumer group ferry creates starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// Every entry the stream holds (`XGROUP CREATE … 0`).
    #[default]
    Oldest,
    /// Only entries added after the group was made (`XGROUP CREATE … $`).
    Newest,
}

/// `type = "redis_streams"` sender: appends each message to a stream
/// (`XADD`) and counts it sent once Redis answered with the entry's id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisStreamsSenderConfig {
    /// `redis://[user:password@]host[:port][/db]` (port 6379), or
    /// `rediss://` for TLS.
    pub url: String,
    /// TLS files for `rediss://`: `{ ca_file, cert_file, key_file }` (PEM),
    /// every key optional. Without `ca_file` the system's roots verify the
    /// server.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The stream's key for bindings whose address is empty; a binding's
    /// address (a template over text headers, each value without `:`,
    /// whitespace or control characters) names it otherwise.
    #[serde(default)]
    pub stream: Option<String>,
    /// Trim the stream to about this many entries as each is added
    /// (`MAXLEN ~`). Default: never trimmed by ferry.
    #[serde(default)]
    pub maxlen: Option<u64>,
    /// The field the payload goes into. Default `"payload"`.
    #[serde(default = "default_payload_field")]
    pub payload_field: String,
    /// The field the message's identity goes into (Redis keeps no
    /// identity of its own: a reader deduplicates by it). Default
    /// `"message_id"`.
    #[serde(default = "default_id_field")]
    pub id_field: String,
    /// How long to wait for Redis's answer, in milliseconds, before the
    /// send counts as a transient failure (retried). Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// First reconnect delay in milliseconds; each further one doubles, with
    /// ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
}

fn default_claim_idle_ms() -> u64 {
    30_000
}
fn default_payload_field() -> String {
    "payload".into()
}
fn default_id_field() -> String {
    "message_id".into()
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
fn default_timeout_ms() -> u64 {
    10_000
}

/// The shortest `claim_idle_ms`: the heartbeat runs at a third of it.
pub const MIN_CLAIM_IDLE_MS: u64 = 300;

impl RedisStreamsReceiverConfig {
    /// The consumer's name: `consumer`, else the instance id (filled in
    /// when the receiver is built; `ferry` only where none was).
    pub fn consumer_name(&self) -> &str {
        self.consumer.as_deref().unwrap_or("ferry")
    }
}

/// A Redis URL as redis-rs reads it (`redis://` or `rediss://` with a
/// host); `tls` only with `rediss://`.
fn check_url(url: &str, tls: Option<&TlsConfig>) -> Result<(), KeyProblem> {
    let secure = match url.split_once("://") {
        Some(("redis", _)) => false,
        Some(("rediss", _)) => true,
        Some((scheme, _)) => return Err(KeyProblem::new("url", format!("{scheme}:// is not redis:// or rediss://"))),
        None => return Err(KeyProblem::new("url", format!("{url:?} is not a redis:// or rediss:// URL"))),
    };
    let parsed = redis::parse_redis_url(url).ok_or_else(|| KeyProblem::new("url", "is not a valid URL"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(KeyProblem::new("url", format!("{} has no host", ferry_core::redact::url(url))));
    }
    redis::IntoConnectionInfo::into_connection_info(url)
        .map_err(|e| KeyProblem::new("url", format!("redis-rs cannot use it: {e}")))?;
    KeyProblem::tls(tls, secure, "rediss://")
}

/// A stream key, group or consumer name: not empty, no whitespace or
/// control characters.
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("{name:?} may not contain whitespace or control characters"));
    }
    None
}

/// The payload and identity fields: named, and not the same field.
fn check_fields(payload: &str, id: &str) -> Result<(), KeyProblem> {
    for (k, v) in [("payload_field", payload), ("id_field", id)] {
        if let Some(why) = name_problem(v) {
            return Err(KeyProblem::new(k, why));
        }
    }
    if payload == id {
        return Err(KeyProblem::new("id_field", "must differ from payload_field"));
    }
    Ok(())
}

impl RedisStreamsReceiverConfig {
    /// The checks of the receiver's keys (`ferry validate`, and before a
    /// start).
    pub fn check(&self) -> Result<(), KeyProblem> {
        let r = self;
        check_url(&r.url, r.tls.as_ref())?;
        KeyProblem::reconnect(r.reconnect_initial_ms, r.reconnect_max_ms)?;
        for (k, v) in [("stream", r.stream.as_str()), ("group", r.group.as_str()), ("consumer", r.consumer_name())] {
            if let Some(why) = name_problem(v) {
                return Err(KeyProblem::new(k, why));
            }
        }
        check_fields(&r.payload_field, &r.id_field)?;
        if r.claim_idle_ms < MIN_CLAIM_IDLE_MS {
            return Err(KeyProblem::new(
                "claim_idle_ms",
                format!("must be at least {MIN_CLAIM_IDLE_MS}: held entries are refreshed every third of it"),
            ));
        }
        if r.max_payload_bytes == 0 {
            return Err(KeyProblem::new("max_payload_bytes", "must be at least 1"));
        }
        Ok(())
    }
}

impl RedisStreamsSenderConfig {
    /// The checks of the sender's keys.
    pub fn check(&self) -> Result<(), KeyProblem> {
        let s = self;
        check_url(&s.url, s.tls.as_ref())?;
        KeyProblem::reconnect(s.reconnect_initial_ms, s.reconnect_max_ms)?;
        if let Some(stream) = s.stream.as_deref()
            && let Some(why) = name_problem(stream)
        {
            return Err(KeyProblem::new("stream", why));
        }
        check_fields(&s.payload_field, &s.id_field)?;
        if s.maxlen == Some(0) {
            return Err(KeyProblem::new("maxlen", "must be at least 1 (leave it out to never trim)"));
        }
        if s.timeout_ms == 0 {
            return Err(KeyProblem::new("timeout_ms", "must be at least 1"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECEIVER: &str = "url = \"redis://:secret@127.0.0.1:6379/2\"\nstream = \"orders\"\ngroup = \"bridge\"\n";
    const SENDER: &str = "url = \"rediss://cache.example:6380\"\nstream = \"audit:{region}\"\nmaxlen = 10000\n";

    fn read<T: serde::de::DeserializeOwned>(text: &str, check: fn(&T) -> Result<(), KeyProblem>) -> Result<T, String> {
        ferry_core::transport::read_part("redis_streams", text, check)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let r = read(RECEIVER, RedisStreamsReceiverConfig::check).expect("valid");
        assert_eq!(r.consumer, None, "filled with the instance id when built");
        assert_eq!((r.claim_idle_ms, r.group_passive, r.start_from), (30_000, false, StartFrom::Oldest));
        assert_eq!((r.payload_field.as_str(), r.id_field.as_str()), ("payload", "message_id"));
        let s = read(SENDER, RedisStreamsSenderConfig::check).expect("valid");
        assert_eq!((s.maxlen, s.timeout_ms), (Some(10_000), 10_000));
        // `wire_format` is every part's key, read before the transport's.
        read(&format!("{SENDER}wire_format = \"json\""), RedisStreamsSenderConfig::check).expect("valid");
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        let receiver = |from: &str, to: &str| read(&RECEIVER.replace(from, to), RedisStreamsReceiverConfig::check);
        let url = "redis://:secret@127.0.0.1:6379/2";
        for (bad, key) in [
            (receiver(url, "nats://h"), "url"),
            (receiver(url, "redis://:6379"), "url"),
            (receiver(url, "redis://h:99999"), "url"),
            (receiver("group = \"bridge\"", "group = \"a b\""), "group"),
            (receiver("group = \"bridge\"", "group = \"g\"\nconsumer = \"\""), "consumer"),
            (receiver("group = \"bridge\"", "group = \"g\"\nclaim_idle_ms = 10"), "claim_idle_ms"),
            (receiver("group = \"bridge\"", "group = \"g\"\nid_field = \"payload\""), "id_field"),
            (receiver("group = \"bridge\"", "group = \"g\"\ntls = { ca_file = \"/ca\" }"), "tls"),
            (receiver("group = \"bridge\"", "group = \"g\"\ntls = { ca = \"/ca\" }"), "tls.ca"),
            (receiver("group = \"bridge\"", ""), "group"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
        let sender = |from: &str, to: &str| read(&SENDER.replace(from, to), RedisStreamsSenderConfig::check);
        for (bad, key) in [
            (sender("maxlen = 10000", "maxlen = 0"), "maxlen"),
            (sender("maxlen = 10000", "payload_field = \"\""), "payload_field"),
            (sender("maxlen = 10000", "start_from = \"newest\""), "start_from"),
            (sender("maxlen = 10000", "timeout_ms = 0"), "timeout_ms"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
    }
}
