//! Connecting with a deadline and classifying lapin's errors.

use std::time::Duration;

use ferry_config::TlsConfig;
use ferry_core::TransportError;
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::{Channel, Connection, ConnectionProperties, ErrorKind};

/// How long connecting (TCP, handshake, open) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing may take before the connection is dropped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a connection named after the ferry component, for the broker's
/// connection list. `amqps://` uses TLS: the broker is verified against
/// `tls.ca_file` when given (else the system roots), and `cert_file` /
/// `key_file` authenticate the client.
pub async fn open(url: &str, name: &str, tls: Option<&TlsConfig>) -> Result<Connection, TransportError> {
    let properties = ConnectionProperties::default().with_connection_name(format!("ferry {name}").into());
    let connect = async {
        match tls {
            Some(tls) if url.starts_with("amqps://") => {
                let config = tls_config(tls)?;
                let runtime = lapin::runtime::default_runtime()
                    .map_err(|e| TransportError::permanent(format!("no async runtime for TLS: {e}")))?;
                Connection::connect_with_config(url, properties, config, runtime)
                    .await
                    .map_err(|e| TransportError::transient(format!("connect: {e}")))
            }
            _ => Connection::connect(url, properties)
                .await
                .map_err(|e| TransportError::transient(format!("connect: {e}"))),
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(result) => result,
        Err(_) => Err(TransportError::transient("connect: timed out")),
    }
}

/// Reads the TLS files. A file that cannot be read is a permanent error:
/// the config must change.
fn tls_config(tls: &TlsConfig) -> Result<OwnedTLSConfig, TransportError> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| TransportError::permanent(format!("cannot read TLS {what} {path}: {e}")))
    };
    let cert_chain = match &tls.ca_file {
        Some(path) => Some(String::from_utf8_lossy(&read("CA file", path)?).into_owned()),
        None => None,
    };
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            Some(OwnedIdentity::PKCS8 { pem: read("certificate", cert)?, key: read("key", key)? })
        }
        _ => None,
    };
    Ok(OwnedTLSConfig { identity, cert_chain })
}

/// Closes a connection, bounded by [`CLOSE_TIMEOUT`].
pub async fn close(connection: &Connection) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, connection.close(200, "ferry closing".into())).await;
}

/// Closes `channel`, then its connection. Closing the channel first
/// matters: lapin closes a channel itself when its last handle drops, and
/// if that races the connection's close it logs a connection error.
pub async fn close_with(connection: &Connection, channel: &Channel) {
    if channel.status().connected() {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, channel.close(200, "ferry closing".into())).await;
    }
    close(connection).await;
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
