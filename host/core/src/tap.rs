//! Live taps on running routes (`ferry tap`, the admin server's `/tap`):
//! copies of messages at a chosen point of a route, sampled and rate
//! limited, with headers and a bounded payload preview.
//!
//! A tap never affects delivery. With no tap open, offering a message costs
//! one atomic load. An open tap takes every `sample`-th message at its point
//! up to `rate` a second; what it cannot take (over the rate, or its reader
//! is behind) is counted in the next event's `skipped`, never waited for.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferry_envelope::{Envelope, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::wire;

/// Where on a route a tap looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapPoint {
    /// As received, after the route's header rules.
    Ingress,
    /// After the processor chain, with the addresses planned for it.
    AfterProcessors,
    /// Each binding's outbound copy, after its header mapper, as handed to
    /// the sender.
    Egress,
}

impl TapPoint {
    pub fn name(self) -> &'static str {
        match self {
            TapPoint::Ingress => "ingress",
            TapPoint::AfterProcessors => "after-processors",
            TapPoint::Egress => "egress",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ingress" => Some(TapPoint::Ingress),
            "after-processors" => Some(TapPoint::AfterProcessors),
            "egress" => Some(TapPoint::Egress),
            _ => None,
        }
    }
}

/// What a tap wants.
#[derive(Debug, Clone)]
pub struct TapRequest {
    pub route: String,
    pub point: TapPoint,
    /// At `egress`, only this binding's copies.
    pub binding: Option<String>,
    /// Every n-th message at the point (1: all).
    pub sample: u64,
    /// At most this many events a second.
    pub rate: u32,
    /// Payload bytes shown at most.
    pub payload_bytes: usize,
}

/// Events a tap's reader may fall behind by before events are skipped.
const QUEUE: usize = 256;

struct Tap {
    id: u64,
    request: TapRequest,
    seen: u64,
    /// Tokens of the rate limit, refilled at `rate` a second.
    tokens: f64,
    refilled: Instant,
    skipped: u64,
    tx: mpsc::Sender<TapEvent>,
}

#[derive(Default)]
struct Inner {
    open: AtomicUsize,
    next_id: AtomicU64,
    taps: Mutex<Vec<Tap>>,
    /// `ferry_taps_open`, when counted.
    gauge: Option<prometheus_client::metrics::gauge::Gauge>,
}

/// The daemon's open taps. Cheap to clone.
#[derive(Clone, Default)]
pub struct Taps(Arc<Inner>);

/// An open tap: its events, until dropped (which closes it).
pub struct TapStream {
    pub events: mpsc::Receiver<TapEvent>,
    _guard: TapGuard,
}

struct TapGuard {
    taps: Taps,
    id: u64,
}

impl Drop for TapGuard {
    fn drop(&mut self) {
        if let Ok(mut taps) = self.taps.0.taps.lock() {
            taps.retain(|t| t.id != self.id);
            self.taps.set_open(taps.len());
        }
    }
}

impl Taps {
    /// Taps whose number open is kept in `gauge`.
    pub fn counted(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        Taps(Arc::new(Inner { gauge: Some(gauge), ..Default::default() }))
    }

    fn set_open(&self, n: usize) {
        self.0.open.store(n, Ordering::Release);
        if let Some(g) = &self.0.gauge {
            g.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Opens a tap; it closes when the stream is dropped.
    pub fn open(&self, request: TapRequest) -> TapStream {
        let (tx, events) = mpsc::channel(QUEUE);
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let tokens = f64::from(request.rate.max(1));
        let tap = Tap { id, request, seen: 0, tokens, refilled: Instant::now(), skipped: 0, tx };
        if let Ok(mut taps) = self.0.taps.lock() {
            taps.push(tap);
            self.set_open(taps.len());
        }
        TapStream { events, _guard: TapGuard { taps: self.clone(), id } }
    }

    /// How many taps are open.
    pub fn open_count(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }

    /// Offers a message at `point` of `route` to the open taps. `binding`
    /// and `addresses` say where it is going, when known.
    pub fn offer(&self, route: &str, point: TapPoint, binding: Option<&str>, addresses: &[&str], envelope: &Envelope) {
        if self.0.open.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Ok(mut taps) = self.0.taps.lock() else { return };
        let now = Instant::now();
        for tap in taps.iter_mut() {
            let r = &tap.request;
            if r.route != route || r.point != point || (r.binding.is_some() && r.binding.as_deref() != binding) {
                continue;
            }
            tap.seen += 1;
            if (tap.seen - 1) % r.sample.max(1) != 0 {
                continue;
            }
            let rate = f64::from(r.rate.max(1));
            tap.tokens = (tap.tokens + now.duration_since(tap.refilled).as_secs_f64() * rate).min(rate);
            tap.refilled = now;
            if tap.tokens < 1.0 {
                tap.skipped += 1;
                continue;
            }
            let event = event(r, binding, addresses, envelope, tap.skipped);
            match tap.tx.try_send(event) {
                Ok(()) => {
                    tap.tokens -= 1.0;
                    tap.skipped = 0;
                }
                Err(_) => tap.skipped += 1,
            }
        }
    }
}

/// One tapped message: where it was seen, its identity, subject, times,
/// headers (typed as the JSON wire format types them) and a payload preview
/// of at most `payload_bytes`. `GET /tap/{route}` sends it as the data of a
/// server-sent event, `ferry tap` reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapEvent {
    pub at_ms: i64,
    pub route: String,
    /// `ingress`, `after-processors` or `egress`.
    pub point: String,
    pub id: String,
    pub subject: Option<String>,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    pub headers: wire::View,
    pub payload_size: usize,
    /// Whether the preview is shorter than the payload.
    pub truncated: bool,
    /// Messages at this point the tap left out since its last event.
    pub skipped: u64,
    /// At egress: the binding whose copy this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// After the processors and at egress: where it goes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The preview as text, when it is UTF-8 (cut at a whole character) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// … else as base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
}

fn event(r: &TapRequest, binding: Option<&str>, addresses: &[&str], e: &Envelope, skipped: u64) -> TapEvent {
    let payload = e.payload();
    let shown = &payload[..payload.len().min(r.payload_bytes)];
    // A preview cut inside a UTF-8 character is still shown as text.
    let text = match std::str::from_utf8(shown) {
        Ok(t) => Some(t),
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&shown[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    TapEvent {
        at_ms: Timestamp::now().as_millis(),
        route: r.route.clone(),
        point: r.point.name().to_owned(),
        id: e.id.clone(),
        subject: e.subject.clone(),
        created_ms: e.created_at.as_millis(),
        expires_ms: e.expires_at.map(Timestamp::as_millis),
        headers: e.headers.iter().map(|(k, v)| (k.clone(), wire::header_value(v))).collect(),
        payload_size: payload.len(),
        truncated: shown.len() < payload.len(),
        skipped,
        binding: binding.map(str::to_owned),
        addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
        payload_base64: text.is_none().then(|| wire::base64(shown)),
        payload: text.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(point: TapPoint, sample: u64, rate: u32) -> TapRequest {
        TapRequest { route: "r".into(), point, binding: None, sample, rate, payload_bytes: 2 }
    }

    fn env(id: &str) -> Envelope {
        let mut e = Envelope::new(id, "héllo world".as_bytes().to_vec());
        e.set_header("kind", "temp");
        e
    }

    #[test]
    fn a_tap_sees_its_route_and_point_only_and_closes_when_dropped() {
        let taps = Taps::default();
        let mut stream = taps.open(request(TapPoint::Ingress, 1, 100));
        assert_eq!(taps.open_count(), 1);
        taps.offer("other", TapPoint::Ingress, None, &[], &env("a"));
        taps.offer("r", TapPoint::Egress, Some("b"), &[], &env("b"));
        taps.offer("r", TapPoint::Ingress, None, &[], &env("c"));
        let got = stream.events.try_recv().expect("one event");
        assert_eq!(got.id, "c");
        assert_eq!(got.headers["kind"], "temp");
        // Two bytes cut "é" in half: the whole characters are shown.
        assert_eq!(got.payload.as_deref(), Some("h"));
        assert!(got.truncated);
        assert_eq!(got.payload_size, 12);
        let json = serde_json::to_value(&got).expect("JSON");
        assert!(json.get("binding").is_none() && json.get("payload_base64").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<TapEvent>(json).expect("read back"), got);
        assert!(stream.events.try_recv().is_err());
        drop(stream);
        assert_eq!(taps.open_count(), 0);
    }

    #[test]
    fn sampling_and_the_rate_limit_skip_and_count_what_they_leave_out() {
        let taps = Taps::default();
        let mut every_third = taps.open(request(TapPoint::Ingress, 3, 1000));
        let mut two_a_second = taps.open(request(TapPoint::Ingress, 1, 2));
        for i in 0..9 {
            taps.offer("r", TapPoint::Ingress, None, &[], &env(&i.to_string()));
        }
        let ids: Vec<String> = std::iter::from_fn(|| every_third.events.try_recv().ok()).map(|e| e.id).collect();
        assert_eq!(ids, ["0", "3", "6"]);
        let limited: Vec<TapEvent> = std::iter::from_fn(|| two_a_second.events.try_recv().ok()).collect();
        assert_eq!(limited.len(), 2, "{limited:?}");
        std::thread::sleep(std::time::Duration::from_millis(600));
        taps.offer("r", TapPoint::Ingress, None, &[], &env("late"));
        let late = two_a_second.events.try_recv().expect("a token came back");
        assert_eq!(late.id, "late");
        assert_eq!(late.skipped, 7, "the seven left out are counted on the next event");
    }

    #[test]
    fn a_slow_reader_loses_events_not_the_route_its_time() {
        let taps = Taps::default();
        let mut stream = taps.open(request(TapPoint::Ingress, 1, 100_000));
        for i in 0..(QUEUE + 10) {
            taps.offer("r", TapPoint::Ingress, None, &[], &env(&i.to_string()));
        }
        let mut n = 0;
        while stream.events.try_recv().is_ok() {
            n += 1;
        }
        assert_eq!(n, QUEUE);
        taps.offer("r", TapPoint::Ingress, None, &[], &env("next"));
        assert_eq!(stream.events.try_recv().expect("room again").skipped, 10);
    }

    #[test]
    fn egress_taps_can_name_a_binding() {
        let taps = Taps::default();
        let mut r = request(TapPoint::Egress, 1, 100);
        r.binding = Some("b2".into());
        let mut stream = taps.open(r);
        taps.offer("r", TapPoint::Egress, Some("b1"), &["x"], &env("one"));
        taps.offer("r", TapPoint::Egress, Some("b2"), &["y"], &env("two"));
        let got = stream.events.try_recv().expect("b2's copy");
        assert_eq!(got.id, "two");
        assert_eq!(got.binding.as_deref(), Some("b2"));
        assert_eq!(got.addresses, ["y"]);
        assert!(stream.events.try_recv().is_err());
    }
}
