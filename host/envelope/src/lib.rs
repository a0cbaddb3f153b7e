//! The envelope: the one shape every message takes inside ferry.
//!
//! A receiving transport turns its native message into an [`Envelope`]; a
//! sending transport turns an envelope back into its own message. This crate
//! holds only plain data types so the host and the guest SDK share them.
//!
//! - [`Envelope`]: identity, subject, payload, typed headers and times.
//! - [`HeaderValue`] / [`Headers`]: the typed header map.
//! - [`Timestamp`]: milliseconds since the Unix epoch.
//! - [`names`]: the reserved header names every route knows about.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub mod kv;
pub mod names;

/// A point in time, in milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// Converts a `SystemTime`; times before 1970 become negative.
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Self(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Self(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// This time plus a duration, saturating.
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// How long from `now` until this time; zero when it has passed.
    pub fn remaining_from(self, now: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(now.0)).unwrap_or(0))
    }
}

/// A typed header value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum HeaderValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Time(Timestamp),
    Bytes(Bytes),
}

impl HeaderValue {
    /// The text, when this is a text value.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            HeaderValue::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The kind of value, for messages and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            HeaderValue::Text(_) => "text",
            HeaderValue::Integer(_) => "integer",
            HeaderValue::Float(_) => "float",
            HeaderValue::Boolean(_) => "boolean",
            HeaderValue::Time(_) => "time",
            HeaderValue::Bytes(_) => "bytes",
        }
    }
}

impl From<&str> for HeaderValue {
    fn from(s: &str) -> Self {
        HeaderValue::Text(s.to_owned())
    }
}

impl From<String> for HeaderValue {
    fn from(s: String) -> Self {
        HeaderValue::Text(s)
    }
}

/// Header map: names are case-sensitive and kept sorted.
///
/// Copy-on-write: cloning an envelope (a retry copy, one copy per binding,
/// the backup kept across a plugin call) shares the map, and the first
/// change through `&mut` (`DerefMut`) copies it only if it is still
/// shared. Reads go through `Deref` to the `BTreeMap`.
#[derive(Debug, Clone, PartialEq)]
pub struct Headers(Arc<BTreeMap<String, HeaderValue>>);

impl Default for Headers {
    /// An empty map that allocates nothing: every empty map shares one, and
    /// the first insert gives the envelope its own.
    fn default() -> Self {
        static EMPTY: std::sync::LazyLock<Arc<BTreeMap<String, HeaderValue>>> =
            std::sync::LazyLock::new(|| Arc::new(BTreeMap::new()));
        Self(EMPTY.clone())
    }
}

impl Headers {
    pub fn new() -> Self {
        Self::default()
    }

    /// The map itself, copied only if another envelope shares it.
    pub fn into_map(self) -> BTreeMap<String, HeaderValue> {
        Arc::unwrap_or_clone(self.0)
    }
}

impl Deref for Headers {
    type Target = BTreeMap<String, HeaderValue>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Headers {
    fn deref_mut(&mut self) -> &mut Self::Target {
        Arc::make_mut(&mut self.0)
    }
}

impl From<BTreeMap<String, HeaderValue>> for Headers {
    fn from(map: BTreeMap<String, HeaderValue>) -> Self {
        Self(Arc::new(map))
    }
}

impl FromIterator<(String, HeaderValue)> for Headers {
    fn from_iter<I: IntoIterator<Item = (String, HeaderValue)>>(iter: I) -> Self {
        Self(Arc::new(iter.into_iter().collect()))
    }
}

impl Extend<(String, HeaderValue)> for Headers {
    fn extend<I: IntoIterator<Item = (String, HeaderValue)>>(&mut self, iter: I) {
        Arc::make_mut(&mut self.0).extend(iter);
    }
}

impl IntoIterator for Headers {
    type Item = (String, HeaderValue);
    type IntoIter = std::collections::btree_map::IntoIter<String, HeaderValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_map().into_iter()
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a String, &'a HeaderValue);
    type IntoIter = std::collections::btree_map::Iter<'a, String, HeaderValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Serialize for Headers {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(Self::from)
    }
}

/// The normalized message unit flowing through a route.
///
/// `Clone` copies the header map but shares the payload bytes, which are
/// immutable: a transform installs a new payload with [`Envelope::set_payload`]
/// instead of changing the shared one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Message identity, used for deduplication and retry counting.
    pub id: String,
    /// Logical event subject (e.g. `order.created`); never a topic or queue.
    pub subject: Option<String>,
    payload: Bytes,
    /// Typed metadata.
    pub headers: Headers,
    /// When the message was created (send time when the transport has one).
    pub created_at: Timestamp,
    /// After this time the message is expired (dropped or dead-lettered).
    pub expires_at: Option<Timestamp>,
    /// What the receiving adapter derived from the wire itself (the names
    /// of [`names::ADAPTER_DERIVED`]), kept apart from the headers a
    /// publisher supplied: the route installs these after it stripped the
    /// publisher's reserved headers, so no publisher can forge or override
    /// them. Only a receiver writes here ([`Envelope::derive_header`]); the
    /// route empties it. Never stored or sent.
    #[serde(skip)]
    derived: Headers,
}

impl Envelope {
    /// A new envelope created now, with no subject, headers or expiry.
    pub fn new(id: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Self {
            id: id.into(),
            subject: None,
            payload: payload.into(),
            headers: Headers::new(),
            created_at: Timestamp::now(),
            expires_at: None,
            derived: Headers::new(),
        }
    }

    /// A placeholder with no identity, payload or headers, created at the
    /// epoch; it allocates nothing.
    pub fn empty() -> Self {
        Self {
            id: String::new(),
            subject: None,
            payload: Bytes::new(),
            headers: Headers::new(),
            created_at: Timestamp(0),
            expires_at: None,
            derived: Headers::new(),
        }
    }

    /// The payload bytes (shared, immutable).
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Installs a new payload.
    pub fn set_payload(&mut self, payload: impl Into<Bytes>) {
        self.payload = payload.into();
    }

    /// A header's text value, when present and text.
    pub fn text_header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(HeaderValue::as_text)
    }

    /// Sets a header.
    pub fn set_header(&mut self, name: impl Into<String>, value: impl Into<HeaderValue>) {
        self.headers.insert(name.into(), value.into());
    }

    /// Records a header the receiving adapter derived from the wire itself
    /// (a native correlation id, the content type, that the identity was
    /// minted). It reaches the headers when the route applies its ingress
    /// rules, over any header of that name a publisher sent.
    pub fn derive_header(&mut self, name: &'static str, value: impl Into<HeaderValue>) {
        self.derived.insert(name.to_owned(), value.into());
    }

    /// A header the adapter derived and the route has not installed yet.
    pub fn derived_header(&self, name: &str) -> Option<&HeaderValue> {
        self.derived.get(name)
    }

    /// Drops a derived header that no longer describes the message (the
    /// content type of a wire-format document's wrapper once unpacked).
    pub fn forget_derived(&mut self, name: &str) {
        if self.derived.contains_key(name) {
            self.derived.remove(name);
        }
    }

    /// Takes the derived headers out (the route installs them once).
    pub fn take_derived(&mut self) -> Headers {
        std::mem::take(&mut self.derived)
    }

    /// Whether the envelope carries an expiry.
    pub fn has_expiry(&self) -> bool {
        self.expires_at.is_some()
    }

    /// Whether the envelope's expiry is at or before `now`.
    pub fn is_expired_at(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|e| e <= now)
    }

    /// Time left before expiry, from `now`; `None` without an expiry.
    pub fn remaining_ttl(&self, now: Timestamp) -> Option<Duration> {
        self.expires_at.map(|e| e.remaining_from(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_shares_payload_but_not_headers() {
        let mut a = Envelope::new("1", vec![1u8; 1024]);
        a.set_header("k", "v");
        let mut b = a.clone();
        assert_eq!(a.payload().as_ptr(), b.payload().as_ptr());
        b.set_header("k", "changed");
        b.set_payload(vec![2u8]);
        assert_eq!(a.text_header("k"), Some("v"));
        assert_eq!(a.payload().len(), 1024);
    }

    #[test]
    fn clones_share_the_header_map_until_one_changes() {
        let mut a = Envelope::new("1", Bytes::new());
        a.set_header("k", "v");
        let mut b = a.clone();
        let map = |e: &Envelope| std::ptr::from_ref::<BTreeMap<String, HeaderValue>>(&e.headers);
        assert_eq!(map(&a), map(&b), "a clone does not copy the headers");
        assert_eq!(b.headers.get("k"), Some(&HeaderValue::from("v")));
        b.headers.remove("k");
        assert_ne!(map(&a), map(&b), "a change copies them");
        assert_eq!(a.text_header("k"), Some("v"));
        assert!(b.headers.is_empty());
        // The only holder changes the map in place.
        let before = map(&b);
        b.set_header("x", "y");
        assert_eq!(before, map(&b));
        let json = serde_json::to_string(&a.headers).expect("serialize");
        assert_eq!(json, r#"{"k":{"type":"text","value":"v"}}"#);
        assert_eq!(serde_json::from_str::<Headers>(&json).expect("deserialize"), a.headers);
    }

    #[test]
    fn expiry_is_inclusive_and_remaining_saturates() {
        let mut e = Envelope::new("1", Bytes::new());
        assert!(!e.is_expired_at(Timestamp(10)));
        e.expires_at = Some(Timestamp(10));
        assert!(e.is_expired_at(Timestamp(10)));
        assert!(!e.is_expired_at(Timestamp(9)));
        assert_eq!(e.remaining_ttl(Timestamp(20)), Some(Duration::ZERO));
        assert_eq!(e.remaining_ttl(Timestamp(4)), Some(Duration::from_millis(6)));
    }

    #[test]
    fn header_values_serialize_with_their_type() {
        let v = HeaderValue::Time(Timestamp(5));
        let s = serde_json::to_string(&v).unwrap_or_default();
        assert_eq!(s, r#"{"type":"time","value":5}"#);
    }
}
