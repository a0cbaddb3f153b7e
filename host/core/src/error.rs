//! Failure classification. A transport decides once, where it first
//! understands an error, whether trying again can help.

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
}

impl TransportError {
    pub fn transient(reason: impl Into<String>) -> Self {
        Self { class: ErrorClass::Transient, reason: reason.into() }
    }

    /// The client has no connection: nothing was sent.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self { class: ErrorClass::Unavailable, reason: reason.into() }
    }

    pub fn permanent(reason: impl Into<String>) -> Self {
        Self { class: ErrorClass::Permanent, reason: reason.into() }
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
