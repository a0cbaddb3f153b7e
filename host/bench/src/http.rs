//! HTTP rows: webhooks into MQTT and MQTT out to a webhook through ferry,
//! against a raw HTTP client/server pair in the same run. The server is the
//! same in every row (the tests' webhook target, which records each
//! request), the client is reqwest with the same number of requests under
//! way, and every body is 1 KiB.
//!
//! - raw: the client POSTs to the server directly.
//! - HTTP -> MQTT: the client POSTs to ferry's HTTP receiver, whose reply
//!   waits for the MQTT PUBACK (QoS 1) of the shared Mosquitto.
//! - MQTT -> HTTP: messages published to Mosquitto (at most 500 ahead of
//!   the server) cross ferry's HTTP sender to the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::unique;
use ferry_tests::webhook::WebhookTarget;
use rumqttc::v5::mqttbytes::QoS;

use crate::measure::{self, DaemonWindow, Run};

/// Requests under way at once from the client.
const CONCURRENCY: usize = 64;

fn body() -> Bytes {
    Bytes::from(vec![b'x'; 1024])
}

/// POSTs `n` bodies to `url` from [`CONCURRENCY`] tasks; the rate of 2xx
/// answers.
async fn post_all(url: &str, n: usize) -> f64 {
    let client = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY).build().expect("client");
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, url, next, ok) = (client.clone(), url.to_owned(), next.clone(), ok.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let sent = client.post(&url).body(body()).send().await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let ok = ok.load(Ordering::Relaxed);
    if ok < n {
        eprintln!("warning: only {ok} of {n} POSTs were answered 2xx");
    }
    ok as f64 / started.elapsed().as_secs_f64()
}

async fn raw_run(n: usize) -> Run {
    let target = WebhookTarget::start().await;
    Run { rate: post_all(&target.url("/raw"), n).await, ..Run::default() }
}

async fn http_to_mqtt_run(n: usize) -> Run {
    let listen = ferry_tests::daemon::ANY_PORT;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.web]
type = "http"
listen = "{listen}"
[senders.m]
type = "mqtt"
url = "{mqtt}"
client_id = "{sid}"
[[routes]]
id = "http-mqtt"
receiver = "web"
max_in_flight = 256
[[routes.bindings]]
sender = "m"
address = "{dst}"
"#,
        mqtt = broker_url(),
        sid = unique("bench-m"),
        dst = unique("bench/http"),
    ));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 1));
    let url = tokio::task::block_in_place(|| daemon.http_url("web"));
    let ferry = DaemonWindow::start(&daemon);
    let rate = post_all(&format!("{url}/"), n).await;
    let run = ferry.run(rate, n);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    run
}

async fn mqtt_to_http_run(n: usize) -> Run {
    /// Most messages between the publisher and the server.
    const WINDOW: usize = 500;
    let target = WebhookTarget::start().await;
    let src = unique("bench/hook");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{mqtt}"
client_id = "{rid}"
topics = ["{src}/#"]
[senders.hook]
type = "http"
url = "{url}"
pool_idle_per_host = 256
[[routes]]
id = "mqtt-http"
receiver = "in"
max_in_flight = 256
[[routes.bindings]]
sender = "hook"
"#,
        mqtt = broker_url(),
        rid = unique("bench-in"),
        url = target.url("/hook"),
    ));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 1));
    let ferry = DaemonWindow::start(&daemon);
    let publisher = TestMqtt::connect(&broker_url()).await;
    let payload = body();
    let started = Instant::now();
    let arrived = || target.count();
    for i in 0..n {
        if i % 100 == 0 {
            while i >= arrived() + WINDOW && started.elapsed() < Duration::from_secs(300) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let _ = publisher.client.publish(format!("{src}/a"), QoS::AtLeastOnce, false, payload.clone()).await;
    }
    while arrived() < n && started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let got = arrived();
    if got < n {
        eprintln!("warning: only {got} of {n} reached the webhook");
    }
    let run = ferry.run(got as f64 / started.elapsed().as_secs_f64(), got);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    run
}

pub async fn rows(n: usize) {
    let raw = measure::median_of("http raw", || raw_run(n)).await;
    let http_to_mqtt = measure::median_of("http -> mqtt", || http_to_mqtt_run(n)).await;
    let mqtt_to_http = measure::median_of("mqtt -> http", || mqtt_to_http_run(n)).await;
    println!("\nHTTP, 1 KiB bodies, {CONCURRENCY} requests under way, {n} messages (median of {})", measure::repeats());
    measure::header("");
    measure::row("raw HTTP client -> server", &raw);
    measure::row("HTTP receiver -> MQTT through ferry", &http_to_mqtt);
    measure::ratio("ratio ferry / raw HTTP", http_to_mqtt.rate / raw.rate);
    measure::row("MQTT -> HTTP sender through ferry", &mqtt_to_http);
    measure::ratio("ratio ferry / raw HTTP", mqtt_to_http.rate / raw.rate);
}
