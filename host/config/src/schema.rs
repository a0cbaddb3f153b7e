//! The configuration schema. Every key is documented here and in the book;
//! unknown keys are rejected everywhere.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::endpoint::{EndpointsConfig, SectionSchema, SectionTable};
pub use crate::part::PartTable;
pub use crate::wire_format::WireFormat;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This process among several running the same config.
    #[serde(default)]
    pub instance: InstanceConfig,
    /// Where plugins come from and what limits they run under.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// Where ferry keeps its own durable state (the dead-letter queue).
    #[serde(default)]
    pub store: StoreConfig,
    /// The admin HTTP server (metrics, health, readiness).
    #[serde(default)]
    pub admin: AdminConfig,
    /// Named message sources.
    #[serde(default)]
    pub receivers: BTreeMap<String, ReceiverConfig>,
    /// Named message destinations.
    #[serde(default)]
    pub senders: BTreeMap<String, SenderConfig>,
    /// Receiver -> processors -> bindings pipelines.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Servers ferry runs for applications (the SQS endpoint).
    #[serde(default)]
    pub endpoints: EndpointsConfig,
}

/// `[instance]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    /// Names this process among instances running the same config: logged
    /// at start, the `instance` label of `ferry_instance_info`, and part of
    /// every default MQTT client id. Keep it stable across restarts (see
    /// [Running more than one
    /// ferry](../operating/several-instances.md#running-more-than-one-ferry)).
    /// Default `$FERRY_INSTANCE_ID`, else the host name; letters, digits,
    /// `.`, `_` and `-`, at most 64. Filled in by the loader.
    #[serde(default)]
    pub id: Option<String>,
}

impl InstanceConfig {
    /// The id the loader settled on (`ferry` for a config built by hand).
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or("ferry")
    }
}

/// `[plugins]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// Directory of `*.wasm` components (relative to the working
    /// directory). The daemon compiles and loads only those its routes name
    /// (`<name>.wasm` for `plugin = "name"` or `header_mapper = "name"`),
    /// so start-up does not grow with unused files. Default `plugins`.
    #[serde(default = "default_plugin_dir")]
    pub dir: String,
    /// Wall-clock budget of one plugin call in milliseconds; a call that
    /// runs longer is interrupted and its message fails with
    /// `plugin_deadline`. Default 1000.
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// Linear memory one plugin instance may grow to, in MiB; beyond it the
    /// call traps. Default 64.
    #[serde(default = "default_memory_limit_mib")]
    pub memory_limit_mib: u64,
    /// Compiled components, keyed by a hash of their bytes and of the
    /// engine, so a restart reads them back instead of compiling again (a
    /// Python component takes ~9 s to compile in a debug build). The daemon
    /// compiles what the cache lacks in a child process (`ferry plugins
    /// compile`) and loads the result: compiling the small filter plugin in
    /// the daemon itself had added 36 MiB to its resident set, which the
    /// allocator kept. Default `<store.path>/plugin-cache`; `""` turns the
    /// cache off, and the daemon then compiles in its own process.
    #[serde(default)]
    pub cache_dir: Option<String>,
    /// Watch `dir` and reload plugins when a component is added, changed or
    /// removed, as SIGHUP does (see [Hot
    /// reload](../plugins/limits.md#hot-reload)). Default true.
    #[serde(default = "default_true")]
    pub watch: bool,
}

fn default_true() -> bool {
    true
}

impl Default for PluginsConfig {
    fn default() -> Self {
        Self {
            dir: default_plugin_dir(),
            call_timeout_ms: default_call_timeout_ms(),
            memory_limit_mib: default_memory_limit_mib(),
            cache_dir: None,
            watch: true,
        }
    }
}

fn default_plugin_dir() -> String {
    "plugins".to_owned()
}
fn default_call_timeout_ms() -> u64 {
    1000
}
fn default_memory_limit_mib() -> u64 {
    64
}

/// `[admin]`: the admin server, and how the process shows and ends a stall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `host:port` of the admin HTTP server, e.g. `127.0.0.1:9464`: `GET
    /// /metrics` (Prometheus/OpenMetrics text), `GET /healthz` (200 unless
    /// the daemon is stalled, then 503; see [Liveness and
    /// stopping](../operating/liveness.md#liveness-and-stopping)), `GET
    /// /readyz` (200 when every receiver and sender is connected and every
    /// route runs, else 503 with `{"ready":false,"not_ready":[…]}`; either
    /// way `listeners` lists the bound addresses, see [Listening on port
    /// 0](../operating/port-0.md#listening-on-port-0); 503 from the moment
    /// a stop begins), the dead-letter and outbox endpoints (see [Dead
    /// letters](../operating/dead-letters.md#dead-letters)), and `GET
    /// /tap/{route}` for `ferry tap` (see [Watching a
    /// route](../operating/watching.md#watching-a-route)). Off when unset.
    /// Without `token` it must be a loopback address unless `read_only` is
    /// on; `ferry validate` and `ferry run` refuse it otherwise. Requests
    /// take no body (64 KiB read at most) and time out after 5 minutes.
    #[serde(default)]
    pub listen: Option<String>,
    /// Bearer token (16 characters or more) every admin request must carry,
    /// `Authorization: Bearer <token>`, else 401. A secret: write it as
    /// `${ADMIN_TOKEN}` or `{ file = "…" }`; `ferry render` masks it, and
    /// `ferry dlq` / `ferry outbox` send it. A Prometheus scrape
    /// (`authorization` in its scrape config) and probes (`httpHeaders`)
    /// need it too.
    #[serde(default)]
    pub token: Option<crate::Secret>,
    /// The endpoints that change anything (`POST /dlq/replay`, `POST
    /// /dlq/purge`) answer 403, so the server may listen beyond loopback
    /// without a token (a Prometheus scrape, a probe). Default false.
    #[serde(default)]
    pub read_only: bool,
    /// A store operation running this long, or an async runtime that has
    /// not run its heartbeat for this long, makes the daemon "stalled":
    /// `/healthz` answers 503 and `ferry_stalled` is 1. Default 30.
    #[serde(default = "default_stall_secs")]
    pub stall_secs: u64,
    /// After SIGTERM or SIGINT, how long in-flight messages may take to
    /// finish or be released; past it the daemon logs what was still stuck
    /// and exits 1 (nothing acknowledged is lost: acknowledgements follow
    /// durable writes). A second signal a second or more later exits 1 at
    /// once. Default 30.
    #[serde(default = "default_shutdown_timeout_secs")]
    pub shutdown_timeout_secs: u64,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: None,
            token: None,
            read_only: false,
            stall_secs: default_stall_secs(),
            shutdown_timeout_secs: default_shutdown_timeout_secs(),
        }
    }
}

fn default_stall_secs() -> u64 {
    30
}
fn default_shutdown_timeout_secs() -> u64 {
    30
}

/// `[store]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Where dead letters, `shared_outbox` records and their leases live:
    /// `embedded` (default: a file under `path`, one process) or `postgres`
    /// (a database at `url` that every instance naming it shares; see [The
    /// store](../operating/store.md#the-store)).
    #[serde(rename = "type", default)]
    pub kind: StoreKind,
    /// Directory for ferry's durable state: the embedded store (redb) in
    /// `<path>/ferry.redb`, one process at a time; with either store, the
    /// default home of `plugins.cache_dir`. Default `ferry-data`.
    #[serde(default = "default_store_path")]
    pub path: String,
    /// `type = "postgres"`: `postgres://user:password@host:5432/database`,
    /// with libpq's URL parameters (`connect_timeout`, default 10 s here;
    /// `application_name`, default `ferry`;
    /// `options=-csearch_path%3Dmyschema` for a schema of its own). Secrets
    /// as for other URLs (`${PG_PASSWORD}`, `{ file = "…" }`); `ferry
    /// render` masks the password. No TLS to the database yet.
    #[serde(default)]
    pub url: Option<String>,
    /// Seconds an outbox partition's lease lasts without renewal, judged by
    /// the database's clock; holders renew it every third of it. An
    /// instance that dies has its partitions taken over this long after its
    /// last renewal. Default 15.
    #[serde(default = "default_lease_ttl_secs")]
    pub lease_ttl_secs: u64,
    /// `type = "postgres"`: connections per instance (one more listens for
    /// other instances' records and the SQS endpoint's queue changes). The
    /// SQS endpoint's requests take theirs from the same pool, one per call
    /// under way (a long poll holds none while it waits): raise it for an
    /// endpoint with many concurrent clients. Default 8.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
}

/// `store.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Embedded,
    Postgres,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::Embedded,
            path: default_store_path(),
            url: None,
            lease_ttl_secs: default_lease_ttl_secs(),
            pool_size: default_pool_size(),
        }
    }
}

fn default_store_path() -> String {
    "ferry-data".to_owned()
}
fn default_lease_ttl_secs() -> u64 {
    15
}
fn default_pool_size() -> usize {
    8
}

/// `[receivers.NAME]`: a transport chosen by `type`, its keys as written;
/// the transport's crate reads and checks them (the daemon's transport
/// table hands them over), and adds them to the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReceiverConfig(pub PartTable);

/// `[senders.NAME]`, as [`ReceiverConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SenderConfig(pub PartTable);

impl std::ops::Deref for ReceiverConfig {
    type Target = PartTable;
    fn deref(&self) -> &PartTable {
        &self.0
    }
}

impl std::ops::Deref for SenderConfig {
    type Target = PartTable;
    fn deref(&self) -> &PartTable {
        &self.0
    }
}

/// A part's schema is its transport's ([`crate::json_schema_with`] adds
/// one variant per transport); none of its own.
macro_rules! part_schema {
    ($t:ty, $name:literal, $doc:literal) => {
        impl JsonSchema for $t {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "description": $doc, "oneOf": [] })
            }
        }
    };
}

part_schema!(ReceiverConfig, "ReceiverConfig", "`[receivers.NAME]`, chosen by `type`.");
part_schema!(SenderConfig, "SenderConfig", "`[senders.NAME]`, chosen by `type`.");

/// `tls = { ... }`: TLS files for `mqtts://`, `amqps://`, `https://`,
/// NATS `tls://` and `rediss://` connections.
/// Without `ca_file` the system's trusted roots verify the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA certificates that may sign the broker's
    /// certificate (instead of the system roots).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// PEM client certificate, for brokers that authenticate clients by
    /// certificate. Give `key_file` with it.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// PEM (PKCS#8) private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<String>,
}

impl TlsConfig {
    /// Why these files cannot work with the part's URL (`secure_url`: it
    /// is a `scheme` one, the scheme that uses TLS), if they cannot.
    pub fn problem(&self, secure_url: bool, scheme: &str) -> Option<String> {
        if !secure_url {
            return Some(format!("needs a {scheme} url"));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Some("cert_file and key_file go together".into());
        }
        None
    }
}

/// How a route holds its source messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// The source message is acknowledged only after every binding accepted it.
    #[default]
    DirectHold,
    /// Persist the dispatch plans durably to the outbox, acknowledge the
    /// source, and send from the outbox.
    SharedOutbox,
}

/// How many bindings a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DispatchMode {
    /// The first binding only.
    #[default]
    Single,
    /// Every binding.
    FanOut,
}

/// What happens to a message that cannot be delivered (expired, rejected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureAction {
    /// Acknowledge and count it.
    Drop,
    /// Write it to the dead-letter queue, then acknowledge.
    Dlq,
}

/// How a route treats a transient failure of a message with a generated id
/// (`x-bridge.generated-id`) at a source that redelivers (SQS, AMQP).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnstableIdentity {
    /// Release it like any other; the receiver counts its redeliveries by
    /// a fingerprint of its content, which a redelivery keeps.
    #[default]
    CountContent,
    /// Do not recycle it: fail it for good with reason `unstable_identity`
    /// (dead-lettered or dropped per `on_permanent_failure`), as a bridge
    /// that counts replays by id only must.
    Fail,
}

/// `[routes.backoff]`: retry delays for transient failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    /// First delay in milliseconds. Default 100.
    #[serde(default = "default_backoff_initial_ms")]
    pub initial_ms: u64,
    /// Cap in milliseconds. Default 30000.
    #[serde(default = "default_backoff_max_ms")]
    pub max_ms: u64,
    /// Growth factor per attempt (>= 1). Default 2.
    #[serde(default = "default_backoff_multiplier")]
    pub multiplier: f64,
    /// Random spread as a fraction of the delay, 0..=1. Default 0.2.
    #[serde(default = "default_backoff_jitter")]
    pub jitter: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial_ms: default_backoff_initial_ms(),
            max_ms: default_backoff_max_ms(),
            multiplier: default_backoff_multiplier(),
            jitter: default_backoff_jitter(),
        }
    }
}

fn default_backoff_initial_ms() -> u64 {
    100
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_backoff_multiplier() -> f64 {
    2.0
}
fn default_backoff_jitter() -> f64 {
    0.2
}

/// `[[routes]]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Unique route id; stamped as `x-bridge.route-id`. In a
    /// `shared_outbox` route it (and each binding id) must not contain `/`,
    /// since `<route>/<binding>` (and `<route>/<binding>/<k>` for the
    /// further `outbox_partitions`) names the outbox partition.
    pub id: String,
    /// Name of a `[receivers.NAME]` entry; one route per receiver.
    pub receiver: String,
    /// `direct_hold` (default): the source message is held until every
    /// binding accepted it; `shared_outbox`: it is acknowledged once its
    /// dispatch plans are durable in the store, and a drainer per binding
    /// sends them (see [The outbox](../operating/outbox.md#the-outbox)).
    #[serde(default)]
    pub delivery_mode: DeliveryMode,
    /// `single` (default): the first binding; `fan_out`: every binding.
    #[serde(default)]
    pub dispatch_mode: DispatchMode,
    /// Messages handled at once (1..65535). Default 100.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Retry delays for transient failures (`[routes.backoff]`).
    #[serde(default)]
    pub backoff: BackoffConfig,
    /// Messages already expired when they arrive: `drop` (default; counted)
    /// or `dlq`.
    #[serde(default = "default_on_expired")]
    pub on_expired: FailureAction,
    /// Messages rejected by a processor, failed by a trapped plugin or
    /// refused by a send for good: `dlq` (default) or `drop`.
    #[serde(default = "default_on_permanent_failure")]
    pub on_permanent_failure: FailureAction,
    /// Replays after which a transiently failing message is dead-lettered
    /// (`replay_exhausted`), for every source (see [the retry
    /// budget](../concepts/what-happens.md#what-happens-to-a-message)) and
    /// for outbox records. Default 5.
    #[serde(default = "default_max_replay_attempts")]
    pub max_replay_attempts: u32,
    /// A binding whose target is unavailable (down, unreachable, or saying
    /// it takes nothing now) holds its messages without spending replays.
    /// Set, an outage that has lasted this many seconds dead-letters (or
    /// drops, per `on_permanent_failure`) the messages held for it, with
    /// reason `target_unavailable`, until a probe finds the target back.
    /// Default: none, messages wait for as long as the outage lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_outage_secs: Option<u64>,
    /// `shared_outbox`: when a binding's partitions together hold this many
    /// records the route stops receiving (nothing is acknowledged or
    /// dropped) until they drain. Default 10000.
    #[serde(default = "default_max_outbox_depth")]
    pub max_outbox_depth: usize,
    /// A message whose id ferry generated (the source gave none:
    /// `x-bridge.generated-id`) that fails transiently at a source that
    /// redelivers (SQS, AMQP): `count_content` (default) releases it like
    /// any other (the receiver counts its redeliveries by a fingerprint of
    /// its content, which a redelivery keeps); `fail` does not recycle it
    /// and fails it for good with reason `unstable_identity` (dead-lettered
    /// or dropped per `on_permanent_failure`), as a bridge that counts
    /// replays by id only must. Sources that hold messages in ferry (MQTT)
    /// are not affected.
    #[serde(default)]
    pub unstable_identity: UnstableIdentity,
    /// Keep `x-bridge.*` headers that arrive from the source (a
    /// bridge-to-bridge link you trust; see [Reserved
    /// headers](../concepts/reserved-headers.md#reserved-headers)). Default
    /// false: the route strips them.
    #[serde(default)]
    pub trust_bridge_headers: bool,
    /// Trusted routes: a message that arrives having crossed more bridges
    /// than this (`x-bridge.forwarded-hop`, counted up on every trusted
    /// hop) is dropped and counted
    /// (`ferry_messages_dropped_total{reason="loop_detected"}`), so two
    /// bridges wired into a ring cannot pass a message round for ever.
    /// Default 8.
    #[serde(default = "default_max_hops")]
    pub max_hops: u32,
    /// `shared_outbox`: how long a sent (or dead-lettered) record's
    /// duplicate key is kept, in seconds, so a source redelivery of the
    /// same message id within it is suppressed and counted instead of sent
    /// again (SQS FIFO keeps its deduplication ids as long). Default 300; 0
    /// forgets the key when the record completes.
    #[serde(default = "default_dedup_window_secs")]
    pub dedup_window_secs: u64,
    /// `shared_outbox`: partitions per binding (1..256), each with its own
    /// lease and drainer; a record goes to the partition an FNV-1a hash of
    /// its message id picks. With several instances on a PostgreSQL store,
    /// the partitions are what they share out: one instance drains a
    /// partition at a time. Order is kept within a partition only, so more
    /// than 1 gives up a binding's order. Lowering it strands the records
    /// of the partitions that go (`ferry outbox stats` shows them; the
    /// daemon warns): drain first. Default 1.
    #[serde(default = "default_outbox_partitions")]
    pub outbox_partitions: u32,
    /// The processor chain, run in order (`[[routes.processors]]`).
    #[serde(default)]
    pub processors: Vec<ProcessorConfig>,
    /// Where messages go (`[[routes.bindings]]`).
    pub bindings: Vec<BindingConfig>,
}

fn default_max_in_flight() -> usize {
    100
}
fn default_on_expired() -> FailureAction {
    FailureAction::Drop
}
fn default_on_permanent_failure() -> FailureAction {
    FailureAction::Dlq
}
fn default_max_replay_attempts() -> u32 {
    5
}
fn default_max_outbox_depth() -> usize {
    10_000
}
fn default_max_hops() -> u32 {
    8
}
fn default_dedup_window_secs() -> u64 {
    300
}
fn default_outbox_partitions() -> u32 {
    1
}

/// `[[routes.processors]]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessorConfig {
    /// Plugin name: the file `<plugins.dir>/<plugin>.wasm`.
    pub plugin: String,
    /// Handed to the plugin's `init` as JSON.
    #[serde(default = "empty_table")]
    pub config: serde_json::Value,
    /// What the plugin may reach beyond its message and the host services
    /// (see [Capabilities](../plugins/processors.md#capabilities)). Nothing
    /// by default.
    #[serde(default)]
    pub grants: GrantsConfig,
    /// Shadow rollout: another processor plugin (a new version) run on a
    /// copy of each message after this one. Its verdict and changes never
    /// affect delivery; `ferry_plugin_shadow_total` counts whether it
    /// agreed (see [Shadow rollout](../plugins/limits.md#shadow-rollout)).
    #[serde(default)]
    pub shadow: Option<String>,
    /// Handed to the shadow's `init`; this entry's `config` when not set.
    #[serde(default)]
    pub shadow_config: Option<serde_json::Value>,
}

/// `grants = { ... }` of a `[[routes.processors]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantsConfig {
    /// Names of the daemon's environment variables the plugin sees (with
    /// their values at start or reload); unset ones are left out.
    #[serde(default)]
    pub env: Vec<String>,
    /// A directory the plugin can read, mounted at `/data`.
    #[serde(default)]
    pub dir: Option<String>,
    /// Outbound network: TCP, UDP and name lookups.
    #[serde(default)]
    pub network: bool,
    /// May set the reserved `x-bridge.tenant-id` header (the `tenant`
    /// processor needs it).
    #[serde(default)]
    pub tenant_id: bool,
    /// May set the reserved `x-bridge.ordering-key` header: the SQS FIFO
    /// message group of a sender whose `message_group_header` is the
    /// default (a processor that groups by device, say).
    #[serde(default)]
    pub ordering_key: bool,
}

fn empty_table() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// `[[routes.bindings]]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BindingConfig {
    /// Binding id, for logs and metrics. Default: the sender name.
    #[serde(default)]
    pub id: Option<String>,
    /// Name of a `[senders.NAME]` entry.
    pub sender: String,
    /// Destination for the sender; for MQTT a topic template such as
    /// `bridged/{mqtt.topic}`, where `{name}` is replaced by the text
    /// header of that exact name and a missing header fails the send
    /// permanently. Empty: the sender's default.
    #[serde(default)]
    pub address: String,
    /// A header-mapper plugin run on this binding's copy of each message.
    #[serde(default)]
    pub header_mapper: Option<String>,
    /// Handed to the header mapper's `init` as JSON.
    #[serde(default = "empty_table")]
    pub header_mapper_config: serde_json::Value,
}

impl BindingConfig {
    /// The binding id, defaulting to the sender name.
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.sender)
    }
}
