//! NATS for the tests: a private `nats-server -js` of the test's own (its
//! own port and store directory, so a restart touches no other test) and
//! a JetStream client to make streams, publish and read what arrived.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt as _;

/// A nats-server with JetStream of the test's own, stopped on drop.
pub struct PrivateNats {
    pub port: u16,
    /// Certificate and key files the server presents (TLS only).
    tls: Option<(PathBuf, PathBuf)>,
    /// A configuration file's text (`authorization { … }`, say).
    config: Option<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The port while it is stopped, kept for its next start.
    held: crate::ports::Held,
}

impl PrivateNats {
    fn binary() -> PathBuf {
        for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"] {
            if std::path::Path::new(p).exists() {
                return PathBuf::from(p);
            }
        }
        PathBuf::from("nats-server")
    }

    /// Starts one on a free port and waits until it listens; another port
    /// is tried when one was taken meanwhile.
    pub async fn start() -> Self {
        Self::start_with_tls(None).await
    }

    /// As [`PrivateNats::start`], serving TLS only with `cert` and `key`
    /// (PEM) when given.
    pub async fn start_with_tls(tls: Option<(PathBuf, PathBuf)>) -> Self {
        Self::start_as(tls, None).await
    }

    /// As [`PrivateNats::start`], with a configuration file of `config`'s
    /// text (the command line's port, store and JetStream still hold).
    pub async fn start_with_config(config: &str) -> Self {
        Self::start_as(None, Some(config.to_owned())).await
    }

    async fn start_as(tls: Option<(PathBuf, PathBuf)>, config: Option<String>) -> Self {
        let mut n = Self {
            port: crate::ports::broker_port(),
            tls,
            config,
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
            held: crate::ports::Held::default(),
        };
        for _ in 0..5 {
            if n.try_start().await {
                return n;
            }
            n.stop();
            n.port = crate::ports::broker_port();
        }
        panic!("private nats-server did not start on any of five ports");
    }

    /// The server's process id while it runs (the bench reads its CPU).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// (Re)starts it on the same port and store: streams and their messages
    /// survive.
    pub async fn restart(&mut self) {
        if !self.try_start().await {
            panic!("private nats-server did not listen on port {} again", self.port);
        }
    }

    async fn try_start(&mut self) -> bool {
        self.stop();
        self.held = crate::ports::Held::default();
        let mut command = Command::new(Self::binary());
        command.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"]).arg(self.dir.path());
        if let Some(config) = &self.config {
            let file = self.dir.path().join("nats.conf");
            std::fs::write(&file, config).expect("nats.conf");
            command.arg("-c").arg(file);
        }
        if let Some((cert, key)) = &self.tls {
            command.arg("--tls").arg("--tlscert").arg(cert).arg("--tlskey").arg(key);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts (is it installed? scripts/provision nats)");
        crate::leftovers::record(child.id());
        let child = self.child.insert(child);
        crate::ports::until_listening(child, &[self.port], Duration::from_secs(10)).await
    }

    /// Stops it (SIGKILL: JetStream keeps what it acknowledged) and holds
    /// its port until it starts again.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            self.held = crate::ports::kill_and_hold(child, [self.port]);
        }
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A JetStream client for a test.
pub struct Nats {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

impl Nats {
    pub async fn connect(url: &str) -> Self {
        let client = async_nats::connect(url).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        let js = jetstream::new(client.clone());
        Self { client, js }
    }

    /// With client `options` (a token or an NKey, say).
    pub async fn connect_with(url: &str, options: async_nats::ConnectOptions) -> Self {
        let client = options.connect(url).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        let js = jetstream::new(client.clone());
        Self { client, js }
    }

    /// Over TLS, verifying the server with the CA certificate `ca`.
    pub async fn connect_tls(url: &str, ca: &std::path::Path) -> Self {
        let client = async_nats::ConnectOptions::new()
            .add_root_certificates(ca.to_path_buf())
            .require_tls(true)
            .connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        let js = jetstream::new(client.clone());
        Self { client, js }
    }

    /// A file-backed stream `name` on `subjects` with a duplicate window of
    /// two minutes.
    pub async fn stream(&self, name: &str, subjects: &[&str]) {
        self.js
            .create_stream(stream::Config {
                name: name.to_owned(),
                subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("create stream {name}: {e}"));
    }

    /// Publishes to JetStream and waits for the stream's acknowledgement.
    pub async fn publish(&self, subject: &str, payload: &str, headers: &[(&str, &str)]) {
        self.try_publish(subject, payload, headers).await.expect("the stream acknowledged");
    }

    /// As [`Nats::publish`], saying why the stream did not acknowledge (a
    /// server still recovering its streams after a restart, say).
    pub async fn try_publish(&self, subject: &str, payload: &str, headers: &[(&str, &str)]) -> Result<(), String> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(*k, *v);
        }
        let pending = self
            .js
            .publish_with_headers(subject.to_owned(), map, payload.to_owned().into())
            .await
            .map_err(|e| e.to_string())?;
        pending.await.map(|_| ()).map_err(|e| e.to_string())
    }

    /// How many messages `stream` holds.
    pub async fn count(&self, stream: &str) -> u64 {
        let mut s = self.js.get_stream(stream).await.expect("stream");
        s.info().await.expect("stream info").state.messages
    }

    /// Every message of `stream` from the start, read by an ephemeral
    /// consumer that acknowledges nothing: subject, headers and payload.
    pub async fn read_all(&self, stream: &str) -> Vec<(String, Vec<(String, String)>, String)> {
        let total = self.count(stream).await;
        let s = self.js.get_stream(stream).await.expect("stream");
        let consumer: consumer::PullConsumer = s
            .create_consumer(consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() })
            .await
            .expect("ephemeral consumer");
        let mut out = Vec::new();
        if total == 0 {
            return out;
        }
        let mut batch = consumer
            .fetch()
            .max_messages(usize::try_from(total).unwrap_or(usize::MAX))
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .expect("fetch");
        while let Some(Ok(m)) = batch.next().await {
            let headers = m
                .message
                .headers
                .iter()
                .flat_map(|h| h.iter())
                .flat_map(|(k, vs)| vs.iter().map(move |v| (k.to_string(), v.as_str().to_owned())))
                .collect();
            out.push((
                m.message.subject.to_string(),
                headers,
                String::from_utf8_lossy(&m.message.payload).into_owned(),
            ));
        }
        out
    }

    /// What a durable consumer still has: (pending, waiting for an ack).
    pub async fn backlog(&self, stream: &str, consumer: &str) -> (u64, usize) {
        let s = self.js.get_stream(stream).await.expect("stream");
        let info = s.consumer_info(consumer).await.expect("consumer info");
        (info.num_pending, info.num_ack_pending)
    }
}

impl Nats {
    /// Waits until the durable `consumer` of `stream` has nothing pending
    /// and nothing waiting for an acknowledgement (`what` says why, for
    /// the failure message).
    pub async fn wait_drained(&self, stream: &str, consumer: &str, what: &str) {
        crate::eventually_async(what, || async {
            let backlog = self.backlog(stream, consumer).await;
            if backlog == (0, 0) { Ok(backlog) } else { Err(backlog) }
        })
        .await;
    }
}

/// The value of header `name` in a message [`Nats::read_all`] returned.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A nats-server in operator mode, as `nsc` sets one up: its
/// configuration (an operator trusting one account with unlimited
/// JetStream and a system account, both JWTs preloaded into a memory
/// resolver) and the text of a credentials file of a user of that account
/// (its JWT and seed). No `nsc` here: the JWTs are written and signed with
/// `nkeys`.
pub struct OperatorMode {
    /// For [`PrivateNats::start_with_config`].
    pub server_config: String,
    /// A `.creds` file's text.
    pub creds: String,
    /// The user's seed (what the credentials file must keep secret).
    pub seed: String,
}

impl OperatorMode {
    pub fn new() -> Self {
        let operator = nkeys::KeyPair::new_operator();
        let account = nkeys::KeyPair::new_account();
        let operator_jwt =
            signed_jwt(&operator, &operator.public_key(), serde_json::json!({"type": "operator", "version": 2}));
        // A limit of 0 denies: every one is -1 (unlimited), as nsc writes
        // them, JetStream's too.
        let limits = serde_json::json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
            "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
        });
        let account_jwt = signed_jwt(
            &operator,
            &account.public_key(),
            serde_json::json!({"limits": limits, "type": "account", "version": 2}),
        );
        // JetStream needs a system account (which itself has none).
        let system = nkeys::KeyPair::new_account();
        let system_limits = serde_json::json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
            "conn": -1, "leaf": -1,
        });
        let system_jwt = signed_jwt(
            &operator,
            &system.public_key(),
            serde_json::json!({"limits": system_limits, "type": "account", "version": 2}),
        );
        let server_config = format!(
            "operator: {operator_jwt}\nsystem_account: {system}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {account}: {account_jwt}\n  {system}: {system_jwt}\n}}\n",
            system = system.public_key(),
            account = account.public_key(),
        );
        let (creds, seed) = Self::user_of(&account);
        Self { server_config, creds, seed }
    }

    /// A credentials file of a user of an account no operator here knows:
    /// the server refuses it.
    pub fn stranger() -> String {
        Self::user_of(&nkeys::KeyPair::new_account()).0
    }

    /// A new user of `account`: its credentials file's text and its seed.
    fn user_of(account: &nkeys::KeyPair) -> (String, String) {
        let user = nkeys::KeyPair::new_user();
        let user_jwt = signed_jwt(
            account,
            &user.public_key(),
            serde_json::json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}),
        );
        let seed = user.seed().expect("a user's seed");
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n"
        );
        (creds, seed)
    }
}

impl Default for OperatorMode {
    fn default() -> Self {
        Self::new()
    }
}

/// A NATS JWT (header `ed25519-nkey`) of `nats` claims about `subject`,
/// issued and signed by `issuer`.
fn signed_jwt(issuer: &nkeys::KeyPair, subject: &str, nats: serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let issued = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "jti": crate::unique("jti").to_uppercase(),
        "iat": issued,
        "iss": issuer.public_key(),
        "name": crate::unique("ferry-test"),
        "sub": subject,
        "nats": nats,
    });
    let body = b64.encode(claims.to_string());
    let signature = issuer.sign(format!("{header}.{body}").as_bytes()).expect("an nkey signs");
    format!("{header}.{body}.{}", b64.encode(signature))
}
