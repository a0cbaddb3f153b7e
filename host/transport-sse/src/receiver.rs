//! The receiver: ferry follows a remote server-sent event stream, each
//! event one message.
//!
//! An SSE server keeps no record of what a client settled, so ferry keeps
//! it:
//!
//! - A message the route releases (a target down) is handed to the route
//!   again after the route's delay from ferry's memory; the stream is not
//!   read again for it.
//! - After a lost connection the stream is asked again from the last event
//!   read (`Last-Event-ID`), and events the server sends again that ferry
//!   took already (by id, among the last `dedup_events`) are left out and
//!   counted in `ferry_sse_events_skipped_total`.
//! - The last event before which the route settled everything is the
//!   position kept in `position_file`, so a restart asks again from there:
//!   nothing held at a crash is lost, what was settled after it comes again.
//!
//! An event without an id cannot be resumed from or deduplicated: the
//! server should give every event one.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use ferry_core::TransportError;
use ferry_core::backoff::{Backoff, sleep_or_shutdown};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Envelope;
use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::SseReceiverConfig;
use crate::ingress::{Incoming, to_envelope};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The events taken, in the order read, until the route settled them.
#[derive(Debug, Default)]
pub struct Position {
    /// `(sequence, event id, settled)`, oldest first.
    taken: VecDeque<(u64, String, bool)>,
    next: u64,
    /// The id of the last event before which everything is settled.
    settled_to: Option<String>,
}

impl Position {
    /// Counts an event taken; its sequence number.
    pub fn take(&mut self, id: &str) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.taken.push_back((seq, id.to_owned(), false));
        seq
    }

    /// Marks `seq` settled; true when the settled position moved.
    pub fn settle(&mut self, seq: u64) -> bool {
        let Some(front) = self.taken.front().map(|(s, _, _)| *s) else { return false };
        if let Some(entry) = seq.checked_sub(front).and_then(|i| self.taken.get_mut(i as usize)) {
            entry.2 = true;
        }
        let mut moved = false;
        while self.taken.front().is_some_and(|(_, _, settled)| *settled) {
            if let Some((_, id, _)) = self.taken.pop_front()
                && !id.is_empty()
            {
                self.settled_to = Some(id);
                moved = true;
            }
        }
        moved
    }

    /// The id of the last event before which everything is settled.
    pub fn settled_to(&self) -> Option<&str> {
        self.settled_to.as_deref()
    }
}

/// The ids of the last events taken, to leave out what is sent again.
#[derive(Debug)]
pub struct Seen {
    ids: HashSet<String>,
    order: VecDeque<String>,
    keep: usize,
}

impl Seen {
    pub fn new(keep: usize) -> Self {
        Self { ids: HashSet::new(), order: VecDeque::new(), keep }
    }

    /// False when `id` was taken already (an empty id never was).
    pub fn first_time(&mut self, id: &str) -> bool {
        if id.is_empty() {
            return true;
        }
        if !self.ids.insert(id.to_owned()) {
            return false;
        }
        self.order.push_back(id.to_owned());
        while self.order.len() > self.keep {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
        true
    }
}

/// A message given back by the route, to be handed to it again.
struct Again {
    envelope: Envelope,
    seq: u64,
    delivered: u32,
}

/// What the handles of one run share.
struct Shared {
    position: Mutex<Position>,
    /// Woken when the settled position moved (it is written to the file).
    moved: Notify,
    again: mpsc::UnboundedSender<Again>,
}

struct Handle {
    shared: Arc<Shared>,
    seq: u64,
    envelope: Envelope,
    delivered: u32,
}

impl Handle {
    fn settled(&self) {
        if lock(&self.shared.position).settle(self.seq) {
            self.shared.moved.notify_one();
        }
    }
}

#[async_trait]
impl DeliveryHandle for Handle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.settled();
        Ok(())
    }

    /// Handed to the route again after `after`, from memory.
    async fn release(self: Box<Self>, after: Duration, _reason: &str) -> Result<(), TransportError> {
        let Handle { shared, seq, envelope, delivered } = *self;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            // A receiver that stopped meanwhile kept its position before
            // this event: a restart reads it again.
            let _ = shared.again.send(Again { envelope, seq, delivered: delivered + 1 });
        });
        Ok(())
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.delivered.saturating_sub(1))
    }
}

/// `type = "sse"` receiver.
pub struct SseReceiver {
    name: String,
    config: SseReceiverConfig,
    metrics: Metrics,
}

/// Why a connection ended.
enum Ended {
    Shutdown,
    Lost(String),
}

impl SseReceiver {
    pub fn new(name: &str, config: SseReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics }
    }

    /// The position file's id, if there is a file with one.
    async fn kept_position(&self) -> Option<String> {
        let path = self.config.position_file.as_deref()?;
        match tokio::fs::read_to_string(path).await {
            Ok(text) => Some(text.trim().to_owned()).filter(|id| !id.is_empty() && !id.contains('\0')),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                warn!(receiver = %self.name, path, error = %e, "cannot read the position file; starting without it");
                None
            }
        }
    }

    /// Writes the settled position whenever it moved (at most every 200
    /// ms), and once more at the end.
    async fn keep_position(&self, shared: &Shared, shutdown: &CancellationToken) {
        let Some(path) = self.config.position_file.as_deref() else { return };
        let mut written: Option<String> = None;
        loop {
            let stopping = tokio::select! {
                _ = shutdown.cancelled() => true,
                _ = shared.moved.notified() => false,
            };
            let now = lock(&shared.position).settled_to().map(str::to_owned);
            if now.is_some() && now != written {
                let id = now.clone().unwrap_or_default();
                let tmp = format!("{path}.tmp");
                let result = tokio::fs::write(&tmp, format!("{id}\n")).await;
                match result.and(tokio::fs::rename(&tmp, path).await) {
                    Ok(()) => written = now,
                    Err(e) => warn!(receiver = %self.name, path, error = %e, "cannot write the position file"),
                }
            }
            if stopping {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One connection: reads events into `sink` until it is lost or the
    /// receiver stops. `last_read` is updated as events come.
    #[allow(clippy::too_many_arguments)]
    async fn connection(
        &self,
        client: &reqwest::Client,
        last_read: &mut Option<String>,
        seen: &mut Seen,
        shared: &Arc<Shared>,
        sink: &DeliverySink,
        attempts: &mut u32,
        shutdown: &CancellationToken,
    ) -> Ended {
        let receiver = self.name.as_str();
        let mut request = client
            .get(&self.config.url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CACHE_CONTROL, "no-cache");
        if let Some(id) = last_read.as_deref() {
            request = request.header("Last-Event-ID", id);
        }
        if let Some(token) = &self.config.bearer_token {
            request = request.bearer_auth(token.expose());
        }
        let response = tokio::select! {
            _ = shutdown.cancelled() => return Ended::Shutdown,
            r = request.send() => match r {
                Ok(r) => r,
                Err(e) => {
                    return Ended::Lost(format!("cannot connect: {}", ferry_transport_http::sender::error_chain(&e)));
                }
            },
        };
        let status = response.status();
        if !status.is_success() {
            return Ended::Lost(format!("the server answered {status}"));
        }
        let content_type = response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        if !content_type.is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/event-stream")) {
            return Ended::Lost(format!("the answer is {content_type:?}, not text/event-stream"));
        }
        info!(receiver, url = %self.config.url, last_event_id = ?last_read, "following the stream");
        let gauge = labels(&[("kind", "sse"), ("role", "receiver"), ("name", receiver)]);
        self.metrics.connections.get_or_create(&gauge).inc();
        self.metrics.connected.get_or_create(&gauge).set(1);
        // Bytes read since the last whole event: a line or an event that
        // never ends cannot grow the decoder's buffer past the limit.
        let pending = Arc::new(AtomicUsize::new(0));
        let limit = self.config.max_event_bytes;
        let counted = pending.clone();
        let bytes = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(|e| e.to_string())?;
            if counted.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len() > limit {
                return Err(format!("an event longer than max_event_bytes ({limit})"));
            }
            Ok(chunk)
        });
        let mut events = bytes.eventsource();
        let idle = Duration::from_millis(self.config.idle_timeout_ms);
        let ended = loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => break Ended::Shutdown,
                next = tokio::time::timeout(idle, events.next()) => next,
            };
            let event = match next {
                Err(_) => break Ended::Lost(format!("nothing read for {} ms", self.config.idle_timeout_ms)),
                Ok(None) => break Ended::Lost("the server ended the stream".into()),
                Ok(Some(Err(e))) => break Ended::Lost(e.to_string()),
                Ok(Some(Ok(event))) => event,
            };
            pending.store(0, Ordering::Relaxed);
            *attempts = 0;
            if !event.id.is_empty() {
                *last_read = Some(event.id.clone());
            }
            if !seen.first_time(&event.id) {
                debug!(receiver, id = %event.id, "event taken already; left out");
                Metrics::inc(&self.metrics.counter_family(&crate::EVENTS_SKIPPED), &[("receiver", receiver)]);
                continue;
            }
            let incoming = Incoming { event: event.event, data: event.data, id: event.id };
            let (envelope, read, why) = to_envelope(&incoming, self.config.wire_format);
            if self.config.wire_format == ferry_config::WireFormat::Json {
                Metrics::inc(&self.metrics.wire_format_read, &[("receiver", receiver), ("outcome", read.label())]);
            }
            if let Some(why) = why {
                warn!(receiver, message_id = %envelope.id, reason = %why, "malformed wire-format data; passed on as a plain body");
            }
            let seq = lock(&shared.position).take(&incoming.id);
            if !deliver(sink, shared, envelope, seq, 1, shutdown).await {
                break Ended::Shutdown;
            }
        };
        self.metrics.connected.get_or_create(&gauge).set(0);
        ended
    }
}

/// Hands one message to the route; false when the route or the receiver
/// stopped.
async fn deliver(
    sink: &DeliverySink,
    shared: &Arc<Shared>,
    envelope: Envelope,
    seq: u64,
    delivered: u32,
    shutdown: &CancellationToken,
) -> bool {
    let handle = Handle { shared: shared.clone(), seq, envelope: envelope.clone(), delivered };
    tokio::select! {
        _ = shutdown.cancelled() => false,
        sent = sink.send(Delivery::new(envelope, Box::new(handle))) => sent.is_ok(),
    }
}

#[async_trait]
impl Receiver for SseReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let mut builder =
            reqwest::Client::builder().connect_timeout(Duration::from_millis(self.config.connect_timeout_ms));
        if let Some(tls) = &self.config.tls {
            builder = ferry_transport_http::sender::with_tls(builder, tls)?;
        }
        let client = builder.build().map_err(|e| TransportError::permanent(format!("the HTTP client: {e}")))?;
        let (again_tx, mut again_rx) = mpsc::unbounded_channel::<Again>();
        let shared = Arc::new(Shared { position: Mutex::default(), moved: Notify::new(), again: again_tx });
        let mut last_read = self.kept_position().await.or_else(|| self.config.last_event_id.clone());
        let mut seen = Seen::new(self.config.dedup_events);
        let backoff = Backoff::reconnect(self.config.reconnect_initial_ms, self.config.reconnect_max_ms);
        // Ends the side tasks when the reader ends: on shutdown, or when the
        // route stopped taking deliveries.
        let done = shutdown.child_token();
        // Released messages go back to the route beside the stream.
        let again = async {
            while let Some(a) = tokio::select! {
                _ = done.cancelled() => None,
                a = again_rx.recv() => a,
            } {
                if !deliver(&sink, &shared, a.envelope, a.seq, a.delivered, &done).await {
                    break;
                }
            }
        };
        let read = async {
            let mut attempts = 0;
            loop {
                let ended =
                    self.connection(&client, &mut last_read, &mut seen, &shared, &sink, &mut attempts, &shutdown).await;
                let Ended::Lost(why) = ended else { break };
                let delay = backoff.next(&mut attempts);
                warn!(receiver, url = %self.config.url, reason = %why, retry_in_ms = delay.as_millis() as u64, "the stream is lost; reading it again");
                if !sleep_or_shutdown(delay, &shutdown).await {
                    break;
                }
            }
            done.cancel();
        };
        let keep = self.keep_position(&shared, &done);
        tokio::join!(again, read, keep);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_moves_only_over_settled_events() {
        let mut p = Position::default();
        let a = p.take("a");
        let b = p.take("b");
        let c = p.take("");
        let d = p.take("d");
        assert!(!p.settle(b), "a is still held");
        assert_eq!(p.settled_to(), None);
        assert!(p.settle(a));
        assert_eq!(p.settled_to(), Some("b"));
        assert!(!p.settle(d), "c, without an id, is still held");
        assert!(p.settle(c));
        assert_eq!(p.settled_to(), Some("d"));
        assert!(!p.settle(d), "settling twice changes nothing");
    }

    #[test]
    fn seen_ids_are_left_out_within_the_window_only() {
        let mut s = Seen::new(2);
        assert!(s.first_time("a") && s.first_time("b"));
        assert!(!s.first_time("a"));
        assert!(s.first_time("c"), "c pushes a out");
        assert!(s.first_time("a"));
        assert!(s.first_time("") && s.first_time(""), "no id is never a repeat");
    }
}
