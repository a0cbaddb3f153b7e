//! A TCP proxy a test can cut: every connection through it is dropped at
//! once and new ones are refused until it is restored, as when a database
//! or broker host goes away.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct TcpProxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl TcpProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (accept_up, accept_connections) = (up.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut list) = accept_connections.lock() {
                    list.retain(|t| !t.is_finished());
                    list.push(task.abort_handle());
                }
            }
        })
        .abort_handle();
        Self { port, up, connections, accept }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        if let Ok(mut list) = self.connections.lock() {
            for task in list.drain(..) {
                task.abort();
            }
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A TLS terminator: accepts TLS on a free port of 127.0.0.1 with a
/// certificate of the test's own and forwards the plain bytes to
/// `target`, for a broker that cannot serve TLS itself.
pub struct TlsFront {
    pub port: u16,
    accept: AbortHandle,
}

impl TlsFront {
    pub async fn start(target: SocketAddr, certs: &crate::tls::TestCerts) -> Self {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(certs.server_cert())
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .expect("the test's server certificate");
        let key = PrivateKeyDer::from_pem_file(certs.server_key()).expect("the test's server key");
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("the test's certificate and key");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the TLS front");
        let port = listener.local_addr().expect("front address").port();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that fails the handshake (plain text, an
                    // unknown CA) is dropped.
                    let Ok(mut inbound) = acceptor.accept(inbound).await else { return };
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        })
        .abort_handle();
        Self { port, accept }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
