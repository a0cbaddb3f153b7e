//! Distributed tracing through the daemon: one message crosses MQTT -> SQS
//! -> AMQP 0-9-1 over two routes while ferry exports spans over OTLP/HTTP
//! (protobuf) to a collector stand-in on loopback. Every span shares the
//! publisher's trace id, and the traceparent each hop sends is a descendant
//! of the one it received.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::otlp::{Collector, SpanRecord, Via};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::sqs::{self, create_queue};
use ferry_tests::unique;
use lapin::types::AMQPValue;

const WAIT: Duration = Duration::from_secs(20);

/// `00-<trace>-<span>-<flags>` split into (trace, span).
fn parse_traceparent(value: &str) -> (String, String) {
    let parts: Vec<_> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "not a traceparent: {value}");
    (parts[1].to_owned(), parts[2].to_owned())
}

fn header_text(headers: &lapin::types::FieldTable, name: &str) -> String {
    match headers.inner().get(name) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("header {name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_trace_follows_a_message_from_mqtt_through_sqs_to_amqp() {
    sqs::require_aws_env();
    let collector = Collector::start().await;
    let client = sqs::client();
    let (hop_name, _) = create_queue(&client, "trace-hop", false).await;
    let rabbit = Rabbit::connect().await;
    let out = unique("trace-out");
    rabbit.declare_queue(&out).await;
    let topic = unique("trace/in");
    let endpoint = sqs::endpoint();
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.http),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("FERRY_LOG", "info,ferry_core::route=debug"),
    ]);
    ws.config(&format!(
        r#"
[receivers.mqtt]
type = "mqtt"
url = "{mqtt}"
client_id = "{client_id}"
topics = ["{topic}"]

[senders.hop]
type = "sqs"
queue_name = "{hop_name}"
endpoint_url = "{endpoint}"

[receivers.hop]
type = "sqs"
queue_name = "{hop_name}"
endpoint_url = "{endpoint}"

[senders.rabbit]
type = "amqp091"
url = "{URL091}"

[[routes]]
id = "mqtt-to-sqs"
receiver = "mqtt"
[[routes.bindings]]
sender = "hop"

[[routes]]
id = "sqs-to-amqp"
receiver = "hop"
[[routes.bindings]]
sender = "rabbit"
address = "{out}"
"#,
        mqtt = broker_url(),
        client_id = unique("trace-in"),
    ));
    let daemon = Daemon::start(&ws, 3);
    daemon.wait_for_log("exporting traces over OTLP", 1, WAIT);

    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let publisher_span = &uuid::Uuid::new_v4().simple().to_string()[..16];
    let incoming = format!("00-{trace_id}-{publisher_span}-01");
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&topic, "{\"n\":1}", &[("traceparent", &incoming), ("tracestate", "ferrytest=1")]).await;

    let got = rabbit.get(&out, WAIT).await.expect("the message crossed both routes");
    let headers = got.delivery.properties.headers().as_ref().expect("headers");
    let (out_trace, out_parent) = parse_traceparent(&header_text(headers, "traceparent"));
    assert_eq!(out_trace, trace_id, "the trace id survives both hops");
    assert_ne!(out_parent, publisher_span, "each hop sends a span of its own");
    assert_eq!(header_text(headers, "tracestate"), "ferrytest=1");

    // The chain, walked back from the span the last hop sent as parent:
    // send (sqs-to-amqp) <- delivery (sqs-to-amqp) <- send (mqtt-to-sqs)
    // <- delivery (mqtt-to-sqs) <- the publisher's span.
    let expected = [
        ("ferry.send", "ferry.binding", "rabbit"),
        ("ferry.delivery", "ferry.route", "sqs-to-amqp"),
        ("ferry.send", "ferry.binding", "hop"),
        ("ferry.delivery", "ferry.route", "mqtt-to-sqs"),
    ];
    let started = Instant::now();
    let by_id = loop {
        let by_id: HashMap<String, SpanRecord> = collector
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id && s.via == Via::HttpProtobuf)
            .map(|s| (s.span_id.clone(), s))
            .collect();
        if by_id.len() >= expected.len() || started.elapsed() > WAIT {
            break by_id;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(by_id.len(), expected.len(), "spans of the trace: {by_id:#?}");
    let mut current = out_parent;
    for (name, key, value) in expected {
        let span = by_id.get(&current).unwrap_or_else(|| panic!("no span {current} exported: {by_id:#?}"));
        assert_eq!(span.name, name, "{span:?}");
        assert!(span.attributes.get(key).is_some_and(|v| v.contains(value)), "{key}={value} on {span:?}");
        current = span.parent_span_id.clone();
    }
    assert_eq!(current, publisher_span, "the first delivery span is a child of the publisher's");

    // Log lines inside a delivery carry its trace id.
    daemon.wait_for_line(&["settled", &format!("trace_id={trace_id}")], WAIT);
    assert!(daemon.count_log(&format!("trace_id={trace_id}")) >= 2, "{}", daemon.log_text());
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&out).await;
}
