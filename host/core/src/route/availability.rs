//! Whether a binding's target can take messages now.
//!
//! A send that ends *unavailable* (nothing reached the target, or the
//! target said it takes nothing now) starts an outage of the binding. While
//! it lasts, copies for that binding are not sent one by one to find out:
//! they wait here, and one copy at a time goes as a probe, at the route's
//! backoff pace (at most [`MAX_PROBE_INTERVAL`] apart). The first send that
//! reaches the target — accepted, or refused for the message itself — ends
//! the outage and wakes every waiting copy. An outage is logged once when it
//! starts and once when it ends, with its length, never once per message.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backoff::Backoff;

/// The longest wait between two probes of a binding that is down, however
/// long the route's backoff grows: a target that is back is noticed within
/// this.
pub const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// A binding's availability, shared by every delivery and drainer that
/// sends through it (`Availability::default()` when building a binding).
#[derive(Clone, Default)]
pub struct Availability(Arc<State>);

#[derive(Default)]
struct State {
    outage: Mutex<Option<Outage>>,
    /// A probe is under way.
    probing: AtomicBool,
    /// The outage ended, or a probe finished.
    changed: Notify,
}

#[derive(Clone, Copy)]
struct Outage {
    since: Instant,
    /// Unavailable outcomes since it began.
    failures: u32,
    /// When the next probe may go.
    next_probe: Instant,
}

/// Leave to send one copy to a binding: it is available, or this copy is
/// its probe. Dropping a probe's pass lets the next one go.
#[must_use]
pub struct Pass(Option<Arc<State>>);

impl Drop for Pass {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            state.probing.store(false, Ordering::Release);
            state.changed.notify_waiters();
        }
    }
}

/// What a send told about its target's availability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed.
    Same,
    /// The target went down.
    Down,
    /// The target is back after an outage this long.
    Up(Duration),
}

impl Availability {
    /// Whether the target is taking messages (no outage under way).
    pub fn is_available(&self) -> bool {
        self.lock().is_none()
    }

    /// How long the outage under way has lasted.
    pub fn down_for(&self) -> Option<Duration> {
        self.lock().map(|o| o.since.elapsed())
    }

    /// How long until the next probe of the outage under way may go.
    pub fn next_probe_in(&self) -> Option<Duration> {
        self.lock().map(|o| o.next_probe.saturating_duration_since(Instant::now()))
    }

    /// Leave to send now, if there is any: the target is available, or it
    /// is down, its next probe is due and no other probe is under way.
    pub fn try_pass(&self) -> Option<Pass> {
        match *self.lock() {
            None => Some(Pass(None)),
            Some(o) if Instant::now() >= o.next_probe => self.take_probe(),
            Some(_) => None,
        }
    }

    /// Waits for leave to send: at once while the target is available;
    /// during an outage until it ends or it is this caller's turn to probe.
    /// `None` when `stop` fired first.
    pub async fn pass(&self, stop: &CancellationToken) -> Option<Pass> {
        loop {
            let changed = self.0.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let due = match *self.lock() {
                None => return Some(Pass(None)),
                Some(o) => o.next_probe,
            };
            if Instant::now() >= due {
                if let Some(pass) = self.take_probe() {
                    return Some(pass);
                }
                // Another copy is probing: wait for its answer.
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = &mut changed => {}
                }
            } else {
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = &mut changed => {}
                    _ = tokio::time::sleep_until(due) => {}
                }
            }
        }
    }

    /// A send reached the target (whatever it answered about the message).
    pub fn reached(&self) -> Transition {
        let ended = self.lock().take();
        match ended {
            Some(o) => {
                self.0.changed.notify_waiters();
                Transition::Up(o.since.elapsed())
            }
            None => Transition::Same,
        }
    }

    /// A send found the target unavailable: starts the outage or sets the
    /// next probe further off (no sooner than `not_before`, when the target
    /// asked for that: an HTTP `Retry-After`).
    pub fn unreachable(&self, backoff: &Backoff, not_before: Option<Duration>) -> Transition {
        let now = Instant::now();
        let mut outage = self.lock();
        let (transition, failures) = match *outage {
            None => (Transition::Down, 1),
            Some(o) => (Transition::Same, o.failures.saturating_add(1)),
        };
        let since = outage.map_or(now, |o| o.since);
        let wait = backoff.delay(failures - 1).min(MAX_PROBE_INTERVAL).max(not_before.unwrap_or_default());
        *outage = Some(Outage { since, failures, next_probe: now + wait });
        transition
    }

    fn take_probe(&self) -> Option<Pass> {
        self.0
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then(|| Pass(Some(self.0.clone())))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        self.0.outage.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Logs a transition of binding `binding` of `route` once: `found` is the
/// message whose send found it and what that send said (a send that was
/// under way when the connection went may have reached the target: its
/// message may arrive twice).
pub(crate) fn log_transition(route: &str, binding: &str, transition: Transition, found: (&str, &str)) {
    let (message_id, reason) = found;
    match transition {
        Transition::Same => {}
        Transition::Down => warn!(
            route,
            binding,
            message_id,
            error = %reason,
            "target unavailable: holding its messages until it is back (no replay is spent)"
        ),
        Transition::Up(down) => {
            info!(route, binding, message_id, outage_secs = down.as_secs_f64(), "target available again")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(60), multiplier: 2.0, jitter: 0.0 }
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_at_a_time_at_the_backoff_pace_and_the_end_wakes_everyone() {
        let a = Availability::default();
        assert!(a.try_pass().is_some());
        assert_eq!(a.unreachable(&backoff(), None), Transition::Down);
        assert!(!a.is_available());
        // Not due yet.
        assert!(a.try_pass().is_none());
        tokio::time::advance(Duration::from_millis(100)).await;
        let probe = a.try_pass().expect("the probe is due");
        // One at a time.
        assert!(a.try_pass().is_none());
        let stop = CancellationToken::new();
        let waiter = {
            let a = a.clone();
            let stop = stop.clone();
            tokio::spawn(async move { a.pass(&stop).await.is_some() })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(a.unreachable(&backoff(), None), Transition::Same);
        drop(probe);
        // The next probe is 200 ms off; the waiter takes it then.
        tokio::time::advance(Duration::from_millis(199)).await;
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(waiter.await.expect("join"));
        match a.reached() {
            Transition::Up(d) => assert!(d >= Duration::from_millis(300), "{d:?}"),
            other => panic!("{other:?}"),
        }
        assert!(a.is_available());
        assert_eq!(a.reached(), Transition::Same);
    }

    #[tokio::test(start_paused = true)]
    async fn probes_are_never_further_apart_than_the_cap() {
        let a = Availability::default();
        for _ in 0..40 {
            let _ = a.unreachable(&backoff(), None);
        }
        tokio::time::advance(MAX_PROBE_INTERVAL).await;
        assert!(a.try_pass().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_stops_with_the_route() {
        let a = Availability::default();
        let _ = a.unreachable(&backoff(), None);
        let _probe = {
            tokio::time::advance(Duration::from_millis(100)).await;
            a.try_pass().expect("due")
        };
        let stop = CancellationToken::new();
        stop.cancel();
        assert!(a.pass(&stop).await.is_none());
    }
}
