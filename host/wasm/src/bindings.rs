//! The `bindgen!`s of the plugin contract (one per world, sharing the
//! interfaces of the first), and the host state a plugin instance's store
//! carries.

use std::sync::Arc;

use ferry_envelope::{Envelope, HeaderValue as EnvHeaderValue, Timestamp, names};

use crate::grants::{AllowHosts, Grants, OnRefused};
use crate::http_client::PooledClient;
use crate::kv::KvScope;
use tracing::{debug, error, info, trace, warn};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime::{ResourceLimiter, StoreLimits};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "processor",
    with: {
        "ferry:plugin/types.message": MessageState,
    },
    imports: { default: trappable },
});

pub use ferry::plugin::types::{HeaderValue, SendOutcome};

/// The `settling-processor` world: a processor that also exports `settled`.
pub mod settling {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "settling-processor",
        with: {
            "ferry:plugin/types": super::ferry::plugin::types,
            "ferry:plugin/host": super::ferry::plugin::host,
            "ferry:plugin/kv": super::ferry::plugin::kv,
        },
    });
}

/// The `header-mapper` world.
pub mod mapper {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "header-mapper",
        with: {
            "ferry:plugin/types": super::ferry::plugin::types,
            "ferry:plugin/host": super::ferry::plugin::host,
            "ferry:plugin/kv": super::ferry::plugin::kv,
        },
    });
}

/// The `transport-receiver` world (since 1.2.0): a component that exports the
/// `receiver` interface. A `transport` component (both halves) is
/// instantiated through this and through [`transport_sender`], once per
/// part that uses it.
pub mod transport_receiver {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "transport-receiver",
        with: {
            "ferry:plugin/types": super::ferry::plugin::types,
            "ferry:plugin/host": super::ferry::plugin::host,
            "ferry:plugin/kv": super::ferry::plugin::kv,
        },
        exports: { default: async },
    });
}

/// The `transport-sender` world (since 1.2.0).
pub mod transport_sender {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "transport-sender",
        with: {
            "ferry:plugin/types": super::ferry::plugin::types,
            "ferry:plugin/host": super::ferry::plugin::host,
            "ferry:plugin/kv": super::ferry::plugin::kv,
            "ferry:plugin/transport-types": super::transport_receiver::ferry::plugin::transport_types,
        },
        exports: { default: async },
    });
}

/// The types a transport component exchanges with the host.
pub use transport_receiver::ferry::plugin::transport_types;

/// The host side of the `message` resource: the envelope being processed.
/// It stays in the host; the guest reads it through accessor calls.
pub struct MessageState {
    pub envelope: Envelope,
    /// Reserved headers the guest tried to set or remove (ignored).
    pub refused_reserved: u32,
}

impl Default for MessageState {
    /// No message (between calls); allocates nothing.
    fn default() -> Self {
        Self { envelope: Envelope::empty(), refused_reserved: 0 }
    }
}

/// What one plugin instance's store holds.
pub struct HostState {
    /// The message of the call in progress. A call hands the guest a
    /// borrow of exactly one message, which it cannot keep past the call,
    /// so every message handle the guest can present means this one.
    pub message: MessageState,
    pub table: ResourceTable,
    pub wasi: WasiCtx,
    pub limits: StoreLimits,
    pub plugin: String,
    pub route: String,
    pub kv: KvScope,
    /// The reserved headers this plugin may set (`x-bridge.tenant-id`,
    /// `x-bridge.ordering-key`: a processor whose route grants them; never
    /// a header mapper).
    pub reserved_grants: Grants,
    /// `wasi:http`: the context, and the hook that checks each request
    /// against the grants.
    pub http: wasmtime_wasi_http::WasiHttpCtx,
    pub http_grant: HttpGrant,
    /// When the call in progress must end (transport components, whose
    /// epoch callback reads it).
    pub call_deadline: Option<std::time::Instant>,
    /// What a transport sender said with `host.target-unavailable` during
    /// the `send` in progress (the host clears it before each call).
    pub target_unavailable: Option<String>,
}

/// Lets a request through to a host and port `allow_hosts` names, with
/// its timeouts capped at the call deadline; refuses and counts the rest.
pub struct HttpGrant {
    allowed: AllowHosts,
    on_refused: OnRefused,
    timeout: std::time::Duration,
    /// The part's pooled client (transport components); without one, a
    /// connection per request (nothing else is granted a host).
    client: Option<Arc<PooledClient>>,
}

/// What a transport component's instances share for the network.
#[derive(Clone)]
pub struct Network {
    /// Told of each connection or request the grants refused.
    pub on_refused: OnRefused,
    /// The cap of every HTTP timeout (the call deadline).
    pub timeout: std::time::Duration,
    pub client: Arc<PooledClient>,
}

impl wasmtime_wasi_http::WasiHttpHooks for HttpGrant {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<wasmtime_wasi_http::WasiBody>,
                        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                    ),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        let _ = fut;
        let https = request.uri().scheme() == Some(&http::uri::Scheme::HTTPS);
        let authority = request.uri().authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
        if !self.allowed.allows_authority(&authority, https) {
            warn!(%authority, "HTTP request to a host allow_hosts does not grant; refused");
            (self.on_refused)("http");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        // Only a transport component's part has a client, and only a
        // transport component is granted hosts: nothing else gets here.
        let Some(client) = self.client.clone() else {
            (self.on_refused)("http");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        };
        // The connect timeout is the part's cap, set on its connector.
        let cap = self.timeout;
        let options = options.unwrap_or_default();
        let first_byte = options.first_byte_timeout.map_or(cap, |t| t.min(cap));
        let between_bytes = options.between_bytes_timeout.map_or(cap, |t| t.min(cap));
        Box::new(async move {
            let response = client.send(request, first_byte, between_bytes).await?;
            let done: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.http_grant }
    }
}

impl HostState {
    pub fn new(
        plugin: &str,
        route: &str,
        memory_limit_bytes: usize,
        kv: KvScope,
        grants: &Grants,
    ) -> wasmtime::Result<Self> {
        Self::with_network(plugin, route, memory_limit_bytes, kv, grants, None)
    }

    /// As [`HostState::new`], for a transport component: `network` is told
    /// of each connection or request `grants.allow_hosts` refused, caps the
    /// HTTP timeouts, and sends through the part's pooled client.
    pub fn with_network(
        plugin: &str,
        route: &str,
        memory_limit_bytes: usize,
        kv: KvScope,
        grants: &Grants,
        network: Option<&Network>,
    ) -> wasmtime::Result<Self> {
        let on_refused: OnRefused = network.map_or_else(|| Arc::new(|_| {}) as OnRefused, |n| n.on_refused.clone());
        Ok(Self {
            message: MessageState::default(),
            table: ResourceTable::new(),
            // No environment, arguments, directories or network unless the
            // route grants them (see `Grants`).
            wasi: grants.wasi_ctx(&on_refused)?,
            limits: wasmtime::StoreLimitsBuilder::new()
                .memory_size(memory_limit_bytes)
                .table_elements(100_000)
                .instances(64)
                .tables(64)
                .memories(4)
                .trap_on_grow_failure(true)
                .build(),
            plugin: plugin.to_owned(),
            route: route.to_owned(),
            kv,
            reserved_grants: Grants {
                tenant_id: grants.tenant_id,
                ordering_key: grants.ordering_key,
                ..Grants::default()
            },
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            http_grant: HttpGrant {
                allowed: AllowHosts::parse(&grants.allow_hosts),
                on_refused,
                timeout: network.map_or(std::time::Duration::from_secs(30), |n| n.timeout),
                client: network.map(|n| n.client.clone()),
            },
            call_deadline: None,
            target_unavailable: None,
        })
    }

    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limits
    }

    fn message(&mut self, msg: &Resource<MessageState>) -> wasmtime::Result<&mut MessageState> {
        // The one message of the call (see `HostState::message`).
        let _ = msg;
        Ok(&mut self.message)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

pub fn to_wit(value: &EnvHeaderValue) -> HeaderValue {
    match value {
        EnvHeaderValue::Text(s) => HeaderValue::Text(s.clone()),
        EnvHeaderValue::Integer(i) => HeaderValue::Integer(*i),
        EnvHeaderValue::Float(f) => HeaderValue::Float(*f),
        EnvHeaderValue::Boolean(b) => HeaderValue::Boolean(*b),
        EnvHeaderValue::Time(t) => HeaderValue::Time(t.as_millis()),
        EnvHeaderValue::Bytes(b) => HeaderValue::Bytes(b.to_vec()),
    }
}

pub fn from_wit(value: HeaderValue) -> EnvHeaderValue {
    match value {
        HeaderValue::Text(s) => EnvHeaderValue::Text(s),
        HeaderValue::Integer(i) => EnvHeaderValue::Integer(i),
        HeaderValue::Float(f) => EnvHeaderValue::Float(f),
        HeaderValue::Boolean(b) => EnvHeaderValue::Boolean(b),
        HeaderValue::Time(t) => EnvHeaderValue::Time(Timestamp(t)),
        HeaderValue::Bytes(b) => EnvHeaderValue::Bytes(b.into()),
    }
}

impl ferry::plugin::types::Host for HostState {}

impl ferry::plugin::types::HostMessage for HostState {
    fn id(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<String> {
        Ok(self.message(&msg)?.envelope.id.clone())
    }

    fn subject(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<Option<String>> {
        Ok(self.message(&msg)?.envelope.subject.clone())
    }

    fn set_subject(&mut self, msg: Resource<MessageState>, subject: Option<String>) -> wasmtime::Result<()> {
        self.message(&msg)?.envelope.subject = subject;
        Ok(())
    }

    fn header(&mut self, msg: Resource<MessageState>, name: String) -> wasmtime::Result<Option<HeaderValue>> {
        Ok(self.message(&msg)?.envelope.headers.get(&name).map(to_wit))
    }

    fn header_names(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<Vec<String>> {
        Ok(self.message(&msg)?.envelope.headers.keys().cloned().collect())
    }

    fn set_header(&mut self, msg: Resource<MessageState>, name: String, value: HeaderValue) -> wasmtime::Result<()> {
        let plugin = self.plugin.clone();
        let granted = self.reserved_grants.may_set(&name);
        let m = self.message(&msg)?;
        if names::is_reserved(&name) && !granted {
            m.refused_reserved += 1;
            warn!(%plugin, header = %name, "plugin may not set reserved headers; ignored");
        } else {
            m.envelope.headers.insert(name, from_wit(value));
        }
        Ok(())
    }

    fn remove_header(&mut self, msg: Resource<MessageState>, name: String) -> wasmtime::Result<()> {
        let plugin = self.plugin.clone();
        let m = self.message(&msg)?;
        if names::is_reserved(&name) {
            m.refused_reserved += 1;
            warn!(%plugin, header = %name, "plugin may not remove reserved headers; ignored");
        } else {
            m.envelope.headers.remove(&name);
        }
        Ok(())
    }

    fn payload_len(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<u64> {
        Ok(self.message(&msg)?.envelope.payload().len() as u64)
    }

    fn payload(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.message(&msg)?.envelope.payload().to_vec())
    }

    fn set_payload(&mut self, msg: Resource<MessageState>, payload: Vec<u8>) -> wasmtime::Result<()> {
        self.message(&msg)?.envelope.set_payload(payload);
        Ok(())
    }

    fn created_at(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<i64> {
        Ok(self.message(&msg)?.envelope.created_at.as_millis())
    }

    fn expires_at(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<Option<i64>> {
        Ok(self.message(&msg)?.envelope.expires_at.map(Timestamp::as_millis))
    }

    fn drop(&mut self, msg: Resource<MessageState>) -> wasmtime::Result<()> {
        // The host owns the message and takes it back after the call; a
        // guest can only ever hold a borrow, so there is nothing to free.
        let _ = msg;
        Ok(())
    }
}

impl ferry::plugin::host::Host for HostState {
    fn log(&mut self, level: ferry::plugin::host::Level, message: String) -> wasmtime::Result<()> {
        use ferry::plugin::host::Level;
        let (plugin, route) = (self.plugin.as_str(), self.route.as_str());
        // Bound what one call can put in the log.
        let message: String = message.chars().take(4096).collect();
        match level {
            Level::Trace => trace!(plugin, route, "{message}"),
            Level::Debug => debug!(plugin, route, "{message}"),
            Level::Info => info!(plugin, route, "{message}"),
            Level::Warn => warn!(plugin, route, "{message}"),
            Level::Error => error!(plugin, route, "{message}"),
        }
        Ok(())
    }

    fn now(&mut self) -> wasmtime::Result<i64> {
        Ok(Timestamp::now().as_millis())
    }

    fn target_unavailable(&mut self, reason: String) -> wasmtime::Result<()> {
        // Bounded like a log line; read only by a transport sender's `send`.
        self.target_unavailable = Some(reason.chars().take(4096).collect());
        Ok(())
    }
}

impl ferry::plugin::kv::Host for HostState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.kv.get(&key))
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        Ok(self.kv.set(&key, value))
    }

    fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        self.kv.delete(&key);
        Ok(())
    }

    fn compare_and_swap(
        &mut self,
        key: String,
        expected: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
    ) -> wasmtime::Result<Result<bool, String>> {
        Ok(self.kv.compare_and_swap(&key, expected.as_deref(), value))
    }

    fn increment(&mut self, key: String, delta: i64) -> wasmtime::Result<Result<i64, String>> {
        Ok(self.kv.increment(&key, delta))
    }

    fn keys(&mut self, prefix: String) -> wasmtime::Result<Vec<String>> {
        Ok(self.kv.keys(&prefix))
    }
}
