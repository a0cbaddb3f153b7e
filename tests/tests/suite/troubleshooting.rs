//! Every command of the book's Troubleshooting page, run as the page
//! writes it (with this daemon's admin address and binary) against a
//! daemon in the state its section describes, and checked to say what the
//! page says it says. A command the test runs that is not on the page
//! fails the test, so the page and the test cannot drift apart.

use std::process::Command;
use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace, ferry_binary};
use ferry_tests::mqtt::{TestMqtt, broker_url, user_property};
use ferry_tests::rabbit::URL091;
use ferry_tests::{repo_root, unique};

const WAIT: Duration = Duration::from_secs(15);

fn page() -> String {
    std::fs::read_to_string(repo_root().join("docs/src/operating/troubleshooting.md")).expect("the page")
}

/// Runs `command`, which must be on the page as written, in `ws` with the
/// daemon at `admin` (for `127.0.0.1:9464`) and `id` for `ID`; its stdout
/// and stderr.
fn run(ws: &Workspace, command: &str, admin: &str, id: &str) -> String {
    assert!(page().contains(command), "the page does not show: {command}");
    let ferry = ferry_binary();
    let line = command
        .replace("127.0.0.1:9464", admin)
        .replace("ferry ", &format!("{} ", ferry.display()))
        .replace(" ID", &format!(" {id}"));
    // FERRY_ADMIN stands in for the `[admin] listen` a user's config has.
    let out = Command::new("sh")
        .arg("-c")
        .arg(&line)
        .current_dir(ws.path())
        .env("FERRY_ADMIN", admin)
        .output()
        .expect("sh runs");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn mqtt(role: &str, url: &str, extra: &str) -> String {
    format!("type = \"mqtt\"\nurl = \"{url}\"\nclient_id = \"{}\"\n{extra}", unique(&format!("ts-{role}")))
}

fn route(extra: &str, address: &str) -> String {
    format!(
        "[[routes]]\nid = \"r\"\nreceiver = \"in\"\n{extra}\n[routes.backoff]\ninitial_ms = 50\nmax_ms = 200\n[[routes.bindings]]\nsender = \"out\"\naddress = \"{address}\"\n"
    )
}

#[test]
fn a_daemon_that_does_not_turn_ready_says_which_part_and_validate_connect_says_why() {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\n{}\n[senders.out]\n{}\n{}",
        mqtt("in", "mqtt://127.0.0.1:1", "topics = [\"ts/#\"]\n"),
        mqtt("out", &broker_url(), ""),
        route("", "ts-out/x")
    ));
    let daemon = Daemon::start_with_connected(&ws, &[("sender", "out")]);
    let admin = daemon.admin();
    let ready = run(&ws, "curl -s http://127.0.0.1:9464/readyz", &admin, "");
    assert!(ready.contains("\"not_ready\":[\"mqtt receiver in: not connected\"]"), "{ready}");
    let check = run(&ws, "ferry validate --connect -c ferry.toml", &admin, "");
    assert!(check.contains("receivers.in (mqtt): FAILED: connect:") && check.contains("Connection refused"), "{check}");
    assert!(check.contains("senders.out (mqtt): ok, connected"), "{check}");
    let health = run(&ws, "curl -s http://127.0.0.1:9464/healthz", &admin, "");
    assert!(health.contains("\"stalled\":false") && health.contains("\"routes_not_moving\":[]"), "{health}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_whose_target_is_down_shows_it_held_not_dead_lettered() {
    let src = unique("ts/held");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\n{}\n[senders.out]\n{}\n{}",
        mqtt("in", &broker_url(), &format!("topics = [\"{src}/#\"]\n")),
        mqtt("out", "mqtt://127.0.0.1:1", "reconnect_initial_ms = 50\nreconnect_max_ms = 200\n"),
        route("", "ts-out/x")
    ));
    let daemon = Daemon::start_with_connected(&ws, &[("receiver", "in")]);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/t"), "held", &[]).await;
    daemon.wait_for_total("ferry_send_unavailable_total", "route=\"r\"", 1.0, WAIT);
    let admin = daemon.admin();
    let series = run(
        &ws,
        "curl -s http://127.0.0.1:9464/metrics | grep -E '^ferry_(binding_available|messages_in_flight|send_unavailable_total)'",
        &admin,
        "",
    );
    assert!(series.contains("ferry_binding_available{route=\"r\",binding=\"out\"} 0"), "{series}");
    assert!(series.contains("ferry_messages_in_flight{route=\"r\"} 1"), "{series}");
    assert!(series.contains("ferry_send_unavailable_total{route=\"r\",binding=\"out\"}"), "{series}");
    let ready = run(&ws, "curl -s http://127.0.0.1:9464/readyz", &admin, "");
    assert!(ready.contains("route r binding out: target unavailable"), "{ready}");
    let health = run(&ws, "curl -s http://127.0.0.1:9464/healthz", &admin, "");
    assert!(health.contains("\"stalled\":false"), "a target that is down is not a stall: {health}");
    assert!(ws.dead_letters().is_empty(), "held, not dead-lettered");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trapping_plugin_is_counted_its_dead_letter_shown_and_replayed() {
    let (src, dst) = (unique("ts/trap"), unique("ts/dst"));
    let ws = Workspace::with_plugins(&["hostile"]);
    ws.config(&format!(
        "[receivers.in]\n{}\n[senders.out]\n{}\n{}",
        mqtt("in", &broker_url(), &format!("topics = [\"{src}/#\"]\n")),
        mqtt("out", &broker_url(), ""),
        route("[[routes.processors]]\nplugin = \"hostile\"\n", &format!("{dst}/out"))
    ));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/t"), "boom", &[("hostile", "trap"), ("mqtt.message-id", "m-trap")]).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "reason=\"plugin_trap\"", 1.0, WAIT);

    let traps = run(
        &ws,
        "curl -s http://127.0.0.1:9464/metrics | grep 'ferry_plugin_calls_total{.*outcome=\"trap\"'",
        &admin,
        "",
    );
    assert!(traps.contains("plugin=\"hostile\",route=\"r\",outcome=\"trap\"} 1"), "{traps}");
    let list = run(&ws, "ferry dlq list -c ferry.toml", &admin, "");
    assert!(list.contains("plugin_trap"), "{list}");
    let entry = &ws.dead_letters()[0];
    let id =
        entry["id"].as_u64().map_or_else(|| entry["id"].as_str().unwrap_or_default().to_owned(), |n| n.to_string());
    let shown = run(&ws, "ferry dlq show -c ferry.toml ID", &admin, &id);
    assert!(shown.contains("plugin_trap") && shown.contains("m-trap"), "{shown}");
    assert!(sub.next(Duration::from_millis(300)).await.is_none(), "nothing was sent before the replay");
    let replayed = run(&ws, "ferry dlq replay -c ferry.toml ID", &admin, &id);
    let got = sub.next(WAIT).await.unwrap_or_else(|| panic!("the replay sent nothing: {replayed}"));
    assert_eq!(got.payload.as_ref(), b"boom");
    assert_eq!(user_property(&got, "hostile"), Some("trap"));
    assert!(ws.dead_letters().is_empty(), "a replayed entry is removed: {replayed}");
}

#[test]
fn a_refused_login_is_named_by_validate_connect() {
    let ws = Workspace::with_plugins(&[]);
    let wrong = URL091.replacen("guest:guest@", "guest:wrong@", 1);
    assert_ne!(wrong, URL091, "the test's URL has guest's password in it");
    ws.config(&format!(
        "[receivers.in]\ntype = \"amqp091\"\nurl = \"{wrong}\"\nqueue = \"{}\"\n[senders.out]\n{}\n{}",
        unique("ts-q"),
        mqtt("out", &broker_url(), ""),
        route("", "ts-out/x")
    ));
    let check = run(&ws, "ferry validate --connect -c ferry.toml", "127.0.0.1:1", "");
    assert!(check.contains("receivers.in (amqp091): FAILED: connect:") && check.contains("ACCESS_REFUSED"), "{check}");
}
