//! Fuzz targets for every decoder that reads remote bytes, each reached
//! the way ferry reaches it: the transport's own parser first, then
//! ferry's conversion into an envelope, then the trust boundary.
//!
//! A target must never panic, and where it makes an envelope it checks the
//! boundary holds ([`check_trust_boundary`]): after an untrusted route's
//! ingress rules no `x-bridge.*` header is left that a publisher chose.
//! The JSON wire format is also checked to read back what it wrote.
//!
//! [`TARGETS`] lists them by name. `cargo fuzz` runs each under libFuzzer
//! (`host/fuzz/cargo-fuzz`, `just fuzz`); `cargo test` runs each on its
//! committed corpus (`host/fuzz/corpus/<name>/`), on [`seeds`] and on
//! seeded mutations of both (`tests/corpus.rs`), so a regression on a
//! known input fails CI on stable Rust.

use bytes::{Bytes, BytesMut};
use ferry_core::headers::apply_ingress_rules;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};

pub mod seeds;
pub use seeds::seeds;

/// A fuzz target: bytes in, a panic when something is wrong.
pub type Target = fn(&[u8]);

/// Every target by name (the name of its corpus directory and of its
/// cargo-fuzz binary).
pub const TARGETS: &[(&str, Target)] = &[
    ("mqtt_publish", mqtt_publish),
    ("amqp091_properties", amqp091_properties),
    ("amqp10_message", amqp10_message),
    ("json_wire", json_wire),
    ("sqs_request", sqs_request),
    ("sigv4", sigv4),
    ("http_webhook", http_webhook),
    ("simplemq_content", simplemq_content),
    ("sqs_body", sqs_body),
    ("config", config),
];

/// The largest payload the targets admit (as a receiver's limit would).
const MAX_BYTES: usize = 1 << 20;

/// Applies an untrusted route's ingress rules to `envelope` and checks that
/// every reserved header left is one ferry set: the route and source ids,
/// a freshly stamped correlation id, or exactly what the adapter derived.
pub fn check_trust_boundary(mut envelope: Envelope) {
    let derived: Vec<(&str, Option<HeaderValue>)> =
        names::ADAPTER_DERIVED.iter().map(|n| (*n, envelope.derived_header(n).cloned())).collect();
    apply_ingress_rules(&mut envelope, "fuzz-route", "fuzz-source", false);
    for (name, value) in envelope.headers.iter() {
        if !names::is_reserved(name) {
            continue;
        }
        let from_adapter = derived.iter().find(|(n, _)| *n == name.as_str()).and_then(|(_, v)| v.as_ref());
        match name.as_str() {
            names::ROUTE_ID => assert_eq!(value.as_text(), Some("fuzz-route")),
            names::SOURCE_ID => assert_eq!(value.as_text(), Some("fuzz-source")),
            _ if from_adapter.is_some() => {
                assert_eq!(Some(value), from_adapter, "{name} is not what the adapter derived")
            }
            names::CORRELATION_ID => {
                assert_eq!(value.as_text().map(str::len), Some(36), "a stamped correlation id is a UUID")
            }
            other => panic!("{other} = {value:?} survived an untrusted route"),
        }
    }
}

/// An MQTT 5 packet stream as the broker would send it; each PUBLISH is
/// converted as the receiver converts it, as a plain and as a wire-format
/// payload.
pub fn mqtt_publish(data: &[u8]) {
    let mut stream = BytesMut::from(data);
    for _ in 0..16 {
        match rumqttc::v5::mqttbytes::v5::Packet::read(&mut stream, Some(MAX_BYTES as u32)) {
            Ok(rumqttc::v5::mqttbytes::v5::Packet::Publish(publish)) => {
                if let Ok(ingress) = ferry_transport_mqtt::ingress::to_envelope(&publish, MAX_BYTES, Timestamp(0)) {
                    let mut unpacked = ingress.envelope.clone();
                    ferry_core::json_wire::unpack(&mut unpacked);
                    check_trust_boundary(unpacked);
                    check_trust_boundary(ingress.envelope);
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// AMQP 0-9-1 content-header properties (the bytes after class, weight and
/// body size), as lapin parses them from a delivery.
pub fn amqp091_properties(data: &[u8]) {
    let Ok((rest, properties)) = lapin::protocol::basic::parse_properties(data) else { return };
    let exchange = lapin::types::ShortString::from_wire(b"ex".to_vec());
    let routing_key = lapin::types::ShortString::from_wire(rest.iter().copied().take(255).collect());
    let undecodable = ferry_transport_amqp091::ingress::undecodable_field(&exchange, &routing_key, &properties);
    if undecodable.is_some() {
        // The receiver refuses such a message; it is never converted.
        return;
    }
    let ingress = ferry_transport_amqp091::ingress::to_envelope(
        exchange.as_str(),
        routing_key.as_str(),
        false,
        &properties,
        rest,
        Timestamp(0),
    );
    let mut unpacked = ingress.envelope.clone();
    ferry_core::json_wire::unpack(&mut unpacked);
    check_trust_boundary(unpacked);
    check_trust_boundary(ingress.envelope);
}

/// An AMQP 1.0 message (its encoded sections), as fe2o3 decodes a
/// transfer's payload.
pub fn amqp10_message(data: &[u8]) {
    use fe2o3_amqp::types::messaging::message::__private::Deserializable;
    use fe2o3_amqp::types::messaging::{Body, Message};
    use fe2o3_amqp::types::primitives::Value;
    type Transfer = Deserializable<Message<Body<Value>>>;
    // The receiver decodes a transfer with the stream reader (fe2o3's
    // `decode_message_from_reader`); the slice reader is decoded for its
    // own faults only.
    let _ = serde_amqp::from_slice::<Transfer>(data);
    let Ok(Deserializable(message)) = serde_amqp::from_reader::<Transfer>(data) else {
        return;
    };
    if let Ok(ingress) = ferry_transport_amqp10::ingress::to_envelope(&message, MAX_BYTES, Timestamp(0)) {
        let mut unpacked = ingress.envelope.clone();
        ferry_core::json_wire::unpack(&mut unpacked);
        check_trust_boundary(unpacked);
        check_trust_boundary(ingress.envelope);
    }
}

/// A payload read as the JSON wire format: it must read back what it
/// writes, and its headers are the publisher's.
pub fn json_wire(data: &[u8]) {
    use ferry_core::json_wire::{Decoded, apply, decode, encode};
    let Decoded::Wire { headers, body } = decode(data) else { return };
    let mut first = Envelope::new("fuzz", Bytes::new());
    apply(&mut first, headers, body);
    let mut again = Envelope::new("fuzz", Bytes::new());
    match decode(&encode(&first)) {
        Decoded::Wire { headers, body } => apply(&mut again, headers, body),
        other => panic!("what the wire format wrote reads back as {other:?}"),
    }
    // The bookkeeping the other side stamps again is not written.
    let written = |e: &Envelope| -> Vec<(String, HeaderValue)> {
        e.headers
            .iter()
            .filter(|(n, _)| ![names::ROUTE_ID, names::SOURCE_ID, names::GENERATED_ID].contains(&n.as_str()))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    };
    assert_eq!(written(&first), written(&again), "headers round trip");
    assert_eq!(first.subject, again.subject, "the subject round trips");
    assert_eq!(first.payload(), again.payload(), "the body round trips");
    check_trust_boundary(first);
}

/// A raw HTTP/1.1 request: its head, then its body.
fn request(data: &[u8]) -> Option<(http::request::Parts, &[u8])> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(head)) = req.parse(data) else { return None };
    let mut builder = http::Request::builder().method(req.method?).uri(req.path?);
    for h in req.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let (parts, ()) = builder.body(()).ok()?.into_parts();
    Some((parts, &data[head..]))
}

/// A request to the SQS endpoint, read in the protocol its headers choose
/// (AWS JSON 1.0 or the query protocol), with the message attribute
/// checks every send runs.
pub fn sqs_request(data: &[u8]) {
    use ferry_sqs_endpoint::protocol::{parse, protocol_of};
    let Some((parts, body)) = request(data) else { return };
    let protocol = protocol_of(&parts.method, &parts.headers);
    let Ok(call) = parse(protocol, &parts.uri, &parts.headers, body) else { return };
    let _ = ferry_sqs_endpoint::model::message_attributes(call.input.get("MessageAttributes"));
    let _ = ferry_sqs_endpoint::model::trace_header(call.input.get("MessageSystemAttributes"));
    if let Some(entries) = call.input.get("Entries").and_then(serde_json::Value::as_array) {
        for e in entries {
            let _ = ferry_sqs_endpoint::model::message_attributes(e.get("MessageAttributes"));
        }
    }
}

/// SigV4 verification of any request against one known key: never a
/// panic, and never accepted unless signed with that key (which random
/// bytes are not).
pub fn sigv4(data: &[u8]) {
    let Some((parts, body)) = request(data) else { return };
    let keys = std::iter::once(("AKIDFUZZ".to_owned(), "fuzz-secret".into())).collect();
    let verdict = ferry_sqs_endpoint::auth::verify(&parts, body, &keys, 1_700_000_000);
    if verdict.is_ok() {
        // Only a signature made with the secret passes; the seeds carry
        // none, so a pass means the mutation found the signature itself.
        let signed = parts.headers.get("authorization").is_some() || parts.uri.query().is_some();
        assert!(signed, "an unsigned request was accepted");
    }
}

fn http_config(wire_json: bool) -> ferry_transport_http::config::HttpReceiverConfig {
    let text = format!("listen = \"127.0.0.1:1\"\nwire_format = \"{}\"", if wire_json { "json" } else { "none" });
    toml::from_str(&text).expect("a valid HTTP receiver config")
}

/// A webhook request as the HTTP receiver maps it, without and with the
/// JSON wire format.
pub fn http_webhook(data: &[u8]) {
    let Some((parts, body)) = request(data) else { return };
    for wire in [false, true] {
        let config = http_config(wire);
        if let Ok((envelope, _)) = ferry_transport_http::receiver::to_envelope(
            &parts.headers,
            Bytes::copy_from_slice(body),
            &config,
            Timestamp(0),
        ) {
            check_trust_boundary(envelope);
        }
    }
}

/// A SimpleMQ message: the first line its id, the rest its content (base64
/// of a wire-format document, or not), read with ferry's and mqbridge's
/// header names.
pub fn simplemq_content(data: &[u8]) {
    use ferry_config::WireFormat;
    use ferry_transport_http::config::SimplemqHeaders;
    let text = String::from_utf8_lossy(data);
    let (id, content) = text.split_once('\n').unwrap_or(("fuzz-id", &text));
    for wire in [WireFormat::Json, WireFormat::None] {
        for headers in [SimplemqHeaders::Ferry, SimplemqHeaders::Mqbridge] {
            let (envelope, _) = ferry_transport_http::simplemq::to_envelope(id, content, 0, wire, headers);
            check_trust_boundary(envelope);
        }
    }
}

/// An SQS message body, as the receiver converts it, with and without
/// unwrapping SNS notifications (whose JSON carries attributes).
pub fn sqs_body(data: &[u8]) {
    let body = String::from_utf8_lossy(data);
    let message = aws_sdk_sqs::types::Message::builder().message_id("fuzz").body(body).build();
    for unwrap in [false, true] {
        check_trust_boundary(ferry_transport_sqs::ingress::convert(&message, unwrap, Timestamp(0)));
    }
}

/// A config file: read and validated, never a panic.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = ferry_config::parse_with_env(&text, &|_| None);
}
