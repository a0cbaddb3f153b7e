//! A native test double of the host: build messages, start a plugin from a
//! JSON config and run its logic under plain `cargo test`, with no
//! WebAssembly and no daemon.
//!
//! ```
//! use ferry_plugin_sdk::{Failure, Message, NoConfig, Plugin, Processor, Verdict, kv, testing};
//!
//! /// Counts messages per `kind` in the host's key-value store.
//! struct Counter;
//!
//! impl Plugin for Counter {
//!     type Config = NoConfig;
//!     fn init(_: NoConfig) -> Result<Self, String> {
//!         Ok(Counter)
//!     }
//! }
//!
//! impl Processor for Counter {
//!     fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
//!         let kind = msg.header_text("kind").unwrap_or_default();
//!         kv::increment(&kind, 1).map_err(Failure::Reject)?;
//!         Ok(Verdict::Pass)
//!     }
//! }
//!
//! // In a `#[test]`:
//! let counter = testing::plugin::<Counter>(serde_json::json!({})).unwrap();
//! for _ in 0..2 {
//!     assert_eq!(counter.process(&testing::message().header("kind", "temp").build()), Ok(Verdict::Pass));
//! }
//! assert_eq!(kv::get("temp"), Some(2i64.to_le_bytes().to_vec()));
//! assert!(testing::plugin::<Counter>(serde_json::json!({ "colour": 1 })).is_err());
//! ```
//!
//! What the double does as the daemon does:
//! - the config goes through the same decoding as in the component, so a
//!   bad key fails here with the text `ferry validate` would print;
//! - setting or removing a reserved `x-bridge.*` header is ignored unless
//!   the message was built with [`MessageBuilder::grant`] for it (as a
//!   route's `grants` table does), and [`refused_reserved`] counts the
//!   attempts;
//! - [`kv`](crate::kv) keeps its keys in this test's thread with the host's
//!   limits and errors; [`log`](crate::log) lines are kept for [`logs`];
//!   [`now`](crate::now) reads the clock [`set_now`] sets (the system
//!   clock until then).
//!
//! Each test runs on its own thread, so tests never see each other's store,
//! log or clock.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use ferry_envelope::kv::Space;
use ferry_envelope::names;

use crate::bindings::ferry::plugin::host::Level;
use crate::{HeaderValue, Message, Plugin};

/// Starts a plugin from its config as JSON, decoded exactly as the
/// component decodes the route's `config` table.
pub fn plugin<P: Plugin>(config: serde_json::Value) -> Result<P, String> {
    crate::start::<P>(&config.to_string())
}

/// A new message: id `test-1`, no subject, headers or payload, created now.
pub fn message() -> MessageBuilder {
    MessageBuilder(State {
        id: "test-1".to_owned(),
        subject: None,
        headers: BTreeMap::new(),
        payload: Vec::new(),
        created_at: crate::now(),
        expires_at: None,
        granted: Vec::new(),
        refused_reserved: 0,
    })
}

/// Builds a test [`Message`].
pub struct MessageBuilder(State);

impl MessageBuilder {
    pub fn id(mut self, id: &str) -> Self {
        self.0.id = id.to_owned();
        self
    }

    pub fn subject(mut self, subject: &str) -> Self {
        self.0.subject = Some(subject.to_owned());
        self
    }

    /// Any header, reserved ones included (as a transport would set them).
    pub fn header(mut self, name: &str, value: impl Into<HeaderValue>) -> Self {
        self.0.headers.insert(name.to_owned(), value.into());
        self
    }

    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.0.payload = payload.into();
        self
    }

    /// The payload as this JSON document.
    pub fn json(mut self, document: &serde_json::Value) -> Self {
        self.0.payload = document.to_string().into_bytes();
        self
    }

    pub fn created_at(mut self, ms: i64) -> Self {
        self.0.created_at = ms;
        self
    }

    pub fn expires_at(mut self, ms: i64) -> Self {
        self.0.expires_at = Some(ms);
        self
    }

    /// Lets the plugin set this reserved header, as `grants = { tenant_id
    /// = true }` lets it set `x-bridge.tenant-id`.
    pub fn grant(mut self, reserved_header: &str) -> Self {
        self.0.granted.push(reserved_header.to_owned());
        self
    }

    pub fn build(self) -> Message {
        Message(Fake(RefCell::new(self.0)))
    }
}

/// How many times the plugin tried to set or remove a reserved header it
/// may not (the host ignores each and counts it in
/// `ferry_plugin_reserved_header_refused_total`).
pub fn refused_reserved(msg: &Message) -> u32 {
    msg.0.0.borrow().refused_reserved
}

/// Every header of the message, for assertions.
pub fn headers(msg: &Message) -> BTreeMap<String, HeaderValue> {
    msg.0.0.borrow().headers.clone()
}

/// Sets the clock [`now`](crate::now) reads, in milliseconds since the
/// Unix epoch.
pub fn set_now(ms: i64) {
    CLOCK.with(|c| c.set(Some(ms)));
}

/// Moves the clock on by `ms` (from the system time if it was never set).
pub fn advance(ms: i64) {
    set_now(crate::now() + ms);
}

/// What the sender last told with
/// [`transport::unavailable`](crate::transport::unavailable), taken (the
/// host clears it before each `send`).
pub fn target_unavailable() -> Option<String> {
    UNAVAILABLE.with(|u| u.borrow_mut().take())
}

/// The lines the plugin logged since the last call, oldest first.
pub fn logs() -> Vec<(Level, String)> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

struct State {
    id: String,
    subject: Option<String>,
    headers: BTreeMap<String, HeaderValue>,
    payload: Vec<u8>,
    created_at: i64,
    expires_at: Option<i64>,
    granted: Vec<String>,
    refused_reserved: u32,
}

/// The in-memory message behind [`Message`] in native builds. Its methods
/// have the signatures of the host resource's.
pub struct Fake(RefCell<State>);

impl Fake {
    pub(crate) fn id(&self) -> String {
        self.0.borrow().id.clone()
    }

    pub(crate) fn subject(&self) -> Option<String> {
        self.0.borrow().subject.clone()
    }

    pub(crate) fn set_subject(&self, subject: Option<&str>) {
        self.0.borrow_mut().subject = subject.map(str::to_owned);
    }

    pub(crate) fn header(&self, name: &str) -> Option<HeaderValue> {
        self.0.borrow().headers.get(name).cloned()
    }

    pub(crate) fn header_names(&self) -> Vec<String> {
        self.0.borrow().headers.keys().cloned().collect()
    }

    pub(crate) fn set_header(&self, name: &str, value: &HeaderValue) {
        let mut s = self.0.borrow_mut();
        if names::is_reserved(name) && !s.granted.iter().any(|g| g == name) {
            s.refused_reserved += 1;
        } else {
            s.headers.insert(name.to_owned(), value.clone());
        }
    }

    pub(crate) fn remove_header(&self, name: &str) {
        let mut s = self.0.borrow_mut();
        if names::is_reserved(name) {
            s.refused_reserved += 1;
        } else {
            s.headers.remove(name);
        }
    }

    pub(crate) fn payload_len(&self) -> u64 {
        self.0.borrow().payload.len() as u64
    }

    pub(crate) fn payload(&self) -> Vec<u8> {
        self.0.borrow().payload.clone()
    }

    pub(crate) fn set_payload(&self, payload: &[u8]) {
        self.0.borrow_mut().payload = payload.to_vec();
    }

    pub(crate) fn created_at(&self) -> i64 {
        self.0.borrow().created_at
    }

    pub(crate) fn expires_at(&self) -> Option<i64> {
        self.0.borrow().expires_at
    }
}

thread_local! {
    static CLOCK: Cell<Option<i64>> = const { Cell::new(None) };
    static LOG: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
    static UNAVAILABLE: RefCell<Option<String>> = const { RefCell::new(None) };
    static KV: RefCell<Space> = RefCell::new(Space::default());
}

/// The `host` interface, in this thread.
pub(crate) mod host {
    use super::*;

    pub fn log(level: Level, message: &str) {
        LOG.with(|l| l.borrow_mut().push((level, message.to_owned())));
    }

    pub fn target_unavailable(reason: &str) {
        UNAVAILABLE.with(|u| *u.borrow_mut() = Some(reason.to_owned()));
    }

    pub fn now() -> i64 {
        CLOCK.with(Cell::get).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        })
    }
}

/// The `kv` interface, in this thread, with the host's limits.
pub(crate) mod kv {
    use super::*;

    pub fn get(key: &str) -> Option<Vec<u8>> {
        KV.with(|s| s.borrow().get(key))
    }

    pub fn set(key: &str, value: &[u8]) -> Result<(), String> {
        KV.with(|s| s.borrow_mut().set(key, value.to_vec()))
    }

    pub fn delete(key: &str) {
        KV.with(|s| s.borrow_mut().delete(key))
    }

    pub fn compare_and_swap(key: &str, expected: Option<&[u8]>, value: Option<&[u8]>) -> Result<bool, String> {
        KV.with(|s| s.borrow_mut().compare_and_swap(key, expected, value.map(<[u8]>::to_vec)))
    }

    pub fn increment(key: &str, delta: i64) -> Result<i64, String> {
        KV.with(|s| s.borrow_mut().increment(key, delta))
    }

    pub fn keys(prefix: &str) -> Vec<String> {
        KV.with(|s| s.borrow().keys(prefix))
    }
}
