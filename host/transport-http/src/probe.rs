//! `ferry probe` for HTTP: can the sender reach its target (whether a
//! receiver can listen is [`ferry_core::listeners::probe`]).

use std::time::Duration;

use ferry_core::TransportError;

/// Opens a TCP connection to the host and port of `url` (a template's
/// `{header}`s cannot be filled here, so such a URL is only parsed).
pub async fn target(url: &str) -> Result<String, TransportError> {
    if url.contains('{') {
        return Ok("a URL template; filled in per message".into());
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| TransportError::permanent(format!("{url}: {e}")))?;
    let host = parsed.host_str().ok_or_else(|| TransportError::permanent(format!("{url}: no host")))?.to_owned();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(_)) => Ok(format!("{host}:{port} reachable")),
        Ok(Err(e)) => Err(TransportError::transient(format!("{host}:{port}: {e}"))),
        Err(_) => Err(TransportError::transient(format!("{host}:{port}: no answer within 5 s"))),
    }
}
