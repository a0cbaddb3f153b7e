//! [`SqsSender`]: sends through SendMessageBatch, with one result per
//! message.
//!
//! Concurrent `send` calls are gathered into batches of up to `batch_size`
//! (waiting at most `batch_linger_ms` for company); [`SqsSender::send_batch`]
//! sends a caller's batch as it is. Each message's attributes follow the
//! ten-attribute and byte budgets ([`crate::attributes::select`]); on FIFO
//! queues the MessageGroupId comes from a header and the deduplication id
//! from `x-bridge.dedup-id` / `x-bridge.idempotency-key`, else a hash of the
//! logical subject and identity (never of the destination). The MD5s SQS
//! returns are checked: a mismatch is a transient failure, never a success.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::SqsSenderConfig;
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use ferry_core::TransportError;
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, names};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::attributes::{AttributeValue, Selection, body, md5_of_body, md5_of_selection, select};
use crate::client::{QueueTarget, classify, client, queue_url};

/// A message ready for SendMessageBatch.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedMessage {
    pub body: String,
    pub selection: Selection,
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
}

type Reply = oneshot::Sender<Result<(), TransportError>>;

/// An SQS queue used by one or more bindings.
pub struct SqsSender {
    name: String,
    config: SqsSenderConfig,
    queue: tokio::sync::OnceCell<(Client, String)>,
    target: QueueTarget,
    batches: mpsc::Sender<(PreparedMessage, Reply)>,
    metrics: Metrics,
}

impl SqsSender {
    /// Creates the sender; the queue is resolved on first use.
    pub fn start(name: &str, config: SqsSenderConfig, metrics: Metrics) -> std::sync::Arc<Self> {
        let target = target_of(&config);
        let (tx, rx) = mpsc::channel(1024);
        let sender = std::sync::Arc::new(Self {
            name: name.to_owned(),
            config,
            queue: tokio::sync::OnceCell::new(),
            target,
            batches: tx,
            metrics,
        });
        tokio::spawn(batch_loop(std::sync::Arc::downgrade(&sender), rx));
        // Resolve the queue now, so readiness shows before the first send.
        let weak = std::sync::Arc::downgrade(&sender);
        tokio::spawn(async move {
            let mut failures = 0u32;
            while let Some(this) = weak.upgrade() {
                let conn_labels = labels(&[("kind", "sqs"), ("role", "sender"), ("name", &this.name)]);
                match this.queue().await {
                    Ok(_) => {
                        this.metrics.connected.get_or_create(&conn_labels).set(1);
                        break;
                    }
                    Err(e) => {
                        warn!(sender = %this.name, error = %e, "cannot resolve the queue; retrying");
                        drop(this);
                        tokio::time::sleep(Duration::from_millis(200 * 2u64.pow(failures.min(5)))).await;
                        failures += 1;
                    }
                }
            }
        });
        sender
    }

    async fn queue(&self) -> Result<&(Client, String), TransportError> {
        self.queue
            .get_or_try_init(|| async {
                let sdk = client(&self.target).await;
                let url = queue_url(&sdk, &self.target).await?;
                info!(sender = %self.name, queue = %url, "connected; sending");
                Ok::<_, TransportError>((sdk, url))
            })
            .await
    }

    /// Turns an outbound message into a batch entry, or a permanent error.
    pub fn prepare(&self, msg: &OutboundMessage) -> Result<PreparedMessage, TransportError> {
        let prepared = prepare(&self.config, &self.target, msg)?;
        // Counted once per message and binding, not on every retry.
        if prepared.selection.dropped > 0 && msg.counts_losses() {
            self.metrics
                .counter_family(&crate::DROPPED_ATTRIBUTES)
                .get_or_create(&labels(&[("sender", &self.name)]))
                .inc_by(u64::from(prepared.selection.dropped));
        }
        Ok(prepared)
    }

    /// Sends up to ten messages in one SendMessageBatch. Returns one result
    /// per message, index-aligned; an error for the whole call means nothing
    /// was sent (the queue could not be resolved).
    pub async fn send_batch(
        &self,
        msgs: &[OutboundMessage],
    ) -> Result<Vec<Result<(), TransportError>>, TransportError> {
        if msgs.len() > 10 {
            return Err(TransportError::permanent("SendMessageBatch takes at most 10 messages"));
        }
        let prepared: Vec<Result<PreparedMessage, TransportError>> = msgs.iter().map(|m| self.prepare(m)).collect();
        let ready: Vec<(usize, PreparedMessage)> =
            prepared.iter().enumerate().filter_map(|(i, p)| p.as_ref().ok().map(|p| (i, p.clone()))).collect();
        let mut results: Vec<Result<(), TransportError>> = prepared.into_iter().map(|p| p.map(|_| ())).collect();
        if ready.is_empty() {
            return Ok(results);
        }
        let (sdk, url) = self.queue().await?;
        let sent = send_entries(sdk, url, &ready.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>()).await;
        for ((index, _), result) in ready.into_iter().zip(sent) {
            results[index] = result;
        }
        Ok(results)
    }
}

/// The queue a sender's config names.
pub fn target_of(config: &SqsSenderConfig) -> QueueTarget {
    QueueTarget {
        queue_url: config.queue_url.clone(),
        queue_name: config.queue_name.clone(),
        endpoint_url: config.endpoint_url.clone(),
        region: config.region.clone(),
    }
}

/// The batch entry a sender with `config` makes of `msg` for `target`: the
/// body, the attributes chosen under SQS's budgets, and on a FIFO queue the
/// group and deduplication ids. Errors are permanent.
pub fn prepare(
    config: &SqsSenderConfig,
    target: &QueueTarget,
    msg: &OutboundMessage,
) -> Result<PreparedMessage, TransportError> {
    if !msg.address.is_empty() && msg.address != target.label() {
        return Err(TransportError::permanent(format!(
            "this sqs sender sends to {}; a per-message address ({}) is not supported",
            target.label(),
            msg.address
        )));
    }
    let envelope = &msg.envelope;
    let body = body(envelope)?;
    if body.len() > config.max_message_bytes {
        return Err(TransportError::permanent(format!(
            "body is {} bytes, over max_message_bytes {}",
            body.len(),
            config.max_message_bytes
        )));
    }
    let selection = select(envelope, body.len(), config.max_message_bytes);
    let (group_id, dedup_id) = if target.is_fifo() {
        let group = envelope
            .text_header(&config.message_group_header)
            .filter(|g| !g.is_empty() && g.len() <= 128)
            .unwrap_or(&config.default_message_group)
            .to_owned();
        (Some(group), Some(dedup_id(envelope)))
    } else {
        (None, None)
    };
    Ok(PreparedMessage { body, selection, group_id, dedup_id })
}

/// The deduplication id: a trusted bridge header, else a hash of the
/// logical subject and the identity (never of the destination).
pub fn dedup_id(envelope: &Envelope) -> String {
    for header in [names::DEDUP_ID, names::IDEMPOTENCY_KEY] {
        if let Some(v) = envelope.text_header(header)
            && !v.is_empty()
            && v.len() <= 128
            && v.chars().all(|c| c.is_ascii_graphic())
        {
            return v.to_owned();
        }
    }
    let mut hash = Sha256::new();
    hash.update(envelope.subject.as_deref().unwrap_or("").as_bytes());
    hash.update([0u8]);
    hash.update(envelope.id.as_bytes());
    hex::encode(hash.finalize())
}

fn to_sdk(value: &AttributeValue) -> Option<MessageAttributeValue> {
    let builder = MessageAttributeValue::builder().data_type(value.data_type());
    match value {
        AttributeValue::String(s) | AttributeValue::Number(s) => builder.string_value(s),
        AttributeValue::Binary(b) => builder.binary_value(Blob::new(b.clone())),
    }
    .build()
    .ok()
}

/// One SendMessageBatch call; one result per entry, in order.
async fn send_entries(sdk: &Client, url: &str, entries: &[PreparedMessage]) -> Vec<Result<(), TransportError>> {
    let mut request = Vec::with_capacity(entries.len());
    for (i, p) in entries.iter().enumerate() {
        let attributes: HashMap<String, MessageAttributeValue> =
            p.selection.attributes.iter().filter_map(|(k, v)| to_sdk(v).map(|v| (k.clone(), v))).collect();
        let entry = SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body(&p.body)
            .set_message_attributes((!attributes.is_empty()).then_some(attributes))
            .set_message_group_id(p.group_id.clone())
            .set_message_deduplication_id(p.dedup_id.clone())
            .build();
        match entry {
            Ok(e) => request.push(e),
            Err(e) => {
                return entries.iter().map(|_| Err(TransportError::permanent(format!("invalid entry: {e}")))).collect();
            }
        }
    }
    let out = match sdk.send_message_batch().queue_url(url).set_entries(Some(request)).send().await {
        Ok(out) => out,
        Err(e) => {
            let error = classify(e);
            return entries.iter().map(|_| Err(error.clone())).collect();
        }
    };
    let mut results: Vec<Result<(), TransportError>> =
        entries.iter().map(|_| Err(TransportError::transient("SQS returned no result for this entry"))).collect();
    for ok in out.successful() {
        let Some(i) = ok.id().parse::<usize>().ok().filter(|i| *i < entries.len()) else { continue };
        let p = &entries[i];
        results[i] = if !ok.md5_of_message_body().eq_ignore_ascii_case(&md5_of_body(&p.body)) {
            Err(TransportError::transient("MD5OfMessageBody returned by SQS does not match the body sent"))
        } else if let (Some(expected), Some(got)) = (md5_of_selection(&p.selection), ok.md5_of_message_attributes())
            && !expected.eq_ignore_ascii_case(got)
        {
            Err(TransportError::transient("MD5OfMessageAttributes returned by SQS does not match the attributes sent"))
        } else {
            Ok(())
        };
    }
    for failed in out.failed() {
        let Some(i) = failed.id().parse::<usize>().ok().filter(|i| *i < entries.len()) else { continue };
        let why = format!("{}: {}", failed.code(), failed.message().unwrap_or(""));
        results[i] = if failed.code().contains("Throttl") {
            Err(TransportError::unavailable(why))
        } else if failed.sender_fault() {
            Err(TransportError::permanent(why))
        } else {
            Err(TransportError::transient(why))
        };
    }
    results
}

/// Gathers concurrent sends into batches.
async fn batch_loop(sender: std::sync::Weak<SqsSender>, mut rx: mpsc::Receiver<(PreparedMessage, Reply)>) {
    while let Some(first) = rx.recv().await {
        let Some(this) = sender.upgrade() else { break };
        let size = usize::try_from(this.config.batch_size).unwrap_or(10).clamp(1, 10);
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + Duration::from_millis(this.config.batch_linger_ms);
        while batch.len() < size {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(next)) => batch.push(next),
                _ => break,
            }
        }
        let conn_labels = labels(&[("kind", "sqs"), ("role", "sender"), ("name", &this.name)]);
        let results = match this.queue().await {
            Ok((sdk, url)) => {
                let prepared: Vec<PreparedMessage> = batch.iter().map(|(p, _)| p.clone()).collect();
                send_entries(sdk, url, &prepared).await
            }
            Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
        };
        let any_transient = results.iter().any(|r| matches!(r, Err(e) if e.is_transient()));
        this.metrics.connected.get_or_create(&conn_labels).set(if any_transient { 0 } else { 1 });
        for ((_, reply), result) in batch.into_iter().zip(results) {
            match &result {
                // An outage is logged once, by the route, when it starts.
                Err(e) if e.is_unavailable() => debug!(sender = %this.name, error = %e, "send failed"),
                Err(e) => warn!(sender = %this.name, error = %e, "send failed"),
                Ok(()) => {}
            }
            let _ = reply.send(result);
        }
    }
}

#[async_trait]
impl Sender for SqsSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let prepared = self.prepare(&msg)?;
        let (tx, rx) = oneshot::channel();
        self.batches.send((prepared, tx)).await.map_err(|_| TransportError::transient("sqs sender stopped"))?;
        rx.await.map_err(|_| TransportError::transient("sqs sender stopped"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_ids_prefer_bridge_headers_and_otherwise_hash_subject_and_identity_only() {
        let mut e = Envelope::new("id-1", &b"x"[..]);
        e.subject = Some("order.created".into());
        let hashed = dedup_id(&e);
        assert_eq!(hashed.len(), 64);
        let mut same = e.clone();
        same.set_header("mqtt.topic", "another/destination");
        assert_eq!(dedup_id(&same), hashed, "the destination never changes the id");
        let mut other = e.clone();
        other.subject = Some("order.cancelled".into());
        assert_ne!(dedup_id(&other), hashed);
        e.set_header("x-bridge.idempotency-key", "idem-1");
        assert_eq!(dedup_id(&e), "idem-1");
        e.set_header("x-bridge.dedup-id", "dedup-1");
        assert_eq!(dedup_id(&e), "dedup-1");
    }
}
