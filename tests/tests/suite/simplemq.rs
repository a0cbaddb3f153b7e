//! SimpleMQ through the real daemon, against the fake SimpleMQ
//! (tests/src/simplemq.rs), each test twice: with the native adapter
//! (`type = "simplemq"`) and with the SimpleMQ transport component
//! (`type = "component"`, processors/simplemq): a held message stays
//! invisible (its visibility extended) and is deleted only once the target
//! took it; 429s are waited out; a daemon killed while holding a message
//! gets it back after the visibility timeout; typed headers cross in the
//! JSON wire format, in and out.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::simplemq::{FakeSimpleMq, content, document};
use ferry_tests::webhook::{WebhookTarget, answer};
use ferry_tests::{eventually, unique};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);

/// Which SimpleMQ adapter a test runs against.
#[derive(Debug, Clone, Copy)]
enum Adapter {
    /// `type = "simplemq"`.
    Native,
    /// `type = "component"` with `component = "simplemq"`.
    Component,
}

impl Adapter {
    /// The workspace, with the component in its plugin directory when it
    /// is the one under test.
    fn workspace(self) -> Workspace {
        match self {
            Adapter::Native => Workspace::with_plugins(&[]),
            Adapter::Component => Workspace::with_plugins(&["simplemq"]),
        }
    }

    /// A receiver of `queue`, polled every 100 ms, visibility extended
    /// every second.
    fn receiver(self, smq: &FakeSimpleMq, queue: &str) -> String {
        let api = smq.url();
        match self {
            Adapter::Native => format!(
                r#"type = "simplemq"
queue = "{queue}"
api_key = "key"
api_url = "{api}"
polling_interval_ms = 100
extend_every_secs = 1"#
            ),
            Adapter::Component => format!(
                r#"type = "component"
component = "simplemq"
allow_hosts = ["{host}"]
wire_format = "json"
wait_ms = 100
config = {{ queue = "{queue}", api_key = "key", api_url = "{api}", extend_every_secs = 1 }}"#,
                host = api.trim_start_matches("http://"),
            ),
        }
    }

    /// A sender to `queue`.
    fn sender(self, smq: &FakeSimpleMq, queue: &str) -> String {
        let api = smq.url();
        match self {
            Adapter::Native => format!(
                r#"type = "simplemq"
queue = "{queue}"
api_key = "key"
api_url = "{api}""#
            ),
            Adapter::Component => format!(
                r#"type = "component"
component = "simplemq"
allow_hosts = ["{host}"]
wire_format = "json"
config = {{ queue = "{queue}", api_key = "key", api_url = "{api}" }}"#,
                host = api.trim_start_matches("http://"),
            ),
        }
    }
}

fn config(adapter: Adapter, smq: &FakeSimpleMq, queue: &str, target: &WebhookTarget) -> String {
    format!(
        r#"
[receivers.q]
{receiver}

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
        receiver = adapter.receiver(smq, queue),
        hook = target.url("/in"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_message_stays_invisible_and_is_deleted_only_after_the_target_took_it() {
    held_message(Adapter::Native).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_message_stays_invisible_and_is_deleted_only_after_the_target_took_it_through_the_component() {
    held_message(Adapter::Component).await;
}

async fn held_message(adapter: Adapter) {
    // A 2 s visibility timeout; the target asks for 3 s before the retry.
    let smq = FakeSimpleMq::start(Duration::from_secs(2)).await;
    let queue = unique("held");
    smq.create_queue(&queue, "key");
    let target = WebhookTarget::start().await;
    target.script("slow", &[answer(503, Some(3))]);
    let ws = adapter.workspace();
    ws.config(&config(adapter, &smq, &queue, &target));
    let daemon = Daemon::start(&ws, 0);
    let id = smq.put(
        &queue,
        &content(&json!({ "headers": { "script": "slow", "count": 3, "ok": true }, "body": "AP8Q", "body_encoding": "base64" })),
    );
    let hits = target.wait_for(2, WAIT, |_| true).await;
    assert_eq!(hits.len(), 2, "503, then delivered: {hits:?} {}", daemon.log_text());
    let doc: Value = serde_json::from_slice(&hits[1].body).expect("wire JSON");
    assert_eq!(doc["headers"]["count"], 3, "typed headers cross SimpleMQ in the wire format");
    assert_eq!(doc["headers"]["ok"], true);
    assert_eq!(doc["body"], "AP8Q");
    assert_eq!(doc["body_encoding"], "base64");
    assert_eq!(hits[1].header("idempotency-key"), Some(id.as_str()), "the SimpleMQ id is the identity");
    eventually("the message deleted", || smq.messages(&queue).is_empty()).await;
    assert!(
        smq.calls("extend", 200) >= 2,
        "visibility extended while held ({} times) {}",
        smq.calls("extend", 200),
        daemon.log_text()
    );
    assert!(smq.calls("receive", 200) > 0);
    assert_eq!(target.hits().len(), 2, "held past its visibility timeout, yet never received twice");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn throttling_is_waited_out_and_a_killed_daemon_gets_its_message_back() {
    throttled_and_killed(Adapter::Native).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn throttling_is_waited_out_and_a_killed_daemon_gets_its_message_back_through_the_component() {
    throttled_and_killed(Adapter::Component).await;
}

async fn throttled_and_killed(adapter: Adapter) {
    let smq = FakeSimpleMq::start(Duration::from_secs(2)).await;
    let queue = unique("again");
    smq.create_queue(&queue, "key");
    let target = WebhookTarget::start().await;
    // The first delivery is answered 503 with a long Retry-After: the
    // daemon holds the message, and is killed meanwhile.
    target.script("hold", &[answer(503, Some(60))]);
    let ws = adapter.workspace();
    ws.config(&config(adapter, &smq, &queue, &target));
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

#[tokio::test(flavor = "multi_thread")]
async fn a_message_crosses_from_queue_to_queue_with_its_typed_headers() {
    queue_to_queue(Adapter::Native).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_crosses_from_queue_to_queue_with_its_typed_headers_through_the_component() {
    queue_to_queue(Adapter::Component).await;
}

/// Receiver and sender of one adapter: what one queue holds arrives on the
/// other, typed headers and body intact, and leaves the first.
async fn queue_to_queue(adapter: Adapter) {
    let smq = FakeSimpleMq::start(Duration::from_secs(5)).await;
    let (from, to) = (unique("from"), unique("to"));
    smq.create_queue(&from, "key");
    smq.create_queue(&to, "key");
    let ws = adapter.workspace();
    ws.config(&format!(
        r#"
[receivers.q]
{receiver}

[senders.out]
{sender}

[[routes]]
id = "q2q"
receiver = "q"
[routes.backoff]
initial_ms = 50
max_ms = 200

[[routes.bindings]]
sender = "out"
"#,
        receiver = adapter.receiver(&smq, &from),
        sender = adapter.sender(&smq, &to),
    ));
    let daemon = Daemon::start(&ws, 0);
    smq.put(&from, &content(&json!({ "headers": { "count": 3, "ok": true, "kind": "order" }, "body": "AP8Q", "body_encoding": "base64" })));
    eventually("the message on the other queue", || smq.messages(&to).len() == 1).await;
    let doc = document(&smq.messages(&to)[0].content);
    assert_eq!(doc["headers"]["count"], 3, "typed headers cross: {doc}");
    assert_eq!(doc["headers"]["ok"], true);
    assert_eq!(doc["headers"]["kind"], "order");
    assert_eq!(doc["body"], "AP8Q");
    assert_eq!(doc["body_encoding"], "base64");
    eventually("the message deleted from the first queue", || smq.messages(&from).is_empty()).await;
    assert!(daemon.terminate().success());
}
