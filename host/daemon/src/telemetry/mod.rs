//! OpenTelemetry export over OTLP: traces, and every series of `/metrics`
//! as OTLP metrics. Each is on when its endpoint is set
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) and off, at no cost, when none is;
//! `OTEL_TRACES_EXPORTER=none` / `OTEL_METRICS_EXPORTER=none` turn one off,
//! `OTEL_SDK_DISABLED=true` both.
//!
//! Both speak OTLP over HTTP (protobuf by default, or JSON) or gRPC, as
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (or the signal's own `…_PROTOCOL`) says,
//! and read the other standard variables (`OTEL_EXPORTER_OTLP_HEADERS`,
//! `_TIMEOUT`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`, for traces
//! `OTEL_BSP_SCHEDULE_DELAY` and `OTEL_TRACES_SAMPLER`, for metrics
//! `OTEL_METRIC_EXPORT_INTERVAL` and `_TIMEOUT`). The service name is
//! `ferry` unless `OTEL_SERVICE_NAME` says otherwise.

pub mod metrics;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// How a signal is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    HttpJson,
    Grpc,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::HttpJson => "http/json",
            Self::Grpc => "grpc",
        }
    }
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}={value:?} is not supported: use http/protobuf, http/json or grpc")]
    Protocol { var: &'static str, value: String },
    #[error("{var}={value:?}: {why}")]
    Value { var: &'static str, value: String, why: String },
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A signal's variable, else the general one: (the name that was set, its
/// value).
fn signal_env(signal: &'static str, general: &'static str) -> Option<(&'static str, String)> {
    env(signal).map(|v| (signal, v)).or_else(|| env(general).map(|v| (general, v)))
}

/// What the environment asks of export, read and checked before anything
/// starts (a wrong value is an error at start, exit 2).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The traces' protocol, when traces are exported.
    pub traces: Option<Protocol>,
    pub metrics: Option<metrics::MetricsSettings>,
}

impl Settings {
    pub fn from_env() -> Result<Self, TelemetryError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(Self { traces: None, metrics: None });
        }
        let off = |var: &str| env(var).is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
        let traces = match signal_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some((var, endpoint)) if !off("OTEL_TRACES_EXPORTER") => {
                let protocol = protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?;
                if protocol == Protocol::Grpc {
                    plain_grpc(var, &endpoint)?;
                }
                Some(protocol)
            }
            _ => None,
        };
        let metrics = if off("OTEL_METRICS_EXPORTER") { None } else { metrics::MetricsSettings::from_env()? };
        Ok(Self { traces, metrics })
    }
}

/// The protocol of a signal: its own variable, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf.
fn protocol(signal_var: &'static str) -> Result<Protocol, TelemetryError> {
    let Some((var, value)) = signal_env(signal_var, "OTEL_EXPORTER_OTLP_PROTOCOL") else {
        return Ok(Protocol::HttpProtobuf);
    };
    match value.trim() {
        "http/protobuf" => Ok(Protocol::HttpProtobuf),
        "http/json" => Ok(Protocol::HttpJson),
        "grpc" => Ok(Protocol::Grpc),
        _ => Err(TelemetryError::Protocol { var, value }),
    }
}

/// gRPC goes to an `http://` endpoint (h2c): this build has no TLS for it.
fn plain_grpc(var: &'static str, endpoint: &str) -> Result<(), TelemetryError> {
    if endpoint.trim().to_ascii_lowercase().starts_with("https://") {
        return Err(TelemetryError::Value {
            var,
            value: endpoint.to_owned(),
            why: "gRPC export is over plain HTTP/2 (http://); for TLS use http/protobuf".into(),
        });
    }
    Ok(())
}

/// A duration in milliseconds from `var`, else `default`.
fn millis(var: &'static str, default: Duration) -> Result<Duration, TelemetryError> {
    match env(var) {
        None => Ok(default),
        Some(v) => v.trim().parse::<u64>().map(Duration::from_millis).map_err(|e| TelemetryError::Value {
            var,
            value: v,
            why: format!("not a number of milliseconds ({e})"),
        }),
    }
}

/// The resource every signal names: `service.name` (`ferry` unless
/// `OTEL_SERVICE_NAME`), `OTEL_RESOURCE_ATTRIBUTES` and the SDK's own.
pub fn resource() -> Resource {
    let mut resource = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("ferry");
    }
    resource.build()
}

/// The trace pipeline, to be flushed with [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Starts trace export as `settings` say. Call it inside the async
    /// runtime (a gRPC channel's tasks run there); the batch processor
    /// keeps a thread of its own.
    pub fn start(settings: &Settings) -> Result<Self, TelemetryError> {
        let Some(protocol) = settings.traces else {
            return Ok(Self { provider: None });
        };
        let exporter = match protocol {
            Protocol::Grpc => SpanExporter::builder().with_tonic().build(),
            http => SpanExporter::builder()
                .with_http()
                .with_protocol(if http == Protocol::HttpJson {
                    opentelemetry_otlp::Protocol::HttpJson
                } else {
                    opentelemetry_otlp::Protocol::HttpBinary
                })
                .build(),
        }
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource()).build();
        ferry_core::trace::install(provider.tracer("ferry"));
        let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        tracing::info!(
            endpoint = %ferry_core::redact::url(endpoint.as_deref().unwrap_or_default()),
            protocol = protocol.name(),
            "exporting traces over OTLP"
        );
        Ok(Self { provider: Some(provider) })
    }

    /// Sends what is still buffered and stops the exporter. Call it while
    /// the runtime still runs.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "trace export did not finish cleanly");
        }
    }
}
