//! The one trait a transport crate implements so the daemon can use it
//! without knowing it: building receivers and senders from their config,
//! the URL checks of `ferry validate`, the `--connect` probe, the `ferry
//! test` fixtures, the `--explain` probe and the secrets `ferry render`
//! masks.
//!
//! A transport implements [`TypedTransport`] on its own config types; the
//! daemon holds one table of them as `&dyn` [`Transport`] and looks each
//! receiver and sender up by its `type`. Adding a transport is a crate and
//! a line in that table.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use ferry_config::{PartSchemas, PartTable};
use ferry_envelope::Timestamp;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::TransportError;
use crate::fidelity::{Find, Probe};
use crate::metrics::Metrics;
use crate::ports::{OutboundMessage, Receiver, Sender};
use crate::wire::toml_value::Value as TomlValue;
use crate::wire::{Admitted, View};

/// What the daemon hands a transport to build a receiver or a sender.
pub struct Parts<'a> {
    pub metrics: &'a Metrics,
    /// This process's instance id (`[instance] id`), for names that must
    /// differ between instances of one config.
    pub instance: &'a str,
    /// The route's `max_in_flight` (a receiver's own prefetch or window).
    pub max_in_flight: usize,
    /// The route is `shared_outbox`: a receiver that answers its caller
    /// (HTTP) may answer once the message is durable.
    pub durable_first: bool,
    /// What the daemon runs that a transport may use (the SQS endpoint's
    /// queues, the transport components); empty outside a daemon (the
    /// CLI).
    pub services: &'a Services,
}

/// What the daemon runs that transports may use, found by type: each
/// transport asks for the one it knows.
#[derive(Default, Clone)]
pub struct Services {
    items: Vec<Arc<dyn Any + Send + Sync>>,
}

impl Services {
    /// With `item` added (an item of a type already there is found first).
    pub fn with<T: Any + Send + Sync>(mut self, item: T) -> Self {
        self.items.push(Arc::new(item));
        self
    }

    /// The item of type `T`, if there is one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.items.iter().find_map(|item| item.downcast_ref::<T>())
    }
}

/// A config problem a transport found: the key below the receiver's or
/// sender's own (`url`, `api_url`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyProblem {
    pub key: String,
    pub message: String,
}

impl KeyProblem {
    pub fn new(key: impl Into<String>, message: impl ToString) -> Self {
        Self { key: key.into(), message: message.to_string() }
    }

    /// `reconnect_initial_ms` and `reconnect_max_ms`, as every transport
    /// that reconnects spells them ([`ferry_config::reconnect_problem`]).
    pub fn reconnect(initial_ms: u64, max_ms: u64) -> Result<(), KeyProblem> {
        ferry_config::reconnect_problem(initial_ms, max_ms).map_or(Ok(()), |(key, why)| Err(KeyProblem::new(key, why)))
    }

    /// `tls`, which only a `secure` URL (one with `tls_scheme`,
    /// `amqps://`) may have ([`ferry_config::TlsConfig::problem`]).
    pub fn tls(tls: Option<&ferry_config::TlsConfig>, secure: bool, tls_scheme: &str) -> Result<(), KeyProblem> {
        tls.and_then(|t| t.problem(secure, tls_scheme)).map_or(Ok(()), |why| Err(KeyProblem::new("tls", why)))
    }

    /// The listen key `key`'s `value` as an address (`IP:port`).
    pub fn listen_address(key: &str, value: &str) -> Result<std::net::SocketAddr, KeyProblem> {
        value.parse().map_err(|_| KeyProblem::new(key, format!("{value:?} is not an IP:port address")))
    }

    /// A count key that must be at least 1.
    pub fn at_least_one(key: &str, value: u64) -> Result<(), KeyProblem> {
        if value == 0 { Err(KeyProblem::new(key, "must be at least 1")) } else { Ok(()) }
    }
}

/// Something a receiver or sender takes that no other part of the config
/// may take too (a listen address, a client id at one broker): the
/// daemon refuses the second taker by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The key below the part's that takes it (`listen`, `client_id`).
    pub key: String,
    /// What is taken, written the same by every transport that takes it
    /// (`listen address 127.0.0.1:8080`).
    pub what: String,
    /// What the second taker is told after the first's key (`listens
    /// there already`).
    pub clash: String,
}

impl Claim {
    /// The listen address a listen key holds, when it is one and not port
    /// 0 ([`KeyProblem::listen_address`] says what is wrong otherwise).
    pub fn listen_at(key: &str, value: &str) -> Vec<Claim> {
        KeyProblem::listen_address(key, value).ok().and_then(|addr| Claim::listen(key, addr)).into_iter().collect()
    }

    /// The listen address `addr` (port 0 is never taken: each gets its
    /// own port).
    pub fn listen(key: &str, addr: std::net::SocketAddr) -> Option<Claim> {
        (addr.port() != 0).then(|| Claim {
            key: key.to_owned(),
            what: format!("listen address {addr}"),
            clash: "listens there already".to_owned(),
        })
    }
}

/// A transport as its crate writes it, on its own config types.
#[async_trait]
pub trait TypedTransport: Send + Sync + 'static {
    /// `[receivers.NAME]` of this transport: its keys but `type` and
    /// `wire_format`, deserialised from the table as written (unknown keys
    /// refused), and described in the schema and the book's reference by
    /// their doc comments.
    type ReceiverConfig: Send + Sync + Clone + DeserializeOwned + JsonSchema;
    /// `[senders.NAME]` of this transport, as the receiver's.
    type SenderConfig: Send + Sync + Clone + DeserializeOwned + JsonSchema;

    /// The `type` in config and the `kind` label in metrics (`mqtt`).
    const KIND: &'static str;

    /// Parses what the receiver connects to with the code it connects
    /// with, so a URL that cannot work is refused at validation rather
    /// than retried at connect.
    /// (`name` is the receiver's, for defaults made of it.)
    fn check_receiver(&self, name: &str, config: &Self::ReceiverConfig) -> Result<(), KeyProblem> {
        let _ = (name, config);
        Ok(())
    }

    /// As [`TypedTransport::check_receiver`], for a sender.
    fn check_sender(&self, name: &str, config: &Self::SenderConfig) -> Result<(), KeyProblem> {
        let _ = (name, config);
        Ok(())
    }

    /// What the receiver takes that no other part may take too (as the
    /// receiver of the instance `instance` takes it).
    fn receiver_claims(&self, name: &str, config: &Self::ReceiverConfig, instance: &str) -> Vec<Claim> {
        let _ = (name, config, instance);
        Vec::new()
    }

    /// As [`TypedTransport::receiver_claims`], for a sender.
    fn sender_claims(&self, name: &str, config: &Self::SenderConfig, instance: &str) -> Vec<Claim> {
        let _ = (name, config, instance);
        Vec::new()
    }

    /// The section of the config document (a dotted path such as
    /// `endpoints.sqs`) that must be set for a part of this transport to
    /// work: the daemon refuses the part without it.
    fn needs_section(&self) -> Option<&'static str> {
        None
    }

    /// The plugin the receiver runs (a transport component), which the
    /// daemon loads with the others; by default none.
    fn receiver_plugin(&self, config: &Self::ReceiverConfig) -> Option<String> {
        let _ = config;
        None
    }

    /// As [`TypedTransport::receiver_plugin`], for a sender.
    fn sender_plugin(&self, config: &Self::SenderConfig) -> Option<String> {
        let _ = config;
        None
    }

    /// `ferry validate`: what can be checked of the part with the daemon's
    /// services and without connecting (a transport component: its plugin
    /// is loaded, exports the half, and its `open` accepts the config).
    /// Blocking; by default nothing.
    fn validate_receiver(&self, name: &str, config: &Self::ReceiverConfig, parts: &Parts<'_>) -> Result<(), String> {
        let _ = (name, config, parts);
        Ok(())
    }

    /// As [`TypedTransport::validate_receiver`], for a sender.
    fn validate_sender(&self, name: &str, config: &Self::SenderConfig, parts: &Parts<'_>) -> Result<(), String> {
        let _ = (name, config, parts);
        Ok(())
    }

    /// The receiver `name`; nothing connects until it runs.
    fn receiver(
        &self,
        name: &str,
        config: &Self::ReceiverConfig,
        parts: &Parts<'_>,
    ) -> Result<Arc<dyn Receiver>, String>;

    /// The sender `name`, connecting in the background.
    fn sender(&self, name: &str, config: &Self::SenderConfig, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String>;

    /// Whether the receiver reads the JSON wire format itself (the daemon
    /// unpacks it for the others).
    fn receiver_reads_wire_format(&self) -> bool {
        false
    }

    /// Whether the sender writes the JSON wire format itself (the daemon
    /// packs it for the others).
    fn sender_writes_wire_format(&self) -> bool {
        false
    }

    /// `ferry validate --connect`: connects as the receiver would, under
    /// an identity of its own, and says what it found.
    async fn probe_receiver(&self, name: &str, config: &Self::ReceiverConfig) -> Result<String, TransportError>;

    /// As [`TypedTransport::probe_receiver`], for a sender.
    async fn probe_sender(&self, name: &str, config: &Self::SenderConfig) -> Result<String, TransportError>;

    /// `ferry test`: what the receiver makes of a fixture message (its
    /// ingress mapping), before the wire format is unpacked.
    fn fixture_receive(
        &self,
        config: &Self::ReceiverConfig,
        input: TomlValue,
        now: Timestamp,
    ) -> Result<Admitted, String>;

    /// `ferry test`: what the sender would send for `msg` (its egress
    /// mapping), as JSON.
    fn fixture_send(
        &self,
        config: &Self::SenderConfig,
        msg: &OutboundMessage,
        now: Timestamp,
    ) -> Result<View, TransportError>;

    /// Secrets in the receiver's config that `ferry render` masks (tokens,
    /// API keys; passwords in URLs are masked anyway).
    fn receiver_secrets(&self, config: &Self::ReceiverConfig) -> Vec<String> {
        let _ = config;
        Vec::new()
    }

    /// As [`TypedTransport::receiver_secrets`], for a sender.
    fn sender_secrets(&self, config: &Self::SenderConfig) -> Vec<String> {
        let _ = config;
        Vec::new()
    }

    /// `ferry validate --explain`: a fixture message for the receiver that
    /// carries everything this transport can carry, and where each lands.
    fn fidelity_probe(&self, config: &Self::ReceiverConfig) -> Probe;

    /// Why only some of the extra headers reach this transport's sender.
    fn lossy_note(&self) -> &'static str {
        "the target cannot carry them"
    }

    /// `ferry validate --explain`: what a sender with `config` promises
    /// less than the rest (a send that is done before the target has the
    /// message), or nothing.
    fn sender_warning(&self, config: &Self::SenderConfig) -> Option<&'static str> {
        let _ = config;
        None
    }

    /// `ferry validate --explain`: which failed sends this transport's
    /// sender counts as the target being unavailable (an outage: the
    /// message is held, no replay is spent).
    fn outage_note(&self) -> &'static str {
        "a send that gets no answer"
    }

    /// Why this transport's sender lost what `find` looks for, where it
    /// can say.
    fn lost_note(&self, find: Find) -> Option<&'static str> {
        (find == Find::Expiry).then_some("the target gets no expiry")
    }
}

/// A transport as the daemon holds it: [`TypedTransport`] over a part's
/// table as written ([`PartTable`]). Handed another kind's part,
/// each method fails (a wiring bug) rather than guessing.
#[async_trait]
pub trait Transport: Send + Sync {
    fn kind(&self) -> &'static str;
    /// The schemas of this transport's receiver and sender tables.
    fn schemas(&self, generator: &mut schemars::SchemaGenerator) -> PartSchemas;
    fn check_receiver(&self, name: &str, config: &PartTable) -> Result<(), KeyProblem>;
    fn check_sender(&self, name: &str, config: &PartTable) -> Result<(), KeyProblem>;
    fn receiver_claims(&self, name: &str, config: &PartTable, instance: &str) -> Vec<Claim>;
    fn sender_claims(&self, name: &str, config: &PartTable, instance: &str) -> Vec<Claim>;
    fn needs_section(&self) -> Option<&'static str>;
    fn receiver_plugin(&self, config: &PartTable) -> Option<String>;
    fn sender_plugin(&self, config: &PartTable) -> Option<String>;
    fn validate_receiver(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<(), String>;
    fn validate_sender(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<(), String>;
    fn receiver(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<Arc<dyn Receiver>, String>;
    fn sender(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String>;
    fn receiver_reads_wire_format(&self) -> bool;
    fn sender_writes_wire_format(&self) -> bool;
    async fn probe_receiver(&self, name: &str, config: &PartTable) -> Result<String, TransportError>;
    async fn probe_sender(&self, name: &str, config: &PartTable) -> Result<String, TransportError>;
    fn fixture_receive(&self, config: &PartTable, input: TomlValue, now: Timestamp) -> Result<Admitted, String>;
    fn fixture_send(&self, config: &PartTable, msg: &OutboundMessage, now: Timestamp) -> Result<View, TransportError>;
    fn receiver_secrets(&self, config: &PartTable) -> Vec<String>;
    fn sender_secrets(&self, config: &PartTable) -> Vec<String>;
    fn fidelity_probe(&self, config: &PartTable) -> Result<Probe, String>;
    fn lossy_note(&self) -> &'static str;
    fn lost_note(&self, find: Find) -> Option<&'static str>;
    fn sender_warning(&self, config: &PartTable) -> Option<&'static str>;
    fn outage_note(&self) -> &'static str;
}

fn wrong_kind(transport: &str, got: &str) -> String {
    format!("the {transport} transport was handed a {got} config (a wiring bug)")
}

/// `config` as `T`'s config: its table read (with `wire_format` where the
/// transport reads the wire format itself); a table that does not read is
/// a problem with its key.
fn part_of<C: DeserializeOwned>(kind: &str, config: &PartTable, wire_format: bool) -> Result<C, KeyProblem> {
    if config.kind != kind {
        return Err(KeyProblem::new("type", wrong_kind(kind, &config.kind)));
    }
    let read = if wire_format { config.parse_with_wire_format() } else { config.parse() };
    read.map_err(|e| KeyProblem::new(e.path, e.message))
}

fn receiver_of<T: TypedTransport>(transport: &T, config: &PartTable) -> Result<T::ReceiverConfig, KeyProblem> {
    part_of(T::KIND, config, transport.receiver_reads_wire_format())
}

fn sender_of<T: TypedTransport>(transport: &T, config: &PartTable) -> Result<T::SenderConfig, KeyProblem> {
    part_of(T::KIND, config, transport.sender_writes_wire_format())
}

/// A part's keys as the daemon hands them to a transport that leaves the
/// wire format to the daemon, from `text` (the part's table without
/// `type`): read, then `check`ed; on failure the key below the part's. For
/// the config tests of transport crates.
pub fn read_part<T: DeserializeOwned>(
    kind: &str,
    text: &str,
    check: impl Fn(&T) -> Result<(), KeyProblem>,
) -> Result<T, String> {
    let keys: toml::Table = toml::from_str(text).map_err(|e| format!("not TOML: {e}"))?;
    let part = PartTable::new(kind, keys).map_err(|e| e.path)?;
    let config: T = part.parse().map_err(|e| e.path)?;
    check(&config).map_err(|p| p.key)?;
    Ok(config)
}

impl std::fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() { f.write_str(&self.message) } else { write!(f, "{}: {}", self.key, self.message) }
    }
}

#[async_trait]
impl<T: TypedTransport> Transport for T {
    fn kind(&self) -> &'static str {
        T::KIND
    }

    fn schemas(&self, generator: &mut schemars::SchemaGenerator) -> PartSchemas {
        PartSchemas {
            kind: T::KIND,
            receiver: generator.subschema_for::<T::ReceiverConfig>(),
            sender: generator.subschema_for::<T::SenderConfig>(),
        }
    }

    fn check_receiver(&self, name: &str, config: &PartTable) -> Result<(), KeyProblem> {
        let c = receiver_of(self, config)?;
        TypedTransport::check_receiver(self, name, &c)
    }

    fn check_sender(&self, name: &str, config: &PartTable) -> Result<(), KeyProblem> {
        let c = sender_of(self, config)?;
        TypedTransport::check_sender(self, name, &c)
    }

    fn receiver_claims(&self, name: &str, config: &PartTable, instance: &str) -> Vec<Claim> {
        receiver_of(self, config).map(|c| TypedTransport::receiver_claims(self, name, &c, instance)).unwrap_or_default()
    }

    fn sender_claims(&self, name: &str, config: &PartTable, instance: &str) -> Vec<Claim> {
        sender_of(self, config).map(|c| TypedTransport::sender_claims(self, name, &c, instance)).unwrap_or_default()
    }

    fn needs_section(&self) -> Option<&'static str> {
        TypedTransport::needs_section(self)
    }

    fn receiver_plugin(&self, config: &PartTable) -> Option<String> {
        receiver_of(self, config).ok().and_then(|c| TypedTransport::receiver_plugin(self, &c))
    }

    fn sender_plugin(&self, config: &PartTable) -> Option<String> {
        sender_of(self, config).ok().and_then(|c| TypedTransport::sender_plugin(self, &c))
    }

    fn validate_receiver(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<(), String> {
        TypedTransport::validate_receiver(self, name, &receiver_of(self, config).map_err(|e| e.to_string())?, parts)
    }

    fn validate_sender(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<(), String> {
        TypedTransport::validate_sender(self, name, &sender_of(self, config).map_err(|e| e.to_string())?, parts)
    }

    fn receiver(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<Arc<dyn Receiver>, String> {
        TypedTransport::receiver(self, name, &receiver_of(self, config).map_err(|e| e.to_string())?, parts)
    }

    fn sender(&self, name: &str, config: &PartTable, parts: &Parts<'_>) -> Result<Arc<dyn Sender>, String> {
        TypedTransport::sender(self, name, &sender_of(self, config).map_err(|e| e.to_string())?, parts)
    }

    fn receiver_reads_wire_format(&self) -> bool {
        TypedTransport::receiver_reads_wire_format(self)
    }

    fn sender_writes_wire_format(&self) -> bool {
        TypedTransport::sender_writes_wire_format(self)
    }

    async fn probe_receiver(&self, name: &str, config: &PartTable) -> Result<String, TransportError> {
        let c = receiver_of(self, config).map_err(|e| TransportError::permanent(e.to_string()))?;
        TypedTransport::probe_receiver(self, name, &c).await
    }

    async fn probe_sender(&self, name: &str, config: &PartTable) -> Result<String, TransportError> {
        let c = sender_of(self, config).map_err(|e| TransportError::permanent(e.to_string()))?;
        TypedTransport::probe_sender(self, name, &c).await
    }

    fn fixture_receive(&self, config: &PartTable, input: TomlValue, now: Timestamp) -> Result<Admitted, String> {
        TypedTransport::fixture_receive(self, &receiver_of(self, config).map_err(|e| e.to_string())?, input, now)
    }

    fn fixture_send(&self, config: &PartTable, msg: &OutboundMessage, now: Timestamp) -> Result<View, TransportError> {
        let c = sender_of(self, config).map_err(|e| TransportError::permanent(e.to_string()))?;
        TypedTransport::fixture_send(self, &c, msg, now)
    }

    fn receiver_secrets(&self, config: &PartTable) -> Vec<String> {
        receiver_of(self, config).map(|c| TypedTransport::receiver_secrets(self, &c)).unwrap_or_default()
    }

    fn sender_secrets(&self, config: &PartTable) -> Vec<String> {
        sender_of(self, config).map(|c| TypedTransport::sender_secrets(self, &c)).unwrap_or_default()
    }

    fn fidelity_probe(&self, config: &PartTable) -> Result<Probe, String> {
        Ok(TypedTransport::fidelity_probe(self, &receiver_of(self, config).map_err(|e| e.to_string())?))
    }

    fn lossy_note(&self) -> &'static str {
        TypedTransport::lossy_note(self)
    }

    fn lost_note(&self, find: Find) -> Option<&'static str> {
        TypedTransport::lost_note(self, find)
    }

    fn sender_warning(&self, config: &PartTable) -> Option<&'static str> {
        sender_of(self, config).ok().and_then(|c| TypedTransport::sender_warning(self, &c))
    }

    fn outage_note(&self) -> &'static str {
        TypedTransport::outage_note(self)
    }
}
