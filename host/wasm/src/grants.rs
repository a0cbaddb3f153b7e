//! What a plugin may reach beyond its message and the host services. By
//! default nothing: no environment, no files, no network. A route grants
//! more per plugin, explicitly, in its config.

use std::path::PathBuf;

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
    /// Outbound network (TCP, UDP and name lookups).
    pub network: bool,
    /// May set the reserved `x-bridge.tenant-id` header (processors only).
    pub tenant_id: bool,
    /// May set the reserved `x-bridge.ordering-key` header (processors only).
    pub ordering_key: bool,
}

impl Grants {
    /// Whether these grants let a processor set the reserved header `name`.
    pub fn may_set(&self, name: &str) -> bool {
        (self.tenant_id && name == ferry_envelope::names::TENANT_ID)
            || (self.ordering_key && name == ferry_envelope::names::ORDERING_KEY)
    }

    /// The WASI context these grants describe.
    pub fn wasi_ctx(&self) -> wasmtime::Result<WasiCtx> {
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
            builder.allow_ip_name_lookup(false).allow_tcp(false).allow_udp(false);
        }
        Ok(builder.build())
    }
}
