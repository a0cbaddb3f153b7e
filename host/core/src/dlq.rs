//! The dead-letter queue: where messages go that cannot be delivered.
//!
//! [`DeadLetterStore`] is the port; the daemon's store (`ferry-store`, on
//! redb) keeps the entries durably and the `ferry dlq` commands read,
//! replay and purge them.

use async_trait::async_trait;
use ferry_envelope::{Envelope, Timestamp};
use serde::{Deserialize, Serialize};

use crate::FailureReason;

/// One dead-lettered message and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Route that gave up on the message.
    pub route: String,
    /// Binding the send was for, when the failure was at a binding.
    pub binding: Option<String>,
    /// Outbound address, kept apart from the envelope's subject.
    pub address: Option<String>,
    /// Why, as metrics and `ferry dlq list` name it.
    pub reason: FailureReason,
    /// Human-readable detail.
    pub detail: String,
    /// Attempts made before giving up.
    pub attempts: u32,
    pub first_failure: Timestamp,
    pub last_failure: Timestamp,
    pub envelope: Envelope,
}

/// Durable storage for dead letters.
#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// Stores the entry durably; only an `Ok` lets the route acknowledge the
    /// source message.
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()>;
}
