//! The SQS endpoint (`[endpoints.sqs]`): its queues open on the daemon's
//! store, its listener bound at start (a taken port fails the start, as a
//! config error would), and the server run beside the routes.

use std::sync::Arc;

use ferry_config::{EndpointAuth, SqsEndpointConfig};
use ferry_core::metrics::{Metrics, labels};
use ferry_sqs_endpoint::{Engine, Identity, ServerOptions};
use ferry_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::parts::StartError;

/// (kind, role, name) of the endpoint in `/readyz` and
/// `ferry_transport_connected`.
pub const READINESS: (&str, &str, &str) = ("sqs_endpoint", "endpoint", "sqs");

/// The endpoint, ready to serve.
pub struct SqsEndpoint {
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
}

impl SqsEndpoint {
    /// Loads the queues from the store, declares the configured ones and
    /// binds the listener.
    pub async fn prepare(
        config: &SqsEndpointConfig,
        store: Arc<dyn Store>,
        metrics: &Metrics,
    ) -> Result<Self, StartError> {
        let identity = Identity { region: config.region.clone(), account: config.account.clone() };
        let engine = Engine::open(store, identity).await.map_err(|e| StartError::new("endpoints.sqs", e))?;
        for (name, queue) in &config.queues {
            engine
                .declare(name, queue.attributes.clone())
                .await
                .map_err(|e| StartError::new(format!("endpoints.sqs.queues.{name}"), e))?;
        }
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .map_err(|e| StartError::new("endpoints.sqs.listen", format!("cannot listen on {}: {e}", config.listen)))?;
        let auth = (config.auth == EndpointAuth::Verify)
            .then(|| config.access_keys.iter().map(|k| (k.id.clone(), k.secret.clone())).collect());
        let options = ServerOptions { advertised_url: config.advertised_url.clone(), metrics: metrics.clone(), auth };
        Ok(Self { engine, listener, options })
    }

    /// The queues, for `sqs_endpoint` receivers and senders.
    pub fn engine(&self) -> Arc<Engine> {
        self.engine.clone()
    }

    /// Serves until `shutdown`.
    pub fn spawn(self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let metrics = self.options.metrics.clone();
        let (kind, role, name) = READINESS;
        let gauge = labels(&[("kind", kind), ("role", role), ("name", name)]);
        tokio::spawn(async move {
            match self.listener.local_addr() {
                Ok(addr) => info!(listen = %addr, queues = self.engine.list("").len(), "SQS endpoint listening"),
                Err(e) => error!(error = %e, "SQS endpoint has no local address"),
            }
            metrics.connected.get_or_create(&gauge).set(1);
            let stop = shutdown.clone();
            if let Err(e) =
                ferry_sqs_endpoint::serve(
                    self.engine,
                    self.listener,
                    self.options,
                    async move { stop.cancelled().await },
                )
                .await
            {
                error!(error = %e, "SQS endpoint stopped");
            }
            metrics.connected.get_or_create(&gauge).set(0);
        })
    }
}
