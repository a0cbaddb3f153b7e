//! The SQS endpoint where AWS's behaviour is easy to get wrong, checked
//! with boto3 (AWS's own Python SDK, as applications use it) against a
//! daemon that runs only `[endpoints.sqs]`. Each test is one behaviour
//! AWS documents or answers with, and failed on the endpoint before it was
//! built to match.

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::python::run_json;
use ferry_tests::unique;

const PRELUDE: &str = r#"
import json, sys, boto3
endpoint, name = sys.argv[1], sys.argv[2]
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="x", aws_secret_access_key="x")
def error(call):
    try:
        call()
        return "ok"
    except sqs.exceptions.ClientError as e:
        return e.response["Error"]["Code"] + ": " + e.response["Error"].get("Message", "")
"#;

/// A daemon serving only the endpoint; its URL.
fn endpoint() -> (Workspace, Daemon, String) {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!("[endpoints.sqs]\nlisten = \"{ANY_PORT}\"\n"));
    let daemon = Daemon::start(&ws, 1);
    let url = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    (ws, daemon, url)
}

async fn boto3(script: &'static str, endpoint: &str, name: &str) -> serde_json::Value {
    let args = [endpoint.to_owned(), name.to_owned()];
    let script = format!("{PRELUDE}{script}");
    tokio::task::spawn_blocking(move || run_json("boto3", &script, &args.each_ref().map(String::as_str)))
        .await
        .expect("python")
}

#[tokio::test(flavor = "multi_thread")]
async fn boolean_attributes_are_read_whatever_their_case() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
fifo = sqs.create_queue(QueueName=name + ".fifo",
                        Attributes={"FifoQueue": "True", "ContentBasedDeduplication": "FALSE"})["QueueUrl"]
a = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]
again = error(lambda: sqs.create_queue(QueueName=name + ".fifo", Attributes={"FifoQueue": "true"}))
sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"ContentBasedDeduplication": "tRuE"})
b = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["ContentBasedDeduplication"])["Attributes"]
bad = error(lambda: sqs.create_queue(QueueName=name + "-x.fifo", Attributes={"FifoQueue": "yes"}))
print(json.dumps({"fifo": a["FifoQueue"], "cbd": a["ContentBasedDeduplication"], "again": again,
                  "set": b["ContentBasedDeduplication"], "bad": bad}))
"#,
        &url,
        &unique("bools"),
    )
    .await;
    assert_eq!(out["fifo"], "true", "{out}");
    assert_eq!(out["cbd"], "false", "{out}");
    assert_eq!(out["again"], "ok", "the same queue again, in another case, is the same queue: {out}");
    assert_eq!(out["set"], "true", "{out}");
    assert!(out["bad"].as_str().is_some_and(|e| e.starts_with("InvalidAttributeValue")), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_value_removes_an_attribute() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
policy = json.dumps({"Version": "2012-10-17", "Statement": []})
url = sqs.create_queue(QueueName=name, Attributes={
    "Policy": policy,
    "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3}),
    "KmsMasterKeyId": "alias/aws/sqs", "KmsDataKeyReusePeriodSeconds": "600"})["QueueUrl"]
before = sorted(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])
sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": "", "RedrivePolicy": "", "KmsMasterKeyId": ""})
after = sorted(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])
print(json.dumps({"before": before, "after": after}))
"#,
        &url,
        &unique("unset"),
    )
    .await;
    let names = |key: &str| -> Vec<String> {
        out[key].as_array().expect("names").iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    };
    for attribute in ["Policy", "RedrivePolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"] {
        assert!(names("before").iter().any(|n| n == attribute), "{attribute} set: {out}");
        assert!(!names("after").iter().any(|n| n == attribute), "{attribute} removed: {out}");
    }
    assert!(names("after").iter().any(|n| n == "VisibilityTimeout"), "the others stay: {out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_and_error_texts_are_the_ones_aws_gives() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
fifo = sqs.create_queue(QueueName=name + ".fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
std = sqs.create_queue(QueueName=name)["QueueUrl"]
out = {}
out["delay0"] = error(lambda: sqs.send_message(QueueUrl=fifo, MessageBody="a", MessageGroupId="g",
                                             MessageDeduplicationId="d1", DelaySeconds=0))
out["delay5"] = error(lambda: sqs.send_message(QueueUrl=fifo, MessageBody="a", MessageGroupId="g",
                                             MessageDeduplicationId="d2", DelaySeconds=5))
out["group"] = error(lambda: sqs.send_message(QueueUrl=fifo, MessageBody="a", MessageGroupId="g g",
                                            MessageDeduplicationId="d3"))
out["scope"] = error(lambda: sqs.set_queue_attributes(QueueUrl=std, Attributes={"DeduplicationScope": "messageGroup"}))
out["limit"] = error(lambda: sqs.create_queue(QueueName=name + "-2", Attributes={"FifoThroughputLimit": "perQueue"}))
out["type"] = error(lambda: sqs.set_queue_attributes(QueueUrl=std, Attributes={"FifoQueue": "true"}))
out["seq"] = sqs.send_message(QueueUrl=fifo, MessageBody="s", MessageGroupId="g",
                              MessageDeduplicationId="d9")["SequenceNumber"]
print(json.dumps(out))
"#,
        &url,
        &unique("texts"),
    )
    .await;
    assert_eq!(out["delay0"], "ok", "DelaySeconds=0 asks a FIFO queue for nothing it lacks: {out}");
    let seq = out["seq"].as_str().unwrap_or_default();
    assert!(
        seq.len() == 20 && !seq.starts_with('0'),
        "a SequenceNumber is a large number, not a padded counter: {out}"
    );
    assert!(out["delay5"].as_str().is_some_and(|e| e.starts_with("InvalidParameterValue")), "{out}");
    assert_eq!(
        out["group"],
        "InvalidParameterValue: Value g g for parameter MessageGroupId is invalid. Reason: MessageGroupId can only \
         include alphanumeric and punctuation characters. 1 to 128 in length.",
        "{out}"
    );
    assert_eq!(
        out["scope"],
        "InvalidAttributeName: You can specify the DeduplicationScope only when FifoQueue is set to true.",
        "{out}"
    );
    assert_eq!(
        out["limit"],
        "InvalidAttributeName: You can specify the FifoThroughputLimit only when FifoQueue is set to true.",
        "{out}"
    );
    assert_eq!(
        out["type"],
        "InvalidAttributeValue: Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn attributes_batches_and_trace_headers_are_read_as_aws_reads_them() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
std = sqs.create_queue(QueueName=name)["QueueUrl"]
fifo = sqs.create_queue(QueueName=name + ".fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
out = {}
s = lambda v: {"DataType": "String", "StringValue": v}
out["unicode_name"] = error(lambda: sqs.send_message(QueueUrl=std, MessageBody="a",
                                                   MessageAttributes={"attr.1øßä": s("v")}))
out["control_value"] = error(lambda: sqs.send_message(QueueUrl=std, MessageBody="a",
                                                    MessageAttributes={"a": s("bell\u0007")}))
ok = sqs.send_message_batch(QueueUrl=std, Entries=[{"Id": "1", "MessageBody": "b"}])
out["failed_key"] = "Failed" in ok
out["fifo_batch"] = error(lambda: sqs.send_message_batch(QueueUrl=fifo, Entries=[
    {"Id": "1", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d1"},
    {"Id": "2", "MessageBody": "y", "MessageDeduplicationId": "d2"}]))
out["fifo_depth"] = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
def trace(request, **kwargs):
    request.headers["X-Amzn-Trace-Id"] = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
sqs.meta.events.register("before-sign.sqs.SendMessage", trace)
traced = sqs.create_queue(QueueName=name + "-traced")["QueueUrl"]
sqs.send_message(QueueUrl=traced, MessageBody="t")
got = sqs.receive_message(QueueUrl=traced, MessageSystemAttributeNames=["AWSTraceHeader"], WaitTimeSeconds=1)["Messages"][0]
out["trace"] = got.get("Attributes", {}).get("AWSTraceHeader")
print(json.dumps(out))
"#,
        &url,
        &unique("reads"),
    )
    .await;
    assert_eq!(out["unicode_name"], "ok", "AWS takes letters outside ASCII in names: {out}");
    assert!(out["control_value"].as_str().is_some_and(|e| e.starts_with("InvalidParameterValue")), "{out}");
    assert_eq!(out["failed_key"], false, "no Failed when nothing failed: {out}");
    assert!(out["fifo_batch"].as_str().is_some_and(|e| e.starts_with("InvalidParameterValue")), "{out}");
    assert_eq!(out["fifo_depth"], "0", "the whole batch failed, the good entry too: {out}");
    assert_eq!(out["trace"], "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn visibility_changes_answer_as_aws_for_stale_handles_and_deleted_messages() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
q = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
sqs.send_message(QueueUrl=q, MessageBody="m")
first = sqs.receive_message(QueueUrl=q)["Messages"][0]["ReceiptHandle"]
sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=first, VisibilityTimeout=0)
second = sqs.receive_message(QueueUrl=q)["Messages"][0]["ReceiptHandle"]
out = {}
out["older_handle"] = error(lambda: sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=first, VisibilityTimeout=0))
out["still_hidden"] = len(sqs.receive_message(QueueUrl=q).get("Messages", [])) == 0
sqs.delete_message(QueueUrl=q, ReceiptHandle=second)
out["deleted"] = error(lambda: sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=second, VisibilityTimeout=10))
print(json.dumps(out))
"#,
        &url,
        &unique("vis"),
    )
    .await;
    assert_eq!(out["older_handle"], "ok", "AWS answers an older handle with 200: {out}");
    assert_eq!(out["still_hidden"], true, "and the older handle changed nothing: {out}");
    let deleted = out["deleted"].as_str().unwrap_or_default();
    assert!(
        deleted.starts_with("InvalidParameterValue: Value ")
            && deleted.ends_with(
                "for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for \
                 visibility timeout change."
            ),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deduplication_follows_its_scope_and_a_purge() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
per_group = sqs.create_queue(QueueName=name + "-g.fifo", Attributes={
    "FifoQueue": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})["QueueUrl"]
per_queue = sqs.create_queue(QueueName=name + "-q.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
send = lambda q, g, d: sqs.send_message(QueueUrl=q, MessageBody=g + d, MessageGroupId=g, MessageDeduplicationId=d)["MessageId"]
out = {}
out["group_a"] = send(per_group, "a", "same/id")
out["group_b"] = send(per_group, "b", "same/id")
out["group_a_again"] = send(per_group, "a", "same/id")
out["queue_a"] = send(per_queue, "a", "same/id")
out["queue_b"] = send(per_queue, "b", "same/id")
sqs.purge_queue(QueueUrl=per_queue)
out["after_purge"] = send(per_queue, "a", "same/id")
depth = lambda q: sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
out["depths"] = [depth(per_group), depth(per_queue)]
print(json.dumps(out))
"#,
        &url,
        &unique("scope"),
    )
    .await;
    assert_ne!(out["group_a"], out["group_b"], "the same id in another group is another message: {out}");
    assert_eq!(out["group_a"], out["group_a_again"], "in its own group it is a duplicate: {out}");
    assert_eq!(out["queue_a"], out["queue_b"], "with the queue's scope it is a duplicate anywhere: {out}");
    assert_ne!(out["after_purge"], out["queue_a"], "a purge forgets the deduplication ids: {out}");
    assert_eq!(out["depths"], serde_json::json!(["2", "1"]), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_receipt_handle_whose_visibility_ran_out_cannot_delete() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
q = sqs.create_queue(QueueName=name + ".fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
sqs.send_message(QueueUrl=q, MessageBody="m", MessageGroupId="g", MessageDeduplicationId="d")
handle = sqs.receive_message(QueueUrl=q)["Messages"][0]["ReceiptHandle"]
sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=handle, VisibilityTimeout=0)
out = {"expired": error(lambda: sqs.delete_message(QueueUrl=q, ReceiptHandle=handle))}
again = sqs.receive_message(QueueUrl=q)["Messages"][0]["ReceiptHandle"]
out["fresh"] = error(lambda: sqs.delete_message(QueueUrl=q, ReceiptHandle=again))
out["left"] = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
print(json.dumps(out))
"#,
        &url,
        &unique("expired"),
    )
    .await;
    assert_eq!(out["expired"], "InvalidParameterValue: The receipt handle has expired.", "{out}");
    assert_eq!(out["fresh"], "ok", "{out}");
    assert_eq!(out["left"], "0", "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_moved_to_its_dead_letter_queue_keeps_its_receive_count() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
q = sqs.create_queue(QueueName=name, Attributes={
    "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})})["QueueUrl"]
sqs.send_message(QueueUrl=q, MessageBody="poison")
for _ in range(2):
    h = sqs.receive_message(QueueUrl=q)["Messages"][0]["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=h, VisibilityTimeout=0)
left = sqs.receive_message(QueueUrl=q).get("Messages", [])
moved = sqs.receive_message(QueueUrl=dlq, MessageSystemAttributeNames=["ApproximateReceiveCount"],
                            WaitTimeSeconds=1)["Messages"][0]
print(json.dumps({"left": len(left), "count": moved["Attributes"]["ApproximateReceiveCount"]}))
"#,
        &url,
        &unique("dlqcount"),
    )
    .await;
    assert_eq!(out["left"], 0, "the third receive moved it: {out}");
    assert_eq!(out["count"], "3", "two receives in the queue, one in the dead-letter queue: {out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letter_sources_and_permissions_are_served() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
dlq = sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "3"})
srcs = [sqs.create_queue(QueueName=f"{name}-src{i}", Attributes={"RedrivePolicy": policy})["QueueUrl"] for i in range(3)]
other = sqs.create_queue(QueueName=name + "-other")["QueueUrl"]
out = {"srcs": srcs}
out["all"] = sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]
p1 = sqs.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=2)
p2 = sqs.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=2, NextToken=p1["NextToken"])
out["pages"] = [p1["queueUrls"], p2["queueUrls"], "NextToken" in p2]
out["none"] = sqs.list_dead_letter_source_queues(QueueUrl=other)["queueUrls"]
out["missing"] = error(lambda: sqs.list_dead_letter_source_queues(QueueUrl=dlq + "-gone"))

sqs.add_permission(QueueUrl=other, Label="l1", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
sqs.add_permission(QueueUrl=other, Label="l2", AWSAccountIds=["111122223333", "444455556666"],
                   Actions=["ReceiveMessage", "DeleteMessage"])
doc = json.loads(sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["Policy"])["Attributes"]["Policy"])
out["statements"] = doc["Statement"]
out["dup"] = error(lambda: sqs.add_permission(QueueUrl=other, Label="l1", AWSAccountIds=["1"], Actions=["SendMessage"]))
out["owner_only"] = error(lambda: sqs.add_permission(QueueUrl=other, Label="l3", AWSAccountIds=["1"],
                                                     Actions=["CreateQueue"]))
sqs.remove_permission(QueueUrl=other, Label="l1")
doc = json.loads(sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["Policy"])["Attributes"]["Policy"])
out["left"] = [s["Sid"] for s in doc["Statement"]]
sqs.remove_permission(QueueUrl=other, Label="l2")
out["policy_gone"] = "Policy" not in sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["All"])["Attributes"]
out["no_label"] = error(lambda: sqs.remove_permission(QueueUrl=other, Label="l2"))
print(json.dumps(out))
"#,
        &url,
        &unique("sources"),
    )
    .await;
    let srcs = out["srcs"].as_array().expect("sources").clone();
    assert_eq!(out["all"].as_array(), Some(&srcs), "{out}");
    assert_eq!(out["pages"][0].as_array().map(Vec::len), Some(2), "{out}");
    assert_eq!(out["pages"][1].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(out["pages"][2], false, "{out}");
    assert_eq!(out["none"], serde_json::json!([]), "{out}");
    assert!(out["missing"].as_str().is_some_and(|e| e.starts_with("AWS.SimpleQueueService.NonExistentQueue")), "{out}");
    let statements = out["statements"].as_array().expect("statements");
    assert_eq!(statements.len(), 2, "{out}");
    assert_eq!(statements[0]["Sid"], "l1");
    assert_eq!(statements[0]["Effect"], "Allow");
    assert_eq!(statements[0]["Principal"]["AWS"], "arn:aws:iam::111122223333:root");
    assert_eq!(statements[0]["Action"], "SQS:SendMessage");
    assert!(statements[0]["Resource"].as_str().is_some_and(|r| r.ends_with("-other")), "{out}");
    assert_eq!(statements[1]["Action"], serde_json::json!(["SQS:ReceiveMessage", "SQS:DeleteMessage"]));
    assert_eq!(
        statements[1]["Principal"]["AWS"],
        serde_json::json!(["arn:aws:iam::111122223333:root", "arn:aws:iam::444455556666:root"])
    );
    assert_eq!(out["dup"], "InvalidParameterValue: Value l1 for parameter Label is invalid. Reason: Already exists.");
    assert_eq!(
        out["owner_only"],
        "InvalidParameterValue: Value SQS:CreateQueue for parameter ActionName is invalid. \
         Reason: Only the queue owner is allowed to invoke this action."
    );
    assert_eq!(out["left"], serde_json::json!(["l2"]));
    assert_eq!(out["policy_gone"], true, "the policy goes with its last statement: {out}");
    assert_eq!(
        out["no_label"],
        "InvalidParameterValue: Value l2 for parameter Label is invalid. Reason: can't find label on existing policy."
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_query_api_over_get_answers_as_sqs_does() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
import urllib.request, urllib.error
def get(url):
    try:
        r = urllib.request.urlopen(url)
        return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
q = sqs.create_queue(QueueName=name)["QueueUrl"]
base = q.rsplit("/", 2)[0]
print(json.dumps({
    "no_action": get(q),
    "create": get(q + "?Action=CreateQueue&QueueName=" + name + "-x"),
    "list": get(q + "?Action=ListQueues"),
    "created": error(lambda: sqs.get_queue_url(QueueName=name + "-x")),
    "attributes": get(q + "?Action=GetQueueAttributes&AttributeName.1=VisibilityTimeout"),
    "missing": get(base + "/?Action=GetQueueUrl&QueueName=" + name + "-nothere"),
}))
"#,
        &url,
        &unique("get"),
    )
    .await;
    assert_eq!(out["no_action"], serde_json::json!([404, "<UnknownOperationException/>"]), "{out}");
    for action in ["create", "list"] {
        assert_eq!(out[action][0], 400, "{out}");
        let body = out[action][1].as_str().unwrap_or_default();
        assert!(
            body.contains("<Code>InvalidAction</Code>") && body.contains("is not valid for this endpoint."),
            "{out}"
        );
    }
    assert!(out["created"].as_str().is_some_and(|e| e.contains("NonExistentQueue")), "nothing was created: {out}");
    assert_eq!(out["attributes"][0], 200, "{out}");
    assert!(out["attributes"][1].as_str().is_some_and(|b| b.contains("<Value>30</Value>")), "{out}");
    assert_eq!(out["missing"][0], 400, "{out}");
    assert!(
        out["missing"][1]
            .as_str()
            .is_some_and(|b| b.contains("The specified queue does not exist for this wsdl version.")),
        "{out}"
    );
}

/// A query request that accepts JSON is answered in the JSON AWS gives
/// then (`<Action>Response` / `<Action>Result`, lists in lower camel case);
/// without that header, in XML.
#[tokio::test(flavor = "multi_thread")]
async fn a_query_get_that_accepts_json_is_answered_in_json() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
import urllib.request, urllib.parse
def get(url, accept=None):
    r = urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept} if accept else {}))
    return [r.headers.get("Content-Type"), r.read().decode()]
q = sqs.create_queue(QueueName=name)["QueueUrl"]
sqs.send_message(QueueUrl=q, MessageBody="a body")
base = q.rsplit("/", 2)[0]
receive = base + "/?" + urllib.parse.urlencode({"Action": "ReceiveMessage", "QueueUrl": q, "VisibilityTimeout": "0"})
print(json.dumps({
    "list": get(base + "/?Action=ListQueues&Version=2012-11-05", "application/json"),
    "list_xml": get(base + "/?Action=ListQueues&Version=2012-11-05"),
    "receive": get(receive, "text/html, application/json;q=0.9"),
}))
"#,
        &url,
        &unique("accept"),
    )
    .await;
    assert_eq!(out["list"][0], "application/json", "{out}");
    let list: serde_json::Value = serde_json::from_str(out["list"][1].as_str().unwrap_or_default()).expect("JSON");
    let urls = &list["ListQueuesResponse"]["ListQueuesResult"]["queueUrls"];
    assert!(urls.as_array().is_some_and(|u| !u.is_empty()), "{list}");
    assert!(list["ListQueuesResponse"]["ResponseMetadata"]["RequestId"].is_string(), "{list}");
    assert!(out["list_xml"][1].as_str().is_some_and(|b| b.contains("<ListQueuesResponse")), "{out}");
    let received: serde_json::Value =
        serde_json::from_str(out["receive"][1].as_str().unwrap_or_default()).expect("JSON");
    assert_eq!(
        received["ReceiveMessageResponse"]["ReceiveMessageResult"]["messages"][0]["Body"], "a body",
        "{received}"
    );
}

/// One queue name used from two regions is two queues, as in AWS: a
/// request signed for another region than the endpoint's works on that
/// region's queues, whose URLs carry the region in their path; URLs,
/// lists, ARNs and a redrive policy keep the two apart.
#[tokio::test(flavor = "multi_thread")]
async fn one_queue_name_in_two_regions_is_two_queues() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
import urllib.request
eu = boto3.client("sqs", endpoint_url=endpoint, region_name="eu-central-1",
                  aws_access_key_id="x", aws_secret_access_key="x")
q1 = sqs.create_queue(QueueName=name)["QueueUrl"]
q2 = eu.create_queue(QueueName=name)["QueueUrl"]
eu.send_message(QueueUrl=q2, MessageBody="in eu")
dlq = eu.create_queue(QueueName=name + "-dlq")["QueueUrl"]
dlq_arn = eu.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
eu.set_queue_attributes(QueueUrl=q2, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})})
first = eu.receive_message(QueueUrl=q2, VisibilityTimeout=0).get("Messages", [])
again = eu.receive_message(QueueUrl=q2, VisibilityTimeout=0).get("Messages", [])
dead = eu.receive_message(QueueUrl=dlq, VisibilityTimeout=0).get("Messages", [])
query = urllib.request.urlopen(q2 + "?Action=GetQueueAttributes&AttributeName.1=QueueArn").read().decode()
print(json.dumps({
    "q1": q1, "q2": q2,
    "url1": sqs.get_queue_url(QueueName=name)["QueueUrl"],
    "url2": eu.get_queue_url(QueueName=name)["QueueUrl"],
    "list1": sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", []),
    "list2": eu.list_queues(QueueNamePrefix=name).get("QueueUrls", []),
    "in_east": sqs.receive_message(QueueUrl=q1).get("Messages", []),
    "first": [m["Body"] for m in first], "again": len(again), "dead": [m["Body"] for m in dead],
    "arn1": sqs.get_queue_attributes(QueueUrl=q1, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"],
    "dlq_arn": dlq_arn,
    "query": query,
    "sources": eu.list_dead_letter_source_queues(QueueUrl=dlq).get("queueUrls", []),
    "other_region_dlq": error(lambda: sqs.set_queue_attributes(QueueUrl=q1, Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn.replace("eu-central-1", "us-east-1"), "maxReceiveCount": "1"})})),
}))
"#,
        &url,
        &unique("regions"),
    )
    .await;
    let text = |k: &str| out[k].as_str().unwrap_or_default().to_owned();
    assert_ne!(out["q1"], out["q2"], "{out}");
    assert!(!text("q1").contains("us-east-1") && !text("q2").contains("us-east-1"), "{out}");
    assert!(text("q2").contains("/queue/eu-central-1/"), "{out}");
    assert_eq!((&out["url1"], &out["url2"]), (&out["q1"], &out["q2"]), "{out}");
    assert_eq!(out["list1"], serde_json::json!([out["q1"]]), "{out}");
    assert_eq!(out["list2"].as_array().map(Vec::len), Some(2), "{out}");
    assert!(out["list2"].as_array().is_some_and(|l| l.contains(&out["q2"]) && !l.contains(&out["q1"])), "{out}");
    assert_eq!(out["in_east"], serde_json::json!([]), "{out}");
    assert_eq!((&out["first"], &out["again"]), (&serde_json::json!(["in eu"]), &serde_json::json!(0)), "{out}");
    assert_eq!(out["dead"], serde_json::json!(["in eu"]), "{out}");
    assert!(text("arn1").starts_with("arn:aws:sqs:us-east-1:"), "{out}");
    assert!(text("dlq_arn").starts_with("arn:aws:sqs:eu-central-1:"), "{out}");
    assert!(
        text("query").contains(&format!(
            "arn:aws:sqs:eu-central-1:000000000000:{}",
            text("q2").rsplit('/').next().unwrap_or_default()
        )),
        "{out}"
    );
    assert_eq!(out["sources"], serde_json::json!([out["q2"]]), "{out}");
    assert!(text("other_region_dlq").contains("Dead letter target does not exist"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn message_attribute_names_take_a_star_and_plain_prefixes() {
    let (_ws, _daemon, url) = endpoint();
    let out = boto3(
        r#"
q = sqs.create_queue(QueueName=name)["QueueUrl"]
attrs = {k: {"DataType": "String", "StringValue": "v"} for k in ["Hello", "Help.me", "Other"]}
sqs.send_message(QueueUrl=q, MessageBody="one", MessageAttributes=attrs)
def names(asked):
    m = sqs.receive_message(QueueUrl=q, MessageAttributeNames=asked, VisibilityTimeout=0)["Messages"][0]
    return sorted(m.get("MessageAttributes", {}).keys())
print(json.dumps({"star": names(["*"]), "prefix": names(["Hel.*"]), "dot": names(["Help.*"]), "exact": names(["Other"])}))
"#,
        &url,
        &unique("names"),
    )
    .await;
    assert_eq!(out["star"], serde_json::json!(["Hello", "Help.me", "Other"]), "{out}");
    assert_eq!(out["prefix"], serde_json::json!(["Hello", "Help.me"]), "{out}");
    assert_eq!(out["dot"], serde_json::json!(["Help.me"]), "{out}");
    assert_eq!(out["exact"], serde_json::json!(["Other"]), "{out}");
}

/// `access_keys[].actions` and `resources` limit what a key may do: the
/// limited key sends to its queues only and cannot delete them; the other
/// key may do everything; refusals are `AccessDenied`, 403.
#[tokio::test(flavor = "multi_thread")]
async fn an_access_key_is_limited_to_its_actions_and_queues() {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"[endpoints.sqs]
listen = "{ANY_PORT}"
auth = "verify"

[[endpoints.sqs.access_keys]]
id = "admin-key"
secret = "admin-secret"

[[endpoints.sqs.access_keys]]
id = "app-key"
secret = "app-secret"
actions = ["SendMessage", "GetQueueUrl", "ListQueues"]
resources = ["sqs.orders-*"]
"#
    ));
    let daemon = Daemon::start(&ws, 1);
    let url = format!("http://{}", daemon.listener("sqs_endpoint", "sqs"));
    let out = boto3(
        r#"
def client(key, secret):
    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret)
admin, app = client("admin-key", "admin-secret"), client("app-key", "app-secret")
def attempt(call):
    try:
        call()
        return "ok"
    except admin.exceptions.ClientError as e:
        return e.response["Error"]["Code"] + " " + str(e.response["ResponseMetadata"]["HTTPStatusCode"])
mine = admin.create_queue(QueueName="orders-" + name)["QueueUrl"]
other = admin.create_queue(QueueName="payroll-" + name)["QueueUrl"]
print(json.dumps({
    "send_mine": attempt(lambda: app.send_message(QueueUrl=mine, MessageBody="x")),
    "send_other": attempt(lambda: app.send_message(QueueUrl=other, MessageBody="x")),
    "delete_mine": attempt(lambda: app.delete_queue(QueueUrl=mine)),
    "receive_mine": attempt(lambda: app.receive_message(QueueUrl=mine)),
    "list": attempt(lambda: app.list_queues()),
    "admin_send_other": attempt(lambda: admin.send_message(QueueUrl=other, MessageBody="x")),
    "depth": admin.get_queue_attributes(QueueUrl=mine, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"],
}))
"#,
        &url,
        &unique("grants"),
    )
    .await;
    assert_eq!(out["send_mine"], "ok", "{out}");
    assert_eq!(out["send_other"], "AccessDenied 403", "{out}");
    assert_eq!(out["delete_mine"], "AccessDenied 403", "{out}");
    assert_eq!(out["receive_mine"], "AccessDenied 403", "{out}");
    assert_eq!(out["list"], "ok", "{out}");
    assert_eq!(out["admin_send_other"], "ok", "{out}");
    assert_eq!(out["depth"]["ApproximateNumberOfMessages"], "1", "only the allowed send arrived: {out}");
}
