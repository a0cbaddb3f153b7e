//! The shared wasmtime engine and the epoch ticker behind call deadlines.

use std::time::Duration;

use wasmtime::{Config, Engine};

/// How often the epoch advances; deadlines are rounded up to this.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Limits applied to every plugin call and instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// Wall-clock budget of one call.
    pub call_timeout: Duration,
    /// Linear-memory cap of one instance, in bytes.
    pub memory_limit_bytes: usize,
}

impl PluginLimits {
    /// The epoch deadline (in ticks) that covers `call_timeout`.
    pub fn deadline_ticks(&self) -> u64 {
        let ticks = self.call_timeout.as_millis().div_ceil(EPOCH_TICK.as_millis());
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1) + 1
    }
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self { call_timeout: Duration::from_secs(1), memory_limit_bytes: 64 << 20 }
    }
}

/// A wasmtime engine configured for plugins, with a background thread that
/// advances its epoch every [`EPOCH_TICK`] for as long as the engine lives.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    pub limits: PluginLimits,
}

impl PluginEngine {
    pub fn new(limits: PluginLimits) -> wasmtime::Result<Self> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // A deep recursion traps on this stack limit instead of crashing.
        config.max_wasm_stack(1 << 20);
        let engine = Engine::new(&config)?;
        let weak = engine.weak();
        std::thread::Builder::new().name("ferry-epoch".into()).spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })?;
        Ok(Self { engine, limits })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}
