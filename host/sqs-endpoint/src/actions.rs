//! The SQS actions: input in the JSON protocol's shape in, result in the
//! same shape out (see [`crate::protocol`]).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::engine::{Engine, Outgoing, ReceiveOptions, Received};
use crate::error::{ErrorKind, SqsError};
use crate::model::{
    COMPUTED_ATTRIBUTES, MAX_MESSAGE_BYTES, QUEUE_ATTRIBUTES, md5_of, md5_of_trace, message_attributes, trace_header,
    wanted,
};

/// What an action knows of the request beyond its input.
pub struct Context<'a> {
    pub engine: &'a Engine,
    /// `scheme://host[:port]` queue URLs start with.
    pub base_url: &'a str,
    /// The caller, as SenderId reports it.
    pub sender_id: &'a str,
    /// The request's `X-Amzn-Trace-Id` header: the AWSTraceHeader of the
    /// messages it sends that name none in `MessageSystemAttributes`.
    pub trace_header: Option<&'a str>,
    /// The region the request was signed for (the endpoint's own when it
    /// was not signed): a queue it names by `QueueName` lives there, and
    /// ListQueues lists that region's.
    pub region: &'a str,
}

impl Context<'_> {
    pub fn queue_url(&self, key: &str) -> String {
        self.engine.identity.url(self.base_url, key)
    }

    /// The key of the queue a `QueueName` names, in the request's region.
    fn named(&self, name: &str) -> String {
        self.engine.identity.key(self.region, name)
    }
}

/// The key of the queue a call's `QueueUrl` names ([`Identity::key_of_url`]).
///
/// [`Identity::key_of_url`]: crate::records::Identity::key_of_url
pub fn queue_name(identity: &crate::records::Identity, input: &Value) -> Result<String, SqsError> {
    let url = text(input, "QueueUrl")?.ok_or_else(|| SqsError::missing_parameter("QueueUrl"))?;
    identity.key_of_url(&url).ok_or_else(SqsError::no_queue)
}

fn text(input: &Value, key: &str) -> Result<Option<String>, SqsError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(SqsError::malformed(format!("{key} must be a string, not {other}"))),
    }
}

fn required(input: &Value, key: &str) -> Result<String, SqsError> {
    text(input, key)?.ok_or_else(|| SqsError::missing_parameter(key))
}

/// An integer given as a JSON number or (query) a string.
fn int(input: &Value, key: &str) -> Result<Option<i64>, SqsError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            n.as_i64().map(Some).ok_or_else(|| SqsError::invalid_value(key, n, "must be an integer"))
        }
        Some(Value::String(s)) => {
            s.trim().parse().map(Some).map_err(|_| SqsError::invalid_value(key, s, "must be an integer"))
        }
        Some(other) => Err(SqsError::invalid_value(key, other, "must be an integer")),
    }
}

/// A list of strings; a member of another type, or an item that is not a
/// string, is refused (SerializationException), never skipped.
fn strings(input: &Value, key: &str) -> Result<Vec<String>, SqsError> {
    let Some(items) = crate::model::as_list(input.get(key), key)? else { return Ok(Vec::new()) };
    items.iter().map(|item| crate::model::as_text(Some(item), key).map(|s| s.unwrap_or_default().to_owned())).collect()
}

/// A map of names to values (numbers and booleans as their JSON text, as
/// the SDKs send them); a member that is not a map is refused.
fn string_map(input: &Value, key: &str) -> Result<BTreeMap<String, String>, SqsError> {
    let Some(map) = crate::model::as_map(input.get(key), key)? else { return Ok(BTreeMap::new()) };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
            other => Err(SqsError::malformed(format!("{key}.{k} must be a string, not {other}"))),
        })
        .collect()
}

/// The `Attributes` of CreateQueue and SetQueueAttributes, with the
/// boolean ones in the case AWS keeps them: AWS reads `True` and `FALSE`
/// as `true` and `false`, and answers with the lower-case form.
fn queue_attributes(input: &Value) -> Result<BTreeMap<String, String>, SqsError> {
    let mut attributes = string_map(input, "Attributes")?;
    for name in crate::model::BOOLEAN_ATTRIBUTES {
        if let Some(value) = attributes.get_mut(*name)
            && (value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false"))
        {
            value.make_ascii_lowercase();
        }
    }
    Ok(attributes)
}

/// Declares [`Action`] with one variant per name, and its names.
macro_rules! sqs_actions {
    ($($name:ident),* $(,)?) => {
        /// The SQS actions the endpoint serves.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Action {
            $($name),*
        }

        impl Action {
            /// Every action, in the order of the API reference.
            pub const ALL: &'static [Action] = &[$(Action::$name),*];

            /// The action's name on the wire (`SendMessage`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Action::$name => stringify!($name)),*
                }
            }
        }
    };
}

sqs_actions!(
    CreateQueue,
    GetQueueUrl,
    ListQueues,
    DeleteQueue,
    PurgeQueue,
    GetQueueAttributes,
    SetQueueAttributes,
    TagQueue,
    UntagQueue,
    ListQueueTags,
    SendMessage,
    SendMessageBatch,
    ReceiveMessage,
    DeleteMessage,
    DeleteMessageBatch,
    ChangeMessageVisibility,
    ChangeMessageVisibilityBatch,
    ListDeadLetterSourceQueues,
    AddPermission,
    RemovePermission,
);

impl Action {
    /// The action of that name (exactly as SQS spells it).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.name() == name)
    }

    /// Whether it names no queue: the query protocol serves it only on the
    /// endpoint's own URL, not on a queue's.
    pub fn names_no_queue(self) -> bool {
        matches!(self, Action::CreateQueue | Action::ListQueues)
    }

    /// Whether its query reply has a Result element even when empty.
    pub fn result_always_present(self) -> bool {
        matches!(self, Action::ReceiveMessage | Action::ListQueues | Action::GetQueueAttributes | Action::ListQueueTags)
    }
}

/// Runs one action.
pub async fn run(cx: &Context<'_>, action: Action, input: &Value) -> Result<Value, SqsError> {
    use Action::*;
    match action {
        CreateQueue => create_queue(cx, input).await,
        GetQueueUrl => {
            let name = required(input, "QueueName")?;
            let key = cx.named(&name);
            if crate::model::is_internal(&name) || name.contains('/') || !cx.engine.exists(&key).await? {
                return Err(SqsError::no_queue());
            }
            Ok(json!({"QueueUrl": cx.queue_url(&key)}))
        }
        ListQueues => list_queues(cx, input).await,
        DeleteQueue => {
            cx.engine.delete(&queue_name(&cx.engine.identity, input)?).await?;
            Ok(json!({}))
        }
        PurgeQueue => {
            cx.engine.purge(&queue_name(&cx.engine.identity, input)?).await?;
            Ok(json!({}))
        }
        GetQueueAttributes => get_attributes(cx, input).await,
        SetQueueAttributes => {
            cx.engine.set_attributes(&queue_name(&cx.engine.identity, input)?, queue_attributes(input)?).await?;
            Ok(json!({}))
        }
        TagQueue => {
            cx.engine.retag(&queue_name(&cx.engine.identity, input)?, string_map(input, "Tags")?, &[]).await?;
            Ok(json!({}))
        }
        UntagQueue => {
            cx.engine
                .retag(&queue_name(&cx.engine.identity, input)?, BTreeMap::new(), &strings(input, "TagKeys")?)
                .await?;
            Ok(json!({}))
        }
        ListQueueTags => {
            let tags = cx.engine.tags(&queue_name(&cx.engine.identity, input)?).await?;
            Ok(if tags.is_empty() { json!({}) } else { json!({"Tags": tags}) })
        }
        SendMessage => send_message(cx, input).await,
        SendMessageBatch => send_batch(cx, input).await,
        ReceiveMessage => receive(cx, input).await,
        DeleteMessage => {
            let name = queue_name(&cx.engine.identity, input)?;
            let handle = required(input, "ReceiptHandle")?;
            for answer in cx.engine.delete_messages(&name, &[handle]).await? {
                answer?;
            }
            Ok(json!({}))
        }
        DeleteMessageBatch => delete_batch(cx, input).await,
        ChangeMessageVisibility => {
            let name = queue_name(&cx.engine.identity, input)?;
            let handle = required(input, "ReceiptHandle")?;
            let timeout =
                int(input, "VisibilityTimeout")?.ok_or_else(|| SqsError::missing_parameter("VisibilityTimeout"))?;
            cx.engine.change_visibility(&name, &handle, timeout).await?;
            Ok(json!({}))
        }
        ChangeMessageVisibilityBatch => change_visibility_batch(cx, input).await,
        ListDeadLetterSourceQueues => dead_letter_sources(cx, input).await,
        AddPermission => add_permission(cx, input).await,
        RemovePermission => remove_permission(cx, input).await,
    }
}

async fn create_queue(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = required(input, "QueueName")?;
    if !crate::model::valid_queue_name(&name) {
        return Err(SqsError::bad_queue_name());
    }
    let mut tags = string_map(input, "tags")?;
    tags.extend(string_map(input, "Tags")?);
    let key = cx.named(&name);
    cx.engine.create(&key, queue_attributes(input)?, tags).await?;
    Ok(json!({"QueueUrl": cx.queue_url(&key)}))
}

async fn list_queues(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let prefix = text(input, "QueueNamePrefix")?.unwrap_or_default();
    // The request's region's queues only: in the endpoint's own region the
    // keys without a region part.
    let mut names = cx.engine.list(&cx.named(&prefix)).await?;
    let home = cx.region == cx.engine.identity.region;
    names.retain(|n| !crate::model::is_internal(n) && (!home || !n.contains('/')));
    let (page, next) = page(input, &names)?;
    let mut out = Map::new();
    if !page.is_empty() {
        out.insert("QueueUrls".into(), page.iter().map(|n| Value::from(cx.queue_url(n))).collect());
    }
    if let Some(token) = next {
        out.insert("NextToken".into(), Value::from(token));
    }
    Ok(Value::Object(out))
}

/// One page of `names` after `NextToken` (the last name of the page
/// before), `MaxResults` at a time (1 to 1000; every name without it, and
/// then no token).
fn page<'n>(input: &Value, names: &'n [String]) -> Result<(Vec<&'n String>, Option<String>), SqsError> {
    let max = int(input, "MaxResults")?;
    if let Some(m) = max
        && !(1..=1000).contains(&m)
    {
        return Err(SqsError::invalid_value("MaxResults", m, "must be between 1 and 1000"));
    }
    let after = text(input, "NextToken")?;
    let start = after.as_ref().map_or(0, |token| names.iter().position(|n| n > token).unwrap_or(names.len()));
    let page: Vec<&String> = names[start..].iter().take(max.map_or(1000, |m| m as usize)).collect();
    let next = (max.is_some() && start + page.len() < names.len()).then(|| page.last().map(|n| (*n).clone())).flatten();
    Ok((page, next))
}

/// The queues whose redrive policy names this queue as their dead-letter
/// queue (`queueUrls`, paged as ListQueues is).
async fn dead_letter_sources(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let arn = cx.engine.attributes(&name).await?.remove("QueueArn").unwrap_or_default();
    let mut sources = Vec::new();
    for candidate in cx.engine.list("").await? {
        if crate::model::is_internal(&candidate) {
            continue;
        }
        // A queue deleted meanwhile is simply not a source.
        let Ok(attributes) = cx.engine.attributes(&candidate).await else { continue };
        let target = attributes
            .get("RedrivePolicy")
            .and_then(|p| serde_json::from_str::<Value>(p).ok())
            .and_then(|p| p.get("deadLetterTargetArn").and_then(Value::as_str).map(str::to_owned));
        if target.as_deref() == Some(arn.as_str()) {
            sources.push(candidate);
        }
    }
    let (page, next) = page(input, &sources)?;
    let mut out = Map::new();
    out.insert("queueUrls".into(), page.iter().map(|n| Value::from(cx.queue_url(n))).collect());
    if let Some(token) = next {
        out.insert("NextToken".into(), Value::from(token));
    }
    Ok(Value::Object(out))
}

/// The actions AddPermission may grant (the rest are the owner's).
const GRANTABLE: &[&str] = &[
    "*",
    "ChangeMessageVisibility",
    "DeleteMessage",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "SendMessage",
];

/// The queue's policy document, or a new one for it.
fn policy_of(attributes: &BTreeMap<String, String>) -> Map<String, Value> {
    let arn = attributes.get("QueueArn").cloned().unwrap_or_default();
    attributes
        .get("Policy")
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .and_then(|p| p.as_object().cloned())
        .unwrap_or_else(|| {
            let mut policy = Map::new();
            policy.insert("Version".into(), Value::from("2012-10-17"));
            policy.insert("Id".into(), Value::from(format!("{arn}/SQSDefaultPolicy")));
            policy
        })
}

fn statements(policy: &mut Map<String, Value>) -> &mut Vec<Value> {
    let entry = policy.entry("Statement").or_insert_with(|| Value::Array(Vec::new()));
    if !entry.is_array() {
        *entry = Value::Array(Vec::new());
    }
    entry.as_array_mut().expect("an array")
}

fn has_label(statement: &Value, label: &str) -> bool {
    statement.get("Sid").and_then(Value::as_str) == Some(label)
}

/// One value, or the list of them, as AWS writes a policy.
fn one_or_list(mut items: Vec<String>) -> Value {
    if items.len() == 1 { Value::from(items.remove(0)) } else { Value::from(items) }
}

/// Adds a statement (`Sid` = the label) allowing the accounts the actions
/// on this queue, to the queue's `Policy`.
async fn add_permission(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let label = required(input, "Label")?;
    let accounts = strings(input, "AWSAccountIds")?;
    if accounts.is_empty() {
        return Err(SqsError::missing_parameter("AWSAccountIds"));
    }
    let actions = strings(input, "Actions")?;
    if actions.is_empty() {
        return Err(SqsError::missing_parameter("Actions"));
    }
    if let Some(bad) = actions.iter().find(|a| !GRANTABLE.contains(&a.as_str())) {
        return Err(SqsError::invalid_value(
            "ActionName",
            format!("SQS:{bad}"),
            "Only the queue owner is allowed to invoke this action",
        ));
    }
    let attributes = cx.engine.attributes(&name).await?;
    let mut policy = policy_of(&attributes);
    if statements(&mut policy).iter().any(|s| has_label(s, &label)) {
        return Err(SqsError::invalid_value("Label", &label, "Already exists"));
    }
    let mut statement = Map::new();
    statement.insert("Sid".into(), Value::from(label.as_str()));
    statement.insert("Effect".into(), Value::from("Allow"));
    let principals = accounts.iter().map(|a| format!("arn:aws:iam::{a}:root")).collect();
    statement.insert("Principal".into(), serde_json::json!({"AWS": one_or_list(principals)}));
    statement.insert("Action".into(), one_or_list(actions.iter().map(|a| format!("SQS:{a}")).collect()));
    statement.insert("Resource".into(), Value::from(attributes.get("QueueArn").cloned().unwrap_or_default()));
    statements(&mut policy).push(Value::Object(statement));
    let document = Value::Object(policy).to_string();
    cx.engine.set_attributes(&name, BTreeMap::from([("Policy".to_owned(), document)])).await?;
    Ok(json!({}))
}

/// Removes the statement with this label; the policy goes with its last
/// statement.
async fn remove_permission(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let label = required(input, "Label")?;
    let mut policy = policy_of(&cx.engine.attributes(&name).await?);
    let statements = statements(&mut policy);
    let before = statements.len();
    statements.retain(|s| !has_label(s, &label));
    if statements.len() == before {
        return Err(SqsError::invalid_value("Label", &label, "can't find label on existing policy"));
    }
    let document = if statements.is_empty() { String::new() } else { Value::Object(policy).to_string() };
    cx.engine.set_attributes(&name, BTreeMap::from([("Policy".to_owned(), document)])).await?;
    Ok(json!({}))
}

async fn get_attributes(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let all = cx.engine.attributes(&name).await?;
    let asked = strings(input, "AttributeNames")?;
    for a in &asked {
        let known =
            a == "All" || QUEUE_ATTRIBUTES.iter().any(|r| r.name == a) || COMPUTED_ATTRIBUTES.contains(&a.as_str());
        if !known {
            return Err(SqsError::invalid_attribute_name(a));
        }
    }
    let chosen: Map<String, Value> = all
        .into_iter()
        .filter(|(k, _)| asked.iter().any(|a| a == "All" || a == k))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    Ok(if chosen.is_empty() { json!({}) } else { json!({"Attributes": chosen}) })
}

/// A message of a SendMessage or a batch entry, checked against the queue
/// (`kind` as [`crate::Engine::queue_kind`] tells it).
fn outgoing(cx: &Context<'_>, kind: (bool, bool, i64), input: &Value) -> Result<Outgoing, SqsError> {
    let (fifo, content_dedup, max_size) = kind;
    let body = text(input, "MessageBody")?.ok_or_else(|| SqsError::missing_parameter("MessageBody"))?;
    if body.is_empty() {
        return Err(SqsError::missing_parameter("MessageBody"));
    }
    if !ferry_transport_sqs::attributes::valid_text(&body) {
        return Err(SqsError::invalid_contents());
    }
    let attributes = message_attributes(input.get("MessageAttributes"))?;
    let trace = trace_header(input.get("MessageSystemAttributes"))?.or_else(|| cx.trace_header.map(str::to_owned));
    let size = body.len() + attributes.iter().map(crate::model::Attr::size).sum::<usize>();
    if size as i64 > max_size {
        return Err(SqsError::invalid_parameter(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {max_size} bytes."
        )));
    }
    let delay = int(input, "DelaySeconds")?;
    if let Some(d) = delay {
        // A FIFO queue takes no per-message delay, but 0 asks for none.
        if fifo && d != 0 {
            return Err(SqsError::invalid_value(
                "DelaySeconds",
                d,
                "The request include parameter that is not valid for this queue type",
            ));
        }
        if !(0..=900).contains(&d) {
            return Err(SqsError::invalid_value("DelaySeconds", d, "must be between 0 and 900, if provided"));
        }
    }
    let group = text(input, "MessageGroupId")?;
    let mut dedup_id = text(input, "MessageDeduplicationId")?;
    for (key, value) in [("MessageGroupId", &group), ("MessageDeduplicationId", &dedup_id)] {
        if let Some(v) = value
            && (v.is_empty() || v.len() > 128 || !v.chars().all(|c| c.is_ascii_graphic()))
        {
            return Err(SqsError::invalid_parameter(format!(
                "Value {v} for parameter {key} is invalid. Reason: {key} can only include alphanumeric and \
                 punctuation characters. 1 to 128 in length."
            )));
        }
    }
    if fifo {
        if group.is_none() {
            return Err(SqsError::missing_parameter("MessageGroupId"));
        }
        if dedup_id.is_none() {
            if !content_dedup {
                return Err(SqsError::invalid_parameter(
                    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId \
                     provided explicitly",
                ));
            }
            dedup_id = Some(sha256_hex(body.as_bytes()));
        }
    } else if let Some(id) = &dedup_id {
        return Err(SqsError::invalid_value(
            "MessageDeduplicationId",
            id,
            "The request includes a parameter that is not valid for this queue type",
        ));
    }
    Ok(Outgoing {
        body,
        attributes,
        trace_header: trace,
        delay_s: delay,
        group,
        dedup_id,
        sender_id: cx.sender_id.to_owned(),
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The digests and ids a send answers with; the system attributes' digest
/// only when the request named them (`asked`), not for a trace header that
/// came as the `X-Amzn-Trace-Id` HTTP header.
fn sent(message: &Outgoing, id: &str, sequence: Option<u64>, asked: bool) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("MD5OfMessageBody".into(), ferry_transport_sqs::attributes::md5_of_body(&message.body).into());
    if let Some(md5) = md5_of(&message.attributes) {
        out.insert("MD5OfMessageAttributes".into(), md5.into());
    }
    if let Some(trace) = message.trace_header.as_ref().filter(|_| asked) {
        out.insert("MD5OfMessageSystemAttributes".into(), md5_of_trace(trace).into());
    }
    out.insert("MessageId".into(), id.into());
    if let Some(seq) = sequence {
        out.insert("SequenceNumber".into(), crate::model::sequence_number(seq).into());
    }
    out
}

async fn send_message(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let message = outgoing(cx, cx.engine.queue_kind(&name).await?, input)?;
    let result = cx.engine.send(&name, vec![message.clone()]).await?;
    let first = result.first().ok_or_else(|| SqsError::internal("no result for the message"))?;
    let asked = input.get("MessageSystemAttributes").is_some();
    Ok(Value::Object(sent(&message, &first.message_id, first.sequence, asked)))
}

/// The checks every batch gets before any entry runs.
fn batch_entries<'v>(input: &'v Value, entry: &str) -> Result<&'v Vec<Value>, SqsError> {
    let entries = match input.get("Entries") {
        Some(Value::Array(entries)) if !entries.is_empty() => entries,
        _ => return Err(SqsError::empty_batch(entry)),
    };
    if entries.len() > 10 {
        return Err(SqsError::too_many_entries(entries.len()));
    }
    let mut seen = HashSet::new();
    for e in entries {
        let id = e.get("Id").and_then(Value::as_str).unwrap_or_default();
        if !crate::model::valid_batch_id(id) {
            return Err(SqsError::invalid_batch_id());
        }
        if !seen.insert(id) {
            return Err(SqsError::ids_not_distinct(id));
        }
    }
    Ok(entries)
}

fn failed(id: &str, err: &SqsError) -> Value {
    json!({"Id": id, "SenderFault": err.is_sender_fault(), "Code": err.code(), "Message": err.message})
}

/// A batch's answer; AWS leaves out `Failed` when nothing failed.
fn batch_result(successful: Vec<Value>, failures: Vec<Value>) -> Value {
    if failures.is_empty() {
        json!({"Successful": successful})
    } else {
        json!({"Successful": successful, "Failed": failures})
    }
}

async fn send_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let entries = batch_entries(input, "SendMessageBatchRequestEntry")?;
    let kind = cx.engine.queue_kind(&name).await?;
    let total: usize = entries
        .iter()
        .map(|e| {
            e.get("MessageBody").and_then(Value::as_str).map_or(0, str::len)
                + message_attributes(e.get("MessageAttributes"))
                    .map_or(0, |a| a.iter().map(crate::model::Attr::size).sum())
        })
        .sum();
    if total > MAX_MESSAGE_BYTES {
        return Err(SqsError::batch_too_long(total, MAX_MESSAGE_BYTES));
    }
    // On a FIFO queue an entry without its group, or without a
    // deduplication id where the queue does not make one, fails the whole
    // call (as AWS does), not only that entry.
    let (fifo, content_dedup, _) = kind;
    if fifo {
        for e in entries.iter() {
            if e.get("MessageGroupId").is_none_or(Value::is_null) {
                return Err(SqsError::invalid_parameter("The request must contain the parameter MessageGroupId."));
            }
            if !content_dedup && e.get("MessageDeduplicationId").is_none_or(Value::is_null) {
                return Err(SqsError::invalid_parameter(
                    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId \
                     provided explicitly",
                ));
            }
        }
    }
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    for e in entries {
        let id = e.get("Id").and_then(Value::as_str).unwrap_or_default().to_owned();
        match outgoing(cx, kind, e) {
            Ok(m) => ok.push((id, m, e.get("MessageSystemAttributes").is_some())),
            Err(err) => failures.push(failed(&id, &err)),
        }
    }
    let results = cx.engine.send(&name, ok.iter().map(|(_, m, _)| m.clone()).collect()).await?;
    let successful = ok
        .iter()
        .zip(results)
        .map(|((id, m, asked), r)| {
            let mut entry = sent(m, &r.message_id, r.sequence, *asked);
            entry.insert("Id".into(), id.clone().into());
            Value::Object(entry)
        })
        .collect();
    Ok(batch_result(successful, failures))
}

const SYSTEM_ATTRIBUTES: &[&str] = &[
    "All",
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
];

async fn receive(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let max = int(input, "MaxNumberOfMessages")?.unwrap_or(1);
    if !(1..=10).contains(&max) {
        return Err(SqsError::invalid_value("MaxNumberOfMessages", max, "Must be between 1 and 10, if provided"));
    }
    let visibility = int(input, "VisibilityTimeout")?;
    if let Some(v) = visibility
        && !(0..=43_200).contains(&v)
    {
        return Err(SqsError::invalid_value("VisibilityTimeout", v, "Must be >= 0 and <= 43200, if provided"));
    }
    let wait = int(input, "WaitTimeSeconds")?;
    if let Some(w) = wait
        && !(0..=20).contains(&w)
    {
        return Err(SqsError::invalid_value("WaitTimeSeconds", w, "Must be >= 0 and <= 20, if provided"));
    }
    let mut system = strings(input, "AttributeNames")?;
    system.extend(strings(input, "MessageSystemAttributeNames")?);
    for a in &system {
        if !SYSTEM_ATTRIBUTES.contains(&a.as_str()) {
            return Err(SqsError::invalid_attribute_name(a));
        }
    }
    let user = strings(input, "MessageAttributeNames")?;
    let options = ReceiveOptions {
        max: max as usize,
        visibility_s: visibility,
        wait: wait.map(|w| Duration::from_secs(w as u64)),
    };
    let got = cx.engine.receive(&name, options).await?;
    if got.is_empty() {
        return Ok(json!({}));
    }
    let messages: Vec<Value> = got.iter().map(|r| message_json(r, &system, &user)).collect();
    Ok(json!({"Messages": messages}))
}

/// One received message as ReceiveMessage returns it.
fn message_json(r: &Received, system: &[String], user: &[String]) -> Value {
    let s = &r.stored;
    let mut out = Map::new();
    out.insert("MessageId".into(), s.id.clone().into());
    out.insert("ReceiptHandle".into(), r.receipt_handle.clone().into());
    out.insert("MD5OfBody".into(), ferry_transport_sqs::attributes::md5_of_body(&s.body).into());
    out.insert("Body".into(), s.body.clone().into());
    let mut attrs = Map::new();
    let mut put = |name: &str, value: Option<String>| {
        if let Some(v) = value
            && wanted(system, name)
        {
            attrs.insert(name.to_owned(), v.into());
        }
    };
    put("SenderId", Some(s.sender_id.clone()));
    put("SentTimestamp", Some(s.sent_ms.to_string()));
    put("ApproximateReceiveCount", Some(r.receive_count.to_string()));
    put("ApproximateFirstReceiveTimestamp", Some(r.first_receive_ms.to_string()));
    put("AWSTraceHeader", s.trace_header.clone());
    put("MessageGroupId", s.group.clone());
    put("MessageDeduplicationId", s.dedup_id.clone());
    put("SequenceNumber", s.sequence.map(crate::model::sequence_number));
    put("DeadLetterQueueSourceArn", s.source_arn.clone());
    if !attrs.is_empty() {
        out.insert("Attributes".into(), Value::Object(attrs));
    }
    let selected: Vec<_> = s.attributes.iter().filter(|a| wanted(user, &a.name)).cloned().collect();
    if let Some(md5) = md5_of(&selected) {
        out.insert("MD5OfMessageAttributes".into(), md5.into());
        let map: Map<String, Value> = selected.iter().map(|a| (a.name.clone(), a.to_json())).collect();
        out.insert("MessageAttributes".into(), Value::Object(map));
    }
    Value::Object(out)
}

async fn delete_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let entries = batch_entries(input, "DeleteMessageBatchRequestEntry")?;
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    let mut handles = Vec::new();
    let mut ids = Vec::new();
    for e in entries {
        let id = e.get("Id").and_then(Value::as_str).unwrap_or_default();
        match required(e, "ReceiptHandle") {
            Ok(handle) => {
                handles.push(handle);
                ids.push(id);
            }
            Err(err) => failures.push(failed(id, &err)),
        }
    }
    for (id, answer) in ids.into_iter().zip(cx.engine.delete_messages(&name, &handles).await?) {
        match answer {
            Ok(()) => ok.push(json!({"Id": id})),
            Err(err) => failures.push(failed(id, &err)),
        }
    }
    Ok(batch_result(ok, failures))
}

async fn change_visibility_batch(cx: &Context<'_>, input: &Value) -> Result<Value, SqsError> {
    let name = queue_name(&cx.engine.identity, input)?;
    let entries = batch_entries(input, "ChangeMessageVisibilityBatchRequestEntry")?;
    if !cx.engine.exists(&name).await? {
        return Err(SqsError::no_queue());
    }
    let mut ok = Vec::new();
    let mut failures = Vec::new();
    for e in entries {
        let id = e.get("Id").and_then(Value::as_str).unwrap_or_default();
        let result = async {
            let handle = required(e, "ReceiptHandle")?;
            let timeout =
                int(e, "VisibilityTimeout")?.ok_or_else(|| SqsError::missing_parameter("VisibilityTimeout"))?;
            cx.engine.change_visibility(&name, &handle, timeout).await
        }
        .await;
        match result {
            Ok(()) => ok.push(json!({"Id": id})),
            Err(err) if err.kind == ErrorKind::NonExistentQueue => return Err(err),
            Err(err) => failures.push(failed(id, &err)),
        }
    }
    Ok(batch_result(ok, failures))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_is_named_once_and_read_back_exactly() {
        assert_eq!(Action::ALL.len(), 20);
        for a in Action::ALL {
            assert_eq!(Action::parse(a.name()), Some(*a));
        }
        let names: std::collections::BTreeSet<&str> = Action::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(names.len(), Action::ALL.len());
        assert_eq!(Action::parse("sendmessage"), None, "names are case-sensitive, as SQS reads them");
        assert_eq!(Action::parse("Publish"), None, "an SNS action is not an SQS one");
        assert!(Action::CreateQueue.names_no_queue() && !Action::SendMessage.names_no_queue());
    }

    #[test]
    fn queue_urls_resolve_by_path_only() {
        let identity = crate::records::Identity { region: "us-east-1".into(), account: "000000000000".into() };
        for url in [
            "http://127.0.0.1:9324/000000000000/orders",
            "https://stale-host.example/000000000000/orders",
            "/000000000000/orders",
        ] {
            assert_eq!(queue_name(&identity, &json!({"QueueUrl": url})).expect("resolves"), "orders", "{url}");
        }
        for (url, key) in [
            ("http://127.0.0.1:9324/queue/eu-central-1/000000000000/orders", "eu-central-1/orders"),
            ("/queue/us-east-1/000000000000/orders", "orders"),
            ("/queue/EU/000000000000/orders", "orders"),
        ] {
            assert_eq!(queue_name(&identity, &json!({"QueueUrl": url})).expect("resolves"), key, "{url}");
        }
        for bad in ["/000000000000/sns:t:r", "/", "http://h/"] {
            assert_eq!(
                queue_name(&identity, &json!({"QueueUrl": bad})).expect_err(bad).code(),
                SqsError::no_queue().code()
            );
        }
        assert_eq!(queue_name(&identity, &json!({})).expect_err("missing").code(), "MissingParameter");
        assert_eq!(
            identity.url("http://h:1/", "eu-central-1/orders"),
            "http://h:1/queue/eu-central-1/000000000000/orders"
        );
        assert_eq!(identity.url("http://h:1", "orders"), "http://h:1/000000000000/orders");
        assert_eq!(identity.arn("eu-central-1/orders"), "arn:aws:sqs:eu-central-1:000000000000:orders");
        assert_eq!(identity.key_of_arn("arn:aws:sqs:us-east-1:000000000000:dlq").as_deref(), Some("dlq"));
        assert_eq!(identity.key_of_arn("arn:aws:sqs:eu-west-1:1:dlq").as_deref(), Some("eu-west-1/dlq"));
        assert_eq!(identity.key_of_arn("arn:aws:sns:eu-west-1:1:dlq"), None);
    }
}
