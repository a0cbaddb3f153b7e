//! Every series of `/metrics`, exported as OTLP metrics at an interval
//! (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default) and once more when the
//! daemon stops. The points are read from the same text a scrape gets, so
//! the two always agree: a counter becomes a cumulative monotonic sum named
//! as its family (`ferry_messages_acked`, whose samples a scrape shows as
//! `ferry_messages_acked_total`), a gauge a gauge, a histogram an explicit-
//! bucket histogram with the same bounds, an info family a gauge of 1 named
//! as its sample (`ferry_build_info`); labels become attributes, and the
//! family's help and unit the metric's description and unit.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_core::metrics::Metrics;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use prost::Message as _;
use tokio_util::sync::CancellationToken;

use super::{Protocol, TelemetryError, env, millis, plain_grpc, signal_env};
use crate::exposition::{Family, Kind, Sample};

/// The longest the export at the stop may take.
const LAST_EXPORT: Duration = Duration::from_secs(3);

/// Where and how metrics go, from the environment.
#[derive(Debug, Clone)]
pub struct MetricsSettings {
    pub protocol: Protocol,
    /// For HTTP the whole URL (`…/v1/metrics`), for gRPC the collector's
    /// address.
    pub endpoint: String,
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    pub interval: Duration,
}

impl MetricsSettings {
    /// `None` when no endpoint is set.
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        let protocol = super::protocol("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")?;
        let (var, endpoint) = match (env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"), env("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            (Some(own), _) => ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", own.trim().to_owned()),
            // The general endpoint is a base: HTTP appends the signal's path.
            (None, Some(base)) if protocol != Protocol::Grpc => {
                ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("{}/v1/metrics", base.trim().trim_end_matches('/')))
            }
            (None, Some(base)) => ("OTEL_EXPORTER_OTLP_ENDPOINT", base.trim().to_owned()),
            (None, None) => return Ok(None),
        };
        if let Err(e) = url::Url::parse(&endpoint) {
            return Err(TelemetryError::Value { var, value: endpoint, why: format!("not a URL ({e})") });
        }
        if protocol == Protocol::Grpc {
            plain_grpc(var, &endpoint)?;
        }
        let mut headers = Vec::new();
        for var in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"] {
            if let Some(list) = env(var) {
                headers.extend(parse_headers(var, &list)?);
            }
        }
        let timeout = match signal_env("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT") {
            Some((var, _)) => millis(var, Duration::from_secs(10))?,
            None => millis("OTEL_METRIC_EXPORT_TIMEOUT", Duration::from_secs(30))?,
        };
        let interval = millis("OTEL_METRIC_EXPORT_INTERVAL", Duration::from_secs(60))?;
        if interval.is_zero() {
            return Err(TelemetryError::Value {
                var: "OTEL_METRIC_EXPORT_INTERVAL",
                value: "0".into(),
                why: "must be above 0".into(),
            });
        }
        Ok(Some(Self { protocol, endpoint, headers, timeout, interval }))
    }
}

/// `k1=v1,k2=v2`, values percent-decoded (the OTLP exporter spec's form).
fn parse_headers(var: &'static str, list: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    let mut out = Vec::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(TelemetryError::Value {
                var,
                value: list.to_owned(),
                why: format!("{pair:?} is not key=value"),
            });
        };
        let value: String = url::form_urlencoded::parse(format!("v={}", value.trim().replace('+', "%2B")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        out.push((key.trim().to_ascii_lowercase(), value));
    }
    Ok(out)
}

fn nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn attributes(sample: &Sample, skip: &str) -> Vec<KeyValue> {
    sample
        .labels
        .iter()
        .filter(|(k, _)| k != skip)
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.clone())) }),
            ..Default::default()
        })
        .collect()
}

fn number(sample: &Sample, start: u64, now: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attributes(sample, ""),
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(match sample.integer {
            Some(i) => number_data_point::Value::AsInt(i),
            None => number_data_point::Value::AsDouble(sample.value),
        }),
        ..Default::default()
    }
}

fn metric(name: &str, family: &Family, data: metric::Data) -> Metric {
    Metric {
        name: name.to_owned(),
        description: family.help.clone(),
        unit: family.unit.clone(),
        data: Some(data),
        ..Default::default()
    }
}

/// The OTLP metrics of `families`, the counters and histograms counted
/// from `start`, every point taken at `now`.
pub fn to_otlp(families: &[Family], start: SystemTime, now: SystemTime) -> Vec<Metric> {
    let (start, now) = (nanos(start), nanos(now));
    let mut out = Vec::new();
    for family in families {
        match family.kind {
            Kind::Counter => {
                let total = format!("{}_total", family.name);
                let points = family.samples.iter().filter(|s| s.name == total).map(|s| number(s, start, now)).collect();
                out.push(metric(
                    &family.name,
                    family,
                    metric::Data::Sum(Sum {
                        data_points: points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    }),
                ));
            }
            Kind::Histogram => out.push(metric(
                &family.name,
                family,
                metric::Data::Histogram(Histogram {
                    data_points: histogram_points(family, start, now),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            )),
            Kind::Gauge | Kind::Info | Kind::Other => {
                // One gauge per sample name: a gauge's samples share it, an
                // info family's is `<name>_info`.
                let mut names: Vec<&str> = family.samples.iter().map(|s| s.name.as_str()).collect();
                names.dedup();
                for name in names {
                    let points =
                        family.samples.iter().filter(|s| s.name == name).map(|s| number(s, start, now)).collect();
                    out.push(metric(name, family, metric::Data::Gauge(Gauge { data_points: points })));
                }
            }
        }
    }
    out
}

/// A histogram family's points: one per label set (without `le`), its
/// cumulative `_bucket` counts made per-bucket, its bounds the finite `le`s.
fn histogram_points(family: &Family, start: u64, now: u64) -> Vec<HistogramDataPoint> {
    let key = |s: &Sample| attributes(s, "le");
    // Per label set: its (le, cumulative count) buckets, sum and count.
    type Gathered = (Vec<KeyValue>, Vec<(f64, f64)>, f64, f64);
    let mut points: Vec<Gathered> = Vec::new();
    for sample in &family.samples {
        let attrs = key(sample);
        let at = match points.iter().position(|(a, ..)| *a == attrs) {
            Some(i) => i,
            None => {
                points.push((attrs, Vec::new(), 0.0, 0.0));
                points.len() - 1
            }
        };
        let point = &mut points[at];
        let suffix = sample.name.strip_prefix(&family.name).unwrap_or_default();
        match suffix {
            "_bucket" => {
                let le = match sample.label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::INFINITY),
                    None => continue,
                };
                point.1.push((le, sample.value));
            }
            "_sum" => point.2 = sample.value,
            "_count" => point.3 = sample.value,
            _ => {}
        }
    }
    points
        .into_iter()
        .map(|(attributes, mut buckets, sum, count)| {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut previous = 0.0;
            let bucket_counts = buckets
                .iter()
                .map(|(_, cumulative)| {
                    let n = (cumulative - previous).max(0.0) as u64;
                    previous = *cumulative;
                    n
                })
                .collect();
            let explicit_bounds = buckets.iter().map(|(le, _)| *le).filter(|le| le.is_finite()).collect();
            HistogramDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: now,
                count: count as u64,
                sum: Some(sum),
                bucket_counts,
                explicit_bounds,
                ..Default::default()
            }
        })
        .collect()
}

/// The request for one export of `metrics`' series.
fn request(text: &str, resource: Resource, start: SystemTime) -> ExportMetricsServiceRequest {
    let families = crate::exposition::parse(text);
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "ferry".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics: to_otlp(&families, start, SystemTime::now()),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

enum Client {
    Http(reqwest::Client),
    Grpc(MetricsServiceClient<tonic::transport::Channel>),
}

/// Exports `metrics` as `settings` say until `stop`, then once more.
/// Failures are logged (a warning per failed export) and the next interval
/// tries again: export never holds the daemon.
pub async fn export(settings: MetricsSettings, metrics: Metrics, stop: CancellationToken) {
    let start = SystemTime::now();
    let attrs = ResourceAttributesWithSchema::from(&super::resource());
    let resource = Resource { attributes: attrs.attributes.0, ..Default::default() };
    let client = match settings.protocol {
        Protocol::Grpc => match tonic::transport::Endpoint::from_shared(settings.endpoint.clone()) {
            Ok(endpoint) => Client::Grpc(MetricsServiceClient::new(endpoint.timeout(settings.timeout).connect_lazy())),
            Err(e) => {
                tracing::error!(endpoint = %ferry_core::redact::url(&settings.endpoint), error = %e, "cannot export metrics over OTLP");
                return;
            }
        },
        _ => Client::Http(reqwest::Client::new()),
    };
    tracing::info!(
        endpoint = %ferry_core::redact::url(&settings.endpoint),
        protocol = settings.protocol.name(),
        interval_ms = settings.interval.as_millis() as u64,
        "exporting metrics over OTLP"
    );
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        let last = tokio::select! {
            _ = ticks.tick() => false,
            () = stop.cancelled() => true,
        };
        // Rendering, reading and converting every series is synchronous
        // work: done on a blocking thread, as a scrape's is.
        let (metrics, resource) = (metrics.clone(), resource.clone());
        let Ok(request) =
            tokio::task::spawn_blocking(move || request(&crate::exposition::render(&metrics), resource, start)).await
        else {
            return;
        };
        // The last export, at the stop, is bounded more tightly: a
        // collector that is down must not hold the stop past
        // admin.shutdown_timeout_secs.
        let patience = if last { settings.timeout.min(LAST_EXPORT) } else { settings.timeout };
        let sent = tokio::time::timeout(patience, send(&client, &settings, request)).await;
        match sent {
            Ok(Ok(())) => tracing::debug!("metrics exported over OTLP"),
            Ok(Err(e)) => {
                tracing::warn!(endpoint = %ferry_core::redact::url(&settings.endpoint), error = %e, "OTLP metrics export failed")
            }
            Err(_) => {
                tracing::warn!(endpoint = %ferry_core::redact::url(&settings.endpoint), timeout_ms = patience.as_millis() as u64, "OTLP metrics export timed out")
            }
        }
        if last {
            return;
        }
    }
}

async fn send(client: &Client, settings: &MetricsSettings, request: ExportMetricsServiceRequest) -> Result<(), String> {
    match client {
        Client::Http(http) => {
            let (content_type, body) = match settings.protocol {
                Protocol::HttpJson => ("application/json", serde_json::to_vec(&request).map_err(|e| e.to_string())?),
                _ => ("application/x-protobuf", request.encode_to_vec()),
            };
            let mut call = http.post(&settings.endpoint).header(reqwest::header::CONTENT_TYPE, content_type).body(body);
            for (k, v) in &settings.headers {
                call = call.header(k, v);
            }
            let response = call.send().await.map_err(|e| ferry_transport_http::sender::error_chain(&e))?;
            let status = response.status();
            if status.is_success() { Ok(()) } else { Err(format!("the collector answered {status}")) }
        }
        Client::Grpc(grpc) => {
            let mut call = tonic::Request::new(request);
            for (k, v) in &settings.headers {
                if let (Ok(key), Ok(value)) = (
                    tonic::metadata::MetadataKey::from_bytes(k.as_bytes()),
                    tonic::metadata::MetadataValue::try_from(v.as_str()),
                ) {
                    call.metadata_mut().insert(key, value);
                }
            }
            grpc.clone()
                .export(call)
                .await
                .map(|_| ())
                .map_err(|status| format!("{}: {}", status.code(), status.message()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_histograms_and_info_become_their_otlp_kinds() {
        let text = "# HELP ferry_messages_acked Acked.\n# TYPE ferry_messages_acked counter\n\
            ferry_messages_acked_total{route=\"a\"} 5\n\
            # TYPE ferry_in_flight gauge\nferry_in_flight{route=\"a\"} 1.5\n\
            # TYPE ferry_d_seconds histogram\n# UNIT ferry_d_seconds seconds\n\
            ferry_d_seconds_sum{route=\"a\"} 0.7\nferry_d_seconds_count{route=\"a\"} 3\n\
            ferry_d_seconds_bucket{le=\"0.1\",route=\"a\"} 1\nferry_d_seconds_bucket{le=\"1.0\",route=\"a\"} 2\n\
            ferry_d_seconds_bucket{le=\"+Inf\",route=\"a\"} 3\n\
            # TYPE ferry_build info\nferry_build_info{version=\"1\"} 1\n# EOF\n";
        let start = UNIX_EPOCH + Duration::from_secs(10);
        let now = UNIX_EPOCH + Duration::from_secs(20);
        let metrics = to_otlp(&crate::exposition::parse(text), start, now);
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["ferry_messages_acked", "ferry_in_flight", "ferry_d_seconds", "ferry_build_info"]);
        let Some(metric::Data::Sum(sum)) = &metrics[0].data else { panic!("{:?}", metrics[0]) };
        assert!(sum.is_monotonic);
        assert_eq!(sum.aggregation_temporality, AggregationTemporality::Cumulative as i32);
        assert_eq!(sum.data_points[0].value, Some(number_data_point::Value::AsInt(5)));
        assert_eq!(sum.data_points[0].start_time_unix_nano, 10_000_000_000);
        assert_eq!(sum.data_points[0].attributes[0].key, "route");
        assert_eq!(metrics[0].description, "Acked.");
        let Some(metric::Data::Gauge(gauge)) = &metrics[1].data else { panic!() };
        assert_eq!(gauge.data_points[0].value, Some(number_data_point::Value::AsDouble(1.5)));
        let Some(metric::Data::Histogram(h)) = &metrics[2].data else { panic!() };
        let point = &h.data_points[0];
        assert_eq!(metrics[2].unit, "seconds");
        assert_eq!((point.count, point.sum), (3, Some(0.7)));
        assert_eq!(point.explicit_bounds, [0.1, 1.0]);
        assert_eq!(point.bucket_counts, [1, 1, 1], "per bucket, not cumulative");
        assert_eq!(point.attributes.len(), 1, "le is not an attribute");
        let Some(metric::Data::Gauge(info)) = &metrics[3].data else { panic!() };
        assert_eq!(info.data_points[0].value, Some(number_data_point::Value::AsInt(1)));
    }

    #[test]
    fn header_lists_are_read_and_decoded() {
        let headers = parse_headers("X", "api-key=a%20b+c, Tenant = t1").expect("valid");
        assert_eq!(headers, [("api-key".to_owned(), "a b+c".to_owned()), ("tenant".to_owned(), "t1".to_owned())]);
        assert!(parse_headers("X", "novalue").is_err());
    }
}
