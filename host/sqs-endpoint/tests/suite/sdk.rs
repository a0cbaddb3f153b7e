//! The endpoint driven by the AWS SDK for Rust (AWS JSON 1.0) and by hand
//! in the query protocol: every action, visibility, redrive, FIFO, long
//! polling, limits, durability across a restart, and a concurrent load.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    MessageSystemAttributeNameForSends, MessageSystemAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry,
};
use ferry_tests::endpoint::Endpoint;
use ferry_tests::unique;
use ferry_transport_sqs::attributes::{AttrBytes, md5_of_attributes, md5_of_body};

fn string_attr(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder().data_type("String").string_value(v).build().expect("attribute")
}

#[tokio::test]
async fn queue_lifecycle_over_the_json_protocol() {
    let ep = Endpoint::start().await;
    let name = unique("life");
    let url = ep.create(&name, &[("VisibilityTimeout", "7")]).await;
    assert!(url.ends_with(&format!("/000000000000/{name}")), "{url}");
    // Creating it again with the same attributes finds it; with others fails.
    assert_eq!(ep.create(&name, &[("VisibilityTimeout", "7")]).await, url);
    let err = ep
        .client
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, "8")
        .send()
        .await
        .expect_err("different attributes");
    assert_eq!(err.code(), Some("QueueAlreadyExists"));

    let got = ep.client.get_queue_url().queue_name(&name).send().await.expect("url");
    assert_eq!(got.queue_url(), Some(url.as_str()));
    let listed = ep.client.list_queues().queue_name_prefix("life-").send().await.expect("list");
    assert!(listed.queue_urls().contains(&url));

    ep.client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::DelaySeconds, "2")
        .send()
        .await
        .expect("set");
    let attrs = ep.attributes(&url).await;
    assert_eq!(attrs[&QueueAttributeName::VisibilityTimeout], "7");
    assert_eq!(attrs[&QueueAttributeName::DelaySeconds], "2");
    assert_eq!(attrs[&QueueAttributeName::QueueArn], format!("arn:aws:sqs:us-east-1:000000000000:{name}"));
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessages], "0");

    ep.client.tag_queue().queue_url(&url).tags("team", "core").send().await.expect("tag");
    let tags = ep.client.list_queue_tags().queue_url(&url).send().await.expect("tags");
    assert_eq!(tags.tags().expect("tags")["team"], "core");
    ep.client.untag_queue().queue_url(&url).tag_keys("team").send().await.expect("untag");
    assert!(
        ep.client.list_queue_tags().queue_url(&url).send().await.expect("tags").tags().is_none_or(|t| t.is_empty())
    );

    // A stale host in a saved URL still names the queue.
    let stale = url.replacen("127.0.0.1", "stale.example", 1);
    ep.client.get_queue_attributes().queue_url(&stale).send().await.expect("stale host resolves");

    ep.client.delete_queue().queue_url(&url).send().await.expect("delete");
    let err = ep.client.get_queue_url().queue_name(&name).send().await.expect_err("gone");
    assert!(err.as_service_error().is_some_and(|e| e.is_queue_does_not_exist()), "{err:?}");
    let err = ep.client.send_message().queue_url(&url).message_body("x").send().await.expect_err("gone");
    assert!(err.as_service_error().is_some_and(|e| e.is_queue_does_not_exist()), "{err:?}");
    ep.stop().await;
}

#[tokio::test]
async fn messages_carry_attributes_and_exact_md5s() {
    let ep = Endpoint::start().await;
    let url = ep.create(&unique("attrs"), &[]).await;
    let sent = ep
        .client
        .send_message()
        .queue_url(&url)
        .message_body("hello <world> & ünïcode")
        .message_attributes("color", string_attr("red"))
        .message_attributes(
            "count",
            MessageAttributeValue::builder().data_type("Number.int").string_value("42").build().expect("n"),
        )
        .message_attributes(
            "blob",
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![0, 1, 255]))
                .build()
                .expect("b"),
        )
        .message_system_attributes(
            MessageSystemAttributeNameForSends::AwsTraceHeader,
            MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value("Root=1-5759e988-bd862e3fe1be46a994272793")
                .build()
                .expect("t"),
        )
        .send()
        .await
        .expect("sent");
    let expected_attr_md5 = md5_of_attributes([
        ("blob", "Binary", AttrBytes::Binary(&[0, 1, 255])),
        ("color", "String", AttrBytes::Text("red")),
        ("count", "Number.int", AttrBytes::Text("42")),
    ]);
    assert_eq!(sent.md5_of_message_body(), Some(md5_of_body("hello <world> & ünïcode").as_str()));
    assert_eq!(sent.md5_of_message_attributes(), Some(expected_attr_md5.as_str()));
    assert!(sent.md5_of_message_system_attributes().is_some());

    let got = ep
        .client
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("received");
    let m = &got.messages()[0];
    assert_eq!(m.message_id(), sent.message_id());
    assert_eq!(m.body(), Some("hello <world> & ünïcode"));
    assert_eq!(m.md5_of_body(), sent.md5_of_message_body());
    assert_eq!(m.md5_of_message_attributes(), Some(expected_attr_md5.as_str()));
    let attrs = m.message_attributes().expect("attributes");
    assert_eq!(attrs["color"].string_value(), Some("red"));
    assert_eq!(attrs["count"].data_type(), "Number.int");
    assert_eq!(attrs["blob"].binary_value().map(|b| b.as_ref().to_vec()), Some(vec![0, 1, 255]));
    let system = m.attributes().expect("system attributes");
    assert_eq!(system[&MessageSystemAttributeName::ApproximateReceiveCount], "1");
    assert_eq!(system[&MessageSystemAttributeName::AwsTraceHeader], "Root=1-5759e988-bd862e3fe1be46a994272793");
    assert!(system.contains_key(&MessageSystemAttributeName::SentTimestamp));

    // Asking for some attributes by name and prefix: only those, and the
    // MD5 covers what was returned.
    ep.client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(m.receipt_handle().expect("h"))
        .visibility_timeout(0)
        .send()
        .await
        .expect("visible again");
    let got = ep
        .client
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("col.*")
        .message_attribute_names("color")
        .send()
        .await
        .expect("again");
    let m = &got.messages()[0];
    assert_eq!(m.message_attributes().expect("one").len(), 1);
    assert_eq!(
        m.md5_of_message_attributes(),
        Some(md5_of_attributes([("color", "String", AttrBytes::Text("red"))]).as_str())
    );
    assert!(m.attributes().is_none());
    ep.client
        .delete_message()
        .queue_url(&url)
        .receipt_handle(m.receipt_handle().expect("h"))
        .send()
        .await
        .expect("deleted");
    let empty = ep.client.receive_message().queue_url(&url).send().await.expect("empty");
    assert!(empty.messages().is_empty());
    ep.stop().await;
}

#[tokio::test]
async fn visibility_expiry_redelivers_and_redrive_moves_to_the_dead_letter_queue() {
    let ep = Endpoint::start().await;
    let dlq_name = unique("dlq");
    let dlq = ep.create(&dlq_name, &[]).await;
    let policy =
        format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq_name}","maxReceiveCount":2}}"#);
    let name = unique("work");
    let url = ep.create(&name, &[("RedrivePolicy", &policy), ("VisibilityTimeout", "1")]).await;
    ep.client.send_message().queue_url(&url).message_body("poison").send().await.expect("sent");

    let first = ep.client.receive_message().queue_url(&url).send().await.expect("r1");
    let id = first.messages()[0].message_id().expect("id").to_owned();
    // Invisible until the timeout passes, then back with a higher count.
    let hidden = ep.client.receive_message().queue_url(&url).send().await.expect("hidden");
    assert!(hidden.messages().is_empty());
    let started = Instant::now();
    let second = ep
        .client
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(5)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .expect("r2");
    assert!(started.elapsed() < Duration::from_secs(4), "the long poll woke when the message came back");
    let m = &second.messages()[0];
    assert_eq!(m.message_id(), Some(id.as_str()));
    assert_eq!(m.attributes().expect("attrs")[&MessageSystemAttributeName::ApproximateReceiveCount], "2");
    // A stale receipt handle is answered 200, as AWS does, and changes
    // nothing: the message stays hidden for its second receiver.
    let stale = first.messages()[0].receipt_handle().expect("h");
    ep.client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(stale)
        .visibility_timeout(0)
        .send()
        .await
        .expect("a stale handle is answered 200");
    let hidden = ep.client.receive_message().queue_url(&url).send().await.expect("r3");
    assert!(hidden.messages().is_empty(), "a stale handle made the message visible: {hidden:?}");
    // Deleting with it succeeds, as in SQS, but leaves the message: it still
    // reaches the dead-letter queue below.
    ep.client.delete_message().queue_url(&url).receipt_handle(stale).send().await.expect("stale delete answers ok");
    ep.client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(m.receipt_handle().expect("h"))
        .visibility_timeout(0)
        .send()
        .await
        .expect("back");

    // Received twice: the third receive moves it to the dead-letter queue.
    let third = ep.client.receive_message().queue_url(&url).send().await.expect("r3");
    assert!(third.messages().is_empty());
    let dead = ep
        .client
        .receive_message()
        .queue_url(&dlq)
        .wait_time_seconds(2)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("dlq");
    let d = &dead.messages()[0];
    assert_eq!(d.message_id(), Some(id.as_str()));
    assert_eq!(d.body(), Some("poison"));
    assert_eq!(
        d.attributes().expect("attrs")[&MessageSystemAttributeName::DeadLetterQueueSourceArn],
        format!("arn:aws:sqs:us-east-1:000000000000:{name}")
    );
    // A redrive target must exist.
    let err = ep
        .client
        .create_queue()
        .queue_name(unique("orphan"))
        .attributes(
            QueueAttributeName::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":1}"#,
        )
        .send()
        .await
        .expect_err("no target");
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    ep.stop().await;
}

/// A send with an optional group and deduplication id.
async fn fifo_send(
    ep: &Endpoint,
    url: &str,
    body: &str,
    group: Option<&str>,
    dedup: Option<&str>,
) -> Result<
    aws_sdk_sqs::operation::send_message::SendMessageOutput,
    aws_sdk_sqs::error::SdkError<aws_sdk_sqs::operation::send_message::SendMessageError>,
> {
    ep.client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .set_message_group_id(group.map(str::to_owned))
        .set_message_deduplication_id(dedup.map(str::to_owned))
        .send()
        .await
}

#[tokio::test]
async fn fifo_keeps_group_order_blocks_groups_in_flight_and_deduplicates() {
    let ep = Endpoint::start().await;
    let url = ep.create(&format!("{}.fifo", unique("tasks")), &[("FifoQueue", "true")]).await;
    let mut sequences = Vec::new();
    for (group, body) in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3"), ("b", "b2")] {
        let sent = fifo_send(&ep, &url, body, Some(group), Some(body)).await.expect("sent");
        sequences.push(sent.sequence_number().expect("sequence").to_owned());
    }
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    assert_eq!(sequences[0].len(), 20);
    // A duplicate within five minutes answers the first message's id and
    // adds nothing.
    let again = fifo_send(&ep, &url, "a1", Some("a"), Some("a1")).await.expect("dup");
    assert_eq!(again.sequence_number(), Some(sequences[0].as_str()));

    // A receive fills its batch one group at a time, in order.
    let got = ep.client.receive_message().queue_url(&url).max_number_of_messages(2).send().await.expect("r");
    let bodies: Vec<_> = got.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["a1", "a2"]);
    // Group a is in flight; b, never served, comes whole.
    let b = ep.client.receive_message().queue_url(&url).max_number_of_messages(10).send().await.expect("r");
    let bodies: Vec<_> = b.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["b1", "b2"]);
    // Both groups are in flight: nothing more until they are deleted.
    let none = ep.client.receive_message().queue_url(&url).max_number_of_messages(10).send().await.expect("r");
    assert!(none.messages().is_empty(), "{:?}", none.messages());
    for m in got.messages() {
        ep.client
            .delete_message()
            .queue_url(&url)
            .receipt_handle(m.receipt_handle().expect("h"))
            .send()
            .await
            .expect("del");
    }
    let got = ep.client.receive_message().queue_url(&url).max_number_of_messages(10).send().await.expect("r");
    let bodies: Vec<_> = got.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["a3"], "group a goes on where it left off; group b still in flight");
    // Deleted messages stay covered by the deduplication window.
    let dup = fifo_send(&ep, &url, "a1", Some("a"), Some("a1")).await.expect("dup");
    assert_eq!(dup.sequence_number(), Some(sequences[0].as_str()));

    // FIFO rules: a group id is required, per-message delays are refused,
    // and without content-based deduplication an id is required.
    let err = fifo_send(&ep, &url, "x", None, Some("x")).await.expect_err("no group");
    assert_eq!(err.code(), Some("MissingParameter"));
    let err = fifo_send(&ep, &url, "x", Some("g"), None).await.expect_err("no dedup");
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    let err = ep
        .client
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .message_deduplication_id("x")
        .delay_seconds(3)
        .send()
        .await
        .expect_err("delay");
    assert_eq!(err.code(), Some("InvalidParameterValue"));

    let cbd = ep
        .create(&format!("{}.fifo", unique("cbd")), &[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")])
        .await;
    let one = fifo_send(&ep, &cbd, "same", Some("g"), None).await.expect("1");
    let two = fifo_send(&ep, &cbd, "same", Some("g"), None).await.expect("2");
    assert_eq!(one.message_id(), two.message_id());
    let got = ep
        .client
        .receive_message()
        .queue_url(&cbd)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("r");
    assert_eq!(got.messages().len(), 1);
    let attrs = got.messages()[0].attributes().expect("attrs");
    assert_eq!(attrs[&MessageSystemAttributeName::MessageGroupId], "g");
    assert_eq!(attrs[&MessageSystemAttributeName::MessageDeduplicationId].len(), 64, "SHA-256 of the body");

    // Standard queues refuse FIFO-only parameters.
    let std = ep.create(&unique("std"), &[]).await;
    let err = fifo_send(&ep, &std, "x", None, Some("d")).await.expect_err("std");
    assert_eq!(err.code(), Some("InvalidParameterValue"));
    let err = ep
        .client
        .create_queue()
        .queue_name(unique("std"))
        .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
        .send()
        .await
        .expect_err("std");
    assert_eq!(err.code(), Some("InvalidAttributeName"));
    ep.stop().await;
}

#[tokio::test]
async fn long_polls_wake_on_a_send_and_delays_hold_messages_back() {
    let ep = Endpoint::start().await;
    let url = ep.create(&unique("poll"), &[]).await;
    let poller = {
        let client = ep.client.clone();
        let url = url.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = client.receive_message().queue_url(&url).wait_time_seconds(10).send().await.expect("poll");
            (started.elapsed(), got.messages().len())
        })
    };
    ep.wait_for_receives(1).await;
    ep.client.send_message().queue_url(&url).message_body("wake").send().await.expect("sent");
    let (elapsed, n) = poller.await.expect("poller");
    assert_eq!(n, 1);
    assert!(elapsed < Duration::from_secs(5), "woke after {elapsed:?}");

    // An empty long poll waits its time out.
    let started = Instant::now();
    let got = ep.client.receive_message().queue_url(&url).wait_time_seconds(1).send().await.expect("empty");
    assert!(got.messages().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(900));

    ep.client.send_message().queue_url(&url).message_body("later").delay_seconds(1).send().await.expect("delayed");
    let attrs = ep
        .client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .expect("attrs");
    assert_eq!(attrs.attributes().expect("a")[&QueueAttributeName::ApproximateNumberOfMessagesDelayed], "1");
    let now = ep.client.receive_message().queue_url(&url).send().await.expect("not yet");
    assert!(now.messages().is_empty());
    let later = ep.client.receive_message().queue_url(&url).wait_time_seconds(3).send().await.expect("later");
    assert_eq!(later.messages()[0].body(), Some("later"));
    ep.stop().await;
}

#[tokio::test]
async fn bad_input_gets_the_codes_sqs_returns() {
    let ep = Endpoint::start().await;
    let url = ep.create(&unique("bad"), &[]).await;
    let c = &ep.client;
    let code = |e: &dyn ProvideErrorMetadata| e.code().map(str::to_owned);

    let e = c.send_message().queue_url(&url).message_body("").send().await.expect_err("empty");
    assert_eq!(code(&e).as_deref(), Some("MissingParameter"));
    let e = c.send_message().queue_url(&url).message_body("bad \u{1} char").send().await.expect_err("chars");
    assert_eq!(code(&e).as_deref(), Some("InvalidMessageContents"));
    let e = c.send_message().queue_url(&url).message_body("x".repeat(1_048_577)).send().await.expect_err("too big");
    assert_eq!(code(&e).as_deref(), Some("InvalidParameterValue"));
    let e = c
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes("AWS.reserved", string_attr("v"))
        .send()
        .await
        .expect_err("name");
    assert_eq!(code(&e).as_deref(), Some("InvalidParameterValue"));
    let mut eleven = c.send_message().queue_url(&url).message_body("x");
    for i in 0..11 {
        eleven = eleven.message_attributes(format!("a{i}"), string_attr("v"));
    }
    let e = eleven.send().await.expect_err("eleven");
    assert_eq!(code(&e).as_deref(), Some("InvalidParameterValue"));
    let e = c.receive_message().queue_url(&url).max_number_of_messages(11).send().await.expect_err("max");
    assert_eq!(code(&e).as_deref(), Some("InvalidParameterValue"));
    let e = c.receive_message().queue_url(&url).wait_time_seconds(21).send().await.expect_err("wait");
    assert_eq!(code(&e).as_deref(), Some("InvalidParameterValue"));
    let e = c.delete_message().queue_url(&url).receipt_handle("garbage").send().await.expect_err("handle");
    assert_eq!(code(&e).as_deref(), Some("ReceiptHandleIsInvalid"));
    let e = c
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::from("Bogus"))
        .send()
        .await
        .expect_err("attr");
    assert_eq!(code(&e).as_deref(), Some("InvalidAttributeName"));
    let e = c.create_queue().queue_name("bad/name").send().await.expect_err("queue name");
    assert_eq!(code(&e).as_deref(), Some("InvalidParameterValue"));
    let e = c
        .create_queue()
        .queue_name(unique("v"))
        .attributes(QueueAttributeName::VisibilityTimeout, "99999")
        .send()
        .await
        .expect_err("range");
    assert_eq!(code(&e).as_deref(), Some("InvalidAttributeValue"));

    // Batches: limits on the whole request, and per-entry failures.
    let entry = |id: &str, body: &str| {
        SendMessageBatchRequestEntry::builder().id(id).message_body(body).build().expect("entry")
    };
    let batch = |entries: Vec<SendMessageBatchRequestEntry>| {
        c.send_message_batch().queue_url(&url).set_entries(Some(entries)).send()
    };
    let e = batch((0..11).map(|i| entry(&format!("e{i}"), "x")).collect()).await.expect_err("11");
    assert_eq!(code(&e).as_deref(), Some("AWS.SimpleQueueService.TooManyEntriesInBatchRequest"));
    let e = batch(vec![entry("same", "x"), entry("same", "y")]).await.expect_err("dup ids");
    assert_eq!(code(&e).as_deref(), Some("AWS.SimpleQueueService.BatchEntryIdsNotDistinct"));
    let e = batch(vec![entry("bad id!", "x")]).await.expect_err("id");
    assert_eq!(code(&e).as_deref(), Some("AWS.SimpleQueueService.InvalidBatchEntryId"));
    let e = batch(Vec::new()).await.expect_err("empty");
    assert_eq!(code(&e).as_deref(), Some("AWS.SimpleQueueService.EmptyBatchRequest"));
    let big = "x".repeat(600_000);
    let e = batch(vec![entry("a", &big), entry("b", &big)]).await.expect_err("long");
    assert_eq!(code(&e).as_deref(), Some("AWS.SimpleQueueService.BatchRequestTooLong"));
    let mixed = batch(vec![entry("ok", "fine"), entry("bad", "")]).await.expect("mixed");
    assert_eq!(mixed.successful().len(), 1);
    assert_eq!(mixed.failed()[0].id(), "bad");
    assert_eq!(mixed.failed()[0].code(), "MissingParameter");
    assert!(mixed.failed()[0].sender_fault());

    // Raw JSON: malformed bodies and unknown actions, with the query-error
    // header SDKs read their codes from.
    let (status, header, body) = ep.json("SendMessage", "{not json").await;
    assert_eq!(status, 400, "{body}");
    assert!(header.is_some());
    let (status, _, body) = ep.json("Explode", "{}").await;
    assert_eq!(status, 400);
    assert_eq!(body["__type"], "com.amazon.coral.service#UnknownOperationException");
    let (status, header, body) = ep.json("GetQueueUrl", r#"{"QueueName":"never-created-xyz"}"#).await;
    assert_eq!(status, 400);
    assert_eq!(header.as_deref(), Some("AWS.SimpleQueueService.NonExistentQueue;Sender"));
    assert_eq!(body["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
    let (status, _, _) = ep.json("SendMessage", &"x".repeat(5 << 20)).await;
    assert_eq!(status, 413);
    // Still serving after all of it.
    c.send_message().queue_url(&url).message_body("alive").send().await.expect("alive");
    ep.stop().await;
}

#[tokio::test]
async fn the_query_protocol_serves_the_same_queues_in_xml() {
    let ep = Endpoint::start().await;
    let name = unique("query");
    let (status, xml) = ep
        .query(
            "/",
            &[
                ("Action", "CreateQueue"),
                ("QueueName", &name),
                ("Attribute.1.Name", "VisibilityTimeout"),
                ("Attribute.1.Value", "9"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains("<CreateQueueResponse"), "{xml}");
    assert!(xml.contains(&format!("/000000000000/{name}</QueueUrl>")), "{xml}");
    let path = format!("/000000000000/{name}");

    let (status, xml) = ep
        .query(
            &path,
            &[
                ("Action", "SendMessage"),
                ("MessageBody", "from <query>"),
                ("MessageAttribute.1.Name", "color"),
                ("MessageAttribute.1.Value.DataType", "String"),
                ("MessageAttribute.1.Value.StringValue", "blue"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains(&format!("<MD5OfMessageBody>{}</MD5OfMessageBody>", md5_of_body("from <query>"))), "{xml}");
    assert!(
        xml.contains(&format!(
            "<MD5OfMessageAttributes>{}</MD5OfMessageAttributes>",
            md5_of_attributes([("color", "String", AttrBytes::Text("blue"))])
        )),
        "{xml}"
    );

    // The SDK (JSON) sees what the query protocol sent, and back.
    let url = format!("{}{path}", ep.url);
    let attrs = ep
        .client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .expect("attrs");
    assert_eq!(attrs.attributes().expect("a")[&QueueAttributeName::VisibilityTimeout], "9");

    // A signed GET with the parameters in the query string.
    let response = reqwest::get(format!(
        "{url}?Action=ReceiveMessage&MessageAttributeName.1=All&AttributeName.1=SentTimestamp&Version=2012-11-05"
    ))
    .await
    .expect("get");
    assert_eq!(response.status().as_u16(), 200);
    let xml = response.text().await.expect("xml");
    assert!(xml.contains("<Body>from &lt;query&gt;</Body>"), "{xml}");
    assert!(xml.contains("<MessageAttribute><Name>color</Name><Value><DataType>String</DataType><StringValue>blue</StringValue></Value></MessageAttribute>"), "{xml}");
    assert!(xml.contains("<Attribute><Name>SentTimestamp</Name>"), "{xml}");
    let handle = xml.split("<ReceiptHandle>").nth(1).and_then(|s| s.split("</ReceiptHandle>").next()).expect("handle");

    let (status, xml) = ep
        .query(
            "/",
            &[
                ("Action", "DeleteMessageBatch"),
                ("QueueUrl", &url),
                ("DeleteMessageBatchRequestEntry.1.Id", "one"),
                ("DeleteMessageBatchRequestEntry.1.ReceiptHandle", handle),
            ],
        )
        .await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains("<DeleteMessageBatchResultEntry><Id>one</Id></DeleteMessageBatchResultEntry>"), "{xml}");

    let (status, xml) = ep.query("/", &[("Action", "GetQueueUrl"), ("QueueName", "never-created-xyz")]).await;
    assert_eq!(status, 400);
    assert!(xml.contains("<ErrorResponse"), "{xml}");
    assert!(xml.contains("<Code>AWS.SimpleQueueService.NonExistentQueue</Code>"), "{xml}");
    assert!(xml.contains("<Type>Sender</Type>"), "{xml}");
    let (status, xml) = ep.query("/", &[("Action", "Explode")]).await;
    assert_eq!(status, 400);
    assert!(xml.contains("<Code>InvalidAction</Code>"), "{xml}");
    let (status, xml) = ep.query("/", &[("QueueName", "x")]).await;
    assert_eq!(status, 400);
    assert!(xml.contains("<Code>MissingParameter</Code>"), "{xml}");
    let (status, xml) = ep.query("/", &[("Action", "ListQueues"), ("QueueNamePrefix", &name)]).await;
    assert_eq!(status, 200);
    assert!(xml.contains("<ListQueuesResult><QueueUrl>"), "{xml}");
    ep.stop().await;
}

#[tokio::test]
async fn queues_and_messages_survive_a_restart() {
    let tmp = tempfile::tempdir().expect("dir");
    let name = unique("durable");
    let (url_path, in_flight_id) = {
        let ep = Endpoint::start_in(tmp.path()).await;
        let url = ep.create(&name, &[("VisibilityTimeout", "600")]).await;
        for body in ["one", "two", "three"] {
            ep.client.send_message().queue_url(&url).message_body(body).send().await.expect("sent");
        }
        let got = ep.client.receive_message().queue_url(&url).send().await.expect("received");
        let id = got.messages()[0].message_id().expect("id").to_owned();
        let path = url.split_once("/000000000000/").map(|(_, n)| n.to_owned()).expect("path");
        ep.stop().await;
        (path, id)
    };
    let ep = Endpoint::start_in(tmp.path()).await;
    let url = format!("{}/000000000000/{url_path}", ep.url);
    let attrs = ep.attributes(&url).await;
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessages], "2");
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible], "1", "still in flight");
    assert_eq!(attrs[&QueueAttributeName::VisibilityTimeout], "600");
    let got = ep.client.receive_message().queue_url(&url).max_number_of_messages(10).send().await.expect("rest");
    let bodies: HashSet<_> = got.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies.len(), 2);
    assert!(got.messages().iter().all(|m| m.message_id() != Some(in_flight_id.as_str())));
    ep.stop().await;
}

/// 32 producers and 8 consumers at once on one queue: every message is
/// received and deleted, none twice while its receipt is valid, and the
/// queue ends empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_and_consumers_lose_nothing() {
    let ep = Endpoint::start().await;
    let url = ep.create(&unique("load"), &[("VisibilityTimeout", "60")]).await;
    const PRODUCERS: usize = 32;
    const BATCHES: usize = 20;
    let total = PRODUCERS * BATCHES * 10;
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let client = ep.client.clone();
        let url = url.clone();
        producers.push(tokio::spawn(async move {
            for b in 0..BATCHES {
                let entries = (0..10)
                    .map(|i| {
                        SendMessageBatchRequestEntry::builder()
                            .id(format!("m{i}"))
                            .message_body(format!("{p}-{b}-{i}"))
                            .build()
                            .expect("entry")
                    })
                    .collect();
                let out =
                    client.send_message_batch().queue_url(&url).set_entries(Some(entries)).send().await.expect("batch");
                assert_eq!(out.successful().len(), 10, "{:?}", out.failed());
            }
        }));
    }
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, u32>::new()));
    let mut consumers = Vec::new();
    for _ in 0..8 {
        let client = ep.client.clone();
        let url = url.clone();
        let seen = seen.clone();
        consumers.push(tokio::spawn(async move {
            loop {
                let got = client
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(2)
                    .send()
                    .await
                    .expect("receive");
                if got.messages().is_empty() {
                    if seen.lock().expect("lock").len() >= total {
                        return;
                    }
                    continue;
                }
                let mut entries = Vec::new();
                for (i, m) in got.messages().iter().enumerate() {
                    *seen.lock().expect("lock").entry(m.body().expect("body").to_owned()).or_default() += 1;
                    entries.push(
                        DeleteMessageBatchRequestEntry::builder()
                            .id(format!("d{i}"))
                            .receipt_handle(m.receipt_handle().expect("h"))
                            .build()
                            .expect("entry"),
                    );
                }
                let out = client
                    .delete_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .expect("delete");
                assert!(out.failed().is_empty(), "{:?}", out.failed());
            }
        }));
    }
    for p in producers {
        p.await.expect("producer");
    }
    let drained = tokio::time::timeout(Duration::from_secs(120), async {
        for c in consumers {
            c.await.expect("consumer");
        }
    })
    .await;
    assert!(drained.is_ok(), "consumers did not drain the queue");
    {
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.len(), total);
        assert!(seen.values().all(|n| *n == 1), "a message was handed out twice within its visibility timeout");
    }
    let attrs = ep.attributes(&url).await;
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessages], "0");
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible], "0");
    ep.stop().await;
}

/// `auth = "verify"`: the SDK's signed requests pass; a wrong secret, an
/// unknown key and an unsigned request are refused with AWS's codes, in
/// both protocols.
#[tokio::test]
async fn sigv4_signatures_are_verified() {
    let keys: ferry_sqs_endpoint::auth::Keys = [("AKIDFERRYTEST".to_owned(), "s3cret/key+value".into())].into();
    let ep = Endpoint::start_with(Some(keys)).await;
    let good = ferry_tests::endpoint::client(&ep.url, "AKIDFERRYTEST", "s3cret/key+value");
    let url = good
        .create_queue()
        .queue_name(unique("signed"))
        .send()
        .await
        .expect("signed create")
        .queue_url()
        .expect("url")
        .to_owned();
    good.send_message().queue_url(&url).message_body("signed body").send().await.expect("signed send");
    let got = good
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::SenderId)
        .send()
        .await
        .expect("signed receive");
    assert_eq!(got.messages()[0].body(), Some("signed body"));
    let sender = got.messages()[0].attributes().and_then(|a| a.get(&MessageSystemAttributeName::SenderId));
    assert_eq!(sender.map(String::as_str), Some("AKIDFERRYTEST"), "the key that signed the send");

    let wrong = ferry_tests::endpoint::client(&ep.url, "AKIDFERRYTEST", "not the secret");
    let err = wrong.send_message().queue_url(&url).message_body("x").send().await.expect_err("wrong secret");
    assert_eq!(err.code(), Some("SignatureDoesNotMatch"));
    let unknown = ferry_tests::endpoint::client(&ep.url, "AKIDSTRANGER", "s3cret/key+value");
    let err = unknown.list_queues().send().await.expect_err("unknown key");
    assert_eq!(err.code(), Some("InvalidClientTokenId"));
    // Unsigned requests, in each protocol.
    let (status, header, _) = ep.json("ListQueues", "{}").await;
    assert_eq!(status, 403);
    assert_eq!(header.as_deref(), Some("MissingAuthenticationToken;Sender"));
    let (status, xml) = ep.query("/", &[("Action", "ListQueues")]).await;
    assert_eq!(status, 403);
    assert!(xml.contains("<Code>MissingAuthenticationToken</Code>"), "{xml}");
    // Nothing the refused clients sent arrived.
    let attrs = good
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("attrs");
    assert_eq!(attrs.attributes().expect("a")[&QueueAttributeName::ApproximateNumberOfMessages], "0");
    ep.stop().await;
}

/// A dead-letter queue deleted after the policy named it: messages past
/// `maxReceiveCount` stay where they are (as in SQS), never vanish.
#[tokio::test]
async fn a_missing_dead_letter_queue_keeps_messages_where_they_are() {
    let ep = Endpoint::start().await;
    let dlq_name = unique("gone-dlq");
    let dlq = ep.create(&dlq_name, &[]).await;
    let policy =
        format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq_name}","maxReceiveCount":1}}"#);
    let url = ep.create(&unique("keeps"), &[("RedrivePolicy", &policy)]).await;
    ep.client.send_message().queue_url(&url).message_body("precious").send().await.expect("sent");
    ep.client.delete_queue().queue_url(&dlq).send().await.expect("dlq deleted");
    for round in 1..=3 {
        let got = ep.client.receive_message().queue_url(&url).visibility_timeout(0).send().await.expect("receive");
        assert_eq!(got.messages().len(), 1, "receive {round}: the message is still there");
    }
    ep.stop().await;
}

/// SQS serves the message group served least recently first: a group whose
/// message came back (its visibility ran out) waits behind a group never
/// served.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_receive_serves_the_group_served_least_recently_first() {
    let ep = Endpoint::start().await;
    let url = ep.create(&format!("{}.fifo", unique("served")), &[("FifoQueue", "true")]).await;
    for (group, body) in [("g1", "g1-m1"), ("g2", "g2-m1")] {
        fifo_send(&ep, &url, body, Some(group), Some(body)).await.expect("sent");
    }
    let first = ep.client.receive_message().queue_url(&url).max_number_of_messages(1).send().await.expect("r");
    assert_eq!(first.messages()[0].body(), Some("g1-m1"));
    ep.client
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(first.messages()[0].receipt_handle().expect("h"))
        .visibility_timeout(0)
        .send()
        .await
        .expect("visible again");
    let got = ep.client.receive_message().queue_url(&url).max_number_of_messages(10).send().await.expect("r");
    let bodies: Vec<_> = got.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["g2-m1", "g1-m1"], "g2 was never served, g1 was");
}
