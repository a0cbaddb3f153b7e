//! `[endpoints.sqs]`, the endpoint's own section (its keys, defaults and
//! checks; the config document keeps it as written, the daemon hands it
//! here), and `type = "sqs_endpoint"`: the keys of a receiver or sender on
//! a queue (or topic) of the endpoint.

use std::collections::BTreeMap;

use ferry_config::{Config, Secret, SectionSchema};
use ferry_core::transport::KeyProblem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::valid_queue_name;
use crate::sns::topics::valid_topic_name;

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
    pub secret: Secret,
    /// The SQS and SNS actions this key may call (`["SendMessage",
    /// "Publish"]`). Default: every action.
    #[serde(default)]
    pub actions: Vec<String>,
    /// The queues and topics this key may use: `sqs.NAME` and `sns.NAME`,
    /// a trailing `*` matching any rest (`sqs.orders-*`). Actions that name
    /// no queue or topic (ListQueues, ListTopics) are not limited by it.
    /// Default: every queue and topic.
    #[serde(default)]
    pub resources: Vec<String>,
}

impl AccessKey {
    /// What the key may do.
    pub fn grant(&self) -> crate::auth::Grant {
        crate::auth::Grant { actions: self.actions.clone(), resources: self.resources.clone() }
    }
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

/// Where the section is in the document.
pub const SECTION: &str = "endpoints.sqs";

/// The section's schema, for the daemon's (its keys in `ferry schema` and
/// the book's reference page).
pub fn section_schema(generator: &mut schemars::SchemaGenerator) -> SectionSchema {
    SectionSchema { path: SECTION, schema: generator.subschema_for::<SqsEndpointConfig>() }
}

/// `config`'s `[endpoints.sqs]`, read and checked, when it is set; on
/// failure the key below [`SECTION`], as a part's.
pub fn section(config: &Config) -> Result<Option<SqsEndpointConfig>, KeyProblem> {
    let Some(table) = &config.endpoints.sqs else { return Ok(None) };
    let sqs: SqsEndpointConfig = table.parse().map_err(|e| KeyProblem::new(e.path, e.message))?;
    check_section(&sqs)?;
    Ok(Some(sqs))
}

/// `type = "sqs_endpoint"` receiver: a route consumes what applications
/// send to a queue of the [SQS endpoint](../transports/sqs-endpoint.md).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
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
}

/// `type = "sqs_endpoint"` sender: a route's messages go to a queue of the
/// [SQS endpoint](../transports/sqs-endpoint.md), where applications
/// receive them.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointSenderConfig {
    /// The endpoint queue for bindings whose address is empty; a binding's
    /// address (a template) names the queue otherwise. A queue that does
    /// not exist is a transient failure (retried until it is created).
    #[serde(default)]
    pub queue: String,
    /// FIFO queues: header whose text is the MessageGroupId. Default
    /// `x-bridge.ordering-key`.
    #[serde(default = "ferry_transport_sqs::config::default_message_group_header")]
    pub message_group_header: String,
    /// FIFO queues: MessageGroupId when that header is missing. Default
    /// `default`.
    #[serde(default = "ferry_transport_sqs::config::default_message_group")]
    pub default_message_group: String,
}

fn default_visibility_timeout() -> i32 {
    30
}
fn default_max_messages() -> i32 {
    10
}

const TOPIC_NAME_RULE: &str = "a topic name is 1 to 256 letters, digits, - and _ (ferry serves standard topics only)";
const QUEUE_NAME_RULE: &str = "a queue name is 1 to 80 letters, digits, - and _, with .fifo at the end of a FIFO queue";

impl SqsEndpointReceiverConfig {
    /// The receiver's own keys (that `[endpoints.sqs]` is set is the
    /// daemon's check: [`crate::transport::SqsEndpoint`] names the section).
    pub fn check(&self) -> Result<(), KeyProblem> {
        match (self.queue.is_empty(), self.topic.is_empty()) {
            (false, false) | (true, true) => return Err(KeyProblem::new("", "set either queue or topic")),
            (false, true) if !valid_queue_name(&self.queue) => return Err(KeyProblem::new("queue", QUEUE_NAME_RULE)),
            (true, false) if !valid_topic_name(&self.topic) => return Err(KeyProblem::new("topic", TOPIC_NAME_RULE)),
            _ => {}
        }
        if !(0..=43_200).contains(&self.visibility_timeout) {
            return Err(KeyProblem::new("visibility_timeout", "must be between 0 and 43200"));
        }
        if !(1..=10).contains(&self.max_messages) {
            return Err(KeyProblem::new("max_messages", "must be between 1 and 10"));
        }
        Ok(())
    }
}

impl SqsEndpointSenderConfig {
    /// The sender's own keys.
    pub fn check(&self) -> Result<(), KeyProblem> {
        if !self.queue.is_empty() && !valid_queue_name(&self.queue) {
            return Err(KeyProblem::new("queue", QUEUE_NAME_RULE));
        }
        Ok(())
    }
}

/// Checks `[endpoints.sqs]`; the key is below `endpoints.sqs`.
pub fn check_section(sqs: &SqsEndpointConfig) -> Result<(), KeyProblem> {
    let addr: std::net::SocketAddr = sqs
        .listen
        .parse()
        .map_err(|_| KeyProblem::new("listen", format!("{:?} is not an IP:port address", sqs.listen)))?;
    let verify = sqs.auth == EndpointAuth::Verify;
    if !addr.ip().is_loopback() && !verify {
        return Err(KeyProblem::new(
            "listen",
            format!(
                "{addr} is not a loopback address: set auth = \"verify\" and access_keys, so requests must be signed"
            ),
        ));
    }
    if verify && sqs.access_keys.is_empty() {
        return Err(KeyProblem::new("access_keys", "auth = \"verify\" needs at least one access key"));
    }
    for (i, k) in sqs.access_keys.iter().enumerate() {
        if k.id.is_empty() || k.secret.is_empty() {
            return Err(KeyProblem::new(format!("access_keys[{i}]"), "id and secret must not be empty"));
        }
        if let Some(a) = k.actions.iter().find(|a| crate::actions::Action::parse(a).is_none() && !crate::sns::is_sns(a))
        {
            return Err(KeyProblem::new(format!("access_keys[{i}].actions"), format!("{a:?} is no SQS or SNS action")));
        }
        if let Some(r) = k.resources.iter().find(|r| {
            let name = r.strip_prefix("sqs.").or_else(|| r.strip_prefix("sns.")).unwrap_or_default();
            name.is_empty()
        }) {
            return Err(KeyProblem::new(
                format!("access_keys[{i}].resources"),
                format!("{r:?} is not sqs.NAME or sns.NAME (a trailing * matches any rest)"),
            ));
        }
    }
    if let Some(url) = &sqs.advertised_url {
        let scheme = reqwest::Url::parse(url).map(|u| u.scheme().to_owned());
        if !matches!(scheme.as_deref(), Ok("http" | "https")) {
            return Err(KeyProblem::new("advertised_url", "must be an http:// or https:// URL"));
        }
    }
    if sqs.account.len() != 12 || !sqs.account.bytes().all(|b| b.is_ascii_digit()) {
        return Err(KeyProblem::new("account", "must be 12 digits"));
    }
    if sqs.region.is_empty() || !sqs.region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(KeyProblem::new("region", "must be letters, digits and -"));
    }
    if let Some(name) = sqs.topics.keys().find(|name| !valid_topic_name(name)) {
        return Err(KeyProblem::new(format!("topics.{name}"), TOPIC_NAME_RULE));
    }
    for (name, queue) in &sqs.queues {
        if !valid_queue_name(name) {
            return Err(KeyProblem::new(format!("queues.{name}"), QUEUE_NAME_RULE));
        }
        let fifo_attr = queue.attributes.get("FifoQueue").is_some_and(|v| v == "true");
        if fifo_attr != name.ends_with(".fifo") {
            return Err(KeyProblem::new(
                format!("queues.{name}.attributes.FifoQueue"),
                "a FIFO queue's name ends with .fifo and it has FifoQueue = \"true\"; a standard queue has neither",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ferry_core::transport::read_part;

    use super::*;

    fn receiver(text: &str) -> Result<SqsEndpointReceiverConfig, String> {
        read_part("sqs_endpoint", text, SqsEndpointReceiverConfig::check)
    }

    fn sender(text: &str) -> Result<SqsEndpointSenderConfig, String> {
        read_part("sqs_endpoint", text, SqsEndpointSenderConfig::check)
    }

    #[test]
    fn parts_read_with_their_defaults() {
        let r = receiver("queue = \"orders\"").expect("valid");
        assert_eq!((r.visibility_timeout, r.max_messages, r.topic.as_str()), (30, 10, ""));
        let r = receiver("topic = \"alerts\"\nwire_format = \"json\"").expect("the wire format is every part's key");
        assert_eq!(r.topic, "alerts");
        let s = sender("").expect("a binding's address may name the queue");
        assert_eq!(
            (s.message_group_header.as_str(), s.default_message_group.as_str()),
            ("x-bridge.ordering-key", "default")
        );
    }

    #[test]
    fn each_bad_key_is_named() {
        for (text, key) in [
            ("queue = \"q\"\ntopic = \"t\"", ""),
            ("visibility_timeout = 5", ""),
            ("queue = \"a/b\"", "queue"),
            ("queue = \"a.fifo.fifo\"", "queue"),
            ("topic = \"a b\"", "topic"),
            ("queue = \"q\"\nvisibility_timeout = 43201", "visibility_timeout"),
            ("queue = \"q\"\nmax_messages = 0", "max_messages"),
            ("queue = \"q\"\nmax_messages = 11", "max_messages"),
            ("queue = \"q\"\nqueue_url = \"http://x\"", "queue_url"),
        ] {
            assert_eq!(receiver(text).err().as_deref(), Some(key), "{text}");
        }
        assert_eq!(sender("queue = \"bad name\"").err().as_deref(), Some("queue"));
        assert_eq!(sender("topic = \"t\"").err().as_deref(), Some("topic"), "a sender sends to queues");
    }

    fn section() -> SqsEndpointConfig {
        SqsEndpointConfig {
            listen: "127.0.0.1:0".into(),
            auth: EndpointAuth::None,
            access_keys: Vec::new(),
            advertised_url: None,
            region: "us-east-1".into(),
            account: "000000000000".into(),
            queues: BTreeMap::new(),
            topics: BTreeMap::new(),
        }
    }

    #[test]
    fn the_section_is_checked_key_by_key() {
        assert_eq!(check_section(&section()), Ok(()));
        let problem = |change: &dyn Fn(&mut SqsEndpointConfig)| {
            let mut s = section();
            change(&mut s);
            check_section(&s).err().map(|p| p.key)
        };
        let queue = |attributes: &[(&str, &str)]| SqsEndpointQueue {
            attributes: attributes.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        };
        assert_eq!(problem(&|s| s.listen = "localhost".into()).as_deref(), Some("listen"));
        assert_eq!(problem(&|s| s.listen = "0.0.0.0:9324".into()).as_deref(), Some("listen"), "open without auth");
        assert_eq!(problem(&|s| s.auth = EndpointAuth::Verify).as_deref(), Some("access_keys"));
        let blank = AccessKey { id: "AKID".into(), secret: "".into(), actions: Vec::new(), resources: Vec::new() };
        assert_eq!(
            problem(&|s| {
                s.auth = EndpointAuth::Verify;
                s.access_keys = vec![blank.clone()];
            })
            .as_deref(),
            Some("access_keys[0]")
        );
        let signed = AccessKey { id: "AKID".into(), secret: "s".into(), actions: Vec::new(), resources: Vec::new() };
        assert_eq!(
            problem(&|s| {
                s.listen = "0.0.0.0:9324".into();
                s.auth = EndpointAuth::Verify;
                s.access_keys = vec![signed.clone()];
            }),
            None,
            "open with signatures"
        );
        let limited = |actions: &[&str], resources: &[&str]| AccessKey {
            actions: actions.iter().map(|a| (*a).to_owned()).collect(),
            resources: resources.iter().map(|r| (*r).to_owned()).collect(),
            ..signed.clone()
        };
        for (key, problem_key) in [
            (limited(&["Sendmessage"], &[]), Some("access_keys[0].actions")),
            (limited(&[], &["orders"]), Some("access_keys[0].resources")),
            (limited(&[], &["sqs."]), Some("access_keys[0].resources")),
            (limited(&["SendMessage", "Publish"], &["sqs.orders-*", "sns.alerts"]), None),
        ] {
            let got = problem(&|s| {
                s.auth = EndpointAuth::Verify;
                s.access_keys = vec![key.clone()];
            });
            assert_eq!(got.as_deref(), problem_key, "{key:?}");
        }
        for url in ["sqs.example", "ftp://sqs.example", "http//sqs.example"] {
            assert_eq!(problem(&|s| s.advertised_url = Some(url.into())).as_deref(), Some("advertised_url"), "{url}");
        }
        assert_eq!(problem(&|s| s.advertised_url = Some("https://sqs.example:8443".into())), None);
        assert_eq!(problem(&|s| s.account = "12".into()).as_deref(), Some("account"));
        assert_eq!(problem(&|s| s.region = "eu west".into()).as_deref(), Some("region"));
        assert_eq!(
            problem(&|s| {
                s.topics.insert("t.fifo".into(), SqsEndpointTopic::default());
            })
            .as_deref(),
            Some("topics.t.fifo")
        );
        assert_eq!(
            problem(&|s| {
                s.queues.insert("bad/name".into(), queue(&[]));
            })
            .as_deref(),
            Some("queues.bad/name")
        );
        assert_eq!(
            problem(&|s| {
                s.queues.insert("a.fifo".into(), queue(&[]));
            })
            .as_deref(),
            Some("queues.a.fifo.attributes.FifoQueue")
        );
        assert_eq!(
            problem(&|s| {
                s.queues.insert("a".into(), queue(&[("FifoQueue", "true")]));
            })
            .as_deref(),
            Some("queues.a.attributes.FifoQueue")
        );
        assert_eq!(
            problem(&|s| {
                s.queues.insert("a.fifo".into(), queue(&[("FifoQueue", "true")]));
            }),
            None
        );
    }
}
