//! A webhook target for the HTTP sender's tests: records every request and
//! answers from a script (a status and an optional `Retry-After` per
//! request, then 200 once the script is used up).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;

/// One request the target received.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Bytes,
    pub at: Instant,
}

impl Hit {
    /// A header's value (names are lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// How the target answers one request.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<u64>,
}

/// Answers `status` (with `Retry-After: secs` when given).
pub fn answer(status: u16, retry_after: Option<u64>) -> Answer {
    Answer { status, retry_after }
}

/// A running webhook target on 127.0.0.1.
pub struct WebhookTarget {
    pub addr: std::net::SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    /// Scripts by the request's `x-ferry-script` header value ("" when none).
    scripts: Arc<Mutex<BTreeMap<String, VecDeque<Answer>>>>,
    /// The answer once a request's script is used up (200 at first).
    fallback: Arc<Mutex<Answer>>,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookTarget {
    /// Starts the target. Requests carrying the header `x-ferry-script: K`
    /// take their answers from the script set for `K` with
    /// [`WebhookTarget::script`]; all others get 200.
    pub async fn start() -> Self {
        Self::start_on(tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind")).await
    }

    /// Starts the target on a listener the test already holds (a
    /// [`ClosedPort`](crate::ports::ClosedPort) that now listens: a target
    /// that was down comes up on the same address).
    pub async fn start_on(listener: tokio::net::TcpListener) -> Self {
        Self::start_on_answering(listener, answer(200, None)).await
    }

    /// [`WebhookTarget::start_on`], answering `fallback` to every request
    /// without a script from the first one on.
    pub async fn start_on_answering(listener: tokio::net::TcpListener, fallback: Answer) -> Self {
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let scripts: Arc<Mutex<BTreeMap<String, VecDeque<Answer>>>> = Arc::default();
        let fallback = Arc::new(Mutex::new(fallback));
        let (h, s, f) = (hits.clone(), scripts.clone(), fallback.clone());
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
            let (hits, scripts, fallback) = (h.clone(), s.clone(), f.clone());
            async move {
                let headers: BTreeMap<String, String> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                    .collect();
                let key = headers.get("x-ferry-script").cloned().unwrap_or_default();
                let answer = scripts.lock().expect("scripts").get_mut(&key).and_then(VecDeque::pop_front);
                hits.lock().expect("hits").push(Hit { path: uri.path().to_owned(), headers, body, at: Instant::now() });
                let answer = answer.unwrap_or_else(|| *fallback.lock().expect("fallback"));
                let status = StatusCode::from_u16(answer.status).expect("status");
                match answer.retry_after {
                    Some(secs) => (status, [("retry-after", secs.to_string())], "scripted").into_response(),
                    None => (status, "scripted").into_response(),
                }
            }
        });
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, hits, scripts, fallback, task }
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests with `x-ferry-script: key` get these answers in turn.
    pub fn script(&self, key: &str, answers: &[Answer]) {
        self.scripts.lock().expect("scripts").insert(key.to_owned(), answers.iter().copied().collect());
    }

    /// Every request without a script (or past its script's end) gets
    /// `answer` from now on.
    pub fn answer_all(&self, answer: Answer) {
        *self.fallback.lock().expect("fallback") = answer;
    }

    /// Everything received so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().expect("hits").clone()
    }

    /// How many requests arrived so far (without copying them).
    pub fn count(&self) -> usize {
        self.hits.lock().expect("hits").len()
    }

    /// Waits until `n` requests matching `pred` arrived; returns them.
    pub async fn wait_for(&self, n: usize, timeout: Duration, pred: impl Fn(&Hit) -> bool) -> Vec<Hit> {
        let started = Instant::now();
        loop {
            let hits: Vec<Hit> = self.hits().into_iter().filter(|h| pred(h)).collect();
            if hits.len() >= n || started.elapsed() > timeout {
                return hits;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for WebhookTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}
