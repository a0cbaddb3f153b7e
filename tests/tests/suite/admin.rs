//! The admin endpoints of the real daemon: counters move with the messages
//! (including each seed counter on its triggering input), and /readyz
//! follows the brokers.

use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::{get, metrics, request, sample, wait_for_sample};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt};
use ferry_tests::unique;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

fn config(admin: &str, url: &str, src: &str, dst: &str, processors: &str) -> String {
    format!(
        r#"
[admin]
listen = "{admin}"

[receivers.in]
type = "mqtt"
url = "{url}"
client_id = "{rid}"
topics = ["{src}/#"]
max_payload_bytes = 2048
reconnect_initial_ms = 100
reconnect_max_ms = 300

[senders.out]
type = "mqtt"
url = "{url}"
client_id = "{sid}"
reconnect_initial_ms = 100
reconnect_max_ms = 300

[[routes]]
id = "r1"
receiver = "in"
{processors}
[[routes.bindings]]
sender = "out"
address = "{dst}/{{mqtt.topic}}"
"#,
        rid = unique("ferry-in"),
        sid = unique("ferry-out"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_move_with_the_messages_and_count_every_seed_counter() {
    let broker = PrivateMosquitto::start().await;
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("adm/src"), unique("adm/dst"));
    let ws = Workspace::with_plugins(&["hostile"]);
    ws.config(&config(&admin, &broker.url(), &src, &dst, "[[routes.processors]]\nplugin = \"hostile\"\n"));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let before = metrics(&admin);
    assert_eq!(sample(&before, "ferry_messages_received_total", "route=\"r1\""), None);
    assert_eq!(sample(&before, "ferry_route_running", "route=\"r1\""), Some(1.0));

    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker.url()).await;
    // Sent as is: counts received, sent, acked.
    publisher.publish_with(&format!("{src}/plain"), "a", &[("k", "v")]).await;
    // One user property over 256 bytes: MQTTIngressHeaderDropped.
    let long = "x".repeat(300);
    publisher.publish_with(&format!("{src}/long"), "b", &[("long", &long)]).await;
    // Payload over max_payload_bytes: MQTTIngressPoisonDropped.
    publisher.publish_with(&format!("{src}/big"), &"y".repeat(4096), &[]).await;
    // The plugin adds an integer header: MQTTNonStringHeaderDropped.
    publisher.publish_with(&format!("{src}/mutate"), "c", &[("hostile", "mutate")]).await;
    // The plugin rejects: dead-lettered.
    publisher
        .publish(
            &format!("{src}/reject"),
            "d",
            PublishProperties { user_properties: vec![("hostile".into(), "reject".into())], ..Default::default() },
        )
        .await;

    let text = wait_for_sample(&admin, "ferry_messages_acked_total", "route=\"r1\"", 4.0, Duration::from_secs(5));
    assert_eq!(sample(&text, "ferry_messages_received_total", "route=\"r1\""), Some(4.0));
    assert_eq!(sample(&text, "ferry_messages_sent_total", "binding=\"out\""), Some(3.0));
    assert_eq!(sample(&text, "ferry_message_age_at_egress_seconds_count", "binding=\"out\""), Some(3.0));
    // Observed right after the settlement: one latency sample per delivery.
    wait_for_sample(&admin, "ferry_delivery_latency_seconds_count", "route=\"r1\"", 4.0, Duration::from_secs(5));
    assert_eq!(sample(&text, "ferry_messages_dead_lettered_total", "reason=\"plugin_rejected\""), Some(1.0));
    assert_eq!(sample(&text, "ferry_mqtt_ingress_header_dropped_total", "receiver=\"in\""), Some(1.0));
    assert_eq!(sample(&text, "ferry_mqtt_ingress_poison_dropped_total", "reason=\"payload_too_large\""), Some(1.0));
    assert_eq!(sample(&text, "ferry_mqtt_non_string_header_dropped_total", "sender=\"out\""), Some(1.0));
    assert_eq!(sample(&text, "ferry_plugin_calls_total", "outcome=\"pass\""), Some(3.0));
    assert_eq!(sample(&text, "ferry_plugin_calls_total", "outcome=\"reject\""), Some(1.0));
    assert_eq!(sample(&text, "ferry_plugin_call_seconds_count", "route=\"r1\""), Some(4.0));
    assert!(sample(&text, "ferry_plugin_call_seconds_sum", "route=\"r1\"").is_some_and(|s| s > 0.0));
    assert_eq!(sample(&text, "ferry_messages_in_flight", "route=\"r1\""), Some(0.0));
    assert_eq!(sub.drain(Duration::from_secs(1)).await.len(), 3);
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// Waits until /readyz answers `want` with a body containing every part
/// (the receiver and sender notice a lost broker at different moments).
async fn readyz_answers(admin: &str, want: u16, parts: &[&str]) -> String {
    ferry_tests::eventually(&format!("/readyz to answer {want} naming {parts:?}"), || {
        let (status, body) = get(admin, "/readyz").expect("readyz");
        if status == want && parts.iter().all(|p| body.contains(p)) { Ok(body) } else { Err((status, body)) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_follows_the_broker() {
    let mut broker = PrivateMosquitto::start().await;
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&admin, &broker.url(), &unique("rdy/src"), &unique("rdy/dst"), ""));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    assert_eq!(get(&admin, "/healthz").expect("healthz").0, 200);
    let body = readyz_answers(&admin, 200, &[]).await;
    assert!(body.contains("\"ready\":true"), "{body}");

    broker.stop();
    let body =
        readyz_answers(&admin, 503, &["mqtt receiver in: not connected", "mqtt sender out: not connected"]).await;
    let json: serde_json::Value = serde_json::from_str(&body).expect("json body");
    let not_ready = json["not_ready"].to_string();
    assert!(
        not_ready.contains("mqtt receiver in: not connected") && not_ready.contains("mqtt sender out: not connected"),
        "{body}"
    );
    assert_eq!(get(&admin, "/healthz").expect("healthz").0, 200, "alive while not ready");

    broker.restart().await;
    readyz_answers(&admin, 200, &[]).await;
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// With `admin.token` every call needs it (401 without, with
/// `WWW-Authenticate: Bearer`), and `ferry dlq` sends it from the config.
#[tokio::test(flavor = "multi_thread")]
async fn with_a_token_every_admin_call_needs_it_and_the_cli_sends_it() {
    const TOKEN: &str = "s3cret-admin-token-0123";
    let broker = PrivateMosquitto::start().await;
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("tok/src"), unique("tok/dst"));
    let ws = Workspace::with_plugins(&[]);
    let listen = format!("listen = \"{admin}\"");
    ws.config(
        &config(&admin, &broker.url(), &src, &dst, "").replace(&listen, &format!("{listen}\ntoken = \"{TOKEN}\"")),
    );
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();

    for (method, path) in [
        ("GET", "/metrics"),
        ("GET", "/readyz"),
        ("GET", "/dlq"),
        ("POST", "/dlq/purge?route=r1"),
        ("GET", "/routes"),
        ("GET", "/about"),
        ("POST", "/routes/r1/resume"),
    ] {
        let (status, body) = request(&admin, method, path, None).expect("request");
        assert_eq!(status, 401, "{method} {path} without the token: {body}");
        let (status, _) = request(&admin, method, path, Some("wrong-token-of-some-length")).expect("request");
        assert_eq!(status, 401, "{method} {path} with another token");
        let (status, body) = request(&admin, method, path, Some(TOKEN)).expect("request");
        assert_eq!(status, 200, "{method} {path} with the token: {body}");
    }
    // The console's page holds nothing and asks for the token itself.
    let (status, page) = get(&admin, "/").expect("console");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<title>ferry console</title>"), "{page}");
    let script = page.split("<script>").nth(1).and_then(|s| s.split("</script>").next()).expect("the page's script");
    let file = ws.path().join("console.js");
    std::fs::write(&file, script).expect("write the script");
    let checked = std::process::Command::new("node").arg("--check").arg(&file).output().expect("node runs");
    assert!(checked.status.success(), "the console's script parses: {}", String::from_utf8_lossy(&checked.stderr));
    let (_, about) = request(&admin, "GET", "/about", Some(TOKEN)).expect("about");
    assert!(about.contains(r#""read_only":false"#) && about.contains("ferry:plugin@"), "{about}");
    let listed = ws.ferry(&["dlq", "list", "-c", "ferry.toml"]);
    assert!(listed.status.success(), "the CLI sends the token: {}", String::from_utf8_lossy(&listed.stderr));
    let rendered = String::from_utf8_lossy(&ws.ferry(&["render", "-c", "ferry.toml"]).stdout).into_owned();
    assert!(!rendered.contains(TOKEN), "render masks the token: {rendered}");
    assert!(daemon.terminate().success());
}

/// A read-only admin server may listen beyond loopback without a token:
/// reading works, changing answers 403.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_admin_server_refuses_changes() {
    let broker = PrivateMosquitto::start().await;
    let (src, dst) = (unique("ro/src"), unique("ro/dst"));
    let ws = Workspace::with_plugins(&[]);
    let wide = "0.0.0.0:0";
    ws.config(
        &config(wide, &broker.url(), &src, &dst, "")
            .replace(&format!("listen = \"{wide}\""), &format!("listen = \"{wide}\"\nread_only = true")),
    );
    let daemon = Daemon::start_with_args(&ws, &["--admin-listen", wide], 2);
    let admin = format!("127.0.0.1:{}", daemon.listener("admin", "admin").port());
    assert_eq!(request(&admin, "GET", "/metrics", None).expect("metrics").0, 200);
    let (status, body) = request(&admin, "POST", "/dlq/purge?route=r1", None).expect("purge");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read_only"), "{body}");
    assert!(daemon.terminate().success());

    // Beyond loopback, neither a token nor read_only: refused at start.
    ws.config(&config(wide, &broker.url(), &src, &dst, ""));
    let refused = ws.ferry(&["run", "-c", "ferry.toml"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("admin.token"), "{refused:?}");
    // The same address from the command line is checked the same way.
    ws.config(&config("127.0.0.1:0", &broker.url(), &src, &dst, ""));
    let refused = ws.ferry(&["run", "-c", "ferry.toml", "--admin-listen", wide]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("admin.token"), "{refused:?}");
}

/// From the moment a stop begins `/readyz` answers 503, while in-flight
/// messages finish (here one a plugin holds for two seconds).
#[tokio::test(flavor = "multi_thread")]
async fn readyz_answers_503_from_the_moment_a_stop_begins() {
    let broker = PrivateMosquitto::start().await;
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("stop/src"), unique("stop/dst"));
    let ws = Workspace::with_plugins(&["hostile"]);
    let text = config(&admin, &broker.url(), &src, &dst, "[[routes.processors]]\nplugin = \"hostile\"\n");
    ws.config(&format!("[plugins]\ncall_timeout_ms = 10000\n{text}"));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    assert_eq!(get(&admin, "/readyz").expect("readyz").0, 200);
    let publisher = TestMqtt::connect(&broker.url()).await;
    publisher.publish_with(&format!("{src}/a"), "held", &[("hostile", "slow"), ("sleep-ms", "2500")]).await;
    // The message is in the plugin when the stop begins.
    wait_for_sample(&admin, "ferry_messages_in_flight", "route=\"r1\"", 1.0, Duration::from_secs(10));
    daemon.signal("TERM");
    let started = std::time::Instant::now();
    let (status, body) = loop {
        let (status, body) = get(&admin, "/readyz").expect("the admin server still answers while stopping");
        if status != 200 || started.elapsed() > Duration::from_secs(2) {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("stopping"), "{body}");
    let in_flight = sample(&metrics(&admin), "ferry_messages_in_flight", "route=\"r1\"");
    assert_eq!(in_flight, Some(1.0), "503 while the held message is still in flight");
    assert!(daemon.wait_for_exit().success(), "the held message finished and the stop was clean");
}

/// Every listener may be given port 0: the daemon announces each bound
/// address on stdout and `/readyz` lists them, and each one answers there.
#[tokio::test(flavor = "multi_thread")]
async fn listeners_on_port_0_are_announced_and_listed_by_readyz() {
    let broker = PrivateMosquitto::start().await;
    let (queue, dst) = (unique("ports-q"), unique("ports/dst"));
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[admin]
listen = "{ANY_PORT}"

[endpoints.sqs]
listen = "{ANY_PORT}"
[endpoints.sqs.queues."{queue}"]

[receivers.hooks]
type = "http"
listen = "{ANY_PORT}"
path = "/in"

[senders.out]
type = "mqtt"
url = "{url}"
client_id = "{sid}"

[[routes]]
id = "web"
receiver = "hooks"
[[routes.bindings]]
sender = "out"
address = "{dst}"
"#,
        url = broker.url(),
        sid = unique("ports-out"),
    ));
    // The config's own `listen` (no --admin-listen from the harness).
    let daemon = Daemon::start_with_args(&ws, &["--admin-listen", ANY_PORT], 2);
    let admin = daemon.admin();
    let (http, sqs) = (daemon.listener("http", "hooks"), daemon.listener("sqs_endpoint", "sqs"));
    for addr in [&admin, &http.to_string(), &sqs.to_string()] {
        assert!(!addr.ends_with(":0"), "a bound port, not 0: {addr}");
    }

    let (status, body) = get(&admin, "/readyz").expect("readyz");
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("json");
    let listed: Vec<(String, String, String)> = listed["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| {
            let field = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
            (field("kind"), field("name"), field("addr"))
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("admin".to_owned(), "admin".to_owned(), admin.clone()),
            ("http".to_owned(), "hooks".to_owned(), http.to_string()),
            ("sqs_endpoint".to_owned(), "sqs".to_owned(), sqs.to_string()),
        ],
        "{body}"
    );

    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe(&dst).await;
    let reply = reqwest::Client::new().post(format!("http://{http}/in")).body("through port 0").send().await;
    assert_eq!(reply.expect("POST").status(), 200);
    let got = sub.next(Duration::from_secs(15)).await.expect("the webhook's message");
    assert_eq!(got.payload.as_ref(), b"through port 0");
    let client = ferry_tests::sqs::client_for(&format!("http://{sqs}"));
    let url = client.get_queue_url().queue_name(&queue).send().await.expect("the endpoint answers");
    assert_eq!(url.queue_url(), Some(format!("http://{sqs}/000000000000/{queue}").as_str()));
    assert_eq!(daemon.terminate().code(), Some(0));
}
