//! Runtime control of a running daemon: pausing, resuming and draining a
//! route, and reloading, as the admin server's `POST /routes/{id}/…` and
//! `POST /reload` (and `ferry ctl`) ask.
//!
//! Each route id has one [`Gate`] for the life of the process, so a route
//! that a reload restarts keeps its pause. A paused route stays ready on
//! `/readyz` (pausing is the operator's choice, not a fault; the body lists
//! it under `paused`) and shows as `ferry_route_paused` 1.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferry_core::metrics::{Metrics, RouteLabels};
use ferry_core::route::Gate;

use crate::api::{ControlReply, RouteCounts, RouteState, RouteStatus};

/// One route's control: its gate, and which start of it runs.
#[derive(Clone, Default)]
struct Control {
    gate: Gate,
    generation: u64,
    running: bool,
}

/// The controls of every route id the daemon has run.
#[derive(Clone)]
pub struct Controls {
    routes: Arc<Mutex<BTreeMap<String, Control>>>,
    metrics: Metrics,
}

impl Controls {
    pub fn new(metrics: Metrics) -> Self {
        Self { routes: Arc::default(), metrics }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Control>> {
        self.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The gate of route `id`, made on first use.
    pub fn gate(&self, id: &str) -> Gate {
        self.lock().entry(id.to_owned()).or_default().gate.clone()
    }

    /// Route `id` started (again): its generation goes up by one.
    pub fn started(&self, id: &str) {
        let paused = {
            let mut routes = self.lock();
            let control = routes.entry(id.to_owned()).or_default();
            control.generation += 1;
            control.running = true;
            control.gate.is_paused()
        };
        self.show(id, paused);
    }

    /// Route `id` stopped (a reload removed it, or the daemon stops).
    pub fn stopped(&self, id: &str) {
        if let Some(control) = self.lock().get_mut(id) {
            control.running = false;
        }
    }

    /// Which start of route `id` runs now (0: none yet).
    pub fn generation(&self, id: &str) -> u64 {
        self.lock().get(id).map_or(0, |c| c.generation)
    }

    /// The routes named, in that order, as `GET /routes` shows them.
    pub fn status(&self, ids: &[String]) -> Vec<RouteStatus> {
        let routes = self.lock();
        ids.iter()
            .map(|id| {
                let control = routes.get(id).cloned().unwrap_or_default();
                RouteStatus {
                    id: id.clone(),
                    state: state_of(&control),
                    in_flight: control.gate.in_flight(),
                    generation: control.generation,
                    counts: RouteCounts::default(),
                }
            })
            .collect()
    }

    /// The paused routes among `ids`.
    pub fn paused(&self, ids: &[String]) -> Vec<String> {
        let routes = self.lock();
        ids.iter().filter(|id| routes.get(*id).is_some_and(|c| c.gate.is_paused())).cloned().collect()
    }

    pub fn pause(&self, id: &str) -> ControlReply {
        let gate = self.gate(id);
        let changed = gate.pause();
        self.show(id, true);
        tracing::info!(route = id, changed, "route paused");
        self.reply(id, changed, None)
    }

    pub fn resume(&self, id: &str) -> ControlReply {
        let gate = self.gate(id);
        let changed = gate.resume();
        self.show(id, false);
        tracing::info!(route = id, changed, "route resumed");
        self.reply(id, changed, None)
    }

    /// Pauses route `id` and waits, `timeout` at most, until it holds no
    /// delivery.
    pub async fn drain(&self, id: &str, timeout: Duration) -> ControlReply {
        let gate = self.gate(id);
        let changed = gate.pause();
        self.show(id, true);
        let drained = tokio::time::timeout(timeout, gate.idle()).await.is_ok();
        tracing::info!(route = id, drained, in_flight = gate.in_flight(), "route drained");
        self.reply(id, changed, Some(drained))
    }

    fn reply(&self, id: &str, changed: bool, drained: Option<bool>) -> ControlReply {
        let control = self.lock().get(id).cloned().unwrap_or_default();
        ControlReply {
            route: id.to_owned(),
            state: state_of(&control),
            changed,
            in_flight: control.gate.in_flight(),
            drained,
        }
    }

    fn show(&self, id: &str, paused: bool) {
        self.metrics.route_paused.get_or_create(&RouteLabels::new(id)).set(i64::from(paused));
    }
}

/// Each route's counters, read from the metrics text (`/metrics`): the
/// series by reason are summed per route.
pub fn counts(metrics_text: &str) -> BTreeMap<String, RouteCounts> {
    let mut out: BTreeMap<String, RouteCounts> = BTreeMap::new();
    for sample in crate::exposition::parse(metrics_text).into_iter().flat_map(|f| f.samples) {
        let field: fn(&mut RouteCounts) -> &mut u64 = match sample.name.as_str() {
            "ferry_messages_received_total" => |c| &mut c.received,
            "ferry_messages_acked_total" => |c| &mut c.acked,
            "ferry_messages_retried_total" => |c| &mut c.retried,
            "ferry_messages_dead_lettered_total" => |c| &mut c.dead_lettered,
            "ferry_messages_dropped_total" => |c| &mut c.dropped,
            _ => continue,
        };
        let Some(route) = sample.label("route") else { continue };
        *field(out.entry(route.to_owned()).or_default()) += sample.value as u64;
    }
    out
}

fn state_of(control: &Control) -> RouteState {
    if !control.running {
        RouteState::Stopped
    } else if control.gate.is_paused() {
        RouteState::Paused
    } else {
        RouteState::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_per_route_over_their_reasons() {
        let text = "# TYPE ferry_messages_received counter\n\
            ferry_messages_received_total{route=\"a\"} 7\n\
            ferry_messages_received_total{route=\"b\\\"q\"} 2\n\
            ferry_messages_retried_total{route=\"a\",reason=\"timeout\"} 3\n\
            ferry_messages_retried_total{reason=\"nack\",route=\"a\"} 4\n\
            ferry_messages_acked_total{route=\"a\"} 5\n\
            ferry_messages_sent_total{route=\"a\",binding=\"x\"} 9\n";
        let counts = counts(text);
        assert_eq!(counts["a"], RouteCounts { received: 7, acked: 5, retried: 7, dead_lettered: 0, dropped: 0 });
        assert_eq!(counts["b\"q"].received, 2, "escaped quote in a route id");
    }

    #[tokio::test]
    async fn a_pause_outlives_a_restart_and_drain_answers_when_idle() {
        let controls = Controls::new(Metrics::new());
        let ids = vec!["a".to_owned(), "b".to_owned()];
        controls.started("a");
        assert_eq!(controls.status(&ids)[1].state, RouteState::Stopped, "b never started");
        let reply = controls.pause("a");
        assert_eq!((reply.state, reply.changed), (RouteState::Paused, true));
        assert!(!controls.pause("a").changed);
        controls.stopped("a");
        controls.started("a");
        let status = &controls.status(&ids)[0];
        assert_eq!((status.state, status.generation), (RouteState::Paused, 2), "still paused after the restart");
        assert_eq!(controls.paused(&ids), vec!["a".to_owned()]);
        let drained = controls.drain("a", Duration::from_secs(5)).await;
        assert_eq!((drained.drained, drained.in_flight), (Some(true), 0));
        assert_eq!(controls.resume("a").state, RouteState::Running);
        assert!(controls.paused(&ids).is_empty());
    }
}
