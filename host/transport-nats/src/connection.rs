//! Connecting to NATS: client options (TLS files, reconnect backoff, the
//! `connected` gauge kept by the client's own events) and the
//! `validate --connect` probe.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, ServerAddr};
use ferry_core::TransportError;
use ferry_core::backoff::Backoff;
use ferry_core::metrics::{Metrics, labels};

use crate::config::{Access, Auth};

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Who a client is, for the server's connection list and the metrics.
pub struct Identity<'a> {
    /// `receiver` or `sender`.
    pub role: &'static str,
    /// The receiver's or sender's name.
    pub name: &'a str,
}

/// The servers of `url`: one NATS URL or a comma-separated list of them
/// (`nats://a:4222,nats://b:4222`), each read by async-nats's own parser
/// (`nats://` and port 4222 when left out). The client tries them in turn
/// and reconnects to whichever answers. An entry it cannot read is a
/// config error naming it (its password masked).
pub fn servers(url: &str) -> Result<Vec<ServerAddr>, String> {
    let mut out = Vec::new();
    for entry in url.split(',').map(str::trim) {
        if entry.is_empty() {
            return Err(format!("an empty entry in the server list {:?}", ferry_core::redact::url(url)));
        }
        let addr = entry
            .parse::<ServerAddr>()
            .map_err(|e| format!("{:?} is not a NATS server URL: {e}", ferry_core::redact::url(entry)))?;
        out.push(addr);
    }
    Ok(out)
}

/// Whether a server of the list `url` is a `tls://` one (the client then
/// requires TLS of every server).
pub fn any_tls(url: &str) -> bool {
    url.split(',').any(|u| u.trim().starts_with("tls://"))
}

/// The wait before connection attempt `attempts`. async-nats counts from
/// 1 and asks before the first attempt of a connection too (the first
/// reconnect after a loss included): none then, as its own default, and
/// the backoff from `initial_ms` from the second on. Passing the count
/// straight to the backoff made every client wait two steps of it, about
/// 0.4 s, before its first connection: the NATS bench row's start delay.
fn reconnect_delay(backoff: &Backoff, attempts: usize) -> Duration {
    match attempts {
        0 | 1 => Duration::ZERO,
        n => backoff.delay(u32::try_from(n - 2).unwrap_or(u32::MAX)),
    }
}

/// Client options: how to authenticate (`url`'s user and password, or
/// `access.auth`), `tls` files (`tls://` requires TLS), reconnects for
/// ever with `initial_ms`..`max_ms` backoff. A credentials file is read
/// here: one that cannot be read or parsed is a permanent error naming it.
async fn options(
    access: Access<'_>,
    client_name: String,
    initial_ms: u64,
    max_ms: u64,
) -> Result<ConnectOptions, TransportError> {
    let backoff = Backoff::reconnect(initial_ms, max_ms);
    let mut options = ConnectOptions::new()
        .name(client_name)
        .connection_timeout(CONNECT_TIMEOUT)
        .max_reconnects(None)
        .reconnect_delay_callback(move |attempts| reconnect_delay(&backoff, attempts));
    options = match access.auth {
        Auth::Url => options,
        Auth::Token(token) => options.token(token.to_owned()),
        Auth::NkeySeed(seed) => options.nkey(seed.to_owned()),
        Auth::CredentialsFile(path) => options
            .credentials_file(path)
            .await
            .map_err(|e| TransportError::permanent(format!("credentials_file {path:?}: {e}")))?,
    };
    if let Some(tls) = access.tls {
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.into());
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            options = options.add_client_certificate(cert.into(), key.into());
        }
    }
    if access.tls.is_some() || any_tls(access.url) {
        options = options.require_tls(true);
    }
    Ok(options)
}

/// A client that connects in the background and reconnects on its own.
/// With `track`, `ferry_connected{kind="nats",role,name}` follows its
/// connection (a sender's readiness); a receiver is ready only once its
/// consumer answers too, and sets the gauge itself.
pub async fn connect(
    access: Access<'_>,
    who: Identity<'_>,
    (initial_ms, max_ms): (u64, u64),
    metrics: &Metrics,
    track: bool,
) -> Result<Client, TransportError> {
    let conn_labels = labels(&[("kind", "nats"), ("role", who.role), ("name", who.name)]);
    let connected = metrics.connected.get_or_create(&conn_labels).clone();
    let connections = metrics.connections.get_or_create(&conn_labels).clone();
    connected.set(0);
    let role = who.role;
    let name = who.name.to_owned();
    options(access, format!("ferry {role} {name}"), initial_ms, max_ms)
        .await?
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let (connected, connections, name) = (connected.clone(), connections.clone(), name.clone());
            async move {
                match &event {
                    Event::Connected => {
                        if track {
                            connected.set(1);
                        }
                        connections.inc();
                        tracing::info!(role, name = %name, "connected to NATS");
                    }
                    Event::Disconnected | Event::Closed => {
                        connected.set(0);
                        tracing::warn!(role, name = %name, "disconnected from NATS; reconnecting");
                    }
                    Event::ServerError(e) => tracing::warn!(role, name = %name, error = %e, "NATS server error"),
                    Event::SlowConsumer(_) | Event::LameDuckMode | Event::Draining | Event::ClientError(_) => {
                        tracing::debug!(role, name = %name, %event, "NATS client event");
                    }
                }
            }
        })
        .connect(servers(access.url).map_err(|e| TransportError::permanent(format!("url: {e}")))?)
        .await
        .map_err(|e| TransportError::permanent(format!("url: {e}")))
}

/// `ferry validate --connect`: one connection under a name of its own,
/// with a deadline; what the server says it is.
pub async fn probe(access: Access<'_>) -> Result<Client, TransportError> {
    let name = format!("ferry-probe-{}", std::process::id());
    let servers = servers(access.url).map_err(|e| TransportError::permanent(format!("url: {e}")))?;
    let attempt = options(access, name, 200, 1000).await?.connect(servers);
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(TransportError::unavailable(format!("connect: {e}"))),
        Err(_) => Err(TransportError::unavailable("connect: timed out")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_attempt_waits_for_nothing_and_later_ones_back_off() {
        let backoff = ferry_core::backoff::Backoff::reconnect(200, 10_000);
        assert_eq!(super::reconnect_delay(&backoff, 1), std::time::Duration::ZERO);
        assert_eq!(super::reconnect_delay(&backoff, 0), std::time::Duration::ZERO);
        let second = super::reconnect_delay(&backoff, 2).as_millis();
        assert!((140..=260).contains(&second), "the initial delay, with jitter: {second} ms");
        let fourth = super::reconnect_delay(&backoff, 4).as_millis();
        assert!((560..=1040).contains(&fourth), "two doublings on: {fourth} ms");
        assert!(super::reconnect_delay(&backoff, 100).as_millis() <= 10_000, "capped");
    }

    #[test]
    fn a_server_list_is_read_entry_by_entry_and_a_bad_entry_is_named_without_its_password() {
        let list = super::servers("nats://a:pw@h1:4222, nats://h2:4223,h3").expect("a list");
        assert_eq!(list.len(), 3);
        assert_eq!(list[1].port(), 4223);
        assert_eq!(list[2].port(), 4222, "the default port");
        let e = super::servers("nats://u:secret@h1:4222,nats://u:secret@h2:notaport").expect_err("a bad port");
        assert!(e.contains("h2:notaport") && !e.contains("secret"), "{e}");
        assert!(super::servers("nats://h1:4222,").is_err(), "an empty entry");
    }
}
