//! The transports this daemon speaks: one table, in which every receiver
//! and sender is looked up by its `type`. A new built-in transport is its
//! crate (an implementation of [`ferry_core::transport::TypedTransport`])
//! and one line here.

use ferry_config::{ReceiverConfig, SenderConfig};
use ferry_core::TransportError;
use ferry_core::ports::OutboundMessage;
use ferry_core::transport::Transport;
use ferry_core::wire::{Admitted, View};
use ferry_envelope::Timestamp;

/// Every built-in transport.
pub static TRANSPORTS: &[&dyn Transport] = &[
    &ferry_transport_mqtt::Mqtt,
    &ferry_transport_sqs::Sqs,
    &ferry_transport_amqp10::Amqp10,
    &ferry_transport_amqp091::Amqp091,
    &ferry_transport_http::Http,
    &ferry_transport_http::Simplemq,
    &ferry_transport_nats::Nats,
    &ferry_transport_redis::RedisStreams,
    &ferry_transport_kafka::Kafka,
    &ferry_transport_sse::Sse,
    &ferry_sqs_endpoint::SqsEndpoint,
    &ferry_wasm::transport::Component,
];

/// The config's JSON Schema: `host/config`'s document with every
/// transport's receiver and sender tables and the SQS endpoint's section.
pub fn json_schema() -> serde_json::Value {
    ferry_config::json_schema_with(|generator| {
        let parts = TRANSPORTS.iter().map(|t| t.schemas(generator)).collect();
        (parts, vec![ferry_sqs_endpoint::config::section_schema(generator)])
    })
}

/// The transport of `kind`.
pub fn find(kind: &str) -> Option<&'static dyn Transport> {
    TRANSPORTS.iter().copied().find(|t| t.kind() == kind)
}

/// The transport a receiver's config names, or why there is none.
pub fn of_receiver(config: &ReceiverConfig) -> Result<&'static dyn Transport, String> {
    find(config.kind()).ok_or_else(|| format!("no transport {:?} in this build", config.kind()))
}

/// The transport a sender's config names, or why there is none.
pub fn of_sender(config: &SenderConfig) -> Result<&'static dyn Transport, String> {
    find(config.kind()).ok_or_else(|| format!("no transport {:?} in this build", config.kind()))
}

/// The plugin a receiver runs (a transport component), if it runs one.
pub fn receiver_plugin(config: &ReceiverConfig) -> Option<String> {
    of_receiver(config).ok()?.receiver_plugin(config)
}

/// The plugin a sender runs, if it runs one.
pub fn sender_plugin(config: &SenderConfig) -> Option<String> {
    of_sender(config).ok()?.sender_plugin(config)
}

/// What a receiver with `config` makes of a fixture message (its ingress
/// mapping).
pub fn fixture_receive(config: &ReceiverConfig, input: toml::Value, now: Timestamp) -> Result<Admitted, String> {
    let transport = of_receiver(config)?;
    let admitted = transport.fixture_receive(config, input, now)?;
    Ok(match admitted {
        Admitted::Envelope(mut e)
            if config.wire_format() == ferry_config::WireFormat::Json && !transport.receiver_reads_wire_format() =>
        {
            ferry_core::json_wire::unpack(&mut e);
            Admitted::Envelope(e)
        }
        other => other,
    })
}

/// What a sender with `config` would send for `msg` (its egress mapping),
/// as JSON.
pub fn fixture_send(config: &SenderConfig, msg: &OutboundMessage, now: Timestamp) -> Result<View, TransportError> {
    let transport = of_sender(config).map_err(TransportError::permanent)?;
    if config.wire_format() == ferry_config::WireFormat::Json && !transport.sender_writes_wire_format() {
        let packed = OutboundMessage { envelope: ferry_core::json_wire::pack(&msg.envelope), ..msg.clone() };
        return transport.fixture_send(config, &packed, now);
    }
    transport.fixture_send(config, msg, now)
}

#[cfg(test)]
mod tests {
    use ferry_config::reference::config_markdown;

    use super::*;

    #[test]
    fn every_key_of_every_section_is_on_the_page() {
        let page = config_markdown(&json_schema());
        for key in ["`url`", "`max_in_flight`", "`dedup_window_secs`", "`call_timeout_ms`", "`share_group`"] {
            assert!(page.contains(&format!("| {key} |")), "{key} missing");
        }
        for section in
            ["`[receivers.NAME]` with `type = \"mqtt\"`", "`[senders.NAME]` with `type = \"mqtt\"`", "`[[routes]]`"]
        {
            assert!(page.contains(&format!("## {section}")), "{section} missing");
        }
        // The tables inside sections have sections of their own, and every
        // key of every table the schema defines is on the page.
        for nested in ["## `tls`", "## `grants`", "## `access_keys`", "## `queues.NAME`", "## `topics.NAME`"] {
            assert!(page.contains(&format!("{nested}\n")), "{nested} missing");
        }
        assert!(page.contains("| `type` | `\"embedded\"`, `\"postgres\"` |"), "store.type missing");
        let schema = json_schema();
        for (name, def) in schema["$defs"].as_object().expect("defs") {
            for key in def["properties"].as_object().into_iter().flat_map(|p| p.keys()) {
                if name != "EndpointsConfig" && def["properties"][key].get("const").is_none() {
                    assert!(page.contains(&format!("| `{key}` |")), "{name}.{key} missing");
                }
            }
        }
        // Only what is handed to a plugin as it is has no type of its own.
        for line in page.lines().filter(|l| l.contains("| any |")) {
            assert!(
                ["| `config` |", "| `header_mapper_config` |", "| `shadow_config` |"]
                    .iter()
                    .any(|k| line.starts_with(k)),
                "a key of unknown type: {line}"
            );
        }
    }

    #[test]
    fn types_and_defaults_read_as_written_in_toml() {
        let page = config_markdown(&json_schema());
        let row = |key: &str, section: &str| -> String {
            let start = page.find(&format!("## {section}")).expect("section");
            let rest = &page[start..];
            let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
            rest[..end].lines().find(|l| l.starts_with(&format!("| `{key}` |"))).expect("row").to_owned()
        };
        assert!(
            row("max_in_flight", "`[[routes]]`").contains("| integer | `100` |"),
            "{}",
            row("max_in_flight", "`[[routes]]`")
        );
        assert!(row("delivery_mode", "`[[routes]]`").contains("`\"direct_hold\"`, `\"shared_outbox\"`"));
        assert!(row("topics", "`[receivers.NAME]` with `type = \"mqtt\"`").contains("list of string"));
        assert!(row("url", "`[receivers.NAME]` with `type = \"mqtt\"`").contains("(or `{ file = … }`)"));
    }

    /// Every `type` the config schema accepts has exactly one transport.
    #[test]
    fn every_config_type_has_one_transport() {
        let schema = json_schema();
        let mut kinds: Vec<String> = Vec::new();
        collect_type_consts(&schema, &mut kinds);
        kinds.sort();
        kinds.dedup();
        assert!(kinds.len() >= TRANSPORTS.len(), "found the schema's types: {kinds:?}");
        for kind in &kinds {
            let n = TRANSPORTS.iter().filter(|t| t.kind() == kind).count();
            assert_eq!(n, 1, "transport {kind:?} is in the table {n} times");
        }
        assert_eq!(kinds.len(), TRANSPORTS.len(), "the table has transports no config can name: {kinds:?}");
    }

    /// The `const` of every `type` property in the schema (one per
    /// receiver and sender variant).
    fn collect_type_consts(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(kind) = map.get("properties").and_then(|p| p.get("type")) {
                    collect_consts(kind, out);
                }
                map.values().for_each(|v| collect_type_consts(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| collect_type_consts(v, out)),
            _ => {}
        }
    }

    fn collect_consts(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                out.extend(map.get("const").and_then(|c| c.as_str()).map(str::to_owned));
                map.values().for_each(|v| collect_consts(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| collect_consts(v, out)),
            _ => {}
        }
    }
}
