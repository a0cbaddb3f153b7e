//! The sender against librdkafka's mock cluster (a Kafka-protocol broker
//! in this process, on 127.0.0.1): what a record carries, and how each
//! kind of failure is classified. The daemon tests run against a real
//! broker process.

use std::time::Duration;

use ferry_core::ErrorClass;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, HeaderValue};
use ferry_transport_kafka::config::KafkaSenderConfig;
use ferry_transport_kafka::{KafkaSender, ingress};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::{Offset, TopicPartitionList};

fn config(brokers: &str, extra: &str) -> KafkaSenderConfig {
    ferry_core::transport::read_part(
        "kafka",
        &format!("brokers = \"{brokers}\"\ntopic = \"out\"\n{extra}"),
        KafkaSenderConfig::check,
    )
    .expect("config")
}

/// Every record of partition 0 of `topic`, read from the start.
fn records(brokers: &str, topic: &str, n: usize) -> Vec<rdkafka::message::OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).expect("partition");
    consumer.assign(&list).expect("assign");
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while out.len() < n && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            out.push(m.detach());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_carries_key_identity_subject_and_headers() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("out", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let sender = KafkaSender::start("k", config(&brokers, ""), &Metrics::new()).expect("sender");
    let mut e = Envelope::new("m-1", &b"{\"t\":21}"[..]);
    e.subject = Some("reading".into());
    e.set_header("x-bridge.ordering-key", "device-7");
    e.set_header("site", "north");
    e.set_header("n", HeaderValue::Integer(3));
    sender.send(OutboundMessage::new(e, "")).await.expect("delivered");
    sender.close().await;

    let got = tokio::task::spawn_blocking(move || records(&brokers, "out", 1)).await.expect("read");
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!((m.key(), m.payload()), (Some(&b"device-7"[..]), Some(&b"{\"t\":21}"[..])));
    let headers: Vec<(String, Vec<u8>)> = m
        .headers()
        .map(|h| h.iter().map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec())).collect())
        .unwrap_or_default();
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_slice());
    assert_eq!(header("message_id"), Some(&b"m-1"[..]));
    assert_eq!(header("gobridge.subject"), Some(&b"reading"[..]));
    assert_eq!(header("site"), Some(&b"north"[..]));
    assert_eq!(header("n"), Some(&b"3"[..]));

    // And read back as ferry's receiver reads it: the same message.
    let back = ingress::to_envelope(&ingress::Incoming::of(m), "message_id", 1 << 20).expect("admitted").envelope;
    assert_eq!((back.id.as_str(), back.subject.as_deref()), ("m-1", Some("reading")));
    assert_eq!((back.text_header("site"), back.text_header("n")), (Some("north"), Some("3")));
    assert_eq!(back.text_header(ingress::KEY), Some("device-7"));
    assert_eq!(back.text_header(ingress::TOPIC), Some("out"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_that_is_down_is_unavailable_and_a_record_too_large_is_permanent() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("out", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let sender =
        KafkaSender::start("k", config(&brokers, "delivery_timeout_ms = 1500"), &Metrics::new()).expect("sender");
    sender.send(OutboundMessage::new(Envelope::new("m-1", &b"x"[..]), "")).await.expect("delivered while up");

    // Larger than the producer's message.max.bytes (1 MB): the record
    // itself can never be sent.
    let big = Envelope::new("m-big", vec![b'x'; 2 * 1024 * 1024]);
    let err = sender.send(OutboundMessage::new(big, "")).await.expect_err("too large");
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");

    cluster.broker_down(1).expect("broker down");
    let err = sender.send(OutboundMessage::new(Envelope::new("m-2", &b"x"[..]), "")).await.expect_err("down");
    assert_eq!(err.class, ErrorClass::Unavailable, "a cluster that is down spends no replay: {err}");
    cluster.broker_up(1).expect("broker up");
    // As the route would: tried again until the producer has reconnected.
    let mut again = Err(err);
    for _ in 0..20 {
        again = sender.send(OutboundMessage::new(Envelope::new("m-2", &b"x"[..]), "")).await;
        if again.is_ok() {
            break;
        }
    }
    assert!(again.is_ok(), "delivered once the broker is back: {again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_a_header_cannot_make_is_unroutable_before_anything_is_sent() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let sender = KafkaSender::start("k", config(&cluster.bootstrap_servers(), ""), &Metrics::new()).expect("sender");
    let mut e = Envelope::new("m-1", &b"x"[..]);
    e.set_header("site", "a/b");
    let err = sender.send(OutboundMessage::new(e, "readings.{site}")).await.expect_err("unroutable");
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(err.reason.contains("topic"), "{err}");
}

/// The group's committed offset of partition 0 of `topic`.
fn committed(brokers: &str, group: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers).set("group.id", group).create().expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, 0);
    let got = consumer.committed_offsets(list, Duration::from_secs(5)).ok()?;
    match got.find_partition(topic, 0)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

/// Waits (bounded) until the group's committed offset is `want`.
async fn committed_becomes(brokers: &str, group: &str, topic: &str, want: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (b, g, t) = (brokers.to_owned(), group.to_owned(), topic.to_owned());
        let now = tokio::task::spawn_blocking(move || committed(&b, &g, &t)).await.expect("query");
        if now == Some(want) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "committed offset {now:?}, waited for {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The next delivery, within a bound.
async fn next(
    deliveries: &mut tokio::sync::mpsc::Receiver<ferry_core::ports::Delivery>,
) -> ferry_core::ports::Delivery {
    let wait = tokio::time::timeout(Duration::from_secs(20), deliveries.recv());
    wait.await.expect("a delivery in time").expect("the receiver runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_group_commits_only_behind_settled_records_and_a_given_back_one_comes_again() {
    use ferry_core::ports::Delivery;
    use ferry_transport_kafka::KafkaReceiver;
    use ferry_transport_kafka::config::KafkaReceiverConfig;

    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("in", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let sender = KafkaSender::start("k", config(&brokers, ""), &Metrics::new()).expect("sender");
    for i in 0..5 {
        sender.send(OutboundMessage::new(Envelope::new(format!("m-{i}"), &b"x"[..]), "in")).await.expect("sent");
    }
    let receiver_config: KafkaReceiverConfig = ferry_core::transport::read_part(
        "kafka",
        &format!("brokers = \"{brokers}\"\ntopics = [\"in\"]\ngroup = \"g\"\ncommit_interval_ms = 50"),
        KafkaReceiverConfig::check,
    )
    .expect("config");
    let receiver = std::sync::Arc::new(KafkaReceiver::new("in", receiver_config, Metrics::new()));
    let (sink, mut deliveries) = tokio::sync::mpsc::channel::<Delivery>(16);
    let stop = tokio_util::sync::CancellationToken::new();
    let running = {
        let (receiver, stop) = (receiver.clone(), stop.clone());
        tokio::spawn(async move { ferry_core::ports::Receiver::run(receiver.as_ref(), sink, stop).await })
    };

    let mut held = Vec::new();
    for i in 0..5 {
        let d = next(&mut deliveries).await;
        assert_eq!(d.envelope.id, format!("m-{i}"));
        assert_eq!(d.handle.redelivery_count(), Some(0));
        held.push(d);
    }
    // m-2 fails for now: given back; the others go.
    for (i, d) in held.into_iter().enumerate() {
        if i == 2 {
            d.handle.release(Duration::from_millis(100), "target said 500").await.expect("release");
        } else {
            d.handle.ack().await.expect("ack");
        }
    }
    committed_becomes(&brokers, "g", "in", 2).await;
    let again = next(&mut deliveries).await;
    assert_eq!((again.envelope.id.as_str(), again.handle.redelivery_count()), ("m-2", Some(1)));
    // Still not past m-2 while it is held.
    assert_eq!(
        tokio::task::spawn_blocking({
            let b = brokers.clone();
            move || committed(&b, "g", "in")
        })
        .await
        .expect("query"),
        Some(2)
    );
    again.handle.ack().await.expect("ack");
    committed_becomes(&brokers, "g", "in", 5).await;

    stop.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(20), running).await.expect("stops in time").expect("joined");
    assert!(ended.is_ok(), "{ended:?}");
}
