//! OpenTelemetry export read back from a collector stand-in of the test's
//! own (OTLP over HTTP and gRPC, `ferry_tests::otlp`): every series a
//! scrape of `/metrics` shows arrives as an OTLP metric with the same
//! value, over http/protobuf, http/json and grpc, and spans go over gRPC
//! too. The trace chain itself is the `trace` suite's.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::otlp::{Collector, Point, Via};
use ferry_tests::unique;

const WAIT: Duration = Duration::from_secs(30);

/// One MQTT route, `relay`, from `input` to `output`.
fn relay(input: &str, output: &str) -> String {
    format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{url}"
client_id = "{a}"
topics = ["{input}"]

[senders.out]
type = "mqtt"
url = "{url}"
client_id = "{b}"
default_topic = "{output}"

[[routes]]
id = "relay"
receiver = "in"
[[routes.bindings]]
sender = "out"
"#,
        url = broker_url(),
        a = unique("otlp-in"),
        b = unique("otlp-out"),
    )
}

/// A scrape read as (metric name as OTLP names it, labels) → point: a
/// counter's `_total` sample under its family name, a histogram's
/// `_count`/`_sum` under its own, a gauge or info sample under its name.
/// Written apart from the daemon's reader, so the two check each other.
fn scrape_points(text: &str) -> BTreeMap<(String, BTreeMap<String, String>), Point> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut histograms: BTreeMap<(String, BTreeMap<String, String>), (u64, f64)> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = value.parse().expect("a number");
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        // Test label values hold no `",`, so a plain split reads them.
        let labels: BTreeMap<String, String> = labels
            .split("\",")
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once("=\"").expect("k=\"v\"");
                (k.to_owned(), v.trim_end_matches('"').to_owned())
            })
            .collect();
        let family = |suffix: &str| name.strip_suffix(suffix).filter(|f| types.contains_key(*f));
        if let Some(f) = family("_total").filter(|f| types[*f] == "counter") {
            out.insert((f.to_owned(), labels), Point::Sum(value));
        } else if let Some(f) = family("_count").filter(|f| types[*f] == "histogram") {
            histograms.entry((f.to_owned(), labels)).or_default().0 = value as u64;
        } else if let Some(f) = family("_sum").filter(|f| types[*f] == "histogram") {
            histograms.entry((f.to_owned(), labels)).or_default().1 = value;
        } else if family("_bucket").is_some_and(|f| types[f] == "histogram") {
            continue;
        } else {
            out.insert((name.to_owned(), labels), Point::Gauge(value));
        }
    }
    for (key, (count, sum)) in histograms {
        out.insert(key, Point::Histogram { count, sum, buckets: Vec::new(), bounds: Vec::new() });
    }
    out
}

/// Whether an exported point says what the scrape said: the same value
/// (a histogram's count and sum; its buckets add up to its count).
fn same(scraped: &Point, exported: &Point) -> bool {
    match (scraped, exported) {
        (Point::Histogram { count, sum, .. }, Point::Histogram { count: c, sum: s, buckets, bounds }) => {
            count == c
                && (sum - s).abs() < 1e-9
                && buckets.iter().sum::<u64>() == *c
                && buckets.len() == bounds.len() + 1
        }
        (a, b) => a == b,
    }
}

/// Series that move on their own (CPU and memory, ages, the time since a
/// route's last progress, the store's periodic work): their values are
/// compared only for presence.
fn moves_by_itself(name: &str) -> bool {
    name.starts_with("process_")
        || name.ends_with("_age_seconds")
        || name == "ferry_route_last_progress_seconds"
        || name == "ferry_store_op_seconds"
}

/// Ten messages through a relay with export on over `protocol`: the
/// collector gets metrics by `via` (and, for gRPC, spans) and the last
/// export holds every series of a scrape taken after the traffic settled,
/// with the same values.
async fn exported_as_scraped(protocol: &str, via: Via) {
    let collector = Collector::start().await;
    let endpoint = if via == Via::Grpc { &collector.grpc } else { &collector.http };
    let (input, output) = (unique("otlp/in"), unique("otlp/out"));
    let ws = Workspace::with_plugins(&[]).with_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=otlp-test"),
    ]);
    ws.config(&relay(&input, &output));
    let daemon = Daemon::start(&ws, 3);
    let mut reader = TestMqtt::connect(&broker_url()).await;
    reader.subscribe(&output).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..10 {
        publisher.publish_with(&input, &format!("message {i}"), &[]).await;
    }
    for _ in 0..10 {
        reader.next(WAIT).await.expect("every message crosses");
    }
    daemon.wait_for_total("ferry_messages_acked_total", "route=\"relay\"", 10.0, WAIT);
    let scrape = scrape_points(&ferry_tests::http::metrics(&daemon.admin()));
    let acked =
        scrape.iter().find(|((n, l), _)| n == "ferry_messages_acked" && l.get("route").is_some_and(|r| r == "relay"));
    assert_eq!(acked.map(|(_, p)| p), Some(&Point::Sum(10.0)), "{protocol}: the scrape itself");
    // An export that starts after the scrape holds all of it.
    let before = collector.metric_exports(via);
    let exported = ferry_tests::eventually_within(&format!("a {protocol} export after the scrape"), WAIT, || async {
        if collector.metric_exports(via) > before + 1 {
            Ok(collector.last_points(via))
        } else {
            Err(collector.metric_exports(via))
        }
    })
    .await;
    let mut compared = 0;
    for (key, point) in &scrape {
        let got = exported.get(key).unwrap_or_else(|| panic!("{protocol}: {key:?} is scraped but not exported"));
        if !moves_by_itself(&key.0) {
            assert!(same(point, got), "{protocol}: {key:?} scraped {point:?}, exported {got:?}");
            compared += 1;
        }
    }
    assert!(compared >= 10, "{protocol}: only {compared} series compared");
    let resource = collector.last_resource(via);
    assert_eq!(resource.get("service.name").map(String::as_str), Some("ferry"), "{resource:?}");
    assert_eq!(resource.get("deployment.environment").map(String::as_str), Some("otlp-test"), "{resource:?}");
    if via == Via::Grpc {
        let spans = ferry_tests::eventually_within("spans over gRPC", WAIT, || async {
            let spans: Vec<_> =
                collector.spans().into_iter().filter(|s| s.via == Via::Grpc && s.name == "ferry.delivery").collect();
            if spans.len() >= 10 { Ok(spans) } else { Err(spans.len()) }
        })
        .await;
        assert!(spans.iter().all(|s| s.attributes.get("ferry.route").is_some_and(|r| r == "relay")), "{spans:?}");
    }
    // The last export is made at the stop.
    let before = collector.metric_exports(via);
    assert!(daemon.terminate().success());
    assert!(collector.metric_exports(via) > before, "{protocol}: no export at the stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_scraped_series_is_exported_over_otlp_http_protobuf() {
    exported_as_scraped("http/protobuf", Via::HttpProtobuf).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_scraped_series_is_exported_over_otlp_http_json() {
    exported_as_scraped("http/json", Via::HttpJson).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_and_spans_are_exported_over_otlp_grpc() {
    exported_as_scraped("grpc", Via::Grpc).await;
}

/// A protocol the daemon does not speak, or gRPC to an https endpoint
/// (no TLS for gRPC in this build), is refused at the start: exit 2 and
/// the variable named.
#[tokio::test(flavor = "multi_thread")]
async fn an_export_setting_it_cannot_honour_is_refused_at_the_start() {
    for (vars, named) in [
        (
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:1"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (
            vec![
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:1/v1/metrics"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "soon"),
            ],
            "OTEL_METRIC_EXPORT_INTERVAL",
        ),
    ] {
        let ws = Workspace::with_plugins(&[]).with_env(&vars);
        ws.config(&relay(&unique("otlp/x"), &unique("otlp/y")));
        let out = ws.ferry(&["run", "-c", "ferry.toml"]);
        assert_eq!(out.status.code(), Some(2), "{vars:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{vars:?}: {stderr}");
    }
}
