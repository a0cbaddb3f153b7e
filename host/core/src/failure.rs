//! Why a message failed for good: one typed reason that the DLQ entry, the
//! metrics label and the log line all read. Nothing parses a reason back
//! out of a message string.

use serde::{Deserialize, Serialize};

/// The reason a message (or one binding's copy of it) failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// Past its `expires-at` before it could be delivered.
    Expired,
    /// A plugin trapped (panic, out of memory, host task failure).
    PluginTrap,
    /// A plugin ran past `plugins.call_timeout_ms`.
    PluginDeadline,
    /// The plugin could not be instantiated.
    PluginUnavailable,
    /// A processor refused the message.
    #[serde(alias = "rejected")]
    PluginRejected,
    /// A binding's header mapper refused the message.
    HeaderMapper,
    /// The binding's address template could not be filled from the message.
    Unroutable,
    /// The target refused the message for good.
    SendRejected,
    /// Transient failures outlasted `max_replay_attempts`.
    ReplayExhausted,
    /// The binding's target stayed unavailable for the route's
    /// `max_outage_secs`.
    TargetUnavailable,
    /// A generated id at a redelivering source under `unstable_identity = "fail"`.
    UnstableIdentity,
    /// SQS reported a body or attribute digest that does not match what
    /// arrived, on every receive up to `max_replay_attempts`.
    Md5Mismatch,
    /// More than `max_hops` bridges forwarded the message.
    LoopDetected,
    /// A reason this ferry does not know (a dead letter written by a newer one).
    #[serde(other)]
    Other,
}

impl FailureReason {
    /// The label in metrics, DLQ listings and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::PluginTrap => "plugin_trap",
            Self::PluginDeadline => "plugin_deadline",
            Self::PluginUnavailable => "plugin_unavailable",
            Self::PluginRejected => "plugin_rejected",
            Self::HeaderMapper => "header_mapper",
            Self::Unroutable => "unroutable",
            Self::SendRejected => "send_rejected",
            Self::ReplayExhausted => "replay_exhausted",
            Self::TargetUnavailable => "target_unavailable",
            Self::UnstableIdentity => "unstable_identity",
            Self::Md5Mismatch => "md5_mismatch",
            Self::LoopDetected => "loop_detected",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A failure for good: the typed reason and what happened, for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: FailureReason,
    pub detail: String,
}

impl Failure {
    pub fn new(reason: FailureReason, detail: impl Into<String>) -> Self {
        Self { reason, detail: detail.into() }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_stored_as_their_labels_and_unknown_ones_still_load() {
        let json = serde_json::to_string(&FailureReason::Md5Mismatch).expect("serde");
        assert_eq!(json, "\"md5_mismatch\"");
        assert_eq!(
            serde_json::from_str::<FailureReason>("\"loop_detected\"").expect("serde"),
            FailureReason::LoopDetected
        );
        assert_eq!(serde_json::from_str::<FailureReason>("\"from_the_future\"").expect("serde"), FailureReason::Other);
        assert_eq!(FailureReason::PluginDeadline.to_string(), "plugin_deadline");
    }
}
