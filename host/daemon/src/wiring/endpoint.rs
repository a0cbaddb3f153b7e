//! The SQS endpoint (`[endpoints.sqs]`): its queues open on the daemon's
//! store, its listener bound at start (a taken port fails the start, as a
//! config error would), and the server run beside the routes.
//!
//! On the embedded store the queues live in this process's memory,
//! written through; on a shared store (PostgreSQL) they live in the
//! database's tables, and every instance on it serves the same queues at
//! once: any of them may take any request, and routes on any of them may
//! send to or receive from the queues.

use std::sync::Arc;

use ferry_config::Config;
use ferry_core::clock::Clock;
use ferry_core::metrics::{Metrics, labels};
use ferry_sqs_endpoint::config::{EndpointAuth, SqsEndpointConfig};
use ferry_sqs_endpoint::{Engine, Identity, ServerOptions, Topics};
use ferry_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::parts::StartError;

/// (kind, role, name) of the endpoint in `/readyz` and
/// `ferry_transport_connected`.
pub const READINESS: (&str, &str, &str) =
    (<ferry_sqs_endpoint::SqsEndpoint as ferry_core::transport::TypedTransport>::KIND, "endpoint", "sqs");

/// The endpoint, ready to serve.
pub struct SqsEndpoint {
    engine: Arc<Engine>,
    topics: Arc<Topics>,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
}

impl SqsEndpoint {
    /// Loads the queues and topics from the store, declares the configured
    /// ones, attaches the routes that receive from topics (and detaches
    /// those no longer configured) and binds the listener.
    pub async fn prepare(
        config: &SqsEndpointConfig,
        whole: &Config,
        store: Arc<dyn Store>,
        metrics: &Metrics,
        listeners: &ferry_core::listeners::Listeners,
    ) -> Result<Self, StartError> {
        let identity = Identity { region: config.region.clone(), account: config.account.clone() };
        let engine = match store.shared_db() {
            Some(db) => Engine::open_shared(db, identity, Clock::System),
            None => Engine::open(store.clone(), identity, Clock::System)
                .await
                .map_err(|e| StartError::new("endpoints.sqs", e))?,
        };
        for (name, queue) in &config.queues {
            engine
                .declare(name, queue.attributes.clone())
                .await
                .map_err(|e| StartError::new(format!("endpoints.sqs.queues.{name}"), e))?;
        }
        let topics = Topics::open(engine.clone(), store.clone(), metrics.clone())
            .await
            .map_err(|e| StartError::new("endpoints.sqs", e))?;
        for (name, topic) in &config.topics {
            topics
                .create(name, topic.attributes.clone(), Default::default())
                .await
                .map_err(|e| StartError::new(format!("endpoints.sqs.topics.{name}"), e))?;
        }
        let routes = ferry_sqs_endpoint::transport::topic_receivers(whole);
        topics.retain_routes(&routes).await.map_err(|e| StartError::new("endpoints.sqs", e))?;
        for (topic, receiver) in &routes {
            topics
                .attach(topic, receiver)
                .await
                .map_err(|e| StartError::new(format!("receivers.{receiver}.topic"), e))?;
        }
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .map_err(|e| StartError::new("endpoints.sqs.listen", format!("cannot listen on {}: {e}", config.listen)))?;
        if let Ok(addr) = listener.local_addr() {
            listeners.record("sqs_endpoint", "sqs", addr);
        }
        let auth = (config.auth == EndpointAuth::Verify)
            .then(|| config.access_keys.iter().map(|k| (k.id.clone(), k.secret.clone())).collect());
        let grants = config
            .access_keys
            .iter()
            .filter(|k| !k.actions.is_empty() || !k.resources.is_empty())
            .map(|k| (k.id.clone(), k.grant()))
            .collect();
        let options =
            ServerOptions { advertised_url: config.advertised_url.clone(), metrics: metrics.clone(), auth, grants };
        Ok(Self { engine, topics, listener, options })
    }

    /// The topics and queues, for `sqs_endpoint` receivers and senders.
    pub fn topics(&self) -> Arc<Topics> {
        self.topics.clone()
    }

    /// Serves until `shutdown`.
    pub fn spawn(self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let metrics = self.options.metrics.clone();
        let (kind, role, name) = READINESS;
        let gauge = labels(&[("kind", kind), ("role", role), ("name", name)]);
        tokio::spawn(async move {
            let queues = self.engine.list("").await.map_or(0, |q| q.len());
            match self.listener.local_addr() {
                Ok(addr) => info!(
                    listen = %addr,
                    queues,
                    topics = self.topics.list().len(),
                    "SQS endpoint listening"
                ),
                Err(e) => error!(error = %e, "SQS endpoint has no local address"),
            }
            metrics.connected.get_or_create(&gauge).set(1);
            let served = ferry_sqs_endpoint::serve(self.topics, self.listener, self.options, async move {
                shutdown.cancelled().await
            });
            if let Err(e) = served.await {
                error!(error = %e, "SQS endpoint stopped");
            }
            metrics.connected.get_or_create(&gauge).set(0);
        })
    }
}
