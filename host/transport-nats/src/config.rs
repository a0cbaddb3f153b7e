//! `[receivers.NAME]` and `[senders.NAME]` with `type = "nats"`: NATS
//! JetStream receivers (a durable pull consumer) and
//! senders (JetStream publish, or core NATS).

use ferry_config::{Secret, TlsConfig};
use ferry_core::transport::KeyProblem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// A credentials file (`.creds`: a user JWT and its NKey seed, as
    /// `nsc` writes it) to authenticate with; read when connecting. At
    /// most one of `credentials_file`, `nkey_seed` and `token` (a user and
    /// password go in the URL).
    #[serde(default)]
    pub credentials_file: Option<String>,
    /// An NKey user's seed (`SU…`) to authenticate with; a secret, best
    /// written `{ file = "…" }`.
    #[serde(default)]
    pub nkey_seed: Option<Secret>,
    /// The token the server's `authorization { token }` expects; a secret,
    /// best written `{ file = "…" }`.
    #[serde(default)]
    pub token: Option<Secret>,
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
    /// Delay in milliseconds before the second attempt to connect or to
    /// reconnect after a loss (the first is at once); each further one
    /// doubles, with ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
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
    /// A credentials file (`.creds`: a user JWT and its NKey seed, as
    /// `nsc` writes it) to authenticate with; read when connecting. At
    /// most one of `credentials_file`, `nkey_seed` and `token` (a user and
    /// password go in the URL).
    #[serde(default)]
    pub credentials_file: Option<String>,
    /// An NKey user's seed (`SU…`) to authenticate with; a secret, best
    /// written `{ file = "…" }`.
    #[serde(default)]
    pub nkey_seed: Option<Secret>,
    /// The token the server's `authorization { token }` expects; a secret,
    /// best written `{ file = "…" }`.
    #[serde(default)]
    pub token: Option<Secret>,
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
    /// Delay in milliseconds before the second attempt to connect or to
    /// reconnect after a loss (the first is at once); each further one
    /// doubles, with ±30% jitter, up to `reconnect_max_ms`. Default 200.
    #[serde(default = "default_reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Reconnect delay cap in milliseconds. Default 10000.
    #[serde(default = "default_reconnect_max_ms")]
    pub reconnect_max_ms: u64,
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

/// `credentials_file`, `nkey_seed` and `token`, where written.
fn auth_keys<'a>(
    file: &'a Option<String>,
    seed: &'a Option<Secret>,
    token: &'a Option<Secret>,
) -> [Option<&'a str>; 3] {
    [file.as_deref(), seed.as_ref().map(Secret::expose), token.as_ref().map(Secret::expose)]
}

impl NatsReceiverConfig {
    /// The durable consumer's name: `consumer`, else `ferry-<name>`.
    pub fn consumer_name(&self, receiver: &str) -> String {
        self.consumer.clone().unwrap_or_else(|| format!("ferry-{receiver}"))
    }
}

/// How a client proves who it is, besides a user and password in the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth<'a> {
    /// The URL's user and password, if it has them.
    Url,
    /// A `.creds` file's path.
    CredentialsFile(&'a str),
    /// An NKey user's seed.
    NkeySeed(&'a str),
    /// A token.
    Token(&'a str),
}

/// Where and as whom a client connects: what the receiver and the sender
/// have alike.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// The server list (`url`).
    pub url: &'a str,
    pub tls: Option<&'a TlsConfig>,
    pub auth: Auth<'a>,
}

impl<'a> Access<'a> {
    fn new(
        url: &'a str,
        tls: Option<&'a TlsConfig>,
        [credentials_file, nkey_seed, token]: [Option<&'a str>; 3],
    ) -> Self {
        let auth = match (credentials_file, nkey_seed, token) {
            (Some(path), _, _) => Auth::CredentialsFile(path),
            (None, Some(seed), _) => Auth::NkeySeed(seed),
            (None, None, Some(token)) => Auth::Token(token),
            (None, None, None) => Auth::Url,
        };
        Self { url, tls, auth }
    }

    /// The secrets among them (`ferry render` masks them).
    pub fn secrets(&self) -> Vec<String> {
        match self.auth {
            Auth::NkeySeed(s) | Auth::Token(s) => vec![s.to_owned()],
            Auth::Url | Auth::CredentialsFile(_) => Vec::new(),
        }
    }
}

/// A NATS server list as the client reads it (each entry by async-nats's
/// own `ServerAddr`); `tls` only with a `tls://` entry; at most one way
/// to authenticate, an NKey seed one the client can read.
fn check_access(access: Access<'_>, written: [Option<&str>; 3]) -> Result<(), KeyProblem> {
    crate::connection::servers(access.url).map_err(|e| KeyProblem::new("url", e))?;
    let secure = crate::connection::any_tls(access.url);
    KeyProblem::tls(access.tls, secure, "tls://")?;
    let keys = ["credentials_file", "nkey_seed", "token"];
    let set: Vec<&str> = keys.iter().zip(written).filter(|(_, v)| v.is_some()).map(|(k, _)| *k).collect();
    if let [_, second, ..] = set[..] {
        return Err(KeyProblem::new(second, format!("only one of {} may be set", set.join(", "))));
    }
    match access.auth {
        Auth::NkeySeed(seed) => match nkeys::KeyPair::from_seed(seed) {
            Ok(pair) if pair.key_pair_type() == nkeys::KeyPairType::User => Ok(()),
            Ok(_) => Err(KeyProblem::new("nkey_seed", "is not a user's seed (SU…)")),
            // The error does not quote the seed.
            Err(e) => Err(KeyProblem::new("nkey_seed", format!("is not an NKey seed: {e}"))),
        },
        Auth::Token("") => Err(KeyProblem::new("token", "is empty")),
        Auth::CredentialsFile("") => Err(KeyProblem::new("credentials_file", "is empty")),
        _ => Ok(()),
    }
}

impl NatsReceiverConfig {
    fn auth_keys(&self) -> [Option<&str>; 3] {
        auth_keys(&self.credentials_file, &self.nkey_seed, &self.token)
    }

    /// The servers and how to authenticate.
    pub fn access(&self) -> Access<'_> {
        Access::new(&self.url, self.tls.as_ref(), self.auth_keys())
    }

    /// The checks of receiver `name`'s keys (`ferry validate`, and before
    /// a start).
    pub fn check(&self, name: &str) -> Result<(), KeyProblem> {
        let n = self;
        check_access(n.access(), n.auth_keys())?;
        KeyProblem::reconnect(n.reconnect_initial_ms, n.reconnect_max_ms)?;
        if let Some(why) = name_problem(&n.stream) {
            return Err(KeyProblem::new("stream", why));
        }
        if let Some(why) = name_problem(&n.consumer_name(name)) {
            return Err(KeyProblem::new("consumer", why));
        }
        for (i, subject) in n.filter_subjects.iter().enumerate() {
            if let Some(why) = subject_problem(subject, true) {
                return Err(KeyProblem::new(format!("filter_subjects[{i}]"), why));
            }
        }
        if n.consumer_passive && !n.filter_subjects.is_empty() {
            return Err(KeyProblem::new(
                "filter_subjects",
                "is a setting of the consumer, which consumer_passive leaves as it is; set it where the \
                 consumer is made, or drop consumer_passive",
            ));
        }
        for (k, v) in [("ack_wait_secs", n.ack_wait_secs), ("max_payload_bytes", n.max_payload_bytes as u64)] {
            if v == 0 {
                return Err(KeyProblem::new(k, "must be at least 1"));
            }
        }
        Ok(())
    }
}

impl NatsSenderConfig {
    fn auth_keys(&self) -> [Option<&str>; 3] {
        auth_keys(&self.credentials_file, &self.nkey_seed, &self.token)
    }

    /// The servers and how to authenticate.
    pub fn access(&self) -> Access<'_> {
        Access::new(&self.url, self.tls.as_ref(), self.auth_keys())
    }

    /// The checks of the sender's keys.
    pub fn check(&self) -> Result<(), KeyProblem> {
        let n = self;
        check_access(n.access(), n.auth_keys())?;
        KeyProblem::reconnect(n.reconnect_initial_ms, n.reconnect_max_ms)?;
        // A template is checked once its headers are filled in.
        if let Some(subject) = n.subject.as_deref().filter(|s| !s.contains('{'))
            && let Some(why) = subject_problem(subject, false)
        {
            return Err(KeyProblem::new("subject", why));
        }
        if n.ack_timeout_ms == 0 {
            return Err(KeyProblem::new("ack_timeout_ms", "must be at least 1"));
        }
        Ok(())
    }
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
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || ".*>/\\".contains(c)) {
        return Some(format!("{name:?} may not contain whitespace, '.', '*', '>', '/' or '\\'"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECEIVER: &str = "url = \"nats://user:pass@127.0.0.1:4222\"\nstream = \"ORDERS\"\n\
                            filter_subjects = [\"orders.*.new\", \"audit.>\"]\n";
    const SENDER: &str = "url = \"nats://a:4222, nats://b:4222\"\nsubject = \"bridged.{region}\"\n";

    fn read<T: serde::de::DeserializeOwned>(
        text: &str,
        check: impl Fn(&T) -> Result<(), KeyProblem>,
    ) -> Result<T, String> {
        ferry_core::transport::read_part("nats", text, check)
    }

    fn receiver(text: &str) -> Result<NatsReceiverConfig, String> {
        read(text, |c: &NatsReceiverConfig| c.check("js"))
    }

    fn sender(text: &str) -> Result<NatsSenderConfig, String> {
        read(text, NatsSenderConfig::check)
    }

    #[test]
    fn receivers_and_senders_read_with_their_defaults() {
        let r = receiver(RECEIVER).expect("valid");
        assert_eq!((r.ack_wait_secs, r.consumer_passive), (30, false));
        assert_eq!(r.consumer_name("js"), "ferry-js");
        let s = sender(SENDER).expect("valid");
        assert!(s.jetstream);
        assert_eq!(s.ack_timeout_ms, 10_000);
    }

    #[test]
    fn every_key_is_checked_with_its_name() {
        let url = "nats://user:pass@127.0.0.1:4222";
        let stream = "stream = \"ORDERS\"";
        let with = |extra: &str| receiver(&RECEIVER.replace(stream, &format!("{stream}\n{extra}")));
        for (bad, key) in [
            (receiver(&RECEIVER.replace(url, "mqtt://h")), "url"),
            (receiver(&RECEIVER.replace(url, "nats://h:99999")), "url"),
            (receiver(&RECEIVER.replace(url, "nats://a:4222,,nats://b:4222")), "url"),
            (receiver(&RECEIVER.replace(stream, "stream = \"OR.DERS\"")), "stream"),
            (with("consumer = \"a b\""), "consumer"),
            (receiver(&RECEIVER.replace("\"audit.>\"", "\"audit..x\"")), "filter_subjects[1]"),
            (with("consumer_passive = true"), "filter_subjects"),
            (with("tls = { ca_file = \"/ca\" }"), "tls"),
            (with("ack_wait_secs = 0"), "ack_wait_secs"),
            (with("ack_wait = 5"), "ack_wait"),
            (receiver(&RECEIVER.replace(stream, "")), "stream"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
        let subject = "subject = \"bridged.{region}\"";
        for (bad, key) in [
            (sender(&SENDER.replace(subject, "subject = \"bridged.*\"")), "subject"),
            (sender(&SENDER.replace(subject, "subject = \"x\"\nack_timeout_ms = 0")), "ack_timeout_ms"),
            (sender(&SENDER.replace(subject, "subject = \"x\"\ntls = { cert_file = \"/c\" }")), "tls"),
        ] {
            assert_eq!(bad.err().as_deref(), Some(key), "{key}");
        }
    }
}

#[cfg(test)]
mod auth_tests {
    use super::*;

    fn sender(extra: &str) -> NatsSenderConfig {
        toml::from_str(&format!("url = \"nats://127.0.0.1:4222\"\n{extra}")).expect("toml")
    }

    #[test]
    fn one_way_to_authenticate_an_nkey_seed_the_client_can_read_and_the_secrets_named() {
        let pair = nkeys::KeyPair::new_user();
        let seed = pair.seed().expect("a seed");
        let s = sender(&format!("nkey_seed = \"{seed}\""));
        assert_eq!(s.check().map_err(|p| p.key), Ok(()));
        assert_eq!(s.access().auth, Auth::NkeySeed(&seed));
        assert_eq!(s.access().secrets(), vec![seed.clone()]);
        assert!(!format!("{s:?}").contains(&seed), "the seed never prints");

        let t = sender("token = \"s3cret\"");
        assert_eq!((t.check().map_err(|p| p.key), t.access().secrets()), (Ok(()), vec!["s3cret".to_owned()]));
        assert!(!format!("{t:?}").contains("s3cret"), "the token never prints");
        let c = sender("credentials_file = \"/etc/ferry/user.creds\"");
        assert_eq!(c.access().auth, Auth::CredentialsFile("/etc/ferry/user.creds"));
        assert!(c.access().secrets().is_empty(), "a path is not a secret");
        assert_eq!(sender("").access().auth, Auth::Url);

        let account = nkeys::KeyPair::new_account().seed().expect("a seed");
        let broken = format!("{}X", &seed[..seed.len() - 1]);
        for (extra, key) in [
            (format!("nkey_seed = \"{seed}\"\ntoken = \"t\""), "token"),
            ("credentials_file = \"/c\"\ntoken = \"t\"".to_owned(), "token"),
            (format!("nkey_seed = \"{account}\""), "nkey_seed"),
            (format!("nkey_seed = \"{broken}\""), "nkey_seed"),
            ("nkey_seed = \"UABC\"".to_owned(), "nkey_seed"),
            ("token = \"\"".to_owned(), "token"),
        ] {
            let problem = sender(&extra).check().expect_err(&extra);
            assert_eq!(problem.key, key, "{extra}");
            assert!(!problem.message.contains(&seed[2..]), "the seed is not quoted: {}", problem.message);
        }
    }
}
