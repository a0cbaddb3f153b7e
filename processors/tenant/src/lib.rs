//! The built-in `tenant` processor: finds a message's tenant, checks it
//! against an allow-list, stamps `x-bridge.tenant-id` and counts usage.
//!
//! Config (the route's `config` table):
//!
//! ```toml
//! [[routes.processors]]
//! plugin = "tenant"
//! grants = { tenant_id = true }   # needed: x-bridge.* is reserved
//! config = { header = "tenant", allow = ["acme", "globex"], on_unknown = "reject" }
//! ```
//!
//! - Where the tenant comes from: `header = "name"` (default `tenant`), or
//!   `from = "subject"`: the subject's first segment before `separator`
//!   (default `.`), e.g. `acme.orders.created` → `acme`.
//! - `allow`: the tenants accepted (required; exact, case-sensitive match).
//! - `on_unknown`: what happens to a tenant not in `allow` — `reject`
//!   (default: fails permanently, so the route dead-letters it per
//!   `on_permanent_failure`) or `drop` (acked, counted as filtered).
//! - `on_missing`: the same choice when there is no tenant at all (default
//!   `reject`).
//! - Usage: the host counts each stamped message in
//!   `ferry_tenant_messages_total{route,tenant}`, and the plugin keeps a
//!   running count per tenant in its key-value store (`usage/<tenant>`).
//!
//! The route must grant the plugin `tenant_id`: without it the host ignores
//! the stamp, and the plugin rejects the message saying so rather than
//! sending it unstamped.

mod rules;

pub use rules::{Decision, Source, TenantConfig, TenantRules};

use ferry_plugin_sdk::{Failure, Message, Plugin, Processor, Verdict, kv, names};

impl Plugin for TenantRules {
    type Config = TenantConfig;

    fn init(config: TenantConfig) -> Result<Self, String> {
        TenantRules::new(config)
    }
}

impl Processor for TenantRules {
    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        let tenant = match &self.source {
            Source::Header(name) => msg.text_header(name),
            Source::Subject { .. } => msg.subject(),
        };
        match self.decide(tenant.as_deref()) {
            Decision::Accept(tenant) => {
                msg.set_header(names::TENANT_ID, tenant.as_str());
                if msg.text_header(names::TENANT_ID).as_deref() != Some(tenant.as_str()) {
                    return Err(Failure::Reject(
                        "tenant: the route does not grant this plugin x-bridge.tenant-id; add `grants = { tenant_id = true }` to its [[routes.processors]] entry".into(),
                    ));
                }
                // Usage is best effort: a full store does not fail messages.
                let _ = kv::increment(&format!("usage/{tenant}"), 1);
                Ok(Verdict::Pass)
            }
            Decision::Drop(reason) => Ok(Verdict::Drop(reason)),
            Decision::Reject(reason) => Err(Failure::Reject(reason)),
        }
    }
}

ferry_plugin_sdk::export_processor!(TenantRules);

#[cfg(test)]
mod tests {
    use ferry_plugin_sdk::testing;
    use serde_json::json;

    use super::*;

    #[test]
    fn stamps_granted_tenants_and_counts_usage() {
        let p = testing::plugin::<TenantRules>(json!({"allow": ["acme"]})).expect("valid config");
        let msg = testing::message().header("tenant", "acme").grant(names::TENANT_ID).build();
        assert_eq!(p.process(&msg), Ok(Verdict::Pass));
        assert_eq!(msg.text_header(names::TENANT_ID).as_deref(), Some("acme"));
        let again = testing::message().header("tenant", "acme").grant(names::TENANT_ID).build();
        assert_eq!(p.process(&again), Ok(Verdict::Pass));
        assert_eq!(kv::get("usage/acme"), Some(2i64.to_le_bytes().to_vec()));
    }

    #[test]
    fn refuses_to_send_unstamped_without_the_grant() {
        let p = testing::plugin::<TenantRules>(json!({"allow": ["acme"]})).expect("valid config");
        let msg = testing::message().header("tenant", "acme").build();
        let Err(Failure::Reject(why)) = p.process(&msg) else { panic!("must reject") };
        assert!(why.contains("grants = { tenant_id = true }"), "{why}");
        assert_eq!(testing::refused_reserved(&msg), 1);
        assert_eq!(kv::get("usage/acme"), None);
    }

    #[test]
    fn unknown_tenants_follow_on_unknown() {
        let p = testing::plugin::<TenantRules>(json!({"allow": ["acme"], "on_unknown": "drop"})).expect("valid");
        let msg = testing::message().header("tenant", "initech").grant(names::TENANT_ID).build();
        assert!(matches!(p.process(&msg), Ok(Verdict::Drop(r)) if r.starts_with("unknown_tenant")));
    }
}
