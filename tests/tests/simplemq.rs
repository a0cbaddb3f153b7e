//! The SimpleMQ receiver through the real daemon, against the fake SimpleMQ
//! (tests/src/simplemq.rs): a held message stays invisible (its visibility
//! extended) and is deleted only once the target took it; 429s are waited
//! out; a daemon killed while holding a message gets it back after the
//! visibility timeout; typed headers cross in the JSON wire format.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::simplemq::{FakeSimpleMq, content};
use ferry_tests::webhook::{WebhookTarget, answer};
use ferry_tests::{eventually, unique};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);

fn config(smq: &FakeSimpleMq, queue: &str, target: &WebhookTarget, extra: &str) -> String {
    format!(
        r#"
[receivers.q]
type = "simplemq"
queue = "{queue}"
api_key = "key"
api_url = "{api}"
polling_interval_ms = 100
extend_every_secs = 1
{extra}

[senders.hook]
type = "http"
url = "{hook}"
wire_format = "json"

[[routes]]
id = "smq"
receiver = "q"
[routes.backoff]
initial_ms = 50
max_ms = 200

[[routes.bindings]]
sender = "hook"
"#,
        api = smq.url(),
        hook = target.url("/in"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_message_stays_invisible_and_is_deleted_only_after_the_target_took_it() {
    // A 2 s visibility timeout; the target asks for 3 s before the retry.
    let smq = FakeSimpleMq::start(Duration::from_secs(2)).await;
    let queue = unique("held");
    smq.create_queue(&queue, "key");
    let target = WebhookTarget::start().await;
    target.script("slow", &[answer(503, Some(3))]);
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&smq, &queue, &target, ""));
    let daemon = Daemon::start(&ws, 0);
    let id = smq.put(
        &queue,
        &content(&json!({ "headers": { "script": "slow", "count": 3, "ok": true }, "body": "AP8Q", "body_encoding": "base64" })),
    );
    let hits = target.wait_for(2, WAIT, |_| true).await;
    assert_eq!(hits.len(), 2, "503, then delivered: {hits:?}");
    let doc: Value = serde_json::from_slice(&hits[1].body).expect("wire JSON");
    assert_eq!(doc["headers"]["count"], 3, "typed headers cross SimpleMQ in the wire format");
    assert_eq!(doc["headers"]["ok"], true);
    assert_eq!(doc["body"], "AP8Q");
    assert_eq!(doc["body_encoding"], "base64");
    assert_eq!(hits[1].header("idempotency-key"), Some(id.as_str()), "the SimpleMQ id is the identity");
    eventually("the message deleted", || smq.messages(&queue).is_empty()).await;
    assert!(smq.calls("extend", 200) >= 2, "visibility extended while held ({} times)", smq.calls("extend", 200));
    assert!(smq.calls("receive", 200) > 0);
    assert_eq!(target.hits().len(), 2, "held past its visibility timeout, yet never received twice");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn throttling_is_waited_out_and_a_killed_daemon_gets_its_message_back() {
    let smq = FakeSimpleMq::start(Duration::from_secs(2)).await;
    let queue = unique("again");
    smq.create_queue(&queue, "key");
    let target = WebhookTarget::start().await;
    // The first delivery is answered 503 with a long Retry-After: the
    // daemon holds the message, and is killed meanwhile.
    target.script("hold", &[answer(503, Some(60))]);
    let ws = Workspace::with_plugins(&[]);
    ws.config(&config(&smq, &queue, &target, ""));
    smq.throttle(3);
    let daemon = Daemon::start(&ws, 0);
    smq.put(&queue, &content(&json!({ "headers": { "script": "hold" }, "body": "keep me" })));
    target.wait_for(1, WAIT, |_| true).await;
    assert!(smq.calls("receive", 429) >= 1, "the first receives were throttled");
    daemon.kill();
    assert_eq!(smq.messages(&queue).len(), 1, "not deleted: the route never finished with it");

    // Restarted: the message is visible again after its timeout and delivered.
    let daemon = Daemon::start(&ws, 0);
    let hits = target.wait_for(2, WAIT, |_| true).await;
    assert_eq!(hits.len(), 2);
    let doc: Value = serde_json::from_slice(&hits[1].body).expect("wire JSON");
    assert_eq!(doc["body"], "keep me");
    eventually("the message deleted", || smq.messages(&queue).is_empty()).await;
    assert!(daemon.terminate().success());
}
