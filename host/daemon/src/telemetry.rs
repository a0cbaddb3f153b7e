//! OTLP trace export, on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and off, at no cost, when
//! neither is.
//!
//! The exporter speaks OTLP over HTTP, protobuf by default or JSON with
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`, and reads the other standard
//! variables itself (`OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`,
//! `_COMPRESSION`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_RESOURCE_ATTRIBUTES`). The service name is `ferry` unless
//! `OTEL_SERVICE_NAME` says otherwise. gRPC is not built in.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The trace pipeline, to be flushed with [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}={value:?} is not supported: use http/protobuf or http/json")]
    Protocol { var: &'static str, value: String },
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Telemetry {
    /// Sets up export from the environment. Call it before starting the
    /// async runtime: the exporter runs on a thread of its own.
    pub fn from_env() -> Result<Self, TelemetryError> {
        let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let Some(endpoint) = endpoint.filter(|_| !disabled) else {
            return Ok(Self { provider: None });
        };
        let protocol = protocol_from_env()?;
        let protocol_name = if protocol == Protocol::HttpJson { "http/json" } else { "http/protobuf" };
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut resource = Resource::builder();
        if env("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("ferry");
        }
        let provider =
            SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
        ferry_core::trace::install(provider.tracer("ferry"));
        tracing::info!(endpoint = %ferry_core::redact::url(&endpoint), protocol = protocol_name, "exporting traces over OTLP");
        Ok(Self { provider: Some(provider) })
    }

    /// Sends what is still buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "trace export did not finish cleanly");
        }
    }
}

fn protocol_from_env() -> Result<Protocol, TelemetryError> {
    let (var, value) = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v),
        None => match env("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(v) => ("OTEL_EXPORTER_OTLP_PROTOCOL", v),
            None => return Ok(Protocol::HttpBinary),
        },
    };
    match value.trim() {
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        _ => Err(TelemetryError::Protocol { var, value }),
    }
}
