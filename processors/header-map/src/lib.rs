//! `header-map`: an example header mapper (world `header-mapper`). It runs
//! per binding on the outbound copy, after the processors.
//!
//! Config (the binding's `header_mapper_config`), applied in this order:
//!
//! ```toml
//! [[routes.bindings]]
//! sender = "amqp10-out"
//! header_mapper = "header-map"
//! header_mapper_config = { rename_prefix = [{ from = "amqp091.", to = "amqp10." }], drop = ["amqp10.routing-key"] }
//! ```
//!
//! - `rename_prefix`: `[{ from, to }]` — every header starting with `from`
//!   gets `to` instead (the example above turns AMQP 0-9-1 properties such
//!   as `amqp091.correlation-id` and `amqp091.content-type` into the names
//!   the AMQP 1.0 sender writes as message properties).
//! - `rename`: `{ old = "new" }` for single headers.
//! - `drop`: header names to remove; `drop_prefix`: prefixes to remove.
//! - `set`: `{ name = "text" }` headers to add or overwrite.
//! - `address`: the address to send to; `{name}` is replaced by that
//!   header's text (e.g. `"tenants/{tenant}/events"`). A header it needs
//!   that is missing fails the copy permanently.
//!
//! Reserved `x-bridge.*` headers cannot be renamed, dropped or set: the host
//! ignores such calls (and counts them in
//! `ferry_plugin_reserved_header_refused_total`).

mod rules;

pub use rules::{Action, Mapping, MappingConfig};

use ferry_plugin_sdk::{Failure, HeaderMapper, Message, Plugin};

impl Plugin for Mapping {
    type Config = MappingConfig;

    fn init(config: MappingConfig) -> Result<Self, String> {
        Mapping::new(config)
    }
}

impl HeaderMapper for Mapping {
    fn map_headers(&self, msg: &Message, _binding: &str, _address: &str) -> Result<Option<String>, Failure> {
        for action in self.actions(&msg.header_names()) {
            match action {
                Action::Rename { from, to } => {
                    if let Some(v) = msg.header(&from) {
                        msg.remove_header(&from);
                        msg.set_header(&to, v);
                    }
                }
                Action::Remove(name) => msg.remove_header(&name),
                Action::Set { name, value } => msg.set_header(&name, value),
            }
        }
        self.address(|name| msg.header_text(name)).map_err(Failure::Reject)
    }
}

ferry_plugin_sdk::export_header_mapper!(Mapping);

#[cfg(test)]
mod tests {
    use ferry_plugin_sdk::{HeaderValue, names, testing};
    use serde_json::json;

    use super::*;

    #[test]
    fn renames_keeps_types_and_chooses_the_address() {
        let m = testing::plugin::<Mapping>(json!({
            "rename_prefix": [{ "from": "amqp091.", "to": "amqp10." }],
            "drop": ["secret"],
            "address": "tenants/{tenant}/{amqp10.priority}",
        }))
        .expect("valid config");
        let msg = testing::message()
            .header("amqp091.priority", 4)
            .header("tenant", "acme")
            .header("secret", "s")
            .header(names::ROUTE_ID, "r1")
            .build();
        assert_eq!(m.map_headers(&msg, "out", ""), Ok(Some("tenants/acme/4".into())));
        assert_eq!(msg.header("amqp10.priority"), Some(HeaderValue::Integer(4)));
        assert_eq!(msg.header("amqp091.priority"), None);
        assert_eq!(msg.header("secret"), None);
        assert_eq!(msg.text_header(names::ROUTE_ID).as_deref(), Some("r1"));
    }

    #[test]
    fn reserved_headers_stay_and_a_missing_address_header_rejects() {
        let m = testing::plugin::<Mapping>(json!({ "drop_prefix": ["x-bridge."], "address": "t/{tenant}" }))
            .expect("valid config");
        let msg = testing::message().header(names::ROUTE_ID, "r1").build();
        assert!(matches!(m.map_headers(&msg, "out", ""), Err(Failure::Reject(r)) if r.contains("\"tenant\"")));
        assert_eq!(msg.text_header(names::ROUTE_ID).as_deref(), Some("r1"));
        assert_eq!(testing::refused_reserved(&msg), 1);
    }
}
