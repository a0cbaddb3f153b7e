//! `just bench`: measures ferry against the broker it runs beside, in the
//! same run, and prints ratios (never absolute pass/fail thresholds).
//!
//! 1. MQTT -> MQTT, QoS 1, 1 KiB payloads, between two private Mosquitto
//!    brokers: raw pub -> sub on one, Mosquitto's own bridge from one to
//!    the other, and ferry with the filter plugin between the same two
//!    (see [`mqtt`]).
//! 2. One call of each built-in plugin (filter, transform, tenant,
//!    circuitbreaker, the header-map mapper) and of the Python and
//!    JavaScript examples, at 1 KiB and 1 MiB payloads. The message is a
//!    host resource: plugins that read only headers should cost the same at
//!    both sizes; those that parse the payload pay for it.
//!
//! 3. SQS -> MQTT and MQTT -> SQS through ferry, against the raw SDK rate
//!    on the same SQS endpoint (moto_server in development): raw drain
//!    (ReceiveMessage + DeleteMessageBatch) and raw fill (SendMessageBatch).
//!
//!    The SQS endpoint (`endpoint`): SendMessageBatch and ReceiveMessage +
//!    DeleteMessageBatch with the same SDK loops against ferry's
//!    `[endpoints.sqs]` and against moto_server (`FERRY_BENCH_ENDPOINT_MESSAGES`,
//!    default 300: moto slows down as a queue grows).
//!
//! 4. AMQP 0-9-1 queue -> queue on RabbitMQ, 1 KiB persistent messages:
//!    ferry against RabbitMQ's own shovel (ack-mode on-confirm, same
//!    prefetch) on fresh queues of the same depth, against a minimal bridge
//!    on the same client library (lapin: consume, publish, confirm, ack in
//!    ranges, nothing else), and against the raw publish (with confirms)
//!    and consume (with acks) rates.
//!
//! 5. The outbox: the durable persist rates of the embedded store and of
//!    the PostgreSQL store (on a schema of its own in the test database),
//!    one writer and 256, and an AMQP 0-9-1 route in `direct_hold` against
//!    the same in `shared_outbox` on each store; the store
//!    engines (redb, fjall, and sled that redb replaced) side by side, and
//!    with `store` their RSS and disk use after 1,000,000 records (see
//!    [`engines`]).
//!
//! 6. HTTP: webhooks into MQTT through ferry's HTTP receiver, and MQTT out
//!    through its HTTP sender, against a raw HTTP client/server pair with
//!    the same client and server (see [`http`]).
//!
//! 7. Transport components: SimpleMQ queue -> queue through the native
//!    adapter and through the SimpleMQ component on the same fake server
//!    (see [`component`]).
//!
//! 8. Streams: NATS JetStream stream -> stream and Redis stream -> stream
//!    through ferry, against the raw client's publish-with-ack and
//!    consume-with-ack rates on the same private server (see [`streams`]).
//!
//! 9. Kafka: topic -> topic through ferry on a private tansu broker,
//!    against the same client's raw produce and committing consume rates
//!    (see [`streams::kafka_rows`]).
//!
//! Every route row runs `FERRY_BENCH_REPEAT` times (default 3) and prints
//! the median rate, p50/p99 latency where each message can be timed, and
//! ferry's CPU per message and peak RSS from `/proc` (see [`measure`]).
//!
//! Sizes can be changed with `FERRY_BENCH_MESSAGES` (default 20000),
//! `FERRY_BENCH_SQS_MESSAGES` (default 300) and `FERRY_BENCH_AMQP_MESSAGES`
//! (default 20000), `FERRY_BENCH_HTTP_MESSAGES` (default 20000), `FERRY_BENCH_COMPONENT_MESSAGES`
//! (default 3000), `FERRY_BENCH_STREAM_MESSAGES` (default 10000);
//! `FERRY_BENCH_ROWS=processor,mqtt,sqs,endpoint,amqp,outbox,store,http,component,streams,kafka` picks groups,
//! `FERRY_BENCH_PLUGINS=filter,tenant` the plugins of the plugin-call rows;
//! `FERRY_BENCH_STORE_RATE_RECORDS` (default 20000) and
//! `FERRY_BENCH_STORE_RECORDS` (default 1000000) size the engine rows.

mod component;
mod engines;
mod http;
mod measure;
mod mqtt;
mod streams;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_core::metrics::Metrics;
use ferry_core::ports::Verdict;
use ferry_envelope::Envelope;
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::rabbit::Rabbit;
use ferry_tests::{env_or, unique};
use ferry_wasm::{PluginEngine, PluginLimits, WasmHeaderMapper, WasmProcessor};
use measure::{CpuWindow, DaemonWindow, Run};
use rumqttc::v5::mqttbytes::QoS;

fn messages() -> usize {
    env_or("FERRY_BENCH_MESSAGES", 20_000)
}

/// A JSON document of about `size` bytes that every payload-reading
/// plugin below finds its fields in.
fn json_payload(size: usize) -> Vec<u8> {
    let head = r#"{"reading":{"value":"21"},"type":"temp","card":"4111 1111 1111 1111","customer":{"email":"a@example.com","name":"Ann"},"pad":""#;
    let pad = size.saturating_sub(head.len() + 2);
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    out.resize(head.len() + pad, b'x');
    out.extend_from_slice(b"\"}");
    out
}

/// One plugin to time.
struct PluginRow {
    label: &'static str,
    plugin: &'static str,
    config: serde_json::Value,
    grants: ferry_wasm::Grants,
    mapper: bool,
    json: bool,
}

/// Average cost of one call, over at most 20,000 calls or about 1.5 s.
fn time_calls(mut call: impl FnMut()) -> f64 {
    let warm = Instant::now();
    for _ in 0..1_000 {
        call();
        if warm.elapsed() > Duration::from_millis(500) {
            break;
        }
    }
    let started = Instant::now();
    let mut n = 0u32;
    while n < 20_000 && (n < 20 || started.elapsed() < Duration::from_millis(1500)) {
        call();
        n += 1;
    }
    started.elapsed().as_secs_f64() * 1e9 / f64::from(n)
}

fn processor_rows() {
    let engine = match PluginEngine::new(PluginLimits::default()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot start the plugin engine: {e}");
            return;
        }
    };
    let none = ferry_wasm::Grants::default;
    let rows = [
        PluginRow {
            label: "filter (a header condition)",
            plugin: "filter",
            config: serde_json::json!({"when": [{"header": "kind", "op": "eq", "value": "temp"}]}),
            grants: none(),
            mapper: false,
            json: false,
        },
        PluginRow {
            label: "filter (a JSON field condition)",
            plugin: "filter",
            config: serde_json::json!({"when": [{"field": "reading.value", "op": "eq", "value": "21"}]}),
            grants: none(),
            mapper: false,
            json: true,
        },
        PluginRow {
            label: "transform (4 fields, 1 header)",
            plugin: "transform",
            config: serde_json::json!({
                "fields": [
                    {"to": "celsius", "from": "$.reading.value", "type": "number"},
                    {"to": "kind", "from": "$.type"},
                    {"to": "email", "from": "$.customer.email"},
                    {"to": "device", "from_header": "device-id", "default": "?"},
                ],
                "headers": [{"name": "kind", "from": "$.type"}],
            }),
            grants: none(),
            mapper: false,
            json: true,
        },
        PluginRow {
            label: "tenant (header, allow-list, stamp)",
            plugin: "tenant",
            config: serde_json::json!({"header": "org", "allow": ["acme", "globex"]}),
            grants: ferry_wasm::Grants { tenant_id: true, ..none() },
            mapper: false,
            json: false,
        },
        PluginRow {
            label: "circuitbreaker (closed, process only)",
            plugin: "circuitbreaker",
            config: serde_json::json!({"key_header": "org"}),
            grants: none(),
            mapper: false,
            json: false,
        },
        PluginRow {
            label: "header-map (rename prefix, set)",
            plugin: "header-map",
            config: serde_json::json!({"rename_prefix": [{"from": "app.", "to": "amqp10."}], "set": {"origin": "ferry"}}),
            grants: none(),
            mapper: true,
            json: false,
        },
        PluginRow {
            label: "redact, Python (2 JSON fields)",
            plugin: "redact",
            config: serde_json::json!({"fields": ["card", "customer.email"]}),
            grants: none(),
            mapper: false,
            json: true,
        },
        PluginRow {
            label: "enrich, JavaScript (3 headers)",
            plugin: "enrich",
            config: serde_json::json!({"set": {"region": "eu"}, "received_at": "at", "size": "bytes"}),
            grants: none(),
            mapper: false,
            json: false,
        },
    ];
    println!("\nOne plugin call (host side included: instance pool, message resource, metrics)");
    println!("  {:<44} {:>12} {:>12} {:>8}", "plugin", "1 KiB", "1 MiB", "ratio");
    // FERRY_BENCH_PLUGINS=filter times only that plugin's rows (to profile one).
    let only = std::env::var("FERRY_BENCH_PLUGINS").unwrap_or_default();
    for row in rows.into_iter().filter(|r| only.is_empty() || only.split(',').any(|p| p == r.plugin)) {
        let path: PathBuf = ferry_tests::plugin_file(row.plugin);
        let plugin = match ferry_wasm::registry::load_file(&engine, &path) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                eprintln!("  {}: {e}", row.label);
                continue;
            }
        };
        let envelope = |size: usize| {
            let payload = if row.json { json_payload(size) } else { vec![b'x'; size] };
            let mut e = Envelope::new("bench", payload);
            for (k, v) in [("kind", "temp"), ("org", "acme"), ("device-id", "d1"), ("app.site", "north")] {
                e.set_header(k, v);
            }
            e
        };
        let config = row.config.to_string();
        let per_call: Box<dyn Fn(usize) -> f64> = if row.mapper {
            match WasmHeaderMapper::new(&engine, plugin, "bench", config, Metrics::new()) {
                Ok(m) => Box::new(move |size| {
                    let original = envelope(size);
                    time_calls(|| {
                        let (_, result) = m.map_blocking(original.clone(), "b0", "out");
                        debug_assert!(result.is_ok());
                    })
                }),
                Err(e) => {
                    eprintln!("  {}: {e}", row.label);
                    continue;
                }
            }
        } else {
            match WasmProcessor::with_grants(&engine, plugin, "bench", config, row.grants, Metrics::new()) {
                Ok(p) => Box::new(move |size| {
                    let original = envelope(size);
                    time_calls(|| {
                        let (_, verdict) = p.process_blocking(original.clone());
                        debug_assert_eq!(verdict, Ok(Verdict::Pass));
                    })
                }),
                Err(e) => {
                    eprintln!("  {}: {e}", row.label);
                    continue;
                }
            }
        };
        let (small, large) = (per_call(1024), per_call(1 << 20));
        println!("  {:<44} {:>9.1} µs {:>9.1} µs {:>8.1}", row.label, small / 1000.0, large / 1000.0, large / small);
    }
}

fn sqs_messages() -> usize {
    env_or("FERRY_BENCH_SQS_MESSAGES", 300)
}

/// Fills a queue with `n` 1 KiB messages, ten per SendMessageBatch, four
/// batches at a time; returns msgs/s.
async fn sqs_fill(client: &aws_sdk_sqs::Client, url: &str, n: usize) -> f64 {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
    let body = "x".repeat(1024);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let batches: Vec<usize> = (0..n).step_by(10).collect();
    for chunk in batches.chunks(batches.len().div_ceil(4).max(1)) {
        let (client, url, body, chunk) = (client.clone(), url.to_owned(), body.clone(), chunk.to_vec());
        tasks.spawn(async move {
            for start in chunk {
                let entries = (start..(start + 10).min(n))
                    .filter_map(|i| {
                        SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(&body).build().ok()
                    })
                    .collect();
                let _ = client.send_message_batch().queue_url(&url).set_entries(Some(entries)).send().await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    n as f64 / started.elapsed().as_secs_f64()
}

/// Drains `n` messages the way a plain consumer would; returns msgs/s.
async fn sqs_drain(client: &aws_sdk_sqs::Client, url: &str, n: usize) -> f64 {
    use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
    let started = Instant::now();
    let mut done = 0;
    while done < n && started.elapsed() < Duration::from_secs(300) {
        let Ok(out) =
            client.receive_message().queue_url(url).max_number_of_messages(10).wait_time_seconds(1).send().await
        else {
            continue;
        };
        let messages = out.messages.unwrap_or_default();
        let entries: Vec<_> = messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle()?)
                    .build()
                    .ok()
            })
            .collect();
        if !entries.is_empty() {
            let _ = client.delete_message_batch().queue_url(url).set_entries(Some(entries)).send().await;
        }
        done += messages.len();
    }
    done as f64 / started.elapsed().as_secs_f64()
}

async fn queue_depth(client: &aws_sdk_sqs::Client, url: &str) -> usize {
    let (visible, _) = ferry_tests::sqs::depth(client, url).await;
    usize::try_from(visible).unwrap_or(0)
}

/// SQS -> MQTT: a queue pre-filled with `n` messages, drained by ferry
/// into MQTT.
async fn sqs_to_mqtt_run(client: &aws_sdk_sqs::Client, n: usize) -> Run {
    let (_, in_url) = ferry_tests::sqs::create_queue(client, "bench-in", false).await;
    sqs_fill(client, &in_url, n).await;
    let dst = unique("bench/sqs");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.q]
type = "sqs"
queue_url = "{in_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
[senders.m]
type = "mqtt"
url = "{mqtt}"
client_id = "{sid}"
[[routes]]
id = "sqs-mqtt"
receiver = "q"
max_in_flight = 100
[[routes.bindings]]
sender = "m"
address = "{dst}/out"
"#,
        endpoint = ferry_tests::sqs::endpoint(),
        mqtt = broker_url(),
        sid = unique("bench-m"),
    ));
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let started = Instant::now();
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 2));
    let ferry = DaemonWindow::start(&daemon);
    let mut got = 0;
    while got < n {
        match sub.next(Duration::from_secs(30)).await {
            Some(_) => got += 1,
            None => break,
        }
    }
    let rate = got as f64 / started.elapsed().as_secs_f64();
    if got < n {
        eprintln!("warning: only {got} of {n} crossed SQS -> MQTT");
    }
    let run = ferry.run(rate, got);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    let _ = client.delete_queue().queue_url(&in_url).send().await;
    run
}

/// MQTT -> SQS: publishes `n` messages through ferry until the queue holds
/// them all.
async fn mqtt_to_sqs_run(client: &aws_sdk_sqs::Client, n: usize) -> Run {
    /// Most messages between the publisher and the queue.
    const WINDOW: usize = 500;
    let (_, out_url) = ferry_tests::sqs::create_queue(client, "bench-out", false).await;
    let src = unique("bench/mq");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&ferry_tests::sqs::mqtt_to_sqs_config(&broker_url(), &src, &out_url, "", "max_in_flight = 100", ""));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 2));
    let ferry = DaemonWindow::start(&daemon);
    let publisher = TestMqtt::connect(&broker_url()).await;
    let payload = Bytes::from(vec![b'x'; 1024]);
    let started = Instant::now();
    let mut arrived = 0;
    for i in 0..n {
        if i % 100 == 0 {
            while i >= arrived + WINDOW && started.elapsed() < Duration::from_secs(300) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                arrived = queue_depth(client, &out_url).await;
            }
        }
        let _ = publisher.client.publish(format!("{src}/a"), QoS::AtLeastOnce, false, payload.clone()).await;
    }
    while queue_depth(client, &out_url).await < n && started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let arrived = queue_depth(client, &out_url).await;
    if arrived < n {
        eprintln!("warning: only {arrived} of {n} reached the queue");
    }
    let run = ferry.run(arrived as f64 / started.elapsed().as_secs_f64(), arrived);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    let _ = client.delete_queue().queue_url(&out_url).send().await;
    run
}

async fn sqs_rows() {
    let n = sqs_messages();
    let client = ferry_tests::sqs::client();
    let raw_fill = measure::median_of("sqs raw fill", || async {
        let (_, url) = ferry_tests::sqs::create_queue(&client, "bench-raw", false).await;
        let rate = sqs_fill(&client, &url, n).await;
        let _ = client.delete_queue().queue_url(&url).send().await;
        Run { rate, ..Run::default() }
    })
    .await;
    let raw_drain = measure::median_of("sqs raw drain", || async {
        let (_, url) = ferry_tests::sqs::create_queue(&client, "bench-raw", false).await;
        sqs_fill(&client, &url, n).await;
        let rate = sqs_drain(&client, &url, n).await;
        let _ = client.delete_queue().queue_url(&url).send().await;
        Run { rate, ..Run::default() }
    })
    .await;
    let sqs_to_mqtt = measure::median_of("sqs -> mqtt", || sqs_to_mqtt_run(&client, n)).await;
    let mqtt_to_sqs = measure::median_of("mqtt -> sqs", || mqtt_to_sqs_run(&client, n)).await;

    println!(
        "\nSQS (endpoint {}), 1 KiB bodies, {n} messages (median of {})",
        ferry_tests::sqs::endpoint(),
        measure::repeats()
    );
    measure::header("");
    measure::row("raw SDK drain (receive + delete batch)", &raw_drain);
    measure::row("SQS -> MQTT through ferry", &sqs_to_mqtt);
    measure::ratio("ratio ferry / raw drain", sqs_to_mqtt.rate / raw_drain.rate);
    measure::row("raw SDK fill (send batch x4)", &raw_fill);
    measure::row("MQTT -> SQS through ferry", &mqtt_to_sqs);
    measure::ratio("ratio ferry / raw fill", mqtt_to_sqs.rate / raw_fill.rate);
}

fn endpoint_messages() -> usize {
    env_or("FERRY_BENCH_ENDPOINT_MESSAGES", 300)
}

/// One fill (SendMessageBatch, four at a time) and one drain
/// (ReceiveMessage + DeleteMessageBatch) of `n` messages on a fresh queue
/// of the server `client` talks to; (fill, drain) in msgs/s, with the
/// daemon's CPU per message when `daemon` is the server.
async fn endpoint_round(client: &aws_sdk_sqs::Client, n: usize, daemon: Option<&Daemon>) -> (Run, Run) {
    let name = unique("bench-ep");
    let url = client.create_queue().queue_name(&name).send().await.expect("queue").queue_url.unwrap_or_default();
    let window = daemon.map(DaemonWindow::start);
    let fill = sqs_fill(client, &url, n).await;
    let fill = window.map_or(Run { rate: fill, ..Run::default() }, |w| w.run(fill, n));
    let window = daemon.map(DaemonWindow::start);
    let drain = sqs_drain(client, &url, n).await;
    let drain = window.map_or(Run { rate: drain, ..Run::default() }, |w| w.run(drain, n));
    let _ = client.delete_queue().queue_url(&url).send().await;
    (fill, drain)
}

/// A daemon serving `[endpoints.sqs]`, on `store` (more config before it),
/// and an SDK client for it.
fn endpoint_daemon(store: &str) -> (Workspace, Daemon, aws_sdk_sqs::Client) {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!("{store}[endpoints.sqs]\nlisten = \"{}\"\n", ferry_tests::daemon::ANY_PORT));
    let daemon = Daemon::start(&ws, 0);
    let listen = daemon.listener("sqs_endpoint", "sqs");
    let client = ferry_tests::sqs::client_for(&format!("http://{listen}"));
    (ws, daemon, client)
}

/// The SQS endpoint (issue 20): the same SDK loops against ferry's
/// `[endpoints.sqs]` (embedded store, every send committed; and on a
/// PostgreSQL store, where every instance serves the queues) and against
/// moto_server, in the same run.
async fn endpoint_rows() {
    let n = endpoint_messages();
    let db = ferry_tests::pg::TestDb::new().await;
    let (_ws, daemon, ferry) = endpoint_daemon("");
    let (_pg_ws, pg_daemon, on_pg) =
        endpoint_daemon(&format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\n\n", db.url));
    let moto = ferry_tests::sqs::client();
    let mut rounds: [(Vec<Run>, Vec<Run>); 3] = Default::default();
    for _ in 0..measure::repeats() {
        for (i, (client, daemon)) in
            [(&moto, None), (&ferry, Some(&daemon)), (&on_pg, Some(&pg_daemon))].into_iter().enumerate()
        {
            let (fill, drain) = endpoint_round(client, n, daemon).await;
            rounds[i].0.push(fill);
            rounds[i].1.push(drain);
        }
    }
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    let _ = tokio::task::block_in_place(|| pg_daemon.terminate());
    db.drop().await;
    let [(moto_fill, moto_drain), (ferry_fill, ferry_drain), (pg_fill, pg_drain)] =
        rounds.map(|(fill, drain)| (measure::median(&fill), measure::median(&drain)));
    println!(
        "\nSQS endpoint: the AWS SDK against ferry's [endpoints.sqs] and against moto ({}), 1 KiB bodies, {n} messages (median of {}); CPU is the daemon's (PostgreSQL's own is not counted)",
        ferry_tests::sqs::endpoint(),
        measure::repeats()
    );
    measure::header("");
    measure::row("moto: send batch x4", &moto_fill);
    measure::row("ferry endpoint: send batch x4", &ferry_fill);
    measure::row("ferry on PostgreSQL: send batch x4", &pg_fill);
    measure::ratio("ratio ferry / moto (send)", ferry_fill.rate / moto_fill.rate);
    measure::ratio("ratio on PostgreSQL / moto (send)", pg_fill.rate / moto_fill.rate);
    measure::row("moto: receive + delete batch", &moto_drain);
    measure::row("ferry endpoint: receive + delete batch", &ferry_drain);
    measure::row("ferry on PostgreSQL: receive + delete", &pg_drain);
    measure::ratio("ratio ferry / moto (receive + delete)", ferry_drain.rate / moto_drain.rate);
    measure::ratio("ratio on PostgreSQL / moto (receive)", pg_drain.rate / moto_drain.rate);
}

fn amqp_messages() -> usize {
    env_or("FERRY_BENCH_AMQP_MESSAGES", 20_000)
}

/// Messages in flight for ferry (prefetch and route window) and the shovel.
const AMQP_PREFETCH: usize = 256;

/// Publishes `n` 1 KiB persistent messages to `queue` with confirms
/// (pipelined) and returns the rate.
async fn amqp_fill(rabbit: &Rabbit, queue: &str, n: usize) -> f64 {
    let body = vec![b'x'; 1024];
    let properties = lapin::BasicProperties::default().with_delivery_mode(2);
    let started = Instant::now();
    let mut confirms = Vec::with_capacity(1024);
    for i in 0..n {
        let confirm = rabbit
            .channel
            .basic_publish(
                "".into(),
                queue.into(),
                lapin::options::BasicPublishOptions::default(),
                &body,
                properties.clone().with_message_id(format!("m-{i}").into()),
            )
            .await
            .expect("publish");
        confirms.push(confirm);
        if confirms.len() == 1024 || i + 1 == n {
            for c in confirms.drain(..) {
                assert!(c.await.expect("confirm").is_ack(), "broker nacked a bench message");
            }
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Consumes and acks `n` messages from `queue` and returns the rate.
async fn amqp_drain(rabbit: &Rabbit, queue: &str, n: usize) -> f64 {
    use futures_lite::StreamExt;
    let channel = rabbit.connection.create_channel().await.expect("channel");
    channel.basic_qos(AMQP_PREFETCH as u16, lapin::options::BasicQosOptions::default()).await.expect("qos");
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            lapin::options::BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .expect("consume");
    let started = Instant::now();
    let mut got = 0;
    while got < n {
        match tokio::time::timeout(Duration::from_secs(30), consumer.next()).await {
            Ok(Some(Ok(d))) => {
                d.ack(lapin::options::BasicAckOptions::default()).await.expect("ack");
                got += 1;
            }
            _ => break,
        }
    }
    let rate = got as f64 / started.elapsed().as_secs_f64();
    let _ = channel.close(200, "done".into()).await;
    rate
}

/// Waits until `queue` holds `n` messages; the rate since `started`.
async fn amqp_wait_depth(rabbit: &Rabbit, queue: &str, n: usize, started: Instant) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let depth = rabbit.depth(queue).await as usize;
        if depth >= n || Instant::now() > deadline {
            if depth < n {
                eprintln!("warning: only {depth} of {n} messages arrived in {queue}");
            }
            return depth as f64 / started.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `rabbitmqctl`; false (and a warning) when it failed.
fn rabbitmqctl(args: &[&str]) -> bool {
    let status = std::process::Command::new("rabbitmqctl").args(args).stdout(std::process::Stdio::null()).status();
    let ok = status.is_ok_and(|s| s.success());
    if !ok {
        eprintln!("warning: rabbitmqctl {args:?} failed (is rabbitmq_shovel enabled?)");
    }
    ok
}

/// RabbitMQ's CPU over a window (its `beam.smp`, when this machine runs it).
fn rabbit_cpu() -> CpuWindow {
    CpuWindow::start(measure::pid_of("beam.smp"))
}

/// The raw publish (with confirms) and consume (with acks) rates.
async fn raw_amqp_run(rabbit: &Rabbit, n: usize) -> (Run, Run) {
    let queue = unique("bench-raw");
    rabbit.declare_queue(&queue).await;
    let cpu = rabbit_cpu();
    let fill = Run { rate: amqp_fill(rabbit, &queue, n).await, broker_cpu_us: cpu.per_message(n), ..Run::default() };
    let cpu = rabbit_cpu();
    let drain = Run { rate: amqp_drain(rabbit, &queue, n).await, broker_cpu_us: cpu.per_message(n), ..Run::default() };
    rabbit.delete_queue(&queue).await;
    (fill, drain)
}

/// RabbitMQ's shovel moving a queue pre-filled with `n` messages.
async fn shovel_run(rabbit: &Rabbit, n: usize) -> Run {
    let (src, dst) = (unique("bench-shovel-src"), unique("bench-shovel-dst"));
    rabbit.declare_queue(&src).await;
    rabbit.declare_queue(&dst).await;
    amqp_fill(rabbit, &src, n).await;
    let name = unique("bench-shovel");
    let definition = format!(
        r#"{{"src-protocol":"amqp091","src-uri":"{url}","src-queue":"{src}","dest-protocol":"amqp091","dest-uri":"{url}","dest-queue":"{dst}","ack-mode":"on-confirm","src-prefetch-count":{AMQP_PREFETCH}}}"#,
        url = "amqp://guest:guest@127.0.0.1:5672/%2f",
    );
    let cpu = rabbit_cpu();
    let started = Instant::now();
    let (rate, broker_cpu_us) = if rabbitmqctl(&["set_parameter", "shovel", &name, &definition]) {
        let rate = amqp_wait_depth(rabbit, &dst, n, started).await;
        let cpu = cpu.per_message(n);
        rabbitmqctl(&["clear_parameter", "shovel", &name]);
        (rate, cpu)
    } else {
        (0.0, None)
    };
    rabbit.delete_queue(&src).await;
    rabbit.delete_queue(&dst).await;
    Run { rate, broker_cpu_us, ..Run::default() }
}

/// The least a bridge on lapin must do, in the bench's own process: consume
/// with the same prefetch, publish each message on a confirm channel, and
/// ack the source with `multiple` as the confirms come in (they come in
/// publish order). No routing, no mapping, no retries: the ceiling of this
/// client on this broker, measured in the same run. CPU µs is the bench
/// process's own.
async fn minimal_bridge_run(rabbit: &Rabbit, n: usize) -> Run {
    use futures_lite::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
    let (src, dst) = (unique("bench-lapin-src"), unique("bench-lapin-dst"));
    rabbit.declare_queue(&src).await;
    rabbit.declare_queue(&dst).await;
    amqp_fill(rabbit, &src, n).await;
    let broker = rabbit_cpu();
    let own = CpuWindow::start(Some(std::process::id()));
    let started = Instant::now();
    let url = ferry_tests::rabbit::URL091;
    let input = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await.expect("connect");
    let output = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await.expect("connect");
    let consume = input.create_channel().await.expect("channel");
    consume.basic_qos(AMQP_PREFETCH as u16, BasicQosOptions::default()).await.expect("qos");
    let publish = output.create_channel().await.expect("channel");
    publish.confirm_select(lapin::options::ConfirmSelectOptions::default()).await.expect("confirm.select");
    let mut consumer = consume
        .basic_consume(src.as_str().into(), "".into(), BasicConsumeOptions::default(), Default::default())
        .await
        .expect("consume");
    let (confirms, mut in_order) = tokio::sync::mpsc::channel::<(u64, lapin::PublisherConfirm)>(AMQP_PREFETCH * 2);
    let acker = tokio::spawn(async move {
        let mut done = 0;
        while done < n {
            let Some((tag, confirm)) = in_order.recv().await else {
                break;
            };
            if !matches!(confirm.await, Ok(c) if c.is_ack()) {
                break;
            }
            done += 1;
            if in_order.is_empty() || done == n {
                consume.basic_ack(tag, BasicAckOptions { multiple: true }).await.expect("ack");
            }
        }
        done
    });
    let mut consumed = 0;
    while consumed < n {
        let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_secs(30), consumer.next()).await else { break };
        consumed += 1;
        let confirm = publish
            .basic_publish("".into(), dst.as_str().into(), BasicPublishOptions::default(), &d.data, d.properties)
            .await
            .expect("publish");
        if confirms.send((d.delivery_tag, confirm)).await.is_err() {
            break;
        }
    }
    let moved = acker.await.unwrap_or(0);
    let rate = moved as f64 / started.elapsed().as_secs_f64();
    let run = Run { rate, cpu_us: own.per_message(n), broker_cpu_us: broker.per_message(n), ..Run::default() };
    let _ = input.close(200, "done".into()).await;
    let _ = output.close(200, "done".into()).await;
    rabbit.delete_queue(&src).await;
    rabbit.delete_queue(&dst).await;
    run
}

/// ferry moving a queue pre-filled with `n` messages to another, in `mode`.
async fn ferry_amqp_run(rabbit: &Rabbit, n: usize, mode: &str) -> Run {
    ferry_amqp_run_on(rabbit, n, mode, "").await
}

/// As [`ferry_amqp_run`], with `store` (a `[store]` table, or nothing for
/// the embedded default) in the config.
async fn ferry_amqp_run_on(rabbit: &Rabbit, n: usize, mode: &str, store: &str) -> Run {
    let (src, dst) = (unique("bench-src"), unique("bench-dst"));
    rabbit.declare_queue(&src).await;
    rabbit.declare_queue(&dst).await;
    amqp_fill(rabbit, &src, n).await;
    let run = ferry_queue_to_queue(rabbit, &src, &dst, n, mode, store).await;
    rabbit.delete_queue(&src).await;
    rabbit.delete_queue(&dst).await;
    run
}

async fn amqp_rows() {
    let n = amqp_messages();
    let rabbit = Rabbit::connect().await;
    let mut fills = Vec::new();
    let mut drains = Vec::new();
    for _ in 0..measure::repeats() {
        let (fill, drain) = raw_amqp_run(&rabbit, n).await;
        eprintln!("  amqp raw: publish {fill:?}, consume {drain:?}");
        fills.push(fill);
        drains.push(drain);
    }
    let (raw_fill, raw_drain) = (measure::median(&fills), measure::median(&drains));
    let shovel = measure::median_of("amqp shovel", || shovel_run(&rabbit, n)).await;
    let minimal = measure::median_of("amqp minimal lapin bridge", || minimal_bridge_run(&rabbit, n)).await;
    let ferry = measure::median_of("amqp ferry", || ferry_amqp_run(&rabbit, n, "direct_hold")).await;

    println!(
        "\nAMQP 0-9-1 queue -> queue on RabbitMQ, 1 KiB persistent, prefetch {AMQP_PREFETCH}, {n} messages (median of {})",
        measure::repeats()
    );
    measure::header("RabbitMQ µs");
    measure::row("raw publish with confirms", &raw_fill);
    measure::row("raw consume with acks", &raw_drain);
    measure::row("RabbitMQ shovel (ack-mode on-confirm)", &shovel);
    measure::row("minimal lapin bridge (no ferry)", &minimal);
    measure::row("ferry (confirm, then ack)", &ferry);
    measure::ratio("ratio ferry / shovel", ferry.rate / shovel.rate);
    measure::ratio("ratio ferry / minimal lapin bridge", ferry.rate / minimal.rate);
    measure::ratio("ratio ferry / raw consume", ferry.rate / raw_drain.rate);
    println!("  (RabbitMQ µs: the broker's CPU per message; for the shovel it includes the shovel)");
}

/// Runs ferry on an AMQP 0-9-1 queue -> queue route in `mode` until `dst`
/// holds `n` messages (`src` already holds them).
async fn ferry_queue_to_queue(rabbit: &Rabbit, src: &str, dst: &str, n: usize, mode: &str, store: &str) -> Run {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
{store}
[receivers.in]
type = "amqp091"
url = "{url}"
queue = "{src}"
prefetch = {AMQP_PREFETCH}
[senders.out]
type = "amqp091"
url = "{url}"
[[routes]]
id = "bench-amqp"
receiver = "in"
delivery_mode = "{mode}"
max_in_flight = {AMQP_PREFETCH}
[[routes.bindings]]
sender = "out"
address = "{dst}"
"#,
        url = ferry_tests::rabbit::URL091,
    ));
    let broker = rabbit_cpu();
    let started = Instant::now();
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 2));
    let ferry = DaemonWindow::start(&daemon);
    let rate = amqp_wait_depth(rabbit, dst, n, started).await;
    let run = Run { broker_cpu_us: broker.per_message(n), ..ferry.run(rate, n) };
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    run
}

/// The store's durable write rate: `n` one-record persists, one at a time
/// and `concurrency` at once (what group commit is for), on the embedded
/// store or (`postgres`) on a schema of its own in the test database.
async fn store_rate(n: usize, concurrency: usize, postgres: bool) -> f64 {
    use ferry_core::outbox::NewRecord;
    let dir = std::env::temp_dir().join(unique("ferry-bench-store"));
    let db = if postgres { Some(ferry_tests::pg::TestDb::new().await) } else { None };
    let engine = match &db {
        Some(db) => ferry_store::Engine::Postgres { url: db.url.clone(), pool_size: 8 },
        None => ferry_store::Engine::Embedded { dir: dir.clone() },
    };
    let store = ferry_store::open(&engine, ferry_store::StoreOptions::default()).await.expect("open the store");
    let payload = vec![b'x'; 1024];
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() >= concurrency {
            tasks.join_next().await;
        }
        let (store, payload) = (store.clone(), payload.clone());
        tasks.spawn(async move {
            let record = NewRecord {
                partition: "bench/out".into(),
                route: "bench".into(),
                binding: "out".into(),
                address: "q".into(),
                envelope: ferry_envelope::Envelope::new(format!("m-{i}"), payload),
            };
            store.persist(vec![record]).await.expect("persist");
        });
    }
    while tasks.join_next().await.is_some() {}
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(db) = db {
        db.drop().await;
    }
    rate
}

/// A `shared_outbox` run on a fresh PostgreSQL schema.
async fn ferry_amqp_postgres_run(rabbit: &Rabbit, n: usize) -> Run {
    let db = ferry_tests::pg::TestDb::new().await;
    let store = format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\n", db.url);
    let run = ferry_amqp_run_on(rabbit, n, "shared_outbox", &store).await;
    db.drop().await;
    run
}

async fn outbox_rows() {
    let n = amqp_messages();
    let mut persist = Vec::new();
    for (engine, postgres) in [("redb", false), ("PostgreSQL", true)] {
        let single = store_rate(n.min(2_000), 1, postgres).await;
        let grouped = store_rate(n, AMQP_PREFETCH, postgres).await;
        eprintln!("outbox: {engine} {single:.0} records/s one at a time, {grouped:.0} with {AMQP_PREFETCH} writers");
        persist.push((engine, single, grouped));
    }

    let rabbit = Rabbit::connect().await;
    let direct = measure::median_of("direct_hold", || ferry_amqp_run(&rabbit, n, "direct_hold")).await;
    let outbox = measure::median_of("shared_outbox", || ferry_amqp_run(&rabbit, n, "shared_outbox")).await;
    let postgres = measure::median_of("shared_outbox on PostgreSQL", || ferry_amqp_postgres_run(&rabbit, n)).await;

    println!("\nshared_outbox stores, 1 KiB records");
    for (engine, single, grouped) in persist {
        println!("  {:<50} {:>9.0} records/s", format!("{engine}: durable persist, one writer"), single);
        println!(
            "  {:<50} {:>9.0} records/s",
            format!("{engine}: durable persist, {AMQP_PREFETCH} writers (group commit)"),
            grouped
        );
    }
    println!(
        "  AMQP 0-9-1 queue -> queue, 1 KiB persistent, prefetch {AMQP_PREFETCH}, {n} messages (median of {})",
        measure::repeats()
    );
    measure::header("RabbitMQ µs");
    measure::row("direct_hold", &direct);
    measure::row("shared_outbox (redb)", &outbox);
    measure::row("shared_outbox (PostgreSQL)", &postgres);
    measure::ratio("ratio shared_outbox redb / direct_hold", outbox.rate / direct.rate);
    measure::ratio("ratio shared_outbox PostgreSQL / direct_hold", postgres.rate / direct.rate);
    measure::ratio("ratio shared_outbox PostgreSQL / redb", postgres.rate / outbox.rate);
}

/// `ferry-bench --engine NAME --records N --bulk M`: one engine of the store
/// comparison, in a process of its own (see [`engines`]).
fn engine_child() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let Some(name) = value("--engine") else { return false };
    let number = |flag: &str| value(flag).and_then(|v| v.parse().ok()).unwrap_or(0);
    engines::run_child(&name, number("--records"), number("--bulk"));
    true
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if engine_child() {
        return;
    }
    // FERRY_BENCH_ROWS=amqp,sqs runs only those groups (default: all).
    let only = std::env::var("FERRY_BENCH_ROWS").unwrap_or_default();
    let wanted = |group: &str| only.is_empty() || only.split(',').any(|g| g.trim() == group);
    if wanted("processor") {
        processor_rows();
    }
    if wanted("mqtt") {
        mqtt::rows(messages()).await;
    }
    if wanted("sqs") {
        sqs_rows().await;
    }
    if wanted("endpoint") {
        endpoint_rows().await;
    }
    if wanted("amqp") {
        amqp_rows().await;
    }
    // The store engines (issue 13): persist and claim/complete rates with
    // the outbox rows; RSS and disk use after a bulk fill with `store`.
    let records = env_or("FERRY_BENCH_STORE_RATE_RECORDS", 20_000);
    if wanted("store") {
        engines::rows(records, env_or("FERRY_BENCH_STORE_RECORDS", 1_000_000));
    } else if wanted("outbox") {
        engines::rows(records, 0);
    }
    if wanted("outbox") {
        outbox_rows().await;
    }
    if wanted("http") {
        http::rows(env_or("FERRY_BENCH_HTTP_MESSAGES", 20_000)).await;
    }
    if wanted("component") {
        component::rows(env_or("FERRY_BENCH_COMPONENT_MESSAGES", 3_000)).await;
    }
    if wanted("streams") {
        streams::rows(env_or("FERRY_BENCH_STREAM_MESSAGES", 10_000)).await;
    }
    if wanted("kafka") {
        streams::kafka_rows(env_or("FERRY_BENCH_STREAM_MESSAGES", 10_000)).await;
    }
}
