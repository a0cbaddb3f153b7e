//! The AMQP transports' keys: `type = "amqp10"` (AMQP 1.0, e.g. RabbitMQ's
//! `rabbitmq_amqp1_0` plugin) and `type = "amqp091"` (AMQP 0-9-1, RabbitMQ's
//! own protocol). Documented here and in the book.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{TlsConfig, WireFormat};

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
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
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
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
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
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
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
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: WireFormat,
}

/// The exchange types RabbitMQ declares.
pub const EXCHANGE_TYPES: [&str; 4] = ["direct", "fanout", "topic", "headers"];
