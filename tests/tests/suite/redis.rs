//! Redis Streams (issue 37) through the real daemon, each test on a
//! private `redis-server` of its own (append-only, fsync always): MQTT
//! into a stream through a processor with the identity and headers
//! across; a stream into AMQP 0-9-1 and AMQP 0-9-1 into a stream, each
//! entry acknowledged only after delivery; a target outage that loses
//! nothing and acknowledges nothing meanwhile; an entry that keeps
//! failing reaching the dead-letter queue after the replay budget; two
//! instances sharing one group; kill -9 during 5,000 entries in both
//! delivery modes; a server restart; `--explain` and `--connect`.

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, topic};
use ferry_tests::rabbit::{PrivateRabbit, Rabbit, URL091};
use ferry_tests::redis::{PrivateRedis, Redis};
use ferry_tests::webhook::{WebhookTarget, answer};
use ferry_tests::{eventually_async, unique};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_into_a_stream_keeps_identity_and_headers_through_a_processor() {
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let src = unique("redis/src");
    let ws = Workspace::with_plugins(&["filter"]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{mqtt}"
topics = ["{src}/#"]
client_id = "{cid}"

[senders.out]
type = "redis_streams"
url = "{url}"
maxlen = 1000

[[routes]]
id = "to-redis"
receiver = "in"

[[routes.processors]]
plugin = "filter"
config = {{ when = [{{ header = "kind", op = "eq", value = "temp" }}] }}

[[routes.bindings]]
sender = "out"
address = "readings:{{room}}"
"#,
        mqtt = broker_url(),
        cid = unique("redis-in"),
        url = server.url(),
    ));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher
        .publish_with(
            &format!("{src}/a"),
            "21.5",
            &[("mqtt.message-id", "m-1"), ("kind", "temp"), ("room", "kitchen"), ("x-bridge.tenant-id", "forged")],
        )
        .await;
    publisher.publish_with(&format!("{src}/a"), "40", &[("mqtt.message-id", "m-2"), ("kind", "humidity")]).await;
    // A header value that would reach another key is refused, not routed.
    publisher.publish_with(&format!("{src}/a"), "9", &[("kind", "temp"), ("room", "x:admin")]).await;
    daemon.wait_for_total("ferry_messages_dropped_total", "reason=\"filtered\"", 1.0, WAIT);
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "route=\"to-redis\"", 1.0, WAIT);
    eventually_async("the reading in its room's stream", || async {
        let n = redis.len("readings:kitchen").await;
        if n == 1 { Ok(n) } else { Err(n) }
    })
    .await;
    let got = redis.read_all("readings:kitchen").await;
    let e = &got[0];
    assert_eq!(e.field("payload").as_deref(), Some("21.5"));
    assert_eq!(e.field("message_id").as_deref(), Some("m-1"), "the identity is a field");
    assert_eq!(e.field("kind").as_deref(), Some("temp"));
    assert_eq!(e.field("mqtt.topic"), Some(format!("{src}/a")));
    assert!(e.field("x-bridge.tenant-id").is_none(), "an untrusted route strips a forged reserved header: {e:?}");
    assert!(e.field("x-bridge.route-id").is_none(), "bookkeeping stays inside: {e:?}");
    assert_eq!(redis.len("readings:x").await, 0);
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp091_and_a_stream_cross_both_ways_each_entry_acknowledged_after_delivery() {
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let (orders, audit) = (unique("orders"), unique("audit"));
    let rabbit = Rabbit::connect().await;
    let (out_queue, in_queue) = (unique("redis-out"), unique("redis-in"));
    rabbit.declare_queue(&out_queue).await;
    rabbit.declare_queue(&in_queue).await;
    let ws = Workspace::with_plugins(&["filter"]);
    ws.config(&format!(
        r#"
[receivers.stream]
type = "redis_streams"
url = "{url}"
stream = "{orders}"
group = "bridge"

[receivers.queue]
type = "amqp091"
url = "{URL091}"
queue = "{in_queue}"

[senders.amqp]
type = "amqp091"
url = "{URL091}"

[senders.stream]
type = "redis_streams"
url = "{url}"
stream = "{audit}"

[[routes]]
id = "from-redis"
receiver = "stream"

[[routes.processors]]
plugin = "filter"
config = {{ when = [{{ header = "kind", op = "eq", value = "temp" }}] }}

[[routes.bindings]]
sender = "amqp"
address = "{out_queue}"

[[routes]]
id = "into-redis"
receiver = "queue"

[[routes.bindings]]
sender = "stream"
"#,
        url = server.url(),
    ));
    let daemon = Daemon::start(&ws, 4);
    redis
        .add(
            &orders,
            &[
                ("message_id", b"o-1"),
                ("payload", b"first"),
                ("kind", b"temp"),
                ("tag", b"a"),
                ("tag", b"b"),
                ("x-bridge.tenant-id", b"forged"),
                ("redis.stream", b"forged"),
            ],
        )
        .await;
    redis.add(&orders, &[("message_id", b"o-2"), ("payload", b"noise"), ("kind", b"noise")]).await;
    let third = redis.add(&orders, &[("payload", b"third"), ("kind", b"temp")]).await;

    let got = rabbit.collect(&out_queue, 2, WAIT).await;
    assert_eq!(got.len(), 2, "the noise is filtered out");
    let first = got.iter().find(|d| d.data == b"first").expect("o-1 arrived");
    let p = &first.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("o-1"));
    let headers = p.headers().as_ref().expect("headers").inner();
    assert_eq!(headers.get("kind"), Some(&AMQPValue::LongString("temp".into())));
    assert_eq!(headers.get("tag"), Some(&AMQPValue::LongString("a, b".into())), "a repeated field joined");
    assert_eq!(headers.get("redis.stream"), Some(&AMQPValue::LongString(orders.clone().into())));
    assert!(!headers.contains_key("x-bridge.tenant-id"), "a forged reserved header is stripped: {headers:?}");
    assert!(!headers.contains_key("payload") && !headers.contains_key("message_id"), "{headers:?}");
    let last = got.iter().find(|d| d.data == b"third").expect("the third arrived");
    let last_id = last.properties.message_id().as_ref().map(|s| s.as_str().to_owned());
    assert_eq!(last_id, Some(format!("{orders}:{third}")), "no identity field: the stream's own name for it");
    redis.wait_drained(&orders, "bridge", "every entry acknowledged").await;

    // The other way: an AMQP message into the audit stream.
    let mut table = FieldTable::default();
    table.insert("region".into(), AMQPValue::LongString("eu".into()));
    let properties = BasicProperties::default()
        .with_message_id("a-1".into())
        .with_content_type("application/json".into())
        .with_headers(table);
    rabbit.publish("", &in_queue, b"{\"n\":1}", properties).await;
    eventually_async("the AMQP message in the audit stream", || async {
        let n = redis.len(&audit).await;
        if n == 1 { Ok(n) } else { Err(n) }
    })
    .await;
    let entry = &redis.read_all(&audit).await[0];
    assert_eq!(entry.field("payload").as_deref(), Some("{\"n\":1}"));
    assert_eq!(entry.field("message_id").as_deref(), Some("a-1"));
    assert_eq!(entry.field("content_type").as_deref(), Some("application/json"));
    assert_eq!(entry.field("region").as_deref(), Some("eu"));
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&out_queue).await;
    rabbit.delete_queue(&in_queue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn while_the_target_is_down_nothing_is_acknowledged_and_nothing_is_lost() {
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let stream = unique("outage");
    let mut target = PrivateRabbit::start().await;
    let queue = unique("redis-outage");
    Rabbit::connect_to(&target.url091()).await.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "redis_streams"
url = "{url}"
stream = "{stream}"
group = "bridge"

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
        redis.add_message(&stream, &format!("m-{i}"), &format!("m-{i}"), &[]).await;
    }
    // The target is unavailable: the entries in hand are held (claimed
    // again before they idle out), no replay is spent, and none is
    // acknowledged meanwhile.
    daemon.wait_for_total("ferry_send_unavailable_total", "route=\"outage\"", 2.0, WAIT);
    let (undelivered, pending) = redis.backlog(&stream, "bridge").await;
    assert!(undelivered || pending == 20, "every entry still at the source: pending {pending}");

    target.restart().await;
    let got = Rabbit::connect_to(&target.url091()).await.collect(&queue, 20, WAIT).await;
    let seen: BTreeSet<String> = got.iter().map(|d| String::from_utf8_lossy(&d.data).into_owned()).collect();
    assert_eq!(seen.len(), 20, "each of the 20: {seen:?}");
    redis.wait_drained(&stream, "bridge", "nothing left at the source").await;
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_that_keeps_failing_is_dead_lettered_after_the_replay_budget_and_acknowledged() {
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let stream = unique("poison");
    // The target fails every message for itself: a 500 spends the budget
    // (a target that is down would only delay it).
    let target = WebhookTarget::start().await;
    target.answer_all(answer(500, None));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "redis_streams"
url = "{url}"
stream = "{stream}"
group = "bridge"
max_payload_bytes = 64

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
    redis.add_message(&stream, "p-1", "never lands", &[]).await;
    // Too large to take: acknowledged at once and counted.
    redis.add_message(&stream, "p-2", &"x".repeat(100), &[]).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "route=\"poison\"", 1.0, WAIT);
    daemon.wait_for_total("ferry_ingress_rejected_total", "reason=\"too_large\"", 1.0, WAIT);
    redis.wait_drained(&stream, "bridge", "both entries to leave the group").await;
    assert!(daemon.terminate().success());
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "replay_exhausted", "{dead:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_in_one_group_share_the_entries() {
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let stream = unique("shared");
    let out = unique("redis/shared");
    let config = format!(
        r#"
[receivers.in]
type = "redis_streams"
url = "{url}"
stream = "{stream}"
group = "workers"

[senders.out]
type = "mqtt"
url = "{mqtt}"

[[routes]]
id = "shared"
receiver = "in"
max_in_flight = 4

[[routes.bindings]]
sender = "out"
address = "{out}/{{redis.id}}"
"#,
        url = server.url(),
        mqtt = broker_url(),
    );
    let (a, b) = (Workspace::with_plugins(&[]), Workspace::with_plugins(&[]));
    a.config(&config.replace("[receivers.in]", "[instance]\nid = \"a\"\n\n[receivers.in]"));
    b.config(&config.replace("[receivers.in]", "[instance]\nid = \"b\"\n\n[receivers.in]"));
    let first = Daemon::start(&a, 2);
    let second = Daemon::start(&b, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{out}/#")).await;
    for i in 0..200 {
        redis.add(&stream, &[("payload", b"x"), ("message_id", format!("m-{i}").as_bytes())]).await;
    }
    let seen: BTreeSet<String> = sub.collect(200).await.iter().map(topic).collect();
    assert_eq!(seen.len(), 200, "200 different messages");
    assert!(sub.drain(ferry_tests::QUIET).await.is_empty(), "a message arrived twice");
    let acked = |d: &Daemon| {
        let m = ferry_tests::http::metrics(&d.admin());
        ferry_tests::http::sample(&m, "ferry_messages_acked_total", "route=\"shared\"").unwrap_or(0.0)
    };
    let (x, y) = (acked(&first), acked(&second));
    assert_eq!(x + y, 200.0);
    assert!(x > 0.0 && y > 0.0, "both instances took entries: {x} and {y}");
    let consumers: BTreeSet<String> = redis.consumers(&stream, "workers").await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(consumers, BTreeSet::from(["a".to_owned(), "b".to_owned()]), "one consumer per instance id");
    redis.wait_drained(&stream, "workers", "nothing left in the group").await;
    assert!(first.terminate().success());
    assert!(second.terminate().success());
}

/// `kill -9` of ferry while it relays 5,000 entries from one stream to
/// another, in each delivery mode: after a restart (the same instance id,
/// so the same consumer) what the killed one held is claimed again, every
/// message is in the target stream (Redis keeps no identity, so what was
/// in flight may be there twice: counted and reported), and the group has
/// nothing left.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_while_relaying_loses_nothing_in_either_delivery_mode() {
    const N: usize = 5_000;
    for mode in ["direct_hold", "shared_outbox"] {
        let server = PrivateRedis::start().await;
        let redis = Redis::connect(&server.url()).await;
        let (from, to) = (unique("from"), unique("to"));
        let ws = Workspace::with_plugins(&[]);
        ws.config(&format!(
            r#"
[instance]
id = "relay-1"

[receivers.in]
type = "redis_streams"
url = "{url}"
stream = "{from}"
group = "relay"
# What the killed instance held is claimed again after this.
claim_idle_ms = 2000

[senders.out]
type = "redis_streams"
url = "{url}"
stream = "{to}"

[[routes]]
id = "relay"
receiver = "in"
delivery_mode = "{mode}"
max_in_flight = 64

[[routes.bindings]]
sender = "out"
"#,
            url = server.url(),
        ));
        for i in 0..N {
            redis.add_message(&from, &format!("m-{i}"), &format!("m-{i}"), &[]).await;
        }
        let daemon = Daemon::start(&ws, 2);
        daemon.wait_for_total("ferry_messages_acked_total", "route=\"relay\"", 1_000.0, Duration::from_secs(60));
        daemon.kill();
        let again = Daemon::start(&ws, 2);
        eventually_async("every message in the target stream and none left in the group", || async {
            let ids: BTreeSet<String> =
                redis.read_all(&to).await.iter().filter_map(|e| e.field("message_id")).collect();
            let backlog = redis.backlog(&from, "relay").await;
            if ids.len() == N && backlog == (false, 0) { Ok(ids.len()) } else { Err((ids.len(), backlog)) }
        })
        .await;
        let entries = redis.read_all(&to).await;
        let ids: BTreeSet<String> = entries.iter().filter_map(|e| e.field("message_id")).collect();
        let expected: BTreeSet<String> = (0..N).map(|i| format!("m-{i}")).collect();
        assert_eq!(ids, expected, "{mode}: every message");
        eprintln!("{mode}: {} entries for {N} messages after the crash", entries.len());
        assert!(again.terminate().success());
    }
}

/// Redis is killed and started again (its append-only file fsynced on
/// every write) while ferry reads one stream into MQTT and writes MQTT
/// into another: both reconnect on their own and every message arrives.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_restart_loses_nothing_in_either_direction() {
    let mut server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let (from, to) = (unique("rfrom"), unique("rto"));
    let (src, out) = (unique("redis/restart-src"), unique("redis/restart-out"));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.rs]
type = "redis_streams"
url = "{url}"
stream = "{from}"
group = "bridge"
reconnect_max_ms = 1000
# What was read but not acknowledged before the kill is claimed after this.
claim_idle_ms = 2000

[receivers.mq]
type = "mqtt"
url = "{mqtt}"
topics = ["{src}/#"]
client_id = "{cid}"

[senders.mqtt]
type = "mqtt"
url = "{mqtt}"

[senders.rs]
type = "redis_streams"
url = "{url}"
stream = "{to}"
reconnect_max_ms = 1000
timeout_ms = 2000

[[routes]]
id = "out-of-redis"
receiver = "rs"
backoff = {{ initial_ms = 50, max_ms = 500 }}
max_replay_attempts = 1000
[[routes.bindings]]
sender = "mqtt"
address = "{out}/{{redis.id}}"

[[routes]]
id = "into-redis"
receiver = "mq"
backoff = {{ initial_ms = 50, max_ms = 500 }}
max_replay_attempts = 1000
[[routes.bindings]]
sender = "rs"
"#,
        url = server.url(),
        mqtt = broker_url(),
        cid = unique("redis-restart"),
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
        redis.add_message(&from, &format!("n-{i}"), "x", &[]).await;
        mqtt_publish(i).await;
    }
    server.stop();
    // Into a server that is down: held and retried by ferry.
    for i in 50..100 {
        mqtt_publish(i).await;
    }
    server.restart().await;
    let again = Redis::connect(&server.url()).await;
    for i in 50..100 {
        let id = format!("n-{i}");
        let fields: [(&str, &[u8]); 2] = [("message_id", id.as_bytes()), ("payload", b"x")];
        eventually_async("the restarted server to take an entry", || again.try_add(&from, &fields)).await;
    }
    // At least once: an entry in flight at the kill may come twice.
    let mut arrived = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + ferry_tests::PATIENCE;
    while arrived.len() < 100 {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let p = sub.next(left).await.unwrap_or_else(|| panic!("{} of 100 arrived", arrived.len()));
        arrived.insert(topic(&p));
    }
    eventually_async("every MQTT message in the target stream", || async {
        let ids: BTreeSet<String> = again.read_all(&to).await.iter().filter_map(|e| e.field("message_id")).collect();
        if ids.len() == 100 { Ok(ids.len()) } else { Err(ids.len()) }
    })
    .await;
    again.wait_drained(&from, "bridge", "nothing left at the source").await;
    assert!(daemon.terminate().success());
}

/// `ferry validate --explain` for both directions: an entry's identity
/// and fields as an MQTT sender writes them, and an MQTT publish as a
/// Redis Streams sender writes it.
#[test]
fn the_report_shows_what_crosses_both_ways() {
    let ws = Workspace::with_plugins(&[]);
    ws.config(
        r#"
[receivers.rs]
type = "redis_streams"
url = "redis://127.0.0.1:6379"
stream = "s"
group = "g"

[receivers.mq]
type = "mqtt"
url = "mqtt://127.0.0.1"
topics = ["t/#"]

[senders.mqtt]
type = "mqtt"
url = "mqtt://127.0.0.1"

[senders.rs]
type = "redis_streams"
url = "redis://127.0.0.1:6379"
stream = "out"

[[routes]]
id = "from-redis"
receiver = "rs"
[[routes.bindings]]
sender = "mqtt"
address = "out"

[[routes]]
id = "to-redis"
receiver = "mq"
[[routes.bindings]]
sender = "rs"
"#,
    );
    let out = ws.ferry(&["validate", "--explain", "-c", "ferry.toml"]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |prefix: &str| report.lines().find(|l| l.starts_with(prefix)).map(str::to_owned);
    let identity = line("  ok    identity (id field) -> ").unwrap_or_else(|| panic!("{report}"));
    assert!(identity.contains("user_properties.mqtt.message-id"), "{report}");
    assert!(line("  ok    header -> ").is_some_and(|l| l.contains("probe-text")), "{report}");
    let to_redis = report.split("route to-redis").nth(1).unwrap_or_else(|| panic!("{report}"));
    assert!(to_redis.contains("fields.message_id"), "the MQTT identity becomes the id field: {report}");
    assert!(!report.contains("WARN"), "{report}");
}

/// `ferry validate --connect` reads the stream a receiver takes and the
/// key a sender writes, and fails a sender whose key is not a stream.
#[tokio::test(flavor = "multi_thread")]
async fn validate_connect_checks_streams_and_keys() {
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let stream = unique("probed");
    redis.add_message(&stream, "m-1", "x", &[]).await;
    let not_a_stream = unique("plain");
    redis.set(&not_a_stream, "v").await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "redis_streams"
url = "{url}"
stream = "{stream}"
group = "g"

[senders.ok]
type = "redis_streams"
url = "{url}"
stream = "{stream}"

[senders.wrong]
type = "redis_streams"
url = "{url}"
stream = "{not_a_stream}"

[[routes]]
id = "r"
receiver = "in"
dispatch_mode = "fan_out"
[[routes.bindings]]
sender = "ok"
[[routes.bindings]]
sender = "wrong"
"#,
        url = server.url(),
    ));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("receivers.in (redis_streams): ok") && text.contains("holds 1 entries"), "{text}");
    assert!(text.contains("senders.ok (redis_streams): ok"), "{text}");
    assert!(text.contains("senders.wrong (redis_streams): FAILED") && text.contains("not a stream"), "{text}");
}
