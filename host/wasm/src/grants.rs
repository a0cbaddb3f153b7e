//! What a plugin may reach beyond its message and the host services. By
//! default nothing: no environment, no files, no network. A route grants
//! more per plugin, explicitly, in its config; a transport component gets
//! the hosts its `allow_hosts` names and nothing else.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx};

/// Where a granted directory appears inside the plugin.
pub const GUEST_DIR: &str = "/data";

/// The capabilities one configured plugin has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Environment variables the plugin sees, with their values (read from
    /// the daemon's environment when the route is built).
    pub env: Vec<(String, String)>,
    /// A host directory the plugin can read at [`GUEST_DIR`].
    pub dir: Option<PathBuf>,
    /// Outbound network (TCP, UDP and name lookups), anywhere.
    pub network: bool,
    /// Outbound TCP and HTTP to these `host:port`s only (a transport
    /// component's `allow_hosts`); see [`AllowHosts`].
    pub allow_hosts: Vec<String>,
    /// May set the reserved `x-bridge.tenant-id` header (processors only).
    pub tenant_id: bool,
    /// May set the reserved `x-bridge.ordering-key` header (processors only).
    pub ordering_key: bool,
}

/// Told of each connection or request the grants refused, with how it was
/// tried (`socket`, `http`): the caller counts it.
pub type OnRefused = Arc<dyn Fn(&'static str) + Send + Sync>;

impl Grants {
    /// Whether these grants let a processor set the reserved header `name`.
    pub fn may_set(&self, name: &str) -> bool {
        (self.tenant_id && name == ferry_envelope::names::TENANT_ID)
            || (self.ordering_key && name == ferry_envelope::names::ORDERING_KEY)
    }

    /// Whether calls may wait on the network or the file system.
    pub fn may_wait(&self) -> bool {
        self.network || self.dir.is_some() || !self.allow_hosts.is_empty()
    }

    /// The WASI context these grants describe. With `allow_hosts`, the
    /// names are looked up here (blocking: call it off the async workers)
    /// and a TCP connection may go to the addresses found, nowhere else.
    pub fn wasi_ctx(&self, on_refused: &OnRefused) -> wasmtime::Result<WasiCtx> {
        let mut builder = WasiCtx::builder();
        for (name, value) in &self.env {
            builder.env(name, value);
        }
        if let Some(dir) = &self.dir {
            builder.preopened_dir(dir, GUEST_DIR, FsPerms::ReadOnly)?;
        }
        if self.network {
            builder.inherit_network().allow_ip_name_lookup(true).allow_tcp(true).allow_udp(true);
        } else {
            // TCP goes through the check even with nothing granted, so that
            // every refused connection is counted; a listener is never
            // granted (`TcpListen` fails the check).
            let allowed: Arc<Vec<SocketAddr>> = Arc::new(
                AllowHosts::parse(&self.allow_hosts)
                    .entries
                    .iter()
                    .filter_map(|(host, port)| (host.as_str(), *port).to_socket_addrs().ok())
                    .flatten()
                    .collect(),
            );
            let on_refused = on_refused.clone();
            let lookups = !self.allow_hosts.is_empty();
            builder.allow_ip_name_lookup(lookups).allow_tcp(true).allow_udp(false).socket_addr_check(
                move |addr, used| {
                    let ok = match used {
                        // The local end of an outgoing connection.
                        SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                        SocketAddrUse::TcpConnect => allowed.contains(&addr),
                        _ => false,
                    };
                    if !ok {
                        tracing::warn!(%addr, use_ = ?used, "socket use not granted by allow_hosts; refused");
                        on_refused("socket");
                    }
                    Box::pin(async move { ok })
                },
            );
        }
        Ok(builder.build())
    }
}

/// `allow_hosts` as `(host, port)` pairs, host names in lower case
/// (entries that are not `host:port` are refused by config validation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowHosts {
    entries: Vec<(String, u16)>,
}

impl AllowHosts {
    /// The entries of the form `host:port` (`[v6]:port` for an IPv6
    /// address).
    pub fn parse(list: &[String]) -> Self {
        Self { entries: list.iter().filter_map(|e| crate::component_config::host_port(e).ok()).collect() }
    }

    /// Whether an HTTP request to `authority` (`host[:port]`, the port
    /// defaulting to the scheme's) is granted.
    pub fn allows_authority(&self, authority: &str, https: bool) -> bool {
        let default = if https { 443 } else { 80 };
        let (host, port) = match crate::component_config::host_port(authority) {
            Ok(pair) => pair,
            Err(_) => (authority.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase(), default),
        };
        self.entries.iter().any(|(h, p)| *h == host && *p == port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_authority_is_granted_by_host_and_port() {
        let hosts = AllowHosts::parse(&["Queue.Internal:443".into(), "127.0.0.1:8080".into(), "[::1]:9000".into()]);
        assert!(hosts.allows_authority("queue.internal", true), "https defaults to 443");
        assert!(!hosts.allows_authority("queue.internal", false), "http defaults to 80");
        assert!(hosts.allows_authority("127.0.0.1:8080", false));
        assert!(!hosts.allows_authority("127.0.0.1:8081", false));
        assert!(!hosts.allows_authority("127.0.0.2:8080", false));
        assert!(hosts.allows_authority("[::1]:9000", false));
        assert!(!hosts.allows_authority("queue.internal.evil.example", true));
        assert!(!hosts.allows_authority("user@queue.internal:443", true));
    }
}
