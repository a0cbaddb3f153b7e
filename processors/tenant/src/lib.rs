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

pub use rules::{Decision, Source, TenantRules};

use ferry_plugin_sdk::{Failure, HeaderValue, Message, MessageExt, Processor, Verdict, kv, names};

struct TenantProcessor(TenantRules);

impl Processor for TenantProcessor {
    fn init(config: serde_json::Value) -> Result<Self, String> {
        TenantRules::from_config(config).map(TenantProcessor)
    }

    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        let tenant = match &self.0.source {
            Source::Header(name) => msg.text_header(name),
            Source::Subject { .. } => msg.subject(),
        };
        match self.0.decide(tenant.as_deref()) {
            Decision::Accept(tenant) => {
                msg.set_header(names::TENANT_ID, &HeaderValue::Text(tenant.clone()));
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

ferry_plugin_sdk::export_processor!(TenantProcessor);
