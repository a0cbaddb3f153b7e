//! Opening an AMQP 1.0 connection and session with a deadline, so a broker
//! that accepts TCP but never answers cannot hang a receiver or sender.

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use ferry_core::TransportError;

/// How long connecting (TCP, SASL, open, begin) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing may take before the connection is simply dropped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// An open connection with one session.
pub struct Link {
    pub connection: ConnectionHandle<()>,
    pub session: SessionHandle<()>,
}

/// Opens a connection (credentials from the URL, SASL PLAIN) and begins a
/// session. Every failure here is transient: the broker may come back.
pub async fn open(url: &str, container_id: &str) -> Result<Link, TransportError> {
    let attempt = async {
        let mut connection = Connection::builder()
            .container_id(container_id)
            .open(url)
            .await
            .map_err(|e| TransportError::transient(format!("connect: {e}")))?;
        match Session::begin(&mut connection).await {
            Ok(session) => Ok(Link { connection, session }),
            Err(e) => {
                let _ = connection.close().await;
                Err(TransportError::transient(format!("begin session: {e}")))
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err(TransportError::transient("connect: timed out")))
}

impl Link {
    /// Ends the session and closes the connection, bounded by
    /// [`CLOSE_TIMEOUT`].
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
            let _ = self.session.end().await;
            let _ = self.connection.close().await;
        })
        .await;
    }
}
