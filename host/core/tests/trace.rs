//! Delivery and send spans with a tracer installed (a process-wide switch,
//! hence a test binary of its own), recorded by the SDK's in-memory exporter.

use ferry_core::TransportError;
use ferry_core::trace::{self, DeliveryTrace, TRACEPARENT, TRACESTATE};
use ferry_envelope::Envelope;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PUBLISHER_SPAN: &str = "00f067aa0ba902b7";

fn finished(exporter: &InMemorySpanExporter, trace_id: &str) -> Vec<SpanData> {
    let spans = exporter.get_finished_spans().expect("finished spans");
    spans.into_iter().filter(|s| s.span_context.trace_id().to_string() == trace_id).collect()
}

#[test]
fn spans_chain_from_the_incoming_context_and_the_send_span_travels_on() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    trace::install(provider.tracer("test"));
    assert!(trace::enabled());

    // Context nested under a prefix by another bridge; a bare tracestate
    // from somewhere else must not be paired with it.
    let mut env = Envelope::new("m-1", &b"x"[..]);
    env.set_header("rabbitmq.header.traceparent", format!("00-{TRACE}-{PUBLISHER_SPAN}-01"));
    env.set_header(TRACESTATE, "stale=1");
    let log_span = tracing::Span::none();
    let delivery = DeliveryTrace::start("r1", "in", &env, &log_span);
    let mut out = env.clone();
    let send = delivery.send("b1", "orders", &mut out);
    send.end(Some(&TransportError::transient("broker away")));
    let mut out2 = env.clone();
    delivery.send("b1", "orders", &mut out2).end(None);
    delivery.end("ack");

    let spans = finished(&exporter, TRACE);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let delivery_span = spans.iter().find(|s| s.name == "ferry.delivery").expect("delivery span");
    assert_eq!(delivery_span.parent_span_id.to_string(), PUBLISHER_SPAN);
    assert_eq!(delivery_span.span_kind, SpanKind::Consumer);
    assert_eq!(delivery_span.status, Status::Unset);
    let sends: Vec<_> = spans.iter().filter(|s| s.name == "ferry.send").collect();
    assert_eq!(sends.len(), 2);
    for s in &sends {
        assert_eq!(s.parent_span_id, delivery_span.span_context.span_id());
        assert_eq!(s.span_kind, SpanKind::Producer);
    }
    assert!(matches!(&sends[0].status, Status::Error { description } if description.contains("broker away")));
    assert_eq!(sends[1].status, Status::Unset);

    // Each attempt carries its own send span as the parent.
    for (copy, span) in [(&out, sends[0]), (&out2, sends[1])] {
        let expected = format!("00-{TRACE}-{}-01", span.span_context.span_id());
        assert_eq!(copy.text_header(TRACEPARENT), Some(expected.as_str()));
        assert_eq!(copy.text_header(TRACESTATE), None, "the stray tracestate is not sent on");
        // The nested original is left as it came.
        assert!(copy.text_header("rabbitmq.header.traceparent").is_some());
    }

    // No context at all: a new trace starts at the delivery, and a
    // tracestate is kept when it came with the traceparent.
    let plain = Envelope::new("m-2", &b"y"[..]);
    let delivery = DeliveryTrace::start("r1", "in", &plain, &log_span);
    let mut out = plain.clone();
    delivery.send("b1", "orders", &mut out).end(None);
    delivery.end("release");
    let traceparent = out.text_header(TRACEPARENT).expect("a fresh trace is injected").to_owned();
    let new_trace = traceparent.split('-').nth(1).expect("trace id").to_owned();
    let spans = finished(&exporter, &new_trace);
    let root = spans.iter().find(|s| s.name == "ferry.delivery").expect("delivery span");
    assert_eq!(root.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    assert!(matches!(root.status, Status::Error { .. }), "a release is not a success");

    let mut with_state = Envelope::new("m-3", &b"z"[..]);
    with_state.set_header(TRACEPARENT, format!("00-{TRACE}-{PUBLISHER_SPAN}-01"));
    with_state.set_header(TRACESTATE, "vendor=abc");
    let delivery = DeliveryTrace::start("r1", "in", &with_state, &log_span);
    let mut out = with_state.clone();
    delivery.send("b1", "orders", &mut out).end(None);
    delivery.end("ack");
    assert_eq!(out.text_header(TRACESTATE), Some("vendor=abc"));
}
