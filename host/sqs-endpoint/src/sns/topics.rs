//! SNS topics over the endpoint's queues (seed 003: a topic is a registry
//! entry; a publish fans out to its subscriptions at once).
//!
//! - `sqs` subscriptions name an endpoint queue by ARN; a publish puts the
//!   Notification JSON there (or, with `RawMessageDelivery`, the bare
//!   message with its attributes) before `Publish` answers.
//! - `http`/`https` subscriptions are webhooks: confirmed as SNS confirms
//!   them (a `SubscriptionConfirmation` POST whose `SubscribeURL` calls
//!   `ConfirmSubscription`), then sent every notification by POST. Each
//!   POST is a record in the store before `Publish` answers and is retried
//!   after a failure (the subscription's `DeliveryPolicy`, SNS's default 3
//!   retries 20 s apart) and after a restart; one that never succeeds is
//!   counted as `failed` and logged.
//! - A route receiving from a topic (`type = "sqs_endpoint"`, `topic = …`)
//!   has a queue of ferry's own ([`crate::model::route_queue`]) that every
//!   publish reaches, enveloped, whether or not the route is running.
//!
//! Records: `sns.topic` (name → [`TopicMeta`]), `sns.subscription` (ARN →
//! [`Subscription`]), `sns.route` (`topic:receiver`), `sns.http` (pending
//! webhook POSTs).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferry_core::metrics::Metrics;
use ferry_core::outbox::StoreError;
use ferry_core::records::{RecordChange, RecordStore};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::engine::{Engine, Outgoing};
use crate::error::{ErrorKind, SqsError};
use crate::model::{Attr, route_queue};
use crate::records::{decode, encode};
use crate::sns::filter::{Policy, Scope};

const TOPICS: &str = "sns.topic";
const SUBSCRIPTIONS: &str = "sns.subscription";
const ROUTES: &str = "sns.route";
const WEBHOOKS: &str = "sns.http";

/// The largest message SNS takes (body and attributes), in bytes.
pub const MAX_PUBLISH_BYTES: usize = 262_144;
/// Webhook POSTs under way at once.
const WEBHOOK_CONCURRENCY: usize = 64;
/// How long one webhook POST may take.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(15);
/// SNS's default HTTP retry policy: 3 retries, 20 s apart.
const DEFAULT_RETRIES: u32 = 3;
const DEFAULT_DELAY_S: u64 = 20;
/// The sender id of the messages a publish puts in queues.
pub const SNS_SENDER_ID: &str = "sns";

/// Topic attributes a caller may set.
pub const TOPIC_ATTRIBUTES: &[&str] =
    &["DisplayName", "Policy", "DeliveryPolicy", "TracingConfig", "KmsMasterKeyId", "SignatureVersion"];
/// Subscription attributes a caller may set.
pub const SUBSCRIPTION_ATTRIBUTES: &[&str] =
    &["RawMessageDelivery", "FilterPolicy", "FilterPolicyScope", "DeliveryPolicy"];

/// A topic's durable description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub attributes: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

/// A subscription's durable description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Subscription {
    pub arn: String,
    pub topic: String,
    /// `sqs`, `http` or `https`.
    pub protocol: String,
    /// A queue ARN or a URL.
    pub endpoint: String,
    pub attributes: BTreeMap<String, String>,
    pub confirmed: bool,
    /// The confirmation token of a webhook not yet confirmed.
    pub token: Option<String>,
}

impl Subscription {
    fn raw(&self) -> bool {
        self.attributes.get("RawMessageDelivery").is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// (retries, seconds between them) from `DeliveryPolicy`.
    fn retry_policy(&self) -> (u32, u64) {
        let policy = self.attributes.get("DeliveryPolicy").and_then(|p| serde_json::from_str::<Value>(p).ok());
        let healthy = policy.as_ref().and_then(|p| p.get("healthyRetryPolicy"));
        let field = |name: &str| healthy.and_then(|h| h.get(name)).and_then(Value::as_u64);
        let retries = field("numRetries").map_or(DEFAULT_RETRIES, |n| n.min(100) as u32);
        let delay = field("minDelayTarget").map_or(DEFAULT_DELAY_S, |d| d.clamp(1, 3600));
        (retries, delay)
    }
}

/// A subscription with its filter read once.
struct Sub {
    record: Subscription,
    filter: Option<(Policy, Scope)>,
}

impl Sub {
    fn new(record: Subscription) -> Self {
        let filter = read_filter(&record.attributes).ok().flatten();
        Self { record, filter }
    }

    fn passes(&self, message: &Publish) -> bool {
        match &self.filter {
            None => true,
            Some((policy, Scope::MessageAttributes)) => policy.matches_attributes(&message.attributes),
            Some((policy, Scope::MessageBody)) => policy.matches_body(message.text_for(&self.record.protocol)),
        }
    }
}

fn read_filter(attributes: &BTreeMap<String, String>) -> Result<Option<(Policy, Scope)>, String> {
    let scope = Scope::parse(attributes.get("FilterPolicyScope").map_or("", String::as_str))?;
    match attributes.get("FilterPolicy").filter(|p| !p.trim().is_empty()) {
        Some(text) => Ok(Some((Policy::parse(text)?, scope))),
        None => Ok(None),
    }
}

/// A pending webhook POST.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Webhook {
    subscription: String,
    topic: String,
    url: String,
    body: String,
    headers: Vec<(String, String)>,
    retries: u32,
    delay_s: u64,
}

/// A message to publish, checked.
#[derive(Debug, Clone)]
pub struct Publish {
    pub message: String,
    pub subject: Option<String>,
    pub attributes: Vec<Attr>,
    /// `MessageStructure = json`: the message per protocol (`default`
    /// for the rest).
    pub per_protocol: Option<Map<String, Value>>,
}

impl Publish {
    /// The text a subscription of `protocol` gets.
    fn text_for(&self, protocol: &str) -> &str {
        match &self.per_protocol {
            Some(map) => map
                .get(protocol)
                .or_else(|| map.get("default"))
                .and_then(Value::as_str)
                .unwrap_or(self.message.as_str()),
            None => &self.message,
        }
    }
}

/// One subscription as the list actions report it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub arn: String,
    pub topic: String,
    pub protocol: String,
    pub endpoint: String,
}

struct State {
    topics: BTreeMap<String, TopicMeta>,
    subs: BTreeMap<String, Sub>,
    /// topic → route receivers.
    routes: BTreeMap<String, BTreeSet<String>>,
}

impl State {
    async fn load(store: &dyn RecordStore) -> Result<Self, StoreError> {
        let mut topics = BTreeMap::new();
        for (key, bytes) in store.load(TOPICS).await? {
            let meta: TopicMeta = decode(TOPICS, &key, &bytes)?;
            topics.insert(meta.name.clone(), meta);
        }
        let mut subs = BTreeMap::new();
        for (key, bytes) in store.load(SUBSCRIPTIONS).await? {
            let s: Subscription = decode(SUBSCRIPTIONS, &key, &bytes)?;
            subs.insert(s.arn.clone(), Sub::new(s));
        }
        let mut routes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (key, _) in store.load(ROUTES).await? {
            if let Some((topic, receiver)) = key.split_once(':') {
                routes.entry(topic.to_owned()).or_default().insert(receiver.to_owned());
            }
        }
        Ok(Self { topics, subs, routes })
    }
}

/// The topics.
pub struct Topics {
    /// The queues subscriptions deliver to.
    pub queues: Arc<Engine>,
    store: Arc<dyn RecordStore>,
    state: Mutex<State>,
    http: reqwest::Client,
    webhooks: Arc<Semaphore>,
    metrics: Metrics,
    /// Cancelled at [`Topics::stop`]: webhook POSTs under way end, their
    /// records kept for the next start.
    stopping: CancellationToken,
}

/// `2026-12-02T01:02:03.456Z`, as SNS writes times.
pub fn iso_time(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        ms.rem_euclid(1000)
    )
}

/// The topic name in a topic ARN (`arn:aws:sns:{region}:{account}:{name}`).
/// Only the name counts, as only a queue URL's path does.
pub fn topic_name(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "sns", _, _, name] if !name.is_empty() => Some(*name),
        _ => None,
    }
}

/// Whether `name` is a topic name SNS accepts (standard topics only).
pub fn valid_topic_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Topics {
    /// Loads topics, subscriptions and route attachments, and resumes the
    /// webhook POSTs a stop cut short.
    pub async fn open(
        queues: Arc<Engine>,
        store: Arc<dyn RecordStore>,
        metrics: Metrics,
    ) -> Result<Arc<Self>, StoreError> {
        let state = State::load(store.as_ref()).await?;
        let pending = store.load(WEBHOOKS).await?;
        let http = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .user_agent("ferry SNS endpoint")
            .build()
            .map_err(|e| StoreError::Io(format!("the webhook client cannot start: {e}")))?;
        let this = Arc::new(Self {
            queues,
            store,
            state: Mutex::new(state),
            http,
            webhooks: Arc::new(Semaphore::new(WEBHOOK_CONCURRENCY)),
            metrics,
            stopping: CancellationToken::new(),
        });
        for (key, bytes) in pending {
            match decode::<Webhook>(WEBHOOKS, &key, &bytes) {
                Ok(hook) => this.spawn_webhook(key, hook),
                Err(e) => warn!(error = %e, "a pending webhook POST cannot be read; it is skipped"),
            }
        }
        Ok(this)
    }

    /// On a shared store, reads the topics, subscriptions and route
    /// attachments again: another instance may have changed them. Every
    /// SNS request starts with it, so an app sees its own changes whichever
    /// instance it reaches next.
    pub async fn refresh(&self) -> Result<(), SqsError> {
        if self.queues.is_shared() {
            let state = State::load(self.store.as_ref()).await.map_err(SqsError::internal)?;
            *self.lock() = state;
        }
        Ok(())
    }

    /// Stops the webhook POSTs under way; what they had left to send
    /// stays recorded and goes at the next start.
    pub fn stop(&self) {
        self.stopping.cancel();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn arn(&self, topic: &str) -> String {
        format!("arn:aws:sns:{}:{}:{topic}", self.queues.identity.region, self.queues.identity.account)
    }

    /// The key of the queue an SQS endpoint ARN names, in any region.
    fn queue_arn_name(&self, arn: &str) -> Option<String> {
        self.queues.identity.key_of_arn(arn)
    }

    fn existing(&self, state: &State, topic_arn: &str) -> Result<String, SqsError> {
        let name = topic_name(topic_arn).ok_or_else(|| SqsError::sns_invalid("TopicArn"))?;
        if state.topics.contains_key(name) { Ok(name.to_owned()) } else { Err(not_found()) }
    }

    pub fn exists(&self, topic: &str) -> bool {
        self.lock().topics.contains_key(topic)
    }

    /// Topic names, in order.
    pub fn list(&self) -> Vec<String> {
        self.lock().topics.keys().cloned().collect()
    }

    async fn commit(&self, change: RecordChange) -> Result<(), SqsError> {
        self.store.commit(change).await.map_err(SqsError::internal)
    }

    /// Creates a topic, or finds the one of that name. Returns its ARN.
    pub async fn create(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<String, SqsError> {
        if name.ends_with(".fifo") || attributes.get("FifoTopic").is_some_and(|v| v == "true") {
            return Err(SqsError::sns_invalid("FifoTopic: ferry serves standard topics only"));
        }
        if !valid_topic_name(name) {
            return Err(SqsError::sns_invalid("Topic Name"));
        }
        for key in attributes.keys() {
            if key != "FifoTopic" && !TOPIC_ATTRIBUTES.contains(&key.as_str()) {
                return Err(SqsError::sns_invalid(format!("Attributes Reason: Unknown attribute {key}")));
            }
        }
        let meta = {
            let mut state = self.lock();
            if state.topics.contains_key(name) {
                return Ok(self.arn(name));
            }
            let meta = TopicMeta { name: name.to_owned(), attributes, tags };
            state.topics.insert(name.to_owned(), meta.clone());
            meta
        };
        let mut change = RecordChange::default();
        change.put(TOPICS, name, encode(&meta));
        if let Err(e) = self.commit(change).await {
            self.lock().topics.remove(name);
            return Err(e);
        }
        Ok(self.arn(name))
    }

    /// Deletes a topic and its subscriptions (a missing topic is not an
    /// error, as in SNS). Route receivers stay attached by name: they get
    /// the messages of a topic created again under the same name.
    pub async fn delete(&self, topic_arn: &str) -> Result<(), SqsError> {
        let name = topic_name(topic_arn).ok_or_else(|| SqsError::sns_invalid("TopicArn"))?;
        let mut change = RecordChange::default();
        {
            let mut state = self.lock();
            if state.topics.remove(name).is_none() {
                return Ok(());
            }
            change.delete(TOPICS, name);
            let gone: Vec<String> =
                state.subs.iter().filter(|(_, s)| s.record.topic == name).map(|(arn, _)| arn.clone()).collect();
            for arn in gone {
                state.subs.remove(&arn);
                change.delete(SUBSCRIPTIONS, arn);
            }
        }
        self.commit(change).await
    }

    /// A topic's attributes: what was set and the computed ones.
    pub fn topic_attributes(&self, topic_arn: &str) -> Result<BTreeMap<String, String>, SqsError> {
        let state = self.lock();
        let name = self.existing(&state, topic_arn)?;
        let meta = &state.topics[&name];
        let mut out = meta.attributes.clone();
        let (mut confirmed, mut pending) = (0, 0);
        for s in state.subs.values().filter(|s| s.record.topic == name) {
            if s.record.confirmed {
                confirmed += 1;
            } else {
                pending += 1;
            }
        }
        out.insert("TopicArn".into(), self.arn(&name));
        out.insert("Owner".into(), self.queues.identity.account.clone());
        out.entry("DisplayName".into()).or_default();
        out.insert("SubscriptionsConfirmed".into(), confirmed.to_string());
        out.insert("SubscriptionsPending".into(), pending.to_string());
        out.insert("SubscriptionsDeleted".into(), "0".into());
        Ok(out)
    }

    pub async fn set_topic_attribute(&self, topic_arn: &str, key: &str, value: &str) -> Result<(), SqsError> {
        if !TOPIC_ATTRIBUTES.contains(&key) {
            return Err(SqsError::sns_invalid("AttributeName"));
        }
        let meta = {
            let mut state = self.lock();
            let name = self.existing(&state, topic_arn)?;
            let meta = state.topics.get_mut(&name).ok_or_else(not_found)?;
            meta.attributes.insert(key.to_owned(), value.to_owned());
            meta.clone()
        };
        let mut change = RecordChange::default();
        change.put(TOPICS, meta.name.clone(), encode(&meta));
        self.commit(change).await
    }

    /// Subscribes an endpoint. Returns the subscription and whether it
    /// waits for confirmation (a webhook).
    pub async fn subscribe(
        self: &Arc<Self>,
        topic_arn: &str,
        protocol: &str,
        endpoint: &str,
        attributes: BTreeMap<String, String>,
        base_url: &str,
    ) -> Result<(String, bool), SqsError> {
        match protocol {
            "sqs" => {
                let name = self.queue_arn_name(endpoint).ok_or_else(|| SqsError::sns_invalid("SQS endpoint ARN"))?;
                if name.ends_with(".fifo") {
                    return Err(SqsError::sns_invalid(
                        "Endpoint Reason: FIFO SQS Queues can not be subscribed to standard SNS topics",
                    ));
                }
            }
            "http" | "https" => {
                let scheme = format!("{protocol}://");
                if !endpoint.starts_with(&scheme) || reqwest::Url::parse(endpoint).is_err() {
                    return Err(SqsError::sns_invalid(format!(
                        "Endpoint must match the specified protocol: {protocol}"
                    )));
                }
            }
            other => {
                return Err(SqsError::sns_invalid(format!(
                    "Amazon SNS does not support this protocol string: {other}"
                )));
            }
        }
        for (key, value) in &attributes {
            check_subscription_attribute(protocol, key, value)?;
        }
        read_filter(&attributes).map_err(SqsError::sns_invalid)?;
        let webhook = protocol != "sqs";
        let (record, hook) = {
            let mut state = self.lock();
            let topic = self.existing(&state, topic_arn)?;
            if let Some(same) = state
                .subs
                .values()
                .find(|s| s.record.topic == topic && s.record.protocol == protocol && s.record.endpoint == endpoint)
            {
                return Ok((same.record.arn.clone(), !same.record.confirmed));
            }
            let arn = format!("{}:{}", self.arn(&topic), uuid::Uuid::new_v4());
            let token = webhook.then(|| {
                let bytes: [u8; 32] = rand::random();
                hex::encode(bytes)
            });
            let record = Subscription {
                arn: arn.clone(),
                topic: topic.clone(),
                protocol: protocol.to_owned(),
                endpoint: endpoint.to_owned(),
                attributes,
                confirmed: !webhook,
                token: token.clone(),
            };
            let hook = token.map(|token| self.confirmation(&record, &token, base_url));
            state.subs.insert(arn, Sub::new(record.clone()));
            (record, hook)
        };
        let mut change = RecordChange::default();
        change.put(SUBSCRIPTIONS, record.arn.clone(), encode(&record));
        let hook_key = uuid::Uuid::new_v4().to_string();
        if let Some(hook) = &hook {
            change.put(WEBHOOKS, hook_key.clone(), encode(hook));
        }
        if let Err(e) = self.commit(change).await {
            self.lock().subs.remove(&record.arn);
            return Err(e);
        }
        if let Some(hook) = hook {
            self.spawn_webhook(hook_key, hook);
        }
        Ok((record.arn, webhook))
    }

    /// The SubscriptionConfirmation POST a new webhook gets.
    fn confirmation(&self, s: &Subscription, token: &str, base_url: &str) -> Webhook {
        let topic_arn = self.arn(&s.topic);
        let message_id = uuid::Uuid::new_v4().to_string();
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "ConfirmSubscription")
            .append_pair("TopicArn", &topic_arn)
            .append_pair("Token", token)
            .finish();
        let body = json!({
            "Type": "SubscriptionConfirmation",
            "MessageId": message_id,
            "Token": token,
            "TopicArn": topic_arn,
            "Message": format!(
                "You have chosen to subscribe to the topic {topic_arn}.\nTo confirm the subscription, visit the \
                 SubscribeURL included in this message."
            ),
            "SubscribeURL": format!("{}/?{query}", base_url.trim_end_matches('/')),
            "Timestamp": iso_time(self.queues.now_ms()),
            "SignatureVersion": "1",
        });
        Webhook {
            subscription: s.arn.clone(),
            topic: s.topic.clone(),
            url: s.endpoint.clone(),
            body: body.to_string(),
            headers: vec![
                ("x-amz-sns-message-type".into(), "SubscriptionConfirmation".into()),
                ("x-amz-sns-message-id".into(), message_id),
                ("x-amz-sns-topic-arn".into(), topic_arn),
                ("content-type".into(), "text/plain; charset=UTF-8".into()),
            ],
            retries: DEFAULT_RETRIES,
            delay_s: DEFAULT_DELAY_S,
        }
    }

    /// Confirms a webhook subscription with the token its confirmation
    /// carried. Returns the subscription ARN.
    pub async fn confirm(&self, topic_arn: &str, token: &str) -> Result<String, SqsError> {
        let record = {
            let mut state = self.lock();
            let topic = self.existing(&state, topic_arn)?;
            let sub = state
                .subs
                .values_mut()
                .find(|s| s.record.topic == topic && s.record.token.as_deref() == Some(token))
                .ok_or_else(|| SqsError::sns_invalid("Token"))?;
            sub.record.confirmed = true;
            sub.record.clone()
        };
        let mut change = RecordChange::default();
        change.put(SUBSCRIPTIONS, record.arn.clone(), encode(&record));
        self.commit(change).await?;
        Ok(record.arn)
    }

    /// Removes a subscription (a missing one is not an error, as in SNS).
    pub async fn unsubscribe(&self, arn: &str) -> Result<(), SqsError> {
        if self.lock().subs.remove(arn).is_none() {
            return Ok(());
        }
        let mut change = RecordChange::default();
        change.delete(SUBSCRIPTIONS, arn);
        self.commit(change).await
    }

    /// Subscriptions in ARN order, of one topic or all.
    pub fn subscriptions(&self, topic_arn: Option<&str>) -> Result<Vec<Listed>, SqsError> {
        let state = self.lock();
        let topic = topic_arn.map(|arn| self.existing(&state, arn)).transpose()?;
        Ok(state
            .subs
            .values()
            .filter(|s| topic.as_ref().is_none_or(|t| *t == s.record.topic))
            .map(|s| Listed {
                arn: if s.record.confirmed { s.record.arn.clone() } else { "PendingConfirmation".into() },
                topic: self.arn(&s.record.topic),
                protocol: s.record.protocol.clone(),
                endpoint: s.record.endpoint.clone(),
            })
            .collect())
    }

    pub fn subscription_attributes(&self, arn: &str) -> Result<BTreeMap<String, String>, SqsError> {
        let state = self.lock();
        let s = &state.subs.get(arn).ok_or_else(|| SqsError::sns_not_found("Subscription does not exist"))?.record;
        let mut out = s.attributes.clone();
        out.insert("SubscriptionArn".into(), s.arn.clone());
        out.insert("TopicArn".into(), self.arn(&s.topic));
        out.insert("Owner".into(), self.queues.identity.account.clone());
        out.insert("Protocol".into(), s.protocol.clone());
        out.insert("Endpoint".into(), s.endpoint.clone());
        out.insert("PendingConfirmation".into(), (!s.confirmed).to_string());
        out.insert("ConfirmationWasAuthenticated".into(), s.confirmed.to_string());
        out.entry("RawMessageDelivery".into()).or_insert_with(|| "false".into());
        Ok(out)
    }

    pub async fn set_subscription_attribute(&self, arn: &str, key: &str, value: &str) -> Result<(), SqsError> {
        let record = {
            let mut state = self.lock();
            let sub = state.subs.get_mut(arn).ok_or_else(|| SqsError::sns_not_found("Subscription does not exist"))?;
            check_subscription_attribute(&sub.record.protocol, key, value)?;
            let mut attributes = sub.record.attributes.clone();
            if value.is_empty() {
                attributes.remove(key);
            } else {
                attributes.insert(key.to_owned(), value.to_owned());
            }
            read_filter(&attributes).map_err(SqsError::sns_invalid)?;
            sub.record.attributes = attributes;
            let record = sub.record.clone();
            *sub = Sub::new(record.clone());
            record
        };
        let mut change = RecordChange::default();
        change.put(SUBSCRIPTIONS, record.arn.clone(), encode(&record));
        self.commit(change).await
    }

    /// Attaches the route receiver `receiver` to `topic` (declaring the
    /// topic when missing): from now on every publish reaches its queue.
    /// Returns the queue's name.
    pub async fn attach(&self, topic: &str, receiver: &str) -> Result<String, SqsError> {
        if !self.exists(topic) {
            self.create(topic, BTreeMap::new(), BTreeMap::new()).await?;
        }
        let queue = route_queue(topic, receiver);
        self.queues.declare_internal(&queue).await?;
        let added = self.lock().routes.entry(topic.to_owned()).or_default().insert(receiver.to_owned());
        if added {
            let mut change = RecordChange::default();
            change.put(ROUTES, format!("{topic}:{receiver}"), Vec::new());
            if let Err(e) = self.commit(change).await {
                if let Some(set) = self.lock().routes.get_mut(topic) {
                    set.remove(receiver);
                }
                return Err(e);
            }
        }
        Ok(queue)
    }

    /// Detaches every route receiver not in `keep` (`(topic, receiver)`)
    /// and deletes its queue: a route taken out of the config stops
    /// collecting messages.
    pub async fn retain_routes(&self, keep: &BTreeSet<(String, String)>) -> Result<(), SqsError> {
        let gone: Vec<(String, String)> = {
            let mut state = self.lock();
            let mut gone = Vec::new();
            for (topic, receivers) in &mut state.routes {
                receivers.retain(|r| {
                    let kept = keep.contains(&(topic.clone(), r.clone()));
                    if !kept {
                        gone.push((topic.clone(), r.clone()));
                    }
                    kept
                });
            }
            gone
        };
        let mut change = RecordChange::default();
        for (topic, receiver) in &gone {
            change.delete(ROUTES, format!("{topic}:{receiver}"));
        }
        self.commit(change).await?;
        for (topic, receiver) in gone {
            let queue = route_queue(&topic, &receiver);
            if self.queues.exists(&queue).await? {
                self.queues.delete(&queue).await?;
            }
        }
        Ok(())
    }

    /// The Notification JSON a subscription (or a route, `None`) gets.
    fn notification(
        &self,
        topic: &str,
        id: &str,
        sent_ms: i64,
        text: &str,
        p: &Publish,
        unsubscribe: Option<String>,
    ) -> String {
        let mut doc = Map::new();
        doc.insert("Type".into(), "Notification".into());
        doc.insert("MessageId".into(), id.into());
        doc.insert("TopicArn".into(), self.arn(topic).into());
        if let Some(subject) = &p.subject {
            doc.insert("Subject".into(), subject.clone().into());
        }
        doc.insert("Message".into(), text.into());
        doc.insert("Timestamp".into(), iso_time(sent_ms).into());
        doc.insert("SignatureVersion".into(), "1".into());
        if let Some(url) = unsubscribe {
            doc.insert("UnsubscribeURL".into(), url.into());
        }
        if !p.attributes.is_empty() {
            let attrs: Map<String, Value> = p
                .attributes
                .iter()
                .map(|a| (a.name.clone(), json!({"Type": a.data_type, "Value": a.as_text()})))
                .collect();
            doc.insert("MessageAttributes".into(), Value::Object(attrs));
        }
        Value::Object(doc).to_string()
    }

    fn count(&self, topic: &str, protocol: &str, outcome: &str) {
        Metrics::inc(
            &self.metrics.counter_family(&crate::SNS_DELIVERIES),
            &[("topic", topic), ("protocol", protocol), ("outcome", outcome)],
        );
    }

    /// Publishes to a topic: every queue subscription and route has the
    /// message, and every webhook POST is recorded, when this returns.
    /// Returns the message id.
    pub async fn publish(self: &Arc<Self>, topic_arn: &str, p: Publish, base_url: &str) -> Result<String, SqsError> {
        let id = uuid::Uuid::new_v4().to_string();
        let sent_ms = self.queues.now_ms();
        let (topic, targets, routes) = {
            let state = self.lock();
            let topic = self.existing(&state, topic_arn)?;
            let mut targets = Vec::new();
            for s in state.subs.values().filter(|s| s.record.topic == topic && s.record.confirmed) {
                if s.passes(&p) {
                    targets.push(s.record.clone());
                } else {
                    self.count(&topic, &s.record.protocol, "filtered");
                }
            }
            let routes: Vec<String> = state.routes.get(&topic).into_iter().flatten().cloned().collect();
            (topic, targets, routes)
        };
        let unsubscribe_url = |arn: &str| {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("Action", "Unsubscribe")
                .append_pair("SubscriptionArn", arn)
                .finish();
            format!("{}/?{query}", base_url.trim_end_matches('/'))
        };
        let mut hooks = Vec::new();
        let mut sends = Vec::new();
        for s in &targets {
            let text = p.text_for(&s.protocol);
            let raw = s.raw();
            let body = if raw {
                text.to_owned()
            } else {
                self.notification(&topic, &id, sent_ms, text, &p, Some(unsubscribe_url(&s.arn)))
            };
            if s.protocol == "sqs" {
                let queue = self.queue_arn_name(&s.endpoint).unwrap_or_default();
                let attributes = if raw { p.attributes.clone() } else { Vec::new() };
                sends.push((queue, s.protocol.clone(), body, attributes));
            } else {
                let mut headers = vec![
                    ("x-amz-sns-message-type".to_owned(), "Notification".to_owned()),
                    ("x-amz-sns-message-id".to_owned(), id.clone()),
                    ("x-amz-sns-topic-arn".to_owned(), self.arn(&topic)),
                    ("x-amz-sns-subscription-arn".to_owned(), s.arn.clone()),
                    ("content-type".to_owned(), "text/plain; charset=UTF-8".to_owned()),
                ];
                if raw {
                    headers.push(("x-amz-sns-rawdelivery".to_owned(), "true".to_owned()));
                    headers.extend(p.attributes.iter().map(attribute_header));
                }
                let (retries, delay_s) = s.retry_policy();
                hooks.push(Webhook {
                    subscription: s.arn.clone(),
                    topic: topic.clone(),
                    url: s.endpoint.clone(),
                    body,
                    headers,
                    retries,
                    delay_s,
                });
            }
        }
        for receiver in routes {
            let body = self.notification(&topic, &id, sent_ms, p.text_for("sqs"), &p, None);
            sends.push((route_queue(&topic, &receiver), "route".to_owned(), body, Vec::new()));
        }
        let keyed: Vec<(String, Webhook)> = hooks.into_iter().map(|h| (uuid::Uuid::new_v4().to_string(), h)).collect();
        if !keyed.is_empty() {
            let mut change = RecordChange::default();
            for (key, hook) in &keyed {
                change.put(WEBHOOKS, key.clone(), encode(hook));
            }
            self.commit(change).await?;
        }
        let deliveries = sends.into_iter().map(|(queue, protocol, body, attributes)| {
            let this = self.clone();
            async move {
                let result = this.to_queue(&queue, body, attributes).await;
                (queue, protocol, result)
            }
        });
        let mut store_failure = None;
        for (queue, protocol, result) in futures_util::future::join_all(deliveries).await {
            match result {
                Ok(()) => self.count(&topic, &protocol, "delivered"),
                Err(e) => {
                    self.count(&topic, &protocol, "failed");
                    warn!(topic = %topic, queue = %queue, error = %e, "a publish could not reach a subscribed queue");
                    if e.kind == ErrorKind::Internal {
                        store_failure = Some(e);
                    }
                }
            }
        }
        for (key, hook) in keyed {
            self.spawn_webhook(key, hook);
        }
        // A store that failed may have lost a queue's copy: the caller
        // hears it and publishes again (subscribers may see it twice).
        match store_failure {
            Some(e) => Err(e),
            None => Ok(id),
        }
    }

    async fn to_queue(&self, queue: &str, body: String, attributes: Vec<Attr>) -> Result<(), SqsError> {
        let (_, _, max_size) = self.queues.queue_kind(queue).await?;
        let size = body.len() + attributes.iter().map(Attr::size).sum::<usize>();
        if size as i64 > max_size {
            return Err(SqsError::invalid_parameter(format!(
                "the message is {size} bytes, over the queue's MaximumMessageSize {max_size}"
            )));
        }
        let message = Outgoing { body, attributes, sender_id: SNS_SENDER_ID.to_owned(), ..Outgoing::default() };
        self.queues.send(queue, vec![message]).await.map(|_| ())
    }

    fn spawn_webhook(self: &Arc<Self>, key: String, hook: Webhook) {
        let this = self.clone();
        tokio::spawn(async move { this.deliver(key, hook).await });
    }

    /// POSTs one webhook delivery until it succeeds or its retries run
    /// out; then its record goes.
    async fn deliver(self: Arc<Self>, key: String, hook: Webhook) {
        tokio::select! {
            _ = self.stopping.cancelled() => {}
            _ = self.clone().attempts(key, hook) => {}
        }
    }

    async fn attempts(self: Arc<Self>, key: String, hook: Webhook) {
        let mut attempt = 0;
        let outcome = loop {
            let answer = {
                let Ok(_permit) = self.webhooks.acquire().await else { return };
                let mut request = self.http.post(&hook.url).body(hook.body.clone());
                for (name, value) in &hook.headers {
                    request = request.header(name, value);
                }
                request.send().await
            };
            let failure = match answer {
                Ok(r) if r.status().is_success() => break "delivered",
                Ok(r) => format!("HTTP {}", r.status()),
                Err(e) => e.to_string(),
            };
            if attempt >= hook.retries {
                warn!(
                    topic = %hook.topic,
                    subscription = %hook.subscription,
                    url = %hook.url,
                    error = %failure,
                    attempts = attempt + 1,
                    "a webhook POST failed every retry; this message is not delivered to it"
                );
                break "failed";
            }
            debug!(url = %hook.url, error = %failure, attempt, "webhook POST failed; retrying");
            attempt += 1;
            tokio::time::sleep(Duration::from_secs(hook.delay_s)).await;
        };
        let protocol = if hook.url.starts_with("https://") { "https" } else { "http" };
        self.count(&hook.topic, protocol, outcome);
        let mut change = RecordChange::default();
        change.delete(WEBHOOKS, key);
        if let Err(e) = self.store.commit(change).await {
            warn!(error = %e, "a finished webhook POST stays recorded; it is sent again at the next start");
        }
    }
}

fn not_found() -> SqsError {
    SqsError::sns_not_found("Topic does not exist")
}

/// `x-amz-sns-attr-{name}` of raw HTTP delivery (binary values base64;
/// control characters, which a header cannot carry, as the `%XX` of each
/// of their UTF-8 bytes, so the value decodes back to the text).
fn attribute_header(a: &Attr) -> (String, String) {
    let value = a
        .as_text()
        .chars()
        .map(|c| {
            let mut utf8 = [0; 4];
            let bytes = c.encode_utf8(&mut utf8).as_bytes();
            if c.is_control() {
                percent_encoding::percent_encode(bytes, percent_encoding::CONTROLS).to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    (format!("x-amz-sns-attr-{}", a.name), value)
}

fn check_subscription_attribute(protocol: &str, key: &str, value: &str) -> Result<(), SqsError> {
    if !SUBSCRIPTION_ATTRIBUTES.contains(&key) {
        return Err(SqsError::sns_invalid(format!("AttributeName {key}")));
    }
    match key {
        "RawMessageDelivery" if !matches!(value.to_ascii_lowercase().as_str(), "true" | "false" | "") => {
            Err(SqsError::sns_invalid("Attributes Reason: RawMessageDelivery: Invalid value. Must be true or false."))
        }
        "DeliveryPolicy" if protocol == "sqs" => Err(SqsError::sns_invalid(
            "Attributes Reason: DeliveryPolicy: Delivery protocol [sqs] does not support delivery policies",
        )),
        "DeliveryPolicy" if !value.is_empty() && serde_json::from_str::<Value>(value).is_err() => {
            Err(SqsError::sns_invalid("Attributes Reason: DeliveryPolicy: failed to parse JSON"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod attribute_header_tests {
    use crate::model::{Attr, AttrValue};

    #[test]
    fn a_control_character_is_escaped_byte_by_byte_and_decodes_back() {
        let text = "a\u{85}b\nc é";
        let attr = Attr { name: "note".into(), data_type: "String".into(), value: AttrValue::Text(text.into()) };
        let (name, value) = super::attribute_header(&attr);
        assert_eq!(name, "x-amz-sns-attr-note");
        // U+0085 is two bytes in UTF-8; one `%85` would decode to invalid UTF-8.
        assert_eq!(value, "a%C2%85b%0Ac é");
        let back = percent_encoding::percent_decode_str(&value).decode_utf8().expect("valid UTF-8");
        assert_eq!(back, text);
    }
}
