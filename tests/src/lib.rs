//! Helpers for tests that use real brokers and the real daemon.
//!
//! - [`unique`]: names with a random suffix, so tests run in parallel and
//!   repeat without seeing each other's messages; [`env_or`]: sizes from
//!   the environment.
//! - [`mqtt`]: a plain MQTT 5 test client (publish with properties,
//!   subscribe and collect) and a private Mosquitto that a test can stop
//!   and restart.
//! - [`daemon`]: runs the `ferry` binary on a config, reads the addresses
//!   it listens on, waits for its `/readyz`, and stops it.
//! - [`leftovers`]: PID files of the children a run starts, so the next
//!   run stops what a killed one left.
//! - [`ports`]: ports without a race (a refusing port, a broker's port and
//!   a check of who listens on it).
//! - [`http`]: a minimal HTTP GET for the admin endpoints.
//! - [`receiver`]: a transport receiver running in the background.
//! - [`tls`]: a throwaway CA and server certificate for TLS tests.
//! - [`sqs`]: queues of their own on the SQS endpoint (moto_server);
//!   [`sqs_proxy`]: a stand-in before it that fails sends or changes MD5s.
//! - [`amqp10_peer`]: a scripted AMQP 1.0 target that releases or rejects.
//! - [`rabbit`]: RabbitMQ clients for AMQP 0-9-1 and 1.0, and a private
//!   RabbitMQ node a test can restart; [`amqp_raw`]: a publisher that
//!   writes AMQP 0-9-1 frames byte by byte (what no client library sends).
//! - [`python`]: Python clients (boto3) run as scripts.
//! - [`powercut`]: a FUSE filesystem that loses what was not synced when
//!   the power is cut, for the store's durability tests.
//! - [`pg`]: a PostgreSQL schema of its own per test, for the shared store;
//!   [`tcp_proxy`]: a proxy a test can cut, as when a host goes away.

pub mod amqp10_peer;
pub mod amqp_raw;
pub mod daemon;
pub mod endpoint;
pub mod http;
pub mod kafka;
pub mod leftovers;
pub mod mqtt;
pub mod nats;
pub mod otlp;
pub mod pg;
pub mod ports;
pub mod powercut;
pub mod python;
pub mod rabbit;
pub mod receiver;
pub mod redis;
pub mod simplemq;
pub mod sqs;
pub mod sqs_proxy;
pub mod tcp_proxy;
pub mod tls;
pub mod webhook;

use std::path::PathBuf;

/// `prefix-<8 random hex chars>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// How long a "nothing more happens" check watches (a retry that must not
/// come, a route that must stay at its limit): what has not happened in
/// this time is taken as not happening. The one wait that is not on an
/// event; every other wait is [`eventually`] or a harness wait on one.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(700);

/// How long [`eventually`] waits before it fails the test.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// What a wait's condition answers: whether it holds, and what it saw,
/// which the failure message shows. `bool` for a plain check;
/// `Result<T, E>` to say what was seen meanwhile (`Err(depth)`) and hand
/// back what was waited for (`Ok(messages)` makes [`eventually`] return
/// the messages).
pub trait Observation {
    /// What [`eventually`] returns once the condition holds.
    type Value;
    fn holds(&self) -> bool;
    fn seen(&self) -> String;
    /// The value of an answer that holds.
    fn into_value(self) -> Self::Value;
}

impl Observation for bool {
    type Value = ();
    fn holds(&self) -> bool {
        *self
    }
    fn seen(&self) -> String {
        self.to_string()
    }
    fn into_value(self) {}
}

impl<T: std::fmt::Debug, E: std::fmt::Debug> Observation for Result<T, E> {
    type Value = T;
    fn holds(&self) -> bool {
        self.is_ok()
    }
    fn seen(&self) -> String {
        match self {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("{e:?}"),
        }
    }
    fn into_value(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => panic!("into_value of an answer that does not hold: {e:?}"),
        }
    }
}

/// Looks at `f` every 50 ms until it holds and returns its value then;
/// after [`PATIENCE`] panics naming `what` and the last answer. The one
/// way a test waits for something to happen.
pub async fn eventually<O: Observation>(what: &str, mut f: impl FnMut() -> O) -> O::Value {
    eventually_async(what, || std::future::ready(f())).await
}

/// [`eventually`] for a condition that must await (a query, a request).
pub async fn eventually_async<O: Observation, F: std::future::Future<Output = O>>(
    what: &str,
    f: impl FnMut() -> F,
) -> O::Value {
    eventually_within(what, PATIENCE, f).await
}

/// [`eventually_async`] with a patience of its own, for what takes long by
/// its nature (a stream of thousands of messages across a broker restart).
pub async fn eventually_within<O: Observation, F: std::future::Future<Output = O>>(
    what: &str,
    patience: std::time::Duration,
    mut f: impl FnMut() -> F,
) -> O::Value {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        // One look that never answers (a request to a hung peer) is a
        // failure too, not a wait without end.
        let Ok(answer) = tokio::time::timeout_at(deadline + LOOK, f()).await else {
            panic!("waited {patience:?} for {what}; the last look had not answered {LOOK:?} later");
        };
        if answer.holds() {
            return answer.into_value();
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("waited {patience:?} for {what}; last seen: {}", answer.seen());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// How much longer than its patience one look of [`eventually_within`]
/// may take before the wait gives up on it.
const LOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits at most `bound` for `child` to exit and returns what it printed
/// (its stdout and stderr must be piped, or are empty); a child still
/// running then is killed and the test fails, naming `what` and showing
/// its stderr so far.
pub fn wait_within(mut child: std::process::Child, bound: std::time::Duration, what: &str) -> std::process::Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = std::time::Instant::now() + bound;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let err = stderr.join().unwrap_or_default();
                panic!("{what} did not finish within {bound:?}; killed. stderr:\n{}", String::from_utf8_lossy(&err));
            }
        }
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// A number from the environment (a test's or benchmark's size), or
/// `default` when it is unset or not a number.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A built component: `plugins/<name>.wasm` or `tests/plugins/<name>.wasm`.
pub fn plugin_file(name: &str) -> PathBuf {
    let root = repo_root();
    for dir in ["plugins", "tests/plugins"] {
        let p = root.join(dir).join(format!("{name}.wasm"));
        if p.exists() {
            return p;
        }
    }
    panic!("{name}.wasm is not built: run `just plugins test-plugins` first");
}
