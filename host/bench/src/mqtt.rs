//! MQTT -> MQTT, QoS 1, 1 KiB payloads, between two private Mosquitto
//! brokers the bench starts (A and B):
//!
//! - raw: publish and subscribe on B (the message crosses one broker);
//! - Mosquitto's own bridge: A bridges `bench-bridge/#` out to B at QoS 1
//!   (`connection`, `topic … out 1`); publish on A, subscribe on B;
//! - ferry: a route from A to B with the filter plugin; publish on A,
//!   subscribe on B; as configured by default (one session with A), and
//!   with `connections = 4` (four sessions in one shared subscription: A
//!   lets each client have 20 messages unacknowledged, and ferry, a third
//!   process in the chain, has twice the bridge's round trip per message).
//!
//! A bridge crosses two brokers, so the bridge is the fair peer; the raw
//! rate is the ceiling of one broker. Every run publishes with the same
//! window of unacknowledged messages and stamps each payload with its send
//! time for the latency percentiles.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt};
use ferry_tests::unique;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use crate::measure::{self, CpuWindow, DaemonWindow, Latency, Run};

/// Most messages published but not yet received. Mosquitto drops QoS 1
/// messages for a client whose queue passes `max_queued_messages` (1000 by
/// default), so the publisher keeps fewer than that outstanding; every row
/// uses the same window.
const WINDOW: usize = 500;

/// The topic prefix A's bridge forwards to B.
const BRIDGED: &str = "bench-bridge";

/// Publishes `n` stamped 1 KiB messages (QoS 1, `kind=temp`) on
/// `publish_url`/`publish_topic` and receives them on
/// `receive_url`/`receive_filter`: the rate and the latency percentiles.
pub async fn pub_sub(
    publish_url: &str,
    publish_topic: &str,
    receive_url: &str,
    receive_filter: &str,
    n: usize,
) -> (f64, Latency) {
    let mut sub = TestMqtt::connect(receive_url).await;
    sub.subscribe(receive_filter).await;
    let publisher = TestMqtt::connect(publish_url).await;
    let props = PublishProperties { user_properties: vec![("kind".into(), "temp".into())], ..Default::default() };
    let received = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let topic = publish_topic.to_owned();
    let client = publisher.client.clone();
    let seen = received.clone();
    let producer = tokio::spawn(async move {
        let mut payload = vec![b'x'; 1024];
        for i in 0..n {
            while i >= seen.load(Ordering::Relaxed) + WINDOW {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            measure::stamp(&mut payload);
            if client
                .publish_with_properties(
                    topic.clone(),
                    QoS::AtLeastOnce,
                    false,
                    Bytes::copy_from_slice(&payload),
                    props.clone(),
                )
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let mut latency = Latency::new();
    let mut count = 0;
    while count < n {
        match sub.next(Duration::from_secs(10)).await {
            Some(p) => {
                latency.record(&p.payload);
                count += 1;
                received.store(count, Ordering::Relaxed);
            }
            None => break,
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    producer.abort();
    if count < n {
        eprintln!("warning: only {count} of {n} messages arrived on {receive_filter}");
    }
    (count as f64 / elapsed, latency)
}

/// The two brokers: B, and A with a bridge to B.
async fn brokers() -> (PrivateMosquitto, PrivateMosquitto) {
    let b = PrivateMosquitto::start().await;
    let a = PrivateMosquitto::start_with(&format!(
        "connection bench\naddress 127.0.0.1:{port}\nbridge_protocol_version mqttv50\n\
         topic {BRIDGED}/# out 1\ncleansession true\nnotifications false\ntry_private false\n",
        port = b.port
    ))
    .await;
    wait_for_bridge(&a, &b).await;
    (a, b)
}

/// Publishes probes on A until one crosses the bridge to B.
async fn wait_for_bridge(a: &PrivateMosquitto, b: &PrivateMosquitto) {
    let probe = format!("{BRIDGED}/probe");
    let mut sub = TestMqtt::connect(&b.url()).await;
    sub.subscribe(&probe).await;
    let publisher = TestMqtt::connect(&a.url()).await;
    for _ in 0..100 {
        publisher.publish(&probe, "probe", PublishProperties::default()).await;
        if sub.next(Duration::from_millis(200)).await.is_some() {
            return;
        }
    }
    panic!("Mosquitto's bridge from A to B did not come up");
}

async fn raw_run(b: &PrivateMosquitto, n: usize) -> Run {
    let topic = unique("bench/raw");
    let cpu = CpuWindow::start(b.pid());
    let (rate, latency) = pub_sub(&b.url(), &topic, &b.url(), &topic, n).await;
    let (p50_ms, p99_ms) = latency.percentiles();
    Run { rate, p50_ms, p99_ms, broker_cpu_us: cpu.per_message(n), ..Run::default() }
}

async fn bridge_run(a: &PrivateMosquitto, b: &PrivateMosquitto, n: usize) -> Run {
    let prefix = unique(&format!("{BRIDGED}/run"));
    // A's CPU covers its broker work and the bridge, which runs inside it.
    let cpu = CpuWindow::start(a.pid());
    let (rate, latency) = pub_sub(&a.url(), &format!("{prefix}/a"), &b.url(), &format!("{prefix}/#"), n).await;
    let (p50_ms, p99_ms) = latency.percentiles();
    Run { rate, p50_ms, p99_ms, broker_cpu_us: cpu.per_message(n), ..Run::default() }
}

/// The filter the bench's route runs: every message passes it.
const FILTER: &str = r#"
[[routes.processors]]
plugin = "filter"
config = { when = [{ header = "kind", op = "eq", value = "temp" }] }
"#;

async fn ferry_run(a: &PrivateMosquitto, b: &PrivateMosquitto, n: usize, connections: usize) -> Run {
    let (src, dst) = (unique("bench/src"), unique("bench/dst"));
    let ws = Workspace::with_plugins(&["filter"]);
    let config = ferry_tests::mqtt::route_config(
        &a.url(),
        &src,
        &b.url(),
        &format!("{dst}/out"),
        FILTER,
        "max_in_flight = 256",
        "",
    );
    let topics = format!("topics = [\"{src}/#\"]");
    ws.config(&config.replace(&topics, &format!("{topics}\nconnections = {connections}")));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 1 + connections));
    let ferry = DaemonWindow::start(&daemon);
    let broker_cpu = CpuWindow::start(a.pid());
    let (rate, latency) = pub_sub(&a.url(), &format!("{src}/a"), &b.url(), &format!("{dst}/#"), n).await;
    let (p50_ms, p99_ms) = latency.percentiles();
    let run = Run { p50_ms, p99_ms, broker_cpu_us: broker_cpu.per_message(n), ..ferry.run(rate, n) };
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    run
}

pub async fn rows(n: usize) {
    let (a, b) = brokers().await;
    let raw = measure::median_of("mqtt raw", || raw_run(&b, n)).await;
    let bridge = measure::median_of("mqtt bridge", || bridge_run(&a, &b, n)).await;
    let ferry = measure::median_of("mqtt ferry", || ferry_run(&a, &b, n, 1)).await;
    let ferry4 = measure::median_of("mqtt ferry, 4 connections", || ferry_run(&a, &b, n, 4)).await;

    println!(
        "\nMQTT -> MQTT, QoS 1, 1 KiB payloads, {n} messages, window {WINDOW}, two private Mosquitto brokers A and B (median of {})",
        measure::repeats()
    );
    measure::header("broker µs");
    measure::row("raw pub -> sub on B", &raw);
    measure::row("Mosquitto bridge A -> B", &bridge);
    measure::row("ferry A -> B (filter plugin)", &ferry);
    measure::row("ferry, connections = 4", &ferry4);
    measure::ratio("ratio ferry / Mosquitto bridge", ferry.rate / bridge.rate);
    measure::ratio("ratio ferry, 4 connections / bridge", ferry4.rate / bridge.rate);
    measure::ratio("ratio ferry / raw", ferry.rate / raw.rate);
    println!("  (broker µs: CPU per message of B for raw, of A with its bridge, of A for ferry)");
}
