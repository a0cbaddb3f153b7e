//! The addresses the daemon's listeners are bound to.
//!
//! Every listener (the admin server, an HTTP or SimpleMQ-style receiver,
//! the SQS endpoint) may be configured with port 0; the system picks a
//! free port and the listener records what it got here. `ferry run`
//! announces each one on stdout as one JSON line,
//! `{"listening":{"kind":"http","name":"hooks","addr":"127.0.0.1:40123"}}`,
//! and `/readyz` lists them all, so a supervisor or a test reads the
//! address instead of reserving a port beforehand.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// One bound listener.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bound {
    /// `admin`, `http` (a receiver), `sqs_endpoint`.
    pub kind: String,
    /// The receiver's name; `admin` and `sqs` for the daemon's own servers.
    pub name: String,
    pub addr: SocketAddr,
}

/// The bound listeners of one daemon; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Listeners {
    bound: Arc<Mutex<BTreeMap<(String, String), SocketAddr>>>,
    /// Print a line on stdout per binding (`ferry run`).
    announce: bool,
}

impl Listeners {
    /// Listeners that announce each binding on stdout.
    pub fn announcing() -> Self {
        Self { bound: Arc::default(), announce: true }
    }

    /// Records that `kind`/`name` listens on `addr` (replacing an earlier
    /// address of the same listener).
    pub fn record(&self, kind: &str, name: &str, addr: SocketAddr) {
        let previous = self
            .bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((kind.to_owned(), name.to_owned()), addr);
        if self.announce && previous != Some(addr) {
            let line = serde_json::json!({ "listening": Bound { kind: kind.into(), name: name.into(), addr } });
            // One write of the whole line, so concurrent announcements do
            // not interleave; a closed stdout is not the daemon's problem.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        }
    }

    /// The address `kind`/`name` is bound to, if it is.
    pub fn get(&self, kind: &str, name: &str) -> Option<SocketAddr> {
        self.bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(kind.to_owned(), name.to_owned()))
            .copied()
    }

    /// Every bound listener, by kind and name.
    pub fn all(&self) -> Vec<Bound> {
        self.bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|((kind, name), addr)| Bound { kind: kind.clone(), name: name.clone(), addr: *addr })
            .collect()
    }
}

/// `ferry validate --connect` for a listener: binds `listen` and lets it go
/// again (port 0 binds a port the system picks, and says which).
pub async fn probe(listen: &str) -> Result<String, crate::TransportError> {
    match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => Ok(format!("can listen on {}", l.local_addr().map(|a| a.to_string()).unwrap_or_default())),
        Err(e) => Err(crate::TransportError::transient(format!("cannot listen on {listen}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_bound_again_replaces_its_address() {
        let listeners = Listeners::default();
        let a: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let b: SocketAddr = "127.0.0.1:4001".parse().expect("addr");
        listeners.record("http", "hooks", a);
        listeners.record("admin", "admin", b);
        listeners.record("http", "hooks", b);
        assert_eq!(listeners.get("http", "hooks"), Some(b));
        assert_eq!(
            listeners.all(),
            vec![
                Bound { kind: "admin".into(), name: "admin".into(), addr: b },
                Bound { kind: "http".into(), name: "hooks".into(), addr: b },
            ]
        );
        assert_eq!(listeners.get("http", "other"), None);
    }
}
