//! What must be up for `/readyz` to answer 200: read by the admin server
//! and by the watchdog, written by the bridge at each (re)load. A module of
//! its own so that neither of its readers imports the other.

use std::sync::{Arc, RwLock};

/// What must be up for `/readyz` to answer 200.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    /// (kind, role, name) of every receiver and sender in use; role is
    /// `receiver` or `sender`.
    pub transports: Vec<(String, String, String)>,
    /// Every route id.
    pub routes: Vec<String>,
    /// (route, binding) of every binding: one whose target is in an outage
    /// (`ferry_binding_available` 0) is named.
    pub bindings: Vec<(String, String)>,
}

/// Readiness as the running bridge sees it; a reload replaces it.
pub type SharedReadiness = Arc<RwLock<Readiness>>;
