//! `ferry test FILE…`: runs fixture messages through a config's routes with
//! no broker and compares what comes out with what the file expects.
//!
//! A test file names a config and its cases:
//!
//! ```toml
//! config = "../ferry.toml"          # relative to this file
//!
//! [[case]]
//! name = "a temperature reading is bridged"
//! route = "sensors"                 # optional when the config has one route
//! [case.input]                      # as the route's receiver gets it
//! topic = "sensors/kitchen"
//! payload = '{"c":21.5}'
//! user_properties = { kind = "temp" }
//! [case.expect]
//! outcome = "delivered"             # delivered | dropped | dead_lettered | retried
//! [case.expect.bindings.out]        # as the binding's sender would send it
//! topic = "bridged/sensors/kitchen"
//! ```
//!
//! Each case goes through what a running route does: the receiver's
//! ingress mapping (a transport's `fixture::receive`), the route's header
//! rules, expiry check, processors, destination planning, header mappers
//! and the sender's egress mapping (`fixture::send`), all the daemon's own
//! code. Only the brokers are left out: a sender's egress mapping stands for
//! its broker and accepts what it can map. The route runs as `direct_hold`
//! (the outbox changes when a message is sent, not what is sent), dead
//! letters are kept in memory, and a retry is not waited for: the case ends
//! `retried`. Cases run in order through one instance of each route, so a
//! stateful processor sees the earlier cases.
//!
//! Expectations are partial: only what a case writes is compared (a binding
//! not named is not checked; `absent = ["user_properties.secret"]` lists
//! what must not be there), so a case states what it is about.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferry_config::{Config, SenderConfig};
use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::metrics::{Metrics, ReasonLabels};
use ferry_core::ports::{
    Delivery, DeliveryHandle, DeliverySink, OutboundMessage, ProcessError, Processor, Receiver, SendOutcome, Sender,
    SharedProcessor, Verdict,
};
use ferry_core::route::{Binding, Mode, Route, RoutePolicy};
use ferry_core::wire::Admitted;
use ferry_core::{FailureReason, TransportError};
use ferry_envelope::{Envelope, Timestamp};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::wiring::build_processors;

/// How `ferry test` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A line per case and a diff per failing case.
    Text,
    /// One JSON document: every case with what happened and its mismatches.
    Json,
}

/// A test file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    /// The config, relative to the test file.
    config: PathBuf,
    #[serde(rename = "case", default)]
    cases: Vec<CaseSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSpec {
    name: String,
    #[serde(default)]
    route: Option<String>,
    input: toml::Value,
    expect: ExpectSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectSpec {
    #[serde(default)]
    outcome: Option<OutcomeKind>,
    /// The outcome's reason, as metrics name it (`filtered`, `expired`,
    /// `plugin_rejected`, a poison label, …).
    #[serde(default)]
    reason: Option<String>,
    /// Text the outcome's detail contains (a processor's drop reason, …).
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    bindings: BTreeMap<String, BindingExpect>,
}

/// What one binding should have sent: `"absent"` (nothing), one message,
/// or an array of messages in order.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BindingExpect {
    Word(String),
    One(toml::Table),
    Many(Vec<toml::Table>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutcomeKind {
    Delivered,
    Dropped,
    DeadLettered,
    Retried,
}

impl OutcomeKind {
    fn name(self) -> &'static str {
        match self {
            OutcomeKind::Delivered => "delivered",
            OutcomeKind::Dropped => "dropped",
            OutcomeKind::DeadLettered => "dead_lettered",
            OutcomeKind::Retried => "retried",
        }
    }
}

/// How a case ended.
#[derive(Debug, Clone)]
struct Outcome {
    kind: OutcomeKind,
    reason: Option<String>,
    detail: Option<String>,
}

/// Everything one case produced.
#[derive(Debug, Default)]
struct Observed {
    outcome: Option<Outcome>,
    /// Per binding, what its sender would have sent, in order.
    bindings: BTreeMap<String, Vec<Value>>,
    dead_letters: Vec<Value>,
    /// What each processor decided, in order.
    processors: Vec<Value>,
}

/// The result of one case.
struct CaseResult {
    name: String,
    observed: Observed,
    mismatches: Vec<String>,
}

/// The result of one file: its cases, or why it could not run.
struct FileResult {
    file: PathBuf,
    error: Option<String>,
    cases: Vec<CaseResult>,
}

/// `ferry test FILE…`: exit 0 when every case of every file passes, else 1.
pub async fn run(files: &[PathBuf], format: Format) -> ExitCode {
    let mut results = Vec::new();
    for file in files {
        results.push(match run_file(file).await {
            Ok(cases) => FileResult { file: file.clone(), error: None, cases },
            Err(e) => FileResult { file: file.clone(), error: Some(e), cases: Vec::new() },
        });
    }
    let failed = results.iter().filter(|f| f.error.is_some()).count()
        + results.iter().flat_map(|f| &f.cases).filter(|c| !c.mismatches.is_empty()).count();
    match format {
        Format::Text => print_text(&results),
        Format::Json => println!("{}", serde_json::to_string_pretty(&json_report(&results)).unwrap_or_default()),
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn print_text(results: &[FileResult]) {
    let (mut passed, mut failed) = (0, 0);
    for f in results {
        println!("{}", f.file.display());
        if let Some(e) = &f.error {
            failed += 1;
            println!("  ERROR {e}");
            continue;
        }
        for c in &f.cases {
            if c.mismatches.is_empty() {
                passed += 1;
                println!("  ok    {}", c.name);
            } else {
                failed += 1;
                println!("  FAIL  {}", c.name);
                for m in &c.mismatches {
                    println!("        {m}");
                }
                println!("        what happened: {}", describe(&c.observed));
            }
        }
    }
    println!("{} cases: {passed} passed, {failed} failed", passed + failed);
}

/// One line on what a case did, for a failing case's report.
fn describe(o: &Observed) -> String {
    let mut text = match &o.outcome {
        Some(outcome) => outcome_text(outcome),
        None => "nothing".into(),
    };
    for (binding, sent) in &o.bindings {
        for message in sent {
            text.push_str(&format!("; {binding} sent {message}"));
        }
    }
    text
}

fn outcome_text(o: &Outcome) -> String {
    let mut text = o.kind.name().to_owned();
    if let Some(r) = &o.reason {
        text.push_str(&format!(" ({r})"));
    }
    if let Some(d) = &o.detail {
        text.push_str(&format!(": {d}"));
    }
    text
}

fn json_report(results: &[FileResult]) -> Value {
    let files: Vec<Value> = results
        .iter()
        .map(|f| {
            let cases: Vec<Value> = f
                .cases
                .iter()
                .map(|c| {
                    let o = &c.observed;
                    json!({
                        "name": c.name,
                        "passed": c.mismatches.is_empty(),
                        "mismatches": c.mismatches,
                        "outcome": o.outcome.as_ref().map(|o| json!({
                            "kind": o.kind.name(), "reason": o.reason, "detail": o.detail,
                        })),
                        "bindings": o.bindings,
                        "dead_letters": o.dead_letters,
                        "processors": o.processors,
                    })
                })
                .collect();
            json!({ "file": f.file.display().to_string(), "error": f.error, "cases": cases })
        })
        .collect();
    let passed = results.iter().flat_map(|f| &f.cases).filter(|c| c.mismatches.is_empty()).count();
    let failed = results.iter().filter(|f| f.error.is_some()).count()
        + results.iter().flat_map(|f| &f.cases).filter(|c| !c.mismatches.is_empty()).count();
    json!({ "files": files, "passed": passed, "failed": failed })
}

/// Runs one file's cases; `Err` when the file or its config cannot be used.
async fn run_file(file: &Path) -> Result<Vec<CaseResult>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
    let spec: FileSpec = toml::from_str(&text).map_err(|e| format!("not a test file: {e}"))?;
    if spec.cases.is_empty() {
        return Err("no [[case]] in the file".into());
    }
    let config_path = file.parent().unwrap_or(Path::new(".")).join(&spec.config);
    let config = ferry_config::load(&config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let metrics = Metrics::new();
    let config_for_build = config.clone();
    let metrics_for_build = metrics.clone();
    // Compiling components blocks: kept off the async workers.
    let processors = tokio::task::spawn_blocking(move || build_processors(&config_for_build, &metrics_for_build))
        .await
        .map_err(|e| format!("building the processors failed: {e}"))?
        .map_err(|e| format!("{}: {e}", config_path.display()))?;
    let rig = Rig::new(&config, processors, &metrics);
    let mut results = Vec::new();
    for case in spec.cases {
        results.push(rig.run_case(&config, case).await);
    }
    Ok(results)
}

/// The routes of a config, assembled for fixtures.
struct Rig {
    routes: Vec<Arc<Route>>,
    metrics: Metrics,
    sent: Arc<Mutex<Vec<(String, Value)>>>,
    dead: Arc<Mutex<Vec<DeadLetter>>>,
    steps: Arc<Mutex<Vec<Value>>>,
}

impl Rig {
    fn new(config: &Config, processors: crate::wiring::Processors, metrics: &Metrics) -> Self {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let dead = Arc::new(Mutex::new(Vec::new()));
        let steps = Arc::new(Mutex::new(Vec::new()));
        let mut routes = Vec::new();
        for ((route, chain), mappers) in config.routes.iter().zip(processors.chains).zip(processors.mappers) {
            let chain: Vec<SharedProcessor> = chain
                .into_iter()
                .map(|inner| Arc::new(Recorded { inner, steps: steps.clone() }) as SharedProcessor)
                .collect();
            let bindings = route
                .bindings
                .iter()
                .zip(mappers)
                .filter_map(|(b, header_mapper)| {
                    let sender = config.senders.get(&b.sender)?.clone();
                    Some(Binding {
                        id: b.id().to_owned(),
                        sender: Arc::new(Dry { binding: b.id().to_owned(), config: sender, sent: sent.clone() }),
                        address: b.address.clone(),
                        header_mapper,
                        meters: Default::default(),
                        availability: Default::default(),
                    })
                })
                .collect();
            routes.push(Arc::new(Route {
                id: route.id.clone(),
                source_id: route.receiver.clone(),
                receiver: Arc::new(Idle),
                processors: chain.into(),
                bindings,
                policy: RoutePolicy::from_config(route),
                dlq: Arc::new(Dead(dead.clone())),
                mode: Mode::DirectHold,
                metrics: metrics.clone(),
                clock: ferry_core::clock::Clock::System,
                meters: Default::default(),
                memory: Default::default(),
                gate: Default::default(),
            }));
        }
        Self { routes, metrics: metrics.clone(), sent, dead, steps }
    }

    async fn run_case(&self, config: &Config, case: CaseSpec) -> CaseResult {
        let name = case.name.clone();
        match self.observe(config, &case).await {
            Ok(observed) => {
                let mismatches = compare_case(&case.expect, &observed);
                CaseResult { name, observed, mismatches }
            }
            Err(e) => CaseResult { name, observed: Observed::default(), mismatches: vec![e] },
        }
    }

    async fn observe(&self, config: &Config, case: &CaseSpec) -> Result<Observed, String> {
        let index = match &case.route {
            Some(id) => config.routes.iter().position(|r| r.id == *id).ok_or_else(|| format!("no route {id:?}"))?,
            None if config.routes.len() == 1 => 0,
            None => return Err("the config has several routes: name one with route = \"…\"".into()),
        };
        let route_config = &config.routes[index];
        let receiver = config
            .receivers
            .get(&route_config.receiver)
            .ok_or_else(|| format!("no receiver {:?}", route_config.receiver))?;
        let admitted = crate::transports::fixture_receive(receiver, case.input.clone(), Timestamp::now())
            .map_err(|e| format!("input: {e}"))?;
        let envelope = match admitted {
            Admitted::Envelope(e) => e,
            Admitted::Refused { reason, detail } => {
                let outcome = Outcome { kind: OutcomeKind::Dropped, reason: Some(reason), detail: Some(detail) };
                return Ok(Observed { outcome: Some(outcome), ..Default::default() });
            }
        };
        let route = &self.routes[index];
        let drops_before = self.drop_counts(&route.id);
        let settled = Arc::new(Mutex::new(None));
        let handle = Handle { settled: settled.clone() };
        // Already cancelled: a retry ends the case (released) instead of
        // waiting out its backoff.
        let stop = CancellationToken::new();
        stop.cancel();
        route.handle(Delivery::new(envelope, Box::new(handle)), &stop).await;

        let mut observed = Observed::default();
        for (binding, view) in take(&self.sent) {
            observed.bindings.entry(binding).or_default().push(view);
        }
        for b in &route.bindings {
            observed.bindings.entry(b.id.clone()).or_default();
        }
        observed.processors = take(&self.steps);
        let dead = take(&self.dead);
        observed.dead_letters = dead
            .iter()
            .map(|d| json!({ "binding": d.binding, "reason": d.reason.as_str(), "detail": d.detail }))
            .collect();
        let settled = settled.lock().map(|mut s| s.take()).unwrap_or(None);
        let dropped_by = self
            .drop_counts(&route.id)
            .into_iter()
            .zip(drops_before)
            .find(|((_, after), (_, before))| after > before)
            .map(|((reason, _), _)| reason);
        let processor_drop = observed
            .processors
            .iter()
            .find_map(|s| Some(format!("{}: {}", s.get("processor")?.as_str()?, s.get("drop")?.as_str()?)));
        observed.outcome = Some(if let Some(d) = dead.first() {
            Outcome {
                kind: OutcomeKind::DeadLettered,
                reason: Some(d.reason.as_str().to_owned()),
                detail: Some(d.detail.clone()),
            }
        } else if let Some(Settled::Release(reason)) = &settled {
            Outcome { kind: OutcomeKind::Retried, reason: None, detail: Some(reason.clone()) }
        } else if observed.bindings.values().any(|v| !v.is_empty()) {
            Outcome { kind: OutcomeKind::Delivered, reason: None, detail: None }
        } else {
            let detail = match &settled {
                Some(Settled::Reject(r)) => Some(r.clone()),
                _ => processor_drop,
            };
            Outcome { kind: OutcomeKind::Dropped, reason: dropped_by, detail }
        });
        Ok(observed)
    }

    /// The route's drop counters by reason.
    fn drop_counts(&self, route: &str) -> Vec<(String, u64)> {
        let reasons =
            ["filtered", "no_destination", FailureReason::LoopDetected.as_str(), "expired", "permanent_failure"];
        reasons
            .iter()
            .map(|r| {
                let n = self.metrics.dropped.get_or_create(&ReasonLabels::new(route, r)).get();
                ((*r).to_owned(), n)
            })
            .collect()
    }
}

fn take<T>(list: &Mutex<Vec<T>>) -> Vec<T> {
    list.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default()
}

/// The expectation of one case against what it did.
fn compare_case(expect: &ExpectSpec, observed: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    if expect.outcome.is_none() && expect.reason.is_none() && expect.detail.is_none() && expect.bindings.is_empty() {
        out.push("the case expects nothing: give expect.outcome or expect.bindings".into());
        return out;
    }
    let outcome = observed.outcome.as_ref();
    let got = outcome.map_or_else(|| "nothing".to_owned(), outcome_text);
    if let Some(kind) = expect.outcome
        && outcome.map(|o| o.kind) != Some(kind)
    {
        out.push(format!("outcome: expected {}, got {got}", kind.name()));
    }
    if let Some(reason) = &expect.reason
        && outcome.and_then(|o| o.reason.as_deref()) != Some(reason.as_str())
    {
        out.push(format!("reason: expected {reason:?}, got {got}"));
    }
    if let Some(detail) = &expect.detail
        && !outcome.and_then(|o| o.detail.as_deref()).is_some_and(|d| d.contains(detail.as_str()))
    {
        out.push(format!("detail: expected it to contain {detail:?}, got {got}"));
    }
    for (binding, want) in &expect.bindings {
        let Some(sent) = observed.bindings.get(binding) else {
            let known: Vec<&str> = observed.bindings.keys().map(String::as_str).collect();
            out.push(format!("bindings.{binding}: the route has no such binding (it has {})", known.join(", ")));
            continue;
        };
        let wanted: Vec<&toml::Table> = match want {
            BindingExpect::Word(w) if w == "absent" => Vec::new(),
            BindingExpect::Word(w) => {
                out.push(format!("bindings.{binding}: {w:?} is not an expectation (\"absent\", a table or an array)"));
                continue;
            }
            BindingExpect::One(t) => vec![t],
            BindingExpect::Many(ts) => ts.iter().collect(),
        };
        if wanted.len() != sent.len() {
            out.push(format!("bindings.{binding}: expected {} message(s), got {}", wanted.len(), sent.len()));
        }
        for (i, (want, got)) in wanted.iter().zip(sent).enumerate() {
            let path =
                if wanted.len() == 1 { format!("bindings.{binding}") } else { format!("bindings.{binding}[{i}]") };
            compare_message(&path, want, got, &mut out);
        }
    }
    out
}

/// One expected outbound message against the one sent: every key the
/// expectation writes must match (tables partially); `payload_json`
/// compares the payload as JSON; `absent` lists paths that must not exist.
fn compare_message(path: &str, want: &toml::Table, got: &Value, out: &mut Vec<String>) {
    for (key, value) in want {
        match key.as_str() {
            "absent" => {
                let Some(paths) = value.as_array() else {
                    out.push(format!("{path}.absent: give an array of paths"));
                    continue;
                };
                for p in paths.iter().filter_map(toml::Value::as_str) {
                    if let Some(found) = ferry_core::wire::lookup(got, p) {
                        out.push(format!("{path}.{p}: expected absent, got {found}"));
                    }
                }
            }
            "payload_json" => {
                let want = toml_to_json(value);
                match got.get("payload").and_then(Value::as_str).map(serde_json::from_str::<Value>) {
                    Some(Ok(actual)) if json_equal(&want, &actual) => {}
                    Some(Ok(actual)) => out.push(format!("{path}.payload_json: expected {want}, got {actual}")),
                    Some(Err(e)) => out.push(format!("{path}.payload_json: the payload is not JSON ({e})")),
                    None => out.push(format!("{path}.payload_json: the payload is not text")),
                }
            }
            _ => compare_value(&format!("{path}.{key}"), &toml_to_json(value), got.get(key), out),
        }
    }
}

fn compare_value(path: &str, want: &Value, got: Option<&Value>, out: &mut Vec<String>) {
    let Some(got) = got else {
        out.push(format!("{path}: expected {want}, got nothing"));
        return;
    };
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                compare_value(&format!("{path}.{k}"), v, g.get(k), out);
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            if w.len() != g.len() {
                out.push(format!("{path}: expected {want}, got {got}"));
                return;
            }
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                compare_value(&format!("{path}[{i}]"), w, Some(g), out);
            }
        }
        // A typed value (an SQS attribute) compared by its value alone.
        (w, Value::Object(g)) if !w.is_object() && g.contains_key("value") => {
            compare_value(path, w, g.get("value"), out);
        }
        (w, g) if json_equal(w, g) => {}
        _ => out.push(format!("{path}: expected {want}, got {got}")),
    }
}

/// Equality with numbers compared by value (TOML's 3 and JSON's 3.0).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn toml_to_json(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(s) => json!(s),
        toml::Value::Integer(n) => json!(n),
        toml::Value::Float(f) => json!(f),
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => json!(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(t.iter().map(|(k, v)| (k.clone(), toml_to_json(v))).collect()),
    }
}

/// A receiver that never receives: fixtures are handed to the route.
struct Idle;

#[async_trait]
impl Receiver for Idle {
    async fn run(&self, _sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        shutdown.cancelled().await;
        Ok(())
    }
}

/// How the route settled the fixture with its source.
#[derive(Debug)]
enum Settled {
    Ack,
    Reject(String),
    Release(String),
}

struct Handle {
    settled: Arc<Mutex<Option<Settled>>>,
}

impl Handle {
    fn record(&self, s: Settled) {
        if let Ok(mut slot) = self.settled.lock() {
            *slot = Some(s);
        }
    }
}

#[async_trait]
impl DeliveryHandle for Handle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.record(Settled::Ack);
        Ok(())
    }

    async fn release(self: Box<Self>, _after: Duration, reason: &str) -> Result<(), TransportError> {
        self.record(Settled::Release(reason.to_owned()));
        Ok(())
    }

    async fn reject(self: Box<Self>, reason: &str) -> Result<(), TransportError> {
        self.record(Settled::Reject(reason.to_owned()));
        Ok(())
    }
}

/// Dead letters kept for the case's report.
struct Dead(Arc<Mutex<Vec<DeadLetter>>>);

#[async_trait]
impl DeadLetterStore for Dead {
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.push(entry);
        Ok(())
    }
}

/// A binding's sender without a broker: the transport's egress mapping,
/// whose errors are the send's errors, and the mapped message recorded.
struct Dry {
    binding: String,
    config: SenderConfig,
    sent: Arc<Mutex<Vec<(String, Value)>>>,
}

#[async_trait]
impl Sender for Dry {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let view = crate::transports::fixture_send(&self.config, &msg, Timestamp::now())?;
        if let Ok(mut sent) = self.sent.lock() {
            sent.push((self.binding.clone(), Value::Object(view)));
        }
        Ok(())
    }
}

/// A processor whose decisions are written down for the report.
struct Recorded {
    inner: SharedProcessor,
    steps: Arc<Mutex<Vec<Value>>>,
}

#[async_trait]
impl Processor for Recorded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        let (envelope, result) = self.inner.process(envelope).await;
        let step = match &result {
            Ok(Verdict::Pass) => json!({ "processor": self.name(), "pass": true }),
            Ok(Verdict::Drop(reason)) => json!({ "processor": self.name(), "drop": reason }),
            Ok(Verdict::Route(to)) => json!({ "processor": self.name(), "route": to }),
            Err(ProcessError::Retry { reason, .. }) => json!({ "processor": self.name(), "retry": reason }),
            Err(ProcessError::Reject(f)) => {
                json!({ "processor": self.name(), "reject": f.reason.as_str(), "detail": f.detail })
            }
        };
        if let Ok(mut steps) = self.steps.lock() {
            steps.push(step);
        }
        (envelope, result)
    }

    fn settles(&self) -> bool {
        self.inner.settles()
    }

    async fn settled(&self, envelope: &Envelope, outcome: &SendOutcome) {
        self.inner.settled(envelope, outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_partial_typed_and_name_each_mismatch() {
        let got = json!({
            "topic": "bridged/a",
            "user_properties": { "kind": "temp", "extra": "x" },
            "message_attributes": { "n": { "type": "Number", "value": "3" } },
            "payload": "{\"c\": 21.5}",
        });
        let want: toml::Table = toml::from_str(
            "topic = 'bridged/a'\nuser_properties = { kind = 'temp' }\nmessage_attributes = { n = '3' }\n\
             payload_json = { c = 21.5 }\nabsent = ['user_properties.secret']",
        )
        .expect("toml");
        let mut out = Vec::new();
        compare_message("b", &want, &got, &mut out);
        assert!(out.is_empty(), "{out:?}");

        let want: toml::Table = toml::from_str(
            "topic = 'bridged/b'\nuser_properties = { kind = 'hum' }\npayload_json = { c = 1 }\nabsent = ['user_properties.extra']",
        )
        .expect("toml");
        let mut out = Vec::new();
        compare_message("b", &want, &got, &mut out);
        assert_eq!(out.len(), 4, "{out:?}");
        assert!(out.iter().any(|m| m.starts_with("b.topic: expected \"bridged/b\"")), "{out:?}");
        assert!(out.iter().any(|m| m.starts_with("b.user_properties.kind:")), "{out:?}");
        assert!(out.iter().any(|m| m.starts_with("b.user_properties.extra: expected absent")), "{out:?}");
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_equal(&json!(3), &json!(3.0)));
        assert!(!json_equal(&json!(3), &json!("3")));
    }
}
