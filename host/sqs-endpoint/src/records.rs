//! The records of the endpoint's queues and the values its engine takes
//! and returns, shared by both places the queues live: this process's
//! memory ([`crate::engine`]) and a shared PostgreSQL store
//! ([`crate::shared`]). A module of its own, so that neither of those
//! imports the other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::outbox::StoreError;
use serde::{Deserialize, Serialize};

use crate::error::SqsError;
use crate::model::{Attr, QUEUE_ATTRIBUTES, Redrive, RedrivePolicy, check_queue_attributes};

/// Where the endpoint says its queues are.
#[derive(Debug, Clone)]
pub struct Identity {
    pub region: String,
    pub account: String,
}

/// A queue's key in the store is its name when it lives in the endpoint's
/// own region, and `REGION/NAME` when a request signed for another region
/// made it: one name in two regions is two queues, as in AWS. `/` is in no
/// queue or region name, so the two kinds of key never meet.
impl Identity {
    /// The key of queue `name` in `region`.
    pub fn key(&self, region: &str, name: &str) -> String {
        if region == self.region { name.to_owned() } else { format!("{region}/{name}") }
    }

    /// The region and name of a key.
    pub fn split<'k>(&'k self, key: &'k str) -> (&'k str, &'k str) {
        key.split_once('/').unwrap_or((self.region.as_str(), key))
    }

    pub fn arn(&self, key: &str) -> String {
        let (region, name) = self.split(key);
        format!("arn:aws:sqs:{region}:{}:{name}", self.account)
    }

    /// The key of the queue an ARN (`arn:PARTITION:sqs:REGION:ACCOUNT:NAME`)
    /// names; `None` for anything else. The account is not checked: the
    /// endpoint serves one.
    pub fn key_of_arn(&self, arn: &str) -> Option<String> {
        match arn.split(':').collect::<Vec<_>>().as_slice() {
            ["arn", _, "sqs", region, _, name] if valid_region(region) && crate::model::valid_queue_name(name) => {
                Some(self.key(region, name))
            }
            _ => None,
        }
    }

    /// The queue URL of a key under `base` (`scheme://host[:port]`):
    /// `/ACCOUNT/NAME` in the endpoint's region, `/queue/REGION/ACCOUNT/NAME`
    /// in another (the path form LocalStack also uses).
    pub fn url(&self, base: &str, key: &str) -> String {
        let base = base.trim_end_matches('/');
        match key.split_once('/') {
            Some((region, name)) => format!("{base}/queue/{region}/{}/{name}", self.account),
            None => format!("{base}/{}/{key}", self.account),
        }
    }

    /// The key a queue URL names. Only its path counts, so a URL saved with
    /// a stale host still works; `None` when the path names no queue the
    /// API may reach.
    pub fn key_of_url(&self, url: &str) -> Option<String> {
        let path = match url.find("://") {
            Some(i) => url[i + 3..].find('/').map_or("", |j| &url[i + 3 + j..]),
            None => url,
        };
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let name = *segments.last()?;
        if name.is_empty() || crate::model::is_internal(name) || name.contains('/') {
            return None;
        }
        match segments.as_slice() {
            [.., "queue", region, _, _] if valid_region(region) => Some(self.key(region, name)),
            _ => Some(name.to_owned()),
        }
    }
}

/// Whether `region` may be a region name: 1 to 32 lower-case letters,
/// digits and `-`.
pub fn valid_region(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 32
        && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A queue's durable description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueMeta {
    pub name: String,
    /// Settable attributes as given (defaults are not stored).
    pub attributes: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub created_s: i64,
    pub modified_s: i64,
}

/// A message as sent; never changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stored {
    pub id: String,
    pub body: String,
    pub attributes: Vec<Attr>,
    pub trace_header: Option<String>,
    pub sent_ms: i64,
    pub sender_id: String,
    pub group: Option<String>,
    pub dedup_id: Option<String>,
    /// FIFO queues: the SequenceNumber.
    pub sequence: Option<u64>,
    /// Set on a message a redrive moved: the queue it came from.
    pub source_arn: Option<String>,
}

impl QueueMeta {
    pub(crate) fn new(
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
        now_ms: i64,
    ) -> Self {
        let now = now_ms / 1000;
        Self { name: name.to_owned(), attributes, tags, created_s: now, modified_s: now }
    }

    pub(crate) fn fifo(&self) -> bool {
        self.name.ends_with(".fifo")
    }

    /// An integer attribute, as set or by default.
    pub(crate) fn int(&self, name: &str) -> i64 {
        let value = self.attributes.get(name).map(String::as_str);
        let default = QUEUE_ATTRIBUTES.iter().find(|r| r.name == name).and_then(|r| r.default);
        value.or(default).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        self.attributes.get(name).is_some_and(|v| v == "true")
    }

    /// Whether the queue is FIFO, whether it deduplicates by content, and
    /// its largest message.
    pub(crate) fn kind(&self) -> (bool, bool, i64) {
        (self.fifo(), self.flag("ContentBasedDeduplication"), self.int("MaximumMessageSize"))
    }

    /// The key a FIFO message's deduplication id is kept under: the id, or
    /// with `DeduplicationScope = messageGroup` the group and the id, so
    /// the same id in another group is no duplicate.
    pub(crate) fn dedup_key(&self, group: Option<&str>, dedup_id: &str) -> String {
        if self.attributes.get("DeduplicationScope").is_some_and(|s| s == "messageGroup") {
            format!("{}\u{1f}{dedup_id}", group.unwrap_or_default())
        } else {
            dedup_id.to_owned()
        }
    }

    /// Where dead messages go, when a policy names an SQS queue.
    pub(crate) fn redrive(&self, identity: &Identity) -> Option<Redrive> {
        let policy = self.attributes.get("RedrivePolicy").filter(|v| !v.is_empty())?;
        let policy = RedrivePolicy::parse(policy).ok()?;
        let target = identity.key_of_arn(&policy.target_arn)?;
        Some(Redrive { target, max_receive_count: policy.max_receive_count })
    }

    /// CreateQueue on an existing queue: found when every attribute given
    /// is what the queue has, `QueueAlreadyExists` otherwise.
    pub(crate) fn same_as(&self, attributes: &BTreeMap<String, String>) -> Result<(), SqsError> {
        for (key, value) in attributes {
            let current = self
                .attributes
                .get(key)
                .map(String::as_str)
                .or_else(|| QUEUE_ATTRIBUTES.iter().find(|r| r.name == key).and_then(|r| r.default));
            if current != Some(value.as_str()) {
                return Err(SqsError::queue_exists(format!(
                    "A queue already exists with the same name and a different value for attribute {key}"
                )));
            }
        }
        Ok(())
    }

    /// SetQueueAttributes: checks `attributes` and applies them.
    pub(crate) fn set(
        &mut self,
        attributes: BTreeMap<String, String>,
        dlq_exists: &dyn Fn(&str) -> bool,
        now_ms: i64,
    ) -> Result<(), SqsError> {
        let fifo = self.fifo();
        let mut attributes = attributes;
        // The type a queue has may be named again; another is refused.
        if let Some(kind) = attributes.remove("FifoQueue") {
            if kind != "true" && kind != "false" {
                return Err(SqsError::invalid_attribute_value("FifoQueue", "must be true or false."));
            }
            if (kind == "true") != fifo {
                return Err(SqsError::invalid_attribute_value("FifoQueue", "Modifying queue type is not supported."));
            }
        }
        check_queue_attributes(&attributes, fifo, dlq_exists)?;
        for (name, value) in attributes {
            if value.is_empty() && crate::model::UNSET_BY_EMPTY.contains(&name.as_str()) {
                if name == "KmsMasterKeyId" {
                    self.attributes.remove("KmsDataKeyReusePeriodSeconds");
                }
                self.attributes.remove(&name);
            } else {
                self.attributes.insert(name, value);
            }
        }
        self.modified_s = now_ms / 1000;
        Ok(())
    }

    /// TagQueue and UntagQueue.
    pub(crate) fn retag(&mut self, set: BTreeMap<String, String>, remove: &[String]) -> Result<(), SqsError> {
        self.tags.extend(set);
        for key in remove {
            self.tags.remove(key);
        }
        if self.tags.len() > 50 {
            return Err(SqsError::invalid_parameter("Too many tags added for queue."));
        }
        Ok(())
    }

    /// Every attribute GetQueueAttributes reports: what was set, the
    /// defaults, and the computed ones.
    pub(crate) fn report(&self, depth: &Depth, arn: String) -> BTreeMap<String, String> {
        let fifo = self.fifo();
        let mut out: BTreeMap<String, String> = QUEUE_ATTRIBUTES
            .iter()
            .filter(|r| fifo || !r.fifo_only)
            .filter_map(|r| Some((r.name.to_owned(), r.default?.to_owned())))
            .collect();
        out.extend(self.attributes.clone());
        if fifo {
            out.insert("FifoQueue".into(), "true".into());
        }
        out.insert("ApproximateNumberOfMessages".into(), depth.visible.to_string());
        out.insert("ApproximateNumberOfMessagesNotVisible".into(), depth.in_flight.to_string());
        out.insert("ApproximateNumberOfMessagesDelayed".into(), depth.delayed.to_string());
        out.insert("CreatedTimestamp".into(), self.created_s.to_string());
        out.insert("LastModifiedTimestamp".into(), self.modified_s.to_string());
        out.insert("QueueArn".into(), arn);
        out
    }

    /// Checks the attributes of a new queue against its name.
    pub(crate) fn check_new(
        name: &str,
        attributes: &BTreeMap<String, String>,
        dlq_exists: &dyn Fn(&str) -> bool,
    ) -> Result<(), SqsError> {
        let fifo_name = name.ends_with(".fifo");
        let fifo_attr = match attributes.get("FifoQueue").map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => return Err(SqsError::invalid_attribute_value("FifoQueue", "must be true or false.")),
        };
        if fifo_attr != fifo_name {
            return Err(SqsError::invalid_parameter(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must \
                 end with .fifo suffix and be 1 to 80 in length.",
            ));
        }
        check_queue_attributes(attributes, fifo_name, dlq_exists)
    }
}

impl Outgoing {
    /// The message as stored, sent now; `sequence` on a FIFO queue.
    pub(crate) fn into_stored(self, now: i64, sequence: Option<u64>) -> Stored {
        Stored {
            id: uuid::Uuid::new_v4().to_string(),
            body: self.body,
            attributes: self.attributes,
            trace_header: self.trace_header,
            sent_ms: now,
            sender_id: self.sender_id,
            group: self.group,
            dedup_id: self.dedup_id,
            sequence,
            source_arn: None,
        }
    }
}

/// Counts of a queue, as GetQueueAttributes and the metrics report them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Depth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
    /// Sent time of the oldest message (ms), if any.
    pub oldest_ms: Option<i64>,
}

/// A message to send, checked by the protocol layer.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    pub body: String,
    pub attributes: Vec<Attr>,
    pub trace_header: Option<String>,
    pub delay_s: Option<i64>,
    pub group: Option<String>,
    pub dedup_id: Option<String>,
    pub sender_id: String,
}

/// What a send answered.
#[derive(Debug, Clone)]
pub struct SendResult {
    pub message_id: String,
    pub sequence: Option<u64>,
}

/// A message handed to a receiver.
#[derive(Debug, Clone)]
pub struct Received {
    pub stored: Arc<Stored>,
    pub receipt_handle: String,
    pub receive_count: u32,
    pub first_receive_ms: i64,
}

/// How to receive.
#[derive(Debug, Clone)]
pub struct ReceiveOptions {
    pub max: usize,
    pub visibility_s: Option<i64>,
    pub wait: Option<Duration>,
}

/// A record's bytes in the store (MessagePack with field names).
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Encoding plain structs into a Vec cannot fail.
    rmp_serde::to_vec_named(value).unwrap_or_default()
}

/// A record read back; an unreadable one names its space and key.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(space: &str, key: &str, bytes: &[u8]) -> Result<T, StoreError> {
    rmp_serde::from_slice(bytes).map_err(|e| StoreError::Io(format!("{space} record {key} cannot be read: {e}")))
}

/// A receipt handle names the queue, the message and the receive.
pub(crate) fn receipt_handle(queue: &str, seq: u64, nonce: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{queue}/{seq}/{nonce}"))
}

pub(crate) fn parse_receipt(queue: &str, handle: &str) -> Result<(u64, String), SqsError> {
    use base64::Engine as _;
    let bad = || SqsError::invalid_receipt(handle);
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(handle).map_err(|_| bad())?;
    let text = String::from_utf8(text).map_err(|_| bad())?;
    let mut parts = text.rsplitn(3, '/');
    let (Some(nonce), Some(seq), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if name != queue {
        return Err(bad());
    }
    Ok((seq.parse().map_err(|_| bad())?, nonce.to_owned()))
}
