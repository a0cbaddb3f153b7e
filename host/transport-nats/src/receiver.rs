//! [`NatsReceiver`]: a durable pull consumer on a JetStream stream.
//!
//! One pull subscription (async-nats's pull stream) asks for a batch of
//! what the route holds at once and asks again when half of it has
//! arrived; while the route is full nothing is read and nothing more is
//! asked for. From the moment a message is read until it is settled, a
//! progress acknowledgement (`+WPI`) every half of the consumer's ack
//! wait keeps the server from delivering it again. `ack` waits for the server to confirm the `+ACK`
//! (so an acknowledgement lost with the connection is an error, and the
//! message comes back): a request on the client's one reply subscription,
//! not async-nats's `double_ack`, which subscribes and unsubscribes an
//! inbox of its own for every message (three protocol operations the
//! server handles per message, which held a route to an eighth of the
//! raw consume rate), `release(after)` is a `-NAK` with that delay,
//! `reject` a `+TERM`, and a dropped delivery stops its heartbeat: the
//! server delivers it again once the ack wait runs out. The delivery
//! count the server keeps feeds the route's replay budget.
//!
//! Several ferry instances on one durable consumer share its messages:
//! the server hands each message to one pull request at a time.

use std::collections::VecDeque;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use crate::config::NatsReceiverConfig;
use async_nats::jetstream::consumer::pull::Config as PullConfig;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::jetstream::message::Acker;
use async_nats::jetstream::{self, AckKind};
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::backoff::{Backoff, sleep_or_shutdown};
use ferry_core::ledger::{RedeliveryLedger, Tracked};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Timestamp;
use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::connection::{Identity, connect};
use crate::ingress::{Incoming, to_envelope};

/// How long one pull request waits for messages before it is renewed.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// The server's idle heartbeat on a waiting pull request; two missed
/// (the server gone without the connection noticing) restart the pull.
const PULL_HEARTBEAT: Duration = Duration::from_secs(2);
/// Most messages one pull request asks for.
const MAX_BATCH: usize = 256;

/// A JetStream consumer feeding one route.
pub struct NatsReceiver {
    name: String,
    config: NatsReceiverConfig,
    metrics: Metrics,
    /// Delivery counts less the redeliveries that were not naks of ours.
    ledger: Arc<RedeliveryLedger>,
}

impl NatsReceiver {
    pub fn new(name: &str, config: NatsReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics, ledger: Arc::default() }
    }
}

fn backoff() -> Backoff {
    Backoff::reconnect(200, 10_000)
}

/// Waits out the next reconnect delay after `error` (or until shutdown),
/// saying what failed.
async fn pause(receiver: &str, failures: &mut u32, shutdown: &CancellationToken, what: &str, error: impl Display) {
    let delay = backoff().next(failures);
    warn!(receiver, %error, retry_in_ms = delay.as_millis() as u64, "{what}; retrying");
    sleep_or_shutdown(delay, shutdown).await;
}

/// The consumer this receiver reads: found, or created when missing
/// (unless `consumer_passive`), and checked to be a pull consumer with
/// explicit acknowledgements.
pub async fn consumer(
    js: &jetstream::Context,
    receiver: &str,
    config: &NatsReceiverConfig,
) -> Result<PullConsumer, TransportError> {
    let name = config.consumer_name(receiver);
    let stream = js
        .get_stream(&config.stream)
        .await
        .map_err(|e| TransportError::transient(format!("stream {:?}: {e}", config.stream)))?;
    let consumer: PullConsumer = if config.consumer_passive {
        stream
            .get_consumer(&name)
            .await
            .map_err(|e| TransportError::transient(format!("consumer {name:?} on {:?}: {e}", config.stream)))?
    } else {
        // One subject as `filter_subject`, which every server with
        // JetStream knows; several need 2.10's `filter_subjects` (checked
        // below: an older server ignores the field).
        let (filter_subject, filter_subjects) = match &config.filter_subjects[..] {
            [one] => (one.clone(), Vec::new()),
            several => (String::new(), several.to_vec()),
        };
        let wanted = PullConfig {
            durable_name: Some(name.clone()),
            filter_subject,
            filter_subjects,
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(config.ack_wait_secs),
            ..Default::default()
        };
        stream
            .get_or_create_consumer(&name, wanted)
            .await
            .map_err(|e| TransportError::transient(format!("consumer {name:?} on {:?}: {e}", config.stream)))?
    };
    let applied = &consumer.cached_info().config;
    if !config.consumer_passive
        && let Some(why) = filter_problem(&config.filter_subjects, &applied.filter_subject, &applied.filter_subjects)
    {
        return Err(TransportError::permanent(format!("consumer {name:?} on {:?}: {why}", config.stream)));
    }
    let policy = consumer.cached_info().config.ack_policy;
    if policy != AckPolicy::Explicit {
        return Err(TransportError::permanent(format!(
            "consumer {name:?} acknowledges with {policy:?}; ferry needs explicit acknowledgements to ack each message after its route"
        )));
    }
    Ok(consumer)
}

/// Whether the consumer takes the subjects `wanted` (`filter_subjects`),
/// as the server reports its filter (`one`, or `several` on 2.10 and
/// later): nats-server 2.9 ignores a list of several without a word, and
/// a consumer that existed keeps the filter it was made with.
fn filter_problem(wanted: &[String], one: &str, several: &[String]) -> Option<String> {
    let mut applied: Vec<&str> =
        if several.is_empty() { vec![one] } else { several.iter().map(String::as_str).collect() };
    applied.retain(|s| !s.is_empty());
    applied.sort_unstable();
    let mut asked: Vec<&str> = wanted.iter().map(String::as_str).collect();
    asked.sort_unstable();
    if applied == asked {
        return None;
    }
    let why = if asked.len() > 1 && applied.is_empty() {
        "the server did not apply filter_subjects (several filter subjects need nats-server 2.10 or later; \
         2.9 ignores them and would deliver every subject of the stream)"
    } else {
        "the consumer exists with another filter; delete it, or name another consumer"
    };
    Some(format!("takes {applied:?}, not filter_subjects {asked:?}: {why}"))
}

/// What one message's fields say, read before the message is split.
fn incoming(message: &jetstream::Message) -> Result<Incoming, String> {
    let info = message.info().map_err(|e| format!("not a JetStream message: {e}"))?;
    let published = Timestamp(i64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0));
    let headers = message
        .headers
        .iter()
        .flat_map(|map| map.iter())
        .flat_map(|(name, values)| values.iter().map(move |v| (name.to_string(), v.as_str().to_owned())))
        .collect();
    Ok(Incoming {
        subject: message.subject.to_string(),
        headers,
        payload: message.payload.clone(),
        stream: info.stream.to_owned(),
        sequence: info.stream_sequence,
        delivered: info.delivered,
        published,
    })
}

#[async_trait]
impl Receiver for NatsReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let c = &self.config;
        let client = connect(
            c.access(),
            Identity { role: "receiver", name: receiver },
            (c.reconnect_initial_ms, c.reconnect_max_ms),
            &self.metrics,
            false,
        )
        .await?;
        let js = jetstream::new(client.clone());
        // Ready while the consumer answers pull requests. (A handle of its
        // own: the family's guard must not be held across awaits.)
        let ready = self
            .metrics
            .connected
            .get_or_create(&labels(&[("kind", "nats"), ("role", "receiver"), ("name", receiver)]))
            .clone();
        let mut failures = 0u32;
        'consumer: while !shutdown.is_cancelled() {
            let consumer = match consumer(&js, receiver, c).await {
                Ok(consumer) => consumer,
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => {
                    ready.set(0);
                    pause(receiver, &mut failures, &shutdown, "cannot use the consumer", e).await;
                    continue;
                }
            };
            let ack_wait = consumer.cached_info().config.ack_wait;
            info!(receiver, stream = %c.stream, consumer = %consumer.cached_info().name, "consuming");
            ready.set(1);
            failures = 0;
            // One subscription whose pull requests the client keeps
            // ahead of what is read (a new one when half a batch is left),
            // a batch being what the route holds at once: a pull request
            // per message, each with an inbox of its own, cost the server
            // more than the messages did. While the route is full nothing
            // is read, so no more is asked for.
            let batch = sink.max_capacity().clamp(1, MAX_BATCH);
            let messages =
                consumer.stream().max_messages_per_batch(batch).expires(PULL_EXPIRES).heartbeat(PULL_HEARTBEAT);
            let mut messages = tokio::select! {
                _ = shutdown.cancelled() => break 'consumer,
                m = messages.messages() => match m {
                    Ok(m) => m,
                    Err(e) => {
                        ready.set(0);
                        pause(receiver, &mut failures, &shutdown, "cannot pull from the consumer", e).await;
                        continue 'consumer;
                    }
                },
            };
            // Messages read and not yet taken by the route: each has its
            // heartbeat from the moment it is read.
            let mut held: VecDeque<Delivery> = VecDeque::with_capacity(batch);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break 'consumer,
                    permit = sink.reserve(), if !held.is_empty() => match (permit, held.pop_front()) {
                        (Ok(permit), Some(delivery)) => permit.send(delivery),
                        _ => break 'consumer,
                    },
                    next = messages.next(), if held.len() < batch => match next {
                        Some(Ok(message)) => {
                            ready.set(1);
                            failures = 0;
                            held.extend(self.delivery(message, ack_wait, &client).await);
                        }
                        // A missed heartbeat (the server is gone or the
                        // request was lost), a deleted consumer, a closed
                        // subscription: start again from the consumer.
                        // What is held comes back after its ack wait.
                        ended => {
                            let why = match ended {
                                Some(Err(e)) => e.to_string(),
                                _ => "the subscription closed".to_owned(),
                            };
                            ready.set(0);
                            pause(receiver, &mut failures, &shutdown, "pulling stopped", why).await;
                            continue 'consumer;
                        }
                    },
                }
            }
        }
        ready.set(0);
        Ok(())
    }
}

impl NatsReceiver {
    /// One message as a delivery for the route, its heartbeat started;
    /// `None` for one that cannot be read or is poison, which is
    /// terminated (`+TERM`) here.
    async fn delivery(
        &self,
        message: jetstream::Message,
        ack_wait: Duration,
        client: &async_nats::Client,
    ) -> Option<Delivery> {
        let read = incoming(&message);
        let confirm = message.reply.clone().map(|reply| (client.clone(), reply));
        let (_, acker) = message.split();
        // The server counts a redelivery after a lost connection or an
        // expired ack wait too; the ledger leaves those out of the count.
        let tracked = read.as_ref().ok().map(|m| {
            let key = format!("{}:{}", m.stream, m.sequence);
            let delivered = u32::try_from(m.delivered.saturating_sub(1)).unwrap_or(0);
            self.ledger.track(key, Some(delivered))
        });
        let handle = NatsHandle::start(Arc::new(acker), confirm, ack_wait, tracked);
        let m = match read {
            Ok(m) => m,
            Err(why) => {
                warn!(receiver = %self.name, %why, "a message the receiver cannot read is terminated");
                let _ = Box::new(handle).reject("unreadable").await;
                return None;
            }
        };
        match to_envelope(&m, self.config.max_payload_bytes) {
            Ok(envelope) => Some(Delivery::new(envelope, Box::new(handle))),
            Err(poison) => {
                warn!(receiver = %self.name, stream = %m.stream, sequence = m.sequence, reason = poison.label(), "poison message terminated");
                Metrics::inc(
                    &self.metrics.ingress_rejected,
                    &[("kind", "nats"), ("receiver", &self.name), ("reason", poison.label())],
                );
                if let Err(e) = Box::new(handle).reject(poison.label()).await {
                    warn!(receiver = %self.name, error = %e, "could not terminate a poison message; it comes back after the ack wait");
                }
                None
            }
        }
    }
}

/// Settles one received message; keeps it from redelivery while held.
struct NatsHandle {
    acker: Arc<Acker>,
    /// The client and the message's ack subject, for the confirmed `+ACK`
    /// (`None` for a message without one, which no ack can settle).
    confirm: Option<(async_nats::Client, async_nats::Subject)>,
    /// `None` for a message that could not be read.
    tracked: Option<Tracked>,
    heartbeat: CancellationToken,
}

impl NatsHandle {
    fn start(
        acker: Arc<Acker>,
        confirm: Option<(async_nats::Client, async_nats::Subject)>,
        ack_wait: Duration,
        tracked: Option<Tracked>,
    ) -> Self {
        let heartbeat = CancellationToken::new();
        let stop = heartbeat.clone();
        let beat = acker.clone();
        let period = (ack_wait / 2).max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(period) => {}
                }
                if let Err(e) = beat.ack_with(AckKind::Progress).await {
                    debug!(error = %e, "progress acknowledgement failed");
                }
            }
        });
        Self { acker, confirm, tracked, heartbeat }
    }
}

impl Drop for NatsHandle {
    fn drop(&mut self) {
        self.heartbeat.cancel();
    }
}

#[async_trait]
impl DeliveryHandle for NatsHandle {
    async fn ack(self: Box<Self>) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.as_ref().map(Tracked::settled);
        let Some((client, reply)) = &self.confirm else {
            return Err(TransportError::transient("ack: not a JetStream message (no ack subject)"));
        };
        // The server answers an ack that carries a reply subject once it
        // has taken it.
        match client.request(reply.clone(), AckKind::Ack.into()).await {
            Ok(_) => Ok(()),
            Err(e) => Err(TransportError::transient(format!("ack: {e}"))),
        }
    }

    async fn release(self: Box<Self>, after: Duration, _reason: &str) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.as_ref().map(Tracked::released);
        self.acker.ack_with(AckKind::Nak(Some(after))).await.map_err(|e| TransportError::transient(format!("nak: {e}")))
    }

    async fn reject(self: Box<Self>, _reason: &str) -> Result<(), TransportError> {
        self.heartbeat.cancel();
        self.tracked.as_ref().map(Tracked::settled);
        self.acker.ack_with(AckKind::Term).await.map_err(|e| TransportError::transient(format!("term: {e}")))
    }

    async fn extend(&self, _until: Timestamp) -> Result<(), TransportError> {
        self.acker.ack_with(AckKind::Progress).await.map_err(|e| TransportError::transient(format!("progress: {e}")))
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.tracked.as_ref().map_or(0, Tracked::count))
    }
}

#[cfg(test)]
mod tests {
    use super::filter_problem;

    #[test]
    fn a_filter_the_server_did_not_apply_is_named() {
        let wanted = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(filter_problem(&[], "", &[]), None);
        assert_eq!(filter_problem(&wanted(&["a.>"]), "a.>", &[]), None);
        assert_eq!(filter_problem(&wanted(&["a.>", "b.*"]), "", &wanted(&["b.*", "a.>"])), None);
        let ignored = filter_problem(&wanted(&["a.>", "b.*"]), "", &[]).expect("2.9 ignored them");
        assert!(ignored.contains("2.10"), "{ignored}");
        let other = filter_problem(&wanted(&["a.>"]), "c.>", &[]).expect("another filter");
        assert!(other.contains("another filter"), "{other}");
        assert!(filter_problem(&[], "c.>", &[]).is_some(), "an unfiltered receiver on a filtered consumer");
    }
}
