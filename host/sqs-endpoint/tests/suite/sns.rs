//! SNS on the endpoint, driven by the AWS SDK for Rust (query protocol):
//! topics, fan-out to queues (enveloped and raw), filter policies,
//! PublishBatch, webhooks with their confirmation, retries and a restart,
//! SigV4, and SNS's errors.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sns::error::ProvideErrorMetadata;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use ferry_tests::endpoint::Endpoint;
use ferry_tests::unique;
use ferry_transport_sqs::attributes::{AttrBytes, md5_of_attributes};
use serde_json::Value;

fn attr(data_type: &str, v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder().data_type(data_type).string_value(v).build().expect("attribute")
}

/// A queue and its ARN.
async fn queue(ep: &Endpoint, stem: &str) -> (String, String) {
    let name = unique(stem);
    let url = ep.create(&name, &[]).await;
    (url, format!("arn:aws:sqs:us-east-1:000000000000:{name}"))
}

async fn topic(ep: &Endpoint, stem: &str) -> String {
    let out = ep.sns.create_topic().name(unique(stem)).send().await.expect("topic");
    out.topic_arn().expect("arn").to_owned()
}

async fn subscribe(ep: &Endpoint, topic: &str, protocol: &str, endpoint: &str, attrs: &[(&str, &str)]) -> String {
    let mut req = ep.sns.subscribe().topic_arn(topic).protocol(protocol).endpoint(endpoint);
    for (k, v) in attrs {
        req = req.attributes(*k, *v);
    }
    req.return_subscription_arn(true).send().await.expect("subscribe").subscription_arn().expect("arn").to_owned()
}

/// Everything a queue holds now (each deleted as it is read).
async fn drain(ep: &Endpoint, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let mut out = Vec::new();
    loop {
        let got = ep
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        let messages = got.messages().to_vec();
        if messages.is_empty() {
            return out;
        }
        for m in &messages {
            ep.client
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().expect("handle"))
                .send()
                .await
                .expect("delete");
        }
        out.extend(messages);
    }
}

fn bodies(messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
    let mut out: Vec<String> = messages.iter().map(|m| m.body().unwrap_or_default().to_owned()).collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_publish_reaches_every_queue_enveloped_or_raw() {
    let ep = Endpoint::start().await;
    let arn = topic(&ep, "fan").await;
    let name = arn.rsplit(':').next().expect("name").to_owned();
    // CreateTopic again finds the same topic.
    let again = ep.sns.create_topic().name(&name).send().await.expect("again");
    assert_eq!(again.topic_arn(), Some(arn.as_str()));
    assert!(arn.starts_with("arn:aws:sns:us-east-1:000000000000:fan-"), "{arn}");
    let listed = ep.sns.list_topics().send().await.expect("list");
    assert!(listed.topics().iter().any(|t| t.topic_arn() == Some(arn.as_str())));
    ep.sns
        .set_topic_attributes()
        .topic_arn(&arn)
        .attribute_name("DisplayName")
        .attribute_value("Fan")
        .send()
        .await
        .expect("set");

    let (enveloped_url, enveloped_arn) = queue(&ep, "env").await;
    let (raw_url, raw_arn) = queue(&ep, "raw").await;
    let sub_env = subscribe(&ep, &arn, "sqs", &enveloped_arn, &[]).await;
    let sub_raw = subscribe(&ep, &arn, "sqs", &raw_arn, &[("RawMessageDelivery", "true")]).await;
    // Subscribing the same endpoint again finds the same subscription.
    assert_eq!(subscribe(&ep, &arn, "sqs", &enveloped_arn, &[]).await, sub_env);
    let attrs = ep.sns.get_topic_attributes().topic_arn(&arn).send().await.expect("attributes");
    let attrs = attrs.attributes().expect("attributes");
    assert_eq!(attrs["DisplayName"], "Fan");
    assert_eq!(attrs["SubscriptionsConfirmed"], "2");
    let by_topic = ep.sns.list_subscriptions_by_topic().topic_arn(&arn).send().await.expect("subscriptions");
    let mut arns: Vec<&str> = by_topic.subscriptions().iter().filter_map(|s| s.subscription_arn()).collect();
    arns.sort();
    let mut expected = vec![sub_env.as_str(), sub_raw.as_str()];
    expected.sort();
    assert_eq!(arns, expected);
    let sub_attrs = ep.sns.get_subscription_attributes().subscription_arn(&sub_raw).send().await.expect("attrs");
    assert_eq!(sub_attrs.attributes().expect("attrs")["RawMessageDelivery"], "true");

    let published = ep
        .sns
        .publish()
        .topic_arn(&arn)
        .message("hello <world> & \"all\"")
        .subject("greeting")
        .message_attributes("color", attr("String", "red"))
        .message_attributes("size", attr("Number", "3"))
        .message_attributes("tags", attr("String.Array", "[\"a\",\"b\"]"))
        .send()
        .await
        .expect("publish");
    let id = published.message_id().expect("id").to_owned();

    let enveloped = drain(&ep, &enveloped_url).await;
    assert_eq!(enveloped.len(), 1);
    let doc: Value = serde_json::from_str(enveloped[0].body().expect("body")).expect("notification JSON");
    assert_eq!(doc["Type"], "Notification");
    assert_eq!(doc["MessageId"], id.as_str());
    assert_eq!(doc["TopicArn"], arn.as_str());
    assert_eq!(doc["Subject"], "greeting");
    assert_eq!(doc["Message"], "hello <world> & \"all\"");
    assert_eq!(doc["MessageAttributes"]["color"], serde_json::json!({"Type": "String", "Value": "red"}));
    assert_eq!(doc["MessageAttributes"]["size"], serde_json::json!({"Type": "Number", "Value": "3"}));
    assert!(doc["Timestamp"].as_str().is_some_and(|t| t.len() == 24 && t.ends_with('Z')), "{doc}");
    assert!(doc["UnsubscribeURL"].as_str().is_some_and(|u| u.contains("Action=Unsubscribe")), "{doc}");
    assert!(enveloped[0].message_attributes().is_none_or(|a| a.is_empty()));

    let raw = drain(&ep, &raw_url).await;
    assert_eq!(raw.len(), 1);
    let m = &raw[0];
    assert_eq!(m.body(), Some("hello <world> & \"all\""));
    let attrs = m.message_attributes().expect("raw delivery carries the attributes");
    assert_eq!(attrs["color"].string_value(), Some("red"));
    assert_eq!(attrs["size"].data_type(), "Number");
    assert_eq!(attrs["tags"].data_type(), "String.Array");
    let mut sorted: Vec<_> = attrs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let md5 = md5_of_attributes(
        sorted.iter().map(|(n, v)| (n.as_str(), v.data_type(), AttrBytes::Text(v.string_value().unwrap_or_default()))),
    );
    assert_eq!(m.md5_of_message_attributes(), Some(md5.as_str()));

    // Unsubscribed, deleted: nothing more arrives, and the topic is gone.
    ep.sns.unsubscribe().subscription_arn(&sub_env).send().await.expect("unsubscribe");
    ep.sns.publish().topic_arn(&arn).message("second").send().await.expect("publish");
    assert!(drain(&ep, &enveloped_url).await.is_empty());
    assert_eq!(bodies(&drain(&ep, &raw_url).await), ["second"]);
    ep.sns.delete_topic().topic_arn(&arn).send().await.expect("delete");
    ep.sns.delete_topic().topic_arn(&arn).send().await.expect("deleting again is no error");
    let err = ep.sns.publish().topic_arn(&arn).message("x").send().await.expect_err("no topic");
    assert_eq!(err.code(), Some("NotFound"));
    assert!(err.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{err:?}");
    let gone = ep.sns.list_subscriptions().send().await.expect("subscriptions");
    assert!(!gone.subscriptions().iter().any(|s| s.topic_arn() == Some(arn.as_str())));
    ep.stop().await;
}

#[tokio::test]
async fn filter_policies_choose_the_subscribers() {
    let ep = Endpoint::start().await;
    let arn = topic(&ep, "filter").await;
    let (red_url, red_arn) = queue(&ep, "red").await;
    let (big_url, big_arn) = queue(&ep, "big").await;
    let (body_url, body_arn) = queue(&ep, "body").await;
    subscribe(
        &ep,
        &arn,
        "sqs",
        &red_arn,
        &[("FilterPolicy", r#"{"color": ["red", {"prefix": "crim"}]}"#), ("RawMessageDelivery", "true")],
    )
    .await;
    let big = subscribe(&ep, &arn, "sqs", &big_arn, &[("RawMessageDelivery", "true")]).await;
    ep.sns
        .set_subscription_attributes()
        .subscription_arn(&big)
        .attribute_name("FilterPolicy")
        .attribute_value(r#"{"size": [{"numeric": [">=", 10]}], "color": [{"anything-but": "blue"}]}"#)
        .send()
        .await
        .expect("filter set later");
    subscribe(
        &ep,
        &arn,
        "sqs",
        &body_arn,
        &[
            ("FilterPolicy", r#"{"kind": ["order"]}"#),
            ("FilterPolicyScope", "MessageBody"),
            ("RawMessageDelivery", "true"),
        ],
    )
    .await;
    let publish = |message: &'static str, color: Option<&'static str>, size: Option<&'static str>| {
        let mut req = ep.sns.publish().topic_arn(&arn).message(message);
        if let Some(c) = color {
            req = req.message_attributes("color", attr("String", c));
        }
        if let Some(s) = size {
            req = req.message_attributes("size", attr("Number", s));
        }
        req.send()
    };
    publish("red-small", Some("red"), Some("1")).await.expect("publish");
    publish("crimson-big", Some("crimson"), Some("12")).await.expect("publish");
    publish("blue-big", Some("blue"), Some("50")).await.expect("publish");
    publish("plain", None, None).await.expect("publish");
    publish(r#"{"kind": "order", "n": 1}"#, None, None).await.expect("publish");

    assert_eq!(bodies(&drain(&ep, &red_url).await), ["crimson-big", "red-small"]);
    assert_eq!(bodies(&drain(&ep, &big_url).await), ["crimson-big"]);
    assert_eq!(bodies(&drain(&ep, &body_url).await), [r#"{"kind": "order", "n": 1}"#]);

    let err = ep
        .sns
        .subscribe()
        .topic_arn(&arn)
        .protocol("sqs")
        .endpoint(&red_arn)
        .attributes("FilterPolicy", r#"{"color": "red"}"#)
        .send()
        .await
        .expect_err("a malformed policy");
    assert_eq!(err.code(), Some("InvalidParameter"));
    ep.stop().await;
}

#[tokio::test]
async fn publish_batch_answers_per_entry_and_refuses_bad_batches() {
    let ep = Endpoint::start().await;
    let arn = topic(&ep, "batch").await;
    let (url, queue_arn) = queue(&ep, "batchq").await;
    subscribe(&ep, &arn, "sqs", &queue_arn, &[("RawMessageDelivery", "true")]).await;
    let entry =
        |id: &str, message: &str| PublishBatchRequestEntry::builder().id(id).message(message).build().expect("entry");
    let bad = PublishBatchRequestEntry::builder()
        .id("bad")
        .message("x")
        .message_attributes("AWS.reserved", attr("String", "v"))
        .build()
        .expect("entry");
    let out = ep
        .sns
        .publish_batch()
        .topic_arn(&arn)
        .publish_batch_request_entries(entry("a", "one"))
        .publish_batch_request_entries(entry("b", "two"))
        .publish_batch_request_entries(bad)
        .send()
        .await
        .expect("batch");
    let ok: Vec<&str> = out.successful().iter().filter_map(|s| s.id()).collect();
    assert_eq!(ok, ["a", "b"]);
    assert_eq!(out.failed().len(), 1);
    assert_eq!(out.failed()[0].id(), "bad");
    assert_eq!(out.failed()[0].code(), "ParameterValueInvalid");
    assert!(out.failed()[0].sender_fault());
    assert_eq!(bodies(&drain(&ep, &url).await), ["one", "two"]);

    let mut eleven = ep.sns.publish_batch().topic_arn(&arn);
    for i in 0..11 {
        eleven = eleven.publish_batch_request_entries(entry(&format!("e{i}"), "x"));
    }
    assert_eq!(eleven.send().await.expect_err("11 entries").code(), Some("TooManyEntriesInBatchRequest"));
    let twice = ep
        .sns
        .publish_batch()
        .topic_arn(&arn)
        .publish_batch_request_entries(entry("same", "x"))
        .publish_batch_request_entries(entry("same", "y"))
        .send()
        .await
        .expect_err("repeated id");
    assert_eq!(twice.code(), Some("BatchEntryIdsNotDistinct"));
    assert!(drain(&ep, &url).await.is_empty(), "a refused batch publishes nothing");
    ep.stop().await;
}

/// What a webhook got: (headers, body).
type Got = Arc<Mutex<Vec<(axum::http::HeaderMap, String)>>>;

/// A webhook on 127.0.0.1 that answers 500 to its first `fail`
/// notifications (confirmations always succeed).
async fn webhook(fail: usize) -> (String, Got, tokio::task::JoinHandle<()>) {
    webhook_on("127.0.0.1:0", fail).await
}

async fn webhook_on(addr: &str, fail: usize) -> (String, Got, tokio::task::JoinHandle<()>) {
    let got: Got = Arc::default();
    let seen = got.clone();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap, body: String| {
        let seen = seen.clone();
        let count = count.clone();
        async move {
            let notification = headers.get("x-amz-sns-message-type").is_some_and(|t| t == "Notification");
            if notification && count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < fail {
                return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
            }
            seen.lock().expect("lock").push((headers, body));
            axum::http::StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, got, task)
}

/// Waits until the webhook got `n` requests; returns them all.
async fn wait_for(got: &Got, n: usize) -> Vec<(axum::http::HeaderMap, String)> {
    ferry_tests::eventually(&format!("{n} webhook requests"), || {
        let now = got.lock().expect("lock").clone();
        if now.len() >= n { Ok(now) } else { Err(now.into_iter().map(|(_, body)| body).collect::<Vec<_>>()) }
    })
    .await
}

#[tokio::test]
async fn webhooks_confirm_then_get_notifications_signed_or_not() {
    // Signed requests only: the SubscribeURL still works unsigned.
    let keys = [("test".to_owned(), "test".into())].into_iter().collect();
    let ep = Endpoint::start_with(Some(keys)).await;
    let arn = topic(&ep, "hook").await;
    let (url, got, _server) = webhook(0).await;
    let out = ep.sns.subscribe().topic_arn(&arn).protocol("http").endpoint(&url).send().await.expect("subscribe");
    assert_eq!(out.subscription_arn(), Some("pending confirmation"));
    let confirmation = wait_for(&got, 1).await;
    assert_eq!(confirmation.len(), 1, "the confirmation POST arrives");
    let (headers, body) = &confirmation[0];
    assert_eq!(headers["x-amz-sns-message-type"], "SubscriptionConfirmation");
    let doc: Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(doc["Type"], "SubscriptionConfirmation");
    assert_eq!(doc["TopicArn"], arn.as_str());
    let listed = ep.sns.list_subscriptions_by_topic().topic_arn(&arn).send().await.expect("list");
    assert_eq!(listed.subscriptions()[0].subscription_arn(), Some("PendingConfirmation"));
    // Nothing goes to a webhook that has not confirmed.
    ep.sns.publish().topic_arn(&arn).message("too early").send().await.expect("publish");

    let subscribe_url = doc["SubscribeURL"].as_str().expect("SubscribeURL");
    let confirmed = reqwest::get(subscribe_url).await.expect("visit");
    assert_eq!(confirmed.status(), 200);
    let text = confirmed.text().await.expect("body");
    assert!(text.contains("<ConfirmSubscriptionResult><SubscriptionArn>arn:aws:sns:"), "{text}");
    let sub_arn = ep.sns.list_subscriptions_by_topic().topic_arn(&arn).send().await.expect("list").subscriptions()[0]
        .subscription_arn()
        .expect("arn")
        .to_owned();
    assert!(sub_arn.starts_with(&arn), "{sub_arn}");

    ep.sns
        .publish()
        .topic_arn(&arn)
        .message("enveloped")
        .message_attributes("color", attr("String", "red"))
        .send()
        .await
        .expect("publish");
    let all = wait_for(&got, 2).await;
    assert_eq!(all.len(), 2, "one notification after the confirmation: {all:?}");
    let (headers, body) = &all[1];
    assert_eq!(headers["x-amz-sns-message-type"], "Notification");
    assert_eq!(headers["x-amz-sns-subscription-arn"], sub_arn.as_str());
    let doc: Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(doc["Message"], "enveloped");
    assert_eq!(doc["MessageAttributes"]["color"]["Value"], "red");

    ep.sns
        .set_subscription_attributes()
        .subscription_arn(&sub_arn)
        .attribute_name("RawMessageDelivery")
        .attribute_value("true")
        .send()
        .await
        .expect("raw");
    ep.sns
        .publish()
        .topic_arn(&arn)
        .message("bare")
        .message_attributes("color", attr("String", "blue"))
        .send()
        .await
        .expect("publish");
    let all = wait_for(&got, 3).await;
    let (headers, body) = &all[2];
    assert_eq!(body, "bare");
    assert_eq!(headers["x-amz-sns-rawdelivery"], "true");
    assert_eq!(headers["x-amz-sns-attr-color"], "blue");

    // A wrong secret or an unknown key is refused, as SNS refuses them.
    let wrong = ferry_tests::endpoint::sns_client(&ep.url, "test", "wrong");
    let err = wrong.list_topics().send().await.expect_err("wrong secret");
    assert_eq!(err.code(), Some("SignatureDoesNotMatch"));
    let unknown = ferry_tests::endpoint::sns_client(&ep.url, "nobody", "x");
    assert_eq!(unknown.list_topics().send().await.expect_err("unknown key").code(), Some("InvalidClientTokenId"));
    ep.stop().await;
}

/// Confirms a webhook subscription with the token of the confirmation it
/// got (the first request of `got` from now on).
async fn confirm(ep: &Endpoint, topic: &str, got: &Got, seen: usize) {
    let all = wait_for(got, seen + 1).await;
    let doc: Value = serde_json::from_str(&all.get(seen).expect("a confirmation").1).expect("JSON");
    assert_eq!(doc["Type"], "SubscriptionConfirmation");
    let token = doc["Token"].as_str().expect("token");
    ep.sns.confirm_subscription().topic_arn(topic).token(token).send().await.expect("confirm");
}

#[tokio::test]
async fn a_failing_webhook_is_retried_and_survives_a_restart() {
    let tmp = tempfile::tempdir().expect("dir");
    let ep = Endpoint::start_in(tmp.path()).await;
    let arn = topic(&ep, "retry").await;
    // A webhook that fails its first two notifications: the third try
    // (1 s apart, as its DeliveryPolicy says) delivers.
    let (url, got, _server) = webhook(2).await;
    let sub = subscribe(&ep, &arn, "http", &url, &[]).await;
    confirm(&ep, &arn, &got, 0).await;
    ep.sns
        .set_subscription_attributes()
        .subscription_arn(&sub)
        .attribute_name("DeliveryPolicy")
        .attribute_value(r#"{"healthyRetryPolicy": {"numRetries": 5, "minDelayTarget": 1, "maxDelayTarget": 1}}"#)
        .send()
        .await
        .expect("policy");
    ep.sns.publish().topic_arn(&arn).message("eventually").send().await.expect("publish");
    let all = wait_for(&got, 2).await;
    assert!(all.iter().any(|(_, b)| b.contains("eventually")), "delivered after two failures: {all:?}");

    // A webhook that went down: the POST waits in the store across a
    // restart and goes once the webhook is back.
    let (down_url, down_got, down_server) = webhook(0).await;
    let down_sub = subscribe(&ep, &arn, "http", &down_url, &[]).await;
    confirm(&ep, &arn, &down_got, 0).await;
    ep.sns
        .set_subscription_attributes()
        .subscription_arn(&down_sub)
        .attribute_name("DeliveryPolicy")
        .attribute_value(r#"{"healthyRetryPolicy": {"numRetries": 100, "minDelayTarget": 1}}"#)
        .send()
        .await
        .expect("policy");
    down_server.abort();
    let _ = down_server.await;
    // The POST is recorded when the publish returns: stopping at once
    // loses nothing.
    ep.sns.publish().topic_arn(&arn).message("after restart").send().await.expect("publish");
    ep.stop().await;
    let addr = down_url.trim_start_matches("http://").trim_end_matches("/hook").to_owned();
    let (_, back, _server) = webhook_on(&addr, 0).await;
    let ep = Endpoint::start_in(tmp.path()).await;
    let arrived = wait_for(&back, 1).await;
    assert!(arrived.iter().any(|(_, b)| b.contains("after restart")), "the recorded POST went after the restart");
    // Delivered once: its record is gone, so no retry comes (one retry
    // delay of the policy, 1 s, and the harness's quiet time).
    tokio::time::sleep(Duration::from_secs(1) + ferry_tests::QUIET).await;
    assert_eq!(back.lock().expect("lock").len(), 1);
    ep.stop().await;
}

#[tokio::test]
async fn sns_errors_have_sns_codes_and_shape() {
    let ep = Endpoint::start().await;
    let arn = topic(&ep, "errs").await;
    let cases: Vec<(&str, &str, &str)> = vec![
        ("email", "a@example.com", "InvalidParameter"),
        ("sqs", "not-an-arn", "InvalidParameter"),
        ("sqs", "arn:aws:sqs:us-east-1:000000000000:q.fifo", "InvalidParameter"),
        ("http", "https://mismatch.example/", "InvalidParameter"),
    ];
    for (protocol, endpoint, code) in cases {
        let err =
            ep.sns.subscribe().topic_arn(&arn).protocol(protocol).endpoint(endpoint).send().await.expect_err(protocol);
        assert_eq!(err.code(), Some(code), "{protocol} {endpoint}");
    }
    let err = ep.sns.create_topic().name("bad name!").send().await.expect_err("bad name");
    assert_eq!(err.code(), Some("InvalidParameter"));
    let err = ep.sns.create_topic().name("t.fifo").attributes("FifoTopic", "true").send().await.expect_err("fifo");
    assert_eq!(err.code(), Some("InvalidParameter"));
    let err = ep.sns.publish().topic_arn(&arn).message("").send().await.expect_err("empty");
    assert_eq!(err.code(), Some("InvalidParameter"));
    let err = ep
        .sns
        .get_subscription_attributes()
        .subscription_arn(format!("{arn}:00000000-0000-0000-0000-000000000000"))
        .send()
        .await
        .expect_err("no subscription");
    assert_eq!(err.code(), Some("NotFound"));

    // By hand: the XML of an error is in SNS's namespace, and a malformed
    // request never takes the endpoint down.
    let (status, body) = ep.query("/", &[("Action", "Publish"), ("TopicArn", "nonsense"), ("Message", "x")]).await;
    assert_eq!(status, 400);
    assert!(body.contains("<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\">"), "{body}");
    assert!(body.contains("<Code>InvalidParameter</Code>"), "{body}");
    let (status, body) = ep.query("/", &[("Action", "CreateTopic")]).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = ep.query("/", &[("Action", "ListTopics")]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("<TopicArn>{arn}</TopicArn>")), "{body}");
    ep.stop().await;
}

#[tokio::test]
async fn routes_attached_to_a_topic_get_every_publish_until_detached() {
    use ferry_sqs_endpoint::engine::ReceiveOptions;
    let ep = Endpoint::start().await;
    let arn = topic(&ep, "routes").await;
    let name = arn.rsplit(':').next().expect("name").to_owned();
    let first = ep.topics.attach(&name, "first").await.expect("attach");
    let second = ep.topics.attach(&name, "second").await.expect("attach");
    // A route's queue is not the API's: not listed, not found by name.
    let listed = ep.client.list_queues().send().await.expect("list");
    assert!(listed.queue_urls().iter().all(|u| !u.contains("sns:")), "{listed:?}");
    let err = ep.client.get_queue_url().queue_name(&first).send().await.expect_err("internal");
    assert!(err.as_service_error().is_some_and(|e| e.is_queue_does_not_exist()), "{err:?}");

    let take = |queue: String| {
        let engine = ep.engine.clone();
        async move {
            let options = ReceiveOptions { max: 10, visibility_s: Some(30), wait: None };
            engine.receive(&queue, options).await.expect("receive")
        }
    };
    ep.sns.publish().topic_arn(&arn).message("to routes").subject("s").send().await.expect("publish");
    for queue in [&first, &second] {
        let got = take(queue.clone()).await;
        assert_eq!(got.len(), 1, "{queue}");
        let doc: Value = serde_json::from_str(&got[0].stored.body).expect("a Notification");
        assert_eq!(doc["Message"], "to routes");
        assert_eq!(doc["Subject"], "s");
    }

    // Only `first` is still configured: `second` and its queue go.
    let keep = [(name.clone(), "first".to_owned())].into_iter().collect();
    ep.topics.retain_routes(&keep).await.expect("retain");
    assert!(ep.engine.exists(&first).await.expect("looked up"));
    assert!(!ep.engine.exists(&second).await.expect("looked up"));
    ep.sns.publish().topic_arn(&arn).message("again").send().await.expect("publish with one route");
    assert_eq!(take(first.clone()).await.len(), 1);
    ep.stop().await;
}
