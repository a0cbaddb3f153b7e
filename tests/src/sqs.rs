//! SQS helpers for tests, against the endpoint in `FERRY_TEST_SQS_URL`
//! (moto_server on 127.0.0.1:4566 by default).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{Credentials, Region};
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};

/// The SQS endpoint the tests use.
pub fn endpoint() -> String {
    std::env::var("FERRY_TEST_SQS_URL").unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

/// The environment a process under test needs for the AWS credential
/// chain (moto accepts any credentials).
pub fn aws_env() -> [(&'static str, String); 3] {
    [
        ("AWS_ACCESS_KEY_ID", std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "test".into())),
        ("AWS_SECRET_ACCESS_KEY", std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "test".into())),
        ("AWS_REGION", std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())),
    ]
}

/// Panics with a clear message when in-process SDK clients would find no
/// credentials (`just test` sets them).
pub fn require_aws_env() {
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        panic!(
            "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_REGION (any values work with moto), or run `just test`"
        );
    }
}

/// A client with static test credentials.
pub fn client() -> Client {
    client_for(&endpoint())
}

/// A client of another SQS endpoint (ferry's own), with the same
/// credentials.
pub fn client_for(endpoint_url: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "ferry-tests"))
        .endpoint_url(endpoint_url)
        .build();
    Client::from_conf(config)
}

/// Creates a queue named `<prefix>-<random>` (FIFO when asked) and returns
/// its name and URL.
pub async fn create_queue(client: &Client, prefix: &str, fifo: bool) -> (String, String) {
    let mut name = crate::unique(prefix).replace('/', "-");
    let mut request = client.create_queue();
    if fifo {
        name.push_str(".fifo");
        request = request.attributes(QueueAttributeName::FifoQueue, "true");
    }
    let out = request.queue_name(&name).send().await.expect("create queue (is moto_server running?)");
    (name, out.queue_url().expect("queue url").to_owned())
}

/// A String attribute.
pub fn text(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder().data_type("String").string_value(value).build().expect("attribute")
}

/// Sends one message with attributes.
pub async fn send(client: &Client, url: &str, body: &str, attributes: HashMap<String, MessageAttributeValue>) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .set_message_attributes(Some(attributes))
        .send()
        .await
        .expect("send message");
}

/// The first non-empty [`receive`] of up to ten `window`s (empty if
/// nothing came).
pub async fn receive_first(client: &Client, url: &str, window: Duration) -> Vec<Message> {
    for _ in 0..10 {
        let got = receive(client, url, window).await;
        if !got.is_empty() {
            return got;
        }
    }
    Vec::new()
}

/// Receives everything visible within `window` (deleting nothing).
pub async fn receive(client: &Client, url: &str, window: Duration) -> Vec<Message> {
    let deadline = tokio::time::Instant::now() + window;
    let mut all = Vec::new();
    while tokio::time::Instant::now() < deadline {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        all.extend(out.messages.unwrap_or_default());
    }
    all
}

/// Messages waiting or in flight, per the queue's attributes.
pub async fn depth(client: &Client, url: &str) -> (i64, i64) {
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("queue attributes");
    let get =
        |k: QueueAttributeName| out.attributes().and_then(|a| a.get(&k)).and_then(|v| v.parse().ok()).unwrap_or(-1);
    (
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

/// The text of a received message's attribute.
pub fn attribute<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.message_attributes()?.get(name)?.string_value()
}

/// Waits (up to 5 s) until the queue holds nothing, visible or in flight;
/// returns the last depth seen.
pub async fn wait_until_empty(client: &Client, url: &str) -> (i64, i64) {
    let mut last = depth(client, url).await;
    for _ in 0..50 {
        if last == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = depth(client, url).await;
    }
    last
}

/// A one-route config: MQTT `<src>/#` on `mqtt_url` -> the SQS queue at
/// `queue_url`. `extra` is appended to the file (e.g. an `[admin]` table or
/// more route keys go before it via `route_extra`).
pub fn mqtt_to_sqs_config(
    mqtt_url: &str,
    src: &str,
    queue_url: &str,
    sender_extra: &str,
    route_extra: &str,
    extra: &str,
) -> String {
    format!(
        r#"
[receivers.m]
type = "mqtt"
url = "{mqtt_url}"
client_id = "{rid}"
topics = ["{src}/#"]
[senders.q]
type = "sqs"
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
{sender_extra}
[[routes]]
id = "to-sqs"
receiver = "m"
{route_extra}
[[routes.bindings]]
sender = "q"
{extra}
"#,
        rid = crate::unique("ferry-m"),
        endpoint = endpoint(),
    )
}

/// Receives and deletes until `want` bodies arrived or `rounds` half-second
/// receives passed; returns the bodies in arrival order.
pub async fn consume_bodies(client: &Client, url: &str, want: usize, rounds: usize) -> Vec<String> {
    consume(client, url, want, rounds).await.iter().map(|m| m.body().unwrap_or_default().to_owned()).collect()
}

/// Receives and deletes until `want` messages arrived or `rounds`
/// half-second receives passed; returns them in arrival order.
pub async fn consume(client: &Client, url: &str, want: usize, rounds: usize) -> Vec<Message> {
    let mut got = Vec::new();
    for _ in 0..rounds {
        for m in receive(client, url, Duration::from_millis(500)).await {
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
            got.push(m);
        }
        if got.len() >= want {
            break;
        }
    }
    got
}

/// A FIFO message's system attribute `name` (`MessageGroupId`, say).
pub fn system_attribute(m: &Message, name: &str) -> String {
    m.attributes().and_then(|a| a.iter().find(|(k, _)| k.as_str() == name).map(|(_, v)| v.clone())).unwrap_or_default()
}
