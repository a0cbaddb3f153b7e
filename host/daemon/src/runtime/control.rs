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

use crate::api::{
    BindingStatus, Connection, ControlReply, PluginRole, PluginStatus, RouteCounts, RouteRates, RouteState,
    RouteStatus, ShadowAgreement,
};

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
                    rates: RouteRates::default(),
                    receiver: Connection::default(),
                    bindings: Vec::new(),
                    outbox_depth: 0,
                    outbox_oldest_age_s: None,
                    last_progress_s: None,
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

/// How many one-second samples a rate spans.
const RATE_SAMPLES: usize = 6;

/// Each route's messages a second: its received and acked counters sampled
/// every second by the admin server, the rate taken over the last
/// [`RATE_SAMPLES`] samples (so a reading a client takes at any moment is
/// steady, and every client reads the same).
#[derive(Clone, Default)]
pub struct RateMeter {
    samples: Arc<Mutex<BTreeMap<String, std::collections::VecDeque<RateSample>>>>,
}

/// When, and the received and acked totals then.
type RateSample = (std::time::Instant, u64, u64);

impl RateMeter {
    /// Route `id` had counted `received` and `acked` at `at`.
    pub fn record(&self, id: &str, received: u64, acked: u64, at: std::time::Instant) {
        let mut samples = self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let route = samples.entry(id.to_owned()).or_default();
        route.push_back((at, received, acked));
        while route.len() > RATE_SAMPLES {
            route.pop_front();
        }
    }

    /// Forgets the routes not in `ids`.
    pub fn retain(&self, ids: &[String]) {
        self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|id, _| ids.contains(id));
    }

    /// Route `id`'s rates over its samples (0 until it has two).
    pub fn rates(&self, id: &str) -> RouteRates {
        let samples = self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(route) = samples.get(id) else { return RouteRates::default() };
        let (Some(first), Some(last)) = (route.front(), route.back()) else { return RouteRates::default() };
        let secs = last.0.duration_since(first.0).as_secs_f64();
        if secs <= 0.0 {
            return RouteRates::default();
        }
        RouteRates {
            received_per_s: last.1.saturating_sub(first.1) as f64 / secs,
            acked_per_s: last.2.saturating_sub(first.2) as f64 / secs,
        }
    }
}

/// Fills in what the metrics text (`/metrics`) says of each route and what
/// the running config says it is made of: its counters (the series by
/// reason summed), its receiver's and senders' connections, each binding's
/// availability and outbox, and its last progress.
pub fn observe(routes: &mut [RouteStatus], config: &ferry_config::Config, metrics_text: &str) {
    let readings = Readings::of(metrics_text);
    for status in routes.iter_mut() {
        status.counts = readings.counts.get(&status.id).cloned().unwrap_or_default();
        status.last_progress_s = readings.progress.get(&status.id).copied().filter(|t| *t > 0.0);
        let Some(route) = config.routes.iter().find(|r| r.id == status.id) else { continue };
        status.receiver = readings.connection(config, "receiver", &route.receiver);
        status.bindings = route
            .bindings
            .iter()
            .map(|b| {
                let key = (status.id.clone(), b.id().to_owned());
                BindingStatus {
                    id: b.id().to_owned(),
                    sender: readings.connection(config, "sender", &b.sender),
                    available: readings.available.get(&key).copied().unwrap_or(false),
                    outbox_depth: readings.depth.get(&key).copied().unwrap_or(0),
                    outbox_oldest_age_s: readings
                        .oldest
                        .get(&key)
                        .copied()
                        .filter(|_| readings.depth.get(&key).is_some_and(|d| *d > 0)),
                }
            })
            .collect();
        status.outbox_depth = status.bindings.iter().map(|b| b.outbox_depth).sum();
        status.outbox_oldest_age_s = status.bindings.iter().filter_map(|b| b.outbox_oldest_age_s).reduce(f64::max);
    }
}

/// Fills in each shadow plugin's agreement from the metrics text.
pub fn observe_shadows(plugins: &mut [PluginStatus], metrics_text: &str) {
    let readings = Readings::of(metrics_text);
    for plugin in plugins.iter_mut().filter(|p| p.used_by.iter().any(|u| u.role == PluginRole::Shadow)) {
        plugin.shadow = Some(readings.shadows.get(&plugin.name).copied().unwrap_or_default());
    }
}

/// The series [`observe`] reads, keyed by their labels.
#[derive(Default)]
struct Readings {
    counts: BTreeMap<String, RouteCounts>,
    progress: BTreeMap<String, f64>,
    /// (role, name) → connected.
    connected: BTreeMap<(String, String), bool>,
    /// (route, binding) → …
    available: BTreeMap<(String, String), bool>,
    depth: BTreeMap<(String, String), u64>,
    oldest: BTreeMap<(String, String), f64>,
    /// A shadow plugin's verdicts, over its routes.
    shadows: BTreeMap<String, ShadowAgreement>,
}

impl Readings {
    fn of(metrics_text: &str) -> Self {
        let mut r = Self::default();
        for sample in crate::exposition::parse(metrics_text).into_iter().flat_map(|f| f.samples) {
            let label = |name: &str| sample.label(name).unwrap_or_default().to_owned();
            let binding = || (label("route"), label("binding"));
            let count: fn(&mut RouteCounts) -> &mut u64 = match sample.name.as_str() {
                "ferry_messages_received_total" => |c| &mut c.received,
                "ferry_messages_acked_total" => |c| &mut c.acked,
                "ferry_messages_retried_total" => |c| &mut c.retried,
                "ferry_messages_dead_lettered_total" => |c| &mut c.dead_lettered,
                "ferry_messages_dropped_total" => |c| &mut c.dropped,
                "ferry_transport_connected" => {
                    r.connected.insert((label("role"), label("name")), sample.value == 1.0);
                    continue;
                }
                "ferry_binding_available" => {
                    r.available.insert(binding(), sample.value == 1.0);
                    continue;
                }
                "ferry_outbox_depth" => {
                    r.depth.insert(binding(), sample.value.max(0.0) as u64);
                    continue;
                }
                "ferry_outbox_oldest_age_seconds" => {
                    r.oldest.insert(binding(), sample.value);
                    continue;
                }
                "ferry_plugin_shadow_total" => {
                    let agreement = r.shadows.entry(label("shadow")).or_default();
                    let n = sample.value as u64;
                    match sample.label("agreement") {
                        Some("agree") => agreement.agree += n,
                        Some("disagree") => agreement.disagree += n,
                        Some("error") => agreement.error += n,
                        Some("skipped") => agreement.skipped += n,
                        _ => {}
                    }
                    continue;
                }
                "ferry_route_last_progress_seconds" => {
                    r.progress.insert(label("route"), sample.value);
                    continue;
                }
                _ => continue,
            };
            let Some(route) = sample.label("route") else { continue };
            let counts = r.counts.entry(route.to_owned()).or_default();
            *count(counts) += sample.value as u64;
            if sample.name == "ferry_messages_dropped_total" {
                *counts.dropped_by_reason.entry(label("reason")).or_default() += sample.value as u64;
            }
        }
        r
    }

    /// The receiver or sender `name` (`role` says which): its kind from
    /// the config, its state from `ferry_transport_connected`.
    fn connection(&self, config: &ferry_config::Config, role: &str, name: &str) -> Connection {
        let kind = if role == "receiver" {
            config.receivers.get(name).map(|p| p.kind())
        } else {
            config.senders.get(name).map(|p| p.kind())
        };
        Connection {
            name: name.to_owned(),
            kind: kind.unwrap_or_default().to_owned(),
            connected: self.connected.get(&(role.to_owned(), name.to_owned())).copied().unwrap_or(false),
        }
    }
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
    use crate::api::PluginUse;

    #[test]
    fn counters_are_summed_per_route_over_their_reasons() {
        let text = "# TYPE ferry_messages_received counter\n\
            ferry_messages_received_total{route=\"a\"} 7\n\
            ferry_messages_received_total{route=\"b\\\"q\"} 2\n\
            ferry_messages_retried_total{route=\"a\",reason=\"timeout\"} 3\n\
            ferry_messages_retried_total{reason=\"nack\",route=\"a\"} 4\n\
            ferry_messages_acked_total{route=\"a\"} 5\n\
            ferry_messages_dropped_total{route=\"a\",reason=\"filtered\"} 2\n\
            ferry_messages_sent_total{route=\"a\",binding=\"x\"} 9\n";
        let counts = Readings::of(text).counts;
        let a = &counts["a"];
        assert_eq!((a.received, a.acked, a.retried, a.dead_lettered, a.dropped), (7, 5, 7, 0, 2));
        assert_eq!(a.dropped_by_reason, BTreeMap::from([("filtered".to_owned(), 2)]));
        assert_eq!(counts["b\"q"].received, 2, "escaped quote in a route id");
    }

    #[test]
    fn a_route_shows_its_links_outbox_and_progress_from_the_metrics() {
        let config = ferry_config::parse(
            r#"
            [receivers.in]
            type = "mqtt"
            url = "mqtt://127.0.0.1:1883"
            topics = ["a/#"]
            [senders.one]
            type = "mqtt"
            url = "mqtt://127.0.0.1:1883"
            [senders.two]
            type = "mqtt"
            url = "mqtt://127.0.0.1:1884"
            [[routes]]
            id = "r"
            receiver = "in"
            delivery_mode = "shared_outbox"
            dispatch_mode = "fan_out"
            [[routes.bindings]]
            sender = "one"
            [[routes.bindings]]
            id = "second"
            sender = "two"
            "#,
        )
        .expect("a config");
        let text = "ferry_transport_connected{kind=\"mqtt\",role=\"receiver\",name=\"in\"} 1\n\
            ferry_transport_connected{kind=\"mqtt\",role=\"sender\",name=\"one\"} 1\n\
            ferry_transport_connected{kind=\"mqtt\",role=\"sender\",name=\"two\"} 0\n\
            ferry_binding_available{route=\"r\",binding=\"one\"} 1\n\
            ferry_binding_available{route=\"r\",binding=\"second\"} 0\n\
            ferry_outbox_depth{route=\"r\",binding=\"one\"} 0\n\
            ferry_outbox_oldest_age_seconds{route=\"r\",binding=\"one\"} 9.0\n\
            ferry_outbox_depth{route=\"r\",binding=\"second\"} 12\n\
            ferry_outbox_oldest_age_seconds{route=\"r\",binding=\"second\"} 3.5\n\
            ferry_route_last_progress_seconds{route=\"r\"} 1765000000.25\n\
            ferry_messages_acked_total{route=\"r\"} 4\n";
        let controls = Controls::new(Metrics::new());
        let mut routes = controls.status(&["r".to_owned()]);
        observe(&mut routes, &config, text);
        let r = &routes[0];
        assert_eq!(r.receiver, Connection { name: "in".into(), kind: "mqtt".into(), connected: true });
        assert_eq!(r.bindings.len(), 2);
        assert_eq!(
            (r.bindings[0].id.as_str(), r.bindings[0].sender.connected, r.bindings[0].available),
            ("one", true, true)
        );
        assert_eq!(r.bindings[0].outbox_oldest_age_s, None, "an empty outbox has no oldest record");
        let second = &r.bindings[1];
        assert_eq!((second.sender.name.as_str(), second.sender.connected, second.available), ("two", false, false));
        assert_eq!((second.outbox_depth, second.outbox_oldest_age_s), (12, Some(3.5)));
        assert_eq!((r.outbox_depth, r.outbox_oldest_age_s), (12, Some(3.5)));
        assert_eq!(r.last_progress_s, Some(1_765_000_000.25));
        assert_eq!(r.counts.acked, 4);
    }

    #[test]
    fn a_shadow_plugin_shows_its_agreement_summed_over_routes() {
        let text = "ferry_plugin_shadow_total{route=\"a\",plugin=\"live\",shadow=\"new\",agreement=\"agree\"} 5\n\
            ferry_plugin_shadow_total{route=\"b\",plugin=\"live\",shadow=\"new\",agreement=\"agree\"} 2\n\
            ferry_plugin_shadow_total{route=\"b\",plugin=\"live\",shadow=\"new\",agreement=\"disagree\"} 1\n";
        let used = |role| vec![PluginUse { at: "a".into(), role }];
        let mut plugins = vec![
            PluginStatus { name: "live".into(), used_by: used(PluginRole::Processor), ..PluginStatus::default() },
            PluginStatus { name: "new".into(), used_by: used(PluginRole::Shadow), ..PluginStatus::default() },
        ];
        observe_shadows(&mut plugins, text);
        assert_eq!(plugins[0].shadow, None, "not a shadow");
        assert_eq!(plugins[1].shadow, Some(ShadowAgreement { agree: 7, disagree: 1, error: 0, skipped: 0 }));
    }

    #[test]
    fn a_rate_spans_the_last_samples() {
        let meter = RateMeter::default();
        let t0 = std::time::Instant::now();
        assert_eq!(meter.rates("a"), RouteRates::default(), "no sample yet");
        meter.record("a", 0, 0, t0);
        assert_eq!(meter.rates("a"), RouteRates::default(), "one sample is no rate");
        for s in 1..=10u64 {
            meter.record("a", s * 100, s * 50, t0 + Duration::from_secs(s));
        }
        // The last six samples: 5 s from 500 to 1000 received.
        assert_eq!(meter.rates("a"), RouteRates { received_per_s: 100.0, acked_per_s: 50.0 });
        meter.retain(&["b".to_owned()]);
        assert_eq!(meter.rates("a"), RouteRates::default(), "a route gone from the config is forgotten");
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
