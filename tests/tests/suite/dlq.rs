//! The dead-letter CLI: list, show, replay (fresh id, x-bridge.causation-id,
//! entry removed), dry run, purge and outbox stats, on the store of a
//! running daemon (through its admin server) and of a stopped one, and a
//! clear refusal when a running daemon has no admin server.

use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, route_config, topic, user_property};
use ferry_tests::unique;

const WAIT: Duration = Duration::from_secs(15);

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn config(admin: &str, src: &str, dst: &str) -> String {
    let hostile = "[[routes.processors]]\nplugin = \"hostile\"\n";
    let route = route_config(&broker_url(), src, &broker_url(), &format!("{dst}/{{mqtt.topic}}"), hostile, "", "");
    format!("{admin}\n{route}")
}

/// Publishes messages the hostile plugin rejects; the client is returned
/// so that it lives until the publishes are out.
async fn dead_letter(src: &str, ids: &[&str]) -> TestMqtt {
    let publisher = TestMqtt::connect(&broker_url()).await;
    for id in ids {
        let body = format!("body of {id}");
        publisher.publish_with(&format!("{src}/{id}"), &body, &[("hostile", "reject"), ("mqtt.message-id", id)]).await;
    }
    publisher
}

/// Starts a daemon in `ws` (configured already), has it dead-letter
/// `ids`, and subscribes to what it sends to `dst`: the daemon, the
/// publisher (kept alive until its messages are out) and the subscriber.
async fn start_with_dead_letters(ws: &Workspace, src: &str, dst: &str, ids: &[&str]) -> (Daemon, TestMqtt, TestMqtt) {
    let daemon = Daemon::start(ws, 2);
    let publisher = dead_letter(src, ids).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", ids.len() as f64, WAIT);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    (daemon, publisher, sub)
}

/// The store id of the dead letter of `message` among `entries`.
fn id_of(entries: &[serde_json::Value], message: &str) -> String {
    entries
        .iter()
        .find(|e| e["envelope"]["id"] == message)
        .and_then(|e| e["id"].as_u64())
        .unwrap_or_else(|| panic!("{message} is not in {entries:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_listed_shown_replayed_and_purged() {
    let (src, dst) = (unique("dl/src"), unique("dl/dst"));
    let ws = Workspace::with_plugins(&["hostile"]);
    let admin = ANY_PORT.to_owned();
    ws.config(&config(&format!("[admin]\nlisten = \"{admin}\""), &src, &dst));
    let (daemon, _publisher, mut sub) = start_with_dead_letters(&ws, &src, &dst, &["r-0", "r-1", "r-2"]).await;

    // While the daemon runs the commands go through its admin server, and a
    // replay uses the daemon's own sender.
    let running = ws.dead_letters();
    assert_eq!(running.len(), 3, "{running:?}");
    let replayed = ws.ferry(&["dlq", "replay", "-c", "ferry.toml", &id_of(&running, "r-0")]);
    assert!(replayed.status.success(), "{replayed:?}");
    let p = sub.next(WAIT).await.expect("replayed by the running daemon");
    assert_eq!(user_property(&p, "x-bridge.causation-id"), Some("r-0"));
    assert!(daemon.terminate().success());

    let table = ws.ferry(&["dlq", "list", "-c", "ferry.toml"]);
    assert!(table.status.success());
    let text = stdout(&table);
    assert_eq!(text.matches("plugin_rejected").count(), 2, "{text}");
    assert!(text.contains("2 dead letter(s)"), "{text}");
    let entries = ws.dead_letters();
    let (first, second) = (id_of(&entries, "r-1"), id_of(&entries, "r-2"));

    let shown = stdout(&ws.ferry(&["dlq", "show", "-c", "ferry.toml", &first]));
    assert!(shown.contains("reason:        plugin_rejected"), "{shown}");
    assert!(shown.contains("message id:    r-1"), "{shown}");
    assert!(shown.contains("hostile = "), "headers are shown: {shown}");
    assert!(shown.contains("payload (11 bytes): body of r-1"), "{shown}");

    let dry = ws.ferry(&["dlq", "replay", "-c", "ferry.toml", "--dry-run", &first]);
    assert!(dry.status.success());
    assert!(stdout(&dry).contains("would send r-1"), "{}", stdout(&dry));
    assert_eq!(ws.dead_letters().len(), 2, "a dry run changes nothing");

    let replayed = ws.ferry(&["dlq", "replay", "-c", "ferry.toml", &first]);
    assert!(replayed.status.success(), "{replayed:?}");
    let p = sub.next(WAIT).await.expect("the replayed message arrived");
    assert_eq!(topic(&p), format!("{dst}/{src}/r-1"), "through the route's binding");
    assert_eq!(p.payload.as_ref(), b"body of r-1");
    assert_eq!(user_property(&p, "x-bridge.causation-id"), Some("r-1"), "points at the original");
    assert_ne!(user_property(&p, "mqtt.message-id"), Some("r-1"), "a fresh id");
    let left = ws.dead_letters();
    assert_eq!(left.len(), 1, "the replayed entry is removed: {left:?}");
    assert_eq!(left[0]["id"].as_u64().map(|n| n.to_string()), Some(second));

    let purged = ws.ferry(&["dlq", "purge", "-c", "ferry.toml", "--route", "r1"]);
    assert!(stdout(&purged).contains("purged 1"), "{purged:?}");
    assert!(ws.dead_letters().is_empty());
    let stats = ws.ferry(&["outbox", "stats", "-c", "ferry.toml"]);
    assert!(stats.status.success());
    assert!(stdout(&stats).contains("0 dead letter(s) in the store"), "{}", stdout(&stats));
    let unknown = ws.ferry(&["dlq", "show", "-c", "ferry.toml", "999999"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_daemon_without_an_admin_server_is_refused_untouched() {
    let (src, dst) = (unique("dl/src"), unique("dl/dst"));
    let ws = Workspace::with_plugins(&["hostile"]);
    ws.config(&config("", &src, &dst));
    let daemon = Daemon::start_without_admin(&ws, 2);
    let _publisher = dead_letter(&src, &["x-1"]).await;
    daemon.wait_for_log("message dead-lettered", 1, WAIT);
    let busy = ws.ferry(&["dlq", "list", "-c", "ferry.toml"]);
    assert_eq!(busy.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("in use by a running ferry"), "{busy:?}");
    assert!(daemon.terminate().success());
    assert_eq!(ws.dead_letters().len(), 1, "nothing was touched");
}

/// On the PostgreSQL store the commands read and change the database while
/// daemons run (no "in use" refusal), from any workspace naming it; a
/// replay goes through the running daemon when its admin server answers.
#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_on_the_postgres_store_are_reached_while_daemons_run() {
    let db = ferry_tests::pg::TestDb::new().await;
    let store = format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\n", db.url);
    let (src, dst) = (unique("dlpg/src"), unique("dlpg/dst"));
    let admin = ANY_PORT.to_owned();
    let running = Workspace::with_plugins(&["hostile"]);
    running.config(&config(&format!("{store}[admin]\nlisten = \"{admin}\""), &src, &dst));
    let (daemon, _publisher, mut sub) = start_with_dead_letters(&running, &src, &dst, &["p-0", "p-1", "p-2"]).await;

    // Another workspace, no admin server: straight to the database.
    let operator = Workspace::with_plugins(&["hostile"]);
    operator.config(&config(&store, &src, &dst));
    let entries = operator.dead_letters();
    assert_eq!(entries.len(), 3, "{entries:?}");
    let shown = stdout(&operator.ferry(&["dlq", "show", "-c", "ferry.toml", &id_of(&entries, "p-1")]));
    assert!(shown.contains("message id:    p-1") && shown.contains("reason:        plugin_rejected"), "{shown}");

    let replayed = running.ferry(&["dlq", "replay", "-c", "ferry.toml", &id_of(&entries, "p-0")]);
    assert!(replayed.status.success(), "{replayed:?}");
    let p = sub.next(WAIT).await.expect("replayed by the running daemon");
    assert_eq!(user_property(&p, "x-bridge.causation-id"), Some("p-0"));

    let purged = operator.ferry(&["dlq", "purge", "-c", "ferry.toml", &id_of(&entries, "p-2")]);
    assert!(stdout(&purged).contains("purged 1"), "{purged:?}");
    let left = operator.dead_letters();
    assert_eq!(left.iter().map(|e| e["envelope"]["id"].as_str()).collect::<Vec<_>>(), [Some("p-1")]);
    let stats = operator.ferry(&["outbox", "stats", "-c", "ferry.toml"]);
    assert!(stdout(&stats).contains("1 dead letter(s) in the store"), "{}", stdout(&stats));
    assert!(daemon.terminate().success());
    db.drop().await;
}
