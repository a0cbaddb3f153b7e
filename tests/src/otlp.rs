//! An OpenTelemetry collector stand-in of the test's own: OTLP over HTTP
//! (protobuf or JSON, `/v1/traces` and `/v1/metrics`) on one port and over
//! gRPC (the trace and metrics services) on another, both on loopback. It
//! keeps every span and every metrics export it is sent, with the protocol
//! each came by, for the tests to read back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};

/// How an export reached the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    HttpProtobuf,
    HttpJson,
    Grpc,
}

/// One span as the tests read it.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub via: Via,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
}

/// One exported point, flattened: a sum's or gauge's value, or a
/// histogram's count and sum.
#[derive(Debug, Clone, PartialEq)]
pub enum Point {
    Sum(f64),
    Gauge(f64),
    Histogram { count: u64, sum: f64, buckets: Vec<u64>, bounds: Vec<f64> },
}

#[derive(Default)]
struct Kept {
    spans: Vec<SpanRecord>,
    metrics: Vec<(Via, ExportMetricsServiceRequest)>,
}

/// The collector; stops with the test's runtime.
#[derive(Clone)]
pub struct Collector {
    /// `http://127.0.0.1:PORT`, the OTLP/HTTP base.
    pub http: String,
    /// `http://127.0.0.1:PORT`, the OTLP/gRPC address.
    pub grpc: String,
    kept: Arc<Mutex<Kept>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// `key=value` pairs of attributes, sorted: the series' identity.
pub fn attribute_map(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

impl Kept {
    fn keep_spans(&mut self, via: Via, request: &ExportTraceServiceRequest) {
        for span in request.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans) {
            self.spans.push(SpanRecord {
                via,
                name: span.name.clone(),
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: span.attributes.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect(),
            });
        }
    }
}

struct Grpc(Arc<Mutex<Kept>>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().expect("collector lock").keep_spans(Via::Grpc, request.get_ref());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().expect("collector lock").metrics.push((Via::Grpc, request.into_inner()));
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// An OTLP/HTTP body as its content type says (JSON or protobuf), and
/// which of the two it was; `None` for one that does not decode.
fn decode<T: prost::Message + Default + serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &Bytes,
) -> (Via, Option<T>) {
    let json =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    if json {
        (Via::HttpJson, serde_json::from_slice(body).ok())
    } else {
        (Via::HttpProtobuf, T::decode(body.clone()).ok())
    }
}

impl Collector {
    /// Starts both listeners on free ports.
    pub async fn start() -> Self {
        let kept = Arc::new(Mutex::new(Kept::default()));
        let (traces, metrics) = (kept.clone(), kept.clone());
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                    let kept = traces.clone();
                    async move {
                        let (via, request) = decode::<ExportTraceServiceRequest>(&headers, &body);
                        let Some(request) = request else { return StatusCode::BAD_REQUEST };
                        kept.lock().expect("collector lock").keep_spans(via, &request);
                        StatusCode::OK
                    }
                }),
            )
            .route(
                "/v1/metrics",
                axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                    let kept = metrics.clone();
                    async move {
                        let (via, request) = decode::<ExportMetricsServiceRequest>(&headers, &body);
                        let Some(request) = request else { return StatusCode::BAD_REQUEST };
                        kept.lock().expect("collector lock").metrics.push((via, request));
                        StatusCode::OK
                    }
                }),
            );
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("collector binds");
        let http_addr = http.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(http, app).await });
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("collector binds");
        let grpc_addr = grpc.local_addr().expect("address");
        let services = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Grpc(kept.clone())))
            .add_service(MetricsServiceServer::new(Grpc(kept.clone())));
        tokio::spawn(services.serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc)));
        Self { http: format!("http://{http_addr}"), grpc: format!("http://{grpc_addr}"), kept }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.kept.lock().expect("collector lock").spans.clone()
    }

    /// How many metrics exports came by `via`.
    pub fn metric_exports(&self, via: Via) -> usize {
        self.kept.lock().expect("collector lock").metrics.iter().filter(|(v, _)| *v == via).count()
    }

    /// The points of the last metrics export that came by `via`: by metric
    /// name and attributes.
    pub fn last_points(&self, via: Via) -> BTreeMap<(String, BTreeMap<String, String>), Point> {
        let kept = self.kept.lock().expect("collector lock");
        let mut out = BTreeMap::new();
        let Some((_, request)) = kept.metrics.iter().rev().find(|(v, _)| *v == via) else { return out };
        let metrics = request.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics);
        for m in metrics {
            let number = |p: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match p.value {
                Some(number_data_point::Value::AsInt(i)) => i as f64,
                Some(number_data_point::Value::AsDouble(d)) => d,
                None => f64::NAN,
            };
            match &m.data {
                Some(metric::Data::Sum(s)) => {
                    for p in &s.data_points {
                        out.insert((m.name.clone(), attribute_map(&p.attributes)), Point::Sum(number(p)));
                    }
                }
                Some(metric::Data::Gauge(g)) => {
                    for p in &g.data_points {
                        out.insert((m.name.clone(), attribute_map(&p.attributes)), Point::Gauge(number(p)));
                    }
                }
                Some(metric::Data::Histogram(h)) => {
                    for p in &h.data_points {
                        out.insert(
                            (m.name.clone(), attribute_map(&p.attributes)),
                            Point::Histogram {
                                count: p.count,
                                sum: p.sum.unwrap_or(f64::NAN),
                                buckets: p.bucket_counts.clone(),
                                bounds: p.explicit_bounds.clone(),
                            },
                        );
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The resource attributes of the last metrics export by `via`.
    pub fn last_resource(&self, via: Via) -> BTreeMap<String, String> {
        let kept = self.kept.lock().expect("collector lock");
        kept.metrics
            .iter()
            .rev()
            .find(|(v, _)| *v == via)
            .and_then(|(_, r)| r.resource_metrics.first()?.resource.as_ref().map(|r| attribute_map(&r.attributes)))
            .unwrap_or_default()
    }
}
