//! {{name}}: a ferry processor (world `processor`).
//!
//! Config (the route's `config` table):
//!
//! ```toml
//! [[routes.processors]]
//! plugin = "{{name}}"
//! config = { header = "processed-by", drop_kind = "noise" }
//! ```
//!
//! - `header`: the header it stamps on every message it passes, with the
//!   value `{{name}}` (default `processed-by`).
//! - `drop_kind`: messages whose `kind` header has this text are dropped
//!   (none by default).
//!
//! Build the component with `./build` (it writes `{{name}}.wasm`); run
//! the tests with `cargo test`.

use ferry_plugin_sdk::{Failure, Message, Plugin, Processor, Verdict};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_header")]
    header: String,
    #[serde(default)]
    drop_kind: Option<String>,
}

fn default_header() -> String {
    "processed-by".to_owned()
}

pub struct Stamp(Config);

impl Plugin for Stamp {
    type Config = Config;

    fn init(config: Config) -> Result<Self, String> {
        if config.header.is_empty() || config.header.starts_with("x-bridge.") {
            return Err(format!("header: {:?} is empty or reserved", config.header));
        }
        Ok(Stamp(config))
    }
}

impl Processor for Stamp {
    fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
        if self.0.drop_kind.is_some() && msg.text_header("kind") == self.0.drop_kind {
            return Ok(Verdict::Drop(format!("kind {:?}", msg.text_header("kind").unwrap_or_default())));
        }
        msg.set_header(&self.0.header, "{{name}}");
        Ok(Verdict::Pass)
    }
}

ferry_plugin_sdk::export_processor!(Stamp);

#[cfg(test)]
mod tests {
    use ferry_plugin_sdk::testing;
    use serde_json::json;

    use super::*;

    #[test]
    fn stamps_and_drops() {
        let p = testing::plugin::<Stamp>(json!({ "drop_kind": "noise" })).expect("valid config");
        let msg = testing::message().header("kind", "reading").build();
        assert_eq!(p.process(&msg), Ok(Verdict::Pass));
        assert_eq!(msg.text_header("processed-by").as_deref(), Some("{{name}}"));
        let noise = testing::message().header("kind", "noise").build();
        assert!(matches!(p.process(&noise), Ok(Verdict::Drop(_))));
    }

    #[test]
    fn a_bad_config_names_the_key() {
        let err = testing::plugin::<Stamp>(json!({ "header": 3 })).err().expect("refused");
        assert!(err.starts_with("header: invalid type"), "{err}");
    }
}
