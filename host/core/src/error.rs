//! Failure classification. A transport decides once, where it first
//! understands an error, whether trying again can help.

use crate::failure::{Failure, FailureReason};

/// Whether a failure can be cured by trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Broker down, timeout, throttling: retry after a backoff.
    Transient,
    /// A transient failure before anything was attempted (the client is not
    /// connected): retry, but it does not count as a delivery attempt.
    Unavailable,
    /// The message itself can never be delivered: dead-letter or drop it.
    Permanent,
}

/// An error from a transport operation, already classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct TransportError {
    pub class: ErrorClass,
    pub reason: String,
    /// For a permanent failure whose cause has a name of its own (an
    /// address that cannot be filled is `unroutable`); `send_rejected`
    /// otherwise.
    pub failure: Option<FailureReason>,
    /// For a transient failure: the target asked not to be tried again
    /// before this (an HTTP `Retry-After`). The retry waits at least this
    /// long, however short the route's backoff.
    pub retry_after: Option<std::time::Duration>,
}

impl TransportError {
    pub fn transient(reason: impl Into<String>) -> Self {
        Self { class: ErrorClass::Transient, reason: reason.into(), failure: None, retry_after: None }
    }

    /// The client has no connection: nothing was sent.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self { class: ErrorClass::Unavailable, reason: reason.into(), failure: None, retry_after: None }
    }

    pub fn permanent(reason: impl Into<String>) -> Self {
        Self { class: ErrorClass::Permanent, reason: reason.into(), failure: None, retry_after: None }
    }

    /// The message names a destination that cannot be made (a missing
    /// header in an address template, a topic with a wildcard): permanent.
    pub fn unroutable(reason: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Permanent,
            reason: reason.into(),
            failure: Some(FailureReason::Unroutable),
            retry_after: None,
        }
    }

    /// The same failure, to be retried no sooner than `after`.
    pub fn retry_after(mut self, after: std::time::Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The typed reason of a permanent failure.
    pub fn failure(&self) -> Failure {
        Failure::new(self.failure.unwrap_or(FailureReason::SendRejected), self.reason.clone())
    }

    /// Whether trying again can help (transient or unavailable).
    pub fn is_transient(&self) -> bool {
        self.class != ErrorClass::Permanent
    }

    /// Whether nothing was attempted because the client is not connected.
    pub fn is_unavailable(&self) -> bool {
        self.class == ErrorClass::Unavailable
    }
}
