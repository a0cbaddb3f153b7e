//! A PostgreSQL schema of its own per test, so tests run in parallel and
//! again: `FERRY_TEST_POSTGRES_URL` (default
//! `postgres://ferry:ferry@127.0.0.1:5432/ferry_test`, which `.ci/run`
//! creates) names the database; each test gets `t_<random>` in it, and the
//! store's URL sets `search_path` to it.

use std::sync::atomic::{AtomicU32, Ordering};

use tokio_postgres::NoTls;

pub struct TestDb {
    pub url: String,
    pub schema: String,
    base: String,
}

pub fn base_url() -> String {
    std::env::var("FERRY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://ferry:ferry@127.0.0.1:5432/ferry_test".to_owned())
}

impl TestDb {
    pub async fn new() -> Self {
        let base = base_url();
        let schema = format!("t_{}", unique());
        let client = connect(&base).await;
        client.batch_execute(&format!("CREATE SCHEMA {schema}")).await.expect("create the test schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        Self { url, schema, base }
    }

    /// The database's `host:port`.
    pub fn address(&self) -> std::net::SocketAddr {
        use std::net::ToSocketAddrs;
        let (start, end) = host_span(&self.url);
        self.url[start..end].to_socket_addrs().ok().and_then(|mut a| a.next()).expect("the test database's address")
    }

    /// The store URL with `127.0.0.1:<port>` in place of the database's
    /// address (a proxy before it).
    pub fn url_via(&self, port: u16) -> String {
        let (start, end) = host_span(&self.url);
        format!("{}127.0.0.1:{port}{}", &self.url[..start], &self.url[end..])
    }

    /// A plain connection to the test schema.
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url).await
    }

    pub async fn drop(self) {
        let client = connect(&self.base).await;
        client.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema)).await.expect("drop the test schema");
    }
}

/// Where `host:port` is in a `postgres://[user[:password]@]host:port/db` URL.
fn host_span(url: &str) -> (usize, usize) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let start = url[after_scheme..].find('@').map_or(after_scheme, |i| after_scheme + i + 1);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    (start, end)
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| {
        panic!("cannot connect to {url}: {e} (is PostgreSQL running, with the role and database .ci/run creates?)")
    });
    tokio::spawn(connection);
    client
}

fn unique() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}_{:x}_{}", nanos, std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}
