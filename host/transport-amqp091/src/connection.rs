//! Connecting with a deadline and classifying lapin's errors.

use std::time::Duration;

use ferry_core::TransportError;
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::{Connection, ConnectionProperties, ErrorKind};

/// How long connecting (TCP, handshake, open) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing may take before the connection is dropped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a connection named after the ferry component, for the broker's
/// connection list.
pub async fn open(url: &str, name: &str) -> Result<Connection, TransportError> {
    let properties = ConnectionProperties::default().with_connection_name(format!("ferry {name}").into());
    match tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect(url, properties)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(TransportError::transient(format!("connect: {e}"))),
        Err(_) => Err(TransportError::transient("connect: timed out")),
    }
}

/// Closes a connection, bounded by [`CLOSE_TIMEOUT`].
pub async fn close(connection: &Connection) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, connection.close(200, "ferry closing".into())).await;
}

/// Whether the broker refused an operation because something it names does
/// not exist (404 NOT_FOUND), e.g. publishing to a missing exchange.
pub fn is_not_found(e: &lapin::Error) -> bool {
    matches!(e.kind(), ErrorKind::ProtocolError(p) if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

/// A short string (exchange, routing key, property): AMQP 0-9-1 allows 255
/// bytes; longer is a permanent failure of the message.
pub fn short(what: &str, s: &str) -> Result<lapin::types::ShortString, TransportError> {
    lapin::types::ShortString::try_new(s)
        .map_err(|_| TransportError::permanent(format!("{what} is {} bytes; AMQP 0-9-1 allows 255", s.len())))
}
