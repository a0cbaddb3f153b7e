//! The webhook sender: one request per message. 2xx is success; 408, 429
//! and 5xx are transient and their `Retry-After` (seconds) holds the retry
//! back; every other status is permanent (dead-lettered or dropped per the
//! route's policy). Connection errors and timeouts are transient.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_config::TlsConfig;

use crate::config::HttpSenderConfig;
use ferry_core::TransportError;
use ferry_core::metrics::{Metrics, labels};
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Envelope, HeaderValue, names};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue as HttpValue};
use tracing::debug;

use crate::auth;

/// The longest `Retry-After` honoured; a target asking for more is retried
/// after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `type = "http"` sender.
pub struct HttpSender {
    name: String,
    config: HttpSenderConfig,
    client: reqwest::Client,
    method: reqwest::Method,
    metrics: Metrics,
}

impl HttpSender {
    /// Builds the client (its pool, timeouts and TLS files). An unreadable
    /// TLS file is an error here, not at the first send.
    pub fn start(name: &str, config: HttpSenderConfig, metrics: Metrics) -> Result<Arc<Self>, TransportError> {
        let client =
            client(config.timeout_ms, config.connect_timeout_ms, Some(config.pool_idle_per_host), config.tls.as_ref())?;
        let method = reqwest::Method::from_bytes(config.method.as_bytes())
            .map_err(|e| TransportError::permanent(format!("method {:?}: {e}", config.method)))?;
        // No standing connection: the sender is ready from the start.
        let gauge = labels(&[("kind", "http"), ("role", "sender"), ("name", name)]);
        metrics.connected.get_or_create(&gauge).set(1);
        Ok(Arc::new(Self { name: name.to_owned(), config, client, method, metrics }))
    }

    /// The URL a message goes to: the binding's address, else the sender's
    /// `url`, with `{header}`s filled in, each as one path segment.
    fn url(&self, msg: &OutboundMessage) -> Result<reqwest::Url, TransportError> {
        let template = if msg.address.is_empty() {
            self.config
                .url
                .as_deref()
                .ok_or_else(|| TransportError::permanent("binding has no address and the sender has no url"))?
        } else {
            msg.address.as_str()
        };
        let url = ferry_core::address::expand_url(template, &msg.envelope)?;
        let parsed = reqwest::Url::parse(&url).map_err(|e| TransportError::unroutable(format!("URL {url:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(TransportError::unroutable(format!("URL {url:?} is not http:// or https://")));
        }
        Ok(parsed)
    }
}

/// The HTTP client of the HTTP and SimpleMQ transports: timeouts, no
/// redirects, Nagle off, the TLS files. An unreadable TLS file is an error
/// here, not at the first request.
pub(crate) fn client(
    timeout_ms: u64,
    connect_timeout_ms: u64,
    pool_idle_per_host: Option<usize>,
    tls: Option<&TlsConfig>,
) -> Result<reqwest::Client, TransportError> {
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_millis(timeout_ms))
        .connect_timeout(Duration::from_millis(connect_timeout_ms))
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("ferry/", env!("CARGO_PKG_VERSION")));
    if let Some(n) = pool_idle_per_host {
        builder = builder.pool_max_idle_per_host(n);
    }
    if let Some(tls) = tls {
        builder = with_tls(builder, tls)?;
    }
    builder.build().map_err(|e| TransportError::permanent(format!("HTTP client: {e}")))
}

/// How much of an error answer is read: its start goes into the reason.
pub(crate) const ERROR_BODY_BYTES: usize = 4 * 1024;

/// How a body read with [`read_capped`] ended.
#[derive(Debug)]
pub(crate) enum BodyEnd {
    /// All of it was read.
    Complete,
    /// It went on past the limit; the rest was not read.
    Truncated,
    /// Reading failed (the connection broke, the request timed out).
    Failed(reqwest::Error),
}

/// Reads at most `limit` bytes of `response`'s body, and how it ended;
/// what was read before a failure is kept. What is left is never read:
/// dropping the response closes its connection, so a peer that streams an
/// endless body costs `limit` bytes, not memory without bound.
pub(crate) async fn read_capped(mut response: reqwest::Response, limit: usize) -> (Vec<u8>, BodyEnd) {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(None) => return (body, BodyEnd::Complete),
            Ok(Some(chunk)) => {
                let room = limit - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    return (body, BodyEnd::Truncated);
                }
                body.extend_from_slice(&chunk);
            }
            Err(e) => return (body, BodyEnd::Failed(e)),
        }
    }
}

/// A non-2xx answer as a failure, classified once for every HTTP sender:
/// 408, 429, 502, 503 and 504 say the target takes nothing now
/// (*unavailable*: an outage, no replay is spent), any other 5xx that it
/// failed on this message and may take it later (*transient*), every other
/// status that it never will (*permanent*). A `Retry-After` holds the next
/// try back. The reason is `what`, the status and the start of the answer
/// (at most [`ERROR_BODY_BYTES`] are read; a body that breaks off is no
/// reason to wait for more).
pub(crate) async fn failure(what: &str, response: reqwest::Response) -> TransportError {
    let status = response.status();
    let wait = retry_after(response.headers());
    let (start, _) = read_capped(response, ERROR_BODY_BYTES).await;
    let text: String = String::from_utf8_lossy(&start).chars().filter(|c| !c.is_control()).take(200).collect();
    let reason = format!("{what} answered {status}: {}", text.trim());
    let e = match status.as_u16() {
        408 | 429 | 502 | 503 | 504 => TransportError::unavailable(reason),
        _ if status.is_server_error() => TransportError::transient(reason),
        _ => return TransportError::permanent(reason),
    };
    match wait {
        Some(w) => e.retry_after(w),
        None => e,
    }
}

/// A request that got no answer: refused, reset, timed out, a DNS or TLS
/// failure. Nothing reached the target, so it is *unavailable*; a request
/// that could not even be built is *permanent*.
pub(crate) fn no_answer(what: &str, e: &reqwest::Error) -> TransportError {
    let reason = format!("{what}: {}", error_chain(e));
    if e.is_builder() { TransportError::permanent(reason) } else { TransportError::unavailable(reason) }
}

/// Adds `tls` to a client: `ca_file`'s certificates as roots (beside the
/// system's), `cert_file` and `key_file` as the client's identity. An
/// unreadable file is a permanent error. The SSE receiver's client uses it
/// too.
pub fn with_tls(
    mut builder: reqwest::ClientBuilder,
    tls: &TlsConfig,
) -> Result<reqwest::ClientBuilder, TransportError> {
    let read = |path: &str| {
        std::fs::read(path).map_err(|e| TransportError::permanent(format!("cannot read TLS file {path}: {e}")))
    };
    if let Some(ca) = &tls.ca_file {
        for cert in reqwest::Certificate::from_pem_bundle(&read(ca)?)
            .map_err(|e| TransportError::permanent(format!("{ca}: {e}")))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        let mut pem = read(cert)?;
        pem.push(b'\n');
        pem.extend(read(key)?);
        let identity =
            reqwest::Identity::from_pem(&pem).map_err(|e| TransportError::permanent(format!("{cert}: {e}")))?;
        builder = builder.identity(identity);
    }
    Ok(builder)
}

/// The request headers of `envelope`: its headers under `prefix` (the
/// subject as `<prefix>gobridge.subject`; `x-bridge.*` only when
/// `bridge_headers`), `Content-Type` and `Idempotency-Key`. The second
/// value counts the headers HTTP could not carry (a name that is not a
/// token, a value with control characters).
pub fn request_headers(envelope: &Envelope, config: &HttpSenderConfig) -> (HeaderMap, u64) {
    let mut out = HeaderMap::new();
    let mut dropped = 0;
    let subject = envelope.subject.as_ref().map(|s| (names::SUBJECT_CARRIER, HeaderValue::Text(s.clone())));
    let headers = envelope.headers.iter().map(|(k, v)| (k.as_str(), v.clone())).chain(subject);
    for (name, value) in headers {
        if names::is_private(name) || (names::is_reserved(name) && !config.bridge_headers) {
            continue;
        }
        let full = format!("{}{}", config.header_prefix, name.to_ascii_lowercase());
        match (
            HeaderName::from_bytes(full.as_bytes()),
            HttpValue::from_bytes(ferry_core::wire::text_of(&value).as_bytes()),
        ) {
            (Ok(n), Ok(v)) => {
                out.append(n, v);
            }
            _ => dropped += 1,
        }
    }
    let content_type = envelope.text_header(names::CONTENT_TYPE).unwrap_or("application/octet-stream");
    if let Ok(v) = HttpValue::from_str(content_type) {
        out.insert(reqwest::header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HttpValue::from_str(&envelope.id) {
        out.insert("idempotency-key", v);
    }
    (out, dropped)
}

/// `Retry-After` (seconds or an HTTP date), capped.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry_after_at(headers, std::time::SystemTime::now())
}

/// `Retry-After` as seen at `now`: delay-seconds, or an HTTP date (a date
/// already past is no wait), capped at [`MAX_RETRY_AFTER`].
fn retry_after_at(headers: &HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value).ok()?.duration_since(now).unwrap_or_default(),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[async_trait]
impl Sender for HttpSender {
    async fn send(&self, msg: OutboundMessage) -> Result<(), TransportError> {
        let url = self.url(&msg)?;
        let (mut headers, dropped) = request_headers(&msg.envelope, &self.config);
        if dropped > 0 && msg.counts_losses() {
            self.metrics
                .counter_family(&crate::HEADER_DROPPED)
                .get_or_create(&labels(&[("sender", &self.name)]))
                .inc_by(dropped);
        }
        let body = msg.envelope.payload().clone();
        if let Some(token) = &self.config.bearer_token
            && let Ok(v) = HttpValue::from_str(&format!("Bearer {}", token.expose()))
        {
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        if let Some(secret) = &self.config.hmac_secret
            && let Ok(v) = HttpValue::from_str(&auth::sign(secret.expose(), &body))
        {
            headers.insert(auth::SIGNATURE, v);
        }
        let request = self.client.request(self.method.clone(), url.clone()).headers(headers).body(body);
        let response = request.send().await.map_err(|e| no_answer(&format!("{} {}", self.method, redact(&url)), &e))?;
        if response.status().is_success() {
            return Ok(());
        }
        let e = failure(&format!("{} {}", self.method, redact(&url)), response).await;
        debug!(sender = %self.name, reason = %e.reason, "HTTP send failed");
        Err(e)
    }
}

/// The URL without credentials or query (which may hold tokens).
fn redact(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.set_query(None);
    u.to_string()
}

/// An error and its causes, one line (a TLS refusal says why: "invalid
/// peer certificate: UnknownIssuer").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> HttpSenderConfig {
        toml::from_str(&format!("url = \"http://127.0.0.1:1/x\"\n{extra}")).expect("config")
    }

    #[test]
    fn headers_go_under_the_prefix_as_text_and_bridge_headers_only_when_allowed() {
        let mut e = Envelope::new("id-7", &b"x"[..]);
        e.subject = Some("order.created".into());
        e.set_header("Kind", "temp");
        e.set_header("count", HeaderValue::Integer(3));
        e.set_header("where", "Malmö");
        e.set_header("bad name", "v");
        e.set_header("ctl", "a\u{1}b");
        e.set_header(names::CORRELATION_ID, "c-1");
        e.set_header(names::ROUTE_ID, "r");
        e.set_header(names::CONTENT_TYPE, "application/json");
        let (h, dropped) = request_headers(&e, &config(""));
        assert_eq!(h["x-ferry-kind"], "temp");
        assert_eq!(h["x-ferry-count"], "3");
        assert_eq!(h["x-ferry-where"].as_bytes(), "Malmö".as_bytes());
        assert_eq!(h["x-ferry-gobridge.subject"], "order.created");
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["idempotency-key"], "id-7");
        assert!(!h.contains_key("x-ferry-x-bridge.correlation-id"));
        assert!(!h.contains_key("x-ferry-x-bridge.route-id"));
        assert_eq!(dropped, 2, "a name with a space and a value with a control character");
        let (h, _) = request_headers(&e, &config("bridge_headers = true"));
        assert_eq!(h["x-ferry-x-bridge.correlation-id"], "c-1");
        assert!(!h.contains_key("x-ferry-x-bridge.route-id"), "private bookkeeping never leaves");
    }

    #[test]
    fn retry_after_is_read_as_an_http_date_too() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
        let mut h = HeaderMap::new();
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_str(&later).expect("header"));
        assert_eq!(retry_after_at(&h, now), Some(Duration::from_secs(7)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(60));
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_str(&past).expect("header"));
        assert_eq!(retry_after_at(&h, now), Some(Duration::ZERO), "a date already past is no wait");
        let far = httpdate::fmt_http_date(now + Duration::from_secs(86_400));
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_str(&far).expect("header"));
        assert_eq!(retry_after_at(&h, now), Some(MAX_RETRY_AFTER));
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_static("soon"));
        assert_eq!(retry_after_at(&h, now), None);
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_capped() {
        let mut h = HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_static("999999"));
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(reqwest::header::RETRY_AFTER, HttpValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), Some(Duration::ZERO), "a date long past");
    }
}
