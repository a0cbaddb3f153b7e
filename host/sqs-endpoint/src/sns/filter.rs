//! SNS subscription filter policies.
//!
//! A policy is a JSON object: every key must match (AND), and a key matches
//! when any one of its conditions does (OR). With `FilterPolicyScope =
//! MessageAttributes` (the default) keys name message attributes; with
//! `MessageBody` they name members of the JSON message, nested objects for
//! nested members. Conditions:
//!
//! - `"red"`: the exact string; `5`: a number equal to 5;
//! - `{"prefix": "a"}`, `{"suffix": "z"}`, `{"equals-ignore-case": "RED"}`;
//! - `{"anything-but": "red"}` (or a number, a list of either, or
//!   `{"prefix": "a"}`): present and none of those;
//! - `{"numeric": [">", 0, "<=", 5]}`: a number in that range (`=`, `<`,
//!   `<=`, `>`, `>=`);
//! - `{"exists": true}` / `{"exists": false}`: present, or absent.
//!
//! `"$or": [policy, …]` at any level matches when one of the policies does.
//! A `String.Array` attribute matches when any of its items does.

use serde_json::{Map, Value};

use crate::model::{Attr, AttrValue};

/// The attribute-name and rule limits SNS sets.
const MAX_KEYS: usize = 5;
const MAX_VALUES: usize = 150;

/// A checked filter policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy(Map<String, Value>);

/// Where a policy looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    MessageAttributes,
    MessageBody,
}

impl Scope {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "" | "MessageAttributes" => Ok(Self::MessageAttributes),
            "MessageBody" => Ok(Self::MessageBody),
            other => {
                Err(format!("FilterPolicyScope: Invalid value [{other}]. Must be MessageAttributes or MessageBody"))
            }
        }
    }
}

impl Policy {
    /// Reads and checks a policy; the error is SNS's reason text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("FilterPolicy: failed to parse JSON. {e}"))?;
        let Value::Object(map) = value else {
            return Err("FilterPolicy: Filter policy must be a JSON object".into());
        };
        let mut values = 0;
        check_object(&map, &mut values)?;
        if map.keys().filter(|k| *k != "$or").count() > MAX_KEYS {
            return Err(format!("FilterPolicy: Filter policy can not have more than {MAX_KEYS} keys"));
        }
        if values > MAX_VALUES {
            return Err(format!("FilterPolicy: Filter policy is too complex: more than {MAX_VALUES} values"));
        }
        Ok(Self(map))
    }

    /// Whether a message with these attributes passes.
    pub fn matches_attributes(&self, attributes: &[Attr]) -> bool {
        let mut doc = Map::new();
        for a in attributes {
            let AttrValue::Text(text) = &a.value else { continue };
            let value = if a.data_type.starts_with("Number") {
                text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number)
            } else if a.data_type == "String.Array" {
                serde_json::from_str::<Value>(text).ok().filter(Value::is_array)
            } else {
                Some(Value::String(text.clone()))
            };
            doc.insert(a.name.clone(), value.unwrap_or_else(|| Value::String(text.clone())));
        }
        object_matches(&self.0, &doc)
    }

    /// Whether a message with this body passes (a body that is not a JSON
    /// object matches no policy).
    pub fn matches_body(&self, body: &str) -> bool {
        match serde_json::from_str::<Value>(body) {
            Ok(Value::Object(doc)) => object_matches(&self.0, &doc),
            _ => false,
        }
    }
}

fn check_object(map: &Map<String, Value>, values: &mut usize) -> Result<(), String> {
    if map.is_empty() {
        return Err("FilterPolicy: Filter policy can not be empty".into());
    }
    for (key, rule) in map {
        match (key.as_str(), rule) {
            ("$or", Value::Array(alternatives)) if alternatives.len() >= 2 => {
                for alt in alternatives {
                    let Value::Object(inner) = alt else {
                        return Err("FilterPolicy: $or must be a list of objects".into());
                    };
                    check_object(inner, values)?;
                }
            }
            ("$or", _) => return Err("FilterPolicy: $or must be a list of at least two objects".into()),
            (_, Value::Object(inner)) => check_object(inner, values)?,
            (_, Value::Array(conditions)) if !conditions.is_empty() => {
                for c in conditions {
                    check_condition(key, c)?;
                    *values += 1;
                }
            }
            (_, _) => {
                return Err(format!("FilterPolicy: \"{key}\" must be an object or an array with at least one value"));
            }
        }
    }
    Ok(())
}

fn check_condition(key: &str, condition: &Value) -> Result<(), String> {
    let bad = |what: &str| -> Result<(), String> { Err(format!("FilterPolicy: \"{key}\": {what}")) };
    match condition {
        Value::String(_) | Value::Number(_) => Ok(()),
        Value::Object(op) if op.len() == 1 => {
            let Some((name, arg)) = op.iter().next() else { return bad("an empty match") };
            match (name.as_str(), arg) {
                ("prefix" | "suffix" | "equals-ignore-case", Value::String(_)) => Ok(()),
                ("exists", Value::Bool(_)) => Ok(()),
                ("anything-but", Value::String(_) | Value::Number(_)) => Ok(()),
                ("anything-but", Value::Array(items))
                    if !items.is_empty() && items.iter().all(|i| i.is_string() || i.is_number()) =>
                {
                    Ok(())
                }
                ("anything-but", Value::Object(inner))
                    if inner.len() == 1 && inner.get("prefix").is_some_and(Value::is_string) =>
                {
                    Ok(())
                }
                ("numeric", Value::Array(parts)) => check_numeric(parts).or_else(|e| bad(&e)),
                _ => bad(&format!("Unrecognized match type {name}")),
            }
        }
        _ => bad("Match value must be String, number, true, false, or null"),
    }
}

fn check_numeric(parts: &[Value]) -> Result<(), String> {
    if parts.is_empty() || !parts.len().is_multiple_of(2) || parts.len() > 4 {
        return Err("Value of numeric must be an array of one or two operator-number pairs".into());
    }
    for pair in parts.chunks(2) {
        let op = pair[0].as_str().unwrap_or_default();
        if !matches!(op, "=" | "<" | "<=" | ">" | ">=") {
            return Err(format!("Unrecognized numeric range operator: {}", pair[0]));
        }
        if !pair[1].is_number() {
            return Err("Value of numeric operators must be numbers".into());
        }
    }
    Ok(())
}

fn object_matches(policy: &Map<String, Value>, doc: &Map<String, Value>) -> bool {
    policy.iter().all(|(key, rule)| match (key.as_str(), rule) {
        ("$or", Value::Array(alternatives)) => {
            alternatives.iter().any(|alt| alt.as_object().is_some_and(|inner| object_matches(inner, doc)))
        }
        (_, Value::Object(inner)) => match doc.get(key) {
            Some(Value::Object(nested)) => object_matches(inner, nested),
            _ => false,
        },
        (_, Value::Array(conditions)) => conditions.iter().any(|c| condition_matches(c, doc.get(key))),
        _ => false,
    })
}

fn condition_matches(condition: &Value, value: Option<&Value>) -> bool {
    if let Value::Object(op) = condition
        && let Some(Value::Bool(wanted)) = op.get("exists")
    {
        return value.is_some_and(|v| !v.is_null()) == *wanted;
    }
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => items.iter().any(|item| single_matches(condition, item)),
        Some(v) => single_matches(condition, v),
    }
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

fn single_matches(condition: &Value, value: &Value) -> bool {
    match condition {
        Value::String(s) => value.as_str() == Some(s),
        Value::Number(n) => number(value).zip(n.as_f64()).is_some_and(|(a, b)| a == b),
        Value::Object(op) => {
            let Some((name, arg)) = op.iter().next() else { return false };
            match name.as_str() {
                "prefix" => value.as_str().zip(arg.as_str()).is_some_and(|(v, p)| v.starts_with(p)),
                "suffix" => value.as_str().zip(arg.as_str()).is_some_and(|(v, s)| v.ends_with(s)),
                "equals-ignore-case" => {
                    value.as_str().zip(arg.as_str()).is_some_and(|(v, s)| v.to_lowercase() == s.to_lowercase())
                }
                "anything-but" => match arg {
                    Value::Array(items) => !items.iter().any(|i| single_matches(i, value)),
                    Value::Object(inner) => {
                        let prefix = inner.get("prefix").and_then(Value::as_str).unwrap_or_default();
                        value.as_str().is_some_and(|v| !v.starts_with(prefix))
                    }
                    other => !single_matches(other, value),
                },
                "numeric" => {
                    let (Some(v), Some(parts)) = (number(value), arg.as_array()) else { return false };
                    parts.chunks(2).all(|pair| {
                        let bound = pair.get(1).and_then(Value::as_f64).unwrap_or(f64::NAN);
                        match pair[0].as_str().unwrap_or_default() {
                            "=" => v == bound,
                            "<" => v < bound,
                            "<=" => v <= bound,
                            ">" => v > bound,
                            ">=" => v >= bound,
                            _ => false,
                        }
                    })
                }
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str, data_type: &str, value: &str) -> Attr {
        Attr { name: name.into(), data_type: data_type.into(), value: AttrValue::Text(value.into()) }
    }

    #[test]
    fn every_key_must_match_and_any_condition_of_a_key_may() {
        let p =
            Policy::parse(r#"{"color": ["red", "blue"], "size": [{"numeric": [">", 5, "<=", 10]}]}"#).expect("valid");
        assert!(p.matches_attributes(&[text("color", "String", "red"), text("size", "Number", "7")]));
        assert!(!p.matches_attributes(&[text("color", "String", "green"), text("size", "Number", "7")]));
        assert!(!p.matches_attributes(&[text("color", "String", "blue"), text("size", "Number", "11")]));
        assert!(!p.matches_attributes(&[text("color", "String", "blue")]));
    }

    #[test]
    fn each_match_type_does_what_sns_documents() {
        let cases = [
            (r#"{"k": [{"prefix": "ab"}]}"#, "abc", true),
            (r#"{"k": [{"prefix": "ab"}]}"#, "xab", false),
            (r#"{"k": [{"suffix": "yz"}]}"#, "xyz", true),
            (r#"{"k": [{"equals-ignore-case": "RED"}]}"#, "Red", true),
            (r#"{"k": [{"anything-but": ["a", "b"]}]}"#, "c", true),
            (r#"{"k": [{"anything-but": "a"}]}"#, "a", false),
            (r#"{"k": [{"anything-but": {"prefix": "tmp"}}]}"#, "tmpfile", false),
            (r#"{"k": [{"exists": true}]}"#, "x", true),
            (r#"{"k": [{"exists": false}]}"#, "x", false),
            (r#"{"other": [{"exists": false}]}"#, "x", true),
        ];
        for (policy, value, expected) in cases {
            let p = Policy::parse(policy).expect("valid");
            assert_eq!(p.matches_attributes(&[text("k", "String", value)]), expected, "{policy} on {value}");
        }
        let arrays = Policy::parse(r#"{"k": ["b"]}"#).expect("valid");
        assert!(arrays.matches_attributes(&[text("k", "String.Array", r#"["a", "b"]"#)]));
        let numbers = Policy::parse(r#"{"k": [5]}"#).expect("valid");
        assert!(numbers.matches_attributes(&[text("k", "Number", "5.0")]));
        assert!(!numbers.matches_attributes(&[text("k", "String", "5")]));
        let or = Policy::parse(r#"{"$or": [{"a": ["1"]}, {"b": ["2"]}]}"#).expect("valid");
        assert!(or.matches_attributes(&[text("b", "String", "2")]));
        assert!(!or.matches_attributes(&[text("a", "String", "2")]));
    }

    #[test]
    fn body_scope_looks_into_nested_members() {
        let p = Policy::parse(r#"{"order": {"kind": ["book"]}, "total": [{"numeric": [">=", 10]}]}"#).expect("valid");
        assert!(p.matches_body(r#"{"order": {"kind": "book"}, "total": 12}"#));
        assert!(!p.matches_body(r#"{"order": {"kind": "pen"}, "total": 12}"#));
        assert!(!p.matches_body("not json"));
    }

    #[test]
    fn malformed_policies_are_refused() {
        for bad in [
            "[]",
            "{}",
            r#"{"k": "red"}"#,
            r#"{"k": []}"#,
            r#"{"k": [{"regex": "a"}]}"#,
            r#"{"k": [{"numeric": ["~", 1]}]}"#,
            r#"{"a":[1],"b":[1],"c":[1],"d":[1],"e":[1],"f":[1]}"#,
            "not json",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
