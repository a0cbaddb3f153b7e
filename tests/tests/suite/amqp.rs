//! AMQP routes through the real daemon, against RabbitMQ (AMQP 0-9-1 and,
//! through rabbitmq_amqp1_0, AMQP 1.0), Mosquitto and moto_server: the
//! mapped properties and headers checked field by field on each crossing,
//! and permanent failures at the target ending in the DLQ.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::{SimpleValue, Symbol};
use ferry_tests::amqp10_peer::{PeerOutcome, ScriptedTarget};
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, topic, user_property};
use ferry_tests::rabbit::{Amqp10Client, Rabbit, URL10, URL091};
use ferry_tests::sqs::{self, attribute, create_queue, receive, text};
use ferry_tests::unique;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use rumqttc::v5::mqttbytes::v5::PublishProperties;

const WAIT: Duration = Duration::from_secs(20);

/// A one-route config: `receiver` and `sender` are TOML bodies of the
/// `[receivers.in]` and `[senders.out]` tables.
fn config(receiver: &str, sender: &str, address: &str, route_extra: &str) -> String {
    format!(
        r#"
[receivers.in]
{receiver}

[senders.out]
{sender}

[[routes]]
id = "amqp-route"
receiver = "in"
{route_extra}
[routes.backoff]
initial_ms = 50
max_ms = 200

[[routes.bindings]]
sender = "out"
address = "{address}"
"#
    )
}

fn amqp10_receiver(queue: &str) -> String {
    format!("type = \"amqp10\"\nurl = \"{URL10}\"\naddress = \"/amq/queue/{queue}\"\nreconnect_initial_ms = 100")
}

fn amqp10_sender(queue: &str) -> String {
    format!("type = \"amqp10\"\nurl = \"{URL10}\"\naddress = \"/amq/queue/{queue}\"")
}

fn amqp091_receiver(queue: &str) -> String {
    format!("type = \"amqp091\"\nurl = \"{URL091}\"\nqueue = \"{queue}\"\nreconnect_initial_ms = 100")
}

fn mqtt_sender() -> String {
    format!("type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"", broker_url(), unique("ferry-out"))
}

fn message_with_properties(id: &str) -> Message<fe2o3_amqp::types::messaging::Data> {
    Message::builder()
        .properties(Properties {
            message_id: Some(MessageId::String(id.to_owned())),
            user_id: None,
            to: None,
            subject: Some("order.created".into()),
            reply_to: Some("replies".into()),
            correlation_id: Some(MessageId::String("corr-10".into())),
            content_type: Some(Symbol::from("application/json")),
            content_encoding: None,
            absolute_expiry_time: None,
            creation_time: None,
            group_id: None,
            group_sequence: None,
            reply_to_group_id: None,
        })
        .application_properties(
            ApplicationProperties::builder()
                .insert("region", SimpleValue::String("eu".into()))
                .insert("count", SimpleValue::Long(3))
                .insert("x-bridge.tenant-id", SimpleValue::String("spoofed".into()))
                .build(),
        )
        .data(b"{\"order\":1}".to_vec())
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp10_to_mqtt_maps_identity_subject_correlation_and_properties() {
    let rabbit = Rabbit::connect().await;
    let q = unique("bb-a10-in");
    rabbit.declare_queue(&q).await;
    let dst = unique("bb/a10");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&amqp10_receiver(&q), &mqtt_sender(), &format!("{dst}/out"), ""));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;

    let mut client = Amqp10Client::connect(URL10).await;
    client.send(&format!("/amq/queue/{q}"), message_with_properties("a10-order-1")).await;

    let p = sub.next(WAIT).await.expect("crossed to MQTT");
    assert_eq!(topic(&p), format!("{dst}/out"));
    assert_eq!(p.payload.as_ref(), b"{\"order\":1}");
    assert_eq!(user_property(&p, "mqtt.message-id"), Some("a10-order-1"), "the AMQP message-id is the identity");
    assert_eq!(user_property(&p, "gobridge.subject"), Some("order.created"));
    assert_eq!(user_property(&p, "amqp10.message-id"), Some("a10-order-1"));
    assert_eq!(user_property(&p, "amqp10.reply-to"), Some("replies"));
    assert_eq!(user_property(&p, "region"), Some("eu"));
    assert_eq!(user_property(&p, "x-bridge.tenant-id"), None, "publishers cannot set bridge headers");
    // `count` is a number: MQTT user properties are text only.
    assert_eq!(user_property(&p, "count"), None);
    let props = p.properties.as_ref().expect("properties");
    assert_eq!(props.correlation_data.as_deref(), Some(&b"corr-10"[..]));
    assert_eq!(props.content_type.as_deref(), Some("application/json"));
    assert!(daemon.terminate().success(), "clean shutdown");
    assert_eq!(rabbit.depth(&q).await, 0, "the source message was accepted");
    client.close().await;
    rabbit.delete_queue(&q).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_amqp10_maps_identity_subject_correlation_and_user_properties() {
    let rabbit = Rabbit::connect().await;
    let q = unique("bb-a10-out");
    rabbit.declare_queue(&q).await;
    let src = unique("bb/m2a");
    let receiver = format!(
        "type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{src}/#\"]",
        broker_url(),
        unique("ferry-in")
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&receiver, &amqp10_sender(&q), "", ""));
    let daemon = Daemon::start(&ws, 2);

    let publisher = TestMqtt::connect(&broker_url()).await;
    let properties = PublishProperties {
        correlation_data: Some(Bytes::from_static(b"corr-m")),
        content_type: Some("text/plain".into()),
        user_properties: vec![
            ("mqtt.message-id".into(), "m-77".into()),
            ("gobridge.subject".into(), "sensor.reading".into()),
            ("room".into(), "kitchen".into()),
        ],
        ..Default::default()
    };
    publisher.publish(&format!("{src}/t"), "21.5", properties).await;

    let mut client = Amqp10Client::connect(URL10).await;
    let got = client.receive(&format!("/amq/queue/{q}"), 1, WAIT).await;
    let m = got.first().expect("crossed to AMQP 1.0");
    let p = m.properties.as_ref().expect("properties");
    assert_eq!(p.message_id, Some(MessageId::String("m-77".into())));
    assert_eq!(p.subject.as_deref(), Some("sensor.reading"));
    assert_eq!(p.correlation_id, Some(MessageId::String("corr-m".into())));
    assert_eq!(p.content_type.as_ref().map(|s| s.0.as_str()), Some("text/plain"));
    assert!(m.header.as_ref().is_some_and(|h| h.durable));
    let app = &m.application_properties.as_ref().expect("application properties").0;
    assert_eq!(app.get("room"), Some(&SimpleValue::String("kitchen".into())));
    assert_eq!(app.get("mqtt.topic"), Some(&SimpleValue::String(format!("{src}/t"))));
    assert!(app.get("x-bridge.route-id").is_none(), "private bookkeeping stays home");
    assert!(app.get("gobridge.subject").is_none(), "the subject travels as the subject property");
    assert!(matches!(&m.body, Body::Data(d) if d.iter().next().is_some_and(|s| s.0.as_slice() == b"21.5")));
    assert!(daemon.terminate().success(), "clean shutdown");
    client.close().await;
    rabbit.delete_queue(&q).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp091_to_amqp10_keeps_identity_subject_and_typed_headers() {
    let rabbit = Rabbit::connect().await;
    let src = unique("bb-091-in");
    let dst = unique("bb-10-out");
    rabbit.declare_queue(&src).await;
    rabbit.declare_queue(&dst).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&amqp091_receiver(&src), &amqp10_sender(&dst), "", ""));
    let daemon = Daemon::start(&ws, 2);

    let mut headers = FieldTable::default();
    headers.insert("gobridge.subject".into(), AMQPValue::LongString("invoice.paid".into()));
    headers.insert("amount".into(), AMQPValue::LongLongInt(1250));
    headers.insert("paid".into(), AMQPValue::Boolean(true));
    let props = BasicProperties::default()
        .with_message_id("inv-5".into())
        .with_correlation_id("corr-091".into())
        .with_content_type("application/json".into())
        .with_headers(headers);
    rabbit.publish("", &src, b"{\"invoice\":5}", props).await;

    let mut client = Amqp10Client::connect(URL10).await;
    let got = client.receive(&format!("/amq/queue/{dst}"), 1, WAIT).await;
    let m = got.first().expect("crossed to AMQP 1.0");
    let p = m.properties.as_ref().expect("properties");
    assert_eq!(p.message_id, Some(MessageId::String("inv-5".into())));
    assert_eq!(p.subject.as_deref(), Some("invoice.paid"));
    assert_eq!(p.correlation_id, Some(MessageId::String("corr-091".into())));
    assert_eq!(p.content_type.as_ref().map(|s| s.0.as_str()), Some("application/json"));
    let app = &m.application_properties.as_ref().expect("application properties").0;
    assert_eq!(app.get("amount"), Some(&SimpleValue::Long(1250)), "numbers stay numbers");
    assert_eq!(app.get("paid"), Some(&SimpleValue::Bool(true)));
    assert_eq!(app.get("amqp091.routing-key"), Some(&SimpleValue::String(src.clone())));
    assert!(daemon.terminate().success(), "clean shutdown");
    assert_eq!(rabbit.depth(&src).await, 0);
    client.close().await;
    rabbit.delete_queue(&src).await;
    rabbit.delete_queue(&dst).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp10_to_sqs_sends_subject_identity_and_properties_as_attributes() {
    sqs::require_aws_env();
    let rabbit = Rabbit::connect().await;
    let q = unique("bb-a10-sqs");
    rabbit.declare_queue(&q).await;
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-a10-dst", false).await;
    let sender = format!("type = \"sqs\"\nqueue_url = \"{url}\"\nendpoint_url = \"{}\"", sqs::endpoint());
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&amqp10_receiver(&q), &sender, "", ""));
    let daemon = Daemon::start(&ws, 1);

    let mut amqp = Amqp10Client::connect(URL10).await;
    amqp.send(&format!("/amq/queue/{q}"), message_with_properties("a10-sqs-1")).await;

    let mut got = Vec::new();
    for _ in 0..10 {
        got = receive(&client, &url, Duration::from_secs(2)).await;
        if !got.is_empty() {
            break;
        }
    }
    let m = got.first().expect("crossed to SQS");
    assert_eq!(m.body(), Some("{\"order\":1}"));
    assert_eq!(attribute(m, "Subject"), Some("order.created"));
    assert_eq!(attribute(m, "amqp10.message-id"), Some("a10-sqs-1"), "the AMQP id travels as an attribute");
    assert_eq!(attribute(m, "amqp10.correlation-id"), Some("corr-10"));
    assert_eq!(attribute(m, "region"), Some("eu"));
    assert_eq!(attribute(m, "count"), Some("3"));
    assert_eq!(attribute(m, "x-bridge.tenant-id"), None);
    assert!(daemon.terminate().success(), "clean shutdown");
    amqp.close().await;
    rabbit.delete_queue(&q).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_to_amqp091_routes_by_content_and_maps_attributes_to_headers() {
    sqs::require_aws_env();
    let rabbit = Rabbit::connect().await;
    let eu = unique("bb-sqs-eu");
    let us = unique("bb-sqs-us");
    let x = unique("bb-sqs-x");
    rabbit.declare_queue(&eu).await;
    rabbit.declare_queue(&us).await;
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-091", false).await;
    let receiver =
        format!("type = \"sqs\"\nqueue_url = \"{url}\"\nendpoint_url = \"{}\"\nwait_time_seconds = 1", sqs::endpoint());
    let sender = format!(
        "type = \"amqp091\"\nurl = \"{URL091}\"\nexchange = \"{x}\"\nexchange_type = \"direct\"\nreconnect_initial_ms = 100"
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&receiver, &sender, "orders.{region}", ""));
    let daemon = Daemon::start(&ws, 2);
    rabbit.bind(&eu, &x, "orders.eu").await;
    rabbit.bind(&us, &x, "orders.us").await;

    for region in ["eu", "us"] {
        let mut attrs = HashMap::new();
        attrs.insert("Subject".to_owned(), text("order.created"));
        attrs.insert("region".to_owned(), text(region));
        sqs::send(&client, &url, &format!("{{\"region\":\"{region}\"}}"), attrs).await;
    }
    for (queue, region) in [(&eu, "eu"), (&us, "us")] {
        let got = rabbit.get(queue, WAIT).await.unwrap_or_else(|| panic!("nothing routed to {region}"));
        assert_eq!(got.delivery.data, format!("{{\"region\":\"{region}\"}}").into_bytes());
        assert_eq!(got.delivery.routing_key.as_str(), format!("orders.{region}"));
        let p = &got.delivery.properties;
        assert!(p.message_id().as_ref().is_some_and(|id| !id.as_str().is_empty()), "the SQS MessageId is the identity");
        let headers = p.headers().as_ref().expect("headers").inner();
        assert_eq!(headers.get("gobridge.subject"), Some(&AMQPValue::LongString("order.created".into())));
        assert_eq!(headers.get("region"), Some(&AMQPValue::LongString(region.into())));
        assert!(
            matches!(headers.get("sqs.ApproximateReceiveCount"), Some(AMQPValue::LongLongInt(1))),
            "numbers stay numbers: {:?}",
            headers.get("sqs.ApproximateReceiveCount")
        );
        assert!(matches!(headers.get("sqs.SentTimestamp"), Some(AMQPValue::Timestamp(_))));
        assert!(!headers.contains_key("x-bridge.route-id"));
    }
    assert!(daemon.terminate().success(), "clean shutdown");
    rabbit.delete_queue(&eu).await;
    rabbit.delete_queue(&us).await;
    rabbit.delete_exchange(&x).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_that_refuses_for_good_sends_the_message_to_the_dlq_and_the_source_is_acked() {
    // Mandatory publishing to a key no queue is bound to: RabbitMQ returns
    // the message, a permanent failure; the route dead-letters it.
    let rabbit = Rabbit::connect().await;
    let src = unique("bb-dlq-in");
    rabbit.declare_queue(&src).await;
    let sender = format!("type = \"amqp091\"\nurl = \"{URL091}\"\nreconnect_initial_ms = 100");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&amqp091_receiver(&src), &sender, &unique("nobody-listens"), ""));
    let daemon = Daemon::start(&ws, 2);
    rabbit.publish("", &src, b"lost?", BasicProperties::default().with_message_id("dlq-1".into())).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, WAIT);
    assert!(daemon.terminate().success(), "clean shutdown");
    let dead = ws.dead_letters();
    let entry = dead.first().expect("a dead letter");
    assert!(entry.to_string().contains("unroutable"), "{entry}");
    assert!(entry.to_string().contains("dlq-1"), "{entry}");
    assert_eq!(rabbit.depth(&src).await, 0, "acked at the source once dead-lettered");
    rabbit.delete_queue(&src).await;
}

fn release_once_reject_poison(body: &[u8], nth: usize) -> PeerOutcome {
    match (body, nth) {
        (b"reject me", _) => PeerOutcome::Reject,
        (b"release me once", 0) => PeerOutcome::Release,
        _ => PeerOutcome::Accept,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp10_outcomes_released_is_retried_and_rejected_without_condition_is_dead_lettered() {
    let peer = ScriptedTarget::start(release_once_reject_poison).await;
    let rabbit = Rabbit::connect().await;
    let src = unique("bb-outcome-in");
    rabbit.declare_queue(&src).await;
    let sender =
        format!("type = \"amqp10\"\nurl = \"{}\"\naddress = \"target\"\nreconnect_initial_ms = 100", peer.url());
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&amqp091_receiver(&src), &sender, "", ""));
    let daemon = Daemon::start(&ws, 2);
    rabbit.publish("", &src, b"release me once", BasicProperties::default().with_message_id("rel-1".into())).await;
    rabbit.publish("", &src, b"reject me", BasicProperties::default().with_message_id("rej-1".into())).await;

    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, WAIT);
    let started = std::time::Instant::now();
    while peer.outcomes_for(b"release me once").len() < 2 && started.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(peer.outcomes_for(b"release me once"), vec![PeerOutcome::Release, PeerOutcome::Accept]);
    assert_eq!(peer.outcomes_for(b"reject me"), vec![PeerOutcome::Reject], "a rejection is not retried");
    assert!(daemon.terminate().success(), "clean shutdown");
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].to_string().contains("rej-1") && dead[0].to_string().contains("no condition"), "{}", dead[0]);
    assert_eq!(rabbit.depth(&src).await, 0, "both source messages were settled");
    rabbit.delete_queue(&src).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_permanent_failure_is_rejected_into_the_queues_dead_letter_exchange() {
    let rabbit = Rabbit::connect().await;
    let src = unique("bb-dlx-in");
    let dead = unique("bb-dlx-dead");
    let dlx = unique("bb-dlx");
    rabbit.declare_queue(&dead).await;
    rabbit.declare_exchange(&dlx, lapin::ExchangeKind::Fanout).await;
    rabbit.bind(&dead, &dlx, "").await;
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.as_str().into()));
    rabbit.declare_queue_with(&src, args).await;
    // The queue has arguments ferry would not declare: check it passively.
    let receiver = format!("{}\nqueue_passive = true", amqp091_receiver(&src));
    let sender = format!("type = \"amqp091\"\nurl = \"{URL091}\"\nreconnect_initial_ms = 100");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&receiver, &sender, &unique("nobody-listens"), "on_permanent_failure = \"drop\""));
    let daemon = Daemon::start(&ws, 2);
    rabbit.publish("", &src, b"undeliverable", BasicProperties::default().with_message_id("dlx-1".into())).await;

    let got = rabbit.get(&dead, WAIT).await.expect("the broker dead-lettered the rejected message");
    assert_eq!(got.delivery.data, b"undeliverable");
    assert_eq!(got.delivery.properties.message_id().as_ref().map(|s| s.as_str()), Some("dlx-1"));
    let headers = got.delivery.properties.headers().as_ref().expect("headers").inner();
    assert!(headers.contains_key("x-death"), "rejected, not republished: {headers:?}");
    assert!(daemon.terminate().success(), "clean shutdown");
    assert!(ws.dead_letters().is_empty(), "dropped, not in ferry's DLQ");
    assert_eq!(rabbit.depth(&src).await, 0);
    rabbit.delete_queue(&src).await;
    rabbit.delete_queue(&dead).await;
    rabbit.delete_exchange(&dlx).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_id_that_fails_transiently_is_dead_lettered_as_unstable_identity_when_the_route_asks() {
    let rabbit = Rabbit::connect().await;
    let src = unique("bb-unstable-in");
    rabbit.declare_queue(&src).await;
    // The target fails every message for itself (500: transient, a
    // failure of the message that spends the budget, not an outage).
    let target = ferry_tests::webhook::WebhookTarget::start().await;
    target.answer_all(ferry_tests::webhook::answer(500, None));
    let sender = format!("type = \"http\"\nurl = \"{}\"", target.url("/fail"));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(
        &amqp091_receiver(&src),
        &sender,
        "",
        "unstable_identity = \"fail\"\nmax_replay_attempts = 1000",
    ));
    let daemon = Daemon::start_with_connected(&ws, &[("receiver", "in")]);
    rabbit.publish("", &src, b"no id", BasicProperties::default()).await;
    rabbit.publish("", &src, b"stable", BasicProperties::default().with_message_id("stable-1".into())).await;

    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, WAIT);
    // The message with an id gets the full budget: it keeps coming back.
    daemon.wait_for_line(&["message_id=stable-1", "send failed, will retry"], WAIT);
    assert!(daemon.terminate().success(), "clean shutdown");
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "unstable_identity");
    assert!(dead[0].to_string().contains("no message id"), "{}", dead[0]);
    assert_eq!(rabbit.depth(&src).await, 1, "the stable message is back in its queue, the other was settled");
    rabbit.delete_queue(&src).await;
}
