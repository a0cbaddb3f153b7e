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

pub use rules::{Action, Mapping};

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "header-mapper",
        generate_all,
    });
}

use bindings::ferry::plugin::types::{Failure, HeaderValue, Message};

thread_local! {
    static MAPPING: std::cell::RefCell<Option<Mapping>> = const { std::cell::RefCell::new(None) };
}

fn text(msg: &Message, name: &str) -> Option<String> {
    match msg.header(name)? {
        HeaderValue::Text(s) => Some(s),
        HeaderValue::Integer(i) => Some(i.to_string()),
        HeaderValue::Float(f) => Some(f.to_string()),
        HeaderValue::Boolean(b) => Some(b.to_string()),
        HeaderValue::Time(t) => Some(t.to_string()),
        HeaderValue::Bytes(_) => None,
    }
}

struct Guest;

impl bindings::Guest for Guest {
    fn init(config: String) -> Result<(), String> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| format!("config is not valid JSON: {e}"))?;
        let mapping = Mapping::from_config(config)?;
        MAPPING.with(|m| *m.borrow_mut() = Some(mapping));
        Ok(())
    }

    fn map_headers(msg: &Message, _binding: String, _address: String) -> Result<Option<String>, Failure> {
        MAPPING.with(|m| {
            let m = m.borrow();
            let Some(mapping) = m.as_ref() else {
                return Err(Failure::Reject("header-map used before init".into()));
            };
            for action in mapping.actions(&msg.header_names()) {
                match action {
                    Action::Rename { from, to } => {
                        if let Some(v) = msg.header(&from) {
                            msg.remove_header(&from);
                            msg.set_header(&to, &v);
                        }
                    }
                    Action::Remove(name) => msg.remove_header(&name),
                    Action::Set { name, value } => msg.set_header(&name, &HeaderValue::Text(value)),
                }
            }
            mapping.address(|name| text(msg, name)).map_err(Failure::Reject)
        })
    }
}

bindings::export!(Guest with_types_in bindings);
