//! Crash test: a `shared_outbox` route MQTT -> AMQP 0-9-1 carries a stream
//! while the daemon is killed with SIGKILL at random points and started
//! again on the same store. Every message the source broker accepted must
//! reach the target at least once; duplicates are counted and reported.
//!
//! It runs on the embedded store and on the PostgreSQL store.
//!
//! CI runs the reduced form (2,000 messages, 4 kills); `just chaos` runs
//! the full one on the release daemon (`FERRY_CHAOS_MESSAGES=20000
//! FERRY_CHAOS_KILLS=100`) and prints the duplicates per kill: what was in flight when the process
//! died (sent but its completion not yet committed, or persisted but the
//! source's acknowledgement not yet written).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::{env_or, unique};
use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use rand::Rng;

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_in_the_middle_of_a_stream_loses_nothing() {
    chaos("").await;
}

/// The same on the PostgreSQL store. A restarted daemon is a new lease
/// owner: it takes its partition back once the dead one's lease expires
/// (`lease_ttl_secs`, 2 s here).
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_in_the_middle_of_a_stream_loses_nothing_on_the_postgres_store() {
    let db = ferry_tests::pg::TestDb::new().await;
    chaos(&format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\nlease_ttl_secs = 2\n", db.url)).await;
    db.drop().await;
}

/// Kills and restarts the daemon under a stream, its config's `[store]`
/// being `store` (empty: the embedded default).
async fn chaos(store: &str) {
    let messages: usize = env_or("FERRY_CHAOS_MESSAGES", 2_000);
    let kills: usize = env_or("FERRY_CHAOS_KILLS", 4);
    // The source keeps every message for ferry's session while ferry is
    // dead (no queue limit), so a loss could only be ferry's.
    let source = PrivateMosquitto::start_with("max_queued_messages 0").await;
    let queue = unique("chaos");
    let rabbit = Rabbit::connect().await;
    rabbit.declare_queue(&queue).await;
    let topic = unique("chaos/in");
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[])
        .with_env(&[("FERRY_LOG", &std::env::var("FERRY_CHAOS_LOG").unwrap_or_else(|_| "info".into()))]);
    ws.config(&format!(
        r#"
{store}
[admin]
listen = "{admin}"

[receivers.in]
type = "mqtt"
url = "{mqtt}"
client_id = "{client}"
topics = ["{topic}"]
reconnect_initial_ms = 50
reconnect_max_ms = 200

[senders.out]
type = "amqp091"
url = "{URL091}"

[[routes]]
id = "chaos"
receiver = "in"
delivery_mode = "{mode}"
max_in_flight = 256
[[routes.bindings]]
sender = "out"
address = "{queue}"
"#,
        mqtt = source.url(),
        client = unique("chaos-in"),
        mode = std::env::var("FERRY_CHAOS_MODE").unwrap_or_else(|_| "shared_outbox".into()),
    ));

    // The target side: every body that arrives, duplicates included.
    let received = Arc::new(Mutex::new(Vec::<String>::new()));
    let channel = rabbit.connection.create_channel().await.expect("channel");
    channel.basic_qos(1000, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = channel
        .basic_consume(queue.as_str().into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    let sink = received.clone();
    let collector = tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            sink.lock().expect("lock").push(String::from_utf8_lossy(&d.data).into_owned());
            let _ = d.ack(BasicAckOptions::default()).await;
        }
    });

    let mut daemon = Daemon::start(&ws, 2);
    let mut admin = daemon.admin();
    let publisher = TestMqtt::connect(&source.url()).await;
    // Paced so that the kills land while the stream is flowing.
    let pause =
        Duration::from_millis((kills as u64 * 600) / (messages as u64 / 100).max(1)).max(Duration::from_millis(1));
    let publishing = tokio::spawn(async move {
        for i in 0..messages {
            let id = format!("c-{i}");
            publisher.publish_with(&topic, &id, &[("mqtt.message-id", &id)]).await;
            if i % 100 == 99 {
                tokio::time::sleep(pause).await;
            }
        }
        publisher
    });

    let mut rng = rand::rng();
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..900))).await;
        daemon.kill();
        daemon = Daemon::start(&ws, 2);
        admin = daemon.admin();
    }
    let _publisher = publishing.await.expect("publisher");

    let expected: HashSet<String> = (0..messages).map(|i| format!("c-{i}")).collect();
    let started = Instant::now();
    let (unique_seen, total) = loop {
        let (unique_seen, total) = {
            let got = received.lock().expect("lock");
            (got.iter().filter(|b| expected.contains(*b)).collect::<HashSet<_>>().len(), got.len())
        };
        if unique_seen == messages || started.elapsed() > Duration::from_secs(180) {
            break (unique_seen, total);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let missing: Vec<String> = {
        let got: HashSet<String> = received.lock().expect("lock").iter().cloned().collect();
        let mut m: Vec<String> = expected.difference(&got).cloned().collect();
        m.sort();
        m.truncate(20);
        m
    };
    let duplicates = total - unique_seen;
    eprintln!(
        "chaos ({}): {messages} messages, {kills} SIGKILLs, {} lost, {duplicates} duplicates ({:.1} per kill)",
        if store.is_empty() { "embedded" } else { "postgres" },
        messages - unique_seen,
        duplicates as f64 / kills.max(1) as f64
    );
    if unique_seen != messages {
        let m = ferry_tests::http::metrics(&admin);
        let lines: Vec<&str> = m.lines().filter(|l| l.contains("route=\"chaos\"") && !l.contains("_bucket")).collect();
        eprintln!("the last daemon's counters:\n{}", lines.join("\n"));
    }
    assert_eq!(unique_seen, messages, "lost messages (first ones): {missing:?}");
    assert!(daemon.terminate().success());
    collector.abort();
    rabbit.delete_queue(&queue).await;
}
