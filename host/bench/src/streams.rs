//! The `streams` rows (issue 37), NATS JetStream stream -> stream and
//! Redis stream -> stream, and the `kafka` row (issue 38), topic -> topic,
//! through ferry, each against the raw client's
//! publish-with-ack and consume-with-ack rates on the same private server
//! in the same run, 1 KiB payloads. A bridge consumes and publishes every
//! message, so the slower of the two raw rates is the ceiling any bridge on
//! that server can reach; the goal is ferry at 0.8 of it or more. The
//! server's CPU per message is in the last column.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::kafka::{Kafka, PrivateKafka};
use ferry_tests::nats::PrivateNats;
use ferry_tests::redis::PrivateRedis;
use ferry_tests::unique;
use futures_lite::StreamExt as _;

use crate::measure::{self, CpuWindow, DaemonWindow, Run};

/// How long any one phase may take before the row gives up on it.
const PHASE: Duration = Duration::from_secs(300);

fn payload() -> bytes::Bytes {
    bytes::Bytes::from(vec![b'x'; 1024])
}

/// Publishes `n` messages to `subject`, at most 256 awaiting their
/// acknowledgement; msgs/s.
async fn nats_fill(js: &jetstream::Context, subject: &str, n: usize) -> f64 {
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for _ in 0..n {
        match js.publish(subject.to_owned(), payload()).await {
            Ok(ack) => pending.push_back(ack),
            Err(e) => eprintln!("publish to {subject}: {e}"),
        }
        if pending.len() >= 256
            && let Some(ack) = pending.pop_front()
        {
            let _ = ack.await;
        }
    }
    for ack in pending {
        let _ = ack.await;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Polls `count` until it reaches `n` (or a phase's time ran out) and says
/// when the first and the last message arrived after `started`, when the
/// daemon's admin server answered (its clients may still be connecting):
/// a slow start shows as a late first arrival, not as a low rate
/// throughout. What `count` says at the end.
async fn arrivals<F: std::future::Future<Output = usize>>(
    what: &str,
    n: usize,
    started: Instant,
    count: impl Fn() -> F,
) -> usize {
    let mut first = None;
    loop {
        let got = count().await;
        if got > 0 && first.is_none() {
            first = Some(started.elapsed());
        }
        if got >= n || started.elapsed() >= PHASE {
            eprintln!(
                "  {what}: the first message arrived {first:?} after the start, the last {:?}",
                started.elapsed()
            );
            return got;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A file-backed stream `name` on `subject`.
async fn nats_stream(js: &jetstream::Context, name: &str, subject: &str) -> Option<stream::Stream> {
    let config = stream::Config { name: name.to_owned(), subjects: vec![subject.to_owned()], ..Default::default() };
    js.create_stream(config).await.map_err(|e| eprintln!("create stream {name}: {e}")).ok()
}

async fn nats_count(js: &jetstream::Context, name: &str) -> usize {
    match js.get_stream(name).await {
        Ok(mut s) => s.info().await.map(|i| usize::try_from(i.state.messages).unwrap_or(0)).unwrap_or(0),
        Err(_) => 0,
    }
}

/// Consumes `n` messages of `stream` with a durable pull consumer,
/// acknowledging each; msgs/s.
async fn nats_drain(stream: &stream::Stream, n: usize) -> f64 {
    let config = consumer::pull::Config {
        durable_name: Some("raw".into()),
        ack_policy: consumer::AckPolicy::Explicit,
        ..Default::default()
    };
    let Ok(consumer) = stream.create_consumer(config).await else { return 0.0 };
    let Ok(mut messages) = consumer.messages().await else { return 0.0 };
    let started = Instant::now();
    let mut done = 0;
    while done < n && started.elapsed() < PHASE {
        match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
            Ok(Some(Ok(m))) => {
                let _ = m.ack().await;
                done += 1;
            }
            _ => break,
        }
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// The raw publish and consume rates, and the server's CPU per message
/// over both.
async fn nats_raw(server: &PrivateNats, js: &jetstream::Context, n: usize) -> (Run, Run) {
    let name = unique("RAW").replace('-', "_");
    let subject = format!("raw.{name}");
    let Some(stream) = nats_stream(js, &name, &subject).await else { return Default::default() };
    let cpu = CpuWindow::start(server.pid());
    let publish = nats_fill(js, &subject, n).await;
    let publish = Run { rate: publish, broker_cpu_us: cpu.per_message(n), ..Run::default() };
    let cpu = CpuWindow::start(server.pid());
    let consume = nats_drain(&stream, n).await;
    let consume = Run { rate: consume, broker_cpu_us: cpu.per_message(n), ..Run::default() };
    let _ = js.delete_stream(&name).await;
    (publish, consume)
}

/// ferry from a stream pre-filled with `n` messages to another.
async fn nats_ferry(server: &PrivateNats, js: &jetstream::Context, n: usize) -> Run {
    let (from, to) = (unique("IN").replace('-', "_"), unique("OUT").replace('-', "_"));
    let (from_subject, to_subject) = (format!("in.{from}"), format!("out.{to}"));
    if nats_stream(js, &from, &from_subject).await.is_none() || nats_stream(js, &to, &to_subject).await.is_none() {
        return Run::default();
    }
    nats_fill(js, &from_subject, n).await;
    let url = server.url();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\ntype = \"nats\"\nurl = \"{url}\"\nstream = \"{from}\"\n\
         [senders.out]\ntype = \"nats\"\nurl = \"{url}\"\nsubject = \"{to_subject}\"\n\
         [[routes]]\nid = \"bench\"\nreceiver = \"in\"\nmax_in_flight = 256\n[[routes.bindings]]\nsender = \"out\"\n"
    ));
    let broker = CpuWindow::start(server.pid());
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 0));
    let ferry = DaemonWindow::start(&daemon);
    let started = Instant::now();
    let got = arrivals("nats ferry", n, started, || nats_count(js, &to)).await;
    if got < n {
        eprintln!("warning: only {got} of {n} reached stream {to}");
    }
    let mut run = ferry.run(got as f64 / started.elapsed().as_secs_f64(), got);
    run.broker_cpu_us = broker.per_message(got);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    let _ = js.delete_stream(&from).await;
    let _ = js.delete_stream(&to).await;
    run
}

async fn nats_rows(n: usize) {
    let server = PrivateNats::start().await;
    let Ok(client) = async_nats::connect(server.url()).await else {
        eprintln!("cannot connect to the bench's nats-server");
        return;
    };
    let js = jetstream::new(client);
    let mut raws = (Vec::new(), Vec::new());
    for _ in 0..measure::repeats() {
        let (publish, consume) = nats_raw(&server, &js, n).await;
        eprintln!("  nats raw: publish {publish:?}, consume {consume:?}");
        raws.0.push(publish);
        raws.1.push(consume);
    }
    let ferry = measure::median_of("nats ferry", || nats_ferry(&server, &js, n)).await;
    print_rows("NATS JetStream stream -> stream", "nats-server", "raw consume, each acknowledged", n, &raws, &ferry);
}

/// A connection to the bench's Redis.
async fn redis_connect(url: &str) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).ok()?;
    client.get_multiplexed_async_connection().await.map_err(|e| eprintln!("connect to {url}: {e}")).ok()
}

/// Adds `n` entries (a `payload` field of 1 KiB) to `stream`, 100 per
/// pipeline; msgs/s.
async fn redis_fill(conn: &mut redis::aio::MultiplexedConnection, stream: &str, n: usize) -> f64 {
    let body = vec![b'x'; 1024];
    let started = Instant::now();
    let mut left = n;
    while left > 0 {
        let batch = left.min(100);
        let mut pipe = redis::pipe();
        for _ in 0..batch {
            pipe.cmd("XADD").arg(stream).arg("*").arg("payload").arg(&body[..]).ignore();
        }
        if let Err(e) = pipe.query_async::<()>(conn).await {
            eprintln!("XADD to {stream}: {e}");
            return 0.0;
        }
        left -= batch;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Reads `n` entries of `stream` in a consumer group, 100 per
/// XREADGROUP, each batch acknowledged with one XACK; msgs/s.
async fn redis_drain(conn: &mut redis::aio::MultiplexedConnection, stream: &str, n: usize) -> f64 {
    let created: redis::RedisResult<()> =
        redis::cmd("XGROUP").arg("CREATE").arg(stream).arg("raw").arg("0").query_async(conn).await;
    if let Err(e) = created {
        eprintln!("XGROUP CREATE {stream}: {e}");
        return 0.0;
    }
    let started = Instant::now();
    let mut done = 0;
    while done < n && started.elapsed() < PHASE {
        let reply: redis::RedisResult<redis::streams::StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("raw")
            .arg("c1")
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(1000)
            .arg("STREAMS")
            .arg(stream)
            .arg(">")
            .query_async(conn)
            .await;
        let ids: Vec<String> = match reply {
            Ok(r) => r.keys.into_iter().flat_map(|k| k.ids).map(|e| e.id).collect(),
            Err(e) => {
                eprintln!("XREADGROUP {stream}: {e}");
                break;
            }
        };
        if ids.is_empty() {
            break;
        }
        let acked: redis::RedisResult<i64> =
            redis::cmd("XACK").arg(stream).arg("raw").arg(&ids).query_async(conn).await;
        if acked.is_err() {
            break;
        }
        done += ids.len();
    }
    done as f64 / started.elapsed().as_secs_f64()
}

async fn redis_len(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> usize {
    redis::cmd("XLEN").arg(stream).query_async::<usize>(conn).await.unwrap_or(0)
}

async fn redis_raw(server: &PrivateRedis, conn: &mut redis::aio::MultiplexedConnection, n: usize) -> (Run, Run) {
    let stream = unique("raw");
    let cpu = CpuWindow::start(server.pid());
    let publish = redis_fill(conn, &stream, n).await;
    let publish = Run { rate: publish, broker_cpu_us: cpu.per_message(n), ..Run::default() };
    let cpu = CpuWindow::start(server.pid());
    let consume = redis_drain(conn, &stream, n).await;
    let consume = Run { rate: consume, broker_cpu_us: cpu.per_message(n), ..Run::default() };
    let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&stream).query_async(conn).await;
    (publish, consume)
}

async fn redis_ferry(server: &PrivateRedis, conn: &mut redis::aio::MultiplexedConnection, n: usize) -> Run {
    let (from, to) = (unique("in"), unique("out"));
    redis_fill(conn, &from, n).await;
    let url = server.url();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\ntype = \"redis_streams\"\nurl = \"{url}\"\nstream = \"{from}\"\ngroup = \"bench\"\n\
         [senders.out]\ntype = \"redis_streams\"\nurl = \"{url}\"\nstream = \"{to}\"\n\
         [[routes]]\nid = \"bench\"\nreceiver = \"in\"\nmax_in_flight = 256\n[[routes.bindings]]\nsender = \"out\"\n"
    ));
    let broker = CpuWindow::start(server.pid());
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 0));
    let ferry = DaemonWindow::start(&daemon);
    let started = Instant::now();
    let got = arrivals("redis ferry", n, started, || {
        let mut conn = conn.clone();
        let to = to.clone();
        async move { redis_len(&mut conn, &to).await }
    })
    .await;
    if got < n {
        eprintln!("warning: only {got} of {n} reached stream {to}");
    }
    let mut run = ferry.run(got as f64 / started.elapsed().as_secs_f64(), got);
    run.broker_cpu_us = broker.per_message(got);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&from).arg(&to).query_async(conn).await;
    run
}

async fn redis_rows(n: usize) {
    let server = PrivateRedis::start().await;
    let Some(mut conn) = redis_connect(&server.url()).await else { return };
    let mut raws = (Vec::new(), Vec::new());
    for _ in 0..measure::repeats() {
        let (publish, consume) = redis_raw(&server, &mut conn, n).await;
        eprintln!("  redis raw: publish {publish:?}, consume {consume:?}");
        raws.0.push(publish);
        raws.1.push(consume);
    }
    let ferry = measure::median_of("redis ferry", || {
        let mut conn = conn.clone();
        let server = &server;
        async move { redis_ferry(server, &mut conn, n).await }
    })
    .await;
    print_rows("Redis stream -> stream", "redis-server", "raw consume, one XACK per 100 read", n, &raws, &ferry);
}

fn print_rows(title: &str, server: &str, consume_label: &str, n: usize, raws: &(Vec<Run>, Vec<Run>), ferry: &Run) {
    let (publish, consume) = (measure::median(&raws.0), measure::median(&raws.1));
    println!("\n{title} on a private {server}, 1 KiB payloads, {n} messages (median of {})", measure::repeats());
    measure::header("server µs");
    measure::row("raw publish, each acknowledged", &publish);
    measure::row(consume_label, &consume);
    measure::row("ferry stream -> stream", ferry);
    let ceiling = publish.rate.min(consume.rate);
    if ceiling > 0.0 {
        measure::ratio("ferry / slower raw rate (goal >= 0.8)", ferry.rate / ceiling);
    }
}

/// `n` records of 1 KiB, each with an identity.
fn kafka_records(n: usize) -> Vec<(String, String)> {
    let body = "x".repeat(1024);
    (0..n).map(|i| (format!("m-{i}"), body.clone())).collect()
}

async fn kafka_raw(server: &PrivateKafka, kafka: &Kafka, n: usize) -> (Run, Run) {
    let topic = unique("raw");
    kafka.create_topic(&topic, 1).await;
    let records = kafka_records(n);
    let cpu = CpuWindow::start(server.pid());
    let started = Instant::now();
    kafka.produce_all(&topic, &records).await;
    let publish =
        Run { rate: n as f64 / started.elapsed().as_secs_f64(), broker_cpu_us: cpu.per_message(n), ..Run::default() };
    let cpu = CpuWindow::start(server.pid());
    let started = Instant::now();
    let got = kafka.consume_committing(&topic, n, PHASE).await;
    let consume = Run {
        rate: got as f64 / started.elapsed().as_secs_f64(),
        broker_cpu_us: cpu.per_message(got),
        ..Run::default()
    };
    (publish, consume)
}

async fn kafka_ferry(server: &PrivateKafka, kafka: &Kafka, n: usize) -> Run {
    let (from, to) = (unique("in"), unique("out"));
    kafka.create_topic(&from, 1).await;
    kafka.create_topic(&to, 1).await;
    kafka.produce_all(&from, &kafka_records(n)).await;
    let brokers = server.brokers();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\ntopics = [\"{from}\"]\ngroup = \"bench\"\n\
         [senders.out]\ntype = \"kafka\"\nbrokers = \"{brokers}\"\ntopic = \"{to}\"\n\
         [[routes]]\nid = \"bench\"\nreceiver = \"in\"\nmax_in_flight = 256\n[[routes.bindings]]\nsender = \"out\"\n"
    ));
    let broker = CpuWindow::start(server.pid());
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 0));
    let ferry = DaemonWindow::start(&daemon);
    // Timed until ferry acknowledged every record at the source, which it
    // does only after the target's delivery report (acks=all); then the
    // target topic is read back to count what is really there.
    let started = Instant::now();
    let admin = daemon.admin();
    let acked = || ferry_tests::http::counter(&admin, "ferry_messages_acked_total", "route=\"bench\"");
    while acked() < n as f64 && started.elapsed() < PHASE {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    let got = kafka.arrivals(&to, n, Duration::from_secs(60)).await;
    if got < n {
        eprintln!("warning: only {got} of {n} reached topic {to}");
    }
    let mut run = ferry.run(got as f64 / elapsed.as_secs_f64(), got);
    run.broker_cpu_us = broker.per_message(got);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    run
}

/// Kafka topic -> topic through ferry against the raw produce and
/// committing consume of the same client (rdkafka), on one private broker.
pub async fn kafka_rows(n: usize) {
    let server = PrivateKafka::start().await;
    let kafka = Kafka::new(&server.brokers());
    let mut raws = (Vec::new(), Vec::new());
    for _ in 0..measure::repeats() {
        let (publish, consume) = kafka_raw(&server, &kafka, n).await;
        eprintln!("  kafka raw: produce {publish:?}, consume {consume:?}");
        raws.0.push(publish);
        raws.1.push(consume);
    }
    let ferry = measure::median_of("kafka ferry", || kafka_ferry(&server, &kafka, n)).await;
    print_rows("Kafka topic -> topic", "tansu (memory storage)", "raw consume, committing every 100", n, &raws, &ferry);
}

pub async fn rows(n: usize) {
    nats_rows(n).await;
    redis_rows(n).await;
}
