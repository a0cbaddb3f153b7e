//! The built-in `filter` processor: pass, drop or route a message by
//! conditions on its headers, subject and (JSON) payload fields.
//!
//! Config (the route's `config` table):
//!
//! ```toml
//! config = { when = [{ header = "kind", op = "eq", value = "temp" }] }
//! ```
//!
//! - `when`: conditions. Each names exactly one operand — `header = "name"`,
//!   `subject = true`, or `field = "a.b.0.c"` (a dotted path into the JSON
//!   payload; numeric segments index arrays) — an `op` and, except for
//!   `exists`, a `value`. Ops: `eq`, `ne`, `contains`, `regex`, `gt`, `lt`,
//!   `exists`, `in` (value is a list).
//! - `match`: `all` (default) or `any` of the conditions.
//! - `action` when they match: `pass` (default), `drop`, or `route` (send to
//!   the `route` list of addresses instead of the bindings' own).
//! - `otherwise` when they do not: `drop` or `pass`. Default: `drop` when
//!   the action is `pass`, else `pass`.
//!
//! A missing operand never matches (but `ne` is true). The payload is read
//! only when a condition uses `field`, so header filters do not pay for it.
//! A `field` condition on a payload that is not JSON does not match.

mod rules;

pub use rules::{Filter, FilterConfig, Operand};

use ferry_plugin_sdk::{Failure, Message, Plugin, Processor, Verdict};

impl Plugin for Filter {
    type Config = FilterConfig;

    fn init(config: FilterConfig) -> Result<Self, String> {
        Filter::new(config)
    }
}

impl Processor for Filter {
    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        Ok(self.decide(msg))
    }
}

ferry_plugin_sdk::export_processor!(Filter);

#[cfg(test)]
mod tests {
    use ferry_plugin_sdk::testing;
    use serde_json::json;

    use super::*;

    #[test]
    fn routes_alerts_through_the_plugin_entry_point() {
        let filter = testing::plugin::<Filter>(json!({
            "when": [{ "field": "level", "op": "gt", "value": 3 }],
            "action": "route",
            "route": ["alerts/high"],
        }))
        .expect("valid config");
        let high = testing::message().json(&json!({"level": 5})).build();
        let low = testing::message().json(&json!({"level": 1})).build();
        let not_json = testing::message().payload("level=5").build();
        assert_eq!(filter.process(&high), Ok(Verdict::Route(vec!["alerts/high".into()])));
        assert_eq!(filter.process(&low), Ok(Verdict::Pass));
        assert_eq!(filter.process(&not_json), Ok(Verdict::Pass));
    }

    #[test]
    fn a_bad_config_names_the_key() {
        let err =
            testing::plugin::<Filter>(json!({ "when": [{ "header": "a", "op": "eq", "value": 1 }], "match": "most" }))
                .expect_err("refused");
        assert!(err.starts_with("match: unknown variant `most`"), "{err}");
    }
}
