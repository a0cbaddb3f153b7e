//! [`RedisReceiver`]: one consumer of a consumer group on a stream.
//!
//! - New entries are read with `XREADGROUP … >`, only as many as the route
//!   has room for, and while it is busy not before it has room for a
//!   quarter of a batch. Each is acknowledged (`XACK`) once its route is
//!   done with it; acknowledgements that come while one `XACK` is on its
//!   way go out together in the next.
//! - While ferry holds entries, one heartbeat resets their idle time every
//!   third of `claim_idle_ms` (`XCLAIM … JUSTID`, which leaves the
//!   delivery count alone), so no other consumer claims them.
//! - Entries pending longer than `claim_idle_ms` with no heartbeat are
//!   claimed (`XAUTOCLAIM`): those of a consumer that stopped or was
//!   killed, and those ferry released. Their delivery count (`XPENDING`)
//!   feeds the route's replay budget.
//! - `release(after)` sets the entry's idle time so that it is claimed
//!   again after `after` (at most `claim_idle_ms`: Redis cannot set an
//!   idle time below zero); `reject` acknowledges it (the route has
//!   dead-lettered or dropped it).
//! - A poison entry (over `max_payload_bytes`) is acknowledged and counted;
//!   an entry deleted from the stream while it was pending is gone, and
//!   counted (`reason="deleted"`).
//!
//! Several ferry instances in one group share its entries; each is one
//! consumer, named by its instance id by default.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::config::{RedisStreamsReceiverConfig, StartFrom};
use async_trait::async_trait;
use ferry_core::TransportError;
use ferry_core::backoff::{Backoff, sleep_or_shutdown};
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{Delivery, DeliveryHandle, DeliverySink, Receiver};
use ferry_envelope::Timestamp;
use redis::{Cmd, RedisError, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::entry::{self, Entry};
use crate::ingress::{Fields, Incoming, to_envelope};
use crate::link::{Link, client};

/// Longest a read blocks before the receiver looks at claims and shutdown.
const BLOCK: Duration = Duration::from_secs(1);
/// Most entries one read or claim asks for.
const MAX_BATCH: usize = 256;
/// Most ids one heartbeat command carries.
const HEARTBEAT_CHUNK: usize = 512;
/// Most ids one `XACK` carries.
const ACK_CHUNK: usize = 512;

/// An entry to acknowledge, and who waits for Redis's answer.
type AckWaiter = (String, oneshot::Sender<Result<(), String>>);

/// A consumer feeding one route.
pub struct RedisReceiver {
    name: String,
    config: RedisStreamsReceiverConfig,
    metrics: Metrics,
}

impl RedisReceiver {
    pub fn new(name: &str, config: RedisStreamsReceiverConfig, metrics: Metrics) -> Self {
        Self { name: name.to_owned(), config, metrics }
    }
}

/// What the receiver and its delivery handles share.
struct Group {
    control: Link,
    stream: String,
    group: String,
    consumer: String,
    claim_idle: Duration,
    /// Entries ferry holds now, each with how many deliveries of it are
    /// held (two when it was claimed again while held): the heartbeat
    /// keeps them.
    held: Mutex<HashMap<String, u32>>,
    /// To [`acknowledge`], which sends what queued up meanwhile as one
    /// `XACK`.
    acks: mpsc::UnboundedSender<AckWaiter>,
}

impl Group {
    fn hold(&self, id: &str) {
        *self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(id.to_owned()).or_default() += 1;
    }

    fn let_go(&self, id: &str) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = held.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                held.remove(id);
            }
        }
    }

    fn held(&self) -> Vec<String> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect()
    }

    /// `XCLAIM` of `ids` to this consumer, idle for `idle` from now,
    /// without counting a delivery.
    fn touch(&self, ids: &[String], idle: Duration) -> Cmd {
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&self.stream).arg(&self.group).arg(&self.consumer).arg(0).arg(ids);
        cmd.arg("IDLE").arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)).arg("JUSTID");
        cmd
    }

    /// Acknowledges `id` once Redis has answered the `XACK` that carries
    /// it (with the others queued meanwhile).
    async fn ack(&self, id: &str) -> Result<(), TransportError> {
        let (done, answer) = oneshot::channel();
        self.acks.send((id.to_owned(), done)).map_err(|_| TransportError::transient("XACK: the receiver stopped"))?;
        match answer.await {
            Ok(result) => result.map_err(TransportError::transient),
            Err(_) => Err(TransportError::transient("XACK: the receiver stopped")),
        }
    }
}

/// Sends the acknowledgements queued on `acks`: one `XACK` for every id
/// that queued while the previous one was on its way (a command per entry
/// cost Redis a command per entry besides the read and the target's
/// `XADD`). Ends when the group is gone (the receiver and every handle).
async fn acknowledge(g: Weak<Group>, mut acks: mpsc::UnboundedReceiver<AckWaiter>) {
    let mut batch = Vec::with_capacity(ACK_CHUNK);
    while acks.recv_many(&mut batch, ACK_CHUNK).await > 0 {
        // A waiter holds the group, so it is there while any is queued.
        let result = match g.upgrade() {
            Some(g) => {
                let mut cmd = redis::cmd("XACK");
                cmd.arg(&g.stream).arg(&g.group);
                for (id, _) in &batch {
                    cmd.arg(id);
                }
                g.control.run(&cmd).await.map(drop).map_err(|e| format!("XACK: {e}"))
            }
            None => Err("XACK: the receiver stopped".to_owned()),
        };
        for (_, done) in batch.drain(..) {
            let _ = done.send(result.clone());
        }
    }
}

fn backoff(c: &RedisStreamsReceiverConfig) -> Backoff {
    Backoff::reconnect(c.reconnect_initial_ms, c.reconnect_max_ms)
}

/// How often the receiver looks for entries to claim.
fn claim_every(claim_idle: Duration) -> Duration {
    (claim_idle / 10).clamp(Duration::from_millis(50), BLOCK)
}

/// Makes the group when missing (and the stream with it), or, with
/// `group_passive`, checks that it is there.
async fn ensure_group(g: &Group, c: &RedisStreamsReceiverConfig) -> Result<(), TransportError> {
    if c.group_passive {
        let mut cmd = redis::cmd("XINFO");
        cmd.arg("GROUPS").arg(&g.stream);
        let reply = g.control.run(&cmd).await.map_err(|e| TransportError::transient(format!("XINFO GROUPS: {e}")))?;
        return if group_listed(&reply, &g.group) {
            Ok(())
        } else {
            Err(TransportError::transient(format!(
                "stream {:?} has no group {:?}, and group_passive says not to create it",
                g.stream, g.group
            )))
        };
    }
    let start = match c.start_from {
        StartFrom::Oldest => "0",
        StartFrom::Newest => "$",
    };
    let mut cmd = redis::cmd("XGROUP");
    cmd.arg("CREATE").arg(&g.stream).arg(&g.group).arg(start).arg("MKSTREAM");
    match g.control.run(&cmd).await {
        Ok(_) => {
            info!(stream = %g.stream, group = %g.group, from = start, "created the consumer group");
            Ok(())
        }
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        Err(e) => Err(TransportError::transient(format!("XGROUP CREATE: {e}"))),
    }
}

/// Whether an `XINFO GROUPS` reply lists `group`.
fn group_listed(reply: &Value, group: &str) -> bool {
    let Value::Array(groups) = reply else { return false };
    groups.iter().any(|g| {
        let pairs: Vec<(&Value, &Value)> = match g {
            Value::Array(flat) => flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
            Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
            _ => Vec::new(),
        };
        pairs.iter().any(|(k, v)| entry::bytes(k) == Some(b"name") && entry::bytes(v) == Some(group.as_bytes()))
    })
}

/// Whether a read failed because the group (or its stream) is gone.
fn no_group(e: &RedisError) -> bool {
    e.code() == Some("NOGROUP")
}

#[async_trait]
impl Receiver for RedisReceiver {
    async fn run(&self, sink: DeliverySink, shutdown: CancellationToken) -> Result<(), TransportError> {
        let receiver = self.name.as_str();
        let c = &self.config;
        let client = client(&c.url, c.tls.as_ref())?;
        let (acks, queued_acks) = mpsc::unbounded_channel();
        let reader =
            Link::new(client.clone(), BLOCK + Duration::from_secs(10), ("receiver", receiver), &self.metrics, false);
        let g = Arc::new(Group {
            control: Link::new(client, Duration::from_secs(10), ("receiver", receiver), &self.metrics, false),
            stream: c.stream.clone(),
            group: c.group.clone(),
            consumer: c.consumer_name().to_owned(),
            claim_idle: Duration::from_millis(c.claim_idle_ms),
            held: Mutex::new(HashMap::new()),
            acks,
        });
        tokio::spawn(acknowledge(Arc::downgrade(&g), queued_acks));
        // Ready while the group answers reads. (A handle of its own: the
        // family's guard must not be held across awaits.)
        let ready = self
            .metrics
            .connected
            .get_or_create(&labels(&[("kind", "redis_streams"), ("role", "receiver"), ("name", receiver)]))
            .clone();
        let stop_heartbeat = shutdown.child_token();
        tokio::spawn(heartbeat(g.clone(), stop_heartbeat.clone()));
        let _stop_heartbeat = stop_heartbeat.drop_guard();
        let every = claim_every(g.claim_idle);
        let mut failures = 0u32;
        'group: while !shutdown.is_cancelled() {
            if let Err(e) = ensure_group(&g, c).await {
                ready.set(0);
                let delay = backoff(c).next(&mut failures);
                warn!(receiver, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot use the consumer group; retrying");
                if !sleep_or_shutdown(delay, &shutdown).await {
                    break;
                }
                continue;
            }
            info!(receiver, stream = %g.stream, group = %g.group, consumer = %g.consumer, "consuming");
            ready.set(1);
            let mut cursor = "0-0".to_owned();
            let mut next_claim = Instant::now();
            while !shutdown.is_cancelled() {
                // A quarter of a batch at least: a full route frees one
                // place per settled entry, and a read per place held the
                // route to one entry per round trip.
                let Some(mut room) =
                    ferry_core::ports::room_for(&sink, sink.max_capacity().min(MAX_BATCH) / 4, &shutdown).await
                else {
                    break 'group;
                };
                room = room.clamp(1, MAX_BATCH);
                if Instant::now() >= next_claim {
                    match self.claim(&g, &mut cursor, room, &sink).await {
                        Ok(Some(taken)) => {
                            // More to scan: go on at once.
                            next_claim = if cursor == "0-0" { Instant::now() + every } else { Instant::now() };
                            room = room.saturating_sub(taken);
                        }
                        Ok(None) => break 'group,
                        Err(e) => {
                            ready.set(0);
                            let delay = backoff(c).next(&mut failures);
                            warn!(receiver, error = %e, retry_in_ms = delay.as_millis() as u64, "claiming idle entries failed");
                            if !sleep_or_shutdown(delay, &shutdown).await {
                                break 'group;
                            }
                            continue 'group;
                        }
                    }
                    if room == 0 {
                        continue;
                    }
                }
                let block = next_claim.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(1), BLOCK);
                let mut read = redis::cmd("XREADGROUP");
                read.arg("GROUP").arg(&g.group).arg(&g.consumer).arg("COUNT").arg(room);
                read.arg("BLOCK").arg(u64::try_from(block.as_millis()).unwrap_or(1));
                read.arg("STREAMS").arg(&g.stream).arg(">");
                let reply = tokio::select! {
                    _ = shutdown.cancelled() => break 'group,
                    r = reader.run(&read) => r,
                };
                let entries = match reply
                    .map_err(|e| (no_group(&e), e.to_string()))
                    .and_then(|v| entry::read_reply(&v).map_err(|e| (false, e.to_string())))
                {
                    Ok(entries) => entries,
                    Err((gone, e)) => {
                        ready.set(0);
                        let delay = backoff(c).next(&mut failures);
                        if gone {
                            warn!(receiver, error = %e, "the group or its stream is gone; making it again");
                        } else {
                            warn!(receiver, error = %e, retry_in_ms = delay.as_millis() as u64, "read failed");
                        }
                        if !sleep_or_shutdown(delay, &shutdown).await {
                            break 'group;
                        }
                        continue 'group;
                    }
                };
                ready.set(1);
                failures = 0;
                for e in entries {
                    if !self.emit(&g, e, 1, &sink).await {
                        break 'group;
                    }
                }
            }
        }
        ready.set(0);
        Ok(())
    }
}

impl RedisReceiver {
    /// Claims up to `room` entries idle longer than `claim_idle_ms` and hands
    /// them on; how many it handed on, or `None` when the route stopped.
    async fn claim(
        &self,
        g: &Arc<Group>,
        cursor: &mut String,
        room: usize,
        sink: &DeliverySink,
    ) -> Result<Option<usize>, String> {
        let mut cmd = redis::cmd("XAUTOCLAIM");
        cmd.arg(&g.stream).arg(&g.group).arg(&g.consumer);
        cmd.arg(u64::try_from(g.claim_idle.as_millis()).unwrap_or(u64::MAX)).arg(cursor.as_str());
        cmd.arg("COUNT").arg(room);
        let reply = g.control.run(&cmd).await.map_err(|e| format!("XAUTOCLAIM: {e}"))?;
        let claimed = entry::autoclaim_reply(&reply).map_err(|e| e.to_string())?;
        cursor.clone_from(&claimed.cursor);
        if !claimed.deleted.is_empty() {
            warn!(receiver = %self.name, entries = ?claimed.deleted, "entries deleted from the stream while pending are gone");
            Metrics::add(
                &self.metrics.ingress_rejected,
                &[("kind", "redis_streams"), ("receiver", &self.name), ("reason", "deleted")],
                claimed.deleted.len() as u64,
            );
            for id in &claimed.deleted {
                // Redis 7 has dropped them from the group already.
                let _ = g.ack(id).await;
            }
        }
        let taken = claimed.entries.len();
        for e in claimed.entries {
            let delivered = delivery_count(g, &e.id).await.unwrap_or(2);
            if !self.emit(g, e, delivered, sink).await {
                return Ok(None);
            }
        }
        Ok(Some(taken))
    }

    /// Hands one entry to the route; false when the route stopped.
    async fn emit(&self, g: &Arc<Group>, e: Entry, delivered: i64, sink: &DeliverySink) -> bool {
        let c = &self.config;
        let m = Incoming { stream: g.stream.clone(), id: e.id, fields: e.fields, delivered };
        let fields = Fields { payload: &c.payload_field, id: &c.id_field, max_payload_bytes: c.max_payload_bytes };
        match to_envelope(&m, fields) {
            Ok(converted) => {
                if converted.dropped > 0 && delivered == 1 {
                    Metrics::add(
                        &self.metrics.counter_family(&crate::FIELD_DROPPED),
                        &[("name", &self.name), ("direction", "ingress")],
                        u64::from(converted.dropped),
                    );
                }
                g.hold(&m.id);
                let handle = RedisHandle { group: g.clone(), id: m.id, delivered, settled: false };
                sink.send(Delivery::new(converted.envelope, Box::new(handle))).await.is_ok()
            }
            Err(poison) => {
                warn!(receiver = %self.name, stream = %g.stream, entry = %m.id, reason = poison.label(), "poison entry acknowledged without delivery");
                Metrics::inc(
                    &self.metrics.ingress_rejected,
                    &[("kind", "redis_streams"), ("receiver", &self.name), ("reason", poison.label())],
                );
                if let Err(e) = g.ack(&m.id).await {
                    warn!(receiver = %self.name, error = %e, "could not acknowledge a poison entry; it is claimed again later");
                }
                true
            }
        }
    }
}

/// The delivery count the group keeps for entry `id`.
async fn delivery_count(g: &Group, id: &str) -> Option<i64> {
    let mut cmd = redis::cmd("XPENDING");
    cmd.arg(&g.stream).arg(&g.group).arg(id).arg(id).arg(1);
    let reply = g.control.run(&cmd).await.ok()?;
    entry::pending_reply(&reply).ok()?.into_iter().find(|(i, _)| i == id).map(|(_, n)| n)
}

/// Resets the idle time of every held entry every third of
/// `claim_idle_ms`, until `stop`.
async fn heartbeat(g: Arc<Group>, stop: CancellationToken) {
    let period = g.claim_idle / 3;
    loop {
        if !sleep_or_shutdown(period, &stop).await {
            return;
        }
        let held = g.held();
        for ids in held.chunks(HEARTBEAT_CHUNK) {
            if let Err(e) = g.control.run(&g.touch(ids, Duration::ZERO)).await {
                debug!(stream = %g.stream, error = %e, "heartbeat failed; held entries may be claimed by another consumer");
            }
        }
    }
}

/// Settles one entry.
struct RedisHandle {
    group: Arc<Group>,
    id: String,
    delivered: i64,
    settled: bool,
}

impl Drop for RedisHandle {
    fn drop(&mut self) {
        // Unsettled: no heartbeat any more, so it is claimed again once
        // idle for claim_idle_ms.
        if !self.settled {
            self.group.let_go(&self.id);
        }
    }
}

#[async_trait]
impl DeliveryHandle for RedisHandle {
    async fn ack(mut self: Box<Self>) -> Result<(), TransportError> {
        self.settled = true;
        self.group.let_go(&self.id);
        self.group.ack(&self.id).await
    }

    async fn release(mut self: Box<Self>, after: Duration, _reason: &str) -> Result<(), TransportError> {
        self.settled = true;
        let g = &self.group;
        g.let_go(&self.id);
        // Claimed again once idle for claim_idle: so idle now for
        // claim_idle - after.
        let idle = g.claim_idle.saturating_sub(after);
        g.control
            .run(&g.touch(std::slice::from_ref(&self.id), idle))
            .await
            .map(drop)
            .map_err(|e| TransportError::transient(format!("XCLAIM: {e}")))
    }

    async fn reject(mut self: Box<Self>, _reason: &str) -> Result<(), TransportError> {
        self.settled = true;
        self.group.let_go(&self.id);
        self.group.ack(&self.id).await
    }

    async fn extend(&self, _until: Timestamp) -> Result<(), TransportError> {
        let g = &self.group;
        g.control
            .run(&g.touch(std::slice::from_ref(&self.id), Duration::ZERO))
            .await
            .map(drop)
            .map_err(|e| TransportError::transient(format!("XCLAIM: {e}")))
    }

    fn redelivery_count(&self) -> Option<u32> {
        Some(u32::try_from(self.delivered.saturating_sub(1)).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_group_is_found_in_xinfo_groups() {
        let reply =
            Value::Array(vec![Value::Array(vec![bulk("name"), bulk("workers"), bulk("consumers"), Value::Int(2)])]);
        assert!(group_listed(&reply, "workers"));
        assert!(!group_listed(&reply, "others"));
        assert!(!group_listed(&Value::Nil, "workers"));
    }

    #[test]
    fn claims_are_looked_for_often_but_not_in_a_spin() {
        assert_eq!(claim_every(Duration::from_secs(30)), BLOCK);
        assert_eq!(claim_every(Duration::from_millis(300)), Duration::from_millis(50));
    }
}
