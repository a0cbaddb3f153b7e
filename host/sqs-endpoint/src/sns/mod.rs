//! SNS: its actions, in the query protocol SNS clients speak (form POSTs
//! and GETs with `Action=…`, XML replies in SNS's namespace), which share
//! the endpoint's listener with SQS (the action's name tells them apart);
//! the topics and their subscriptions ([`topics`]); and subscription filter
//! policies ([`filter`]).

pub mod filter;
pub mod topics;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{ErrorKind, SqsError};
use crate::sns::topics::{Listed, MAX_PUBLISH_BYTES, Publish, Topics};
use crate::xml::{self, Node};

/// The namespace of SNS's XML.
pub const XMLNS: &str = "http://sns.amazonaws.com/doc/2010-03-31/";

/// The SNS actions the endpoint serves.
pub const ACTIONS: &[&str] = &[
    "CreateTopic",
    "DeleteTopic",
    "ListTopics",
    "GetTopicAttributes",
    "SetTopicAttributes",
    "Subscribe",
    "ConfirmSubscription",
    "Unsubscribe",
    "ListSubscriptions",
    "ListSubscriptionsByTopic",
    "GetSubscriptionAttributes",
    "SetSubscriptionAttributes",
    "Publish",
    "PublishBatch",
];

/// Whether `action` is SNS's.
pub fn is_sns(action: &str) -> bool {
    ACTIONS.contains(&action)
}

/// Items per page of the list actions, as SNS pages them.
const PAGE: usize = 100;

/// Query parameters into one JSON tree: `a.b.c = v` nests, `X.member.N.…`
/// becomes a list, `X.entry.N.key|Name` / `.value|Value` a map.
pub fn tree(pairs: &[(&str, &str)]) -> Value {
    let mut root = Map::new();
    for &(key, value) in pairs {
        let mut node = &mut root;
        let parts: Vec<&str> = key.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                node.entry((*part).to_owned()).or_insert_with(|| Value::String(value.to_owned()));
            } else {
                let next = node.entry((*part).to_owned()).or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(inner) = next else { break };
                node = inner;
            }
        }
    }
    normalize(Value::Object(root))
}

fn numbered(map: Map<String, Value>) -> Vec<Value> {
    let mut items: Vec<(u32, Value)> = map.into_iter().filter_map(|(k, v)| Some((k.parse().ok()?, v))).collect();
    items.sort_by_key(|(n, _)| *n);
    items.into_iter().map(|(_, v)| v).collect()
}

fn normalize(value: Value) -> Value {
    let Value::Object(mut map) = value else { return value };
    if map.len() == 1 {
        if matches!(map.get("member"), Some(Value::Object(_)))
            && let Some(Value::Object(members)) = map.remove("member")
        {
            return Value::Array(numbered(members).into_iter().map(normalize).collect());
        }
        if matches!(map.get("entry"), Some(Value::Object(_)))
            && let Some(Value::Object(entries)) = map.remove("entry")
        {
            let mut out = Map::new();
            for entry in numbered(entries) {
                let Value::Object(mut e) = entry else { continue };
                let key = e.remove("key").or_else(|| e.remove("Name"));
                let value = e.remove("value").or_else(|| e.remove("Value"));
                if let (Some(Value::String(k)), Some(v)) = (key, value) {
                    out.insert(k, normalize(v));
                }
            }
            return Value::Object(out);
        }
    }
    Value::Object(map.into_iter().map(|(k, v)| (k, normalize(v))).collect())
}

fn text<'v>(input: &'v Value, key: &str) -> Option<&'v str> {
    input.get(key).and_then(Value::as_str)
}

fn required<'v>(input: &'v Value, key: &str) -> Result<&'v str, SqsError> {
    text(input, key).ok_or_else(|| SqsError::sns_invalid(key))
}

fn string_map(input: &Value, key: &str) -> BTreeMap<String, String> {
    input.get(key).and_then(Value::as_object).map_or_else(BTreeMap::new, |m| {
        m.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect()
    })
}

/// `Tags.member.N.Key/Value` into a map.
fn tags(input: &Value) -> BTreeMap<String, String> {
    input
        .get("Tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| Some((text(t, "Key")?.to_owned(), text(t, "Value").unwrap_or_default().to_owned())))
        .collect()
}

/// `<name>` with an `<entry><key>…</key><value>…</value></entry>` per pair.
fn entries(name: &'static str, map: &BTreeMap<String, String>) -> Vec<Node> {
    let entry = |(k, v): (&String, &String)| Node::Parent("entry", vec![Node::text("key", k), Node::text("value", v)]);
    vec![Node::Parent(name, map.iter().map(entry).collect())]
}

fn page<T>(items: Vec<T>, token: Option<&str>) -> Result<(Vec<T>, Option<String>), SqsError> {
    let start: usize = match token {
        Some(t) => t.parse().map_err(|_| SqsError::sns_invalid("NextToken"))?,
        None => 0,
    };
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(start).take(PAGE).collect();
    let next = (start + page.len() < total).then(|| (start + page.len()).to_string());
    Ok((page, next))
}

fn subscriptions_xml(listed: Vec<Listed>, next: Option<String>) -> Vec<Node> {
    let member = |s: Listed| {
        let owner = s.topic.split(':').nth(4).unwrap_or_default().to_owned();
        Node::Parent(
            "member",
            vec![
                Node::text("SubscriptionArn", s.arn),
                Node::text("Owner", owner),
                Node::text("Protocol", s.protocol),
                Node::text("Endpoint", s.endpoint),
                Node::text("TopicArn", s.topic),
            ],
        )
    };
    let mut out = vec![Node::Parent("Subscriptions", listed.into_iter().map(member).collect())];
    out.extend(next.map(|n| Node::text("NextToken", n)));
    out
}

/// Reads a Publish (or a batch entry).
fn publish_input(input: &Value) -> Result<Publish, SqsError> {
    let message = required(input, "Message").map_err(|_| SqsError::sns_invalid("Empty message"))?;
    if message.is_empty() {
        return Err(SqsError::sns_invalid("Empty message"));
    }
    if !ferry_transport_sqs::attributes::valid_text(message) {
        return Err(SqsError::sns_invalid("Message contains characters outside the allowed set"));
    }
    let subject = text(input, "Subject").map(str::to_owned);
    if let Some(s) = &subject
        && (s.is_empty() || s.len() > 100 || !s.chars().all(|c| c.is_ascii() && !c.is_ascii_control()))
    {
        return Err(SqsError::sns_invalid("Subject"));
    }
    let attributes = crate::model::message_attributes(input.get("MessageAttributes"))
        .map_err(|e| SqsError::new(ErrorKind::SnsParameterValueInvalid, e.message))?;
    let size = message.len() + attributes.iter().map(crate::model::Attr::size).sum::<usize>();
    if size > MAX_PUBLISH_BYTES {
        return Err(SqsError::sns_invalid("Message too long"));
    }
    let per_protocol = match text(input, "MessageStructure") {
        None => None,
        Some("json") => {
            let Ok(Value::Object(map)) = serde_json::from_str::<Value>(message) else {
                return Err(SqsError::sns_invalid("Message Structure - JSON message body failed to parse"));
            };
            if !map.get("default").is_some_and(Value::is_string) {
                return Err(SqsError::sns_invalid("Message Structure - No default entry in JSON message body"));
            }
            Some(map)
        }
        Some(_) => return Err(SqsError::sns_invalid("MessageStructure")),
    };
    Ok(Publish { message: message.to_owned(), subject, attributes, per_protocol })
}

/// The topic a Publish names (`TopicArn`, or `TargetArn` naming a topic).
fn publish_target(input: &Value) -> Result<&str, SqsError> {
    if text(input, "PhoneNumber").is_some() {
        return Err(SqsError::sns_invalid("PhoneNumber: ferry publishes to topics only"));
    }
    text(input, "TopicArn").or_else(|| text(input, "TargetArn")).ok_or_else(|| SqsError::sns_invalid("TopicArn"))
}

/// Runs one SNS action; `Ok` is the inside of its `<…Result>` (empty for
/// actions that answer with metadata only).
pub async fn run(topics: &Arc<Topics>, base_url: &str, action: &str, input: &Value) -> Result<Vec<Node>, SqsError> {
    topics.refresh().await?;
    match action {
        "CreateTopic" => {
            let name = required(input, "Name")?;
            let arn = topics.create(name, string_map(input, "Attributes"), tags(input)).await?;
            Ok(vec![Node::text("TopicArn", arn)])
        }
        "DeleteTopic" => topics.delete(required(input, "TopicArn")?).await.map(|()| Vec::new()),
        "ListTopics" => {
            let (names, next) = page(topics.list(), text(input, "NextToken"))?;
            let member = |n: String| Node::Parent("member", vec![Node::text("TopicArn", topics.arn(&n))]);
            let mut out = vec![Node::Parent("Topics", names.into_iter().map(member).collect())];
            out.extend(next.map(|n| Node::text("NextToken", n)));
            Ok(out)
        }
        "GetTopicAttributes" => Ok(entries("Attributes", &topics.topic_attributes(required(input, "TopicArn")?)?)),
        "SetTopicAttributes" => {
            let value = text(input, "AttributeValue").unwrap_or_default();
            topics
                .set_topic_attribute(required(input, "TopicArn")?, required(input, "AttributeName")?, value)
                .await
                .map(|()| Vec::new())
        }
        "Subscribe" => {
            let endpoint = required(input, "Endpoint")?;
            let (arn, pending) = topics
                .subscribe(
                    required(input, "TopicArn")?,
                    required(input, "Protocol")?,
                    endpoint,
                    string_map(input, "Attributes"),
                    base_url,
                )
                .await?;
            let return_arn = text(input, "ReturnSubscriptionArn").is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let shown = if pending && !return_arn { "pending confirmation" } else { arn.as_str() };
            Ok(vec![Node::text("SubscriptionArn", shown)])
        }
        "ConfirmSubscription" => {
            let arn = topics.confirm(required(input, "TopicArn")?, required(input, "Token")?).await?;
            Ok(vec![Node::text("SubscriptionArn", arn)])
        }
        "Unsubscribe" => topics.unsubscribe(required(input, "SubscriptionArn")?).await.map(|()| Vec::new()),
        "ListSubscriptions" => {
            let (listed, next) = page(topics.subscriptions(None)?, text(input, "NextToken"))?;
            Ok(subscriptions_xml(listed, next))
        }
        "ListSubscriptionsByTopic" => {
            let all = topics.subscriptions(Some(required(input, "TopicArn")?))?;
            let (listed, next) = page(all, text(input, "NextToken"))?;
            Ok(subscriptions_xml(listed, next))
        }
        "GetSubscriptionAttributes" => {
            Ok(entries("Attributes", &topics.subscription_attributes(required(input, "SubscriptionArn")?)?))
        }
        "SetSubscriptionAttributes" => {
            let value = text(input, "AttributeValue").unwrap_or_default();
            topics
                .set_subscription_attribute(
                    required(input, "SubscriptionArn")?,
                    required(input, "AttributeName")?,
                    value,
                )
                .await
                .map(|()| Vec::new())
        }
        "Publish" => {
            let target = publish_target(input)?;
            let message = publish_input(input)?;
            let id = topics.publish(target, message, base_url).await?;
            Ok(vec![Node::text("MessageId", id)])
        }
        "PublishBatch" => publish_batch(topics, base_url, input).await,
        other => Err(SqsError::invalid_action(other)),
    }
}

async fn publish_batch(topics: &Arc<Topics>, base_url: &str, input: &Value) -> Result<Vec<Node>, SqsError> {
    let target = required(input, "TopicArn")?;
    let entries = match input.get("PublishBatchRequestEntries") {
        Some(Value::Array(e)) if !e.is_empty() => e,
        _ => {
            return Err(SqsError::new(
                ErrorKind::SnsEmptyBatchRequest,
                "The batch request doesn't contain any entries",
            ));
        }
    };
    if entries.len() > 10 {
        return Err(SqsError::new(
            ErrorKind::SnsTooManyEntriesInBatchRequest,
            "The batch request contains more entries than permissible",
        ));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for e in entries {
        let id = text(e, "Id").unwrap_or_default();
        if !crate::model::valid_batch_id(id) {
            return Err(SqsError::new(
                ErrorKind::SnsInvalidBatchEntryId,
                "The Id of a batch entry in a batch request doesn't abide by the specification",
            ));
        }
        if !seen.insert(id) {
            return Err(SqsError::new(
                ErrorKind::SnsBatchEntryIdsNotDistinct,
                "Two or more batch entries in the request have the same Id",
            ));
        }
        total += text(e, "Message").map_or(0, str::len);
    }
    if total > MAX_PUBLISH_BYTES {
        return Err(SqsError::new(
            ErrorKind::SnsBatchRequestTooLong,
            "The length of all the messages put together is more than the limit",
        ));
    }
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for e in entries {
        let id = text(e, "Id").unwrap_or_default();
        let result = match publish_input(e) {
            Ok(message) => topics.publish(target, message, base_url).await,
            Err(err) => Err(err),
        };
        match result {
            Ok(message_id) => {
                ok.push(Node::Parent("member", vec![Node::text("Id", id), Node::text("MessageId", message_id)]))
            }
            // A topic that does not exist fails the whole batch, as SNS does.
            Err(err) if matches!(err.kind, ErrorKind::SnsNotFound | ErrorKind::Internal) => return Err(err),
            Err(err) => {
                let fault = err.is_sender_fault().to_string();
                failed.push(Node::Parent(
                    "member",
                    vec![
                        Node::text("Id", id),
                        Node::text("Code", err.code()),
                        Node::text("Message", err.message),
                        Node::text("SenderFault", fault),
                    ],
                ));
            }
        }
    }
    Ok(vec![Node::Parent("Successful", ok), Node::Parent("Failed", failed)])
}

/// SNS's reply to `action` around `result`.
pub fn xml_result(action: &str, result: &[Node], request_id: &str) -> String {
    xml::response(action, XMLNS, request_id, |response| xml::result_nodes(response, action, result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_nest_as_sns_writes_them() {
        let v = tree(&[
            ("Name", "t"),
            ("Attributes.entry.2.key", "Policy"),
            ("Attributes.entry.2.value", "{}"),
            ("Attributes.entry.1.key", "DisplayName"),
            ("Attributes.entry.1.value", "d"),
            ("Tags.member.1.Key", "team"),
            ("Tags.member.1.Value", "ops"),
            ("MessageAttributes.entry.1.Name", "color"),
            ("MessageAttributes.entry.1.Value.DataType", "String"),
            ("MessageAttributes.entry.1.Value.StringValue", "red"),
            ("PublishBatchRequestEntries.member.2.Id", "b"),
            ("PublishBatchRequestEntries.member.1.Id", "a"),
            ("PublishBatchRequestEntries.member.1.MessageAttributes.entry.1.Name", "n"),
            ("PublishBatchRequestEntries.member.1.MessageAttributes.entry.1.Value.DataType", "Number"),
        ]);
        assert_eq!(v["Name"], "t");
        assert_eq!(v["Attributes"]["DisplayName"], "d");
        assert_eq!(v["Attributes"]["Policy"], "{}");
        assert_eq!(tags(&v).get("team").map(String::as_str), Some("ops"));
        assert_eq!(v["MessageAttributes"]["color"]["StringValue"], "red");
        assert_eq!(v["PublishBatchRequestEntries"][0]["Id"], "a");
        assert_eq!(v["PublishBatchRequestEntries"][0]["MessageAttributes"]["n"]["DataType"], "Number");
        assert_eq!(v["PublishBatchRequestEntries"][1]["Id"], "b");
    }

    #[test]
    fn publish_input_is_checked_as_sns_checks_it() {
        let ok = serde_json::json!({"Message": "hi", "Subject": "s"});
        assert_eq!(publish_input(&ok).expect("valid").subject.as_deref(), Some("s"));
        let cases = [
            (serde_json::json!({"Message": ""}), "InvalidParameter"),
            (serde_json::json!({"Message": "x", "Subject": "a\nb"}), "InvalidParameter"),
            (serde_json::json!({"Message": "x".repeat(MAX_PUBLISH_BYTES + 1)}), "InvalidParameter"),
            (serde_json::json!({"Message": "{}", "MessageStructure": "json"}), "InvalidParameter"),
            (
                serde_json::json!({"Message": "x", "MessageAttributes": {"AWS.x": {"DataType": "String", "StringValue": "v"}}}),
                "ParameterValueInvalid",
            ),
        ];
        for (input, code) in cases {
            assert_eq!(publish_input(&input).map(|_| ()).expect_err("refused").code(), code, "{input}");
        }
        let structured = serde_json::json!({"Message": r#"{"default": "d", "sqs": "q"}"#, "MessageStructure": "json"});
        let p = publish_input(&structured).expect("valid");
        assert!(p.per_protocol.is_some());
    }
}
