//! What a message and a queue carry, and the limits SQS puts on them.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ferry_transport_sqs::attributes::{AttrBytes, md5_of_attributes, valid_name_as_aws_takes_it, valid_text};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::SqsError;

/// The largest message (body and attributes together) and the largest
/// batch request, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1_048_576;
/// Message attributes a message may carry.
pub const MAX_ATTRIBUTES: usize = 10;
/// The FIFO deduplication window.
pub const DEDUP_WINDOW_MS: i64 = 5 * 60 * 1000;

/// A message attribute as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub name: String,
    /// `String`, `Number`, `Binary`, or one of them with a `.subtype`.
    pub data_type: String,
    pub value: AttrValue,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttrValue {
    Text(String),
    Binary(Vec<u8>),
}

impl Attr {
    fn md5_bytes(&self) -> AttrBytes<'_> {
        match &self.value {
            AttrValue::Text(s) => AttrBytes::Text(s),
            AttrValue::Binary(b) => AttrBytes::Binary(b),
        }
    }

    /// Bytes counted against the message size: name, type and value.
    pub fn size(&self) -> usize {
        self.name.len()
            + self.data_type.len()
            + match &self.value {
                AttrValue::Text(s) => s.len(),
                AttrValue::Binary(b) => b.len(),
            }
    }

    /// The value as text: a binary one in base64 (SNS's `{Type, Value}`).
    pub fn as_text(&self) -> String {
        match &self.value {
            AttrValue::Text(s) => s.clone(),
            AttrValue::Binary(b) => B64.encode(b),
        }
    }

    /// `{"DataType": …, "StringValue" | "BinaryValue": …}` (binary base64).
    pub fn to_json(&self) -> Value {
        match &self.value {
            AttrValue::Text(s) => serde_json::json!({"DataType": self.data_type, "StringValue": s}),
            AttrValue::Binary(b) => serde_json::json!({"DataType": self.data_type, "BinaryValue": B64.encode(b)}),
        }
    }
}

/// AWS's MD5OfMessageAttributes (None without attributes).
pub fn md5_of(attributes: &[Attr]) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    Some(md5_of_attributes(attributes.iter().map(|a| (a.name.as_str(), a.data_type.as_str(), a.md5_bytes()))))
}

fn base_type(data_type: &str) -> &str {
    data_type.split_once('.').map_or(data_type, |(base, _)| base)
}

/// What a JSON value is, for the messages of [`as_map`] and [`as_list`].
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// A member that must be a map (`MessageAttributes`, `Attributes`, `Tags`).
/// Absent or null is `None`; any other type is refused as AWS refuses it
/// (SerializationException, 400), never read as if it were absent.
pub fn as_map<'v>(value: Option<&'v Value>, key: &str) -> Result<Option<&'v serde_json::Map<String, Value>>, SqsError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(SqsError::malformed(format!(
            "Start of {} found where not expected: {key} must be a map",
            json_kind(other)
        ))),
    }
}

/// A member that must be a list (`AttributeNames`, `Entries`), as [`as_map`].
pub fn as_list<'v>(value: Option<&'v Value>, key: &str) -> Result<Option<&'v Vec<Value>>, SqsError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(SqsError::malformed(format!(
            "Start of {} found where not expected: {key} must be a list",
            json_kind(other)
        ))),
    }
}

/// A member that must be a string, as [`as_map`].
pub fn as_text<'v>(value: Option<&'v Value>, key: &str) -> Result<Option<&'v str>, SqsError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(SqsError::malformed(format!("{key} must be a string, not {}", json_kind(other)))),
    }
}

/// Reads `MessageAttributes` (`{name: {DataType, StringValue|BinaryValue}}`)
/// and checks them as SQS does.
pub fn message_attributes(input: Option<&Value>) -> Result<Vec<Attr>, SqsError> {
    let Some(map) = as_map(input, "MessageAttributes")? else {
        return Ok(Vec::new());
    };
    if map.len() > MAX_ATTRIBUTES {
        return Err(SqsError::invalid_parameter(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
            map.len()
        )));
    }
    let mut out = Vec::with_capacity(map.len());
    for (name, value) in map {
        if !valid_name_as_aws_takes_it(name) {
            return Err(SqsError::invalid_parameter(format!(
                "Message (user) attribute name '{name}' is invalid. The attribute name can contain A-Z, a-z, \
                 0-9, underscore (_), hyphen (-), and period (.) characters, must not start or end with a \
                 period, must not have successive periods, must not start with AWS. or Amazon., and must be \
                 at most 256 characters long."
            )));
        }
        out.push(attribute(name, value, "Message (user) attribute")?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// One attribute value, checked: `what` names the kind in messages.
fn attribute(name: &str, value: &Value, what: &str) -> Result<Attr, SqsError> {
    if !value.is_object() {
        return Err(SqsError::malformed(format!("{what} '{name}' must be a map, not {}", json_kind(value))));
    }
    let data_type = as_text(value.get("DataType"), "DataType")?.unwrap_or_default();
    if data_type.is_empty() {
        return Err(SqsError::invalid_parameter(format!(
            "The message attribute '{name}' must contain non-empty message attribute type."
        )));
    }
    let base = base_type(data_type);
    if !matches!(base, "String" | "Number" | "Binary") || data_type.len() > 256 {
        return Err(SqsError::invalid_parameter(format!(
            "The type of message (user) attribute '{name}' is invalid. You must use only the following supported \
             type prefixes: Binary, Number, String."
        )));
    }
    let string = as_text(value.get("StringValue"), "StringValue")?;
    let binary = as_text(value.get("BinaryValue"), "BinaryValue")?;
    let value = match base {
        "Binary" => {
            let Some(text) = binary else {
                return Err(SqsError::invalid_parameter(format!(
                    "{what} '{name}' must contain a non-empty value of type 'Binary'."
                )));
            };
            let bytes = B64.decode(text).map_err(|_| {
                SqsError::invalid_parameter(format!("{what} '{name}' has an invalid base64 binary value."))
            })?;
            if bytes.is_empty() {
                return Err(SqsError::invalid_parameter(format!(
                    "{what} '{name}' must contain a non-empty value of type 'Binary'."
                )));
            }
            AttrValue::Binary(bytes)
        }
        _ => {
            let text = string.unwrap_or_default();
            if text.is_empty() {
                return Err(SqsError::invalid_parameter(format!(
                    "{what} '{name}' must contain a non-empty value of type '{base}'."
                )));
            }
            // AWS answers a bad character in an attribute value as a bad
            // parameter, not as bad message contents (that is the body's).
            if !valid_text(text) {
                return Err(SqsError::invalid_parameter(format!(
                    "{what} '{name}' contains invalid characters. Valid unicode characters are #x9 | #xA | #xD | \
                     #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF."
                )));
            }
            if base == "Number" && !is_number(text) {
                return Err(SqsError::invalid_parameter(format!(
                    "Can't cast the value of message (user) attribute '{name}' to a number."
                )));
            }
            AttrValue::Text(text.to_owned())
        }
    };
    Ok(Attr { name: name.to_owned(), data_type: data_type.to_owned(), value })
}

/// SQS numbers: up to 38 significant digits, exponent -128..126.
fn is_number(text: &str) -> bool {
    let digits = text.chars().filter(char::is_ascii_digit).count();
    text.parse::<f64>().is_ok_and(f64::is_finite) && digits <= 38 && !text.contains(['x', 'X', 'n', 'N', 'i', 'I'])
}

/// Reads `MessageSystemAttributes`: only `AWSTraceHeader` (String) exists.
pub fn trace_header(input: Option<&Value>) -> Result<Option<String>, SqsError> {
    let Some(map) = as_map(input, "MessageSystemAttributes")? else {
        return Ok(None);
    };
    let mut trace = None;
    for (name, value) in map {
        if name != "AWSTraceHeader" {
            return Err(SqsError::invalid_parameter(format!("Message system attribute name '{name}' is invalid.")));
        }
        let attr = attribute(name, value, "Message system attribute")?;
        match (base_type(&attr.data_type), attr.value) {
            ("String", AttrValue::Text(s)) => trace = Some(s),
            _ => {
                return Err(SqsError::invalid_parameter(
                    "The type of message system attribute 'AWSTraceHeader' is invalid. You must use only the \
                     following supported type prefixes: String.",
                ));
            }
        }
    }
    Ok(trace)
}

/// MD5OfMessageSystemAttributes of a trace header.
pub fn md5_of_trace(trace: &str) -> String {
    md5_of_attributes([("AWSTraceHeader", "String", AttrBytes::Text(trace))])
}

/// Whether `names` (as ReceiveMessage takes them: `All`, `*`, `.*`, exact
/// names, `prefix.*`) asks for `name`. As SQS answers, `prefix.*` is a
/// plain prefix: `Hel.*` selects `Hello` (the dot is not required).
pub fn wanted(names: &[String], name: &str) -> bool {
    names.iter().any(|n| {
        n == "All" || n == "*" || n == name || n.strip_suffix(".*").is_some_and(|prefix| name.starts_with(prefix))
    })
}

/// A queue's settable attributes, their defaults and ranges.
pub struct AttributeRule {
    pub name: &'static str,
    pub default: Option<&'static str>,
    /// Inclusive range of an integer attribute.
    pub range: Option<(i64, i64)>,
    /// Settable on FIFO queues only.
    pub fifo_only: bool,
}

pub const QUEUE_ATTRIBUTES: &[AttributeRule] = &[
    AttributeRule { name: "DelaySeconds", default: Some("0"), range: Some((0, 900)), fifo_only: false },
    AttributeRule {
        name: "MaximumMessageSize",
        default: Some("1048576"),
        range: Some((1024, MAX_MESSAGE_BYTES as i64)),
        fifo_only: false,
    },
    AttributeRule {
        name: "MessageRetentionPeriod",
        default: Some("345600"),
        range: Some((60, 1_209_600)),
        fifo_only: false,
    },
    AttributeRule { name: "ReceiveMessageWaitTimeSeconds", default: Some("0"), range: Some((0, 20)), fifo_only: false },
    AttributeRule { name: "VisibilityTimeout", default: Some("30"), range: Some((0, 43_200)), fifo_only: false },
    AttributeRule { name: "RedrivePolicy", default: None, range: None, fifo_only: false },
    AttributeRule { name: "RedriveAllowPolicy", default: None, range: None, fifo_only: false },
    AttributeRule { name: "Policy", default: None, range: None, fifo_only: false },
    AttributeRule { name: "KmsMasterKeyId", default: None, range: None, fifo_only: false },
    AttributeRule { name: "KmsDataKeyReusePeriodSeconds", default: None, range: Some((60, 86_400)), fifo_only: false },
    AttributeRule { name: "SqsManagedSseEnabled", default: Some("true"), range: None, fifo_only: false },
    AttributeRule { name: "FifoQueue", default: None, range: None, fifo_only: true },
    AttributeRule { name: "ContentBasedDeduplication", default: Some("false"), range: None, fifo_only: true },
    AttributeRule { name: "DeduplicationScope", default: Some("queue"), range: None, fifo_only: true },
    AttributeRule { name: "FifoThroughputLimit", default: Some("perQueue"), range: None, fifo_only: true },
];

/// A FIFO message's SequenceNumber as AWS writes it: a large number of 20
/// digits (not a zero-padded counter), growing with each message sent.
pub fn sequence_number(seq: u64) -> String {
    (10_000_000_000_000_000_000u64.saturating_add(seq)).to_string()
}

/// The attributes whose values are `true` or `false`.
pub const BOOLEAN_ATTRIBUTES: &[&str] = &["FifoQueue", "ContentBasedDeduplication", "SqsManagedSseEnabled"];

/// The attributes SetQueueAttributes removes when given an empty value (as
/// AWS does); removing `KmsMasterKeyId` removes
/// `KmsDataKeyReusePeriodSeconds` with it.
pub const UNSET_BY_EMPTY: &[&str] = &["Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId"];

/// Attributes GetQueueAttributes computes.
pub const COMPUTED_ATTRIBUTES: &[&str] = &[
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
];

/// Checks attributes given to CreateQueue or SetQueueAttributes.
pub fn check_queue_attributes(
    attributes: &BTreeMap<String, String>,
    fifo: bool,
    dlq_exists: &dyn Fn(&str) -> bool,
) -> Result<(), SqsError> {
    for (name, value) in attributes {
        let Some(rule) = QUEUE_ATTRIBUTES.iter().find(|r| r.name == name) else {
            return Err(SqsError::invalid_attribute_name(name));
        };
        if rule.fifo_only && !fifo && name == "FifoQueue" {
            return Err(SqsError::invalid_attribute_name(name));
        }
        if rule.fifo_only && !fifo {
            return Err(SqsError::invalid_attribute_name_because(format!(
                "You can specify the {name} only when FifoQueue is set to true."
            )));
        }
        if let Some((low, high)) = rule.range {
            match value.parse::<i64>() {
                Ok(v) if (low..=high).contains(&v) => {}
                _ => {
                    return Err(SqsError::invalid_attribute_value(
                        name,
                        &format!("must be an integer between {low} and {high}."),
                    ));
                }
            }
        }
        match name.as_str() {
            name if BOOLEAN_ATTRIBUTES.contains(&name) && value != "true" && value != "false" => {
                return Err(SqsError::invalid_attribute_value(name, "must be true or false."));
            }
            "RedrivePolicy" if !value.is_empty() => {
                let policy = RedrivePolicy::parse(value)?;
                if !dlq_exists(&policy.target_arn) {
                    return Err(SqsError::invalid_parameter(format!(
                        "Value {value} for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist."
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Where a queue's dead messages go: its dead-letter queue's key in the
/// store ([`crate::records::QueueMeta::redrive`] finds it from the policy's
/// ARN) and the receive count that sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redrive {
    pub target: String,
    pub max_receive_count: u32,
}

/// A queue's RedrivePolicy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedrivePolicy {
    /// The dead-letter queue's ARN, as given ([`crate::records::Identity::key_of_arn`]
    /// finds the queue).
    pub target_arn: String,
    pub max_receive_count: u32,
}

impl RedrivePolicy {
    pub fn parse(text: &str) -> Result<Self, SqsError> {
        let bad = |reason: &str| {
            SqsError::invalid_parameter(format!(
                "Value {text} for parameter RedrivePolicy is invalid. Reason: {reason}"
            ))
        };
        let value: Value = serde_json::from_str(text).map_err(|_| bad("Invalid JSON."))?;
        let arn = value
            .get("deadLetterTargetArn")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("Redrive policy does not contain mandatory attribute: deadLetterTargetArn."))?;
        let count = match value.get("maxReceiveCount") {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.parse().ok(),
            _ => None,
        }
        .ok_or_else(|| bad("Redrive policy does not contain mandatory attribute: maxReceiveCount."))?;
        if !(1..=1000).contains(&count) {
            return Err(bad("Invalid value for maxReceiveCount: must be between 1 and 1000."));
        }
        Ok(Self { target_arn: arn.to_owned(), max_receive_count: count as u32 })
    }
}

/// Whether `id` is a valid batch entry id (SQS's and SNS's rule): 1 to 80
/// letters, digits, `-` and `_`.
pub fn valid_batch_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 80 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `name` is a valid queue name (`fifo`: with the `.fifo` suffix).
pub fn valid_queue_name(name: &str) -> bool {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    !stem.is_empty() && name.len() <= 80 && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The queue that holds a topic's messages for the route receiver
/// `receiver`: `:` is in no queue name the API accepts, so apps can neither
/// create nor reach it.
pub fn route_queue(topic: &str, receiver: &str) -> String {
    format!("sns:{topic}:{receiver}")
}

/// Whether `name` is one of ferry's own queues ([`route_queue`]).
pub fn is_internal(name: &str) -> bool {
    name.contains(':')
}

/// The order a FIFO receive hands out messages in, as SQS does: one
/// message group at a time (a group's messages together, in send order),
/// groups never served first, then the one served least recently; groups
/// alike in that keep the order of their first message. `candidates` are
/// the messages a receive may take (each group's run from its head, in
/// send order), `served` each group's last receive (a clock that only
/// grows; `None` never). Returns at most `max` of the candidates' keys.
pub fn fifo_order<K: Copy>(candidates: &[(&str, K)], served: impl Fn(&str) -> Option<i64>, max: usize) -> Vec<K> {
    let mut groups: Vec<(&str, Option<i64>, usize)> = Vec::new();
    for (i, (group, _)) in candidates.iter().enumerate() {
        if !groups.iter().any(|(g, _, _)| g == group) {
            groups.push((group, served(group), i));
        }
    }
    // `None` sorts before any time: never served comes first.
    groups.sort_by_key(|(_, served, first)| (*served, *first));
    let mut out = Vec::new();
    for (group, _, _) in groups {
        for (_, key) in candidates.iter().filter(|(g, _)| *g == group) {
            if out.len() >= max {
                return out;
            }
            out.push(*key);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_receive_serves_a_group_at_a_time_least_recently_served_first() {
        let candidates = [("g1", 1), ("g2", 2), ("g1", 3), ("g3", 4), ("g1", 5), ("g2", 6)];
        // Never served: in the order of their first message, whole.
        assert_eq!(fifo_order(&candidates, |_| None, 10), vec![1, 3, 5, 2, 6, 4]);
        assert_eq!(fifo_order(&candidates, |_| None, 4), vec![1, 3, 5, 2]);
        // g1 served at 7 and g2 at 3: g3 (never) first, then g2, then g1.
        let served = |g: &str| match g {
            "g1" => Some(7),
            "g2" => Some(3),
            _ => None,
        };
        assert_eq!(fifo_order(&candidates, served, 10), vec![4, 2, 6, 1, 3, 5]);
        assert!(fifo_order::<i64>(&[], |_| None, 10).is_empty());
    }

    #[test]
    fn attributes_of_the_wrong_shape_are_refused_not_dropped() {
        for bad in [
            serde_json::json!([1, 2]),
            serde_json::json!("a=v"),
            serde_json::json!(7),
            serde_json::json!({"a": "v"}),
            serde_json::json!({"a": {"DataType": 5, "StringValue": "v"}}),
            serde_json::json!({"a": {"DataType": "String", "StringValue": ["v"]}}),
        ] {
            let e = message_attributes(Some(&bad)).expect_err(&bad.to_string());
            assert_eq!((e.shape(), e.status()), ("SerializationException", 400), "{bad}: {}", e.message);
        }
        let list = serde_json::json!([{"Name": "AWSTraceHeader"}]);
        assert_eq!(trace_header(Some(&list)).expect_err("a list").shape(), "SerializationException");
        assert!(message_attributes(Some(&Value::Null)).expect("null is absent").is_empty());
        assert!(message_attributes(None).expect("absent").is_empty());
    }

    #[test]
    fn sequence_numbers_are_twenty_digits_that_grow() {
        let (a, b) = (sequence_number(1), sequence_number(2));
        assert_eq!((a.len(), b.len()), (20, 20));
        assert!(!a.starts_with('0') && a < b, "{a} {b}");
    }

    #[test]
    fn attributes_are_read_sorted_and_checked() {
        let input = serde_json::json!({
            "b": {"DataType": "Number", "StringValue": "42"},
            "a": {"DataType": "Binary.gzip", "BinaryValue": "AAEC"},
        });
        let attrs = message_attributes(Some(&input)).expect("valid");
        assert_eq!(attrs[0].name, "a");
        assert_eq!(attrs[0].value, AttrValue::Binary(vec![0, 1, 2]));
        assert_eq!(attrs[1].data_type, "Number");
        for (bad, code) in [
            (serde_json::json!({"AWS.x": {"DataType": "String", "StringValue": "v"}}), "InvalidParameterValue"),
            (serde_json::json!({"x": {"DataType": "Text", "StringValue": "v"}}), "InvalidParameterValue"),
            (serde_json::json!({"x": {"DataType": "String", "StringValue": ""}}), "InvalidParameterValue"),
            (serde_json::json!({"x": {"DataType": "Number", "StringValue": "abc"}}), "InvalidParameterValue"),
            // AWS: a bad character in a value is a bad parameter (the
            // body's is InvalidMessageContents).
            (serde_json::json!({"x": {"DataType": "String", "StringValue": "\u{1}"}}), "InvalidParameterValue"),
            (serde_json::json!({"a..b": {"DataType": "String", "StringValue": "v"}}), "InvalidParameterValue"),
        ] {
            assert_eq!(message_attributes(Some(&bad)).expect_err("refused").code(), code, "{bad}");
        }
        let eleven: serde_json::Map<String, Value> =
            (0..11).map(|i| (format!("a{i}"), serde_json::json!({"DataType": "String", "StringValue": "v"}))).collect();
        assert!(message_attributes(Some(&Value::Object(eleven))).expect_err("too many").message.contains("[11]"));
    }

    #[test]
    fn only_the_trace_header_is_a_system_attribute() {
        let ok = serde_json::json!({"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc"}});
        assert_eq!(trace_header(Some(&ok)).expect("valid").as_deref(), Some("Root=1-abc"));
        let bad = serde_json::json!({"SenderId": {"DataType": "String", "StringValue": "x"}});
        assert_eq!(trace_header(Some(&bad)).expect_err("refused").code(), "InvalidParameterValue");
    }

    #[test]
    fn attribute_names_select_all_exact_and_prefixes() {
        let names = vec!["bar.*".to_owned(), "foo".to_owned()];
        assert!(wanted(&names, "foo"));
        assert!(wanted(&names, "bar.baz"));
        assert!(wanted(&names, "barbaz"), "a plain prefix, as SQS answers");
        assert!(!wanted(&names, "ba"));
        assert!(!wanted(&names, "food"));
        assert!(wanted(&["All".to_owned()], "anything"));
        assert!(wanted(&["*".to_owned()], "anything"));
        assert!(wanted(&[".*".to_owned()], "anything"));
    }

    #[test]
    fn queue_names_and_redrive_policies() {
        assert!(valid_queue_name("orders"));
        assert!(valid_queue_name("tasks.fifo"));
        assert!(!valid_queue_name(".fifo"));
        assert!(!valid_queue_name("a/b"));
        assert!(!valid_queue_name(&"x".repeat(81)));
        let p = RedrivePolicy::parse(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"}"#,
        )
        .expect("valid");
        assert_eq!((p.target_arn.as_str(), p.max_receive_count), ("arn:aws:sqs:us-east-1:000000000000:dlq", 3));
        assert!(RedrivePolicy::parse(r#"{"maxReceiveCount":3}"#).is_err());
    }
}
