//! [`Amqp10Sender`]: one sending link to a fixed target address.
//!
//! A [`Supervisor`] keeps the connection up: it connects with backoff,
//! publishes the link for sends to use, and replaces it when a send finds
//! it broken or it dies while idle. Sends go out unsettled, many at a time, and each completes on
//! the broker's outcome: `accepted` is done; `released` and `modified` are
//! transient; `rejected` is transient when the condition is
//! `amqp:resource-limit-exceeded` (throttling) and permanent otherwise.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fe2o3_amqp::link::Sender as LinkSender;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::Outcome;
use ferry_config::TlsConfig;
use ferry_core::TransportError;
use ferry_core::backoff::Backoff;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_core::supervisor::{BoxFuture, Identity, SupervisedLink, Supervisor};

use crate::config::Amqp10SenderConfig;
use crate::connection::{CLOSE_TIMEOUT, CONNECT_TIMEOUT, Claims, Link, open};
use crate::egress::{check_address, to_message};
use crate::service_bus::Sas;

/// An AMQP 1.0 sending link shared by every binding that names it.
pub struct Amqp10Sender {
    config: Amqp10SenderConfig,
    supervisor: Arc<Supervisor<SendingLink>>,
}

/// A connection with its sending link.
struct SendingLink {
    link: Link,
    sender: LinkSender,
}

impl SupervisedLink for SendingLink {
    fn is_closed(&self) -> bool {
        self.link.connection.is_closed()
    }

    fn close(self) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.sender.detach()).await;
            self.link.close().await;
        })
    }
}

impl Amqp10Sender {
    /// Starts connecting in the background. Must run inside a tokio runtime.
    pub fn start(name: &str, config: Amqp10SenderConfig, metrics: Metrics) -> Arc<Self> {
        let identity = Identity {
            kind: "amqp10",
            name: name.to_owned(),
            describe: format!("{} address {}", ferry_core::redact::url(&config.url), config.address),
        };
        let backoff = Backoff::reconnect(config.reconnect_initial_ms, config.reconnect_max_ms);
        let target = Arc::new(Target {
            url: config.url.clone(),
            address: config.address.clone(),
            container: format!("ferry-{name}"),
            tls: config.tls.clone(),
            sas: config.service_bus().sas(),
            metrics: metrics.clone(),
            name: name.to_owned(),
        });
        let connect = move || -> BoxFuture<'static, Result<SendingLink, TransportError>> {
            let target = target.clone();
            Box::pin(async move { connect(&target).await })
        };
        let supervisor = Supervisor::start(identity, backoff, metrics, connect);
        Arc::new(Self { config, supervisor })
    }
}

/// Where a sender connects, and how.
struct Target {
    url: String,
    address: String,
    container: String,
    tls: Option<TlsConfig>,
    /// Service Bus: the SAS credentials.
    sas: Option<Sas>,
    metrics: Metrics,
    name: String,
}

async fn connect(target: &Target) -> Result<SendingLink, TransportError> {
    let Target { url, address, container, tls, .. } = target;
    let claims =
        target.sas.as_ref().map(|sas| Claims { sas, entity: address, metrics: &target.metrics, part: &target.name });
    let mut link = open(url, container, tls.as_ref(), claims).await?;
    let attach =
        LinkSender::attach(&mut link.session, format!("{container}-{}", uuid::Uuid::new_v4()), address.as_str());
    match tokio::time::timeout(CONNECT_TIMEOUT, attach).await {
        Ok(Ok(sender)) => Ok(SendingLink { link, sender }),
        other => {
            link.close().await;
            let reason = match other {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".to_owned(),
            };
            Err(TransportError::transient(format!("attach to {address:?}: {reason}")))
        }
    }
}

/// Classifies the broker's outcome: `resource-limit-exceeded` says the
/// broker takes nothing now (*unavailable*); released and modified are
/// about this message (*transient*); any other rejection is *permanent*.
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
                    Err(TransportError::unavailable(format!("broker throttled the message: {description}")))
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
        check_address(&self.config, &msg.address)?;
        let message = to_message(&msg.envelope, self.config.durable, self.config.profile)?;
        let (generation, delivery) = {
            let mut guard = self.supervisor.active().await;
            let Some(active) = guard.as_mut() else {
                return Err(TransportError::unavailable("not connected to the broker"));
            };
            let generation = active.generation;
            match active.link.sender.send_batchable(message).await {
                Ok(fut) => (generation, fut),
                Err(e) => {
                    drop(guard);
                    self.supervisor.mark_broken(generation).await;
                    return Err(classify_send_error(e));
                }
            }
        };
        let timeout = Duration::from_millis(self.config.send_timeout_ms);
        match tokio::time::timeout(timeout, delivery).await {
            Ok(Ok(outcome)) => outcome_result(outcome),
            Ok(Err(e)) => {
                self.supervisor.mark_broken(generation).await;
                Err(classify_send_error(e))
            }
            Err(_) => {
                self.supervisor.mark_broken(generation).await;
                Err(TransportError::unavailable(format!(
                    "no outcome from the broker within {} ms",
                    timeout.as_millis()
                )))
            }
        }
    }

    async fn close(&self) {
        self.supervisor.close().await;
    }
}

fn classify_send_error(e: fe2o3_amqp::link::SendError) -> TransportError {
    use fe2o3_amqp::link::SendError;
    match e {
        SendError::MessageSizeExceeded(e) => TransportError::permanent(format!("message too large for the link: {e}")),
        SendError::MessageEncodeError => TransportError::permanent("message could not be encoded"),
        // The link, session or connection went away under the send.
        other => TransportError::unavailable(format!("send failed: {other}")),
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
