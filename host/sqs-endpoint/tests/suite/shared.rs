//! Two endpoints on one PostgreSQL database serve the same queues at once
//! (as two ferry instances on a shared store do): under a concurrent load
//! split between them, with FIFO order and deduplication, visibility,
//! redrive, purge and deletion seen from either, long polls woken by the
//! other, and SNS topics and subscriptions made on one used on the other.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry};
use ferry_tests::endpoint::Endpoint;
use ferry_tests::pg::TestDb;
use ferry_tests::unique;

async fn pair() -> (TestDb, Endpoint, Endpoint) {
    let db = TestDb::new().await;
    let a = Endpoint::start_shared(&db.url).await;
    let b = Endpoint::start_shared(&db.url).await;
    (db, a, b)
}

async fn finish(db: TestDb, a: Endpoint, b: Endpoint) {
    a.stop().await;
    b.stop().await;
    db.drop().await;
}

/// The same queue's URL as the other endpoint names it.
fn on(other: &Endpoint, url: &str) -> String {
    let path = url.splitn(4, '/').nth(3).expect("a queue URL has a path");
    format!("{}/{path}", other.url)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_endpoints_share_one_queue_under_load_and_lose_nothing() {
    let (db, a, b) = pair().await;
    let name = unique("load");
    let url_a = a.create(&name, &[("VisibilityTimeout", "30")]).await;
    let url_b = on(&b, &url_a);
    const PRODUCERS: usize = 32;
    const CONSUMERS: usize = 8;
    const EACH: usize = 200;
    let total = PRODUCERS * EACH;

    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (client, url) =
            if p % 2 == 0 { (a.client.clone(), url_a.clone()) } else { (b.client.clone(), url_b.clone()) };
        producers.push(tokio::spawn(async move {
            for batch in 0..EACH / 10 {
                let entries = (0..10).map(|i| {
                    SendMessageBatchRequestEntry::builder()
                        .id(format!("e{i}"))
                        .message_body(format!("{p}-{}", batch * 10 + i))
                        .build()
                        .expect("entry")
                });
                let out = client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries.collect()))
                    .send()
                    .await
                    .expect("batch sent");
                assert!(out.failed().is_empty(), "{:?}", out.failed());
            }
        }));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let done = tokio_util::sync::CancellationToken::new();
    let mut consumers = Vec::new();
    for c in 0..CONSUMERS {
        let (client, url) =
            if c % 2 == 0 { (a.client.clone(), url_a.clone()) } else { (b.client.clone(), url_b.clone()) };
        let (tx, done) = (tx.clone(), done.clone());
        consumers.push(tokio::spawn(async move {
            while !done.is_cancelled() {
                let got = client
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(1)
                    .send()
                    .await
                    .expect("received");
                for m in got.messages() {
                    tx.send(m.body().expect("body").to_owned()).expect("collector");
                    client
                        .delete_message()
                        .queue_url(&url)
                        .receipt_handle(m.receipt_handle().expect("handle"))
                        .send()
                        .await
                        .expect("deleted");
                }
            }
        }));
    }
    drop(tx);
    for p in producers {
        p.await.expect("producer");
    }
    let mut seen = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    while seen.len() < total && Instant::now() < deadline {
        if let Ok(Some(body)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            assert!(seen.insert(body.clone()), "{body} was handed out twice");
        }
    }
    done.cancel();
    for c in consumers {
        c.await.expect("consumer");
    }
    while let Ok(body) = rx.try_recv() {
        assert!(seen.insert(body.clone()), "{body} was handed out twice");
    }
    assert_eq!(seen.len(), total, "every message received once");
    let attrs = b.attributes(&url_b).await;
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessages], "0");
    assert_eq!(attrs[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible], "0");
    finish(db, a, b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fifo_order_groups_and_deduplication_hold_across_endpoints() {
    let (db, a, b) = pair().await;
    let name = format!("{}.fifo", unique("fifo"));
    let url_a = a.create(&name, &[("FifoQueue", "true")]).await;
    let url_b = on(&b, &url_a);
    // Sends alternate between the endpoints; the sequence numbers still
    // increase in the order sent.
    let mut sequences = Vec::new();
    for i in 0..6 {
        let (client, url) = if i % 2 == 0 { (&a.client, &url_a) } else { (&b.client, &url_b) };
        let group = if i < 4 { "g1" } else { "g2" };
        let out = client
            .send_message()
            .queue_url(url)
            .message_body(format!("{group}-{i}"))
            .message_group_id(group)
            .message_deduplication_id(format!("d{i}"))
            .send()
            .await
            .expect("sent");
        sequences.push(out.sequence_number().expect("sequence").parse::<u128>().expect("a number"));
    }
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    // The same deduplication id on the other endpoint is the same message.
    let again = b
        .client
        .send_message()
        .queue_url(&url_b)
        .message_body("g1-0 again")
        .message_group_id("g1")
        .message_deduplication_id("d0")
        .send()
        .await
        .expect("deduplicated");
    assert_eq!(again.sequence_number(), Some(format!("{:020}", sequences[0]).as_str()));

    // A takes two of g1 in order; B then finds g1 held and gets g2.
    let first = a.client.receive_message().queue_url(&url_a).max_number_of_messages(2).send().await.expect("receive");
    let bodies: Vec<&str> = first.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["g1-0", "g1-1"]);
    let second = b
        .client
        .receive_message()
        .queue_url(&url_b)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .expect("receive");
    let bodies: Vec<&str> = second.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["g2-4", "g2-5"], "g1 is held while A has its messages");
    // Once A deletes them (through B), g1 goes on where it left off.
    for m in first.messages() {
        b.client
            .delete_message()
            .queue_url(&url_b)
            .receipt_handle(m.receipt_handle().expect("handle"))
            .send()
            .await
            .expect("deleted");
    }
    let third = b.client.receive_message().queue_url(&url_b).max_number_of_messages(10).send().await.expect("receive");
    let bodies: Vec<&str> = third.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["g1-2", "g1-3"]);
    finish(db, a, b).await;
}

/// The group served least recently goes first, whichever endpoint served
/// it: a group whose message came back waits behind one never served.
#[tokio::test(flavor = "multi_thread")]
async fn fifo_groups_are_served_least_recently_first_across_endpoints() {
    let (db, a, b) = pair().await;
    let name = format!("{}.fifo", unique("served"));
    let url_a = a.create(&name, &[("FifoQueue", "true")]).await;
    let url_b = on(&b, &url_a);
    for (group, body) in [("g1", "g1-m1"), ("g1", "g1-m2"), ("g2", "g2-m1"), ("g3", "g3-m1")] {
        a.client
            .send_message()
            .queue_url(&url_a)
            .message_body(body)
            .message_group_id(group)
            .message_deduplication_id(body)
            .send()
            .await
            .expect("sent");
    }
    let first = a.client.receive_message().queue_url(&url_a).max_number_of_messages(3).send().await.expect("receive");
    let bodies: Vec<&str> = first.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["g1-m1", "g1-m2", "g2-m1"], "a group at a time");
    for m in first.messages() {
        a.client
            .change_message_visibility()
            .queue_url(&url_a)
            .receipt_handle(m.receipt_handle().expect("handle"))
            .visibility_timeout(0)
            .send()
            .await
            .expect("visible again");
    }
    let second = b.client.receive_message().queue_url(&url_b).max_number_of_messages(10).send().await.expect("receive");
    let bodies: Vec<&str> = second.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["g3-m1", "g1-m1", "g1-m2", "g2-m1"], "never served first, then as served");
    finish(db, a, b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn visibility_redrive_purge_and_deletion_are_seen_from_both_endpoints() {
    let (db, a, b) = pair().await;
    let dlq = unique("dlq");
    let dlq_url = a.create(&dlq, &[]).await;
    let name = unique("work");
    let policy =
        format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}","maxReceiveCount":"2"}}"#);
    let url_a = a.create(&name, &[("RedrivePolicy", &policy)]).await;
    let url_b = on(&b, &url_a);
    a.client.send_message().queue_url(&url_a).message_body("poison").send().await.expect("sent");

    // Received on A for a second; back and received again on B.
    let got = a.client.receive_message().queue_url(&url_a).visibility_timeout(1).send().await.expect("receive");
    assert_eq!(got.messages().len(), 1);
    let none = b.client.receive_message().queue_url(&url_b).send().await.expect("receive");
    assert!(none.messages().is_empty(), "in flight on A, not visible on B");
    let got = b
        .client
        .receive_message()
        .queue_url(&url_b)
        .wait_time_seconds(5)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .expect("receive");
    let m = &got.messages()[0];
    assert_eq!(m.attributes().expect("attributes")[&MessageSystemAttributeName::ApproximateReceiveCount], "2");
    // A's old receipt no longer changes anything; B's does.
    let handle = m.receipt_handle().expect("handle");
    b.client
        .change_message_visibility()
        .queue_url(&url_b)
        .receipt_handle(handle)
        .visibility_timeout(0)
        .send()
        .await
        .expect("visible again");
    // Past maxReceiveCount: the next receive moves it to the dead-letter
    // queue instead of handing it out.
    let none = a.client.receive_message().queue_url(&url_a).send().await.expect("receive");
    assert!(none.messages().is_empty());
    let dead = b
        .client
        .receive_message()
        .queue_url(on(&b, &dlq_url))
        .wait_time_seconds(5)
        .message_system_attribute_names(MessageSystemAttributeName::DeadLetterQueueSourceArn)
        .send()
        .await
        .expect("receive");
    let m = &dead.messages()[0];
    assert_eq!(m.body(), Some("poison"));
    assert_eq!(
        m.attributes().expect("attributes")[&MessageSystemAttributeName::DeadLetterQueueSourceArn],
        format!("arn:aws:sqs:us-east-1:000000000000:{name}")
    );

    // Purge once a minute, whichever endpoint is asked.
    a.client.send_message().queue_url(&url_a).message_body("purged").send().await.expect("sent");
    a.client.purge_queue().queue_url(&url_a).send().await.expect("purged");
    let err = b.client.purge_queue().queue_url(&url_b).send().await.expect_err("too soon");
    assert_eq!(err.code(), Some("AWS.SimpleQueueService.PurgeQueueInProgress"));
    assert_eq!(b.attributes(&url_b).await[&QueueAttributeName::ApproximateNumberOfMessages], "0");

    // Attributes set on one are read on the other; a queue deleted on one
    // is gone on the other, and a long poll there ends with that answer.
    b.client
        .set_queue_attributes()
        .queue_url(&url_b)
        .attributes(QueueAttributeName::DelaySeconds, "3")
        .send()
        .await
        .expect("set");
    assert_eq!(a.attributes(&url_a).await[&QueueAttributeName::DelaySeconds], "3");
    let polling = {
        let (client, url) = (b.client.clone(), url_b.clone());
        tokio::spawn(async move { client.receive_message().queue_url(url).wait_time_seconds(20).send().await })
    };
    b.wait_for_receives(1).await;
    let started = Instant::now();
    a.client.delete_queue().queue_url(&url_a).send().await.expect("deleted");
    let ended = polling.await.expect("poll");
    assert!(started.elapsed() < Duration::from_secs(10), "the poll ended when the queue went");
    let err = ended.expect_err("gone");
    assert!(err.as_service_error().is_some_and(|e| e.is_queue_does_not_exist()), "{err:?}");
    let err = b.client.get_queue_url().queue_name(&name).send().await.expect_err("gone");
    assert!(err.as_service_error().is_some_and(|e| e.is_queue_does_not_exist()), "{err:?}");
    finish(db, a, b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_send_on_one_endpoint_wakes_a_long_poll_on_the_other() {
    let (db, a, b) = pair().await;
    let name = unique("poll");
    let url_a = a.create(&name, &[]).await;
    let url_b = on(&b, &url_a);
    // What wakes it: the queue's name announced to every instance.
    let listening = ferry_store::postgres::PgStore::open(
        &db.url,
        2,
        ferry_store::StoreOptions { listen: true, ..Default::default() },
    )
    .await
    .expect("a third instance's store");
    let mut announced = listening.shared_db().sqs_changes.subscribe();
    let polling = {
        let (client, url) = (b.client.clone(), url_b.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let got = client.receive_message().queue_url(url).wait_time_seconds(20).send().await.expect("receive");
            (started.elapsed(), got.messages().iter().filter_map(|m| m.body().map(str::to_owned)).collect::<Vec<_>>())
        })
    };
    b.wait_for_receives(1).await;
    a.client.send_message().queue_url(&url_a).message_body("wake").send().await.expect("sent");
    let (waited, bodies) = polling.await.expect("poll");
    assert_eq!(bodies, ["wake"]);
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match announced.recv().await {
                Ok(queue) if queue == name => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(heard, Ok(true), "the send was announced on ferry_sqs");
    // Well before the 20 s the poll would wait for nothing.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    finish(db, a, b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn topics_and_subscriptions_made_on_one_endpoint_work_on_the_other() {
    let (db, a, b) = pair().await;
    let name = unique("fan");
    let url_a = a.create(&name, &[]).await;
    let queue_arn = format!("arn:aws:sqs:us-east-1:000000000000:{name}");
    let topic = a.sns.create_topic().name(unique("topic")).send().await.expect("topic");
    let topic_arn = topic.topic_arn().expect("arn");
    let sub = b
        .sns
        .subscribe()
        .topic_arn(topic_arn)
        .protocol("sqs")
        .endpoint(&queue_arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .expect("subscribed");
    let listed = a.sns.list_subscriptions_by_topic().topic_arn(topic_arn).send().await.expect("listed");
    assert_eq!(listed.subscriptions().len(), 1);
    a.sns.publish().topic_arn(topic_arn).message("one").send().await.expect("published");
    let got = b.client.receive_message().queue_url(on(&b, &url_a)).wait_time_seconds(5).send().await.expect("receive");
    assert_eq!(got.messages().iter().filter_map(|m| m.body()).collect::<Vec<_>>(), ["one"]);
    // Unsubscribed on A: a publish on B reaches no queue.
    a.sns.unsubscribe().subscription_arn(sub.subscription_arn().expect("arn")).send().await.expect("unsubscribed");
    b.sns.publish().topic_arn(topic_arn).message("two").send().await.expect("published");
    let got = a.client.receive_message().queue_url(&url_a).wait_time_seconds(2).send().await.expect("receive");
    assert!(got.messages().is_empty(), "{:?}", got.messages());
    finish(db, a, b).await;
}
