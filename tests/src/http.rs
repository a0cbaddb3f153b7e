//! A minimal HTTP/1.1 GET, enough for the admin endpoints.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET http://<addr><path>`: the status code and body.
pub fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    request(addr, "GET", path, None)
}

/// `<method> http://<addr><path>`, with `Authorization: Bearer <token>`
/// when one is given: the status code and body.
pub fn request(addr: &str, method: &str, path: &str, token: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// The value of one sample line (`name{labels} value`) in a metrics text,
/// matched by its name and a fragment of its labels.
pub fn sample(metrics: &str, name: &str, labels_fragment: &str) -> Option<f64> {
    samples(metrics, name, labels_fragment).next()?.parse().ok()
}

/// The values (as written) of the sample lines of `name` whose labels
/// contain `labels_fragment`.
fn samples<'a>(metrics: &'a str, name: &'a str, labels_fragment: &'a str) -> impl Iterator<Item = &'a str> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(move |l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(labels_fragment))
        .filter_map(|l| l.rsplit(' ').next())
}

/// The sum of every sample of `name` whose labels contain `labels_fragment`
/// (a counter over all its reasons, say); 0 when there is none.
pub fn total(metrics: &str, name: &str, labels_fragment: &str) -> f64 {
    samples(metrics, name, labels_fragment).filter_map(|v| v.parse::<f64>().ok()).sum()
}

/// One sample's value now, 0 when it is not there yet.
pub fn counter(addr: &str, name: &str, labels_fragment: &str) -> f64 {
    sample(&metrics(addr), name, labels_fragment).unwrap_or(0.0)
}

/// Scrapes `/metrics`, asserting a 200, and that every series uses only
/// the labels the book's metrics reference (`docs/src/reference/metrics.md`,
/// generated from the daemon's registry and kept current by its own test)
/// lists for it: every scrape of every test checks it. The page, not this
/// process's registry: a transport declares its families in its own crate,
/// and this process does not link every one.
pub fn metrics(addr: &str) -> String {
    let (status, body) = get(addr, "/metrics").expect("scrape");
    assert_eq!(status, 200);
    let undocumented = undocumented(&body);
    assert!(undocumented.is_empty(), "series with labels the book's metrics reference lacks: {undocumented:?}");
    body
}

/// The series of a scrape whose labels the book's metrics reference does
/// not list (see [`metrics`]).
pub fn undocumented(body: &str) -> Vec<String> {
    let catalogue = book_labels();
    ferry_core::metrics::undocumented_labels_by(body, |name| catalogue.get(name).cloned())
}

/// Label names by registered metric name (no `ferry_` prefix, no
/// `_total`), read once from the book's metrics reference.
fn book_labels() -> &'static std::collections::HashMap<String, Vec<String>> {
    static LABELS: std::sync::OnceLock<std::collections::HashMap<String, Vec<String>>> = std::sync::OnceLock::new();
    LABELS.get_or_init(|| {
        let page = crate::repo_root().join("docs/src/reference/metrics.md");
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        text.lines()
            .filter_map(|row| {
                let cells: Vec<&str> = row.split(" | ").collect();
                let scraped = cells.first()?.strip_prefix("| `ferry_")?.strip_suffix('`')?;
                let name = if *cells.get(1)? == "counter" { scraped.strip_suffix("_total")? } else { scraped };
                let labels = match *cells.get(2)? {
                    "—" => Vec::new(),
                    list => list.split(", ").map(str::to_owned).collect(),
                };
                Some((name.to_owned(), labels))
            })
            .collect()
    })
}

/// Waits up to `timeout` until `name{..labels..}` reaches `want` (counters
/// move shortly after the message does); returns the last scrape.
pub fn wait_for_sample(addr: &str, name: &str, labels: &str, want: f64, timeout: Duration) -> String {
    let started = std::time::Instant::now();
    loop {
        let last = metrics(addr);
        if sample(&last, name, labels) == Some(want) {
            return last;
        }
        if started.elapsed() > timeout {
            panic!("{name}{{{labels}}} never reached {want}:\n{last}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
