//! Kafka (issue 38) through the real daemon, each test on a private
//! Kafka-API broker process of its own (tansu; in memory unless it must keep data): MQTT into a
//! topic with the key from a processor and each key's order kept; a topic
//! into AMQP 0-9-1 and AMQP 0-9-1 into a topic, the group's offset moving
//! only behind delivered records; a target outage that moves no offset and
//! loses nothing; `validate --connect`; SCRAM users and a broker restart
//! on a broker that keeps its data (tansu's SQLite storage).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::kafka::{Kafka, MockKafka, PrivateKafka};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::rabbit::{PrivateRabbit, Rabbit, URL091};
use ferry_tests::sqs;
use ferry_tests::{eventually_async, unique};
use ferry_transport_kafka::rdkafka::ClientConfig;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

const WAIT: Duration = Duration::from_secs(30);

/// Waits (bounded) until `group`'s committed offsets on `topic` are `want`.
async fn committed_becomes(kafka: &Kafka, group: &str, topic: &str, want: &[Option<i64>]) {
    eventually_async(&format!("group {group} committed {want:?} on {topic}"), || async {
        let now = kafka.committed(group, topic).await;
        if now == want { Ok(now) } else { Err(now) }
    })
    .await;
}

/// MQTT readings of two devices into a topic of three partitions: a
/// transform granted `ordering_key` sets `x-bridge.ordering-key` from the
/// reading, the sender makes it the record's key, so each device's
/// readings land in one partition, in the order they were published; the
/// identity and headers cross, a forged reserved header does not.
#[tokio::test(flavor = "multi_thread")]
async fn mqtt_into_a_topic_keys_each_device_and_keeps_its_order() {
    let broker = PrivateKafka::start().await;
    let kafka = Kafka::new(&broker.brokers());
    let topic = unique("readings");
    kafka.create_topic(&topic, 3).await;
    let src = unique("kafka/src");
    let ws = Workspace::with_plugins(&["transform"]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{mqtt}"
topics = ["{src}/#"]
client_id = "{cid}"

[senders.out]
type = "kafka"
brokers = "{brokers}"
topic = "{topic}"

[[routes]]
id = "to-kafka"
receiver = "in"
max_in_flight = 1

[[routes.processors]]
plugin = "transform"
grants = {{ ordering_key = true }}
config = {{ keep = true, fields = [], headers = [{{ name = "x-bridge.ordering-key", from = "$.device" }}] }}

[[routes.bindings]]
sender = "out"
"#,
        mqtt = broker_url(),
        cid = unique("kafka-in"),
        brokers = broker.brokers(),
    ));
    let daemon = Daemon::start(&ws, 2);
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..5 {
        for device in ["dev-1", "dev-2"] {
            let body = format!(r#"{{"device":"{device}","n":{i}}}"#);
            let id = format!("{device}-{i}");
            publisher
                .publish_with(
                    &format!("{src}/{device}"),
                    &body,
                    &[("mqtt.message-id", &id), ("site", "north"), ("x-bridge.tenant-id", "forged")],
                )
                .await;
        }
    }
    let got = kafka.read(&topic, 10, WAIT).await;
    assert_eq!(got.len(), 10, "{got:?}");
    let mut by_device: BTreeMap<String, Vec<(i32, i64, i64)>> = BTreeMap::new();
    for r in &got {
        let doc: serde_json::Value = serde_json::from_slice(&r.payload).expect("a JSON reading");
        let device = doc["device"].as_str().expect("device").to_owned();
        assert_eq!(r.key_text().as_deref(), Some(device.as_str()), "the key is the device");
        let n = doc["n"].as_i64().expect("n");
        assert_eq!(r.header("message_id"), Some(format!("{device}-{n}")), "the identity crosses");
        assert_eq!(r.header("site").as_deref(), Some("north"));
        assert!(r.header("x-bridge.tenant-id").is_none(), "a forged reserved header is stripped: {r:?}");
        by_device.entry(device).or_default().push((r.partition, r.offset, n));
    }
    for (device, records) in &by_device {
        let partitions: BTreeSet<i32> = records.iter().map(|r| r.0).collect();
        assert_eq!(partitions.len(), 1, "{device}'s records in one partition: {records:?}");
        let mut in_log_order = records.clone();
        in_log_order.sort_by_key(|r| r.1);
        let order: Vec<i64> = in_log_order.iter().map(|r| r.2).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4], "{device} in publish order");
    }
    assert!(daemon.terminate().success());
}

/// A topic into an AMQP 0-9-1 queue and a queue into a topic: the record's
/// identity, subject and headers cross, its place in the log arrives as
/// `kafka.*` headers (a forged one is replaced), and the group's committed
/// offset reaches the end only once every record was delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_topic_and_amqp091_cross_both_ways_and_the_offset_follows_delivery() {
    let broker = PrivateKafka::start().await;
    let kafka = Kafka::new(&broker.brokers());
    let (orders, audit, group) = (unique("orders"), unique("audit"), unique("bridge"));
    kafka.create_topic(&orders, 1).await;
    kafka.create_topic(&audit, 1).await;
    let rabbit = Rabbit::connect().await;
    let (out_queue, in_queue) = (unique("kafka-out"), unique("kafka-in"));
    rabbit.declare_queue(&out_queue).await;
    rabbit.declare_queue(&in_queue).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.topic]
type = "kafka"
brokers = "{brokers}"
topics = ["{orders}"]
group = "{group}"
commit_interval_ms = 100

[receivers.queue]
type = "amqp091"
url = "{URL091}"
queue = "{in_queue}"

[senders.amqp]
type = "amqp091"
url = "{URL091}"

[senders.topic]
type = "kafka"
brokers = "{brokers}"
topic = "{audit}"

[[routes]]
id = "from-kafka"
receiver = "topic"

[[routes.bindings]]
sender = "amqp"
address = "{out_queue}"

[[routes]]
id = "into-kafka"
receiver = "queue"

[[routes.bindings]]
sender = "topic"
"#,
        brokers = broker.brokers(),
    ));
    let daemon = Daemon::start(&ws, 4);
    kafka
        .produce(
            &orders,
            Some("k-1"),
            b"first",
            &[
                ("message_id", b"o-1"),
                ("gobridge.subject", b"order.created"),
                ("region", b"eu"),
                ("x-bridge.tenant-id", b"forged"),
                ("kafka.offset", b"999"),
            ],
        )
        .await;
    for i in 2..=5 {
        kafka.produce(&orders, None, format!("record-{i}").as_bytes(), &[]).await;
    }
    let got = rabbit.collect(&out_queue, 5, WAIT).await;
    assert_eq!(got.len(), 5);
    let first = got.iter().find(|d| d.data == b"first").expect("o-1 arrived");
    let p = &first.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("o-1"));
    let headers = p.headers().as_ref().expect("headers").inner();
    let text = |name: &str| match headers.get(name) {
        Some(AMQPValue::LongString(s)) => Some(s.to_string()),
        other => other.map(|v| format!("{v:?}")),
    };
    assert_eq!(text("region").as_deref(), Some("eu"));
    assert_eq!(text("kafka.topic"), Some(orders.clone()));
    assert_eq!(headers.get("kafka.offset"), Some(&AMQPValue::LongLongInt(0)), "the record's own, not the forged one");
    assert_eq!(text("kafka.key").as_deref(), Some("k-1"));
    assert!(!headers.contains_key("x-bridge.tenant-id"), "a forged reserved header is stripped: {headers:?}");
    let second = got.iter().find(|d| d.data == b"record-2").expect("record-2 arrived");
    let second_id = second.properties.message_id().as_ref().map(|s| s.as_str().to_owned());
    assert_eq!(second_id, Some(format!("{orders}-0-1")), "no identity header: the record's place in the log");
    committed_becomes(&kafka, &group, &orders, &[Some(5)]).await;

    // The other way: an AMQP message into the audit topic.
    let mut table = FieldTable::default();
    table.insert("region".into(), AMQPValue::LongString("eu".into()));
    let properties = BasicProperties::default()
        .with_message_id("a-1".into())
        .with_content_type("application/json".into())
        .with_headers(table);
    rabbit.publish("", &in_queue, b"{\"n\":1}", properties).await;
    let back = kafka.read(&audit, 1, WAIT).await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].text(), "{\"n\":1}");
    assert_eq!(back[0].header("message_id").as_deref(), Some("a-1"));
    assert_eq!(back[0].header("content_type").as_deref(), Some("application/json"));
    assert_eq!(back[0].header("region").as_deref(), Some("eu"));
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&out_queue).await;
    rabbit.delete_queue(&in_queue).await;
}

/// The target is down while records wait: the route holds them (an outage
/// spends no replay), the group's offset does not move past any of them,
/// and once the target is back every record arrives and the offset
/// reaches the end.
#[tokio::test(flavor = "multi_thread")]
async fn while_the_target_is_down_the_offset_stays_and_nothing_is_lost() {
    let broker = PrivateKafka::start().await;
    let kafka = Kafka::new(&broker.brokers());
    let (topic, group) = (unique("outage"), unique("bridge"));
    kafka.create_topic(&topic, 1).await;
    let mut target = PrivateRabbit::start().await;
    let queue = unique("kafka-outage");
    Rabbit::connect_to(&target.url091()).await.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "kafka"
brokers = "{brokers}"
topics = ["{topic}"]
group = "{group}"
commit_interval_ms = 100

[senders.out]
type = "amqp091"
url = "{target}"
reconnect_max_ms = 500

[[routes]]
id = "outage"
receiver = "in"
max_in_flight = 8
backoff = {{ initial_ms = 50, max_ms = 200 }}

[[routes.bindings]]
sender = "out"
address = "{queue}"
"#,
        brokers = broker.brokers(),
        target = target.url091(),
    ));
    let daemon = Daemon::start(&ws, 2);
    target.stop().await;
    for i in 0..20 {
        kafka.produce(&topic, None, format!("m-{i}").as_bytes(), &[("message_id", format!("m-{i}").as_bytes())]).await;
    }
    daemon.wait_for_total("ferry_send_unavailable_total", "route=\"outage\"", 2.0, WAIT);
    let held = kafka.committed(&group, &topic).await;
    assert!(held == [None] || held == [Some(0)], "no offset moves while nothing was delivered: {held:?}");

    target.restart().await;
    let got = Rabbit::connect_to(&target.url091()).await.collect(&queue, 20, WAIT).await;
    let seen: BTreeSet<String> = got.iter().map(|d| String::from_utf8_lossy(&d.data).into_owned()).collect();
    assert_eq!(seen.len(), 20, "each of the 20: {seen:?}");
    committed_becomes(&kafka, &group, &topic, &[Some(20)]).await;
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty(), "none dead-lettered: {:?}", ws.dead_letters());
}

#[tokio::test(flavor = "multi_thread")]
async fn validate_connect_names_the_cluster_and_its_topics() {
    let broker = PrivateKafka::start().await;
    let kafka = Kafka::new(&broker.brokers());
    let topic = unique("probed");
    kafka.create_topic(&topic, 2).await;
    let missing = unique("missing");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "kafka"
brokers = "{brokers}"
topics = ["{topic}"]
group = "g"

[senders.ok]
type = "kafka"
brokers = "{brokers}"
topic = "{missing}"

[senders.down]
type = "kafka"
brokers = "127.0.0.1:1"
topic = "{topic}"

[[routes]]
id = "r"
receiver = "in"
dispatch_mode = "fan_out"
[[routes.bindings]]
sender = "ok"
[[routes.bindings]]
sender = "down"
"#,
        brokers = broker.brokers(),
    ));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("receivers.in (kafka): ok") && text.contains(&format!("topic {topic:?}: 2 partitions")),
        "{text}"
    );
    assert!(text.contains("senders.ok (kafka): ok") && text.contains("does not exist"), "{text}");
    assert!(text.contains("senders.down (kafka): FAILED"), "{text}");
}

/// Records of two keys, interleaved in one partition, into an SQS FIFO
/// queue whose message group is the record's key (`kafka.key`): each key
/// is its own group, in log order.
#[tokio::test(flavor = "multi_thread")]
async fn a_topic_into_an_sqs_fifo_queue_groups_by_the_record_key_in_order() {
    sqs::require_aws_env();
    let broker = PrivateKafka::start().await;
    let kafka = Kafka::new(&broker.brokers());
    let topic = unique("fifo-src");
    kafka.create_topic(&topic, 1).await;
    let client = sqs::client();
    let (_, url) = sqs::create_queue(&client, "kafka-fifo", true).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "kafka"
brokers = "{brokers}"
topics = ["{topic}"]
group = "{group}"

[senders.q]
type = "sqs"
queue_url = "{url}"
endpoint_url = "{endpoint}"
message_group_header = "kafka.key"

[[routes]]
id = "to-fifo"
receiver = "in"
max_in_flight = 1

[[routes.bindings]]
sender = "q"
"#,
        brokers = broker.brokers(),
        group = unique("bridge"),
        endpoint = sqs::endpoint(),
    ));
    let daemon = Daemon::start(&ws, 2);
    for i in 0..4 {
        for key in ["dev-1", "dev-2"] {
            kafka.produce(&topic, Some(key), format!("{key}:{i}").as_bytes(), &[]).await;
        }
    }
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in sqs::consume(&client, &url, 8, 60).await {
        groups
            .entry(sqs::system_attribute(&m, "MessageGroupId"))
            .or_default()
            .push(m.body().unwrap_or_default().into());
    }
    for key in ["dev-1", "dev-2"] {
        let want: Vec<String> = (0..4).map(|i| format!("{key}:{i}")).collect();
        assert_eq!(groups.get(key), Some(&want), "{groups:?}");
    }
    assert!(daemon.terminate().success());
}

/// A relay from one topic to another through ferry, as an instance `id`
/// in group `group`.
fn relay_config(brokers: &str, from: &str, to: &str, group: &str, id: &str, mode: &str) -> String {
    format!(
        r#"
[instance]
id = "{id}"

[receivers.in]
type = "kafka"
brokers = "{brokers}"
topics = ["{from}"]
group = "{group}"
commit_interval_ms = 200
# A member that stops answering loses its partitions after this.
session_timeout_ms = 6000

[senders.out]
type = "kafka"
brokers = "{brokers}"
topic = "{to}"

[[routes]]
id = "relay"
receiver = "in"
delivery_mode = "{mode}"
max_in_flight = 64

[[routes.bindings]]
sender = "out"
"#
    )
}

/// Twenty records through a relay whose both ends carry `security` (the
/// `tls` or `sasl` keys) on `brokers`, which `kafka` (a client with the
/// same settings) reaches too: every record arrives and the group's offset
/// reaches the end.
async fn relay_with(brokers: &str, security: &str, kafka: &Kafka) {
    let (from, to, group) = (unique("secure-in"), unique("secure-out"), unique("secure"));
    kafka.create_topic(&from, 1).await;
    kafka.create_topic(&to, 1).await;
    let records: Vec<(String, String)> = (0..20).map(|i| (format!("id-{i}"), format!("record {i}"))).collect();
    kafka.produce_all(&from, &records).await;
    let line = format!("brokers = \"{brokers}\"");
    let config = relay_config(brokers, &from, &to, &group, "secure", "direct_hold");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config.replace(&line, &format!("{line}\n{security}")));
    let daemon = Daemon::start(&ws, 2);
    let got = kafka.read(&to, 20, WAIT).await;
    let ids: BTreeSet<String> = got.iter().filter_map(|r| r.header("message_id")).collect();
    assert_eq!(ids, records.iter().map(|(id, _)| id.clone()).collect(), "every record, through {security}");
    committed_to_the_end(kafka, &group, &from, 20).await;
    assert!(daemon.terminate().success());
}

/// A cluster that clients reach over TLS only (a TLS front with a
/// certificate of the test's own CA, which the broker advertises as its
/// address): with `tls = { ca_file }` on both ends a relay moves every
/// record and commits behind them. Without the key nothing would move: the
/// front drops a client that does not speak TLS or does not trust it.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_behind_tls_is_reached_with_the_tls_key() {
    let certs = ferry_tests::tls::TestCerts::generate();
    let ca = certs.ca().display().to_string();
    let behind_tls = PrivateKafka::start_behind_tls(&certs).await;
    let client = ClientConfig::new()
        .set("bootstrap.servers", behind_tls.brokers())
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", &ca)
        .clone();
    relay_with(&behind_tls.brokers(), &format!("tls = {{ ca_file = \"{ca}\" }}"), &Kafka::with(client)).await;
}

/// SCRAM users on a real broker that requires authentication (tansu with
/// `--authentication`; the users made before, kept in its SQLite storage
/// across the restart that turns authentication on): a relay whose both
/// ends carry `sasl` moves every record with SCRAM-SHA-256 and with
/// SCRAM-SHA-512, and a wrong password is refused by `validate --connect`
/// (the broker checks the proof; the password is never printed).
#[tokio::test(flavor = "multi_thread")]
async fn scram_users_are_authenticated_and_a_wrong_password_is_refused() {
    let mut broker = PrivateKafka::start_persistent().await;
    let password = unique("pw");
    broker.create_user("ferry256", &password, "scram256");
    broker.create_user("ferry512", &password, "scram512");
    broker.stop();
    broker.require_authentication(true);
    broker.restart().await;
    for (mechanism, user) in [("scram-sha-256", "ferry256"), ("scram-sha-512", "ferry512")] {
        let client = ClientConfig::new()
            .set("bootstrap.servers", broker.brokers())
            .set("security.protocol", "sasl_plaintext")
            .set("sasl.mechanism", mechanism.to_ascii_uppercase())
            .set("sasl.username", user)
            .set("sasl.password", &password)
            .clone();
        let sasl =
            format!("sasl = {{ mechanism = \"{mechanism}\", username = \"{user}\", password = \"{password}\" }}");
        relay_with(&broker.brokers(), &sasl, &Kafka::with(client)).await;
    }
    let wrong = unique("wrong");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "kafka"
brokers = "{brokers}"
topics = ["t"]
group = "g"
sasl = {{ mechanism = "scram-sha-256", username = "ferry256", password = "{wrong}" }}

[senders.out]
type = "mqtt"
url = "{mqtt}"
client_id = "{client}"
default_topic = "x"

[[routes]]
id = "r"
receiver = "in"
[[routes.bindings]]
sender = "out"
"#,
        brokers = broker.brokers(),
        mqtt = broker_url(),
        client = unique("kafka-sasl"),
    ));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("receivers.in (kafka): FAILED"), "{text}");
    assert!(!text.contains(&wrong), "the password is printed: {text}");
}

/// A real broker killed mid-stream (SIGKILL) and started again on its port
/// with its data (SQLite storage) after longer than every backoff: both
/// ends of the relay are on it, so nothing can be fetched, committed or
/// sent meanwhile. Every record reaches the target topic, none is
/// dead-lettered and the group's offsets reach the end, in both delivery
/// modes.
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_restart_mid_stream_delays_the_relay_and_loses_nothing() {
    const N: usize = 600;
    for mode in ["direct_hold", "shared_outbox"] {
        let mut broker = PrivateKafka::start_persistent().await;
        let kafka = Kafka::new(&broker.brokers());
        let (from, to, group) = (unique("from"), unique("to"), unique("restart"));
        kafka.create_topic(&from, 2).await;
        kafka.create_topic(&to, 2).await;
        let records: Vec<(String, String)> = (0..N).map(|i| (format!("m-{i}"), format!("m-{i}"))).collect();
        kafka.produce_all(&from, &records).await;
        let ws = Workspace::with_plugins(&[]);
        ws.config(&relay_config(&broker.brokers(), &from, &to, &group, "restart-1", mode));
        let daemon = Daemon::start(&ws, 2);
        daemon.wait_for_total("ferry_messages_acked_total", "route=\"relay\"", 100.0, WAIT);
        broker.stop();
        // The outage itself: longer than the route's and the clients'
        // backoffs.
        tokio::time::sleep(Duration::from_secs(8)).await;
        broker.restart().await;
        let expected: BTreeSet<String> = records.iter().map(|(id, _)| id.clone()).collect();
        let written = identities_once_all_there(&kafka, &to, &expected).await;
        committed_to_the_end(&kafka, &group, &from, N).await;
        eprintln!("{mode}: {written} records for {N} messages across the broker restart");
        assert!(daemon.terminate().success());
        assert!(ws.dead_letters().is_empty(), "{mode}: {:?}", ws.dead_letters());
    }
}

/// Waits (bounded) until `group`'s committed offsets on `topic` add up to
/// `n`, the records the topic holds: every one settled.
async fn committed_to_the_end(kafka: &Kafka, group: &str, topic: &str, n: usize) {
    ferry_tests::eventually_within("the committed offsets at the end", Duration::from_secs(60), || async {
        let now = kafka.committed(group, topic).await;
        if now.iter().map(|o| o.unwrap_or(0)).sum::<i64>() == n as i64 { Ok(now) } else { Err(now) }
    })
    .await;
}

/// The identities of the records in `topic` once every one of `expected`
/// is there (bounded), and how many records that took.
async fn identities_once_all_there(kafka: &Kafka, topic: &str, expected: &BTreeSet<String>) -> usize {
    ferry_tests::eventually_within("every identity in the target topic", Duration::from_secs(120), || async {
        let got = kafka.read(topic, usize::MAX, Duration::from_secs(3)).await;
        let ids: BTreeSet<String> = got.iter().filter_map(|r| r.header("message_id")).collect();
        let missing = expected.difference(&ids).count();
        if missing == 0 { Ok(got.len()) } else { Err(missing) }
    })
    .await
}

/// A relay of `n` records, from one topic of two partitions to another,
/// on a mock cluster of its own, in delivery mode `mode`: returned once
/// ferry acknowledged `acked` of them.
struct Relay {
    broker: MockKafka,
    kafka: Kafka,
    ws: Workspace,
    daemon: Daemon,
    from: String,
    to: String,
    group: String,
    n: usize,
}

impl Relay {
    async fn start(mode: &str, n: usize, acked: f64) -> Self {
        let broker = MockKafka::start();
        let kafka = Kafka::new(&broker.brokers());
        let (from, to, group) = (unique("from"), unique("to"), unique("relay"));
        broker.create_topic(&from, 2);
        broker.create_topic(&to, 2);
        let records: Vec<(String, String)> = (0..n).map(|i| (format!("m-{i}"), format!("m-{i}"))).collect();
        kafka.produce_all(&from, &records).await;
        let ws = Workspace::with_plugins(&[]);
        ws.config(&relay_config(&broker.brokers(), &from, &to, &group, "relay-1", mode));
        let daemon = Daemon::start(&ws, 2);
        daemon.wait_for_total("ferry_messages_acked_total", "route=\"relay\"", acked, Duration::from_secs(60));
        Self { broker, kafka, ws, daemon, from, to, group, n }
    }

    /// Waits until every record is in the target topic and the group's
    /// committed offsets reach the end; how many records the target holds.
    async fn all_there(&self) -> usize {
        let expected: BTreeSet<String> = (0..self.n).map(|i| format!("m-{i}")).collect();
        let written = identities_once_all_there(&self.kafka, &self.to, &expected).await;
        committed_to_the_end(&self.kafka, &self.group, &self.from, self.n).await;
        written
    }
}

/// `kill -9` of ferry while it relays 5,000 records from one topic to
/// another, in each delivery mode: after a restart the group's committed
/// offset (never past a record that was not settled) delivers again what
/// the killed one had in flight, so every record is in the target topic
/// (what was in flight may be there twice: counted and reported) and the
/// committed offsets reach the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_while_relaying_loses_nothing_in_either_delivery_mode() {
    const N: usize = 5_000;
    for mode in ["direct_hold", "shared_outbox"] {
        let mut relay = Relay::start(mode, N, 1_000.0).await;
        relay.daemon.kill();
        relay.daemon = Daemon::start(&relay.ws, 2);
        let written = relay.all_there().await;
        eprintln!("{mode}: {written} records for {N} messages after the crash");
        assert!(relay.daemon.terminate().success());
    }
}

/// The cluster goes down mid-stream for longer than every backoff (its
/// connections closed, new ones refused) and comes back with its data:
/// both ends of the route are on it, so the receiver can neither fetch nor
/// commit and the sender cannot deliver. Every record reaches the target
/// topic once the broker is back, none is dead-lettered, and the group's
/// offsets reach the end, in both delivery modes. (Measured: the broker
/// went down with about 1,220 of 3,000 acknowledged; `direct_hold` wrote
/// 3,910 records, the uncommitted ones again, at least once as it
/// promises; `shared_outbox` wrote 3,000.)
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_down_mid_stream_delays_the_relay_and_loses_nothing() {
    const N: usize = 3_000;
    for mode in ["direct_hold", "shared_outbox"] {
        let relay = Relay::start(mode, N, 500.0).await;
        relay.broker.set_up(false);
        // The outage itself: longer than the route's and the clients'
        // backoffs.
        tokio::time::sleep(Duration::from_secs(8)).await;
        relay.broker.set_up(true);
        let written = relay.all_there().await;
        eprintln!("{mode}: {written} records for {N} messages across the outage");
        assert!(relay.daemon.terminate().success());
        assert!(relay.ws.dead_letters().is_empty(), "{mode}: {:?}", relay.ws.dead_letters());
    }
}

/// Two instances in one group on a topic of four partitions, the second
/// joining mid-stream (a rebalance moves partitions away from the first
/// while it holds records) and the first leaving before the end (another):
/// every record reaches the target topic.
#[tokio::test(flavor = "multi_thread")]
async fn two_instances_in_one_group_lose_nothing_across_rebalances() {
    const N: usize = 2_000;
    let broker = MockKafka::start();
    let kafka = Kafka::new(&broker.brokers());
    let (from, to, group) = (unique("from"), unique("to"), unique("workers"));
    broker.create_topic(&from, 4);
    broker.create_topic(&to, 4);
    let (a, b) = (Workspace::with_plugins(&[]), Workspace::with_plugins(&[]));
    a.config(&relay_config(&broker.brokers(), &from, &to, &group, "a", "direct_hold"));
    b.config(&relay_config(&broker.brokers(), &from, &to, &group, "b", "direct_hold"));
    let record = |i: usize| (format!("m-{i}"), format!("m-{i}"));
    let first = Daemon::start(&a, 2);
    kafka.produce_all(&from, &(0..N / 2).map(record).collect::<Vec<_>>()).await;
    first.wait_for_total("ferry_messages_acked_total", "route=\"relay\"", 100.0, WAIT);
    let second = Daemon::start(&b, 2);
    // More in small batches, paced, until the second has taken some (its
    // partitions come with the rebalance its joining starts), then the
    // rest: N records at least, more if the rebalance took longer.
    let acked = |d: &Daemon| {
        let m = ferry_tests::http::metrics(&d.admin());
        ferry_tests::http::sample(&m, "ferry_messages_acked_total", "route=\"relay\"").unwrap_or(0.0)
    };
    let mut produced = N / 2;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while acked(&second) == 0.0 {
        assert!(std::time::Instant::now() < deadline, "the second instance took nothing within 60 s");
        kafka.produce_all(&from, &(produced..produced + 20).map(record).collect::<Vec<_>>()).await;
        produced += 20;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = produced.max(N);
    kafka.produce_all(&from, &(produced..n).map(record).collect::<Vec<_>>()).await;
    assert!(first.terminate().success());
    let expected: BTreeSet<String> = (0..n).map(|i| record(i).0).collect();
    let written = identities_once_all_there(&kafka, &to, &expected).await;
    eprintln!("{written} records for {n} messages across two rebalances");
    committed_to_the_end(&kafka, &group, &from, n).await;
    assert!(second.terminate().success());
}
