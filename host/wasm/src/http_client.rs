//! The HTTP client a transport component's `wasi:http` requests go out
//! through once its grant let them: one per part, shared by the part's
//! instances, keeping connections (and TLS sessions) alive between
//! requests. wasmtime-wasi-http's default opens a new connection, and for
//! HTTPS a new TLS session, for every request.
//!
//! The timeouts a component asks for are kept, each capped at the part's
//! call deadline: connecting (the part's cap, set once on the connector),
//! the first byte of the answer, and the gap between two chunks of its
//! body.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use wasmtime_wasi_http::{Error, WasiBody};

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Connections idle longer than this are closed (well under the usual
/// keep-alive of servers and load balancers, so the client closes first).
const IDLE: Duration = Duration::from_secs(20);

/// One part's pooled client.
pub struct PooledClient {
    client: Client<Connector, WasiBody>,
}

impl PooledClient {
    /// A client whose connections are made within `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Result<Self, String> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
        // aws-lc-rs, the provider the rest of ferry's TLS uses, named
        // rather than taken as the process default.
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS for wasi:http: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(IDLE).build(connector);
        Ok(Self { client })
    }

    /// Sends `request`, waiting `first_byte` for the answer's head and
    /// `between_bytes` between two chunks of its body.
    pub async fn send(
        &self,
        request: http::Request<WasiBody>,
        first_byte: Duration,
        between_bytes: Duration,
    ) -> Result<http::Response<WasiBody>, Error> {
        let response = match tokio::time::timeout(first_byte, self.client.request(request)).await {
            Err(_) => return Err(Error::ConnectionReadTimeout),
            Ok(Err(e)) if e.is_connect() => return Err(Error::Connect(std::io::Error::other(e))),
            Ok(Err(e)) => return Err(Error::InternalError(Some(format!("{e:#}")))),
            Ok(Ok(response)) => response,
        };
        let mut timer = tokio::time::interval(between_bytes.max(Duration::from_nanos(1)));
        timer.reset();
        Ok(response.map(|incoming| Gapped { incoming, timer }.boxed_unsync()))
    }
}

/// An answer's body that fails when no chunk arrives for a while.
struct Gapped {
    incoming: hyper::body::Incoming,
    timer: tokio::time::Interval,
}

impl http_body::Body for Gapped {
    type Data = bytes::Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.timer.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Error::from(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(self.timer.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}
