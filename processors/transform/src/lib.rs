//! The built-in `transform` processor: rebuilds a JSON payload from mapped
//! fields and copies values between payload fields and headers.
//!
//! Config (the route's `config` table):
//!
//! ```toml
//! [routes.processors.config]
//! keep = false            # start from an empty object (default) or the input
//! fields = [
//!   { to = "celsius", from = "$.reading.value", type = "number" },
//!   { to = "site", from = "$.meta['site name']", default = "unknown" },
//!   { to = "device", from_header = "device-id" },
//!   { to = "schema", value = 2 },
//!   { to = "ok", from = "$.status", type = "boolean", required = true },
//! ]
//! headers = [ { name = "kind", from = "$.type", type = "string" } ]
//! ```
//!
//! - `fields`: each sets the output field `to` (a dotted path; missing
//!   objects are created) from exactly one source: `from` (a JSONPath-style
//!   path into the *input* document: `$`, `.name`, `['name']`, `[index]`),
//!   `from_header` (a header's value), or `value` (a constant).
//! - `type`: `string`, `number`, `integer` or `boolean`; the value is
//!   converted (`"21.5"` → 21.5, `1` → `true`, `12` → `"12"`). A value that
//!   cannot be converted fails the message permanently.
//! - `default`: used when the source is missing (or null). Without one, a
//!   missing source leaves the field out, or fails the message when
//!   `required = true`.
//! - `headers`: each sets header `name` from `from` (a path into the input)
//!   or `from_field` (a path into the output), with the same `type`,
//!   `default` and `required`. Reserved `x-bridge.*` names are refused at
//!   init, but for `x-bridge.ordering-key` (the SQS FIFO message group by
//!   default), which the route must grant: `grants = { ordering_key = true }`.
//! - `keep`: when true the output starts as the input document (which must
//!   then be an object) and `fields` overwrite or add to it.
//!
//! A payload that is not JSON fails permanently with reason
//! `transform: payload is not JSON: ...`.

mod mapping;

pub use mapping::{Output, Transform};

use ferry_plugin_sdk::{Failure, HeaderValue, Message, Processor, Verdict, header_json, names};

struct TransformProcessor(Transform);

fn json_header(v: &serde_json::Value) -> HeaderValue {
    match v {
        serde_json::Value::Bool(b) => HeaderValue::Boolean(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => HeaderValue::Integer(i),
            None => HeaderValue::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => HeaderValue::Text(s.clone()),
        other => HeaderValue::Text(other.to_string()),
    }
}

impl Processor for TransformProcessor {
    fn init(config: serde_json::Value) -> Result<Self, String> {
        Transform::from_config(config).map(TransformProcessor)
    }

    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        let input: serde_json::Value = serde_json::from_slice(&msg.payload())
            .map_err(|e| Failure::Reject(format!("transform: payload is not JSON: {e}")))?;
        let out = self
            .0
            .apply(&input, |name| msg.header(name).map(header_json))
            .map_err(|e| Failure::Reject(format!("transform: {e}")))?;
        for (name, value) in &out.headers {
            let value = json_header(value);
            msg.set_header(name, &value);
            // The host ignores a reserved header the route did not grant:
            // refuse rather than send the message without it.
            if name == names::ORDERING_KEY && msg.header(name).as_ref() != Some(&value) {
                return Err(Failure::Reject(format!(
                    "transform: the route must grant this processor ordering_key to set {name}"
                )));
            }
        }
        let payload = serde_json::to_vec(&out.document).map_err(|e| Failure::Reject(format!("transform: {e}")))?;
        msg.set_payload(&payload);
        Ok(Verdict::Pass)
    }
}

ferry_plugin_sdk::export_processor!(TransformProcessor);
