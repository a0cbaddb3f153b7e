//! `[endpoints]`: servers ferry runs for applications to call.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    pub secret: crate::Secret,
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
