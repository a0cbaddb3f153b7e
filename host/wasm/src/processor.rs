//! A configured plugin as a route processor or a binding's header mapper.
//!
//! Each [`WasmProcessor`] ([`WasmHeaderMapper`]) is one plugin with one
//! route's (binding's) configuration. It
//! keeps a pool of initialised instances and reuses them (never one instance
//! per message). Every call runs under the epoch deadline and the memory
//! cap; a trap or deadline fails that message and the instance is thrown
//! away, so the next call gets a fresh one.
//!
//! Where a call runs: a plugin that can only compute runs on the async
//! worker that handles the message, since the epoch deadline
//! (`plugins.call_timeout_ms`) bounds how long it can hold that worker, and
//! a hand-off to another thread and back costs more than a header-only call
//! itself. A plugin that can wait (it imports a WASI interface that can,
//! see [`WAITING_IMPORTS`](crate::registry::WAITING_IMPORTS), or it has a
//! `network` or `dir` grant) runs on tokio's blocking pool, as do all calls
//! outside a multi-threaded runtime: WASI's blocking calls cannot run on an
//! async worker. A panic in the host while calling fails that message as
//! `plugin_trap` either way; on the worker it also sends the plugin's later
//! calls to the blocking pool.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{HeaderMapper, ProcessError, Processor, SendOutcome, Verdict};
use ferry_core::{Failure, FailureReason};
use ferry_envelope::{Envelope, names};
use tracing::warn;
use wasmtime::Store;
use wasmtime::component::Resource;

use crate::bindings::{self, HostState, MessageState};
use crate::engine::PluginEngine;
use crate::grants::Grants;
use crate::registry::{LoadedPlugin, PluginError, PluginWorld, Pre};

/// Longest delay a plugin may ask for in one `retry`.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);
/// Idle instances kept per processor; more are dropped after use.
const MAX_IDLE_INSTANCES: usize = 64;

enum Guest {
    Processor(bindings::Processor),
    Settling(bindings::settling::SettlingProcessor),
    Mapper(bindings::mapper::HeaderMapper),
}

struct Instance {
    store: Store<HostState>,
    guest: Guest,
}

struct Pool {
    plugin: Arc<LoadedPlugin>,
    engine: PluginEngine,
    route: String,
    config_json: String,
    grants: Grants,
    idle: Mutex<Vec<Instance>>,
    metrics: Metrics,
    /// Whether calls must run on the blocking pool (see the module docs).
    may_wait: std::sync::atomic::AtomicBool,
    /// Metric handles: call time, and the call counter per outcome
    /// (resolved on first use).
    call_seconds: ferry_core::metrics::HistogramHandle,
    /// The epoch deadline of one call (`engine.limits`, worked out once).
    deadline_ticks: u64,
    calls: [std::sync::OnceLock<ferry_core::metrics::CounterHandle>; Outcome::COUNT],
}

/// One processor plugin configured for one route.
#[derive(Clone)]
pub struct WasmProcessor {
    pool: Arc<Pool>,
}

/// One header-mapper plugin configured for one binding of a route.
#[derive(Clone)]
pub struct WasmHeaderMapper {
    pool: Arc<Pool>,
}

/// How one call ended, for the metrics label.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Pass,
    Drop,
    Route,
    Retry,
    Reject,
    Trap,
    Deadline,
    Settled,
    Map,
}

impl Outcome {
    const COUNT: usize = 9;

    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Drop => "drop",
            Outcome::Route => "route",
            Outcome::Retry => "retry",
            Outcome::Reject => "reject",
            Outcome::Trap => "trap",
            Outcome::Deadline => "deadline",
            Outcome::Settled => "settled",
            Outcome::Map => "map",
        }
    }
}

/// A call that did not return normally.
enum CallError {
    /// No instance could be made.
    Unavailable(String),
    /// A trap or the deadline; the instance was thrown away.
    Trap { deadline: bool, detail: String },
}

impl WasmProcessor {
    /// Creates the processor and one instance, calling the plugin's `init`
    /// with `config_json`, so that a bad configuration is refused at start.
    pub fn new(
        engine: &PluginEngine,
        plugin: Arc<LoadedPlugin>,
        route: &str,
        config_json: String,
        metrics: Metrics,
    ) -> Result<Self, PluginError> {
        Self::with_grants(engine, plugin, route, config_json, Grants::default(), metrics)
    }

    /// As [`WasmProcessor::new`], with capabilities beyond the default.
    pub fn with_grants(
        engine: &PluginEngine,
        plugin: Arc<LoadedPlugin>,
        route: &str,
        config_json: String,
        grants: Grants,
        metrics: Metrics,
    ) -> Result<Self, PluginError> {
        if !plugin.world.is_processor() {
            return Err(PluginError::Refused(format!(
                "plugin {:?} is a {}, not a processor; use it as a binding's header_mapper",
                plugin.name,
                plugin.world.name()
            )));
        }
        Ok(Self { pool: Pool::start(engine, plugin, route, config_json, grants, metrics)? })
    }

    /// Whether calls made now would run on the calling async worker rather
    /// than on the blocking pool (see the module docs).
    pub fn runs_on_worker(&self) -> bool {
        self.pool.runs_inline()
    }

    /// Instances waiting for work (for tests and diagnostics).
    pub fn idle_instances(&self) -> usize {
        self.pool.idle.lock().map(|i| i.len()).unwrap_or(0)
    }

    /// Runs one call synchronously on the current thread.
    pub fn process_blocking(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        self.pool.process(envelope)
    }

    /// Tells a settling processor how a send attempt ended, synchronously.
    pub fn settled_blocking(&self, envelope: Envelope, outcome: &SendOutcome) {
        self.pool.settled(envelope, outcome);
    }
}

#[async_trait]
impl Processor for WasmProcessor {
    fn name(&self) -> &str {
        &self.pool.plugin.name
    }

    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        // Headers are cloned, the payload is shared: the copy is cheap and
        // keeps the message if the host call itself dies.
        let backup = envelope.clone();
        let pool = self.pool.clone();
        match self.pool.run(move || pool.process(envelope)).await {
            Ok(result) => result,
            Err(e) => (backup, Err(host_failed(self.name(), &e))),
        }
    }

    fn settles(&self) -> bool {
        self.pool.plugin.world == PluginWorld::SettlingProcessor
    }

    async fn settled(&self, envelope: &Envelope, outcome: &SendOutcome) {
        if !self.settles() {
            return;
        }
        let (pool, envelope, outcome) = (self.pool.clone(), envelope.clone(), outcome.clone());
        if let Err(e) = self.pool.run(move || pool.settled(envelope, &outcome)).await {
            warn!(plugin = %self.name(), error = %e, "settled call failed");
        }
    }
}

impl WasmHeaderMapper {
    /// Creates the mapper and one instance, calling its `init`.
    pub fn new(
        engine: &PluginEngine,
        plugin: Arc<LoadedPlugin>,
        route: &str,
        config_json: String,
        metrics: Metrics,
    ) -> Result<Self, PluginError> {
        if plugin.world != PluginWorld::HeaderMapper {
            return Err(PluginError::Refused(format!(
                "plugin {:?} is a {}, not a header-mapper",
                plugin.name,
                plugin.world.name()
            )));
        }
        Ok(Self { pool: Pool::start(engine, plugin, route, config_json, Grants::default(), metrics)? })
    }

    /// Runs one call synchronously on the current thread.
    pub fn map_blocking(
        &self,
        envelope: Envelope,
        binding: &str,
        address: &str,
    ) -> (Envelope, Result<Option<String>, ProcessError>) {
        self.pool.map(envelope, binding, address)
    }
}

#[async_trait]
impl HeaderMapper for WasmHeaderMapper {
    fn name(&self) -> &str {
        &self.pool.plugin.name
    }

    async fn map(
        &self,
        envelope: Envelope,
        binding: &str,
        address: &str,
    ) -> (Envelope, Result<Option<String>, ProcessError>) {
        let backup = envelope.clone();
        let pool = self.pool.clone();
        let (binding, address) = (binding.to_owned(), address.to_owned());
        match self.pool.run(move || pool.map(envelope, &binding, &address)).await {
            Ok(result) => result,
            Err(e) => (backup, Err(host_failed(self.name(), &e))),
        }
    }
}

impl Pool {
    /// Whether calls may run on the async worker itself (see the module
    /// docs): the plugin cannot block in I/O, and the runtime has other
    /// workers to keep the rest going meanwhile.
    fn runs_inline(&self) -> bool {
        !self.may_wait.load(std::sync::atomic::Ordering::Relaxed)
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    }

    /// Runs one call: on this worker when [`Pool::runs_inline`], on the
    /// blocking pool otherwise. A panic in the call is an error, not a
    /// crash of the route's task.
    async fn run<T: Send + 'static>(&self, call: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
        if self.runs_inline() {
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(|p| {
                // A WASI call that must block (the list of waiting imports
                // missed it) panics on an async worker: the plugin's later
                // calls go to the blocking pool.
                self.may_wait.store(true, std::sync::atomic::Ordering::Relaxed);
                warn!(plugin = %self.plugin.name, "a host call panicked on the async worker; this plugin's calls run on the blocking pool from now on");
                panic_text(&p)
            });
        }
        tokio::task::spawn_blocking(call).await.map_err(|e| e.to_string())
    }

    fn start(
        engine: &PluginEngine,
        plugin: Arc<LoadedPlugin>,
        route: &str,
        config_json: String,
        grants: Grants,
        metrics: Metrics,
    ) -> Result<Arc<Self>, PluginError> {
        let may_wait = plugin.may_wait || grants.may_wait();
        let call_seconds = metrics
            .plugin_call_seconds
            .get_or_create(&ferry_core::metrics::labels(&[("plugin", &plugin.name), ("route", route)]))
            .clone();
        let pool = Pool {
            plugin,
            engine: engine.clone(),
            route: route.to_owned(),
            config_json,
            grants,
            idle: Mutex::new(Vec::new()),
            metrics,
            may_wait: std::sync::atomic::AtomicBool::new(may_wait),
            call_seconds,
            deadline_ticks: engine.limits.deadline_ticks(),
            calls: Default::default(),
        };
        let first = pool.instantiate()?;
        pool.give_back(first);
        Ok(Arc::new(pool))
    }

    fn instantiate(&self) -> Result<Instance, PluginError> {
        let limits = self.engine.limits;
        let fail = |detail: String| PluginError::Instantiate {
            plugin: self.plugin.name.clone(),
            route: self.route.clone(),
            detail,
        };
        let kv = self.engine.kv().scope(&self.plugin.name, &self.route);
        let state = HostState::new(&self.plugin.name, &self.route, limits.memory_limit_bytes, kv, &self.grants)
            .map_err(|e| fail(format!("cannot grant what the route asks for: {e:#}")))?;
        let mut store = Store::new(self.engine.engine(), state);
        store.limiter(|s| s.limiter());
        store.set_epoch_deadline(limits.deadline_ticks());
        let guest = match &self.plugin.pre {
            Pre::Processor(pre) => pre.instantiate(&mut store).map(Guest::Processor),
            Pre::Settling(pre) => pre.instantiate(&mut store).map(Guest::Settling),
            Pre::Mapper(pre) => pre.instantiate(&mut store).map(Guest::Mapper),
            Pre::Transport { .. } => Err(wasmtime::Error::msg("a transport component is no processor")),
        }
        .map_err(|e| fail(format!("{e:#}")))?;
        store.set_epoch_deadline(limits.deadline_ticks());
        let init = match &guest {
            Guest::Processor(g) => g.call_init(&mut store, &self.config_json),
            Guest::Settling(g) => g.call_init(&mut store, &self.config_json),
            Guest::Mapper(g) => g.call_init(&mut store, &self.config_json),
        };
        match init {
            Ok(Ok(())) => Ok(Instance { store, guest }),
            Ok(Err(message)) => {
                Err(PluginError::Init { plugin: self.plugin.name.clone(), route: self.route.clone(), message })
            }
            Err(e) => Err(fail(format!("init trapped: {}", describe_trap(&e, limits.call_timeout)))),
        }
    }

    fn take(&self) -> Result<Instance, PluginError> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match idle {
            Some(i) => Ok(i),
            None => self.instantiate(),
        }
    }

    fn give_back(&self, instance: Instance) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_INSTANCES
        {
            idle.push(instance);
        }
    }

    /// Runs `call` on an instance with `envelope` as the message resource,
    /// under the deadline. A trapped instance is thrown away; a healthy one
    /// goes back to the pool. The envelope comes back as the guest left it.
    fn invoke<R>(
        &self,
        envelope: Envelope,
        call: impl FnOnce(&Guest, &mut Store<HostState>, Resource<MessageState>) -> wasmtime::Result<R>,
    ) -> (Envelope, Result<R, CallError>) {
        let mut instance = match self.take() {
            Ok(i) => i,
            Err(e) => {
                warn!(plugin = %self.plugin.name, route = %self.route, error = %e, "no plugin instance");
                return (envelope, Err(CallError::Unavailable(e.to_string())));
            }
        };
        instance.store.data_mut().message = MessageState { envelope, refused_reserved: 0 };
        // Every message handle means the call's one message (see
        // `HostState::message`), so the handle's number does not matter.
        let borrow: Resource<MessageState> = Resource::new_borrow(0);
        instance.store.set_epoch_deadline(self.deadline_ticks);
        let result = call(&instance.guest, &mut instance.store, borrow);
        let state = std::mem::take(&mut instance.store.data_mut().message);
        if state.refused_reserved > 0 {
            self.metrics
                .plugin_reserved_refused
                .get_or_create(&ferry_core::metrics::labels(&[("plugin", &self.plugin.name), ("route", &self.route)]))
                .inc_by(u64::from(state.refused_reserved));
        }
        let envelope = state.envelope;
        match result {
            Ok(r) => {
                self.give_back(instance);
                (envelope, Ok(r))
            }
            Err(e) => {
                // The instance may be in any state after a trap: drop it.
                drop(instance);
                let detail = describe_trap(&e, self.engine.limits.call_timeout);
                warn!(plugin = %self.plugin.name, route = %self.route, error = %detail, "plugin call failed; instance replaced");
                (envelope, Err(CallError::Trap { deadline: is_deadline(&e), detail }))
            }
        }
    }

    fn record(&self, outcome: Outcome, started: std::time::Instant) {
        let calls = self.calls[outcome.index()].get_or_init(|| {
            let labels = [("plugin", self.plugin.name.as_str()), ("route", &self.route), ("outcome", outcome.label())];
            self.metrics.plugin_calls.get_or_create(&ferry_core::metrics::labels(&labels)).clone()
        });
        calls.inc();
        self.call_seconds.observe(started.elapsed().as_secs_f64());
    }

    /// The route-level error and metrics outcome of a call that failed.
    fn call_error(&self, e: CallError) -> (ProcessError, Outcome) {
        let plugin = self.plugin.name.as_str();
        match e {
            CallError::Unavailable(e) => (reject(FailureReason::PluginUnavailable, e.to_string()), Outcome::Reject),
            CallError::Trap { deadline: true, detail } => {
                (reject(FailureReason::PluginDeadline, format!("plugin {plugin}: {detail}")), Outcome::Deadline)
            }
            CallError::Trap { deadline: false, detail } => {
                (reject(FailureReason::PluginTrap, format!("plugin {plugin}: {detail}")), Outcome::Trap)
            }
        }
    }

    fn failure(&self, failure: bindings::Failure) -> (ProcessError, Outcome) {
        let plugin = self.plugin.name.as_str();
        match failure {
            bindings::Failure::Retry(r) => {
                let after = Duration::from_millis(r.delay_ms).min(MAX_RETRY_DELAY);
                (ProcessError::Retry { after, reason: format!("{plugin}: {}", r.reason) }, Outcome::Retry)
            }
            bindings::Failure::Reject(reason) => {
                (reject(FailureReason::PluginRejected, format!("plugin {plugin}: {reason}")), Outcome::Reject)
            }
        }
    }

    /// What the guest returned, or the route-level error (and metrics
    /// outcome) of a failure it reported or a call that did not return.
    fn guest_result<T>(
        &self,
        result: Result<Result<T, bindings::Failure>, CallError>,
    ) -> Result<T, (ProcessError, Outcome)> {
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(failure)) => Err(self.failure(failure)),
            Err(e) => Err(self.call_error(e)),
        }
    }

    fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        let started = std::time::Instant::now();
        let (envelope, result) = self.invoke(envelope, |guest, store, msg| match guest {
            Guest::Processor(g) => g.call_process(store, msg),
            Guest::Settling(g) => g.call_process(store, msg),
            Guest::Mapper(_) => Err(wasmtime::Error::msg("a header mapper has no `process`")),
        });
        let (result, outcome) = match self.guest_result(result) {
            Ok(bindings::Verdict::Pass) => (Ok(Verdict::Pass), Outcome::Pass),
            Ok(bindings::Verdict::Drop(reason)) => (Ok(Verdict::Drop(reason)), Outcome::Drop),
            Ok(bindings::Verdict::Route(addresses)) => (Ok(Verdict::Route(addresses)), Outcome::Route),
            Err((e, outcome)) => (Err(e), outcome),
        };
        self.record(outcome, started);
        if let Ok(Verdict::Pass | Verdict::Route(_)) = &result {
            self.count_tenant(&envelope);
        }
        (envelope, result)
    }

    /// Counts a message this processor stamped with a tenant id.
    fn count_tenant(&self, envelope: &Envelope) {
        if !self.grants.tenant_id {
            return;
        }
        if let Some(tenant) = envelope.headers.get(names::TENANT_ID).and_then(|v| v.as_text()) {
            Metrics::inc(&self.metrics.tenant_messages, &[("route", &self.route), ("tenant", tenant)]);
        }
    }

    fn settled(&self, envelope: Envelope, outcome: &SendOutcome) {
        let started = std::time::Instant::now();
        let outcome = match outcome {
            SendOutcome::Delivered => bindings::SendOutcome::Delivered,
            SendOutcome::Failed(r) => bindings::SendOutcome::Failed(r.clone()),
            SendOutcome::Rejected(r) => bindings::SendOutcome::Rejected(r.clone()),
        };
        let (_, result) = self.invoke(envelope, |guest, store, msg| match guest {
            Guest::Settling(g) => g.call_settled(store, msg, &outcome),
            _ => Ok(()),
        });
        let outcome = match result {
            Ok(()) => Outcome::Settled,
            Err(e) => self.call_error(e).1,
        };
        self.record(outcome, started);
    }

    fn map(
        &self,
        envelope: Envelope,
        binding: &str,
        address: &str,
    ) -> (Envelope, Result<Option<String>, ProcessError>) {
        let started = std::time::Instant::now();
        let (envelope, result) = self.invoke(envelope, |guest, store, msg| match guest {
            Guest::Mapper(g) => g.call_map_headers(store, msg, binding, address),
            _ => Err(wasmtime::Error::msg("a processor has no `map-headers`")),
        });
        let (result, outcome) = match self.guest_result(result) {
            Ok(None) => (Ok(None), Outcome::Map),
            Ok(Some(a)) => (Ok(Some(a)), Outcome::Route),
            Err((e, outcome)) => (Err(e), outcome),
        };
        self.record(outcome, started);
        (envelope, result)
    }
}

fn is_deadline(e: &wasmtime::Error) -> bool {
    matches!(e.downcast_ref::<wasmtime::Trap>(), Some(wasmtime::Trap::Interrupt))
}

fn describe_trap(e: &wasmtime::Error, timeout: Duration) -> String {
    if is_deadline(e) {
        format!("exceeded its {} ms call deadline", timeout.as_millis())
    } else {
        // The first line of the chain is the trap; the backtrace follows.
        format!("{e:#}").lines().next().unwrap_or("trap").to_owned()
    }
}

/// A host call that died (a panic or a lost blocking task).
fn host_failed(plugin: &str, error: &str) -> ProcessError {
    reject(FailureReason::PluginTrap, format!("plugin {plugin} host task failed: {error}"))
}

fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}

/// A refusal for good with its typed reason.
fn reject(reason: FailureReason, detail: String) -> ProcessError {
    ProcessError::Reject(Failure::new(reason, detail))
}
