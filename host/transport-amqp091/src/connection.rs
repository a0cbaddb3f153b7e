//! Connecting with a deadline and classifying lapin's errors.

use std::time::Duration;

use ferry_config::TlsConfig;
use ferry_core::TransportError;
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Channel, Connection, ConnectionProperties, ErrorKind};

/// How long connecting (TCP, handshake, open) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing may take before the connection is dropped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses an `amqp[s]://[user:password@]host[:port][/vhost]` URL as the
/// connection uses it: lapin's own parser (ports, percent-encoding, the
/// vhost, query parameters), with the host taken as the URL writes it.
/// lapin reads only domain names and falls back to `localhost` for an IP
/// address, so `amqp://10.0.0.5` would have connected to this machine.
/// `ferry validate` and the start of `ferry run` call this too, so a URL
/// that cannot work is refused there rather than retried at connect.
pub fn parse_url(raw: &str) -> Result<AMQPUri, String> {
    let mut uri: AMQPUri = raw.parse()?;
    let url = url::Url::parse(raw).map_err(|e| e.to_string())?;
    match url.host() {
        Some(url::Host::Ipv4(ip)) => uri.authority.host = ip.to_string(),
        Some(url::Host::Ipv6(ip)) => uri.authority.host = ip.to_string(),
        Some(url::Host::Domain(_)) => {}
        None => return Err("the URL has no host".into()),
    }
    Ok(uri)
}

/// Opens a connection named after the ferry component, for the broker's
/// connection list. `amqps://` uses TLS: the broker is verified against
/// `tls.ca_file` when given (else the system roots), and `cert_file` /
/// `key_file` authenticate the client.
pub async fn open(url: &str, name: &str, tls: Option<&TlsConfig>) -> Result<Connection, TransportError> {
    let properties = ConnectionProperties::default().with_connection_name(format!("ferry {name}").into());
    let uri = parse_url(url).map_err(|e| TransportError::permanent(format!("url: {e}")))?;
    let connect = async {
        match tls {
            Some(tls) if uri.scheme == AMQPScheme::AMQPS => {
                let config = tls_config(tls)?;
                let runtime = lapin::runtime::default_runtime()
                    .map_err(|e| TransportError::permanent(format!("no async runtime for TLS: {e}")))?;
                Connection::connect_uri_with_config(uri, properties, config, runtime)
                    .await
                    .map_err(|e| TransportError::transient(format!("connect: {e}")))
            }
            _ => Connection::connect_uri(uri, properties)
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

/// `ferry validate --connect`: opens a connection and a channel and, when
/// `queue` is given, checks it exists (a passive declare); `Ok` says what
/// was found.
pub async fn probe(url: &str, tls: Option<&TlsConfig>, queue: Option<&str>) -> Result<String, TransportError> {
    let connection = open(url, "probe", tls).await?;
    let found = async {
        let channel =
            connection.create_channel().await.map_err(|e| TransportError::transient(format!("channel: {e}")))?;
        match queue {
            Some(queue) => {
                let options = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
                match channel.queue_declare(queue.into(), options, lapin::types::FieldTable::default()).await {
                    Ok(q) => Ok(format!("queue {queue} exists ({} messages ready)", q.message_count())),
                    Err(e) => Err(TransportError::permanent(format!("queue {queue}: {e}"))),
                }
            }
            None => Ok("connected".to_owned()),
        }
    }
    .await;
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, connection.close(200, "probe done".into())).await;
    found
}

#[cfg(test)]
mod url_tests {
    use super::*;

    #[test]
    fn an_ip_address_is_kept_and_a_url_that_cannot_work_is_refused() {
        let uri = parse_url("amqp://u:p%40ss@10.1.2.3:5673/v%2fh").expect("valid");
        assert_eq!(uri.authority.host, "10.1.2.3", "not lapin's localhost fallback");
        assert_eq!((uri.authority.port, uri.authority.userinfo.password.as_str()), (5673, "p@ss"));
        assert_eq!(uri.vhost, "v/h");
        assert_eq!(parse_url("amqps://[::1]/%2f").expect("valid").authority.host, "::1");
        assert_eq!(parse_url("amqp://broker.example/%2f").expect("valid").authority.host, "broker.example");
        for bad in ["amqp://h:99999/%2f", "http://h/%2f", "amqp://u:%FF@h/", "amqp:///%2f", "amqp://h/?heartbeat=x"] {
            assert!(parse_url(bad).is_err(), "{bad} should be refused");
        }
    }
}
