//! What can be done with dead letters and the outbox, on an open store:
//! select, purge, replay through a route's bindings, and the outbox's
//! depth. `ferry dlq` runs these on the store when the daemon is stopped;
//! the admin server runs them on the daemon's open store.

use std::time::Duration;

use ferry_config::{Config, DispatchMode};
use ferry_core::metrics::Metrics;
use ferry_core::route::{Binding, SendContext, Sent};
use ferry_core::trace::DeliveryTrace;
use ferry_envelope::{Envelope, names};
use ferry_store::{Store, StoredDeadLetter};
use serde::{Deserialize, Serialize};

use crate::wiring::{RouteBindings, StandaloneBindings};

/// How long a replay waits for a fresh sender to connect.
const CONNECT_WAIT: Duration = Duration::from_secs(15);

/// What a replay did: one line per send, and how many entries were kept.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReplayReport {
    pub lines: Vec<String>,
    pub failed: usize,
}

/// Outbox partitions and the number of dead letters.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatsReport {
    pub partitions: Vec<ferry_core::outbox::PartitionStats>,
    pub dead_letters: u64,
}

/// The entries named by id, or all of a route's.
pub async fn select(store: &dyn Store, ids: &[u64], route: Option<&str>) -> Result<Vec<StoredDeadLetter>, String> {
    if ids.is_empty() && route.is_none() {
        return Err("name dead letters by id, or all of a route with --route".into());
    }
    if ids.is_empty() {
        return store.dead_letters(route, usize::MAX).await.map_err(|e| e.to_string());
    }
    let mut chosen = Vec::with_capacity(ids.len());
    for id in ids {
        match store.dead_letter(*id).await {
            Ok(Some(e)) => chosen.push(e),
            Ok(None) => return Err(format!("no dead letter {id}")),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(chosen)
}

/// Removes the selected entries durably; how many.
pub async fn purge_entries(store: &dyn Store, ids: &[u64], route: Option<&str>) -> Result<usize, String> {
    let chosen = select(store, ids, route).await?;
    let ids: Vec<u64> = chosen.iter().map(|e| e.id).collect();
    store.remove_dead_letters(&ids).await.map_err(|e| e.to_string())
}

/// Depth per outbox partition and the dead-letter count.
pub async fn stats(store: &dyn Store) -> Result<StatsReport, String> {
    let dead_letters = store.dead_letter_count().await.map_err(|e| e.to_string())?;
    let partitions = store.fresh_stats().await.map_err(|e| e.to_string())?;
    Ok(StatsReport { partitions, dead_letters })
}

/// Sends each selected entry again through its route's binding (the one
/// that failed, or the route's bindings when the failure was before
/// dispatch) with a fresh id and `x-bridge.causation-id` naming the
/// original; an entry every send accepted is removed. The send is the
/// binding's own ([`Binding::deliver`]): its header mapper, address, span
/// and metrics, as at a first send. A running daemon passes its routes'
/// bindings (`running`); otherwise they are built here from the config and
/// their senders closed at the end.
pub async fn replay_entries(
    config: &Config,
    store: &dyn Store,
    ids: &[u64],
    route: Option<&str>,
    dry_run: bool,
    running: Option<RouteBindings>,
    metrics: &Metrics,
) -> Result<ReplayReport, String> {
    let chosen = select(store, ids, route).await?;
    let mut standalone = running.is_none().then(|| StandaloneBindings::new(config, metrics.clone()));
    let mut routes: RouteBindings = running.unwrap_or_default();
    let mut report = ReplayReport::default();
    for StoredDeadLetter { id, entry } in chosen {
        let Some(route) = config.routes.iter().find(|r| r.id == entry.route) else {
            report.lines.push(format!("{id}: route {:?} is not in the config; kept", entry.route));
            report.failed += 1;
            continue;
        };
        if !routes.contains_key(&route.id) {
            let built = match standalone.as_mut() {
                Some(s) if !dry_run => s.route(&route.id).map_err(|e| e.to_string()),
                _ if dry_run => Ok(Vec::new()),
                _ => Err(format!("route {:?} is not running", route.id)),
            };
            match built {
                Ok(b) => {
                    routes.insert(route.id.clone(), b);
                }
                Err(e) => {
                    report.lines.push(format!("{id}: {e}; kept"));
                    report.failed += 1;
                    continue;
                }
            }
        }
        let wanted: Vec<&ferry_config::BindingConfig> = match &entry.binding {
            Some(b) => route.bindings.iter().filter(|x| x.id() == b).collect(),
            None if route.dispatch_mode == DispatchMode::Single => route.bindings.iter().take(1).collect(),
            None => route.bindings.iter().collect(),
        };
        if wanted.is_empty() {
            report.lines.push(format!("{id}: binding {:?} is not in route {:?}; kept", entry.binding, route.id));
            report.failed += 1;
            continue;
        }
        let mut envelope = entry.envelope.clone();
        envelope.id = uuid::Uuid::new_v4().to_string();
        envelope.set_header(names::CAUSATION_ID, entry.envelope.id.clone());
        let mut all_sent = true;
        for wanted in wanted {
            let address = entry.address.clone().unwrap_or_else(|| wanted.address.clone());
            if dry_run {
                report.lines.push(format!(
                    "{id}: would send {} to {} ({address:?}) as {}",
                    entry.envelope.id,
                    wanted.id(),
                    envelope.id
                ));
                continue;
            }
            let Some(binding) = routes.get(&route.id).and_then(|b| b.iter().find(|b| b.id == wanted.id())) else {
                report.lines.push(format!(
                    "{id}: binding {:?} of route {:?} is not running; kept",
                    wanted.id(),
                    route.id
                ));
                all_sent = false;
                continue;
            };
            let trace = DeliveryTrace::resume(&envelope);
            let cx = SendContext { route: &route.id, metrics, trace: &trace };
            match deliver_when_connected(binding, cx, &envelope, &address).await {
                Sent::Accepted => {
                    report.lines.push(format!("{id}: sent {} to {} as {}", entry.envelope.id, binding.id, envelope.id))
                }
                Sent::Unavailable { reason: e, .. } | Sent::Transient { reason: e, .. } => {
                    report.lines.push(format!("{id}: {} failed: {e}; kept", binding.id));
                    all_sent = false;
                }
                Sent::Failed(f) => {
                    report.lines.push(format!("{id}: {} refused: {f}; kept", binding.id));
                    all_sent = false;
                }
            }
        }
        if dry_run {
            continue;
        }
        if all_sent {
            if let Err(e) = store.remove_dead_letters(&[id]).await {
                report.lines.push(format!("{id}: sent but not removed: {e}"));
                report.failed += 1;
            }
        } else {
            report.failed += 1;
        }
    }
    if let Some(standalone) = standalone {
        for sender in standalone.senders.values() {
            sender.close().await;
        }
    }
    Ok(report)
}

/// Delivers once the binding's sender has a connection (a fresh client is
/// still connecting), giving up after [`CONNECT_WAIT`].
async fn deliver_when_connected(binding: &Binding, cx: SendContext<'_>, envelope: &Envelope, address: &str) -> Sent {
    let deadline = tokio::time::Instant::now() + CONNECT_WAIT;
    loop {
        match binding.deliver(cx, envelope.clone(), address, 0).await {
            Sent::Unavailable { .. } if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}
