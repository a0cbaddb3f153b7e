//! The two wire protocols SDKs speak to SQS, read into one shape and
//! written back in their own.
//!
//! - AWS JSON 1.0: `POST /` with `X-Amz-Target: AmazonSQS.<Action>` and a
//!   JSON body; replies are JSON (`application/x-amz-json-1.0`).
//! - Query: `Action=<Action>&…` as a form POST or in a GET's query string,
//!   on `/` or on a queue's URL; replies are XML.
//!
//! A query request is turned into the JSON protocol's input shape
//! (`MessageAttribute.1.Name` … into `MessageAttributes`, numbered entries
//! into `Entries`), so the actions read one shape only; their JSON results
//! are written as the query protocol's XML by [`xml_result`].

use std::collections::BTreeMap;

use axum::http::{HeaderMap, Method, Uri};
use serde_json::{Map, Value};

use crate::actions::Action;
use crate::error::{ErrorKind, SqsError};
use crate::xml::{self, ScopeWriter, text_el};

/// The API version the query protocol's XML names.
pub const XMLNS: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Json,
    Query,
}

/// Which protocol a request speaks, from its method and headers alone.
pub fn protocol_of(method: &Method, headers: &HeaderMap) -> Protocol {
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if *method == Method::POST
        && (headers.contains_key("x-amz-target") || content_type.starts_with("application/x-amz-json"))
    {
        Protocol::Json
    } else {
        Protocol::Query
    }
}

/// A request, read.
#[derive(Debug, Clone)]
pub struct Call {
    pub protocol: Protocol,
    pub action: String,
    /// The action's input in the JSON protocol's shape.
    pub input: Value,
}

/// Reads a request in the protocol [`protocol_of`] chose.
pub fn parse(protocol: Protocol, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Result<Call, SqsError> {
    match protocol {
        Protocol::Json => {
            let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or_default();
            let action = target.strip_prefix("AmazonSQS.").ok_or_else(|| SqsError::invalid_action(target))?;
            let input = if body.iter().all(u8::is_ascii_whitespace) {
                Value::Object(Map::new())
            } else {
                serde_json::from_slice::<Value>(body).map_err(|e| {
                    SqsError::malformed(format!("Start of structure or map found where not expected: {e}"))
                })?
            };
            if !input.is_object() {
                return Err(SqsError::malformed("The request body must be a JSON object."));
            }
            Ok(Call { protocol, action: action.to_owned(), input })
        }
        Protocol::Query => {
            let mut pairs: Vec<(String, String)> =
                uri.query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
            pairs.extend(form_urlencoded::parse(body).into_owned());
            let on_queue = queue_path(uri.path());
            let action = pairs.iter().find(|(k, _)| k == "Action").map(|(_, v)| v.clone()).ok_or_else(|| {
                // A queue's URL without an action names no operation.
                if on_queue.is_some() { SqsError::unknown_operation() } else { SqsError::missing_parameter("Action") }
            })?;
            // The actions that name no queue are not served on a queue's URL.
            if on_queue.is_some() && Action::parse(&action).is_some_and(Action::names_no_queue) {
                return Err(SqsError::invalid_action(&action));
            }
            let params: Vec<(&str, &str)> =
                pairs.iter().filter(|(k, _)| !is_envelope_key(k)).map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut input = if crate::sns::is_sns(&action) { crate::sns::tree(&params) } else { nest(&params) };
            // On a queue's URL, the path names the queue.
            if let (Value::Object(map), Some(queue)) = (&mut input, on_queue)
                && !map.contains_key("QueueUrl")
            {
                map.insert("QueueUrl".into(), Value::String(queue));
            }
            Ok(Call { protocol, action, input })
        }
    }
}

/// Parameters that belong to the request, not the action (signature v2/v4
/// query auth, the version).
fn is_envelope_key(key: &str) -> bool {
    key == "Action"
        || key == "Version"
        || key.starts_with("X-Amz-")
        || key.starts_with("AWSAccessKeyId")
        || key == "Signature"
        || key == "SignatureMethod"
        || key == "SignatureVersion"
        || key == "Timestamp"
        || key == "Expires"
}

/// `/{account}/{name}`, or `/queue/{region}/{account}/{name}` for a queue
/// of another region, as a path-only queue URL.
fn queue_path(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        [account, name] | ["queue", _, account, name] if !account.is_empty() && !name.is_empty() => {
            Some(path.to_owned())
        }
        _ => None,
    }
}

/// A query request's result as AWS answers it in JSON (`Accept:
/// application/json`): `{"<Action>Response": {"<Action>Result": …,
/// "ResponseMetadata": {"RequestId": …}}}`, the result in the JSON
/// protocol's shape except that its lists start with a lower-case letter
/// (`queueUrls`, `messages`), as AWS writes them there.
pub fn query_json_result(action: &str, result: Value, request_id: &str) -> Value {
    let result = match result {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| match value {
                    Value::Array(_) => (lower_first(&key), value),
                    _ => (key, value),
                })
                .collect(),
        ),
        other => other,
    };
    let mut response = Map::new();
    response.insert(format!("{action}Result"), result);
    response.insert("ResponseMetadata".into(), serde_json::json!({"RequestId": request_id}));
    serde_json::json!({ format!("{action}Response"): response })
}

fn lower_first(key: &str) -> String {
    let mut chars = key.chars();
    chars.next().map_or_else(String::new, |c| c.to_ascii_lowercase().to_string() + chars.as_str())
}

/// Numbered query lists and maps, as the JSON shape has them:
/// `(prefix, JSON key, how)`.
enum Shape {
    /// `Prefix.N` → a list of strings.
    List,
    /// `Prefix.N.Name` / `Prefix.N.Value` → a map of strings (`key`/`value`
    /// are the member names).
    Map(&'static str, &'static str),
    /// `Prefix.N.Name` / `Prefix.N.Value.*` → a map of nested values.
    NestedMap,
    /// `Prefix.N.*` → a list of nested values.
    Entries,
}

const SHAPES: &[(&str, &str, Shape)] = &[
    ("AttributeName", "AttributeNames", Shape::List),
    ("MessageAttributeName", "MessageAttributeNames", Shape::List),
    ("MessageSystemAttributeName", "MessageSystemAttributeNames", Shape::List),
    ("TagKey", "TagKeys", Shape::List),
    ("AWSAccountId", "AWSAccountIds", Shape::List),
    ("ActionName", "Actions", Shape::List),
    ("Attribute", "Attributes", Shape::Map("Name", "Value")),
    ("Tag", "Tags", Shape::Map("Key", "Value")),
    ("MessageAttribute", "MessageAttributes", Shape::NestedMap),
    ("MessageSystemAttribute", "MessageSystemAttributes", Shape::NestedMap),
    ("SendMessageBatchRequestEntry", "Entries", Shape::Entries),
    ("DeleteMessageBatchRequestEntry", "Entries", Shape::Entries),
    ("ChangeMessageVisibilityBatchRequestEntry", "Entries", Shape::Entries),
];

/// The members of numbered parameters: index -> (the rest of the key, value).
type Numbered<'a> = BTreeMap<u32, Vec<(&'a str, &'a str)>>;

/// Query parameters (`a.b.c` = v) into the JSON protocol's shape.
fn nest(pairs: &[(&str, &str)]) -> Value {
    let mut plain = Map::new();
    let mut numbered: BTreeMap<&str, Numbered<'_>> = BTreeMap::new();
    for &(key, value) in pairs {
        let mut parts = key.splitn(3, '.');
        let head = parts.next().unwrap_or_default();
        let shape = SHAPES.iter().find(|(prefix, _, _)| *prefix == head);
        match (shape, parts.next().and_then(|n| n.parse::<u32>().ok())) {
            (Some((prefix, _, _)), Some(index)) => {
                numbered.entry(prefix).or_default().entry(index).or_default().push((parts.next().unwrap_or(""), value));
            }
            _ => {
                plain.insert(key.to_owned(), Value::String(value.to_owned()));
            }
        }
    }
    for (prefix, items) in numbered {
        let Some((_, json_key, shape)) = SHAPES.iter().find(|(p, _, _)| *p == prefix) else {
            continue;
        };
        let value = match shape {
            Shape::List => Value::Array(
                items
                    .values()
                    .filter_map(|v| v.iter().find(|(rest, _)| rest.is_empty()))
                    .map(|(_, v)| Value::from(*v))
                    .collect(),
            ),
            Shape::Map(k, v) => {
                let mut map = Map::new();
                for fields in items.values() {
                    let get = |name: &str| fields.iter().find(|(rest, _)| *rest == name).map(|(_, v)| *v);
                    if let Some(key) = get(k) {
                        map.insert(key.to_owned(), Value::from(get(v).unwrap_or_default()));
                    }
                }
                Value::Object(map)
            }
            Shape::NestedMap => {
                let mut map = Map::new();
                for fields in items.values() {
                    let Some((_, name)) = fields.iter().find(|(rest, _)| *rest == "Name") else {
                        continue;
                    };
                    let values: Vec<(&str, &str)> =
                        fields.iter().filter_map(|(rest, v)| Some((rest.strip_prefix("Value.")?, *v))).collect();
                    let inner = nest(&values);
                    map.insert((*name).to_owned(), inner);
                }
                Value::Object(map)
            }
            Shape::Entries => Value::Array(items.values().map(|fields| nest(fields)).collect()),
        };
        plain.insert((*json_key).to_owned(), value);
    }
    Value::Object(plain)
}

/// The XML element name of one entry of a batch result list.
fn entry_name(action: &str, list: &str) -> String {
    match list {
        "Failed" => "BatchResultErrorEntry".to_owned(),
        _ => format!("{action}ResultEntry"),
    }
}

/// The text of a scalar result value.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `<outer><Name>name</Name><Value>value</Value></outer>`, the shape of an
/// attribute or a tag.
fn pair_el(scope: &mut ScopeWriter, outer: &str, (name_el, name): (&str, &str), value: &Value) {
    let mut pair = scope.start_el(outer).finish();
    text_el(&mut pair, name_el, name);
    text_el(&mut pair, "Value", &scalar(value));
}

fn xml_fields(scope: &mut ScopeWriter, action: &str, map: &Map<String, Value>) {
    for (key, value) in map {
        match (key.as_str(), value) {
            ("QueueUrls" | "queueUrls", Value::Array(urls)) => {
                for url in urls {
                    text_el(scope, "QueueUrl", &scalar(url));
                }
            }
            ("Attributes", Value::Object(attrs)) => {
                for (name, v) in attrs {
                    pair_el(scope, "Attribute", ("Name", name), v);
                }
            }
            ("Tags", Value::Object(tags)) => {
                for (name, v) in tags {
                    pair_el(scope, "Tag", ("Key", name), v);
                }
            }
            ("MessageAttributes", Value::Object(attrs)) => {
                for (name, v) in attrs {
                    let mut attribute = scope.start_el("MessageAttribute").finish();
                    text_el(&mut attribute, "Name", name);
                    let mut inner_scope = attribute.start_el("Value").finish();
                    if let Value::Object(inner) = v {
                        xml_fields(&mut inner_scope, action, inner);
                    }
                }
            }
            ("Messages", Value::Array(messages)) => {
                for m in messages {
                    let mut message = scope.start_el("Message").finish();
                    if let Value::Object(inner) = m {
                        xml_fields(&mut message, action, inner);
                    }
                }
            }
            ("Successful" | "Failed", Value::Array(entries)) => {
                let name = entry_name(action, key);
                for e in entries {
                    let mut entry = scope.start_el(&name).finish();
                    if let Value::Object(inner) = e {
                        xml_fields(&mut entry, action, inner);
                    }
                }
            }
            (_, Value::Object(inner)) => xml_fields(&mut scope.start_el(key).finish(), action, inner),
            (_, Value::Array(items)) => {
                for item in items {
                    text_el(scope, key, &scalar(item));
                }
            }
            _ => text_el(scope, key, &scalar(value)),
        }
    }
}

/// The query protocol's reply to `action` with the JSON `result`.
pub fn xml_result(action: Action, result: &Value, request_id: &str) -> String {
    let name = action.name();
    xml::response(name, XMLNS, request_id, |response| {
        let result_name = format!("{name}Result");
        if let Value::Object(map) = result
            && !map.is_empty()
        {
            xml_fields(&mut response.start_el(&result_name).finish(), name, map);
        } else if action.result_always_present() {
            response.start_el(&result_name).finish();
        }
    })
}

/// The query protocol's error reply, in the namespace `xmlns` (SQS's
/// [`XMLNS`] or SNS's).
pub fn xml_error(xmlns: &str, err: &SqsError, request_id: &str) -> String {
    if err.kind == ErrorKind::UnknownOperation {
        // What SQS answers on a queue's URL without an action.
        return "<UnknownOperationException/>".to_owned();
    }
    // The query protocol names the API version a queue is missing from.
    let message = if err.kind == ErrorKind::NonExistentQueue {
        "The specified queue does not exist for this wsdl version."
    } else {
        err.message.as_str()
    };
    xml::error(xmlns, err.fault(), err.code(), message, request_id)
}

/// The JSON protocol's error body.
pub fn json_error(err: &SqsError) -> Value {
    let kind = if err.kind == ErrorKind::InvalidAction {
        "com.amazon.coral.service#UnknownOperationException".to_owned()
    } else {
        format!("com.amazonaws.sqs#{}", err.shape())
    };
    serde_json::json!({"__type": kind, "message": err.message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_take_the_json_shape() {
        let pairs = [
            ("QueueUrl", "http://h/000000000000/q"),
            ("MessageBody", "hi"),
            ("MessageAttribute.1.Name", "color"),
            ("MessageAttribute.1.Value.DataType", "String"),
            ("MessageAttribute.1.Value.StringValue", "red"),
            ("AttributeName.2", "SentTimestamp"),
            ("AttributeName.1", "All"),
            ("Attribute.1.Name", "VisibilityTimeout"),
            ("Attribute.1.Value", "5"),
            ("SendMessageBatchRequestEntry.2.Id", "b"),
            ("SendMessageBatchRequestEntry.1.Id", "a"),
            ("SendMessageBatchRequestEntry.1.MessageAttribute.1.Name", "n"),
            ("SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType", "Number"),
            ("SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue", "1"),
        ];
        let v = nest(&pairs);
        assert_eq!(v["MessageAttributes"]["color"]["StringValue"], "red");
        assert_eq!(v["AttributeNames"], serde_json::json!(["All", "SentTimestamp"]));
        assert_eq!(v["Attributes"]["VisibilityTimeout"], "5");
        assert_eq!(v["Entries"][0]["Id"], "a");
        assert_eq!(v["Entries"][0]["MessageAttributes"]["n"]["DataType"], "Number");
        assert_eq!(v["Entries"][1]["Id"], "b");
    }

    #[test]
    fn results_and_errors_are_written_as_query_xml() {
        let result = serde_json::json!({"Messages": [{"MessageId": "m", "Body": "<a&b>",
            "Attributes": {"SentTimestamp": "1"},
            "MessageAttributes": {"c": {"DataType": "String", "StringValue": "r"}}}]});
        let xml = xml_result(Action::ReceiveMessage, &result, "rid");
        assert!(xml.contains("<ReceiveMessageResult><Message>"), "{xml}");
        assert!(xml.contains("<MessageId>m</MessageId></Message></ReceiveMessageResult>"), "{xml}");
        assert!(xml.contains("<Body>&lt;a&amp;b&gt;</Body>"), "{xml}");
        assert!(xml.contains("<Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute>"), "{xml}");
        assert!(xml.contains("<MessageAttribute><Name>c</Name><Value><DataType>String</DataType><StringValue>r</StringValue></Value></MessageAttribute>"), "{xml}");
        let batch =
            serde_json::json!({"Successful": [{"Id": "a"}], "Failed": [{"Id": "b", "Code": "X", "SenderFault": true}]});
        let xml = xml_result(Action::DeleteMessageBatch, &batch, "rid");
        assert!(xml.contains("<DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>"), "{xml}");
        assert!(
            xml.contains(
                "<BatchResultErrorEntry><Code>X</Code><Id>b</Id><SenderFault>true</SenderFault></BatchResultErrorEntry>"
            ),
            "{xml}"
        );
        let xml = xml_error(XMLNS, &SqsError::no_queue(), "rid");
        assert!(xml.contains("<Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code>"), "{xml}");
        assert_eq!(json_error(&SqsError::no_queue())["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
    }

    #[test]
    fn a_body_with_line_breaks_reaches_the_client_as_sent() {
        let body = "line\r\nnext\rand\u{85}then\u{2028}<&>";
        let xml = xml_result(Action::ReceiveMessage, &serde_json::json!({"Messages": [{"Body": body}]}), "rid");
        let read = crate::xml::tests::read_text(&xml, &["ReceiveMessageResult", "Message", "Body"]);
        assert_eq!(read, body);
        assert!(!xml.contains(['\r', '\u{85}', '\u{2028}']), "{xml:?}");
    }
}
