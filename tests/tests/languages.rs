//! The Python (componentize-py) and JavaScript (componentize-js) example
//! processors through the real daemon: MQTT in, both processors in one
//! chain, AMQP 0-9-1 out, where typed headers survive.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::unique;
use lapin::types::AMQPValue;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn python_redacts_and_javascript_enriches_through_the_daemon() {
    let src = unique("lang/src");
    let queue = unique("lang-out");
    let rabbit = Rabbit::connect().await;
    rabbit.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&["redact", "enrich"]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{mqtt}"
client_id = "{client}"
topics = ["{src}/#"]

[senders.out]
type = "amqp091"
url = "{URL091}"

[[routes]]
id = "langs"
receiver = "in"

[[routes.processors]]
plugin = "redact"
config = {{ fields = ["card", "customer.email"], mask = "[redacted]" }}

[[routes.processors]]
plugin = "enrich"
config = {{ set = {{ region = "eu-west" }}, received_at = "enriched-at", size = "payload-bytes" }}

[[routes.bindings]]
sender = "out"
address = "{queue}"
"#,
        mqtt = broker_url(),
        client = unique("ferry-lang"),
    ));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    let input = r#"{"card":"4111 1111 1111 1111","customer":{"email":"a@example.com","name":"Ann"},"total":12}"#;
    publisher.publish_with(&format!("{src}/order"), input, &[]).await;
    publisher.publish_with(&format!("{src}/order"), "not json", &[]).await;

    let got = rabbit.get(&queue, WAIT).await.expect("the processed message arrives");
    let body: serde_json::Value = serde_json::from_slice(&got.delivery.data).expect("JSON");
    assert_eq!(
        body,
        serde_json::json!({"card": "[redacted]", "customer": {"email": "[redacted]", "name": "Ann"}, "total": 12})
    );
    let headers = got.delivery.properties.headers().clone().expect("headers");
    let header = |name: &str| headers.inner().get(name).cloned();
    assert_eq!(header("redacted"), Some(AMQPValue::LongString("2".into())), "set by the Python processor");
    assert_eq!(header("region"), Some(AMQPValue::LongString("eu-west".into())), "set by the JavaScript processor");
    // enrich runs after redact: it sees the redacted payload's size.
    let size = match header("payload-bytes") {
        Some(AMQPValue::LongLongInt(n)) => n,
        other => panic!("payload-bytes: {other:?}"),
    };
    assert_eq!(size, i64::try_from(got.delivery.data.len()).expect("size"));
    assert!(matches!(header("enriched-at"), Some(AMQPValue::Timestamp(t)) if t > 1_700_000_000), "a timestamp");

    daemon.wait_for_log("message dead-lettered", 1, WAIT);
    assert!(rabbit.get(&queue, Duration::from_millis(500)).await.is_none(), "the non-JSON message is not sent");
    assert_eq!(daemon.terminate().code(), Some(0));
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1);
    assert!(dead[0]["detail"].as_str().is_some_and(|d| d.contains("redact: payload is not JSON")), "{dead:?}");
    rabbit.delete_queue(&queue).await;
}
