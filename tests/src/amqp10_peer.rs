//! A scripted AMQP 1.0 target: a real AMQP 1.0 endpoint on loopback (fe2o3's
//! acceptor) that settles each incoming message with the outcome a test
//! chooses. RabbitMQ 3.10 accepts even unroutable messages and never
//! answers `released` or `rejected`, so the sender's handling of those
//! outcomes is tested against this peer.

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
