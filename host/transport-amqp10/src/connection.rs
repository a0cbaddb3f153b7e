//! Opening an AMQP 1.0 connection and session with a deadline, so a broker
//! that accepts TCP but never answers cannot hang a receiver or sender.

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use ferry_config::TlsConfig;
use ferry_core::TransportError;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long connecting (TCP, SASL, open, begin) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long closing may take before the connection is simply dropped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// An open connection with one session.
pub struct Link {
    pub connection: ConnectionHandle<()>,
    pub session: SessionHandle<()>,
    /// Service Bus: the task renewing the connection's SAS token.
    pub token: Option<crate::service_bus::TokenRenewal>,
}

/// Service Bus: the SAS credentials and the entity the token is for.
#[derive(Clone, Copy)]
pub struct Claims<'a> {
    pub sas: &'a crate::service_bus::Sas,
    pub entity: &'a str,
    /// Where tokens put and refused are counted, under the part's name.
    pub metrics: &'a ferry_core::metrics::Metrics,
    pub part: &'a str,
}

/// Parses an `amqp[s]://[user:password@]host[:port]` URL as the connection
/// uses it (fe2o3-amqp takes a `url::Url`): the scheme, a host, a valid
/// port and percent-encoded credentials that decode. `ferry validate` and
/// the start of `ferry run` call this too, so a URL that cannot work is
/// refused there rather than retried at connect.
pub fn parse_url(raw: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "amqp" | "amqps") {
        return Err(format!("the scheme must be amqp:// or amqps://, not {}://", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    for part in [url.username(), url.password().unwrap_or("")] {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map_err(|e| format!("the credentials do not percent-decode to UTF-8: {e}"))?;
    }
    Ok(url)
}

/// Opens a connection (credentials from the URL, SASL PLAIN; SASL
/// ANONYMOUS and a token put on `$cbs` with `claims`) and begins a
/// session. `amqps://` starts with TLS (no AMQP TLS upgrade header, as
/// RabbitMQ's TLS listener expects): the broker is verified against
/// `tls.ca_file`, else the system's CA bundle, and `cert_file`/`key_file`
/// authenticate the client. Unreadable TLS files are permanent errors (the
/// config must change); every other failure is transient.
pub async fn open(
    url: &str,
    container_id: &str,
    tls: Option<&TlsConfig>,
    claims: Option<Claims<'_>>,
) -> Result<Link, TransportError> {
    let parsed = parse_url(url).map_err(|e| TransportError::permanent(format!("url: {e}")))?;
    let attempt = async {
        let mut builder = Connection::builder().container_id(container_id);
        if claims.is_some() {
            builder = builder.sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous);
        }
        let opened = if parsed.scheme() == "amqps" {
            let host = tls_host(url)?;
            builder
                .rustls_connector(tls_connector(tls)?)
                .domain(host.as_str())
                .alt_tls_establishment(true)
                .open(url)
                .await
        } else {
            builder.open(url).await
        };
        let mut connection = opened.map_err(|e| TransportError::transient(format!("connect: {e}")))?;
        let mut session = match Session::begin(&mut connection).await {
            Ok(session) => session,
            Err(e) => {
                let _ = connection.close().await;
                return Err(TransportError::transient(format!("begin session: {e}")));
            }
        };
        let token = match claims {
            None => None,
            Some(claims) => {
                let audience = crate::service_bus::audience(url, claims.entity);
                match crate::service_bus::authorize(&mut session, claims, &audience).await {
                    Ok(renewal) => Some(renewal),
                    Err(e) => {
                        let _ = session.end().await;
                        let _ = connection.close().await;
                        return Err(e);
                    }
                }
            }
        };
        Ok(Link { connection, session, token })
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err(TransportError::transient("connect: timed out")))
}

/// The system's CA bundle, used when `tls.ca_file` is not set.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The name the broker's certificate must carry: the URL's host (a DNS
/// name or an IP address).
fn tls_host(url: &str) -> Result<String, TransportError> {
    let parsed = url::Url::parse(url).map_err(|e| TransportError::permanent(format!("url: {e}")))?;
    let host = parsed.host_str().ok_or_else(|| TransportError::permanent("url has no host"))?;
    Ok(host.trim_start_matches('[').trim_end_matches(']').to_owned())
}

fn tls_connector(tls: Option<&TlsConfig>) -> Result<tokio_rustls::TlsConnector, TransportError> {
    let tls = tls.cloned().unwrap_or_default();
    let ca_file = tls.ca_file.as_deref().unwrap_or(SYSTEM_CA_BUNDLE);
    let bad = |what: &str, path: &str, e: &dyn std::fmt::Display| {
        TransportError::permanent(format!("cannot read TLS {what} {path}: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).map_err(|e| bad("CA file", ca_file, &e))? {
        roots.add(cert.map_err(|e| bad("CA file", ca_file, &e))?).map_err(|e| bad("CA file", ca_file, &e))?;
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad("certificate", cert, &e))?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key", key, &e))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| TransportError::permanent(format!("TLS client certificate {cert}: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

impl Link {
    /// Ends the session and closes the connection, bounded by
    /// [`CLOSE_TIMEOUT`].
    pub async fn close(mut self) {
        self.token.take();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
            let _ = self.session.end().await;
            let _ = self.connection.close().await;
        })
        .await;
    }
}

/// `ferry validate --connect`: opens a connection and a session under a
/// container id of its own (for Service Bus, puts a token too), then
/// closes them.
pub async fn probe(url: &str, tls: Option<&TlsConfig>, claims: Option<Claims<'_>>) -> Result<(), TransportError> {
    let container = format!("ferry-probe-{}", std::process::id());
    open(url, &container, tls, claims).await?.close().await;
    Ok(())
}
