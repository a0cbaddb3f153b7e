//! Shadow rollout (issue 18): a processor entry's `shadow` runs on a copy
//! of each message after the live plugin. Its verdict never changes
//! delivery, a disagreement is counted (and logged, sampled), and a shadow
//! that traps fails no message.

use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::{get, wait_for_sample};
use ferry_tests::mqtt::{TestMqtt, broker_url, route_config, user_property};
use ferry_tests::unique;

fn config(admin: &str, src: &str, dst: &str, shadow: &str) -> String {
    let processors = format!(
        "[[routes.processors]]\nplugin = \"filter\"\nconfig = {{ when = [{{ header = \"kind\", op = \"eq\", value = \"temp\" }}] }}\nshadow = \"{shadow}\"\nshadow_config = {{}}\n"
    );
    let url = broker_url();
    let route = route_config(
        &url,
        src,
        &url,
        &format!("{dst}/{{mqtt.topic}}"),
        &processors,
        "on_permanent_failure = \"dlq\"",
        "",
    );
    with_admin(admin, route)
}

const SHADOW: &str = "ferry_plugin_shadow_total";

#[tokio::test(flavor = "multi_thread")]
async fn a_disagreeing_shadow_is_counted_and_the_route_follows_the_live_plugin() {
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("shadow/src"), unique("shadow/dst"));
    let ws = Workspace::with_plugins(&["filter", "drop-all"]);
    ws.config(&config(&admin, &src, &dst, "drop-all"));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..5 {
        publisher.publish_with(&format!("{src}/t"), &format!("t{i}"), &[("kind", "temp")]).await;
    }
    for i in 0..3 {
        publisher.publish_with(&format!("{src}/h"), &format!("h{i}"), &[("kind", "humidity")]).await;
    }
    // The live filter passes the five readings; drop-all, the shadow,
    // would have dropped them: five disagreements, and the three the
    // filter drops are agreements.
    let got = sub.drain(Duration::from_secs(3)).await;
    assert_eq!(got.len(), 5, "the live plugin decides delivery");
    assert!(got.iter().all(|p| user_property(p, "kind") == Some("temp")));
    let text = wait_for_sample(&admin, SHADOW, "agreement=\"disagree\"", 5.0, Duration::from_secs(10));
    let agree = text
        .lines()
        .find(|l| l.starts_with(SHADOW) && l.contains("agreement=\"agree\""))
        .unwrap_or_else(|| panic!("no agree series:\n{text}"));
    assert!(agree.ends_with(" 3"), "{agree}");
    assert!(agree.contains(r#"route="r1",plugin="filter",shadow="drop-all""#), "{agree}");
    daemon.wait_for_log("shadow disagreed", 5, Duration::from_secs(5));

    // The admin API's plugin list: both plugins, where each is used, and
    // the shadow's agreement as counted.
    let (_, body) = get(&admin, "/plugins").expect("GET /plugins");
    let plugins: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let plugin = |name: &str| plugins.as_array().into_iter().flatten().find(|p| p["name"] == name).cloned();
    let filter = plugin("filter").unwrap_or_else(|| panic!("filter listed: {body}"));
    assert!(filter["world"].as_str().is_some_and(|w| w.starts_with("ferry:plugin/processor@")), "{body}");
    assert_eq!(filter["used_by"], serde_json::json!([{ "at": "r1", "role": "processor" }]), "{body}");
    assert!(filter["size"].as_u64().is_some_and(|s| s > 0), "{body}");
    assert!(filter.get("shadow").is_none(), "the live plugin has no agreement: {body}");
    let shadow = plugin("drop-all").unwrap_or_else(|| panic!("the shadow listed: {body}"));
    assert_eq!(shadow["used_by"], serde_json::json!([{ "at": "r1", "role": "shadow" }]), "{body}");
    assert_eq!((&shadow["shadow"]["agree"], &shadow["shadow"]["disagree"]), (&3.into(), &5.into()), "{body}");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trapping_shadow_never_fails_a_message() {
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("shadow/src"), unique("shadow/dst"));
    let ws = Workspace::with_plugins(&["filter", "hostile"]);
    ws.config(&config(&admin, &src, &dst, "hostile"));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..4 {
        publisher.publish_with(&format!("{src}/t"), &format!("t{i}"), &[("kind", "temp"), ("hostile", "trap")]).await;
    }
    let got = sub.drain(Duration::from_secs(3)).await;
    assert_eq!(got.len(), 4, "every message delivered although its shadow trapped");
    wait_for_sample(&admin, SHADOW, "agreement=\"error\"", 4.0, Duration::from_secs(10));
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty(), "nothing dead-lettered for the shadow's trap");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_promotes_the_shadow() {
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("shadow/src"), unique("shadow/dst"));
    let ws = Workspace::with_plugins(&["filter", "drop-all"]);
    let before = config(&admin, &src, &dst, "drop-all");
    ws.config(&before);
    let daemon = Daemon::start_with_args(&ws, &["--watch"], 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/t"), "before", &[("kind", "temp")]).await;
    assert_eq!(sub.drain(Duration::from_secs(2)).await.len(), 1, "the live filter passes it");

    // Promote: the shadow becomes the plugin, and there is no shadow.
    let promoted = before
        .replace("plugin = \"filter\"", "plugin = \"drop-all\"")
        .replace("shadow = \"drop-all\"\n", "")
        .replace("shadow_config = {}\n", "");
    assert_ne!(promoted, before);
    ws.config(&promoted);
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"applied\"", 1.0, Duration::from_secs(20));
    publisher.publish_with(&format!("{src}/t"), "after", &[("kind", "temp")]).await;
    assert!(sub.drain(Duration::from_secs(2)).await.is_empty(), "the promoted version decides now");
    assert!(daemon.terminate().success());
}
