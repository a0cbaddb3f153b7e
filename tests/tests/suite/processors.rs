//! The built-in processors and the example header mapper through the real
//! daemon and Mosquitto: transform, tenant, header-map (with a refused
//! attempt to set a reserved header) and grants.

use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::{sample, wait_for_sample};
use ferry_tests::mqtt::{TestMqtt, broker_url, route_config, topic, user_property};
use ferry_tests::unique;

const WAIT: Duration = Duration::from_secs(10);

/// A one-route MQTT -> MQTT config with an admin server on `admin`.
fn config(admin: &str, src: &str, dst_address: &str, processors: &str, binding_extra: &str) -> String {
    let route = route_config(&broker_url(), src, &broker_url(), dst_address, processors, "", "");
    format!("[admin]\nlisten = \"{admin}\"\n{route}{binding_extra}\n")
}

fn reasons(ws: &Workspace) -> Vec<String> {
    ws.dead_letters().iter().map(|d| format!("{} {}", d["reason"], d["detail"])).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn transform_maps_fields_and_headers_and_refuses_non_json() {
    let (src, dst) = (unique("tf/src"), unique("tf/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["transform"]);
    let processors = r#"
[[routes.processors]]
plugin = "transform"
[routes.processors.config]
fields = [
  { to = "celsius", from = "$.reading['value']", type = "number" },
  { to = "site.name", from = "$.site", default = "unknown" },
  { to = "device", from_header = "device-id" },
  { to = "alarm", from = "$.flags[0]", type = "boolean" },
]
headers = [{ name = "kind", from = "$.type" }, { name = "celsius", from_field = "celsius", type = "string" }]
"#;
    ws.config(&config(&admin, &src, &format!("{dst}/out"), processors, ""));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let input = r#"{"reading":{"value":"21"},"type":"temp","flags":["yes"],"noise":1}"#;
    publisher.publish_with(&format!("{src}/a"), input, &[("device-id", "dev-7")]).await;
    publisher.publish_with(&format!("{src}/b"), "not json at all", &[]).await;

    let got = sub.next(WAIT).await.expect("the transformed message arrives");
    let body: serde_json::Value = serde_json::from_slice(&got.payload).expect("JSON out");
    assert_eq!(body, serde_json::json!({"celsius": 21, "site": {"name": "unknown"}, "device": "dev-7", "alarm": true}));
    assert_eq!(user_property(&got, "kind"), Some("temp"));
    assert_eq!(user_property(&got, "celsius"), Some("21"));
    wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "route=\"r1\"", 1.0, WAIT);
    assert!(sub.drain(Duration::from_millis(500)).await.is_empty(), "the non-JSON message is not sent");
    assert_eq!(daemon.terminate().code(), Some(0));
    let reasons = reasons(&ws);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains("transform: payload is not JSON"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tenant_stamps_counts_and_refuses_unknown_tenants() {
    let (src, dst) = (unique("tn/src"), unique("tn/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["tenant"]);
    let processors = r#"
[[routes.processors]]
plugin = "tenant"
grants = { tenant_id = true }
config = { header = "org", allow = ["acme", "globex"], on_unknown = "reject", on_missing = "drop" }
"#;
    ws.config(&config(&admin, &src, &format!("{dst}/out"), processors, ""));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    for (org, n) in [("acme", 2), ("globex", 1), ("initech", 1)] {
        for _ in 0..n {
            publisher.publish_with(&format!("{src}/x"), "{}", &[("org", org)]).await;
        }
    }
    publisher.publish_with(&format!("{src}/x"), "{}", &[]).await;
    // A spoofed tenant id from the source is stripped at ingress, and the
    // plugin's stamp replaces it.
    publisher.publish_with(&format!("{src}/x"), "{}", &[("org", "acme"), ("x-bridge.tenant-id", "globex")]).await;

    let mut tenants = Vec::new();
    for _ in 0..4 {
        let p = sub.next(WAIT).await.expect("an allowed tenant's message");
        tenants.push(user_property(&p, "x-bridge.tenant-id").expect("stamped").to_owned());
    }
    tenants.sort();
    assert_eq!(tenants, ["acme", "acme", "acme", "globex"]);
    let text = wait_for_sample(&admin, "ferry_tenant_messages_total", "tenant=\"acme\"", 3.0, WAIT);
    assert_eq!(sample(&text, "ferry_tenant_messages_total", "tenant=\"globex\""), Some(1.0));
    let text = wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "route=\"r1\"", 1.0, WAIT);
    assert_eq!(sample(&text, "ferry_messages_dropped_total", "reason=\"filtered\""), Some(1.0), "no tenant: dropped");
    assert!(sub.drain(Duration::from_millis(300)).await.is_empty());
    assert_eq!(daemon.terminate().code(), Some(0));
    let reasons = reasons(&ws);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains("unknown_tenant") && reasons[0].contains("initech"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tenant_without_the_grant_cannot_stamp_and_says_so() {
    let (src, dst) = (unique("tg/src"), unique("tg/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["tenant"]);
    let processors = "[[routes.processors]]\nplugin = \"tenant\"\nconfig = { allow = [\"acme\"] }\n";
    ws.config(&config(&admin, &src, &format!("{dst}/out"), processors, ""));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/x"), "{}", &[("tenant", "acme")]).await;
    let text = wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "route=\"r1\"", 1.0, WAIT);
    assert_eq!(sample(&text, "ferry_plugin_reserved_header_refused_total", "plugin=\"tenant\""), Some(1.0));
    assert!(sub.drain(Duration::from_millis(300)).await.is_empty());
    assert_eq!(daemon.terminate().code(), Some(0));
    let reasons = reasons(&ws);
    assert!(reasons.len() == 1 && reasons[0].contains("does not grant"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn header_mapper_renames_sets_and_addresses_but_cannot_touch_reserved_headers() {
    let (src, dst) = (unique("hm/src"), unique("hm/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["header-map"]);
    let mapper = r#"header_mapper = "header-map"
header_mapper_config = { rename_prefix = [{ from = "app.", to = "amqp10." }], rename = { kind = "type" }, drop = ["secret"], set = { "origin" = "ferry", "x-bridge.tenant-id" = "spoofed" }, address = "DST/{type}/{amqp10.site}" }
"#
    .replace("DST", &dst);
    ws.config(&config(&admin, &src, &format!("{dst}/unmapped"), "", &mapper));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher
        .publish_with(&format!("{src}/x"), "{}", &[("app.site", "north"), ("kind", "temp"), ("secret", "s3")])
        .await;
    // No `kind` header: the address template cannot be filled; the copy
    // fails for good and is dead-lettered.
    publisher.publish_with(&format!("{src}/y"), "{}", &[("app.site", "south")]).await;

    let got = sub.next(WAIT).await.expect("the mapped copy arrives");
    assert_eq!(topic(&got), format!("{dst}/temp/north"));
    assert_eq!(user_property(&got, "amqp10.site"), Some("north"), "renamed by prefix");
    assert_eq!(user_property(&got, "app.site"), None, "renamed away");
    assert_eq!(user_property(&got, "type"), Some("temp"));
    assert_eq!(user_property(&got, "kind"), None);
    assert_eq!(user_property(&got, "secret"), None);
    assert_eq!(user_property(&got, "origin"), Some("ferry"));
    assert_eq!(user_property(&got, "x-bridge.tenant-id"), None, "a mapper cannot set reserved headers");
    let text = wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "route=\"r1\"", 1.0, WAIT);
    assert_eq!(
        sample(&text, "ferry_plugin_reserved_header_refused_total", "plugin=\"header-map\""),
        Some(2.0),
        "one refused set per message"
    );
    assert!(sub.drain(Duration::from_millis(300)).await.is_empty());
    assert_eq!(daemon.terminate().code(), Some(0));
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["reason"], "header_mapper");
    assert!(dead[0]["detail"].as_str().is_some_and(|d| d.contains("needs header \"type\"")), "{dead:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_processor_in_a_binding_and_a_mapper_in_a_chain_are_refused_at_start() {
    let src = unique("hm/src");
    let ws = Workspace::with_plugins(&["header-map", "transform"]);
    let admin = ANY_PORT.to_owned();
    ws.config(&config(&admin, &src, "x", "", "header_mapper = \"transform\"\n"));
    let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bindings[0].header_mapper") && err.contains("not a header-mapper"), "{err}");

    ws.config(&config(&admin, &src, "x", "[[routes.processors]]\nplugin = \"header-map\"\n", ""));
    let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("processors[0].plugin") && err.contains("not a processor"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_reaches_environment_files_and_network_only_when_granted() {
    let (src, dst) = (unique("gr/src"), unique("gr/dst"));
    let ws = Workspace::with_plugins(&["hostile"]).with_env(&[("FERRY_TEST_SECRET", "s3cret")]);
    let shared = ws.path().join("shared");
    std::fs::create_dir_all(&shared).expect("dir");
    std::fs::write(shared.join("note.txt"), "from the host").expect("file");
    let route = |id: &str, grants: &str| {
        format!(
            r#"
[receivers.{id}]
type = "mqtt"
url = "{url}"
client_id = "{client}"
topics = ["{src}/{id}"]

[[routes]]
id = "{id}"
receiver = "{id}"
[[routes.processors]]
plugin = "hostile"
{grants}
[[routes.bindings]]
sender = "out"
address = "{dst}/{id}/{{mqtt.message-id}}"
"#,
            url = broker_url(),
            client = unique("ferry-gr"),
        )
    };
    ws.config(&format!(
        "[senders.out]\ntype = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\n{}{}",
        broker_url(),
        unique("ferry-gr-out"),
        route("bare", ""),
        route(
            "granted",
            &format!(
                "grants = {{ env = [\"FERRY_TEST_SECRET\", \"FERRY_TEST_UNSET\"], dir = \"{}\", network = true }}",
                shared.display()
            )
        ),
    ));
    let daemon = Daemon::start(&ws, 3);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let mqtt_addr = broker_url().trim_start_matches("mqtt://").to_owned();
    for route in ["bare", "granted"] {
        for (kind, probe) in [("env", "FERRY_TEST_SECRET"), ("file", "note.txt"), ("connect", mqtt_addr.as_str())] {
            publisher
                .publish_with(
                    &format!("{src}/{route}"),
                    "{}",
                    &[("hostile", kind), ("probe", probe), ("mqtt.message-id", kind)],
                )
                .await;
        }
    }
    let mut reached = std::collections::BTreeMap::new();
    for _ in 0..6 {
        let p = sub.next(WAIT).await.expect("every probe passes");
        reached.insert(
            topic(&p).trim_start_matches(&format!("{dst}/")).to_owned(),
            user_property(&p, "reached").unwrap_or("").to_owned(),
        );
    }
    assert_eq!(reached["granted/env"], "ok: s3cret");
    assert_eq!(reached["granted/file"], "ok: from the host");
    assert_eq!(reached["granted/connect"], "ok: connected");
    for probe in ["env", "file", "connect"] {
        assert!(reached[&format!("bare/{probe}")].starts_with("denied"), "{probe}: {reached:?}");
    }
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// Contract versioning (issue 18, part 4): a filter built against the
/// previous minor contract (1.0) and one built against the current (1.1)
/// in one chain; each does its part.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_of_the_previous_minor_contract_runs_beside_current_ones() {
    let (src, dst) = (unique("contract/src"), unique("contract/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["filter-previous", "filter"]);
    let processors = r#"
[[routes.processors]]
plugin = "filter-previous"
config = { when = [{ header = "kind", op = "eq", value = "temp" }] }

[[routes.processors]]
plugin = "filter"
config = { when = [{ header = "site", op = "eq", value = "a" }] }
"#;
    ws.config(&config(&admin, &src, &format!("{dst}/{{mqtt.topic}}"), processors, ""));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    for (kind, site) in [("temp", "a"), ("temp", "b"), ("rh", "a")] {
        publisher.publish_with(&format!("{src}/{kind}-{site}"), "x", &[("kind", kind), ("site", site)]).await;
    }
    let got = sub.drain(Duration::from_secs(3)).await;
    let topics: Vec<String> = got.iter().map(topic).collect();
    assert_eq!(topics, [format!("{dst}/{src}/temp-a")], "only what both filters pass");
    assert!(daemon.terminate().success());
}
