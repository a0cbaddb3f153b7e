//! Connection settings shared by the MQTT receiver and sender.

use std::time::Duration;

use ferry_config::TlsConfig;

use crate::config::MqttConnection;
use ferry_core::TransportError;
use ferry_core::backoff::Backoff;
use rumqttc::v5::MqttOptions;

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// `mqtts://`: TLS.
    pub tls: bool,
    pub username: Option<String>,
    pub password: Option<String>,
}

/// Parses `mqtt[s]://[user[:password]@]host[:port]`.
pub fn parse_url(raw: &str) -> Result<Endpoint, TransportError> {
    let url = url::Url::parse(raw).map_err(|e| TransportError::permanent(format!("invalid MQTT url: {e}")))?;
    let tls = match url.scheme() {
        "mqtt" => false,
        "mqtts" => true,
        other => {
            return Err(TransportError::permanent(format!(
                "MQTT url scheme must be mqtt:// or mqtts://, got {other}://"
            )));
        }
    };
    let host =
        url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| TransportError::permanent("MQTT url has no host"))?;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|d| d.into_owned())
            .map_err(|e| TransportError::permanent(format!("MQTT url credentials do not percent-decode to UTF-8: {e}")))
    };
    let username = (!url.username().is_empty()).then(|| decode(url.username())).transpose()?;
    let password = url.password().map(decode).transpose()?;
    Ok(Endpoint {
        host: host.trim_matches(['[', ']']).to_owned(),
        port: url.port().unwrap_or(if tls { 8883 } else { 1883 }),
        tls,
        username,
        password,
    })
}

/// Most QoS 1/2 publishes one client has unacknowledged at the broker.
/// Mosquitto grants 20 by default (`max_inflight_messages`), other brokers
/// up to 65,535; past a few hundred, more in flight does not add speed.
pub const MAX_OUTGOING_INFLIGHT: u16 = 1024;

/// Base client options for a connection.
pub fn options(conn: &MqttConnection) -> Result<MqttOptions, TransportError> {
    let endpoint = parse_url(&conn.url)?;
    let mut options = MqttOptions::new(conn.client_id.clone(), endpoint.host, endpoint.port);
    // rumqttc keeps a slot per possible outgoing packet id, allocated and
    // zeroed at connect: 65,536 slots (16 MiB of resident memory per client)
    // unless capped. The broker's Receive Maximum still applies below this.
    options.set_outgoing_inflight_upper_limit(MAX_OUTGOING_INFLIGHT);
    options.set_keep_alive(Duration::from_secs(conn.keep_alive_secs.max(5)));
    if let Some(user) = endpoint.username {
        options.set_credentials(user, endpoint.password.unwrap_or_default());
    }
    if endpoint.tls {
        options.set_transport(rumqttc::Transport::tls_with_config(tls_configuration(conn.tls.as_ref())?));
    }
    Ok(options)
}

/// `ferry validate --connect`: connects under a client id of its own (so the
/// daemon's sessions are not disturbed), with a clean start and no session
/// kept, waits for the broker's CONNACK and disconnects.
pub async fn probe(conn: &MqttConnection) -> Result<(), TransportError> {
    let client_id = format!("{}-probe-{}", conn.client_id, std::process::id());
    let mut options = options(&MqttConnection { client_id, ..conn.clone() })?;
    options.set_clean_start(true);
    let (client, mut events) = rumqttc::v5::AsyncClient::new(options, 8);
    let connected = async {
        loop {
            match events.poll().await {
                Ok(rumqttc::v5::Event::Incoming(rumqttc::v5::mqttbytes::v5::Packet::ConnAck(_))) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(TransportError::transient(format!("connect: {e}"))),
            }
        }
    };
    let result = tokio::time::timeout(Duration::from_secs(10), connected)
        .await
        .unwrap_or_else(|_| Err(TransportError::transient("connect: no CONNACK within 10 s")));
    if result.is_ok() {
        let _ = client.disconnect().await;
        let _ = tokio::time::timeout(Duration::from_secs(2), events.poll()).await;
    }
    result
}

/// The system's CA bundle, used when `tls.ca_file` is not set.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Reads the TLS files. Missing or unreadable files are permanent errors:
/// the config must change.
fn tls_configuration(tls: Option<&TlsConfig>) -> Result<rumqttc::TlsConfiguration, TransportError> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| TransportError::permanent(format!("cannot read TLS {what} {path}: {e}")))
    };
    let tls = tls.cloned().unwrap_or_default();
    let ca = read("CA file", tls.ca_file.as_deref().unwrap_or(SYSTEM_CA_BUNDLE))?;
    let client_auth = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some((read("certificate", cert)?, read("key", key)?)),
        _ => None,
    };
    Ok(rumqttc::TlsConfiguration::Simple { ca, alpn: None, client_auth })
}

/// Reconnect delays for a connection: capped exponential with jitter.
pub fn reconnect_backoff(conn: &MqttConnection) -> Backoff {
    Backoff::reconnect(conn.reconnect_initial_ms, conn.reconnect_max_ms)
}

/// The URL with any password masked, for logs.
pub fn redacted(raw: &str) -> String {
    ferry_core::redact::url(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_and_defaults() {
        let e = parse_url("mqtt://user:p%40ss@broker.example:1884").expect("valid");
        assert_eq!(e.host, "broker.example");
        assert_eq!(e.port, 1884);
        assert_eq!(e.username.as_deref(), Some("user"));
        assert_eq!(e.password.as_deref(), Some("p@ss"));
        assert_eq!(parse_url("mqtt://127.0.0.1").expect("valid").port, 1883);
        assert_eq!(parse_url("mqtts://127.0.0.1").expect("valid").port, 8883);
        assert!(parse_url("mqtts://127.0.0.1").expect("valid").tls);
        assert!(parse_url("http://x").is_err());
    }
}
