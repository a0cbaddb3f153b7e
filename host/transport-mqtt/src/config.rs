//! `[receivers.NAME]` and `[senders.NAME]` with `type = "mqtt"`: MQTT 5
//! receivers (a persistent session, acknowledged after the route) and
//! senders (complete on PUBACK or PUBCOMP).

use ferry_config::TlsConfig;
use ferry_core::transport::{Claim, KeyProblem};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::connection::parse_url;

/// The client id of the part `name` of the instance `instance` where none
/// is written: two instances of one config never take each other's at a
/// broker.
pub fn default_client_id(instance: &str, name: &str) -> String {
    format!("ferry-{instance}-{name}")
}

/// MQTT 5 connection settings shared by receivers and senders (the
/// `url`, `client_id`, `keep_alive_secs`, `reconnect_*` keys of both).
#[derive(Debug, Clone, PartialEq)]
pub struct MqttConnection {
    pub url: String,
    pub tls: Option<TlsConfig>,
    pub client_id: String,
    pub keep_alive_secs: u64,
    pub reconnect_initial_ms: u64,
    pub reconnect_max_ms: u64,
}

fn default_keep_alive_secs() -> u64 {
    30
}
fn default_reconnect_initial_ms() -> u64 {
    200
}
fn default_reconnect_max_ms() -> u64 {
    10_000
}

/// `type = "mqtt"` receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MqttReceiverConfig {
    /// `mqtt://[user[:password]@]host[:port]` (port 1883), or `mqtts://`
    /// for TLS (port 8883).
    pub url: String,
    /// TLS files for `mqtts://`: `{ ca_file = "ca.pem", cert_file =
    /// "client.pem", key_file = "client.key" }`, every key optional.
    /// Without `ca_file` the system CA bundle
    /// (`/etc/ssl/certs/ca-certificates.crt`) verifies the broker;
    /// `cert_file` and `key_file` (PEM) go together.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// MQTT client id. Default `ferry-<instance id>-<name>`. It names the persistent session, so keep it stable
    /// across restarts: an upgrade from a ferry whose default was
    /// `ferry-<name>` starts a new session; set `client_id` to the old id
    /// to resume it.
    #[serde(default)]
    pub client_id: Option<String>,
    /// MQTT keep-alive in seconds (5..65535). Default 30.
    #[serde(default = "default_keep_alive_secs")]
    pub keep_alive_secs: u64,
    /// First reconnect delay in milliseconds; each further one doubles,
    /// with ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
    /// Topic filters to subscribe to (wildcards allowed).
    pub topics: Vec<String>,
    /// MQTT 5 shared subscription group: each filter is subscribed as
    /// `$share/<group>/<filter>`, so instances (or receivers) in one group
    /// split the messages instead of each getting every one (see [Running
    /// more than one
    /// ferry](../operating/several-instances.md#running-more-than-one-ferry)).
    /// No `/`, `+` or `#` in the name. Default none.
    #[serde(default)]
    pub share_group: Option<String>,
    /// Subscription QoS (0, 1 or 2). Default 1. With 1 and 2 a message is
    /// acknowledged to the broker only after the route finished with it.
    #[serde(default = "default_qos")]
    pub qos: u8,
    /// How long the broker keeps the session (and unacknowledged messages)
    /// after a disconnect, in seconds. Default 3600.
    #[serde(default = "default_session_expiry_secs")]
    pub session_expiry_secs: u32,
    /// Larger payloads are poison: dropped and counted. The broker is told
    /// a maximum packet size of this plus 1 MiB, and discards anything
    /// bigger itself. Default 1 MiB.
    #[serde(default = "default_max_payload_bytes")]
    pub max_payload_bytes: usize,
    /// Sessions this receiver keeps with the broker (1..32), each with its
    /// own client id (`<client_id>` then `<client_id>-1`, `-2`, …) and all
    /// in one shared subscription (`share_group`, else one named after the
    /// client id), so the broker splits the messages between them. A broker
    /// caps the unacknowledged messages it sends to one client (Mosquitto:
    /// `max_inflight_messages`, 20 by default), and with `direct_hold` each
    /// waits for the target's acknowledgement: N sessions get N times as
    /// many under way. Messages of one topic may then be handled out of
    /// order. `/readyz` wants every session connected. Default 1.
    #[serde(default = "default_connections")]
    pub connections: u16,
}

fn default_connections() -> u16 {
    1
}
fn default_qos() -> u8 {
    1
}
fn default_session_expiry_secs() -> u32 {
    3600
}
fn default_max_payload_bytes() -> usize {
    1024 * 1024
}

/// `type = "mqtt"` sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MqttSenderConfig {
    /// `mqtt://[user[:password]@]host[:port]` (port 1883), or `mqtts://`
    /// for TLS (port 8883).
    pub url: String,
    /// TLS files for `mqtts://`: `{ ca_file = "ca.pem", cert_file =
    /// "client.pem", key_file = "client.key" }`, every key optional.
    /// Without `ca_file` the system CA bundle
    /// (`/etc/ssl/certs/ca-certificates.crt`) verifies the broker;
    /// `cert_file` and `key_file` (PEM) go together.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// MQTT client id. Default `ferry-<instance id>-<name>`.
    #[serde(default)]
    pub client_id: Option<String>,
    /// MQTT keep-alive in seconds (5..65535). Default 30.
    #[serde(default = "default_keep_alive_secs")]
    pub keep_alive_secs: u64,
    /// First reconnect delay in milliseconds; each further one doubles,
    /// with ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
    /// Topic used when a binding's address is empty.
    #[serde(default)]
    pub default_topic: Option<String>,
    /// Publish QoS (0, 1 or 2). Default 1. A send succeeds on PUBACK (QoS
    /// 1), PUBCOMP (QoS 2) or once written (QoS 0).
    #[serde(default = "default_qos")]
    pub qos: u8,
    /// RETAIN flag on every publish. Default false.
    #[serde(default)]
    pub retain: bool,
    /// How long to wait for the broker's acknowledgement, in milliseconds,
    /// before the send counts as a transient failure (retried). Default
    /// 10000.
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
}

fn default_ack_timeout_ms() -> u64 {
    10_000
}

/// Builds the shared connection settings from either MQTT config struct
/// (serde cannot flatten them under `deny_unknown_fields`).
macro_rules! mqtt_connection {
    ($ty:ty) => {
        impl $ty {
            /// With the client id the part `name` of the instance
            /// `instance` has when none is written.
            pub fn for_instance(mut self, instance: &str, name: &str) -> Self {
                self.client_id.get_or_insert_with(|| default_client_id(instance, name));
                self
            }

            /// Connection settings; the client id defaults to `ferry-<name>`
            /// where [`Self::for_instance`] did not fill it in.
            pub fn connection(&self, name: &str) -> MqttConnection {
                MqttConnection {
                    url: self.url.clone(),
                    tls: self.tls.clone(),
                    client_id: self.client_id.clone().unwrap_or_else(|| format!("ferry-{name}")),
                    keep_alive_secs: self.keep_alive_secs,
                    reconnect_initial_ms: self.reconnect_initial_ms,
                    reconnect_max_ms: self.reconnect_max_ms,
                }
            }
        }
    };
}
mqtt_connection!(MqttReceiverConfig);

impl MqttReceiverConfig {
    /// The filters as subscribed by the receiver `name`:
    /// `$share/<group>/<filter>` with a `share_group`, or with several
    /// `connections` (the group then named after the client id), else as
    /// written.
    pub fn subscriptions(&self, name: &str) -> Vec<String> {
        let group = match &self.share_group {
            Some(group) => Some(group.clone()),
            None if self.connections > 1 => Some(share_name_of(&self.connection(name).client_id)),
            None => None,
        };
        match group {
            Some(group) => self.topics.iter().map(|t| format!("$share/{group}/{t}")).collect(),
            None => self.topics.clone(),
        }
    }

    /// The client id of each of the receiver's sessions: the configured
    /// (or default) one, then `-1`, `-2`, ….
    pub fn client_ids(&self, name: &str) -> Vec<String> {
        let base = self.connection(name).client_id;
        (0..self.connections.max(1)).map(|k| if k == 0 { base.clone() } else { format!("{base}-{k}") }).collect()
    }
}

/// A share name made from a client id: the characters a share name cannot
/// hold (`/`, `+`, `#`) become `_`.
fn share_name_of(client_id: &str) -> String {
    client_id.chars().map(|c| if matches!(c, '/' | '+' | '#') { '_' } else { c }).collect()
}
mqtt_connection!(MqttSenderConfig);

impl MqttReceiverConfig {
    /// Every key's own rule; the URL parsed as the client parses it.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_connection(&self.url, self.tls.as_ref(), self.client_id.as_deref(), self.keep_alive_secs)?;
        KeyProblem::reconnect(self.reconnect_initial_ms, self.reconnect_max_ms)?;
        check_qos(self.qos)?;
        if self.topics.is_empty() {
            return Err(KeyProblem::new("topics", "needs at least one topic filter"));
        }
        if let Some(i) = self.topics.iter().position(String::is_empty) {
            return Err(KeyProblem::new(format!("topics[{i}]"), "must not be empty"));
        }
        KeyProblem::at_least_one("max_payload_bytes", self.max_payload_bytes as u64)?;
        if let Some(group) = &self.share_group {
            check_share_group(group, &self.topics)?;
        }
        if !(1..=32).contains(&self.connections) {
            return Err(KeyProblem::new("connections", "must be between 1 and 32"));
        }
        if self.connections > 1
            && let Some((i, t)) = self.topics.iter().enumerate().find(|(_, t)| t.starts_with("$share/"))
        {
            return Err(KeyProblem::new(
                format!("topics[{i}]"),
                format!(
                    "{t:?} is a shared subscription already; several connections subscribe the plain filter as one"
                ),
            ));
        }
        Ok(())
    }

    /// The client id of every session, at its broker.
    pub fn claims(&self, name: &str) -> Vec<Claim> {
        self.client_ids(name).iter().map(|id| client_id_claim(&self.url, id)).collect()
    }
}

impl MqttSenderConfig {
    /// Every key's own rule; the URL parsed as the client parses it.
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_connection(&self.url, self.tls.as_ref(), self.client_id.as_deref(), self.keep_alive_secs)?;
        KeyProblem::reconnect(self.reconnect_initial_ms, self.reconnect_max_ms)?;
        check_qos(self.qos)?;
        KeyProblem::at_least_one("ack_timeout_ms", self.ack_timeout_ms)
    }

    /// The client id, at its broker.
    pub fn claims(&self, name: &str) -> Vec<Claim> {
        vec![client_id_claim(&self.url, &self.connection(name).client_id)]
    }
}

/// Client id `id` at the broker of `url`: two connections with one id keep
/// disconnecting each other.
fn client_id_claim(url: &str, id: &str) -> Claim {
    let broker = parse_url(url).map(|e| format!("{}:{}", e.host, e.port)).unwrap_or_else(|_| url.to_owned());
    Claim {
        key: "client_id".to_owned(),
        what: format!("MQTT client id {id:?} at {broker}"),
        clash: format!(
            "uses client id {id:?} at this broker too; two connections with one id keep disconnecting each other"
        ),
    }
}

/// The keys both halves share: `url`, `tls`, `client_id`,
/// `keep_alive_secs`.
fn check_connection(
    url: &str,
    tls: Option<&TlsConfig>,
    client_id: Option<&str>,
    keep_alive: u64,
) -> Result<(), KeyProblem> {
    let endpoint = parse_url(url).map_err(|e| KeyProblem::new("url", e))?;
    KeyProblem::tls(tls, endpoint.tls, "mqtts://")?;
    if client_id == Some("") {
        return Err(KeyProblem::new("client_id", "must not be empty"));
    }
    if !(5..=65535).contains(&keep_alive) {
        return Err(KeyProblem::new("keep_alive_secs", "must be between 5 and 65535"));
    }
    Ok(())
}

fn check_qos(qos: u8) -> Result<(), KeyProblem> {
    if qos > 2 {
        return Err(KeyProblem::new("qos", format!("{qos} is not a QoS level (0, 1 or 2)")));
    }
    Ok(())
}

/// An MQTT 5 share name may not be empty or hold `/`, `+` or `#`, and the
/// filters it prefixes must not be shared subscriptions already.
fn check_share_group(group: &str, topics: &[String]) -> Result<(), KeyProblem> {
    if group.is_empty() || group.contains(['/', '+', '#']) {
        return Err(KeyProblem::new(
            "share_group",
            format!("{group:?} is not an MQTT share name: it must be non-empty without '/', '+' or '#'"),
        ));
    }
    if let Some((i, t)) = topics.iter().enumerate().find(|(_, t)| t.starts_with("$share/")) {
        return Err(KeyProblem::new(
            format!("topics[{i}]"),
            format!("{t:?} is a shared subscription already; with share_group write the plain filter"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECEIVER: &str = "url = \"mqtt://127.0.0.1:1883\"\ntopics = [\"sensors/#\"]\n";
    const SENDER: &str = "url = \"mqtt://127.0.0.1:1883\"\ndefault_topic = \"bridged\"\n";

    fn read<T: serde::de::DeserializeOwned>(text: &str, check: fn(&T) -> Result<(), KeyProblem>) -> Result<T, String> {
        ferry_core::transport::read_part("mqtt", text, check)
    }

    fn receiver(extra: &str) -> Result<MqttReceiverConfig, String> {
        read(&format!("{RECEIVER}{extra}"), MqttReceiverConfig::check)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let r = receiver("").expect("valid");
        assert_eq!((r.qos, r.keep_alive_secs, r.connections, r.session_expiry_secs), (1, 30, 1, 3600));
        assert_eq!((r.reconnect_initial_ms, r.reconnect_max_ms, r.client_id), (200, 10_000, None));
        let s = read(SENDER, MqttSenderConfig::check).expect("valid");
        assert_eq!((s.qos, s.retain, s.ack_timeout_ms), (1, false, 10_000));
        read(&format!("{SENDER}wire_format = \"json\""), MqttSenderConfig::check).expect("every part's key");
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        for (extra, key) in [
            ("qos = 3", "qos"),
            ("keep_alive_secs = 4", "keep_alive_secs"),
            ("reconnect_initial_ms = 0", "reconnect_initial_ms"),
            ("reconnect_max_ms = 100", "reconnect_max_ms"),
            ("max_payload_bytes = 0", "max_payload_bytes"),
            ("client_id = \"\"", "client_id"),
            ("tls = { ca_file = \"ca.pem\" }", "tls"),
            ("session_expiry = 5", "session_expiry"),
        ] {
            assert_eq!(receiver(extra).err().as_deref(), Some(key), "{extra}");
        }
        let topics = |list: &str| read(&format!("url = \"mqtt://h\"\ntopics = {list}"), MqttReceiverConfig::check);
        assert_eq!(topics("[]").err().as_deref(), Some("topics"));
        assert_eq!(topics("[\"a\", \"\"]").err().as_deref(), Some("topics[1]"));
        // The URL is parsed as the client parses it.
        let url = |url: &str| read(&format!("url = {url:?}\ntopics = [\"t\"]"), MqttReceiverConfig::check).err();
        for bad in ["http://x", "mqtt://", "mqtt://:1883", "mqtt://h:99999", "broker:1883", "mqtt://%ff@h"] {
            assert_eq!(url(bad).as_deref(), Some("url"), "{bad}");
        }
        assert_eq!(url("mqtts://[::1]:8883"), None);
        let sender = |extra: &str| read(&format!("{SENDER}{extra}"), MqttSenderConfig::check).err();
        assert_eq!(sender("qos = 3").as_deref(), Some("qos"));
        assert_eq!(sender("ack_timeout_ms = 0").as_deref(), Some("ack_timeout_ms"));
    }

    #[test]
    fn tls_needs_a_tls_url_and_a_key_with_its_certificate() {
        let tls = |url: &str, files: &str| {
            read(&format!("url = {url:?}\ntopics = [\"t\"]\ntls = {{ {files} }}"), MqttReceiverConfig::check)
        };
        let ok = tls("mqtts://127.0.0.1", "ca_file = \"ca.pem\"").expect("valid");
        assert_eq!(ok.tls.and_then(|t| t.ca_file).as_deref(), Some("ca.pem"));
        assert_eq!(tls("mqtt://127.0.0.1", "ca_file = \"ca.pem\"").err().as_deref(), Some("tls"));
        assert_eq!(tls("mqtts://127.0.0.1", "cert_file = \"c.pem\"").err().as_deref(), Some("tls"));
    }

    #[test]
    fn the_client_id_carries_the_instance_unless_written() {
        let r = receiver("").expect("valid").for_instance("pod-7", "in");
        assert_eq!(r.connection("in").client_id, "ferry-pod-7-in");
        let s = read(SENDER, MqttSenderConfig::check).expect("valid").for_instance("eu-1", "out");
        assert_eq!(s.connection("out").client_id, "ferry-eu-1-out");
        let mine = receiver("client_id = \"mine\"").expect("valid").for_instance("pod-7", "in");
        assert_eq!(mine.connection("in").client_id, "mine", "kept as written");
        // Claimed at the broker, however its URL writes it.
        let claim = |url: &str| {
            let r = read(&format!("url = {url:?}\ntopics = [\"t\"]\nclient_id = \"c\""), MqttReceiverConfig::check);
            r.expect("valid").claims("in").remove(0).what
        };
        assert_eq!(claim("mqtt://u:p@broker"), claim("mqtt://broker:1883"));
        assert_ne!(claim("mqtt://broker"), claim("mqtt://other"));
    }

    #[test]
    fn a_share_group_prefixes_every_filter_and_must_be_a_share_name() {
        let shared = read(
            "url = \"mqtt://h\"\ntopics = [\"sensors/#\", \"alarms\"]\nshare_group = \"g1\"",
            MqttReceiverConfig::check,
        );
        assert_eq!(shared.expect("valid").subscriptions("in"), ["$share/g1/sensors/#", "$share/g1/alarms"]);
        assert_eq!(receiver("").expect("valid").subscriptions("in"), ["sensors/#"]);
        for bad in ["", "a/b", "a+", "#"] {
            assert_eq!(receiver(&format!("share_group = {bad:?}")).err().as_deref(), Some("share_group"), "{bad:?}");
        }
        let doubled =
            read("url = \"mqtt://h\"\ntopics = [\"$share/x/s/#\"]\nshare_group = \"g\"", MqttReceiverConfig::check);
        assert_eq!(doubled.err().as_deref(), Some("topics[0]"));
    }

    #[test]
    fn several_connections_share_one_subscription_under_client_ids_of_their_own() {
        let r = receiver("client_id = \"br/x\"\nconnections = 3").expect("valid");
        assert_eq!(r.client_ids("in"), ["br/x", "br/x-1", "br/x-2"]);
        assert_eq!(r.subscriptions("in"), ["$share/br_x/sensors/#"], "a share name cannot hold '/'");
        let claimed: Vec<String> = r.claims("in").into_iter().map(|c| c.what).collect();
        assert_eq!(claimed.len(), 3, "every session's id is taken: {claimed:?}");
        let grouped = receiver("client_id = \"br/x\"\nconnections = 3\nshare_group = \"g\"").expect("valid");
        assert_eq!(
            grouped.subscriptions("in"),
            ["$share/g/sensors/#"],
            "the instances' group, shared by every session"
        );
        for (n, ok) in [(0, false), (1, true), (32, true), (33, false)] {
            match receiver(&format!("connections = {n}")) {
                Ok(_) => assert!(ok, "{n}"),
                Err(key) => assert!(!ok && key == "connections", "{n}: {key}"),
            }
        }
    }
}
