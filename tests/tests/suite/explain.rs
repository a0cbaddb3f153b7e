//! `ferry validate --explain` against what the daemon really does: for a
//! transport pair, the message the report's probe describes is sent through
//! a running daemon on the real brokers, and what arrives is what the report
//! said would (and what it said is lost does not arrive). Four pairs, so
//! that every transport is checked as a source and as a target: MQTT -> SQS,
//! AMQP 0-9-1 -> MQTT, MQTT -> AMQP 1.0, SQS -> AMQP 0-9-1.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use fe2o3_amqp::types::primitives::SimpleValue;
use ferry_core::wire::lookup;
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, user_property};
use ferry_tests::rabbit::{Amqp10Client, Rabbit, URL10};
use ferry_tests::sqs::{self, attribute, create_queue, text};
use ferry_tests::{repo_root, unique};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use rumqttc::v5::mqttbytes::v5::PublishProperties;

fn explain(ws: &Workspace) -> String {
    let out = ws.ferry(&["validate", "--explain", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The extra user properties of the MQTT probe, by name.
fn extras() -> Vec<(String, String)> {
    (1..=12).map(|i| (format!("probe-extra-{i:02}"), format!("x{i}"))).collect()
}

/// The report's MQTT probe (with its extra user properties), as a producer
/// would publish it.
fn mqtt_probe() -> PublishProperties {
    let mut user: Vec<(String, String)> = vec![
        ("mqtt.message-id".into(), "probe-id".into()),
        ("gobridge.subject".into(), "probe.subject".into()),
        ("probe-text".into(), "text".into()),
    ];
    user.extend(extras());
    PublishProperties {
        content_type: Some("application/x-probe".into()),
        correlation_data: Some("probe-corr".into()),
        response_topic: Some("probe/reply".into()),
        message_expiry_interval: Some(3600),
        user_properties: user,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_sqs_keeps_as_many_user_properties_as_the_report_says() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (name, url) = create_queue(&client, "explain", false).await;
    let base = unique("explain/telemetry");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_MQTT_TOPICS", &format!("{base}/#")),
        ("FERRY_MQTT_CLIENT_ID", &unique("explain")),
        ("FERRY_SQS_QUEUE", &name),
        ("FERRY_SQS_ENDPOINT", &sqs::endpoint()),
    ]);
    ws.config(&std::fs::read_to_string(repo_root().join("examples/mqtt-to-sqs.toml")).expect("example"));
    let report = explain(&ws);
    assert!(report.contains("ok    identity (mqtt.message-id) -> message_attributes.mqtt.message-id"), "{report}");
    assert!(report.contains("ok    user property -> message_attributes.probe-text"), "{report}");
    assert!(
        report.contains("outage: no answer (connection, DNS, timeout), throttling, or a 5xx; the message is held, no replay spent, for as long as the outage lasts"),
        "{report}"
    );
    let promised: usize = report
        .split("LOST  other user properties (13): only ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in the report:\n{report}"));

    let daemon = Daemon::start(&ws, 1);
    let publisher = TestMqtt::connect(&broker_url()).await;
    let properties = mqtt_probe();
    publisher.publish(&format!("{base}/probe"), "{}", properties).await;
    let got = sqs::receive_first(&client, &url, Duration::from_secs(20)).await;
    let m = got.first().expect("the probe arrived in SQS");
    assert_eq!(attribute(m, "mqtt.message-id"), Some("probe-id"));
    let arrived = m.message_attributes().map_or(0, |a| a.keys().filter(|k| k.starts_with("probe-")).count());
    assert_eq!(arrived, promised, "the report promised {promised} of 13, the daemon delivered {arrived}");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp091_to_mqtt_carries_text_headers_and_loses_typed_ones_as_the_report_says() {
    let rabbit = Rabbit::connect().await;
    let queue = unique("explain-q");
    let base = unique("explain/out");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "amqp091"
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
queue = "{queue}"

[senders.out]
type = "mqtt"
url = "{broker}"
client_id = "{client}"

[[routes]]
id = "r"
receiver = "in"

[[routes.bindings]]
sender = "out"
address = "{base}/{{amqp091.routing-key}}"
"#,
        broker = broker_url(),
        client = unique("explain-out"),
    ));
    let report = explain(&ws);
    assert!(report.contains("ok    text header -> user_properties.probe-text"), "{report}");
    assert!(report.contains("LOST  integer header"), "{report}");
    assert!(report.contains("LOST  boolean header"), "{report}");
    assert!(report.contains("ok    correlation id -> properties.correlation_data"), "{report}");

    let daemon = Daemon::start(&ws, 2);
    rabbit.wait_for_consumer(&queue, Duration::from_secs(20)).await;
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{base}/#")).await;
    let mut headers = FieldTable::default();
    headers.insert("probe-text".into(), AMQPValue::LongString("text".into()));
    headers.insert("probe-int".into(), AMQPValue::LongLongInt(4242));
    headers.insert("probe-bool".into(), AMQPValue::Boolean(true));
    let properties = BasicProperties::default().with_correlation_id("probe-corr".into()).with_headers(headers);
    rabbit.publish("", &queue, b"{}", properties).await;
    let p = sub.next(Duration::from_secs(20)).await.expect("the probe arrived over MQTT");
    assert_eq!(user_property(&p, "probe-text"), Some("text"));
    assert_eq!(user_property(&p, "probe-int"), None, "the report said integer headers are lost");
    assert_eq!(user_property(&p, "probe-bool"), None, "the report said boolean headers are lost");
    let correlation = p.properties.as_ref().and_then(|p| p.correlation_data.clone());
    assert_eq!(correlation.as_deref(), Some(&b"probe-corr"[..]));
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&queue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_amqp10_carries_everything_the_report_says() {
    let rabbit = Rabbit::connect().await;
    let queue = unique("explain-readings");
    rabbit.declare_queue(&queue).await;
    let base = unique("explain/sensors");
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_MQTT_TOPICS", &format!("{base}/#")),
        ("FERRY_MQTT_CLIENT_ID", &unique("explain-in")),
        ("FERRY_AMQP_QUEUE", &queue),
    ]);
    ws.config(&std::fs::read_to_string(repo_root().join("examples/mqtt-to-amqp10.toml")).expect("example"));
    let report = explain(&ws);
    assert!(report.contains("nothing is lost"), "{report}");
    assert!(report.contains("ok    subject (gobridge.subject) -> properties.subject"), "{report}");
    assert!(report.contains("ok    content type -> properties.content_type"), "{report}");
    assert!(report.contains("ok    response topic -> application_properties.mqtt.response-topic"), "{report}");
    assert!(report.contains("ok    expiry (message expiry interval) -> properties.absolute_expiry_time"), "{report}");
    assert!(report.contains("ok    other user properties (13) -> all 13"), "{report}");

    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish(&format!("{base}/probe"), "{}", mqtt_probe()).await;
    let mut client = Amqp10Client::connect(URL10).await;
    let got = client.receive(&format!("/amq/queue/{queue}"), 1, Duration::from_secs(20)).await;
    let m = got.first().expect("the probe reached RabbitMQ");
    let p = m.properties.as_ref().expect("properties");
    assert_eq!(p.subject.as_deref(), Some("probe.subject"));
    assert_eq!(p.content_type.as_ref().map(|c| c.0.as_str()), Some("application/x-probe"));
    assert!(p.absolute_expiry_time.is_some(), "the expiry crossed");
    let app = &m.application_properties.as_ref().expect("application properties").0;
    assert_eq!(app.get("mqtt.response-topic"), Some(&SimpleValue::String("probe/reply".into())));
    let probes = app.iter().filter(|(k, _)| k.starts_with("probe-")).count();
    assert_eq!(probes, 13, "the report promised all 13");
    assert!(daemon.terminate().success());
    client.close().await;
    rabbit.delete_queue(&queue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_to_amqp091_carries_every_attribute_the_report_says() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (inbox_name, inbox) = create_queue(&client, "explain-inbox", false).await;
    let rabbit = Rabbit::connect().await;
    let (exchange, eu) = (unique("explain-x"), unique("explain-eu"));
    rabbit.declare_queue(&eu).await;
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("FERRY_SQS_QUEUE", &inbox_name),
        ("FERRY_SQS_ENDPOINT", &sqs::endpoint()),
        ("FERRY_AMQP_EXCHANGE", &exchange),
    ]);
    ws.config(&std::fs::read_to_string(repo_root().join("examples/sqs-to-amqp091-by-content.toml")).expect("example"));
    let report = explain(&ws);
    assert!(report.contains("nothing is lost"), "{report}");
    assert!(report.contains("ok    Number attribute -> headers.probe-int = \"4242\""), "{report}");
    assert!(report.contains("ok    Binary attribute -> headers.probe-bytes"), "{report}");
    assert!(report.contains("ok    attributes besides Subject (9) -> all 9"), "{report}");

    let daemon = Daemon::start(&ws, 2);
    rabbit.bind(&eu, &exchange, "orders.eu").await;
    // The report's probe: the subject, three typed attributes and six more
    // (one of them the region the route needs).
    let mut attrs = HashMap::new();
    attrs.insert("Subject".to_owned(), text("probe.subject"));
    attrs.insert("region".to_owned(), text("eu"));
    attrs.insert("probe-text".to_owned(), text("text"));
    let number = MessageAttributeValue::builder().data_type("Number").string_value("4242").build().expect("number");
    attrs.insert("probe-int".to_owned(), number);
    let binary = MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(vec![0u8, 0xff, 0x10]))
        .build()
        .expect("binary");
    attrs.insert("probe-bytes".to_owned(), binary);
    for (k, v) in extras().into_iter().take(5) {
        attrs.insert(k, text(&v));
    }
    sqs::send(&client, &inbox, "{}", attrs).await;
    let got = rabbit.get(&eu, Duration::from_secs(20)).await.expect("routed to orders.eu");
    let headers = got.delivery.properties.headers().as_ref().expect("headers").inner();
    assert_eq!(headers.get("gobridge.subject"), Some(&AMQPValue::LongString("probe.subject".into())));
    assert_eq!(headers.get("probe-int"), Some(&AMQPValue::LongString("4242".into())));
    assert!(headers.contains_key("probe-bytes"));
    let probes = headers.keys().filter(|k| k.as_str().starts_with("probe-")).count();
    assert_eq!(probes, 8, "text, int, bytes and five extras: every one the report promised");
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&eu).await;
    rabbit.delete_exchange(&exchange).await;
}

/// One transport's end of a pair in the matrix test: its config section,
/// and how the test sends the probe into it or reads what came out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mqtt,
    Amqp091,
    Amqp10,
    Sqs,
}

/// Where one end of a pair lives (names unique to the run).
struct End {
    kind: Kind,
    /// MQTT topic base, AMQP queue, or SQS queue name.
    name: String,
    /// The SQS queue URL.
    url: String,
}

impl End {
    async fn new(kind: Kind, rabbit: &Rabbit, sqs_client: &aws_sdk_sqs::Client) -> Self {
        match kind {
            Kind::Mqtt => End { kind, name: unique("matrix/t"), url: String::new() },
            Kind::Amqp091 | Kind::Amqp10 => {
                let name = unique("matrix-q");
                rabbit.declare_queue(&name).await;
                End { kind, name, url: String::new() }
            }
            Kind::Sqs => {
                let (name, url) = create_queue(sqs_client, "matrix", false).await;
                End { kind, name, url }
            }
        }
    }

    fn receiver(&self) -> String {
        match self.kind {
            Kind::Mqtt => format!(
                "type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{}/#\"]",
                broker_url(),
                unique("matrix-in"),
                self.name
            ),
            Kind::Amqp091 => format!(
                "type = \"amqp091\"\nurl = \"amqp://guest:guest@127.0.0.1:5672/%2f\"\nqueue = \"{}\"",
                self.name
            ),
            Kind::Amqp10 => format!("type = \"amqp10\"\nurl = \"{URL10}\"\naddress = \"/amq/queue/{}\"", self.name),
            Kind::Sqs => {
                format!("type = \"sqs\"\nqueue_name = \"{}\"\nendpoint_url = \"{}\"", self.name, sqs::endpoint())
            }
        }
    }

    /// The sender section and the binding's address.
    fn sender(&self) -> (String, String) {
        match self.kind {
            Kind::Mqtt => (
                format!("type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"", broker_url(), unique("matrix-out")),
                format!("{}/out", self.name),
            ),
            // The default exchange routes by queue name.
            Kind::Amqp091 => {
                ("type = \"amqp091\"\nurl = \"amqp://guest:guest@127.0.0.1:5672/%2f\"".into(), self.name.clone())
            }
            Kind::Amqp10 => {
                (format!("type = \"amqp10\"\nurl = \"{URL10}\"\naddress = \"/amq/queue/{}\"", self.name), String::new())
            }
            Kind::Sqs => (
                format!("type = \"sqs\"\nqueue_name = \"{}\"\nendpoint_url = \"{}\"", self.name, sqs::endpoint()),
                String::new(),
            ),
        }
    }

    /// Sends the report's identity, a text header and (where the transport
    /// has typed headers) an integer one.
    /// An MQTT publisher comes back to be kept until the probe arrived:
    /// dropping it at once could drop the publish still in its queue.
    async fn send_probe(&self, rabbit: &Rabbit, sqs_client: &aws_sdk_sqs::Client) -> Option<TestMqtt> {
        match self.kind {
            Kind::Mqtt => {
                let publisher = TestMqtt::connect(&broker_url()).await;
                let user = [("mqtt.message-id", "probe-id-7f3a"), ("probe-text", "probe-text-7f3a")];
                publisher.publish_with(&format!("{}/probe", self.name), "{}", &user).await;
                return Some(publisher);
            }
            Kind::Amqp091 => {
                let mut headers = FieldTable::default();
                headers.insert("probe-text".into(), AMQPValue::LongString("probe-text-7f3a".into()));
                headers.insert("probe-int".into(), AMQPValue::LongLongInt(4242));
                let properties =
                    BasicProperties::default().with_message_id("probe-id-7f3a".into()).with_headers(headers);
                rabbit.publish("", &self.name, b"{}", properties).await;
            }
            Kind::Amqp10 => {
                use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, MessageId, Properties};
                let message = Message::builder()
                    .properties(Properties {
                        message_id: Some(MessageId::String("probe-id-7f3a".into())),
                        ..Default::default()
                    })
                    .application_properties(
                        ApplicationProperties::builder()
                            .insert("probe-text", SimpleValue::String("probe-text-7f3a".into()))
                            .insert("probe-int", SimpleValue::Long(4242))
                            .build(),
                    )
                    .data(b"{}".to_vec())
                    .build();
                let mut client = Amqp10Client::connect(URL10).await;
                client.send(&format!("/amq/queue/{}", self.name), message).await;
                client.close().await;
            }
            Kind::Sqs => {
                let mut attrs = HashMap::new();
                attrs.insert("probe-text".to_owned(), text("probe-text-7f3a"));
                let number =
                    MessageAttributeValue::builder().data_type("Number").string_value("4242").build().expect("number");
                attrs.insert("probe-int".to_owned(), number);
                let sent = sqs_client
                    .send_message()
                    .queue_url(&self.url)
                    .message_body("{}")
                    .set_message_attributes(Some(attrs))
                    .send()
                    .await
                    .expect("send");
                // SQS chooses the MessageId; the identity check follows it.
                drop(sent);
            }
        }
        None
    }

    /// What arrived, as JSON with the names of the report's views.
    async fn receive(
        &self,
        sub: &mut Option<TestMqtt>,
        rabbit: &Rabbit,
        sqs_client: &aws_sdk_sqs::Client,
    ) -> serde_json::Value {
        use serde_json::json;
        let wait = Duration::from_secs(20);
        match self.kind {
            Kind::Mqtt => {
                let p = sub.as_mut().expect("subscribed").next(wait).await.expect("the probe arrived over MQTT");
                let props = p.properties.clone().unwrap_or_default();
                let user: serde_json::Map<String, serde_json::Value> =
                    props.user_properties.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                json!({ "user_properties": user, "properties": {
                    "correlation_data": props.correlation_data.map(|c| String::from_utf8_lossy(&c).into_owned()),
                    "content_type": props.content_type,
                    "response_topic": props.response_topic,
                }})
            }
            Kind::Amqp091 => {
                let got = rabbit.get(&self.name, wait).await.expect("the probe arrived over AMQP 0-9-1");
                let p = &got.delivery.properties;
                let headers: serde_json::Map<String, serde_json::Value> = p
                    .headers()
                    .as_ref()
                    .map(|h| h.inner().iter().map(|(k, v)| (k.to_string(), json!(format!("{v:?}")))).collect())
                    .unwrap_or_default();
                json!({ "properties": { "message_id": p.message_id().as_ref().map(|s| s.to_string()) }, "headers": headers })
            }
            Kind::Amqp10 => {
                let mut client = Amqp10Client::connect(URL10).await;
                let got = client.receive(&format!("/amq/queue/{}", self.name), 1, wait).await;
                client.close().await;
                let m = got.first().expect("the probe arrived over AMQP 1.0");
                let id = m.properties.as_ref().and_then(|p| p.message_id.as_ref()).map(|id| format!("{id:?}"));
                let app: serde_json::Map<String, serde_json::Value> = m
                    .application_properties
                    .as_ref()
                    .map(|a| a.0.iter().map(|(k, v)| (k.clone(), json!(format!("{v:?}")))).collect())
                    .unwrap_or_default();
                json!({ "properties": { "message_id": id }, "application_properties": app })
            }
            Kind::Sqs => {
                let got = sqs::receive_first(sqs_client, &self.url, wait).await;
                let m = got.first().expect("the probe arrived in SQS");
                let attrs: serde_json::Map<String, serde_json::Value> = m
                    .message_attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.clone(), json!({ "type": v.data_type(), "value": v.string_value() })))
                            .collect()
                    })
                    .unwrap_or_default();
                json!({ "message_attributes": attrs })
            }
        }
    }
}

/// The report's line for a feature: `Some(paths)` when it says ok, `None`
/// when it says LOST.
fn reported(report: &str, feature: &str) -> Option<Vec<String>> {
    for line in report.lines() {
        if let Some(rest) = line.strip_prefix(&format!("  ok    {feature} -> ")) {
            return Some(rest.split(", ").map(|p| p.split(" = ").next().unwrap_or(p).to_owned()).collect());
        }
        if line.starts_with(&format!("  LOST  {feature}")) {
            return None;
        }
    }
    panic!("no line for {feature:?} in\n{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_transport_pair_delivers_what_the_report_says() {
    sqs::require_aws_env();
    let rabbit = Rabbit::connect().await;
    let sqs_client = sqs::client();
    let kinds = [Kind::Mqtt, Kind::Amqp091, Kind::Amqp10, Kind::Sqs];
    for src in kinds {
        for dst in kinds {
            if src == dst {
                continue;
            }
            let (from, to) = (End::new(src, &rabbit, &sqs_client).await, End::new(dst, &rabbit, &sqs_client).await);
            let (sender, address) = to.sender();
            let ws = Workspace::with_plugins(&[]);
            ws.config(&format!(
                "[receivers.in]\n{}\n\n[senders.out]\n{sender}\n\n[[routes]]\nid = \"r\"\nreceiver = \"in\"\n\n[[routes.bindings]]\nsender = \"out\"\naddress = \"{address}\"\n",
                from.receiver()
            ));
            let report = explain(&ws);
            let (identity, typed) = match src {
                Kind::Mqtt => ("identity (mqtt.message-id)", "user property"),
                Kind::Amqp091 => ("identity (message_id)", "integer header"),
                Kind::Amqp10 => ("identity (message-id)", "integer application property"),
                Kind::Sqs => ("identity (MessageId)", "Number attribute"),
            };
            let identity_at = reported(&report, identity);
            let typed_at = reported(&report, typed);

            let daemon = Daemon::start(&ws, 2);
            if src == Kind::Amqp091 || src == Kind::Amqp10 {
                rabbit.wait_for_consumer(&from.name, Duration::from_secs(20)).await;
            }
            let mut sub = None;
            if dst == Kind::Mqtt {
                let mut s = TestMqtt::connect(&broker_url()).await;
                s.subscribe(&format!("{}/#", to.name)).await;
                sub = Some(s);
            }
            let publisher = from.send_probe(&rabbit, &sqs_client).await;
            let got = to.receive(&mut sub, &rabbit, &sqs_client).await;
            drop(publisher);
            let pair = format!("{src:?} -> {dst:?}");
            // SQS picks its own MessageId, so only the report's path is checked.
            for path in identity_at.unwrap_or_else(|| panic!("{pair}: the report lost the identity\n{report}")) {
                let found = lookup(&got, &path);
                assert!(
                    found.is_some_and(|v| !v.is_null()),
                    "{pair}: the report put the identity at {path}, the daemon did not: {got}\n{report}"
                );
            }
            let name = if src == Kind::Mqtt { "probe-text" } else { "probe-int" };
            let arrived = got.as_object().into_iter().flat_map(|o| o.values()).any(|v| v.get(name).is_some());
            match typed_at {
                Some(paths) => {
                    for path in paths {
                        assert!(
                            lookup(&got, &path).is_some(),
                            "{pair}: the report put {typed:?} at {path}, the daemon did not: {got}\n{report}"
                        );
                    }
                }
                None => assert!(
                    !arrived,
                    "{pair}: the report said {typed:?} is lost, the daemon delivered it: {got}\n{report}"
                ),
            }
            assert!(daemon.terminate().success(), "{pair}");
            for end in [&from, &to] {
                if matches!(end.kind, Kind::Amqp091 | Kind::Amqp10) {
                    rabbit.delete_queue(&end.name).await;
                }
            }
        }
    }
}

/// The report reads a payload in the JSON wire format: typed headers that
/// MQTT user properties cannot carry are lost without it and found inside
/// the payload with it.
#[test]
fn the_report_finds_headers_inside_a_wire_format_payload() {
    let ws = Workspace::with_plugins(&[]);
    let config = |wire: &str| {
        format!(
            "[receivers.in]\ntype = \"amqp091\"\nurl = \"amqp://127.0.0.1\"\nqueue = \"q\"\n\
             [senders.out]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1\"\n{wire}\n\
             [[routes]]\nid = \"r\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"out\"\naddress = \"t\"\n"
        )
    };
    ws.config(&config(""));
    let plain = explain(&ws);
    assert!(plain.contains("LOST  integer header"), "{plain}");
    ws.config(&config("wire_format = \"json\""));
    let wire = explain(&ws);
    for typed in ["integer", "float", "boolean", "time", "bytes"] {
        assert!(wire.contains(&format!("ok    {typed} header -> payload.headers.probe-")), "{typed}: {wire}");
    }
}
