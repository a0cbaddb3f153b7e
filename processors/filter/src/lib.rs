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

pub use rules::{Filter, Operand, Subject};

use ferry_plugin_sdk::{Failure, Message, Processor, Verdict, header_json};

struct FilterProcessor(Filter);

struct HostMessage<'a>(&'a Message);

impl Subject for HostMessage<'_> {
    fn header(&self, name: &str) -> Option<serde_json::Value> {
        self.0.header(name).map(header_json)
    }

    fn subject(&self) -> Option<String> {
        self.0.subject()
    }

    fn payload_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.0.payload()).ok()
    }
}

impl Processor for FilterProcessor {
    fn init(config: serde_json::Value) -> Result<Self, String> {
        Filter::from_config(config).map(FilterProcessor)
    }

    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        Ok(self.0.decide(&HostMessage(msg)))
    }
}

ferry_plugin_sdk::export_processor!(FilterProcessor);
