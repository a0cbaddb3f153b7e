//! SIGHUP through the daemon: with `--watch` the config is reloaded and only
//! the routes whose parts changed are drained and restarted; without it the
//! plugins are reloaded. A config or plugin that does not build is refused
//! and the daemon keeps running as it was.

use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::{metrics, sample};
use ferry_tests::mqtt::{TestMqtt, broker_url, route_config, topic, user_property};
use ferry_tests::{plugin_file, unique};

const WAIT: Duration = Duration::from_secs(15);

struct Names {
    a_in: String,
    b_in: String,
    out: String,
    client_a: String,
    client_b: String,
    client_out: String,
    admin: String,
}

fn config(n: &Names, a_address: &str) -> String {
    format!(
        r#"
[admin]
listen = "{admin}"

[receivers.in-a]
type = "mqtt"
url = "{url}"
client_id = "{client_a}"
topics = ["{a_in}"]

[receivers.in-b]
type = "mqtt"
url = "{url}"
client_id = "{client_b}"
topics = ["{b_in}"]

[senders.out]
type = "mqtt"
url = "{url}"
client_id = "{client_out}"
default_topic = "unused"

[[routes]]
id = "a"
receiver = "in-a"
[[routes.bindings]]
sender = "out"
address = "{out}/{a_address}"

[[routes]]
id = "b"
receiver = "in-b"
[[routes.bindings]]
sender = "out"
address = "{out}/b"
"#,
        url = broker_url(),
        admin = n.admin,
        client_a = n.client_a,
        client_b = n.client_b,
        client_out = n.client_out,
        a_in = n.a_in,
        b_in = n.b_in,
        out = n.out,
    )
}

fn connections(admin: &str, name: &str) -> f64 {
    sample(&metrics(admin), "ferry_transport_connections_total", &format!("name=\"{name}\"")).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_reload_restarts_only_the_changed_route() {
    let n = Names {
        a_in: unique("rl/a"),
        b_in: unique("rl/b"),
        out: unique("rl/out"),
        client_a: unique("rl-a"),
        client_b: unique("rl-b"),
        client_out: unique("rl-out"),
        admin: ANY_PORT.to_owned(),
    };
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&n, "one"));
    let daemon = Daemon::start_with_args(&ws, &["--watch"], 3);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{}/#", n.out)).await;
    let publisher = TestMqtt::connect(&broker_url()).await;

    publisher.publish_with(&n.a_in, "a1", &[]).await;
    let p = sub.next(WAIT).await.expect("a1 crossed");
    assert_eq!(topic(&p), format!("{}/one", n.out));

    // Route a's binding changes; route b and the sender stay the same.
    ws.config(&config(&n, "two"));
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"applied\"", 1.0, WAIT);
    assert!(daemon.log_text().contains(r#"restarted=["a"]"#), "{}", daemon.log_text());
    publisher.publish_with(&n.a_in, "a2", &[]).await;
    publisher.publish_with(&n.b_in, "b1", &[]).await;
    let mut got: Vec<(String, String)> = Vec::new();
    while got.len() < 2 {
        let p = sub.next(WAIT).await.expect("both routes deliver after the reload");
        got.push((topic(&p), String::from_utf8_lossy(&p.payload).into_owned()));
    }
    got.sort();
    assert_eq!(got, vec![(format!("{}/b", n.out), "b1".to_owned()), (format!("{}/two", n.out), "a2".to_owned())]);
    assert_eq!(connections(&admin, "in-a"), 2.0, "route a reconnected its receiver");
    assert_eq!(connections(&admin, "in-b"), 1.0, "route b kept running untouched");
    assert_eq!(connections(&admin, "out"), 1.0, "the unchanged sender was kept");

    // A config that does not load is refused; the daemon runs on as it was.
    ws.config("[[routes]]\nid = \n");
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"refused\"", 1.0, WAIT);
    publisher.publish_with(&n.a_in, "a3", &[]).await;
    let p = sub.next(WAIT).await.expect("a3 crossed after the refused reload");
    assert_eq!((topic(&p), p.payload.as_ref()), (format!("{}/two", n.out), &b"a3"[..]));

    // A config that loads but that a transport refuses (a port out of
    // range: the MQTT client's own URL check) is refused the same way.
    ws.config(&config(&n, "three").replace(&broker_url(), "mqtt://127.0.0.1:99999"));
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"refused\"", 2.0, WAIT);
    publisher.publish_with(&n.a_in, "a4", &[]).await;
    let p = sub.next(WAIT).await.expect("a4 crossed after the second refused reload");
    assert_eq!((topic(&p), p.payload.as_ref()), (format!("{}/two", n.out), &b"a4"[..]));
    let m = metrics(&admin);
    assert_eq!(sample(&m, "ferry_reloads_total", "outcome=\"applied\""), Some(1.0), "{m}");
    assert_eq!(sample(&m, "ferry_reloads_total", "outcome=\"refused\""), Some(2.0), "{m}");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_swaps_a_changed_plugin_and_refuses_a_broken_one() {
    let (src, dst) = (unique("rl/src"), unique("rl/dst"));
    let ws = Workspace::with_plugins(&[]);
    let plugin = ws.path().join("plugins").join("gate.wasm");
    // `gate` starts as the filter: only kind=temp passes.
    std::fs::copy(plugin_file("filter"), &plugin).expect("copy filter");
    let gate = r#"[[routes.processors]]
plugin = "gate"
config = { when = [{ header = "kind", op = "eq", value = "temp" }] }
"#;
    ws.config(&route_config(&broker_url(), &src, &broker_url(), &dst, gate, "", ""));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&dst).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&src, "dropped", &[("kind", "humidity"), ("n", "1")]).await;
    publisher.publish_with(&src, "passed", &[("kind", "temp"), ("n", "2")]).await;
    let p = sub.next(WAIT).await.expect("the filter passed kind=temp");
    assert_eq!(user_property(&p, "n"), Some("2"));

    // The hostile fixture passes anything without a `hostile` header.
    std::fs::copy(plugin_file("hostile"), &plugin).expect("swap in another component");
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"applied\"", 1.0, WAIT);
    publisher.publish_with(&src, "now passes", &[("kind", "humidity"), ("n", "3")]).await;
    let p = sub.next(WAIT).await.expect("the new component passed it");
    assert_eq!(user_property(&p, "n"), Some("3"));

    // Garbage in place of the component: refused, the running one stays.
    std::fs::write(&plugin, b"not a component").expect("corrupt the plugin");
    daemon.signal("HUP");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"refused\"", 1.0, WAIT);
    publisher.publish_with(&src, "still passes", &[("kind", "humidity"), ("n", "4")]).await;
    let p = sub.next(WAIT).await.expect("the old component kept working");
    assert_eq!(user_property(&p, "n"), Some("4"));
    assert!(sub.drain(Duration::from_millis(500)).await.is_empty(), "nothing handled twice");
    assert!(daemon.terminate().success());
}
