//! [`SqsReceiver`]: long polling, a visibility heartbeat for every message
//! ferry holds, and batched deletes.
//!
//! A message is fetched only when the route has room for it. From the
//! moment it is received until it is settled, a heartbeat keeps extending
//! its visibility, so a message that waits in the route's queue or takes
//! long to process does not reappear meanwhile. `ack` deletes it (batched
//! with other acks), `release(after)` sets its visibility to `after` so SQS
//! redelivers it then, and a dropped delivery simply stops the heartbeat:
//! SQS shows it again when its visibility runs out.

use std::sync::Arc;
use std::time::Duration;

use crate::config::SqsReceiverConfig;
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use ferry_core::backoff::{Backoff, sleep_or_shutdown};
use ferry_core::ledger::{RedeliveryLedger, Tracked};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_core::{Failure, FailureReason, TransportError};
use ferry_envelope::Timestamp;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::{QueueTarget, classify, client, queue_url};
use crate::ingress::{IngressError, check_digests, convert, receive_count};

/// Longest visibility SQS allows, in seconds.
const MAX_VISIBILITY: i32 = 43_200;

/// An SQS queue feeding one route.
pub struct SqsReceiver {
    name: String,
    config: SqsReceiverConfig,
    metrics: Metrics,
    /// Receive counts less the returns that were not releases of ours.
    ledger: Arc<RedeliveryLedger>,
}

impl SqsReceiver {
    pub fn new(name: &str, config: SqsReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics, ledger: Arc::default() }
    }
}

/// The queue a receiver's config names.
pub fn target_of(config: &SqsReceiverConfig) -> QueueTarget {
    QueueTarget {
        queue_url: config.queue_url.clone(),
        queue_name: config.queue_name.clone(),
        endpoint_url: config.endpoint_url.clone(),
        region: config.region.clone(),
    }
}

fn backoff() -> Backoff {
    Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(10), multiplier: 2.0, jitter: 0.3 }
}

/// What a handle needs to talk to its queue.
struct Queue {
    client: Client,
    url: String,
    visibility: i32,
    deletes: mpsc::Sender<(String, oneshot::Sender<Result<(), TransportError>>)>,
}

#[async_trait]
impl Receiver for SqsReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let target = target_of(&self.config);
        let conn_labels = labels(&[("kind", "sqs"), ("role", "receiver"), ("name", receiver)]);
        let sdk = client(&target).await;
        let mut failures = 0u32;
        let url = loop {
            match queue_url(&sdk, &target).await {
                Ok(url) => break url,
                Err(e) => {
                    let delay = backoff().next(&mut failures);
                    warn!(receiver, queue = target.label(), error = %e, "cannot resolve the queue; retrying");
                    if !sleep_or_shutdown(delay, &shutdown).await {
                        return Ok(());
                    }
                }
            }
        };
        info!(receiver, queue = %url, "connected; receiving");
        self.metrics.connected.get_or_create(&conn_labels).set(1);
        let (delete_tx, delete_rx) = mpsc::channel(256);
        let deleter = tokio::spawn(delete_loop(sdk.clone(), url.clone(), delete_rx));
        let queue =
            Arc::new(Queue { client: sdk, url, visibility: self.config.visibility_timeout, deletes: delete_tx });
        failures = 0;

        while !shutdown.is_cancelled() {
            // Fetch only what the route can take now.
            let Some(room) = ferry_core::ports::room(&sink, &shutdown).await else {
                break;
            };
            let max = i32::try_from(room).unwrap_or(10).clamp(1, self.config.max_messages);
            let request = queue
                .client
                .receive_message()
                .queue_url(&queue.url)
                .max_number_of_messages(max)
                .wait_time_seconds(self.config.wait_time_seconds)
                .visibility_timeout(self.config.visibility_timeout)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send();
            let response = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = request => r,
            };
            let messages = match response {
                Ok(out) => {
                    failures = 0;
                    self.metrics.connected.get_or_create(&conn_labels).set(1);
                    out.messages.unwrap_or_default()
                }
                Err(e) => {
                    let error = classify(e);
                    self.metrics.connected.get_or_create(&conn_labels).set(0);
                    let delay = backoff().next(&mut failures);
                    warn!(receiver, error = %error, retry_in_ms = delay.as_millis() as u64, "receive failed");
                    if !sleep_or_shutdown(delay, &shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            for message in messages {
                if !self.emit(message, &queue, &sink).await {
                    break;
                }
            }
        }
        drop(queue);
        let _ = deleter.await;
        self.metrics.connected.get_or_create(&conn_labels).set(0);
        Ok(())
    }
}

impl SqsReceiver {
    /// Hands one message to the route; false when the route stopped.
    async fn emit(&self, message: Message, queue: &Arc<Queue>, sink: &DeliverySink) -> bool {
        let Some(receipt) = message.receipt_handle().map(str::to_owned) else {
            warn!(receiver = %self.name, "message without a receipt handle ignored");
            return true;
        };
        // SQS counts every receive, the one after a hold that outlived the
        // visibility ceiling (12 h) too: the ledger leaves those out.
        let key = message.message_id().unwrap_or(&receipt).to_owned();
        let tracked = self.ledger.track(key, receive_count(&message).map(|n| n.saturating_sub(1)));
        let handle = SqsDeliveryHandle::start(queue.clone(), receipt, tracked);
        let envelope = convert(&message, self.config.sns_unwrap, Timestamp::now());
        let delivery = match check_digests(&message) {
            Ok(()) => Delivery::new(envelope, Box::new(handle)),
            // The route gives it back with its backoff, and dead-letters it
            // (md5_mismatch) once the receive count reaches max_replay_attempts.
            Err(IngressError::Md5Mismatch(why)) => {
                warn!(receiver = %self.name, message_id = message.message_id().unwrap_or("-"), %why, "MD5 mismatch; the message is not sent on");
                Metrics::inc(&self.metrics.counter_family(&crate::MD5_MISMATCH), &[("receiver", &self.name)]);
                Delivery::damaged(envelope, Box::new(handle), Failure::new(FailureReason::Md5Mismatch, why))
            }
        };
        sink.send(delivery).await.is_ok()
    }
}

/// Deletes acknowledged messages in batches of up to ten.
async fn delete_loop(
    client: Client,
    url: String,
    mut rx: mpsc::Receiver<(String, oneshot::Sender<Result<(), TransportError>>)>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 10 {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let entries: Vec<DeleteMessageBatchRequestEntry> = batch
            .iter()
            .enumerate()
            .filter_map(|(i, (receipt, _))| {
                DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(receipt).build().ok()
            })
            .collect();
        match client.delete_message_batch().queue_url(&url).set_entries(Some(entries)).send().await {
            Ok(out) => {
                let mut failed: std::collections::HashMap<String, String> = out
                    .failed()
                    .iter()
                    .map(|f| (f.id().to_owned(), format!("{}: {}", f.code(), f.message().unwrap_or(""))))
                    .collect();
                for (i, (_, reply)) in batch.into_iter().enumerate() {
                    let result = match failed.remove(&i.to_string()) {
                        Some(why) => Err(TransportError::transient(format!("delete failed: {why}"))),
                        None => Ok(()),
                    };
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                let error = classify(e);
                for (_, reply) in batch {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// Settles one received message; keeps it invisible while held.
struct SqsDeliveryHandle {
    queue: Arc<Queue>,
    receipt: String,
    tracked: Tracked,
    heartbeat: CancellationToken,
}

impl SqsDeliveryHandle {
    fn start(queue: Arc<Queue>, receipt: String, tracked: Tracked) -> Self {
        let heartbeat = CancellationToken::new();
        let stop = heartbeat.clone();
        let (q, r) = (queue.clone(), receipt.clone());
        tokio::spawn(async move {
            let period = Duration::from_millis((q.visibility.max(1) as u64 * 1000) / 2);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(period) => {}
                }
                let extended = q
                    .client
                    .change_message_visibility()
                    .queue_url(&q.url)
                    .receipt_handle(&r)
                    .visibility_timeout(q.visibility)
                    .send();
                tokio::select! {
                    _ = stop.cancelled() => break,
                    result = extended => if let Err(e) = result {
                        debug!(error = %classify(e), "visibility heartbeat failed");
                    },
                }
            }
        });
        Self { queue, receipt, tracked, heartbeat }
    }

    async fn set_visibility(&self, seconds: i32) -> Result<(), TransportError> {
        self.queue
            .client
            .change_message_visibility()
            .queue_url(&self.queue.url)
            .receipt_handle(&self.receipt)
            .visibility_timeout(seconds.clamp(0, MAX_VISIBILITY))
            .send()
            .await
            .map(|_| ())
            .map_err(classify)
    }
}

impl Drop for SqsDeliveryHandle {
    fn drop(&mut self) {
        self.heartbeat.cancel();
    }
}

#[async_trait]
impl DeliveryHandle for SqsDeliveryHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.settled();
        let (tx, rx) = oneshot::channel();
        self.queue
            .deletes
            .send((self.receipt.clone(), tx))
            .await
            .map_err(|_| TransportError::transient("receiver stopped"))?;
        rx.await.map_err(|_| TransportError::transient("receiver stopped"))?
    }

    async fn release(self: Box<Self>, after: Duration, _reason: &str) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.released();
        // Round up so that a short backoff still delays the redelivery.
        self.set_visibility(i32::try_from(after.as_millis().div_ceil(1000)).unwrap_or(MAX_VISIBILITY)).await
    }

    async fn extend(&self, until: Timestamp) -> Result<(), TransportError> {
        let secs = until.remaining_from(Timestamp::now()).as_secs();
        self.set_visibility(i32::try_from(secs).unwrap_or(MAX_VISIBILITY)).await
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.tracked.count())
    }
}
