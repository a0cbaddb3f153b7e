//! Turns a validated [`Config`] into running parts: senders, receivers,
//! plugin processors and routes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferry_config::{Config, DeliveryMode, GrantsConfig, ReceiverConfig, RouteConfig, SenderConfig};
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Receiver, Sender, SharedHeaderMapper, SharedProcessor};
use ferry_core::route::{Binding, Outbox, Route, RoutePolicy};
use ferry_store::{RedbStore, StoreOptions};
use ferry_transport_amqp10::{Amqp10Receiver, Amqp10Sender};
use ferry_transport_amqp091::{Amqp091Receiver, Amqp091Sender};
use ferry_transport_mqtt::{MqttReceiver, MqttSender};
use ferry_transport_sqs::{SqsReceiver, SqsSender};
use ferry_wasm::{
    Grants, LoadedPlugin, PluginEngine, PluginLimits, PluginRegistry, PluginWorld, WasmHeaderMapper, WasmProcessor,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::admin::{Readiness, SharedReadiness};

/// A start-up problem, with the config key it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct StartError {
    pub path: String,
    pub message: String,
}

impl StartError {
    fn new(path: impl Into<String>, message: impl ToString) -> Self {
        Self { path: path.into(), message: message.to_string() }
    }
}

/// Whether any route uses a plugin (a processor or a header mapper).
fn uses_plugins(config: &Config) -> bool {
    config.routes.iter().any(|r| !r.processors.is_empty() || r.bindings.iter().any(|b| b.header_mapper.is_some()))
}

fn plugin_limits(config: &Config) -> PluginLimits {
    PluginLimits {
        call_timeout: Duration::from_millis(config.plugins.call_timeout_ms),
        memory_limit_bytes: usize::try_from(config.plugins.memory_limit_mib << 20).unwrap_or(usize::MAX),
    }
}

/// Where compiled components are cached: `plugins.cache_dir`, by default
/// `<store.path>/plugin-cache`; `None` when turned off with `""`.
pub fn plugin_cache_dir(config: &Config) -> Option<PathBuf> {
    match config.plugins.cache_dir.as_deref() {
        Some("") => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(Path::new(&config.store.path).join("plugin-cache")),
    }
}

/// A plugin engine for `config`, with the compile cache when it can be
/// used (a cache that cannot be set up only costs compile time: warned).
fn new_engine(config: &Config) -> Result<PluginEngine, StartError> {
    let limits = plugin_limits(config);
    if let Some(dir) = plugin_cache_dir(config) {
        match PluginEngine::with_cache(limits, &dir) {
            Ok(engine) => return Ok(engine),
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "cannot use the plugin compile cache; compiling every start")
            }
        }
    }
    PluginEngine::new(limits).map_err(|e| StartError::new("plugins", format!("cannot start the plugin engine: {e}")))
}

/// Loads the plugin directory when some route uses a plugin. Compiling
/// happens here, off the message path; plugins of `previous` whose files
/// did not change are reused as they are.
fn load_plugins(
    config: &Config,
    engine: &PluginEngine,
    previous: Option<&PluginRegistry>,
) -> Result<Option<PluginRegistry>, StartError> {
    if !uses_plugins(config) {
        return Ok(None);
    }
    let registry = PluginRegistry::reload_dir(engine, Path::new(&config.plugins.dir), previous)
        .map_err(|e| StartError::new("plugins.dir", e))?;
    Ok(Some(registry))
}

/// The compiled plugins a route's chain uses, in order.
fn chain_plugins(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
) -> Result<Vec<Arc<LoadedPlugin>>, StartError> {
    let mut plugins = Vec::new();
    for (j, p) in route.processors.iter().enumerate() {
        let key = format!("routes[{index}].processors[{j}].plugin");
        let registry = registry.ok_or_else(|| StartError::new(&key, "no plugin registry"))?;
        let plugin = registry.get(&p.plugin).map_err(|e| StartError::new(&key, e))?;
        if !plugin.world.is_processor() {
            return Err(StartError::new(
                key,
                format!(
                    "{:?} is a {}, not a processor; name it in a binding's header_mapper",
                    p.plugin,
                    plugin.world.name()
                ),
            ));
        }
        plugins.push(plugin);
    }
    Ok(plugins)
}

/// The compiled header mapper of each binding (`None` for bindings
/// without one).
fn binding_mappers(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
) -> Result<Vec<Option<Arc<LoadedPlugin>>>, StartError> {
    let mut mappers = Vec::new();
    for (j, b) in route.bindings.iter().enumerate() {
        let Some(name) = &b.header_mapper else {
            mappers.push(None);
            continue;
        };
        let key = format!("routes[{index}].bindings[{j}].header_mapper");
        let registry = registry.ok_or_else(|| StartError::new(&key, "no plugin registry"))?;
        let plugin = registry.get(name).map_err(|e| StartError::new(&key, e))?;
        if plugin.world != PluginWorld::HeaderMapper {
            return Err(StartError::new(key, format!("{name:?} is a {}, not a header-mapper", plugin.world.name())));
        }
        mappers.push(Some(plugin));
    }
    Ok(mappers)
}

/// What a processor entry's `grants` give its plugin.
fn grants(g: &GrantsConfig) -> Grants {
    Grants {
        env: g.env.iter().filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v))).collect(),
        dir: g.dir.as_ref().map(PathBuf::from),
        network: g.network,
        tenant_id: g.tenant_id,
    }
}

/// One processor per `[[routes.processors]]` entry, each plugin's `init`
/// called with its config.
fn build_chain(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
    metrics: &Metrics,
) -> Result<Vec<SharedProcessor>, StartError> {
    let plugins = chain_plugins(registry, index, route)?;
    let mut chain: Vec<SharedProcessor> = Vec::new();
    let Some(registry) = registry else { return Ok(chain) };
    for (j, (p, plugin)) in route.processors.iter().zip(plugins).enumerate() {
        let processor = WasmProcessor::with_grants(
            registry.engine(),
            plugin,
            &route.id,
            p.config.to_string(),
            grants(&p.grants),
            metrics.clone(),
        )
        .map_err(|e| StartError::new(format!("routes[{index}].processors[{j}].config"), e))?;
        chain.push(Arc::new(processor));
    }
    Ok(chain)
}

/// Each binding's header mapper, its `init` called with its config.
fn build_mappers(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
    metrics: &Metrics,
) -> Result<Vec<Option<SharedHeaderMapper>>, StartError> {
    let plugins = binding_mappers(registry, index, route)?;
    let mut mappers = Vec::new();
    for (j, (b, plugin)) in route.bindings.iter().zip(plugins).enumerate() {
        let (Some(plugin), Some(registry)) = (plugin, registry) else {
            mappers.push(None);
            continue;
        };
        let mapper = WasmHeaderMapper::new(
            registry.engine(),
            plugin,
            &route.id,
            b.header_mapper_config.to_string(),
            metrics.clone(),
        )
        .map_err(|e| StartError::new(format!("routes[{index}].bindings[{j}].header_mapper_config"), e))?;
        mappers.push(Some(Arc::new(mapper) as SharedHeaderMapper));
    }
    Ok(mappers)
}

/// Loads the plugins a config needs and builds every route's processors
/// and header mappers, calling each plugin's `init`. What `validate` checks.
pub fn build_processors(config: &Config, metrics: &Metrics) -> Result<Vec<Vec<SharedProcessor>>, StartError> {
    let engine = new_engine(config)?;
    let registry = load_plugins(config, &engine, None)?;
    let mut chains = Vec::new();
    for (i, r) in config.routes.iter().enumerate() {
        build_mappers(registry.as_ref(), i, r, metrics)?;
        chains.push(build_chain(registry.as_ref(), i, r, metrics)?);
    }
    Ok(chains)
}

/// What a route is made of, but for its processors' code; a reload
/// restarts a route when this changes: its own settings, its receiver's,
/// its senders', the `[plugins]` limits or the bytes of a header mapper.
fn fingerprint(config: &Config, route: &RouteConfig, mappers: &[Option<Arc<LoadedPlugin>>]) -> String {
    let senders: Vec<_> = route.bindings.iter().map(|b| (&b.sender, config.senders.get(&b.sender))).collect();
    let mapper_digests: Vec<_> = mappers.iter().flatten().map(|p| (&p.name, p.digest)).collect();
    let uses = !route.processors.is_empty() || !mapper_digests.is_empty();
    serde_json::json!({
        "route": route,
        "receiver": config.receivers.get(&route.receiver),
        "senders": senders,
        "plugins": uses.then_some((config.plugins.call_timeout_ms, config.plugins.memory_limit_mib)),
        "mappers": mapper_digests,
    })
    .to_string()
}

/// The code of a route's processors: when only this changed, a reload
/// swaps the chain in place instead of restarting the route.
fn chain_digest(plugins: &[Arc<LoadedPlugin>]) -> String {
    plugins.iter().map(|p| format!("{}:{:016x}", p.name, p.digest)).collect::<Vec<_>>().join(",")
}

type SenderMap = BTreeMap<String, (SenderConfig, Arc<dyn Sender>)>;

fn sender_handles(senders: &SenderMap) -> BTreeMap<String, Arc<dyn Sender>> {
    senders.iter().map(|(name, (_, s))| (name.clone(), s.clone())).collect()
}

/// A route's fingerprint and its chain digest.
type RouteKey = (String, String);

/// The plugin engine and the compiled plugins, kept across reloads so that
/// unchanged components are not compiled again and the plugins' key-value
/// stores survive.
#[derive(Default)]
pub struct PluginState {
    engine: Option<PluginEngine>,
    registry: Option<PluginRegistry>,
}

/// The parts a config needs, built but not yet running.
struct Prepared {
    /// Every sender of the config: unchanged ones carried over, the rest new.
    senders: SenderMap,
    /// Routes to (re)start, with their fingerprints.
    routes: Vec<(RouteKey, Arc<Route>)>,
    /// Ids of running routes that stay (some with a new chain below).
    kept: BTreeSet<String>,
    /// Running routes whose processors' code changed: the new chain (and
    /// its digest) to swap in.
    swaps: Vec<(String, String, Vec<SharedProcessor>)>,
    plugins: PluginState,
    readiness: Readiness,
}

pub(crate) fn start_sender(name: &str, s: &SenderConfig, metrics: &Metrics) -> Result<Arc<dyn Sender>, StartError> {
    Ok(match s {
        SenderConfig::Mqtt(m) => Arc::new(
            MqttSender::start(name, m.clone(), metrics.clone())
                .map_err(|e| StartError::new(format!("senders.{name}"), e))?,
        ),
        SenderConfig::Sqs(q) => SqsSender::start(name, q.clone(), metrics.clone()),
        SenderConfig::Amqp10(a) => Amqp10Sender::start(name, a.clone(), metrics.clone()),
        SenderConfig::Amqp091(a) => Amqp091Sender::start(name, a.clone(), metrics.clone()),
    })
}

fn new_receiver(name: &str, r: &ReceiverConfig, route: &RouteConfig, metrics: &Metrics) -> Arc<dyn Receiver> {
    match r {
        ReceiverConfig::Mqtt(m) => Arc::new(MqttReceiver::new(
            name,
            m.clone(),
            u16::try_from(route.max_in_flight).unwrap_or(u16::MAX),
            metrics.clone(),
        )),
        ReceiverConfig::Sqs(q) => Arc::new(SqsReceiver::new(name, q.clone(), metrics.clone())),
        ReceiverConfig::Amqp10(a) => Arc::new(Amqp10Receiver::new(name, a.clone(), metrics.clone())),
        ReceiverConfig::Amqp091(a) => Arc::new(Amqp091Receiver::new(name, a.clone(), metrics.clone())),
    }
}

/// Builds what `config` needs beyond what is running: `running` maps the
/// ids of running routes to their fingerprints, `old_senders` the running
/// senders. Nothing here stops what runs; on error, what was started here
/// is closed again.
async fn prepare(
    config: &Config,
    metrics: &Metrics,
    store: &Arc<RedbStore>,
    running: &BTreeMap<String, RouteKey>,
    old_senders: &SenderMap,
    old_plugins: &PluginState,
) -> Result<Prepared, StartError> {
    let mut plugins = PluginState::default();
    if uses_plugins(config) {
        let engine = match &old_plugins.engine {
            Some(engine) => engine.with_limits(plugin_limits(config)),
            None => new_engine(config)?,
        };
        plugins.registry =
            tokio::task::block_in_place(|| load_plugins(config, &engine, old_plugins.registry.as_ref()))?;
        plugins.engine = Some(engine);
    } else {
        plugins.engine = old_plugins.engine.clone();
    }
    let registry = plugins.registry.as_ref();
    let mut kept = BTreeSet::new();
    let mut swaps = Vec::new();
    let mut to_build = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let fp = fingerprint(config, route, &binding_mappers(registry, i, route)?);
        let digest = chain_digest(&chain_plugins(registry, i, route)?);
        match running.get(&route.id) {
            Some((f, d)) if *f == fp && *d == digest => {
                kept.insert(route.id.clone());
            }
            Some((f, _)) if *f == fp => {
                let chain = tokio::task::block_in_place(|| build_chain(registry, i, route, metrics))?;
                kept.insert(route.id.clone());
                swaps.push((route.id.clone(), digest, chain));
            }
            _ => {
                let (chain, mappers) = tokio::task::block_in_place(|| {
                    Ok::<_, StartError>((
                        build_chain(registry, i, route, metrics)?,
                        build_mappers(registry, i, route, metrics)?,
                    ))
                })?;
                to_build.push(((fp, digest), route, chain, mappers));
            }
        }
    }

    // Names are checked before any sender starts: past this point nothing
    // fails, so no new connection is left behind by a refused reload.
    for (_, route, _, _) in &to_build {
        if !config.receivers.contains_key(&route.receiver) {
            return Err(StartError::new("routes", format!("unknown receiver {:?}", route.receiver)));
        }
        if let Some(b) = route.bindings.iter().find(|b| !config.senders.contains_key(&b.sender)) {
            return Err(StartError::new("routes", format!("unknown sender {:?}", b.sender)));
        }
    }

    let mut senders = SenderMap::new();
    let mut started = Vec::new();
    for (name, s) in &config.senders {
        let sender = match old_senders.get(name) {
            Some((old, sender)) if old == s => sender.clone(),
            _ => match start_sender(name, s, metrics) {
                Ok(sender) => {
                    started.push(sender.clone());
                    sender
                }
                Err(e) => {
                    for sender in &started {
                        sender.close().await;
                    }
                    return Err(e);
                }
            },
        };
        senders.insert(name.clone(), (s.clone(), sender));
    }

    let mut routes = Vec::new();
    for (key, route_config, chain, mappers) in to_build {
        let Some(receiver_config) = config.receivers.get(&route_config.receiver) else {
            return Err(StartError::new("routes", format!("unknown receiver {:?}", route_config.receiver)));
        };
        let mut bindings = Vec::new();
        for (b, header_mapper) in route_config.bindings.iter().zip(mappers) {
            let (_, sender) = senders
                .get(&b.sender)
                .ok_or_else(|| StartError::new("routes", format!("unknown sender {:?}", b.sender)))?;
            bindings.push(Binding {
                id: b.id().to_owned(),
                sender: sender.clone(),
                address: b.address.clone(),
                header_mapper,
            });
        }
        let route = Route {
            id: route_config.id.clone(),
            source_id: route_config.receiver.clone(),
            receiver: new_receiver(&route_config.receiver, receiver_config, route_config, metrics),
            processors: chain.into(),
            bindings,
            policy: RoutePolicy::from_config(route_config),
            dlq: store.clone(),
            outbox: match route_config.delivery_mode {
                DeliveryMode::SharedOutbox => Some(Outbox::new(store.clone())),
                DeliveryMode::DirectHold => None,
            },
            metrics: metrics.clone(),
        };
        routes.push((key, Arc::new(route)));
    }

    let mut transports: Vec<(String, String, String)> = config
        .senders
        .iter()
        .map(|(name, s)| (kind_of_sender(s).to_owned(), "sender".to_owned(), name.clone()))
        .collect();
    for route in &config.routes {
        if let Some(r) = config.receivers.get(&route.receiver) {
            transports.push((kind_of_receiver(r).to_owned(), "receiver".to_owned(), route.receiver.clone()));
        }
    }
    let readiness = Readiness { transports, routes: config.routes.iter().map(|r| r.id.clone()).collect() };
    Ok(Prepared { senders, routes, kept, swaps, plugins, readiness })
}

/// The store directory: `store.path` (the file is `ferry.redb` in it).
pub fn store_dir(config: &Config) -> std::path::PathBuf {
    PathBuf::from(&config.store.path)
}

/// A store fault for the test suite: `FERRY_TEST_STORE_FAULT=hang:<op>`
/// (an op as `ferry_store_op_seconds` names it) makes the store hang for
/// good at that operation, `fail:<op>` makes every commit holding one fail.
/// Debug builds only; a release build ignores it.
fn injected_fault() -> Option<ferry_store::Fault> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let spec = std::env::var("FERRY_TEST_STORE_FAULT").ok()?;
    let (kind, name) = spec.split_once(':')?;
    let op = ferry_store::Op::ALL.into_iter().find(|op| op.name() == name)?;
    warn!(fault = %spec, "FERRY_TEST_STORE_FAULT: the store will misbehave at this operation");
    match kind {
        "hang" => Some(ferry_store::Fault::Hang(op)),
        "fail" => Some(ferry_store::Fault::Fail(op)),
        _ => None,
    }
}

/// Warns about outbox records no running drainer will send: their route or
/// binding is gone, or no longer `shared_outbox`. They stay in the store
/// until a config drains them again.
fn warn_orphaned_records(config: &Config, store: &RedbStore) {
    use ferry_core::outbox::OutboxStore as _;
    let drained: BTreeSet<String> = config
        .routes
        .iter()
        .filter(|r| r.delivery_mode == DeliveryMode::SharedOutbox)
        .flat_map(|r| r.bindings.iter().map(|b| ferry_core::route::partition_of(&r.id, b.id())))
        .collect();
    for p in store.stats().iter().filter(|p| !drained.contains(&p.partition)) {
        warn!(
            partition = %p.partition,
            records = p.depth,
            "outbox records wait for a shared_outbox route and binding of this name; nothing sends them now"
        );
    }
}

/// A route task.
struct RunningRoute {
    key: RouteKey,
    /// Kept to swap its processor chain.
    route: Arc<Route>,
    generation: u64,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

type RouteEnded = (String, u64, Result<(), ferry_core::TransportError>);

/// A reload request: `Some` config with `--watch` (already loaded and
/// validated), `None` to reload plugins under the running config.
pub type ReloadRequest = Option<Config>;

/// Everything `ferry run` starts.
pub struct Bridge {
    config: Config,
    pub metrics: Metrics,
    /// What `/readyz` checks; replaced by a reload.
    pub readiness: SharedReadiness,
    /// The embedded store: dead letters and the outbox.
    store: Arc<RedbStore>,
    /// The running config and senders, for the admin server's replays.
    shared_config: Arc<RwLock<Config>>,
    shared_senders: Arc<RwLock<BTreeMap<String, Arc<dyn Sender>>>>,
    senders: SenderMap,
    plugins: PluginState,
    routes: BTreeMap<String, RunningRoute>,
    pending: Vec<(RouteKey, Arc<Route>)>,
    generation: u64,
    ended_tx: mpsc::UnboundedSender<RouteEnded>,
    ended_rx: mpsc::UnboundedReceiver<RouteEnded>,
}

impl Bridge {
    /// Builds every part. Must run inside a (multi-threaded) tokio runtime:
    /// senders start connecting right away.
    pub async fn build(config: Config, metrics: Metrics) -> Result<Self, StartError> {
        let options = StoreOptions { op_seconds: Some(metrics.store_op_seconds.clone()), fault: injected_fault() };
        let dir = store_dir(&config);
        let store = tokio::task::spawn_blocking(move || RedbStore::open(&dir, options))
            .await
            .map_err(|e| StartError::new("store.path", e))?
            .map_err(|e| StartError::new("store.path", e))?;
        let prepared =
            prepare(&config, &metrics, &store, &BTreeMap::new(), &SenderMap::new(), &PluginState::default()).await?;
        warn_orphaned_records(&config, &store);
        let shared_config = Arc::new(RwLock::new(config.clone()));
        let shared_senders = Arc::new(RwLock::new(sender_handles(&prepared.senders)));
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        Ok(Self {
            config,
            metrics,
            readiness: Arc::new(RwLock::new(prepared.readiness)),
            shared_config,
            shared_senders,
            store,
            senders: prepared.senders,
            plugins: prepared.plugins,
            routes: BTreeMap::new(),
            pending: prepared.routes,
            generation: 0,
            ended_tx,
            ended_rx,
        })
    }

    /// The embedded store.
    pub fn store(&self) -> Arc<RedbStore> {
        self.store.clone()
    }

    /// The store and config the admin server's dead-letter endpoints use.
    pub fn store_access(&self) -> crate::admin::StoreAccess {
        crate::admin::StoreAccess {
            store: self.store.clone(),
            config: self.shared_config.clone(),
            senders: self.shared_senders.clone(),
        }
    }

    /// The plugin directory to watch for hot reload: when `plugins.watch`
    /// is on and some route uses a plugin.
    pub fn watched_plugin_dir(&self) -> Option<PathBuf> {
        (self.config.plugins.watch && uses_plugins(&self.config)).then(|| PathBuf::from(&self.config.plugins.dir))
    }

    /// How many routes the config has.
    pub fn route_count(&self) -> usize {
        self.config.routes.len()
    }

    fn spawn(&mut self, key: RouteKey, route: Arc<Route>, shutdown: &CancellationToken) {
        self.generation += 1;
        let generation = self.generation;
        let stop = shutdown.child_token();
        let (token, ended) = (stop.clone(), self.ended_tx.clone());
        let id = route.id.clone();
        let task_id = id.clone();
        let running = route.clone();
        let task = tokio::spawn(async move {
            let result = running.run(token).await;
            let _ = ended.send((task_id, generation, result));
        });
        self.routes.insert(id, RunningRoute { key, route, generation, stop, task });
    }

    /// Runs every route until `shutdown` fires or a route fails, applying
    /// reload requests meanwhile; then drains in-flight messages and closes
    /// the senders. Returns whether every route ended cleanly.
    pub async fn run(mut self, shutdown: CancellationToken, mut reloads: mpsc::Receiver<ReloadRequest>) -> bool {
        for (fp, route) in std::mem::take(&mut self.pending) {
            self.spawn(fp, route, &shutdown);
        }
        let mut clean = true;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(request) = reloads.recv() => self.reload(request, &shutdown).await,
                Some((id, generation, result)) = self.ended_rx.recv() => {
                    if self.routes.get(&id).is_none_or(|r| r.generation != generation) {
                        continue; // a route a reload stopped
                    }
                    self.routes.remove(&id);
                    match result {
                        Ok(()) if self.routes.is_empty() => break,
                        Ok(()) => {}
                        Err(e) => {
                            error!(route = %id, error = %e, "route failed; stopping the daemon");
                            clean = false;
                            shutdown.cancel();
                            break;
                        }
                    }
                }
            }
        }
        for (_, route) in std::mem::take(&mut self.routes) {
            route.stop.cancel();
            if let Err(e) = route.task.await {
                error!(error = %e, "route task panicked");
                clean = false;
            }
        }
        while let Ok((id, _, result)) = self.ended_rx.try_recv() {
            if let Err(e) = result {
                error!(route = %id, error = %e, "route failed while stopping");
                clean = false;
            }
        }
        for (_, sender) in self.senders.values() {
            sender.close().await;
        }
        info!("all routes stopped");
        clean
    }

    /// Applies a reload: builds what changed while everything runs, then
    /// drains and restarts only the routes whose parts changed. Anything
    /// that fails to build (config, plugin, init) refuses the whole reload
    /// and leaves the daemon as it was.
    async fn reload(&mut self, request: ReloadRequest, shutdown: &CancellationToken) {
        let config = request.unwrap_or_else(|| self.config.clone());
        if config.admin != self.config.admin || config.store != self.config.store {
            warn!("reload: [admin] and [store] changes take effect at the next start");
        }
        let running: BTreeMap<String, RouteKey> =
            self.routes.iter().map(|(id, r)| (id.clone(), r.key.clone())).collect();
        let prepared = prepare(&config, &self.metrics, &self.store, &running, &self.senders, &self.plugins).await;
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                Metrics::inc(&self.metrics.reloads, &[("outcome", "refused")]);
                error!(error = %e, "reload refused; everything keeps running as it was");
                return;
            }
        };
        // New chains first: deliveries that start from now on use them,
        // in-flight ones finish on the chain they started with.
        let mut swapped = Vec::new();
        for (id, digest, chain) in prepared.swaps {
            if let Some(running) = self.routes.get_mut(&id) {
                running.route.processors.swap(chain);
                running.key.1 = digest;
                swapped.push(id);
            }
        }
        self.plugins = prepared.plugins;
        let replaced: Vec<String> = self.routes.keys().filter(|id| !prepared.kept.contains(*id)).cloned().collect();
        let mut stopping = Vec::new();
        for id in &replaced {
            if let Some(route) = self.routes.remove(id) {
                route.stop.cancel();
                stopping.push(route.task);
            }
        }
        for task in stopping {
            if let Err(e) = task.await {
                error!(error = %e, "route task panicked while stopping");
            }
        }
        let started: Vec<String> = prepared.routes.iter().map(|(_, r)| r.id.clone()).collect();
        for (fp, route) in prepared.routes {
            self.spawn(fp, route, shutdown);
        }
        let old = std::mem::replace(&mut self.senders, prepared.senders);
        for (name, (_, sender)) in old {
            let still_used = self.senders.get(&name).is_some_and(|(_, s)| Arc::ptr_eq(s, &sender));
            if !still_used {
                sender.close().await;
            }
        }
        if let Ok(mut r) = self.readiness.write() {
            *r = prepared.readiness;
        }
        for id in replaced.iter().filter(|id| !started.contains(id)) {
            self.metrics.route_running.remove(&ferry_core::metrics::labels(&[("route", id)]));
        }
        warn_orphaned_records(&config, &self.store);
        if let Ok(mut shared) = self.shared_config.write() {
            *shared = config.clone();
        }
        if let Ok(mut shared) = self.shared_senders.write() {
            *shared = sender_handles(&self.senders);
        }
        self.config = config;
        Metrics::inc(&self.metrics.reloads, &[("outcome", "applied")]);
        info!(
            restarted = ?started.iter().filter(|id| replaced.contains(id)).collect::<Vec<_>>(),
            started = ?started.iter().filter(|id| !replaced.contains(id)).collect::<Vec<_>>(),
            stopped = ?replaced.iter().filter(|id| !started.contains(id)).collect::<Vec<_>>(),
            kept = ?prepared.kept,
            processors_swapped = ?swapped,
            "reload applied"
        );
    }
}

fn kind_of_receiver(r: &ReceiverConfig) -> &'static str {
    match r {
        ReceiverConfig::Mqtt(_) => "mqtt",
        ReceiverConfig::Sqs(_) => "sqs",
        ReceiverConfig::Amqp10(_) => "amqp10",
        ReceiverConfig::Amqp091(_) => "amqp091",
    }
}

fn kind_of_sender(s: &SenderConfig) -> &'static str {
    match s {
        SenderConfig::Mqtt(_) => "mqtt",
        SenderConfig::Sqs(_) => "sqs",
        SenderConfig::Amqp10(_) => "amqp10",
        SenderConfig::Amqp091(_) => "amqp091",
    }
}
