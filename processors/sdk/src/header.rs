//! Header values: every conversion a plugin needs, in one place.

use serde_json::Value;

use crate::HeaderValue;

impl HeaderValue {
    /// The text, when the value is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            HeaderValue::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The value written as text: text as itself, numbers and booleans in
    /// their usual form, a time as its milliseconds; bytes have no text form.
    /// This is what an address template or a breaker key reads.
    pub fn to_text(&self) -> Option<String> {
        match self {
            HeaderValue::Text(s) => Some(s.clone()),
            HeaderValue::Integer(i) => Some(i.to_string()),
            HeaderValue::Float(f) => Some(f.to_string()),
            HeaderValue::Boolean(b) => Some(b.to_string()),
            HeaderValue::Time(t) => Some(t.to_string()),
            HeaderValue::Bytes(_) => None,
        }
    }

    /// The value as JSON: text as a string, numbers and booleans as
    /// themselves, a time as its milliseconds, bytes as (lossy) UTF-8 text.
    pub fn to_json(&self) -> Value {
        match self {
            HeaderValue::Text(s) => Value::String(s.clone()),
            HeaderValue::Integer(i) => (*i).into(),
            HeaderValue::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Into::into),
            HeaderValue::Boolean(b) => (*b).into(),
            HeaderValue::Time(t) => (*t).into(),
            HeaderValue::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        }
    }

    /// A header value from JSON: a boolean, a whole number that fits in 64
    /// bits as an integer, another number as a float, a string as text, and
    /// anything else (null, arrays, objects) as its JSON text.
    pub fn from_json(value: &Value) -> HeaderValue {
        match value {
            Value::Bool(b) => HeaderValue::Boolean(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => HeaderValue::Integer(i),
                None => HeaderValue::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => HeaderValue::Text(s.clone()),
            other => HeaderValue::Text(other.to_string()),
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

impl From<i64> for HeaderValue {
    fn from(i: i64) -> Self {
        HeaderValue::Integer(i)
    }
}

impl From<f64> for HeaderValue {
    fn from(f: f64) -> Self {
        HeaderValue::Float(f)
    }
}

impl From<bool> for HeaderValue {
    fn from(b: bool) -> Self {
        HeaderValue::Boolean(b)
    }
}

impl From<Vec<u8>> for HeaderValue {
    fn from(b: Vec<u8>) -> Self {
        HeaderValue::Bytes(b)
    }
}

impl From<&HeaderValue> for HeaderValue {
    fn from(v: &HeaderValue) -> Self {
        v.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_both_ways() {
        for (json, header) in [
            (json!("a"), HeaderValue::Text("a".into())),
            (json!(7), HeaderValue::Integer(7)),
            (json!(2.5), HeaderValue::Float(2.5)),
            (json!(true), HeaderValue::Boolean(true)),
        ] {
            assert_eq!(HeaderValue::from_json(&json), header);
            assert_eq!(header.to_json(), json);
        }
        assert_eq!(HeaderValue::from_json(&json!([1, 2])), HeaderValue::Text("[1,2]".into()));
        assert_eq!(HeaderValue::Bytes(b"hi".to_vec()).to_json(), json!("hi"));
        assert_eq!(HeaderValue::Time(5).to_json(), json!(5));
    }

    #[test]
    fn text_forms() {
        assert_eq!(HeaderValue::Integer(-3).to_text().as_deref(), Some("-3"));
        assert_eq!(HeaderValue::Boolean(false).to_text().as_deref(), Some("false"));
        assert_eq!(HeaderValue::Bytes(vec![1]).to_text(), None);
        assert_eq!(HeaderValue::Integer(1).as_text(), None);
        assert_eq!(HeaderValue::from("x").as_text(), Some("x"));
    }
}
