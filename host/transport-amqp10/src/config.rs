//! `[receivers.NAME]` and `[senders.NAME]` with `type = "amqp10"`: AMQP
//! 1.0 receiving links (settled by the route's outcome) and sending links
//! to one target address, e.g. RabbitMQ's `rabbitmq_amqp1_0` plugin.

use ferry_config::{Secret, TlsConfig};
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
fn default_token_lifetime_s() -> u64 {
    3600
}
fn default_lock_renew_ms() -> u64 {
    10_000
}

/// The broker a link talks to, where it needs more than plain AMQP 1.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Amqp10Profile {
    /// Any AMQP 1.0 broker (RabbitMQ, ActiveMQ Artemis, Qpid): SASL PLAIN
    /// from the URL's credentials, or none.
    #[default]
    Generic,
    /// Azure Service Bus: SASL ANONYMOUS and a SAS token put on the `$cbs`
    /// node (renewed before it expires); the receiver renews the locks of
    /// held messages on the entity's `$management` node, can read one
    /// session, and dead-letters into the entity's dead-letter queue; the
    /// sender turns the ordering key into the session id.
    AzureServiceBus,
}

/// The Service Bus keys both sides share.
#[derive(Debug, Clone, Copy)]
pub struct ServiceBusKeys<'a> {
    pub profile: Amqp10Profile,
    pub url: &'a str,
    pub address: &'a str,
    pub sas_key_name: Option<&'a str>,
    pub sas_key: Option<&'a Secret>,
    pub token_lifetime_s: u64,
}

impl ServiceBusKeys<'_> {
    /// A Service Bus link needs a key name and key and takes no URL
    /// credentials (its SASL is ANONYMOUS); the SAS keys mean nothing to
    /// another broker.
    fn check(&self) -> Result<(), KeyProblem> {
        match self.profile {
            Amqp10Profile::Generic => {
                if self.sas_key_name.is_some() {
                    return Err(KeyProblem::new("sas_key_name", "is only for profile = \"azure_service_bus\""));
                }
                if self.sas_key.is_some() {
                    return Err(KeyProblem::new("sas_key", "is only for profile = \"azure_service_bus\""));
                }
                Ok(())
            }
            Amqp10Profile::AzureServiceBus => {
                if self.sas_key_name.is_none_or(str::is_empty) {
                    return Err(KeyProblem::new("sas_key_name", "is needed with profile = \"azure_service_bus\""));
                }
                if self.sas_key.is_none_or(Secret::is_empty) {
                    return Err(KeyProblem::new("sas_key", "is needed with profile = \"azure_service_bus\""));
                }
                let url = crate::connection::parse_url(self.url).map_err(|e| KeyProblem::new("url", e))?;
                if !url.username().is_empty() || url.password().is_some() {
                    return Err(KeyProblem::new(
                        "url",
                        "takes no credentials with profile = \"azure_service_bus\" (the SAS key authenticates)",
                    ));
                }
                if self.address.trim_start_matches('/').is_empty() {
                    return Err(KeyProblem::new("address", "must name the queue, topic or subscription"));
                }
                KeyProblem::at_least_one("token_lifetime_s", self.token_lifetime_s)
            }
        }
    }

    /// The SAS credentials a Service Bus link puts on `$cbs`; `None` for
    /// other brokers.
    pub fn sas(&self) -> Option<crate::service_bus::Sas> {
        match (self.profile, self.sas_key_name, self.sas_key) {
            (Amqp10Profile::AzureServiceBus, Some(key_name), Some(key)) => Some(crate::service_bus::Sas {
                key_name: key_name.to_owned(),
                key: key.clone(),
                lifetime: std::time::Duration::from_secs(self.token_lifetime_s),
            }),
            _ => None,
        }
    }
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
    /// `generic` (default) or `azure_service_bus` (see the book's AMQP
    /// 1.0 page).
    #[serde(default)]
    pub profile: Amqp10Profile,
    /// Service Bus: the shared access policy's name.
    #[serde(default)]
    pub sas_key_name: Option<String>,
    /// Service Bus: the shared access policy's key (as the portal shows
    /// it), which signs the SAS tokens.
    #[serde(default)]
    pub sas_key: Option<Secret>,
    /// Service Bus: how long each SAS token is valid, in seconds; a new one
    /// is put when a fifth of that is left. Default 3600.
    #[serde(default = "default_token_lifetime_s")]
    pub token_lifetime_s: u64,
    /// Service Bus: how often the locks of held messages are renewed, in
    /// milliseconds; keep it well under the entity's lock duration.
    /// Default 10000.
    #[serde(default = "default_lock_renew_ms")]
    pub lock_renew_ms: u64,
    /// Service Bus: read one session of a session-enabled entity, by its
    /// id, or `"*"` for the next session the broker offers. Default: no
    /// session filter.
    #[serde(default)]
    pub session: Option<String>,
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
    /// `generic` (default) or `azure_service_bus` (see the book's AMQP
    /// 1.0 page).
    #[serde(default)]
    pub profile: Amqp10Profile,
    /// Service Bus: the shared access policy's name.
    #[serde(default)]
    pub sas_key_name: Option<String>,
    /// Service Bus: the shared access policy's key (as the portal shows
    /// it), which signs the SAS tokens.
    #[serde(default)]
    pub sas_key: Option<Secret>,
    /// Service Bus: how long each SAS token is valid, in seconds; a new one
    /// is put when a fifth of that is left. Default 3600.
    #[serde(default = "default_token_lifetime_s")]
    pub token_lifetime_s: u64,
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
        KeyProblem::at_least_one("max_message_bytes", self.max_message_bytes as u64)?;
        self.service_bus().check()?;
        if self.profile == Amqp10Profile::AzureServiceBus {
            KeyProblem::at_least_one("lock_renew_ms", self.lock_renew_ms)?;
        } else if self.session.is_some() {
            return Err(KeyProblem::new("session", "is only for profile = \"azure_service_bus\""));
        }
        if self.session.as_deref().is_some_and(str::is_empty) {
            return Err(KeyProblem::new("session", "must be a session id, or \"*\" for any session"));
        }
        Ok(())
    }

    /// The Service Bus keys.
    pub fn service_bus(&self) -> ServiceBusKeys<'_> {
        ServiceBusKeys {
            profile: self.profile,
            url: &self.url,
            address: &self.address,
            sas_key_name: self.sas_key_name.as_deref(),
            sas_key: self.sas_key.as_ref(),
            token_lifetime_s: self.token_lifetime_s,
        }
    }
}

impl Amqp10SenderConfig {
    /// The checks of the sender's keys.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_url(&self.url, self.tls.as_ref())?;
        KeyProblem::reconnect(self.reconnect_initial_ms, self.reconnect_max_ms)?;
        KeyProblem::at_least_one("send_timeout_ms", self.send_timeout_ms)?;
        self.service_bus().check()
    }

    /// The Service Bus keys.
    pub fn service_bus(&self) -> ServiceBusKeys<'_> {
        ServiceBusKeys {
            profile: self.profile,
            url: &self.url,
            address: &self.address,
            sas_key_name: self.sas_key_name.as_deref(),
            sas_key: self.sas_key.as_ref(),
            token_lifetime_s: self.token_lifetime_s,
        }
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

    #[test]
    fn the_service_bus_profile_needs_its_keys_and_no_url_credentials() {
        let bus =
            "url = \"amqps://ns.servicebus.windows.net\"\naddress = \"orders\"\nprofile = \"azure_service_bus\"\n";
        let keys = "sas_key_name = \"policy\"\nsas_key = \"k\"\n";
        let r = read(&format!("{bus}{keys}session = \"*\""), Amqp10ReceiverConfig::check).expect("valid");
        assert_eq!((r.profile, r.token_lifetime_s, r.lock_renew_ms), (Amqp10Profile::AzureServiceBus, 3600, 10_000));
        let sas = r.service_bus().sas().expect("SAS credentials");
        assert_eq!((sas.key_name.as_str(), sas.key.expose()), ("policy", "k"));
        read(&format!("{bus}{keys}"), Amqp10SenderConfig::check).expect("valid sender");
        for (text, key) in [
            (bus.to_owned(), "sas_key_name"),
            (format!("{bus}sas_key_name = \"policy\""), "sas_key"),
            (format!("{bus}{keys}").replace("amqps://ns", "amqps://u:p@ns"), "url"),
            (format!("{bus}{keys}token_lifetime_s = 0"), "token_lifetime_s"),
            (format!("{bus}{keys}lock_renew_ms = 0"), "lock_renew_ms"),
            (format!("{bus}{keys}session = \"\""), "session"),
            (format!("{RECEIVER}{keys}"), "sas_key_name"),
            (format!("{RECEIVER}session = \"s\""), "session"),
        ] {
            assert_eq!(read(&text, Amqp10ReceiverConfig::check).err().as_deref(), Some(key), "{text}");
        }
        assert!(read(&format!("{SENDER}sas_key = \"k\""), Amqp10SenderConfig::check).is_err());
        assert!(
            Amqp10ReceiverConfig::service_bus(&read(RECEIVER, Amqp10ReceiverConfig::check).expect("valid"))
                .sas()
                .is_none()
        );
    }
}
