//! `ferry tap`: live messages of a running route through the admin server,
//! sampled and bounded, with no effect on delivery; a stop is not held up
//! by an open tap; bad requests are refused with a reason.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, route_config};
use ferry_tests::unique;
use serde_json::Value;

fn config(admin: &str, url: &str, src: &str, dst: &str) -> String {
    let route = route_config(url, src, url, &format!("{dst}/{{mqtt.topic}}"), "", "", "");
    // The binding is the config's last table: its header mapper goes last.
    with_admin(
        admin,
        format!("{route}header_mapper = \"header-map\"\nheader_mapper_config = {{ set = {{ mapped = \"yes\" }} }}\n"),
    )
}

/// A daemon with route r1 (src/# -> dst/<topic>, a header mapper setting
/// `mapped = yes`) on a private broker, and its admin server.
struct Setup {
    broker: PrivateMosquitto,
    admin: String,
    src: String,
    dst: String,
    ws: Workspace,
    daemon: Daemon,
}

async fn start() -> Setup {
    let broker = PrivateMosquitto::start().await;
    let admin = ANY_PORT.to_owned();
    let (src, dst) = (unique("tap/src"), unique("tap/dst"));
    let ws = Workspace::with_plugins(&["header-map"]);
    ws.config(&config(&admin, &broker.url(), &src, &dst));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    Setup { broker, admin, src, dst, ws, daemon }
}

fn tap(ws: &Workspace, args: &[&str]) -> Child {
    ws.command(&[&["tap"], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferry tap starts")
}

/// Waits for `child` to exit, killing it after `timeout`.
fn wait(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sampled_egress_tap_shows_mapped_copies_and_every_message_is_still_delivered() {
    let Setup { broker, src, dst, ws, daemon, .. } = start().await;
    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;

    let mut child = tap(
        &ws,
        &[
            "r1",
            "-c",
            "ferry.toml",
            "--point",
            "egress",
            "--binding",
            "out",
            "--sample",
            "2",
            "--payload-bytes",
            "4",
            "--count",
            "3",
            "--format",
            "json",
        ],
    );
    // Publish until the tap has its three messages: it opens while these
    // flow, so which ones it samples is not known, only their spacing.
    let done = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicUsize::new(0));
    let publisher = {
        let (done, published, url, src) = (done.clone(), published.clone(), broker.url(), src.clone());
        tokio::spawn(async move {
            let client = TestMqtt::connect(&url).await;
            for i in 0..400 {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                client.publish_with(&format!("{src}/a"), &format!("msg-{i:04}"), &[("seq", &i.to_string())]).await;
                published.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let status = tokio::task::spawn_blocking(move || {
        let status = wait(&mut child, Duration::from_secs(30));
        (status, child)
    })
    .await
    .expect("joined");
    done.store(true, Ordering::SeqCst);
    publisher.await.expect("publisher");
    let (status, child) = status;
    let out = child.wait_with_output().expect("output");
    assert!(
        status.is_some_and(|s| s.success()),
        "tap: {status:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = BufReader::new(&out.stdout[..])
        .lines()
        .map(|l| serde_json::from_str(&l.expect("line")).expect("a JSON line"))
        .collect();
    assert_eq!(events.len(), 3, "{events:?}");
    let mut seqs = Vec::new();
    for e in &events {
        assert_eq!(e["route"], "r1");
        assert_eq!(e["point"], "egress");
        assert_eq!(e["binding"], "out");
        assert_eq!(e["addresses"][0], format!("{dst}/{src}/a"));
        assert_eq!(e["headers"]["mapped"], "yes", "the copy after the header mapper: {e}");
        assert_eq!(e["payload"], "msg-");
        assert_eq!(e["truncated"], true);
        assert_eq!(e["payload_size"], 8);
        seqs.push(e["headers"]["seq"].as_str().expect("seq").parse::<i64>().expect("number"));
    }
    assert!(seqs.windows(2).all(|w| w[1] - w[0] == 2), "every second message: {seqs:?}");

    // Nothing was held back or lost for the tap.
    let sent = published.load(Ordering::SeqCst);
    let got = sub.drain(Duration::from_secs(3)).await;
    assert_eq!(got.len(), sent, "published {sent}, delivered {}", got.len());
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_tap_ends_when_the_daemon_stops_and_bad_taps_are_refused() {
    let Setup { broker, admin, src, ws, daemon, .. } = start().await;

    let refused = ws.ferry(&["tap", "nope", "-c", "ferry.toml"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no route \"nope\""), "{refused:?}");
    let refused = ws.ferry(&["tap", "r1", "-c", "ferry.toml", "--binding", "out"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("binding is for point=egress"), "{refused:?}");

    // A text tap at ingress sees a message, then the daemon stops.
    let mut child = tap(&ws, &["r1", "-c", "ferry.toml"]);
    let client = TestMqtt::connect(&broker.url()).await;
    let stdout = child.stdout.take().expect("stdout");
    let (line_tx, lines_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = line_tx.send(line);
        }
    });
    ferry_tests::eventually("the tap open at the daemon", || daemon_has_open_tap(&admin)).await;
    client.publish_with(&format!("{src}/b"), "hello", &[("kind", "temp")]).await;
    let first = tokio::task::spawn_blocking(move || {
        let first = lines_rx.recv_timeout(ferry_tests::PATIENCE);
        (first, lines_rx)
    });
    let (first, lines_rx) = first.await.expect("joined");
    let first = first.expect("the tap printed the message");
    let stopped = Instant::now();
    let status = daemon.terminate();
    assert!(status.success(), "{status:?}");
    let tap_status =
        tokio::task::spawn_blocking(move || wait(&mut child, Duration::from_secs(10))).await.expect("joined");
    assert!(tap_status.is_some_and(|s| s.success()), "the tap did not end with the daemon: {tap_status:?}");
    assert!(stopped.elapsed() < Duration::from_secs(10));
    reader.join().expect("reader");
    let lines: Vec<String> = std::iter::once(first).chain(lines_rx.try_iter()).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(" ingress id="), "{lines:?}");
    assert!(lines[0].contains("kind=temp"), "{lines:?}");
    assert!(lines[0].contains("\"hello\""), "{lines:?}");
}

/// Whether the daemon counts an open tap (`ferry_taps_open`).
fn daemon_has_open_tap(admin: &str) -> bool {
    // An unlabelled gauge: `ferry_taps_open 1`.
    ferry_tests::http::metrics(admin)
        .lines()
        .find_map(|l| l.strip_prefix("ferry_taps_open "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .is_some_and(|n| n >= 1.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tap_client_that_never_reads_does_not_hold_up_the_route() {
    use std::io::Write as _;
    let Setup { broker, admin, src, dst, daemon, .. } = start().await;
    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    // Asks for everything, as fast and as large as the daemon allows, and
    // never reads: its socket buffers fill within the first messages.
    let mut stalled = std::net::TcpStream::connect(&admin).expect("admin");
    write!(stalled, "GET /tap/r1?rate=1000&payload_bytes=65536 HTTP/1.1\r\nHost: ferry\r\n\r\n").expect("request");
    ferry_tests::eventually("the tap open at the daemon", || daemon_has_open_tap(&admin)).await;

    let client = TestMqtt::connect(&broker.url()).await;
    let payload = "p".repeat(20_000);
    let n = 1000;
    let started = Instant::now();
    for i in 0..n {
        client.publish_with(&format!("{src}/bulk"), &payload, &[("seq", &i.to_string())]).await;
    }
    let mut got = 0;
    while got < n {
        let batch = sub.drain(Duration::from_secs(5)).await;
        if batch.is_empty() {
            break;
        }
        got += batch.len();
    }
    assert_eq!(got, n, "delivered {got} of {n} with a stalled tap open");
    assert!(daemon_has_open_tap(&admin), "the tap was open throughout");
    eprintln!("{n} messages of 20 kB with a stalled tap open: {:?}", started.elapsed());
    drop(stalled);
    drop(daemon);
}
