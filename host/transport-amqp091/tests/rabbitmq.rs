//! The AMQP 0-9-1 transport against RabbitMQ on 127.0.0.1:5672. Each test
//! uses queues and exchanges of its own.

use std::time::Duration;

use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, HeaderValue, Timestamp};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::receiver::RunningReceiver;
use ferry_transport_amqp091::{Amqp091Receiver, Amqp091Sender};
use ferry_transport_amqp091::{Amqp091ReceiverConfig, Amqp091SenderConfig, RoutingKeys};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, ExchangeKind};

const WAIT: Duration = Duration::from_secs(10);

fn receiver_config(queue: &str) -> Amqp091ReceiverConfig {
    Amqp091ReceiverConfig {
        url: URL091.to_owned(),
        tls: None,
        queue: queue.to_owned(),
        queue_passive: false,
        single_active_consumer: false,
        exchange: None,
        exchange_type: "direct".into(),
        exchange_passive: false,
        routing_key: RoutingKeys::One("#".into()),
        prefetch: 10,
        max_message_bytes: 1024,
        reconnect_initial_ms: 100,
        reconnect_max_ms: 1000,
    }
}

fn sender_config() -> Amqp091SenderConfig {
    Amqp091SenderConfig {
        url: URL091.to_owned(),
        tls: None,
        exchange: String::new(),
        exchange_type: None,
        exchange_passive: false,
        routing_key: String::new(),
        exchange_from_header: false,
        exchange_header: "amqp091.exchange".into(),
        mandatory: true,
        persistent: true,
        send_timeout_ms: 5000,
        reconnect_initial_ms: 100,
        reconnect_max_ms: 1000,
    }
}

fn start_receiver(config: Amqp091ReceiverConfig) -> (RunningReceiver, Metrics) {
    let metrics = Metrics::new();
    (RunningReceiver::start(Amqp091Receiver::new("in", config, metrics.clone()), 16), metrics)
}

/// Sends until the sender has connected (it connects in the background).
async fn send_when_connected(sender: &Amqp091Sender, msg: OutboundMessage) -> Result<(), ferry_core::TransportError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match sender.send(msg.clone()).await {
            Err(e) if e.reason.contains("not connected") && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

#[tokio::test]
async fn receiver_binds_keys_maps_the_delivery_and_acks() {
    let rabbit = Rabbit::connect().await;
    let q = ferry_tests::unique("a091-in");
    let x = ferry_tests::unique("a091-x");
    let mut config = receiver_config(&q);
    config.exchange = Some(x.clone());
    config.exchange_type = "topic".into();
    config.routing_key = RoutingKeys::Many(vec!["orders.*".into(), "audit.#".into()]);
    let (mut running, _) = start_receiver(config);
    // The receiver declares the queue and the bindings before consuming.
    rabbit.wait_for_consumer(&q, WAIT).await;

    let mut headers = FieldTable::default();
    headers.insert("gobridge.subject".into(), AMQPValue::LongString("order.created".into()));
    headers.insert("region".into(), AMQPValue::LongString("eu".into()));
    headers.insert("n".into(), AMQPValue::LongLongInt(42));
    let props = BasicProperties::default()
        .with_message_id("order-9".into())
        .with_correlation_id("corr-9".into())
        .with_reply_to("replies".into())
        .with_content_type("application/json".into())
        .with_timestamp(1_700_000_000)
        .with_headers(headers);
    rabbit.publish(&x, "orders.eu", b"{}", props).await;
    rabbit.publish(&x, "ignored.key", b"not bound", BasicProperties::default()).await;
    rabbit.publish(&x, "audit.a.b", b"audit", BasicProperties::default()).await;

    let d = running.expect(WAIT).await;
    let e = &d.envelope;
    assert_eq!(e.id, "order-9");
    assert_eq!(e.subject.as_deref(), Some("order.created"));
    assert_eq!(e.text_header("amqp091.routing-key"), Some("orders.eu"));
    assert_eq!(e.text_header("amqp091.exchange"), Some(x.as_str()));
    assert_eq!(e.text_header("amqp091.correlation-id"), Some("corr-9"));
    assert_eq!(e.text_header("amqp091.reply-to"), Some("replies"));
    assert_eq!(e.text_header("amqp091.content-type"), Some("application/json"));
    assert_eq!(e.created_at, Timestamp(1_700_000_000_000));
    assert_eq!(e.text_header("region"), Some("eu"));
    assert_eq!(e.headers.get("n"), Some(&HeaderValue::Integer(42)));
    d.handle.ack().await.expect("acked");
    let audit = running.expect(WAIT).await;
    assert_eq!(audit.envelope.payload().as_ref(), b"audit", "the second binding key routes too");
    assert!(audit.envelope.derived_header("x-bridge.generated-id").is_some(), "the receiver minted its id");
    audit.handle.ack().await.expect("acked");
    running.stop().await;
    assert_eq!(rabbit.depth(&q).await, 0);
    rabbit.delete_queue(&q).await;
    rabbit.delete_exchange(&x).await;
}

#[tokio::test]
async fn releases_are_counted_per_message_and_oversized_bodies_rejected() {
    let rabbit = Rabbit::connect().await;
    let q = ferry_tests::unique("a091-retry");
    rabbit.declare_queue(&q).await;
    rabbit.publish("", &q, &[0u8; 2048], BasicProperties::default()).await;
    rabbit.publish("", &q, b"no id here", BasicProperties::default()).await;
    let (mut running, metrics) = start_receiver(receiver_config(&q));
    for attempt in 0..3u32 {
        let d = running.expect(WAIT).await;
        assert_eq!(d.envelope.payload().as_ref(), b"no id here");
        assert_eq!(d.handle.redelivery_count(), Some(attempt), "a message without an id is counted by content");
        d.handle.release(Duration::from_millis(20), "test").await.expect("released");
    }
    let d = running.expect(WAIT).await;
    assert_eq!(d.handle.redelivery_count(), Some(3));
    d.handle.ack().await.expect("acked");
    assert_eq!(
        Metrics::count(&metrics.ingress_rejected, &[("kind", "amqp091"), ("receiver", "in"), ("reason", "too_large")]),
        1
    );
    running.stop().await;
    assert_eq!(rabbit.depth(&q).await, 0);
    rabbit.delete_queue(&q).await;
}

#[tokio::test]
async fn sender_confirms_maps_and_classifies_unroutable_and_missing_exchanges() {
    let rabbit = Rabbit::connect().await;
    let q = ferry_tests::unique("a091-out");
    rabbit.declare_queue(&q).await;
    let x = ferry_tests::unique("a091-route");
    rabbit.declare_exchange(&x, ExchangeKind::Direct).await;
    rabbit.bind(&q, &x, "by-content").await;
    let mut config = sender_config();
    config.exchange_from_header = true;
    let sender = Amqp091Sender::start("out", config, Metrics::new());

    let mut e = Envelope::new("env-1", &b"hello"[..]);
    e.subject = Some("greeting".into());
    e.set_header("lang", "en");
    e.set_header("n", HeaderValue::Integer(7));
    e.set_header("x-bridge.route-id", "private");
    send_when_connected(&sender, OutboundMessage::new(e.clone(), q.clone())).await.expect("confirmed");
    let got = rabbit.get(&q, WAIT).await.expect("message arrived");
    let p = &got.delivery.properties;
    assert_eq!(p.message_id().as_ref().map(ShortString::as_str), Some("env-1"));
    assert_eq!(*p.delivery_mode(), Some(2));
    let headers = p.headers().as_ref().expect("headers").inner();
    assert_eq!(headers.get("gobridge.subject"), Some(&AMQPValue::LongString("greeting".into())));
    assert_eq!(headers.get("lang"), Some(&AMQPValue::LongString("en".into())));
    assert_eq!(headers.get("n"), Some(&AMQPValue::LongLongInt(7)));
    assert!(!headers.contains_key("x-bridge.route-id"));
    assert_eq!(got.delivery.data, b"hello");

    // Routing by content: the exchange comes from a header, the routing key
    // from a template over another header.
    let mut routed = e.clone();
    routed.set_header("amqp091.exchange", x.clone());
    routed.set_header("kind", "by-content");
    sender.send(OutboundMessage::new(routed, "{kind}")).await.expect("routed by content");
    assert!(rabbit.get(&q, WAIT).await.is_some());

    let unroutable = sender.send(OutboundMessage::new(e.clone(), ferry_tests::unique("nobody"))).await;
    let err = unroutable.expect_err("mandatory publish with no queue");
    assert!(!err.is_transient() && err.reason.contains("unroutable"), "{err}");

    let mut missing = e.clone();
    missing.set_header("amqp091.exchange", ferry_tests::unique("no-such-exchange"));
    let err = sender.send(OutboundMessage::new(missing, q.clone())).await.expect_err("404");
    assert!(!err.is_transient(), "{err}");
    // The channel the broker closed is replaced.
    send_when_connected(&sender, OutboundMessage::new(e, q.clone())).await.expect("works again");
    assert!(rabbit.get(&q, WAIT).await.is_some());
    sender.close().await;
    rabbit.delete_queue(&q).await;
    rabbit.delete_exchange(&x).await;
}

/// Acks go out in ranges (`basic.ack` with `multiple`). A range must never
/// settle a message that is still being worked on or waits for its requeue:
/// that message would be gone without having been delivered. Settles 300
/// messages out of order, holding some back to the end, releasing some
/// (requeued after a delay), rejecting some into a dead-letter queue and
/// dropping one handle unsettled, then checks that every released and
/// dropped message came back, the rejected ones reached the dead-letter
/// queue, and nothing else was redelivered or left behind.
#[tokio::test]
async fn range_acks_never_settle_a_message_in_flight_or_waiting_for_its_requeue() {
    use std::collections::BTreeMap;
    let rabbit = Rabbit::connect().await;
    let q = ferry_tests::unique("a091-ranges");
    let dead = ferry_tests::unique("a091-ranges-dead");
    rabbit.declare_queue(&dead).await;
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(dead.as_str().into()));
    rabbit.declare_queue_with(&q, args).await;
    const N: usize = 300;
    for i in 0..N {
        rabbit.publish("", &q, b"m", BasicProperties::default().with_message_id(format!("m-{i}").into())).await;
    }
    let mut config = receiver_config(&q);
    config.prefetch = 64;
    config.queue_passive = true;
    let (mut running, _) = start_receiver(config);

    let (released, rejected, held) = (|i: usize| i % 10 == 3, |i: usize| i % 10 == 7, |i: usize| i.is_multiple_of(25));
    let dropped = 5;
    let comes_back = |i: usize| released(i) || i == dropped;
    let expected = N + (0..N).filter(|&i| comes_back(i)).count();
    let mut seen: BTreeMap<usize, u32> = BTreeMap::new();
    let mut held_back = Vec::new();
    let mut batch = Vec::new();
    let mut got = 0;
    while got < expected {
        let Some(d) = running.next(WAIT).await else { break };
        got += 1;
        let i: usize = d.envelope.id.trim_start_matches("m-").parse().expect("an id this test sent");
        let times = seen.entry(i).or_default();
        *times += 1;
        if *times > 1 {
            batch.push((d, false));
        } else if i == dropped {
            drop(d);
        } else if held(i) {
            held_back.push(d);
        } else {
            batch.push((d, true));
        }
        if batch.len() == 8 || got == expected {
            // Settle the batch in reverse order, all at once.
            let settles = batch.drain(..).rev().map(|(d, first)| {
                let i: usize = d.envelope.id.trim_start_matches("m-").parse().expect("id");
                tokio::spawn(async move {
                    if first && released(i) {
                        d.handle.release(Duration::from_millis(300), "test").await
                    } else if first && rejected(i) {
                        d.handle.reject("test").await
                    } else {
                        d.handle.ack().await
                    }
                })
            });
            for settle in settles.collect::<Vec<_>>() {
                settle.await.expect("settle task").expect("settled");
            }
        }
    }
    // The held messages were in flight the whole time: ranges went past
    // them only now.
    for d in held_back {
        d.handle.ack().await.expect("acked");
    }
    assert_eq!(got, expected, "deliveries: {seen:?}");
    for i in 0..N {
        let want = if comes_back(i) { 2 } else { 1 };
        assert_eq!(seen.get(&i).copied(), Some(want), "m-{i} delivered {:?} times, expected {want}", seen.get(&i));
    }
    assert!(running.next(Duration::from_millis(500)).await.is_none(), "nothing else comes back");
    running.stop().await;
    assert_eq!(rabbit.depth(&q).await, 0, "everything settled");
    let dead_letters = rabbit.collect(&dead, N, Duration::from_secs(2)).await;
    let mut dead_ids: Vec<String> =
        dead_letters.iter().filter_map(|d| d.properties.message_id().as_ref().map(|s| s.to_string())).collect();
    dead_ids.sort();
    let mut want: Vec<String> = (0..N).filter(|&i| rejected(i)).map(|i| format!("m-{i}")).collect();
    want.sort();
    assert_eq!(dead_ids, want, "exactly the rejected messages were dead-lettered");
    rabbit.delete_queue(&q).await;
    rabbit.delete_queue(&dead).await;
}

#[tokio::test]
async fn a_single_active_consumer_queue_feeds_one_receiver_in_order_then_fails_over() {
    let rabbit = Rabbit::connect().await;
    let q = ferry_tests::unique("a091-sac");
    let config = Amqp091ReceiverConfig { single_active_consumer: true, ..receiver_config(&q) };
    // Two receivers (two ferry instances) on one queue that ferry declares.
    let (mut first, _) = start_receiver(config.clone());
    rabbit.wait_for_consumer(&q, WAIT).await;
    let (mut second, _) = start_receiver(config.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Publishes m<n> for each n, then expects them on `rx` in that order.
    async fn in_order(rabbit: &Rabbit, q: &str, rx: &mut RunningReceiver, numbers: std::ops::Range<u32>) {
        for n in numbers.clone() {
            rabbit.publish("", q, format!("m{n}").as_bytes(), BasicProperties::default()).await;
        }
        for n in numbers {
            let d = rx.expect(WAIT).await;
            assert_eq!(d.envelope.payload().as_ref(), format!("m{n}").as_bytes());
            d.handle.ack().await.expect("acked");
        }
    }
    // The active one gets every message, in the queue's order (without the
    // argument RabbitMQ would deal them out between the two consumers).
    in_order(&rabbit, &q, &mut first, 0..10).await;
    assert!(second.next(Duration::from_millis(500)).await.is_none(), "the standby consumer got a message");

    // When it goes, the other takes over, still in order.
    first.stop().await;
    in_order(&rabbit, &q, &mut second, 10..15).await;
    second.stop().await;
    assert_eq!(rabbit.depth(&q).await, 0);
    rabbit.delete_queue(&q).await;
}
