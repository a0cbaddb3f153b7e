//! `[receivers.NAME]` and `[senders.NAME]` with `type = "sqs"`: long-polling
//! receivers and batching senders on an SQS queue. Credentials come from the
//! standard AWS chain (environment, profile, instance role), never from the
//! config.

use ferry_core::transport::KeyProblem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `type = "sqs"` receiver. Credentials come from the standard AWS chain
/// (environment, profile, instance role).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsReceiverConfig {
    /// Full queue URL. Give this or `queue_name`.
    #[serde(default)]
    pub queue_url: Option<String>,
    /// Queue name, resolved with GetQueueUrl at start.
    #[serde(default)]
    pub queue_name: Option<String>,
    /// Endpoint override, e.g. `http://127.0.0.1:4566` (a local
    /// SQS-compatible server). Default: AWS's endpoint for the region.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// AWS region. Default: the AWS chain's, else `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    /// Long-polling wait, 0..=20 seconds. Default 20.
    #[serde(default = "default_wait_time_seconds")]
    pub wait_time_seconds: i32,
    /// Messages per ReceiveMessage call, 1..=10; ferry never fetches more
    /// than the route has room for. Default 10.
    #[serde(default = "default_max_messages")]
    pub max_messages: i32,
    /// Visibility timeout ferry asks for, in seconds (1..=43200). While
    /// ferry holds a message (queued in the route or being processed) a
    /// heartbeat extends it every half period, so it does not reappear.
    /// Default 30.
    #[serde(default = "default_visibility_timeout")]
    pub visibility_timeout: i32,
    /// Replace an SNS notification body with the message inside it
    /// (`Message`) and map its `MessageAttributes` to headers, plus
    /// `sns.TopicArn`, `sns.MessageId` and `sns.Subject`. Default false.
    #[serde(default)]
    pub sns_unwrap: bool,
}

fn default_wait_time_seconds() -> i32 {
    20
}
fn default_max_messages() -> i32 {
    10
}
fn default_visibility_timeout() -> i32 {
    30
}

/// `type = "sqs"` sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsSenderConfig {
    /// Full queue URL. Give this or `queue_name`.
    #[serde(default)]
    pub queue_url: Option<String>,
    /// Queue name, resolved with GetQueueUrl at start.
    #[serde(default)]
    pub queue_name: Option<String>,
    /// Endpoint override, e.g. `http://127.0.0.1:4566` (a local
    /// SQS-compatible server). Default: AWS's endpoint for the region.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// AWS region. Default: the AWS chain's, else `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    /// Body plus every attribute's name, type and value must fit in this.
    /// Default 1 MiB (SQS's limit).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// FIFO queues: header whose text is the MessageGroupId. Default
    /// `x-bridge.ordering-key`.
    #[serde(default = "default_message_group_header")]
    pub message_group_header: String,
    /// FIFO queues: MessageGroupId when that header is missing. Default
    /// `default`.
    #[serde(default = "default_message_group")]
    pub default_message_group: String,
    /// Messages per SendMessageBatch, 1..=10. Default 10.
    #[serde(default = "default_batch_size")]
    pub batch_size: i32,
    /// How long a batch waits for more messages, in milliseconds. Default 5.
    #[serde(default = "default_batch_linger_ms")]
    pub batch_linger_ms: u64,
}

/// SQS's largest message (body and attributes), and a sender's default.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

fn default_max_message_bytes() -> usize {
    MAX_MESSAGE_BYTES
}
/// The header a FIFO sender reads its MessageGroupId from by default.
pub fn default_message_group_header() -> String {
    "x-bridge.ordering-key".to_owned()
}
/// The MessageGroupId of a FIFO message without that header, by default.
pub fn default_message_group() -> String {
    "default".to_owned()
}
/// A sender's messages per batch, by default.
pub const DEFAULT_BATCH_SIZE: i32 = 10;
/// How long a sender's batch waits for more, by default (ms).
pub const DEFAULT_BATCH_LINGER_MS: u64 = 5;

fn default_batch_size() -> i32 {
    DEFAULT_BATCH_SIZE
}
fn default_batch_linger_ms() -> u64 {
    DEFAULT_BATCH_LINGER_MS
}

impl SqsReceiverConfig {
    /// Every key's own rule; the URLs parsed as the SDK parses them.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_queue(self.queue_url.as_ref(), self.queue_name.as_ref())?;
        check_urls(self.queue_url.as_ref(), self.endpoint_url.as_ref())?;
        if !(0..=20).contains(&self.wait_time_seconds) {
            return Err(KeyProblem::new("wait_time_seconds", "must be between 0 and 20"));
        }
        if !(1..=10).contains(&self.max_messages) {
            return Err(KeyProblem::new("max_messages", "must be between 1 and 10"));
        }
        if !(1..=43_200).contains(&self.visibility_timeout) {
            return Err(KeyProblem::new("visibility_timeout", "must be between 1 and 43200 seconds"));
        }
        Ok(())
    }
}

impl SqsSenderConfig {
    /// Every key's own rule; the URLs parsed as the SDK parses them.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_queue(self.queue_url.as_ref(), self.queue_name.as_ref())?;
        check_urls(self.queue_url.as_ref(), self.endpoint_url.as_ref())?;
        if !(1..=10).contains(&self.batch_size) {
            return Err(KeyProblem::new("batch_size", "must be between 1 and 10"));
        }
        if !(1024..=MAX_MESSAGE_BYTES).contains(&self.max_message_bytes) {
            return Err(KeyProblem::new("max_message_bytes", "must be between 1024 and 1048576"));
        }
        if self.default_message_group.is_empty() || self.default_message_group.len() > 128 {
            return Err(KeyProblem::new("default_message_group", "must be 1 to 128 characters"));
        }
        Ok(())
    }
}

/// One of `queue_url` and `queue_name`, not empty.
fn check_queue(url: Option<&String>, name: Option<&String>) -> Result<(), KeyProblem> {
    match (url, name) {
        (Some(u), None) if !u.is_empty() => Ok(()),
        (None, Some(n)) if !n.is_empty() => Ok(()),
        (Some(_), Some(_)) => Err(KeyProblem::new("queue_url", "give queue_url or queue_name, not both")),
        _ => Err(KeyProblem::new("queue_url", "queue_url or queue_name is required")),
    }
}

/// The first of `queue_url` and `endpoint_url` that is not a URL.
fn check_urls(queue_url: Option<&String>, endpoint_url: Option<&String>) -> Result<(), KeyProblem> {
    for (key, url) in [("queue_url", queue_url), ("endpoint_url", endpoint_url)] {
        if let Some(url) = url {
            url::Url::parse(url).map_err(|e| KeyProblem::new(key, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECEIVER: &str = "queue_name = \"orders\"\nendpoint_url = \"http://127.0.0.1:4566\"\n";
    const SENDER: &str = "queue_url = \"http://127.0.0.1:4566/000000000000/out.fifo\"\n";

    fn read<T: serde::de::DeserializeOwned>(text: &str, check: fn(&T) -> Result<(), KeyProblem>) -> Result<T, String> {
        ferry_core::transport::read_part("sqs", text, check)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let q = read(RECEIVER, SqsReceiverConfig::check).expect("valid");
        assert_eq!((q.wait_time_seconds, q.max_messages, q.visibility_timeout, q.sns_unwrap), (20, 10, 30, false));
        let s = read(SENDER, SqsSenderConfig::check).expect("valid");
        assert_eq!((s.max_message_bytes, s.batch_size, s.batch_linger_ms), (MAX_MESSAGE_BYTES, 10, 5));
        assert_eq!(
            (s.message_group_header.as_str(), s.default_message_group.as_str()),
            ("x-bridge.ordering-key", "default")
        );
        // `wire_format` is every part's key, read before the transport's.
        read(&format!("{SENDER}wire_format = \"json\""), SqsSenderConfig::check).expect("valid");
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        let receiver = |extra: &str| read(&format!("{RECEIVER}{extra}"), SqsReceiverConfig::check).err();
        for (extra, key) in [
            ("max_messages = 11", "max_messages"),
            ("max_messages = 0", "max_messages"),
            ("wait_time_seconds = 21", "wait_time_seconds"),
            ("visibility_timeout = 0", "visibility_timeout"),
            ("visibility_timeout = 43201", "visibility_timeout"),
            ("queue_url = \"http://x/1/q\"", "queue_url"),
            ("max_mesages = 3", "max_mesages"),
        ] {
            assert_eq!(receiver(extra).as_deref(), Some(key), "{extra}");
        }
        let no_queue = read("endpoint_url = \"http://127.0.0.1:4566\"", SqsReceiverConfig::check).err();
        assert_eq!(no_queue.as_deref(), Some("queue_url"));
        let bad_endpoint = read("queue_name = \"q\"\nendpoint_url = \"127.0.0.1:4566\"", SqsReceiverConfig::check);
        assert_eq!(bad_endpoint.err().as_deref(), Some("endpoint_url"));

        let sender = |extra: &str| read(&format!("{SENDER}{extra}"), SqsSenderConfig::check).err();
        for (extra, key) in [
            ("batch_size = 0", "batch_size"),
            ("batch_size = 11", "batch_size"),
            ("max_message_bytes = 1023", "max_message_bytes"),
            ("max_message_bytes = 1048577", "max_message_bytes"),
            ("default_message_group = \"\"", "default_message_group"),
        ] {
            assert_eq!(sender(extra).as_deref(), Some(key), "{extra}");
        }
        let relative = read("queue_url = \"/000000000000/out\"", SqsSenderConfig::check).err();
        assert_eq!(relative.as_deref(), Some("queue_url"));
    }
}
