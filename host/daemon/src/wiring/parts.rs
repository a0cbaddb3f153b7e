//! Building parts from config: the plugin engine and registry, processor
//! chains and header mappers, senders, receivers and bindings. Nothing here
//! runs anything but a sender's connection attempts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferry_config::{Config, GrantsConfig, ReceiverConfig, RouteConfig, SenderConfig, WireFormat};
use ferry_core::json_wire::{PackingSender, UnpackingReceiver};
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Receiver, Sender, SharedHeaderMapper, SharedProcessor};
use ferry_core::route::Binding;
use ferry_core::transport::{Claim, Parts, Services};
use ferry_wasm::{
    Grants, LoadedPlugin, PluginEngine, PluginLimits, PluginRegistry, PluginWorld, WasmHeaderMapper, WasmProcessor,
};
use tracing::warn;

use crate::api::{PluginRole, PluginStatus, PluginUse};
use crate::transports;

static CHILD_COMPILER: OnceLock<PathBuf> = OnceLock::new();

/// Makes the daemon compile plugins that are not in its compile cache yet
/// in a child process running `program plugins compile` (`program` being
/// the `ferry` binary), so that the compiler's memory is not kept by the
/// daemon (see `PluginEngine::compile_in_child`). `ferry run` sets it; a
/// program that embeds the daemon without this subcommand leaves it unset
/// and compiles in its own process.
pub fn compile_in_child(program: PathBuf) {
    let _ = CHILD_COMPILER.set(program);
}

/// The program [`compile_in_child`] named, if any.
pub(crate) fn child_compiler() -> Option<PathBuf> {
    CHILD_COMPILER.get().cloned()
}

/// A start-up problem, with the config key it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct StartError {
    pub path: String,
    pub message: String,
}

impl StartError {
    pub(super) fn new(path: impl Into<String>, message: impl ToString) -> Self {
        Self { path: path.into(), message: message.to_string() }
    }
}

/// Whether any route uses a plugin (a processor or a header mapper), or
/// any receiver or sender is a transport component.
pub(super) fn uses_plugins(config: &Config) -> bool {
    !plugin_uses(config).is_empty()
}

/// Every plugin a config names: processors, header mappers and transport
/// components.
fn plugin_names(config: &Config) -> std::collections::BTreeSet<String> {
    plugin_uses(config).into_keys().collect()
}

/// Every plugin a config names, with where and as what: processors and
/// their shadows, header mappers, transport components.
fn plugin_uses(config: &Config) -> BTreeMap<String, Vec<PluginUse>> {
    let mut uses: BTreeMap<String, Vec<PluginUse>> = BTreeMap::new();
    let mut add = |name: &str, at: String, role: PluginRole| {
        uses.entry(name.to_owned()).or_default().push(PluginUse { at, role })
    };
    for r in &config.routes {
        for p in &r.processors {
            add(&p.plugin, r.id.clone(), PluginRole::Processor);
            if let Some(shadow) = &p.shadow {
                add(shadow, r.id.clone(), PluginRole::Shadow);
            }
        }
        for b in &r.bindings {
            if let Some(mapper) = &b.header_mapper {
                add(mapper, r.id.clone(), PluginRole::HeaderMapper);
            }
        }
    }
    for (name, receiver) in &config.receivers {
        if let Some(plugin) = transports::receiver_plugin(receiver) {
            add(&plugin, format!("receivers.{name}"), PluginRole::Receiver);
        }
    }
    for (name, sender) in &config.senders {
        if let Some(plugin) = transports::sender_plugin(sender) {
            add(&plugin, format!("senders.{name}"), PluginRole::Sender);
        }
    }
    uses
}

/// What `GET /plugins` shows: every plugin the config uses, where, and
/// what loaded of it.
pub(super) fn plugin_statuses(config: &Config, registry: Option<&PluginRegistry>) -> Vec<PluginStatus> {
    plugin_uses(config)
        .into_iter()
        .map(|(name, used_by)| {
            let loaded = registry.map(|r| r.get(&name).map_err(|e| e.to_string()));
            let mut status = PluginStatus { name, used_by, ..PluginStatus::default() };
            match loaded {
                Some(Ok(plugin)) => {
                    status.world = plugin.world_at_contract();
                    status.contract = plugin.contract.clone();
                    status.size = plugin.size;
                    status.from_cache = plugin.from_cache;
                }
                Some(Err(why)) => status.refused = Some(why),
                None => status.refused = Some("no plugin registry".to_owned()),
            }
            status
        })
        .collect()
}

pub(super) fn plugin_limits(config: &Config) -> PluginLimits {
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
pub(super) fn new_engine(config: &Config) -> Result<PluginEngine, StartError> {
    let limits = plugin_limits(config);
    if let Some(dir) = plugin_cache_dir(config) {
        match PluginEngine::with_cache(limits, &dir) {
            Ok(engine) => {
                return Ok(match child_compiler() {
                    Some(program) => engine.compile_in_child(program),
                    None => engine,
                });
            }
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
pub(super) fn load_plugins(
    config: &Config,
    engine: &PluginEngine,
    previous: Option<&PluginRegistry>,
) -> Result<Option<PluginRegistry>, StartError> {
    if !uses_plugins(config) {
        return Ok(None);
    }
    let registry =
        PluginRegistry::reload_named(engine, Path::new(&config.plugins.dir), previous, Some(&plugin_names(config)))
            .map_err(|e| StartError::new("plugins.dir", e))?;
    Ok(Some(registry))
}

/// The compiled plugins a route's chain uses, in order.
pub(super) fn chain_plugins(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
) -> Result<Vec<Arc<LoadedPlugin>>, StartError> {
    let mut plugins = Vec::new();
    for (j, p) in route.processors.iter().enumerate() {
        plugins.push(processor_plugin(registry, format!("routes[{index}].processors[{j}].plugin"), &p.plugin)?);
    }
    Ok(plugins)
}

/// The compiled processor plugin `name`, for the config key `key`.
fn processor_plugin(
    registry: Option<&PluginRegistry>,
    key: String,
    name: &str,
) -> Result<Arc<LoadedPlugin>, StartError> {
    let registry = registry.ok_or_else(|| StartError::new(&key, "no plugin registry"))?;
    let plugin = registry.get(name).map_err(|e| StartError::new(&key, e))?;
    if !plugin.world.is_processor() {
        let why =
            format!("{name:?} is a {}, not a processor; name it in a binding's header_mapper", plugin.world.name());
        return Err(StartError::new(key, why));
    }
    Ok(plugin)
}

/// The compiled shadow of each processor entry that names one (in the
/// entries' order).
pub(super) fn shadow_plugins(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
) -> Result<Vec<Arc<LoadedPlugin>>, StartError> {
    let mut plugins = Vec::new();
    for (j, p) in route.processors.iter().enumerate() {
        if let Some(name) = &p.shadow {
            plugins.push(processor_plugin(registry, format!("routes[{index}].processors[{j}].shadow"), name)?);
        }
    }
    Ok(plugins)
}

/// The compiled header mapper of each binding (`None` for bindings
/// without one).
pub(super) fn binding_mappers(
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
        allow_hosts: Vec::new(),
        tenant_id: g.tenant_id,
        ordering_key: g.ordering_key,
    }
}

/// One processor per `[[routes.processors]]` entry, each plugin's `init`
/// called with its config.
pub(super) fn build_chain(
    registry: Option<&PluginRegistry>,
    index: usize,
    route: &RouteConfig,
    metrics: &Metrics,
) -> Result<Vec<SharedProcessor>, StartError> {
    let plugins = chain_plugins(registry, index, route)?;
    let mut shadows = shadow_plugins(registry, index, route)?.into_iter();
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
        let Some(shadow) = p.shadow.as_ref().and_then(|_| shadows.next()) else {
            chain.push(Arc::new(processor));
            continue;
        };
        // The shadow gets the same grants, so that it can do what the
        // version it may replace does.
        let config = p.shadow_config.as_ref().unwrap_or(&p.config).to_string();
        let shadow = WasmProcessor::with_grants(
            registry.engine(),
            shadow,
            &route.id,
            config,
            grants(&p.grants),
            metrics.clone(),
        )
        .map_err(|e| StartError::new(format!("routes[{index}].processors[{j}].shadow_config"), e))?;
        chain.push(Arc::new(ferry_core::shadow::Shadowed::new(
            Arc::new(processor),
            Arc::new(shadow),
            &route.id,
            metrics,
        )));
    }
    Ok(chain)
}

/// Each binding's header mapper, its `init` called with its config.
pub(super) fn build_mappers(
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

/// Every route's processor chain and its bindings' header mappers, in
/// config order.
pub struct Processors {
    pub chains: Vec<Vec<SharedProcessor>>,
    pub mappers: Vec<Vec<Option<SharedHeaderMapper>>>,
}

/// Loads the plugins a config needs and builds every route's processors
/// and header mappers, calling each plugin's `init`. What `validate` checks
/// and what `ferry test` runs.
pub fn build_processors(config: &Config, metrics: &Metrics) -> Result<Processors, StartError> {
    let engine = new_engine(config)?;
    let registry = load_plugins(config, &engine, None)?;
    processors_of(config, registry.as_ref(), metrics)
}

/// `ferry validate`: [`build_processors`], and every transport's check of
/// its parts with the plugins loaded (a transport component is opened
/// with its config, off any network but what `open` itself reaches).
/// Blocking.
pub fn validate_plugins(config: &Config, metrics: &Metrics) -> Result<(), StartError> {
    let engine = new_engine(config)?;
    let registry = load_plugins(config, &engine, None)?;
    processors_of(config, registry.as_ref(), metrics)?;
    let services = services(config, &None, registry.as_ref(), None);
    for (name, r) in &config.receivers {
        let key = format!("receivers.{name}");
        let transport = transports::of_receiver(r).map_err(|e| StartError::new(format!("{key}.type"), e))?;
        transport.validate_receiver(name, r, &parts(metrics, &services, None)).map_err(|e| StartError::new(key, e))?;
    }
    for (name, s) in &config.senders {
        let key = format!("senders.{name}");
        let transport = transports::of_sender(s).map_err(|e| StartError::new(format!("{key}.type"), e))?;
        transport.validate_sender(name, s, &parts(metrics, &services, None)).map_err(|e| StartError::new(key, e))?;
    }
    Ok(())
}

fn processors_of(
    config: &Config,
    registry: Option<&PluginRegistry>,
    metrics: &Metrics,
) -> Result<Processors, StartError> {
    let mut built = Processors { chains: Vec::new(), mappers: Vec::new() };
    for (i, r) in config.routes.iter().enumerate() {
        built.mappers.push(build_mappers(registry, i, r, metrics)?);
        built.chains.push(build_chain(registry, i, r, metrics)?);
    }
    Ok(built)
}

/// Parses every receiver's and sender's URLs with the code its transport
/// connects with, so `ferry validate` and the start of `ferry run` refuse a
/// URL that cannot work (a port out of range, credentials that do not
/// decode, no host) instead of a connection retrying it for ever.
///
/// Then what each part takes that no other may (a listen address, a
/// client id at one broker): the second taker is refused, naming the
/// first.
pub fn check_urls(config: &Config) -> Result<(), StartError> {
    let mut taken = Taken::default();
    let sqs = endpoint_section(config)?;
    let listens = [("endpoints.sqs", sqs.as_ref().map(|e| &e.listen)), ("admin", config.admin.listen.as_ref())];
    for (key, listen) in listens {
        if let Some(claim) = listen.and_then(|l| l.parse().ok()).and_then(|addr| Claim::listen("listen", addr)) {
            taken.claim(key, claim)?;
        }
    }
    for (name, r) in &config.receivers {
        let key = format!("receivers.{name}");
        let transport = transports::of_receiver(r).map_err(|e| StartError::new(format!("{key}.type"), e))?;
        needs_section(config, &key, transport)?;
        transport.check_receiver(name, r).map_err(|p| key_problem(&key, p))?;
        for claim in transport.receiver_claims(name, r, config.instance.id()) {
            taken.claim(&key, claim)?;
        }
    }
    for (name, s) in &config.senders {
        let key = format!("senders.{name}");
        let transport = transports::of_sender(s).map_err(|e| StartError::new(format!("{key}.type"), e))?;
        needs_section(config, &key, transport)?;
        transport.check_sender(name, s).map_err(|p| key_problem(&key, p))?;
        for claim in transport.sender_claims(name, s, config.instance.id()) {
            taken.claim(&key, claim)?;
        }
    }
    Ok(())
}

/// The part at `key` of `transport`, refused where the section its
/// transport needs is not set.
fn needs_section(
    config: &Config,
    key: &str,
    transport: &dyn ferry_core::transport::Transport,
) -> Result<(), StartError> {
    match transport.needs_section() {
        Some(section) if !config.has_section(section) => {
            Err(StartError::new(key, format!("type = {:?} needs an [{section}] section", transport.kind())))
        }
        _ => Ok(()),
    }
}

/// What the parts checked so far take, and which part took each.
#[derive(Default)]
struct Taken(BTreeMap<String, String>);

impl Taken {
    /// `claim`, taken by the part at `key`, unless another took it first.
    fn claim(&mut self, key: &str, claim: Claim) -> Result<(), StartError> {
        match self.0.get(&claim.what) {
            Some(other) => Err(StartError::new(format!("{key}.{}", claim.key), format!("{other} {}", claim.clash))),
            None => {
                self.0.insert(claim.what, key.to_owned());
                Ok(())
            }
        }
    }
}

/// A transport's problem with a key of the part at `key`.
/// The SQS endpoint's section, read and checked by its crate (the
/// problem named with its key from the root).
pub(super) fn endpoint_section(
    config: &Config,
) -> Result<Option<ferry_sqs_endpoint::config::SqsEndpointConfig>, StartError> {
    ferry_sqs_endpoint::config::section(config).map_err(|p| key_problem(ferry_sqs_endpoint::config::SECTION, p))
}

fn key_problem(key: &str, problem: ferry_core::transport::KeyProblem) -> StartError {
    let path = if problem.key.is_empty() { key.to_owned() } else { format!("{key}.{}", problem.key) };
    StartError::new(path, problem.message)
}

/// The SQS endpoint's topics and (through them) queues, for `sqs_endpoint`
/// receivers and senders (`None` where no endpoint runs: the CLI).
pub type EndpointQueues = Option<Arc<ferry_sqs_endpoint::Topics>>;

/// What transports may use: the endpoint's queues (where one runs), the
/// transport components the config names (when it names any), and where a
/// listener records its address (`ferry run`).
pub(super) fn services(
    config: &Config,
    queues: &EndpointQueues,
    registry: Option<&PluginRegistry>,
    listeners: Option<&ferry_core::listeners::Listeners>,
) -> Services {
    let mut services = Services::default().with(Instance(config.instance.id().to_owned()));
    if let Some(l) = listeners {
        services = services.with(l.clone());
    }
    if let Some(q) = queues {
        services = services.with(q.clone());
    }
    if let Some(registry) = registry {
        services = services.with(ferry_wasm::transport::Components::new(registry));
    }
    services
}

/// This process's instance id, for [`Parts::instance`].
struct Instance(String);

/// What a transport gets to build a part.
fn parts<'a>(metrics: &'a Metrics, services: &'a Services, route: Option<&RouteConfig>) -> Parts<'a> {
    Parts {
        metrics,
        instance: services.get::<Instance>().map_or("ferry", |i| i.0.as_str()),
        max_in_flight: route.map_or(0, |r| r.max_in_flight),
        durable_first: route.is_some_and(|r| r.delivery_mode == ferry_config::DeliveryMode::SharedOutbox),
        services,
    }
}

pub(super) fn start_sender(
    name: &str,
    s: &SenderConfig,
    metrics: &Metrics,
    services: &Services,
) -> Result<Arc<dyn Sender>, StartError> {
    let key = format!("senders.{name}");
    let transport = transports::of_sender(s).map_err(|e| StartError::new(format!("{key}.type"), e))?;
    let sender = transport.sender(name, s, &parts(metrics, services, None)).map_err(|e| StartError::new(&key, e))?;
    Ok(match s.wire_format() {
        WireFormat::Json if !transport.sender_writes_wire_format() => Arc::new(PackingSender::new(sender)),
        _ => sender,
    })
}

pub(super) fn new_receiver(
    name: &str,
    r: &ReceiverConfig,
    route: &RouteConfig,
    metrics: &Metrics,
    services: &Services,
) -> Result<Arc<dyn Receiver>, StartError> {
    let key = format!("receivers.{name}");
    let transport = transports::of_receiver(r).map_err(|e| StartError::new(format!("{key}.type"), e))?;
    let receiver =
        transport.receiver(name, r, &parts(metrics, services, Some(route))).map_err(|e| StartError::new(&key, e))?;
    Ok(match r.wire_format() {
        WireFormat::Json if !transport.receiver_reads_wire_format() => {
            Arc::new(UnpackingReceiver::new(receiver, name, metrics.clone()))
        }
        _ => receiver,
    })
}

/// A route's bindings: each binding's sender (found by `sender`) and
/// header mapper (`mappers`, in binding order).
pub(super) fn make_bindings(
    route: &RouteConfig,
    mappers: Vec<Option<SharedHeaderMapper>>,
    sender: impl Fn(&str) -> Option<Arc<dyn Sender>>,
) -> Result<Vec<Binding>, StartError> {
    route
        .bindings
        .iter()
        .zip(mappers)
        .map(|(b, header_mapper)| {
            let sender =
                sender(&b.sender).ok_or_else(|| StartError::new("routes", format!("unknown sender {:?}", b.sender)))?;
            Ok(Binding {
                id: b.id().to_owned(),
                sender,
                address: b.address.clone(),
                header_mapper,
                meters: Default::default(),
                availability: Default::default(),
            })
        })
        .collect()
}

/// Builds the bindings of routes outside a running daemon (`ferry dlq
/// replay` with the daemon stopped): the same senders and header mappers a
/// route would have. Senders are started on first use and kept in
/// `senders`; the plugins are loaded once.
pub struct StandaloneBindings<'a> {
    config: &'a Config,
    metrics: Metrics,
    registry: Option<Option<PluginRegistry>>,
    pub senders: BTreeMap<String, Arc<dyn Sender>>,
}

impl<'a> StandaloneBindings<'a> {
    pub fn new(config: &'a Config, metrics: Metrics) -> Self {
        Self { config, metrics, registry: None, senders: BTreeMap::new() }
    }

    /// The bindings of the route with this id.
    pub fn route(&mut self, id: &str) -> Result<Vec<Binding>, StartError> {
        let config = self.config;
        let (index, route) = config
            .routes
            .iter()
            .enumerate()
            .find(|(_, r)| r.id == id)
            .ok_or_else(|| StartError::new("routes", format!("route {id:?} is not in the config")))?;
        if self.registry.is_none() {
            let engine = new_engine(config)?;
            self.registry = Some(load_plugins(config, &engine, None)?);
        }
        let registry = self.registry.as_ref().and_then(Option::as_ref);
        let mappers = build_mappers(registry, index, route, &self.metrics)?;
        for b in &route.bindings {
            if !self.senders.contains_key(&b.sender) {
                let cfg = config
                    .senders
                    .get(&b.sender)
                    .ok_or_else(|| StartError::new("routes", format!("unknown sender {:?}", b.sender)))?;
                let services = services(config, &None, registry, None);
                self.senders.insert(b.sender.clone(), start_sender(&b.sender, cfg, &self.metrics, &services)?);
            }
        }
        make_bindings(route, mappers, |name| self.senders.get(name).cloned())
    }
}

/// The bindings of every running route, by route id (replays use them).
pub type RouteBindings = BTreeMap<String, Vec<Binding>>;

/// The store `[store]` names: the embedded one in `store.path` (the file is
/// `ferry.redb` in it) or the PostgreSQL database at `store.url`.
pub fn store_engine(config: &Config) -> ferry_store::Engine {
    match (&config.store.kind, &config.store.url) {
        (ferry_config::StoreKind::Postgres, Some(url)) => {
            ferry_store::Engine::Postgres { url: url.clone(), pool_size: config.store.pool_size }
        }
        _ => ferry_store::Engine::Embedded { dir: PathBuf::from(&config.store.path) },
    }
}

/// How this process holds outbox leases: the instance id in the owner name,
/// and `store.lease_ttl_secs`.
pub fn leasing(config: &Config) -> ferry_core::route::Leasing {
    let id = config.instance.id.as_deref().unwrap_or("ferry");
    ferry_core::route::Leasing::new(id, std::time::Duration::from_secs(config.store.lease_ttl_secs))
}

/// A store fault for the test suite: `FERRY_TEST_STORE_FAULT=hang:<op>`
/// (an op as `ferry_store_op_seconds` names it) makes the store hang for
/// good at that operation, `fail:<op>` makes every commit holding one fail.
/// Debug builds only; a release build ignores it.
pub(super) fn injected_fault() -> Option<ferry_store::Fault> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `receivers` and `[endpoints.sqs]` as written, checked as `ferry
    /// validate` does; the refused key and why.
    fn check(parts: &str) -> Result<(), (String, String)> {
        let text = format!(
            "{parts}\n[senders.out]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/\"\n[[routes]]\nid = \"r\"\nreceiver = \"a\"\n[[routes.bindings]]\nsender = \"out\"\n"
        );
        let config = ferry_config::parse_with_env(&text, &|_| None).expect("valid config");
        check_urls(&config).map_err(|e| (e.path, e.message))
    }

    #[test]
    fn two_listeners_on_one_address_are_refused_by_name() {
        let http = |name: &str, listen: &str| format!("[receivers.{name}]\ntype = \"http\"\nlisten = \"{listen}\"\n");
        let both = format!("{}{}", http("a", "127.0.0.1:8080"), http("b", "127.0.0.1:8080"));
        let err = check(&both).expect_err("one address");
        assert_eq!(err, ("receivers.b.listen".into(), "receivers.a listens there already".into()));
        check(&format!("{}{}", http("a", "127.0.0.1:0"), http("b", "127.0.0.1:0"))).expect("port 0 twice");
        check(&format!("{}{}", http("a", "127.0.0.1:8080"), http("b", "127.0.0.1:8081"))).expect("two ports");

        let endpoint = "[endpoints.sqs]\nlisten = \"127.0.0.1:8080\"\n";
        let err = check(&format!("{endpoint}{}", http("a", "127.0.0.1:8080"))).expect_err("the endpoint's");
        assert_eq!(err, ("receivers.a.listen".into(), "endpoints.sqs listens there already".into()));
        let admin = "[admin]\nlisten = \"127.0.0.1:8080\"\n";
        let err = check(&format!("{admin}{}", http("a", "127.0.0.1:8080"))).expect_err("the admin's");
        assert_eq!(err, ("receivers.a.listen".into(), "admin listens there already".into()));
    }

    /// The document keeps `[endpoints.sqs]` as written; its crate reads
    /// and checks it, and a problem names the key from the root.
    #[test]
    fn the_endpoint_section_is_read_by_its_crate_with_the_full_key() {
        let http = "[receivers.a]\ntype = \"http\"\nlisten = \"127.0.0.1:0\"\n";
        let endpoint = |keys: &str| format!("{http}[endpoints.sqs]\nlisten = \"127.0.0.1:0\"\n{keys}");
        check(&endpoint("region = \"eu-west-1\"\n[endpoints.sqs.queues.orders]\n")).expect("valid");
        for (keys, key, why) in [
            ("colour = \"red\"\n", "endpoints.sqs.colour", "unknown field"),
            ("auth = \"maybe\"\n", "endpoints.sqs.auth", "unknown variant"),
            ("account = 12\n", "endpoints.sqs.account", "invalid type"),
            ("auth = \"verify\"\n", "endpoints.sqs.access_keys", "at least one access key"),
            ("[endpoints.sqs.queues.\"a b\"]\n", "endpoints.sqs.queues.a b", "a queue name"),
            (
                "[endpoints.sqs.queues.q]\nattributes = { FifoQueue = 1 }\n",
                "endpoints.sqs.queues.q.attributes.FifoQueue",
                "invalid type",
            ),
        ] {
            let (path, message) = check(&endpoint(keys)).expect_err(keys);
            assert_eq!(path, key, "{keys}: {message}");
            assert!(message.contains(why), "{keys}: {message}");
        }
        let missing = format!("{http}[endpoints.sqs]\nregion = \"eu-west-1\"\n");
        let (path, message) = check(&missing).expect_err("no listen");
        assert_eq!((path.as_str(), message.contains("missing field")), ("endpoints.sqs.listen", true), "{message}");
    }

    #[test]
    fn two_mqtt_sessions_with_one_client_id_at_one_broker_are_refused_by_name() {
        let mqtt = |kind: &str, name: &str, extra: &str| {
            format!("[{kind}.{name}]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1\"\ntopics = [\"t\"]\n{extra}\n")
        };
        let sessions = mqtt("receivers", "a", "client_id = \"br\"\nconnections = 3");
        let err = check(&format!("{sessions}{}", mqtt("receivers", "b", "client_id = \"br-2\""))).expect_err("clash");
        assert_eq!(err.0, "receivers.b.client_id");
        assert!(err.1.starts_with("receivers.a uses client id \"br-2\""), "{}", err.1);
        // The default carries the part's name (and the instance): no clash.
        check(&format!("{}{}", mqtt("receivers", "a", ""), mqtt("receivers", "b", ""))).expect("defaults");
        // Another broker, another id space.
        let other =
            "[receivers.b]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.2\"\ntopics = [\"t\"]\nclient_id = \"br\"\n";
        check(&format!("{sessions}{other}")).expect("two brokers");
    }
}
