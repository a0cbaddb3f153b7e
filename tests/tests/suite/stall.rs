//! A stuck store must look stuck and must not keep the daemon from ending
//! (issue 13). The debug daemon's fault injection
//! (`FERRY_TEST_STORE_FAULT=hang:persist`) makes the store's writer hang for
//! good at the first persist, as sled's internal deadlock did. Then:
//! `/healthz` turns 503 naming the stuck operation, `ferry_stalled` is 1,
//! the admin server keeps answering, SIGTERM ends the process within
//! `admin.shutdown_timeout_secs` with exit code 1 and a log line saying what
//! was stuck, and the message that could not be persisted was never
//! acknowledged: it is back in its source queue.

use std::time::{Duration, Instant};

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::get;
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::unique;
use lapin::BasicProperties;

fn stalled_gauge(metrics: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix("ferry_stalled ")).and_then(|v| v.trim().parse().ok())
}

/// A `shared_outbox` route from one RabbitMQ queue to another, with an
/// admin server, on a debug daemon whose store misbehaves as `fault` says
/// (`FERRY_TEST_STORE_FAULT`); `admin` and `route` are extra lines for the
/// `[admin]` table and the route.
struct FaultyOutbox {
    rabbit: Rabbit,
    src: String,
    dst: String,
    admin: String,
    ws: Workspace,
}

impl FaultyOutbox {
    async fn start(fault: &str, admin_lines: &str, route_lines: &str) -> (Self, Daemon) {
        let rabbit = Rabbit::connect().await;
        let (src, dst) = (unique("fault-src"), unique("fault-dst"));
        rabbit.declare_queue(&src).await;
        rabbit.declare_queue(&dst).await;
        let admin = ANY_PORT.to_owned();
        let ws = Workspace::with_plugins(&[]).with_env(&[("FERRY_TEST_STORE_FAULT", fault)]);
        ws.config(&format!(
            r#"
[admin]
listen = "{admin}"
{admin_lines}

[receivers.in]
type = "amqp091"
url = "{URL091}"
queue = "{src}"

[senders.out]
type = "amqp091"
url = "{URL091}"

[[routes]]
id = "faulty"
receiver = "in"
delivery_mode = "shared_outbox"
{route_lines}
[[routes.bindings]]
sender = "out"
address = "{dst}"
"#
        ));
        let daemon = Daemon::start(&ws, 2);
        let admin = daemon.admin();
        (Self { rabbit, src, dst, admin, ws }, daemon)
    }

    async fn delete_queues(&self) {
        self.rabbit.delete_queue(&self.src).await;
        self.rabbit.delete_queue(&self.dst).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_store_turns_healthz_503_and_sigterm_still_ends_the_daemon_without_losing_the_message() {
    let (faulty, daemon) = FaultyOutbox::start("hang:persist", "stall_secs = 2\nshutdown_timeout_secs = 3", "").await;
    let FaultyOutbox { rabbit, src, dst, admin, .. } = &faulty;
    let (status, body) = get(admin, "/healthz").expect("healthz");
    assert_eq!(status, 200, "healthy before anything is stuck: {body}");

    let properties = BasicProperties::default().with_message_id("m-stuck".into());
    rabbit.publish("", src, b"must not be lost", properties).await;

    let started = Instant::now();
    let body = loop {
        let (status, body) = get(admin, "/healthz").expect("healthz answers while the store hangs");
        if status == 503 {
            break body;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "/healthz never turned 503; last: {status} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(body.contains("store operation persist has run"), "{body}");
    let (status, metrics) = get(admin, "/metrics").expect("metrics answer while the store hangs");
    assert_eq!(status, 200);
    assert_eq!(stalled_gauge(&metrics), Some(1.0), "ferry_stalled:\n{metrics}");
    assert!(metrics.contains("ferry_store_op_seconds_bucket{"), "store timings are exported");
    assert_eq!(get(admin, "/readyz").expect("readyz").0, 200, "the brokers are still connected");
    daemon.wait_for_log("ferry is stalled", 1, Duration::from_secs(10));

    let log = daemon.log.clone();
    let status = daemon.terminate();
    assert_eq!(status.code(), Some(1), "a shutdown that timed out exits 1");
    let text = log.lock().map(|l| l.join("\n")).unwrap_or_default();
    assert!(text.contains("shutdown did not finish in time"), "{text}");
    assert!(text.contains("persist"), "the log names what was stuck: {text}");

    let back = rabbit.get(src, Duration::from_secs(10)).await.expect("the message is back in its source queue");
    assert_eq!(back.delivery.data, b"must not be lost");
    assert_eq!(rabbit.depth(dst).await, 0, "nothing was sent");
    faulty.delete_queues().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_left_by_the_sled_layout_is_refused_at_start_with_what_to_do() {
    let ws = Workspace::with_plugins(&[]);
    ws.config(
        r#"
[receivers.in]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
topics = ["never/used"]
[senders.out]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
[[routes]]
id = "r"
receiver = "in"
[[routes.bindings]]
sender = "out"
address = "never/out"
"#,
    );
    std::fs::create_dir_all(ws.path().join("ferry-data/sled")).expect("old layout");
    let out = ws.ferry(&["run", "-c", "ferry.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store.path") && stderr.contains("old sled layout"), "{stderr}");
    assert!(stderr.contains("ferry outbox stats"), "it says what to do: {stderr}");
}

/// A disk that fails every persist (`fail:persist`): not a stall, a counted
/// outcome. The message is released to RabbitMQ and redelivered, each
/// attempt counted as a retry, until `max_replay_attempts` is used up; then
/// it is dead-lettered with the store's error and acknowledged. `/healthz`
/// stays 200 throughout: a failing disk is not fixed by a restart loop.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_fails_every_persist_retries_then_dead_letters_and_stays_healthy() {
    let route = "max_replay_attempts = 3\n[routes.backoff]\ninitial_ms = 50\nmax_ms = 200";
    let (faulty, daemon) = FaultyOutbox::start("fail:persist", "stall_secs = 1", route).await;
    let FaultyOutbox { rabbit, src, dst, admin, ws } = &faulty;
    let properties = BasicProperties::default().with_message_id("m-fail".into());
    rabbit.publish("", src, b"the disk says no", properties).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, Duration::from_secs(30));
    let (status, body) = get(admin, "/healthz").expect("healthz");
    assert_eq!(status, 200, "failing is not stuck: {body}");
    let (_, metrics) = get(admin, "/metrics").expect("metrics");
    let retried = ferry_tests::http::sample(&metrics, "ferry_messages_retried_total", "reason=\"outbox\"");
    // The first delivery and its three redeliveries each failed to persist.
    assert_eq!(retried, Some(4.0), "each failed persist is counted:\n{metrics}");
    assert_eq!(stalled_gauge(&metrics), Some(0.0));
    assert!(daemon.terminate().success(), "a clean stop");
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let entry = dead[0].to_string();
    assert!(
        entry.contains("replay_exhausted") && entry.contains("injected failure") && entry.contains("m-fail"),
        "{entry}"
    );
    assert_eq!(rabbit.depth(src).await, 0, "acknowledged once dead-lettered");
    assert_eq!(rabbit.depth(dst).await, 0, "nothing was sent");
    faulty.delete_queues().await;
}

/// `timeout`, and some supervisors, signal the process and then its group:
/// two SIGTERMs a moment apart are one request to stop cleanly, not the
/// "second signal" that exits at once.
#[tokio::test(flavor = "multi_thread")]
async fn two_sigterms_a_moment_apart_still_stop_cleanly() {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
client_id = "{client}"
topics = ["{topic}"]
[senders.out]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
client_id = "{client}-out"
[[routes]]
id = "r"
receiver = "in"
[[routes.bindings]]
sender = "out"
address = "{topic}/out"
"#,
        client = unique("twice"),
        topic = unique("twice/in"),
    ));
    let daemon = Daemon::start(&ws, 2);
    daemon.signal("TERM");
    let log = daemon.log.clone();
    let status = daemon.terminate();
    let text = log.lock().map(|l| l.join("\n")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(!text.contains("second stop signal"), "{text}");
}
