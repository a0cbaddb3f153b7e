//! The admin API's requests and answers as types, shared by the admin
//! server that writes them and the commands that read them (`ferry ctl`),
//! so neither side builds or picks apart JSON by hand.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether a route takes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteState {
    /// Taking messages.
    Running,
    /// Paused (`/routes/{id}/pause`): takes nothing new; what it held
    /// finishes, the rest waits at the source.
    Paused,
    /// Configured but not running now (starting, or stopped by a reload).
    Stopped,
}

/// `GET /routes`: one per configured route, in config order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteStatus {
    pub id: String,
    pub state: RouteState,
    /// Deliveries taken and not yet settled.
    pub in_flight: usize,
    /// Which start of the route runs now: 1 at the first start, one more at
    /// each restart a reload makes.
    pub generation: u64,
    /// What the route has counted since the daemon started.
    #[serde(default)]
    pub counts: RouteCounts,
    /// Messages a second, over the last few seconds (the daemon samples its
    /// counters every second).
    #[serde(default)]
    pub rates: RouteRates,
    /// Where it takes messages from, and whether that client is connected.
    #[serde(default)]
    pub receiver: Connection,
    /// Where it sends them, one per binding, in config order.
    #[serde(default)]
    pub bindings: Vec<BindingStatus>,
    /// Outbox records waiting to be sent, over every binding (0 for a
    /// `direct_hold` route, which keeps none).
    #[serde(default)]
    pub outbox_depth: u64,
    /// Age of the oldest of them in seconds (`None` when there is none).
    #[serde(default)]
    pub outbox_oldest_age_s: Option<f64>,
    /// When the route last made progress, as Unix seconds (`None`: not yet
    /// since the daemon started).
    #[serde(default)]
    pub last_progress_s: Option<f64>,
}

/// A route's messages a second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteRates {
    pub received_per_s: f64,
    pub acked_per_s: f64,
}

/// A transport client as `ferry_transport_connected` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    /// The `[receivers.NAME]` or `[senders.NAME]` name.
    pub name: String,
    /// Its transport (`mqtt`, `sqs`, …); empty when it reports no
    /// connection (a route stopped, or not started yet).
    pub kind: String,
    pub connected: bool,
}

/// One binding of a route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BindingStatus {
    pub id: String,
    pub sender: Connection,
    /// Whether its target takes messages (`ferry_binding_available`); false
    /// during an outage, when its messages are held.
    pub available: bool,
    /// Its outbox records waiting (`ferry_outbox_depth`).
    pub outbox_depth: u64,
    /// Age of the oldest in seconds (`ferry_outbox_oldest_age_seconds`).
    pub outbox_oldest_age_s: Option<f64>,
}

/// A route's message counters (the `ferry_messages_*_total` series, summed
/// over their reasons): a client takes two readings to make rates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteCounts {
    pub received: u64,
    pub acked: u64,
    pub retried: u64,
    pub dead_lettered: u64,
    pub dropped: u64,
    /// `dropped` by its reason (`filtered`, `expired`, …).
    #[serde(default)]
    pub dropped_by_reason: BTreeMap<String, u64>,
}

/// `GET /about`: what runs, and what this admin server lets a client do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct About {
    pub version: String,
    pub commit: String,
    /// The plugin contract the daemon hosts (`ferry:plugin@1.3.0`).
    pub plugin_contract: String,
    /// `admin.read_only`: the endpoints that change anything answer 403.
    pub read_only: bool,
}

/// What `POST /routes/{id}/pause`, `/resume` and `/drain` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlReply {
    pub route: String,
    pub state: RouteState,
    /// Whether the call changed the state (pausing a paused route does not).
    pub changed: bool,
    /// Deliveries still held when the answer was written.
    pub in_flight: usize,
    /// `/drain`: whether every delivery the route held settled before the
    /// timeout (then `in_flight` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<bool>,
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadOutcome {
    Applied,
    /// Nothing changed: the config or a plugin did not load or build.
    Refused,
}

/// What a reload did to one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteChange {
    /// New in the config: started.
    Started,
    /// Its parts changed: drained and started again.
    Restarted,
    /// Only its processors changed: swapped while it ran.
    ProcessorsSwapped,
    /// Unchanged.
    Kept,
}

/// A route after a reload: the start of it that runs now, and what the
/// reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteVersion {
    pub generation: u64,
    pub change: RouteChange,
}

/// `POST /reload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReply {
    pub outcome: ReloadOutcome,
    /// Why a refused reload was refused (empty when applied).
    #[serde(default)]
    pub errors: Vec<String>,
    /// Applied: every route running now.
    #[serde(default)]
    pub routes: BTreeMap<String, RouteVersion>,
    /// Applied: routes the new config no longer has, stopped.
    #[serde(default)]
    pub stopped: Vec<String>,
}

impl ReloadReply {
    pub fn refused(error: impl std::fmt::Display) -> Self {
        Self {
            outcome: ReloadOutcome::Refused,
            errors: vec![error.to_string()],
            routes: BTreeMap::new(),
            stopped: Vec::new(),
        }
    }
}

/// Every error answer: `{"error": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: String,
}

/// `GET /plugins`: one per plugin file the running config uses (loaded or
/// refused), by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginStatus {
    pub name: String,
    /// The world it targets at its contract version
    /// (`ferry:plugin/processor@1.3.0`); empty when it was refused.
    pub world: String,
    /// The contract version it was built against.
    pub contract: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Whether its compiled code came from the compile cache.
    pub from_cache: bool,
    /// Why it did not load (`None`: it loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Where the config uses it.
    pub used_by: Vec<PluginUse>,
    /// As a shadow: how often it decided as the live plugin did
    /// (`ferry_plugin_shadow_total`, summed over its routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowAgreement>,
}

/// One place a plugin is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginUse {
    /// The route; for a transport component, the receiver's or sender's
    /// name instead (`receivers.NAME` / `senders.NAME`).
    pub at: String,
    pub role: PluginRole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PluginRole {
    Processor,
    /// Runs beside a processor on copies; its decisions are only counted.
    Shadow,
    HeaderMapper,
    Receiver,
    Sender,
}

/// A shadow plugin's decisions against the live one's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowAgreement {
    pub agree: u64,
    pub disagree: u64,
    pub error: u64,
    pub skipped: u64,
}

/// `GET /config`: the running config with every secret masked (as `ferry
/// render` prints it), and what `ferry validate --explain` reports of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigReply {
    pub config: serde_json::Value,
    /// The fidelity report: per route and binding, what reaches the target
    /// of the source's metadata.
    pub explain: String,
    /// Losses the report found.
    pub losses: usize,
}

/// `POST /dlq/purge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeReply {
    pub purged: usize,
}

/// `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyReply {
    pub ready: bool,
    /// What is not ready, a sentence each.
    pub not_ready: Vec<String>,
    /// Routes paused by an operator: listed, and ready.
    pub paused: Vec<String>,
    /// The bound listeners.
    pub listeners: Vec<ferry_core::listeners::Bound>,
}
