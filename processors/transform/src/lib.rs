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

pub use mapping::{Output, Transform, TransformConfig};

use ferry_plugin_sdk::{Failure, HeaderValue, Message, Plugin, Processor, Verdict, names};

impl Plugin for Transform {
    type Config = TransformConfig;

    fn init(config: TransformConfig) -> Result<Self, String> {
        Transform::new(config)
    }
}

impl Processor for Transform {
    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        let input: serde_json::Value =
            msg.payload_json().map_err(|e| Failure::Reject(format!("transform: payload is not JSON: {e}")))?;
        let out = self
            .apply(&input, |name| msg.header(name).map(|v| v.to_json()))
            .map_err(|e| Failure::Reject(format!("transform: {e}")))?;
        for (name, value) in &out.headers {
            let value = HeaderValue::from_json(value);
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

ferry_plugin_sdk::export_processor!(Transform);

#[cfg(test)]
mod tests {
    use ferry_plugin_sdk::testing;
    use serde_json::json;

    use super::*;

    #[test]
    fn rebuilds_the_payload_and_sets_typed_headers() {
        let t = testing::plugin::<Transform>(json!({
            "fields": [{ "to": "celsius", "from": "$.reading.value", "type": "number" }],
            "headers": [{ "name": "celsius", "from_field": "celsius", "type": "integer" }],
        }))
        .expect("valid config");
        let msg = testing::message().json(&json!({"reading": {"value": "21"}})).build();
        assert_eq!(t.process(&msg), Ok(Verdict::Pass));
        assert_eq!(msg.payload_json::<serde_json::Value>().expect("json"), json!({"celsius": 21}));
        assert_eq!(msg.header("celsius"), Some(HeaderValue::Integer(21)));
    }

    #[test]
    fn the_ordering_key_needs_the_grant() {
        let config = json!({"keep": true, "headers": [{ "name": names::ORDERING_KEY, "from": "$.device" }]});
        let t = testing::plugin::<Transform>(config).expect("valid config");
        let body = json!({"device": "d1"});
        let ungranted = testing::message().json(&body).build();
        assert!(matches!(t.process(&ungranted), Err(Failure::Reject(r)) if r.contains("ordering_key")));
        let granted = testing::message().json(&body).grant(names::ORDERING_KEY).build();
        assert_eq!(t.process(&granted), Ok(Verdict::Pass));
        assert_eq!(granted.text_header(names::ORDERING_KEY).as_deref(), Some("d1"));
    }

    #[test]
    fn payload_that_is_not_json_is_rejected_and_bad_types_name_the_key() {
        let t = testing::plugin::<Transform>(json!({"keep": true})).expect("valid config");
        let msg = testing::message().payload("not json").build();
        assert!(matches!(t.process(&msg), Err(Failure::Reject(r)) if r.starts_with("transform: payload is not JSON")));
        let err = testing::plugin::<Transform>(json!({"fields": [{"to": "a", "value": 1, "type": "date"}]}))
            .expect_err("refused");
        assert!(err.starts_with("fields[0].type: unknown variant `date`"), "{err}");
    }
}
