//! What `ferry validate --explain` asks of a transport: a probe message in
//! its receiver's fixture form, carrying every kind of metadata the
//! transport has, each with a value of its own, and where to look for each
//! in what a sender would send. The report (in the daemon) runs the probe
//! through the real mappers; a transport only says what it can carry.

use crate::wire::toml_value::Value;

/// Extra text headers a probe carries, to see how many a target keeps.
pub const EXTRA: usize = 12;
pub const ID: &str = "probe-id-7f3a";
pub const SUBJECT: &str = "probe.subject.7f3a";
pub const CORRELATION: &str = "probe-corr-7f3a";
pub const CONTENT_TYPE: &str = "application/x-probe-7f3a";
pub const REPLY_TO: &str = "probe/reply/7f3a";
pub const TEXT_VALUE: &str = "probe-text-7f3a";
/// The names of the typed probe headers (a text, an integer, a float, a
/// boolean, a time and a bytes one).
pub const TYPED: [&str; 6] = ["probe-text", "probe-int", "probe-float", "probe-bool", "probe-time", "probe-bytes"];

/// How to find one feature of the probe in the outbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Find {
    /// A string value containing this marker.
    Value(&'static str),
    /// A key of this name (a typed header); the value shown.
    Name(&'static str),
    /// A key whose name says expiry or time to live.
    Expiry,
    /// How many keys named `probe-extra-NN` arrive.
    Extras,
}

/// One thing a source carries, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub what: &'static str,
    pub find: Find,
}

pub const fn feature(what: &'static str, find: Find) -> Feature {
    Feature { what, find }
}

/// A receiver's probe: the fixture message, its features, and how many of
/// the extra and typed headers it admits (what "all" means for a target).
#[derive(Debug, Clone)]
pub struct Probe {
    pub input: Value,
    pub features: Vec<Feature>,
    pub extras_in: usize,
}

/// A TOML table of `pairs`.
pub fn table(pairs: &[(String, Value)]) -> Value {
    Value::Table(pairs.iter().cloned().collect())
}

/// A TOML string.
pub fn text(v: &str) -> Value {
    Value::String(v.to_owned())
}

/// The extra text headers, `probe-extra-01` to `probe-extra-12`.
pub fn extras() -> Vec<(String, String)> {
    (1..=EXTRA).map(|i| (format!("probe-extra-{i:02}"), format!("x{i}"))).collect()
}

/// The typed headers in fixture form, then the extra ones.
pub fn typed_headers() -> Vec<(String, Value)> {
    let mut typed: Vec<(String, Value)> = vec![
        ("probe-text".into(), text(TEXT_VALUE)),
        ("probe-int".into(), Value::Integer(4242)),
        ("probe-float".into(), Value::Float(42.5)),
        ("probe-bool".into(), Value::Boolean(true)),
        ("probe-time".into(), table(&[("time_ms".into(), Value::Integer(1_700_000_000_123))])),
        ("probe-bytes".into(), table(&[("base64".into(), text("AP8Q"))])),
    ];
    typed.extend(extras().into_iter().map(|(k, v)| (k, text(&v))));
    typed
}

/// The features of the typed headers.
pub fn typed_features() -> Vec<Feature> {
    vec![
        feature("text header", Find::Name("probe-text")),
        feature("integer header", Find::Name("probe-int")),
        feature("float header", Find::Name("probe-float")),
        feature("boolean header", Find::Name("probe-bool")),
        feature("time header", Find::Name("probe-time")),
        feature("bytes header", Find::Name("probe-bytes")),
    ]
}
