//! `[endpoints]`: servers ferry runs for applications to call.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `[endpoints]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointsConfig {
    /// An SQS-compatible server: applications on any AWS SDK point their
    /// endpoint at it; its queues live in ferry's store.
    #[serde(default)]
    pub sqs: Option<SqsEndpointConfig>,
}

/// `[endpoints.sqs]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointConfig {
    /// Address to listen on, `host:port` (for example `127.0.0.1:9324`;
    /// port 0 picks a free one, see [Listening on port
    /// 0](../operating/port-0.md#listening-on-port-0)). With `auth =
    /// "none"` it must be a loopback address.
    pub listen: String,
    /// `"verify"`: every request must be signed with SigV4 by one of
    /// `access_keys`, checked here (the body hashed by ferry, the signature
    /// compared in constant time, at most 15 minutes off ferry's clock); a
    /// wrong signature gets `SignatureDoesNotMatch`, an unknown key
    /// `InvalidClientTokenId`, an unsigned request
    /// `MissingAuthenticationToken`, all 403. `"none"`: no check, for local
    /// development only (loopback). Default `"none"`.
    #[serde(default)]
    pub auth: EndpointAuth,
    /// `auth = "verify"`: the access keys requests may be signed with.
    #[serde(default)]
    pub access_keys: Vec<AccessKey>,
    /// `scheme://host[:port]` that queue URLs start with, as clients reach
    /// the endpoint (behind a proxy, say). Default: `http://` and the Host
    /// header of each request. Only a URL's path names its queue, so a URL
    /// saved with another host still works.
    #[serde(default)]
    pub advertised_url: Option<String>,
    /// The region in queue ARNs (`arn:aws:sqs:{region}:{account}:{name}`).
    /// Default `us-east-1`.
    #[serde(default = "default_region")]
    pub region: String,
    /// The account id (12 digits) in queue URLs
    /// (`{scheme}://{host}/{account}/{name}`) and ARNs. Default
    /// `000000000000`.
    #[serde(default = "default_account")]
    pub account: String,
    /// Queues that exist from the start (`[endpoints.sqs.queues.NAME]` with
    /// CreateQueue's `attributes`), created when missing and left as they
    /// are when they exist (the API may have changed them since).
    #[serde(default)]
    pub queues: BTreeMap<String, SqsEndpointQueue>,
    /// [SNS topics](../transports/sqs-endpoint.md#sns-topics) that exist
    /// from the start (`[endpoints.sqs.topics.NAME]` with CreateTopic's
    /// `attributes`), created when missing.
    #[serde(default)]
    pub topics: BTreeMap<String, SqsEndpointTopic>,
}

/// `[endpoints.sqs] auth`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EndpointAuth {
    /// No check (local development; loopback only).
    #[default]
    None,
    /// SigV4 against `access_keys`.
    Verify,
}

/// `[[endpoints.sqs.access_keys]]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessKey {
    /// The access key id clients sign with (`AWS_ACCESS_KEY_ID`).
    pub id: String,
    /// Its secret (`AWS_SECRET_ACCESS_KEY`). A secret: write it as `${VAR}`
    /// or `{ file = "…" }`; `ferry render` masks it.
    pub secret: String,
}

/// `[endpoints.sqs.topics.NAME]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointTopic {
    /// Topic attributes as CreateTopic takes them (`{ DisplayName =
    /// "Alerts" }`, …).
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// `[endpoints.sqs.queues.NAME]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointQueue {
    /// Queue attributes as CreateQueue takes them (`{ VisibilityTimeout =
    /// "60", FifoQueue = "true" }`, `RedrivePolicy = '{…}'`, …).
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_account() -> String {
    "000000000000".into()
}

/// Checks `[endpoints]`; `listeners` holds the addresses HTTP receivers
/// listen on.
pub(crate) fn check(endpoints: &EndpointsConfig) -> Result<(), ConfigError> {
    let Some(sqs) = &endpoints.sqs else {
        return Ok(());
    };
    let key = "endpoints.sqs";
    let addr: std::net::SocketAddr = sqs.listen.parse().map_err(|_| {
        ConfigError::new(format!("{key}.listen"), format!("{:?} is not an IP:port address", sqs.listen))
    })?;
    if !addr.ip().is_loopback() && sqs.auth == EndpointAuth::None {
        return Err(ConfigError::new(
            format!("{key}.listen"),
            format!(
                "{addr} is not a loopback address: set auth = \"verify\" and access_keys, so requests must be signed"
            ),
        ));
    }
    if sqs.auth == EndpointAuth::Verify && sqs.access_keys.is_empty() {
        return Err(ConfigError::new(format!("{key}.access_keys"), "auth = \"verify\" needs at least one access key"));
    }
    for (i, k) in sqs.access_keys.iter().enumerate() {
        if k.id.is_empty() || k.secret.is_empty() {
            return Err(ConfigError::new(format!("{key}.access_keys[{i}]"), "id and secret must not be empty"));
        }
    }
    if let Some(url) = &sqs.advertised_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(ConfigError::new(format!("{key}.advertised_url"), "must start with http:// or https://"));
    }
    if sqs.account.len() != 12 || !sqs.account.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::new(format!("{key}.account"), "must be 12 digits"));
    }
    if sqs.region.is_empty() || !sqs.region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(ConfigError::new(format!("{key}.region"), "must be letters, digits and -"));
    }
    for name in sqs.topics.keys() {
        if !topic_name_ok(name) {
            return Err(ConfigError::new(format!("{key}.topics.{name}"), TOPIC_NAME_RULE));
        }
    }
    for (name, queue) in &sqs.queues {
        let stem = name.strip_suffix(".fifo").unwrap_or(name);
        if stem.is_empty()
            || name.len() > 80
            || !stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ConfigError::new(
                format!("{key}.queues.{name}"),
                "a queue name is 1 to 80 letters, digits, - and _, with .fifo at the end of a FIFO queue",
            ));
        }
        let fifo_attr = queue.attributes.get("FifoQueue").is_some_and(|v| v == "true");
        if fifo_attr != name.ends_with(".fifo") {
            return Err(ConfigError::new(
                format!("{key}.queues.{name}.attributes.FifoQueue"),
                "a FIFO queue's name ends with .fifo and it has FifoQueue = \"true\"; a standard queue has neither",
            ));
        }
    }
    Ok(())
}

/// `type = "sqs_endpoint"` receiver: a route consumes what applications
/// send to a queue of the [SQS endpoint](SqsEndpointConfig).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointReceiverConfig {
    /// A queue of this daemon's [SQS
    /// endpoint](../transports/sqs-endpoint.md#sqs-and-sns-endpoint)
    /// (`[endpoints.sqs]` must be set), declared under
    /// `[endpoints.sqs.queues]` or created through the API; the route
    /// consumes what applications send to it, and waits while the queue
    /// does not exist. Set this or `topic`.
    #[serde(default)]
    pub queue: String,
    /// An SNS topic of the endpoint instead of a queue: the route gets
    /// every message published to it, unwrapped, with `sns.TopicArn`,
    /// `sns.MessageId` and `sns.Subject` headers ([routes from a
    /// topic](../transports/sqs-endpoint.md#sns-topics)); the topic is
    /// declared when missing. Messages wait in a queue of the route's own
    /// while it is stopped.
    #[serde(default)]
    pub topic: String,
    /// Seconds a message stays invisible to other consumers while the route
    /// holds it, renewed every half of it; a message the route gives back
    /// becomes visible after its backoff. Default 30.
    #[serde(default = "default_visibility_timeout")]
    pub visibility_timeout: i32,
    /// Messages taken per receive, 1 to 10, never more than the route has
    /// room for. Default 10.
    #[serde(default = "default_max_messages")]
    pub max_messages: i32,
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: crate::WireFormat,
}

/// `type = "sqs_endpoint"` sender: a route's messages go to a queue of the
/// [SQS endpoint](SqsEndpointConfig), where applications receive them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointSenderConfig {
    /// The endpoint queue for bindings whose address is empty; a binding's
    /// address (a template) names the queue otherwise. A queue that does
    /// not exist is a transient failure (retried until it is created).
    #[serde(default)]
    pub queue: String,
    /// FIFO queues: header whose text is the MessageGroupId. Default
    /// `x-bridge.ordering-key`.
    #[serde(default = "default_message_group_header")]
    pub message_group_header: String,
    /// FIFO queues: MessageGroupId when that header is missing. Default
    /// `default`.
    #[serde(default = "default_message_group")]
    pub default_message_group: String,
    /// `"json"`: payloads are the [JSON wire
    /// format](../concepts/wire-format.md#the-json-wire-format) (headers
    /// and body in one document): a receiver unpacks them (what is not that
    /// JSON stays a plain body), a sender packs into it. Default `"none"`.
    #[serde(default)]
    pub wire_format: crate::WireFormat,
}

fn default_visibility_timeout() -> i32 {
    30
}
fn default_max_messages() -> i32 {
    10
}
fn default_message_group_header() -> String {
    "x-bridge.ordering-key".to_owned()
}
fn default_message_group() -> String {
    "default".to_owned()
}

fn queue_name_ok(name: &str) -> bool {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    !stem.is_empty() && name.len() <= 80 && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks an `sqs_endpoint` receiver at `key`.
pub(crate) fn check_receiver(
    config: &SqsEndpointReceiverConfig,
    endpoints: &EndpointsConfig,
    key: &str,
) -> Result<(), ConfigError> {
    if endpoints.sqs.is_none() {
        return Err(ConfigError::new(key, "type = \"sqs_endpoint\" needs an [endpoints.sqs] section"));
    }
    match (config.queue.is_empty(), config.topic.is_empty()) {
        (false, false) | (true, true) => {
            return Err(ConfigError::new(key, "set either queue or topic"));
        }
        (false, true) if !queue_name_ok(&config.queue) => {
            return Err(ConfigError::new(format!("{key}.queue"), QUEUE_NAME_RULE));
        }
        (true, false) if !topic_name_ok(&config.topic) => {
            return Err(ConfigError::new(format!("{key}.topic"), TOPIC_NAME_RULE));
        }
        _ => {}
    }
    if !(0..=43_200).contains(&config.visibility_timeout) {
        return Err(ConfigError::new(format!("{key}.visibility_timeout"), "must be between 0 and 43200"));
    }
    if !(1..=10).contains(&config.max_messages) {
        return Err(ConfigError::new(format!("{key}.max_messages"), "must be between 1 and 10"));
    }
    Ok(())
}

/// Checks an `sqs_endpoint` sender at `key`.
pub(crate) fn check_sender(
    config: &SqsEndpointSenderConfig,
    endpoints: &EndpointsConfig,
    key: &str,
) -> Result<(), ConfigError> {
    if endpoints.sqs.is_none() {
        return Err(ConfigError::new(key, "type = \"sqs_endpoint\" needs an [endpoints.sqs] section"));
    }
    if !config.queue.is_empty() && !queue_name_ok(&config.queue) {
        return Err(ConfigError::new(format!("{key}.queue"), QUEUE_NAME_RULE));
    }
    Ok(())
}

fn topic_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

const TOPIC_NAME_RULE: &str = "a topic name is 1 to 256 letters, digits, - and _ (ferry serves standard topics only)";

const QUEUE_NAME_RULE: &str = "a queue name is 1 to 80 letters, digits, - and _, with .fifo at the end of a FIFO queue";
