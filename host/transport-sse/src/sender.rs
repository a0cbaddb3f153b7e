//! The sender: ferry serves each stream at `GET /stream/{name}` to any
//! number of clients.
//!
//! Each stream keeps its last `replay_events` events in a ring. A send puts
//! the message's event in the ring and succeeds: that is the route's
//! "accepted". Every client follows the ring with a cursor of its own, so a
//! slow client never holds up the route or the other clients; one that
//! falls more than the ring behind skips what left the ring (counted in
//! `ferry_sse_events_missed_total`).
//!
//! | request | answer |
//! |---|---|
//! | `GET /stream/{name}` | 200 `text/event-stream`: `retry:`, then every event sent from then on |
//! | with `Last-Event-ID: X` | the events after `X` still in the ring first; all the ring holds when `X` left it (counted in `ferry_sse_replay_gaps_total`) |
//! | a stream no message went to, and not the sender's own | 404 |
//! | no or a wrong bearer token, when one is set | 401 |
//! | `max_clients` served already | 503 |

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ferry_config::{Secret, WireFormat};
use ferry_core::TransportError;
use ferry_core::json_wire;
use ferry_core::listeners::Listeners;
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{OutboundMessage, Sender};
use futures_util::Stream;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{STREAM_RULE, SseSenderConfig, stream_name_ok};

/// Streams one sender keeps at most (each made by the first message to it).
pub const MAX_STREAMS: usize = 1024;

/// Events a client takes from the ring at once.
const BATCH: usize = 64;

/// `type = "sse"` sender.
pub struct SseSender {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

struct Shared {
    name: String,
    config: SseSenderConfig,
    default_stream: String,
    streams: Mutex<HashMap<String, Arc<Ring>>>,
    clients: Arc<Semaphore>,
    metrics: Metrics,
    stop: CancellationToken,
}

/// One stream's last events and the sequence number of the newest.
struct Ring {
    events: Mutex<Kept>,
    newest: watch::Sender<u64>,
}

#[derive(Default)]
struct Kept {
    /// `(sequence, id as written, event)`, oldest first; sequences count
    /// up from 1 without gaps.
    events: VecDeque<(u64, String, Event)>,
    next: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ring {
    fn new() -> Arc<Self> {
        Arc::new(Ring { events: Mutex::new(Kept { events: VecDeque::new(), next: 1 }), newest: watch::Sender::new(0) })
    }

    fn push(&self, id: String, event: Event, keep: usize) {
        let seq = {
            let mut kept = lock(&self.events);
            let seq = kept.next;
            kept.next += 1;
            kept.events.push_back((seq, id, event));
            while kept.events.len() > keep {
                kept.events.pop_front();
            }
            seq
        };
        self.newest.send_replace(seq);
    }

    /// Where a client starts: after `last_id` when the ring still holds it,
    /// before everything it holds when it does not (`true`: a gap), at the
    /// newest event without one.
    fn cursor(&self, last_id: Option<&str>) -> (u64, bool) {
        let kept = lock(&self.events);
        let newest = kept.next - 1;
        match last_id {
            None => (newest, false),
            Some(id) => match kept.events.iter().rev().find(|(_, written, _)| written == id) {
                Some((seq, _, _)) => (*seq, false),
                None => (kept.events.front().map_or(newest, |(seq, _, _)| seq - 1), true),
            },
        }
    }

    /// Up to [`BATCH`] events after `cursor`, and how many events the client
    /// missed because they left the ring before it read them.
    fn after(&self, cursor: u64) -> (Vec<(u64, Event)>, u64) {
        let kept = lock(&self.events);
        let oldest = kept.events.front().map_or(kept.next, |(seq, _, _)| *seq);
        let missed = oldest.saturating_sub(cursor + 1);
        let from = (cursor + 1).max(oldest);
        let skip = (from - oldest) as usize;
        let batch = kept.events.iter().skip(skip).take(BATCH).map(|(seq, _, e)| (*seq, e.clone())).collect();
        (batch, missed)
    }
}

/// `value` fit for an SSE field: `%`, CR, LF and NUL percent-escaped, so
/// no message id or subject can end the line or the event early.
pub fn field_value(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['%', '\r', '\n', '\0']) {
        return value.into();
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            '\0' => out.push_str("%00"),
            c => out.push(c),
        }
    }
    out.into()
}

/// The event of `msg` and the id it is written with.
pub fn event_of(msg: &OutboundMessage, format: WireFormat) -> Result<(String, Event), TransportError> {
    let envelope = &msg.envelope;
    let id = field_value(&envelope.id).into_owned();
    let mut event = Event::default().id(&id);
    if let Some(subject) = envelope.subject.as_deref().filter(|s| !s.is_empty()) {
        event = event.event(field_value(subject));
    }
    let event = match format {
        WireFormat::Json => {
            let doc = json_wire::encode(envelope);
            // The document is JSON: UTF-8, its line breaks escaped.
            event.data(String::from_utf8_lossy(&doc))
        }
        WireFormat::None => {
            let text = std::str::from_utf8(envelope.payload()).map_err(|_| {
                TransportError::permanent("the payload is not UTF-8, which an SSE event cannot carry (wire_format = \"json\" sends any payload)")
            })?;
            if text.is_empty() {
                return Err(TransportError::permanent(
                    "an empty payload is not an SSE event (clients drop events without data; wire_format = \"json\" sends it)",
                ));
            }
            event.data(text)
        }
    };
    Ok((id, event))
}

impl SseSender {
    /// A sender serving on `config.listen` (bound in the background; a
    /// taken address is tried again every second).
    pub fn start(
        name: &str,
        config: SseSenderConfig,
        metrics: Metrics,
        listeners: Option<Listeners>,
    ) -> Result<Arc<Self>, String> {
        let addr = config.address().map_err(|p| p.to_string())?;
        let default_stream = config.stream.clone().unwrap_or_else(|| name.to_owned());
        let stop = CancellationToken::new();
        let streams = HashMap::from([(default_stream.clone(), Ring::new())]);
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            clients: Arc::new(Semaphore::new(config.max_clients)),
            config,
            default_stream,
            streams: Mutex::new(streams),
            metrics,
            stop: stop.clone(),
        });
        tokio::spawn(serve(shared.clone(), addr, listeners));
        Ok(Arc::new(Self { shared, stop }))
    }

    /// The ring of `stream`, made when missing (up to [`MAX_STREAMS`]).
    fn ring(&self, stream: &str) -> Result<Arc<Ring>, TransportError> {
        let mut streams = lock(&self.shared.streams);
        if let Some(ring) = streams.get(stream) {
            return Ok(ring.clone());
        }
        if !stream_name_ok(stream) {
            return Err(TransportError::unroutable(format!("stream {stream:?} {STREAM_RULE}")));
        }
        if streams.len() >= MAX_STREAMS {
            return Err(TransportError::permanent(format!(
                "stream {stream:?} would be more than the {MAX_STREAMS} streams one SSE sender serves"
            )));
        }
        let ring = Ring::new();
        streams.insert(stream.to_owned(), ring.clone());
        Ok(ring)
    }
}

#[async_trait]
impl Sender for SseSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let stream = if msg.address.is_empty() { self.shared.default_stream.as_str() } else { msg.address.as_str() };
        let ring = self.ring(stream)?;
        let (id, event) = event_of(&msg, self.shared.config.wire_format)?;
        ring.push(id, event, self.shared.config.replay_events);
        Ok(())
    }

    async fn close(&self) {
        self.stop.cancel();
    }
}

impl Drop for SseSender {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Binds `addr` (again every second while it is taken) and serves until
/// the sender stops.
async fn serve(shared: Arc<Shared>, addr: SocketAddr, listeners: Option<Listeners>) {
    let sender = shared.name.clone();
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                warn!(sender, listen = %addr, error = %e, "cannot listen; retrying in 1 s");
                if !ferry_core::backoff::sleep_or_shutdown(Duration::from_secs(1), &shared.stop).await {
                    return;
                }
            }
        }
    };
    let Ok(bound) = listener.local_addr() else { return };
    if let Some(listeners) = &listeners {
        listeners.record("sse", &sender, bound);
    }
    info!(sender, listen = %bound, "serving server-sent events at /stream/{{name}}");
    let gauge = labels(&[("kind", "sse"), ("role", "sender"), ("name", &sender)]);
    shared.metrics.connections.get_or_create(&gauge).inc();
    shared.metrics.connected.get_or_create(&gauge).set(1);
    let stop = shared.stop.clone();
    let app = Router::new().route("/stream/{name}", get(stream)).with_state(shared.clone());
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await {
        warn!(sender, error = %e, "the SSE server stopped");
    }
    shared.metrics.connected.get_or_create(&gauge).set(0);
}

fn bearer_ok(headers: &HeaderMap, token: Option<&Secret>) -> bool {
    let Some(token) = token else { return true };
    let Some(given) = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()) else { return false };
    let Some(given) = given.strip_prefix(b"Bearer ") else { return false };
    given.ct_eq(token.expose().as_bytes()).into()
}

async fn stream(State(shared): State<Arc<Shared>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if !bearer_ok(&headers, shared.config.bearer_token.as_ref()) {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "a bearer token is required\n")
            .into_response();
    }
    let Some(ring) = lock(&shared.streams).get(&name).cloned() else {
        return (StatusCode::NOT_FOUND, "no such stream\n").into_response();
    };
    let Ok(permit) = shared.clients.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], "too many clients\n").into_response();
    };
    let last_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    let (cursor, gap) = ring.cursor(last_id);
    let sender = shared.name.as_str();
    if gap {
        Metrics::inc(&shared.metrics.counter_family(&crate::REPLAY_GAPS), &[("sender", sender)]);
        info!(sender, stream = %name, last_event_id = ?last_id, "a client resumed from an event no longer kept; it gets all that is");
    }
    let clients = shared.metrics.gauge_family(&crate::CLIENTS);
    clients.get_or_create(&labels(&[("sender", sender), ("stream", &name)])).inc();
    let follower = Follower {
        shared: shared.clone(),
        stream: name,
        ring: ring.clone(),
        newest: ring.newest.subscribe(),
        cursor,
        pending: VecDeque::new(),
        _permit: permit,
        hello: Some(Event::default().retry(Duration::from_millis(shared.config.retry_ms))),
    };
    let keepalive = KeepAlive::new().interval(Duration::from_millis(shared.config.keepalive_ms));
    Sse::new(follow(follower)).keep_alive(keepalive).into_response()
}

/// One client's place in a stream.
struct Follower {
    shared: Arc<Shared>,
    stream: String,
    ring: Arc<Ring>,
    newest: watch::Receiver<u64>,
    cursor: u64,
    pending: VecDeque<Event>,
    _permit: OwnedSemaphorePermit,
    hello: Option<Event>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        let clients = self.shared.metrics.gauge_family(&crate::CLIENTS);
        clients.get_or_create(&labels(&[("sender", &self.shared.name), ("stream", &self.stream)])).dec();
    }
}

/// The events of one client: the `retry:` line, then each event after its
/// cursor as it comes; ends when the sender stops.
fn follow(follower: Follower) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(follower, |mut f| async move {
        if let Some(hello) = f.hello.take() {
            return Some((Ok(hello), f));
        }
        loop {
            if let Some(event) = f.pending.pop_front() {
                return Some((Ok(event), f));
            }
            let (batch, missed) = f.ring.after(f.cursor);
            if missed > 0 {
                Metrics::add(
                    &f.shared.metrics.counter_family(&crate::EVENTS_MISSED),
                    &[("sender", &f.shared.name)],
                    missed,
                );
            }
            if let Some((last, _)) = batch.last() {
                f.cursor = *last;
                f.pending.extend(batch.into_iter().map(|(_, e)| e));
                continue;
            }
            // Nothing new: wait for the next event or the sender's end.
            if *f.newest.borrow_and_update() > f.cursor {
                continue;
            }
            tokio::select! {
                _ = f.shared.stop.cancelled() => return None,
                changed = f.newest.changed() => if changed.is_err() { return None },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_envelope::Envelope;

    fn written(event: Event) -> String {
        // The body an Sse response writes for this one event.
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(async {
            let body = Sse::new(futures_util::stream::iter([Ok::<_, Infallible>(event)])).into_response().into_body();
            let bytes = axum::body::to_bytes(body, 1 << 20).await.expect("body");
            String::from_utf8(bytes.to_vec()).expect("utf-8")
        })
    }

    #[test]
    fn an_event_carries_the_id_the_subject_and_the_wire_format() {
        let mut e = Envelope::new("m-1", &b"21.5"[..]);
        e.subject = Some("sensors.temp".into());
        e.set_header("kind", "temp");
        let (id, event) = event_of(&OutboundMessage::new(e, ""), WireFormat::Json).expect("event");
        assert_eq!(id, "m-1");
        let text = written(event);
        assert!(text.starts_with("id: m-1\nevent: sensors.temp\ndata: {"), "{text}");
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
        let doc: serde_json::Value = serde_json::from_str(data).expect("json");
        assert_eq!(doc["headers"]["gobridge.subject"], "sensors.temp");
        assert_eq!(doc["headers"]["kind"], "temp");
        assert_eq!(doc["body"], "21.5");
    }

    #[test]
    fn line_breaks_in_an_id_or_subject_cannot_forge_fields() {
        let mut e = Envelope::new("a\nevent: forged\n\nid: x%", &b"x"[..]);
        e.subject = Some("s\r\ndata: forged".into());
        let (id, event) = event_of(&OutboundMessage::new(e, ""), WireFormat::Json).expect("event");
        assert_eq!(id, "a%0Aevent: forged%0A%0Aid: x%25");
        let text = written(event);
        assert_eq!(text.lines().filter(|l| l.starts_with("data:")).count(), 1, "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("event:")).count(), 1, "{text}");
        assert_eq!(text.matches("\n\n").count(), 1, "one event: {text:?}");
    }

    #[test]
    fn a_plain_event_needs_a_text_payload_that_is_not_empty() {
        let plain =
            |payload: &'static [u8]| event_of(&OutboundMessage::new(Envelope::new("m", payload), ""), WireFormat::None);
        let (_, event) = plain(b"line one\nline two").expect("event");
        assert!(written(event).contains("data: line one\ndata: line two\n\n"));
        assert!(!plain(&[0xff]).expect_err("not UTF-8").is_transient());
        assert!(!plain(b"").expect_err("empty").is_transient());
    }

    #[test]
    fn the_ring_resumes_after_an_id_it_holds_and_replays_all_it_holds_after_a_gap() {
        let ring = Ring::new();
        for i in 1..=5 {
            ring.push(format!("m-{i}"), Event::default().data(format!("{i}")), 3);
        }
        assert_eq!(ring.cursor(None), (5, false), "no Last-Event-ID: from now on");
        assert_eq!(ring.cursor(Some("m-4")), (4, false));
        assert_eq!(ring.cursor(Some("m-1")), (2, true), "m-1 left the ring: all it holds (3, 4, 5)");
        let (batch, missed) = ring.after(2);
        assert_eq!((batch.iter().map(|(s, _)| *s).collect::<Vec<_>>(), missed), (vec![3, 4, 5], 0));
        let (batch, missed) = ring.after(0);
        assert_eq!((batch.len(), missed), (3, 2), "a client at 0 missed 1 and 2");
        assert!(ring.after(5).0.is_empty());
    }
}
