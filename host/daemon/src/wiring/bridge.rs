//! Running the bridge: the route tasks, reloads applied to them, and a
//! clean stop (see the module above for the whole path).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use ferry_config::Config;
use ferry_core::clock::Clock;
use ferry_core::metrics::Metrics;
use ferry_core::route::Leasing;
use ferry_core::route::Route;
use ferry_store::{Store, StoreOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::parts::{
    EndpointQueues, RouteBindings, StartError, check_urls, injected_fault, leasing, store_engine, uses_plugins,
};
use super::plan::{
    ChainSwap, PlannedRoute, PluginState, RouteKey, RunningSender, SenderMap, Shared, prepare, warn_orphaned_records,
};
use crate::api::{ReloadOutcome, ReloadReply, RouteChange, RouteVersion};
use crate::runtime::control::Controls;
use crate::runtime::readiness::SharedReadiness;

/// A route task.
struct RunningRoute {
    key: RouteKey,
    /// Kept to swap its processor chain.
    route: Arc<Route>,
    generation: u64,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// How a route task ended: which route, which start of it, and its result.
struct RouteEnded {
    id: String,
    generation: u64,
    result: Result<(), ferry_core::TransportError>,
}

/// A reload request: a config (already loaded and validated: SIGHUP with
/// `--watch`, `POST /reload`) or none, to reload plugins under the running
/// config; and where to say what it did.
pub struct ReloadRequest {
    pub config: Option<Config>,
    pub reply: Option<tokio::sync::oneshot::Sender<ReloadReply>>,
}

impl ReloadRequest {
    /// Plugins only, under the running config.
    pub fn plugins() -> Self {
        Self { config: None, reply: None }
    }

    pub fn config(config: Config) -> Self {
        Self { config: Some(config), reply: None }
    }
}

/// Everything `ferry run` starts.
pub struct Bridge {
    config: Config,
    pub metrics: Metrics,
    /// What `/readyz` checks; replaced by a reload.
    pub readiness: SharedReadiness,
    /// The store: dead letters and the outbox.
    store: Arc<dyn Store>,
    /// This process's name on outbox leases, for every route and reload.
    leasing: Leasing,
    /// The running config and routes' bindings, for the admin server's replays.
    shared_config: Arc<RwLock<Config>>,
    shared_bindings: Arc<RwLock<RouteBindings>>,
    /// The plugins the running config uses, for `GET /plugins`.
    shared_plugins: Arc<RwLock<Vec<crate::api::PluginStatus>>>,
    senders: SenderMap,
    plugins: PluginState,
    routes: BTreeMap<String, RunningRoute>,
    pending: Vec<PlannedRoute>,
    generation: u64,
    ended_tx: mpsc::UnboundedSender<RouteEnded>,
    ended_rx: mpsc::UnboundedReceiver<RouteEnded>,
    /// `[endpoints.sqs]`, bound and waiting for `run`.
    sqs_endpoint: Option<super::endpoint::SqsEndpoint>,
    /// Its queues, for the routes (a reload builds with them too).
    endpoint_queues: EndpointQueues,
    /// The addresses of the listeners (port 0 picks one): announced on
    /// stdout and listed by `/readyz`.
    pub listeners: ferry_core::listeners::Listeners,
    /// Pause, resume and drain of each route, for the admin server.
    pub controls: Controls,
}

impl Bridge {
    /// Builds every part. Must run inside a (multi-threaded) tokio runtime:
    /// senders start connecting right away.
    pub async fn build(config: Config, metrics: Metrics) -> Result<Self, StartError> {
        let options = StoreOptions {
            op_seconds: Some(metrics.store_op_seconds.clone()),
            fault: injected_fault(),
            listen: true,
            clock: Clock::System,
        };
        check_urls(&config)?;
        let engine = store_engine(&config);
        let key = match engine {
            ferry_store::Engine::Embedded { .. } => "store.path",
            ferry_store::Engine::Postgres { .. } => "store.url",
        };
        let store = ferry_store::open(&engine, options).await.map_err(|e| StartError::new(key, e))?;
        info!(store = store.kind(), "store open");
        let leasing = leasing(&config);
        let listeners = ferry_core::listeners::Listeners::announcing();
        let section = super::parts::endpoint_section(&config)?;
        let sqs_endpoint = match &section {
            Some(c) => {
                Some(super::endpoint::SqsEndpoint::prepare(c, &config, store.clone(), &metrics, &listeners).await?)
            }
            None => None,
        };
        let endpoint_queues = sqs_endpoint.as_ref().map(super::endpoint::SqsEndpoint::topics);
        let controls = Controls::new(metrics.clone());
        let shared = Shared {
            store: &store,
            leasing: &leasing,
            queues: &endpoint_queues,
            listeners: &listeners,
            controls: &controls,
        };
        let prepared =
            prepare(&config, &metrics, &shared, &BTreeMap::new(), &SenderMap::new(), &PluginState::default()).await?;
        warn_orphaned_records(&config, store.as_ref());
        let shared_config = Arc::new(RwLock::new(config.clone()));
        let shared_bindings = Arc::new(RwLock::new(
            prepared.routes.iter().map(|p| (p.route.id.clone(), p.route.bindings.clone())).collect(),
        ));
        let shared_plugins = Arc::new(RwLock::new(super::parts::plugin_statuses(&config, prepared.plugins.registry())));
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        Ok(Self {
            config,
            metrics,
            readiness: Arc::new(RwLock::new(prepared.readiness)),
            shared_config,
            shared_bindings,
            shared_plugins,
            store,
            leasing,
            senders: prepared.senders,
            plugins: prepared.plugins,
            routes: BTreeMap::new(),
            pending: prepared.routes,
            generation: 0,
            ended_tx,
            ended_rx,
            sqs_endpoint,
            endpoint_queues,
            listeners,
            controls,
        })
    }

    /// The store.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The store and config the admin server's dead-letter endpoints use.
    pub fn store_access(&self) -> crate::runtime::admin::StoreAccess {
        crate::runtime::admin::StoreAccess {
            store: self.store.clone(),
            config: self.shared_config.clone(),
            bindings: self.shared_bindings.clone(),
            plugins: self.shared_plugins.clone(),
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
            let _ = ended.send(RouteEnded { id: task_id, generation, result });
        });
        self.controls.started(&id);
        self.routes.insert(id, RunningRoute { key, route, generation, stop, task });
    }

    /// Runs every route until `shutdown` fires or a route fails, applying
    /// reload requests meanwhile; then drains in-flight messages and closes
    /// the senders. Returns whether every route ended cleanly.
    pub async fn run(mut self, shutdown: CancellationToken, mut reloads: mpsc::Receiver<ReloadRequest>) -> bool {
        for planned in std::mem::take(&mut self.pending) {
            self.spawn(planned.key, planned.route, &shutdown);
        }
        // The endpoint stops with the daemon, after the routes (a route may
        // be receiving from or sending to its queues).
        let endpoint_stop = CancellationToken::new();
        let endpoint = self.sqs_endpoint.take().map(|e| e.spawn(endpoint_stop.clone()));
        let mut clean = true;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(request) = reloads.recv() => {
                    let ReloadRequest { config, reply } = request;
                    let answer = self.reload(config, &shutdown).await;
                    if let Some(reply) = reply {
                        let _ = reply.send(answer);
                    }
                }
                Some(RouteEnded { id, generation, result }) = self.ended_rx.recv() => {
                    if self.routes.get(&id).is_none_or(|r| r.generation != generation) {
                        continue; // a route a reload stopped
                    }
                    self.routes.remove(&id);
                    self.controls.stopped(&id);
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
        for (id, route) in std::mem::take(&mut self.routes) {
            self.controls.stopped(&id);
            route.stop.cancel();
            if let Err(e) = route.task.await {
                error!(error = %e, "route task panicked");
                clean = false;
            }
        }
        while let Ok(RouteEnded { id, result, .. }) = self.ended_rx.try_recv() {
            if let Err(e) = result {
                error!(route = %id, error = %e, "route failed while stopping");
                clean = false;
            }
        }
        for running in self.senders.values() {
            running.sender.close().await;
        }
        endpoint_stop.cancel();
        if let Some(mut task) = endpoint {
            // Requests being answered finish; long polls still waiting for
            // a message are cut after a second (they took nothing yet).
            match tokio::time::timeout(std::time::Duration::from_secs(1), &mut task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    error!(error = %e, "SQS endpoint task panicked");
                    clean = false;
                }
                Err(_) => task.abort(),
            }
        }
        // The other instances on a shared store count this one out now.
        if let Err(e) = self.store.leave(&self.leasing.owner).await {
            warn!(error = %e, "cannot tell the store this instance has stopped; the others see it when its leases expire");
        }
        info!("all routes stopped");
        clean
    }

    /// Applies a reload: builds what changed while everything runs, then
    /// drains and restarts only the routes whose parts changed. Anything
    /// that fails to build (config, plugin, init) refuses the whole reload
    /// and leaves the daemon as it was.
    async fn reload(&mut self, config: Option<Config>, shutdown: &CancellationToken) -> ReloadReply {
        let config = config.unwrap_or_else(|| self.config.clone());
        if config.admin != self.config.admin || config.store != self.config.store {
            warn!("reload: [admin] and [store] changes take effect at the next start");
        }
        if config.endpoints != self.config.endpoints {
            warn!("reload: [endpoints] changes take effect at the next start");
        }
        // The transports' own checks, as at a start: a part a transport
        // refuses would otherwise start and retry for ever.
        if let Err(e) = check_urls(&config) {
            Metrics::inc(&self.metrics.reloads, &[("outcome", "refused")]);
            error!(error = %e, "reload refused; everything keeps running as it was");
            return ReloadReply::refused(e);
        }
        let running: BTreeMap<String, RouteKey> =
            self.routes.iter().map(|(id, r)| (id.clone(), r.key.clone())).collect();
        let shared = Shared {
            store: &self.store,
            leasing: &self.leasing,
            queues: &self.endpoint_queues,
            listeners: &self.listeners,
            controls: &self.controls,
        };
        let prepared = prepare(&config, &self.metrics, &shared, &running, &self.senders, &self.plugins).await;
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                Metrics::inc(&self.metrics.reloads, &[("outcome", "refused")]);
                error!(error = %e, "reload refused; everything keeps running as it was");
                return ReloadReply::refused(e);
            }
        };
        // New chains first: deliveries that start from now on use them,
        // in-flight ones finish on the chain they started with.
        let mut swapped = Vec::new();
        for ChainSwap { route, chain_digest, chain } in prepared.swaps {
            if let Some(running) = self.routes.get_mut(&route) {
                running.route.processors.swap(chain);
                running.key.chain = chain_digest;
                swapped.push(route);
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
        let started: Vec<String> = prepared.routes.iter().map(|p| p.route.id.clone()).collect();
        for planned in prepared.routes {
            self.spawn(planned.key, planned.route, shutdown);
        }
        let old = std::mem::replace(&mut self.senders, prepared.senders);
        for (name, RunningSender { sender, .. }) in old {
            let still_used = self.senders.get(&name).is_some_and(|s| Arc::ptr_eq(&s.sender, &sender));
            if !still_used {
                sender.close().await;
            }
        }
        if let Ok(mut r) = self.readiness.write() {
            *r = prepared.readiness;
        }
        for id in replaced.iter().filter(|id| !started.contains(id)) {
            self.metrics.route_running.remove(&ferry_core::metrics::RouteLabels::new(id));
            self.controls.stopped(id);
        }
        warn_orphaned_records(&config, self.store.as_ref());
        if let Ok(mut shared) = self.shared_config.write() {
            *shared = config.clone();
        }
        if let Ok(mut shared) = self.shared_plugins.write() {
            *shared = super::parts::plugin_statuses(&config, self.plugins.registry());
        }
        if let Ok(mut shared) = self.shared_bindings.write() {
            *shared = self.routes.iter().map(|(id, r)| (id.clone(), r.route.bindings.clone())).collect();
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
        let routes = self
            .routes
            .keys()
            .map(|id| {
                let change = if started.contains(id) && replaced.contains(id) {
                    RouteChange::Restarted
                } else if started.contains(id) {
                    RouteChange::Started
                } else if swapped.contains(id) {
                    RouteChange::ProcessorsSwapped
                } else {
                    RouteChange::Kept
                };
                (id.clone(), RouteVersion { generation: self.controls.generation(id), change })
            })
            .collect();
        let stopped = replaced.into_iter().filter(|id| !started.contains(id)).collect();
        ReloadReply { outcome: ReloadOutcome::Applied, errors: Vec::new(), routes, stopped }
    }
}
