//! The admin HTTP server (`[admin] listen`): `GET /metrics` (Prometheus /
//! OpenMetrics text), `GET /healthz` (the process answers) and
//! `GET /readyz` (every receiver and sender connected, every route running;
//! otherwise 503 with a JSON body naming what is not ready).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ferry_core::metrics::Metrics;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// What must be up for `/readyz` to answer 200.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    /// (kind, role, name) of every receiver and sender in use; role is
    /// `receiver` or `sender`.
    pub transports: Vec<(String, String, String)>,
    /// Every route id.
    pub routes: Vec<String>,
}

/// Readiness as the running bridge sees it; a reload replaces it.
pub type SharedReadiness = Arc<RwLock<Readiness>>;

#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    readiness: SharedReadiness,
}

/// Binds `listen` and serves until `shutdown`. Binding errors are returned
/// so `ferry run` fails at start rather than running without its endpoints.
pub async fn serve(
    listen: SocketAddr,
    metrics: Metrics,
    readiness: SharedReadiness,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(AdminState { metrics, readiness });
    info!(%listen, "admin server listening");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await {
            error!(error = %e, "admin server failed");
        }
    }))
}

async fn metrics_text(State(state): State<AdminState>) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.render())
        .into_response()
}

async fn ready(State(state): State<AdminState>) -> Response {
    let m = &state.metrics;
    let readiness = match state.readiness.read() {
        Ok(r) => r.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let mut not_ready = Vec::new();
    for (kind, role, name) in &readiness.transports {
        if Metrics::gauge(&m.connected, &[("kind", kind), ("role", role), ("name", name)]) != 1 {
            not_ready.push(format!("{kind} {role} {name}: not connected"));
        }
    }
    for route in &readiness.routes {
        if Metrics::gauge(&m.route_running, &[("route", route)]) != 1 {
            not_ready.push(format!("route {route}: not running"));
        }
    }
    let ready = not_ready.is_empty();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = serde_json::json!({ "ready": ready, "not_ready": not_ready });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}
