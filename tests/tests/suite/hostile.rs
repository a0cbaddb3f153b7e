//! What a hostile publisher or peer sends, against the real daemon and real
//! brokers (issue 34):
//!
//! - forged reserved headers on every receiver, as the transport's own
//!   metadata and inside a JSON wire-format document: none survives an
//!   untrusted route, and a forged `x-bridge.generated-id` cannot make
//!   `unstable_identity = "fail"` dead-letter a message with a stable id;
//! - an AMQP 0-9-1 message whose `message_id` or header name is not UTF-8
//!   is taken off the queue and counted, and the messages behind it arrive;
//! - an AMQP 1.0 transfer that cannot be decoded, or that declares a binary
//!   of 4 GiB, is rejected at the peer and counted, and the link moves on;
//! - an HTTP target that answers an error with an endless body costs a few
//!   KiB, and the dead letter's reason still names the status; an SQS
//!   endpoint or a SimpleMQ API that answers without end is cut off at a
//!   bound and asked again;
//! - a SimpleMQ API that hands out ids made to climb out of the ack URL
//!   deletes only the message it named;
//! - the SQS endpoint refuses `MessageAttributes` that is not a map.
//!
//! The forged-header checks send every message to one webhook that
//! answers 503 first (so a message is retried, or redelivered by a source
//! that counts redeliveries) and then 200, with the JSON wire format, which
//! writes every header the message carries into the request body.

use std::collections::HashMap;
use std::time::Duration;

use fe2o3_amqp::types::messaging::{ApplicationProperties, Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::SimpleValue;
use ferry_tests::amqp_raw::{self, RawProperties};
use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::{get, wait_for_sample};
use ferry_tests::kafka::{Kafka, PrivateKafka};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::nats::{Nats, PrivateNats};
use ferry_tests::rabbit::{Amqp10Client, Rabbit, URL10, URL091};
use ferry_tests::redis::{PrivateRedis, Redis};
use ferry_tests::simplemq::{FakeSimpleMq, content};
use ferry_tests::webhook::{Hit, WebhookTarget, answer};
use ferry_tests::{eventually, sqs, unique};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// Every reserved header, each with a value a publisher made up.
const FORGED: &[(&str, &str)] = &[
    ("x-bridge.correlation-id", "forged-corr"),
    ("x-bridge.correlation-data", "Zm9yZ2Vk"),
    ("x-bridge.content-type", "forged/type"),
    ("x-bridge.generated-id", "true"),
    ("x-bridge.route-id", "forged-route"),
    ("x-bridge.source-id", "forged-source"),
    ("x-bridge.causation-id", "forged-cause"),
    ("x-bridge.tenant-id", "forged-tenant"),
    ("x-bridge.forwarded-from", "forged-bridge"),
    ("x-bridge.forwarded-hop", "99"),
    ("x-bridge.idempotency-key", "forged-idem"),
    ("x-bridge.dedup-id", "forged-dedup"),
    ("x-bridge.ordering-key", "forged-order"),
];

/// The route stamps these itself on every message.
const STAMPED: [&str; 1] = ["x-bridge.correlation-id"];

/// One forged-header run: the webhook every message goes to, the key its
/// script answers (503, then 200).
struct Forgery {
    target: WebhookTarget,
    key: String,
    /// The reserved headers this run forges.
    forged: &'static [(&'static str, &'static str)],
}

impl Forgery {
    async fn start() -> Self {
        Self::forging(FORGED).await
    }

    /// A run that forges only `forged` (SQS carries at most ten message
    /// attributes, so an SQS publisher forges them in two messages).
    async fn forging(forged: &'static [(&'static str, &'static str)]) -> Self {
        let target = WebhookTarget::start().await;
        let key = unique("forged");
        target.script(&key, &[answer(503, None)]);
        Self { target, key, forged }
    }

    /// The headers to forge as native metadata: the reserved names of
    /// this run, and `script` (which the HTTP sender writes as
    /// `x-ferry-script`).
    fn headers(&self) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> =
            self.forged.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        h.push(("script".into(), self.key.clone()));
        h
    }

    /// A JSON wire-format document carrying the forged headers (the
    /// generated-id mark as a JSON boolean, as ferry writes it).
    fn document(&self) -> Value {
        let mut headers: serde_json::Map<String, Value> =
            self.forged.iter().map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned()))).collect();
        headers.insert("x-bridge.generated-id".into(), Value::Bool(true));
        headers.insert("script".into(), Value::String(self.key.clone()));
        json!({ "headers": headers, "body": "hello" })
    }

    /// `receiver` (the body of `[receivers.in]`) to the webhook, on an
    /// untrusted route that fails an unstable identity at its first retry.
    fn config(&self, receiver: &str, extra: &str) -> String {
        with_admin(
            ANY_PORT,
            format!(
                r#"{extra}
[receivers.in]
{receiver}

[senders.hook]
type = "http"
url = "{hook}"
wire_format = "json"
timeout_ms = 3000

[[routes]]
id = "hostile"
receiver = "in"
unstable_identity = "fail"
max_replay_attempts = 5
[routes.backoff]
initial_ms = 50
max_ms = 200

[[routes.bindings]]
sender = "hook"
"#,
                hook = self.target.url("/in"),
            ),
        )
    }

    /// Starts the daemon on `config` and waits for `/readyz`.
    async fn daemon(&self, ws: &Workspace) -> Daemon {
        Daemon::start(ws, 1)
    }

    /// The message reached the webhook after one 503, without one forged
    /// header, and nothing was dead-lettered.
    async fn check(&self, ws: &Workspace, daemon: Daemon, what: &str) {
        let key = self.key.clone();
        let hits = self.target.wait_for(2, WAIT, move |h: &Hit| h.header("x-ferry-script") == Some(key.as_str())).await;
        assert_eq!(
            hits.len(),
            2,
            "{what}: a 503, then delivered (a forged generated-id would dead-letter it): {hits:?}"
        );
        let doc: Value = serde_json::from_slice(&hits[1].body).expect("the JSON wire format");
        let headers = doc["headers"].as_object().expect("headers");
        for (name, forged) in self.forged {
            let got = headers.get(*name);
            assert_ne!(got.and_then(Value::as_str), Some(*forged), "{what}: {name} was forged through");
            if !STAMPED.contains(name) && *name != "x-bridge.content-type" {
                assert!(got.is_none(), "{what}: {name} should be stripped, is {got:?}");
            }
        }
        assert_eq!(doc["body"], "hello", "{what}");
        assert!(daemon.terminate().success(), "{what}: clean stop");
        assert_eq!(ws.dead_letters().len(), 0, "{what}: nothing dead-lettered");
    }
}

fn mqtt_receiver(topic: &str, extra: &str) -> String {
    format!(
        "type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{topic}\"]\nreconnect_initial_ms = 100\n{extra}",
        broker_url(),
        unique("hostile-in")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_publishers_cannot_forge_reserved_headers() {
    for wire in [false, true] {
        let f = Forgery::start().await;
        let topic = unique("hostile/mqtt");
        let ws = Workspace::with_plugins(&[]);
        ws.config(&f.config(&mqtt_receiver(&topic, if wire { "wire_format = \"json\"" } else { "" }), ""));
        let daemon = f.daemon(&ws).await;
        let client = TestMqtt::connect(&broker_url()).await;
        if wire {
            client.publish_with(&topic, &f.document().to_string(), &[("mqtt.message-id", "m-1")]).await;
        } else {
            let headers = f.headers();
            let mut user: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            user.push(("mqtt.message-id", "m-1"));
            client.publish_with(&topic, "hello", &user).await;
        }
        f.check(&ws, daemon, if wire { "MQTT, JSON wire format" } else { "MQTT user properties" }).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp091_publishers_cannot_forge_reserved_headers() {
    let rabbit = Rabbit::connect().await;
    for wire in [false, true] {
        let f = Forgery::start().await;
        let queue = unique("hostile-091");
        rabbit.declare_queue(&queue).await;
        let receiver = format!(
            "type = \"amqp091\"\nurl = \"{URL091}\"\nqueue = \"{queue}\"\nreconnect_initial_ms = 100\n{}",
            if wire { "wire_format = \"json\"" } else { "" }
        );
        let ws = Workspace::with_plugins(&[]);
        ws.config(&f.config(&receiver, ""));
        let daemon = f.daemon(&ws).await;
        let props = BasicProperties::default().with_message_id("m-091".into());
        if wire {
            rabbit.publish("", &queue, f.document().to_string().as_bytes(), props).await;
        } else {
            let mut headers = FieldTable::default();
            for (k, v) in f.headers() {
                headers.insert(k.as_str().into(), AMQPValue::LongString(v.as_str().into()));
            }
            rabbit.publish("", &queue, b"hello", props.with_headers(headers)).await;
        }
        f.check(&ws, daemon, if wire { "AMQP 0-9-1, JSON wire format" } else { "AMQP 0-9-1 headers" }).await;
        rabbit.delete_queue(&queue).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp10_publishers_cannot_forge_reserved_headers() {
    let rabbit = Rabbit::connect().await;
    for wire in [false, true] {
        let f = Forgery::start().await;
        let queue = unique("hostile-10");
        rabbit.declare_queue(&queue).await;
        let receiver = format!(
            "type = \"amqp10\"\nurl = \"{URL10}\"\naddress = \"/amq/queue/{queue}\"\nreconnect_initial_ms = 100\n{}",
            if wire { "wire_format = \"json\"" } else { "" }
        );
        let ws = Workspace::with_plugins(&[]);
        ws.config(&f.config(&receiver, ""));
        let daemon = f.daemon(&ws).await;
        let properties = Properties { message_id: Some(MessageId::String("m-10".into())), ..Default::default() };
        let mut app = ApplicationProperties::builder();
        if !wire {
            for (k, v) in f.headers() {
                app = app.insert(k, SimpleValue::String(v));
            }
        }
        let body = if wire { f.document().to_string() } else { "hello".to_owned() };
        let message = Message::builder()
            .properties(properties)
            .application_properties(app.build())
            .data(body.into_bytes())
            .build();
        let mut client = Amqp10Client::connect(URL10).await;
        client.send(&format!("/amq/queue/{queue}"), message).await;
        client.close().await;
        f.check(&ws, daemon, if wire { "AMQP 1.0, JSON wire format" } else { "AMQP 1.0 application properties" }).await;
        rabbit.delete_queue(&queue).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_senders_cannot_forge_reserved_headers() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (first, second) = FORGED.split_at(FORGED.len() / 2);
    for (wire, forged) in [(false, first), (false, second), (true, FORGED)] {
        let f = Forgery::forging(forged).await;
        let (_, url) = sqs::create_queue(&client, "hostile", false).await;
        let receiver = format!(
            "type = \"sqs\"\nqueue_url = \"{url}\"\nendpoint_url = \"{}\"\nwait_time_seconds = 1\n{}",
            sqs::endpoint(),
            if wire { "wire_format = \"json\"" } else { "" }
        );
        let ws = Workspace::with_plugins(&[]);
        ws.config(&f.config(&receiver, ""));
        let daemon = f.daemon(&ws).await;
        if wire {
            sqs::send(&client, &url, &f.document().to_string(), HashMap::new()).await;
        } else {
            let attributes: HashMap<_, _> = f.headers().into_iter().map(|(k, v)| (k, sqs::text(&v))).collect();
            sqs::send(&client, &url, "hello", attributes).await;
        }
        f.check(&ws, daemon, if wire { "SQS, JSON wire format" } else { "SQS message attributes" }).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_endpoint_senders_cannot_forge_reserved_headers() {
    let (first, second) = FORGED.split_at(FORGED.len() / 2);
    for (wire, forged) in [(false, first), (false, second), (true, FORGED)] {
        let f = Forgery::forging(forged).await;
        let listen = ANY_PORT;
        let queue = unique("hostile-ep");
        let endpoint = format!("[endpoints.sqs]\nlisten = \"{listen}\"\n[endpoints.sqs.queues.\"{queue}\"]\n");
        let receiver = format!(
            "type = \"sqs_endpoint\"\nqueue = \"{queue}\"\n{}",
            if wire { "wire_format = \"json\"" } else { "" }
        );
        let ws = Workspace::with_plugins(&[]);
        ws.config(&f.config(&receiver, &endpoint));
        let daemon = f.daemon(&ws).await;
        let listen = daemon.listener("sqs_endpoint", "sqs");
        let client = sqs::client_for(&format!("http://{listen}"));
        let url = client.get_queue_url().queue_name(&queue).send().await.expect("queue url").queue_url.expect("url");
        if wire {
            sqs::send(&client, &url, &f.document().to_string(), HashMap::new()).await;
        } else {
            let attributes: HashMap<_, _> = f.headers().into_iter().map(|(k, v)| (k, sqs::text(&v))).collect();
            sqs::send(&client, &url, "hello", attributes).await;
        }
        f.check(&ws, daemon, if wire { "SQS endpoint, JSON wire format" } else { "SQS endpoint attributes" }).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn http_callers_cannot_forge_reserved_headers() {
    for wire in [false, true] {
        let f = Forgery::start().await;
        let receiver = format!(
            "type = \"http\"\nlisten = \"{ANY_PORT}\"\npath = \"/in\"\n{}",
            if wire { "wire_format = \"json\"" } else { "" }
        );
        let ws = Workspace::with_plugins(&[]);
        ws.config(&f.config(&receiver, ""));
        let daemon = f.daemon(&ws).await;
        let mut request = reqwest::Client::new()
            .post(format!("{}/in", daemon.http_url("in")))
            .header("idempotency-key", unique("http-id"))
            .header("content-type", "text/plain");
        let body = if wire {
            f.document().to_string()
        } else {
            for (k, v) in f.headers() {
                request = request.header(format!("x-ferry-{k}"), v);
            }
            "hello".to_owned()
        };
        // The caller hears 503 while the webhook fails, and sends again after
        // its Retry-After, as a webhook caller does; the same idempotency
        // key keeps its identity.
        let request = request.body(body).timeout(WAIT);
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let reply = request.try_clone().expect("a body that clones").send().await.expect("POST");
            statuses.push(reply.status().as_u16());
            if reply.status() == 200 {
                break;
            }
            let wait = reply.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait.min(10))).await;
        }
        assert_eq!(statuses.last(), Some(&200), "accepted once the webhook took it: {statuses:?}");
        f.check(&ws, daemon, if wire { "HTTP, JSON wire format" } else { "HTTP X-Ferry- headers" }).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn simplemq_producers_cannot_forge_reserved_headers() {
    let f = Forgery::start().await;
    let smq = FakeSimpleMq::start(Duration::from_secs(30)).await;
    let queue = unique("hostile-smq");
    smq.create_queue(&queue, "key");
    let receiver = format!(
        "type = \"simplemq\"\nqueue = \"{queue}\"\napi_key = \"key\"\napi_url = \"{}\"\npolling_interval_ms = 100",
        smq.url()
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&f.config(&receiver, ""));
    let daemon = f.daemon(&ws).await;
    smq.put(&queue, &content(&f.document()));
    f.check(&ws, daemon, "SimpleMQ, JSON wire format").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_stream_producers_cannot_forge_reserved_headers() {
    let f = Forgery::start().await;
    let server = PrivateRedis::start().await;
    let redis = Redis::connect(&server.url()).await;
    let stream = unique("hostile-redis");
    let receiver =
        format!("type = \"redis_streams\"\nurl = \"{}\"\nstream = \"{stream}\"\ngroup = \"bridge\"", server.url());
    let ws = Workspace::with_plugins(&[]);
    ws.config(&f.config(&receiver, ""));
    let daemon = f.daemon(&ws).await;
    // Every reserved name as a field of the entry, beside its identity.
    let id = unique("redis-id");
    let headers = f.headers();
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    redis.add_message(&stream, &id, "hello", &headers).await;
    f.check(&ws, daemon, "Redis Streams fields").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sse_servers_cannot_forge_reserved_headers() {
    use std::io::{Read, Write};
    let f = Forgery::start().await;
    // A stream whose one event carries every reserved header in its
    // wire-format document; each connection gets it (a reconnection's
    // repeat is left out by its id) and stays open until ferry hangs up.
    let listener = std::net::TcpListener::bind(ANY_PORT).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let event = format!("id: {}\ndata: {}\n\n", unique("sse-id"), f.document());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let event = event.clone();
            std::thread::spawn(move || {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
                let _ = stream.write_all(event.as_bytes());
                while stream.read(&mut head).is_ok_and(|n| n > 0) {}
            });
        }
    });
    let receiver = format!("type = \"sse\"\nurl = \"http://{addr}/stream\"\nreconnect_initial_ms = 50");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&f.config(&receiver, ""));
    let daemon = f.daemon(&ws).await;
    // The 503 is a release: the message comes again from ferry's memory.
    f.check(&ws, daemon, "SSE, JSON wire format").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_cannot_forge_reserved_headers() {
    let f = Forgery::start().await;
    let broker = PrivateKafka::start().await;
    let kafka = Kafka::new(&broker.brokers());
    let topic = unique("hostile-kafka");
    kafka.create_topic(&topic, 1).await;
    let receiver = format!(
        "type = \"kafka\"\nbrokers = \"{}\"\ntopics = [\"{topic}\"]\ngroup = \"{}\"",
        broker.brokers(),
        unique("bridge")
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&f.config(&receiver, ""));
    let daemon = f.daemon(&ws).await;
    // Every reserved name as a record header, beside the identity.
    let id = unique("kafka-id");
    let headers = f.headers();
    let mut headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())).collect();
    headers.push(("message_id", id.as_bytes()));
    kafka.produce(&topic, None, b"hello", &headers).await;
    f.check(&ws, daemon, "Kafka record headers").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_publishers_cannot_forge_reserved_headers() {
    let f = Forgery::start().await;
    let server = PrivateNats::start().await;
    let nats = Nats::connect(&server.url()).await;
    let stream = unique("hostile-nats");
    nats.stream(&stream, &[&format!("{stream}.>")]).await;
    let receiver = format!("type = \"nats\"\nurl = \"{}\"\nstream = \"{stream}\"", server.url());
    let ws = Workspace::with_plugins(&[]);
    ws.config(&f.config(&receiver, ""));
    let daemon = f.daemon(&ws).await;
    // Every reserved name as a NATS header, beside the message's identity.
    let id = unique("nats-id");
    let headers = f.headers();
    let mut headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    headers.push(("Nats-Msg-Id", &id));
    nats.publish(&format!("{stream}.x"), "hello", &headers).await;
    f.check(&ws, daemon, "NATS headers").await;
}

/// The forged headers are a trusted route's to keep (a bridge-to-bridge
/// link), but for the generated-id mark: an SQS to SQS hop keeps the
/// upstream correlation id and tenant.
#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_sqs_link_keeps_the_upstream_correlation_id() {
    sqs::require_aws_env();
    let client = sqs::client();
    let (_, src) = sqs::create_queue(&client, "trusted-in", false).await;
    let (_, dst) = sqs::create_queue(&client, "trusted-out", false).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\ntype = \"sqs\"\nqueue_url = \"{src}\"\nendpoint_url = \"{e}\"\nwait_time_seconds = 1\n\
         [senders.out]\ntype = \"sqs\"\nqueue_url = \"{dst}\"\nendpoint_url = \"{e}\"\n\
         [[routes]]\nid = \"link\"\nreceiver = \"in\"\ntrust_bridge_headers = true\n[[routes.bindings]]\nsender = \"out\"\n",
        e = sqs::endpoint()
    ));
    let daemon = Daemon::start(&ws, 2);
    let attributes: HashMap<_, _> = [
        ("x-bridge.correlation-id", "upstream-corr"),
        ("x-bridge.tenant-id", "acme"),
        ("x-bridge.generated-id", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), sqs::text(v)))
    .collect();
    sqs::send(&client, &src, "hello", attributes).await;
    let got = sqs::receive(&client, &dst, WAIT).await;
    let m = got.first().expect("crossed the link");
    assert_eq!(sqs::attribute(m, "x-bridge.correlation-id"), Some("upstream-corr"));
    assert_eq!(sqs::attribute(m, "x-bridge.tenant-id"), Some("acme"));
    assert_eq!(sqs::attribute(m, "x-bridge.generated-id"), None, "never a publisher's to set");
    assert!(daemon.terminate().success());
}

/// A message whose `message_id`, or a header name, is not UTF-8 used to
/// fail the frame parse: the receiver reconnected and RabbitMQ redelivered
/// it for ever, and the messages behind it never arrived.
#[tokio::test(flavor = "multi_thread")]
async fn an_amqp091_message_that_is_not_utf8_is_rejected_and_the_queue_moves_on() {
    let rabbit = Rabbit::connect().await;
    let queue = unique("poison-091");
    let dead = unique("poison-091-dlq");
    rabbit.declare_queue(&dead).await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    arguments.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(dead.as_str().into()));
    rabbit.declare_queue_with(&queue, arguments).await;
    let target = WebhookTarget::start().await;
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\ntype = \"amqp091\"\nurl = \"{URL091}\"\nqueue = \"{queue}\"\nqueue_passive = true\n\
             reconnect_initial_ms = 100\n[senders.hook]\ntype = \"http\"\nurl = \"{}\"\n\
             [[routes]]\nid = \"poison\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"hook\"\n",
            target.url("/in")
        ),
    ));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let broker = "127.0.0.1:5672";
    let bad_id = RawProperties { message_id: Some(b"id-\xff\xfe".to_vec()), headers: Vec::new() };
    let bad_header =
        RawProperties { message_id: Some(b"id-2".to_vec()), headers: vec![(b"k\xc3\x28".to_vec(), b"v".to_vec())] };
    amqp_raw::publish(broker, &queue, b"poison-1", &bad_id).await;
    amqp_raw::publish(broker, &queue, b"poison-2", &bad_header).await;
    for i in 0..3 {
        let ok = RawProperties { message_id: Some(format!("good-{i}").into_bytes()), headers: Vec::new() };
        amqp_raw::publish(broker, &queue, format!("good-{i}").as_bytes(), &ok).await;
    }
    let hits = target.wait_for(3, WAIT, |_| true).await;
    // The route sends concurrently: arrival order is not the queue's.
    let mut bodies: Vec<String> = hits.iter().map(|h| String::from_utf8_lossy(&h.body).into_owned()).collect();
    bodies.sort();
    assert_eq!(bodies, ["good-0", "good-1", "good-2"], "the good messages behind the poison arrive, once each");
    wait_for_sample(&admin, "ferry_ingress_rejected_total", "reason=\"undecodable\"", 2.0, WAIT);
    let dead_letters = rabbit.collect(&dead, 2, WAIT).await;
    let mut dead_bodies: Vec<Vec<u8>> = dead_letters.iter().map(|d| d.data.clone()).collect();
    dead_bodies.sort();
    assert_eq!(dead_bodies, [b"poison-1".to_vec(), b"poison-2".to_vec()], "both taken off into the dead-letter queue");
    let metrics = ferry_tests::http::metrics(&admin);
    let connections =
        ferry_tests::http::sample(&metrics, "ferry_transport_connections_total", "name=\"in\"").unwrap_or(0.0);
    assert_eq!(connections, 1.0, "no reconnect loop: the first connection took everything");
    assert_eq!(rabbit.depth(&queue).await, 0);
    assert!(daemon.terminate().success());
    assert_eq!(target.hits().len(), 3, "nothing more arrived");
    rabbit.delete_queue(&queue).await;
    rabbit.delete_queue(&dead).await;
}

/// An AMQP 1.0 peer whose transfers cannot be decoded: a data section
/// holding text that is not UTF-8, and one whose binary declares 4 GiB in a
/// frame of a few dozen bytes. Each is rejected at the peer with
/// `amqp:decode-error` and counted, the messages behind them arrive on the
/// same link, and the receiver never reserves the memory the peer declared
/// (serde_amqp allocated it before finding the bytes missing).
#[tokio::test(flavor = "multi_thread")]
async fn an_amqp10_transfer_that_cannot_be_decoded_is_rejected_and_the_link_moves_on() {
    use ferry_tests::amqp10_peer::{POISON_HUGE, POISON_TEXT, ScriptedSource};
    let bodies =
        vec![b"good-0".to_vec(), POISON_HUGE.to_vec(), POISON_TEXT.to_vec(), b"good-1".to_vec(), b"good-2".to_vec()];
    let source = ScriptedSource::start(bodies.clone()).await;
    let target = WebhookTarget::start().await;
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\ntype = \"amqp10\"\nurl = \"{}\"\naddress = \"poison\"\nreconnect_initial_ms = 100\n\
             [senders.hook]\ntype = \"http\"\nurl = \"{}\"\n\
             [[routes]]\nid = \"poison\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"hook\"\n",
            source.url(),
            target.url("/in")
        ),
    ));
    let daemon = Daemon::start(&ws, 0);
    let admin = daemon.admin();
    let ready = admin.clone();
    eventually("/readyz answers 200", move || get(&ready, "/readyz").is_ok_and(|(s, _)| s == 200)).await;
    let pid = daemon.pid().expect("running");
    let peak_before = vm_peak_kib(pid);
    source.go();
    let hits = target.wait_for(3, WAIT, |_| true).await;
    let mut got: Vec<String> = hits.iter().map(|h| String::from_utf8_lossy(&h.body).into_owned()).collect();
    got.sort();
    assert_eq!(got, ["good-0", "good-1", "good-2"], "the messages behind the poison arrive, once each");
    wait_for_sample(&admin, "ferry_ingress_rejected_total", "reason=\"undecodable\"", 2.0, WAIT);
    let log = source.log.clone();
    let n = bodies.len();
    eventually("every scripted message settled", move || log.lock().is_ok_and(|l| l.len() == n)).await;
    for (body, outcome) in &source.outcomes() {
        if body.starts_with(b"poison:") {
            assert!(outcome.contains("DecodeError"), "{}: {outcome}", String::from_utf8_lossy(body));
        } else {
            assert_eq!(outcome, "accepted", "{}", String::from_utf8_lossy(body));
        }
    }
    let grown_mib = vm_peak_kib(pid).saturating_sub(peak_before) / 1024;
    assert!(grown_mib < 3 * 1024, "the daemon reserved {grown_mib} MiB more for a 4 GiB length a peer declared");
    let metrics = ferry_tests::http::metrics(&admin);
    let connections =
        ferry_tests::http::sample(&metrics, "ferry_transport_connections_total", "name=\"in\"").unwrap_or(0.0);
    assert_eq!(connections, 1.0, "no reconnect: the first link took everything");
    assert!(daemon.terminate().success());
    assert_eq!(target.hits().len(), 3, "nothing more arrived");
}

/// The largest virtual size process `pid` has had (`VmPeak`), in KiB.
fn vm_peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmPeak:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmPeak")
}

/// A peer that answers every request with `status` and a chunked body
/// that does not end (up to 1 GiB per connection, unless the client hangs
/// up first), and counts what it wrote.
struct EndlessPeer {
    addr: std::net::SocketAddr,
    /// Bytes of body written, over every connection.
    written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Bytes of body written on each connection the client closed.
    closed: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    server: tokio::task::JoinHandle<()>,
}

impl EndlessPeer {
    async fn start(status: &'static str, content_type: &'static str, start: &'static str) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let closed: std::sync::Arc<std::sync::Mutex<Vec<u64>>> = Default::default();
        let (total, ends) = (written.clone(), closed.clone());
        let server = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (total, ends) = (total.clone(), ends.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let _ = socket.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n\
                         {:x}\r\n{start}\r\n",
                        start.len()
                    );
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = format!("{:x}\r\n{}\r\n", 16 * 1024, "no such device; ".repeat(1024));
                    let mut mine = 0u64;
                    for _ in 0..65_536 {
                        if socket.write_all(chunk.as_bytes()).await.is_err() {
                            ends.lock().expect("log").push(mine);
                            return;
                        }
                        mine += 16 * 1024;
                        total.fetch_add(16 * 1024, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        });
        Self { addr, written, closed, server }
    }

    /// Waits until the client hung up on `n` answers, and returns the bytes
    /// each had been sent.
    async fn wait_for_hang_ups(&self, n: usize) -> Vec<u64> {
        let closed = self.closed.clone();
        eventually("the client hangs up on endless answers", move || closed.lock().is_ok_and(|c| c.len() >= n)).await;
        self.closed.lock().expect("log").clone()
    }
}

/// What the kernel can hold of a loopback connection beyond what the
/// client read (the peer's send buffer and the client's receive buffer, at
/// their largest), and 1 MiB for the client's own buffering: a peer counts
/// it as written before it finds the client gone.
fn socket_slack() -> u64 {
    let max = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().last().and_then(|v| v.parse::<u64>().ok()))
            .unwrap_or(8 << 20)
    };
    max("/proc/sys/net/ipv4/tcp_wmem") + max("/proc/sys/net/ipv4/tcp_rmem") + (1 << 20)
}

impl EndlessPeer {
    /// Runs the daemon with `receiver` (the body of `[receivers.in]`)
    /// polling this peer, and checks that it hung up on two answers, each
    /// within `cap` bytes read (plus what the kernel buffers), and that the
    /// daemon is still healthy.
    async fn check_receiver_hangs_up(&self, receiver: &str, cap: u64) {
        let admin = ANY_PORT.to_owned();
        let ws = Workspace::with_plugins(&[]);
        ws.config(&with_admin(
            &admin,
            format!(
                "[receivers.in]\n{receiver}\n[senders.hook]\ntype = \"http\"\nurl = \"http://{}/unused\"\n\
                 [[routes]]\nid = \"endless\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"hook\"\n",
                self.addr
            ),
        ));
        let daemon = Daemon::start(&ws, 0);
        let admin = daemon.admin();
        let cut = self.wait_for_hang_ups(2).await;
        let bound = cap + socket_slack();
        for sent in &cut {
            assert!(*sent < bound, "ferry hung up within {bound} bytes, not after {sent}");
        }
        assert_eq!(get(&admin, "/healthz").map(|(s, _)| s).ok(), Some(200), "the daemon is not stuck");
        assert!(daemon.terminate().success());
    }
}

impl Drop for EndlessPeer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A target that answers 400 and streams a body without end: ferry reads a
/// few KiB, drops the connection, and dead-letters the message with the
/// status and the start of the body as its reason.
#[tokio::test(flavor = "multi_thread")]
async fn an_endless_error_body_is_read_only_a_few_kib_and_the_dead_letter_says_why() {
    let peer = EndlessPeer::start("400 Bad Request", "text/plain", "no such device; ").await;
    let addr = peer.addr;
    let topic = unique("hostile/endless");
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\n{}\n[senders.hook]\ntype = \"http\"\nurl = \"http://{addr}/in\"\ntimeout_ms = 20000\n\
             [[routes]]\nid = \"endless\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"hook\"\n",
            mqtt_receiver(&topic, "")
        ),
    ));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let client = TestMqtt::connect(&broker_url()).await;
    client.publish_with(&topic, "hello", &[("mqtt.message-id", "endless-1")]).await;
    wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "route=\"endless\"", 1.0, WAIT);
    let read = peer.written.load(std::sync::atomic::Ordering::Relaxed);
    assert!(read < 8 * 1024 * 1024, "ferry stopped reading the error body early ({read} bytes were written to it)");
    assert!(daemon.terminate().success());
    let letters = ws.dead_letters();
    let reason =
        letters.iter().find(|l| l.to_string().contains("endless-1")).map(|l| l.to_string()).expect("the dead letter");
    assert!(reason.contains("400"), "the status is in the reason: {reason}");
    assert!(reason.contains("no such device"), "and the start of the body: {reason}");
}

/// An SQS endpoint that answers every call with a body without end: the
/// SDK reads a whole answer before decoding it, so ferry bounds it
/// (`MAX_RESPONSE_BYTES`, 32 MiB), hangs up, and tries again later, with
/// the daemon still healthy.
#[tokio::test(flavor = "multi_thread")]
async fn an_endless_sqs_answer_is_cut_off_and_the_receiver_tries_again() {
    let peer = EndlessPeer::start("200 OK", "application/x-amz-json-1.0", "{\"Messages\":[{\"Body\":\"").await;
    let endpoint = format!("http://{}", peer.addr);
    let receiver = format!(
        "type = \"sqs\"\nqueue_url = \"{endpoint}/000000000000/endless\"\nendpoint_url = \"{endpoint}\"\n\
         wait_time_seconds = 1"
    );
    // ferry_transport_sqs::client::MAX_RESPONSE_BYTES: 32 MiB.
    peer.check_receiver_hangs_up(&receiver, 32 << 20).await;
}

/// A SimpleMQ API that answers every receive with a body without end: ferry
/// reads at most 4 MiB of it, hangs up, and polls again.
#[tokio::test(flavor = "multi_thread")]
async fn an_endless_simplemq_answer_is_cut_off_and_the_receiver_polls_again() {
    let peer = EndlessPeer::start("200 OK", "application/json", "{\"messages\":[{\"content\":\"").await;
    let receiver = format!(
        "type = \"simplemq\"\nqueue = \"endless\"\napi_key = \"key\"\napi_url = \"http://{}\"\npolling_interval_ms = 100",
        peer.addr
    );
    peer.check_receiver_hangs_up(&receiver, 4 << 20).await;
}

/// A SimpleMQ API that hands out ids built to climb out of the message URL
/// (`../../other/messages/victim`), to cut it (`victim#frag`) or to add a
/// query (`victim?x=1`): each ack deletes the message it named, on its own
/// queue, and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn simplemq_ids_from_the_api_cannot_reach_another_message() {
    let smq = FakeSimpleMq::start(Duration::from_secs(30)).await;
    let queue = unique("ids");
    let other = unique("other");
    smq.create_queue(&queue, "key");
    smq.create_queue(&other, "key");
    let plain = content(&json!({ "body": "victim" }));
    smq.put_with_id(&other, "victim", &plain);
    smq.put_with_id(&queue, "victim", &plain);
    let hostile = [format!("../../{other}/messages/victim"), "victim#frag".to_owned(), "victim?x=1".to_owned()];
    for id in &hostile {
        smq.put_with_id(&queue, id, &content(&json!({ "body": id })));
    }
    let target = WebhookTarget::start().await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.q]\ntype = \"simplemq\"\nqueue = \"{queue}\"\napi_key = \"key\"\napi_url = \"{}\"\n\
         polling_interval_ms = 100\n[senders.hook]\ntype = \"http\"\nurl = \"{}\"\n\
         [[routes]]\nid = \"ids\"\nreceiver = \"q\"\n[[routes.bindings]]\nsender = \"hook\"\n",
        smq.url(),
        target.url("/in")
    ));
    let daemon = Daemon::start(&ws, 0);
    // The queue's own "victim" goes first, then the three hostile ids.
    target.wait_for(4, WAIT, |_| true).await;
    eventually("every message of the queue acknowledged", || smq.messages(&queue).is_empty()).await;
    let others: Vec<String> = smq.messages(&other).into_iter().map(|m| m.id).collect();
    assert_eq!(others, ["victim"], "the other queue's message is untouched");
    assert_eq!(smq.calls("delete", 404), 0, "every delete named a message that was there");
    assert_eq!(smq.calls("delete", 200), 4);
    assert!(daemon.terminate().success());
}

/// `MessageAttributes` that is a list, a string or a number (and
/// `MessageSystemAttributes` as a list) is refused as AWS refuses a
/// malformed parameter, and nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn the_sqs_endpoint_refuses_message_attributes_that_are_not_a_map() {
    let queue = unique("shapes");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!("[endpoints.sqs]\nlisten = \"{ANY_PORT}\"\n[endpoints.sqs.queues.\"{queue}\"]\n"));
    let daemon = Daemon::start(&ws, 0);
    let listen = daemon.listener("sqs_endpoint", "sqs");
    let http = reqwest::Client::new();
    let call = |target: &'static str, body: Value| {
        http.post(format!("http://{listen}/"))
            .header("x-amz-target", format!("AmazonSQS.{target}"))
            .header("content-type", "application/x-amz-json-1.0")
            .body(body.to_string())
            .send()
    };
    ferry_tests::eventually_async("the endpoint to answer GetQueueUrl", || {
        let answer = call("GetQueueUrl", json!({ "QueueName": queue }));
        async move {
            match answer.await {
                Ok(r) if r.status() == 200 => Ok(()),
                Ok(r) => Err(format!("HTTP {}", r.status())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;
    let url = format!("http://{listen}/000000000000/{queue}");
    for (key, bad) in [
        ("MessageAttributes", json!([1, 2])),
        ("MessageAttributes", json!("a=v")),
        ("MessageAttributes", json!(5)),
        ("MessageAttributes", json!({ "a": "v" })),
        ("MessageSystemAttributes", json!([{ "Name": "AWSTraceHeader" }])),
    ] {
        let reply = call("SendMessage", json!({ "QueueUrl": url, "MessageBody": "m", key: bad })).await.expect("POST");
        let status = reply.status().as_u16();
        let body: Value = serde_json::from_slice(&reply.bytes().await.expect("body")).expect("a JSON error");
        assert_eq!(status, 400, "{key} = {bad}: {body}");
        let kind = body["__type"].as_str().unwrap_or_default();
        assert!(kind.ends_with("SerializationException"), "{key} = {bad}: {body}");
    }
    let reply =
        call("GetQueueAttributes", json!({ "QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"] }))
            .await
            .expect("POST");
    let body: Value = serde_json::from_slice(&reply.bytes().await.expect("body")).expect("attributes");
    assert_eq!(body["Attributes"]["ApproximateNumberOfMessages"], "0", "nothing was stored: {body}");
    assert!(daemon.terminate().success());
}

/// A transport component is a publisher like any other: the reserved
/// headers its receiver hands over, as envelope headers or inside a JSON
/// wire-format payload, are stripped at the route (the hostile fixture in
/// `forge` mode hands one message over and again after each release, with
/// its redelivery count, so a forged generated-id would dead-letter it).
#[tokio::test(flavor = "multi_thread")]
async fn transport_components_cannot_forge_reserved_headers() {
    for wire in [false, true] {
        let f = Forgery::start().await;
        let (headers, payload) =
            if wire { (Vec::new(), f.document().to_string()) } else { (f.headers(), "hello".into()) };
        let table: Vec<String> = headers.iter().map(|(k, v)| format!("\"{k}\" = \"{v}\"")).collect();
        let receiver = format!(
            "type = \"component\"\ncomponent = \"hostile-transport\"\nwait_ms = 50\n{}config = {{ mode = \"forge\", headers = {{ {} }}, payload = '{payload}' }}\n",
            if wire { "wire_format = \"json\"\n" } else { "" },
            table.join(", "),
        );
        let ws = Workspace::with_plugins(&["hostile-transport"]);
        ws.config(&f.config(&receiver, ""));
        let daemon = f.daemon(&ws).await;
        f.check(&ws, daemon, if wire { "component, JSON wire format" } else { "component envelope headers" }).await;
    }
}
