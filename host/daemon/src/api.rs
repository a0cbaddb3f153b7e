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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// A route's message counters (the `ferry_messages_*_total` series, summed
/// over their reasons): a client takes two readings to make rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteCounts {
    pub received: u64,
    pub acked: u64,
    pub retried: u64,
    pub dead_lettered: u64,
    pub dropped: u64,
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
