//! Messages as a transport carries them, written as JSON, for `ferry test`
//! (fixture messages in, the outbound message each binding would send out)
//! and for showing messages to an operator. Each transport builds its own
//! view with its native names (`user_properties`, `application_properties`,
//! `message_attributes`, …); what is shared lives here: the payload, typed
//! values, and the errors a fixture can have.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use ferry_envelope::{Envelope, HeaderValue, Timestamp};
use serde_json::{Map, Value, json};

/// A JSON object under construction.
pub type View = Map<String, Value>;

/// What a receiver makes of a fixture message: an envelope for the route,
/// or a refusal at ingress (poison), named as the receiver's metric names it.
#[derive(Debug)]
pub enum Admitted {
    Envelope(Envelope),
    Refused { reason: String, detail: String },
}

/// Puts the payload into `view`: as `payload` when it is UTF-8 text, else
/// as `payload_base64`.
pub fn put_payload(view: &mut View, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        Ok(text) => view.insert("payload".into(), Value::String(text.to_owned())),
        Err(_) => view.insert("payload_base64".into(), Value::String(STANDARD.encode(payload))),
    };
}

/// Puts named byte values into `view`: the UTF-8 ones as the map `key`
/// (always present), the others base64-encoded as the map `<key>_base64`
/// (only when there are any). What a fixture shows of record headers or
/// stream fields, whose values are bytes.
pub fn put_pairs<'a>(view: &mut View, key: &str, pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>) {
    let (mut text, mut binary) = (View::new(), View::new());
    for (name, value) in pairs {
        match std::str::from_utf8(value) {
            Ok(t) => text.insert(name.to_owned(), Value::String(t.to_owned())),
            Err(_) => binary.insert(name.to_owned(), Value::String(STANDARD.encode(value))),
        };
    }
    view.insert(key.to_owned(), text.into());
    if !binary.is_empty() {
        view.insert(format!("{key}_base64"), binary.into());
    }
}

/// A typed envelope value in JSON: text, numbers and booleans as
/// themselves, a time as `{ "time_ms": … }`, bytes as `{ "base64": … }`.
pub fn header_value(value: &HeaderValue) -> Value {
    match value {
        HeaderValue::Text(s) => Value::String(s.clone()),
        HeaderValue::Integer(n) => json!(n),
        HeaderValue::Float(f) => json!(f),
        HeaderValue::Boolean(b) => json!(b),
        HeaderValue::Time(t) => json!({ "time_ms": t.as_millis() }),
        HeaderValue::Bytes(b) => json!({ "base64": STANDARD.encode(b) }),
    }
}

/// A typed value as header text, for transports whose headers are text
/// (HTTP, NATS, SimpleMQ's mqbridge names): a time as milliseconds since
/// the epoch, bytes as base64, the rest as written.
pub fn text_of(value: &HeaderValue) -> String {
    match value {
        HeaderValue::Text(s) => s.clone(),
        HeaderValue::Integer(n) => n.to_string(),
        HeaderValue::Float(f) => f.to_string(),
        HeaderValue::Boolean(b) => b.to_string(),
        HeaderValue::Time(t) => t.as_millis().to_string(),
        HeaderValue::Bytes(b) => STANDARD.encode(b),
    }
}

/// A typed value as raw bytes, for transports whose header values are
/// bytes (Redis fields, Kafka headers): bytes as they are, the rest as
/// [`text_of`] writes them.
pub fn bytes_of(value: &HeaderValue) -> Bytes {
    match value {
        HeaderValue::Bytes(b) => b.clone(),
        HeaderValue::Text(t) => Bytes::from(t.clone()),
        other => Bytes::from(text_of(other)),
    }
}

/// A value read off the wire as bytes: text when it is UTF-8, else bytes.
pub fn text_or_bytes(value: &[u8]) -> HeaderValue {
    match std::str::from_utf8(value) {
        Ok(text) => HeaderValue::Text(text.to_owned()),
        Err(_) => HeaderValue::Bytes(Bytes::copy_from_slice(value)),
    }
}

/// Adds a header read off a wire where a name may repeat: a text value
/// whose name is there with a text value is joined to it with `", "` (as
/// HTTP joins them); false when a repeat cannot be joined (one of them is
/// bytes), which is left out for the caller to count.
pub fn add_repeated(headers: &mut Vec<(String, HeaderValue)>, name: &str, value: HeaderValue) -> bool {
    match headers.iter_mut().find(|(n, _)| n == name) {
        Some((_, HeaderValue::Text(joined))) if matches!(value, HeaderValue::Text(_)) => {
            joined.push_str(", ");
            joined.push_str(value.as_text().unwrap_or_default());
            true
        }
        Some(_) => false,
        None => {
            headers.push((name.to_owned(), value));
            true
        }
    }
}

/// Bytes as standard base64.
pub fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Bytes in JSON: text when they are UTF-8, else `{ "base64": … }`.
pub fn bytes_value(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => json!({ "base64": STANDARD.encode(bytes) }),
    }
}

/// The value at a dotted path of a view (`user_properties.kind`). Header
/// names contain dots (`x-bridge.tenant-id`): at each level the longest key
/// that fits the path wins.
pub fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = value;
    let mut rest = path;
    while !rest.is_empty() {
        let object = at.as_object()?;
        let key = object
            .keys()
            .filter(|k| rest == k.as_str() || rest.strip_prefix(k.as_str()).is_some_and(|r| r.starts_with('.')))
            .max_by_key(|k| k.len())?;
        at = &object[key];
        rest = rest[key.len()..].trim_start_matches('.');
    }
    Some(at)
}

/// Sets `key` when `value` is there.
pub fn put<T: Into<Value>>(view: &mut View, key: &str, value: Option<T>) {
    if let Some(v) = value {
        view.insert(key.to_owned(), v.into());
    }
}

/// A fixture message's payload: `payload` (text) or `payload_base64`; an
/// empty payload when neither is given.
pub fn payload_of(payload: Option<&str>, payload_base64: Option<&str>) -> Result<Bytes, String> {
    match (payload, payload_base64) {
        (Some(_), Some(_)) => Err("give payload or payload_base64, not both".into()),
        (Some(text), None) => Ok(Bytes::copy_from_slice(text.as_bytes())),
        (None, Some(b64)) => {
            STANDARD.decode(b64.trim()).map(Bytes::from).map_err(|e| format!("payload_base64 is not base64: {e}"))
        }
        (None, None) => Ok(Bytes::new()),
    }
}

/// A typed fixture value from TOML: strings, integers, floats and booleans
/// as themselves, a TOML date-time as a time, `{ base64 = "…" }` as bytes
/// and `{ time_ms = … }` as a time.
pub fn header_of(name: &str, value: &toml_value::Value) -> Result<HeaderValue, String> {
    use toml_value::Value as T;
    Ok(match value {
        T::String(s) => HeaderValue::Text(s.clone()),
        T::Integer(n) => HeaderValue::Integer(*n),
        T::Float(f) => HeaderValue::Float(*f),
        T::Boolean(b) => HeaderValue::Boolean(*b),
        T::Datetime(d) => {
            let ms = rfc3339_millis(&d.to_string()).ok_or_else(|| format!("{name}: {d} is not a full date-time"))?;
            HeaderValue::Time(Timestamp(ms))
        }
        T::Table(t) if t.len() == 1 && t.contains_key("base64") => match &t["base64"] {
            T::String(b64) => HeaderValue::Bytes(
                STANDARD.decode(b64.trim()).map_err(|e| format!("{name}: base64 value is not base64: {e}"))?.into(),
            ),
            _ => return Err(format!("{name}: base64 takes a string")),
        },
        T::Table(t) if t.len() == 1 && t.contains_key("time_ms") => match &t["time_ms"] {
            T::Integer(ms) => HeaderValue::Time(Timestamp(*ms)),
            _ => return Err(format!("{name}: time_ms takes an integer")),
        },
        T::Table(_) | T::Array(_) => {
            return Err(format!(
                "{name}: a value is a string, number, boolean, date-time, {{ base64 = \"…\" }} or {{ time_ms = … }}"
            ));
        }
    })
}

/// Milliseconds since the epoch of an RFC 3339 date-time with an offset
/// (`2026-12-01T10:00:00Z`, `…+01:00`, fractions allowed; a space for the
/// `T` too, as RFC 3339 allows), read by the `time` crate: a month 13, a
/// February 30th or an hour 24 is no date.
pub fn rfc3339_millis(s: &str) -> Option<i64> {
    let mut text = s.to_owned();
    if text.as_bytes().get(10) == Some(&b' ') {
        text.replace_range(10..11, "T");
    }
    let at = time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

/// The TOML value type fixtures are read as (re-exported so transports need
/// no TOML dependency of their own).
pub mod toml_value {
    pub use toml::Value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_become_headers_and_repeats_join_only_as_text() {
        assert_eq!(text_or_bytes(b"temp"), HeaderValue::Text("temp".into()));
        assert_eq!(text_or_bytes(&[0xff]), HeaderValue::Bytes(Bytes::from_static(&[0xff])));
        let mut headers = Vec::new();
        assert!(add_repeated(&mut headers, "tag", text_or_bytes(b"a")));
        assert!(add_repeated(&mut headers, "tag", text_or_bytes(b"b")));
        assert!(!add_repeated(&mut headers, "tag", text_or_bytes(&[0xff])), "a bytes repeat is left out");
        assert!(add_repeated(&mut headers, "raw", text_or_bytes(&[0xff])));
        assert!(!add_repeated(&mut headers, "raw", text_or_bytes(b"c")), "nor joined to bytes");
        assert_eq!(headers[0], ("tag".to_owned(), HeaderValue::Text("a, b".into())));
        assert_eq!(bytes_of(&HeaderValue::Integer(3)).as_ref(), b"3");
        assert_eq!(bytes_of(&HeaderValue::Bytes(Bytes::from_static(&[0xff]))).as_ref(), &[0xff]);
    }

    #[test]
    fn date_times_become_epoch_millis() {
        assert_eq!(rfc3339_millis("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_millis("2026-12-01T10:00:00.250Z"), Some(1_796_119_200_250));
        assert_eq!(rfc3339_millis("2026-12-01T11:00:00+01:00"), Some(1_796_119_200_000));
        assert_eq!(rfc3339_millis("2026-12-01"), None);
        assert_eq!(rfc3339_millis("2026-12-01 10:00:00Z"), Some(1_796_119_200_000));
        assert_eq!(rfc3339_millis("1969-12-31T23:59:59.999Z"), Some(-1));
        // What the hand-written reader took for dates.
        assert_eq!(rfc3339_millis("2026-13-01T10:00:00Z"), None, "month 13");
        assert_eq!(rfc3339_millis("2026-02-30T10:00:00Z"), None, "February 30th");
        assert_eq!(rfc3339_millis("2026-12-01T24:00:00Z"), None, "hour 24");
        assert_eq!(rfc3339_millis("2026-12-01T10:00:00+1:00"), None, "a one-digit offset");
    }

    #[test]
    fn lookup_takes_the_longest_key_so_dotted_header_names_work() {
        let v = json!({ "user_properties": { "x-bridge.tenant-id": "acme", "x": { "y": 1 } } });
        assert_eq!(lookup(&v, "user_properties.x-bridge.tenant-id"), Some(&json!("acme")));
        assert_eq!(lookup(&v, "user_properties.x.y"), Some(&json!(1)));
        assert_eq!(lookup(&v, "user_properties.secret"), None);
    }

    #[test]
    fn payloads_are_text_or_base64() {
        let mut v = View::new();
        put_payload(&mut v, b"hi");
        assert_eq!(v["payload"], "hi");
        let mut v = View::new();
        put_payload(&mut v, &[0xff, 0]);
        assert_eq!(v["payload_base64"], "/wA=");
        assert_eq!(payload_of(None, Some("/wA=")).expect("b64").as_ref(), &[0xff, 0]);
        assert!(payload_of(Some("a"), Some("YQ==")).is_err());
    }

    #[test]
    fn fixture_values_keep_their_types() {
        let v: toml::Table = toml::from_str(
            "s = 'x'\nn = 3\nf = 1.5\nb = true\nt = 1970-01-01T00:00:01Z\nraw = { base64 = 'AQI=' }\nbad = [1]",
        )
        .expect("toml");
        assert_eq!(header_of("s", &v["s"]), Ok(HeaderValue::Text("x".into())));
        assert_eq!(header_of("n", &v["n"]), Ok(HeaderValue::Integer(3)));
        assert_eq!(header_of("f", &v["f"]), Ok(HeaderValue::Float(1.5)));
        assert_eq!(header_of("b", &v["b"]), Ok(HeaderValue::Boolean(true)));
        assert_eq!(header_of("t", &v["t"]), Ok(HeaderValue::Time(Timestamp(1000))));
        assert_eq!(header_of("raw", &v["raw"]), Ok(HeaderValue::Bytes(Bytes::from_static(&[1, 2]))));
        assert!(header_of("bad", &v["bad"]).is_err());
    }
}
