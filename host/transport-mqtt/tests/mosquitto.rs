//! The MQTT transport against the real Mosquitto: every seed 000/002 rule
//! on the wire, the counters, manual acks and redelivery, and senders that
//! complete only on the broker's acknowledgement.

use std::time::Duration;

use bytes::Bytes;
use ferry_core::metrics::Metrics;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, HeaderValue, Timestamp};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, broker_url, topic, user_property};
use ferry_tests::receiver::RunningReceiver;
use ferry_tests::unique;
use ferry_transport_mqtt::config::{MqttReceiverConfig, MqttSenderConfig};
use ferry_transport_mqtt::{MqttReceiver, MqttSender};
use rumqttc::v5::mqttbytes::v5::PublishProperties;

fn receiver_config(url: &str, topic: &str, client_id: &str) -> MqttReceiverConfig {
    toml::from_str(&format!(
        "url = {url:?}\nclient_id = {client_id:?}\ntopics = [{topic:?}]\nmax_payload_bytes = 1024\nreconnect_initial_ms = 50\nreconnect_max_ms = 200"
    ))
    .expect("receiver config")
}

fn sender_config(url: &str, extra: &str) -> MqttSenderConfig {
    toml::from_str(&format!(
        "url = {url:?}\nclient_id = {:?}\nreconnect_initial_ms = 50\nreconnect_max_ms = 200\nack_timeout_ms = 3000\n{extra}",
        unique("snd")
    ))
    .expect("sender config")
}

/// Starts a receiver and waits until it has subscribed (its `connected`
/// gauge), so that what is published next reaches it.
async fn start(name: &str, config: MqttReceiverConfig, metrics: &Metrics) -> RunningReceiver {
    let running = RunningReceiver::start(MqttReceiver::new(name, config, 10, metrics.clone()), 100);
    let labels = [("kind", "mqtt"), ("role", "receiver"), ("name", name)];
    for _ in 0..200 {
        if Metrics::gauge(&metrics.connected, &labels) == 1 {
            return running;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("receiver {name} did not subscribe within 10 s");
}

#[tokio::test]
async fn receiver_maps_a_publish_as_the_seeds_say_and_counts_refused_properties() {
    let base = unique("t/ingress");
    let metrics = Metrics::new();
    let name = unique("in");
    let mut rx = start(&name, receiver_config(&broker_url(), &format!("{base}/#"), &unique("ferry")), &metrics).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let long = "x".repeat(300);
    let props = PublishProperties {
        user_properties: vec![
            ("mqtt.topic".into(), "spoofed/topic".into()),
            ("mqtt.qos".into(), "2".into()),
            ("mqtt.retained".into(), "true".into()),
            ("x-bridge.tenant-id".into(), "evil".into()),
            ("mqtt.generated-id".into(), "true".into()),
            ("gobridge.subject".into(), "reading.taken".into()),
            ("location".into(), "Malmö".into()),
            ("kind".into(), "first".into()),
            ("kind".into(), "temp".into()),
            // Control characters are refused by Mosquitto itself (it drops
            // the publisher), so on the wire only over-long ones reach us;
            // the unit tests cover the control-character rule.
            ("huge".into(), long.clone()),
            (long, "value".into()),
        ],
        correlation_data: Some(Bytes::from_static(&[0x00, 0xff, 0x10, 0x80])),
        content_type: Some("application/json".into()),
        response_topic: Some("replies/here".into()),
        message_expiry_interval: Some(60),
        ..Default::default()
    };
    let before = Timestamp::now();
    publisher.publish(&format!("{base}/kitchen"), "{\"c\":21}", props).await;
    let delivery = rx.next(Duration::from_secs(5)).await.expect("delivered");
    let e = &delivery.envelope;
    assert_eq!(e.payload().as_ref(), b"{\"c\":21}");
    assert_eq!(e.text_header("mqtt.topic"), Some(format!("{base}/kitchen").as_str()));
    assert_eq!(e.headers.get("mqtt.qos"), Some(&HeaderValue::Integer(1)));
    assert_eq!(e.headers.get("mqtt.retained"), Some(&HeaderValue::Boolean(false)));
    // Handed to the route, whose header rules decide.
    assert_eq!(e.text_header("x-bridge.tenant-id"), Some("evil"));
    assert!(!e.headers.contains_key("mqtt.generated-id"));
    assert!(e.derived_header("x-bridge.generated-id").is_none(), "correlation data gave a stable identity");
    assert_eq!(e.subject.as_deref(), Some("reading.taken"));
    assert!(!e.headers.contains_key("gobridge.subject"));
    assert_eq!(e.text_header("location"), Some("Malmö"));
    assert_eq!(e.text_header("kind"), Some("temp"));
    assert!(!e.headers.contains_key("huge"));
    assert_eq!(e.id, "mqtt-bin:AP8QgA");
    // Derived from the wire, beside the publisher's headers (the route
    // installs them).
    let derived = |name: &str| e.derived_header(name).and_then(HeaderValue::as_text);
    assert_eq!(derived("x-bridge.correlation-data"), Some("AP8QgA"));
    assert_eq!(derived("x-bridge.content-type"), Some("application/json"));
    assert_eq!(e.text_header("mqtt.response-topic"), Some("replies/here"));
    let expiry = e.expires_at.expect("expiry").as_millis() - before.as_millis();
    assert!((55_000..=61_000).contains(&expiry), "expiry {expiry} ms from now");
    assert_eq!(
        Metrics::count(&metrics.counter_family(&ferry_transport_mqtt::INGRESS_HEADER_DROPPED), &[("receiver", &name)]),
        2
    );
    delivery.handle.ack().await.expect("ack");
    rx.stop().await;
}

#[tokio::test]
async fn poison_publishes_are_dropped_counted_and_acknowledged() {
    let base = unique("t/poison");
    let metrics = Metrics::new();
    let name = unique("in");
    let client_id = unique("ferry");
    let config = receiver_config(&broker_url(), &format!("{base}/#"), &client_id);
    let mut rx = start(&name, config.clone(), &metrics).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let many: Vec<(String, String)> = (0..129).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    publisher
        .publish(&format!("{base}/a"), "many", PublishProperties { user_properties: many, ..Default::default() })
        .await;
    publisher.publish_with(&format!("{base}/b"), &"x".repeat(1025), &[]).await;
    publisher.publish_with(&format!("{base}/c"), "fine", &[("mqtt.message-id", "fine-1")]).await;
    let d = rx.next(Duration::from_secs(5)).await.expect("the good message");
    assert_eq!(d.envelope.id, "fine-1");
    assert_eq!(d.envelope.text_header("mqtt.message-id"), Some("fine-1"));
    d.handle.ack().await.expect("ack");
    assert_eq!(
        Metrics::count(
            &metrics.counter_family(&ferry_transport_mqtt::INGRESS_POISON_DROPPED),
            &[("receiver", &name), ("reason", "too_many_user_properties")]
        ),
        1
    );
    assert_eq!(
        Metrics::count(
            &metrics.counter_family(&ferry_transport_mqtt::INGRESS_POISON_DROPPED),
            &[("receiver", &name), ("reason", "payload_too_large")]
        ),
        1
    );
    rx.stop().await;

    // Poison was acknowledged: the same session does not get it back.
    let mut again = start(&name, config, &Metrics::new()).await;
    if let Some(d) = again.next(Duration::from_secs(5)).await {
        // Twice on a loaded CI machine the acked "fine-1" came back, most
        // likely because the receiver left before the broker had read its
        // PUBACK and the broker took the next CONNECT first. A stopping
        // receiver now waits for the broker to close the connection.
        panic!(
            "nothing is redelivered, but {:?} came back (topic {:?}, {} payload bytes)",
            d.envelope.id,
            d.envelope.text_header("mqtt.topic"),
            d.envelope.payload().len(),
        );
    }
    again.stop().await;
}

#[tokio::test]
async fn an_unacknowledged_delivery_comes_back_on_the_next_session() {
    let base = unique("t/redeliver");
    let client_id = unique("ferry");
    let config = receiver_config(&broker_url(), &format!("{base}/#"), &client_id);
    let mut rx = start("in", config.clone(), &Metrics::new()).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{base}/x"), "hold me", &[("mqtt.message-id", "held-1")]).await;
    let first = rx.next(Duration::from_secs(5)).await.expect("first delivery");
    assert_eq!(first.envelope.id, "held-1");
    // Released, not acked (what a stopping route does).
    first.handle.release(Duration::ZERO, "test").await.expect("release");
    rx.stop().await;

    let mut rx = start("in", config.clone(), &Metrics::new()).await;
    let second = rx.next(Duration::from_secs(5)).await.expect("redelivered after reconnect");
    assert_eq!(second.envelope.id, "held-1");
    assert_eq!(second.envelope.payload().as_ref(), b"hold me");
    second.handle.ack().await.expect("ack");
    rx.stop().await;

    let mut rx = start("in", config, &Metrics::new()).await;
    assert!(rx.next(Duration::from_secs(5)).await.is_none(), "acked messages do not come back");
    rx.stop().await;
}

#[tokio::test]
async fn sender_maps_the_envelope_as_the_seeds_say() {
    let base = unique("t/egress");
    let metrics = Metrics::new();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{base}/#")).await;
    let sender = MqttSender::start("out", sender_config(&broker_url(), "default_topic = \"unused\""), metrics.clone())
        .expect("sender");
    assert!(sender.wait_connected(Duration::from_secs(10)).await);

    let mut e = Envelope::new("id-42", &b"payload"[..]);
    e.subject = Some("order.created".into());
    e.set_header("mqtt.topic", "sensors/kitchen");
    e.set_header("mqtt.qos", HeaderValue::Integer(1));
    e.set_header("mqtt.message-id", "not-the-identity");
    e.set_header("mqtt.response-topic", "replies/1");
    e.set_header("kind", "temp");
    e.set_header("count", HeaderValue::Integer(7));
    e.set_header("sqs.ApproximateReceiveCount", HeaderValue::Integer(2));
    e.set_header("x-bridge.correlation-id", "generated-corr");
    e.set_header("x-bridge.correlation-data", "AP8QgA");
    e.set_header("x-bridge.content-type", "application/json");
    e.set_header("x-bridge.route-id", "r1");
    e.expires_at = Some(Timestamp::now().plus(Duration::from_secs(30)));
    sender.send(OutboundMessage::new(e, format!("{base}/{{mqtt.topic}}"))).await.expect("sent and acknowledged");

    let p = sub.next(Duration::from_secs(5)).await.expect("received");
    assert_eq!(topic(&p), format!("{base}/sensors/kitchen"));
    assert_eq!(p.payload.as_ref(), b"payload");
    assert_eq!(user_property(&p, "mqtt.message-id"), Some("id-42"));
    assert_eq!(user_property(&p, "gobridge.subject"), Some("order.created"));
    assert_eq!(user_property(&p, "kind"), Some("temp"));
    for absent in
        ["mqtt.topic", "mqtt.qos", "count", "x-bridge.route-id", "x-bridge.correlation-data", "x-bridge.content-type"]
    {
        assert_eq!(user_property(&p, absent), None, "{absent} must not be a user property");
    }
    let props = p.properties.as_ref().expect("properties");
    assert_eq!(
        props.correlation_data.as_deref(),
        Some(&[0x00, 0xff, 0x10, 0x80][..]),
        "binary correlation is byte-identical"
    );
    assert_eq!(props.content_type.as_deref(), Some("application/json"));
    assert_eq!(props.response_topic.as_deref(), Some("replies/1"));
    let expiry = props.message_expiry_interval.expect("expiry");
    assert!((25..=30).contains(&expiry), "expiry {expiry}");
    assert_eq!(
        Metrics::count(&metrics.counter_family(&ferry_transport_mqtt::NON_STRING_HEADER_DROPPED), &[("sender", "out")]),
        2
    );

    let missing = Envelope::new("id-43", &b""[..]);
    let err = sender.send(OutboundMessage::new(missing, format!("{base}/{{nope}}"))).await.expect_err("missing header");
    assert!(!err.is_transient(), "a missing template header is permanent");
    sender.close().await;
}

#[tokio::test]
async fn sender_fails_transiently_while_the_broker_is_down_and_recovers() {
    let mut broker = PrivateMosquitto::start().await;
    let sender = MqttSender::start("out", sender_config(&broker.url(), ""), Metrics::new()).expect("sender");
    assert!(sender.wait_connected(Duration::from_secs(10)).await);
    broker.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let msg = || OutboundMessage::new(Envelope::new("m", &b"x"[..]), "t/down");
    let err = sender.send(msg()).await.expect_err("broker is down");
    assert!(err.is_transient(), "{err}");

    broker.restart().await;
    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe("t/down").await;
    let mut sent = false;
    for _ in 0..100 {
        if sender.send(msg()).await.is_ok() {
            sent = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(sent, "the sender reconnected");
    assert!(sub.next(Duration::from_secs(5)).await.is_some());
    sender.close().await;
}

#[tokio::test]
async fn qos2_sender_completes_on_pubcomp_and_qos0_on_write() {
    let base = unique("t/qos");
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{base}/#")).await;
    for qos in [0u8, 2] {
        let sender = MqttSender::start(
            "out",
            sender_config(&broker_url(), &format!("qos = {qos}\nretain = false")),
            Metrics::new(),
        )
        .expect("sender");
        assert!(sender.wait_connected(Duration::from_secs(10)).await);
        for i in 0..20 {
            let env = Envelope::new(format!("q{qos}-{i}"), &b"x"[..]);
            sender.send(OutboundMessage::new(env, format!("{base}/{qos}"))).await.expect("sent");
        }
        sender.close().await;
    }
    let got = sub.drain(Duration::from_secs(2)).await;
    assert_eq!(got.len(), 40);
}

#[tokio::test]
async fn a_message_over_the_brokers_packet_limit_fails_permanently_without_breaking_the_connection() {
    let broker = PrivateMosquitto::start_with("max_packet_size 2000").await;
    let sender = MqttSender::start("out", sender_config(&broker.url(), ""), Metrics::new()).expect("sender");
    assert!(sender.wait_connected(Duration::from_secs(10)).await);
    let big = OutboundMessage::new(Envelope::new("big", vec![b'x'; 4096]), "t/limit");
    let err = sender.send(big).await.expect_err("too big for this broker");
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("maximum packet size of 2000"), "{err}");
    let small = OutboundMessage::new(Envelope::new("small", vec![b'x'; 500]), "t/limit");
    sender.send(small).await.expect("the connection is still usable");
    sender.close().await;
}

/// A flood of publishes acknowledged in bursts (as a route does after a
/// group commit) is drained to the end: the receiver never stops reading
/// while acknowledgements wait to be sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_acked_in_bursts_is_drained_to_the_end() {
    let broker = PrivateMosquitto::start_with("max_queued_messages 0").await;
    let base = unique("t/flood");
    let metrics = Metrics::new();
    let receiver =
        MqttReceiver::new(&unique("in"), receiver_config(&broker.url(), &base, &unique("ferry")), 256, metrics);
    let mut rx = RunningReceiver::start(receiver, 256);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let publisher = TestMqtt::connect(&broker.url()).await;
    const N: usize = 3_000;
    for i in 0..N {
        publisher.publish_with(&base, &format!("{i}"), &[]).await;
    }
    let mut held = Vec::new();
    let mut acked = 0;
    while acked < N {
        let Some(d) = rx.next(Duration::from_secs(10)).await else { break };
        held.push(d.handle);
        if held.len() == 128 {
            let burst = std::mem::take(&mut held);
            let acks = burst.into_iter().map(|h| tokio::spawn(async move { h.ack().await }));
            for a in acks.collect::<Vec<_>>() {
                match tokio::time::timeout(Duration::from_secs(5), a).await {
                    Ok(r) => r.expect("join").expect("ack"),
                    Err(_) => panic!("an ack hung after {acked} acks"),
                }
                acked += 1;
            }
        }
    }
    for h in held.drain(..) {
        h.ack().await.expect("ack");
        acked += 1;
    }
    assert_eq!(acked, N, "the receiver stalled after {acked} messages");
    rx.stop().await;
}
