//! Turns a validated [`Config`] into running parts: senders, receivers,
//! plugin processors and routes.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_config::{Config, ReceiverConfig, SenderConfig};
use ferry_core::dlq::FileDeadLetterStore;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Receiver, Sender, SharedProcessor};
use ferry_core::route::{Binding, Route, RoutePolicy};
use ferry_transport_amqp10::{Amqp10Receiver, Amqp10Sender};
use ferry_transport_amqp091::{Amqp091Receiver, Amqp091Sender};
use ferry_transport_mqtt::{MqttReceiver, MqttSender};
use ferry_transport_sqs::{SqsReceiver, SqsSender};
use ferry_wasm::{PluginEngine, PluginLimits, PluginRegistry, WasmProcessor};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::admin::Readiness;

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

/// Loads the plugins a config needs and builds one processor per
/// `[[routes.processors]]` entry, calling each plugin's `init`. Used by
/// `run` and by `validate`, which stops here.
pub fn build_processors(config: &Config, metrics: &Metrics) -> Result<Vec<Vec<SharedProcessor>>, StartError> {
    let needs_plugins = config.routes.iter().any(|r| !r.processors.is_empty());
    if !needs_plugins {
        return Ok(config.routes.iter().map(|_| Vec::new()).collect());
    }
    let limits = PluginLimits {
        call_timeout: Duration::from_millis(config.plugins.call_timeout_ms),
        memory_limit_bytes: usize::try_from(config.plugins.memory_limit_mib << 20).unwrap_or(usize::MAX),
    };
    let engine = PluginEngine::new(limits)
        .map_err(|e| StartError::new("plugins", format!("cannot start the plugin engine: {e}")))?;
    let registry = PluginRegistry::load_dir(&engine, Path::new(&config.plugins.dir))
        .map_err(|e| StartError::new("plugins.dir", e))?;
    let mut all = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let mut chain: Vec<SharedProcessor> = Vec::new();
        for (j, p) in route.processors.iter().enumerate() {
            let key = format!("routes[{i}].processors[{j}]");
            let plugin = registry.get(&p.plugin).map_err(|e| StartError::new(format!("{key}.plugin"), e))?;
            let processor = WasmProcessor::new(&engine, plugin, &route.id, p.config.to_string(), metrics.clone())
                .map_err(|e| StartError::new(format!("{key}.config"), e))?;
            chain.push(Arc::new(processor));
        }
        all.push(chain);
    }
    Ok(all)
}

/// Everything `ferry run` starts.
pub struct Bridge {
    pub routes: Vec<Arc<Route>>,
    /// What `/readyz` checks.
    pub readiness: Readiness,
    senders: Vec<Arc<dyn Sender>>,
    pub metrics: Metrics,
}

impl Bridge {
    /// Builds every part. Must run inside a tokio runtime (senders start
    /// connecting right away).
    pub fn build(config: &Config, metrics: Metrics) -> Result<Self, StartError> {
        let processors = build_processors(config, &metrics)?;
        let dlq = Arc::new(FileDeadLetterStore::in_dir(Path::new(&config.store.path)));
        let mut senders: std::collections::BTreeMap<String, Arc<dyn Sender>> = std::collections::BTreeMap::new();
        let mut transports: Vec<(String, String, String)> = Vec::new();
        for (name, s) in &config.senders {
            let sender: Arc<dyn Sender> = match s {
                SenderConfig::Mqtt(m) => Arc::new(
                    MqttSender::start(name, m.clone(), metrics.clone())
                        .map_err(|e| StartError::new(format!("senders.{name}"), e))?,
                ),
                SenderConfig::Sqs(q) => SqsSender::start(name, q.clone(), metrics.clone()),
                SenderConfig::Amqp10(a) => Amqp10Sender::start(name, a.clone(), metrics.clone()),
                SenderConfig::Amqp091(a) => Amqp091Sender::start(name, a.clone(), metrics.clone()),
            };
            transports.push((kind_of_sender(s).to_owned(), "sender".to_owned(), name.clone()));
            senders.insert(name.clone(), sender);
        }
        let mut routes = Vec::new();
        for (route_config, chain) in config.routes.iter().zip(processors) {
            let receiver: Arc<dyn Receiver> = match config.receivers.get(&route_config.receiver) {
                Some(ReceiverConfig::Mqtt(m)) => Arc::new(MqttReceiver::new(
                    &route_config.receiver,
                    m.clone(),
                    u16::try_from(route_config.max_in_flight).unwrap_or(u16::MAX),
                    metrics.clone(),
                )),
                Some(ReceiverConfig::Sqs(q)) => {
                    Arc::new(SqsReceiver::new(&route_config.receiver, q.clone(), metrics.clone()))
                }
                Some(ReceiverConfig::Amqp10(a)) => {
                    Arc::new(Amqp10Receiver::new(&route_config.receiver, a.clone(), metrics.clone()))
                }
                Some(ReceiverConfig::Amqp091(a)) => {
                    Arc::new(Amqp091Receiver::new(&route_config.receiver, a.clone(), metrics.clone()))
                }
                None => return Err(StartError::new("routes", format!("unknown receiver {:?}", route_config.receiver))),
            };
            if let Some(r) = config.receivers.get(&route_config.receiver) {
                transports.push((kind_of_receiver(r).to_owned(), "receiver".to_owned(), route_config.receiver.clone()));
            }
            let mut bindings = Vec::new();
            for b in &route_config.bindings {
                let sender = senders
                    .get(&b.sender)
                    .ok_or_else(|| StartError::new("routes", format!("unknown sender {:?}", b.sender)))?;
                bindings.push(Binding { id: b.id().to_owned(), sender: sender.clone(), address: b.address.clone() });
            }
            routes.push(Arc::new(Route {
                id: route_config.id.clone(),
                source_id: route_config.receiver.clone(),
                receiver,
                processors: chain,
                bindings,
                policy: RoutePolicy::from_config(route_config),
                dlq: dlq.clone(),
                metrics: metrics.clone(),
            }));
        }
        let readiness = Readiness { transports, routes: config.routes.iter().map(|r| r.id.clone()).collect() };
        Ok(Self { routes, readiness, senders: senders.into_values().collect(), metrics })
    }

    /// Runs every route until `shutdown` fires or a route fails, then
    /// drains in-flight messages and closes the senders. Returns whether
    /// every route ended cleanly.
    pub async fn run(self, shutdown: CancellationToken) -> bool {
        let mut tasks = JoinSet::new();
        for route in &self.routes {
            let route = route.clone();
            let token = shutdown.clone();
            tasks.spawn(async move { (route.id.clone(), route.run(token).await) });
        }
        let mut clean = true;
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((_, Ok(()))) => {}
                Ok((id, Err(e))) => {
                    error!(route = %id, error = %e, "route failed; stopping the daemon");
                    clean = false;
                    shutdown.cancel();
                }
                Err(e) => {
                    error!(error = %e, "route task panicked; stopping the daemon");
                    clean = false;
                    shutdown.cancel();
                }
            }
        }
        for sender in &self.senders {
            sender.close().await;
        }
        info!("all routes stopped");
        clean
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
