//! Pausing a route at run time (`POST /routes/{id}/pause`, `ferry ctl
//! pause`): a paused route takes no new delivery from its receiver, lets
//! the ones it holds finish, and leaves everything else at the source,
//! unacknowledged, so nothing is lost and nothing is sent twice by the pause
//! itself. The gate outlives the route it belongs to: the daemon keeps one
//! per route id, so a route that a reload restarts stays paused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Whether a route may take deliveries, and how many it holds.
#[derive(Clone)]
pub struct Gate(Arc<Inner>);

struct Inner {
    paused: watch::Sender<bool>,
    in_flight: AtomicUsize,
    /// Told each time `in_flight` drops to zero.
    idle: Notify,
}

impl Default for Gate {
    fn default() -> Self {
        Self(Arc::new(Inner { paused: watch::Sender::new(false), in_flight: AtomicUsize::new(0), idle: Notify::new() }))
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("paused", &self.is_paused()).field("in_flight", &self.in_flight()).finish()
    }
}

impl Gate {
    /// Stops the route taking deliveries; those it holds go on. Returns
    /// whether it was running.
    pub fn pause(&self) -> bool {
        !self.0.paused.send_replace(true)
    }

    /// Lets the route take deliveries again. Returns whether it was paused.
    pub fn resume(&self) -> bool {
        self.0.paused.send_replace(false)
    }

    pub fn is_paused(&self) -> bool {
        *self.0.paused.borrow()
    }

    /// Deliveries the route holds now (taken, not yet settled).
    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Acquire)
    }

    /// Waits until the route may take a delivery; `false` when `shutdown`
    /// fired first.
    pub(crate) async fn opened(&self, shutdown: &CancellationToken) -> bool {
        if !self.is_paused() {
            return true;
        }
        let mut paused = self.0.paused.subscribe();
        tokio::select! {
            _ = shutdown.cancelled() => false,
            r = paused.wait_for(|p| !*p) => r.is_ok(),
        }
    }

    /// Resolves when the route is paused (at once if it is).
    pub(crate) async fn closed(&self) {
        let mut paused = self.0.paused.subscribe();
        if paused.wait_for(|p| *p).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Counts a delivery taken; the guard counts it settled when dropped.
    pub(crate) fn hold(&self) -> Held {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        Held(self.clone())
    }

    /// Waits until the route holds no delivery.
    pub async fn idle(&self) {
        loop {
            let told = self.0.idle.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            told.await;
        }
    }
}

/// One delivery held by a route; dropping it settles the count.
pub(crate) struct Held(Gate);

impl Drop for Held {
    fn drop(&mut self) {
        if self.0.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_paused_gate_opens_on_resume_and_idle_waits_for_the_last_delivery() {
        let gate = Gate::default();
        let stop = CancellationToken::new();
        assert!(gate.opened(&stop).await, "a new gate is open");
        assert!(gate.pause(), "it was running");
        assert!(!gate.pause(), "pausing twice says it was paused");
        tokio::time::timeout(Duration::from_secs(5), gate.closed()).await.expect("closed at once when paused");
        let waiting = tokio::spawn({
            let (gate, stop) = (gate.clone(), stop.clone());
            async move { gate.opened(&stop).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a paused gate does not open");
        assert!(gate.resume());
        assert!(tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("opens on resume").expect("task"));

        let held = gate.hold();
        let second = gate.hold();
        assert_eq!(gate.in_flight(), 2);
        let idle = tokio::spawn({
            let gate = gate.clone();
            async move { gate.idle().await }
        });
        drop(held);
        tokio::task::yield_now().await;
        assert!(!idle.is_finished(), "one delivery is still held");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), idle).await.expect("idle once none is held").expect("task");
    }

    #[tokio::test]
    async fn shutdown_ends_a_wait_on_a_paused_gate() {
        let gate = Gate::default();
        gate.pause();
        let stop = CancellationToken::new();
        stop.cancel();
        assert!(!gate.opened(&stop).await);
    }
}
