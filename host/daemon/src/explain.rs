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

use ferry_config::{Config, SenderConfig};
use ferry_core::fidelity::{Feature, Find, Probe, TYPED};
use ferry_core::ports::OutboundMessage;
use ferry_core::wire::Admitted;
use ferry_envelope::{HeaderValue, Timestamp};
use serde_json::Value;

use crate::transports;
use crate::transports::{fixture_receive as receive, fixture_send as send};

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
            let typed_in: BTreeSet<String> = all
                .iter()
                .map(|(p, _)| probe_key(&last(p)).to_owned())
                .filter(|k| TYPED.contains(&k.as_str()))
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
    if let Some(warning) = transports::of_sender(sender).ok().and_then(|t| t.sender_warning(sender)) {
        lines.push(format!("  WARN  {warning}"));
    }
    if let Ok(t) = transports::of_sender(sender) {
        let until = match route.max_outage_secs {
            Some(secs) => format!("for up to {secs} s (max_outage_secs), then dead-lettered as target_unavailable"),
            None => "for as long as the outage lasts".to_owned(),
        };
        lines.push(format!("    outage: {}; the message is held, no replay spent, {until}", t.outage_note()));
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

/// The sender's transport's notes on what it loses.
fn why_lossy(sender: &SenderConfig) -> &'static str {
    transports::of_sender(sender).map_or("the target cannot carry them", |t| t.lossy_note())
}

fn why_lost(sender: &SenderConfig, find: &Find) -> String {
    match transports::of_sender(sender).ok().and_then(|t| t.lost_note(*find)) {
        Some(reason) => format!(" ({reason})"),
        None => String::new(),
    }
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
        let probe = match transports::of_receiver(receiver).and_then(|t| t.fidelity_probe(receiver)) {
            Ok(probe) => probe,
            Err(e) => {
                out.push_str(&format!("route {}: no probe: {e}\n", route.id));
                continue;
            }
        };
        let Probe { input, features, extras_in: extra_in } = probe;
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
            let kinds = config.senders.get(&b.sender).map(|s| s.kind()).unwrap_or("?");
            out.push_str(&format!(
                "route {} -> binding {}: {} (receivers.{}) -> {kinds} (senders.{})\n",
                route.id,
                b.id(),
                receiver.kind(),
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
