//! A configured plugin as a route processor.
//!
//! Each [`WasmProcessor`] is one plugin with one route's configuration. It
//! keeps a pool of initialised instances and reuses them (never one instance
//! per message). Every call runs on a blocking thread under the epoch
//! deadline and the memory cap; a trap or deadline fails that message and
//! the instance is thrown away, so the next call gets a fresh one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{ProcessError, Processor, Verdict};
use ferry_envelope::Envelope;
use tracing::warn;
use wasmtime::Store;
use wasmtime::component::Resource;

use crate::bindings::{self, HostState, MessageState};
use crate::engine::PluginEngine;
use crate::registry::{LoadedPlugin, PluginError};

/// Longest delay a plugin may ask for in one `retry`.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);
/// Idle instances kept per processor; more are dropped after use.
const MAX_IDLE_INSTANCES: usize = 64;

struct Instance {
    store: Store<HostState>,
    bindings: bindings::Processor,
}

struct Pool {
    plugin: Arc<LoadedPlugin>,
    engine: PluginEngine,
    route: String,
    config_json: String,
    idle: Mutex<Vec<Instance>>,
    metrics: Metrics,
}

/// One plugin configured for one route.
#[derive(Clone)]
pub struct WasmProcessor {
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
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Drop => "drop",
            Outcome::Route => "route",
            Outcome::Retry => "retry",
            Outcome::Reject => "reject",
            Outcome::Trap => "trap",
            Outcome::Deadline => "deadline",
        }
    }
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
        let pool = Pool {
            plugin,
            engine: engine.clone(),
            route: route.to_owned(),
            config_json,
            idle: Mutex::new(Vec::new()),
            metrics,
        };
        let first = pool.instantiate()?;
        pool.give_back(first);
        Ok(Self { pool: Arc::new(pool) })
    }

    /// Instances waiting for work (for tests and diagnostics).
    pub fn idle_instances(&self) -> usize {
        self.pool.idle.lock().map(|i| i.len()).unwrap_or(0)
    }

    /// Runs one call synchronously on the current thread.
    pub fn process_blocking(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        self.pool.call(envelope)
    }
}

#[async_trait]
impl Processor for WasmProcessor {
    fn name(&self) -> &str {
        &self.pool.plugin.name
    }

    async fn process(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        // Headers are cloned, the payload is shared: the copy is cheap and
        // keeps the message if the blocking task itself dies.
        let backup = envelope.clone();
        let pool = self.pool.clone();
        match tokio::task::spawn_blocking(move || pool.call(envelope)).await {
            Ok(result) => result,
            Err(e) => (
                backup,
                Err(ProcessError::Reject(format!("plugin_trap: plugin {} host task failed: {e}", self.name()))),
            ),
        }
    }
}

impl Pool {
    fn instantiate(&self) -> Result<Instance, PluginError> {
        let limits = self.engine.limits;
        let state = HostState::new(&self.plugin.name, &self.route, limits.memory_limit_bytes);
        let mut store = Store::new(self.engine.engine(), state);
        store.limiter(|s| s.limiter());
        store.set_epoch_deadline(limits.deadline_ticks());
        let fail = |detail: String| PluginError::Instantiate {
            plugin: self.plugin.name.clone(),
            route: self.route.clone(),
            detail,
        };
        let bindings = self.plugin.pre.instantiate(&mut store).map_err(|e| fail(format!("{e:#}")))?;
        store.set_epoch_deadline(limits.deadline_ticks());
        match bindings.call_init(&mut store, &self.config_json) {
            Ok(Ok(())) => Ok(Instance { store, bindings }),
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

    fn call(&self, envelope: Envelope) -> (Envelope, Result<Verdict, ProcessError>) {
        let plugin = self.plugin.name.as_str();
        let started = std::time::Instant::now();
        let (envelope, result, outcome) = match self.take() {
            Ok(instance) => self.call_instance(instance, envelope),
            Err(e) => {
                warn!(plugin, route = %self.route, error = %e, "no plugin instance");
                (envelope, Err(ProcessError::Reject(format!("plugin_unavailable: {e}"))), Outcome::Reject)
            }
        };
        Metrics::inc(
            &self.metrics.plugin_calls,
            &[("plugin", plugin), ("route", &self.route), ("outcome", outcome.label())],
        );
        self.metrics
            .plugin_call_seconds
            .get_or_create(&ferry_core::metrics::labels(&[("plugin", plugin), ("route", &self.route)]))
            .observe(started.elapsed().as_secs_f64());
        (envelope, result)
    }

    fn call_instance(
        &self,
        mut instance: Instance,
        envelope: Envelope,
    ) -> (Envelope, Result<Verdict, ProcessError>, Outcome) {
        let plugin = self.plugin.name.as_str();
        let limits = self.engine.limits;
        let backup = envelope.clone();
        let resource = match instance.store.data_mut().table.push(MessageState { envelope, refused_reserved: 0 }) {
            Ok(r) => r,
            Err(e) => {
                return (
                    backup,
                    Err(ProcessError::Retry { after: Duration::from_secs(1), reason: format!("plugin table: {e}") }),
                    Outcome::Retry,
                );
            }
        };
        let borrow: Resource<MessageState> = Resource::new_borrow(resource.rep());
        instance.store.set_epoch_deadline(limits.deadline_ticks());
        let result = instance.bindings.call_process(&mut instance.store, borrow);
        let envelope = match instance.store.data_mut().table.delete(resource) {
            Ok(state) => state.envelope,
            Err(_) => backup,
        };
        match result {
            Ok(Ok(verdict)) => {
                self.give_back(instance);
                match verdict {
                    bindings::Verdict::Pass => (envelope, Ok(Verdict::Pass), Outcome::Pass),
                    bindings::Verdict::Drop(reason) => (envelope, Ok(Verdict::Drop(reason)), Outcome::Drop),
                    bindings::Verdict::Route(addresses) => (envelope, Ok(Verdict::Route(addresses)), Outcome::Route),
                }
            }
            Ok(Err(failure)) => {
                self.give_back(instance);
                match failure {
                    bindings::Failure::Retry(r) => {
                        let after = Duration::from_millis(r.delay_ms).min(MAX_RETRY_DELAY);
                        (
                            envelope,
                            Err(ProcessError::Retry { after, reason: format!("{plugin}: {}", r.reason) }),
                            Outcome::Retry,
                        )
                    }
                    bindings::Failure::Reject(reason) => (
                        envelope,
                        Err(ProcessError::Reject(format!("plugin_rejected: plugin {plugin}: {reason}"))),
                        Outcome::Reject,
                    ),
                }
            }
            Err(e) => {
                // The instance may be in any state after a trap: drop it.
                drop(instance);
                let deadline = is_deadline(&e);
                let detail = describe_trap(&e, limits.call_timeout);
                warn!(plugin, route = %self.route, error = %detail, "plugin call failed; instance replaced");
                let code = if deadline { "plugin_deadline" } else { "plugin_trap" };
                let outcome = if deadline { Outcome::Deadline } else { Outcome::Trap };
                (envelope, Err(ProcessError::Reject(format!("{code}: plugin {plugin}: {detail}"))), outcome)
            }
        }
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
