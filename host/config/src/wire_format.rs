//! `wire_format`, the key every receiver and sender has.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How payloads are written on a transport (`wire_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WireFormat {
    /// The payload is the message body; headers travel as the transport's
    /// own headers.
    #[default]
    None,
    /// The JSON wire format: `{"headers": {...}, "body": "...",
    /// "body_encoding": "base64"?}`. What is not that JSON is read as a
    /// plain body with no headers.
    Json,
}
