//! `[receivers.NAME]` and `[senders.NAME]` with `type = "amqp10"`: AMQP
//! 1.0 receiving links (settled by the route's outcome) and sending links
//! to one target address, e.g. RabbitMQ's `rabbitmq_amqp1_0` plugin.

use ferry_config::TlsConfig;
use ferry_core::transport::KeyProblem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_reconnect_initial_ms() -> u64 {
    500
}
fn default_reconnect_max_ms() -> u64 {
    30_000
}
fn default_credit() -> u32 {
    100
}
fn default_true() -> bool {
    true
}
fn default_send_timeout_ms() -> u64 {
    10_000
}
fn default_max_message_bytes() -> usize {
    16 * 1024 * 1024
}

/// How an AMQP 1.0 receiver gives a message back for a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Amqp10RetryOutcome {
    /// `modified` with `delivery-failed = true`: the broker counts the
    /// attempt in the message's delivery-count.
    #[default]
    Modified,
    /// `released`: the attempt is not counted by the broker.
    Released,
}

/// `type = "amqp10"` receiver: one receiving link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amqp10ReceiverConfig {
    /// `amqp://[user:password@]host[:port]` (SASL PLAIN from the URL; port
    /// 5672), or `amqps://` for TLS (port 5671; TLS from the first byte, as
    /// RabbitMQ's TLS listener expects).
    pub url: String,
    /// TLS files for `amqps://`: `{ ca_file, cert_file, key_file }` (PEM;
    /// the key PKCS#8, PKCS#1 or SEC1), every key optional. Without
    /// `ca_file` the system bundle `/etc/ssl/certs/ca-certificates.crt`
    /// verifies the broker, whose certificate must name the URL's host (DNS
    /// name or IP address).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Link source address, e.g. `/amq/queue/orders` on RabbitMQ 3.x (an
    /// existing queue) or `orders` on brokers that name queues directly.
    pub address: String,
    /// Link credit: messages the broker may send before ferry settles
    /// some. Default 100.
    #[serde(default = "default_credit")]
    pub credit: u32,
    /// How a retry gives the message back: `modified` (delivery-failed, so
    /// the broker counts the delivery) or `released`. Default `modified`.
    #[serde(default)]
    pub retry_outcome: Amqp10RetryOutcome,
    /// Larger messages are rejected at the broker as poison and counted.
    /// Default 16 MiB.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// First reconnect delay in milliseconds; each further one doubles,
    /// with ±30% jitter, up to `reconnect_max_ms`. Default 500.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 30000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
}

/// `type = "amqp10"` sender: one sending link to a fixed target address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amqp10SenderConfig {
    /// `amqp://[user:password@]host[:port]` (port 5672), or `amqps://` for
    /// TLS (port 5671).
    pub url: String,
    /// TLS files for `amqps://`: `{ ca_file, cert_file, key_file }` (PEM;
    /// the key PKCS#8, PKCS#1 or SEC1), every key optional. Without
    /// `ca_file` the system bundle `/etc/ssl/certs/ca-certificates.crt`
    /// verifies the broker, whose certificate must name the URL's host (DNS
    /// name or IP address).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Link target address, e.g. `/amq/queue/orders`, `/exchange/X/RK` or
    /// `/topic/RK` on RabbitMQ 3.x. A binding's address must be empty or
    /// equal to this: AMQP 1.0 links have one target.
    pub address: String,
    /// Sets the message header's `durable` flag. Default true.
    #[serde(default = "default_true")]
    pub durable: bool,
    /// How long to wait for the broker's outcome before the send counts as
    /// a transient failure, in milliseconds; the link is then replaced.
    /// Default 10000.
    #[serde(default = "default_send_timeout_ms")]
    pub send_timeout_ms: u64,
    /// First reconnect delay in milliseconds; each further one doubles,
    /// with ±30% jitter, up to `reconnect_max_ms`. Default 500.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 30000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
}

/// The URL as the connection reads it, and `tls` only with `amqps://`.
fn check_url(url: &str, tls: Option<&TlsConfig>) -> Result<(), KeyProblem> {
    crate::connection::parse_url(url).map_err(|e| KeyProblem::new("url", e))?;
    KeyProblem::tls(tls, url.starts_with("amqps://"), "amqps://")
}

impl Amqp10ReceiverConfig {
    /// The checks of the receiver's keys (`ferry validate`, and before a
    /// start).
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_url(&self.url, self.tls.as_ref())?;
        KeyProblem::reconnect(self.reconnect_initial_ms, self.reconnect_max_ms)?;
        if self.address.is_empty() {
            return Err(KeyProblem::new("address", "must name the link source"));
        }
        KeyProblem::at_least_one("credit", u64::from(self.credit))?;
        KeyProblem::at_least_one("max_message_bytes", self.max_message_bytes as u64)
    }
}

impl Amqp10SenderConfig {
    /// The checks of the sender's keys.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_url(&self.url, self.tls.as_ref())?;
        KeyProblem::reconnect(self.reconnect_initial_ms, self.reconnect_max_ms)?;
        KeyProblem::at_least_one("send_timeout_ms", self.send_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECEIVER: &str = "url = \"amqp://guest:guest@127.0.0.1:5672\"\naddress = \"/amq/queue/in\"\n";
    const SENDER: &str = "url = \"amqp://127.0.0.1\"\naddress = \"/exchange/amq.topic/out\"\n";

    fn read<T: serde::de::DeserializeOwned>(text: &str, check: fn(&T) -> Result<(), KeyProblem>) -> Result<T, String> {
        ferry_core::transport::read_part("amqp10", text, check)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let r = read(RECEIVER, Amqp10ReceiverConfig::check).expect("valid");
        assert_eq!((r.credit, r.retry_outcome, r.max_message_bytes), (100, Amqp10RetryOutcome::Modified, 16 << 20));
        let r = read(&format!("{RECEIVER}retry_outcome = \"released\""), Amqp10ReceiverConfig::check).expect("valid");
        assert_eq!(r.retry_outcome, Amqp10RetryOutcome::Released);
        let s = read(SENDER, Amqp10SenderConfig::check).expect("valid");
        assert!(s.durable);
        assert_eq!((s.send_timeout_ms, s.reconnect_initial_ms, s.reconnect_max_ms), (10_000, 500, 30_000));
        // `wire_format` is every part's key, read before the transport's.
        read(&format!("{SENDER}wire_format = \"json\""), Amqp10SenderConfig::check).expect("valid");
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        let receiver = |from: &str, to: &str| read(&RECEIVER.replace(from, to), Amqp10ReceiverConfig::check);
        let url = "amqp://guest:guest@127.0.0.1:5672";
        for (bad, key) in [
            (receiver(url, "http://h"), "url"),
            (receiver(url, "amqp://"), "url"),
            (receiver("address", "tls = { ca_file = \"/ca\" }\naddress"), "tls"),
            (receiver("\"/amq/queue/in\"", "\"\""), "address"),
            (receiver("/amq/queue/in\"", "q\"\ncredit = 0"), "credit"),
            (receiver("/amq/queue/in\"", "q\"\nretry_outcome = \"dropped\""), "retry_outcome"),
            (receiver("/amq/queue/in\"", "q\"\nreconnect_initial_ms = 0"), "reconnect_initial_ms"),
            (receiver("/amq/queue/in\"", "q\"\nmystery = 1"), "mystery"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
        let sender = |from: &str, to: &str| read(&SENDER.replace(from, to), Amqp10SenderConfig::check);
        for (bad, key) in [
            (sender("/out\"", "/out\"\nsend_timeout_ms = 0"), "send_timeout_ms"),
            (sender("address", "tls = { ca_file = \"/ca\" }\naddress"), "tls"),
            (sender("address", "adress"), "adress"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
    }
}
