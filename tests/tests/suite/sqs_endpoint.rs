//! The SQS endpoint (`[endpoints.sqs]`) in the real daemon, driven by
//! boto3 as an application would: queues declared in config and created
//! through the API, messages with attributes and digests boto3 reads, the
//! errors boto3 turns into its typed exceptions, and everything still there
//! after the daemon restarts.

use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::get;
use ferry_tests::python::run_json;
use ferry_tests::unique;

const WAIT: Duration = Duration::from_secs(20);

/// What every script starts with: the client for `sys.argv[1]`, the queue
/// name `sys.argv[2]`, AWS's MD5 of message attributes, computed here
/// independently of ferry's, and `receive_one` (one message of a queue,
/// its digests checked).
const PRELUDE: &str = r#"
import json, sys, hashlib, struct, boto3
endpoint, name = sys.argv[1], sys.argv[2]
key_id, secret = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else ("x", "x")
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id=key_id, aws_secret_access_key=secret)
def md5_attrs(attrs):
    h = hashlib.md5()
    for k in sorted(attrs):
        v = attrs[k]
        for part in (k.encode(), v["DataType"].encode()):
            h.update(struct.pack(">I", len(part)) + part)
        if "BinaryValue" in v:
            h.update(b"\x02" + struct.pack(">I", len(v["BinaryValue"])) + v["BinaryValue"])
        else:
            s = v["StringValue"].encode()
            h.update(b"\x01" + struct.pack(">I", len(s)) + s)
    return h.hexdigest()
def receive_one(url):
    got = []
    for _ in range(10):
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, MessageAttributeNames=["All"]).get("Messages", [])
        if got:
            break
    m = got[0]
    assert m["MD5OfBody"] == hashlib.md5(m["Body"].encode()).hexdigest()
    if "MessageAttributes" in m:
        assert m["MD5OfMessageAttributes"] == md5_attrs(m["MessageAttributes"])
    return m
"#;

/// Sends three messages to `sys.argv[2]` (a queue it creates) and receives
/// one of them, leaving it in flight; prints what it saw.
const FIRST: &str = r#"
out = {}
declared = sqs.get_queue_url(QueueName="declared")["QueueUrl"]
out["declared_visibility"] = sqs.get_queue_attributes(
    QueueUrl=declared, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"]
url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
out["url"] = url


attrs = {"color": {"DataType": "String", "StringValue": "red"},
         "raw": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
         "n": {"DataType": "Number", "StringValue": "7"}}
sent = []
for body in ["one", "two", "three"]:
    r = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)
    assert r["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest(), r
    assert r["MD5OfMessageAttributes"] == md5_attrs(attrs), r
    sent.append(r["MessageId"])
out["sent"] = sent
got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, MessageAttributeNames=["All"],
                          MessageSystemAttributeNames=["All"])["Messages"][0]
assert got["MD5OfBody"] == hashlib.md5(got["Body"].encode()).hexdigest()
assert got["MD5OfMessageAttributes"] == md5_attrs(got["MessageAttributes"])
out["in_flight"] = got["MessageId"]
out["received_attrs"] = {k: v.get("StringValue", list(v.get("BinaryValue", b""))) for k, v in got["MessageAttributes"].items()}
try:
    sqs.get_queue_url(QueueName=name + "-missing")
    out["missing"] = "found"
except sqs.exceptions.QueueDoesNotExist as e:
    out["missing"] = e.response["Error"]["Code"]
try:
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={"Amazon.x": {"DataType": "String", "StringValue": "v"}})
    out["bad_name"] = "accepted"
except sqs.exceptions.ClientError as e:
    out["bad_name"] = e.response["Error"]["Code"]
print(json.dumps(out))
"#;

/// After the restart: what is left to receive.
const SECOND: &str = r#"
url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                          MessageAttributeNames=["color"]).get("Messages", [])
for m in got:
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
print(json.dumps({"visible": a["ApproximateNumberOfMessages"], "in_flight": a["ApproximateNumberOfMessagesNotVisible"],
                  "ids": [m["MessageId"] for m in got], "colors": [m["MessageAttributes"]["color"]["StringValue"] for m in got]}))
"#;

/// Runs a boto3 script with the endpoint and queue name as its arguments.
async fn boto3(script: &'static str, endpoint: &str, name: &str) -> serde_json::Value {
    boto3_as(script, endpoint, name, "x", "x").await
}

/// [`boto3`], signing with this access key.
async fn boto3_as(script: &'static str, endpoint: &str, name: &str, key_id: &str, secret: &str) -> serde_json::Value {
    let args = [endpoint, name, key_id, secret].map(str::to_owned);
    let script = format!("{PRELUDE}{script}");
    tokio::task::spawn_blocking(move || run_json("boto3", &script, &args.each_ref().map(String::as_str)))
        .await
        .expect("python")
}

#[tokio::test(flavor = "multi_thread")]
async fn boto3_uses_the_daemons_endpoint_and_its_queues_survive_a_restart() {
    let listen = ANY_PORT;
    let admin = ANY_PORT.to_owned();
    let config = with_admin(
        &admin,
        format!(
            "[endpoints.sqs]\nlisten = \"{listen}\"\n\n[endpoints.sqs.queues.declared]\nattributes = {{ VisibilityTimeout = \"45\" }}\n"
        ),
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config);
    let name = unique("boto");

    // Ready (/readyz 200) once the endpoint's sender and receivers are up:
    // an endpoint that never said so kept the daemon at 503 for ever.
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let endpoint = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    let first = boto3(FIRST, &endpoint, &name).await;
    assert_eq!(first["declared_visibility"], "45");
    assert_eq!(first["url"], format!("{endpoint}/000000000000/{name}"));
    assert_eq!(first["missing"], "AWS.SimpleQueueService.NonExistentQueue");
    assert_eq!(first["bad_name"], "InvalidParameterValue");
    assert_eq!(first["received_attrs"]["color"], "red");
    assert_eq!(first["received_attrs"]["raw"], serde_json::json!([0, 255]));
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    assert!(
        metrics.contains(&format!(
            "ferry_sqs_endpoint_requests_total{{action=\"SendMessage\",queue=\"{name}\",code=\"ok\"}} 3"
        )),
        "{metrics}"
    );
    assert!(daemon.terminate().success(), "a clean stop");

    let daemon = Daemon::start(&ws, 0);
    // Another port after the restart (port 0): the queues are the store's.
    let endpoint = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    let second = boto3(SECOND, &endpoint, &name).await;
    assert_eq!(second["visible"], "2");
    assert_eq!(second["in_flight"], "1", "received before the restart, still invisible after it");
    let ids: Vec<&str> = second["ids"].as_array().expect("ids").iter().filter_map(|v| v.as_str()).collect();
    let sent: Vec<&str> = first["sent"].as_array().expect("sent").iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|id| sent.contains(id) && *id != first["in_flight"]), "{ids:?} of {sent:?}");
    assert_eq!(second["colors"], serde_json::json!(["red", "red"]));
    assert!(daemon.terminate().success());
}

#[test]
fn a_bad_endpoint_config_is_refused_with_its_key() {
    let ws = Workspace::with_plugins(&[]);
    for (config, key) in [
        ("[endpoints.sqs]\nlisten = \"0.0.0.0:9324\"\n", "endpoints.sqs.listen"),
        ("[endpoints.sqs]\nlisten = \"0.0.0.0:9324\"\nauth = \"verify\"\n", "endpoints.sqs.access_keys"),
        ("[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\naccount = \"12\"\n", "endpoints.sqs.account"),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[endpoints.sqs.queues.\"a.fifo\"]\n",
            "endpoints.sqs.queues.a.fifo.attributes.FifoQueue",
        ),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[endpoints.sqs.queues.\"bad/name\"]\n",
            "endpoints.sqs.queues.bad/name",
        ),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[endpoints.sqs.topics.\"t.fifo\"]\n",
            "endpoints.sqs.topics.t.fifo",
        ),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[receivers.r]\ntype = \"sqs_endpoint\"\nqueue = \"q\"\ntopic = \"t\"\n",
            "receivers.r: set either queue or topic",
        ),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[receivers.r]\ntype = \"sqs_endpoint\"\n",
            "receivers.r: set either queue or topic",
        ),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[receivers.r]\ntype = \"sqs_endpoint\"\ntopic = \"a b\"\n",
            "receivers.r.topic",
        ),
    ] {
        ws.config(config);
        let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config} was accepted");
        assert!(stderr.contains(key), "{config}: {stderr}");
    }
}

/// Two routes through one daemon: endpoint queue `inbox` → MQTT `to_mqtt`,
/// and MQTT `from_mqtt` → endpoint queue `outbox`.
struct Bridges<'a> {
    listen: &'a str,
    inbox: &'a str,
    outbox: &'a str,
    outbox_attributes: &'a str,
    to_mqtt: &'a str,
    from_mqtt: &'a str,
    /// More keys of the first route.
    first_route: &'a str,
    /// More keys of the endpoint sender.
    fifo_sender: &'a str,
    /// More keys of the MQTT receiver.
    devices: &'a str,
}

fn two_bridges(b: &Bridges<'_>) -> String {
    let broker = ferry_tests::mqtt::broker_url();
    format!(
        r#"[endpoints.sqs]
listen = "{listen}"
[endpoints.sqs.queues."{inbox}"]
[endpoints.sqs.queues."{outbox}"]
attributes = {{ {outbox_attributes} }}

[receivers.apps]
type = "sqs_endpoint"
queue = "{inbox}"

[senders.mqtt]
type = "mqtt"
url = "{broker}"
client_id = "{out_id}"

[receivers.devices]
type = "mqtt"
url = "{broker}"
client_id = "{in_id}"
topics = ["{from_mqtt}"]
{devices}

[senders.apps]
type = "sqs_endpoint"
queue = "{outbox}"
{fifo_sender}

[[routes]]
id = "apps-to-mqtt"
receiver = "apps"
{first_route}
[[routes.bindings]]
sender = "mqtt"
address = "{to_mqtt}"

[[routes]]
id = "mqtt-to-apps"
receiver = "devices"
[[routes.bindings]]
sender = "apps"
"#,
        listen = b.listen,
        inbox = b.inbox,
        outbox = b.outbox,
        outbox_attributes = b.outbox_attributes,
        from_mqtt = b.from_mqtt,
        to_mqtt = b.to_mqtt,
        first_route = b.first_route,
        fifo_sender = b.fifo_sender,
        devices = b.devices,
        out_id = unique("ep-out"),
        in_id = unique("ep-in"),
    )
}

/// boto3 sends with attributes; what an MQTT subscriber gets.
const SEND: &str = r#"
url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
r = sqs.send_message(QueueUrl=url, MessageBody='{"order": 42}', MessageAttributes={
    "color": {"DataType": "String", "StringValue": "red"},
    "qty": {"DataType": "Number", "StringValue": "3"}})
print(json.dumps({"id": r["MessageId"]}))
"#;

/// boto3 receives what a route put on the queue, checking every digest.
const RECEIVE: &str = r#"
url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
m = receive_one(url)
sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
print(json.dumps({"body": m["Body"], "attrs": {k: v.get("StringValue") for k, v in m["MessageAttributes"].items()}}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn routes_bridge_endpoint_queues_and_mqtt_both_ways() {
    use ferry_tests::mqtt::{TestMqtt, broker_url, topic, user_property};
    let (inbox, outbox) = (unique("inbox"), unique("outbox"));
    let (to_mqtt, from_mqtt) = (unique("ep/out"), unique("ep/in"));
    let config = two_bridges(&Bridges {
        listen: ANY_PORT,
        inbox: &inbox,
        outbox: &outbox,
        outbox_attributes: "",
        to_mqtt: &to_mqtt,
        from_mqtt: &from_mqtt,
        first_route: "",
        fifo_sender: "",
        devices: "",
    });
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&to_mqtt).await;
    // The endpoint receiver, the MQTT sender and receiver log "connected".
    let daemon = Daemon::start(&ws, 3);
    let endpoint = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));

    let sent = boto3(SEND, &endpoint, &inbox).await;
    let publish = sub.next(WAIT).await.expect("the app's message reaches MQTT");
    assert_eq!(topic(&publish), to_mqtt);
    assert_eq!(&publish.payload[..], br#"{"order": 42}"#);
    assert_eq!(user_property(&publish, "color"), Some("red"));
    assert_eq!(user_property(&publish, "qty"), Some("3"));
    assert!(sent["id"].is_string());
    // Acknowledged: deleted from the endpoint queue, not just hidden.
    let sqs = ferry_tests::sqs::client_for(&endpoint);
    let inbox_url = format!("{endpoint}/000000000000/{inbox}");
    ferry_tests::eventually_async("(visible, in flight) = (0, 0) after the route acknowledged", || async {
        let depth = ferry_tests::sqs::depth(&sqs, &inbox_url).await;
        if depth == (0, 0) { Ok(depth) } else { Err(depth) }
    })
    .await;

    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&from_mqtt, "reading 21.5", &[("sensor", "kitchen"), ("unit", "C")]).await;
    let got = boto3(RECEIVE, &endpoint, &outbox).await;
    assert_eq!(got["body"], "reading 21.5");
    assert_eq!(got["attrs"]["sensor"], "kitchen");
    assert_eq!(got["attrs"]["unit"], "C");
    assert!(daemon.terminate().success());
}

/// 300 messages from an app through two routes and back to an app: endpoint
/// queue → (shared_outbox) → MQTT → FIFO endpoint queue, its group taken
/// from an attribute that crossed MQTT as a user property. Nothing is lost
/// or duplicated, every group comes out whole, and the first queue ends
/// empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_load_through_endpoint_queues_and_mqtt_loses_nothing() {
    load_through_endpoint_queues_and_mqtt(1).await;
}

/// The same load through two instances on one PostgreSQL store, with the
/// same config: apps send to either endpoint, both instances' routes take
/// from the shared queue and share the MQTT subscription, and the app
/// reads the FIFO queue through the other endpoint.
#[tokio::test(flavor = "multi_thread")]
async fn a_load_through_two_instances_on_a_shared_store_loses_nothing() {
    load_through_endpoint_queues_and_mqtt(2).await;
}

async fn load_through_endpoint_queues_and_mqtt(instances: usize) {
    use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, SendMessageBatchRequestEntry};
    let db = if instances > 1 { Some(ferry_tests::pg::TestDb::new().await) } else { None };
    let (inbox, outbox) = (unique("load-in"), format!("{}.fifo", unique("load-out")));
    let via = unique("ep/load");
    let mut running = Vec::new();
    let mut endpoints = Vec::new();
    for _ in 0..instances {
        let mut config = two_bridges(&Bridges {
            listen: ANY_PORT,
            inbox: &inbox,
            outbox: &outbox,
            outbox_attributes: "FifoQueue = \"true\"",
            to_mqtt: &via,
            from_mqtt: &via,
            first_route: "delivery_mode = \"shared_outbox\"",
            fifo_sender: "message_group_header = \"group\"",
            devices: if instances > 1 { "share_group = \"load\"" } else { "" },
        });
        if let Some(db) = &db {
            config = format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\n\n{config}", db.url);
        }
        let ws = Workspace::with_plugins(&[]);
        ws.config(&config);
        let daemon = Daemon::start(&ws, 3);
        endpoints.push(format!("http://{}", daemon.listener("sqs_endpoint", "sqs")));
        running.push((ws, daemon));
    }
    let clients: Vec<_> = endpoints.iter().map(|e| ferry_tests::sqs::client_for(e)).collect();
    const TOTAL: usize = 300;
    for batch in 0..TOTAL / 10 {
        let (sqs, endpoint) = (&clients[batch % instances], &endpoints[batch % instances]);
        let entries = (0..10)
            .map(|i| {
                let n = batch * 10 + i;
                let text = |v: String| MessageAttributeValue::builder().data_type("String").string_value(v).build();
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(format!("message {n}"))
                    .message_attributes("group", text(format!("g{}", n % 3)).expect("attribute"))
                    .build()
                    .expect("entry")
            })
            .collect();
        let inbox_url = format!("{endpoint}/000000000000/{inbox}");
        let out =
            sqs.send_message_batch().queue_url(&inbox_url).set_entries(Some(entries)).send().await.expect("batch");
        assert_eq!(out.successful().len(), 10);
    }
    let (sqs, endpoint) = (&clients[instances - 1], &endpoints[instances - 1]);
    let outbox_url = format!("{endpoint}/000000000000/{outbox}");
    let mut bodies = std::collections::BTreeSet::new();
    let mut groups = std::collections::BTreeMap::<String, usize>::new();
    let mut deliveries = 0;
    let started = std::time::Instant::now();
    while bodies.len() < TOTAL && started.elapsed() < Duration::from_secs(90) {
        let got = sqs
            .receive_message()
            .queue_url(&outbox_url)
            .max_number_of_messages(10)
            .wait_time_seconds(2)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .expect("receive");
        for m in got.messages() {
            deliveries += 1;
            if bodies.insert(m.body().expect("body").to_owned()) {
                let group =
                    m.attributes().and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId)).expect("group");
                *groups.entry(group.clone()).or_default() += 1;
            }
            sqs.delete_message()
                .queue_url(&outbox_url)
                .receipt_handle(m.receipt_handle().expect("h"))
                .send()
                .await
                .expect("delete");
        }
    }
    assert_eq!(bodies.len(), TOTAL, "every message arrived");
    assert_eq!(deliveries, TOTAL, "none twice");
    assert_eq!(groups, [("g0".to_owned(), 100), ("g1".to_owned(), 100), ("g2".to_owned(), 100)].into());
    let inbox_url = format!("{endpoint}/000000000000/{inbox}");
    assert_eq!(ferry_tests::sqs::depth(sqs, &inbox_url).await, (0, 0), "the first queue was emptied");
    for (_, daemon) in running {
        assert!(daemon.terminate().success());
    }
    if let Some(db) = db {
        db.drop().await;
    }
}

/// Creates a queue and sends to it; prints the error code boto3 got, if any.
const SIGNED: &str = r#"
try:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="signed")
    n = len(sqs.receive_message(QueueUrl=url).get("Messages", []))
    print(json.dumps({"code": "ok", "received": n}))
except sqs.exceptions.ClientError as e:
    print(json.dumps({"code": e.response["Error"]["Code"]}))
"#;

/// A presigned query-protocol GET made by botocore's own SigV4 query signer;
/// prints the status and whether the reply is ListQueues' XML.
const PRESIGNED: &str = r#"
import urllib.request, urllib.error
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
request = AWSRequest(method="GET", url=endpoint + "/?Action=ListQueues&Version=2012-11-05")
SigV4QueryAuth(Credentials(key_id, secret), "sqs", "us-east-1", expires=300).add_auth(request)
try:
    with urllib.request.urlopen(request.prepare().url) as r:
        print(json.dumps({"status": r.status, "xml": "<ListQueuesResponse" in r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "xml": "<ErrorResponse" in e.read().decode()}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn boto3_requests_are_verified_with_sigv4() {
    let ws = Workspace::with_plugins(&[]).with_env(&[("FERRY_TEST_SQS_SECRET", "s3cret-for-boto")]);
    ws.config(&format!(
        "[endpoints.sqs]\nlisten = \"{ANY_PORT}\"\nauth = \"verify\"\n\n[[endpoints.sqs.access_keys]]\nid = \"AKIDBOTO\"\nsecret = \"${{FERRY_TEST_SQS_SECRET}}\"\n"
    ));
    let daemon = Daemon::start(&ws, 0);
    let endpoint = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    let ok = boto3_as(SIGNED, &endpoint, &unique("sig"), "AKIDBOTO", "s3cret-for-boto").await;
    assert_eq!(ok, serde_json::json!({"code": "ok", "received": 1}));
    let wrong = boto3_as(SIGNED, &endpoint, &unique("sig"), "AKIDBOTO", "guessed").await;
    assert_eq!(wrong["code"], "SignatureDoesNotMatch");
    let unknown = boto3_as(SIGNED, &endpoint, &unique("sig"), "AKIDNOBODY", "s3cret-for-boto").await;
    assert_eq!(unknown["code"], "InvalidClientTokenId");
    let presigned = boto3_as(PRESIGNED, &endpoint, "", "AKIDBOTO", "s3cret-for-boto").await;
    assert_eq!(presigned, serde_json::json!({"status": 200, "xml": true}));
    let forged = boto3_as(PRESIGNED, &endpoint, "", "AKIDBOTO", "guessed").await;
    assert_eq!(forged, serde_json::json!({"status": 403, "xml": true}));
    // `ferry render` does not show the secret.
    let out = ws.ferry(&["render", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && !text.contains("s3cret-for-boto") && text.contains("AKIDBOTO"), "{text}");
    assert!(daemon.terminate().success());
}

/// boto3's SNS client publishes to a topic with two endpoint queues
/// subscribed (one raw) and reads both queues back.
const SNS_FAN_OUT: &str = r#"
topic, enveloped, raw = sys.argv[2].split(",")
sns = boto3.client("sns", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id=key_id, aws_secret_access_key=secret)
arn = sns.create_topic(Name=topic)["TopicArn"]
for q, attrs in [(enveloped, {}), (raw, {"RawMessageDelivery": "true"})]:
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint="arn:aws:sqs:us-east-1:000000000000:" + q, Attributes=attrs)
r = sns.publish(TopicArn=arn, Message="disk almost full", Subject="alert",
                MessageAttributes={"severity": {"DataType": "String", "StringValue": "high"},
                                   "pct": {"DataType": "Number", "StringValue": "93"}})
out = {"id": r["MessageId"], "arn": arn}
for q in (enveloped, raw):
    m = receive_one(sqs.get_queue_url(QueueName=q)["QueueUrl"])
    out[q] = {"body": m["Body"], "attrs": {k: v.get("StringValue") for k, v in m.get("MessageAttributes", {}).items()}}
print(json.dumps(out))
"#;

/// SNS publish → two endpoint queues (enveloped and raw) and, through a
/// route receiving from the topic, a RabbitMQ queue.
#[tokio::test(flavor = "multi_thread")]
async fn an_sns_publish_reaches_two_endpoint_queues_and_a_rabbitmq_queue() {
    use ferry_tests::rabbit::{Rabbit, URL091};
    let listen = ANY_PORT;
    let (topic, enveloped, raw, amqp_queue) = (unique("alerts"), unique("env"), unique("raw"), unique("sns-amqp"));
    let rabbit = Rabbit::connect().await;
    rabbit.declare_queue(&amqp_queue).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"[endpoints.sqs]
listen = "{listen}"
[endpoints.sqs.queues."{enveloped}"]
[endpoints.sqs.queues."{raw}"]
[endpoints.sqs.topics."{topic}"]

[receivers.alerts]
type = "sqs_endpoint"
topic = "{topic}"

[senders.rabbit]
type = "amqp091"
url = "{URL091}"

[[routes]]
id = "alerts-to-rabbit"
receiver = "alerts"
[[routes.bindings]]
sender = "rabbit"
address = "{amqp_queue}"
"#
    ));
    // The topic receiver and the AMQP sender log "connected".
    let daemon = Daemon::start(&ws, 2);
    let endpoint = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    let out = boto3(SNS_FAN_OUT, &endpoint, &format!("{topic},{enveloped},{raw}")).await;
    let arn = format!("arn:aws:sns:us-east-1:000000000000:{topic}");
    assert_eq!(out["arn"], arn.as_str());

    let note: serde_json::Value =
        serde_json::from_str(out[&enveloped]["body"].as_str().expect("body")).expect("a Notification");
    assert_eq!(note["Type"], "Notification");
    assert_eq!(note["Message"], "disk almost full");
    assert_eq!(note["Subject"], "alert");
    assert_eq!(note["MessageId"], out["id"]);
    assert_eq!(note["MessageAttributes"]["severity"], serde_json::json!({"Type": "String", "Value": "high"}));
    assert_eq!(out[&raw]["body"], "disk almost full");
    assert_eq!(out[&raw]["attrs"]["severity"], "high");
    assert_eq!(out[&raw]["attrs"]["pct"], "93");

    let got = rabbit.get(&amqp_queue, WAIT).await.expect("the route delivered the publish to RabbitMQ");
    assert_eq!(got.delivery.data, b"disk almost full");
    let headers = got.delivery.properties.headers().clone().unwrap_or_default();
    let header = |name: &str| {
        headers.inner().get(name).map(|v| match v {
            lapin::types::AMQPValue::LongString(s) => s.to_string(),
            other => format!("{other:?}"),
        })
    };
    assert_eq!(header("severity").as_deref(), Some("high"));
    assert_eq!(header("sns.Subject").as_deref(), Some("alert"));
    assert_eq!(header("sns.TopicArn").as_deref(), Some(arn.as_str()));
    assert!(daemon.terminate().success());
    rabbit.delete_queue(&amqp_queue).await;
}

/// Creates a queue and sends one message, or reads the queue's depth.
const SHARED: &str = r#"
import threading, time
queue, other = name.split("|")
def client(kind, url):
    return boto3.client(kind, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x")
b, sns_a, sns_b = client("sqs", other), client("sns", endpoint), client("sns", other)
url = sqs.create_queue(QueueName=queue)["QueueUrl"]
for i in range(0, 40, 10):
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": f"m{i + n}"} for n in range(10)])
burl = b.get_queue_url(QueueName=queue)["QueueUrl"]
bodies = []
def drain(c, u):
    for _ in range(30):
        got = c.receive_message(QueueUrl=u, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        for m in got:
            bodies.append(m["Body"])
            c.delete_message(QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])
        if len(bodies) >= 40:
            return
threads = [threading.Thread(target=drain, args=a) for a in [(sqs, url), (b, burl)]]
[t.start() for t in threads]
[t.join() for t in threads]
left = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
polled = {}
def poll():
    started = time.time()
    got = b.receive_message(QueueUrl=burl, WaitTimeSeconds=15).get("Messages", [])
    polled["waited"] = time.time() - started
    polled["bodies"] = [m["Body"] for m in got]
t = threading.Thread(target=poll)
t.start()
time.sleep(1.0)
sqs.send_message(QueueUrl=url, MessageBody="wake")
t.join()
topic = sns_b.create_topic(Name=queue + "-t")["TopicArn"]
arn = b.get_queue_attributes(QueueUrl=burl, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
sns_a.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
sns_b.publish(TopicArn=topic, Message="fanned")
fanned = receive_one(url)
print(json.dumps({"bodies": bodies, "left": left, "polled": polled, "fanned": fanned["Body"]}))
"#;

/// Two instances on one PostgreSQL store serve the same queues at once:
/// a queue made on one is used on the other, two consumers (one on each)
/// share its messages with none lost or handed out twice, a send on one
/// wakes a long poll on the other, and a topic made on one fans out
/// through a subscription made on the other.
#[tokio::test(flavor = "multi_thread")]
async fn two_instances_on_a_shared_store_serve_the_same_queues() {
    let db = ferry_tests::pg::TestDb::new().await;
    let name = unique("shared");
    let config = |listen: &str| {
        format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\n\n[endpoints.sqs]\nlisten = \"{listen}\"\n", db.url)
    };
    let (first_ws, second_ws) = (Workspace::with_plugins(&[]), Workspace::with_plugins(&[]));
    first_ws.config(&config(ANY_PORT));
    second_ws.config(&config(ANY_PORT));
    let first = Daemon::start(&first_ws, 0);
    let second = Daemon::start(&second_ws, 0);
    let first_listen = first.listener("sqs_endpoint", "sqs");
    let second_listen = second.listener("sqs_endpoint", "sqs");

    let got = boto3(SHARED, &format!("http://{first_listen}"), &format!("{name}|http://{second_listen}")).await;
    let mut bodies: Vec<String> =
        got["bodies"].as_array().expect("bodies").iter().map(|b| b.as_str().expect("body").to_owned()).collect();
    bodies.sort();
    let mut sent: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    sent.sort();
    assert_eq!(bodies, sent, "every message once, none twice");
    assert_eq!(got["left"]["ApproximateNumberOfMessages"], "0");
    assert_eq!(got["left"]["ApproximateNumberOfMessagesNotVisible"], "0");
    assert_eq!(got["polled"]["bodies"], serde_json::json!(["wake"]));
    assert!(got["polled"]["waited"].as_f64().expect("waited") < 10.0, "{got}");
    assert_eq!(got["fanned"], "fanned");
    assert!(first.terminate().success());
    assert!(second.terminate().success());
    db.drop().await;
}
