//! The header rules every route applies on ingress (seed 000, "What every
//! route does"): strip reserved headers the source must not set, stamp the
//! correlation id when missing, stamp the route and source ids.

use ferry_envelope::{Envelope, names};

/// Applies the ingress rules to a freshly received envelope.
///
/// Receiving adapters never copy `x-bridge.*` names from publisher metadata;
/// the only reserved headers they install are the ones they derive from the
/// wire ([`names::ADAPTER_DERIVED`]). Everything else in the reserved
/// namespace is removed here unless the route trusts bridge headers (a
/// bridge-to-bridge link).
pub fn apply_ingress_rules(env: &mut Envelope, route_id: &str, source_id: &str, trust_bridge_headers: bool) {
    if !trust_bridge_headers {
        env.headers.retain(|name, _| !names::is_reserved(name) || names::ADAPTER_DERIVED.contains(&name.as_str()));
    }
    if !env.headers.contains_key(names::CORRELATION_ID) {
        env.set_header(names::CORRELATION_ID, uuid::Uuid::new_v4().to_string());
    }
    env.set_header(names::ROUTE_ID, route_id);
    env.set_header(names::SOURCE_ID, source_id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_envelope::HeaderValue;

    fn env_with(headers: &[(&str, &str)]) -> Envelope {
        let mut e = Envelope::new("id-1", &b"x"[..]);
        for (k, v) in headers {
            e.set_header(*k, *v);
        }
        e
    }

    #[test]
    fn reserved_headers_are_stripped_except_adapter_derived_ones() {
        let mut e = env_with(&[
            ("x-bridge.tenant-id", "evil"),
            ("x-bridge.route-id", "spoofed"),
            ("x-bridge.correlation-data", "AAE"),
            ("kind", "temp"),
        ]);
        apply_ingress_rules(&mut e, "r1", "in", false);
        assert!(!e.headers.contains_key("x-bridge.tenant-id"));
        assert_eq!(e.text_header("x-bridge.route-id"), Some("r1"));
        assert_eq!(e.text_header("x-bridge.source-id"), Some("in"));
        assert_eq!(e.text_header("x-bridge.correlation-data"), Some("AAE"));
        assert_eq!(e.text_header("kind"), Some("temp"));
    }

    #[test]
    fn trusted_routes_keep_bridge_headers() {
        let mut e = env_with(&[("x-bridge.tenant-id", "acme")]);
        apply_ingress_rules(&mut e, "r1", "in", true);
        assert_eq!(e.text_header("x-bridge.tenant-id"), Some("acme"));
    }

    #[test]
    fn correlation_id_is_stamped_only_when_missing() {
        let mut e = env_with(&[("x-bridge.correlation-id", "keep-me")]);
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
