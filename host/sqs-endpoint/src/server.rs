//! The HTTP server: one handler for every path, as SQS has; the protocol is
//! told from the method and headers, the action from the request.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ferry_core::metrics::{Metrics, labels};
use serde_json::Value;
use tracing::{debug, warn};

use crate::actions::{self, Context};
use crate::engine::Engine;
use crate::error::SqsError;
use crate::protocol::{self, Protocol};
use crate::records::Identity;
use crate::sns::topics::Topics;

/// The largest request body read: a 1 MiB message grows when its binary
/// attributes are base64 and its text is escaped or form-encoded.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// The longest a request may take, reading its body included: a long poll
/// waits 20 s at most, so anything past this is a stuck or hostile client.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How the server runs.
#[derive(Clone)]
pub struct ServerOptions {
    /// `scheme://host[:port]` for queue URLs; `None`: `http://` and the
    /// request's Host header.
    pub advertised_url: Option<String>,
    pub metrics: Metrics,
    /// `Some`: every request must be signed (SigV4) with one of these
    /// access keys.
    pub auth: Option<crate::auth::Keys>,
    /// What each key may do; a key not named here may do everything.
    pub grants: BTreeMap<String, crate::auth::Grant>,
}

struct App {
    engine: Arc<Engine>,
    topics: Arc<Topics>,
    options: ServerOptions,
    local: SocketAddr,
}

/// Serves the endpoint (SQS, and SNS over `topics`) on `listener` until
/// `shutdown` completes. Also keeps the queue gauges current.
pub async fn serve(
    topics: Arc<Topics>,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let engine = topics.queues.clone();
    let stopping = topics.clone();
    let gauges = tokio::spawn(keep_gauges(engine.clone(), options.metrics.clone()));
    let app = Arc::new(App { engine, topics, options, local });
    let router = axum::Router::new()
        .fallback(handle)
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
        .with_state(app);
    let served = axum::serve(listener, router).with_graceful_shutdown(shutdown).await;
    gauges.abort();
    stopping.stop();
    served
}

/// Sets the queue gauges every second (every 5 s on a shared store, where
/// it is a query over every queue); once a minute, sweeps what the queues
/// have let expire.
async fn keep_gauges(engine: Arc<Engine>, metrics: Metrics) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let every = if engine.is_shared() { 5 } else { 1 };
    let mut ticks = 0u64;
    loop {
        tick.tick().await;
        ticks += 1;
        if ticks.is_multiple_of(60)
            && let Err(e) = engine.sweep().await
        {
            warn!(error = %e, "the SQS endpoint cannot remove expired messages; it tries again in a minute");
        }
        if !ticks.is_multiple_of(every) {
            continue;
        }
        let depths = match engine.depths().await {
            Ok(depths) => depths,
            Err(e) => {
                debug!(error = %e, "the SQS endpoint's queue depths cannot be read");
                continue;
            }
        };
        let now = engine.now_ms();
        metrics.gauge_family(&crate::MESSAGES).clear();
        metrics.gauge_family(&crate::OLDEST_AGE_SECONDS).clear();
        for (queue, depth) in depths {
            for (state, n) in [("visible", depth.visible), ("in_flight", depth.in_flight), ("delayed", depth.delayed)] {
                metrics
                    .gauge_family(&crate::MESSAGES)
                    .get_or_create(&labels(&[("queue", &queue), ("state", state)]))
                    .set(n as i64);
            }
            let age = depth.oldest_ms.map_or(0, |t| (now - t).max(0) / 1000);
            metrics.gauge_family(&crate::OLDEST_AGE_SECONDS).get_or_create(&labels(&[("queue", &queue)])).set(age);
        }
    }
}

/// The `SenderId` of a message sent without `auth = "verify"`.
const ANONYMOUS_SENDER: &str = "000000000000";

async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = request.into_parts();
    let protocol = protocol::protocol_of(&parts.method, &parts.headers);
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(_) => return error(&app, protocol, "", "", &SqsError::too_large(MAX_REQUEST_BYTES), &request_id),
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    // The access key that signed the request is its sender, as SenderId.
    let (refused, signer) = match app.options.auth.as_ref().map(|keys| crate::auth::verify(&parts, &body, keys, now)) {
        Some(Ok(key_id)) => (None, Some(key_id)),
        Some(Err(e)) => (Some(e), None),
        None => (None, None),
    };
    let call = match protocol::parse(protocol, &parts.uri, &parts.headers, &body) {
        Ok(call) => call,
        Err(e) => return error(&app, protocol, "", "", refused.as_ref().unwrap_or(&e), &request_id),
    };
    // A ConfirmSubscription needs no signature, as in SNS: the webhook
    // that visits its SubscribeURL holds no keys; the token is the secret.
    if let Some(e) = refused
        && !(protocol == Protocol::Query && call.action == "ConfirmSubscription")
    {
        // An SNS request hears it in SNS's XML namespace.
        let action = if crate::sns::is_sns(&call.action) { call.action.as_str() } else { "" };
        return error(&app, protocol, action, "", &e, &request_id);
    }
    if let Some(key) = &signer
        && let Some(grant) = app.options.grants.get(key)
    {
        let resource = resource_of(&app.engine.identity, &call.action, &call.input);
        if !grant.allows(&call.action, resource.as_deref()) {
            let e = SqsError::access_denied(key, &call.action, resource.as_deref());
            let action = if crate::sns::is_sns(&call.action) { call.action.as_str() } else { "" };
            return error(&app, protocol, action, "", &e, &request_id);
        }
    }
    let base_url = match &app.options.advertised_url {
        Some(url) => url.clone(),
        None => {
            // The Host header is the caller's: only a plain host[:port]
            // may go into queue URLs and SNS SubscribeURLs.
            let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok()).filter(|h| plain_authority(h));
            format!("http://{}", host.map_or_else(|| app.local.to_string(), str::to_owned))
        }
    };
    if crate::sns::is_sns(&call.action) && protocol == Protocol::Query {
        let action = call.action.as_str();
        return match crate::sns::run(&app.topics, &base_url, action, &call.input).await {
            Ok(result) => {
                Metrics::inc(
                    &app.options.metrics.counter_family(&crate::REQUESTS),
                    &[("action", action), ("queue", ""), ("code", "ok")],
                );
                reply(StatusCode::OK, "text/xml", crate::sns::xml_result(action, &result, &request_id), &request_id)
            }
            Err(e) => error(&app, protocol, action, "", &e, &request_id),
        };
    }
    let region = crate::auth::signing_region(&parts);
    let region = region.as_deref().unwrap_or(&app.engine.identity.region);
    let trace_header = parts.headers.get("x-amzn-trace-id").and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    let sender_id = signer.as_deref().unwrap_or(ANONYMOUS_SENDER);
    let cx = Context { engine: &app.engine, base_url: &base_url, sender_id, trace_header, region };
    // Labels only name queues and actions that exist, so requests for
    // made-up names cannot grow the metrics without bound.
    let named = named_queue(&app.engine.identity, region, &call.input);
    let queue = match named {
        Some(q) if app.engine.exists(&q).await.unwrap_or(false) => q,
        _ => String::new(),
    };
    let Some(action) = actions::Action::parse(&call.action) else {
        return error(&app, protocol, "unknown", &queue, &SqsError::invalid_action(&call.action), &request_id);
    };
    match actions::run(&cx, action, &call.input).await {
        Ok(result) => {
            Metrics::inc(
                &app.options.metrics.counter_family(&crate::REQUESTS),
                &[("action", action.name()), ("queue", &queue), ("code", "ok")],
            );
            match protocol {
                Protocol::Json => reply(StatusCode::OK, "application/x-amz-json-1.0", result.to_string(), &request_id),
                Protocol::Query if accepts_json(&parts.headers) => reply(
                    StatusCode::OK,
                    "application/json",
                    protocol::query_json_result(&call.action, result, &request_id).to_string(),
                    &request_id,
                ),
                Protocol::Query => {
                    reply(StatusCode::OK, "text/xml", protocol::xml_result(action, &result, &request_id), &request_id)
                }
            }
        }
        Err(e) => error(&app, protocol, action.name(), &queue, &e, &request_id),
    }
}

/// Whether a query request asks for JSON (`Accept: application/json`), as
/// AWS answers it then.
fn accepts_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json"))
}

fn reply(status: StatusCode, content_type: &'static str, body: String, request_id: &str) -> Response {
    let mut response = (status, [(header::CONTENT_TYPE, content_type)], Body::from(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert("x-amzn-requestid", v);
    }
    response
}

fn error(app: &App, protocol: Protocol, action: &str, queue: &str, e: &SqsError, request_id: &str) -> Response {
    Metrics::inc(
        &app.options.metrics.counter_family(&crate::REQUESTS),
        &[("action", action), ("queue", queue), ("code", e.code())],
    );
    if e.kind == crate::error::ErrorKind::Internal {
        tracing::warn!(action, queue, error = %e, "SQS endpoint request failed");
    }
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    match protocol {
        Protocol::Json => {
            let mut response =
                reply(status, "application/x-amz-json-1.0", protocol::json_error(e).to_string(), request_id);
            if let Ok(v) = HeaderValue::from_str(&format!("{};{}", e.code(), e.fault())) {
                response.headers_mut().insert("x-amzn-query-error", v);
            }
            response
        }
        Protocol::Query => {
            let xmlns = if crate::sns::is_sns(action) { crate::sns::XMLNS } else { protocol::XMLNS };
            reply(status, "text/xml", protocol::xml_error(xmlns, e, request_id), request_id)
        }
    }
}

/// The queue (`sqs.NAME`, in whichever region) or topic (`sns.NAME`) a
/// call names, for the key's grant; `None` when it names neither (the list
/// actions).
fn resource_of(identity: &Identity, action: &str, input: &Value) -> Option<String> {
    if crate::sns::is_sns(action) {
        let arn = input.get("TopicArn").and_then(Value::as_str);
        let topic = arn.and_then(|a| a.rsplit(':').next()).or_else(|| input.get("Name").and_then(Value::as_str));
        // Subscription actions name the subscription's ARN: its topic is
        // the part before the id.
        let from_subscription = || {
            let arn = input.get("SubscriptionArn").and_then(Value::as_str)?;
            let mut parts = arn.rsplit(':');
            parts.next();
            parts.next()
        };
        return topic.or_else(from_subscription).map(|t| format!("sns.{t}"));
    }
    let key = named_queue(identity, &identity.region, input)?;
    Some(format!("sqs.{}", identity.split(&key).1))
}

/// The key of the queue a call names: its `QueueUrl`, else its `QueueName`
/// in `region`.
fn named_queue(identity: &Identity, region: &str, input: &Value) -> Option<String> {
    actions::queue_name(identity, input).ok().or_else(|| {
        let name = input.get("QueueName").and_then(Value::as_str)?;
        Some(identity.key(region, name))
    })
}

/// Whether `host` is a bare `host[:port]` (a name, an IPv4 or a bracketed
/// IPv6 address): no user info, path, query, fragment or space that would
/// make a URL built on it point somewhere else.
fn plain_authority(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

#[cfg(test)]
mod authority_tests {
    use super::plain_authority;

    #[test]
    fn only_a_bare_host_and_port_is_used_in_urls() {
        for ok in ["127.0.0.1:4566", "sqs.local", "[::1]:80"] {
            assert!(plain_authority(ok), "{ok}");
        }
        for bad in ["", "evil.example/x?", "user@evil.example", "a b", "h#frag", "h/../x"] {
            assert!(!plain_authority(bad), "{bad}");
        }
    }
}
