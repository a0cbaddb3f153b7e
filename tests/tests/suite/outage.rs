//! A target that is down delays messages and never fails them (issue 55):
//! every source ferry has (MQTT, SQS, AMQP 0-9-1, AMQP 1.0, NATS,
//! SimpleMQ's fake, ferry's own SQS endpoint), in both delivery modes,
//! against a target that is down for longer than the whole retry budget
//! (an HTTP target refusing connections, a private RabbitMQ and a private
//! Mosquitto stopped, SQS cut off), with messages published
//! before and during the outage. Every message arrives once the target is
//! back, none is dead-lettered or spends a replay, and a source that counts
//! its redeliveries did not count the outage (SQS `ApproximateReceiveCount`
//! ≤ 2). An HTTP caller, which waits for its answer, is told 503 with
//! `Retry-After` at once.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use fe2o3_amqp::types::messaging::{Data, Message, Properties};
use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::{get, sample};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, broker_url};
use ferry_tests::nats::{Nats, PrivateNats};
use ferry_tests::ports::ClosedPort;
use ferry_tests::rabbit::{Amqp10Client, PrivateRabbit, Rabbit, URL10, URL091};
use ferry_tests::simplemq::FakeSimpleMq;
use ferry_tests::sqs::{self, create_queue};
use ferry_tests::tcp_proxy::TcpProxy;
use ferry_tests::unique;
use ferry_tests::webhook::{WebhookTarget, answer};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

/// Longer than the whole retry budget of every route here (5 replays of
/// 50-200 ms) many times over, and than an SQS visibility timeout of 2 s.
const OUTAGE: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(60);
const MODES: [(&str, &str); 2] = [("direct", "direct_hold"), ("outbox", "shared_outbox")];

/// The sources of one test, each with a route per delivery mode to the
/// `[senders.out]` the test gives, and how to publish to each.
struct Sources {
    mqtt: HashMap<&'static str, String>,
    sqs: HashMap<&'static str, String>,
    amqp091: HashMap<&'static str, String>,
    amqp10: HashMap<&'static str, String>,
    nats: HashMap<&'static str, String>,
    nats_server: PrivateNats,
    simplemq: HashMap<&'static str, String>,
    simplemq_server: FakeSimpleMq,
    endpoint: HashMap<&'static str, String>,
    /// The daemon's SQS endpoint, once it listens.
    endpoint_client: Option<aws_sdk_sqs::Client>,
    publisher: TestMqtt,
    sqs_client: aws_sdk_sqs::Client,
    rabbit: Rabbit,
    amqp10_client: Amqp10Client,
    nats_client: Nats,
}

impl Sources {
    async fn new() -> Self {
        let sqs_client = sqs::client();
        let rabbit = Rabbit::connect().await;
        let nats_server = PrivateNats::start().await;
        let nats_client = Nats::connect(&nats_server.url()).await;
        let simplemq_server = FakeSimpleMq::start(Duration::from_secs(5)).await;
        let (mut mqtt, mut queues, mut amqp091, mut amqp10, mut nats) =
            (HashMap::new(), HashMap::new(), HashMap::new(), HashMap::new(), HashMap::new());
        let (mut simplemq, mut endpoint) = (HashMap::new(), HashMap::new());
        for (mode, _) in MODES {
            mqtt.insert(mode, unique(&format!("outage/{mode}")));
            queues.insert(mode, create_queue(&sqs_client, &format!("outage-{mode}"), false).await.1);
            let q = unique(&format!("outage-091-{mode}"));
            rabbit.declare_queue(&q).await;
            amqp091.insert(mode, q);
            let q = unique(&format!("outage-10-{mode}"));
            rabbit.declare_queue(&q).await;
            amqp10.insert(mode, q);
            let stream = unique(&format!("OUTAGE_{mode}")).replace(['-', '/', '.'], "_");
            nats_client.stream(&stream, &[&format!("{stream}.>")]).await;
            nats.insert(mode, stream);
            let q = unique(&format!("outage-smq-{mode}"));
            simplemq_server.create_queue(&q, "key");
            simplemq.insert(mode, q);
            endpoint.insert(mode, unique(&format!("outage-ep-{mode}")));
        }
        Self {
            mqtt,
            sqs: queues,
            amqp091,
            amqp10,
            nats,
            nats_server,
            simplemq,
            simplemq_server,
            endpoint,
            endpoint_client: None,
            publisher: TestMqtt::connect(&broker_url()).await,
            sqs_client,
            rabbit,
            amqp10_client: Amqp10Client::connect(URL10).await,
            nats_client,
        }
    }

    /// `[receivers.*]` and `[[routes]]` for every source and mode, each
    /// route to `[senders.out]` at `address`.
    fn config(&self, address: &str) -> String {
        let mut out = format!("[endpoints.sqs]\nlisten = \"{ANY_PORT}\"\n");
        for (mode, _) in MODES {
            out.push_str(&format!("[endpoints.sqs.queues.\"{}\"]\n", self.endpoint[mode]));
        }
        out.push('\n');
        for (mode, delivery) in MODES {
            let receivers = [
                (
                    "mqtt",
                    format!(
                        "type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{}/#\"]",
                        broker_url(),
                        unique("ferry-outage"),
                        self.mqtt[mode]
                    ),
                ),
                (
                    "sqs",
                    format!(
                        "type = \"sqs\"\nqueue_url = \"{}\"\nendpoint_url = \"{}\"\nwait_time_seconds = 1\nvisibility_timeout = 2",
                        self.sqs[mode],
                        sqs::endpoint()
                    ),
                ),
                ("amqp091", format!("type = \"amqp091\"\nurl = \"{URL091}\"\nqueue = \"{}\"", self.amqp091[mode])),
                (
                    "amqp10",
                    format!("type = \"amqp10\"\nurl = \"{URL10}\"\naddress = \"/amq/queue/{}\"", self.amqp10[mode]),
                ),
                (
                    "nats",
                    format!("type = \"nats\"\nurl = \"{}\"\nstream = \"{}\"", self.nats_server.url(), self.nats[mode]),
                ),
                (
                    "simplemq",
                    format!(
                        "type = \"simplemq\"\nqueue = \"{}\"\napi_key = \"key\"\napi_url = \"{}\"\n\
                         polling_interval_ms = 100\nextend_every_secs = 1",
                        self.simplemq[mode],
                        self.simplemq_server.url()
                    ),
                ),
                ("endpoint", format!("type = \"sqs_endpoint\"\nqueue = \"{}\"", self.endpoint[mode])),
            ];
            for (source, receiver) in receivers {
                let id = format!("{source}-{mode}");
                out.push_str(&format!(
                    "[receivers.{id}]\n{receiver}\n\n[[routes]]\nid = \"{id}\"\nreceiver = \"{id}\"\n\
                     delivery_mode = \"{delivery}\"\nmax_in_flight = 8\nbackoff = {{ initial_ms = 50, max_ms = 200 }}\n\n\
                     [[routes.bindings]]\nsender = \"out\"\naddress = \"{address}\"\n\n"
                ));
            }
        }
        out
    }

    /// The receivers whose connection `/readyz` reports.
    fn parts() -> Vec<(&'static str, String)> {
        let mut parts = Vec::new();
        for (mode, _) in MODES {
            for source in ["mqtt", "sqs", "amqp091", "amqp10", "nats", "simplemq"] {
                parts.push(("receiver", format!("{source}-{mode}")));
            }
        }
        parts
    }

    /// Publishes message `tag` to every source and mode; returns the bodies
    /// sent, by route id.
    async fn publish(&mut self, tag: &str) -> Vec<(String, String)> {
        let mut sent = Vec::new();
        for (mode, _) in MODES {
            let body = |source: &str| format!("{source}-{mode}:{tag}");
            let b = body("mqtt");
            self.publisher.publish_with(&format!("{}/x", self.mqtt[mode]), &b, &[("mqtt.message-id", &b)]).await;
            sent.push((format!("mqtt-{mode}"), b));
            let b = body("sqs");
            sqs::send(&self.sqs_client, &self.sqs[mode], &b, HashMap::new()).await;
            sent.push((format!("sqs-{mode}"), b));
            let b = body("amqp091");
            let properties = BasicProperties::default().with_message_id(b.clone().into());
            self.rabbit.publish("", &self.amqp091[mode], b.as_bytes(), properties).await;
            sent.push((format!("amqp091-{mode}"), b));
            let b = body("amqp10");
            let message = Message::builder()
                .properties(Properties::builder().message_id(b.clone()).build())
                .data(Data(b.clone().into_bytes().into()))
                .build();
            self.amqp10_client.send(&format!("/amq/queue/{}", self.amqp10[mode]), message).await;
            sent.push((format!("amqp10-{mode}"), b));
            let b = body("nats");
            let subject = format!("{}.x", self.nats[mode]);
            self.nats_client.publish(&subject, &b, &[("Nats-Msg-Id", &b)]).await;
            sent.push((format!("nats-{mode}"), b));
            let b = body("simplemq");
            self.simplemq_server.put(&self.simplemq[mode], &BASE64.encode(&b));
            sent.push((format!("simplemq-{mode}"), b));
            let b = body("endpoint");
            let client = self.endpoint_client.as_ref().expect("the endpoint is known: call listening()");
            let url = client
                .get_queue_url()
                .queue_name(&self.endpoint[mode])
                .send()
                .await
                .expect("queue url")
                .queue_url
                .expect("url");
            sqs::send(client, &url, &b, HashMap::new()).await;
            sent.push((format!("endpoint-{mode}"), b));
        }
        sent
    }

    /// Takes the address of the daemon's SQS endpoint.
    fn listening(&mut self, daemon: &Daemon) {
        let listen = daemon.listener("sqs_endpoint", "sqs");
        self.endpoint_client = Some(sqs::client_for(&format!("http://{listen}")));
    }

    /// Once every message `sent` arrived: every binding is available
    /// again, none spent a replay, the daemon stops cleanly with nothing
    /// dead-lettered, and no SimpleMQ message was handed out more than
    /// twice. Then the queues go.
    async fn after_the_outage(self, daemon: Daemon, ws: &Workspace, sent: &[(String, String)]) {
        assert_back_with_no_replay_spent(&daemon.admin(), sent).await;
        assert!(daemon.terminate().success());
        assert!(ws.dead_letters().is_empty());
        for (mode, _) in MODES {
            for m in self.simplemq_server.messages(&self.simplemq[mode]) {
                assert!(m.receives <= 2, "SimpleMQ did not count the outage: {} receives of {}", m.receives, m.id);
            }
        }
        self.clean_up().await;
    }

    /// Publishes a message to every source before and during an outage
    /// that lasts [`OUTAGE`] from now; asserts that nothing was
    /// dead-lettered meanwhile. What was sent, by route.
    async fn through_outage(&mut self, ws: &Workspace) -> Vec<(String, String)> {
        let mut sent = self.publish("before").await;
        tokio::time::sleep(OUTAGE / 2).await;
        sent.extend(self.publish("during").await);
        tokio::time::sleep(OUTAGE / 2).await;
        assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());
        sent
    }

    async fn clean_up(self) {
        for (mode, _) in MODES {
            self.rabbit.delete_queue(&self.amqp091[mode]).await;
            self.rabbit.delete_queue(&self.amqp10[mode]).await;
        }
        self.amqp10_client.close().await;
    }
}

/// Asserts that every message `sent` arrived (`arrived` has its body).
fn assert_all_arrived(sent: &[(String, String)], arrived: &BTreeSet<String>) {
    let missing: Vec<&String> = sent.iter().map(|(_, b)| b).filter(|b| !arrived.contains(*b)).collect();
    assert!(missing.is_empty(), "every message arrives once the target is back; missing {missing:?}");
}

/// Waits until every route of `sent` sees its binding available again,
/// then asserts that each met the outage and that nothing was
/// dead-lettered or spent a replay.
async fn assert_back_with_no_replay_spent(admin: &str, sent: &[(String, String)]) {
    let routes: BTreeSet<&String> = sent.iter().map(|(r, _)| r).collect();
    ferry_tests::eventually("every binding available again", || {
        let (_, metrics) = get(admin, "/metrics").expect("metrics");
        let down: Vec<&&String> = routes
            .iter()
            .filter(|r| sample(&metrics, "ferry_binding_available", &format!("route=\"{r}\"")) != Some(1.0))
            .collect();
        if down.is_empty() { Ok(()) } else { Err(format!("{down:?}")) }
    })
    .await;
    let (_, metrics) = get(admin, "/metrics").expect("metrics");
    assert_eq!(sample(&metrics, "ferry_messages_dead_lettered_total", ""), None, "{metrics}");
    assert_eq!(sample(&metrics, "ferry_messages_retried_total", "reason=\"send\""), None, "{metrics}");
    for route in routes {
        let labels = format!("route=\"{route}\"");
        assert!(
            sample(&metrics, "ferry_send_unavailable_total", &labels).unwrap_or(0.0) >= 1.0,
            "{route} met the outage:\n{metrics}"
        );
        assert_eq!(sample(&metrics, "ferry_binding_available", &labels), Some(1.0), "{route} is back:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_target_down_longer_than_the_budget_delays_every_source_and_fails_nothing() {
    let mut sources = Sources::new().await;
    let down = ClosedPort::new();
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[senders.out]\ntype = \"http\"\nurl = \"http://{}/hook\"\nconnect_timeout_ms = 500\n\n{}",
            down.addr(),
            sources.config("")
        ),
    ));
    let parts = Sources::parts();
    let parts: Vec<(&str, &str)> = parts.iter().map(|(r, n)| (*r, n.as_str())).collect();
    let daemon = Daemon::start_with_connected(&ws, &parts);
    let admin = daemon.admin();
    sources.listening(&daemon);

    let sent = sources.through_outage(&ws).await;
    let (status, body) = get(&admin, "/readyz").expect("readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("binding out: target unavailable"), "{body}");

    let target = WebhookTarget::start_on(down.listen()).await;
    let hits = target.wait_for(sent.len(), WAIT, |_| true).await;
    assert_all_arrived(&sent, &hits.iter().map(|h| String::from_utf8_lossy(&h.body).into_owned()).collect());
    for hit in hits.iter().filter(|h| h.header("x-ferry-sqs.approximatereceivecount").is_some()) {
        let count: u64 = hit.header("x-ferry-sqs.approximatereceivecount").and_then(|c| c.parse().ok()).expect("count");
        assert!(count <= 2, "SQS did not count the outage: {count} receives of {:?}", hit.body);
    }
    sources.after_the_outage(daemon, &ws, &sent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rabbitmq_target_stopped_longer_than_the_budget_delays_every_source_and_fails_nothing() {
    let mut sources = Sources::new().await;
    let mut target = PrivateRabbit::start().await;
    let queue = unique("outage-target");
    Rabbit::connect_to(&target.url091()).await.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[senders.out]\ntype = \"amqp091\"\nurl = \"{}\"\nreconnect_initial_ms = 100\nreconnect_max_ms = 500\n\n{}",
            target.url091(),
            sources.config(&queue)
        ),
    ));
    let daemon = Daemon::start(&ws, 1);
    sources.listening(&daemon);
    target.stop().await;

    let sent = sources.through_outage(&ws).await;

    target.restart().await;
    let got = Rabbit::connect_to(&target.url091()).await.collect(&queue, sent.len(), WAIT).await;
    assert_all_arrived(&sent, &got.iter().map(|d| String::from_utf8_lossy(&d.data).into_owned()).collect());
    sources.after_the_outage(daemon, &ws, &sent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mqtt_target_stopped_longer_than_the_budget_delays_every_source_and_fails_nothing() {
    let mut sources = Sources::new().await;
    let mut target = PrivateMosquitto::start().await;
    // ferry reaches the target through a proxy that stays cut after the
    // restart until the test's subscriber is on the target: what ferry
    // delivers before that would have no subscriber and be dropped by
    // the broker, whatever ferry did right.
    let proxy = TcpProxy::start(([127, 0, 0, 1], target.port).into()).await;
    let dst = unique("outage/dst");
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[senders.out]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1:{}\"\nclient_id = \"{}\"\n\
             reconnect_max_ms = 2000\nack_timeout_ms = 2000\n\n{}",
            proxy.port,
            unique("ferry-outage-out"),
            sources.config(&format!("{dst}/out"))
        ),
    ));
    let daemon = Daemon::start(&ws, 1);
    sources.listening(&daemon);
    proxy.cut();
    target.stop();

    let sent = sources.through_outage(&ws).await;
    target.restart().await;
    let mut sub = TestMqtt::connect(&target.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    proxy.restore();
    let got = sub.collect(sent.len()).await;
    assert_all_arrived(&sent, &got.iter().map(|p| String::from_utf8_lossy(&p.payload).into_owned()).collect());
    sources.after_the_outage(daemon, &ws, &sent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sqs_target_cut_off_longer_than_the_budget_delays_every_source_and_fails_nothing() {
    let mut sources = Sources::new().await;
    let (_, queue) = create_queue(&sources.sqs_client, "outage-target", false).await;
    let moto: std::net::SocketAddr = sqs::endpoint().trim_start_matches("http://").parse().expect("moto's address");
    let proxy = TcpProxy::start(moto).await;
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    let endpoint = format!("http://127.0.0.1:{}", proxy.port);
    ws.config(&with_admin(
        &admin,
        format!(
            "[senders.out]\ntype = \"sqs\"\nqueue_url = \"{}\"\nendpoint_url = \"{endpoint}\"\n\n{}",
            queue,
            sources.config("")
        ),
    ));
    let daemon = Daemon::start(&ws, 1);
    sources.listening(&daemon);
    proxy.cut();

    let sent = sources.through_outage(&ws).await;
    proxy.restore();
    let got = sqs::consume_bodies(&sources.sqs_client, &queue, sent.len(), 120).await;
    assert_all_arrived(&sent, &got.into_iter().collect());
    sources.after_the_outage(daemon, &ws, &sent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_caller_is_told_503_with_retry_after_at_once_while_the_target_is_down() {
    let down = ClosedPort::new();
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\ntype = \"http\"\nlisten = \"{ANY_PORT}\"\npath = \"/in\"\n\
             [senders.out]\ntype = \"http\"\nurl = \"http://{}/hook\"\nconnect_timeout_ms = 500\n\
             [[routes]]\nid = \"web\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"out\"\n",
            down.addr()
        ),
    ));
    let daemon = Daemon::start(&ws, 0);
    let url = format!("{}/in", daemon.http_url("in"));
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("client");
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let reply = client.post(&url).body("m").send().await.expect("POST");
        assert_eq!(reply.status(), 503);
        assert!(reply.headers().contains_key("retry-after"));
        assert!(started.elapsed() < Duration::from_secs(10), "answered without holding the request");
    }
    let target = WebhookTarget::start_on(down.listen()).await;
    let reply = ferry_tests::eventually_async("a 200 once the target is back", || {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let reply = client.post(&url).body("after").send().await.expect("POST");
            if reply.status() == 200 { Ok(reply.status()) } else { Err(reply.status()) }
        }
    })
    .await;
    assert_eq!(reply, 200);
    assert!(target.hits().iter().any(|h| h.body.as_ref() == b"after"));
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty());
}

/// MQTT `<src>/#` to the HTTP senders `bindings` (name, url) in one route.
fn mqtt_to_webhooks(src: &str, bindings: &[(&str, String)], route_extra: &str) -> String {
    let mut out = format!(
        "[receivers.in]\ntype = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{src}/#\"]\n",
        broker_url(),
        unique("ferry-outage-in")
    );
    for (name, url) in bindings {
        out.push_str(&format!("[senders.{name}]\ntype = \"http\"\nurl = \"{url}\"\nconnect_timeout_ms = 500\n"));
    }
    out.push_str(&format!(
        "[[routes]]\nid = \"hooks\"\nreceiver = \"in\"\n{route_extra}\nbackoff = {{ initial_ms = 50, max_ms = 200 }}\n"
    ));
    for (name, _) in bindings {
        out.push_str(&format!("[[routes.bindings]]\nsender = \"{name}\"\n"));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn fan_out_with_one_target_down_keeps_the_other_flowing_and_catches_up() {
    let src = unique("outage/fan");
    let up = WebhookTarget::start().await;
    let down = ClosedPort::new();
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    let hooks = [("up", up.url("/up")), ("down", format!("http://{}/down", down.addr()))];
    ws.config(&with_admin(&admin, mqtt_to_webhooks(&src, &hooks, "dispatch_mode = \"fan_out\"")));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..5 {
        let id = format!("fan-{i}");
        publisher.publish_with(&format!("{src}/x"), &id, &[("mqtt.message-id", &id)]).await;
    }
    // The binding that is up takes every copy while the other is down.
    assert_eq!(up.wait_for(5, WAIT, |_| true).await.len(), 5);
    daemon.wait_for_total("ferry_send_unavailable_total", "binding=\"down\"", 1.0, WAIT);
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    assert_eq!(sample(&metrics, "ferry_binding_available", "binding=\"down\""), Some(0.0), "{metrics}");
    assert_eq!(sample(&metrics, "ferry_binding_available", "binding=\"up\""), Some(1.0), "{metrics}");

    let back = WebhookTarget::start_on(down.listen()).await;
    assert_eq!(back.wait_for(5, WAIT, |_| true).await.len(), 5, "the other binding catches up");
    daemon.wait_for_total("ferry_messages_acked_total", "route=\"hooks\"", 5.0, WAIT);
    assert_eq!(up.count(), 5, "the binding that took its copies gets none twice");
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn max_outage_secs_dead_letters_what_waited_too_long_as_target_unavailable() {
    let src = unique("outage/max");
    let down = ClosedPort::new();
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    let hooks = [("out", format!("http://{}/down", down.addr()))];
    ws.config(&with_admin(&admin, mqtt_to_webhooks(&src, &hooks, "max_outage_secs = 2")));
    let daemon = Daemon::start(&ws, 1);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/x"), "too late", &[("mqtt.message-id", "late-1")]).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "reason=\"target_unavailable\"", 1.0, WAIT);
    assert!(daemon.terminate().success());
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "target_unavailable");
    assert_eq!(dead[0]["envelope"]["id"], "late-1");
    assert!(dead[0]["detail"].as_str().is_some_and(|d| d.contains("max_outage_secs = 2")), "{}", dead[0]);
}

/// RabbitMQ gives back a delivery left unacknowledged for longer than its
/// `consumer_timeout` by closing the consumer's channel. A route holding
/// deliveries through a target outage past that (here 2 s, checked every
/// 0.5 s, against the default 30 min) gets them again on its next channel:
/// they arrive once the target is back, none dead-lettered and none
/// counted as a replay, from both of RabbitMQ's protocols.
#[tokio::test(flavor = "multi_thread")]
async fn a_rabbitmq_source_that_times_out_held_deliveries_loses_nothing_to_a_long_outage() {
    let (daemon, ws, sent, _target) = held_past_consumer_timeout(Queues::Classic).await;
    assert_back_with_no_replay_spent(&daemon.admin(), &sent).await;
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());
}

/// A quorum queue counts every return in `x-delivery-count` (AMQP 1.0's
/// `delivery-count`), the ones `consumer_timeout` made while the target was
/// down too. Those are not attempts: after the outage the target refuses
/// every message once (500, transient) and the route, with a budget of 4
/// replays, still delivers all of them and dead-letters none, though the
/// broker counted more returns than that.
#[tokio::test(flavor = "multi_thread")]
async fn a_quorum_queue_counts_no_return_made_during_an_outage_as_a_replay() {
    let (daemon, ws, _sent, _target) = held_past_consumer_timeout(Queues::QuorumThenRefusedOnce).await;
    let (_, metrics) = get(&daemon.admin(), "/metrics").expect("metrics");
    assert_eq!(sample(&metrics, "ferry_messages_dead_lettered_total", ""), None, "{metrics}");
    assert!(sample(&metrics, "ferry_messages_retried_total", "reason=\"send\"").unwrap_or(0.0) >= 1.0, "{metrics}");
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());
}

/// `max_outage_secs` holds for a delivery the source takes back while it
/// waits: RabbitMQ gives held deliveries back every 2 s
/// (`consumer_timeout`), the route lets each stale copy go and holds the
/// redelivered one, and once the target has been down for 8 s every
/// message, from both protocols, is dead-lettered as `target_unavailable`
/// and taken off its queue. None is lost, none reaches the DLQ with
/// another reason, and a message arriving after the limit is
/// dead-lettered at once instead of waiting.
#[tokio::test(flavor = "multi_thread")]
async fn max_outage_secs_dead_letters_deliveries_the_source_took_back_while_held() {
    let HeldSource { daemon, ws, sent, rabbit, amqp10, queues, _source: _broker, .. } =
        hold_past_consumer_timeout(Queues::Classic, "max_outage_secs = 8\nbackoff = { initial_ms = 50, max_ms = 200 }")
            .await;
    daemon.wait_for_total(
        "ferry_messages_dead_lettered_total",
        "reason=\"target_unavailable\"",
        sent.len() as f64,
        WAIT,
    );
    for q in &queues {
        ferry_tests::eventually_within("the source queue emptied", WAIT, || {
            let rabbit = &rabbit;
            async move {
                match rabbit.depth(q).await {
                    0 => Ok(()),
                    n => Err(format!("{n} messages left in {q}")),
                }
            }
        })
        .await;
    }
    amqp10.close().await;
    assert!(daemon.terminate().success());
    let dead = ws.dead_letters();
    let reasons: BTreeSet<&str> = dead.iter().filter_map(|d| d["reason"].as_str()).collect();
    assert_eq!(reasons, BTreeSet::from(["target_unavailable"]), "{dead:?}");
    let ids: BTreeSet<&str> = dead.iter().filter_map(|d| d["envelope"]["id"].as_str()).collect();
    let bodies: BTreeSet<&str> = sent.iter().map(|(_, b)| b.as_str()).collect();
    assert_eq!(ids, bodies, "every message dead-lettered, none lost");
}

/// The source queues of [`held_past_consumer_timeout`] and what the target
/// does once it is back.
#[derive(Clone, Copy, PartialEq)]
enum Queues {
    /// Classic queues; the target takes everything.
    Classic,
    /// Quorum queues; the target refuses every message once (500).
    QuorumThenRefusedOnce,
}

/// A private RabbitMQ with a 2 s `consumer_timeout`, its two routes to an
/// HTTP target that is down, and what was sent through them.
struct HeldSource {
    daemon: Daemon,
    ws: Workspace,
    sent: Vec<(String, String)>,
    down: ClosedPort,
    rabbit: Rabbit,
    amqp10: Amqp10Client,
    queues: [String; 2],
    _source: PrivateRabbit,
}

/// Two routes (AMQP 0-9-1 and AMQP 1.0), with `route_policy`, from a private
/// RabbitMQ with a 2 s `consumer_timeout` to an HTTP target that is down;
/// messages published before and during the outage (`OUTAGE / 2` apart).
/// Returns after `OUTAGE`, once each receiver came back on a new
/// connection: the broker took the held deliveries back at least once.
async fn hold_past_consumer_timeout(queues: Queues, route_policy: &str) -> HeldSource {
    let source =
        PrivateRabbit::start_with("", "[{rabbit, [{consumer_timeout, 2000}, {channel_tick_interval, 500}]}].\n").await;
    let rabbit = Rabbit::connect_to(&source.url091()).await;
    let mut amqp10 = Amqp10Client::connect(&source.url10()).await;
    let (q091, q10) = (unique("timeout-091"), unique("timeout-10"));
    for q in [&q091, &q10] {
        match queues {
            Queues::Classic => rabbit.declare_queue(q).await,
            Queues::QuorumThenRefusedOnce => {
                let mut args = FieldTable::default();
                args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
                rabbit.declare_queue_with(q, args).await;
            }
        }
    }
    let down = ClosedPort::new();
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    let mut config = format!(
        "[senders.out]\ntype = \"http\"\nurl = \"http://{}/hook\"\nconnect_timeout_ms = 500\n\n\
         [receivers.amqp091]\ntype = \"amqp091\"\nurl = \"{}\"\nqueue = \"{q091}\"\nqueue_passive = true\n\
         reconnect_initial_ms = 100\nreconnect_max_ms = 500\n\n\
         [receivers.amqp10]\ntype = \"amqp10\"\nurl = \"{}\"\naddress = \"/amq/queue/{q10}\"\n\
         reconnect_initial_ms = 100\nreconnect_max_ms = 500\n\n",
        down.addr(),
        source.url091(),
        source.url10()
    );
    for id in ["amqp091", "amqp10"] {
        config.push_str(&format!(
            "[[routes]]\nid = \"{id}\"\nreceiver = \"{id}\"\nmax_in_flight = 8\n{route_policy}\n\
             [[routes.bindings]]\nsender = \"out\"\n\n"
        ));
    }
    ws.config(&with_admin(&admin, config));
    let daemon = Daemon::start_with_connected(&ws, &[("receiver", "amqp091"), ("receiver", "amqp10")]);

    let mut sent = Vec::new();
    for phase in ["before", "during"] {
        for i in 0..4 {
            let b = format!("amqp091:{phase}-{i}");
            let properties = BasicProperties::default().with_message_id(b.clone().into());
            rabbit.publish("", &q091, b.as_bytes(), properties).await;
            sent.push(("amqp091".to_owned(), b));
            let b = format!("amqp10:{phase}-{i}");
            let message = Message::builder()
                .properties(Properties::builder().message_id(b.clone()).build())
                .data(Data(b.clone().into_bytes().into()))
                .build();
            amqp10.send(&format!("/amq/queue/{q10}"), message).await;
            sent.push(("amqp10".to_owned(), b));
        }
        tokio::time::sleep(OUTAGE / 2).await;
    }
    // The broker took the held deliveries back: each receiver came back on
    // a new connection while the target was still down.
    for kind in ["amqp091", "amqp10"] {
        daemon.wait_for_total(
            "ferry_transport_connections_total",
            &format!("kind=\"{kind}\",role=\"receiver\""),
            2.0,
            WAIT,
        );
    }
    HeldSource { daemon, ws, sent, down, rabbit, amqp10, queues: [q091, q10], _source: source }
}

/// [`hold_past_consumer_timeout`], then the target comes back (answering
/// per `queues`). Returns once every message reached the target.
async fn held_past_consumer_timeout(queues: Queues) -> (Daemon, Workspace, Vec<(String, String)>, WebhookTarget) {
    let policy = match queues {
        Queues::Classic => "backoff = { initial_ms = 50, max_ms = 200 }",
        Queues::QuorumThenRefusedOnce => "max_replay_attempts = 4\nbackoff = { initial_ms = 1000, max_ms = 1000 }",
    };
    let HeldSource { daemon, ws, sent, down, amqp10, _source: _broker, .. } =
        hold_past_consumer_timeout(queues, policy).await;
    assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());

    // A delivery given back while held may arrive twice (at least once):
    // wait for every body, not for a number of requests.
    let every_body_from = |target: &WebhookTarget, from: usize| {
        let arrived: BTreeSet<String> =
            target.hits()[from..].iter().map(|h| String::from_utf8_lossy(&h.body).into_owned()).collect();
        let missing: Vec<&String> = sent.iter().map(|(_, b)| b).filter(|b| !arrived.contains(*b)).collect();
        std::future::ready(if missing.is_empty() { Ok(()) } else { Err(format!("missing {missing:?}")) })
    };
    let refused = match queues {
        Queues::Classic => answer(200, None),
        Queues::QuorumThenRefusedOnce => answer(500, None),
    };
    let target = WebhookTarget::start_on_answering(down.listen(), refused).await;
    let mut from = 0;
    if queues == Queues::QuorumThenRefusedOnce {
        ferry_tests::eventually_within("every message refused once", WAIT, || every_body_from(&target, 0)).await;
        target.answer_all(answer(200, None));
        from = target.count();
    }
    ferry_tests::eventually_within("every message at the target", WAIT, || every_body_from(&target, from)).await;
    amqp10.close().await;
    (daemon, ws, sent, target)
}

/// A transport component that tells the host its target is out of reach
/// (`host.target-unavailable`, contract 1.3) gets the outage treatment of a
/// built-in sender: the SimpleMQ component, cut off from its service for
/// longer than the whole replay budget, delays every message and fails
/// none, and no replay is spent.
#[tokio::test(flavor = "multi_thread")]
async fn a_transport_component_that_says_unavailable_delays_messages_and_fails_none() {
    let smq = FakeSimpleMq::start(Duration::from_secs(5)).await;
    let to = unique("outage-smq-out");
    smq.create_queue(&to, "key");
    let proxy = TcpProxy::start(smq.url().trim_start_matches("http://").parse().expect("address")).await;
    let api = format!("http://127.0.0.1:{}", proxy.port);
    let src = unique("outage/component");
    let ws = Workspace::with_plugins(&["simplemq"]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\ntype = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{src}/#\"]\n\n\
             [senders.out]\ntype = \"component\"\ncomponent = \"simplemq\"\nallow_hosts = [\"127.0.0.1:{}\"]\n\
             config = {{ queue = \"{to}\", api_key = \"key\", api_url = \"{api}\" }}\n\n\
             [[routes]]\nid = \"component\"\nreceiver = \"in\"\nbackoff = {{ initial_ms = 50, max_ms = 200 }}\n\
             [[routes.bindings]]\nsender = \"out\"\n",
            broker_url(),
            unique("ferry-outage-component"),
            proxy.port
        ),
    ));
    // The sender says it is connected once a send went through: only the
    // receiver can be waited on.
    let daemon = Daemon::start_with_connected(&ws, &[("receiver", "in")]);
    proxy.cut();
    let publisher = TestMqtt::connect(&broker_url()).await;
    let mut sent = Vec::new();
    for phase in ["before", "during"] {
        for i in 0..3 {
            let body = format!("component:{phase}-{i}");
            publisher.publish_with(&format!("{src}/x"), &body, &[("mqtt.message-id", &body)]).await;
            sent.push(("component".to_owned(), body));
        }
        tokio::time::sleep(OUTAGE / 4).await;
    }
    daemon.wait_for_total("ferry_send_unavailable_total", "route=\"component\"", 1.0, WAIT);
    assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());

    proxy.restore();
    ferry_tests::eventually_within("every message in the service's queue", WAIT, || {
        let arrived: BTreeSet<String> = smq
            .messages(&to)
            .iter()
            .map(|m| String::from_utf8_lossy(&BASE64.decode(&m.content).unwrap_or_default()).into_owned())
            .collect();
        let missing: Vec<&String> = sent.iter().map(|(_, b)| b).filter(|b| !arrived.contains(*b)).collect();
        std::future::ready(if missing.is_empty() { Ok(()) } else { Err(format!("missing {missing:?}")) })
    })
    .await;
    assert_back_with_no_replay_spent(&daemon.admin(), &sent).await;
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());
}
