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

/// A message a [`ServiceBusPeer`] offers on its entity: a body, its
/// session (group-id) and sequence number; the peer adds the
/// annotations Service Bus sends and a lock token.
#[derive(Debug, Clone)]
pub struct Offered {
    pub body: Vec<u8>,
    pub session: Option<String>,
    pub sequence: i64,
    /// Application properties (text).
    pub properties: Vec<(String, String)>,
}

/// One `put-token` the peer took: the audience (the CBS `name`), the token
/// type, whether the signature verified under the peer's key (and named its
/// key and audience), and the token's expiry (Unix seconds).
#[derive(Debug, Clone)]
pub struct PutToken {
    pub audience: String,
    pub token_type: String,
    pub valid: bool,
    pub expiry: u64,
}

/// What a [`ServiceBusPeer`] saw.
#[derive(Debug, Default)]
pub struct BusLog {
    pub tokens: Vec<PutToken>,
    /// The lock tokens of each renew-lock request.
    pub renewals: Vec<Vec<uuid::Uuid>>,
    /// The session of each renew-session-lock request.
    pub session_renewals: Vec<String>,
    /// Messages sent to the entity: body, group-id, message annotations
    /// (symbol keys, values as debug text), application properties.
    pub received: Vec<Received>,
    /// How each offered message was settled: body and outcome (for a
    /// rejection, the condition and the info map as debug text).
    pub outcomes: Vec<(Vec<u8>, String)>,
    /// Links to the entity refused for want of a token.
    pub refused: usize,
    /// The session filter of each receiving link (`Some(None)` asks for
    /// any session).
    pub session_filters: Vec<Option<Option<String>>>,
    /// The lock token each offered message was sent with, in order.
    pub locks: Vec<(Vec<u8>, uuid::Uuid)>,
}

/// A message the peer received on its entity.
#[derive(Debug, Clone)]
pub struct Received {
    pub body: Vec<u8>,
    pub group_id: Option<String>,
    pub annotations: Vec<(String, String)>,
}

/// A scripted Azure Service Bus namespace on loopback (fe2o3's acceptor,
/// SASL ANONYMOUS): a `$cbs` node that checks each SAS token's HMAC under
/// its key and answers 202 (401 for a bad signature), an entity that
/// refuses links until a valid token for `sb://127.0.0.1/ENTITY` was put on
/// the connection, takes what is sent to it, and offers its messages (with
/// `x-opt-*` annotations and an `x-opt-lock-token`) to receiving links,
/// honouring a session filter, and the entity's `$management` node
/// answering `com.microsoft:renew-lock`. No real Service Bus is reachable
/// from the tests; this plays the protocol as Microsoft documents it.
pub struct ServiceBusPeer {
    pub port: u16,
    pub entity: String,
    pub log: Arc<Mutex<BusLog>>,
}

type Replies = Arc<Mutex<std::collections::HashMap<String, tokio::sync::mpsc::UnboundedSender<ReplyMessage>>>>;
type ReplyMessage = fe2o3_amqp::types::messaging::Message<fe2o3_amqp::types::messaging::AmqpValue<Value>>;

impl ServiceBusPeer {
    pub async fn start(key_name: &str, key: &str, entity: &str, offered: Vec<Offered>) -> Self {
        use fe2o3_amqp::acceptor::SaslAnonymousMechanism;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log: Arc<Mutex<BusLog>> = Arc::default();
        let bus = Arc::new(Bus {
            key_name: key_name.to_owned(),
            key: key.to_owned(),
            entity: entity.to_owned(),
            offered,
            log: log.clone(),
        });
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let bus = bus.clone();
                tokio::spawn(async move {
                    let acceptor = ConnectionAcceptor::builder()
                        .container_id("scripted-service-bus")
                        .sasl_acceptor(SaslAnonymousMechanism::new())
                        .build();
                    let Ok(mut connection) = acceptor.accept(stream).await else { return };
                    // Audiences with a valid token on this connection.
                    let authorized: Arc<Mutex<Vec<String>>> = Arc::default();
                    while let Ok(mut session) = SessionAcceptor::new().accept(&mut connection).await {
                        let (bus, authorized) = (bus.clone(), authorized.clone());
                        tokio::spawn(async move {
                            let replies: Replies = Arc::default();
                            while let Ok(link) = LinkAcceptor::new().accept(&mut session).await {
                                let (bus, authorized, replies) = (bus.clone(), authorized.clone(), replies.clone());
                                tokio::spawn(async move { bus.serve(link, &authorized, &replies).await });
                            }
                        });
                    }
                });
            }
        });
        Self { port, entity: entity.to_owned(), log }
    }

    pub fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}", self.port)
    }

    /// The audience a token for the entity names.
    pub fn audience(&self) -> String {
        format!("sb://127.0.0.1/{}", self.entity)
    }

    pub fn tokens(&self) -> Vec<PutToken> {
        self.log.lock().expect("log").tokens.clone()
    }

    /// Waits (up to `timeout`) until `done` holds for the log.
    pub async fn wait_for(&self, timeout: std::time::Duration, done: impl Fn(&BusLog) -> bool) -> bool {
        let started = std::time::Instant::now();
        loop {
            if done(&self.log.lock().expect("log")) {
                return true;
            }
            if started.elapsed() > timeout {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

struct Bus {
    key_name: String,
    key: String,
    entity: String,
    offered: Vec<Offered>,
    log: Arc<Mutex<BusLog>>,
}

/// Thirty seconds from now, as a lock's new expiry.
fn in_30s() -> fe2o3_amqp::types::primitives::Timestamp {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    fe2o3_amqp::types::primitives::Timestamp::from_milliseconds(now.as_millis() as i64 + 30_000)
}

fn is_node(address: &str) -> bool {
    address == "$cbs" || address.ends_with("/$management")
}

impl Bus {
    async fn serve(&self, link: LinkEndpoint, authorized: &Mutex<Vec<String>>, replies: &Replies) {
        use fe2o3_amqp::types::definitions::{AmqpError, Error as AmqpErrorBody};
        let audience = format!("sb://127.0.0.1/{}", self.entity);
        let allowed = || authorized.lock().expect("authorized").contains(&audience);
        let refused =
            || AmqpErrorBody::new(AmqpError::UnauthorizedAccess, Some("no token put for the entity".into()), None);
        match link {
            LinkEndpoint::Receiver(mut receiver) => {
                let target = receiver.target().as_ref().and_then(|t| t.address.clone()).unwrap_or_default();
                if is_node(&target) {
                    self.answer_requests(receiver, authorized, replies).await;
                } else if target != self.entity || !allowed() {
                    self.log.lock().expect("log").refused += 1;
                    let _ = receiver.close_with_error(refused()).await;
                } else {
                    while let Ok(d) = receiver.recv::<Body<Value>>().await {
                        let m = d.message();
                        let body = match &m.body {
                            Body::Data(sections) => sections.iter().flat_map(|s| s.0.iter().copied()).collect(),
                            _ => Vec::new(),
                        };
                        let annotations = m
                            .message_annotations
                            .iter()
                            .flat_map(|a| a.0.iter())
                            .map(|(k, v)| (format!("{k:?}"), format!("{v:?}")))
                            .collect();
                        let group_id = m.properties.as_ref().and_then(|p| p.group_id.clone());
                        self.log.lock().expect("log").received.push(Received { body, group_id, annotations });
                        let _ = receiver.accept(&d).await;
                    }
                }
            }
            LinkEndpoint::Sender(mut sender) => {
                let source = sender.source().clone().unwrap_or_default();
                let address = source.address.clone().unwrap_or_default();
                if is_node(&address) {
                    let client = sender.target().as_ref().and_then(|t| t.address.clone()).unwrap_or_default();
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                    replies.lock().expect("replies").insert(client, tx);
                    while let Some(reply) = rx.recv().await {
                        if sender.send(reply).await.is_err() {
                            break;
                        }
                    }
                    return;
                }
                if address != self.entity || !allowed() {
                    self.log.lock().expect("log").refused += 1;
                    let _ = sender.close_with_error(refused()).await;
                    return;
                }
                let filter = source.filter.as_ref().and_then(|f| {
                    f.iter().find_map(|(k, v)| {
                        (k.0 == "com.microsoft:session-filter").then(|| match v {
                            Value::Described(d) => match &d.value {
                                Value::String(s) => Some(s.clone()),
                                _ => None,
                            },
                            Value::String(s) => Some(s.clone()),
                            _ => None,
                        })
                    })
                });
                self.log.lock().expect("log").session_filters.push(filter.clone());
                self.offer(&mut sender, filter).await;
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sends the offered messages (of the session asked for, or of the
    /// first session there is when any is asked for), each once the last
    /// was settled; a message given back comes again.
    async fn offer(&self, sender: &mut fe2o3_amqp::Sender, filter: Option<Option<String>>) {
        use fe2o3_amqp::types::messaging::{DeliveryAnnotations, Message, MessageAnnotations, Outcome, Properties};
        use fe2o3_amqp::types::primitives::{Binary, Symbol, Timestamp as AmqpTime};
        let session = match &filter {
            Some(None) => self.offered.iter().find_map(|o| o.session.clone()),
            Some(Some(s)) => Some(s.clone()),
            None => None,
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        for offered in self.offered.iter().filter(|o| session.is_none() || o.session == session) {
            loop {
                let lock = uuid::Uuid::new_v4();
                let mut properties = fe2o3_amqp::types::messaging::ApplicationProperties::builder();
                for (k, v) in &offered.properties {
                    properties = properties.insert(k.clone(), v.clone());
                }
                let mut annotations = MessageAnnotations::builder()
                    .insert(Symbol::from("x-opt-enqueued-time"), AmqpTime::from_milliseconds(now as i64))
                    .insert(Symbol::from("x-opt-sequence-number"), Value::Long(offered.sequence))
                    .insert(Symbol::from("x-opt-locked-until"), AmqpTime::from_milliseconds(now as i64 + 30_000));
                if let Some(s) = &offered.session {
                    annotations = annotations.insert(Symbol::from("x-opt-partition-key"), Value::String(s.clone()));
                }
                let message = Message::builder()
                    .delivery_annotations(
                        DeliveryAnnotations::builder()
                            .insert(
                                Symbol::from("x-opt-lock-token"),
                                Value::Uuid(fe2o3_amqp::types::primitives::Uuid::from(*lock.as_bytes())),
                            )
                            .build(),
                    )
                    .message_annotations(annotations.build())
                    .properties(Properties {
                        message_id: Some(format!("sb-{}", offered.sequence).into()),
                        group_id: offered.session.clone(),
                        ..Default::default()
                    })
                    .application_properties(properties.build())
                    .data(Binary::from(offered.body.clone()))
                    .build();
                self.log.lock().expect("log").locks.push((offered.body.clone(), lock));
                let outcome = match sender.send(message).await {
                    Ok(Outcome::Accepted(_)) => "accepted".to_owned(),
                    Ok(Outcome::Rejected(r)) => match r.error {
                        Some(e) => format!("rejected {:?} {:?}", e.condition, e.info),
                        None => "rejected".to_owned(),
                    },
                    Ok(Outcome::Modified(_)) => "modified".to_owned(),
                    Ok(Outcome::Released(_)) => "released".to_owned(),
                    #[allow(unreachable_patterns)]
                    Ok(other) => format!("{other:?}"),
                    Err(e) => format!("send failed: {e}"),
                };
                let again = outcome == "modified" || outcome == "released";
                self.log.lock().expect("log").outcomes.push((offered.body.clone(), outcome));
                if !again {
                    break;
                }
            }
        }
    }

    /// Answers put-token on `$cbs` and renew-lock on `$management`.
    async fn answer_requests(
        &self,
        mut receiver: fe2o3_amqp::Receiver,
        authorized: &Mutex<Vec<String>>,
        replies: &Replies,
    ) {
        use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Message, Properties};
        use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue};
        while let Ok(d) = receiver.recv::<Body<Value>>().await {
            let _ = receiver.accept(&d).await;
            let m = d.message();
            let app = |k: &str| m.application_properties.as_ref().and_then(|a| a.0.get(k)).cloned();
            let text = |v: Option<SimpleValue>| match v {
                Some(SimpleValue::String(s)) => s,
                Some(SimpleValue::Symbol(s)) => s.0,
                _ => String::new(),
            };
            let operation = text(app("operation"));
            let (status, body) = match operation.as_str() {
                "put-token" => {
                    let audience = text(app("name"));
                    let token = match &m.body {
                        Body::Value(AmqpValue(Value::String(s))) => s.clone(),
                        _ => String::new(),
                    };
                    let (valid, expiry) = self.verify(&token, &audience);
                    self.log.lock().expect("log").tokens.push(PutToken {
                        audience: audience.clone(),
                        token_type: text(app("type")),
                        valid,
                        expiry,
                    });
                    if valid {
                        authorized.lock().expect("authorized").push(audience);
                        (202, Value::Null)
                    } else {
                        (401, Value::Null)
                    }
                }
                "com.microsoft:renew-lock" => {
                    let mut tokens = Vec::new();
                    if let Body::Value(AmqpValue(Value::Map(map))) = &m.body
                        && let Some(Value::Array(array)) = map.get(&Value::String("lock-tokens".into()))
                    {
                        for v in array.iter() {
                            if let Value::Uuid(u) = v {
                                tokens.push(uuid::Uuid::from_bytes(*u.as_ref()));
                            }
                        }
                    }
                    let expirations: Vec<Value> = tokens.iter().map(|_| Value::Timestamp(in_30s())).collect();
                    self.log.lock().expect("log").renewals.push(tokens);
                    let mut map = OrderedMap::new();
                    map.insert(Value::String("expirations".into()), Value::Array(Array::from(expirations)));
                    (200, Value::Map(map))
                }
                "com.microsoft:renew-session-lock" => {
                    let session = match &m.body {
                        Body::Value(AmqpValue(Value::Map(map))) => match map.get(&Value::String("session-id".into())) {
                            Some(Value::String(s)) => s.clone(),
                            _ => String::new(),
                        },
                        _ => String::new(),
                    };
                    self.log.lock().expect("log").session_renewals.push(session);
                    let mut map = OrderedMap::new();
                    map.insert(Value::String("expiration".into()), Value::Timestamp(in_30s()));
                    (200, Value::Map(map))
                }
                _ => (501, Value::Null),
            };
            let reply_to = m.properties.as_ref().and_then(|p| p.reply_to.clone()).unwrap_or_default();
            let reply: ReplyMessage = Message::builder()
                .properties(Properties {
                    correlation_id: m.properties.as_ref().and_then(|p| p.message_id.clone()),
                    ..Default::default()
                })
                .application_properties(
                    ApplicationProperties::builder()
                        .insert("status-code", SimpleValue::Int(status))
                        .insert("status-description", SimpleValue::String(format!("scripted {status}")))
                        .build(),
                )
                .value(body)
                .build();
            // The reply link attaches right after the request link.
            for _ in 0..250 {
                let tx = replies.lock().expect("replies").get(&reply_to).cloned();
                if let Some(tx) = tx {
                    let _ = tx.send(reply);
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }

    /// Checks a `SharedAccessSignature sr=…&sig=…&se=…&skn=…` token: the
    /// resource is `audience`, the key name the peer's, and the signature
    /// the HMAC-SHA256 under the key of the encoded resource, a newline and
    /// the expiry. Also returns the expiry.
    fn verify(&self, token: &str, audience: &str) -> (bool, u64) {
        use base64::Engine as _;
        use hmac::Mac as _;
        let Some(fields) = token.strip_prefix("SharedAccessSignature ") else { return (false, 0) };
        let mut sr = None;
        let mut sig = None;
        let mut se = None;
        let mut skn = None;
        for pair in fields.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sr" => sr = Some(v.to_owned()),
                "sig" => sig = Some(v.to_owned()),
                "se" => se = Some(v.to_owned()),
                "skn" => skn = Some(v.to_owned()),
                _ => return (false, 0),
            }
        }
        let (Some(sr), Some(sig), Some(se), Some(skn)) = (sr, sig, se, skn) else { return (false, 0) };
        let decode = |s: &str| form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
        let expiry: u64 = se.parse().unwrap_or(0);
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(self.key.as_bytes()).expect("key");
        mac.update(format!("{sr}\n{se}").as_bytes());
        let want = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let valid = decode(&sr).as_deref() == Some(audience)
            && decode(&skn).as_deref() == Some(self.key_name.as_str())
            && decode(&sig).as_deref() == Some(want.as_str());
        (valid, expiry)
    }
}
