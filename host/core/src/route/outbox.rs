//! `shared_outbox` delivery: persist the dispatch plans, acknowledge the
//! source, and let one drainer per binding send them.
//!
//! - **Persist**: one record per plan, keyed (partition, envelope id,
//!   binding) with the address kept apart; the source is acknowledged only
//!   after the store says the records are durable. A record already pending
//!   is not stored twice: the duplicate is acknowledged and counted on
//!   `ferry_outbox_duplicate_suppressed_total`.
//! - **Backpressure**: while a binding's partition holds `max_outbox_depth`
//!   records, the route takes no delivery (nothing is acknowledged or
//!   dropped; the source keeps them).
//! - **Drain**: the drainer takes the partition's lease (fencing out any
//!   earlier holder), claims due records in batches, sends them, and
//!   completes each one sent. A transient failure puts the record back with
//!   one more replay and the route's backoff; a permanent failure, an expiry
//!   or more than `max_replay_attempts` replays dead-letters (or drops) it
//!   and then completes it. Polling backs off while the partition is empty
//!   and a new record wakes it at once.

use std::sync::Arc;
use std::time::Duration;

use ferry_config::FailureAction;
use ferry_envelope::{Envelope, Timestamp};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{Plan, Route, Settle};
use crate::backoff::sleep_or_shutdown;
use crate::metrics::Metrics;
use crate::outbox::{LeaseToken, NewRecord, OutboxRecord, OutboxStore, StoreError};
use crate::ports::{DeliveryHandle, OutboundMessage, ProcessError};
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
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn persist(
        &self,
        outbox: &Outbox,
        envelope: Envelope,
        plans: Vec<Plan>,
        handle: &dyn DeliveryHandle,
        trace: &DeliveryTrace,
        first_seen: Timestamp,
        shutdown: &CancellationToken,
    ) -> Settle {
        let route = self.id.as_str();
        let records: Vec<NewRecord> = plans
            .into_iter()
            .map(|plan| {
                let binding = &self.bindings[plan.binding];
                let mut outbound = envelope.clone();
                trace.send(&binding.id, &plan.address, &mut outbound).end(None);
                NewRecord {
                    partition: partition_of(route, &binding.id),
                    route: self.id.clone(),
                    binding: binding.id.clone(),
                    address: plan.address,
                    envelope: outbound,
                }
            })
            .collect();
        let mut attempt: u32 = 0;
        loop {
            match outbox.store.persist(records.clone()).await {
                Ok(done) => {
                    debug!(stored = done.stored, "persisted to the outbox");
                    if done.duplicates > 0 {
                        debug!(duplicates = done.duplicates, "already in the outbox; acknowledged");
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
                    warn!(error = %reason, attempt, "cannot persist to the outbox, will retry");
                    Metrics::inc(&self.metrics.retried, &[("route", route), ("reason", "outbox")]);
                    if let Some(settle) =
                        self.retry_later(&envelope, handle, delay, &reason, first_seen, shutdown).await
                    {
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
        let Some(outbox) = &self.outbox else { return true };
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
            let batch = match outbox.store.claim(&partition, &token, room, Timestamp::now().as_millis()).await {
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
        let age = oldest.map_or(0.0, |ms| (Timestamp::now().as_millis() - ms).max(0) as f64 / 1000.0);
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
        let binding = &self.bindings[index];
        let route = self.id.as_str();
        if record.envelope.is_expired_at(Timestamp::now()) {
            Metrics::inc(&self.metrics.expired, &[("route", route)]);
            let action = self.policy.on_expired;
            let detail = "message expired in the outbox";
            self.finish_failed(outbox, record, token, action, "expired", detail, stop).await;
            return;
        }
        let message = match self.map_copy(binding, record.envelope.clone(), &record.address).await {
            Ok((envelope, address)) => OutboundMessage { envelope, address },
            Err(ProcessError::Reject(reason)) => {
                warn!(binding = %binding.id, %reason, "header mapper refused the message");
                let action = self.policy.on_permanent_failure;
                self.finish_failed(outbox, record, token, action, "header_mapper", &reason, stop).await;
                return;
            }
            Err(ProcessError::Retry { after, reason }) => {
                debug!(binding = %binding.id, %reason, "header mapper asked for a retry");
                if let Err(e) = outbox.store.release(&record, token, Timestamp::now().plus(after).as_millis()).await {
                    warn!(binding = %binding.id, error = %e, "cannot put an outbox record back");
                }
                return;
            }
        };
        match binding.sender.send(message).await {
            Ok(()) => {
                Metrics::inc(&self.metrics.sent, &[("route", route), ("binding", &binding.id)]);
                let age_ms = Timestamp::now().as_millis().saturating_sub(record.envelope.created_at.as_millis());
                self.metrics
                    .age_at_egress
                    .get_or_create(&crate::metrics::labels(&[("route", route), ("binding", &binding.id)]))
                    .observe(age_ms.max(0) as f64 / 1000.0);
                self.mark_progress();
                if let Err(e) = outbox.store.complete(&record, token).await {
                    warn!(binding = %binding.id, error = %e, "cannot complete an outbox record; it will be sent again");
                }
            }
            Err(error) if error.is_unavailable() => {
                // Nothing was sent: the record waits for the connection
                // without spending a replay.
                debug!(binding = %binding.id, %error, "sender not connected; the record waits");
                if let Err(e) =
                    outbox.store.release(&record, token, Timestamp::now().plus(UNAVAILABLE_WAIT).as_millis()).await
                {
                    warn!(binding = %binding.id, error = %e, "cannot put an outbox record back");
                }
            }
            Err(error) if error.is_transient() => {
                let attempts = record.replay_count.saturating_add(1);
                if attempts > self.policy.max_replay_attempts {
                    let detail = format!("sent {attempts} times without success: {}", error.reason);
                    let action = self.policy.on_permanent_failure;
                    self.finish_failed(outbox, record, token, action, "replay_exhausted", &detail, stop).await;
                    return;
                }
                warn!(binding = %binding.id, address = %record.address, %error, attempts, "send failed, will retry");
                Metrics::inc(&self.metrics.retried, &[("route", route), ("reason", "send")]);
                let next = Timestamp::now().plus(self.policy.backoff.delay(record.replay_count)).as_millis();
                if let Err(e) = outbox.store.replay(&record, token, next).await {
                    warn!(binding = %binding.id, error = %e, "cannot put an outbox record back");
                }
            }
            Err(error) => {
                warn!(binding = %binding.id, address = %record.address, %error, "send failed permanently");
                let action = self.policy.on_permanent_failure;
                self.finish_failed(outbox, record, token, action, "send_rejected", &error.reason, stop).await;
            }
        }
    }

    /// Dead-letters (or drops) a record the way a route fails any message,
    /// then completes it. When the drainer stops before a dead letter could
    /// be written, the record stays in the outbox for the next start.
    #[allow(clippy::too_many_arguments)]
    async fn finish_failed(
        &self,
        outbox: &Outbox,
        record: OutboxRecord,
        token: &LeaseToken,
        action: FailureAction,
        reason: &str,
        detail: &str,
        stop: &CancellationToken,
    ) {
        let first_failure = record.first_failure_ms.map_or_else(Timestamp::now, Timestamp);
        let settle = self
            .fail_permanently(
                record.envelope.clone(),
                Some((record.binding.clone(), record.address.clone())),
                action,
                reason,
                detail,
                record.replay_count.saturating_add(1),
                first_failure,
                stop,
            )
            .await;
        if matches!(settle, Settle::Release { .. }) {
            return;
        }
        self.mark_progress();
        if let Err(e) = outbox.store.complete(&record, token).await {
            warn!(error = %e, "cannot complete an outbox record");
        }
    }
}
