//! Every config in `examples/` passes `ferry validate`, and each bridge
//! example carries a message end to end on the real brokers (names made
//! unique through the `${VAR:-default}` hooks the examples expose); the
//! SimpleMQ side of seed 004's three bridges is the fake SimpleMQ of
//! tests/src/simplemq.rs, as no emulator can be fetched.

use std::collections::HashMap;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, topic, user_property};
use ferry_tests::rabbit::{Amqp10Client, Rabbit, URL10};
use ferry_tests::simplemq::{self, FakeSimpleMq};
use ferry_tests::sqs::{self, attribute, create_queue, text};
use ferry_tests::{eventually, repo_root, unique};
use lapin::BasicProperties;
use lapin::types::AMQPValue;

const WAIT: Duration = Duration::from_secs(20);

fn example(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("examples").join(name)).expect("example exists")
}

/// Polls an SQS queue until a message arrives.
async fn first_sqs_message(client: &aws_sdk_sqs::Client, url: &str) -> aws_sdk_sqs::types::Message {
    let got = sqs::receive_first(client, url, Duration::from_secs(2)).await;
    got.into_iter().next().unwrap_or_else(|| panic!("nothing arrived in {url}"))
}

#[test]
fn every_example_validates() {
    let ws = Workspace::with_plugins(&["filter"]);
    let mut names: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    for path in names {
        let out = ws.ferry(&["validate", "-c", &path.to_string_lossy()]);
        assert!(out.status.success(), "{} does not validate: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_amqp10_example_carries_a_reading() {
    let rabbit = Rabbit::connect().await;
    let queue = unique("ex-readings");
    rabbit.declare_queue(&queue).await;
    let base = unique("ex/sensors");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_MQTT_TOPICS", &format!("{base}/#")),
        ("FERRY_MQTT_CLIENT_ID", &unique("ex-in")),
        ("FERRY_AMQP_QUEUE", &queue),
    ]);
    ws.config(&example("mqtt-to-amqp10.toml"));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher
        .publish_with(&format!("{base}/kitchen"), "21.5", &[("gobridge.subject", "reading"), ("room", "kitchen")])
        .await;
    let mut client = Amqp10Client::connect(URL10).await;
    let got = client.receive(&format!("/amq/queue/{queue}"), 1, WAIT).await;
    let m = got.first().expect("the reading reached RabbitMQ");
    assert_eq!(m.properties.as_ref().and_then(|p| p.subject.as_deref()), Some("reading"));
    assert!(daemon.terminate().success());
    client.close().await;
    rabbit.delete_queue(&queue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp091_to_sqs_fanout_example_delivers_to_both_queues() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (audit_name, audit) = create_queue(&client, "ex-audit", false).await;
    let (billing_name, billing) = create_queue(&client, "ex-billing", false).await;
    let rabbit = Rabbit::connect().await;
    let (queue, exchange) = (unique("ex-orders"), unique("ex-events"));
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_AMQP_QUEUE", &queue),
        ("FERRY_AMQP_EXCHANGE", &exchange),
        ("FERRY_SQS_AUDIT_QUEUE", &audit_name),
        ("FERRY_SQS_BILLING_QUEUE", &billing_name),
        ("FERRY_SQS_ENDPOINT", &sqs::endpoint()),
    ]);
    ws.config(&example("amqp091-to-sqs-fanout.toml"));
    let daemon = Daemon::start(&ws, 1);
    rabbit.wait_for_consumer(&queue, WAIT).await;
    let mut headers = lapin::types::FieldTable::default();
    headers.insert("amount".into(), AMQPValue::LongLongInt(42));
    let props = BasicProperties::default().with_message_id("order-1".into()).with_headers(headers);
    rabbit.publish(&exchange, "orders.new", b"{\"order\":1}", props).await;
    for url in [&audit, &billing] {
        let m = first_sqs_message(&client, url).await;
        assert_eq!(m.body(), Some("{\"order\":1}"));
        assert_eq!(attribute(&m, "amqp091.message-id"), Some("order-1"));
        assert_eq!(attribute(&m, "amount"), Some("42"));
    }
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&queue).await;
    rabbit.delete_exchange(&exchange).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_to_amqp091_example_routes_by_region() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (inbox_name, inbox) = create_queue(&client, "ex-inbox", false).await;
    let rabbit = Rabbit::connect().await;
    let (exchange, eu) = (unique("ex-orders-x"), unique("ex-orders-eu"));
    rabbit.declare_queue(&eu).await;
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_SQS_QUEUE", &inbox_name),
        ("FERRY_SQS_ENDPOINT", &sqs::endpoint()),
        ("FERRY_AMQP_EXCHANGE", &exchange),
    ]);
    ws.config(&example("sqs-to-amqp091-by-content.toml"));
    let daemon = Daemon::start(&ws, 2);
    // The sender declared the exchange at connect.
    rabbit.bind(&eu, &exchange, "orders.eu").await;
    let mut attrs = HashMap::new();
    attrs.insert("region".to_owned(), text("eu"));
    attrs.insert("Subject".to_owned(), text("order.created"));
    sqs::send(&client, &inbox, "{\"order\":2}", attrs).await;
    let got = rabbit.get(&eu, WAIT).await.expect("routed to orders.eu");
    assert_eq!(got.delivery.routing_key.as_str(), "orders.eu");
    let headers = got.delivery.properties.headers().as_ref().expect("headers").inner();
    assert_eq!(headers.get("gobridge.subject"), Some(&AMQPValue::LongString("order.created".into())));
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&eu).await;
    rabbit.delete_exchange(&exchange).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_sqs_example_carries_telemetry() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (name, url) = create_queue(&client, "ex-telemetry", false).await;
    let base = unique("ex/telemetry");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_MQTT_TOPICS", &format!("{base}/#")),
        ("FERRY_MQTT_CLIENT_ID", &unique("ex-tel")),
        ("FERRY_SQS_QUEUE", &name),
        ("FERRY_SQS_ENDPOINT", &sqs::endpoint()),
    ]);
    ws.config(&example("mqtt-to-sqs.toml"));
    let daemon = Daemon::start(&ws, 1);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{base}/pump-1"), "{\"rpm\":900}", &[("site", "north")]).await;
    let m = first_sqs_message(&client, &url).await;
    assert_eq!(m.body(), Some("{\"rpm\":900}"));
    assert_eq!(attribute(&m, "mqtt.topic"), Some(format!("{base}/pump-1").as_str()));
    assert_eq!(attribute(&m, "site"), Some("north"));
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_sse_example_serves_telemetry_to_a_browser_client() {
    let base = unique("ex/sse");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_MQTT_TOPICS", &format!("{base}/+/telemetry")),
        ("FERRY_MQTT_CLIENT_ID", &unique("ex-sse")),
        ("FERRY_SSE_LISTEN", "127.0.0.1:0"),
    ]);
    ws.config(&example("mqtt-to-sse.toml"));
    let daemon = Daemon::start(&ws, 2);
    let url = format!("http://{}/stream/telemetry", daemon.listener("sse", "dashboard"));
    let mut stream = crate::sse::Stream::follow_with(&url, "dev-token", None).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher
        .publish_with(
            &format!("{base}/d-7/telemetry"),
            "{\"t\":21.5}",
            &[("mqtt.message-id", "r-1"), ("gobridge.subject", "telemetry.d-7"), ("unit", "C")],
        )
        .await;
    let event = stream.next().await;
    assert_eq!((event.id.as_deref(), event.event.as_deref()), (Some("r-1"), Some("telemetry.d-7")));
    let doc = crate::sse::document(&event);
    assert_eq!(doc["body"], "{\"t\":21.5}");
    assert_eq!(doc["headers"]["unit"], "C");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_kafka_example_keys_telemetry_by_device() {
    let broker = ferry_tests::kafka::PrivateKafka::start().await;
    let kafka = ferry_tests::kafka::Kafka::new(&broker.brokers());
    let topic = unique("ex-telemetry");
    kafka.create_topic(&topic, 3).await;
    let base = unique("ex/kafka");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_MQTT_TOPICS", &format!("{base}/#")),
        ("FERRY_MQTT_CLIENT_ID", &unique("ex-kafka")),
        ("FERRY_KAFKA_BROKERS", &broker.brokers()),
        ("FERRY_KAFKA_TOPIC", &topic),
    ]);
    ws.config(&example("mqtt-to-kafka.toml"));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{base}/pump-1"), "{\"rpm\":900}", &[("device", "pump-1")]).await;
    let got = kafka.read(&topic, 1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].text(), got[0].key_text()), ("{\"rpm\":900}".to_owned(), Some("pump-1".to_owned())));
    assert_eq!(got[0].header("mqtt.topic"), Some(format!("{base}/pump-1")));
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_to_mqtt_example_publishes_to_the_device_topic() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (name, url) = create_queue(&client, "ex-commands", false).await;
    let prefix = unique("ex/devices");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_SQS_QUEUE", &name),
        ("FERRY_SQS_ENDPOINT", &sqs::endpoint()),
        ("FERRY_MQTT_CLIENT_ID", &unique("ex-cmd")),
        ("FERRY_MQTT_PREFIX", &prefix),
    ]);
    ws.config(&example("sqs-to-mqtt.toml"));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{prefix}/#")).await;
    let mut attrs = HashMap::new();
    attrs.insert("device".to_owned(), text("d-7"));
    sqs::send(&client, &url, "reboot", attrs).await;
    let p = sub.next(WAIT).await.expect("the command reached MQTT");
    assert_eq!(topic(&p), format!("{prefix}/d-7/commands"));
    assert_eq!(p.payload.as_ref(), b"reboot");
    assert_eq!(user_property(&p, "device"), Some("d-7"));
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_to_simplemq_example_fans_out_in_mqbridge_format() {
    let smq = FakeSimpleMq::start(Duration::from_secs(30)).await;
    let (q1, q2) = (unique("dest1"), unique("dest2"));
    smq.create_queue(&q1, "key-1");
    smq.create_queue(&q2, "key-2");
    let rabbit = Rabbit::connect().await;
    let (queue, exchange) = (unique("ex-src"), unique("ex-src-x"));
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_AMQP_QUEUE", &queue),
        ("FERRY_AMQP_EXCHANGE", &exchange),
        ("SIMPLEMQ_QUEUE_1", &q1),
        ("SIMPLEMQ_QUEUE_2", &q2),
        ("SIMPLEMQ_API_KEY_1", "key-1"),
        ("SIMPLEMQ_API_KEY_2", "key-2"),
        ("SIMPLEMQ_API_URL", &smq.url()),
    ]);
    ws.config(&example("rabbitmq-to-simplemq-fanout.toml"));
    let daemon = Daemon::start(&ws, 1);
    let mut headers = lapin::types::FieldTable::default();
    headers.insert("x-custom".into(), AMQPValue::LongString("v".into()));
    let props = BasicProperties::default()
        .with_message_id("m-1".into())
        .with_reply_to("replies".into())
        .with_correlation_id("c-1".into())
        .with_headers(headers);
    rabbit.publish(&exchange, "orders.created", b"{\"order\":1}", props).await;
    eventually("a copy in both queues", || smq.messages(&q1).len() == 1 && smq.messages(&q2).len() == 1).await;
    for q in [&q1, &q2] {
        let doc = simplemq::document(&smq.messages(q)[0].content);
        let h = &doc["headers"];
        assert_eq!(h["rabbitmq.exchange"], exchange.as_str());
        assert_eq!(h["rabbitmq.routing_key"], "orders.created");
        assert_eq!(h["rabbitmq.message_id"], "m-1");
        assert_eq!(h["rabbitmq.reply_to"], "replies");
        assert_eq!(h["rabbitmq.correlation_id"], "c-1");
        assert_eq!(h["rabbitmq.header.x-custom"], "v");
        assert_eq!(doc["body"], "{\"order\":1}");
    }
    assert!(daemon.terminate().success());
    assert_eq!(rabbit.depth(&queue).await, 0, "acknowledged once both queues took it");
    rabbit.delete_queue(&queue).await;
    rabbit.delete_exchange(&exchange).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simplemq_to_rabbitmq_example_routes_by_the_messages_headers() {
    let smq = FakeSimpleMq::start(Duration::from_secs(30)).await;
    let inbound = unique("inbound");
    smq.create_queue(&inbound, "key-in");
    let rabbit = Rabbit::connect().await;
    let (exchange, routed, direct) = (unique("ex-orders"), unique("ex-routed"), unique("ex-direct"));
    rabbit.declare_exchange(&exchange, lapin::ExchangeKind::Direct).await;
    rabbit.declare_queue(&routed).await;
    rabbit.declare_queue(&direct).await;
    rabbit.bind(&routed, &exchange, "orders.created").await;
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("SIMPLEMQ_QUEUE", &inbound),
        ("SIMPLEMQ_API_KEY_INBOUND", "key-in"),
        ("SIMPLEMQ_API_URL", &smq.url()),
    ]);
    ws.config(&ferry_tests::daemon::with_admin(&admin, example("simplemq-to-rabbitmq-by-content.toml")));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    smq.put(
        &inbound,
        &simplemq::content(&serde_json::json!({
            "headers": {
                "rabbitmq.exchange": exchange, "rabbitmq.routing_key": "orders.created",
                "rabbitmq.message_id": "m-2", "rabbitmq.reply_to": "replies",
                "rabbitmq.content_type": "application/json", "rabbitmq.header.x-custom": "v"
            },
            "body": "{\"order\":2}"
        })),
    );
    // The default exchange: the routing key is a queue.
    let smq_id = smq.put(
        &inbound,
        &simplemq::content(&serde_json::json!({
            "headers": { "rabbitmq.exchange": "", "rabbitmq.routing_key": direct },
            "body": "to the queue"
        })),
    );
    smq.put(
        &inbound,
        &simplemq::content(&serde_json::json!({ "headers": { "rabbitmq.exchange": "" }, "body": "lost" })),
    );

    let got = rabbit.get(&routed, WAIT).await.expect("routed by rabbitmq.exchange and rabbitmq.routing_key");
    assert_eq!(got.delivery.data, b"{\"order\":2}");
    let p = &got.delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("m-2"));
    assert_eq!(p.reply_to().as_ref().map(|s| s.as_str()), Some("replies"));
    assert_eq!(p.content_type().as_ref().map(|s| s.as_str()), Some("application/json"));
    let headers = p.headers().as_ref().expect("headers").inner();
    assert_eq!(headers.get("x-custom"), Some(&AMQPValue::LongString("v".into())));
    let got = rabbit.get(&direct, WAIT).await.expect("to the default exchange");
    assert_eq!(got.delivery.data, b"to the queue");
    let p = &got.delivery.properties;
    assert_eq!(
        p.message_id().as_ref().map(|s| s.as_str()),
        Some(smq_id.as_str()),
        "the SimpleMQ id without rabbitmq.message_id"
    );
    ferry_tests::http::wait_for_sample(
        &admin,
        "ferry_ingress_rejected_total",
        "reason=\"missing_rabbitmq_headers\"",
        1.0,
        WAIT,
    );
    eventually("every message deleted from SimpleMQ", || smq.messages(&inbound).is_empty()).await;
    assert!(daemon.terminate().success());
    for q in [&routed, &direct] {
        rabbit.delete_queue(q).await;
    }
    rabbit.delete_exchange(&exchange).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simplemq_fanout_example_copies_each_message_to_two_queues() {
    let smq = FakeSimpleMq::start(Duration::from_secs(30)).await;
    let (source, f1, f2) = (unique("source"), unique("fanout1"), unique("fanout2"));
    for (q, k) in [(&source, "k-s"), (&f1, "k-1"), (&f2, "k-2")] {
        smq.create_queue(q, k);
    }
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("SIMPLEMQ_QUEUE_SOURCE", &source),
        ("SIMPLEMQ_QUEUE_FANOUT_1", &f1),
        ("SIMPLEMQ_QUEUE_FANOUT_2", &f2),
        ("SIMPLEMQ_API_KEY_SOURCE", "k-s"),
        ("SIMPLEMQ_API_KEY_FANOUT_1", "k-1"),
        ("SIMPLEMQ_API_KEY_FANOUT_2", "k-2"),
        ("SIMPLEMQ_API_URL", &smq.url()),
    ]);
    ws.config(&example("simplemq-fanout.toml"));
    let daemon = Daemon::start(&ws, 0);
    let doc = serde_json::json!({
        "headers": { "rabbitmq.exchange": "x", "rabbitmq.routing_key": "k", "rabbitmq.message_id": "m-3",
                     "rabbitmq.header.tenant": "acme" },
        "body": "payload"
    });
    smq.put(&source, &simplemq::content(&doc));
    eventually("a copy in both fan-out queues", || smq.messages(&f1).len() == 1 && smq.messages(&f2).len() == 1).await;
    for q in [&f1, &f2] {
        assert_eq!(simplemq::document(&smq.messages(q)[0].content), doc, "forwarded in the same format");
    }
    eventually("the source message deleted", || smq.messages(&source).is_empty()).await;
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_endpoint_example_bridges_apps_and_devices() {
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_SQS_LISTEN", ANY_PORT),
        ("FERRY_MQTT_CLIENT_ID", &unique("ex-ep-out")),
        ("FERRY_MQTT_IN_CLIENT_ID", &unique("ex-ep-in")),
    ]);
    ws.config(&example("sqs-endpoint.toml"));
    let mut sub = TestMqtt::connect(&broker_url()).await;
    let region = unique("eu");
    sub.subscribe(&format!("orders/{region}")).await;
    let daemon = Daemon::start(&ws, 3);
    let endpoint = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    let client = sqs::client_for(&endpoint);
    let orders = format!("{endpoint}/000000000000/orders");
    let mut attributes = HashMap::new();
    attributes.insert("region".to_owned(), text(&region));
    sqs::send(&client, &orders, r#"{"order":42}"#, attributes).await;
    let publish = sub.next(Duration::from_secs(10)).await.expect("the order reaches MQTT");
    assert_eq!(topic(&publish), format!("orders/{region}"));
    assert_eq!(user_property(&publish, "region"), Some(region.as_str()));

    let reading = unique("21.5");
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("sensors/{}", unique("kitchen")), &reading, &[("unit", "C")]).await;
    let events = format!("{endpoint}/000000000000/events");
    let mut found = None;
    for _ in 0..10 {
        for m in sqs::receive(&client, &events, Duration::from_secs(1)).await {
            if m.body() == Some(reading.as_str()) {
                found = Some(m);
            }
        }
        if found.is_some() {
            break;
        }
    }
    let m = found.expect("the reading reaches the events queue");
    let unit = m.message_attributes().and_then(|a| a.get("unit")).and_then(|v| v.string_value());
    assert_eq!(unit, Some("C"));
    assert!(daemon.terminate().success());
}
