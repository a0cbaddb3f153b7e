//! [`Amqp10Receiver`]: one receiving link, settled by the route.
//!
//! A task owns the link. It reads deliveries and applies settlements that
//! delivery handles send it over a channel, so a route that is slow to take
//! new deliveries never blocks the settlement of old ones. The link credit
//! (`credit`) bounds how many messages are unsettled at once. Accepts that
//! are queued together go out as one disposition per run of consecutive
//! delivery ids.
//!
//! Outcomes: ack = `accepted`; a retry = `modified` with `delivery-failed`
//! (or `released`, per `retry_outcome`) after the route's backoff; a
//! message that failed for good and was dropped = `rejected` with
//! `ferry:undeliverable`; a message ferry cannot read = `rejected` with
//! `amqp:decode-error`, counted. After
//! a lost connection the broker requeues what was unsettled; a handle from
//! the old connection then fails its settlement as transient, and the route
//! leaves the message to that redelivery.
//!
//! With the Service Bus profile the connection puts a SAS token first, a
//! failure for good is `rejected` with `com.microsoft:dead-letter` (the
//! entity's dead-letter queue takes it, with ferry's reason), and a task
//! renews the locks of every message ferry holds each `lock_renew_ms`; a
//! renewal that gets no answer ends the connection, so what is held comes
//! back on the next one rather than after a lock silently lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::{Receiver as LinkReceiver, RecvError};
use fe2o3_amqp::types::definitions::{AmqpError, Error as AmqpErrorBody, ErrorCondition};
use fe2o3_amqp::types::messaging::{Body, Modified};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use ferry_core::TransportError;
use ferry_core::backoff::{Backoff, sleep_or_shutdown};
use ferry_core::ledger::{RedeliveryLedger, Tracked, fingerprint};
use ferry_core::metrics::Metrics;
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Timestamp;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::{Amqp10ReceiverConfig, Amqp10RetryOutcome};
use crate::connection::{Claims, Link, open};
use crate::ingress::to_envelope;
use crate::service_bus::{LockRenewer, Sas};

/// Service Bus: the lock of each held delivery, by delivery id.
type Held = Arc<Mutex<HashMap<u32, crate::service_bus::Lock>>>;

/// The condition of a rejection for a message that failed for good.
pub const UNDELIVERABLE: &str = "ferry:undeliverable";

/// The most settlements the link task applies in one go.
const SETTLE_BATCH: usize = 256;

/// An AMQP 1.0 receiving link feeding one route.
pub struct Amqp10Receiver {
    name: String,
    config: Amqp10ReceiverConfig,
    metrics: Metrics,
    ledger: Arc<RedeliveryLedger>,
    /// Service Bus: the SAS credentials.
    sas: Option<Sas>,
}

/// How the route settled a delivery.
#[derive(Debug)]
enum Settlement {
    Accept,
    Retry,
    /// Failed for good: `rejected` with `ferry:undeliverable` and the reason.
    Reject(String),
}

struct Command {
    info: DeliveryInfo,
    settlement: Settlement,
    reply: oneshot::Sender<Result<(), String>>,
}

/// Why one connection's link loop ended.
enum LinkEnd {
    Shutdown,
    RouteGone,
    Lost(String),
}

impl Amqp10Receiver {
    pub fn new(name: &str, config: Amqp10ReceiverConfig, metrics: Metrics) -> Self {
        let sas = config.service_bus().sas();
        Self { name: name.to_owned(), config, metrics, ledger: Arc::default(), sas }
    }

    fn labels(&self) -> ferry_core::metrics::Labels {
        ferry_core::metrics::labels(&[("kind", "amqp10"), ("role", "receiver"), ("name", &self.name)])
    }

    async fn attach(&self, link: &mut Link) -> Result<LinkReceiver, TransportError> {
        let mut source = fe2o3_amqp::types::messaging::Source::builder().address(self.config.address.as_str());
        if let Some(session) = &self.config.session {
            source = source.add_to_filter(
                Symbol::from(crate::service_bus::SESSION_FILTER),
                crate::service_bus::session_filter(session),
            );
        }
        let attach = LinkReceiver::builder()
            .name(format!("ferry-{}-{}", self.name, uuid::Uuid::new_v4()))
            .source(source.build())
            .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Manual)
            .auto_accept(false)
            .attach(&mut link.session);
        match tokio::time::timeout(crate::connection::CONNECT_TIMEOUT, attach).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(TransportError::transient(format!("attach to {:?}: {e}", self.config.address))),
            Err(_) => Err(TransportError::transient(format!("attach to {:?}: timed out", self.config.address))),
        }
    }

    /// Reads and settles on one link until shutdown, loss, or the route
    /// stops taking deliveries.
    ///
    /// Credit is granted by hand, `credit` at a time, and only once every
    /// transfer of the previous grant has been read and at most half of
    /// them are still unsettled. fe2o3-amqp overwrites its delivery count
    /// with the one in the broker's flow frames even while transfers it has
    /// not counted yet sit in its buffer; with automatic credit, RabbitMQ's
    /// credit replies then inflate the count, the next grant lets the broker
    /// send more than the link allows, and the link fails. Granting only
    /// when nothing is in flight keeps both counts equal.
    async fn serve(
        &self,
        link: &mut LinkReceiver,
        sink: &DeliverySink,
        shutdown: &CancellationToken,
        held: Option<&Held>,
        renewal_lost: &CancellationToken,
    ) -> LinkEnd {
        let credit = self.config.credit;
        let (tx, mut commands) = mpsc::channel::<Command>(credit as usize * 2 + 16);
        // A delivery read from the link that the route has not taken yet.
        let mut pending: Option<Delivery> = None;
        // Transfers the current grant still allows; deliveries not settled.
        let mut granted: u32 = 0;
        let mut unsettled: u32 = 0;
        loop {
            if granted == 0 && unsettled <= credit / 2 {
                if let Err(e) = link.set_credit(credit).await {
                    return LinkEnd::Lost(format!("cannot grant credit: {e}"));
                }
                granted = credit;
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return LinkEnd::Shutdown,
                _ = renewal_lost.cancelled() => {
                    return LinkEnd::Lost("lock renewal got no answer from $management".into());
                }
                Some(cmd) = commands.recv() => {
                    // Everything settled meanwhile goes out together: the
                    // accepts as one disposition per run of consecutive
                    // delivery ids.
                    let mut batch = vec![cmd];
                    while batch.len() < SETTLE_BATCH
                        && let Ok(more) = commands.try_recv()
                    {
                        batch.push(more);
                    }
                    unsettled = unsettled.saturating_sub(batch.len() as u32);
                    if let Some(held) = held {
                        let mut held = held.lock().expect("held locks");
                        for cmd in &batch {
                            held.remove(&cmd.info.delivery_id());
                        }
                    }
                    self.settle_batch(link, batch).await;
                }
                permit = sink.reserve(), if pending.is_some() => match (permit, pending.take()) {
                    (Ok(permit), Some(delivery)) => permit.send(delivery),
                    _ => return LinkEnd::RouteGone,
                },
                received = link.recv::<Body<Value>>(), if pending.is_none() && granted > 0 => {
                    granted -= 1;
                    match received {
                        Ok(delivery) => {
                            let id = *delivery.delivery_id();
                            let lock = held.map(|_| crate::service_bus::Lock::of(&delivery, self.config.session.is_some()));
                            pending = self.on_delivery(link, delivery, &tx).await;
                            if pending.is_some() {
                                unsettled += 1;
                                // A message rejected at once holds no lock.
                                if let (Some(held), Some(lock)) = (held, lock) {
                                    held.lock().expect("held locks").insert(id, lock);
                                }
                            }
                        }
                        Err(RecvError::MessageDecode(e)) => {
                            self.reject_poison(link, e.info, "undecodable", "the message could not be decoded").await;
                        }
                        Err(e) => return LinkEnd::Lost(e.to_string()),
                    }
                }
            }
        }
    }

    /// Converts a delivery; poison is rejected here and yields nothing.
    async fn on_delivery(
        &self,
        link: &LinkReceiver,
        delivery: fe2o3_amqp::link::delivery::Delivery<Body<Value>>,
        tx: &mpsc::Sender<Command>,
    ) -> Option<Delivery> {
        let info = DeliveryInfo::from(&delivery);
        let message = delivery.message();
        match to_envelope(message, self.config.max_message_bytes, Timestamp::now()) {
            Ok(ingress) => {
                if ingress.dropped_headers > 0 {
                    self.metrics
                        .amqp_header_dropped
                        .get_or_create(&ferry_core::metrics::labels(&[
                            ("kind", "amqp10"),
                            ("name", &self.name),
                            ("direction", "ingress"),
                        ]))
                        .inc_by(u64::from(ingress.dropped_headers));
                }
                let has_id = message.properties.as_ref().is_some_and(|p| p.message_id.is_some());
                let key = if has_id {
                    ingress.envelope.id.clone()
                } else {
                    fingerprint(&[
                        ingress.envelope.payload(),
                        format!("{:?}", message.application_properties).as_bytes(),
                    ])
                };
                let tracked = self.ledger.track(key, Some(ingress.delivery_count));
                let handle = Amqp10DeliveryHandle { tx: tx.clone(), info: Some(info), tracked };
                Some(Delivery::new(ingress.envelope, Box::new(handle)))
            }
            Err(poison) => {
                self.reject_poison(link, info, poison.label(), &poison.describe()).await;
                None
            }
        }
    }

    async fn reject_poison(&self, link: &LinkReceiver, info: DeliveryInfo, label: &str, description: &str) {
        warn!(receiver = %self.name, reason = label, "unreadable message rejected at the broker");
        Metrics::inc(
            &self.metrics.ingress_rejected,
            &[("kind", "amqp10"), ("receiver", &self.name), ("reason", label)],
        );
        let error =
            AmqpErrorBody::new(ErrorCondition::AmqpError(AmqpError::DecodeError), Some(description.to_owned()), None);
        if let Err(e) = link.reject(info, error).await {
            warn!(receiver = %self.name, error = %e, "could not reject an unreadable message");
        }
    }

    /// Settles a batch: the accepts in ranges (`accept_all` sends one
    /// disposition per run of consecutive delivery ids, naming only the
    /// deliveries given), the rest one by one.
    async fn settle_batch(&self, link: &LinkReceiver, batch: Vec<Command>) {
        let mut accepts = Vec::new();
        for cmd in batch {
            let result = match cmd.settlement {
                Settlement::Accept => {
                    accepts.push((cmd.info, cmd.reply));
                    continue;
                }
                Settlement::Retry => match self.config.retry_outcome {
                    Amqp10RetryOutcome::Modified => {
                        let modified = Modified {
                            delivery_failed: Some(true),
                            undeliverable_here: None,
                            message_annotations: None,
                        };
                        link.modify(cmd.info, modified).await
                    }
                    Amqp10RetryOutcome::Released => link.release(cmd.info).await,
                },
                Settlement::Reject(reason) => {
                    let error = if self.sas.is_some() {
                        crate::service_bus::dead_letter(UNDELIVERABLE, &reason)
                    } else {
                        AmqpErrorBody::new(ErrorCondition::Custom(Symbol::from(UNDELIVERABLE)), Some(reason), None)
                    };
                    link.reject(cmd.info, error).await
                }
            };
            let _ = cmd.reply.send(result.map_err(|e| e.to_string()));
        }
        if !accepts.is_empty() {
            let (infos, replies): (Vec<DeliveryInfo>, Vec<_>) = accepts.into_iter().unzip();
            let result = link.accept_all(infos).await.map_err(|e| e.to_string());
            for reply in replies {
                let _ = reply.send(result.clone());
            }
        }
    }
}

#[async_trait]
impl Receiver for Amqp10Receiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let backoff = Backoff::reconnect(self.config.reconnect_initial_ms, self.config.reconnect_max_ms);
        let labels = self.labels();
        let mut failures: u32 = 0;
        let url = ferry_core::redact::url(&self.config.url);
        while !shutdown.is_cancelled() {
            let attempt = async {
                let claims = self.sas.as_ref().map(|sas| Claims {
                    sas,
                    entity: &self.config.address,
                    metrics: &self.metrics,
                    part: receiver,
                });
                let mut link =
                    open(&self.config.url, &format!("ferry-{receiver}"), self.config.tls.as_ref(), claims).await?;
                let attached = match self.attach(&mut link).await {
                    Ok(r) => r,
                    Err(e) => {
                        link.close().await;
                        return Err(e);
                    }
                };
                if self.sas.is_none() {
                    return Ok((link, attached, None));
                }
                let renewer = tokio::time::timeout(
                    crate::connection::CONNECT_TIMEOUT,
                    LockRenewer::attach(&mut link.session, &self.config.address, attached.name()),
                )
                .await
                .unwrap_or_else(|_| Err(TransportError::transient("attach to $management: timed out")));
                match renewer {
                    Ok(renewer) => Ok((link, attached, Some(renewer))),
                    Err(e) => {
                        let _ = tokio::time::timeout(crate::connection::CLOSE_TIMEOUT, attached.detach()).await;
                        link.close().await;
                        Err(e)
                    }
                }
            };
            let connected = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = attempt => r,
            };
            let end = match connected {
                Ok((link, mut receiver_link, renewer)) => {
                    failures = 0;
                    info!(receiver, %url, address = %self.config.address, "connected");
                    self.metrics.connections.get_or_create(&labels).inc();
                    self.metrics.connected.get_or_create(&labels).set(1);
                    let held: Option<Held> = renewer.is_some().then(Held::default);
                    let renewal_lost = CancellationToken::new();
                    let stop_renewing = CancellationToken::new();
                    if let (Some(renewer), Some(held)) = (renewer, &held) {
                        tokio::spawn(renew_locks(
                            renewer,
                            held.clone(),
                            Duration::from_millis(self.config.lock_renew_ms),
                            (self.metrics.clone(), receiver.to_owned()),
                            renewal_lost.clone(),
                            stop_renewing.clone(),
                        ));
                    }
                    let _stop_renewing = stop_renewing.drop_guard();
                    let end = self.serve(&mut receiver_link, &sink, &shutdown, held.as_ref(), &renewal_lost).await;
                    self.metrics.connected.get_or_create(&labels).set(0);
                    if !matches!(end, LinkEnd::Lost(_)) {
                        let _ = tokio::time::timeout(crate::connection::CLOSE_TIMEOUT, receiver_link.detach()).await;
                    }
                    link.close().await;
                    end
                }
                Err(e) => LinkEnd::Lost(e.reason),
            };
            match end {
                LinkEnd::Shutdown => {
                    info!(receiver, "disconnected");
                    break;
                }
                LinkEnd::RouteGone => {
                    // The route stopped; unsettled messages go back to the
                    // broker with the connection.
                    info!(receiver, "route stopped taking deliveries; disconnected");
                    shutdown.cancelled().await;
                    break;
                }
                LinkEnd::Lost(reason) => {
                    let delay = backoff.next(&mut failures);
                    warn!(receiver, %url, error = %reason, retry_in_ms = delay.as_millis() as u64, "connection lost; reconnecting");
                    if !sleep_or_shutdown(delay, &shutdown).await {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Service Bus: renews the locks of the held deliveries every `every`
/// until `stop`. A request that fails is counted and tried again at the
/// next tick; one with no answer within the connect timeout cancels
/// `lost` (the management link cannot be trusted to answer in order any
/// more), and the connection is replaced.
async fn renew_locks(
    mut renewer: LockRenewer,
    held: Held,
    every: Duration,
    (metrics, receiver): (Metrics, String),
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let count = |outcome: &str, n: usize| {
        metrics
            .counter_family(&crate::LOCK_RENEWALS)
            .get_or_create(&ferry_core::metrics::labels(&[("receiver", &receiver), ("outcome", outcome)]))
            .inc_by(n as u64);
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        let locks: Vec<crate::service_bus::Lock> = held.lock().expect("held locks").values().cloned().collect();
        if locks.is_empty() {
            continue;
        }
        match tokio::time::timeout(crate::connection::CONNECT_TIMEOUT, renewer.renew(&locks)).await {
            Ok(Ok(())) => {
                debug!(receiver, locks = locks.len(), "locks renewed");
                count("renewed", locks.len());
            }
            Ok(Err(e)) => {
                warn!(receiver, error = %e, locks = locks.len(), "lock renewal failed; a lost lock brings the message back");
                count("failed", locks.len());
            }
            Err(_) => {
                warn!(receiver, locks = locks.len(), "lock renewal got no answer; reconnecting");
                count("failed", locks.len());
                lost.cancel();
                break;
            }
        }
    }
    let _ = tokio::time::timeout(crate::connection::CLOSE_TIMEOUT, renewer.close()).await;
}

/// Settles one delivery through the link task of its connection.
struct Amqp10DeliveryHandle {
    tx: mpsc::Sender<Command>,
    info: Option<DeliveryInfo>,
    /// Keyed on the message id, or a fingerprint without one.
    tracked: Tracked,
}

impl Amqp10DeliveryHandle {
    async fn send(
        tx: &mpsc::Sender<Command>,
        info: DeliveryInfo,
        settlement: Settlement,
    ) -> Result<(), TransportError> {
        let (reply, answer) = oneshot::channel();
        let lost = || TransportError::transient("the link this message came on is gone; the broker will redeliver");
        tx.send(Command { info, settlement, reply }).await.map_err(|_| lost())?;
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(TransportError::transient(format!("settlement not sent: {e}"))),
            Err(_) => Err(lost()),
        }
    }
}

#[async_trait]
impl DeliveryHandle for Amqp10DeliveryHandle {
    async fn ack(mut self: Box<Self>) -> Result<(), TransportError> {
        let Some(info) = self.info.take() else { return Ok(()) };
        self.tracked.settled();
        Self::send(&self.tx, info, Settlement::Accept).await
    }

    async fn release(mut self: Box<Self>, after: Duration, reason: &str) -> Result<(), TransportError> {
        let Some(info) = self.info.take() else { return Ok(()) };
        // A release on a link that ended reaches nobody: the broker took the
        // delivery back on its own, and that is not an attempt.
        if !self.tx.is_closed() {
            self.tracked.released();
        }
        debug!(%reason, after_ms = after.as_millis() as u64, "amqp10 delivery will be given back");
        // The message keeps its credit until it is given back, so waiting
        // here cannot make the broker send more than `credit` messages.
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Err(e) = Self::send(&tx, info, Settlement::Retry).await {
                debug!(error = %e, "retry outcome not sent; the broker redelivers after the connection ends");
            }
        });
        Ok(())
    }

    async fn reject(mut self: Box<Self>, reason: &str) -> Result<(), TransportError> {
        let Some(info) = self.info.take() else { return Ok(()) };
        self.tracked.settled();
        Self::send(&self.tx, info, Settlement::Reject(reason.to_owned())).await
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(self.tracked.count())
    }

    fn gone(&self) -> Option<bool> {
        Some(self.tx.is_closed())
    }
}
