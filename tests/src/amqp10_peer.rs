//! A scripted AMQP 1.0 target: a real AMQP 1.0 endpoint on loopback (fe2o3's
//! acceptor) that settles each incoming message with the outcome a test
//! chooses. RabbitMQ 3.10 accepts even unroutable messages and never
//! answers `released` or `rejected`, so the sender's handling of those
//! outcomes is tested against this peer. A scripted source sends what a
//! lying peer sends: transfers no decoder can read.

use std::sync::{Arc, Mutex};

use fe2o3_amqp::acceptor::{ConnectionAcceptor, LinkAcceptor, LinkEndpoint, SessionAcceptor};
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use tokio::net::TcpListener;

/// How the peer settles one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerOutcome {
    Accept,
    Release,
    /// Rejected with no error condition.
    Reject,
}

/// What the peer saw: each message's body (data sections joined) and the
/// outcome it gave.
pub type PeerLog = Arc<Mutex<Vec<(Vec<u8>, PeerOutcome)>>>;

/// A running peer; it stops with the test's runtime.
pub struct ScriptedTarget {
    pub port: u16,
    pub log: PeerLog,
}

impl ScriptedTarget {
    /// Starts a peer that settles message `body` (seen `nth` times before,
    /// counting from 0) with `script(body, nth)`.
    pub async fn start(script: fn(&[u8], usize) -> PeerOutcome) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log: PeerLog = Arc::new(Mutex::new(Vec::new()));
        let shared = log.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = shared.clone();
                tokio::spawn(async move {
                    let Ok(mut connection) = ConnectionAcceptor::new("scripted-target").accept(stream).await else {
                        return;
                    };
                    while let Ok(mut session) = SessionAcceptor::new().accept(&mut connection).await {
                        let log = log.clone();
                        tokio::spawn(async move {
                            while let Ok(link) = LinkAcceptor::new().accept(&mut session).await {
                                if let LinkEndpoint::Receiver(mut receiver) = link {
                                    let log = log.clone();
                                    tokio::spawn(async move {
                                        while let Ok(d) = receiver.recv::<Body<Value>>().await {
                                            let body: Vec<u8> = match &d.message().body {
                                                Body::Data(sections) => {
                                                    sections.iter().flat_map(|s| s.0.iter().copied()).collect()
                                                }
                                                _ => Vec::new(),
                                            };
                                            let outcome = {
                                                let mut log = log.lock().expect("log");
                                                let nth = log.iter().filter(|(b, _)| *b == body).count();
                                                let outcome = script(&body, nth);
                                                log.push((body, outcome));
                                                outcome
                                            };
                                            let _ = match outcome {
                                                PeerOutcome::Accept => receiver.accept(&d).await,
                                                PeerOutcome::Release => receiver.release(&d).await,
                                                PeerOutcome::Reject => receiver.reject(&d, None).await,
                                            };
                                        }
                                    });
                                }
                            }
                        });
                    }
                });
            }
        });
        Self { port, log }
    }

    pub fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}", self.port)
    }

    /// The outcomes given to messages with this body, in order.
    pub fn outcomes_for(&self, body: &[u8]) -> Vec<PeerOutcome> {
        self.log.lock().expect("log").iter().filter(|(b, _)| b == body).map(|(_, o)| *o).collect()
    }
}

/// A body the [`ScriptedSource`] rewrites on the wire into a data section
/// holding a `str8` of bytes that are not UTF-8: a transfer no AMQP 1.0
/// decoder can read.
pub const POISON_TEXT: &[u8; 16] = b"poison:not-utf-8";
/// A body the [`ScriptedSource`] rewrites on the wire into a data section
/// whose `vbin32` declares 4 GiB less 16 bytes, inside a transfer of a few
/// dozen: a decoder that allocates what a peer declares asks for 4 GiB.
pub const POISON_HUGE: &[u8; 16] = b"poison:huge-size";

/// How each message the source sent was settled: its body (as scripted,
/// before any rewrite) and the outcome, or why the send failed.
pub type SourceLog = Arc<Mutex<Vec<(Vec<u8>, String)>>>;

/// A scripted AMQP 1.0 source: a real AMQP 1.0 endpoint on loopback (fe2o3's
/// acceptor) that, once [`ScriptedSource::go`] is called, sends `bodies` to
/// every receiver link attached to it, in order, as data sections, each
/// after the previous one was settled, and logs the outcomes. [`POISON_TEXT`] and [`POISON_HUGE`] leave it well
/// formed and are rewritten on the socket into what a lying peer sends.
pub struct ScriptedSource {
    pub port: u16,
    pub log: SourceLog,
    go: tokio::sync::watch::Sender<bool>,
}

impl ScriptedSource {
    pub async fn start(bodies: Vec<Vec<u8>>) -> Self {
        use fe2o3_amqp::types::messaging::{Message, Outcome};
        use fe2o3_amqp::types::primitives::Binary;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log: SourceLog = Arc::default();
        let shared = log.clone();
        let (go, started) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, bodies, mut started) = (shared.clone(), bodies.clone(), started.clone());
                tokio::spawn(async move {
                    let stream = Tampering { inner: stream, pending: Vec::new() };
                    let Ok(mut connection) = ConnectionAcceptor::new("scripted-source").accept(stream).await else {
                        return;
                    };
                    let Ok(mut session) = SessionAcceptor::new().accept(&mut connection).await else { return };
                    while let Ok(link) = LinkAcceptor::new().accept(&mut session).await {
                        let LinkEndpoint::Sender(mut sender) = link else { continue };
                        if started.wait_for(|go| *go).await.is_err() {
                            return;
                        }
                        for body in &bodies {
                            let message = Message::builder().data(Binary::from(body.clone())).build();
                            let outcome = match sender.send(message).await {
                                Ok(Outcome::Accepted(_)) => "accepted".to_owned(),
                                Ok(Outcome::Rejected(r)) => {
                                    format!("rejected: {:?}", r.error.map(|e| e.condition))
                                }
                                Ok(other) => format!("{other:?}"),
                                Err(e) => format!("send failed: {e}"),
                            };
                            log.lock().expect("log").push((body.clone(), outcome));
                        }
                        // Keep the link (and so the connection) open.
                        std::future::pending::<()>().await;
                    }
                });
            }
        });
        Self { port, log, go }
    }

    pub fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}", self.port)
    }

    /// Starts sending, on links attached now or later.
    pub fn go(&self) {
        self.go.send_replace(true);
    }

    /// The outcomes so far, in the order the messages were sent.
    pub fn outcomes(&self) -> Vec<(Vec<u8>, String)> {
        self.log.lock().expect("log").clone()
    }
}

/// The start of a data section holding 16 bytes as a `vbin8`, as fe2o3
/// encodes a scripted body.
const DATA_VBIN8_16: [u8; 5] = [0x00, 0x53, 0x75, 0xa0, 0x10];

/// What a poison body's section becomes on the wire (same length, so every
/// frame size stays true).
fn poisoned(marker: &[u8]) -> Option<[u8; 21]> {
    let mut out = [0u8; 21];
    out[..3].copy_from_slice(&DATA_VBIN8_16[..3]);
    if marker == POISON_TEXT {
        out[3..5].copy_from_slice(&[0xa1, 0x10]); // str8, 16 bytes
        out[5..].fill(0xff);
    } else if marker == POISON_HUGE {
        out[3..8].copy_from_slice(&[0xb0, 0xff, 0xff, 0xff, 0xf0]); // vbin32, 4 GiB - 16
    } else {
        return None;
    }
    Some(out)
}

/// A stream that rewrites the poison bodies in what is written to it. What
/// a write hands over is taken whole (rewritten) and written out before
/// the next write or a flush, so a section split by a short write is still
/// found.
#[derive(Debug)]
struct Tampering<S> {
    inner: S,
    pending: Vec<u8>,
}

impl<S: tokio::io::AsyncWrite + Unpin> Tampering<S> {
    fn poll_drain(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        while !self.pending.is_empty() {
            match std::pin::Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => drop(self.pending.drain(..n)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

fn rewrite(buf: &[u8]) -> Vec<u8> {
    let mut out = buf.to_vec();
    let mut i = 0;
    while i + 21 <= out.len() {
        if out[i..i + 5] == DATA_VBIN8_16
            && let Some(bad) = poisoned(&out[i + 5..i + 21])
        {
            out[i..i + 21].copy_from_slice(&bad);
            i += 21;
        } else {
            i += 1;
        }
    }
    out
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Tampering<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        this.pending = rewrite(buf);
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        std::pin::Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        std::pin::Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Tampering<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}
