//! A misbehaving stand-in in front of the SQS endpoint: it forwards every
//! request to moto, and on demand refuses sends with a 500 or changes the
//! MD5 of the bodies it hands out, so tests can show what ferry does with a
//! flaky SQS and with a body changed between send and receive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to the traffic it forwards.
#[derive(Default)]
struct Faults {
    /// SendMessage / SendMessageBatch requests still to refuse with a 500.
    fail_sends: AtomicUsize,
    /// Whether ReceiveMessage answers get a wrong MD5OfBody.
    corrupt_receives: AtomicBool,
    /// Sends refused so far.
    refused: AtomicUsize,
}

/// The proxy; stops when dropped.
pub struct SqsProxy {
    pub url: String,
    faults: Arc<Faults>,
    task: tokio::task::JoinHandle<()>,
}

impl SqsProxy {
    /// Listens on a free loopback port and forwards to `upstream`
    /// (`http://host:port`).
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let faults = Arc::new(Faults::default());
        let shared = faults.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (faults, upstream) = (shared.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = serve(client, &upstream, &faults).await;
                });
            }
        });
        Self { url, faults, task }
    }

    /// Refuses the next `n` send requests with a 500 (a transient failure).
    pub fn fail_next_sends(&self, n: usize) {
        self.faults.fail_sends.store(n, Ordering::SeqCst);
    }

    /// Sends refused so far.
    pub fn refused_sends(&self) -> usize {
        self.faults.refused.load(Ordering::SeqCst)
    }

    /// From now on, every received body comes with a wrong MD5OfBody.
    pub fn corrupt_receives(&self, on: bool) {
        self.faults.corrupt_receives.store(on, Ordering::SeqCst);
    }
}

impl Drop for SqsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request per connection (answered with `Connection: close`).
async fn serve(mut client: TcpStream, upstream: &str, faults: &Faults) -> std::io::Result<()> {
    let (head, body) = read_message(&mut client, false).await?;
    let target = header(&head, "x-amz-target").unwrap_or_default();
    let action = target.rsplit('.').next().unwrap_or_default().to_owned();
    let form_action = String::from_utf8_lossy(&body).contains("Action=SendMessage");
    if action.starts_with("SendMessage") || form_action {
        let refuse = faults.fail_sends.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if refuse {
            faults.refused.fetch_add(1, Ordering::SeqCst);
            let body = r#"{"__type":"InternalFailure","message":"injected by the test proxy"}"#;
            let reply = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            client.write_all(reply.as_bytes()).await?;
            return client.shutdown().await;
        }
    }
    let mut server = TcpStream::connect(upstream).await?;
    let mut forwarded = String::new();
    for (i, line) in head.split("\r\n").enumerate() {
        if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        forwarded.push_str(line);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("connection: close\r\n\r\n");
    server.write_all(forwarded.as_bytes()).await?;
    server.write_all(&body).await?;
    let (reply_head, mut reply_body) = read_message(&mut server, true).await?;
    if action == "ReceiveMessage" && faults.corrupt_receives.load(Ordering::SeqCst) {
        reply_body = corrupt_md5(&reply_body);
    }
    let mut out = String::new();
    for (i, line) in reply_head.split("\r\n").enumerate() {
        let lower = line.to_ascii_lowercase();
        if i > 0
            && (lower.starts_with("content-length:")
                || lower.starts_with("connection:")
                || lower.starts_with("transfer-encoding:"))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n", reply_body.len()));
    client.write_all(out.as_bytes()).await?;
    client.write_all(&reply_body).await?;
    client.shutdown().await
}

/// Reads a head and its body (by content-length, chunked, or to the end
/// of the stream for a response without either).
async fn read_message(stream: &mut TcpStream, response: bool) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut body = buf[end + 4..].to_vec();
    if let Some(len) = header(&head, "content-length").and_then(|v| v.trim().parse::<usize>().ok()) {
        while body.len() < len {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(len);
    } else if response {
        stream.read_to_end(&mut body).await?;
        if header(&head, "transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
            body = dechunk(&body);
        }
    }
    Ok((head, body))
}

fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(at) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..at]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = at + 2;
        out.extend_from_slice(&data[start..(start + size).min(data.len())]);
        data = &data[(start + size + 2).min(data.len())..];
    }
    out
}

/// The same answer with every MD5OfBody changed (JSON or XML).
fn corrupt_md5(body: &[u8]) -> Vec<u8> {
    const WRONG: &str = "00000000000000000000000000000000";
    if let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(messages) = doc.get_mut("Messages").and_then(|m| m.as_array_mut()) {
            for m in messages {
                m["MD5OfBody"] = serde_json::Value::String(WRONG.into());
            }
        }
        return serde_json::to_vec(&doc).unwrap_or_else(|_| body.to_vec());
    }
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find("<MD5OfBody>") {
        let open = start + "<MD5OfBody>".len();
        out.push_str(&rest[..open]);
        out.push_str(WRONG);
        rest = rest[open..].find("</MD5OfBody>").map_or("", |end| &rest[open + end..]);
    }
    out.push_str(rest);
    out.into_bytes()
}
