//! The SQS transport against a real SQS endpoint (moto_server): the
//! attribute budget on the wire, per-message batch results, FIFO ids and
//! order, and the receiver's mapping, acks, releases and heartbeat.

use std::collections::HashMap;
use std::time::Duration;

use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, HeaderValue};
use ferry_tests::receiver::RunningReceiver;
use ferry_tests::sqs::{self, attribute, create_queue, depth, receive, require_aws_env, text};
use ferry_transport_sqs::config::{SqsReceiverConfig, SqsSenderConfig};
use ferry_transport_sqs::{SqsReceiver, SqsSender};

fn sender_config(url: &str, extra: &str) -> SqsSenderConfig {
    toml::from_str(&format!("queue_url = {url:?}\nendpoint_url = {:?}\n{extra}", sqs::endpoint())).expect("config")
}

fn receiver_config(url: &str, extra: &str) -> SqsReceiverConfig {
    toml::from_str(&format!(
        "queue_url = {url:?}\nendpoint_url = {:?}\nwait_time_seconds = 1\n{extra}",
        sqs::endpoint()
    ))
    .expect("config")
}

fn headers(e: &mut Envelope, pairs: &[(&str, &str)]) {
    for (k, v) in pairs {
        e.set_header(*k, *v);
    }
}

#[tokio::test]
async fn sqs_sender_keeps_trace_headers_first_when_over_ten_attributes() {
    require_aws_env();
    let client = sqs::client();
    let (_, url) = create_queue(&client, "t-attrs", false).await;
    let metrics = Metrics::new();
    let sender = SqsSender::start("out", sender_config(&url, ""), metrics.clone());
    let mut e = Envelope::new("m-1", &b"{\"ok\":true}"[..]);
    e.subject = Some("order.created".into());
    headers(
        &mut e,
        &[
            ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ("tracestate", "k=v"),
            ("x-bridge.idempotency-key", "idem-1"),
            ("x-bridge.correlation-id", "corr-1"),
            ("x-bridge.causation-id", "cause-1"),
            ("mqtt.message-id", "m-1"),
            ("mqtt.topic", "sensors/a"),
            ("alpha", "a"),
            ("beta", "b"),
            ("gamma", "g"),
            ("zulu", "z"),
            ("x-bridge.route-id", "r1"),
        ],
    );
    e.set_header("count", HeaderValue::Integer(4));
    e.set_header("blob", HeaderValue::Bytes(vec![0u8, 1, 2].into()));
    assert_eq!(e.headers.len(), 14);
    sender.send(OutboundMessage::new(e, String::new())).await.expect("sent, MD5s verified");

    let got = receive(&client, &url, Duration::from_secs(2)).await;
    assert_eq!(got.len(), 1);
    let m = &got[0];
    let mut names: Vec<&str> = m.message_attributes().expect("attributes").keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "Subject",
            "alpha",
            "beta",
            "blob",
            "count",
            "mqtt.message-id",
            "traceparent",
            "tracestate",
            "x-bridge.idempotency-key",
            "gamma"
        ]
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(attribute(m, "Subject"), Some("order.created"));
    assert_eq!(m.message_attributes().and_then(|a| a.get("count")).map(|v| v.data_type()), Some("Number"));
    // mqtt.topic, zulu, and the two bridge-to-bridge headers did not fit.
    assert_eq!(
        Metrics::count(&metrics.counter_family(&ferry_transport_sqs::DROPPED_ATTRIBUTES), &[("sender", "out")]),
        4
    );
}

#[tokio::test]
async fn the_byte_budget_holds_with_a_body_near_max_message_bytes() {
    require_aws_env();
    let client = sqs::client();
    let (_, url) = create_queue(&client, "t-budget", false).await;
    let sender = SqsSender::start("out", sender_config(&url, "max_message_bytes = 4096"), Metrics::new());
    let mut e = Envelope::new("m", vec![b'x'; 4000]);
    e.set_header("a-large", "y".repeat(200));
    e.set_header("b-small", "s");
    sender.send(OutboundMessage::new(e, String::new())).await.expect("sent");
    let got = receive(&client, &url, Duration::from_secs(2)).await;
    assert_eq!(got[0].body().map(str::len), Some(4000), "the body is never cut");
    assert_eq!(attribute(&got[0], "b-small"), Some("s"));
    assert_eq!(attribute(&got[0], "a-large"), None);

    let too_big = Envelope::new("m2", vec![b'x'; 5000]);
    let err = sender.send(OutboundMessage::new(too_big, String::new())).await.expect_err("over budget");
    assert!(!err.is_transient());
}

#[tokio::test]
async fn a_batch_returns_one_result_per_message_and_one_bad_entry_fails_alone() {
    require_aws_env();
    let client = sqs::client();
    let (_, url) = create_queue(&client, "t-batch", false).await;
    let sender = SqsSender::start("out", sender_config(&url, ""), Metrics::new());
    let msgs: Vec<OutboundMessage> = (0..10)
        .map(|i| {
            let payload = if i == 4 { vec![0xffu8, 0xfe] } else { format!("m{i}").into_bytes() };
            OutboundMessage::new(Envelope::new(format!("id{i}"), payload), String::new())
        })
        .collect();
    let results = sender.send_batch(&msgs).await.expect("batch dispatched");
    assert_eq!(results.len(), 10);
    for (i, r) in results.iter().enumerate() {
        if i == 4 {
            assert!(matches!(r, Err(e) if !e.is_transient()), "entry 4 is not UTF-8: {r:?}");
        } else {
            assert!(r.is_ok(), "entry {i}: {r:?}");
        }
    }
    assert_eq!(receive(&client, &url, Duration::from_secs(2)).await.len(), 9);
}

#[tokio::test]
async fn fifo_sends_keep_group_order_and_deduplicate_by_subject_and_identity() {
    require_aws_env();
    let client = sqs::client();
    let (_, url) = create_queue(&client, "t-fifo", true).await;
    let sender = SqsSender::start("out", sender_config(&url, ""), Metrics::new());
    for i in 0..8 {
        let mut e = Envelope::new(format!("id{i}"), format!("{i}").into_bytes());
        e.subject = Some("tick".into());
        e.set_header("x-bridge.ordering-key", "g1");
        sender.send(OutboundMessage::new(e, String::new())).await.expect("sent");
    }
    // The same identity and subject again: SQS drops the duplicate.
    let mut again = Envelope::new("id3", &b"3"[..]);
    again.subject = Some("tick".into());
    again.set_header("x-bridge.ordering-key", "g1");
    sender.send(OutboundMessage::new(again, String::new())).await.expect("sent");
    assert_eq!(depth(&client, &url).await.0, 8, "the duplicate was dropped by its deduplication id");

    let bodies = sqs::consume_bodies(&client, &url, 8, 20).await;
    assert_eq!(bodies, ["0", "1", "2", "3", "4", "5", "6", "7"]);
}

#[tokio::test]
async fn receiver_maps_acks_releases_and_counts_receives() {
    require_aws_env();
    let client = sqs::client();
    let (_, url) = create_queue(&client, "t-recv", false).await;
    let mut attrs = HashMap::new();
    attrs.insert("Subject".to_owned(), text("order.created"));
    attrs.insert("kind".to_owned(), text("temp"));
    attrs.insert("x-bridge.tenant-id".to_owned(), text("spoof"));
    sqs::send(&client, &url, "{\"n\":1}", attrs).await;
    let mut rx = RunningReceiver::start(SqsReceiver::new("in", receiver_config(&url, ""), Metrics::new()), 10);

    let d = rx.next(Duration::from_secs(10)).await.expect("delivered");
    let e = &d.envelope;
    assert_eq!(e.subject.as_deref(), Some("order.created"));
    assert_eq!(e.text_header("Subject"), Some("order.created"));
    assert_eq!(e.text_header("kind"), Some("temp"));
    // Handed to the route, whose header rules strip it unless trusted.
    assert_eq!(e.text_header("x-bridge.tenant-id"), Some("spoof"));
    assert_eq!(e.headers.get("sqs.ApproximateReceiveCount"), Some(&HeaderValue::Integer(1)));
    assert!(matches!(e.headers.get("sqs.SentTimestamp"), Some(HeaderValue::Time(_))));
    assert_eq!(d.handle.redelivery_count(), Some(0));
    let id = e.id.clone();
    d.handle.release(Duration::from_secs(1), "test").await.expect("release");

    let d = rx.next(Duration::from_secs(10)).await.expect("redelivered after the release");
    assert_eq!(d.envelope.id, id);
    assert_eq!(d.envelope.headers.get("sqs.ApproximateReceiveCount"), Some(&HeaderValue::Integer(2)));
    d.handle.ack().await.expect("deleted");
    assert!(rx.next(Duration::from_secs(3)).await.is_none(), "an acked message does not come back");
    rx.stop().await;
    assert_eq!(depth(&client, &url).await, (0, 0));
}

#[tokio::test]
async fn a_held_message_stays_invisible_past_its_visibility_timeout() {
    require_aws_env();
    let client = sqs::client();
    let (_, url) = create_queue(&client, "t-heartbeat", false).await;
    sqs::send(&client, &url, "slow", HashMap::new()).await;
    let mut rx = RunningReceiver::start(
        SqsReceiver::new("in", receiver_config(&url, "visibility_timeout = 1"), Metrics::new()),
        10,
    );
    let d = rx.next(Duration::from_secs(10)).await.expect("delivered");
    // Held for 3.5x the visibility timeout: the heartbeat keeps it hidden.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(receive(&client, &url, Duration::from_millis(1200)).await.is_empty(), "still invisible while held");
    assert!(rx.next(Duration::from_millis(100)).await.is_none(), "not delivered twice");
    d.handle.ack().await.expect("ack");
    rx.stop().await;
    assert_eq!(depth(&client, &url).await, (0, 0));
}
