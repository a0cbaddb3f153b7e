//! The SQS endpoint (`[endpoints.sqs]`): its queues open on the daemon's
//! store, its listener bound at start (a taken port fails the start, as a
//! config error would), and the server run beside the routes.
//!
//! The queues' state lives in the serving instance's memory (written
//! through to the store), so one instance per store serves them: it holds
//! the store lease [`LEASE`] while it runs. Another instance on the same
//! shared store is refused at start with that reason rather than serving a
//! second, diverging copy of the queues; one that loses the lease (it
//! could not renew it in time) stops serving at once.

use std::sync::Arc;

use std::collections::BTreeSet;

use ferry_config::{Config, EndpointAuth, ReceiverConfig, SqsEndpointConfig};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::outbox::LeaseToken;
use ferry_core::route::Leasing;
use ferry_sqs_endpoint::{Engine, Identity, ServerOptions, Topics};
use ferry_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::parts::StartError;

/// (kind, role, name) of the endpoint in `/readyz` and
/// `ferry_transport_connected`.
pub const READINESS: (&str, &str, &str) = ("sqs_endpoint", "endpoint", "sqs");

/// The store lease of the instance that serves the endpoint. Not a route
/// partition's name: those always hold a `/`.
pub const LEASE: &str = "endpoints.sqs";

/// The endpoint, ready to serve.
pub struct SqsEndpoint {
    store: Arc<dyn Store>,
    leasing: Leasing,
    lease: LeaseToken,
    engine: Arc<Engine>,
    topics: Arc<Topics>,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
}

impl SqsEndpoint {
    /// Takes the [`LEASE`] (refused while another instance holds it), loads
    /// the queues and topics from the store, declares the configured ones,
    /// attaches the routes that receive from topics (and detaches those no
    /// longer configured) and binds the listener.
    pub async fn prepare(
        config: &SqsEndpointConfig,
        whole: &Config,
        store: Arc<dyn Store>,
        leasing: &Leasing,
        metrics: &Metrics,
    ) -> Result<Self, StartError> {
        let lease = store
            .acquire_lease(LEASE, &leasing.owner, leasing.ttl)
            .await
            .map_err(|e| StartError::new("endpoints.sqs", e))?
            .ok_or_else(|| {
                StartError::new(
                    "endpoints.sqs",
                    "another instance serves the SQS endpoint on this store (it holds the endpoints.sqs lease); \
                     its queues' state is in that instance's memory, so one instance per store may run \
                     [endpoints.sqs] for now. Run it on one instance, or start this one store.lease_ttl_secs \
                     after that one stopped",
                )
            })?;
        match Self::open(config, whole, store.clone(), leasing, lease.clone(), metrics).await {
            Ok(endpoint) => Ok(endpoint),
            Err(e) => {
                let _ = store.release_lease(LEASE, &lease).await;
                Err(e)
            }
        }
    }

    async fn open(
        config: &SqsEndpointConfig,
        whole: &Config,
        store: Arc<dyn Store>,
        leasing: &Leasing,
        lease: LeaseToken,
        metrics: &Metrics,
    ) -> Result<Self, StartError> {
        let identity = Identity { region: config.region.clone(), account: config.account.clone() };
        let engine = Engine::open(store.clone(), identity).await.map_err(|e| StartError::new("endpoints.sqs", e))?;
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
        // The receivers routes use (one left in the config but in no route
        // would collect messages that nothing ever takes).
        let routes: BTreeSet<(String, String)> = whole
            .routes
            .iter()
            .filter_map(|route| match whole.receivers.get(&route.receiver) {
                Some(ReceiverConfig::SqsEndpoint(e)) if !e.topic.is_empty() => {
                    Some((e.topic.clone(), route.receiver.clone()))
                }
                _ => None,
            })
            .collect();
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
        let auth = (config.auth == EndpointAuth::Verify)
            .then(|| config.access_keys.iter().map(|k| (k.id.clone(), k.secret.clone())).collect());
        let options = ServerOptions { advertised_url: config.advertised_url.clone(), metrics: metrics.clone(), auth };
        Ok(Self { store, leasing: leasing.clone(), lease, engine, topics, listener, options })
    }

    /// The topics and queues, for `sqs_endpoint` receivers and senders.
    pub fn topics(&self) -> Arc<Topics> {
        self.topics.clone()
    }

    /// Serves until `shutdown`, or until the lease is lost.
    pub fn spawn(self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let metrics = self.options.metrics.clone();
        let (kind, role, name) = READINESS;
        let gauge = labels(&[("kind", kind), ("role", role), ("name", name)]);
        tokio::spawn(async move {
            match self.listener.local_addr() {
                Ok(addr) => info!(
                    listen = %addr,
                    queues = self.engine.list("").len(),
                    topics = self.topics.list().len(),
                    "SQS endpoint listening"
                ),
                Err(e) => error!(error = %e, "SQS endpoint has no local address"),
            }
            metrics.connected.get_or_create(&gauge).set(1);
            let stop = shutdown.child_token();
            let renewing =
                tokio::spawn(keep_lease(self.store.clone(), self.lease.clone(), self.leasing.ttl, stop.clone()));
            let serving = stop.clone();
            if let Err(e) =
                ferry_sqs_endpoint::serve(
                    self.topics,
                    self.listener,
                    self.options,
                    async move { serving.cancelled().await },
                )
                .await
            {
                error!(error = %e, "SQS endpoint stopped");
            }
            stop.cancel();
            let _ = renewing.await;
            metrics.connected.get_or_create(&gauge).set(0);
            if let Err(e) = self.store.release_lease(LEASE, &self.lease).await {
                warn!(error = %e, "the endpoints.sqs lease was not released; another instance may take it when it expires");
            }
        })
    }
}

/// Renews the endpoint's lease every third of its time to live until
/// `stop`; one found taken, or not renewed for two thirds of it, stops the
/// endpoint (another instance may take the lease after the whole of it).
async fn keep_lease(store: Arc<dyn Store>, token: LeaseToken, ttl: std::time::Duration, stop: CancellationToken) {
    let mut renewed = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(ttl / 3) => {}
        }
        match tokio::time::timeout(ttl / 3, store.renew_lease(LEASE, &token, ttl)).await {
            Ok(Ok(true)) => renewed = std::time::Instant::now(),
            Ok(Ok(false)) => {
                error!("the endpoints.sqs lease was taken by another instance; this endpoint stops serving");
                stop.cancel();
                return;
            }
            Ok(Err(_)) | Err(_) if renewed.elapsed() > ttl * 2 / 3 => {
                error!("cannot renew the endpoints.sqs lease before it may expire; this endpoint stops serving");
                stop.cancel();
                return;
            }
            Ok(Err(e)) => warn!(error = %e, "cannot renew the endpoints.sqs lease, will retry"),
            Err(_) => warn!("renewing the endpoints.sqs lease timed out, will retry"),
        }
    }
}
