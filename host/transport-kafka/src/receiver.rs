//! [`KafkaReceiver`]: a consumer in a consumer group whose offsets move
//! only behind settled messages.
//!
//! - Auto-commit and the automatic offset store are off. Each record
//!   handed to the route is held ([`Offsets`]) until the route acks or
//!   dead-letters it; every `commit_interval_ms`, when the receiver stops
//!   and before a partition is taken away, each partition's offset is
//!   committed up to the lowest record still held.
//! - Kafka has no per-message nack: a record the route gives back is held
//!   by the receiver and handed to the route again after the route's
//!   backoff, its delivery count one higher (the replay budget counts
//!   it). Its offset stays held meanwhile, so a crash delivers it again.
//! - A rebalance that takes a partition away commits what is settled of
//!   it and forgets the rest: those records go to the partition's next
//!   owner from the committed offset (delivered twice, never lost); a
//!   late settle of one of them changes nothing.
//! - A record larger than `max_payload_bytes` is poison: passed over (its
//!   offset settled) and logged.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Envelope;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::config::{KafkaReceiverConfig, StartFrom};
use crate::ingress::{Incoming, to_envelope};
use crate::offsets::{Offsets, Partition};
use crate::sender::{CHECK_EVERY, watch};

/// The offsets of one receiver, shared with its handles and its
/// rebalance callback.
type Shared = Arc<Mutex<Offsets>>;

fn lock(offsets: &Shared) -> std::sync::MutexGuard<'_, Offsets> {
    offsets.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The consumer's context: on a revocation, commits what is settled of
/// the partitions going away, then forgets them.
struct Context {
    offsets: Shared,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    /// An asynchronous commit that failed is said (the next move commits
    /// again, so nothing is lost, but a cluster that never takes commits
    /// would deliver everything again after a restart).
    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            warn!(error = %e, partitions = offsets.count(), "the cluster did not take a commit (it is made again)");
            refused(&self.offsets, offsets);
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(list) = rebalance else { return };
        let mut offsets = lock(&self.offsets);
        let mut commit = TopicPartitionList::new();
        for element in list.elements() {
            let partition: Partition = (element.topic().to_owned(), element.partition());
            if let Some(offset) = offsets.committable(&partition) {
                let _ = commit.add_partition_offset(element.topic(), element.partition(), Offset::Offset(offset));
            }
            let held = offsets.held(&partition);
            if held > 0 {
                debug!(
                    topic = element.topic(),
                    partition = element.partition(),
                    held,
                    "partition taken away: its held records go to its next owner"
                );
            }
            offsets.revoke(&partition);
        }
        if commit.count() > 0
            && let Err(e) = consumer.commit(&commit, CommitMode::Sync)
        {
            warn!(error = %e, "could not commit the offsets of revoked partitions");
        }
    }
}

/// A commit of `list` the cluster did not take: made again next time.
fn refused(offsets: &Shared, list: &TopicPartitionList) {
    let mut offsets = lock(offsets);
    for element in list.elements() {
        if let Offset::Offset(offset) = element.offset() {
            offsets.commit_failed(&(element.topic().to_owned(), element.partition()), offset);
        }
    }
}

/// A record given back by the route, to be handed to it again.
struct Again {
    envelope: Envelope,
    partition: Partition,
    offset: i64,
    delivered: u32,
}

/// The handle of one delivered record.
struct Handle {
    offsets: Shared,
    partition: Partition,
    offset: i64,
    envelope: Envelope,
    delivered: u32,
    again: mpsc::UnboundedSender<Again>,
}

#[async_trait]
impl DeliveryHandle for Handle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        lock(&self.offsets).settled(&self.partition, self.offset);
        Ok(())
    }

    /// Handed to the route again after `after`; the offset stays held.
    async fn release(self: Box<Self>, after: Duration, _reason: &str) -> Result<(), TransportError> {
        let Handle { partition, offset, envelope, delivered, again, .. } = *self;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            // A receiver that stopped meanwhile commits nothing past it:
            // the record comes again after a restart.
            let _ = again.send(Again { envelope, partition, offset, delivered: delivered + 1 });
        });
        Ok(())
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.delivered.saturating_sub(1))
    }
}

/// A Kafka consumer feeding one route.
pub struct KafkaReceiver {
    name: String,
    config: KafkaReceiverConfig,
    metrics: Metrics,
}

impl KafkaReceiver {
    pub fn new(name: &str, config: KafkaReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics }
    }

    fn consumer(&self, offsets: &Shared) -> Result<StreamConsumer<Context>, TransportError> {
        let reset = match self.config.start_from {
            StartFrom::Oldest => "earliest",
            StartFrom::Newest => "latest",
        };
        self.config
            .cluster()
            .client_config()
            .set("group.id", &self.config.group)
            .set("client.id", format!("ferry-{}", self.name))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", reset)
            .set("session.timeout.ms", self.config.session_timeout_ms.to_string())
            // A third of the session, as Kafka advises (at most its default).
            .set("heartbeat.interval.ms", (self.config.session_timeout_ms / 3).min(3_000).to_string())
            .create_with_context(Context { offsets: offsets.clone() })
            .map_err(|e| TransportError::permanent(format!("the Kafka consumer: {e}")))
    }

    /// Commits what moved (asynchronously unless `sync`).
    fn commit(consumer: &StreamConsumer<Context>, offsets: &Shared, mode: CommitMode) {
        let moved = lock(offsets).to_commit();
        if moved.is_empty() {
            return;
        }
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in moved {
            let _ = list.add_partition_offset(&topic, partition, Offset::Offset(offset));
        }
        if let Err(e) = consumer.commit(&list, mode) {
            warn!(error = %e, "could not commit offsets (they are committed again)");
            refused(offsets, &list);
        }
    }
}

#[async_trait]
impl Receiver for KafkaReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let offsets: Shared = Arc::default();
        let consumer = Arc::new(self.consumer(&offsets)?);
        let topics: Vec<&str> = self.config.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics).map_err(|e| TransportError::permanent(format!("subscribe to {topics:?}: {e}")))?;
        let connected = self
            .metrics
            .connected
            .get_or_create(&labels(&[("kind", "kafka"), ("role", "receiver"), ("name", &self.name)]))
            .clone();
        // Ready is whether the cluster answers, records or none.
        let watching = shutdown.child_token();
        let weak = Arc::downgrade(&consumer);
        let ask = move || Some(weak.upgrade()?.client().fetch_metadata(None, CHECK_EVERY).is_ok());
        tokio::spawn(watch(ask, watching.clone(), connected.clone()));
        let stop_watching = watching.drop_guard();
        let (again_tx, mut again_rx) = mpsc::unbounded_channel::<Again>();
        let mut commits = tokio::time::interval(Duration::from_millis(self.config.commit_interval_ms));
        commits.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let handle = |envelope: Envelope, partition: Partition, offset: i64, delivered: u32| {
            let h = Handle {
                offsets: offsets.clone(),
                partition,
                offset,
                envelope: envelope.clone(),
                delivered,
                again: again_tx.clone(),
            };
            Delivery::new(envelope, Box::new(h))
        };
        loop {
            if ferry_core::ports::room(&sink, &shutdown).await.is_none() {
                break;
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(a) = again_rx.recv() => {
                    // Still ours (not revoked meanwhile)?
                    if lock(&offsets).is_held(&a.partition, a.offset)
                        && sink.send(handle(a.envelope, a.partition, a.offset, a.delivered)).await.is_err()
                    {
                        break;
                    }
                }
                _ = commits.tick() => Self::commit(&consumer, &offsets, CommitMode::Async),
                record = consumer.recv() => {
                    let record = match record {
                        Ok(r) => Incoming::of(&r),
                        Err(e) => {
                            debug!(receiver = %self.name, error = %e, "Kafka consumer");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    let partition: Partition = (record.topic.clone(), record.partition);
                    lock(&offsets).taken(&partition, record.offset);
                    match to_envelope(&record, &self.config.id_header, self.config.max_payload_bytes) {
                        Ok(converted) => {
                            if sink.send(handle(converted.envelope, partition, record.offset, 1)).await.is_err() {
                                break;
                            }
                        }
                        Err(poison) => {
                            warn!(receiver = %self.name, topic = %record.topic, partition = record.partition,
                                  offset = record.offset, ?poison, "record passed over");
                            lock(&offsets).settled(&partition, record.offset);
                        }
                    }
                }
            }
        }
        drop(stop_watching);
        connected.set(0);
        // What the route settled while stopping is committed before the
        // consumer leaves its group.
        Self::commit(&consumer, &offsets, CommitMode::Sync);
        Ok(())
    }
}
