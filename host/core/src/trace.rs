//! Distributed tracing: one OpenTelemetry span per delivery and one per send,
//! with W3C trace context carried in message headers.
//!
//! The daemon installs a tracer with [`install`] when OTLP export is
//! configured. Until then every function here is a no-op that touches no
//! header, so a message's `traceparent` crosses ferry unchanged.
//!
//! With a tracer installed:
//! - the delivery span's parent is read from the incoming `traceparent` and
//!   `tracestate` headers, or, when a bridge nested them under a prefix,
//!   from the first `<prefix>.traceparent` header (`rabbitmq.header.traceparent`)
//!   and the `tracestate` beside it;
//! - each send gets a child span of the delivery span, and the outbound copy
//!   carries that span as its `traceparent` (and `tracestate` when there is
//!   one), so the next hop continues the trace;
//! - the delivery's `tracing` span records `trace_id` and `span_id`, which
//!   every log line inside it shows.

use std::sync::OnceLock;

use ferry_envelope::{Envelope, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;

/// The W3C trace context header names.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Turns tracing on for the rest of the process. Only the first call counts.
pub fn install(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// Whether spans are being recorded.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The span of one delivery, from arrival to settlement.
pub struct DeliveryTrace {
    cx: Option<Context>,
}

impl DeliveryTrace {
    /// Starts the delivery span as a child of the trace context the envelope
    /// carries (a new trace when it carries none), and records its ids on
    /// `log_span`, which must declare `trace_id` and `span_id` fields.
    pub fn start(route: &str, source: &str, envelope: &Envelope, log_span: &tracing::Span) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self { cx: None };
        };
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor::new(envelope));
        let span = tracer
            .span_builder("ferry.delivery")
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("ferry.route", route.to_owned()),
                KeyValue::new("ferry.source", source.to_owned()),
                KeyValue::new("messaging.message.id", envelope.id.clone()),
            ])
            .start_with_context(tracer, &parent);
        let ids = span.span_context().clone();
        log_span.record("trace_id", tracing::field::display(ids.trace_id()));
        log_span.record("span_id", tracing::field::display(ids.span_id()));
        Self { cx: Some(parent.with_span(span)) }
    }

    /// Starts the span of one send attempt and writes its trace context into
    /// the outbound copy's headers.
    pub fn send(&self, binding: &str, address: &str, outbound: &mut Envelope) -> SendTrace {
        let (Some(cx), Some(tracer)) = (&self.cx, TRACER.get()) else {
            return SendTrace { cx: None };
        };
        let span = tracer
            .span_builder("ferry.send")
            .with_kind(SpanKind::Producer)
            .with_attributes([
                KeyValue::new("ferry.binding", binding.to_owned()),
                KeyValue::new("messaging.destination.name", address.to_owned()),
            ])
            .start_with_context(tracer, cx);
        let cx = cx.with_span(span);
        let mut injector = HeaderInjector { envelope: outbound, state_written: false };
        TraceContextPropagator::new().inject_context(&cx, &mut injector);
        if !injector.state_written {
            // A tracestate from an earlier hop must not pair with our parent.
            outbound.headers.remove(TRACESTATE);
        }
        SendTrace { cx: Some(cx) }
    }

    /// Ends the span with the delivery's outcome (`ack`, `reject`, `release`).
    /// The context a stored copy resumes from: the trace context in its
    /// headers (an outbox record or a dead letter carries the delivery's),
    /// without a span of its own. Sends under it are children of the
    /// delivery that stored the copy.
    pub fn resume(envelope: &Envelope) -> Self {
        if TRACER.get().is_none() {
            return Self { cx: None };
        }
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor::new(envelope));
        if !parent.span().span_context().is_valid() {
            return Self { cx: None };
        }
        Self { cx: Some(parent) }
    }

    /// Writes this delivery's context into a copy that is stored to be sent
    /// later (an outbox record), so the send is part of this trace.
    pub fn inject(&self, stored: &mut Envelope) {
        let Some(cx) = &self.cx else { return };
        let mut injector = HeaderInjector { envelope: stored, state_written: false };
        TraceContextPropagator::new().inject_context(cx, &mut injector);
        if !injector.state_written {
            stored.headers.remove(TRACESTATE);
        }
    }

    pub fn end(self, outcome: &str) {
        if let Some(cx) = self.cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new("ferry.outcome", outcome.to_owned()));
            if outcome != "ack" {
                span.set_status(Status::error(outcome.to_owned()));
            }
            span.end();
        }
    }
}

/// The span of one send attempt.
pub struct SendTrace {
    cx: Option<Context>,
}

impl SendTrace {
    /// Ends the span; an error marks it failed with the error's text.
    pub fn end(self, error: Option<&crate::TransportError>) {
        if let Some(cx) = self.cx {
            let span = cx.span();
            if let Some(e) = error {
                span.set_attribute(KeyValue::new("ferry.error.transient", e.is_transient()));
                span.set_status(Status::error(e.reason.clone()));
            }
            span.end();
        }
    }
}

/// Reads trace context from envelope headers: the plain W3C names, or the
/// first nested `<prefix>.traceparent` and the `tracestate` beside it.
struct HeaderExtractor<'a> {
    envelope: &'a Envelope,
    prefix: String,
}

impl<'a> HeaderExtractor<'a> {
    fn new(envelope: &'a Envelope) -> Self {
        let prefix = if envelope.headers.contains_key(TRACEPARENT) {
            String::new()
        } else {
            envelope
                .headers
                .keys()
                .find_map(|k| k.strip_suffix(TRACEPARENT).filter(|p| p.ends_with('.')))
                .unwrap_or_default()
                .to_owned()
        };
        Self { envelope, prefix }
    }
}

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match self.envelope.headers.get(&format!("{}{key}", self.prefix))? {
            HeaderValue::Text(s) => Some(s),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

struct HeaderInjector<'a> {
    envelope: &'a mut Envelope,
    state_written: bool,
}

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACESTATE {
            if value.is_empty() {
                return;
            }
            self.state_written = true;
        }
        self.envelope.set_header(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(headers: &[(&str, &str)]) -> Envelope {
        let mut e = Envelope::new("m-1", &b"x"[..]);
        for (k, v) in headers {
            e.set_header(*k, *v);
        }
        e
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn plain_headers_are_read_first() {
        let e = env_with(&[(TRACEPARENT, PARENT), ("rabbitmq.header.traceparent", "ignored")]);
        let x = HeaderExtractor::new(&e);
        assert_eq!(x.get(TRACEPARENT), Some(PARENT));
    }

    #[test]
    fn nested_headers_are_found_with_their_tracestate() {
        let e = env_with(&[
            ("rabbitmq.header.traceparent", PARENT),
            ("rabbitmq.header.tracestate", "vendor=1"),
            (TRACESTATE, "stray=2"),
        ]);
        let x = HeaderExtractor::new(&e);
        assert_eq!(x.get(TRACEPARENT), Some(PARENT));
        assert_eq!(x.get(TRACESTATE), Some("vendor=1"));
        let cx = TraceContextPropagator::new().extract(&x);
        assert_eq!(cx.span().span_context().trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn a_name_that_only_ends_in_traceparent_is_not_nested_context() {
        let e = env_with(&[("mytraceparent", PARENT)]);
        let x = HeaderExtractor::new(&e);
        assert_eq!(x.get(TRACEPARENT), None);
    }

    #[test]
    fn without_a_tracer_nothing_is_touched() {
        // No test in this binary installs a tracer.
        let e = env_with(&[(TRACEPARENT, PARENT), (TRACESTATE, "a=b")]);
        let trace = DeliveryTrace::start("r", "s", &e, &tracing::Span::none());
        let mut out = e.clone();
        trace.send("b", "addr", &mut out).end(None);
        trace.end("ack");
        assert_eq!(out, e);
    }
}
