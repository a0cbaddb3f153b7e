//! `[receivers.NAME]` and `[senders.NAME]` with `type = "amqp091"`: AMQP
//! 0-9-1 (RabbitMQ's own protocol) queue consumers acknowledged after the
//! route, and publishers with confirms.

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
fn default_exchange_type() -> String {
    "direct".to_owned()
}
fn default_exchange_header() -> String {
    "amqp091.exchange".to_owned()
}
fn default_binding_keys() -> RoutingKeys {
    RoutingKeys::One("#".to_owned())
}
fn default_max_message_bytes() -> usize {
    16 * 1024 * 1024
}

/// One routing key or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RoutingKeys {
    One(String),
    Many(Vec<String>),
}

impl RoutingKeys {
    /// The keys as a list.
    pub fn keys(&self) -> Vec<String> {
        match self {
            RoutingKeys::One(k) => vec![k.clone()],
            RoutingKeys::Many(ks) => ks.clone(),
        }
    }
}

/// `type = "amqp091"` receiver: consumes one queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amqp091ReceiverConfig {
    /// `amqp://[user:password@]host[:port][/vhost]` (vhost `/` is `%2f`;
    /// port 5672), or `amqps://` for TLS (port 5671).
    pub url: String,
    /// TLS files for `amqps://`: `{ ca_file, cert_file, key_file }` (PEM;
    /// the key PKCS#8), every key optional. Without `ca_file` the system
    /// roots verify the broker.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Queue to consume.
    pub queue: String,
    /// Only check that the queue exists (queue.declare passive) instead of
    /// declaring it durable. Default false.
    #[serde(default)]
    pub queue_passive: bool,
    /// Declare the queue with `x-single-active-consumer`: of all consumers
    /// (every ferry instance on this queue), the broker delivers to one at
    /// a time and fails over to the next when it goes, so the queue's order
    /// holds across instances. Not with `queue_passive` (declare the
    /// argument where the queue is declared). RabbitMQ refuses to redeclare
    /// an existing queue with other arguments (PRECONDITION_FAILED):
    /// switching it on for a queue that exists means recreating the queue.
    /// Default false.
    #[serde(default)]
    pub single_active_consumer: bool,
    /// Exchange to bind the queue to. None: consume the queue as it is.
    #[serde(default)]
    pub exchange: Option<String>,
    /// `direct` (default), `fanout`, `topic` or `headers`.
    #[serde(default = "default_exchange_type")]
    pub exchange_type: String,
    /// Only check that the exchange exists instead of declaring it (for
    /// exchanges managed elsewhere, whose settings may differ: declaring
    /// them would fail with PRECONDITION_FAILED). Default false.
    #[serde(default)]
    pub exchange_passive: bool,
    /// Binding key, or a list of them (`["orders.*", "audit.#"]`), for the
    /// queue on `exchange`. Default `#`.
    #[serde(default = "default_binding_keys")]
    pub routing_key: RoutingKeys,
    /// Unacknowledged messages the broker may send (basic.qos). Default 100.
    #[serde(default = "default_credit")]
    pub prefetch: u32,
    /// Larger messages are rejected without requeue (dead-lettered by the
    /// broker if the queue has a dead-letter exchange) and counted
    /// (`too_large`). Default 16 MiB.
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

/// `type = "amqp091"` sender: publishes with publisher confirms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amqp091SenderConfig {
    /// `amqp://[user:password@]host[:port][/vhost]` (vhost `/` is `%2f`;
    /// port 5672), or `amqps://` for TLS (port 5671).
    pub url: String,
    /// TLS files for `amqps://`: `{ ca_file, cert_file, key_file }` (PEM;
    /// the key PKCS#8), every key optional. Without `ca_file` the system
    /// roots verify the broker.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Exchange to publish to. Default `""` (the default exchange, where the
    /// routing key is a queue name).
    #[serde(default)]
    pub exchange: String,
    /// Declare `exchange` with this type (`direct`, `fanout`, `topic`,
    /// `headers`) at connect. None: publish to it as it is.
    #[serde(default)]
    pub exchange_type: Option<String>,
    /// With `exchange_type`: only check the exchange exists. Default false.
    #[serde(default)]
    pub exchange_passive: bool,
    /// Routing key used when a binding's address is empty.
    #[serde(default)]
    pub routing_key: String,
    /// Take the exchange from the message's `exchange_header` header when
    /// it has one (routing by message content). Default false.
    #[serde(default)]
    pub exchange_from_header: bool,
    /// Header naming the exchange when `exchange_from_header` is on.
    /// Default `amqp091.exchange`.
    #[serde(default = "default_exchange_header")]
    pub exchange_header: String,
    /// Publish as `mandatory`: a message no queue takes is returned and
    /// fails permanently instead of vanishing. Default true.
    #[serde(default = "default_true")]
    pub mandatory: bool,
    /// Persistent delivery mode (2). Default true.
    #[serde(default = "default_true")]
    pub persistent: bool,
    /// How long to wait for the publisher confirm, in milliseconds, before
    /// the send counts as a transient failure; the channel is then
    /// replaced. Default 10000.
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

/// The exchange types RabbitMQ declares.
pub const EXCHANGE_TYPES: [&str; 4] = ["direct", "fanout", "topic", "headers"];

/// The URL as the connection reads it, and `tls` only with `amqps://`.
fn check_url(url: &str, tls: Option<&TlsConfig>) -> Result<(), KeyProblem> {
    crate::connection::parse_url(url).map_err(|e| KeyProblem::new("url", e))?;
    KeyProblem::tls(tls, url.starts_with("amqps://"), "amqps://")
}

fn check_exchange_type(key: &str, t: &str) -> Result<(), KeyProblem> {
    if EXCHANGE_TYPES.contains(&t) {
        return Ok(());
    }
    Err(KeyProblem::new(key, format!("{t:?} is not one of {}", EXCHANGE_TYPES.join(", "))))
}

impl Amqp091ReceiverConfig {
    /// The checks of the receiver's keys (`ferry validate`, and before a
    /// start).
    pub fn check(&self) -> Result<(), KeyProblem> {
        let a = self;
        check_url(&a.url, a.tls.as_ref())?;
        KeyProblem::reconnect(a.reconnect_initial_ms, a.reconnect_max_ms)?;
        if a.queue.is_empty() {
            return Err(KeyProblem::new("queue", "must name a queue"));
        }
        if a.single_active_consumer && a.queue_passive {
            return Err(KeyProblem::new(
                "single_active_consumer",
                "is an argument of the queue's declaration, which queue_passive leaves to whoever declares \
                 the queue; declare it there with x-single-active-consumer, or drop queue_passive",
            ));
        }
        check_exchange_type("exchange_type", &a.exchange_type)?;
        if a.exchange.as_deref() == Some("") {
            return Err(KeyProblem::new(
                "exchange",
                "the default exchange cannot be bound; leave exchange unset to consume the queue as it is",
            ));
        }
        if a.exchange.is_some() && a.routing_key.keys().is_empty() {
            return Err(KeyProblem::new("routing_key", "needs at least one binding key"));
        }
        if a.prefetch == 0 || a.prefetch > u32::from(u16::MAX) {
            return Err(KeyProblem::new("prefetch", "must be between 1 and 65535"));
        }
        KeyProblem::at_least_one("max_message_bytes", a.max_message_bytes as u64)
    }
}

impl Amqp091SenderConfig {
    /// The checks of the sender's keys.
    pub fn check(&self) -> Result<(), KeyProblem> {
        let a = self;
        check_url(&a.url, a.tls.as_ref())?;
        KeyProblem::reconnect(a.reconnect_initial_ms, a.reconnect_max_ms)?;
        if let Some(t) = &a.exchange_type {
            check_exchange_type("exchange_type", t)?;
            if a.exchange.is_empty() {
                return Err(KeyProblem::new(
                    "exchange_type",
                    "the default exchange cannot be declared; set exchange too",
                ));
            }
        }
        if a.exchange_from_header && a.exchange_header.is_empty() {
            return Err(KeyProblem::new("exchange_header", "must not be empty"));
        }
        KeyProblem::at_least_one("send_timeout_ms", a.send_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECEIVER: &str = "url = \"amqp://guest:guest@127.0.0.1:5672/%2f\"\nqueue = \"orders\"\nexchange = \"events\"\n\
                            exchange_type = \"topic\"\nrouting_key = [\"orders.*\", \"audit.#\"]\n";
    const SENDER: &str =
        "url = \"amqp://127.0.0.1\"\nexchange = \"routed\"\nexchange_type = \"direct\"\nexchange_from_header = true\n";

    fn read<T: serde::de::DeserializeOwned>(text: &str, check: fn(&T) -> Result<(), KeyProblem>) -> Result<T, String> {
        ferry_core::transport::read_part("amqp091", text, check)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let r = read(RECEIVER, Amqp091ReceiverConfig::check).expect("valid");
        assert_eq!(r.routing_key.keys(), vec!["orders.*".to_owned(), "audit.#".to_owned()]);
        assert_eq!((r.prefetch, r.queue_passive, r.single_active_consumer), (100, false, false));
        let r = read("url = \"amqp://h\"\nqueue = \"q\"\n", Amqp091ReceiverConfig::check).expect("valid");
        assert_eq!(
            (r.exchange, r.exchange_type.as_str(), r.routing_key.keys()),
            (None, "direct", vec!["#".to_owned()])
        );
        let s = read(SENDER, Amqp091SenderConfig::check).expect("valid");
        assert!(s.mandatory && s.persistent && s.exchange_from_header);
        assert_eq!((s.exchange_header.as_str(), s.send_timeout_ms), ("amqp091.exchange", 10_000));
        // `wire_format` is every part's key, read before the transport's.
        read(&format!("{SENDER}wire_format = \"json\""), Amqp091SenderConfig::check).expect("valid");
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        let receiver = |from: &str, to: &str| read(&RECEIVER.replace(from, to), Amqp091ReceiverConfig::check);
        for (bad, key) in [
            (receiver("amqp://guest", "http://guest"), "url"),
            (receiver("guest@127.0.0.1:5672", "guest@"), "url"),
            (receiver("queue", "tls = { ca_file = \"/ca\" }\nqueue"), "tls"),
            (receiver("\"orders\"", "\"\""), "queue"),
            (receiver("\"topic\"", "\"fan\""), "exchange_type"),
            (receiver("\"events\"", "\"\""), "exchange"),
            (receiver("[\"orders.*\", \"audit.#\"]", "[]"), "routing_key"),
            (receiver("queue", "prefetch = 0\nqueue"), "prefetch"),
            (receiver("queue", "prefetch = 70000\nqueue"), "prefetch"),
            (receiver("queue", "queue_passive = true\nsingle_active_consumer = true\nqueue"), "single_active_consumer"),
            (receiver("queue", "reconnect_max_ms = 0\nqueue"), "reconnect_max_ms"),
            (receiver("queue", "mystery = 1\nqueue"), "mystery"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
        let sender = |from: &str, to: &str| read(&SENDER.replace(from, to), Amqp091SenderConfig::check);
        for (bad, key) in [
            (sender("\"routed\"", "\"\""), "exchange_type"),
            (sender("\"direct\"", "\"fan\""), "exchange_type"),
            (
                sender("exchange_from_header = true", "exchange_from_header = true\nexchange_header = \"\""),
                "exchange_header",
            ),
            (sender("exchange_from_header = true", "send_timeout_ms = 0"), "send_timeout_ms"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
    }
}
