//! The Python (componentize-py) and JavaScript (componentize-js) example
//! processors through the real daemon: MQTT in, both processors in one
//! chain, AMQP 0-9-1 out, where typed headers survive. And the C example
//! (committed wit-bindgen c bindings, clang, wasi-libc) in a chain with a
//! Rust built-in.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, route_config, user_property};
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

    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, WAIT);
    assert!(rabbit.get(&queue, Duration::from_millis(500)).await.is_none(), "the non-JSON message is not sent");
    assert_eq!(daemon.terminate().code(), Some(0));
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1);
    assert!(dead[0]["detail"].as_str().is_some_and(|d| d.contains("redact: payload is not JSON")), "{dead:?}");
    rabbit.delete_queue(&queue).await;
}

/// The C example's committed bindings were generated from the contract as
/// it is now (`processors/c/size-guard/bindings/regenerate` keeps a copy of
/// the WIT it read).
#[test]
fn the_c_examples_bindings_match_the_contract() {
    let root = ferry_tests::repo_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert!(
        read("wit/plugin.wit") == read("processors/c/size-guard/bindings/plugin.wit"),
        "wit/plugin.wit changed since the C example's bindings were made: run processors/c/size-guard/bindings/regenerate"
    );
}

/// The C example, where `just plugins` could build it: it drops payloads
/// over `max_bytes` and stamps the size of the others as an integer header.
/// Where its tools could not be installed, the recipe left the reason in
/// `plugins/size-guard.skipped` and this test only reports it.
#[tokio::test(flavor = "multi_thread")]
async fn c_size_guard_through_the_daemon() {
    let skipped = ferry_tests::repo_root().join("plugins/size-guard.skipped");
    if let Ok(why) = std::fs::read_to_string(&skipped) {
        eprintln!("the C example was not built: {why}");
        return;
    }
    let (src, dst) = (unique("c/src"), unique("c/dst"));
    let ws = Workspace::with_plugins(&["size-guard", "filter"]);
    let processors = r#"
[[routes.processors]]
plugin = "size-guard"
config = { max_bytes = 8, header = "size" }

[[routes.processors]]
plugin = "filter"
config = { when = [{ header = "size", op = "gt", value = 2 }] }
"#;
    let url = broker_url();
    ws.config(&route_config(&url, &src, &url, &format!("{dst}/{{mqtt.topic}}"), processors, "", ""));
    let check = ws.ferry(&["plugins", "check", "plugins/size-guard.wasm"]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(said.contains("world ferry:plugin/processor@1.3.0"), "{said}");
    let valid = ws.ferry(&["validate", "-c", "ferry.toml"]);
    assert!(valid.status.success(), "{}", String::from_utf8_lossy(&valid.stderr));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&url).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&url).await;
    for body in ["ok", "fine", "far too large"] {
        publisher.publish_with(&format!("{src}/m"), body, &[]).await;
    }
    let got = sub.drain(Duration::from_secs(3)).await;
    let bodies: Vec<&[u8]> = got.iter().map(|p| &p.payload[..]).collect();
    // size-guard drops "far too large" and stamps the others' sizes as an
    // integer header, which the filter compares as a number: "ok" (2) is
    // filtered out, "fine" (4) passes. (The MQTT sender then leaves the
    // integer header out: MQTT user properties carry text only.)
    assert_eq!(bodies, [&b"fine"[..]], "{got:?}");
    assert_eq!(user_property(&got[0], "size"), None);
    assert!(daemon.terminate().success());

    ws.config(&route_config(
        &url,
        &src,
        &url,
        &dst,
        "[[routes.processors]]\nplugin = \"size-guard\"\nconfig = { colour = 1 }\n",
        "",
        "",
    ));
    let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && why.contains("unknown key `colour`"), "{why}");
}

/// The JavaScript transport component (processors/js/http-queue) on both
/// ends of a route, against the fake SimpleMQ (an HTTP polling queue):
/// what one queue holds arrives on the other, byte for byte, and leaves the
/// first; a message whose id would climb out of its URL is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_transport_receives_and_sends_through_the_daemon() {
    use base64::Engine as _;
    use ferry_tests::simplemq::FakeSimpleMq;

    let b64 = base64::engine::general_purpose::STANDARD;
    let smq = FakeSimpleMq::start(Duration::from_secs(5)).await;
    let (from, to) = (unique("js-from"), unique("js-to"));
    smq.create_queue(&from, "key");
    smq.create_queue(&to, "key");
    let ws = Workspace::with_plugins(&["http-queue"]);
    ws.config(&smq.http_queue_route("http-queue", &from, &to));
    let daemon = Daemon::start(&ws, 0);
    smq.wait_for_a_receive(&daemon).await;
    let climber = smq.put_with_id(&from, "..", &b64.encode("stays"));
    let bodies: Vec<Vec<u8>> = vec![b"plain".to_vec(), vec![0, 255, 16, 0], "ünïcode".as_bytes().to_vec()];
    for body in &bodies {
        smq.put(&from, &b64.encode(body));
    }
    ferry_tests::eventually("three messages on the other queue", || smq.messages(&to).len() >= 3).await;
    let mut got: Vec<Vec<u8>> = smq.messages(&to).iter().map(|m| b64.decode(&m.content).expect("base64")).collect();
    let mut want = bodies.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "byte for byte");
    ferry_tests::eventually("only the climber left on the first queue", || {
        smq.messages(&from).iter().map(|m| m.id.clone()).collect::<Vec<_>>() == [climber.clone()]
    })
    .await;
    assert!(daemon.terminate().success());
}
