//! A small keyed store for state ferry keeps of its own beyond the outbox
//! and the dead letters: the SQS endpoint's topics, and its queues on the
//! embedded store (on a shared store they are tables of their own).
//!
//! Keys live in spaces (`sqs.queue`, `sqs.message`, …); a [`RecordChange`]
//! puts and deletes any number of keys in one durable commit, so a change
//! that spans records (a message moved to a dead-letter queue) is never
//! half on disk.

use async_trait::async_trait;

use crate::outbox::StoreError;

/// Puts and deletes applied together.
#[derive(Debug, Default, Clone)]
pub struct RecordChange {
    /// `(space, key, value)`; a put replaces what the key held.
    pub puts: Vec<(String, String, Vec<u8>)>,
    /// `(space, key)`; deleting a key that is not there is no error.
    pub deletes: Vec<(String, String)>,
}

impl RecordChange {
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty()
    }
    pub fn put(&mut self, space: &str, key: impl Into<String>, value: Vec<u8>) {
        self.puts.push((space.to_owned(), key.into(), value));
    }
    pub fn delete(&mut self, space: &str, key: impl Into<String>) {
        self.deletes.push((space.to_owned(), key.into()));
    }
}

/// The port: durable commits of [`RecordChange`]s, and reading a space back.
#[async_trait]
pub trait RecordStore: Send + Sync {
    /// Applies the change; returns once it is on disk.
    async fn commit(&self, change: RecordChange) -> Result<(), StoreError>;
    /// Every `(key, value)` of a space, in key order.
    async fn load(&self, space: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
}
