//! NATS JetStream (issue 37) through the real daemon, each test on a
//! private `nats-server -js` of its own: MQTT into a stream with the
//! identity and headers across and ferry's own resends suppressed by the
//! stream; a stream into AMQP 0-9-1 through a processor, acknowledged
//! only after delivery; a target outage that loses nothing and
//! acknowledges nothing meanwhile (each failure a NAK with the route's
//! backoff); a message that keeps failing reaching
//! the dead-letter queue after the replay budget; two instances sharing
//! one durable consumer.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, topic};
use ferry_tests::nats::{Nats, OperatorMode, PrivateNats, header};
use ferry_tests::rabbit::{PrivateRabbit, Rabbit, URL091};
use ferry_tests::webhook::{WebhookTarget, answer};
use ferry_tests::{eventually_async, unique};
use lapin::types::AMQPValue;

const WAIT: Duration = Duration::from_secs(20);

/// A stream name of the test's own (letters, digits, `_`).
fn stream_name(prefix: &str) -> String {
    unique(prefix).replace('-', "_")
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_into_jetstream_keeps_identity_and_headers_and_the_stream_drops_resends() {
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("IN");
    nats.stream(&stream, &["bridged.>"]).await;
    let src = unique("nats/src");
    let ws = Workspace::with_plugins(&["filter"]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{mqtt}"
topics = ["{src}/#"]
client_id = "{cid}"

[senders.out]
type = "nats"
url = "{url}"

[[routes]]
id = "to-nats"
receiver = "in"

[[routes.processors]]
plugin = "filter"
config = {{ when = [{{ header = "kind", op = "eq", value = "temp" }}] }}

[[routes.bindings]]
sender = "out"
address = "bridged.{{room}}"
"#,
        mqtt = broker_url(),
        cid = unique("nats-in"),
        url = server.url(),
    ));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    let reading = [("mqtt.message-id", "m-1"), ("kind", "temp"), ("room", "kitchen")];
    publisher.publish_with(&format!("{src}/a"), "21.5", &reading).await;
    // The same message again: ferry sends it, the stream keeps one.
    publisher.publish_with(&format!("{src}/a"), "21.5", &reading).await;
    publisher.publish_with(&format!("{src}/a"), "40", &[("mqtt.message-id", "m-2"), ("kind", "humidity")]).await;
    daemon.wait_for_total("ferry_nats_duplicates_total", "sender=\"out\"", 1.0, WAIT);
    daemon.wait_for_total("ferry_messages_dropped_total", "reason=\"filtered\"", 1.0, WAIT);

    let got = nats.read_all(&stream).await;
    assert_eq!(got.len(), 1, "one message in the stream: {got:?}");
    let (subject, headers, payload) = &got[0];
    assert_eq!(subject, "bridged.kitchen");
    assert_eq!(payload, "21.5");
    assert_eq!(header(headers, "Nats-Msg-Id"), Some("m-1"), "the identity is the stream's message id");
    assert_eq!(header(headers, "kind"), Some("temp"));
    assert_eq!(header(headers, "mqtt.topic"), Some(format!("{src}/a").as_str()));
    assert!(header(headers, "x-bridge.route-id").is_none(), "bookkeeping stays inside: {headers:?}");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_into_amqp091_is_acknowledged_only_after_delivery() {
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("ORDERS");
    nats.stream(&stream, &["orders.>"]).await;
    let rabbit = Rabbit::connect().await;
    let queue = unique("nats-out");
    rabbit.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&["filter"]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{stream}"
consumer = "bridge"

[senders.out]
type = "amqp091"
url = "{URL091}"

[[routes]]
id = "from-nats"
receiver = "in"

[[routes.processors]]
plugin = "filter"
config = {{ when = [{{ header = "kind", op = "eq", value = "temp" }}] }}

[[routes.bindings]]
sender = "out"
address = "{queue}"
"#,
        url = server.url(),
    ));
    let daemon = Daemon::start(&ws, 2);
    nats.publish(
        "orders.eu",
        "o-1",
        &[("Nats-Msg-Id", "o-1"), ("kind", "temp"), ("tag", "a"), ("tag", "b"), ("x-bridge.tenant-id", "forged")],
    )
    .await;
    nats.publish("orders.eu", "o-2", &[("Nats-Msg-Id", "o-2"), ("kind", "noise")]).await;
    nats.publish("orders.us", "o-3", &[("kind", "temp"), ("Nats-Custom-Note", "steers nothing")]).await;

    let got = rabbit.collect(&queue, 2, WAIT).await;
    assert_eq!(got.len(), 2, "the noise is filtered out");
    let first = got.iter().find(|d| d.data == b"o-1").expect("o-1 arrived");
    let p = &first.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("o-1"));
    let headers = p.headers().as_ref().expect("headers").inner();
    assert_eq!(headers.get("kind"), Some(&AMQPValue::LongString("temp".into())));
    assert_eq!(headers.get("tag"), Some(&AMQPValue::LongString("a, b".into())), "a repeated header joined");
    assert_eq!(headers.get("nats.subject"), Some(&AMQPValue::LongString("orders.eu".into())));
    assert_eq!(headers.get("nats.stream"), Some(&AMQPValue::LongString(stream.clone().into())));
    assert!(
        !headers.contains_key("x-bridge.tenant-id"),
        "an untrusted route strips a forged reserved header: {headers:?}"
    );
    let third = got.iter().find(|d| d.data == b"o-3").expect("o-3 arrived");
    let third_id = third.properties.message_id().as_ref().map(|s| s.as_str().to_owned());
    assert_eq!(third_id, Some(format!("{stream}:3")), "no Nats-Msg-Id: the stream's own name for it");
    let third_headers = third.properties.headers().as_ref().expect("headers").inner();
    assert!(!third_headers.keys().any(|k| k.as_str().to_ascii_lowercase().starts_with("nats-")), "{third_headers:?}");

    nats.wait_drained(&stream, "bridge", "the consumer to have acknowledged all three").await;
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&queue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn while_the_target_is_down_nothing_is_acknowledged_and_nothing_is_lost() {
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("OUTAGE");
    nats.stream(&stream, &["outage.>"]).await;
    // A private RabbitMQ with a durable queue: what ferry sends once it is
    // back waits there for the test (an MQTT target would drop what came
    // before the test's subscription after its restart).
    let mut target = PrivateRabbit::start().await;
    let queue = unique("nats-outage");
    Rabbit::connect_to(&target.url091()).await.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{stream}"

[senders.out]
type = "amqp091"
url = "{target}"
reconnect_max_ms = 500

[[routes]]
id = "outage"
receiver = "in"
max_in_flight = 8
backoff = {{ initial_ms = 50, max_ms = 200 }}
max_replay_attempts = 1000

[[routes.bindings]]
sender = "out"
address = "{queue}"
"#,
        url = server.url(),
        target = target.url091(),
    ));
    let daemon = Daemon::start(&ws, 2);
    target.stop().await;
    for i in 0..20 {
        nats.publish(&format!("outage.m{i}"), &format!("m-{i}"), &[("Nats-Msg-Id", &format!("m-{i}"))]).await;
    }
    // The target is unavailable: the messages in hand are held (progress
    // acks), no replay is spent, and none is acknowledged meanwhile.
    daemon.wait_for_total("ferry_send_unavailable_total", "route=\"outage\"", 2.0, WAIT);
    let (pending, unacked) = nats.backlog(&stream, "ferry-in").await;
    assert_eq!(u64::try_from(unacked).unwrap_or(0) + pending, 20, "every message still at the source");

    target.restart().await;
    let got = Rabbit::connect_to(&target.url091()).await.collect(&queue, 20, WAIT).await;
    let seen: std::collections::BTreeSet<String> =
        got.iter().map(|d| String::from_utf8_lossy(&d.data).into_owned()).collect();
    assert_eq!(seen.len(), 20, "each of the 20: {seen:?}");
    nats.wait_drained(&stream, "ferry-in", "nothing left at the source").await;
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_that_keeps_failing_is_dead_lettered_after_the_replay_budget_and_leaves_the_stream() {
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("POISON");
    nats.stream(&stream, &["poison.>"]).await;
    // The target fails every message for itself: a 500 spends the budget
    // (a target that is down would only delay it).
    let target = WebhookTarget::start().await;
    target.answer_all(answer(500, None));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{stream}"

[senders.out]
type = "http"
url = "{hook}"

[[routes]]
id = "poison"
receiver = "in"
max_replay_attempts = 3
backoff = {{ initial_ms = 20, max_ms = 50 }}

[[routes.bindings]]
sender = "out"
"#,
        url = server.url(),
        hook = target.url("/hook"),
    ));
    let daemon = Daemon::start(&ws, 2);
    nats.publish("poison.a", "never lands", &[("Nats-Msg-Id", "p-1")]).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "route=\"poison\"", 1.0, WAIT);
    nats.wait_drained(&stream, "ferry-in", "the dead-lettered message to leave the consumer").await;
    assert!(daemon.terminate().success());
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "replay_exhausted", "{dead:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_on_one_durable_consumer_share_the_messages() {
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("SHARED");
    nats.stream(&stream, &["shared.>"]).await;
    let out = unique("nats/shared");
    let config = format!(
        r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{stream}"
consumer = "workers"

[senders.out]
type = "mqtt"
url = "{mqtt}"

[[routes]]
id = "shared"
receiver = "in"
max_in_flight = 4

[[routes.bindings]]
sender = "out"
address = "{out}/{{nats.subject}}"
"#,
        url = server.url(),
        mqtt = broker_url(),
    );
    // Both instances name one durable consumer: whichever starts first
    // creates it, the other finds it, and the server shares its messages.
    let (a, b) = (Workspace::with_plugins(&[]), Workspace::with_plugins(&[]));
    a.config(&config.replace("[receivers.in]", "[instance]\nid = \"a\"\n\n[receivers.in]"));
    b.config(&config.replace("[receivers.in]", "[instance]\nid = \"b\"\n\n[receivers.in]"));
    let first = Daemon::start(&a, 2);
    let second = Daemon::start(&b, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{out}/#")).await;
    for i in 0..200 {
        nats.publish(&format!("shared.m{i}"), &format!("m-{i}"), &[("Nats-Msg-Id", &format!("m-{i}"))]).await;
    }
    let seen: std::collections::BTreeSet<String> = sub.collect(200).await.iter().map(topic).collect();
    assert_eq!(seen.len(), 200, "200 different messages");
    assert!(sub.drain(ferry_tests::QUIET).await.is_empty(), "a message arrived twice");
    let acked = |d: &Daemon| {
        let m = ferry_tests::http::metrics(&d.admin());
        ferry_tests::http::sample(&m, "ferry_messages_acked_total", "route=\"shared\"").unwrap_or(0.0)
    };
    let (x, y) = (acked(&first), acked(&second));
    assert_eq!(x + y, 200.0);
    assert!(x > 0.0 && y > 0.0, "both instances took messages: {x} and {y}");
    assert!(first.terminate().success());
    assert!(second.terminate().success());
}

/// `kill -9` of ferry while it relays 5,000 messages from one stream to
/// another, in each delivery mode: after a restart every message is in
/// the target stream once (the resends of what was in flight are
/// acknowledged as duplicates by the stream, and counted), and the source
/// consumer has nothing left.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_while_relaying_loses_nothing_in_either_delivery_mode() {
    const N: usize = 5_000;
    for mode in ["direct_hold", "shared_outbox"] {
        let server = PrivateNats::start().await;
        let nats = Nats::connect(&server.url()).await;
        let (from, to) = (stream_name("FROM"), stream_name("TO"));
        nats.stream(&from, &["from.>"]).await;
        nats.stream(&to, &["to.>"]).await;
        let ws = Workspace::with_plugins(&[]);
        ws.config(&format!(
            r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{from}"
consumer = "relay"
# What the killed instance held comes back after this.
ack_wait_secs = 3

[senders.out]
type = "nats"
url = "{url}"

[[routes]]
id = "relay"
receiver = "in"
delivery_mode = "{mode}"
max_in_flight = 64

[[routes.bindings]]
sender = "out"
address = "to.relayed"
"#,
            url = server.url(),
        ));
        for i in 0..N {
            nats.publish(&format!("from.m{i}"), &format!("m-{i}"), &[("Nats-Msg-Id", &format!("m-{i}"))]).await;
        }
        let daemon = Daemon::start(&ws, 2);
        daemon.wait_for_total("ferry_messages_acked_total", "route=\"relay\"", 1_000.0, Duration::from_secs(60));
        daemon.kill();
        let again = Daemon::start(&ws, 2);
        eventually_async("every message in the target stream and none left at the source", || async {
            let (count, backlog) = (nats.count(&to).await, nats.backlog(&from, "relay").await);
            if count == N as u64 && backlog == (0, 0) { Ok(count) } else { Err((count, backlog)) }
        })
        .await;
        let ids: std::collections::BTreeSet<String> = nats
            .read_all(&to)
            .await
            .iter()
            .filter_map(|(_, headers, _)| header(headers, "Nats-Msg-Id").map(str::to_owned))
            .collect();
        let expected: std::collections::BTreeSet<String> = (0..N).map(|i| format!("m-{i}")).collect();
        assert_eq!(ids, expected, "{mode}: each message once");
        let m = ferry_tests::http::metrics(&again.admin());
        let resent = ferry_tests::http::sample(&m, "ferry_nats_duplicates_total", "sender=\"out\"").unwrap_or(0.0);
        eprintln!("{mode}: the stream dropped {resent} resends after the crash");
        assert!(again.terminate().success());
    }
}

/// `ferry validate --explain` for both directions: a JetStream message's
/// identity and headers as an MQTT sender writes them, an MQTT publish as
/// a NATS sender writes it, and the warning for a core NATS sender.
#[test]
fn the_report_shows_what_crosses_and_warns_of_core_nats() {
    let ws = Workspace::with_plugins(&[]);
    ws.config(
        r#"
[receivers.js]
type = "nats"
url = "nats://127.0.0.1:4222"
stream = "S"

[receivers.mq]
type = "mqtt"
url = "mqtt://127.0.0.1"
topics = ["t/#"]

[senders.mqtt]
type = "mqtt"
url = "mqtt://127.0.0.1"

[senders.core]
type = "nats"
url = "nats://127.0.0.1:4222"
jetstream = false

[[routes]]
id = "from-nats"
receiver = "js"
[[routes.bindings]]
sender = "mqtt"
address = "out"

[[routes]]
id = "to-core"
receiver = "mq"
[[routes.bindings]]
sender = "core"
address = "out.x"
"#,
    );
    let out = ws.ferry(&["validate", "--explain", "-c", "ferry.toml"]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |prefix: &str| report.lines().find(|l| l.starts_with(prefix)).map(str::to_owned);
    let identity = line("  ok    identity (Nats-Msg-Id) -> ").unwrap_or_else(|| panic!("{report}"));
    assert!(identity.contains("user_properties.mqtt.message-id"), "{report}");
    assert!(line("  ok    header -> ").is_some_and(|l| l.contains("probe-text")), "{report}");
    let to_core = report.split("route to-core").nth(1).unwrap_or_else(|| panic!("{report}"));
    assert!(to_core.contains("WARN  core NATS (jetstream = false)"), "{report}");
    assert!(to_core.contains("headers.Nats-Msg-Id"), "the MQTT identity becomes Nats-Msg-Id: {report}");
    let from_nats = report.split("route to-core").next().unwrap_or_default();
    assert!(!from_nats.contains("WARN"), "a JetStream receiver is not warned about: {report}");
}

/// `ferry validate --connect` finds the stream a receiver reads and the
/// stream a sender's subject lands in, and says which sender has none.
#[tokio::test(flavor = "multi_thread")]
async fn validate_connect_checks_streams_and_subjects() {
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("PROBED");
    nats.stream(&stream, &["in.>"]).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{stream}"

[senders.ok]
type = "nats"
url = "{url}"
subject = "in.x"

[senders.nowhere]
type = "nats"
url = "{url}"
subject = "nobody.listens"

[[routes]]
id = "r"
receiver = "in"
dispatch_mode = "fan_out"
[[routes.bindings]]
sender = "ok"
[[routes.bindings]]
sender = "nowhere"
"#,
        url = server.url(),
    ));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("receivers.in (nats): ok") && text.contains(&stream), "{text}");
    assert!(text.contains("senders.ok (nats): ok"), "{text}");
    assert!(text.contains("senders.nowhere (nats): FAILED") && text.contains("nobody.listens"), "{text}");
}

/// A JetStream server that speaks only TLS: the receiver verifies it with
/// the CA of its `tls` table (aws-lc-rs, the provider of every other TLS
/// client in the daemon) and carries the message on.
#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_reads_a_tls_only_server_verified_by_its_ca_file() {
    let certs = ferry_tests::tls::TestCerts::generate();
    let server = PrivateNats::start_with_tls(Some((certs.server_cert(), certs.server_key()))).await;
    let url = format!("tls://127.0.0.1:{}", server.port);
    let nats = Nats::connect_tls(&url, &certs.ca()).await;
    let stream = stream_name("SECURE");
    nats.stream(&stream, &["secure.>"]).await;
    let out = unique("nats/tls");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{stream}"
tls = {{ ca_file = "{ca}" }}

[senders.out]
type = "mqtt"
url = "{mqtt}"

[[routes]]
id = "tls"
receiver = "in"

[[routes.bindings]]
sender = "out"
address = "{out}/in"
"#,
        ca = certs.ca().display(),
        mqtt = broker_url(),
    ));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{out}/#")).await;
    nats.publish("secure.a", "sealed", &[("Nats-Msg-Id", "s-1")]).await;
    let got = sub.collect(1).await;
    assert_eq!(&got[0].payload[..], b"sealed");
    assert!(daemon.terminate().success());
}

/// The NATS server is killed and started again while ferry reads one
/// stream into MQTT and writes MQTT into another stream: both clients
/// reconnect on their own, and every message arrives (the target stream
/// holding each once).
#[tokio::test(flavor = "multi_thread")]
async fn a_server_restart_loses_nothing_in_either_direction() {
    let mut server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let (from, to) = (stream_name("RFROM"), stream_name("RTO"));
    nats.stream(&from, &["rfrom.>"]).await;
    nats.stream(&to, &["rto.>"]).await;
    let (src, out) = (unique("nats/restart-src"), unique("nats/restart-out"));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.js]
type = "nats"
url = "{url}"
stream = "{from}"
reconnect_max_ms = 1000
# What the server had handed out before the kill comes back after this.
ack_wait_secs = 3

[receivers.mq]
type = "mqtt"
url = "{mqtt}"
topics = ["{src}/#"]
client_id = "{cid}"

[senders.mqtt]
type = "mqtt"
url = "{mqtt}"

[senders.js]
type = "nats"
url = "{url}"
subject = "rto.in"
reconnect_max_ms = 1000

[[routes]]
id = "out-of-nats"
receiver = "js"
backoff = {{ initial_ms = 50, max_ms = 500 }}
max_replay_attempts = 1000
[[routes.bindings]]
sender = "mqtt"
address = "{out}/{{nats.subject}}"

[[routes]]
id = "into-nats"
receiver = "mq"
backoff = {{ initial_ms = 50, max_ms = 500 }}
max_replay_attempts = 1000
[[routes.bindings]]
sender = "js"
"#,
        url = server.url(),
        mqtt = broker_url(),
        cid = unique("nats-restart"),
    ));
    let daemon = Daemon::start(&ws, 4);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{out}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let mqtt_publish = |i: usize| {
        let (topic, id) = (format!("{src}/m"), format!("q-{i}"));
        let publisher = &publisher;
        async move { publisher.publish_with(&topic, "x", &[("mqtt.message-id", &id)]).await }
    };
    for i in 0..50 {
        nats.publish(&format!("rfrom.m{i}"), "x", &[("Nats-Msg-Id", &format!("n-{i}"))]).await;
        mqtt_publish(i).await;
    }
    server.stop();
    // Into a server that is down: held and retried by ferry.
    for i in 50..100 {
        mqtt_publish(i).await;
    }
    server.restart().await;
    let again = Nats::connect(&server.url()).await;
    for i in 50..100 {
        let (subject, id) = (format!("rfrom.m{i}"), format!("n-{i}"));
        let headers = [("Nats-Msg-Id", id.as_str())];
        eventually_async("the restarted server to take a publish", || again.try_publish(&subject, "x", &headers)).await;
    }
    // At least once: a message in flight at the kill may come twice.
    let mut arrived = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + ferry_tests::PATIENCE;
    while arrived.len() < 100 {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let p = sub.next(left).await.unwrap_or_else(|| panic!("{} of 100 arrived", arrived.len()));
        arrived.insert(topic(&p));
    }
    eventually_async("every MQTT message in the target stream once", || async {
        let count = again.count(&to).await;
        if count == 100 { Ok(count) } else { Err(count) }
    })
    .await;
    again.wait_drained(&from, "ferry-js", "nothing left at the source").await;
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_list_with_one_server_down_reaches_the_other_and_validate_reads_every_entry() {
    let mut down = PrivateNats::start().await;
    let up = PrivateNats::start().await;
    let nats = Nats::connect(&up.url()).await;
    let stream = stream_name("LISTED");
    nats.stream(&stream, &["listed.>"]).await;
    let down_url = down.url();
    down.stop();
    let dst = unique("nats/listed");
    let ws = Workspace::with_plugins(&[]);
    let config = |list: &str| {
        format!(
            r#"
[receivers.in]
type = "nats"
url = "{list}"
stream = "{stream}"

[senders.out]
type = "mqtt"
url = "{mqtt}"
client_id = "{client}"

[[routes]]
id = "listed"
receiver = "in"

[[routes.bindings]]
sender = "out"
address = "{dst}/out"
"#,
            mqtt = broker_url(),
            client = unique("ferry-listed"),
        )
    };
    // An entry the client cannot read is refused by validate, by name.
    ws.config(&config(&format!("{down_url},nats://u:secret@127.0.0.1:notaport")));
    let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("notaport") && !stderr.contains("secret"), "{stderr}");

    // The stopped server first in the list: the client reaches the other.
    ws.config(&config(&format!("{down_url}, {}", up.url())));
    assert!(ws.ferry(&["validate", "-c", "ferry.toml"]).status.success());
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    nats.publish("listed.a", "through the list", &[("Nats-Msg-Id", "l-1")]).await;
    let got = sub.next(WAIT).await.expect("bridged from the server that is up");
    assert_eq!(got.payload.as_ref(), b"through the list");
    assert!(daemon.terminate().success());
}

/// A receiver on a server that wants a token and a sender on one that
/// wants an NKey user, each secret read from a file: messages cross, and
/// `ferry render` prints neither secret. `validate --connect` with a
/// wrong token is told the server refused it, without the token.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_and_an_nkey_seed_authenticate_and_never_print() {
    let token = unique("token");
    let src = PrivateNats::start_with_config(&format!("authorization {{ token: \"{token}\" }}\n")).await;
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("a seed");
    let dst = PrivateNats::start_with_config(&format!(
        "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}\n",
        user.public_key()
    ))
    .await;
    let src_client = Nats::connect_with(&src.url(), async_nats::ConnectOptions::new().token(token.clone())).await;
    let dst_client = Nats::connect_with(&dst.url(), async_nats::ConnectOptions::new().nkey(seed.clone())).await;
    let (input, output) = (stream_name("AUTH_IN"), stream_name("AUTH_OUT"));
    src_client.stream(&input, &["in.>"]).await;
    dst_client.stream(&output, &["out.>"]).await;

    let ws = Workspace::with_plugins(&[]);
    std::fs::write(ws.path().join("token"), format!("{token}\n")).expect("token file");
    std::fs::write(ws.path().join("seed"), &seed).expect("seed file");
    let config = |token_file: &str| {
        format!(
            r#"
[receivers.in]
type = "nats"
url = "{src}"
stream = "{input}"
token = {{ file = "{dir}/{token_file}" }}

[senders.out]
type = "nats"
url = "{dst}"
subject = "out.x"
nkey_seed = {{ file = "{dir}/seed" }}

[[routes]]
id = "auth"
receiver = "in"
[[routes.bindings]]
sender = "out"
"#,
            src = src.url(),
            dst = dst.url(),
            dir = ws.path().display(),
        )
    };
    ws.config(&config("token"));
    let render = ws.ferry(&["render", "-c", "ferry.toml"]);
    let rendered = String::from_utf8_lossy(&render.stdout).into_owned();
    assert!(render.status.success(), "{rendered}");
    assert!(rendered.contains("nkey_seed") && rendered.contains("token"), "{rendered}");
    assert!(!rendered.contains(&token) && !rendered.contains(&seed), "render printed a secret:\n{rendered}");

    let daemon = Daemon::start(&ws, 2);
    for i in 0..3 {
        src_client.publish("in.x", &format!("m-{i}"), &[]).await;
    }
    let got = eventually_async("three messages in the NKey server's stream", || async {
        let all = dst_client.read_all(&output).await;
        if all.len() >= 3 { Ok(all) } else { Err(all.len()) }
    })
    .await;
    let mut bodies: Vec<String> = got.into_iter().map(|(_, _, body)| body).collect();
    bodies.sort();
    assert_eq!(bodies, ["m-0", "m-1", "m-2"]);
    assert!(daemon.terminate().success());

    std::fs::write(ws.path().join("wrong"), "not-the-token").expect("wrong token file");
    ws.config(&config("wrong"));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("receivers.in (nats): FAILED"), "{text}");
    assert!(text.to_lowercase().contains("authori"), "the server's refusal is named: {text}");
    assert!(text.contains("senders.out (nats): ok"), "{text}");
    assert!(!text.contains("not-the-token") && !text.contains(&seed), "{text}");
}

/// An operator-mode server (JWT accounts, the way production NATS is
/// usually run): the receiver and the sender authenticate with a
/// credentials file, messages cross, `ferry render` prints the file's path
/// and never the seed inside it; `validate --connect` with the credentials
/// of an account the operator does not know is told the server refused
/// them.
#[tokio::test(flavor = "multi_thread")]
async fn a_credentials_file_authenticates_on_an_operator_mode_server() {
    let mode = OperatorMode::new();
    let server = PrivateNats::start_with_config(&mode.server_config).await;
    let ws = Workspace::with_plugins(&[]);
    let creds = ws.path().join("user.creds");
    std::fs::write(&creds, &mode.creds).expect("creds file");
    let client = Nats::connect_with(
        &server.url(),
        async_nats::ConnectOptions::with_credentials(&mode.creds).expect("the creds file reads"),
    )
    .await;
    let (input, output) = (stream_name("CREDS_IN"), stream_name("CREDS_OUT"));
    client.stream(&input, &["in.>"]).await;
    client.stream(&output, &["out.>"]).await;
    let config = |file: &std::path::Path| {
        format!(
            r#"
[receivers.in]
type = "nats"
url = "{url}"
stream = "{input}"
credentials_file = "{file}"

[senders.out]
type = "nats"
url = "{url}"
subject = "out.x"
credentials_file = "{file}"

[[routes]]
id = "creds"
receiver = "in"
[[routes.bindings]]
sender = "out"
"#,
            url = server.url(),
            file = file.display(),
        )
    };
    ws.config(&config(&creds));
    let render = ws.ferry(&["render", "-c", "ferry.toml"]);
    let rendered = String::from_utf8_lossy(&render.stdout).into_owned();
    assert!(render.status.success() && rendered.contains("user.creds"), "{rendered}");
    assert!(!rendered.contains(&mode.seed), "render printed the seed:\n{rendered}");

    let daemon = Daemon::start(&ws, 2);
    for i in 0..3 {
        client.publish("in.x", &format!("c-{i}"), &[]).await;
    }
    let got = eventually_async("three messages in the output stream", || async {
        let all = client.read_all(&output).await;
        if all.len() >= 3 { Ok(all) } else { Err(all.len()) }
    })
    .await;
    let mut bodies: Vec<String> = got.into_iter().map(|(_, _, body)| body).collect();
    bodies.sort();
    assert_eq!(bodies, ["c-0", "c-1", "c-2"]);
    assert!(daemon.terminate().success());

    let stranger = ws.path().join("stranger.creds");
    std::fs::write(&stranger, OperatorMode::stranger()).expect("creds file");
    ws.config(&config(&stranger));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("receivers.in (nats): FAILED"), "{text}");
    assert!(text.to_lowercase().contains("authori"), "the server's refusal is named: {text}");
}

/// Several `filter_subjects` need nats-server 2.10: 2.9 (Debian's, which
/// CI runs) ignores the field and would hand the receiver every subject
/// of the stream. The receiver reads the consumer's filter back and
/// refuses one the server did not apply, and a consumer that exists with
/// another filter; one subject works on every server.
#[tokio::test(flavor = "multi_thread")]
async fn a_filter_the_server_did_not_apply_is_refused() {
    use ferry_transport_nats::config::NatsReceiverConfig;
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = stream_name("FILTERED");
    nats.stream(&stream, &["a.>", "b.>", "c.>"]).await;
    let version = nats.client.server_info().version;
    let config = |consumer: &str, filters: &[&str]| -> NatsReceiverConfig {
        toml::from_str(&format!(
            "url = \"{}\"\nstream = \"{stream}\"\nconsumer = \"{consumer}\"\nfilter_subjects = {filters:?}",
            server.url()
        ))
        .expect("config")
    };
    let one = ferry_transport_nats::receiver::consumer(&nats.js, "r", &config("one", &["a.>"])).await;
    assert!(one.is_ok(), "one filter subject on {version}: {:?}", one.err());
    let other = ferry_transport_nats::receiver::consumer(&nats.js, "r", &config("one", &["c.>"]))
        .await
        .expect_err("the consumer exists with another filter");
    assert!(!other.is_transient() && other.to_string().contains("another filter"), "{other}");

    let two = ferry_transport_nats::receiver::consumer(&nats.js, "r", &config("two", &["a.>", "b.>"])).await;
    if version.starts_with("2.9.") {
        let e = two.expect_err("2.9 ignores several filter subjects");
        assert!(!e.is_transient() && e.to_string().contains("2.10"), "{e}");
    } else {
        assert!(two.is_ok(), "several filter subjects on {version}: {:?}", two.err());
    }
}
