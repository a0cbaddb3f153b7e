//! Keeping one sender connection up: [`Supervisor`] connects with backoff,
//! hands the connection to sends, and replaces it when a send reports it
//! broken or it dies while idle. Used by the AMQP senders; each brings its
//! own connection type through [`SupervisedLink`].
//!
//! Every connection gets a generation number. A send that fails reports the
//! generation it used, so a late report about an old connection can never
//! tear down its replacement.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::TransportError;
use crate::backoff::{Backoff, sleep_or_shutdown};
use crate::metrics::{Metrics, labels};

/// A boxed future, for the connection hooks.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A connection a [`Supervisor`] can watch and close.
pub trait SupervisedLink: Send + 'static {
    /// Whether the connection has died on its own (checked while idle).
    fn is_closed(&self) -> bool;
    /// Closes it, bounded in time.
    fn close(self) -> BoxFuture<'static, ()>;
}

/// The current connection and its generation.
pub struct Active<C> {
    pub generation: u64,
    pub link: C,
}

/// Who the supervisor works for, for logs and metrics.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Transport kind: `amqp10`, `amqp091`.
    pub kind: &'static str,
    /// The sender's name.
    pub name: String,
    /// Where it connects, password masked, with any target detail.
    pub describe: String,
}

/// Keeps one connection up until [`Supervisor::close`].
pub struct Supervisor<C: SupervisedLink> {
    identity: Identity,
    active: Mutex<Option<Active<C>>>,
    generation: AtomicU64,
    /// The generation of the last connection reported broken.
    broken: watch::Sender<u64>,
    /// Whether the first connection attempt has ended (either way).
    first_attempt_done: watch::Sender<bool>,
    stop: CancellationToken,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

/// How often an idle connection is checked.
const IDLE_CHECK: Duration = Duration::from_millis(500);

impl<C: SupervisedLink> Supervisor<C> {
    /// Starts connecting in the background with `connect`. Must run inside
    /// a tokio runtime.
    pub fn start<F>(identity: Identity, backoff: Backoff, metrics: Metrics, connect: F) -> Arc<Self>
    where
        F: Fn() -> BoxFuture<'static, Result<C, TransportError>> + Send + Sync + 'static,
    {
        let supervisor = Arc::new(Self {
            identity,
            active: Mutex::new(None),
            generation: AtomicU64::new(0),
            broken: watch::Sender::new(0),
            first_attempt_done: watch::Sender::new(false),
            stop: CancellationToken::new(),
            task: std::sync::Mutex::new(None),
        });
        let task = tokio::spawn(supervisor.clone().run(backoff, metrics, connect));
        if let Ok(mut slot) = supervisor.task.lock() {
            *slot = Some(task);
        }
        supervisor
    }

    async fn run<F>(self: Arc<Self>, backoff: Backoff, metrics: Metrics, connect: F)
    where
        F: Fn() -> BoxFuture<'static, Result<C, TransportError>> + Send + Sync + 'static,
    {
        let Identity { kind, name, describe } = self.identity.clone();
        let labels = labels(&[("kind", kind), ("role", "sender"), ("name", &name)]);
        let mut failures: u32 = 0;
        loop {
            let connected = tokio::select! {
                _ = self.stop.cancelled() => break,
                r = connect() => r,
            };
            match connected {
                Ok(link) => {
                    failures = 0;
                    let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                    *self.active.lock().await = Some(Active { generation, link });
                    self.first_attempt_done.send_replace(true);
                    info!(sender = %name, %describe, "connected");
                    metrics.connections.get_or_create(&labels).inc();
                    metrics.connected.get_or_create(&labels).set(1);
                    tokio::select! {
                        _ = self.stop.cancelled() => {}
                        _ = self.broken_reported(generation) => {}
                        _ = self.dies_while_idle(generation) => {}
                    }
                    metrics.connected.get_or_create(&labels).set(0);
                    let current = self.active.lock().await.take();
                    if let Some(active) = current {
                        active.link.close().await;
                    }
                    if self.stop.is_cancelled() {
                        info!(sender = %name, "disconnected");
                        break;
                    }
                    warn!(sender = %name, %describe, "connection lost; reconnecting");
                }
                Err(e) => {
                    self.first_attempt_done.send_replace(true);
                    let delay = backoff.next(&mut failures);
                    warn!(sender = %name, %describe, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot connect; retrying");
                    if !sleep_or_shutdown(delay, &self.stop).await {
                        break;
                    }
                }
            }
        }
        self.first_attempt_done.send_replace(true);
    }

    async fn broken_reported(&self, generation: u64) {
        let mut rx = self.broken.subscribe();
        let _ = rx.wait_for(|g| *g == generation).await;
    }

    async fn dies_while_idle(&self, generation: u64) {
        loop {
            tokio::time::sleep(IDLE_CHECK).await;
            let guard = self.active.lock().await;
            if guard.as_ref().is_some_and(|a| a.generation == generation && a.link.is_closed()) {
                return;
            }
        }
    }

    /// The current connection (`None` while reconnecting). Hold the guard
    /// only as long as the connection must not change under you.
    ///
    /// Until the first connection attempt ends (the connect hook bounds
    /// it), this waits for it: a daemon that has just started delivers its
    /// first messages on the new connection instead of failing them as
    /// "not connected" and retrying after a backoff.
    pub async fn active(&self) -> MutexGuard<'_, Option<Active<C>>> {
        if !*self.first_attempt_done.borrow() {
            let mut first = self.first_attempt_done.subscribe();
            let _ = first.wait_for(|done| *done).await;
        }
        self.active.lock().await
    }

    /// Retires the connection of `generation` if it is still current and
    /// wakes the supervisor to replace it; later reports about the same
    /// connection do nothing.
    pub async fn mark_broken(&self, generation: u64) {
        let retired = {
            let mut active = self.active.lock().await;
            if active.as_ref().is_some_and(|a| a.generation == generation) { active.take() } else { None }
        };
        if let Some(old) = retired {
            self.broken.send_replace(generation);
            tokio::spawn(old.link.close());
        }
    }

    /// Stops reconnecting and closes the connection.
    pub async fn close(&self) {
        self.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    struct FakeLink {
        closed: Arc<AtomicBool>,
    }

    impl SupervisedLink for FakeLink {
        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
        fn close(self) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
    }

    async fn wait_for_generation(s: &Supervisor<FakeLink>, want: u64) {
        for _ in 0..200 {
            if s.active().await.as_ref().is_some_and(|a| a.generation == want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("generation {want} never became active");
    }

    #[tokio::test]
    async fn a_stale_report_cannot_tear_down_the_replacement_and_idle_deaths_are_noticed() {
        let connects = Arc::new(AtomicU64::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        let (c, flag) = (connects.clone(), closed.clone());
        let identity = Identity { kind: "fake", name: "s".into(), describe: "fake".into() };
        let s = Supervisor::start(identity, Backoff::reconnect(1, 5), Metrics::new(), move || {
            c.fetch_add(1, Ordering::SeqCst);
            let closed = flag.clone();
            closed.store(false, Ordering::SeqCst);
            Box::pin(async move { Ok(FakeLink { closed }) })
        });
        wait_for_generation(&s, 1).await;
        s.mark_broken(1).await;
        wait_for_generation(&s, 2).await;
        s.mark_broken(1).await; // stale: about the first connection
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(s.active().await.as_ref().is_some_and(|a| a.generation == 2));
        assert_eq!(connects.load(Ordering::SeqCst), 2);
        closed.store(true, Ordering::SeqCst); // dies while idle
        wait_for_generation(&s, 3).await;
        s.close().await;
        assert!(s.active().await.is_none());
    }

    #[tokio::test]
    async fn a_send_made_during_the_first_connect_waits_for_it() {
        let identity = Identity { kind: "fake", name: "s".into(), describe: "fake".into() };
        let s = Supervisor::start(identity.clone(), Backoff::reconnect(1, 5), Metrics::new(), || {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(FakeLink { closed: Arc::new(AtomicBool::new(false)) })
            })
        });
        assert!(s.active().await.as_ref().is_some_and(|a| a.generation == 1), "the first send got the connection");
        s.close().await;

        // A first attempt that fails ends the wait: sends see no connection.
        let s = Supervisor::start(identity, Backoff::reconnect(1_000, 5_000), Metrics::new(), || {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err::<FakeLink, _>(TransportError::transient("refused"))
            })
        });
        let waited = tokio::time::timeout(Duration::from_secs(2), s.active()).await;
        assert!(waited.is_ok_and(|guard| guard.is_none()), "the failed attempt ends the wait with no connection");
        s.close().await;
    }
}
