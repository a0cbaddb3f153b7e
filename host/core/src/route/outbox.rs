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
//! - **Partitions and leases**: each binding has `outbox_partitions`
//!   partitions (a record goes to the one a hash of its message id picks).
//!   The route's lease keeper holds a fair share of them — all of them when
//!   this is the only instance, about one in N when N instances share a
//!   PostgreSQL store — renews what it holds every third of
//!   `store.lease_ttl_secs`, takes over partitions whose holder stopped
//!   renewing, gives extras up when another instance holds fewer, and runs
//!   one drainer per partition it holds.
//! - **Drain**: the drainer, under its partition's lease (a version that
//!   fences out every earlier holder), claims due records in batches, sends them, and
//!   completes each one sent, through the same [`Binding::deliver`] as a
//!   direct send; settling processors (a circuit breaker) hear each send's
//!   real outcome. A transient failure puts the record back with
//!   one more replay and the route's backoff; a permanent failure, an expiry
//!   or more than `max_replay_attempts` replays dead-letters (or drops) it
//!   and then completes it. Polling backs off while the partition is empty
//!   and a new record wakes it at once.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferry_envelope::{Envelope, Timestamp};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{Attempt, Binding, Count, Failed, Mode, Plan, Route, Sent, Settle, tell_settled};
use crate::backoff::sleep_or_shutdown;
use crate::failure::{Failure, FailureReason};
use crate::metrics::Metrics;
use crate::outbox::{LeaseToken, NewRecord, OutboxRecord, OutboxStore, StoreError, partition_for, partition_name};
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

/// How this process holds outbox leases: one owner name for all its
/// routes, and the lease's time to live.
#[derive(Debug, Clone)]
pub struct Leasing {
    /// `<instance id>/<random>`: new at every start, so a restarted
    /// instance never mistakes its predecessor's leases for its own.
    pub owner: String,
    pub ttl: Duration,
}

impl Leasing {
    pub fn new(instance: &str, ttl: Duration) -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self { owner: format!("{instance}/{}", &random[..12]), ttl }
    }
}

/// A route's handle on the outbox store.
#[derive(Clone)]
pub struct Outbox {
    pub store: Arc<dyn OutboxStore>,
    wake: Arc<Notify>,
    leasing: Arc<Leasing>,
    /// The route's partitions, (binding index, name), worked out once.
    partitions: Arc<OnceLock<Vec<(usize, String)>>>,
}

impl Outbox {
    pub fn new(store: Arc<dyn OutboxStore>, leasing: Leasing) -> Self {
        Self { store, wake: Arc::new(Notify::new()), leasing: Arc::new(leasing), partitions: Arc::default() }
    }
}

/// The first partition of a binding: `<route>/<binding>`.
pub fn partition_of(route: &str, binding: &str) -> String {
    partition_name(route, binding, 0)
}

/// A lease call given a third of the lease's time to live: a store that
/// does not answer (a database host gone silent) must not keep the keeper
/// from stopping drainers whose leases may expire meanwhile.
async fn bounded<T>(outbox: &Outbox, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    let limit = (outbox.leasing.ttl / 3).max(Duration::from_millis(50));
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Unavailable(format!("no answer from the store within {limit:?}"))),
    }
}

/// A partition whose lease this route holds.
struct Held {
    binding: usize,
    token: LeaseToken,
    /// Stops its drainer.
    stop: CancellationToken,
    task: tokio::task::Id,
    renewed: Instant,
    /// Given up on purpose: released once its drainer has finished.
    leaving: bool,
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
                    partition: partition_for(route, &binding.id, &envelope.id, self.policy.outbox_partitions),
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
                    self.count(Count::Retried, "outbox");
                    if matches!(e, StoreError::Unavailable(_)) {
                        // The store is out of reach, not refusing this
                        // message: it waits here (keeping its place in
                        // max_in_flight, so the route takes no more) instead
                        // of going back to its source, where every return
                        // would count against max_replay_attempts and an
                        // outage of a few seconds would dead-letter it.
                        if !sleep_or_shutdown(delay, at.shutdown).await {
                            return Settle::Release { after: delay, reason };
                        }
                    } else if let Some(settle) =
                        self.retry_later(&envelope, attempt.saturating_add(1), delay, &reason, at).await
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
        let Mode::SharedOutbox(outbox) = &self.mode else { return true };
        let max = self.policy.max_outbox_depth as u64;
        let mut paused = false;
        loop {
            let full =
                (0..self.bindings.len()).find(|i| self.binding_depth(outbox, *i).0 >= max).map(|i| &self.bindings[i]);
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

    /// The route's partitions: (binding index, name), bindings in order.
    fn partitions<'a>(&self, outbox: &'a Outbox) -> &'a [(usize, String)] {
        outbox.partitions.get_or_init(|| {
            let count = self.policy.outbox_partitions.max(1);
            (0..self.bindings.len())
                .flat_map(|i| (0..count).map(move |k| (i, partition_name(&self.id, &self.bindings[i].id, k))))
                .collect()
        })
    }

    /// Pending records of binding `index` over its partitions, and the
    /// creation time of the oldest.
    fn binding_depth(&self, outbox: &Outbox, index: usize) -> (u64, Option<i64>) {
        let mut depth = 0;
        let mut oldest: Option<i64> = None;
        for (_, partition) in self.partitions(outbox).iter().filter(|(i, _)| *i == index) {
            let d = outbox.store.depth(partition);
            if d > 0 {
                depth += d;
                if let Some(ms) = outbox.store.oldest(partition) {
                    oldest = Some(oldest.map_or(ms, |o| o.min(ms)));
                }
            }
        }
        (depth, oldest)
    }

    /// Holds the leases of a fair share of the route's partitions and runs
    /// a drainer for each, until `stop`; then stops the drainers, lets the
    /// sends under way finish and gives the leases up, so another instance
    /// takes them over at once.
    pub(super) async fn keep_leases(self: Arc<Self>, outbox: Outbox, stop: CancellationToken) {
        let ttl = outbox.leasing.ttl;
        let period = (ttl / 3).max(Duration::from_millis(50));
        let changes = outbox.store.lease_changes();
        let mut held: BTreeMap<String, Held> = BTreeMap::new();
        let mut drainers: JoinSet<String> = JoinSet::new();
        let mut next_round = tokio::time::Instant::now();
        let held_gauge =
            self.metrics.outbox_leases_held.get_or_create(&crate::metrics::labels(&[("route", &self.id)])).clone();
        loop {
            held_gauge.set(held.values().filter(|h| !h.stop.is_cancelled()).count() as i64);
            let changed = async {
                match &changes {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(ended) = drainers.join_next_with_id(), if !drainers.is_empty() => {
                    self.drainer_ended(&outbox, &mut held, ended).await;
                    continue;
                }
                _ = tokio::time::sleep_until(next_round) => {}
                _ = changed => {}
            }
            self.renew_leases(&outbox, &mut held).await;
            self.balance(&outbox, &mut held, &mut drainers).await;
            held_gauge.set(held.values().filter(|h| !h.stop.is_cancelled()).count() as i64);
            next_round = tokio::time::Instant::now() + period;
        }
        for h in held.values_mut() {
            h.leaving = true;
            h.stop.cancel();
        }
        held_gauge.set(0);
        // The drainers finish their sends; the leases they hold are kept
        // alive meanwhile and given up as each one ends.
        while !drainers.is_empty() {
            tokio::select! {
                Some(ended) = drainers.join_next_with_id() => self.drainer_ended(&outbox, &mut held, ended).await,
                _ = tokio::time::sleep(period) => self.renew_leases(&outbox, &mut held).await,
            }
        }
    }

    /// A drainer ended: given up on purpose (its lease is released now), or
    /// its lease was lost.
    async fn drainer_ended(
        &self,
        outbox: &Outbox,
        held: &mut BTreeMap<String, Held>,
        ended: Result<(tokio::task::Id, String), tokio::task::JoinError>,
    ) {
        let partition = match ended {
            Ok((_, partition)) => partition,
            Err(e) => {
                let id = e.id();
                error!(route = %self.id, error = %e, "an outbox drainer failed");
                match held.iter().find(|(_, h)| h.task == id) {
                    Some((p, _)) => p.clone(),
                    None => return,
                }
            }
        };
        let Some(h) = held.remove(&partition) else { return };
        if h.leaving {
            if let Err(e) = bounded(outbox, outbox.store.release_lease(&partition, &h.token)).await {
                warn!(%partition, error = %e, "cannot give the outbox lease up; another instance takes it when it expires");
            }
            debug!(%partition, "outbox lease given up");
        } else {
            info!(%partition, "outbox drainer stopped: its lease is no longer this instance's");
        }
        self.observe_binding(outbox, h.binding);
    }

    /// Renews every held lease. One found taken, or not renewed for two
    /// thirds of its time to live (another instance may take it after the
    /// whole), has its drainer stopped.
    async fn renew_leases(&self, outbox: &Outbox, held: &mut BTreeMap<String, Held>) {
        let ttl = outbox.leasing.ttl;
        for (partition, h) in held.iter_mut() {
            if h.stop.is_cancelled() && !h.leaving {
                continue;
            }
            match bounded(outbox, outbox.store.renew_lease(partition, &h.token, ttl)).await {
                Ok(true) => h.renewed = Instant::now(),
                Ok(false) => {
                    warn!(%partition, "outbox lease taken by another instance; this drainer stops");
                    h.leaving = false;
                    h.stop.cancel();
                }
                Err(e) if h.renewed.elapsed() > ttl * 2 / 3 => {
                    error!(%partition, error = %e, "cannot renew the outbox lease before it may expire; this drainer stops");
                    h.leaving = false;
                    h.stop.cancel();
                }
                Err(e) => warn!(%partition, error = %e, "cannot renew the outbox lease, will retry"),
            }
        }
    }

    /// Takes free partitions up to this instance's share (the route's
    /// partitions over the live instances, rounded up), or gives up the
    /// ones beyond it while another live instance holds less than its part.
    async fn balance(
        self: &Arc<Self>,
        outbox: &Outbox,
        held: &mut BTreeMap<String, Held>,
        drainers: &mut JoinSet<String>,
    ) {
        let partitions = self.partitions(outbox);
        let names: Vec<String> = partitions.iter().map(|(_, p)| p.clone()).collect();
        let Leasing { owner, ttl } = outbox.leasing.as_ref();
        let view = match bounded(outbox, outbox.store.lease_view(owner, *ttl, &names)).await {
            Ok(view) => view,
            Err(e) => {
                warn!(route = %self.id, error = %e, "cannot read the outbox leases, will retry");
                return;
            }
        };
        let live = view.live_owners.max(1);
        let share = partitions.len().div_ceil(live);
        let least = partitions.len() / live;
        let mine = held.values().filter(|h| !h.leaving).count();
        if mine > share {
            let mut others: BTreeMap<&str, usize> = BTreeMap::new();
            for holder in view.holders.values().filter(|h| *h != owner) {
                *others.entry(holder.as_str()).or_default() += 1;
            }
            let someone_short = others.len() + 1 < live || others.values().any(|n| *n < least);
            if !someone_short {
                return;
            }
            let extra: Vec<String> =
                held.iter().rev().filter(|(_, h)| !h.leaving).take(mine - share).map(|(p, _)| p.clone()).collect();
            for partition in extra {
                if let Some(h) = held.get_mut(&partition) {
                    info!(%partition, live, share, "giving an outbox partition up to another instance");
                    h.leaving = true;
                    h.stop.cancel();
                }
            }
            return;
        }
        let mut mine = mine;
        for (index, partition) in partitions {
            if mine >= share {
                break;
            }
            let free = !held.contains_key(partition) && view.holders.get(partition).is_none_or(|h| h == owner);
            if !free {
                continue;
            }
            match bounded(outbox, outbox.store.acquire_lease(partition, owner, *ttl)).await {
                Ok(Some(token)) => {
                    info!(route = %self.id, %partition, lease = token.version, "outbox drainer started");
                    let stop = CancellationToken::new();
                    let (route, out, i, p, t, s) =
                        (self.clone(), outbox.clone(), *index, partition.clone(), token.clone(), stop.clone());
                    let task = drainers
                        .spawn(async move {
                            route.drain(out, i, &p, t, s).await;
                            p
                        })
                        .id();
                    held.insert(
                        partition.clone(),
                        Held { binding: *index, token, stop, task, renewed: Instant::now(), leaving: false },
                    );
                    mine += 1;
                }
                Ok(None) => {}
                Err(e) => warn!(%partition, error = %e, "cannot take the outbox lease, will retry"),
            }
        }
    }

    /// Drains `partition` (of binding `index`) under `token` until `stop`
    /// or until the lease is found taken.
    pub(super) async fn drain(
        self: Arc<Self>,
        outbox: Outbox,
        index: usize,
        partition: &str,
        token: LeaseToken,
        stop: CancellationToken,
    ) {
        let partition = partition.to_owned();
        let arrivals = outbox.store.arrivals(&partition);
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
            self.observe_binding(&outbox, index);
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
            // Another process's records for this partition (a shared
            // store): the store keeps one wake-up for the next wait, so
            // records that arrive while the claim runs are not missed.
            let arrived = async {
                match &arrivals {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            };
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
                    _ = arrived => {}
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
        self.observe_binding(&outbox, index);
    }

    /// Sets binding `index`'s depth and oldest-age gauges from the store.
    fn observe_binding(&self, outbox: &Outbox, index: usize) {
        let labels = crate::metrics::labels(&[("route", &self.id), ("binding", &self.bindings[index].id)]);
        let (depth, oldest) = self.binding_depth(outbox, index);
        self.metrics.outbox_depth.get_or_create(&labels).set(i64::try_from(depth).unwrap_or(i64::MAX));
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
        if record.envelope.is_expired_at(self.clock.now()) {
            self.count_expired();
            let failure = Failure::new(FailureReason::Expired, "message expired in the outbox");
            self.finish_failed(outbox, record, token, failure, stop).await;
            return;
        }
        // A binding in an outage: the record waits for its turn to probe (or
        // for the end of the outage) without spending a replay.
        let pass = match binding.availability.try_pass() {
            Some(pass) => pass,
            None => {
                if let Some(failure) = self.outage_exceeded(binding) {
                    self.finish_failed(outbox, record, token, failure, stop).await;
                    return;
                }
                match self.wait_available(index, stop).await {
                    Some(pass) => pass,
                    None => {
                        match self.outage_exceeded(binding) {
                            Some(failure) => self.finish_failed(outbox, record, token, failure, stop).await,
                            None => self.put_back(outbox, &record, token, Duration::ZERO).await,
                        }
                        return;
                    }
                }
            }
        };
        let trace = DeliveryTrace::resume(&record.envelope);
        let cx = self.send_context(&trace);
        let sent = binding.deliver(cx, record.envelope.clone(), &record.address, record.replay_count).await;
        self.observe(binding, &sent, &record.envelope.id);
        drop(pass);
        self.tell_chain(&record.envelope, &sent).await;
        match sent {
            Sent::Accepted => {
                self.mark_progress();
                if let Err(e) = outbox.store.complete(&record, token, self.policy.dedup_window).await {
                    warn!(binding = %binding.id, error = %e, "cannot complete an outbox record; it will be sent again");
                }
            }
            Sent::Unavailable { reason, not_before } => {
                // An outage: the record waits for the binding (and no less
                // than the target asked) without spending a replay.
                debug!(binding = %binding.id, %reason, "target unavailable; the record waits");
                let wait = not_before.unwrap_or_default().max(UNAVAILABLE_WAIT);
                self.put_back(outbox, &record, token, wait).await;
            }
            Sent::Transient { after: Some(after), reason, .. } => {
                // The header mapper asked for a delay: not a failed send.
                debug!(binding = %binding.id, %reason, ?after, "header mapper asked for a retry");
                self.put_back(outbox, &record, token, after).await;
            }
            Sent::Transient { after: None, not_before, reason } => {
                let attempts = record.replay_count.saturating_add(1);
                if attempts > self.policy.max_replay_attempts {
                    let detail = format!("sent {attempts} times without success: {reason}");
                    let failure = Failure::new(FailureReason::ReplayExhausted, detail);
                    self.finish_failed(outbox, record, token, failure, stop).await;
                    return;
                }
                warn!(binding = %binding.id, address = %record.address, error = %reason, attempts, "send failed, will retry");
                self.count(Count::Retried, "send");
                let delay = self.policy.backoff.delay(record.replay_count).max(not_before.unwrap_or_default());
                let next = self.clock.now().plus(delay).as_millis();
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
            Sent::Unavailable { reason, .. } | Sent::Transient { reason, .. } => SendOutcome::Failed(reason.clone()),
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
