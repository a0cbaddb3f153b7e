//! The shared wasmtime engine and the epoch ticker behind call deadlines.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    /// The program that compiles into the cache (see
    /// [`PluginEngine::compile_in_child`]).
    compiler: Option<PathBuf>,
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
        Self { limits, ..self.clone() }
    }

    /// Compiles components that are not in the cache yet in a child
    /// process, `program plugins compile --cache-dir DIR FILE...` (the
    /// `ferry` binary itself), before loading them from the cache.
    ///
    /// Compiling a component takes far more memory than running it:
    /// cranelift's code and working memory added ~36 MiB to the daemon's
    /// resident set for the small filter plugin, and the allocator keeps
    /// much of it. In a child, that memory goes back to the system when the
    /// child exits. Without a cache there is nothing to hand the result
    /// back through, and this does nothing.
    pub fn compile_in_child(mut self, program: PathBuf) -> Self {
        self.compiler = Some(program);
        self
    }

    /// Runs the child compiler over `files` (see
    /// [`PluginEngine::compile_in_child`]). `Ok(false)` when there is no
    /// child to run; an error when it could not run or failed, and the
    /// caller then compiles in this process as it would without one.
    pub fn precompile(&self, files: &[PathBuf]) -> Result<bool, String> {
        let (Some(program), Some(dir)) = (&self.compiler, self.cache.as_ref().map(Cache::directory)) else {
            return Ok(false);
        };
        if files.is_empty() {
            return Ok(false);
        }
        let started = Instant::now();
        let output = Command::new(program)
            .args(["plugins", "compile", "--cache-dir"])
            .arg(dir)
            .args(files)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        // 1: a file was refused; loading it here reports why.
        if !matches!(output.status.code(), Some(0 | 1)) {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().last().unwrap_or_default();
            return Err(format!("{} exited with {}: {last}", program.display(), output.status));
        }
        // One line per file: `FILE: compiled`, `FILE: cached` or `FILE: refused: …`.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let compiled = stdout.lines().filter(|l| l.ends_with(": compiled")).count();
        tracing::info!(
            plugins = files.len(),
            compiled,
            ms = started.elapsed().as_millis() as u64,
            "plugins compiled in a child process"
        );
        Ok(true)
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
        // `FERRY_WASM_PERFMAP=1`: compiled plugin code is named in
        // /tmp/perf-PID.map, so `perf report` shows the functions of a
        // component instead of `[unknown]` (the book, Benchmarks).
        if std::env::var_os("FERRY_WASM_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
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
        Ok(Self { engine, limits, kv: KvStore::default(), cache, compiler: None })
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
