//! `[receivers.NAME]` and `[senders.NAME]` with `type = "kafka"`: a
//! consumer in a consumer group, and a producer.

use ferry_config::{Secret, TlsConfig};
use ferry_core::transport::KeyProblem;
use rdkafka::ClientConfig;
use schemars::JsonSchema;
use serde::Deserialize;

/// SASL authentication to the brokers
/// (`{ mechanism, username, password }`).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    /// `"plain"`, `"scram-sha-256"` or `"scram-sha-512"`. PLAIN sends the
    /// password as it is: use it with `tls`.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    /// The user's password (a secret: never printed).
    pub password: Secret,
}

/// A SASL mechanism a Kafka cluster may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616).
    #[serde(rename = "plain")]
    Plain,
    /// SCRAM-SHA-256 (RFC 7677).
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// SCRAM-SHA-512.
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// Its name as librdkafka's `sasl.mechanism` spells it.
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// How a client reaches the cluster: the keys a receiver and a sender
/// share (`brokers`, `tls`, `sasl`).
#[derive(Debug, Clone, Copy)]
pub struct Cluster<'a> {
    pub brokers: &'a str,
    pub tls: Option<&'a TlsConfig>,
    pub sasl: Option<&'a KafkaSasl>,
}

impl Cluster<'_> {
    /// The rules of `brokers`, `tls` and `sasl`.
    pub fn check(&self) -> Result<(), KeyProblem> {
        brokers(self.brokers).map_err(|e| KeyProblem::new("brokers", e))?;
        // `tls` alone turns TLS on: there is no URL scheme to agree with.
        KeyProblem::tls(self.tls, true, "")?;
        match self.sasl {
            Some(sasl) => name("sasl.username", &sasl.username),
            None => Ok(()),
        }
    }

    /// A client config that reaches the cluster: the brokers, and the
    /// security protocol with its files and credentials (`ssl` with `tls`,
    /// `sasl_plaintext` with `sasl`, `sasl_ssl` with both).
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.brokers);
        let protocol = match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        c.set("security.protocol", protocol);
        if let Some(tls) = self.tls {
            for (key, file) in [
                ("ssl.ca.location", &tls.ca_file),
                ("ssl.certificate.location", &tls.cert_file),
                ("ssl.key.location", &tls.key_file),
            ] {
                if let Some(file) = file {
                    c.set(key, file);
                }
            }
        }
        if let Some(sasl) = self.sasl {
            c.set("sasl.mechanism", sasl.mechanism.name())
                .set("sasl.username", &sasl.username)
                .set("sasl.password", sasl.password.expose());
        }
        c
    }
}

/// `type = "kafka"` receiver: a consumer in a consumer group. A record's
/// offset is committed only once the route is done with it and with every
/// record before it in its partition, so a crash delivers again what was
/// in flight and never skips it.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaReceiverConfig {
    /// The bootstrap brokers, as for a sender.
    pub brokers: String,
    /// TLS to the brokers: `{ ca_file, cert_file, key_file }` (PEM), every
    /// key optional (`tls = {}` is TLS with the system's CAs, OpenSSL's
    /// default paths, and no client certificate). The brokers'
    /// certificates must name the host the client connects to.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// SASL authentication: `{ mechanism, username, password }`.
    #[serde(default)]
    pub sasl: Option<KafkaSasl>,
    /// The topics to consume.
    pub topics: Vec<String>,
    /// The consumer group. Instances of ferry naming the same group share
    /// the topics' partitions.
    pub group: String,
    /// The record header that carries the message's identity. Without it
    /// the identity is `<topic>-<partition>-<offset>`. Default
    /// `message_id`.
    #[serde(default = "default_id_header")]
    pub id_header: String,
    /// Where a group with no committed offset starts: `"oldest"`, every
    /// record the topics hold, or `"newest"`, only records written from
    /// then on. Default `"oldest"`.
    #[serde(default)]
    pub start_from: StartFrom,
    /// Larger records are poison: passed over (their offset committed) and
    /// counted. Default 8 MiB.
    #[serde(default = "default_max_payload_bytes")]
    pub max_payload_bytes: usize,
    /// How often settled offsets are committed, in milliseconds (and when
    /// the receiver stops or a partition is taken away). Default 1000.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// How long the group waits for a member that went silent (killed,
    /// cut off) before its partitions go to the others, in milliseconds
    /// (librdkafka's `session.timeout.ms`; the broker bounds it by its
    /// group.min/max.session.timeout.ms). Default 45000.
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
}

/// Where a group without a committed offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The oldest record kept (`auto.offset.reset = earliest`).
    #[default]
    Oldest,
    /// Records written from then on (`auto.offset.reset = latest`).
    Newest,
}

fn default_max_payload_bytes() -> usize {
    8 * 1024 * 1024
}
fn default_commit_interval_ms() -> u64 {
    1000
}
fn default_session_timeout_ms() -> u64 {
    45_000
}

impl KafkaReceiverConfig {
    /// How it reaches the cluster.
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster { brokers: &self.brokers, tls: self.tls.as_ref(), sasl: self.sasl.as_ref() }
    }

    /// Every key's own rule.
    pub fn check(&self) -> Result<(), KeyProblem> {
        self.cluster().check()?;
        if self.topics.is_empty() {
            return Err(KeyProblem::new("topics", "names no topic"));
        }
        for (i, topic) in self.topics.iter().enumerate() {
            if let Some(why) = topic_problem(topic) {
                return Err(KeyProblem::new(format!("topics[{i}]"), why));
            }
        }
        name("group", &self.group)?;
        if self.id_header.is_empty() {
            return Err(KeyProblem::new("id_header", "must not be empty"));
        }
        KeyProblem::at_least_one("max_payload_bytes", self.max_payload_bytes as u64)?;
        if !(1..=60_000).contains(&self.commit_interval_ms) {
            return Err(KeyProblem::new("commit_interval_ms", "must be between 1 and 60000"));
        }
        if !(1_000..=3_600_000).contains(&self.session_timeout_ms) {
            return Err(KeyProblem::new("session_timeout_ms", "must be between 1000 and 3600000"));
        }
        Ok(())
    }
}

/// `type = "kafka"` sender: an idempotent producer (`enable.idempotence`,
/// `acks=all`); a send is done when the record's delivery report says the
/// cluster has it.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSenderConfig {
    /// The bootstrap brokers, `host:port` separated by commas
    /// (`"k1:9092,k2:9092"`); the client learns the rest of the cluster
    /// from them.
    pub brokers: String,
    /// TLS to the brokers: `{ ca_file, cert_file, key_file }` (PEM), every
    /// key optional (`tls = {}` is TLS with the system's CAs, OpenSSL's
    /// default paths, and no client certificate). The brokers'
    /// certificates must name the host the client connects to.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// SASL authentication: `{ mechanism, username, password }`.
    #[serde(default)]
    pub sasl: Option<KafkaSasl>,
    /// The topic for bindings whose address is empty; a binding's address
    /// names it otherwise. Either is a template over text headers
    /// (`readings.{site}`); the result must be a topic name (1 to 249
    /// letters, digits, `.`, `_` and `-`), else the message is unroutable.
    #[serde(default)]
    pub topic: Option<String>,
    /// The header whose text is the record's key, which chooses its
    /// partition (so records of one key stay in order). A message without
    /// it has no key. Default `x-bridge.ordering-key` (which a processor
    /// with the `ordering_key` grant sets).
    #[serde(default = "default_key_header")]
    pub key_header: String,
    /// The record header that carries the message's identity, so a reader
    /// (ferry's Kafka receiver among them) can drop a record ferry sent
    /// twice. Default `message_id`.
    #[serde(default = "default_id_header")]
    pub id_header: String,
    /// How long a record may wait for the cluster before its send fails
    /// and is retried (librdkafka's `message.timeout.ms`), in milliseconds.
    /// Default 30000.
    #[serde(default = "default_delivery_timeout_ms")]
    pub delivery_timeout_ms: u64,
    /// How long the producer waits to fill a batch (`linger.ms`), in
    /// milliseconds. Default 5.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
}

fn default_key_header() -> String {
    "x-bridge.ordering-key".to_owned()
}
fn default_id_header() -> String {
    "message_id".to_owned()
}
fn default_delivery_timeout_ms() -> u64 {
    30_000
}
fn default_linger_ms() -> u64 {
    5
}

/// A name key (a group, a user): not empty, no control characters.
fn name(key: &str, value: &str) -> Result<(), KeyProblem> {
    if value.is_empty() || value.chars().any(char::is_control) {
        return Err(KeyProblem::new(key, "must be a name without control characters"));
    }
    Ok(())
}

/// The longest topic name Kafka takes.
const MAX_TOPIC: usize = 249;

/// Why `name` is not a Kafka topic name, if it is not one.
pub fn topic_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_TOPIC {
        return Some(format!("a topic name is 1 to {MAX_TOPIC} characters"));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is not a topic name"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Some(format!("{c:?} is not allowed in a topic name (letters, digits, '.', '_' and '-')"));
    }
    None
}

/// The `host:port` entries of a broker list, or why it is not one.
pub fn brokers(list: &str) -> Result<Vec<(String, u16)>, String> {
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    if entries.iter().all(|e| e.is_empty()) {
        return Err("names no broker (host:port, separated by commas)".into());
    }
    entries
        .into_iter()
        .map(|entry| {
            let (host, port) =
                entry.rsplit_once(':').ok_or_else(|| format!("{entry:?} is not host:port (the port is needed)"))?;
            let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
            if host.is_empty() || host.contains(['/', '@', ' ']) || entry.contains("://") {
                return Err(format!("{entry:?} is not host:port"));
            }
            match port.parse::<u16>() {
                Ok(p) if p > 0 => Ok((host.to_owned(), p)),
                _ => Err(format!("{entry:?}: {port:?} is not a port")),
            }
        })
        .collect()
}

impl KafkaSenderConfig {
    /// How it reaches the cluster.
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster { brokers: &self.brokers, tls: self.tls.as_ref(), sasl: self.sasl.as_ref() }
    }

    /// Every key's own rule.
    pub fn check(&self) -> Result<(), KeyProblem> {
        self.cluster().check()?;
        if let Some(topic) = self.topic.as_deref().filter(|t| !t.contains('{'))
            && let Some(why) = topic_problem(topic)
        {
            return Err(KeyProblem::new("topic", why));
        }
        if self.key_header.is_empty() {
            return Err(KeyProblem::new("key_header", "must not be empty"));
        }
        if self.id_header.is_empty() {
            return Err(KeyProblem::new("id_header", "must not be empty"));
        }
        if !(1..=3_600_000).contains(&self.delivery_timeout_ms) {
            return Err(KeyProblem::new("delivery_timeout_ms", "must be between 1 and 3600000"));
        }
        if self.linger_ms > 60_000 {
            return Err(KeyProblem::new("linger_ms", "must be at most 60000"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(text: &str) -> Result<KafkaSenderConfig, String> {
        ferry_core::transport::read_part("kafka", text, KafkaSenderConfig::check)
    }

    #[test]
    fn a_sender_reads_with_its_defaults() {
        let s = sender("brokers = \"k1:9092, k2:9093\"\ntopic = \"readings.{site}\"").expect("valid");
        assert_eq!((s.key_header.as_str(), s.delivery_timeout_ms, s.linger_ms), ("x-bridge.ordering-key", 30_000, 5));
        assert_eq!(brokers(&s.brokers), Ok(vec![("k1".into(), 9092), ("k2".into(), 9093)]));
        assert_eq!(brokers("[::1]:9092"), Ok(vec![("::1".into(), 9092)]));
    }

    fn receiver(text: &str) -> Result<KafkaReceiverConfig, String> {
        ferry_core::transport::read_part("kafka", text, KafkaReceiverConfig::check)
    }

    #[test]
    fn a_receiver_reads_with_its_defaults_and_each_bad_key_is_named() {
        let base = "brokers = \"k:9092\"\ntopics = [\"orders\"]\ngroup = \"bridge\"\n";
        let r = receiver(base).expect("valid");
        assert_eq!(
            (r.id_header.as_str(), r.start_from, r.max_payload_bytes, r.commit_interval_ms, r.session_timeout_ms),
            ("message_id", StartFrom::Oldest, 8 << 20, 1000, 45_000)
        );
        for (from, to, key) in [
            ("k:9092", "k", "brokers"),
            ("[\"orders\"]", "[]", "topics"),
            ("[\"orders\"]", "[\"a\", \"b c\"]", "topics[1]"),
            ("\"bridge\"", "\"\"", "group"),
            ("group = \"bridge\"", "group = \"g\"\nstart_from = \"middle\"", "start_from"),
            ("group = \"bridge\"", "group = \"g\"\ncommit_interval_ms = 0", "commit_interval_ms"),
            ("group = \"bridge\"", "group = \"g\"\nmax_payload_bytes = 0", "max_payload_bytes"),
            ("group = \"bridge\"", "group = \"g\"\nsession_timeout_ms = 999", "session_timeout_ms"),
            ("group = \"bridge\"", "", "group"),
        ] {
            assert_eq!(receiver(&base.replace(from, to)).err().as_deref(), Some(key), "{from} -> {to}");
        }
    }

    #[test]
    fn each_bad_key_is_named() {
        for (text, key) in [
            ("brokers = \"\"", "brokers"),
            ("brokers = \"k1\"", "brokers"),
            ("brokers = \"k1:0\"", "brokers"),
            ("brokers = \"k1:99999\"", "brokers"),
            ("brokers = \"kafka://k1:9092\"", "brokers"),
            ("brokers = \"k1:9092,\"", "brokers"),
            ("brokers = \"k1:9092\"\ntopic = \"a b\"", "topic"),
            ("brokers = \"k1:9092\"\ntopic = \"..\"", "topic"),
            ("brokers = \"k1:9092\"\nkey_header = \"\"", "key_header"),
            ("brokers = \"k1:9092\"\ndelivery_timeout_ms = 0", "delivery_timeout_ms"),
            ("brokers = \"k1:9092\"\nlinger_ms = 60001", "linger_ms"),
            ("brokers = \"k1:9092\"\nacks = \"1\"", "acks"),
            ("topic = \"t\"", "brokers"),
        ] {
            assert_eq!(sender(text).err().as_deref(), Some(key), "{text}");
        }
        assert_eq!(topic_problem(&"t".repeat(249)), None);
        assert!(topic_problem(&"t".repeat(250)).is_some());
    }

    #[test]
    fn tls_and_sasl_set_the_security_protocol_and_never_print_the_password() {
        let base = "brokers = \"k:9093\"\ntopics = [\"t\"]\ngroup = \"g\"\n";
        let sasl = "sasl = { mechanism = \"scram-sha-512\", username = \"u\", password = \"pw-never-printed\" }\n";
        let tls = "tls = { ca_file = \"/ca.pem\" }\n";
        for (keys, protocol) in
            [("", "plaintext"), (tls, "ssl"), (sasl, "sasl_plaintext"), (&format!("{tls}{sasl}") as &str, "sasl_ssl")]
        {
            let r = receiver(&format!("{base}{keys}")).expect("valid");
            let c = r.cluster().client_config();
            assert_eq!(c.get("security.protocol"), Some(protocol), "{keys}");
            assert_eq!(c.get("ssl.ca.location"), keys.contains("ca_file").then_some("/ca.pem"));
            if keys.contains("sasl") {
                assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
                assert_eq!((c.get("sasl.username"), c.get("sasl.password")), (Some("u"), Some("pw-never-printed")));
            }
            assert!(!format!("{r:?}").contains("pw-never-printed"), "{r:?}");
        }
        let s = sender("brokers = \"k:9093\"\nsasl = { mechanism = \"plain\", username = \"u\", password = \"p\" }")
            .expect("valid");
        assert_eq!(s.cluster().client_config().get("sasl.mechanism"), Some("PLAIN"));
        for (text, key) in [
            ("sasl = { mechanism = \"gssapi\", username = \"u\", password = \"p\" }", "sasl.mechanism"),
            ("sasl = { mechanism = \"plain\", username = \"\", password = \"p\" }", "sasl.username"),
            ("sasl = { mechanism = \"plain\", username = \"u\" }", "sasl"),
            ("tls = { cert_file = \"/c.pem\" }", "tls"),
        ] {
            assert_eq!(sender(&format!("brokers = \"k:9093\"\n{text}")).err().as_deref(), Some(key), "{text}");
        }
    }

    /// librdkafka is built with OpenSSL: a client that speaks TLS and
    /// SCRAM can be made (one built without refuses `sasl_ssl` and the
    /// SCRAM mechanisms when the client is created).
    #[test]
    fn the_client_is_built_with_tls_and_scram() {
        for mechanism in ["plain", "scram-sha-256", "scram-sha-512"] {
            let s = sender(&format!(
                "brokers = \"127.0.0.1:1\"\ntls = {{}}\nsasl = {{ mechanism = \"{mechanism}\", username = \"u\", password = \"p\" }}"
            ))
            .expect("valid");
            let made: Result<rdkafka::producer::BaseProducer, _> = s.cluster().client_config().create();
            assert!(made.is_ok(), "{mechanism}: {:?}", made.err());
        }
    }
}
