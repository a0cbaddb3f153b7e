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

/// `ferry ctl` on a running daemon: a paused route takes nothing (its
/// messages wait at the broker) while the other runs; resume delivers
/// every one once; a pause survives a reload that restarts the route;
/// `POST /reload` answers each route's generation, or refuses a broken
/// config with nothing changed; a drain answers once nothing is held.
#[tokio::test(flavor = "multi_thread")]
async fn ferry_ctl_pauses_resumes_drains_and_reloads() {
    let n = Names {
        a_in: unique("ctl/a"),
        b_in: unique("ctl/b"),
        out: unique("ctl/out"),
        client_a: unique("ctl-a"),
        client_b: unique("ctl-b"),
        client_out: unique("ctl-out"),
        admin: ANY_PORT.to_owned(),
    };
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&n, "one"));
    // No --watch: `ferry ctl reload` reloads the file all the same.
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-c", "ferry.toml"]);
        let out = ws.ferry(&all);
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{}/#", n.out)).await;
    let publisher = TestMqtt::connect(&broker_url()).await;

    let (code, text) = ctl(&["pause", "a"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("a: paused"), "{text}");
    let (code, text) = ctl(&["pause", "nosuch"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no route \"nosuch\""), "{text}");
    let (status, body) = ferry_tests::http::get(&admin, "/readyz").expect("readyz");
    assert_eq!(status, 200, "a paused route is not a fault: {body}");
    assert!(body.contains(r#""paused":["a"]"#), "{body}");
    assert_eq!(sample(&metrics(&admin), "ferry_route_paused", "route=\"a\""), Some(1.0));

    // While a is paused: its messages wait; b's marker, published after
    // them, crosses.
    for i in 0..20 {
        publisher.publish_with(&n.a_in, &format!("a{i}"), &[]).await;
    }
    publisher.publish_with(&n.b_in, "marker", &[]).await;
    let p = sub.next(WAIT).await.expect("route b runs while a is paused");
    assert_eq!((topic(&p), p.payload.as_ref()), (format!("{}/b", n.out), &b"marker"[..]));
    let m = metrics(&admin);
    assert_eq!(sample(&m, "ferry_messages_received_total", "route=\"a\"").unwrap_or(0.0), 0.0, "{m}");

    // A reload that restarts a keeps it paused, and says what runs.
    ws.config(&config(&n, "two"));
    let (code, text) = ctl(&["reload"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("a: generation 2 (Restarted)") && text.contains("b: generation 1 (Kept)"), "{text}");
    let (_, routes) = ferry_tests::http::get(&admin, "/routes").expect("routes");
    let routes: serde_json::Value = serde_json::from_str(&routes).expect("JSON");
    assert_eq!(routes[0]["id"], "a", "{routes}");
    assert_eq!((&routes[0]["state"], &routes[0]["generation"]), (&"paused".into(), &2.into()), "{routes}");
    assert_eq!(routes[1]["state"], "running", "{routes}");

    // A config that does not load is refused by POST /reload (422), and
    // one a transport refuses (a port out of range) by `ferry ctl reload`
    // (exit 1); nothing changes either way.
    ws.config("[[routes]]\nid = \n");
    let (status, body) = ferry_tests::http::request(&admin, "POST", "/reload", None).expect("reload");
    assert_eq!(status, 422, "{body}");
    assert!(body.contains(r#""outcome":"refused""#) && body.contains("TOML parse error"), "{body}");
    ws.config(&config(&n, "three").replace(&broker_url(), "mqtt://127.0.0.1:99999"));
    let (code, text) = ctl(&["reload"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("reload refused; nothing changed"), "{text}");
    ws.config(&config(&n, "two"));
    let (_, routes) = ferry_tests::http::get(&admin, "/routes").expect("routes");
    assert!(routes.contains(r#""generation":2"#), "no restart on a refused reload: {routes}");

    // Resume: every message a held back crosses once, to the new address.
    let (code, text) = ctl(&["resume", "a"]);
    assert_eq!(code, Some(0), "{text}");
    let got = sub.collect(20).await;
    let mut payloads: Vec<String> = got.iter().map(|p| String::from_utf8_lossy(&p.payload).into_owned()).collect();
    assert!(got.iter().all(|p| topic(p) == format!("{}/two", n.out)), "{payloads:?}");
    payloads.sort();
    payloads.dedup();
    assert_eq!(payloads.len(), 20, "each once: {payloads:?}");

    // Drain: paused, and nothing held.
    let (code, text) = ctl(&["drain", "a", "--timeout-s", "20"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("a: paused") && text.contains("0 in flight"), "{text}");
    let (code, text) = ctl(&["routes"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.lines().any(|l| l.starts_with('a') && l.contains("paused")), "{text}");
    let (code, text) = ctl(&["resume", "a"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(sample(&metrics(&admin), "ferry_route_paused", "route=\"a\""), Some(0.0));
    assert!(sub.drain(Duration::from_millis(300)).await.is_empty(), "nothing sent twice");
    assert!(daemon.terminate().success());
}

/// A read-only admin server refuses the control endpoints; its routes
/// list stays readable.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_admin_server_refuses_control() {
    let n = Names {
        a_in: unique("ro/a"),
        b_in: unique("ro/b"),
        out: unique("ro/out"),
        client_a: unique("ro-a"),
        client_b: unique("ro-b"),
        client_out: unique("ro-out"),
        admin: ANY_PORT.to_owned(),
    };
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&n, "one").replace("[admin]\n", "[admin]\nread_only = true\n"));
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    for verb in ["pause", "resume", "drain"] {
        let out = ws.ferry(&["ctl", verb, "a", "-c", "ferry.toml"]);
        assert_eq!(out.status.code(), Some(2), "{verb}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"), "{verb}");
    }
    let out = ws.ferry(&["ctl", "reload", "-c", "ferry.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let (status, body) = ferry_tests::http::get(&admin, "/routes").expect("routes");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""state":"running""#), "{body}");
    assert!(daemon.terminate().success());
}
