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
    /// Address to listen on, `host:port` (for example `127.0.0.1:9324`).
    /// Requests are not authenticated yet: the address must be a loopback
    /// one.
    pub listen: String,
    /// `scheme://host[:port]` that queue URLs start with, as clients reach
    /// the endpoint (behind a proxy, say). Default: `http://` and the Host
    /// header of each request. Only a URL's path names its queue, so a URL
    /// saved with another host still works.
    #[serde(default)]
    pub advertised_url: Option<String>,
    /// The region in queue ARNs. Default `us-east-1`.
    #[serde(default = "default_region")]
    pub region: String,
    /// The account id in queue URLs and ARNs (12 digits). Default
    /// `000000000000`.
    #[serde(default = "default_account")]
    pub account: String,
    /// Queues that exist from the start (`[endpoints.sqs.queues.NAME]`),
    /// created when missing; a queue that exists keeps the attributes it
    /// has.
    #[serde(default)]
    pub queues: BTreeMap<String, SqsEndpointQueue>,
}

/// `[endpoints.sqs.queues.NAME]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqsEndpointQueue {
    /// Queue attributes as CreateQueue takes them (`VisibilityTimeout =
    /// "30"`, `RedrivePolicy = '{…}'`, `FifoQueue = "true"`, …).
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
pub(crate) fn check(
    endpoints: &EndpointsConfig,
    listeners: &BTreeMap<std::net::SocketAddr, String>,
) -> Result<(), ConfigError> {
    let Some(sqs) = &endpoints.sqs else {
        return Ok(());
    };
    let key = "endpoints.sqs";
    let addr: std::net::SocketAddr = sqs.listen.parse().map_err(|_| {
        ConfigError::new(format!("{key}.listen"), format!("{:?} is not an IP:port address", sqs.listen))
    })?;
    if !addr.ip().is_loopback() {
        return Err(ConfigError::new(
            format!("{key}.listen"),
            format!("{addr} is not a loopback address: the endpoint does not authenticate requests yet"),
        ));
    }
    if let Some(other) = listeners.get(&addr) {
        return Err(ConfigError::new(format!("{key}.listen"), format!("{other} listens there already")));
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
