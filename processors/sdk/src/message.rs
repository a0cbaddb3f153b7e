//! The message a plugin handles.
//!
//! In a component it is the host's message: nothing is copied into the
//! plugin until a method asks for it. Under `cargo test` (any target but
//! wasm32) it is an in-memory message built with
//! [`testing::message`](crate::testing::message), which behaves as the
//! host's does, including the refusal of reserved headers.

use serde::de::DeserializeOwned;

use crate::HeaderValue;

#[cfg(target_arch = "wasm32")]
type Inner = crate::bindings::ferry::plugin::types::Message;
#[cfg(not(target_arch = "wasm32"))]
type Inner = crate::testing::Fake;

/// The message being processed. Its methods read and change it in place.
#[cfg_attr(target_arch = "wasm32", derive(ref_cast::RefCast))]
#[repr(transparent)]
pub struct Message(pub(crate) Inner);

impl Message {
    /// The message identity (stable across redeliveries when the source
    /// transport provides one).
    pub fn id(&self) -> String {
        self.0.id()
    }

    /// The logical event subject, if any. Never a topic or queue name.
    pub fn subject(&self) -> Option<String> {
        self.0.subject()
    }

    /// Replaces (or clears) the logical subject.
    pub fn set_subject(&self, subject: Option<&str>) {
        self.0.set_subject(subject)
    }

    /// The value of one header, if present.
    pub fn header(&self, name: &str) -> Option<HeaderValue> {
        self.0.header(name)
    }

    /// A header's value when it is text (other kinds: `None`).
    pub fn text_header(&self, name: &str) -> Option<String> {
        match self.0.header(name) {
            Some(HeaderValue::Text(s)) => Some(s),
            _ => None,
        }
    }

    /// A header's value written as text, whatever its kind but bytes (see
    /// [`HeaderValue::to_text`]).
    pub fn header_text(&self, name: &str) -> Option<String> {
        self.0.header(name).and_then(|v| v.to_text())
    }

    /// The names of every header, sorted.
    pub fn header_names(&self) -> Vec<String> {
        self.0.header_names()
    }

    /// Sets a header. Names starting with `x-bridge.` are reserved to the
    /// host: setting one is ignored (and logged by the host) unless the
    /// route grants it to this plugin.
    pub fn set_header(&self, name: &str, value: impl Into<HeaderValue>) {
        self.0.set_header(name, &value.into())
    }

    /// Removes a header. Reserved `x-bridge.` headers cannot be removed.
    pub fn remove_header(&self, name: &str) {
        self.0.remove_header(name)
    }

    /// The payload size in bytes, without copying it.
    pub fn payload_len(&self) -> u64 {
        self.0.payload_len()
    }

    /// A copy of the payload.
    pub fn payload(&self) -> Vec<u8> {
        self.0.payload()
    }

    /// The payload parsed as JSON into `T` (a `serde_json::Value` for any
    /// JSON).
    pub fn payload_json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.0.payload())
    }

    /// Replaces the payload.
    pub fn set_payload(&self, payload: &[u8]) {
        self.0.set_payload(payload)
    }

    /// When the message was created: milliseconds since the Unix epoch.
    pub fn created_at(&self) -> i64 {
        self.0.created_at()
    }

    /// When the message expires, if it has an expiry.
    pub fn expires_at(&self) -> Option<i64> {
        self.0.expires_at()
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message").field("id", &self.id()).field("subject", &self.subject()).finish_non_exhaustive()
    }
}
