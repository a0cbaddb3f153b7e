//! The shared wasmtime engine and the epoch ticker behind call deadlines.

use std::path::Path;
use std::time::Duration;

use wasmtime::{Cache, CacheConfig, Config, Engine};

use crate::kv::KvStore;

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
/// advances its epoch every [`EPOCH_TICK`] for as long as the engine lives,
/// and the plugins' key-value store.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    pub limits: PluginLimits,
    kv: KvStore,
    cache: Option<Cache>,
}

impl PluginEngine {
    /// An engine that compiles every component it is given.
    pub fn new(limits: PluginLimits) -> wasmtime::Result<Self> {
        Self::build(limits, None)
    }

    /// An engine that keeps compiled components in `cache_dir`, keyed by a
    /// hash of their bytes and of the engine's settings, so a restart reads
    /// them back instead of compiling again.
    pub fn with_cache(limits: PluginLimits, cache_dir: &Path) -> wasmtime::Result<Self> {
        Self::build(limits, Some(cache_dir))
    }

    /// The same engine (compiled code, key-value store) with other limits.
    pub fn with_limits(&self, limits: PluginLimits) -> Self {
        Self { engine: self.engine.clone(), limits, kv: self.kv.clone(), cache: self.cache.clone() }
    }

    fn build(limits: PluginLimits, cache_dir: Option<&Path>) -> wasmtime::Result<Self> {
        let mut config = Config::new();
        let mut cache = None;
        if let Some(dir) = cache_dir {
            std::fs::create_dir_all(dir)?;
            // wasmtime wants an absolute directory.
            let dir = std::path::absolute(dir)?;
            let mut cache_config = CacheConfig::new();
            cache_config.with_directory(dir);
            let c = Cache::new(cache_config)?;
            config.cache(Some(c.clone()));
            cache = Some(c);
        }
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
        Ok(Self { engine, limits, kv: KvStore::default(), cache })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// How many compiled components were read back from the cache.
    pub fn cache_hits(&self) -> usize {
        self.cache.as_ref().map_or(0, Cache::cache_hits)
    }

    pub fn kv(&self) -> &KvStore {
        &self.kv
    }

    /// Whether two handles share one wasmtime engine (compiled components
    /// of one can be used with the other).
    pub fn same_engine(&self, other: &PluginEngine) -> bool {
        Engine::same(&self.engine, &other.engine)
    }
}
