//! [`Amqp10Sender`]: one sending link to a fixed target address.
//!
//! A supervisor task keeps the connection up: it connects with backoff,
//! publishes the link for sends to use, and replaces it when a send finds
//! it broken. Sends go out unsettled, many at a time, and each completes on
//! the broker's outcome: `accepted` is done; `released` and `modified` are
//! transient; `rejected` is transient when the condition is
//! `amqp:resource-limit-exceeded` (throttling) and permanent otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fe2o3_amqp::link::Sender as LinkSender;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::Outcome;
use ferry_config::Amqp10SenderConfig;
use ferry_core::TransportError;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::connection::{CLOSE_TIMEOUT, CONNECT_TIMEOUT, Link, open, reconnect_backoff};
use crate::egress::to_message;

/// An AMQP 1.0 sending link shared by every binding that names it.
pub struct Amqp10Sender {
    shared: Arc<Shared>,
    supervisor: std::sync::Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    name: String,
    config: Amqp10SenderConfig,
    metrics: Metrics,
    active: Mutex<Option<Active>>,
    /// Bumped for every new link, so a failure seen on an old link cannot
    /// tear down its replacement.
    generation: AtomicU64,
    /// The generation of the last link reported broken.
    broken: watch::Sender<u64>,
    stop: CancellationToken,
}

struct Active {
    generation: u64,
    link: Link,
    sender: LinkSender,
}

impl Amqp10Sender {
    /// Starts connecting in the background. Must run inside a tokio runtime.
    pub fn start(name: &str, config: Amqp10SenderConfig, metrics: Metrics) -> Arc<Self> {
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            config,
            metrics,
            active: Mutex::new(None),
            generation: AtomicU64::new(0),
            broken: watch::Sender::new(0),
            stop: CancellationToken::new(),
        });
        let supervisor = tokio::spawn(supervise(shared.clone()));
        Arc::new(Self { shared, supervisor: std::sync::Mutex::new(Some(supervisor)) })
    }
}

fn labels(name: &str) -> ferry_core::metrics::Labels {
    ferry_core::metrics::labels(&[("kind", "amqp10"), ("role", "sender"), ("name", name)])
}

async fn connect(shared: &Shared) -> Result<(Link, LinkSender), TransportError> {
    let mut link = open(&shared.config.url, &format!("ferry-{}", shared.name)).await?;
    let attach = LinkSender::attach(
        &mut link.session,
        format!("ferry-{}-{}", shared.name, uuid::Uuid::new_v4()),
        shared.config.address.as_str(),
    );
    match tokio::time::timeout(CONNECT_TIMEOUT, attach).await {
        Ok(Ok(sender)) => Ok((link, sender)),
        other => {
            link.close().await;
            let reason = match other {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".to_owned(),
            };
            Err(TransportError::transient(format!("attach to {:?}: {reason}", shared.config.address)))
        }
    }
}

/// Keeps one link up until the sender is closed.
async fn supervise(shared: Arc<Shared>) {
    let name = shared.name.as_str();
    let url = ferry_core::redact::url(&shared.config.url);
    let backoff = reconnect_backoff(shared.config.reconnect());
    let labels = labels(name);
    let mut failures: u32 = 0;
    loop {
        let connected = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = connect(&shared) => r,
        };
        match connected {
            Ok((link, sender)) => {
                failures = 0;
                let generation = shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
                *shared.active.lock().await = Some(Active { generation, link, sender });
                info!(sender = name, %url, address = %shared.config.address, "connected");
                shared.metrics.connections.get_or_create(&labels).inc();
                shared.metrics.connected.get_or_create(&labels).set(1);
                // Also notice a connection that dies while no send uses it.
                let idle_check = async {
                    loop {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        let guard = shared.active.lock().await;
                        if guard.as_ref().is_some_and(|a| a.generation == generation && a.link.connection.is_closed()) {
                            break;
                        }
                    }
                };
                tokio::select! {
                    _ = shared.stop.cancelled() => {}
                    _ = broken_reported(&shared, generation) => {}
                    _ = idle_check => {}
                }
                shared.metrics.connected.get_or_create(&labels).set(0);
                let old = shared.active.lock().await.take();
                if let Some(active) = old {
                    close(active).await;
                }
                if shared.stop.is_cancelled() {
                    info!(sender = name, "disconnected");
                    break;
                }
                warn!(sender = name, %url, "connection lost; reconnecting");
            }
            Err(e) => {
                let delay = backoff.delay(failures);
                failures = failures.saturating_add(1);
                warn!(sender = name, %url, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot connect; retrying");
                tokio::select! {
                    _ = shared.stop.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

async fn close(active: Active) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, active.sender.detach()).await;
    active.link.close().await;
}

/// Resolves once the link of `generation` is reported broken; reports about
/// older links are ignored.
async fn broken_reported(shared: &Shared, generation: u64) {
    let mut rx = shared.broken.subscribe();
    let _ = rx.wait_for(|g| *g == generation).await;
}

impl Shared {
    /// Retires the link of `generation` if it is still the current one and
    /// wakes the supervisor to replace it. Later failures of the same link
    /// find it gone and do nothing, so a replacement is never torn down by
    /// a stale report.
    async fn mark_broken(&self, generation: u64) {
        let retired = {
            let mut active = self.active.lock().await;
            if active.as_ref().is_some_and(|a| a.generation == generation) { active.take() } else { None }
        };
        if let Some(old) = retired {
            self.broken.send_replace(generation);
            tokio::spawn(close(old));
        }
    }
}

/// Classifies the broker's outcome.
fn outcome_result(outcome: Outcome) -> Result<(), TransportError> {
    match outcome {
        Outcome::Accepted(_) => Ok(()),
        Outcome::Released(_) => Err(TransportError::transient("broker released the message")),
        Outcome::Modified(_) => Err(TransportError::transient("broker returned the message as modified")),
        Outcome::Rejected(rejected) => {
            let condition = rejected.error.as_ref().map(|e| &e.condition);
            let description = rejected
                .error
                .as_ref()
                .and_then(|e| e.description.clone())
                .unwrap_or_else(|| "no condition".to_owned());
            match condition {
                Some(ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)) => {
                    Err(TransportError::transient(format!("broker throttled the message: {description}")))
                }
                Some(c) => {
                    Err(TransportError::permanent(format!("broker rejected the message ({c:?}): {description}")))
                }
                None => Err(TransportError::permanent("broker rejected the message with no condition")),
            }
        }
        #[allow(unreachable_patterns)]
        other => Err(TransportError::permanent(format!("unexpected outcome {other:?}"))),
    }
}

#[async_trait]
impl Sender for Amqp10Sender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let shared = &self.shared;
        if !msg.address.is_empty() && msg.address != shared.config.address {
            return Err(TransportError::permanent(format!(
                "address {:?} differs from the sender's link address {:?}; an AMQP 1.0 link has one target",
                msg.address, shared.config.address
            )));
        }
        let message = to_message(&msg.envelope, shared.config.durable)?;
        let (generation, delivery) = {
            let mut guard = shared.active.lock().await;
            let Some(active) = guard.as_mut() else {
                return Err(TransportError::transient("not connected to the broker"));
            };
            let generation = active.generation;
            match active.sender.send_batchable(message).await {
                Ok(fut) => (generation, fut),
                Err(e) => {
                    drop(guard);
                    shared.mark_broken(generation).await;
                    return Err(classify_send_error(e));
                }
            }
        };
        let timeout = Duration::from_millis(shared.config.send_timeout_ms);
        match tokio::time::timeout(timeout, delivery).await {
            Ok(Ok(outcome)) => outcome_result(outcome),
            Ok(Err(e)) => {
                shared.mark_broken(generation).await;
                Err(classify_send_error(e))
            }
            Err(_) => {
                shared.mark_broken(generation).await;
                Err(TransportError::transient(format!("no outcome from the broker within {} ms", timeout.as_millis())))
            }
        }
    }

    async fn close(&self) {
        self.shared.stop.cancel();
        let handle = self.supervisor.lock().ok().and_then(|mut h| h.take());
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }
}

fn classify_send_error(e: fe2o3_amqp::link::SendError) -> TransportError {
    use fe2o3_amqp::link::SendError;
    match e {
        SendError::MessageSizeExceeded(e) => TransportError::permanent(format!("message too large for the link: {e}")),
        SendError::MessageEncodeError => TransportError::permanent("message could not be encoded"),
        other => TransportError::transient(format!("send failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::definitions::Error as AmqpErrorBody;
    use fe2o3_amqp::types::messaging::{Accepted, Modified, Rejected, Released};

    use super::*;

    #[test]
    fn outcomes_are_classified_as_the_seed_says() {
        assert!(outcome_result(Outcome::Accepted(Accepted {})).is_ok());
        assert!(outcome_result(Outcome::Released(Released {})).expect_err("released").is_transient());
        let modified = Modified { delivery_failed: Some(true), undeliverable_here: None, message_annotations: None };
        assert!(outcome_result(Outcome::Modified(modified)).expect_err("modified").is_transient());
        assert!(!outcome_result(Outcome::Rejected(Rejected { error: None })).expect_err("rejected").is_transient());
        let throttled =
            AmqpErrorBody::new(ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded), Some("slow".into()), None);
        assert!(
            outcome_result(Outcome::Rejected(Rejected { error: Some(throttled) }))
                .expect_err("throttled")
                .is_transient()
        );
        let other = AmqpErrorBody::new(ErrorCondition::AmqpError(AmqpError::NotAllowed), None, None);
        assert!(
            !outcome_result(Outcome::Rejected(Rejected { error: Some(other) })).expect_err("refused").is_transient()
        );
    }
}
