//! Connections to Redis: the client (URL and TLS files), one multiplexed
//! connection kept and made again after it broke, the `connected` gauge,
//! and the `validate --connect` probe.

use std::time::Duration;

use ferry_config::TlsConfig;
use ferry_core::TransportError;
use ferry_core::metrics::{CounterHandle, GaugeHandle, Metrics, labels};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, Value};
use tokio::sync::Mutex;

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for `url`, with `tls` files for `rediss://`.
pub fn client(url: &str, tls: Option<&TlsConfig>) -> Result<Client, TransportError> {
    let read =
        |path: &str| std::fs::read(path).map_err(|e| TransportError::permanent(format!("tls file {path:?}: {e}")));
    let built = match tls {
        None => Client::open(url),
        Some(t) => {
            let root_cert = t.ca_file.as_deref().map(read).transpose()?;
            let client_tls = match (&t.cert_file, &t.key_file) {
                (Some(cert), Some(key)) => {
                    Some(redis::ClientTlsConfig { client_cert: read(cert)?, client_key: read(key)? })
                }
                _ => None,
            };
            Client::build_with_tls(url, redis::TlsCertificates { client_tls, root_cert })
        }
    };
    built.map_err(|e| TransportError::permanent(format!("url: {e}")))
}

/// Whether `e` means the connection is gone (or cannot be trusted to
/// answer in order): the next command connects again.
pub fn broken(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

/// `e` as a transport error, classified once: a key that is not a stream
/// (`WRONGTYPE`) is *permanent*; a connection that is gone or refused, a
/// timeout, and a server that takes nothing now (`LOADING`, `BUSY`,
/// `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, a replica's `READONLY`, `OOM`,
/// too many clients) are *unavailable* (an outage: no replay is spent);
/// anything else the server answered is *transient*.
pub fn transport_error(what: &str, e: &RedisError) -> TransportError {
    let reason = format!("{what}: {e}");
    match e.code() {
        Some("WRONGTYPE") => TransportError::permanent(reason),
        Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "READONLY" | "OOM") => {
            TransportError::unavailable(reason)
        }
        _ if broken(e) || e.to_string().contains("max number of clients") => TransportError::unavailable(reason),
        _ => TransportError::transient(reason),
    }
}

/// One connection to a server, made when first needed and again after it
/// broke. Commands share it (Redis answers them in order).
pub struct Link {
    client: Client,
    config: AsyncConnectionConfig,
    conn: Mutex<Option<MultiplexedConnection>>,
    /// Set to 1 while connected, when the link tracks readiness.
    connected: Option<GaugeHandle>,
    connections: CounterHandle,
    who: String,
}

impl Link {
    /// A link for `role` (`receiver` or `sender`) `name`; with `track`,
    /// `ferry_connected{kind="redis_streams",role,name}` follows it.
    /// `response_timeout` bounds each command (a blocking read's included).
    pub fn new(
        client: Client,
        response_timeout: Duration,
        (role, name): (&str, &str),
        metrics: &Metrics,
        track: bool,
    ) -> Self {
        let conn_labels = labels(&[("kind", "redis_streams"), ("role", role), ("name", name)]);
        let connected = track.then(|| metrics.connected.get_or_create(&conn_labels).clone());
        if let Some(g) = &connected {
            g.set(0);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout));
        Self {
            client,
            config,
            conn: Mutex::new(None),
            connected,
            connections: metrics.connections.get_or_create(&conn_labels).clone(),
            who: format!("{role} {name}"),
        }
    }

    /// The connection, made now when there is none.
    async fn get(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        match self.client.get_multiplexed_async_connection_with_config(&self.config).await {
            Ok(c) => {
                *slot = Some(c.clone());
                self.connections.inc();
                if let Some(g) = &self.connected {
                    g.set(1);
                }
                tracing::info!(who = %self.who, "connected to Redis");
                Ok(c)
            }
            Err(e) => {
                if let Some(g) = &self.connected {
                    g.set(0);
                }
                Err(e)
            }
        }
    }

    /// Sends `cmd` and reads its reply; a broken connection is dropped, so
    /// the next command connects again.
    pub async fn run(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let mut conn = self.get().await?;
        let reply = cmd.query_async::<Value>(&mut conn).await;
        if let Err(e) = &reply
            && broken(e)
        {
            self.forget().await;
        }
        reply
    }

    /// Drops the connection (the next command makes a new one).
    pub async fn forget(&self) {
        if self.conn.lock().await.take().is_some() {
            if let Some(g) = &self.connected {
                g.set(0);
            }
            tracing::warn!(who = %self.who, "disconnected from Redis; connecting again");
        }
    }
}

/// `ferry validate --connect`: one connection with a deadline, and the
/// server's version.
pub async fn probe(url: &str, tls: Option<&TlsConfig>) -> Result<(MultiplexedConnection, String), TransportError> {
    let client = client(url, tls)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(CONNECT_TIMEOUT));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| TransportError::transient(format!("connect: {e}")))?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(|e| TransportError::transient(format!("INFO: {e}")))?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map_or_else(|| "of unknown version".to_owned(), |v| v.trim().to_owned());
    Ok((conn, version))
}
