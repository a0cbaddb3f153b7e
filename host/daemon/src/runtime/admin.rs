//! The admin HTTP server (`[admin] listen`): `GET /metrics` (Prometheus /
//! OpenMetrics text), `GET /healthz` (200 unless the [watchdog](crate::watchdog)
//! finds the daemon stalled: then 503, with a JSON body saying why) and
//! `GET /readyz` (every receiver and sender connected, every route running;
//! otherwise 503 with a JSON body naming what is not ready; either way the
//! body lists the bound listeners), and the store
//! for the `ferry dlq` / `ferry outbox` commands while the daemon runs:
//! `GET /dlq?route=&limit=`, `GET /dlq/{id}`, `POST /dlq/replay?ids=&route=&dry_run=`,
//! `POST /dlq/purge?ids=&route=`, `GET /outbox/stats`, and live messages of
//! a route as server-sent events for `ferry tap`:
//! `GET /tap/{route}?point=&binding=&sample=&rate=&payload_bytes=`.
//!
//! Runtime control ([`crate::control`], answers typed in [`crate::api`]):
//! `GET /routes` (each route's state, deliveries in flight and generation),
//! `POST /routes/{id}/pause`, `/resume`, `/drain?timeout_s=` (pause, then
//! wait until it holds nothing), and `POST /reload` (the config file and
//! the plugins, as SIGHUP does with `--watch`), which answers with each
//! route's generation now running, or why nothing changed. `GET /about`
//! says what runs and whether the server is read-only; `GET /plugins` the
//! plugins in use and each shadow's agreement; `GET /config` the running
//! config with its secrets masked and its fidelity report. `GET /routes`
//! also carries each route's receiver and bindings with their connection
//! states, outbox depth and oldest age, and last progress.
//!
//! `GET /` is the console, a page that shows all of the above (the only
//! path served without the token: it holds nothing and asks for it).
//!
//! With `admin.token` set every request needs `Authorization: Bearer
//! <token>` (401 otherwise); without one the server must listen on
//! loopback, or be `read_only` (the endpoints that change anything answer
//! 403). Requests carry no body (64 KiB at most is read) and time out after
//! five minutes (a replay waits for its senders to connect).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferry_config::Config;
use ferry_core::listeners::Listeners;
use ferry_core::metrics::Metrics;
use ferry_store::Store;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::runtime::readiness::SharedReadiness;
use crate::runtime::watchdog::Watchdog;

/// What `/readyz` reports: what must be up, and the bound listeners.
#[derive(Clone)]
pub struct ReadyView {
    pub readiness: SharedReadiness,
    pub listeners: Listeners,
}

/// What the dead-letter endpoints work on: the daemon's open store and its
/// current config (replays go through the running routes' bindings).
#[derive(Clone)]
pub struct StoreAccess {
    pub store: Arc<dyn Store>,
    pub config: Arc<RwLock<Config>>,
    /// The running routes' bindings: a replay sends through them (header
    /// mapper, sender, span and metrics of a first send), not through
    /// second connections under the same client ids.
    pub bindings: Arc<RwLock<crate::wiring::RouteBindings>>,
    /// The plugins the running config uses (`GET /plugins`).
    pub plugins: Arc<RwLock<Vec<crate::api::PluginStatus>>>,
}

/// Who may call what.
#[derive(Clone, Default)]
pub struct AdminAccess {
    /// Bearer token every request must carry, when set.
    pub token: Option<Arc<str>>,
    /// Refuse the endpoints that change anything.
    pub read_only: bool,
    /// Cancelled when the daemon starts to stop: `/readyz` answers 503
    /// from then on.
    pub stopping: CancellationToken,
}

/// What the control endpoints work on.
#[derive(Clone)]
pub struct ControlAccess {
    pub controls: crate::runtime::control::Controls,
    /// Where `POST /reload` sends the config it loaded.
    pub reloads: tokio::sync::mpsc::Sender<crate::wiring::ReloadRequest>,
    /// The config file `ferry run` was started with.
    pub config_path: std::path::PathBuf,
    /// Each route's messages a second, sampled while the server runs.
    pub rates: crate::runtime::control::RateMeter,
}

/// Everything the admin server answers from.
#[derive(Clone)]
pub struct AdminState {
    pub watchdog: Arc<Watchdog>,
    pub metrics: Metrics,
    pub ready: ReadyView,
    pub store: StoreAccess,
    pub access: AdminAccess,
    pub control: ControlAccess,
}

/// How long one admin request may take.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);
/// Request bodies read at most (the endpoints take none).
const BODY_LIMIT: usize = 64 * 1024;

/// Binds `listen` and serves until `shutdown`. Binding errors are returned
/// so `ferry run` fails at start rather than running without its endpoints.
pub async fn serve(
    listen: SocketAddr,
    state: AdminState,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let listen = listener.local_addr()?;
    state.ready.listeners.record("admin", "admin", listen);
    tokio::spawn(sample_rates(state.clone(), shutdown.clone()));
    let changes = Router::new()
        .route("/dlq/replay", post(dlq_replay))
        .route("/dlq/purge", post(dlq_purge))
        .route("/routes/{id}/pause", post(route_pause))
        .route("/routes/{id}/resume", post(route_resume))
        .route("/routes/{id}/drain", post(route_drain))
        .route("/reload", post(reload))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), refuse_when_read_only));
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .route("/dlq", get(dlq_list))
        .route("/dlq/{id}", get(dlq_show))
        .route("/outbox/stats", get(outbox_stats))
        .route("/routes", get(routes))
        .route("/about", get(about))
        .route("/plugins", get(plugins))
        .route("/config", get(config_view))
        .route("/tap/{route}", get(tap))
        .merge(changes)
        .layer(axum::middleware::from_fn_with_state(state.clone(), require_token))
        .route("/", get(console))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
        .with_state(state);
    info!(%listen, "admin server listening");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await {
            error!(error = %e, "admin server failed");
        }
    }))
}

/// With a token configured, a request without it (or with another) gets
/// 401. The comparison takes the same time wherever the tokens differ.
async fn require_token(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let Some(token) = &state.access.token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if same_secret(presented.as_bytes(), token.as_bytes()) {
        next.run(request).await
    } else {
        let mut response =
            error(StatusCode::UNAUTHORIZED, "this admin server wants Authorization: Bearer <admin.token>");
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        response
    }
}

/// Whether the token presented is the admin token, in time that does not
/// depend on where they differ (`subtle`; only the length may show).
fn same_secret(presented: &[u8], token: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    presented.ct_eq(token).into()
}

#[cfg(test)]
mod secret_tests {
    #[test]
    fn only_the_whole_token_is_the_token() {
        assert!(super::same_secret(b"s3cret-token", b"s3cret-token"));
        assert!(!super::same_secret(b"s3cret-toke", b"s3cret-token"), "a prefix");
        assert!(!super::same_secret(b"s3cret-tokenX", b"s3cret-token"), "longer");
        assert!(!super::same_secret(b"s3cret-tokem", b"s3cret-token"), "one byte off");
        assert!(!super::same_secret(b"", b"s3cret-token"));
    }
}

async fn refuse_when_read_only(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    if state.access.read_only {
        error(StatusCode::FORBIDDEN, "this admin server is read-only (admin.read_only)")
    } else {
        next.run(request).await
    }
}

async fn metrics_text(State(state): State<AdminState>) -> Response {
    // Encoding every series and reading /proc are synchronous work: done on
    // a blocking thread, so a scrape never holds an async worker.
    let metrics = state.metrics.clone();
    let text = match tokio::task::spawn_blocking(move || crate::exposition::render(&metrics)).await {
        Ok(text) => text,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

async fn health(State(state): State<AdminState>) -> Response {
    let report = state.watchdog.check();
    if report.stalled {
        warn!(reasons = ?report.reasons, "/healthz: stalled");
        json(StatusCode::SERVICE_UNAVAILABLE, &report)
    } else {
        json(StatusCode::OK, &report)
    }
}

async fn ready(State(state): State<AdminState>) -> Response {
    let m = &state.metrics;
    let readiness = match state.ready.readiness.read() {
        Ok(r) => r.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let mut not_ready = Vec::new();
    if state.access.stopping.is_cancelled() {
        not_ready.push("ferry is stopping".to_owned());
    }
    for (kind, role, name) in &readiness.transports {
        if Metrics::gauge(&m.connected, &[("kind", kind), ("role", role), ("name", name)]) != 1 {
            not_ready.push(format!("{kind} {role} {name}: not connected"));
        }
    }
    for route in &readiness.routes {
        if m.route_running.get_or_create(&ferry_core::metrics::RouteLabels::new(route)).get() != 1 {
            not_ready.push(format!("route {route}: not running"));
        }
    }
    for (route, binding) in &readiness.bindings {
        if Metrics::gauge(&m.binding_available, &[("route", route), ("binding", binding)]) != 1 {
            not_ready.push(format!("route {route} binding {binding}: target unavailable; its messages are held"));
        }
    }
    let ready = not_ready.is_empty();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    // A paused route is the operator's choice, not a fault: listed, ready.
    let paused = state.control.controls.paused(&readiness.routes);
    json(status, &crate::api::ReadyReply { ready, not_ready, paused, listeners: state.ready.listeners.all() })
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

fn error(status: StatusCode, e: impl std::fmt::Display) -> Response {
    json(status, &crate::api::ErrorReply { error: e.to_string() })
}

/// The ids of the routes the running config has, in its order.
fn route_ids(state: &AdminState) -> Vec<String> {
    let config = state.store.config.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    config.routes.iter().map(|r| r.id.clone()).collect()
}

/// A 404 when the running config has no route `id`.
fn unknown_route(state: &AdminState, id: &str) -> Option<Response> {
    (!route_ids(state).iter().any(|r| r == id)).then(|| error(StatusCode::NOT_FOUND, format!("no route {id:?}")))
}

/// Reads every route's received and acked counters once a second, for the
/// rates `GET /routes` answers, until `shutdown`.
async fn sample_rates(state: AdminState, shutdown: CancellationToken) {
    use ferry_core::metrics::RouteLabels;
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let ids = route_ids(&state);
        let now = std::time::Instant::now();
        for id in &ids {
            let labels = RouteLabels::new(id);
            let received = state.metrics.received.get(&labels).map_or(0, |c| c.get());
            let acked = state.metrics.acked.get(&labels).map_or(0, |c| c.get());
            state.control.rates.record(id, received, acked, now);
        }
        state.control.rates.retain(&ids);
    }
}

async fn routes(State(state): State<AdminState>) -> Response {
    let mut routes = state.control.controls.status(&route_ids(&state));
    for route in &mut routes {
        route.rates = state.control.rates.rates(&route.id);
    }
    let config = state.store.config.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    with_metrics(&state, routes, move |routes, text| crate::runtime::control::observe(routes, &config, text)).await
}

/// `GET /plugins`: what the running config uses, with each shadow's
/// agreement read from the metrics.
async fn plugins(State(state): State<AdminState>) -> Response {
    let plugins = state.store.plugins.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    with_metrics(&state, plugins, |plugins, text| crate::runtime::control::observe_shadows(plugins, text)).await
}

/// Answers `value` once `read` has filled it in from the metrics text.
/// Rendering every series is synchronous work: done off the async workers.
async fn with_metrics<T: serde::Serialize + Send + 'static>(
    state: &AdminState,
    mut value: T,
    read: impl FnOnce(&mut T, &str) + Send + 'static,
) -> Response {
    let metrics = state.metrics.clone();
    let observed = tokio::task::spawn_blocking(move || {
        read(&mut value, &metrics.render());
        value
    })
    .await;
    match observed {
        Ok(value) => json(StatusCode::OK, &value),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /config`: the running config, secrets masked, and its fidelity
/// report. The secret files' texts are read again from the config file, so
/// they are masked wherever they appear.
async fn config_view(State(state): State<AdminState>) -> Response {
    let config = state.store.config.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let path = state.control.config_path.clone();
    let built = tokio::task::spawn_blocking(move || {
        let file_secrets = ferry_config::load_with_secrets(&path).map(|(_, s)| s).unwrap_or_default();
        let masked = crate::runtime::masking::masked(&config, file_secrets)?;
        let (explain, losses) = crate::explain::report(&config);
        Ok::<_, String>(crate::api::ConfigReply { config: masked, explain, losses })
    })
    .await;
    match built {
        Ok(Ok(reply)) => json(StatusCode::OK, &reply),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn about(State(state): State<AdminState>) -> Response {
    json(
        StatusCode::OK,
        &crate::api::About {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: env!("FERRY_COMMIT").to_owned(),
            plugin_contract: format!("ferry:plugin@{}", ferry_wasm::registry::PLUGIN_VERSION),
            read_only: state.access.read_only,
        },
    )
}

/// The console's page (`GET /`): one file, compiled in, that asks for the
/// token itself, so it is served without one. It holds no data; every
/// reading it shows comes from the endpoints above, with the token.
const CONSOLE: &str = include_str!("console/index.html");

async fn console() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        CONSOLE,
    )
        .into_response()
}

async fn route_pause(State(state): State<AdminState>, Path(id): Path<String>) -> Response {
    unknown_route(&state, &id).unwrap_or_else(|| json(StatusCode::OK, &state.control.controls.pause(&id)))
}

async fn route_resume(State(state): State<AdminState>, Path(id): Path<String>) -> Response {
    unknown_route(&state, &id).unwrap_or_else(|| json(StatusCode::OK, &state.control.controls.resume(&id)))
}

/// `POST /routes/{id}/drain?timeout_s=`: how long to wait, 60 s unless
/// said, and less than the request's own limit.
#[derive(Deserialize)]
struct DrainQuery {
    timeout_s: Option<u64>,
}

async fn route_drain(State(state): State<AdminState>, Path(id): Path<String>, Query(q): Query<DrainQuery>) -> Response {
    if let Some(response) = unknown_route(&state, &id) {
        return response;
    }
    let timeout = std::time::Duration::from_secs(q.timeout_s.unwrap_or(60).min(REQUEST_TIMEOUT.as_secs() - 10));
    let reply = state.control.controls.drain(&id, timeout).await;
    // Paused either way; 504 says it still holds deliveries.
    let status = if reply.drained == Some(true) { StatusCode::OK } else { StatusCode::GATEWAY_TIMEOUT };
    json(status, &reply)
}

/// `POST /reload`: loads the config file again and applies it with the
/// plugins, as SIGHUP does under `--watch`; answers what runs now, or
/// (422) why nothing changed.
async fn reload(State(state): State<AdminState>) -> Response {
    use crate::api::{ReloadOutcome, ReloadReply};
    let path = state.control.config_path.clone();
    let loaded = tokio::task::spawn_blocking(move || ferry_config::load(&path)).await;
    let config = match loaded {
        Ok(Ok(config)) => config,
        Ok(Err(e)) => {
            Metrics::inc(&state.metrics.reloads, &[("outcome", "refused")]);
            warn!(error = %e, "POST /reload refused: invalid configuration; everything keeps running as it was");
            return json(StatusCode::UNPROCESSABLE_ENTITY, &ReloadReply::refused(e));
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    info!(config = %state.control.config_path.display(), "POST /reload: reloading config and plugins");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let request = crate::wiring::ReloadRequest { config: Some(config), reply: Some(tx) };
    if state.control.reloads.send(request).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "ferry is stopping; nothing was reloaded");
    }
    match rx.await {
        Ok(reply) if reply.outcome == ReloadOutcome::Applied => json(StatusCode::OK, &reply),
        Ok(reply) => json(StatusCode::UNPROCESSABLE_ENTITY, &reply),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "ferry stopped before the reload was applied"),
    }
}

/// `GET /dlq?route=&limit=`.
#[derive(Deserialize)]
struct ListQuery {
    route: Option<String>,
    limit: Option<usize>,
}

/// `POST /dlq/replay` and `/dlq/purge`: `ids=1,2,3`, `route=`, `dry_run=true`.
#[derive(Deserialize)]
struct SelectQuery {
    ids: Option<String>,
    route: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

impl SelectQuery {
    fn ids(&self) -> Result<Vec<u64>, String> {
        match &self.ids {
            None => Ok(Vec::new()),
            Some(list) => list
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.trim().parse().map_err(|_| format!("not a dead-letter id: {s:?}")))
                .collect(),
        }
    }
}

async fn dlq_list(State(state): State<AdminState>, Query(q): Query<ListQuery>) -> Response {
    match state.store.store.dead_letters(q.route.as_deref(), q.limit.unwrap_or(100)).await {
        Ok(entries) => json(StatusCode::OK, &entries),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn dlq_show(State(state): State<AdminState>, Path(id): Path<u64>) -> Response {
    match state.store.store.dead_letter(id).await {
        Ok(entry) => json(StatusCode::OK, &entry),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn dlq_replay(State(state): State<AdminState>, Query(q): Query<SelectQuery>) -> Response {
    let ids = match q.ids() {
        Ok(ids) => ids,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let dry_run = q.dry_run;
    let config = match state.store.config.read() {
        Ok(c) => c.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let bindings = match state.store.bindings.read() {
        Ok(s) => s.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    info!(?ids, route = ?q.route, dry_run, "dead-letter replay requested");
    let route = q.route.as_deref();
    match crate::runtime::dead_letters::replay_entries(
        &config,
        state.store.store.as_ref(),
        &ids,
        route,
        dry_run,
        Some(bindings),
        &state.metrics,
    )
    .await
    {
        Ok(report) => json(StatusCode::OK, &report),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn dlq_purge(State(state): State<AdminState>, Query(q): Query<SelectQuery>) -> Response {
    let ids = match q.ids() {
        Ok(ids) => ids,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    info!(?ids, route = ?q.route, "dead-letter purge requested");
    match crate::runtime::dead_letters::purge_entries(state.store.store.as_ref(), &ids, q.route.as_deref()).await {
        Ok(purged) => json(StatusCode::OK, &crate::api::PurgeReply { purged }),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn outbox_stats(State(state): State<AdminState>) -> Response {
    match crate::runtime::dead_letters::stats(state.store.store.as_ref()).await {
        Ok(report) => json(StatusCode::OK, &report),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /tap/{route}`: what [`ferry_core::tap::TapRequest`] takes.
#[derive(Debug, Deserialize)]
struct TapQuery {
    /// `ingress` (default), `after-processors` or `egress`.
    point: Option<String>,
    /// At `egress`, only this binding's copies.
    binding: Option<String>,
    /// Every n-th message (default 1).
    sample: Option<u64>,
    /// Events a second at most (default 10, at most 1000).
    rate: Option<u32>,
    /// Payload preview bytes (default 256, at most 65536).
    payload_bytes: Option<usize>,
}

/// Live messages of a route as server-sent events, one JSON object per
/// event, until the client goes away or the daemon stops. Opening a tap
/// changes nothing for delivery (see [`ferry_core::tap`]).
async fn tap(State(state): State<AdminState>, Path(route): Path<String>, Query(q): Query<TapQuery>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use ferry_core::tap::{TapPoint, TapRequest};
    let bindings = match state.store.config.read() {
        Ok(config) => config
            .routes
            .iter()
            .find(|r| r.id == route)
            .map(|r| r.bindings.iter().map(|b| b.id().to_owned()).collect::<Vec<_>>()),
        Err(_) => None,
    };
    let Some(bindings) = bindings else {
        return error(StatusCode::NOT_FOUND, format!("no route {route:?}"));
    };
    let point = q.point.as_deref().unwrap_or("ingress");
    let Some(point) = TapPoint::parse(point) else {
        return error(StatusCode::BAD_REQUEST, format!("point {point:?} is not ingress, after-processors or egress"));
    };
    if let Some(b) = &q.binding {
        if point != TapPoint::Egress {
            return error(StatusCode::BAD_REQUEST, "binding is for point=egress");
        }
        if !bindings.contains(b) {
            return error(StatusCode::NOT_FOUND, format!("route {route:?} has no binding {b:?}"));
        }
    }
    let request = TapRequest {
        route,
        point,
        binding: q.binding,
        sample: q.sample.unwrap_or(1).max(1),
        rate: q.rate.unwrap_or(10).clamp(1, 1000),
        payload_bytes: q.payload_bytes.unwrap_or(256).min(64 * 1024),
    };
    let stream = state.metrics.taps.open(request);
    let stopping = state.access.stopping.clone();
    let events = futures_util::stream::unfold((stream, stopping), |(mut stream, stopping)| async move {
        let event = tokio::select! {
            event = stream.events.recv() => event?,
            // A stop must not wait for a tap's reader to go away.
            () = stopping.cancelled() => return None,
        };
        let data = serde_json::to_string(&event).unwrap_or_default();
        Some((Ok::<_, std::convert::Infallible>(Event::default().data(data)), (stream, stopping)))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}
