//! The real `ferry` binary against the real Mosquitto: the filter's
//! outcomes end to end, metadata crossing MQTT -> MQTT, retries across a
//! target outage and a crash, hostile plugins, validation and shutdown.

use std::time::Duration;

use bytes::Bytes;
use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, broker_url, route_config as config, topic, user_property};
use ferry_tests::unique;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

const WAIT: Duration = Duration::from_secs(10);

fn filter(when: &str, extra: &str) -> String {
    format!("[[routes.processors]]\nplugin = \"filter\"\nconfig = {{ when = [{when}]{extra} }}\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn filter_passes_drops_and_routes_through_the_daemon() {
    let (src, dst) = (unique("bb/src"), unique("bb/dst"));
    let ws = Workspace::with_plugins(&["filter"]);
    // Hot readings are routed to an alert topic, temperatures pass, the rest drop.
    let processors = format!(
        "{}{}",
        filter(r#"{ header = "kind", op = "eq", value = "temp" }"#, ""),
        filter(r#"{ field = "c", op = "gt", value = 30 }"#, r#", action = "route", route = ["DST/alerts"]"#)
    )
    .replace("DST", &dst);
    ws.config(&config(&broker_url(), &src, &broker_url(), &format!("{dst}/{{mqtt.topic}}"), &processors, "", ""));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/kitchen"), r#"{"c":21}"#, &[("kind", "temp")]).await;
    publisher.publish_with(&format!("{src}/kitchen"), r#"{"rh":40}"#, &[("kind", "humidity")]).await;
    publisher.publish_with(&format!("{src}/oven"), r#"{"c":250}"#, &[("kind", "temp")]).await;

    let got = sub.drain(Duration::from_secs(3)).await;
    let mut seen: Vec<(String, String)> =
        got.iter().map(|p| (topic(p), String::from_utf8_lossy(&p.payload).into_owned())).collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (format!("{dst}/alerts"), r#"{"c":250}"#.to_owned()),
            (format!("{dst}/{src}/kitchen"), r#"{"c":21}"#.to_owned()),
        ]
    );
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(ws.dead_letters().is_empty(), "a filter drop is not dead-lettered");
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_crosses_mqtt_to_mqtt_faithfully() {
    let (src, dst) = (unique("bb/src"), unique("bb/dst"));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&broker_url(), &src, &broker_url(), &format!("{dst}/{{mqtt.topic}}"), "", "", ""));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;

    let binary = Bytes::from_static(&[0x00, 0x9f, 0xff, 0x0a, 0x00]);
    let props = PublishProperties {
        user_properties: vec![
            ("gobridge.subject".into(), "reading.taken".into()),
            ("site".into(), "Malmö".into()),
            ("mqtt.topic".into(), "spoof".into()),
            ("x-bridge.tenant-id".into(), "spoof".into()),
        ],
        correlation_data: Some(binary.clone()),
        content_type: Some("application/json".into()),
        response_topic: Some("replies/7".into()),
        message_expiry_interval: Some(120),
        ..Default::default()
    };
    publisher.publish(&format!("{src}/a"), r#"{"binary":true}"#, props).await;
    let text = PublishProperties { correlation_data: Some(Bytes::from_static(b"corr-text-1")), ..Default::default() };
    publisher.publish(&format!("{src}/b"), "text correlation", text).await;

    let mut got = sub.drain(Duration::from_secs(3)).await;
    got.sort_by_key(topic);
    assert_eq!(got.len(), 2, "both messages cross");
    let (a, b) = (&got[0], &got[1]);
    assert_eq!(topic(a), format!("{dst}/{src}/a"));
    let pa = a.properties.as_ref().expect("properties");
    assert_eq!(pa.correlation_data.as_ref(), Some(&binary), "binary correlation data round-trips byte-identical");
    assert_eq!(pa.content_type.as_deref(), Some("application/json"));
    assert_eq!(pa.response_topic.as_deref(), Some("replies/7"));
    let expiry = pa.message_expiry_interval.expect("expiry crosses");
    assert!((100..=120).contains(&expiry), "expiry {expiry}");
    assert_eq!(user_property(a, "gobridge.subject"), Some("reading.taken"));
    assert_eq!(user_property(a, "site"), Some("Malmö"));
    assert_eq!(user_property(a, "mqtt.message-id"), Some("mqtt-bin:AJ__CgA"));
    assert_eq!(user_property(a, "x-bridge.tenant-id"), None);
    assert_eq!(user_property(a, "mqtt.topic"), None);

    let pb = b.properties.as_ref().expect("properties");
    assert_eq!(pb.correlation_data.as_deref(), Some(&b"corr-text-1"[..]), "text correlation data round-trips");
    assert_eq!(user_property(b, "mqtt.message-id"), Some("corr-text-1"));
    assert_eq!(pb.message_expiry_interval, None);
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// A source on the shared broker and a target broker the test takes down.
struct Outage {
    target: PrivateMosquitto,
    publisher: TestMqtt,
    src: String,
    dst: String,
}

impl Outage {
    /// Stops the target, publishes `id`, and waits until ferry is retrying it.
    async fn publish_while_target_is_down(&mut self, daemon: &Daemon, id: &str, payload: &str) {
        self.target.stop();
        self.publisher.publish_with(&format!("{}/x", self.src), payload, &[("mqtt.message-id", id)]).await;
        // Taken and held: in flight, not acknowledged.
        daemon.wait_for_total("ferry_messages_in_flight", "", 1.0, WAIT);
    }

    /// Restarts the target and subscribes to the destination on it.
    async fn target_back(&mut self) -> TestMqtt {
        self.target.restart().await;
        let mut sub = TestMqtt::connect(&self.target.url()).await;
        sub.subscribe(&format!("{}/#", self.dst)).await;
        sub
    }
}

async fn next_id(sub: &mut TestMqtt, what: &str) -> String {
    let p = sub.next(Duration::from_secs(20)).await.unwrap_or_else(|| panic!("nothing delivered {what}"));
    user_property(&p, "mqtt.message-id").unwrap_or_default().to_owned()
}

/// Whether a daemon log shows that `id` may legitimately arrive twice: a
/// send whose acknowledgement was lost with the target's connection (the
/// target may have the message, ferry sends it again), or a source
/// acknowledgement that did not reach the broker (it sends it again). Both
/// are duplicates at-least-once delivery allows; nothing else is.
fn may_repeat(logs: &str, id: &str) -> bool {
    let id = format!("message_id={id}");
    logs.lines().any(|l| {
        l.contains(&id) && (l.contains("lost before the acknowledgement") || l.contains("acknowledgement failed"))
    })
}

/// The next id delivered, skipping repeats of ids delivered before that
/// the logs explain (see [`may_repeat`]).
async fn next_new_id(sub: &mut TestMqtt, what: &str, delivered: &[&str], logs: &str) -> String {
    loop {
        let id = next_id(sub, what).await;
        if delivered.contains(&id.as_str()) && may_repeat(logs, &id) {
            continue;
        }
        return id;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_outage_delays_but_never_loses_a_message_even_across_a_crash() {
    let mut rig = Outage {
        target: PrivateMosquitto::start().await,
        publisher: TestMqtt::connect(&broker_url()).await,
        src: unique("bb/src"),
        dst: unique("bb/dst"),
    };
    let ws = Workspace::with_plugins(&[]);
    // The sender reconnects slowly enough that the test subscriber is
    // always back on the restarted target before ferry is.
    ws.config(&config(
        &broker_url(),
        &rig.src,
        &rig.target.url(),
        &format!("{}/out", rig.dst),
        "",
        "",
        "reconnect_initial_ms = 1500\nreconnect_max_ms = 2000\nack_timeout_ms = 2000",
    ));
    let daemon = Daemon::start(&ws, 2);

    // 1. Target down while the daemon runs: the message waits in ferry and
    //    arrives once the target is back.
    rig.publish_while_target_is_down(&daemon, "m1", "during an outage").await;
    let mut sub = rig.target_back().await;
    assert_eq!(next_id(&mut sub, "after the outage").await, "m1");
    // Settled at the source before the next outage: the subscriber can
    // have m1 before the target's acknowledgement reaches ferry, and a
    // target stopped in between leaves m1 unacknowledged at the source,
    // which then (rightly) delivers it again after the crash below.
    daemon.wait_for_total("ferry_messages_acked_total", "", 1.0, WAIT);

    // 2. Target down and ferry crashes: the source never saw an ack, so the
    //    broker hands the message to the restarted ferry.
    rig.publish_while_target_is_down(&daemon, "m2", "across a crash").await;
    let mut logs = daemon.log_text();
    daemon.kill();
    let mut sub = rig.target_back().await;
    let daemon = Daemon::start(&ws, 2);
    let got = next_new_id(&mut sub, "after the crash", &["m1"], &logs).await;
    assert_eq!(got, "m2", "{logs}\n--- after the restart:\n{}", daemon.log_text());

    // 3. SIGTERM while a message waits for the target: ferry exits 0 at once
    //    and releases it unacknowledged, so the next run delivers it.
    rig.publish_while_target_is_down(&daemon, "m3", "across a shutdown").await;
    logs.push_str(&daemon.log_text());
    assert_eq!(daemon.terminate().code(), Some(0));
    let mut sub = rig.target_back().await;
    let daemon = Daemon::start(&ws, 2);
    assert_eq!(next_new_id(&mut sub, "after the restart", &["m1", "m2"], &logs).await, "m3");
    logs.push_str(&daemon.log_text());
    let extra: Vec<String> = sub
        .drain(Duration::from_secs(1))
        .await
        .iter()
        .map(|p| user_property(p, "mqtt.message-id").unwrap_or_default().to_owned())
        .filter(|id| !(["m1", "m2", "m3"].contains(&id.as_str()) && may_repeat(&logs, id)))
        .collect();
    assert!(extra.is_empty(), "m1 and m2 were acked and do not come back; got {extra:?}\n{logs}");
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_plugins_fail_only_their_own_messages() {
    let (src, dst, other) = (unique("bb/src"), unique("bb/dst"), unique("bb/other"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["hostile"]);
    let mut text = config(
        &broker_url(),
        &src,
        &broker_url(),
        &format!("{dst}/{{mqtt.topic}}"),
        "[[routes.processors]]\nplugin = \"hostile\"\n",
        "",
        "",
    );
    text.insert_str(
        0,
        &format!("[admin]\nlisten = \"{admin}\"\n[plugins]\ncall_timeout_ms = 200\nmemory_limit_mib = 16\n"),
    );
    // A second route, without plugins, on the same daemon and sender.
    text.push_str(&format!(
        "\n[receivers.other]\ntype = \"mqtt\"\nurl = \"{url}\"\nclient_id = \"{client}\"\ntopics = [\"{other}/#\"]\n\n[[routes]]\nid = \"r2\"\nreceiver = \"other\"\n[[routes.bindings]]\nsender = \"out\"\naddress = \"{dst}/other\"\n",
        url = broker_url(),
        client = unique("ferry-other"),
    ));
    ws.config(&text);
    let mut daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    for kind in ["loop", "trap", "grow", "recurse"] {
        publisher.publish_with(&format!("{src}/{kind}"), kind, &[("hostile", kind), ("mqtt.message-id", kind)]).await;
    }
    publisher.publish_with(&format!("{src}/fine"), "fine", &[("mqtt.message-id", "fine")]).await;
    publisher.publish_with(&format!("{other}/x"), "other", &[("mqtt.message-id", "other")]).await;

    let got = sub.drain(Duration::from_secs(5)).await;
    let mut ids: Vec<_> = got.iter().filter_map(|p| user_property(p, "mqtt.message-id")).collect();
    ids.sort();
    assert_eq!(ids, ["fine", "other"], "only the well-behaved messages are sent, on both routes");
    assert!(daemon.is_running());
    let m = ferry_tests::http::metrics(&admin);
    let calls = |outcome: &str| {
        ferry_tests::http::sample(
            &m,
            "ferry_plugin_calls_total",
            &format!("plugin=\"hostile\",route=\"r1\",outcome=\"{outcome}\""),
        )
    };
    assert_eq!((calls("trap"), calls("deadline"), calls("pass")), (Some(3.0), Some(1.0), Some(1.0)), "{m}");
    assert_eq!(
        ferry_tests::http::sample(&m, "ferry_messages_dead_lettered_total", "reason=\"plugin_trap\""),
        Some(3.0)
    );
    assert_eq!(daemon.terminate().code(), Some(0));
    let mut reasons: Vec<(String, String)> = ws
        .dead_letters()
        .iter()
        .map(|d| (d["envelope"]["id"].as_str().unwrap_or("").to_owned(), d["reason"].as_str().unwrap_or("").to_owned()))
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("grow".to_owned(), "plugin_trap".to_owned()),
            ("loop".to_owned(), "plugin_deadline".to_owned()),
            ("recurse".to_owned(), "plugin_trap".to_owned()),
            ("trap".to_owned(), "plugin_trap".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_traps_in_init_is_refused_at_start_and_at_reload_while_routes_keep_running() {
    let (src, dst) = (unique("bb/src"), unique("bb/dst"));
    let ws = Workspace::with_plugins(&["hostile"]);
    let with = |trap: bool| {
        config(
            &broker_url(),
            &src,
            &broker_url(),
            &format!("{dst}/out"),
            &format!("[[routes.processors]]\nplugin = \"hostile\"\nconfig = {{ trap_in_init = {trap} }}\n"),
            "",
            "",
        )
    };
    ws.config(&with(true));
    let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("routes[0].processors[0].config") && err.contains("init trapped"), "{err}");

    ws.config(&with(false));
    let daemon = Daemon::start_with_args(&ws, &["--watch"], 2);
    ws.config(&with(true));
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"refused\"", 1.0, WAIT);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/x"), "still here", &[]).await;
    assert!(sub.next(WAIT).await.is_some(), "the route kept running on the instance that initialised");
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[test]
fn validate_names_the_offending_key() {
    let ws = Workspace::with_plugins(&["filter"]);
    let good =
        config(&broker_url(), "a", &broker_url(), "b", &filter(r#"{ header = "k", op = "exists" }"#, ""), "", "");
    ws.config(&good);
    let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let cases = [
        (good.replace("[[routes]]\nid = \"r1\"", "[[routes]]\nid = \"r1\"\ncolour = \"blue\""), "routes[0]", "colour"),
        (
            good.replace("plugin = \"filter\"", "plugin = \"nosuch\""),
            "routes[0].processors[0].plugin",
            "no plugin named \"nosuch\"",
        ),
        (
            good.replace("sender = \"out\"", "sender = \"elsewhere\""),
            "routes[0].bindings[0].sender",
            "no sender named \"elsewhere\"",
        ),
        (
            good.replace("op = \"exists\"", "op = \"resembles\""),
            "routes[0].processors[0].config",
            "when[0].op: unknown variant `resembles`",
        ),
    ];
    for (text, key, why) in cases {
        ws.config(&text);
        let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(key) && stderr.contains(why), "expected {key} / {why} in: {stderr}");
    }
}

#[test]
fn render_shows_the_resolved_config_without_passwords() {
    let ws = Workspace::with_plugins(&[]);
    let text = config("mqtt://user:hunter2@127.0.0.1:1883", "a", &broker_url(), "b", "", "", "")
        .replace("topics = [", "topics = [\"${EXTRA_TOPIC:-extra/#}\", ");
    ws.config(&text);
    let out = ws.ferry(&["render", "-c", "ferry.toml"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(json["receivers"]["in"]["topics"][0], "extra/#");
    assert_eq!(json["routes"][0]["max_in_flight"], 100);
    assert!(!stdout.contains("hunter2"));
}

#[test]
fn secrets_read_from_files_reach_the_config_but_never_the_rendered_output() {
    let ws = Workspace::with_plugins(&[]);
    std::fs::write(ws.path().join("sender-url"), format!("{}\n", broker_url())).expect("secret file");
    std::fs::write(ws.path().join("client-id"), "sekrit-client-7").expect("secret file");
    // The sender's url and client id come from files.
    let mut in_sender = false;
    let text: Vec<String> = config(&broker_url(), "a", &broker_url(), "b", "", "", "")
        .lines()
        .map(|line| {
            if line.starts_with('[') {
                in_sender = line == "[senders.out]";
            }
            match line {
                l if in_sender && l.starts_with("url = ") => "url = { file = \"sender-url\" }".to_owned(),
                l if in_sender && l.starts_with("client_id = ") => "client_id = { file = \"client-id\" }".to_owned(),
                l => l.to_owned(),
            }
        })
        .collect();
    let text = text.join("\n");
    assert!(text.contains("{ file = \"client-id\" }"), "the test config changed shape:\n{text}");
    ws.config(&text);
    let validate = ws.ferry(&["validate", "-c", "ferry.toml"]);
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stderr));
    let out = ws.ferry(&["render", "-c", "ferry.toml"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(!stdout.contains("sekrit-client-7"), "{stdout}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(json["senders"]["out"]["client_id"], "****");
}

#[test]
fn failing_connections_never_log_their_password() {
    // These ports refuse connections: every client keeps failing and logs it.
    let closed = ferry_tests::ports::ClosedPort::new();
    let dead = |scheme: &str| format!("{scheme}://ferry:topsecret-pw@{}", closed.addr());
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "amqp091"
url = "{a091}/%2f"
queue = "q"
reconnect_initial_ms = 50
reconnect_max_ms = 100
[senders.mqtt]
type = "mqtt"
url = "{mqtt}"
reconnect_initial_ms = 50
reconnect_max_ms = 100
[senders.a10]
type = "amqp10"
url = "{a10}"
address = "q"
reconnect_initial_ms = 50
reconnect_max_ms = 100
[[routes]]
id = "r"
receiver = "in"
dispatch_mode = "fan_out"
[[routes.bindings]]
sender = "mqtt"
address = "t"
[[routes.bindings]]
sender = "a10"
"#,
        a091 = dead("amqp"),
        mqtt = dead("mqtt"),
        a10 = dead("amqp"),
    ));
    let daemon = Daemon::start(&ws, 0);
    daemon.wait_for_line(&["receiver=\"in\"", "reconnecting"], Duration::from_secs(20));
    daemon.wait_for_line(&["sender=\"mqtt\"", "reconnecting"], Duration::from_secs(20));
    daemon.wait_for_line(&["sender=a10", "retrying"], Duration::from_secs(20));
    let log = daemon.log_text();
    assert!(!log.contains("topsecret-pw"), "a password reached the log:\n{log}");
    assert!(log.contains("ferry:****@127.0.0.1"), "the masked URL is logged:\n{log}");
    // SIGHUP reloads plugins (none here: every route is kept) and does not
    // stop the daemon; the reload logs no secret either.
    daemon.signal("HUP");
    daemon.wait_for_line(&["reload applied", "kept="], Duration::from_secs(10));
    let mut daemon = daemon;
    assert!(daemon.is_running(), "SIGHUP ended the daemon");
    assert!(!daemon.log_text().contains("topsecret-pw"), "a password reached the log after the reload");
    assert!(daemon.terminate().success());
}

/// Start-up compiles only the plugins the config names: a component in the
/// directory that no route uses is neither compiled nor loaded.
#[tokio::test(flavor = "multi_thread")]
async fn only_the_plugins_a_config_names_are_loaded() {
    let (src, dst) = (unique("named/src"), unique("named/dst"));
    let ws = Workspace::with_plugins(&["filter", "hostile", "transform"]);
    ws.config(&config(
        &broker_url(),
        &src,
        &broker_url(),
        &format!("{dst}/x"),
        &filter(r#"{ header = "kind", op = "eq", value = "temp" }"#, ""),
        "",
        "",
    ));
    let daemon = Daemon::start(&ws, 2);
    let log = daemon.log_text();
    assert!(log.contains("plugin loaded") && log.contains("plugin=filter"), "{log}");
    for unused in ["plugin=hostile", "plugin=transform"] {
        assert!(!log.contains(unused), "{unused} was loaded though no route names it:\n{log}");
    }
    assert!(daemon.terminate().success());
}

/// `ferry render` of a config with a secret in every transport that takes
/// one, each written inline (the case no `{ file = … }` marks): the output
/// names every key and prints none of the secrets, whether the transport
/// declares them, a URL carries them or a component's free-form config
/// holds them.
#[test]
fn render_prints_no_secret_of_any_transport() {
    let ws = Workspace::with_plugins(&["simplemq"]);
    let secret = |what: &str| format!("s3cret-{what}-{}", unique("x").rsplit('-').next().unwrap_or("0"));
    let secrets: Vec<(&str, String)> = [
        "mqtt-in",
        "mqtt-out",
        "amqp091",
        "amqp10",
        "nats-token",
        "nats-seed",
        "redis-in",
        "redis-out",
        "kafka-in",
        "kafka-out",
        "http-bearer",
        "http-hmac",
        "hook-bearer",
        "hook-hmac",
        "hook-url",
        "smq-in",
        "smq-out",
        "endpoint",
        "admin",
        "component",
    ]
    .into_iter()
    .map(|w| (w, secret(w)))
    .collect();
    let s = |w: &str| secrets.iter().find(|(k, _)| *k == w).map(|(_, v)| v.clone()).expect("secret");
    let seed = nkeys::KeyPair::new_user().seed().expect("seed");
    let text = format!(
        r#"
[admin]
listen = "127.0.0.1:0"
token = "{admin}"

[endpoints.sqs]
listen = "127.0.0.1:0"
access_keys = [{{ id = "AKIDRENDER", secret = "{endpoint}" }}]
[endpoints.sqs.queues.q]

[receivers.mqtt]
type = "mqtt"
url = "mqtt://user:{mqtt_in}@127.0.0.1:1883"
topics = ["a/#"]
[receivers.amqp091]
type = "amqp091"
url = "amqp://guest:{amqp091}@127.0.0.1:5672/%2f"
queue = "q"
[receivers.amqp10]
type = "amqp10"
url = "amqp://guest:{amqp10}@127.0.0.1:5672"
address = "/queues/q"
[receivers.nats]
type = "nats"
url = "nats://127.0.0.1:4222"
stream = "S"
token = "{nats_token}"
[receivers.redis]
type = "redis"
url = "redis://:{redis_in}@127.0.0.1:6379"
stream = "s"
[receivers.kafka]
type = "kafka"
brokers = "127.0.0.1:9092"
topics = ["t"]
group = "g"
sasl = {{ mechanism = "scram-sha-512", username = "ferry", password = "{kafka_in}" }}
[receivers.http]
type = "http"
listen = "127.0.0.1:0"
bearer_token = "{http_bearer}"
hmac_secret = "{http_hmac}"
[receivers.smq]
type = "simplemq"
queue = "orders"
api_key = "{smq_in}"

[senders.mqtt]
type = "mqtt"
url = "mqtt://user:{mqtt_out}@127.0.0.1:1883"
[senders.nats]
type = "nats"
url = "nats://127.0.0.1:4222"
subject = "out.x"
nkey_seed = "{seed}"
[senders.redis]
type = "redis"
url = "redis://:{redis_out}@127.0.0.1:6379"
stream = "s"
[senders.kafka]
type = "kafka"
brokers = "127.0.0.1:9092"
topic = "t"
sasl = {{ mechanism = "plain", username = "ferry", password = "{kafka_out}" }}
tls = {{}}
[senders.hook]
type = "http"
url = "https://user:{hook_url}@hooks.example/in"
bearer_token = "{hook_bearer}"
hmac_secret = "{hook_hmac}"
[senders.smq]
type = "simplemq"
queue = "orders"
api_key = "{smq_out}"
[senders.component]
type = "component"
component = "simplemq"
allow_hosts = ["127.0.0.1:9"]
config = {{ queue = "orders", api_key = "{component}", api_url = "http://127.0.0.1:9" }}

[[routes]]
id = "r"
receiver = "mqtt"
[[routes.bindings]]
sender = "mqtt"
"#,
        admin = s("admin"),
        endpoint = s("endpoint"),
        mqtt_in = s("mqtt-in"),
        mqtt_out = s("mqtt-out"),
        amqp091 = s("amqp091"),
        amqp10 = s("amqp10"),
        nats_token = s("nats-token"),
        redis_in = s("redis-in"),
        redis_out = s("redis-out"),
        kafka_in = s("kafka-in"),
        kafka_out = s("kafka-out"),
        http_bearer = s("http-bearer"),
        http_hmac = s("http-hmac"),
        hook_url = s("hook-url"),
        hook_bearer = s("hook-bearer"),
        hook_hmac = s("hook-hmac"),
        smq_in = s("smq-in"),
        smq_out = s("smq-out"),
        component = s("component"),
    );
    ws.config(&text);
    let out = ws.ferry(&["render", "-c", "ferry.toml"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for key in ["token", "nkey_seed", "bearer_token", "hmac_secret", "api_key", "access_keys", "password"] {
        assert!(stdout.contains(&format!("\"{key}\"")), "{key} is rendered:\n{stdout}");
    }
    // The endpoint's section as its crate reads it: its defaults filled in.
    assert!(stdout.contains("\"account\": \"000000000000\""), "the endpoint's defaults:\n{stdout}");
    let shown: Vec<&str> = secrets.iter().filter(|(_, v)| stdout.contains(v.as_str())).map(|(k, _)| *k).collect();
    assert!(shown.is_empty(), "render printed the secrets of {shown:?}:\n{stdout}");
    assert!(!stdout.contains(&seed), "render printed the NKey seed:\n{stdout}");
}
