//! The webhook receiver: ferry listens, each POST is one message, and the
//! reply waits for the route, so that nothing is acknowledged to the caller
//! before it is safe.
//!
//! | reply | when |
//! |---|---|
//! | 200 (`direct_hold`) / 202 (`shared_outbox`) | every binding accepted the message / its records are durable; a processor's drop is a success too |
//! | 400 | a `wire_format = "json"` body that is malformed |
//! | 401 | the bearer token or HMAC signature is missing or wrong |
//! | 404 / 405 | another path / another method than POST |
//! | 408 | the request did not arrive within `read_timeout_ms` |
//! | 413 | the body is over `max_body_bytes` |
//! | 422 | the route failed the message for good and dropped it (`on_permanent_failure = "drop"`) |
//! | 503 + `Retry-After` | the route is full, a target is down (the route released the message), it was not settled within `reply_timeout_ms`, or the daemon is stopping |

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ferry_config::WireFormat;

use crate::config::HttpReceiverConfig;
use ferry_core::TransportError;
use ferry_core::json_wire::{self, Decoded, Unpacked};
use ferry_core::listeners::Listeners;
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue as HttpValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::auth;

/// How long a stopping receiver lets open requests finish.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Longest `Idempotency-Key` taken as the message id.
const MAX_ID_BYTES: usize = 512;

/// How a route settled a request's message.
#[derive(Debug)]
enum Settled {
    Ack,
    Reject(String),
    Release { after: Duration, reason: String },
}

/// `type = "http"` receiver.
pub struct HttpReceiver {
    state: Arc<State>,
}

struct State {
    name: String,
    config: HttpReceiverConfig,
    metrics: Metrics,
    /// 200 for `direct_hold` routes, 202 for `shared_outbox` ones.
    accepted: StatusCode,
    /// Where the listener is bound, once it is (port 0 picks one).
    bound: std::sync::Mutex<Option<SocketAddr>>,
    /// Where the daemon records the bound address (`ferry run`).
    listeners: Option<Listeners>,
}

impl HttpReceiver {
    /// `durable_before_delivery`: the route acknowledges once its outbox
    /// holds the message (`shared_outbox`), so success is 202, not 200.
    /// The bound address is recorded in `listeners` when given.
    pub fn new(
        name: &str,
        config: HttpReceiverConfig,
        durable_before_delivery: bool,
        metrics: Metrics,
        listeners: Option<Listeners>,
    ) -> Self {
        let accepted = if durable_before_delivery { StatusCode::ACCEPTED } else { StatusCode::OK };
        Self {
            state: Arc::new(State {
                name: name.to_owned(),
                config,
                metrics,
                accepted,
                bound: std::sync::Mutex::new(None),
                listeners,
            }),
        }
    }

    /// The address the receiver listens on, once it does.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.state.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State {
    /// Binds the configured address; with port 0, a receiver that runs
    /// again (its route restarted) first tries the port it had, so its
    /// callers keep their URL.
    async fn bind(&self) -> std::io::Result<TcpListener> {
        let kept = *self.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let any_port = self.config.listen.parse::<SocketAddr>().is_ok_and(|a| a.port() == 0);
        if let (true, Some(addr)) = (any_port, kept)
            && let Ok(listener) = TcpListener::bind(addr).await
        {
            return Ok(listener);
        }
        TcpListener::bind(&self.config.listen).await
    }
}

#[async_trait]
impl Receiver for HttpReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let state = &self.state;
        let receiver = state.name.as_str();
        let gauge = labels(&[("kind", "http"), ("role", "receiver"), ("name", receiver)]);
        let listener = loop {
            match state.bind().await {
                Ok(l) => break l,
                Err(e) => {
                    warn!(receiver, listen = %state.config.listen, error = %e, "cannot listen; retrying in 1 s");
                    if !ferry_core::backoff::sleep_or_shutdown(Duration::from_secs(1), &shutdown).await {
                        return Ok(());
                    }
                }
            }
        };
        let addr = listener.local_addr().map_err(|e| TransportError::permanent(e.to_string()))?;
        *state.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(addr);
        if let Some(listeners) = &state.listeners {
            listeners.record("http", receiver, addr);
        }
        info!(receiver, listen = %addr, path = %state.config.path, "listening");
        state.metrics.connections.get_or_create(&gauge).inc();
        state.metrics.connected.get_or_create(&gauge).set(1);

        let slots = Arc::new(Semaphore::new(state.config.max_connections));
        let connections = TaskTracker::new();
        let closing = CancellationToken::new();
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            let (stream, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors, say: wait, do not spin.
                        warn!(receiver, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let state = state.clone();
            let sink = sink.clone();
            let closing = closing.clone();
            connections.spawn(async move {
                let _permit = permit;
                serve(state, sink, stream, peer, closing).await;
            });
        }
        drop(listener);
        state.metrics.connected.get_or_create(&gauge).set(0);
        closing.cancel();
        connections.close();
        if tokio::time::timeout(CLOSE_GRACE, connections.wait()).await.is_err() {
            warn!(receiver, "requests still open after the grace period; their callers get no reply");
        }
        info!(receiver, "stopped listening");
        Ok(())
    }
}

/// One connection: HTTP/1 with keep-alive, the headers due within the read
/// timeout (hyper closes a connection whose headers are late).
async fn serve(
    state: Arc<State>,
    sink: DeliverySink,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    closing: CancellationToken,
) {
    let read_timeout = Duration::from_millis(state.config.read_timeout_ms);
    let service = hyper::service::service_fn(move |req| {
        let state = state.clone();
        let sink = sink.clone();
        async move { Ok::<_, Infallible>(handle(&state, &sink, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = closing.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        debug!(%peer, error = %e, "connection ended");
    }
}

type Reply = Response<Full<Bytes>>;

async fn handle(state: &State, sink: &DeliverySink, req: Request<Incoming>) -> Reply {
    let reply = answer(state, sink, req).await;
    let status = reply.status().as_u16().to_string();
    Metrics::inc(&state.metrics.counter_family(&crate::REQUESTS), &[("receiver", &state.name), ("status", &status)]);
    reply
}

fn reply(status: StatusCode, body: impl Into<String>) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HttpValue::from_static("text/plain; charset=utf-8"));
    r
}

fn retry_later(after: Duration, why: &str) -> Reply {
    let mut r = reply(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    r.headers_mut().insert(header::RETRY_AFTER, HttpValue::from(secs.max(1)));
    r
}

async fn answer(state: &State, sink: &DeliverySink, req: Request<Incoming>) -> Reply {
    let config = &state.config;
    let receiver = state.name.as_str();
    if req.uri().path() != config.path {
        return reply(StatusCode::NOT_FOUND, format!("messages are POSTed to {}\n", config.path));
    }
    if req.method() != Method::POST {
        let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, "only POST\n");
        r.headers_mut().insert(header::ALLOW, HttpValue::from_static("POST"));
        return r;
    }
    if let Some(token) = &config.bearer_token
        && !auth::bearer_matches(req.headers(), token.expose())
    {
        let mut r = reply(StatusCode::UNAUTHORIZED, "a valid bearer token is required\n");
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HttpValue::from_static("Bearer"));
        return r;
    }
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > config.max_body_bytes as u64) {
        return reply(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {} bytes\n", config.max_body_bytes));
    }
    let (parts, body) = req.into_parts();
    let read = Limited::new(body, config.max_body_bytes).collect();
    let body = match tokio::time::timeout(Duration::from_millis(config.read_timeout_ms), read).await {
        Err(_) => {
            debug!(receiver, "request body not read within read_timeout_ms");
            let mut r = reply(StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time\n");
            r.headers_mut().insert(header::CONNECTION, HttpValue::from_static("close"));
            return r;
        }
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return reply(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {} bytes\n", config.max_body_bytes));
        }
        Ok(Err(e)) => return reply(StatusCode::BAD_REQUEST, format!("the body could not be read: {e}\n")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    if let Some(secret) = &config.hmac_secret
        && !auth::signature_matches(&parts.headers, secret.expose(), &body)
    {
        return reply(
            StatusCode::UNAUTHORIZED,
            "a valid X-Ferry-Signature (sha256=<hex HMAC of the body>) is required\n",
        );
    }
    let envelope = match to_envelope(&parts.headers, body, config, Timestamp::now()) {
        Ok((envelope, wire)) => {
            if let Some(outcome) = wire {
                Metrics::inc(&state.metrics.wire_format_read, &[("receiver", receiver), ("outcome", outcome.label())]);
            }
            envelope
        }
        Err(why) => {
            Metrics::inc(&state.metrics.wire_format_read, &[("receiver", receiver), ("outcome", "malformed")]);
            return reply(StatusCode::BAD_REQUEST, format!("malformed wire-format body: {why}\n"));
        }
    };
    let id = envelope.id.clone();
    let permit = match sink.try_reserve() {
        Ok(p) => p,
        Err(tokio::sync::mpsc::error::TrySendError::Full(())) => {
            return retry_later(Duration::from_secs(config.busy_retry_after_secs), "the route is full");
        }
        Err(tokio::sync::mpsc::error::TrySendError::Closed(())) => {
            return retry_later(Duration::from_secs(1), "the route is stopping");
        }
    };
    let (tx, rx) = oneshot::channel();
    permit.send(Delivery::new(envelope, Box::new(HttpDeliveryHandle { reply: Some(tx) })));
    match tokio::time::timeout(Duration::from_millis(config.reply_timeout_ms), rx).await {
        Ok(Ok(Settled::Ack)) => {
            let mut r = reply(state.accepted, format!("{{\"id\":{}}}\n", serde_json::Value::String(id)));
            r.headers_mut().insert(header::CONTENT_TYPE, HttpValue::from_static("application/json"));
            r
        }
        Ok(Ok(Settled::Reject(reason))) => reply(StatusCode::UNPROCESSABLE_ENTITY, format!("{reason}\n")),
        Ok(Ok(Settled::Release { after, reason })) => retry_later(after, &reason),
        Ok(Err(_)) => retry_later(Duration::from_secs(1), "the route stopped before finishing the message"),
        Err(_) => {
            warn!(receiver, message_id = %id, "message not settled within reply_timeout_ms; answered 503");
            retry_later(Duration::from_secs(1), "the route did not finish the message in time")
        }
    }
}

/// The message a request makes: request headers under the prefix as text
/// headers (the prefix removed; `gobridge.subject` as the subject; an
/// `x-bridge.*` name is the publisher's like any other, which the route
/// strips unless it trusts bridge headers),
/// `Content-Type` as the content type, `Idempotency-Key` as the identity
/// (else a generated one), and the body; with `wire_format = "json"` the
/// document's headers and body over those. The wire-format outcome comes
/// back when the format is on; a malformed document is an error.
pub fn to_envelope(
    headers: &HeaderMap,
    body: Bytes,
    config: &HttpReceiverConfig,
    now: Timestamp,
) -> Result<(Envelope, Option<Unpacked>), String> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= MAX_ID_BYTES);
    let mut envelope = match key {
        Some(k) => Envelope::new(k, Bytes::new()),
        None => {
            let mut e = Envelope::new(uuid::Uuid::new_v4().to_string(), Bytes::new());
            e.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
            e
        }
    };
    envelope.created_at = now;
    for (name, value) in headers {
        let Some(short) = name.as_str().strip_prefix(config.header_prefix.as_str()) else { continue };
        let Ok(text) = std::str::from_utf8(value.as_bytes()) else { continue };
        if short.is_empty() {
            continue;
        }
        if short == names::SUBJECT_CARRIER {
            envelope.subject = Some(text.to_owned());
        } else {
            envelope.set_header(short, text);
        }
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| std::str::from_utf8(v.as_bytes()).ok()) {
        envelope.derive_header(names::CONTENT_TYPE, ct.to_owned());
    }
    let wire = match config.wire_format {
        WireFormat::None => {
            envelope.set_payload(body);
            None
        }
        WireFormat::Json => match json_wire::decode(&body) {
            Decoded::Plain => {
                envelope.set_payload(body);
                Some(Unpacked::Plain)
            }
            Decoded::Malformed(why) => return Err(why),
            Decoded::Wire { headers, body } => {
                json_wire::apply(&mut envelope, headers, body);
                Some(Unpacked::Wire)
            }
        },
    };
    Ok((envelope, wire))
}

/// Settles one request: the reply waits on it.
struct HttpDeliveryHandle {
    reply: Option<oneshot::Sender<Settled>>,
}

impl HttpDeliveryHandle {
    fn settle(mut self, outcome: Settled) {
        if let Some(tx) = self.reply.take() {
            // The caller may have gone: then nobody hears the outcome.
            let _ = tx.send(outcome);
        }
    }
}

#[async_trait]
impl DeliveryHandle for HttpDeliveryHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        (*self).settle(Settled::Ack);
        Ok(())
    }

    async fn release(self: Box<Self>, after: Duration, reason: &str) -> Result<(), TransportError> {
        (*self).settle(Settled::Release { after, reason: reason.to_owned() });
        Ok(())
    }

    async fn reject(self: Box<Self>, reason: &str) -> Result<(), TransportError> {
        (*self).settle(Settled::Reject(reason.to_owned()));
        Ok(())
    }

    /// The caller is waiting: a target outage answers it 503 with
    /// `Retry-After` at once rather than holding the request.
    fn holds_through_outages(&self) -> bool {
        false
    }

    /// The caller redelivers (it retries on 503), so the route gives a
    /// message that failed transiently back to it at once rather than
    /// holding the request while it retries.
    fn redelivery_count(&self) -> Option<u32> {
        Some(0)
    }
}
