//! Redelivery counting for sources whose broker does not count deliveries
//! (AMQP 0-9-1 classic queues only say "redelivered"; RabbitMQ's AMQP 1.0
//! `released` outcome is not counted). The receiver records each release
//! under the message's key and reports the count on the next delivery, so a
//! message that keeps failing transiently reaches `max_replay_attempts`
//! instead of cycling between ferry and the broker forever.
//!
//! The key is the message's own id when it has one, else a fingerprint of
//! its content (a redelivery is byte-identical). Counts live in memory: a
//! restart starts them again, which can only add attempts, never lose a
//! message. The ledger is bounded; the oldest keys go first.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Release counts by message key.
pub struct RedeliveryLedger {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    counts: HashMap<String, u32>,
    /// Keys in first-recorded order, for eviction; may hold forgotten keys.
    order: VecDeque<String>,
}

impl RedeliveryLedger {
    /// A ledger remembering at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Releases recorded for `key` so far.
    pub fn count(&self, key: &str) -> u32 {
        self.lock().counts.get(key).copied().unwrap_or(0)
    }

    /// Records one more release of `key`; returns the new count.
    pub fn record_release(&self, key: &str) -> u32 {
        let mut inner = self.lock();
        let count = match inner.counts.get_mut(key) {
            Some(c) => {
                *c = c.saturating_add(1);
                *c
            }
            None => {
                inner.counts.insert(key.to_owned(), 1);
                inner.order.push_back(key.to_owned());
                1
            }
        };
        while inner.counts.len() > self.capacity {
            let Some(oldest) = inner.order.pop_front() else { break };
            inner.counts.remove(&oldest);
        }
        if inner.order.len() > self.capacity * 2 {
            let Inner { counts, order } = &mut *inner;
            order.retain(|k| counts.contains_key(k));
        }
        count
    }

    /// Forgets `key` (the message was settled for good).
    pub fn forget(&self, key: &str) {
        self.lock().counts.remove(key);
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.lock().counts.len()
    }

    /// Whether no key is remembered.
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
    fn fingerprints_separate_parts() {
        assert_eq!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"ab", b"c"]));
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
    }
}
