//! The SQS endpoint (`[endpoints.sqs]`) in the real daemon, driven by
//! boto3 as an application would: queues declared in config and created
//! through the API, messages with attributes and digests boto3 reads, the
//! errors boto3 turns into its typed exceptions, and everything still there
//! after the daemon restarts.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace, with_admin};
use ferry_tests::http::get;
use ferry_tests::mqtt::free_port;
use ferry_tests::python::run_json;
use ferry_tests::unique;

const WAIT: Duration = Duration::from_secs(20);

/// Sends three messages to `sys.argv[2]` (a queue it creates) and receives
/// one of them, leaving it in flight; prints what it saw.
const FIRST: &str = r#"
import json, sys, hashlib, struct, boto3
endpoint, name = sys.argv[1], sys.argv[2]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="x", aws_secret_access_key="x")
out = {}
declared = sqs.get_queue_url(QueueName="declared")["QueueUrl"]
out["declared_visibility"] = sqs.get_queue_attributes(
    QueueUrl=declared, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"]
url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
out["url"] = url

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
import json, sys, boto3
endpoint, name = sys.argv[1], sys.argv[2]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="x", aws_secret_access_key="x")
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
    let (endpoint, name) = (endpoint.to_owned(), name.to_owned());
    tokio::task::spawn_blocking(move || run_json("boto3", script, &[&endpoint, &name])).await.expect("python")
}

#[tokio::test(flavor = "multi_thread")]
async fn boto3_uses_the_daemons_endpoint_and_its_queues_survive_a_restart() {
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let endpoint = format!("http://{listen}");
    let config = with_admin(
        &admin,
        format!(
            "[endpoints.sqs]\nlisten = \"{listen}\"\n\n[endpoints.sqs.queues.declared]\nattributes = {{ VisibilityTimeout = \"45\" }}\n"
        ),
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config);
    let name = unique("boto");

    let daemon = Daemon::start(&ws, 0);
    daemon.wait_for_line(&["SQS endpoint listening", &listen], WAIT);
    let (status, ready) = get(&admin, "/readyz").expect("readyz");
    assert_eq!(status, 200, "{ready}");
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
    daemon.wait_for_line(&["SQS endpoint listening", &listen], WAIT);
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
        ("[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\naccount = \"12\"\n", "endpoints.sqs.account"),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[endpoints.sqs.queues.\"a.fifo\"]\n",
            "endpoints.sqs.queues.a.fifo.attributes.FifoQueue",
        ),
        (
            "[endpoints.sqs]\nlisten = \"127.0.0.1:9324\"\n[endpoints.sqs.queues.\"bad/name\"]\n",
            "endpoints.sqs.queues.bad/name",
        ),
    ] {
        ws.config(config);
        let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config} was accepted");
        assert!(stderr.contains(key), "{config}: {stderr}");
    }
}
