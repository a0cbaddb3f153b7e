//! [`RedisSender`]: appends each message to a stream with `XADD` and
//! completes a send once Redis answered with the new entry's id.
//!
//! Redis keeps no identity of its own, so a message ferry sends again (a
//! retry after a lost answer, an outbox record replayed after a crash) is
//! a second entry; the identity field lets a reader drop it. A broken
//! connection, a timeout and a server that refuses for now (loading,
//! out of memory) are transient; `WRONGTYPE` (the key is not a stream) is
//! permanent.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::config::RedisStreamsSenderConfig;
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::backoff::Backoff;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::egress::{Outgoing, prepare};
use crate::link::{Link, client, transport_error};

/// How often an idle sender checks its connection (readiness follows).
const PING_EVERY: Duration = Duration::from_secs(2);

/// A Redis Streams writer used by one or more bindings.
pub struct RedisSender {
    name: String,
    config: RedisStreamsSenderConfig,
    metrics: Metrics,
    link: Result<Link, TransportError>,
    stop: CancellationToken,
}

impl RedisSender {
    /// The sender; it connects in the background from now on, and checks
    /// its connection while idle.
    pub fn start(name: &str, config: RedisStreamsSenderConfig, metrics: Metrics) -> Arc<Self> {
        let link = client(&config.url, config.tls.as_ref())
            .map(|c| Link::new(c, Duration::from_millis(config.timeout_ms), ("sender", name), &metrics, true));
        let sender = Arc::new(Self { name: name.to_owned(), config, metrics, link, stop: CancellationToken::new() });
        // Outside a runtime (a CLI building senders it will not use) it
        // connects with the first send instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(keep(Arc::downgrade(&sender), sender.stop.clone()));
        }
        sender
    }

    fn link(&self) -> Result<&Link, TransportError> {
        self.link.as_ref().map_err(Clone::clone)
    }
}

/// Connects, and pings while idle so that readiness follows the server;
/// ends with the sender.
async fn keep(sender: Weak<RedisSender>, stop: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let delay = {
            let Some(s) = sender.upgrade() else { return };
            let Ok(link) = s.link() else { return };
            match link.run(&redis::cmd("PING")).await {
                Ok(_) => {
                    failures = 0;
                    PING_EVERY
                }
                Err(e) => {
                    debug!(sender = %s.name, error = %e, "Redis does not answer");
                    Backoff::reconnect(s.config.reconnect_initial_ms, s.config.reconnect_max_ms).next(&mut failures)
                }
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[async_trait]
impl Sender for RedisSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let outgoing: Outgoing = prepare(&self.config, &msg)?;
        if outgoing.dropped > 0 && msg.counts_losses() {
            Metrics::add(
                &self.metrics.counter_family(&crate::FIELD_DROPPED),
                &[("name", &self.name), ("direction", "egress")],
                u64::from(outgoing.dropped),
            );
        }
        let id = self.link()?.run(&outgoing.command()).await.map_err(|e| transport_error("XADD", &e))?;
        debug!(sender = %self.name, stream = %outgoing.stream, entry = ?crate::entry::text(&id), "appended");
        Ok(())
    }

    async fn close(&self) {
        self.stop.cancel();
    }
}

impl Drop for RedisSender {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
