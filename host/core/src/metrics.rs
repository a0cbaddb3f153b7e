//! The counters and gauges ferry exports, in one registry that renders the
//! Prometheus text format. Every metric is documented here (its help text)
//! and listed in the book (docs/src/operating/metrics.md).
//!
//! The seed documents name some counters in CamelCase; they map to:
//! `MQTTIngressHeaderDropped` -> `ferry_mqtt_ingress_header_dropped_total`,
//! `MQTTIngressPoisonDropped` -> `ferry_mqtt_ingress_poison_dropped_total`,
//! `MQTTNonStringHeaderDropped` -> `ferry_mqtt_non_string_header_dropped_total`,
//! `SQSDroppedAttributes` -> `ferry_sqs_dropped_attributes_total`.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set: ordered (name, value) pairs.
pub type Labels = Vec<(String, String)>;

/// The labels of a route's own series: `route`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

impl RouteLabels {
    pub fn new(route: &str) -> Self {
        Self { route: route.to_owned() }
    }
}

/// The labels of a route's series by reason: `route`, `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub route: String,
    pub reason: String,
}

impl ReasonLabels {
    pub fn new(route: &str, reason: &str) -> Self {
        Self { route: route.to_owned(), reason: reason.to_owned() }
    }
}

/// The labels of a binding's series: `route`, `binding`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindingLabels {
    pub route: String,
    pub binding: String,
}

impl BindingLabels {
    pub fn new(route: &str, binding: &str) -> Self {
        Self { route: route.to_owned(), binding: binding.to_owned() }
    }
}
/// A counter family keyed by labels (pairs, or a typed label set).
pub type CounterFamily<L = Labels> = Family<L, Counter>;
/// A gauge family keyed by labels.
pub type GaugeFamily<L = Labels> = Family<L, Gauge>;
/// A gauge family holding floating-point values.
pub type FloatGaugeFamily<L = Labels> = Family<L, Gauge<f64, std::sync::atomic::AtomicU64>>;
/// A histogram family keyed by labels (seconds, 0.5 ms to about 9 min).
pub type HistogramFamily<L = Labels> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 21))
}

/// Store operations: 50 µs (a group commit on a fast disk) to about 100 s
/// (a stuck one the watchdog reports).
fn store_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 22))
}

/// Plugin calls take microseconds: 1 µs to about 8 s.
fn call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_001, 2.0, 24))
}

/// A counter's handle (shares the family's value).
pub type CounterHandle = Counter;
/// A gauge's handle.
pub type GaugeHandle = Gauge;
/// A floating-point gauge's handle.
pub type FloatGaugeHandle = Gauge<f64, std::sync::atomic::AtomicU64>;
/// A histogram's handle.
pub type HistogramHandle = Histogram;

/// Builds a label set from string pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// A metric family a transport crate declares for itself, with
/// [`declare_metric!`](crate::declare_metric): its name without the
/// `ferry_` prefix, its kind, its label names and its help text. Every
/// declaration linked into the binary is registered by [`Metrics::new`],
/// listed by [`Metrics::described`] and in the book's reference; the crate
/// takes its family with [`Metrics::counter_family`] or [`Metrics::gauge_family`].
#[derive(Debug, Clone, Copy)]
pub struct Declared {
    pub name: &'static str,
    pub kind: DeclaredKind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

/// What a [`Declared`] family holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredKind {
    Counter,
    Gauge,
}

impl Declared {
    pub const fn counter(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Self {
        Self { name, kind: DeclaredKind::Counter, labels, help }
    }

    pub const fn gauge(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Self {
        Self { name, kind: DeclaredKind::Gauge, labels, help }
    }
}

inventory::collect!(Declared);

#[doc(hidden)]
pub use inventory;

/// Declares a transport's metric family as a constant and submits it to
/// the registry every [`Metrics`] is built from:
/// `declare_metric!(pub HEADER_DROPPED = Declared::counter("x_header_dropped", &["sender"], "…"));`
#[macro_export]
macro_rules! declare_metric {
    ($vis:vis $id:ident = $decl:expr) => {
        $vis const $id: $crate::metrics::Declared = $decl;
        $crate::metrics::inventory::submit! { $id }
    };
}

/// Every declaration linked in, one per name (the first by name order
/// wins; two crates declaring one name must agree), sorted by name.
fn declarations() -> Vec<&'static Declared> {
    let mut all: Vec<&'static Declared> = inventory::iter::<Declared>.into_iter().collect();
    all.sort_by_key(|d| d.name);
    all.dedup_by_key(|d| d.name);
    all
}

/// A declared family as registered.
#[derive(Clone)]
enum DeclaredFamily {
    Counter(CounterFamily),
    Gauge(GaugeFamily),
}

/// Every metric ferry exports. Cheap to clone (families are shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// What was registered, in order (the registry cannot list a family
    /// that has no series yet).
    described: Arc<Vec<Described>>,
    /// The families transport crates declared ([`Declared`]), by name.
    declared: Arc<HashMap<&'static str, DeclaredFamily>>,
    /// Deliveries a route took from its receiver. Labels: route.
    pub received: CounterFamily<RouteLabels>,
    /// Messages a binding's sender accepted. Labels: route, binding.
    pub sent: CounterFamily<BindingLabels>,
    /// Source messages acknowledged. Labels: route.
    pub acked: CounterFamily<RouteLabels>,
    /// Send or processing attempts that will be retried. Labels: route, reason.
    pub retried: CounterFamily<ReasonLabels>,
    /// Messages written to the dead-letter queue. Labels: route, reason.
    pub dead_lettered: CounterFamily<ReasonLabels>,
    /// Messages acknowledged without being sent. Labels: route, reason
    /// (`filtered`, `expired`, `permanent_failure`, `no_destination`,
    /// `loop_detected`).
    pub dropped: CounterFamily<ReasonLabels>,
    /// Messages found expired on arrival. Labels: route.
    pub expired: CounterFamily<RouteLabels>,
    /// Messages being handled now. Labels: route.
    pub in_flight: GaugeFamily<RouteLabels>,
    /// Whether a route is running (1/0). Labels: route.
    pub route_running: GaugeFamily<RouteLabels>,
    /// Whether a route is paused by an operator (1/0). Labels: route.
    pub route_paused: GaugeFamily<RouteLabels>,
    /// Time a plugin call took (instance taken to verdict). Labels: plugin, route.
    pub plugin_call_seconds: HistogramFamily,
    /// Binding copies not sent again on a redelivery because the binding
    /// accepted the message on an earlier delivery. Labels: route.
    pub fanout_skipped: CounterFamily,
    /// Copies of a redelivered message sent to every planned binding
    /// because the route has no memory of which ones accepted it before (a
    /// generated identity, a restart, another instance, or forgotten): each
    /// may duplicate an earlier copy. Labels: route.
    pub fanout_resent: CounterFamily,
    /// Outbox records not stored again because the same (partition,
    /// envelope id, binding, address) was pending or sent within the
    /// route's dedup window (OutboxDuplicateSuppressed). Labels: route.
    pub outbox_duplicate_suppressed: CounterFamily,
    /// Times a route paused receiving because an outbox partition was full. Labels: route.
    pub outbox_backpressure: CounterFamily,
    /// Pending outbox records. Labels: route, binding.
    pub outbox_depth: GaugeFamily,
    /// Whether a binding's target is taking messages (1) or is in an
    /// outage (0), by route and binding.
    pub binding_available: GaugeFamily,
    /// Sends that found their target unavailable (nothing reached it, or
    /// it takes nothing now), by route and binding.
    pub send_unavailable: CounterFamily,
    /// Age of the oldest pending outbox record in seconds. Labels: route, binding.
    pub outbox_oldest_age: FloatGaugeFamily,
    /// Outbox partitions whose lease this instance holds (one drainer each).
    /// Labels: route.
    pub outbox_leases_held: GaugeFamily,
    /// SIGHUP reloads. Labels: outcome (`applied`, `refused`).
    pub reloads: CounterFamily,
    /// Messages a receiver could not read and refused at the broker (AMQP
    /// `rejected`, basic.reject without requeue). Labels: kind, receiver,
    /// reason (`unsupported_body`, `too_large`, `undecodable`).
    pub ingress_rejected: CounterFamily,
    /// AMQP headers or application properties that have no form on the
    /// other side (decimals, described values, nested tables). Labels:
    /// kind, name, direction (`ingress` or `egress`).
    pub amqp_header_dropped: CounterFamily,
    /// Payloads a receiver with `wire_format = "json"` read, by what they
    /// were: `wire` (headers and body unpacked), `plain` (not the format:
    /// a plain body), `malformed` (meant as the format but broken: an HTTP
    /// receiver answers 400, others pass it on as a plain body). Labels:
    /// receiver, outcome.
    pub wire_format_read: CounterFamily,
    /// Successful (re)connections of a transport client. Labels: kind,
    /// role (`receiver` or `sender`), name.
    pub connections: CounterFamily,
    /// Whether a transport client is connected now (1/0). Labels: kind,
    /// role, name.
    pub connected: GaugeFamily,
    /// Time from a delivery's arrival in the route to its settlement at the
    /// source (ack, reject or release), in seconds. Labels: route.
    pub delivery_latency: HistogramFamily<RouteLabels>,
    /// Age of a message when a target accepted it: the acceptance time
    /// minus the envelope's creation time (the source's send time when the
    /// transport carries one), in seconds. Labels: route, binding.
    pub age_at_egress: HistogramFamily<BindingLabels>,
    /// Plugin calls by outcome. Labels: plugin, route, outcome (`pass`,
    /// `drop`, `route`, `retry`, `reject`, `trap`, `deadline`; `settled`
    /// for the outcome calls of a settling processor; `map` for a header
    /// mapper that kept the address).
    pub plugin_calls: CounterFamily,
    /// Attempts by a plugin to set or remove a reserved `x-bridge.*`
    /// header, which the host ignored. Labels: plugin, route.
    pub plugin_reserved_refused: CounterFamily,
    /// Connections and HTTP requests a transport component tried to a host
    /// and port its `allow_hosts` does not grant, which the host refused.
    /// Labels: plugin, part (the receiver or sender), via (`http`,
    /// `socket`).
    pub plugin_network_refused: CounterFamily,
    /// Copies a shadow plugin processed beside the live one, by whether it
    /// decided the same (`agree`, `disagree`, `error`, `skipped` when too
    /// many shadow calls were running). Labels: route, plugin, shadow,
    /// agreement.
    pub plugin_shadow: CounterFamily,
    /// Messages a processor stamped with `x-bridge.tenant-id`. Labels:
    /// route, tenant.
    pub tenant_messages: CounterFamily,
    /// Time a store operation took, from the call to its answer (for
    /// changes: the group commit that covered it). Labels: op (`persist`,
    /// `acquire_lease`, `claim`, `complete`, `replay`, `release`,
    /// `dead_letter_put`, `dead_letter_remove`, `dead_letter_read`, and
    /// `commit` for each group commit of the writer thread).
    pub store_op_seconds: HistogramFamily,
    /// 1 while the watchdog finds the daemon stuck (a store operation or
    /// the runtime past `admin.stall_secs`), else 0; `/healthz` answers 503
    /// meanwhile.
    pub stalled: Gauge,
    /// When a route last made progress (a delivery settled at its source,
    /// or an outbox record sent or failed for good), as Unix seconds; the
    /// watchdog reports a route with work that stopped moving. Labels: route.
    pub route_last_progress: FloatGaugeFamily<RouteLabels>,
    /// 1, labelled with this process's instance id and ferry's version.
    /// Labels: instance, version.
    pub instance_info: GaugeFamily,
    /// This build: always 1. Labels: version, commit.
    pub build_info: GaugeFamily,
    /// The live taps on routes (`ferry tap`): not a metric, but carried with
    /// them so every place that counts a message can also show it.
    pub taps: crate::tap::Taps,
}

/// A registered metric: its name without the `ferry_` prefix, its type and
/// its help text.
#[derive(Debug, Clone)]
pub struct Described {
    pub name: String,
    pub kind: &'static str,
    pub help: String,
}

/// The registry, and a list of what was registered in it.
struct Catalogued {
    registry: Registry,
    described: Vec<Described>,
}

impl Catalogued {
    fn register(&mut self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        use prometheus_client::metrics::MetricType;
        let kind = match metric.metric_type() {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Info => "info",
            _ => "unknown",
        };
        self.described.push(Described { name: name.to_owned(), kind, help: help.to_owned() });
        self.registry.register(name, help, metric);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Catalogued { registry: Registry::with_prefix("ferry"), described: Vec::new() };
        // The per-message series have typed label sets (see RouteLabels).
        let received = CounterFamily::<RouteLabels>::default();
        registry.register("messages_received", "Deliveries a route took from its receiver", received.clone());
        let sent = CounterFamily::<BindingLabels>::default();
        registry.register("messages_sent", "Messages a binding's sender accepted", sent.clone());
        let acked = CounterFamily::<RouteLabels>::default();
        registry.register("messages_acked", "Source messages acknowledged", acked.clone());
        let retried = CounterFamily::<ReasonLabels>::default();
        registry.register("messages_retried", "Attempts that failed transiently and will be retried", retried.clone());
        let dead_lettered = CounterFamily::<ReasonLabels>::default();
        registry.register("messages_dead_lettered", "Messages written to the dead-letter queue", dead_lettered.clone());
        let dropped = CounterFamily::<ReasonLabels>::default();
        registry.register("messages_dropped", "Messages acknowledged without being sent, by reason", dropped.clone());
        let expired = CounterFamily::<RouteLabels>::default();
        registry.register("messages_expired", "Messages found expired on arrival", expired.clone());
        let mut counter = |name: &str, help: &str| {
            let f = CounterFamily::default();
            registry.register(name, help, f.clone());
            f
        };
        let fanout_skipped = counter(
            "fanout_skipped",
            "Binding copies not sent again on a redelivery: the binding accepted an earlier delivery",
        );
        let fanout_resent = counter(
            "fanout_resent",
            "Copies of a redelivered message sent to every binding for want of a memory of earlier deliveries (possible duplicates)",
        );
        let wire_format_read =
            counter("wire_format_read", "Payloads read as the JSON wire format, by outcome (wire, plain, malformed)");
        let ingress_rejected =
            counter("ingress_rejected", "Messages a receiver could not read and refused at the broker");
        let amqp_header_dropped =
            counter("amqp_header_dropped", "AMQP headers or properties with no form on the other side");
        let connections = counter("transport_connections", "Successful connections of a transport client");
        let plugin_calls = counter("plugin_calls", "Plugin calls by outcome");
        let plugin_reserved_refused = counter(
            "plugin_reserved_header_refused",
            "Attempts by a plugin to set or remove a reserved x-bridge.* header (ignored)",
        );
        let plugin_network_refused = counter(
            "plugin_network_refused",
            "Connections and HTTP requests of a transport component to a host it was not granted (refused)",
        );
        let plugin_shadow = counter("plugin_shadow", "Shadow plugin verdicts beside the live plugin's, by agreement");
        let tenant_messages = counter("tenant_messages", "Messages stamped with a tenant id, by tenant");
        let outbox_duplicate_suppressed = counter(
            "outbox_duplicate_suppressed",
            "Outbox records already pending, not stored twice (OutboxDuplicateSuppressed)",
        );
        let outbox_backpressure =
            counter("outbox_backpressure", "Times a route paused receiving because an outbox partition was full");
        let send_unavailable =
            counter("send_unavailable", "Sends that found the target unavailable (an outage: no replay is spent)");
        let reloads = counter("reloads", "SIGHUP reloads of plugins (and config with --watch), by outcome");
        let binding_available = GaugeFamily::default();
        registry.register(
            "binding_available",
            "Whether a binding's target takes messages (1) or is in an outage (0)",
            binding_available.clone(),
        );
        let outbox_depth = GaugeFamily::default();
        registry.register("outbox_depth", "Pending outbox records", outbox_depth.clone());
        let outbox_oldest_age = FloatGaugeFamily::default();
        registry.register(
            "outbox_oldest_age_seconds",
            "Age of the oldest pending outbox record",
            outbox_oldest_age.clone(),
        );
        let outbox_leases_held = GaugeFamily::default();
        registry.register(
            "outbox_leases_held",
            "Outbox partitions whose lease this instance holds",
            outbox_leases_held.clone(),
        );
        let in_flight = GaugeFamily::<RouteLabels>::default();
        registry.register("messages_in_flight", "Messages being handled now", in_flight.clone());
        let route_running = GaugeFamily::<RouteLabels>::default();
        registry.register("route_running", "Whether a route is running (1/0)", route_running.clone());
        let route_paused = GaugeFamily::<RouteLabels>::default();
        registry.register(
            "route_paused",
            "Whether a route is paused by an operator (1/0): it takes no new message",
            route_paused.clone(),
        );
        let delivery_latency: HistogramFamily<RouteLabels> = Family::new_with_constructor(seconds_histogram);
        registry.register(
            "delivery_latency_seconds",
            "From arrival in the route to settlement at the source",
            delivery_latency.clone(),
        );
        let age_at_egress: HistogramFamily<BindingLabels> = Family::new_with_constructor(seconds_histogram);
        registry.register(
            "message_age_at_egress_seconds",
            "Age of a message (since its creation time) when a target accepted it",
            age_at_egress.clone(),
        );
        let plugin_call_seconds: HistogramFamily = Family::new_with_constructor(call_histogram);
        registry.register("plugin_call_seconds", "Time a plugin call took", plugin_call_seconds.clone());
        let store_op_seconds: HistogramFamily = Family::new_with_constructor(store_histogram);
        registry.register("store_op_seconds", "Time a store operation took", store_op_seconds.clone());
        let route_last_progress = FloatGaugeFamily::<RouteLabels>::default();
        registry.register(
            "route_last_progress_seconds",
            "When a route last settled a delivery or sent an outbox record (Unix time)",
            route_last_progress.clone(),
        );
        let instance_info = GaugeFamily::default();
        registry.register(
            "instance_info",
            "This process's instance id and ferry version (always 1)",
            instance_info.clone(),
        );
        let build_info = GaugeFamily::default();
        registry.register("build_info", "This build's version and git commit (always 1)", build_info.clone());
        let stalled = Gauge::default();
        registry.register(
            "stalled",
            "1 while a store operation or the runtime is stuck past admin.stall_secs",
            stalled.clone(),
        );
        let taps_open = Gauge::default();
        registry.register("taps_open", "Taps open on routes (ferry tap)", taps_open.clone());
        let connected = GaugeFamily::default();
        registry.register("transport_connected", "Whether a transport client is connected (1/0)", connected.clone());
        let mut declared = HashMap::new();
        for d in declarations() {
            let family = match d.kind {
                DeclaredKind::Counter => {
                    let f = CounterFamily::default();
                    registry.register(d.name, d.help, f.clone());
                    DeclaredFamily::Counter(f)
                }
                DeclaredKind::Gauge => {
                    let f = GaugeFamily::default();
                    registry.register(d.name, d.help, f.clone());
                    DeclaredFamily::Gauge(f)
                }
            };
            declared.insert(d.name, family);
        }
        Self {
            declared: Arc::new(declared),
            described: Arc::new(registry.described),
            registry: Arc::new(registry.registry),
            received,
            sent,
            acked,
            retried,
            dead_lettered,
            fanout_skipped,
            fanout_resent,
            dropped,
            expired,
            in_flight,
            route_running,
            route_paused,
            plugin_call_seconds,
            outbox_duplicate_suppressed,
            outbox_backpressure,
            outbox_depth,
            binding_available,
            send_unavailable,
            outbox_oldest_age,
            outbox_leases_held,
            reloads,
            ingress_rejected,
            amqp_header_dropped,
            wire_format_read,
            connections,
            connected,
            delivery_latency,
            age_at_egress,
            plugin_calls,
            plugin_reserved_refused,
            plugin_network_refused,
            plugin_shadow,
            tenant_messages,
            store_op_seconds,
            stalled,
            instance_info,
            build_info,
            taps: crate::tap::Taps::counted(taps_open),
            route_last_progress,
        }
    }

    /// The counter family `d` declares. One that was never submitted (or
    /// is a gauge) is a family of its own, counted but not exported, and
    /// said once in the log: a mistake in a crate costs a metric, never a
    /// message.
    pub fn counter_family(&self, d: &Declared) -> CounterFamily {
        match self.declared.get(d.name) {
            Some(DeclaredFamily::Counter(f)) => f.clone(),
            _ => {
                tracing::warn!(metric = d.name, "a counter family that was not declared as one is not exported");
                CounterFamily::default()
            }
        }
    }

    /// The gauge family `d` declares (see [`Metrics::counter_family`]).
    pub fn gauge_family(&self, d: &Declared) -> GaugeFamily {
        match self.declared.get(d.name) {
            Some(DeclaredFamily::Gauge(f)) => f.clone(),
            _ => {
                tracing::warn!(metric = d.name, "a gauge family that was not declared as one is not exported");
                GaugeFamily::default()
            }
        }
    }

    /// Every metric registered, in order of registration.
    pub fn described(&self) -> &[Described] {
        &self.described
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Current value of a counter (for tests and the admin API).
    pub fn count(family: &CounterFamily, pairs: &[(&str, &str)]) -> u64 {
        family.get_or_create(&labels(pairs)).get()
    }

    /// Current value of a gauge.
    pub fn gauge(family: &GaugeFamily, pairs: &[(&str, &str)]) -> i64 {
        family.get_or_create(&labels(pairs)).get()
    }

    /// Increments a counter.
    pub fn inc(family: &CounterFamily, pairs: &[(&str, &str)]) {
        family.get_or_create(&labels(pairs)).inc();
    }

    /// Adds `n` to a counter.
    pub fn add(family: &CounterFamily, pairs: &[(&str, &str)], n: u64) {
        family.get_or_create(&labels(pairs)).inc_by(n);
    }
}

/// The label names of the metrics core registers itself, by registered
/// name (without the `ferry_` prefix); a transport's declared families
/// carry their own ([`label_names`] answers for both): what the book's
/// metrics reference lists. A unit test
/// keeps it to the registry's metrics, and the black-box metrics test
/// checks that a running daemon's samples use no other labels
/// ([`undocumented_labels`]).
pub const LABELS: &[(&str, &[&str])] = &[
    ("messages_received", &["route"]),
    ("messages_sent", &["route", "binding"]),
    ("messages_acked", &["route"]),
    ("messages_retried", &["route", "reason"]),
    ("messages_dead_lettered", &["route", "reason"]),
    ("messages_dropped", &["route", "reason"]),
    ("messages_expired", &["route"]),
    ("messages_in_flight", &["route"]),
    ("route_running", &["route"]),
    ("route_paused", &["route"]),
    ("delivery_latency_seconds", &["route"]),
    ("message_age_at_egress_seconds", &["route", "binding"]),
    ("route_last_progress_seconds", &["route"]),
    ("fanout_skipped", &["route"]),
    ("fanout_resent", &["route"]),
    ("amqp_header_dropped", &["kind", "name", "direction"]),
    ("ingress_rejected", &["kind", "receiver", "reason"]),
    ("wire_format_read", &["receiver", "outcome"]),
    ("transport_connected", &["kind", "role", "name"]),
    ("transport_connections", &["kind", "role", "name"]),
    ("plugin_calls", &["plugin", "route", "outcome"]),
    ("plugin_call_seconds", &["plugin", "route"]),
    ("plugin_reserved_header_refused", &["plugin", "route"]),
    ("plugin_network_refused", &["plugin", "part", "via"]),
    ("plugin_shadow", &["route", "plugin", "shadow", "agreement"]),
    ("tenant_messages", &["route", "tenant"]),
    ("binding_available", &["route", "binding"]),
    ("send_unavailable", &["route", "binding"]),
    ("outbox_depth", &["route", "binding"]),
    ("outbox_oldest_age_seconds", &["route", "binding"]),
    ("outbox_leases_held", &["route"]),
    ("outbox_duplicate_suppressed", &["route"]),
    ("outbox_backpressure", &["route"]),
    ("store_op_seconds", &["op"]),
    ("reloads", &["outcome"]),
    ("stalled", &[]),
    ("taps_open", &[]),
    ("instance_info", &["instance", "version"]),
    ("build_info", &["version", "commit"]),
];

/// The label names of metric `name` (registered name), from [`LABELS`] or
/// the declaration linked in; `None` for a metric neither knows.
pub fn label_names(name: &str) -> Option<Vec<String>> {
    let listed = LABELS.iter().find(|(n, _)| *n == name).map(|(_, l)| *l);
    let labels = listed.or_else(|| declarations().into_iter().find(|d| d.name == name).map(|d| d.labels))?;
    Some(labels.iter().map(|l| (*l).to_owned()).collect())
}

/// The book's metrics reference (`docs/src/reference/metrics.md`): every
/// metric the registry has, with its type and help text as `/metrics`
/// serves them, and its labels from [`LABELS`].
pub fn reference_markdown() -> String {
    use std::fmt::Write as _;
    let mut described = Metrics::new().described().to_vec();
    described.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::from(
        "# Metrics\n\n\
         <!-- Generated by `ferry reference --dir docs/src/reference` from the metrics registry; do not edit. -->\n\n\
         Every series `GET /metrics` serves, from the registry the daemon uses: its name as scraped\n\
         (a counter's samples end in `_total`; a histogram's in `_bucket`, `_sum` and `_count`), its\n\
         type, its labels and its help text. [Metrics](../operating/metrics.md) says more about what\n\
         each one counts.\n\n\
         | metric | type | labels | help |\n| --- | --- | --- | --- |\n",
    );
    for d in &described {
        let labels = label_names(&d.name).unwrap_or_default();
        let scraped = if d.kind == "counter" { format!("ferry_{}_total", d.name) } else { format!("ferry_{}", d.name) };
        let labels = if labels.is_empty() { "—".to_owned() } else { labels.join(", ") };
        let _ = writeln!(out, "| `{scraped}` | {} | {labels} | {} |", d.kind, d.help.replace('|', "\\|"));
    }
    out
}

/// Sample lines of a `/metrics` text whose labels [`label_names`] does not
/// list for their metric (a histogram's `le` aside), or whose metric it
/// does not know: each as `metric: label`.
pub fn undocumented_labels(text: &str) -> Vec<String> {
    undocumented_labels_by(text, label_names)
}

/// [`undocumented_labels`] against another catalogue (a process that does
/// not link every transport reads the book's reference page instead).
pub fn undocumented_labels_by(text: &str, known: impl Fn(&str) -> Option<Vec<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("ferry_")) {
        let (series, labels) = match line.split_once('{') {
            Some((series, rest)) => (series, rest.split_once('}').map_or("", |(l, _)| l)),
            None => (line.split_once(' ').map_or(line, |(s, _)| s), ""),
        };
        let base = series.strip_prefix("ferry_").unwrap_or(series);
        let allowed = [base, base.trim_end_matches("_total"), base.trim_end_matches("_bucket")]
            .into_iter()
            .chain([base.trim_end_matches("_sum"), base.trim_end_matches("_count"), base.trim_end_matches("_created")])
            .find_map(&known);
        let Some(allowed) = allowed else {
            found.push(format!("{series}: not in the catalogue"));
            continue;
        };
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let label = pair.split_once('=').map_or(pair, |(k, _)| k);
            if label != "le" && !allowed.iter().any(|a| a == label) {
                found.push(format!("{series}: {label}"));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::declare_metric!(TEST_DROPPED = Declared::counter("test_only_dropped", &["receiver"], "A test's own family"));

    #[test]
    fn a_declared_family_is_registered_counted_and_catalogued() {
        let m = Metrics::new();
        Metrics::inc(&m.counter_family(&TEST_DROPPED), &[("receiver", "in")]);
        Metrics::inc(&m.counter_family(&TEST_DROPPED), &[("receiver", "in")]);
        assert_eq!(Metrics::count(&m.counter_family(&TEST_DROPPED), &[("receiver", "in")]), 2);
        let text = m.render();
        assert!(text.contains("ferry_test_only_dropped_total{receiver=\"in\"} 2"), "{text}");
        assert!(m.described().iter().any(|d| d.name == "test_only_dropped" && d.kind == "counter"));
        assert_eq!(label_names("test_only_dropped"), Some(vec!["receiver".to_owned()]));
        assert!(
            reference_markdown()
                .contains("| `ferry_test_only_dropped_total` | counter | receiver | A test's own family |")
        );
        assert!(undocumented_labels(&text).is_empty(), "{:?}", undocumented_labels(&text));
    }

    #[test]
    fn a_family_never_declared_is_counted_apart_and_not_exported() {
        const STRAY: Declared = Declared::counter("never_submitted", &[], "not submitted");
        let m = Metrics::new();
        Metrics::inc(&m.counter_family(&STRAY), &[]);
        assert!(!m.render().contains("never_submitted"));
        // A counter asked for as a gauge is not the counter either.
        let g = m.gauge_family(&TEST_DROPPED);
        g.get_or_create(&labels(&[("receiver", "in")])).set(7);
        assert!(!m.render().contains("} 7"));
    }

    #[test]
    fn the_label_catalog_names_every_registered_metric_once() {
        let registered: std::collections::BTreeSet<String> =
            Metrics::new().described().iter().map(|d| d.name.clone()).collect();
        let listed: std::collections::BTreeSet<String> = LABELS
            .iter()
            .map(|(n, _)| (*n).to_owned())
            .chain(declarations().iter().map(|d| d.name.to_owned()))
            .collect();
        assert_eq!(LABELS.len() + declarations().len(), listed.len(), "a metric is listed twice");
        assert_eq!(registered, listed, "LABELS and the declarations differ from the registry");
        let page = reference_markdown();
        assert!(page.contains("| `ferry_messages_received_total` | counter | route |"), "{page}");
        assert!(page.contains("| `ferry_store_op_seconds` | histogram | op |"), "{page}");
    }

    #[test]
    fn labels_the_catalog_does_not_list_are_found() {
        let m = Metrics::new();
        Metrics::inc(&m.reloads, &[("outcome", "applied")]);
        Metrics::inc(&m.reloads, &[("outcome", "applied"), ("extra", "x")]);
        m.plugin_call_seconds.get_or_create(&labels(&[("plugin", "p"), ("route", "r")])).observe(0.1);
        let found = undocumented_labels(&m.render());
        assert_eq!(found, ["ferry_reloads_total: extra"]);
    }
}
