//! A fake SimpleMQ (Sakura Cloud's HTTP queue) for tests, following its
//! published message API (`openapi/message.yaml` of sacloud/simplemq-api-go,
//! version 1.1.0): no emulator can be fetched here.
//!
//! - `POST /v1/queues/{queue}/messages` `{"content": "<base64>"}` → 200
//!   `{"result": "success", "message": {id, content, created_at,
//!   updated_at, expires_at}}`; content is base64 characters only, at most
//!   256000 of them (400 otherwise).
//! - `GET /v1/queues/{queue}/messages` → 200 `{"result": "success",
//!   "messages": [...]}`: at most one visible message, which becomes
//!   invisible for the queue's visibility timeout (`acquired_at`,
//!   `visibility_timeout_at` set); `[]` when none is visible.
//! - `PUT /v1/queues/{queue}/messages/{id}` extends the message's timeout
//!   by the queue's setting; 404 when it is not there.
//! - `DELETE /v1/queues/{queue}/messages/{id}` deletes it (ack); 404 when
//!   it is not there.
//! - Every call needs `Authorization: Bearer <the queue's API key>` (401);
//!   a queue that does not exist is 404. [`FakeSimpleMq::throttle`] makes
//!   the next calls answer 429.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde_json::{Value, json};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// One stored message.
#[derive(Debug, Clone)]
pub struct Stored {
    pub id: String,
    pub content: String,
    pub created_at: i64,
    pub acquired_at: i64,
    pub visible_at: i64,
    /// How many times it was handed out by a receive.
    pub receives: u32,
}

impl Stored {
    fn json(&self, visibility_ms: i64) -> Value {
        json!({
            "id": self.id,
            "content": self.content,
            "created_at": self.created_at,
            "updated_at": self.created_at.max(self.acquired_at),
            "expires_at": self.created_at + 4 * 86_400_000,
            "acquired_at": self.acquired_at,
            "visibility_timeout_at": if self.acquired_at == 0 { 0 } else { self.visible_at.max(self.acquired_at + visibility_ms) },
        })
    }
}

#[derive(Default)]
struct Queue {
    api_key: String,
    messages: VecDeque<Stored>,
}

#[derive(Default)]
struct Inner {
    queues: BTreeMap<String, Queue>,
    /// Calls still to answer 429.
    throttled: u32,
    /// Calls answered, by operation (`send`, `receive`, `extend`, `delete`)
    /// and status.
    calls: BTreeMap<(String, u16), u64>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    visibility_ms: i64,
}

/// A running fake SimpleMQ on 127.0.0.1.
pub struct FakeSimpleMq {
    pub addr: std::net::SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "code": status.as_u16(), "message": message }))).into_response()
}

impl Shared {
    /// Checks throttling, the queue and its key; runs `f` on the queue.
    fn with_queue(
        &self,
        op: &str,
        name: &str,
        headers: &HeaderMap,
        f: impl FnOnce(&mut Queue, i64) -> Response,
    ) -> Response {
        let mut inner = self.inner.lock().expect("fake simplemq");
        let response = if inner.throttled > 0 {
            inner.throttled -= 1;
            error(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded")
        } else {
            match inner.queues.get_mut(name) {
                None => error(StatusCode::NOT_FOUND, "queue not found"),
                Some(q) => {
                    let given = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
                    if given != format!("Bearer {}", q.api_key) {
                        error(StatusCode::UNAUTHORIZED, "unauthorized")
                    } else {
                        f(q, self.visibility_ms)
                    }
                }
            }
        };
        *inner.calls.entry((op.to_owned(), response.status().as_u16())).or_default() += 1;
        response
    }
}

async fn send(State(s): State<Shared>, Path(queue): Path<String>, headers: HeaderMap, body: String) -> Response {
    s.with_queue("send", &queue, &headers, |q, _| {
        let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(&body) else {
            return error(StatusCode::BAD_REQUEST, "body is not JSON");
        };
        let Some(Value::String(content)) = doc.get("content") else {
            return error(StatusCode::BAD_REQUEST, "content is required");
        };
        let base64_chars = content.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
        if content.len() > 256_000 || !base64_chars {
            return error(StatusCode::BAD_REQUEST, "content must be base64, at most 256000 characters");
        }
        let now = now_ms();
        let m = Stored {
            id: uuid::Uuid::new_v4().to_string(),
            content: content.clone(),
            created_at: now,
            acquired_at: 0,
            visible_at: now,
            receives: 0,
        };
        let shown = json!({
            "id": m.id, "content": m.content, "created_at": now, "updated_at": now,
            "expires_at": now + 4 * 86_400_000,
        });
        q.messages.push_back(m);
        axum::Json(json!({ "result": "success", "message": shown })).into_response()
    })
}

async fn receive(State(s): State<Shared>, Path(queue): Path<String>, headers: HeaderMap) -> Response {
    s.with_queue("receive", &queue, &headers, |q, visibility| {
        let now = now_ms();
        let messages: Vec<Value> = match q.messages.iter_mut().find(|m| m.visible_at <= now) {
            Some(m) => {
                m.acquired_at = now;
                m.visible_at = now + visibility;
                m.receives += 1;
                vec![m.json(visibility)]
            }
            None => Vec::new(),
        };
        axum::Json(json!({ "result": "success", "messages": messages })).into_response()
    })
}

async fn extend(State(s): State<Shared>, Path((queue, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    s.with_queue("extend", &queue, &headers, |q, visibility| match q.messages.iter_mut().find(|m| m.id == id) {
        Some(m) => {
            m.visible_at = now_ms() + visibility;
            axum::Json(json!({ "result": "success", "message": m.json(visibility) })).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "message not found"),
    })
}

async fn delete(State(s): State<Shared>, Path((queue, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    s.with_queue("delete", &queue, &headers, |q, _| match q.messages.iter().position(|m| m.id == id) {
        Some(i) => {
            q.messages.remove(i);
            axum::Json(json!({ "result": "success" })).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "message not found"),
    })
}

impl FakeSimpleMq {
    /// Starts the fake with this visibility timeout for every queue.
    pub async fn start(visibility: Duration) -> Self {
        let shared = Shared { inner: Arc::default(), visibility_ms: visibility.as_millis() as i64 };
        let app = axum::Router::new()
            .route("/v1/queues/{queue}/messages", get(receive).post(send))
            .route("/v1/queues/{queue}/messages/{id}", put(extend).delete(delete))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// The `api_url` to configure.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates a queue reachable with `api_key`.
    pub fn create_queue(&self, name: &str, api_key: &str) {
        let mut inner = self.shared.inner.lock().expect("fake simplemq");
        inner.queues.insert(name.to_owned(), Queue { api_key: api_key.to_owned(), messages: VecDeque::new() });
    }

    /// The next `n` calls (any queue, any operation) answer 429.
    pub fn throttle(&self, n: u32) {
        self.shared.inner.lock().expect("fake simplemq").throttled = n;
    }

    /// Puts a message as a producer would (content already base64).
    pub fn put(&self, queue: &str, content: &str) -> String {
        self.put_with_id(queue, &uuid::Uuid::new_v4().to_string(), content)
    }

    /// Puts a message under an id of the test's choosing, as a lying or
    /// broken API could hand out (`../other/messages/x`, `x#frag`).
    pub fn put_with_id(&self, queue: &str, id: &str, content: &str) -> String {
        let mut inner = self.shared.inner.lock().expect("fake simplemq");
        let q = inner.queues.get_mut(queue).expect("queue exists");
        let now = now_ms();
        let id = id.to_owned();
        q.messages.push_back(Stored {
            id: id.clone(),
            content: content.to_owned(),
            created_at: now,
            acquired_at: 0,
            visible_at: now,
            receives: 0,
        });
        id
    }

    /// Every message in `queue` (visible or not).
    pub fn messages(&self, queue: &str) -> Vec<Stored> {
        let inner = self.shared.inner.lock().expect("fake simplemq");
        inner.queues.get(queue).map(|q| q.messages.iter().cloned().collect()).unwrap_or_default()
    }

    /// Calls answered for `op` with `status`.
    pub fn calls(&self, op: &str, status: u16) -> u64 {
        let inner = self.shared.inner.lock().expect("fake simplemq");
        inner.calls.get(&(op.to_owned(), status)).copied().unwrap_or(0)
    }

    /// A config with one route from queue `from` to queue `to` here, both
    /// ends the transport component `component` speaking the HTTP polling
    /// queue protocol (processors/js/http-queue, the `--kind transport`
    /// scaffolds), granted this fake's address and nothing else.
    pub fn http_queue_route(&self, component: &str, from: &str, to: &str) -> String {
        let api = self.url();
        let host = api.trim_start_matches("http://");
        format!(
            r#"
[receivers.q]
type = "component"
component = "{component}"
allow_hosts = ["{host}"]
wait_ms = 50
config = {{ url = "{api}/v1/queues/{from}/messages", token = "key" }}

[senders.out]
type = "component"
component = "{component}"
allow_hosts = ["{host}"]
config = {{ url = "{api}/v1/queues/{to}/messages", token = "key" }}

[[routes]]
id = "queue"
receiver = "q"
[[routes.bindings]]
sender = "out"
"#
        )
    }

    /// Waits (3 minutes at most) for the first receive a daemon made: its
    /// receiver runs. A debug daemon compiles a fresh JavaScript component
    /// for tens of seconds before it starts its routes.
    pub async fn wait_for_a_receive(&self, daemon: &crate::daemon::Daemon) {
        let started = std::time::Instant::now();
        while self.calls("receive", 200) == 0 {
            assert!(started.elapsed() < Duration::from_secs(180), "the receiver never polled:\n{}", daemon.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A message's content as a producer writes it: the JSON document, base64.
pub fn content(doc: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(doc.to_string())
}

/// The JSON document inside a message's content.
pub fn document(content: &str) -> Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(content).expect("base64 content");
    serde_json::from_slice(&bytes).expect("the JSON wire format")
}

impl Drop for FakeSimpleMq {
    fn drop(&mut self) {
        self.task.abort();
    }
}
