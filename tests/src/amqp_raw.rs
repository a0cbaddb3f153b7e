//! A raw AMQP 0-9-1 publisher for hostile-peer tests: it writes the frames
//! byte by byte, so a message can carry what no client library sends (a
//! `message_id` or a header name that is not UTF-8, as RabbitMQ 3.10 passes
//! on). It speaks just enough of the protocol to publish: the handshake
//! (PLAIN), one channel, `basic.publish` with its header and body frames,
//! then `connection.close`, whose `close-ok` means the broker has routed
//! what came before it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const FRAME_END: u8 = 0xCE;

/// The properties of a raw message, as bytes on the wire.
#[derive(Debug, Default, Clone)]
pub struct RawProperties {
    pub message_id: Option<Vec<u8>>,
    /// Header names (short strings, any bytes) with long-string values.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

fn short(out: &mut Vec<u8>, s: &[u8]) {
    out.push(u8::try_from(s.len()).expect("short string of at most 255 bytes"));
    out.extend_from_slice(s);
}

fn long(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&u32::try_from(s.len()).expect("long string").to_be_bytes());
    out.extend_from_slice(s);
}

fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&u32::try_from(payload.len()).expect("frame size").to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
    out
}

fn method(class: u16, id: u16, args: &[u8]) -> Vec<u8> {
    let mut out = class.to_be_bytes().to_vec();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(args);
    out
}

/// One connection that has done the handshake and opened channel 1.
struct RawConnection {
    stream: TcpStream,
}

impl RawConnection {
    async fn open(addr: &str, user: &str, password: &str) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("RabbitMQ at {addr}: {e}"));
        let mut c = Self { stream };
        c.stream.write_all(b"AMQP\x00\x00\x09\x01").await.expect("protocol header");
        c.expect_method(10, 10).await; // connection.start
        let mut args = Vec::new();
        long(&mut args, &[]); // an empty client-properties table
        short(&mut args, b"PLAIN");
        long(&mut args, format!("\0{user}\0{password}").as_bytes());
        short(&mut args, b"en_US");
        c.send(FRAME_METHOD, 0, &method(10, 11, &args)).await;
        let tune = c.expect_method(10, 30).await;
        let mut args = tune[..2].to_vec(); // channel-max as offered
        args.extend_from_slice(&131_072u32.to_be_bytes());
        args.extend_from_slice(&0u16.to_be_bytes()); // no heartbeats
        c.send(FRAME_METHOD, 0, &method(10, 31, &args)).await;
        let mut args = Vec::new();
        short(&mut args, b"/");
        short(&mut args, b"");
        args.push(0);
        c.send(FRAME_METHOD, 0, &method(10, 40, &args)).await;
        c.expect_method(10, 41).await;
        c.send(FRAME_METHOD, 1, &method(20, 10, &[0])).await; // channel.open
        c.expect_method(20, 11).await;
        c
    }

    async fn send(&mut self, kind: u8, channel: u16, payload: &[u8]) {
        self.stream.write_all(&frame(kind, channel, payload)).await.expect("frame written");
    }

    /// Reads frames until the method `class.id` arrives; its arguments.
    /// A `connection.close` or `channel.close` from the broker instead is
    /// a test failure with the broker's reason.
    async fn expect_method(&mut self, class: u16, id: u16) -> Vec<u8> {
        loop {
            let mut head = [0u8; 7];
            tokio::time::timeout(Duration::from_secs(10), self.stream.read_exact(&mut head))
                .await
                .expect("the broker answers within 10 s")
                .expect("frame header");
            let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
            let mut payload = vec![0u8; size + 1];
            self.stream.read_exact(&mut payload).await.expect("frame payload");
            payload.pop();
            if head[0] != FRAME_METHOD || payload.len() < 4 {
                continue;
            }
            let got = (u16::from_be_bytes([payload[0], payload[1]]), u16::from_be_bytes([payload[2], payload[3]]));
            if got == (class, id) {
                return payload[4..].to_vec();
            }
            if got == (10, 50) || got == (20, 40) {
                let text_len = payload.get(6).copied().unwrap_or(0) as usize;
                let text = String::from_utf8_lossy(payload.get(7..7 + text_len).unwrap_or_default());
                panic!("the broker closed on us: {text}");
            }
        }
    }
}

/// The content header payload: class 60, the body size and the
/// properties this message sets (message_id and headers).
fn content_header(body_len: usize, props: &RawProperties) -> Vec<u8> {
    let mut flags: u16 = 0;
    let mut fields = Vec::new();
    if !props.headers.is_empty() {
        flags |= 1 << 13;
        let mut table = Vec::new();
        for (name, value) in &props.headers {
            short(&mut table, name);
            table.push(b'S');
            long(&mut table, value);
        }
        long(&mut fields, &table);
    }
    if let Some(id) = &props.message_id {
        flags |= 1 << 7;
        short(&mut fields, id);
    }
    let mut out = 60u16.to_be_bytes().to_vec();
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(body_len as u64).to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&fields);
    out
}

/// Publishes one message to `queue` through the default exchange of the
/// broker at `addr` (`host:port`, guest/guest, vhost `/`) and returns once
/// the broker has closed the connection cleanly behind it.
pub async fn publish(addr: &str, queue: &str, body: &[u8], props: &RawProperties) {
    let mut c = RawConnection::open(addr, "guest", "guest").await;
    let mut args = 0u16.to_be_bytes().to_vec();
    short(&mut args, b"");
    short(&mut args, queue.as_bytes());
    args.push(0);
    c.send(FRAME_METHOD, 1, &method(60, 40, &args)).await;
    c.send(FRAME_HEADER, 1, &content_header(body.len(), props)).await;
    c.send(FRAME_BODY, 1, body).await;
    let mut args = 200u16.to_be_bytes().to_vec();
    short(&mut args, b"bye");
    args.extend_from_slice(&[0, 0, 0, 0]);
    c.send(FRAME_METHOD, 0, &method(10, 50, &args)).await;
    c.expect_method(10, 51).await;
}
