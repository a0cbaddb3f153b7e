//! The header rules every route applies on ingress (seed 000, "What every
//! route does"; seed 002): strip reserved headers the source must not set,
//! stamp the correlation id when missing, stamp the route and source ids,
//! and count the hops of trusted bridge-to-bridge links.

use ferry_envelope::{Envelope, HeaderValue, names};

/// Applies the ingress rules to a freshly received envelope and returns
/// the hop count it now carries (`x-bridge.forwarded-hop`).
///
/// This is the trust boundary, the same for every receiver. A receiving
/// adapter hands the route every header the publisher sent, `x-bridge.*`
/// names included, and beside them what it derived from the wire itself
/// ([`Envelope::derive_header`]: a native correlation id, the content type,
/// that it minted the identity). The rules here alone decide what stays:
/// - untrusted routes strip every reserved header the publisher sent, and
///   the message starts at hop 1;
/// - trusted routes (`trust_bridge_headers`, a bridge-to-bridge link) keep
///   them, but for `x-bridge.generated-id`, which only says how this hop's
///   adapter found the identity, and count the hop up from the one the
///   last bridge sent. A trusted `x-bridge.dedup-id` or
///   `x-bridge.idempotency-key` becomes the identity of a message whose
///   adapter had to generate one, so its redeliveries count again (seed
///   002);
/// - then the derived headers are installed, over any publisher header of
///   the same name, so no publisher can forge or override them.
pub fn apply_ingress_rules(env: &mut Envelope, route_id: &str, source_id: &str, trust_bridge_headers: bool) -> u32 {
    let derived = env.take_derived();
    if trust_bridge_headers {
        if env.headers.contains_key(names::GENERATED_ID) {
            env.headers.remove(names::GENERATED_ID);
        }
    } else if env.headers.keys().any(|name| names::is_reserved(name)) {
        env.headers.retain(|name, _| !names::is_reserved(name));
    }
    if !derived.is_empty() {
        env.headers.extend(derived);
    }
    let hops = if trust_bridge_headers {
        restore_identity(env);
        let hops = hop_of(env).saturating_add(1);
        // Text, so transports that carry only text headers (MQTT) keep it.
        env.set_header(names::FORWARDED_HOP, hops.to_string());
        hops
    } else {
        1
    };
    if !env.headers.contains_key(names::CORRELATION_ID) {
        // A version-4 UUID from the thread's RNG: no system call per message.
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        env.set_header(names::CORRELATION_ID, id.to_string());
    }
    env.set_header(names::ROUTE_ID, route_id);
    env.set_header(names::SOURCE_ID, source_id);
    hops
}

/// The hop count a message arrived with (0 when none or unreadable).
fn hop_of(env: &Envelope) -> u32 {
    match env.headers.get(names::FORWARDED_HOP) {
        Some(HeaderValue::Text(t)) => t.trim().parse().unwrap_or(0),
        Some(HeaderValue::Integer(n)) => u32::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

/// A generated identity gives way to a trusted bridge's stable one.
fn restore_identity(env: &mut Envelope) {
    if !env.headers.contains_key(names::GENERATED_ID) {
        return;
    }
    let stable = [names::DEDUP_ID, names::IDEMPOTENCY_KEY]
        .into_iter()
        .find_map(|name| env.text_header(name).filter(|v| !v.is_empty()).map(str::to_owned));
    if let Some(id) = stable {
        env.id = id;
        env.headers.remove(names::GENERATED_ID);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(headers: &[(&str, &str)]) -> Envelope {
        let mut e = Envelope::new("id-1", &b"x"[..]);
        for (k, v) in headers {
            e.set_header(*k, *v);
        }
        e
    }

    #[test]
    fn every_reserved_header_a_publisher_sent_is_stripped_and_derived_ones_are_installed() {
        let mut e = env_with(&[
            ("x-bridge.tenant-id", "evil"),
            ("x-bridge.route-id", "spoofed"),
            ("x-bridge.correlation-id", "forged-corr"),
            ("x-bridge.correlation-data", "Zm9yZ2Vk"),
            ("x-bridge.content-type", "forged/type"),
            ("x-bridge.generated-id", "true"),
            ("kind", "temp"),
        ]);
        e.derive_header(names::CONTENT_TYPE, "application/json");
        apply_ingress_rules(&mut e, "r1", "in", false);
        assert!(!e.headers.contains_key("x-bridge.tenant-id"));
        assert!(!e.headers.contains_key(names::CORRELATION_DATA), "a publisher cannot set correlation data");
        assert!(!e.headers.contains_key(names::GENERATED_ID), "nor mark its identity generated");
        assert_ne!(e.text_header(names::CORRELATION_ID), Some("forged-corr"), "nor choose the correlation id");
        assert_eq!(e.text_header(names::CONTENT_TYPE), Some("application/json"), "the derived one is kept");
        assert_eq!(e.text_header("x-bridge.route-id"), Some("r1"));
        assert_eq!(e.text_header("x-bridge.source-id"), Some("in"));
        assert_eq!(e.text_header("kind"), Some("temp"));
        assert!(e.derived_header(names::CONTENT_TYPE).is_none(), "installed once");
    }

    #[test]
    fn a_derived_header_wins_over_a_trusted_publishers_and_generated_id_is_never_taken_from_one() {
        let mut e = env_with(&[
            ("x-bridge.correlation-id", "upstream"),
            ("x-bridge.content-type", "text/plain"),
            ("x-bridge.generated-id", "true"),
        ]);
        e.derive_header(names::CORRELATION_ID, "native");
        apply_ingress_rules(&mut e, "r1", "in", true);
        assert_eq!(e.text_header(names::CORRELATION_ID), Some("native"));
        assert_eq!(e.text_header(names::CONTENT_TYPE), Some("text/plain"), "a trusted bridge's header stays");
        assert!(!e.headers.contains_key(names::GENERATED_ID));
        // A trusted link keeps the upstream correlation id when the
        // adapter derived none (SQS to SQS).
        let mut e = env_with(&[("x-bridge.correlation-id", "upstream")]);
        apply_ingress_rules(&mut e, "r1", "in", true);
        assert_eq!(e.text_header(names::CORRELATION_ID), Some("upstream"));
    }

    #[test]
    fn trusted_routes_keep_bridge_headers() {
        let mut e = env_with(&[("x-bridge.tenant-id", "acme"), ("x-bridge.ordering-key", "dev-1")]);
        apply_ingress_rules(&mut e, "r1", "in", true);
        assert_eq!(e.text_header("x-bridge.tenant-id"), Some("acme"));
        assert_eq!(e.text_header("x-bridge.ordering-key"), Some("dev-1"));
    }

    #[test]
    fn hops_count_up_on_trusted_routes_and_start_at_one_elsewhere() {
        let mut e = env_with(&[("x-bridge.forwarded-hop", "3")]);
        assert_eq!(apply_ingress_rules(&mut e, "r1", "in", true), 4);
        assert_eq!(e.text_header("x-bridge.forwarded-hop"), Some("4"));
        let mut e = env_with(&[("x-bridge.forwarded-hop", "3")]);
        assert_eq!(apply_ingress_rules(&mut e, "r1", "in", false), 1);
        let mut e = env_with(&[("x-bridge.forwarded-hop", "junk")]);
        assert_eq!(apply_ingress_rules(&mut e, "r1", "in", true), 1);
    }

    #[test]
    fn a_trusted_dedup_id_replaces_a_generated_identity() {
        let mut e = env_with(&[("x-bridge.idempotency-key", "idem-7")]);
        e.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
        apply_ingress_rules(&mut e, "r1", "in", true);
        assert_eq!(e.id, "idem-7");
        assert!(!e.headers.contains_key("x-bridge.generated-id"));
        // Untrusted: the key is stripped, the identity stays generated.
        let mut e = env_with(&[("x-bridge.dedup-id", "d-1")]);
        e.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
        apply_ingress_rules(&mut e, "r1", "in", false);
        assert_eq!(e.id, "id-1");
        assert!(e.headers.contains_key("x-bridge.generated-id"));
        // A producer's own id is never replaced.
        let mut e = env_with(&[("x-bridge.dedup-id", "d-1")]);
        apply_ingress_rules(&mut e, "r1", "in", true);
        assert_eq!(e.id, "id-1");
    }

    #[test]
    fn correlation_id_is_stamped_only_when_missing() {
        let mut e = env_with(&[]);
        e.derive_header(names::CORRELATION_ID, "keep-me");
        apply_ingress_rules(&mut e, "r", "s", false);
        assert_eq!(e.text_header("x-bridge.correlation-id"), Some("keep-me"));
        let mut e = env_with(&[]);
        apply_ingress_rules(&mut e, "r", "s", false);
        let Some(HeaderValue::Text(id)) = e.headers.get("x-bridge.correlation-id") else {
            panic!("no correlation id stamped");
        };
        assert_eq!(id.len(), 36);
    }
}
