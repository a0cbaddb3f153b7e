//! `shared_outbox` delivery: persist the dispatch plans, acknowledge the
//! source, and let one drainer per binding send them.
//!
//! - **Persist**: one record per plan, keyed (partition, envelope id,
//!   binding, address): a route verdict naming two addresses makes two
//!   records. The source is acknowledged only after the store says every
//!   record is durable. A key already pending, or sent less than
//!   `dedup_window_secs` ago, is not stored twice: the duplicate is
//!   acknowledged and counted on `ferry_outbox_duplicate_suppressed_total`.
//! - **Backpressure**: while a binding's partition holds `max_outbox_depth`
//!   records, the route takes no delivery (nothing is acknowledged or
//!   dropped; the source keeps them).
//! - **Drain**: the drainer takes the partition's lease (fencing out any
//!   earlier holder), claims due records in batches, sends them, and
//!   completes each one sent, through the same [`Binding::deliver`] as a
//!   direct send; settling processors (a circuit breaker) hear each send's
//!   real outcome. A transient failure puts the record back with
//!   one more replay and the route's backoff; a permanent failure, an expiry
//!   or more than `max_replay_attempts` replays dead-letters (or drops) it
//!   and then completes it. Polling backs off while the partition is empty
//!   and a new record wakes it at once.

use std::sync::Arc;
use std::time::Duration;

use ferry_envelope::{Envelope, Timestamp};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{Attempt, Binding, Failed, Mode, Plan, Route, Sent, Settle, tell_settled};
use crate::backoff::sleep_or_shutdown;
use crate::failure::{Failure, FailureReason};
use crate::metrics::Metrics;
use crate::outbox::{LeaseToken, NewRecord, OutboxRecord, OutboxStore, StoreError};
use crate::ports::SendOutcome;
use crate::trace::DeliveryTrace;

/// Records claimed per round.
const CLAIM_BATCH: usize = 256;
/// Polling interval bounds while a partition is empty.
const MIN_POLL: Duration = Duration::from_millis(5);
const MAX_POLL: Duration = Duration::from_millis(500);
/// How long a record waits when its sender is not connected.
const UNAVAILABLE_WAIT: Duration = Duration::from_millis(100);
/// How often a route that is paused by backpressure looks again.
const ROOM_POLL: Duration = Duration::from_millis(20);

/// A route's handle on the outbox store.
#[derive(Clone)]
pub struct Outbox {
    pub store: Arc<dyn OutboxStore>,
    wake: Arc<Notify>,
}

impl Outbox {
    pub fn new(store: Arc<dyn OutboxStore>) -> Self {
        Self { store, wake: Arc::new(Notify::new()) }
    }
}

/// The partition a route's binding drains: `<route>/<binding>`.
pub fn partition_of(route: &str, binding: &str) -> String {
    format!("{route}/{binding}")
}

impl Route {
    /// Persists one record per plan and acknowledges once they are durable.
    pub(super) async fn persist(
        &self,
        outbox: &Outbox,
        envelope: Envelope,
        plans: Vec<Plan>,
        at: &Attempt<'_>,
    ) -> Settle {
        let route = self.id.as_str();
        let mut stored = envelope.clone();
        at.trace.inject(&mut stored);
        let records: Vec<NewRecord> = plans
            .into_iter()
            .map(|plan| {
                let binding = &self.bindings[plan.binding];
                NewRecord {
                    partition: partition_of(route, &binding.id),
                    route: self.id.clone(),
                    binding: binding.id.clone(),
                    address: plan.address,
                    envelope: stored.clone(),
                }
            })
            .collect();
        let mut attempt: u32 = 0;
        loop {
            match outbox.store.persist(records.clone()).await {
                Ok(done) => {
                    debug!(stored = done.stored, "persisted to the outbox");
                    if done.duplicates > 0 {
                        debug!(duplicates = done.duplicates, "already in the outbox or sent lately; acknowledged");
                        self.metrics
                            .outbox_duplicate_suppressed
                            .get_or_create(&crate::metrics::labels(&[("route", route)]))
                            .inc_by(done.duplicates as u64);
                    }
                    if done.stored > 0 {
                        outbox.wake.notify_waiters();
                    }
                    return Settle::Ack;
                }
                Err(e) => {
                    let reason = e.to_string();
                    let delay = self.policy.backoff.delay(attempt);
                    warn!(route, message_id = %envelope.id, error = %reason, attempt, "cannot persist to the outbox, will retry");
                    Metrics::inc(&self.metrics.retried, &[("route", route), ("reason", "outbox")]);
                    if let Some(settle) = self.retry_later(&envelope, delay, &reason, at).await {
                        return settle;
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }

    /// Waits while any of the route's partitions is at `max_outbox_depth`;
    /// false when shutdown came first.
    pub(super) async fn wait_for_outbox_room(&self, shutdown: &CancellationToken) -> bool {
        let Mode::SharedOutbox(outbox) = &self.mode else { return true };
        let max = self.policy.max_outbox_depth as u64;
        let mut paused = false;
        loop {
            let full = self.bindings.iter().find(|b| outbox.store.depth(&partition_of(&self.id, &b.id)) >= max);
            match full {
                None => {
                    if paused {
                        info!(route = %self.id, "outbox has room again; receiving resumed");
                    }
                    return true;
                }
                Some(b) if !paused => {
                    paused = true;
                    warn!(route = %self.id, binding = %b.id, max, "outbox full; receiving paused until it drains");
                    Metrics::inc(&self.metrics.outbox_backpressure, &[("route", &self.id)]);
                }
                Some(_) => {}
            }
            if !sleep_or_shutdown(ROOM_POLL, shutdown).await {
                return false;
            }
        }
    }

    /// Drains binding `index`'s partition until `stop`.
    pub(super) async fn drain(self: Arc<Self>, outbox: Outbox, index: usize, stop: CancellationToken) {
        let binding_id = self.bindings[index].id.clone();
        let partition = partition_of(&self.id, &binding_id);
        let owner = format!("ferry-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
        let mut attempt: u32 = 0;
        let token = loop {
            match outbox.store.acquire_lease(&partition, &owner).await {
                Ok(t) => break t,
                Err(e) => {
                    warn!(%partition, error = %e, "cannot take the outbox lease, will retry");
                    if !sleep_or_shutdown(self.policy.backoff.delay(attempt), &stop).await {
                        return;
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        };
        info!(route = %self.id, binding = %binding_id, lease = token.version, "outbox drainer started");
        let limit = Arc::new(Semaphore::new(self.policy.max_in_flight));
        // Sends run concurrently (at most max_in_flight); the drainer claims
        // again as soon as there is room, not when a whole batch is done.
        // At stop it claims no more and lets the sends under way finish and
        // complete, so a clean stop sends nothing twice at the next start
        // (a send that cannot finish is bounded by its sender's timeout, and
        // the whole stop by admin.shutdown_timeout_secs).
        let mut sends = JoinSet::new();
        let mut idle = MIN_POLL;
        while !stop.is_cancelled() {
            self.observe_partition(&outbox, &partition, &binding_id);
            let room = limit.available_permits().min(CLAIM_BATCH);
            if room == 0 {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = sends.join_next() => {}
                }
                continue;
            }
            let wake = outbox.wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            let batch = match outbox.store.claim(&partition, &token, room, self.clock.now().as_millis()).await {
                Ok(batch) => batch,
                Err(e @ StoreError::StaleFencingToken { .. }) => {
                    error!(%partition, error = %e, "outbox lease lost; this drainer stops");
                    return;
                }
                Err(e) => {
                    warn!(%partition, error = %e, "cannot claim outbox records, will retry");
                    Vec::new()
                }
            };
            if batch.is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = &mut wake => {}
                    _ = tokio::time::sleep(idle) => {}
                    Some(_) = sends.join_next(), if !sends.is_empty() => {}
                }
                idle = (idle * 2).min(MAX_POLL);
                continue;
            }
            idle = MIN_POLL;
            for record in batch {
                let Ok(permit) = limit.clone().acquire_owned().await else { break };
                let (route, outbox, token, stop) = (self.clone(), outbox.clone(), token.clone(), stop.clone());
                sends.spawn(async move {
                    route.send_record(&outbox, index, record, &token, &stop).await;
                    drop(permit);
                });
            }
            while sends.try_join_next().is_some() {}
        }
        while sends.join_next().await.is_some() {}
        self.observe_partition(&outbox, &partition, &binding_id);
    }

    fn observe_partition(&self, outbox: &Outbox, partition: &str, binding: &str) {
        let labels = crate::metrics::labels(&[("route", &self.id), ("binding", binding)]);
        let depth = outbox.store.depth(partition);
        self.metrics.outbox_depth.get_or_create(&labels).set(i64::try_from(depth).unwrap_or(i64::MAX));
        let oldest = if depth == 0 { None } else { outbox.store.oldest(partition) };
        let age = oldest.map_or(0.0, |ms| (self.clock.now().as_millis() - ms).max(0) as f64 / 1000.0);
        self.metrics.outbox_oldest_age.get_or_create(&labels).set(age);
    }

    async fn send_record(
        &self,
        outbox: &Outbox,
        index: usize,
        record: OutboxRecord,
        token: &LeaseToken,
        stop: &CancellationToken,
    ) {
        let binding: &Binding = &self.bindings[index];
        let route = self.id.as_str();
        if record.envelope.is_expired_at(self.clock.now()) {
            Metrics::inc(&self.metrics.expired, &[("route", route)]);
            let failure = Failure::new(FailureReason::Expired, "message expired in the outbox");
            self.finish_failed(outbox, record, token, failure, stop).await;
            return;
        }
        let trace = DeliveryTrace::resume(&record.envelope);
        let cx = self.send_context(&trace);
        let sent = binding.deliver(cx, record.envelope.clone(), &record.address, record.replay_count).await;
        self.tell_chain(&record.envelope, &sent).await;
        match sent {
            Sent::Accepted => {
                self.mark_progress();
                if let Err(e) = outbox.store.complete(&record, token, self.policy.dedup_window).await {
                    warn!(binding = %binding.id, error = %e, "cannot complete an outbox record; it will be sent again");
                }
            }
            Sent::Unavailable(reason) => {
                // Nothing was sent: the record waits for the connection
                // without spending a replay.
                debug!(binding = %binding.id, %reason, "sender not connected; the record waits");
                self.put_back(outbox, &record, token, UNAVAILABLE_WAIT).await;
            }
            Sent::Transient { after: Some(after), reason } => {
                // The header mapper asked for a delay: not a failed send.
                debug!(binding = %binding.id, %reason, ?after, "header mapper asked for a retry");
                self.put_back(outbox, &record, token, after).await;
            }
            Sent::Transient { after: None, reason } => {
                let attempts = record.replay_count.saturating_add(1);
                if attempts > self.policy.max_replay_attempts {
                    let detail = format!("sent {attempts} times without success: {reason}");
                    let failure = Failure::new(FailureReason::ReplayExhausted, detail);
                    self.finish_failed(outbox, record, token, failure, stop).await;
                    return;
                }
                warn!(binding = %binding.id, address = %record.address, error = %reason, attempts, "send failed, will retry");
                Metrics::inc(&self.metrics.retried, &[("route", route), ("reason", "send")]);
                let next = self.clock.now().plus(self.policy.backoff.delay(record.replay_count)).as_millis();
                if let Err(e) = outbox.store.replay(&record, token, next).await {
                    warn!(binding = %binding.id, error = %e, "cannot put an outbox record back");
                }
            }
            Sent::Failed(failure) => {
                warn!(binding = %binding.id, address = %record.address, %failure, "send failed permanently");
                self.finish_failed(outbox, record, token, failure, stop).await;
            }
        }
    }

    /// Puts a record back for `wait` without counting a replay (nothing was
    /// attempted, or the header mapper asked for the delay).
    async fn put_back(&self, outbox: &Outbox, record: &OutboxRecord, token: &LeaseToken, wait: Duration) {
        let next = self.clock.now().plus(wait).as_millis();
        if let Err(e) = outbox.store.release(record, token, next).await {
            warn!(binding = %record.binding, error = %e, "cannot put an outbox record back");
        }
    }

    /// Tells the route's settling processors (a circuit breaker) how a
    /// drainer's send ended, as a direct send would.
    async fn tell_chain(&self, envelope: &Envelope, sent: &Sent) {
        let chain = self.processors.load();
        if !chain.iter().any(|p| p.settles()) {
            return;
        }
        let outcome = match sent {
            Sent::Accepted => SendOutcome::Delivered,
            Sent::Unavailable(reason) | Sent::Transient { reason, .. } => SendOutcome::Failed(reason.clone()),
            Sent::Failed(failure) => SendOutcome::Rejected(failure.detail.clone()),
        };
        tell_settled(&chain, envelope, &outcome).await;
    }

    /// Dead-letters (or drops) a record the way a route fails any message,
    /// then completes it. When the drainer stops before a dead letter could
    /// be written, the record stays in the outbox for the next start.
    async fn finish_failed(
        &self,
        outbox: &Outbox,
        record: OutboxRecord,
        token: &LeaseToken,
        failure: Failure,
        stop: &CancellationToken,
    ) {
        let action = match failure.reason {
            FailureReason::Expired => self.policy.on_expired,
            _ => self.policy.on_permanent_failure,
        };
        let failed = Failed {
            envelope: record.envelope.clone(),
            at: Some((record.binding.clone(), record.address.clone())),
            failure,
            action,
            attempts: record.replay_count.saturating_add(1),
            first_failure: record.first_failure_ms.map_or_else(|| self.clock.now(), Timestamp),
        };
        if matches!(self.fail_permanently(failed, stop).await, Settle::Release { .. }) {
            return;
        }
        self.mark_progress();
        if let Err(e) = outbox.store.complete(&record, token, self.policy.dedup_window).await {
            warn!(error = %e, "cannot complete an outbox record");
        }
    }
}
