//! Planning: what a config needs beyond what already runs. At start
//! nothing runs and everything is built; at a reload each route is compared
//! by its [`RouteKey`] and kept, given a new processor chain, or rebuilt,
//! and senders whose config did not change are carried over. Nothing here
//! stops what runs; the bridge applies the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ferry_config::{Config, DeliveryMode, RouteConfig, SenderConfig};

use crate::transports;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Sender, SharedHeaderMapper, SharedProcessor};
use ferry_core::route::{Mode, Outbox, Route, RoutePolicy};
use ferry_store::Store;
use ferry_wasm::{LoadedPlugin, PluginEngine, PluginRegistry};
use tracing::warn;

use super::parts::{
    EndpointQueues, StartError, binding_mappers, build_chain, build_mappers, chain_plugins, load_plugins,
    make_bindings, new_engine, new_receiver, plugin_limits, services, shadow_plugins, start_sender, uses_plugins,
};
use crate::runtime::readiness::Readiness;

/// What a route is made of, but for its processors' code; a reload
/// restarts a route when this changes: its own settings, its receiver's,
/// its senders', the `[plugins]` limits or the bytes of a header mapper.
pub(super) fn fingerprint(
    config: &Config,
    route: &RouteConfig,
    mappers: &[Option<Arc<LoadedPlugin>>],
    registry: Option<&PluginRegistry>,
) -> String {
    let senders: Vec<_> = route
        .bindings
        .iter()
        .map(|b| {
            let s = config.senders.get(&b.sender);
            (&b.sender, s, component_digest(registry, s.and_then(transports::sender_plugin)))
        })
        .collect();
    let receiver = config.receivers.get(&route.receiver);
    let mapper_digests: Vec<_> = mappers.iter().flatten().map(|p| (&p.name, p.digest)).collect();
    let uses = !route.processors.is_empty() || !mapper_digests.is_empty();
    serde_json::json!({
        "route": route,
        "receiver": receiver,
        // A transport component's code: a changed one restarts the routes
        // it receives or sends for (drained first, like any restart).
        "receiver_component": component_digest(registry, receiver.and_then(transports::receiver_plugin)),
        "senders": senders,
        "plugins": uses.then_some((config.plugins.call_timeout_ms, config.plugins.memory_limit_mib)),
        "mappers": mapper_digests,
    })
    .to_string()
}

/// The digest of the transport component `name` as loaded, if it is one.
fn component_digest(registry: Option<&PluginRegistry>, name: Option<String>) -> Option<String> {
    let plugin = registry?.get(&name?).ok()?;
    Some(format!("{:016x}", plugin.digest))
}

/// The code of a route's processors: when only this changed, a reload
/// swaps the chain in place instead of restarting the route.
fn chain_digest(plugins: &[Arc<LoadedPlugin>]) -> String {
    plugins.iter().map(|p| format!("{}:{:016x}", p.name, p.digest)).collect::<Vec<_>>().join(",")
}

/// A running sender and the config it was started with (a reload keeps it
/// when the config is unchanged).
#[derive(Clone)]
pub(super) struct RunningSender {
    pub config: SenderConfig,
    /// Its transport component's digest, if it is one (a changed
    /// component makes a new sender).
    pub component: Option<String>,
    pub sender: Arc<dyn Sender>,
}

/// The senders of a config, by name.
pub(super) type SenderMap = BTreeMap<String, RunningSender>;

/// What decides how a reload treats a running route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RouteKey {
    /// Everything but its processors' code (see [`fingerprint`]): when
    /// this changes the route is restarted.
    pub fingerprint: String,
    /// Its processors' code (see [`chain_digest`]): when only this changes
    /// the chain is swapped in place.
    pub chain: String,
}

/// A route built and ready to start.
pub(super) struct PlannedRoute {
    pub key: RouteKey,
    pub route: Arc<Route>,
}

/// A running route whose processors' code changed: the chain to swap in.
pub(super) struct ChainSwap {
    pub route: String,
    pub chain_digest: String,
    pub chain: Vec<SharedProcessor>,
}

/// A route the config needs built (new, or changed beyond its chain).
struct ToBuild<'c> {
    key: RouteKey,
    config: &'c RouteConfig,
    chain: Vec<SharedProcessor>,
    mappers: Vec<Option<SharedHeaderMapper>>,
}

/// The plugin engine and the compiled plugins, kept across reloads so that
/// unchanged components are not compiled again and the plugins' key-value
/// stores survive.
#[derive(Default)]
pub struct PluginState {
    engine: Option<PluginEngine>,
    registry: Option<PluginRegistry>,
}

impl PluginState {
    /// The compiled plugins (`None` when the config uses none).
    pub(super) fn registry(&self) -> Option<&PluginRegistry> {
        self.registry.as_ref()
    }
}

/// The parts a config needs, built but not yet running.
pub(super) struct Prepared {
    /// Every sender of the config: unchanged ones carried over, the rest new.
    pub senders: SenderMap,
    /// Routes to (re)start.
    pub routes: Vec<PlannedRoute>,
    /// Ids of running routes that stay (some with a new chain below).
    pub kept: BTreeSet<String>,
    /// Running routes whose processors' code changed.
    pub swaps: Vec<ChainSwap>,
    pub plugins: PluginState,
    pub readiness: Readiness,
}

/// What every route of a bridge shares, whatever the config: the store,
/// this process's name on leases, the SQS endpoint's queues, and where
/// listeners record their addresses.
#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    pub store: &'a Arc<dyn Store>,
    pub leasing: &'a ferry_core::route::Leasing,
    pub queues: &'a EndpointQueues,
    /// Where listeners record their bound addresses.
    pub listeners: &'a ferry_core::listeners::Listeners,
    /// Each route's gate, kept across reloads.
    pub controls: &'a crate::runtime::control::Controls,
}

/// Builds what `config` needs beyond what is running: `running` maps the
/// ids of running routes to their fingerprints, `old_senders` the running
/// senders. Nothing here stops what runs; on error, what was started here
/// is closed again.
pub(super) async fn prepare(
    config: &Config,
    metrics: &Metrics,
    shared: &Shared<'_>,
    running: &BTreeMap<String, RouteKey>,
    old_senders: &SenderMap,
    old_plugins: &PluginState,
) -> Result<Prepared, StartError> {
    let Shared { store, leasing, queues, listeners, controls } = *shared;
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
    let services = services(config, queues, registry, Some(listeners));
    let mut kept = BTreeSet::new();
    let mut swaps = Vec::new();
    let mut to_build = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let key = RouteKey {
            fingerprint: fingerprint(config, route, &binding_mappers(registry, i, route)?, registry),
            chain: chain_digest(&[chain_plugins(registry, i, route)?, shadow_plugins(registry, i, route)?].concat()),
        };
        match running.get(&route.id) {
            Some(old) if *old == key => {
                kept.insert(route.id.clone());
            }
            Some(old) if old.fingerprint == key.fingerprint => {
                let chain = tokio::task::block_in_place(|| build_chain(registry, i, route, metrics))?;
                kept.insert(route.id.clone());
                swaps.push(ChainSwap { route: route.id.clone(), chain_digest: key.chain, chain });
            }
            _ => {
                let (chain, mappers) = tokio::task::block_in_place(|| {
                    Ok::<_, StartError>((
                        build_chain(registry, i, route, metrics)?,
                        build_mappers(registry, i, route, metrics)?,
                    ))
                })?;
                to_build.push(ToBuild { key, config: route, chain, mappers });
            }
        }
    }

    // Names are checked before any sender starts: past this point nothing
    // fails, so no new connection is left behind by a refused reload.
    for ToBuild { config: route, .. } in &to_build {
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
            Some(old)
                if old.config == *s && old.component == component_digest(registry, transports::sender_plugin(s)) =>
            {
                old.sender.clone()
            }
            _ => match start_sender(name, s, metrics, &services) {
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
        senders.insert(
            name.clone(),
            RunningSender {
                config: s.clone(),
                component: component_digest(registry, transports::sender_plugin(s)),
                sender,
            },
        );
    }

    let mut routes = Vec::new();
    for ToBuild { key, config: route_config, chain, mappers } in to_build {
        let Some(receiver_config) = config.receivers.get(&route_config.receiver) else {
            return Err(StartError::new("routes", format!("unknown receiver {:?}", route_config.receiver)));
        };
        let bindings = make_bindings(route_config, mappers, |name| senders.get(name).map(|s| s.sender.clone()))?;
        let route = Route {
            id: route_config.id.clone(),
            source_id: route_config.receiver.clone(),
            receiver: new_receiver(&route_config.receiver, receiver_config, route_config, metrics, &services)?,
            processors: chain.into(),
            bindings,
            policy: RoutePolicy::from_config(route_config),
            dlq: store.clone(),
            mode: match route_config.delivery_mode {
                DeliveryMode::SharedOutbox => Mode::SharedOutbox(Outbox::new(store.clone(), leasing.clone())),
                DeliveryMode::DirectHold => Mode::DirectHold,
            },
            metrics: metrics.clone(),
            clock: ferry_core::clock::Clock::System,
            meters: Default::default(),
            memory: Default::default(),
            gate: controls.gate(&route_config.id),
        };
        routes.push(PlannedRoute { key, route: Arc::new(route) });
    }

    let mut transports: Vec<(String, String, String)> =
        config.senders.iter().map(|(name, s)| (s.kind().to_owned(), "sender".to_owned(), name.clone())).collect();
    for route in &config.routes {
        if let Some(r) = config.receivers.get(&route.receiver) {
            transports.push((r.kind().to_owned(), "receiver".to_owned(), route.receiver.clone()));
        }
    }
    if config.endpoints.sqs.is_some() {
        let (kind, role, name) = super::endpoint::READINESS;
        transports.push((kind.to_owned(), role.to_owned(), name.to_owned()));
    }
    let readiness = Readiness {
        transports,
        routes: config.routes.iter().map(|r| r.id.clone()).collect(),
        bindings: config
            .routes
            .iter()
            .flat_map(|r| r.bindings.iter().map(|b| (r.id.clone(), b.id().to_owned())))
            .collect(),
    };
    Ok(Prepared { senders, routes, kept, swaps, plugins, readiness })
}

/// Warns about outbox records no running drainer will send: their route or
/// binding is gone, or no longer `shared_outbox`. They stay in the store
/// until a config drains them again.
pub(super) fn warn_orphaned_records(config: &Config, store: &dyn Store) {
    let drained: BTreeSet<String> = config
        .routes
        .iter()
        .filter(|r| r.delivery_mode == DeliveryMode::SharedOutbox)
        .flat_map(|r| {
            r.bindings
                .iter()
                .flat_map(|b| (0..r.outbox_partitions).map(|k| ferry_core::outbox::partition_name(&r.id, b.id(), k)))
        })
        .collect();
    for p in store.stats().iter().filter(|p| !drained.contains(&p.partition)) {
        warn!(
            partition = %p.partition,
            records = p.depth,
            "outbox records wait for a shared_outbox route and binding of this name; nothing sends them now"
        );
    }
}
