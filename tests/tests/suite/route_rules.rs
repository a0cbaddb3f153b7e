//! The route does what its config says, through the real daemon (issue:
//! nothing lost, nothing ignored): a route verdict with two addresses
//! reaches both in both delivery modes; a redelivery after the send is
//! suppressed for the dedup window; empty MQTT correlation data is no
//! identity; trusted bridge headers cross and untrusted ones do not; a
//! processor granted `ordering_key` picks SQS FIFO groups; a ring of
//! trusted routes stops after `max_hops`; the circuit breaker opens on a
//! `shared_outbox` route; a DLQ replay goes through the binding's header
//! mapper and metrics; SQS MD5 mismatches back off and end in the DLQ; and
//! what a sender drops from a message is counted once, not per retry.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::{counter, sample, wait_for_sample};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, broker_url, route_config, topic, user_property};
use ferry_tests::sqs::{self, create_queue};
use ferry_tests::sqs_proxy::SqsProxy;
use ferry_tests::unique;
use rumqttc::v5::mqttbytes::v5::{Publish, PublishProperties};

const WAIT: Duration = Duration::from_secs(20);

/// Collects publishes until `n` arrived or `timeout` passed.
async fn collect(sub: &mut TestMqtt, n: usize, timeout: Duration) -> Vec<Publish> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match sub.next(left).await {
            Some(p) => got.push(p),
            None => break,
        }
    }
    got
}

/// A filter verdict naming two addresses delivers to both, in both modes,
/// for every one of many messages in flight at once (on `shared_outbox`
/// the second address used to be suppressed as a duplicate of the first).
#[tokio::test(flavor = "multi_thread")]
async fn a_route_verdict_with_two_addresses_reaches_both_in_both_modes() {
    const N: usize = 60;
    for mode in ["direct_hold", "shared_outbox"] {
        let (src, dst) = (unique("rr/src"), unique("rr/dst"));
        let ws = Workspace::with_plugins(&["filter"]);
        let filter = format!(
            "[[routes.processors]]\nplugin = \"filter\"\nconfig = {{ when = [{{ header = \"kind\", op = \"eq\", value = \"alert\" }}], action = \"route\", route = [\"{dst}/a\", \"{dst}/b\"] }}\n"
        );
        let extra = format!("delivery_mode = \"{mode}\"\nmax_in_flight = 32");
        ws.config(&route_config(&broker_url(), &src, &broker_url(), &format!("{dst}/default"), &filter, &extra, ""));
        let daemon = Daemon::start(&ws, 2);
        let mut sub = TestMqtt::connect(&broker_url()).await;
        sub.subscribe(&format!("{dst}/#")).await;
        let publisher = TestMqtt::connect(&broker_url()).await;
        for i in 0..N {
            let id = format!("m-{i}");
            publisher.publish_with(&format!("{src}/x"), &id, &[("kind", "alert"), ("mqtt.message-id", &id)]).await;
        }
        let got = collect(&mut sub, 2 * N, WAIT).await;
        let seen: BTreeSet<(String, String)> =
            got.iter().map(|p| (topic(p), String::from_utf8_lossy(&p.payload).into_owned())).collect();
        let want: BTreeSet<(String, String)> = (0..N)
            .flat_map(|i| [(format!("{dst}/a"), format!("m-{i}")), (format!("{dst}/b"), format!("m-{i}"))])
            .collect();
        assert_eq!(seen, want, "{mode}: every message reaches both addresses");
        assert_eq!(got.len(), 2 * N, "{mode}: once each");
        assert_eq!(daemon.terminate().code(), Some(0));
    }
}

/// A running one-route `shared_outbox` daemon, MQTT `<src>/#` to MQTT
/// `<dst>/out`, with an admin server, a subscriber on `<dst>/#` and a
/// publisher.
struct OutboxRoute {
    admin: String,
    src: String,
    daemon: Daemon,
    sub: TestMqtt,
    publisher: TestMqtt,
    _ws: Workspace,
}

async fn outbox_route(prefix: &str) -> OutboxRoute {
    let (src, dst) = (unique(&format!("{prefix}/src")), unique(&format!("{prefix}/dst")));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    let extra = "delivery_mode = \"shared_outbox\"";
    ws.config(&with_admin(
        &admin,
        route_config(&broker_url(), &src, &broker_url(), &format!("{dst}/out"), "", extra, ""),
    ));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    OutboxRoute { admin, src, daemon, sub, publisher, _ws: ws }
}

/// On `shared_outbox` a source redelivery after the send (same id) is
/// suppressed and counted for `dedup_window_secs`, not sent again.
#[tokio::test(flavor = "multi_thread")]
async fn a_redelivery_after_the_send_is_suppressed_within_the_dedup_window() {
    let OutboxRoute { admin, src, daemon, mut sub, publisher, _ws } = outbox_route("dw").await;
    publisher.publish_with(&format!("{src}/x"), "first", &[("mqtt.message-id", "same-id")]).await;
    let p = sub.next(WAIT).await.expect("the first copy is sent");
    assert_eq!(p.payload.as_ref(), b"first");
    wait_for_sample(&admin, "ferry_outbox_depth", "route=\"r1\"", 0.0, WAIT);

    publisher.publish_with(&format!("{src}/x"), "again", &[("mqtt.message-id", "same-id")]).await;
    wait_for_sample(&admin, "ferry_outbox_duplicate_suppressed_total", "route=\"r1\"", 1.0, WAIT);
    assert!(sub.next(Duration::from_secs(2)).await.is_none(), "the redelivery is not sent again");
    // Another id still goes through.
    publisher.publish_with(&format!("{src}/x"), "other", &[("mqtt.message-id", "other-id")]).await;
    assert_eq!(sub.next(WAIT).await.expect("a new id is sent").payload.as_ref(), b"other");
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// Zero-length MQTT correlation data is no identity: two such publishes
/// are two messages, not one id (`mqtt-bin:`) and a suppressed duplicate.
#[tokio::test(flavor = "multi_thread")]
async fn empty_correlation_data_is_no_identity() {
    let OutboxRoute { admin, src, daemon, mut sub, publisher, _ws } = outbox_route("cd").await;
    for body in ["one", "two", "three"] {
        let props = PublishProperties { correlation_data: Some(Bytes::new()), ..Default::default() };
        publisher.publish(&format!("{src}/x"), body, props).await;
    }
    let got = collect(&mut sub, 3, WAIT).await;
    let bodies: BTreeSet<String> = got.iter().map(|p| String::from_utf8_lossy(&p.payload).into_owned()).collect();
    assert_eq!(bodies, ["one", "two", "three"].map(String::from).into(), "all three are sent");
    for p in &got {
        let id = user_property(p, "mqtt.message-id").unwrap_or_default();
        assert!(!id.starts_with("mqtt-bin"), "a generated id, not one shared by every such publish: {id}");
    }
    assert_eq!(counter(&admin, "ferry_outbox_duplicate_suppressed_total", "route=\"r1\""), 0.0);
    assert_eq!(daemon.terminate().code(), Some(0));
}

const BRIDGE_HEADERS: [(&str, &str); 5] = [
    ("x-bridge.tenant-id", "acme"),
    ("x-bridge.ordering-key", "device-7"),
    ("x-bridge.dedup-id", "dedup-1"),
    ("x-bridge.idempotency-key", "idem-1"),
    ("x-bridge.causation-id", "cause-1"),
];

/// Two MQTT -> MQTT routes, one trusted: the adapters hand `x-bridge.*` to
/// the route and only the trusted route keeps them; there a
/// `x-bridge.dedup-id` is the identity of a message that brought none.
#[tokio::test(flavor = "multi_thread")]
async fn trusted_routes_keep_bridge_headers_and_untrusted_ones_strip_them() {
    let (trusted_src, plain_src, dst) = (unique("tb/trusted"), unique("tb/plain"), unique("tb/dst"));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.trusted]
type = "mqtt"
url = "{mqtt}"
client_id = "{c1}"
topics = ["{trusted_src}/#"]
[receivers.plain]
type = "mqtt"
url = "{mqtt}"
client_id = "{c2}"
topics = ["{plain_src}/#"]
[senders.out]
type = "mqtt"
url = "{mqtt}"
client_id = "{c3}"
[[routes]]
id = "trusted"
receiver = "trusted"
trust_bridge_headers = true
[[routes.bindings]]
sender = "out"
address = "{dst}/trusted"
[[routes]]
id = "plain"
receiver = "plain"
[[routes.bindings]]
sender = "out"
address = "{dst}/plain"
"#,
        mqtt = broker_url(),
        c1 = unique("ferry-t"),
        c2 = unique("ferry-p"),
        c3 = unique("ferry-o"),
    ));
    let daemon = Daemon::start(&ws, 3);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{trusted_src}/x"), "t", &BRIDGE_HEADERS).await;
    publisher.publish_with(&format!("{plain_src}/x"), "p", &BRIDGE_HEADERS).await;
    let got = collect(&mut sub, 2, WAIT).await;
    let by_topic: BTreeMap<String, &Publish> = got.iter().map(|p| (topic(p), p)).collect();
    let trusted = by_topic.get(&format!("{dst}/trusted")).expect("trusted copy");
    let plain = by_topic.get(&format!("{dst}/plain")).expect("plain copy");
    for (name, value) in BRIDGE_HEADERS {
        assert_eq!(user_property(trusted, name), Some(value), "trusted keeps {name}");
        assert_eq!(user_property(plain, name), None, "untrusted strips {name}");
    }
    assert_eq!(user_property(trusted, "x-bridge.forwarded-hop"), Some("1"), "the hop is counted");
    // The publish had no id of its own: the trusted dedup id became it.
    assert_eq!(user_property(trusted, "mqtt.message-id"), Some("dedup-1"));
    assert_ne!(user_property(plain, "mqtt.message-id"), Some("dedup-1"));
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// MQTT readings of two devices into an SQS FIFO queue: a transform granted
/// `ordering_key` sets `x-bridge.ordering-key` from the payload, so each
/// device is its own message group, in order; on the trusted route a
/// publisher's `x-bridge.dedup-id` becomes the FIFO deduplication id.
#[tokio::test(flavor = "multi_thread")]
async fn a_granted_processor_picks_the_fifo_group_and_a_trusted_dedup_id_reaches_sqs() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "rr-fifo", true).await;
    let src = unique("ff/src");
    let ws = Workspace::with_plugins(&["transform"]);
    let transform = r#"
[[routes.processors]]
plugin = "transform"
grants = { ordering_key = true }
config = { keep = true, fields = [], headers = [{ name = "x-bridge.ordering-key", from = "$.device" }] }
"#;
    ws.config(&sqs::mqtt_to_sqs_config(
        &broker_url(),
        &src,
        &url,
        "",
        &format!("trust_bridge_headers = true\nmax_in_flight = 1\n{transform}"),
        "",
    ));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..4 {
        for device in ["dev-1", "dev-2"] {
            let body = format!(r#"{{"device":"{device}","n":{i}}}"#);
            publisher
                .publish_with(&format!("{src}/{device}"), &body, &[("mqtt.message-id", &format!("{device}-{i}"))])
                .await;
        }
    }
    publisher
        .publish_with(
            &format!("{src}/dev-3"),
            r#"{"device":"dev-3","n":0}"#,
            &[("x-bridge.dedup-id", "bridge-dedup-9")],
        )
        .await;

    let mut groups: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut dedup_of_dev3 = None;
    for m in sqs::consume(&client, &url, 9, 40).await {
        let group = sqs::system_attribute(&m, "MessageGroupId");
        let doc: serde_json::Value = serde_json::from_str(m.body().unwrap_or("{}")).expect("json body");
        if group == "dev-3" {
            dedup_of_dev3 = Some(sqs::system_attribute(&m, "MessageDeduplicationId"));
        }
        groups.entry(group).or_default().push(doc["n"].as_i64().unwrap_or(-1));
    }
    assert_eq!(groups.get("dev-1"), Some(&vec![0, 1, 2, 3]), "{groups:?}");
    assert_eq!(groups.get("dev-2"), Some(&vec![0, 1, 2, 3]), "{groups:?}");
    assert!(!groups.contains_key("default"), "no message fell into the default group: {groups:?}");
    assert_eq!(dedup_of_dev3.as_deref(), Some("bridge-dedup-9"));
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// Two trusted routes feeding each other's topics on one broker: the
/// message goes round until it has crossed `max_hops` bridges, then it is
/// dropped and counted as `loop_detected`, not forwarded for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_ring_of_trusted_routes_stops_after_max_hops() {
    let (a, b) = (unique("ring/a"), unique("ring/b"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[admin]
listen = "{admin}"
[receivers.from-a]
type = "mqtt"
url = "{mqtt}"
client_id = "{c1}"
topics = ["{a}"]
[receivers.from-b]
type = "mqtt"
url = "{mqtt}"
client_id = "{c2}"
topics = ["{b}"]
[senders.out]
type = "mqtt"
url = "{mqtt}"
client_id = "{c3}"
[[routes]]
id = "a-to-b"
receiver = "from-a"
trust_bridge_headers = true
max_hops = 4
[[routes.bindings]]
sender = "out"
address = "{b}"
[[routes]]
id = "b-to-a"
receiver = "from-b"
trust_bridge_headers = true
max_hops = 4
[[routes.bindings]]
sender = "out"
address = "{a}"
"#,
        mqtt = broker_url(),
        c1 = unique("ferry-ra"),
        c2 = unique("ferry-rb"),
        c3 = unique("ferry-ro"),
    ));
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&a).await;
    sub.subscribe(&b).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&a, "round", &[("mqtt.message-id", "ring-1")]).await;

    let m = wait_for_sample(&admin, "ferry_messages_dropped_total", "reason=\"loop_detected\"", 1.0, WAIT);
    // a (published) -> b (hop 1) -> a (2) -> b (3) -> a (4); the fifth hop is refused.
    let got = sub.drain(Duration::from_secs(2)).await;
    let hops: Vec<Option<&str>> = got.iter().map(|p| user_property(p, "x-bridge.forwarded-hop")).collect();
    assert_eq!(hops, vec![None, Some("1"), Some("2"), Some("3"), Some("4")], "{m}");
    let sent: f64 = ["a-to-b", "b-to-a"]
        .iter()
        .map(|r| sample(&m, "ferry_messages_sent_total", &format!("route=\"{r}\"")).unwrap_or(0.0))
        .sum();
    assert_eq!(sent, 4.0, "{m}");
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// The circuit breaker on a `shared_outbox` route hears the drainer's real
/// send outcomes: with the target down it opens and holds new messages at
/// the source (it used to hear "delivered" at persist and never opened).
#[tokio::test(flavor = "multi_thread")]
async fn the_circuit_breaker_opens_on_a_shared_outbox_route() {
    let (src, dst) = (unique("cbo/src"), unique("cbo/dst"));
    let admin = ANY_PORT.to_owned();
    let mut target = PrivateMosquitto::start().await;
    let ws = Workspace::with_plugins(&["circuitbreaker"]);
    let breaker =
        "[[routes.processors]]\nplugin = \"circuitbreaker\"\nconfig = { failure_threshold = 2, open_ms = 60000 }\n";
    ws.config(&with_admin(
        &admin,
        route_config(
            &broker_url(),
            &src,
            &target.url(),
            &format!("{dst}/out"),
            breaker,
            "delivery_mode = \"shared_outbox\"",
            "",
        ),
    ));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    let mut sub = TestMqtt::connect(&target.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    publisher.publish_with(&format!("{src}/x"), "m0", &[("mqtt.message-id", "m0")]).await;
    assert!(sub.next(WAIT).await.is_some(), "m0 arrives while the breaker is closed");

    target.stop();
    publisher.publish_with(&format!("{src}/x"), "m1", &[("mqtt.message-id", "m1")]).await;
    daemon.wait_for_line(&["circuit route: open after 2 failed sends"], WAIT);
    publisher.publish_with(&format!("{src}/x"), "m2", &[("mqtt.message-id", "m2")]).await;
    wait_for_sample(
        &admin,
        "ferry_plugin_calls_total",
        "plugin=\"circuitbreaker\",route=\"r1\",outcome=\"retry\"",
        1.0,
        WAIT,
    );
    // m2 was held at the source, not persisted: only m1 waits in the outbox.
    assert_eq!(counter(&admin, "ferry_outbox_depth", "route=\"r1\""), 1.0);
    let _ = daemon.terminate();
}

/// `ferry dlq replay` sends through the binding: its header mapper runs on
/// the replayed copy and the send counts on the binding's metrics, with the
/// daemon running (through its admin server) and stopped.
#[tokio::test(flavor = "multi_thread")]
async fn a_dlq_replay_goes_through_the_bindings_header_mapper() {
    let (src, dst) = (unique("rp/src"), unique("rp/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["hostile", "header-map"]);
    let route = route_config(&broker_url(), &src, &broker_url(), &format!("{dst}/{{mqtt.topic}}"), "[[routes.processors]]\nplugin = \"hostile\"\n", "", "")
        .replace(
            &format!("address = \"{dst}/{{mqtt.topic}}\""),
            &format!(
                "address = \"{dst}/{{mqtt.topic}}\"\nheader_mapper = \"header-map\"\nheader_mapper_config = {{ set = {{ mapped = \"yes\" }} }}"
            ),
        );
    ws.config(&with_admin(&admin, route));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    for id in ["d-0", "d-1"] {
        publisher.publish_with(&format!("{src}/{id}"), id, &[("hostile", "reject"), ("mqtt.message-id", id)]).await;
    }
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 2.0, WAIT);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let entries = ws.dead_letters();
    let id_of = |m: &str| {
        entries.iter().find(|e| e["envelope"]["id"] == m).and_then(|e| e["id"].as_u64()).expect("entry").to_string()
    };

    let out = ws.ferry(&["dlq", "replay", "-c", "ferry.toml", &id_of("d-0")]);
    assert!(out.status.success(), "{out:?}");
    let p = sub.next(WAIT).await.expect("replayed by the running daemon");
    assert_eq!(user_property(&p, "mapped"), Some("yes"), "the header mapper ran on the replay");
    assert_eq!(user_property(&p, "x-bridge.causation-id"), Some("d-0"));
    assert_eq!(topic(&p), format!("{dst}/{src}/d-0"), "the address template is the binding's");
    wait_for_sample(&admin, "ferry_messages_sent_total", "route=\"r1\",binding=\"out\"", 1.0, WAIT);
    assert!(daemon.terminate().success());

    let out = ws.ferry(&["dlq", "replay", "-c", "ferry.toml", &id_of("d-1")]);
    assert!(out.status.success(), "{out:?}");
    let p = sub.next(WAIT).await.expect("replayed with the daemon stopped");
    assert_eq!(user_property(&p, "mapped"), Some("yes"), "the header mapper ran on the stopped replay too");
    assert!(ws.dead_letters().is_empty());
}

fn sqs_receiver_config(admin: &str, endpoint: &str, queue_url: &str, dst: &str) -> String {
    format!(
        r#"
[admin]
listen = "{admin}"
[receivers.q]
type = "sqs"
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout = 5
[senders.m]
type = "mqtt"
url = "{mqtt}"
client_id = "{sid}"
[[routes]]
id = "md5"
receiver = "q"
max_replay_attempts = 2
[routes.backoff]
initial_ms = 200
max_ms = 400
[[routes.bindings]]
sender = "m"
address = "{dst}/out"
"#,
        mqtt = broker_url(),
        sid = unique("ferry-m"),
    )
}

/// A body whose MD5 does not match (changed between send and receive) is
/// given back with the route's backoff, not at once for ever, and is
/// dead-lettered as `md5_mismatch` once its receive count passes
/// `max_replay_attempts`. It is never sent on.
#[tokio::test(flavor = "multi_thread")]
async fn an_md5_mismatch_backs_off_and_is_dead_lettered() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "rr-md5", false).await;
    let proxy = SqsProxy::start(&sqs::endpoint()).await;
    proxy.corrupt_receives(true);
    let admin = ANY_PORT.to_owned();
    let dst = unique("md5/dst");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&sqs_receiver_config(&admin, &proxy.url, &url, &dst));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    sqs::send(&client, &url, "changed on the way", HashMap::new()).await;

    let m = wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "reason=\"md5_mismatch\"", 1.0, WAIT);
    // Received three times (counts 1, 2, 3), not in a hot loop.
    let mismatches = sample(&m, "ferry_sqs_md5_mismatch_total", "receiver=\"q\"").unwrap_or(0.0);
    assert_eq!(mismatches, 3.0, "{m}");
    assert!(sub.next(Duration::from_secs(1)).await.is_none(), "a damaged body is never sent on");
    assert_eq!(sqs::wait_until_empty(&client, &url).await, (0, 0), "deleted once dead-lettered");
    assert_eq!(daemon.terminate().code(), Some(0));
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "md5_mismatch");
    assert_eq!(dead[0]["attempts"], 3);
}

/// What an SQS sender drops from a message (attributes over SQS's ten) is
/// counted once per message, however often the send is retried.
#[tokio::test(flavor = "multi_thread")]
async fn dropped_attributes_are_counted_once_per_message_not_per_retry() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "rr-drop", false).await;
    let proxy = SqsProxy::start(&sqs::endpoint()).await;
    let admin = ANY_PORT.to_owned();
    let src = unique("da/src");
    let ws = Workspace::with_plugins(&[]);
    let config =
        sqs::mqtt_to_sqs_config(&broker_url(), &src, &url, "", "[routes.backoff]\ninitial_ms = 50\nmax_ms = 100", "")
            .replace(&format!("endpoint_url = \"{}\"", sqs::endpoint()), &format!("endpoint_url = \"{}\"", proxy.url));
    ws.config(&with_admin(&admin, config));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    let props: Vec<(String, String)> = (0..14).map(|i| (format!("h{i:02}"), format!("v{i}"))).collect();
    let props: Vec<(&str, &str)> = props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let dropped = || counter(&admin, "ferry_sqs_dropped_attributes_total", "sender=\"q\"");

    // The first message's sends fail a few times before one goes through.
    proxy.fail_next_sends(8);
    publisher.publish_with(&format!("{src}/x"), "retried", &props).await;
    let body = sqs::consume_bodies(&client, &url, 1, 60).await;
    assert_eq!(body, vec!["retried".to_owned()]);
    assert!(proxy.refused_sends() >= 4, "the send was retried");
    // A 500 from SQS says it takes nothing now: an outage, retried without
    // spending a replay.
    assert!(counter(&admin, "ferry_send_unavailable_total", "route=\"to-sqs\"") >= 1.0, "ferry retried it");
    let once = dropped();
    assert!(once > 0.0, "some attributes were dropped");

    // The same message sent at the first try drops as many.
    publisher.publish_with(&format!("{src}/x"), "plain", &props).await;
    assert_eq!(sqs::consume_bodies(&client, &url, 1, 40).await, vec!["plain".to_owned()]);
    wait_for_sample(&admin, "ferry_sqs_dropped_attributes_total", "sender=\"q\"", 2.0 * once, WAIT);
    assert_eq!(daemon.terminate().code(), Some(0));
}
