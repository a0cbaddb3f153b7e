//! `ferry validate --explain`: the fidelity report. For each route and
//! binding it says what of a message crosses from the receiver's transport
//! to the sender's, where it lands, and what is lost.
//!
//! The report is not a table kept beside the mappers: it runs them. A probe
//! message carrying every kind of metadata the source transport has (an
//! identity, a subject, correlation, content type, reply address, expiry),
//! each with a value of its own, goes through the receiver's ingress mapping,
//! the route's header rules and the sender's egress mapping (the same code
//! `ferry run` and `ferry test` use), and the report finds each value in
//! what the sender would send. Each typed header (a text, integer, float,
//! boolean, time and bytes one) is sent alone with the identity, so that it
//! is reported lost only when the target cannot carry its type; a crowded
//! probe with more headers than some targets take says how many arrive.
//! What cannot be found was lost, and is a warning; `--strict` makes warnings fail. Processors and header mappers
//! are left out: they may change anything, and a binding with a header
//! mapper says so.

use std::collections::BTreeSet;

use ferry_config::{Config, ReceiverConfig, SenderConfig};
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::Admitted;
use ferry_envelope::{HeaderValue, Timestamp};
use serde_json::Value;

use crate::pipeline_test::{receive, send};
use crate::wiring::{kind_of_receiver, kind_of_sender};

/// Extra text headers a probe carries, to see how many a target keeps.
const EXTRA: usize = 12;
const ID: &str = "probe-id-7f3a";
const SUBJECT: &str = "probe.subject.7f3a";
const CORRELATION: &str = "probe-corr-7f3a";
const CONTENT_TYPE: &str = "application/x-probe-7f3a";
const REPLY_TO: &str = "probe/reply/7f3a";
const TEXT_VALUE: &str = "probe-text-7f3a";

/// How to find one feature of the probe in the outbound message.
enum Find {
    /// A string value containing this marker.
    Value(&'static str),
    /// A key of this name (a typed header); the value shown.
    Name(&'static str),
    /// A key whose name says expiry or time to live.
    Expiry,
    /// How many keys named `probe-extra-NN` arrive.
    Extras,
}

struct Feature {
    what: &'static str,
    find: Find,
}

const fn feature(what: &'static str, find: Find) -> Feature {
    Feature { what, find }
}

/// The probe input for a receiver's transport and what it carries.
fn probe(receiver: &ReceiverConfig) -> (toml::Value, Vec<Feature>) {
    use Find::{Expiry, Extras, Name, Value as V};
    let extras: Vec<(String, String)> = (1..=EXTRA).map(|i| (format!("probe-extra-{i:02}"), format!("x{i}"))).collect();
    let table = |pairs: &[(String, toml::Value)]| toml::Value::Table(pairs.iter().cloned().collect::<toml::Table>());
    let s = |v: &str| toml::Value::String(v.to_owned());
    let mut typed: Vec<(String, toml::Value)> = vec![
        ("probe-text".into(), s(TEXT_VALUE)),
        ("probe-int".into(), toml::Value::Integer(4242)),
        ("probe-float".into(), toml::Value::Float(42.5)),
        ("probe-bool".into(), toml::Value::Boolean(true)),
        ("probe-time".into(), table(&[("time_ms".into(), toml::Value::Integer(1_700_000_000_123))])),
        ("probe-bytes".into(), table(&[("base64".into(), s("AP8Q"))])),
    ];
    let typed_features = || {
        vec![
            feature("text header", Name("probe-text")),
            feature("integer header", Name("probe-int")),
            feature("float header", Name("probe-float")),
            feature("boolean header", Name("probe-bool")),
            feature("time header", Name("probe-time")),
            feature("bytes header", Name("probe-bytes")),
        ]
    };
    typed.extend(extras.iter().map(|(k, v)| (k.clone(), s(v))));
    match receiver {
        ReceiverConfig::Mqtt(_) => {
            let mut user: Vec<(String, toml::Value)> = vec![
                ("mqtt.message-id".into(), s(ID)),
                ("gobridge.subject".into(), s(SUBJECT)),
                ("probe-text".into(), s(TEXT_VALUE)),
            ];
            user.extend(extras.iter().map(|(k, v)| (k.clone(), s(v))));
            let input = table(&[
                ("topic".into(), s("probe/topic/7f3a")),
                ("payload".into(), s("{}")),
                (
                    "properties".into(),
                    table(&[
                        ("content_type".into(), s(CONTENT_TYPE)),
                        ("correlation_data".into(), s(CORRELATION)),
                        ("response_topic".into(), s(REPLY_TO)),
                        ("message_expiry_interval".into(), toml::Value::Integer(3600)),
                    ]),
                ),
                ("user_properties".into(), table(&user)),
            ]);
            let features = vec![
                feature("identity (mqtt.message-id)", V(ID)),
                feature("subject (gobridge.subject)", V(SUBJECT)),
                feature("source topic", V("probe/topic/7f3a")),
                feature("correlation data", V(CORRELATION)),
                feature("content type", V(CONTENT_TYPE)),
                feature("response topic", V(REPLY_TO)),
                feature("expiry (message expiry interval)", Expiry),
                feature("user property", Name("probe-text")),
                feature("other user properties (13)", Extras),
            ];
            (input, features)
        }
        ReceiverConfig::Amqp091(_) => {
            let mut headers = typed.clone();
            headers.push(("gobridge.subject".into(), s(SUBJECT)));
            let input = table(&[
                ("exchange".into(), s("probe-exchange-7f3a")),
                ("routing_key".into(), s("probe.key.7f3a")),
                ("payload".into(), s("{}")),
                (
                    "properties".into(),
                    table(&[
                        ("message_id".into(), s(ID)),
                        ("correlation_id".into(), s(CORRELATION)),
                        ("content_type".into(), s(CONTENT_TYPE)),
                        ("reply_to".into(), s(REPLY_TO)),
                        ("type".into(), s("probe-type-7f3a")),
                        ("app_id".into(), s("probe-app-7f3a")),
                        ("expiration".into(), s("3600000")),
                    ]),
                ),
                ("headers".into(), table(&headers)),
            ]);
            let mut features = vec![
                feature("identity (message_id)", V(ID)),
                feature("subject (gobridge.subject)", V(SUBJECT)),
                feature("routing key", V("probe.key.7f3a")),
                feature("exchange", V("probe-exchange-7f3a")),
                feature("correlation id", V(CORRELATION)),
                feature("content type", V(CONTENT_TYPE)),
                feature("reply-to", V(REPLY_TO)),
                feature("type", V("probe-type-7f3a")),
                feature("app id", V("probe-app-7f3a")),
                feature("expiry (expiration)", Expiry),
            ];
            features.extend(typed_features());
            features.push(feature("headers (18)", Extras));
            (input, features)
        }
        ReceiverConfig::Amqp10(_) => {
            let input = table(&[
                ("payload".into(), s("{}")),
                ("header".into(), table(&[("ttl".into(), toml::Value::Integer(3_600_000))])),
                (
                    "properties".into(),
                    table(&[
                        ("message_id".into(), s(ID)),
                        ("correlation_id".into(), s(CORRELATION)),
                        ("subject".into(), s(SUBJECT)),
                        ("content_type".into(), s(CONTENT_TYPE)),
                        ("reply_to".into(), s(REPLY_TO)),
                        ("to".into(), s("probe-to-7f3a")),
                        ("group_id".into(), s("probe-group-7f3a")),
                    ]),
                ),
                ("application_properties".into(), table(&typed)),
            ]);
            let mut features = vec![
                feature("identity (message-id)", V(ID)),
                feature("subject", V(SUBJECT)),
                feature("correlation id", V(CORRELATION)),
                feature("content type", V(CONTENT_TYPE)),
                feature("reply-to", V(REPLY_TO)),
                feature("to", V("probe-to-7f3a")),
                feature("group id", V("probe-group-7f3a")),
                feature("expiry (ttl)", Expiry),
            ];
            features.extend(typed_features().into_iter().map(|mut f| {
                f.what = match f.what {
                    "text header" => "text application property",
                    "integer header" => "integer application property",
                    "float header" => "float application property",
                    "boolean header" => "boolean application property",
                    "time header" => "timestamp application property",
                    _ => "binary application property",
                };
                f
            }));
            features.push(feature("application properties (18)", Extras));
            (input, features)
        }
        ReceiverConfig::Http(h) => {
            // HTTP headers are text: the prefix marks the message's own.
            let prefix = h.header_prefix.as_str();
            let mut headers: Vec<(String, toml::Value)> = vec![
                ("Idempotency-Key".into(), s(ID)),
                ("Content-Type".into(), s(CONTENT_TYPE)),
                (format!("{prefix}gobridge.subject"), s(SUBJECT)),
                (format!("{prefix}probe-text"), s(TEXT_VALUE)),
            ];
            headers.extend(extras.iter().map(|(k, v)| (format!("{prefix}{k}"), s(v))));
            let input = table(&[("payload".into(), s("{}")), ("headers".into(), table(&headers))]);
            let features = vec![
                feature("identity (Idempotency-Key)", V(ID)),
                feature("subject (gobridge.subject header)", V(SUBJECT)),
                feature("content type", V(CONTENT_TYPE)),
                feature("header", Name("probe-text")),
                feature("other headers (12)", Extras),
            ];
            (input, features)
        }
        ReceiverConfig::Simplemq(q) => {
            // Headers travel in the content's JSON document.
            let mqbridge = q.headers == ferry_config::SimplemqHeaders::Mqbridge;
            let name = |k: &str| if mqbridge { format!("rabbitmq.header.{k}") } else { k.to_owned() };
            let mut headers: Vec<(String, toml::Value)> =
                vec![("gobridge.subject".into(), s(SUBJECT)), (name("probe-text"), s(TEXT_VALUE))];
            if mqbridge {
                for (k, v) in [
                    ("rabbitmq.message_id", ID),
                    ("rabbitmq.correlation_id", CORRELATION),
                    ("rabbitmq.content_type", CONTENT_TYPE),
                    ("rabbitmq.reply_to", REPLY_TO),
                    ("rabbitmq.exchange", "probe-exchange-7f3a"),
                    ("rabbitmq.routing_key", "probe.key.7f3a"),
                ] {
                    headers.push((k.into(), s(v)));
                }
            } else {
                headers.extend(typed.iter().filter(|(k, _)| k != "probe-text").cloned());
            }
            headers.extend(extras.iter().map(|(k, v)| (name(k), s(v))));
            let input = table(&[
                ("message_id".into(), s(ID)),
                ("payload".into(), s("{}")),
                ("headers".into(), table(&headers)),
            ]);
            let mut features = if mqbridge {
                vec![
                    feature("identity (rabbitmq.message_id)", V(ID)),
                    feature("subject (gobridge.subject)", V(SUBJECT)),
                    feature("correlation id", V(CORRELATION)),
                    feature("content type", V(CONTENT_TYPE)),
                    feature("reply-to", V(REPLY_TO)),
                    feature("routing key", V("probe.key.7f3a")),
                    feature("exchange", V("probe-exchange-7f3a")),
                    feature("header", Name("probe-text")),
                ]
            } else {
                let mut f = vec![
                    feature("identity (SimpleMQ message id)", V(ID)),
                    feature("subject (gobridge.subject)", V(SUBJECT)),
                ];
                f.extend(typed_features());
                f
            };
            features.push(feature("other headers (12)", Extras));
            (input, features)
        }
        ReceiverConfig::Sqs(_) | ReceiverConfig::SqsEndpoint(_) => {
            // SQS takes ten attributes: the subject, three typed, six more.
            let mut attributes: Vec<(String, toml::Value)> = vec![
                ("Subject".into(), s(SUBJECT)),
                ("probe-text".into(), s(TEXT_VALUE)),
                ("probe-int".into(), toml::Value::Integer(4242)),
                ("probe-bytes".into(), table(&[("type".into(), s("Binary")), ("base64".into(), s("AP8Q"))])),
            ];
            attributes.extend(extras.iter().take(6).map(|(k, v)| (k.clone(), s(v))));
            let input = table(&[
                ("message_id".into(), s(ID)),
                ("payload".into(), s("{}")),
                ("message_attributes".into(), table(&attributes)),
            ]);
            let features = vec![
                feature("identity (MessageId)", V(ID)),
                feature("subject (Subject attribute)", V(SUBJECT)),
                feature("String attribute", Name("probe-text")),
                feature("Number attribute", Name("probe-int")),
                feature("Binary attribute", Name("probe-bytes")),
                feature("attributes besides Subject (9)", Extras),
            ];
            (input, features)
        }
    }
}

/// Every (path, value) of a JSON view, depth first.
fn leaves(prefix: String, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out.push((path.clone(), v.clone()));
                leaves(path, v, out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                leaves(format!("{prefix}[{i}]"), v, out);
            }
        }
        // A payload in the JSON wire format carries headers too.
        Value::String(s) if s.starts_with('{') => {
            if let Ok(inner @ Value::Object(_)) = serde_json::from_str::<Value>(s) {
                leaves(prefix, &inner, out);
            }
        }
        _ => {}
    }
}

fn locate(find: &Find, view: &Value, extra_in: usize) -> Option<String> {
    let mut all = Vec::new();
    leaves(String::new(), view, &mut all);
    let last = |path: &str| path.rsplit('.').next().unwrap_or(path).to_owned();
    let found: Vec<String> = match find {
        Find::Value(marker) => {
            all.iter().filter(|(_, v)| v.as_str().is_some_and(|s| s.contains(marker))).map(|(p, _)| p.clone()).collect()
        }
        Find::Name(name) => {
            all.iter().filter(|(p, _)| probe_key(&last(p)) == *name).map(|(p, v)| format!("{p} = {v}")).collect()
        }
        Find::Expiry => all
            .iter()
            .filter(|(p, _)| {
                // A native field, not a header that happens to be named so.
                let key = last(p);
                let header_map = ["user_properties", "headers", "application_properties", "message_attributes"]
                    .iter()
                    .any(|m| p.starts_with(&format!("{m}.")));
                (key.contains("expir") || key == "ttl") && !header_map
            })
            .map(|(p, v)| format!("{p} = {v}"))
            .collect(),
        Find::Extras => {
            let names: BTreeSet<String> = all
                .iter()
                .map(|(p, _)| probe_key(&last(p)).to_owned())
                .filter(|k| k.starts_with("probe-extra-"))
                .collect();
            // The typed probes count too where they arrive.
            let typed = ["probe-text", "probe-int", "probe-float", "probe-bool", "probe-time", "probe-bytes"];
            let typed_in: BTreeSet<String> = all
                .iter()
                .map(|(p, _)| probe_key(&last(p)).to_owned())
                .filter(|k| typed.contains(&k.as_str()))
                .collect();
            let typed_in = typed_in.len();
            let arrived = names.len() + typed_in;
            return Some(if arrived >= extra_in { format!("all {arrived}") } else { format!("LOSSY:{arrived}") });
        }
    };
    (!found.is_empty()).then(|| found.into_iter().take(3).collect::<Vec<_>>().join(", "))
}

/// One binding's report lines and how many of them are losses.
fn explain_binding(
    config: &Config,
    route_index: usize,
    binding_index: usize,
    probes: &Probes,
    features: &[Feature],
    extra_in: usize,
) -> (Vec<String>, usize) {
    let route = &config.routes[route_index];
    let b = &route.bindings[binding_index];
    let mut lines = Vec::new();
    let Some(sender) = config.senders.get(&b.sender) else {
        return (vec![format!("    unknown sender {:?}", b.sender)], 0);
    };
    if let Some(m) = &b.header_mapper {
        lines.push(format!("    (header mapper {m:?} runs before the sender; its changes are not shown)"));
    }
    // The address template's headers, so that the probes can be addressed.
    let view = |envelope: &ferry_envelope::Envelope| {
        let mut envelope = envelope.clone();
        for name in ferry_core::address::names(&b.address) {
            if !envelope.headers.contains_key(name) {
                envelope.set_header(name, HeaderValue::Text("probe".into()));
            }
        }
        send(sender, &OutboundMessage::new(envelope, b.address.clone()), Timestamp::now()).map(Value::Object)
    };
    let (typical, crowded) = match (view(&probes.typical), view(&probes.crowded)) {
        (Ok(t), Ok(c)) => (t, c),
        (Err(e), _) | (_, Err(e)) => return (vec![format!("    the probe could not be sent: {e}")], 1),
    };
    let mut losses = 0;
    for f in features {
        let single;
        let view = match f.find {
            Find::Extras => &crowded,
            Find::Name(name) => match probes.single.get(name).map(&view) {
                Some(Ok(v)) => {
                    single = v;
                    &single
                }
                Some(Err(e)) => {
                    losses += 1;
                    lines.push(format!("  LOST  {}: the probe could not be sent: {e}", f.what));
                    continue;
                }
                None => &typical,
            },
            _ => &typical,
        };
        match locate(&f.find, view, extra_in) {
            Some(at) if at.starts_with("LOSSY:") => {
                losses += 1;
                let n = &at["LOSSY:".len()..];
                lines.push(format!(
                    "  LOST  {}: only {n} arrive; the rest are dropped ({})",
                    f.what,
                    why_lossy(sender)
                ));
            }
            Some(at) => lines.push(format!("  ok    {} -> {at}", f.what)),
            None => {
                losses += 1;
                lines.push(format!("  LOST  {}{}", f.what, why_lost(sender, &f.find)));
            }
        }
    }
    (lines, losses)
}

fn why_lossy(sender: &SenderConfig) -> &'static str {
    match sender {
        SenderConfig::Sqs(_) => "SQS carries 10 message attributes, chosen by priority: trace and idempotency first",
        SenderConfig::Mqtt(_) => "MQTT user properties are text: typed values are dropped",
        _ => "the target cannot carry them",
    }
}

fn why_lost(sender: &SenderConfig, find: &Find) -> String {
    let reason = match (sender, find) {
        (SenderConfig::Mqtt(_), Find::Name(_)) => "MQTT user properties are text; other value types are dropped",
        (SenderConfig::Sqs(_), Find::Expiry) => "SQS has no per-message expiry; it may be delivered late",
        (SenderConfig::Sqs(_), Find::Name(_)) => "over SQS's 10 attributes, or a type SQS cannot carry",
        (_, Find::Expiry) => "the target gets no expiry",
        _ => "",
    };
    if reason.is_empty() { String::new() } else { format!(" ({reason})") }
}

/// The probe as received: `typical` carries one of each kind of metadata,
/// `crowded` also the extra headers, to see how many a target keeps.
struct Probes {
    typical: ferry_envelope::Envelope,
    crowded: ferry_envelope::Envelope,
    /// Per typed header: the identity and that header alone, so that a
    /// header is reported lost only when the target cannot carry it, not
    /// when the others took its place (the crowded probe shows that).
    single: std::collections::BTreeMap<&'static str, ferry_envelope::Envelope>,
}

/// The probe input with the entries of its tables that `keep(table, key)`
/// accepts.
fn filtered(input: &toml::Value, keep: impl Fn(&str, &str) -> bool) -> toml::Value {
    let mut input = input.clone();
    if let toml::Value::Table(t) = &mut input {
        for (table, v) in t.iter_mut() {
            if let toml::Value::Table(inner) = v {
                inner.retain(|k, _| keep(table, k));
            }
        }
    }
    input
}

/// The probe input with one `probe-*` header, `name`, and of the
/// properties only the message id.
fn only(input: &toml::Value, name: &str) -> toml::Value {
    filtered(input, |table, k| match table {
        "properties" => k == "message_id",
        _ => !probe_key(k).starts_with("probe-") || probe_key(k) == name,
    })
}

/// The probe input without its `probe-extra-NN` headers.
fn without_extras(input: &toml::Value) -> toml::Value {
    filtered(input, |_, k| !probe_key(k).starts_with("probe-extra-"))
}

/// A probe input key without a transport's prefix (`x-ferry-probe-text`
/// is the HTTP receiver's `probe-text`).
fn probe_key(k: &str) -> &str {
    k.find("probe-").map_or(k, |i| &k[i..])
}

/// The report for every route; the number of losses found.
pub fn report(config: &Config) -> (String, usize) {
    let mut out = String::new();
    let mut losses = 0;
    for (i, route) in config.routes.iter().enumerate() {
        let Some(receiver) = config.receivers.get(&route.receiver) else { continue };
        let (input, features) = probe(receiver);
        let extra_in = match receiver {
            ReceiverConfig::Sqs(_) | ReceiverConfig::SqsEndpoint(_) => 9,
            ReceiverConfig::Mqtt(_) | ReceiverConfig::Http(_) => EXTRA + 1,
            ReceiverConfig::Simplemq(q) if q.headers == ferry_config::SimplemqHeaders::Mqbridge => EXTRA + 1,
            ReceiverConfig::Simplemq(_) => EXTRA + 6,
            _ => EXTRA + 6,
        };
        let ingest = |input: toml::Value| match receive(receiver, input, Timestamp::now()) {
            Ok(Admitted::Envelope(mut e)) => {
                ferry_core::headers::apply_ingress_rules(
                    &mut e,
                    &route.id,
                    &route.receiver,
                    route.trust_bridge_headers,
                );
                Ok(e)
            }
            Ok(Admitted::Refused { reason, .. }) => Err(format!("the probe was refused at ingress ({reason})")),
            Err(e) => Err(format!("no probe: {e}")),
        };
        let mut single = std::collections::BTreeMap::new();
        for f in &features {
            if let Find::Name(name) = f.find
                && let Ok(e) = ingest(only(&input, name))
            {
                single.insert(name, e);
            }
        }
        let probes = match (ingest(without_extras(&input)), ingest(input)) {
            (Ok(typical), Ok(crowded)) => Probes { typical, crowded, single },
            (Err(e), _) | (_, Err(e)) => {
                out.push_str(&format!("route {}: {e}\n", route.id));
                continue;
            }
        };
        if !route.processors.is_empty() {
            out.push_str(&format!(
                "route {}: {} processor(s) run before the bindings; their changes are not shown\n",
                route.id,
                route.processors.len()
            ));
        }
        for (j, b) in route.bindings.iter().enumerate() {
            let kinds = config.senders.get(&b.sender).map(kind_of_sender).unwrap_or("?");
            out.push_str(&format!(
                "route {} -> binding {}: {} (receivers.{}) -> {kinds} (senders.{})\n",
                route.id,
                b.id(),
                kind_of_receiver(receiver),
                route.receiver,
                b.sender
            ));
            let (lines, lost) = explain_binding(config, i, j, &probes, &features, extra_in);
            losses += lost;
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
    }
    (out, losses)
}
