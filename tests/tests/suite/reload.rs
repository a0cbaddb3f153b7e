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

use ferry_tests::mqtt::TwoRoutes as Names;

fn config(n: &Names, a_address: &str) -> String {
    n.config(a_address, "")
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
    let (_, routes) = ferry_tests::http::get(&admin, "/routes").expect("routes");
    let routes: serde_json::Value = serde_json::from_str(&routes).expect("JSON");
    assert_eq!(routes[0]["counts"]["received"], 20, "{routes}");
    assert_eq!(routes[1]["counts"]["received"], 1, "{routes}");

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
    let (_, about) = ferry_tests::http::get(&admin, "/about").expect("about");
    assert!(about.contains(r#""read_only":true"#), "the console hides what it may not do: {about}");
    assert!(daemon.terminate().success());
}

/// Drives `ferry top` in a pseudo-terminal (80x20): `p` pauses the
/// selected route (sorted first: `a`), what the screen shows is read back
/// through a terminal emulator, and `q` ends it with exit 0.
const TOP_DRIVER: &str = r#"
import base64, fcntl, json, os, pty, select, struct, subprocess, sys, termios, time, urllib.request
ferry, config, admin = sys.argv[1], sys.argv[2], sys.argv[3]
master, slave = pty.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 20, 80, 0, 0))
env = dict(os.environ, TERM="xterm-256color", FERRY_ADMIN=admin)
child = subprocess.Popen([ferry, "top", "-c", config, "--interval-ms", "200"],
                         stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
os.close(slave)
out = b""
def read_until(done, seconds):
    global out
    deadline = time.time() + seconds
    while time.time() < deadline and not done():
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                out += os.read(master, 65536)
            except OSError:
                return
def paused():
    routes = json.load(urllib.request.urlopen("http://" + admin + "/routes"))
    return any(r["id"] == "a" and r["state"] == "paused" for r in routes)
read_until(lambda: b"running" in out, 15)
first = len(out)
os.write(master, b"p")
read_until(paused, 15)
was_paused = paused()
read_until(lambda: b"paused" in out[first:], 15)
second = len(out)
os.write(master, b"q")
read_until(lambda: child.poll() is not None, 15)
code = child.wait(timeout=15)
print(json.dumps({"code": code, "paused": was_paused, "first": first, "second": second, "out": base64.b64encode(out).decode()}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn ferry_top_shows_the_routes_and_pauses_the_selected_one() {
    use base64::Engine as _;
    let n = Names {
        a_in: unique("top/a"),
        b_in: unique("top/b"),
        out: unique("top/out"),
        client_a: unique("top-a"),
        client_b: unique("top-b"),
        client_out: unique("top-out"),
        admin: ANY_PORT.to_owned(),
    };
    let ws = Workspace::with_plugins(&[]);
    let config = ws.config(&config(&n, "one"));
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&n.b_in, "one", &[]).await;
    daemon.wait_for_total("ferry_messages_acked_total", "route=\"b\"", 1.0, WAIT);
    let bin = ferry_tests::daemon::ferry_binary();
    let args = [bin.to_string_lossy().into_owned(), config.to_string_lossy().into_owned(), admin.clone()];
    let out = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new("python3")
            .arg("-")
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), TOP_DRIVER.as_bytes()).expect("script");
        ferry_tests::wait_within(child, Duration::from_secs(90), "ferry top under a pseudo-terminal")
    })
    .await
    .expect("driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("JSON");
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(report["out"].as_str().unwrap_or_default()).expect("b64");
    let first = report["first"].as_u64().unwrap_or_default() as usize;
    let screen = |bytes: &[u8]| {
        let mut parser = vt100::Parser::new(20, 80, 0);
        parser.process(bytes);
        parser.screen().contents()
    };
    // The screen as it stood before the key, and after it.
    let before = screen(&bytes[..first.min(bytes.len())]);
    assert!(before.contains("ROUTE") && before.contains("STATE") && before.contains("IN/S"), "{before}");
    let row = |screen: &str, id: &str| {
        screen.lines().find(|l| l.trim_start().starts_with(&format!("{id} "))).map(str::to_owned).unwrap_or_default()
    };
    assert!(row(&before, "a").contains("running") && row(&before, "b").contains("running"), "{before}");
    assert_eq!(report["paused"], true, "p paused the selected route: {before}");
    // Before `q`: leaving the alternate screen clears what it showed.
    let second = report["second"].as_u64().unwrap_or_default() as usize;
    let after = screen(&bytes[..second.min(bytes.len())]);
    assert!(row(&after, "a").contains("paused"), "{after}");
    assert_eq!(report["code"], 0, "q ends it: {after}");
    let (_, routes) = ferry_tests::http::get(&admin, "/routes").expect("routes");
    assert!(routes.contains(r#""state":"paused""#), "{routes}");
    assert!(daemon.terminate().success());
}

/// Pause, resume and a drain, each made while messages keep arriving, then
/// a reload that restarts the route: every message crosses, none arrived
/// twice before the reload (nothing is duplicated by a pause, resume or
/// drain), none is dead-lettered, and the route ends running at its new
/// address.
#[tokio::test(flavor = "multi_thread")]
async fn control_under_sustained_load_loses_nothing() {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    const N: usize = 2000;
    let n = Names {
        a_in: unique("load/a"),
        b_in: unique("load/b"),
        out: unique("load/out"),
        client_a: unique("load-a"),
        client_b: unique("load-b"),
        client_out: unique("load-out"),
        admin: ANY_PORT.to_owned(),
    };
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&n, "one"));
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{}/#", n.out)).await;
    // Every copy that arrives, in order.
    let arrived: Arc<Mutex<Vec<String>>> = Arc::default();
    let collected = arrived.clone();
    let collecting = tokio::spawn(async move {
        while let Some(p) = sub.next(Duration::from_secs(60)).await {
            collected.lock().expect("copies").push(String::from_utf8_lossy(&p.payload).into_owned());
        }
    });
    let publisher = TestMqtt::connect(&broker_url()).await;
    let published = Arc::new(AtomicUsize::new(0));
    let (count, a_in) = (published.clone(), n.a_in.clone());
    // Paced so that every control call below lands while messages flow.
    let publishing = tokio::spawn(async move {
        for i in 0..N {
            publisher.publish_with(&a_in, &format!("m{i}"), &[]).await;
            count.store(i + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let reached = |at: usize| {
        let published = published.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while published.load(Ordering::SeqCst) < at {
                assert!(tokio::time::Instant::now() < deadline, "the publisher stalled before {at}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // Until every message below `upto` has arrived: the copies so far.
    let arrived_below = |upto: usize| {
        let arrived = arrived.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let copies = arrived.lock().expect("copies").clone();
                let seen: BTreeSet<&String> = copies.iter().collect();
                if (0..upto).all(|i| seen.contains(&format!("m{i}"))) {
                    return copies;
                }
                assert!(tokio::time::Instant::now() < deadline, "messages below m{upto} never all arrived");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let post = |path: &str| {
        let (status, body) = ferry_tests::http::request(&admin, "POST", path, None).expect(path);
        assert!(status == 200, "{path}: {status} {body}");
        body
    };

    reached(N / 8).await;
    assert!(post("/routes/a/pause").contains(r#""state":"paused""#));
    reached(N / 4).await;
    assert!(post("/routes/a/resume").contains(r#""state":"running""#));
    reached(N * 3 / 8).await;
    let drained = post("/routes/a/drain?timeout_s=30");
    assert!(drained.contains(r#""drained":true"#), "{drained}");
    reached(N / 2).await;
    assert!(post("/routes/a/resume").contains(r#""state":"running""#));

    // Nothing arrived twice through the pause, the resume and the drain.
    let before_reload = arrived_below(N / 2).await;
    let distinct: BTreeSet<&String> = before_reload.iter().collect();
    assert_eq!(distinct.len(), before_reload.len(), "a copy arrived twice before the reload");

    ws.config(&config(&n, "two"));
    let reload = post("/reload");
    assert!(reload.contains(r#""outcome":"applied""#) && reload.contains(r#""change":"restarted""#), "{reload}");
    publishing.await.expect("the publisher");
    let copies = arrived_below(N).await;
    collecting.abort();
    // At least once across the restart: a message the broker had not seen
    // acknowledged may come to the new start once more; say how many did.
    eprintln!("{N} messages, {} copies arrived", copies.len());
    let (_, routes) = ferry_tests::http::get(&admin, "/routes").expect("routes");
    let routes: serde_json::Value = serde_json::from_str(&routes).expect("JSON");
    assert_eq!((&routes[0]["state"], &routes[0]["generation"]), (&"running".into(), &2.into()), "{routes}");
    assert!(ws.dead_letters().is_empty());
    assert!(daemon.terminate().success());
}
