//! Redelivery counting for sources whose broker does not count deliveries
//! (AMQP 0-9-1 classic queues only say "redelivered"; RabbitMQ's AMQP 1.0
//! `released` outcome is not counted). The receiver records each release
//! under the message's key and reports the count on the next delivery, so a
//! message that keeps failing transiently reaches `max_replay_attempts`
//! instead of cycling between ferry and the broker forever.
//!
//! Where the broker counts deliveries itself (quorum queues'
//! `x-delivery-count`, AMQP 1.0's `delivery-count`), its count also goes up
//! when it takes back a delivery ferry was holding through a target outage
//! (RabbitMQ's `consumer_timeout`, a lost connection). Those returns are not
//! attempts: the ledger follows the broker's count from delivery to
//! delivery and leaves out every step that was not a release of ours.
//!
//! The key is the message's own id when it has one, else a fingerprint of
//! its content (a redelivery is byte-identical). Counts live in memory: a
//! restart starts them again, which can only add attempts, never lose a
//! message. The ledger is bounded; the oldest keys go first.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Redelivery counts by message key.
pub struct RedeliveryLedger {
    capacity: usize,
    inner: Mutex<Inner>,
}

/// What the ledger knows of one message.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// Releases this process made (transient failures).
    releases: u32,
    /// Whether the last delivery ended in a release of ours.
    released: bool,
    /// The broker's count at the last delivery, when it keeps one.
    broker: Option<u32>,
    /// Returns the broker counted that were not releases of ours: a
    /// delivery held through an outage and taken back (RabbitMQ's
    /// `consumer_timeout`, a lost connection, a dropped delivery).
    unasked: u32,
}

impl Entry {
    fn count(&self) -> u32 {
        let broker = self.broker.map_or(0, |b| b.saturating_sub(self.unasked));
        self.releases.max(broker)
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Keys in first-recorded order, for eviction; may hold forgotten keys.
    order: VecDeque<String>,
}

impl Inner {
    fn entry(&mut self, key: &str, capacity: usize) -> &mut Entry {
        if !self.entries.contains_key(key) {
            while self.entries.len() >= capacity {
                let Some(oldest) = self.order.pop_front() else { break };
                self.entries.remove(&oldest);
            }
            if self.order.len() > capacity * 2 {
                let Inner { entries, order } = self;
                order.retain(|k| entries.contains_key(k));
            }
            self.order.push_back(key.to_owned());
        }
        self.entries.entry(key.to_owned()).or_default()
    }
}

/// Keys a receiver's ledger remembers at most by default.
pub const REDELIVERY_LEDGER_CAPACITY: usize = 100_000;

impl Default for RedeliveryLedger {
    fn default() -> Self {
        Self::new(REDELIVERY_LEDGER_CAPACITY)
    }
}

impl RedeliveryLedger {
    /// A ledger remembering at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a delivery of `key` carrying the broker's own count
    /// (`broker`: RabbitMQ quorum queues' `x-delivery-count`, AMQP 1.0's
    /// `delivery-count`; `None` where the broker keeps none) and returns
    /// the redelivery count to report: the releases of this process, or
    /// the broker's count less the returns that were not ours, whichever is
    /// higher. A broker counts a delivery it took back from a consumer
    /// holding it through an outage; that is not an attempt and must not
    /// spend the replay budget. A key first seen with a count (after a
    /// restart) takes the broker's count as it is: that can only add
    /// attempts, never lose a message.
    pub fn arrived(&self, key: &str, broker: Option<u32>) -> u32 {
        let mut inner = self.lock();
        let Some(now) = broker else {
            return inner.entries.get(key).map_or(0, Entry::count);
        };
        let entry = inner.entry(key, self.capacity);
        if let Some(before) = entry.broker {
            let returns = now.saturating_sub(before);
            // One return is ours when the last delivery ended in a release
            // (brokers that do not count releases show none).
            let ours = u32::from(entry.released).min(returns);
            entry.unasked = entry.unasked.saturating_add(returns - ours);
        }
        entry.broker = Some(now);
        entry.released = false;
        entry.count()
    }

    /// [`RedeliveryLedger::arrived`], kept by the delivery's handle.
    pub fn track(self: &Arc<Self>, key: String, broker: Option<u32>) -> Tracked {
        let count = self.arrived(&key, broker);
        Tracked { key, ledger: self.clone(), count }
    }

    /// The redelivery count recorded for `key` so far.
    pub fn count(&self, key: &str) -> u32 {
        self.lock().entries.get(key).map_or(0, Entry::count)
    }

    /// Records one more release of `key`; returns the releases so far.
    pub fn record_release(&self, key: &str) -> u32 {
        let mut inner = self.lock();
        let entry = inner.entry(key, self.capacity);
        entry.releases = entry.releases.saturating_add(1);
        entry.released = true;
        entry.releases
    }

    /// Forgets `key` (the message was settled for good).
    pub fn forget(&self, key: &str) {
        self.lock().entries.remove(key);
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One delivery's place in a [`RedeliveryLedger`], held by its handle.
pub struct Tracked {
    key: String,
    ledger: Arc<RedeliveryLedger>,
    count: u32,
}

impl Tracked {
    /// The redelivery count at arrival, for `DeliveryHandle::redelivery_count`.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The delivery is given back to be delivered again: one attempt.
    pub fn released(&self) {
        self.ledger.record_release(&self.key);
    }

    /// The delivery was settled for good (acked, rejected).
    pub fn settled(&self) {
        self.ledger.forget(&self.key);
    }
}

/// What a route remembers of a message between its deliveries, keyed on
/// its identity (stable ids only: a generated id is new on every
/// delivery):
/// - the attempts made so far, so a source that retries in process (MQTT,
///   SimpleMQ, HTTP) has a replay budget across a redelivery too;
/// - the (binding, address) copies already accepted, so a fan-out message
///   that comes back (one binding failed, the source redelivers it) is
///   sent only to the bindings that did not take it.
///
/// Bounded like [`RedeliveryLedger`]: the oldest entries go first, and a
/// forgotten entry only costs a resend that is counted.
pub struct DeliveryMemory {
    capacity: usize,
    inner: Mutex<MemoryInner>,
}

/// One message's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remembered {
    /// Attempts made by earlier deliveries.
    pub attempts: u32,
    /// (binding index, address) copies accepted by earlier deliveries.
    pub accepted: Vec<(usize, String)>,
}

#[derive(Default)]
struct MemoryInner {
    entries: HashMap<String, Remembered>,
    order: VecDeque<String>,
}

/// Entries a route remembers at most by default.
pub const DELIVERY_MEMORY_CAPACITY: usize = 100_000;

impl Default for DeliveryMemory {
    fn default() -> Self {
        Self::new(DELIVERY_MEMORY_CAPACITY)
    }
}

impl DeliveryMemory {
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), inner: Mutex::new(MemoryInner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What earlier deliveries of `id` left, if anything.
    pub fn recall(&self, id: &str) -> Option<Remembered> {
        let inner = self.lock();
        if inner.entries.is_empty() {
            return None;
        }
        inner.entries.get(id).cloned()
    }

    /// Records what a delivery of `id` that ended unsettled did: its
    /// attempts (in all, earlier ones included) and the copies accepted.
    pub fn remember(&self, id: &str, attempts: u32, accepted: &[(usize, String)]) {
        let mut inner = self.lock();
        if !inner.entries.contains_key(id) {
            inner.order.push_back(id.to_owned());
        }
        let entry = inner.entries.entry(id.to_owned()).or_default();
        entry.attempts = entry.attempts.max(attempts);
        for copy in accepted {
            if !entry.accepted.contains(copy) {
                entry.accepted.push(copy.clone());
            }
        }
        while inner.entries.len() > self.capacity {
            let Some(oldest) = inner.order.pop_front() else { break };
            inner.entries.remove(&oldest);
        }
        if inner.order.len() > self.capacity * 2 {
            let MemoryInner { entries, order } = &mut *inner;
            order.retain(|k| entries.contains_key(k));
        }
    }

    /// Forgets `id` (the message was settled for good).
    pub fn forget(&self, id: &str) {
        let mut inner = self.lock();
        if !inner.entries.is_empty() {
            inner.entries.remove(id);
        }
    }

    /// Entries remembered now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stable fingerprint of message parts, for messages without an id.
pub fn fingerprint(parts: &[&[u8]]) -> String {
    let mut h = std::hash::DefaultHasher::new();
    for p in parts {
        p.len().hash(&mut h);
        p.hash(&mut h);
    }
    format!("fp:{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_per_key_and_forget_resets() {
        let l = RedeliveryLedger::new(10);
        assert_eq!(l.count("a"), 0);
        assert_eq!(l.record_release("a"), 1);
        assert_eq!(l.record_release("a"), 2);
        assert_eq!(l.record_release("b"), 1);
        assert_eq!(l.count("a"), 2);
        l.forget("a");
        assert_eq!(l.count("a"), 0);
        assert_eq!(l.count("b"), 1);
    }

    #[test]
    fn oldest_keys_are_evicted_and_the_order_queue_stays_bounded() {
        let l = RedeliveryLedger::new(3);
        for k in ["a", "b", "c", "d"] {
            l.record_release(k);
        }
        assert_eq!(l.len(), 3);
        assert_eq!(l.count("a"), 0);
        assert_eq!(l.count("d"), 1);
        for i in 0..100 {
            let k = format!("k{i}");
            l.record_release(&k);
            l.forget(&k);
        }
        assert!(l.lock().order.len() <= 7);
    }

    #[test]
    fn returns_the_broker_counted_that_were_not_releases_spend_nothing() {
        let l = RedeliveryLedger::new(10);
        // A first delivery, held through an outage and taken back twice by
        // the broker (consumer_timeout): the broker counts 2, we count 0.
        assert_eq!(l.arrived("q", Some(0)), 0);
        assert_eq!(l.arrived("q", Some(1)), 0);
        assert_eq!(l.arrived("q", Some(2)), 0);
        // A release of ours that the broker counts too: one attempt.
        assert_eq!(l.record_release("q"), 1);
        assert_eq!(l.arrived("q", Some(3)), 1);
        // Released again, then taken back once more before it came: the
        // broker counts 2, one of them ours.
        l.record_release("q");
        assert_eq!(l.arrived("q", Some(5)), 2);
        // A broker that does not count releases (RabbitMQ's AMQP 1.0
        // `released`): ours still count.
        assert_eq!(l.arrived("r", Some(0)), 0);
        l.record_release("r");
        assert_eq!(l.arrived("r", Some(0)), 1);
        l.record_release("r");
        assert_eq!(l.arrived("r", Some(0)), 2);
        // A broker that keeps no count: releases only.
        l.record_release("c");
        assert_eq!(l.arrived("c", None), 1);
        // First seen with a count (a restart): the broker's count stands.
        assert_eq!(l.arrived("s", Some(4)), 4);
        l.record_release("s");
        assert_eq!(l.arrived("s", Some(5)), 5, "the broker's 4 and our one release");
    }

    #[test]
    fn delivery_memory_merges_what_deliveries_did_and_stays_bounded() {
        let m = DeliveryMemory::new(2);
        assert_eq!(m.recall("a"), None);
        m.remember("a", 2, &[(0, "x".into())]);
        m.remember("a", 3, &[(0, "x".into()), (1, "y".into())]);
        assert_eq!(m.recall("a"), Some(Remembered { attempts: 3, accepted: vec![(0, "x".into()), (1, "y".into())] }));
        m.remember("b", 1, &[]);
        m.remember("c", 1, &[]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.recall("a"), None, "the oldest went first");
        m.forget("b");
        assert_eq!(m.recall("b"), None);
        assert!(m.recall("c").is_some());
    }

    #[test]
    fn fingerprints_separate_parts() {
        assert_eq!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"ab", b"c"]));
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
    }
}
