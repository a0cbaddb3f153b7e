//! [`NatsSender`]: publishes to JetStream and completes a send on the
//! stream's acknowledgement (`PubAck`), or, with `jetstream = false`, to
//! core NATS once the publish is written to the connection.
//!
//! `Nats-Msg-Id` is the message's identity. A message ferry sends again
//! (a retry after a lost acknowledgement, an outbox record replayed after
//! a crash) within the stream's duplicate window is acknowledged as a
//! duplicate and not stored twice; those are counted in
//! `ferry_nats_duplicates_total`.
//!
//! Errors: no stream on the subject, a timeout, a lost connection and a
//! stream that refuses for now (full, no quorum) are transient; a message
//! over the server's `max_payload` is permanent.

use std::sync::Arc;
use std::time::Duration;

use crate::config::NatsSenderConfig;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::{Client, HeaderMap, HeaderName, HeaderValue};
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use tokio::sync::OnceCell;
use tracing::debug;

use crate::connection::{Identity, connect};
use crate::egress::{Outgoing, prepare};

/// A client and its JetStream context, made once.
struct Link {
    client: Client,
    js: async_nats::jetstream::Context,
}

/// A NATS publisher used by one or more bindings.
pub struct NatsSender {
    name: String,
    config: NatsSenderConfig,
    metrics: Metrics,
    link: OnceCell<Link>,
}

impl NatsSender {
    /// The sender; its client connects in the background from now on.
    pub fn start(name: &str, config: NatsSenderConfig, metrics: Metrics) -> Arc<Self> {
        let sender = Arc::new(Self { name: name.to_owned(), config, metrics, link: OnceCell::new() });
        // Outside a runtime (a CLI building senders it will not use) the
        // client starts with the first send instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let early = sender.clone();
            runtime.spawn(async move {
                if let Err(e) = early.link().await {
                    tracing::warn!(sender = %early.name, error = %e, "cannot start the NATS client");
                }
            });
        }
        sender
    }

    async fn link(&self) -> Result<&Link, TransportError> {
        self.link
            .get_or_try_init(|| async {
                let c = &self.config;
                let client = connect(
                    c.access(),
                    Identity { role: "sender", name: &self.name },
                    (c.reconnect_initial_ms, c.reconnect_max_ms),
                    &self.metrics,
                    true,
                )
                .await?;
                let js = async_nats::jetstream::ContextBuilder::new()
                    .timeout(Duration::from_millis(c.ack_timeout_ms))
                    .build(client.clone());
                Ok::<Link, TransportError>(Link { client, js })
            })
            .await
    }
}

/// `headers` as the client takes them (each already checked by
/// [`crate::egress::valid_name`] and [`crate::egress::valid_value`]).
fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, TransportError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name: HeaderName = name.parse().map_err(|_| TransportError::permanent(format!("header name {name:?}")))?;
        let value: HeaderValue = value
            .parse()
            .map_err(|_| TransportError::permanent(format!("header {name}: a value with a line break")))?;
        map.append(name, value);
    }
    Ok(map)
}

/// A failed JetStream publish, classified once: no stream answering for the
/// subject (no responders), no PubAck in time, a broken connection or a
/// stream at its `max_ack_pending` say the target takes nothing now
/// (*unavailable*: an outage, no replay is spent); a message over the
/// server's `max_payload` never fits (*permanent*); anything else the
/// stream answered is about this message (*transient*).
fn publish_error(e: &async_nats::jetstream::context::PublishError) -> TransportError {
    match e.kind() {
        PublishErrorKind::MaxPayloadExceeded => TransportError::permanent(format!("publish: {e}")),
        PublishErrorKind::StreamNotFound => {
            TransportError::unavailable(format!("publish: no stream takes this subject (yet): {e}"))
        }
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::MaxAckPending => {
            TransportError::unavailable(format!("publish: {e}"))
        }
        _ => TransportError::transient(format!("publish: {e}")),
    }
}

#[async_trait]
impl Sender for NatsSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let Outgoing { subject, headers, payload, dropped } = prepare(&self.config, &msg)?;
        if dropped > 0 && msg.counts_losses() {
            Metrics::add(
                &self.metrics.counter_family(&crate::HEADER_DROPPED),
                &[("sender", &self.name)],
                u64::from(dropped),
            );
        }
        let headers = header_map(&headers)?;
        let link = self.link().await?;
        if !self.config.jetstream {
            link.client
                .publish_with_headers(subject, headers, payload)
                .await
                .map_err(|e| TransportError::unavailable(format!("publish: {e}")))?;
            return link.client.flush().await.map_err(|e| TransportError::unavailable(format!("flush: {e}")));
        }
        let pending = link
            .js
            .send_publish(subject, PublishMessage::build().payload(payload).headers(headers))
            .await
            .map_err(|e| publish_error(&e))?;
        let ack = pending.await.map_err(|e| publish_error(&e))?;
        if ack.duplicate {
            debug!(sender = %self.name, stream = %ack.stream, sequence = ack.sequence, message_id = %msg.envelope.id, "the stream had this message already");
            Metrics::inc(
                &self.metrics.counter_family(&crate::DUPLICATES),
                &[("sender", &self.name), ("stream", &ack.stream)],
            );
        }
        Ok(())
    }

    async fn close(&self) {
        if let Some(link) = self.link.get() {
            let _ = tokio::time::timeout(Duration::from_secs(5), link.client.flush()).await;
        }
    }
}
