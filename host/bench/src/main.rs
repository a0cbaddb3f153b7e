//! `just bench`: measures ferry against the broker it runs beside, in the
//! same run, and prints ratios (never absolute pass/fail thresholds).
//!
//! 1. MQTT -> MQTT, QoS 1, 1 KiB payloads: the raw Mosquitto pub -> sub
//!    rate, then the same load through `ferry run` with the filter plugin
//!    (publisher -> source topic -> ferry -> target topic -> subscriber).
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
//! 4. AMQP 0-9-1 queue -> queue on RabbitMQ, 1 KiB persistent messages:
//!    ferry against RabbitMQ's own shovel (ack-mode on-confirm, same
//!    prefetch) on fresh queues of the same depth, and against the raw
//!    publish (with confirms) and consume (with acks) rates.
//!
//! 5. The outbox: the store's durable persist rates, and an AMQP 0-9-1
//!    route in `direct_hold` against the same in `shared_outbox`; the store
//!    engines (redb, fjall, and sled that redb replaced) side by side, and
//!    with `store` their RSS and disk use after 1,000,000 records (see
//!    [`engines`]).
//!
//! Sizes can be changed with `FERRY_BENCH_MESSAGES` (default 20000),
//! `FERRY_BENCH_SQS_MESSAGES` (default 300) and `FERRY_BENCH_AMQP_MESSAGES`
//! (default 20000); `FERRY_BENCH_ROWS=processor,mqtt,sqs,amqp,outbox,store` picks groups;
//! `FERRY_BENCH_STORE_RATE_RECORDS` (default 20000) and
//! `FERRY_BENCH_STORE_RECORDS` (default 1000000) size the engine rows.

mod engines;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

fn messages() -> usize {
    env_or("FERRY_BENCH_MESSAGES", 20_000)
}

/// Most messages published but not yet received. Mosquitto drops QoS 1
/// messages for a client whose queue passes `max_queued_messages` (1000 by
/// default), so the publisher keeps fewer than that outstanding; raw and
/// ferry runs use the same window.
const WINDOW: usize = 500;

/// Publishes `n` 1 KiB messages (QoS 1, `kind=temp`) to `publish_topic`
/// and returns the rate at which they arrive on `receive_filter`.
async fn pub_sub_rate(publish_topic: &str, receive_filter: &str, n: usize) -> f64 {
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(receive_filter).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let payload = Bytes::from(vec![b'x'; 1024]);
    let props = PublishProperties { user_properties: vec![("kind".into(), "temp".into())], ..Default::default() };
    let received = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let topic = publish_topic.to_owned();
    let client = publisher.client.clone();
    let seen = received.clone();
    let producer = tokio::spawn(async move {
        for i in 0..n {
            while i >= seen.load(Ordering::Relaxed) + WINDOW {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            if client
                .publish_with_properties(topic.clone(), QoS::AtLeastOnce, false, payload.clone(), props.clone())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let mut count = 0;
    while count < n {
        match sub.next(Duration::from_secs(10)).await {
            Some(_) => {
                count += 1;
                received.store(count, Ordering::Relaxed);
            }
            None => break,
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    producer.abort();
    if count < n {
        eprintln!("warning: only {count} of {n} messages arrived");
    }
    count as f64 / elapsed
}

async fn mqtt_rows() {
    let n = messages();
    let raw_topic = unique("bench/raw");
    let raw = pub_sub_rate(&raw_topic, &raw_topic, n).await;

    let (src, dst) = (unique("bench/src"), unique("bench/dst"));
    let ws = Workspace::with_plugins(&["filter"]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{url}"
client_id = "{rid}"
topics = ["{src}/#"]
session_expiry_secs = 60
[senders.out]
type = "mqtt"
url = "{url}"
client_id = "{sid}"
[[routes]]
id = "bench"
receiver = "in"
max_in_flight = 256
[[routes.processors]]
plugin = "filter"
config = {{ when = [{{ header = "kind", op = "eq", value = "temp" }}] }}
[[routes.bindings]]
sender = "out"
address = "{dst}/out"
"#,
        url = broker_url(),
        rid = unique("bench-in"),
        sid = unique("bench-out"),
    ));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 2));
    let pid = daemon.pid();
    let cpu_before = pid.and_then(process_cpu_seconds);
    let through = pub_sub_rate(&format!("{src}/a"), &format!("{dst}/#"), n).await;
    let cpu = pid.and_then(process_cpu_seconds).zip(cpu_before).map(|(after, before)| after - before);
    let peak = pid.and_then(peak_rss_mib);
    let _ = tokio::task::block_in_place(|| daemon.terminate());

    println!("\nMQTT -> MQTT, QoS 1, 1 KiB payloads, {n} messages");
    println!("  {:<44} {:>10.0} msgs/s", "raw Mosquitto pub -> sub", raw);
    println!("  {:<44} {:>10.0} msgs/s", "through ferry (filter plugin)", through);
    println!("  {:<44} {:>10.2}", "ratio ferry / raw", through / raw);
    if let Some(cpu) = cpu {
        println!("  {:<44} {:>10.1} µs", "ferry CPU per message", cpu * 1e6 / n as f64);
    }
    if let Some(peak) = peak {
        println!("  {:<44} {:>10.1} MiB", "ferry peak RSS", peak);
    }
}

/// User plus system CPU time a process has used, from `/proc/PID/stat`.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// A process's peak resident set (VmHWM) in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
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
    for row in rows {
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

async fn sqs_rows() {
    let n = sqs_messages();
    let client = ferry_tests::sqs::client();
    let (_, raw_url) = ferry_tests::sqs::create_queue(&client, "bench-raw", false).await;
    let raw_fill = sqs_fill(&client, &raw_url, n).await;
    eprintln!("sqs: raw fill {raw_fill:.0} msgs/s");
    let raw_drain = sqs_drain(&client, &raw_url, n).await;
    eprintln!("sqs: raw drain {raw_drain:.0} msgs/s");

    // SQS -> MQTT: a pre-filled queue drained by ferry into MQTT.
    let (_, in_url) = ferry_tests::sqs::create_queue(&client, "bench-in", false).await;
    sqs_fill(&client, &in_url, n).await;
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
    let mut got = 0;
    while got < n {
        match sub.next(Duration::from_secs(30)).await {
            Some(_) => got += 1,
            None => break,
        }
    }
    let sqs_to_mqtt = got as f64 / started.elapsed().as_secs_f64();
    eprintln!("sqs: {got} of {n} crossed SQS -> MQTT at {sqs_to_mqtt:.0} msgs/s");
    let _ = tokio::task::block_in_place(|| daemon.terminate());

    // MQTT -> SQS: publishes through ferry until the queue holds them all.
    let (_, out_url) = ferry_tests::sqs::create_queue(&client, "bench-out", false).await;
    let src = unique("bench/mq");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&ferry_tests::sqs::mqtt_to_sqs_config(&broker_url(), &src, &out_url, "", "max_in_flight = 100", ""));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 2));
    let publisher = TestMqtt::connect(&broker_url()).await;
    let payload = Bytes::from(vec![b'x'; 1024]);
    let started = Instant::now();
    let mut arrived = 0;
    for i in 0..n {
        // Keep fewer than WINDOW messages between the publisher and SQS.
        if i % 100 == 0 {
            while i >= arrived + WINDOW && started.elapsed() < Duration::from_secs(300) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                arrived = queue_depth(&client, &out_url).await;
            }
        }
        let _ = publisher.client.publish(format!("{src}/a"), QoS::AtLeastOnce, false, payload.clone()).await;
    }
    eprintln!("sqs: published {n} to MQTT after {:?}", started.elapsed());
    while queue_depth(&client, &out_url).await < n && started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("sqs: {} of {n} on the queue after {:?}", queue_depth(&client, &out_url).await, started.elapsed());
    let mqtt_to_sqs = queue_depth(&client, &out_url).await as f64 / started.elapsed().as_secs_f64();
    let _ = tokio::task::block_in_place(|| daemon.terminate());

    // The queues are the bench's own: remove them so a long-lived endpoint
    // does not slow down with every run.
    for url in [&raw_url, &in_url, &out_url] {
        let _ = client.delete_queue().queue_url(url.as_str()).send().await;
    }

    println!("\nSQS (endpoint {}), 1 KiB bodies, {n} messages", ferry_tests::sqs::endpoint());
    println!("  {:<44} {:>10.0} msgs/s", "raw SDK drain (receive + delete batch)", raw_drain);
    println!("  {:<44} {:>10.0} msgs/s", "SQS -> MQTT through ferry", sqs_to_mqtt);
    println!("  {:<44} {:>10.2}", "ratio ferry / raw drain", sqs_to_mqtt / raw_drain);
    println!("  {:<44} {:>10.0} msgs/s", "raw SDK fill (send batch x4)", raw_fill);
    println!("  {:<44} {:>10.0} msgs/s", "MQTT -> SQS through ferry", mqtt_to_sqs);
    println!("  {:<44} {:>10.2}", "ratio ferry / raw fill", mqtt_to_sqs / raw_fill);
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

fn rabbitmqctl(args: &[&str]) {
    let status = std::process::Command::new("rabbitmqctl").args(args).stdout(std::process::Stdio::null()).status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("warning: rabbitmqctl {args:?} failed (is rabbitmq_shovel enabled?)");
    }
}

async fn amqp_rows() {
    let n = amqp_messages();
    let rabbit = Rabbit::connect().await;
    let [raw, src, dst, shovel_src, shovel_dst] =
        ["raw", "src", "dst", "shovel-src", "shovel-dst"].map(|q| unique(&format!("bench-{q}")));
    for q in [&raw, &src, &dst, &shovel_src, &shovel_dst] {
        rabbit.declare_queue(q).await;
    }
    let raw_fill = amqp_fill(&rabbit, &raw, n).await;
    let raw_drain = amqp_drain(&rabbit, &raw, n).await;
    eprintln!("amqp: raw publish {raw_fill:.0} msgs/s, raw consume {raw_drain:.0} msgs/s");

    amqp_fill(&rabbit, &src, n).await;
    let through = ferry_queue_to_queue(&rabbit, &src, &dst, n, "direct_hold").await;
    eprintln!("amqp: ferry {through:.0} msgs/s");

    amqp_fill(&rabbit, &shovel_src, n).await;
    let name = unique("bench-shovel");
    let definition = format!(
        r#"{{"src-protocol":"amqp091","src-uri":"{url}","src-queue":"{shovel_src}","dest-protocol":"amqp091","dest-uri":"{url}","dest-queue":"{shovel_dst}","ack-mode":"on-confirm","src-prefetch-count":{AMQP_PREFETCH}}}"#,
        url = "amqp://guest:guest@127.0.0.1:5672/%2f",
    );
    let started = Instant::now();
    rabbitmqctl(&["set_parameter", "shovel", &name, &definition]);
    let shovel = amqp_wait_depth(&rabbit, &shovel_dst, n, started).await;
    rabbitmqctl(&["clear_parameter", "shovel", &name]);
    eprintln!("amqp: shovel {shovel:.0} msgs/s");
    for q in [&raw, &src, &dst, &shovel_src, &shovel_dst] {
        rabbit.delete_queue(q).await;
    }

    println!("\nAMQP 0-9-1 queue -> queue on RabbitMQ, 1 KiB persistent, prefetch {AMQP_PREFETCH}, {n} messages");
    println!("  {:<44} {:>10.0} msgs/s", "raw publish with confirms", raw_fill);
    println!("  {:<44} {:>10.0} msgs/s", "raw consume with acks", raw_drain);
    println!("  {:<44} {:>10.0} msgs/s", "RabbitMQ shovel (ack-mode on-confirm)", shovel);
    println!("  {:<44} {:>10.0} msgs/s", "through ferry (confirm, then ack)", through);
    println!("  {:<44} {:>10.2}", "ratio ferry / shovel", through / shovel);
    println!("  {:<44} {:>10.2}", "ratio ferry / raw consume", through / raw_drain);
}

/// Runs ferry on an AMQP 0-9-1 queue -> queue route in `mode` until `dst`
/// holds `n` messages (`src` already holds them); the rate.
async fn ferry_queue_to_queue(rabbit: &Rabbit, src: &str, dst: &str, n: usize, mode: &str) -> f64 {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
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
    let started = Instant::now();
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 2));
    let through = amqp_wait_depth(rabbit, dst, n, started).await;
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    through
}

/// The store's durable write rate: `n` one-record persists, one at a time
/// and `concurrency` at once (what group commit is for).
async fn store_rate(n: usize, concurrency: usize) -> f64 {
    use ferry_core::outbox::{NewRecord, OutboxStore};
    let dir = std::env::temp_dir().join(unique("ferry-bench-store"));
    let store = ferry_store::RedbStore::open(&dir, ferry_store::StoreOptions::default()).expect("open the store");
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
    rate
}

async fn outbox_rows() {
    let n = amqp_messages();
    let single = store_rate(n.min(2_000), 1).await;
    let grouped = store_rate(n, AMQP_PREFETCH).await;
    eprintln!("outbox: store {single:.0} records/s one at a time, {grouped:.0} with {AMQP_PREFETCH} writers");

    let rabbit = Rabbit::connect().await;
    let [direct_src, direct_dst, outbox_src, outbox_dst] =
        ["direct-src", "direct-dst", "outbox-src", "outbox-dst"].map(|q| unique(&format!("bench-{q}")));
    for q in [&direct_src, &direct_dst, &outbox_src, &outbox_dst] {
        rabbit.declare_queue(q).await;
    }
    amqp_fill(&rabbit, &direct_src, n).await;
    let direct = ferry_queue_to_queue(&rabbit, &direct_src, &direct_dst, n, "direct_hold").await;
    amqp_fill(&rabbit, &outbox_src, n).await;
    let outbox = ferry_queue_to_queue(&rabbit, &outbox_src, &outbox_dst, n, "shared_outbox").await;
    eprintln!("outbox: direct_hold {direct:.0} msgs/s, shared_outbox {outbox:.0} msgs/s");
    for q in [&direct_src, &direct_dst, &outbox_src, &outbox_dst] {
        rabbit.delete_queue(q).await;
    }

    println!("\nshared_outbox on redb, 1 KiB records");
    println!("  {:<44} {:>10.0} records/s", "durable persist, one writer", single);
    println!(
        "  {:<44} {:>10.0} records/s",
        format!("durable persist, {AMQP_PREFETCH} writers (group commit)"),
        grouped
    );
    println!("  {:<44} {:>10.0} msgs/s", "AMQP 0-9-1 queue -> queue, direct_hold", direct);
    println!("  {:<44} {:>10.0} msgs/s", "same route, shared_outbox", outbox);
    println!("  {:<44} {:>10.2}", "ratio shared_outbox / direct_hold", outbox / direct);
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
        mqtt_rows().await;
    }
    if wanted("sqs") {
        sqs_rows().await;
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
}
