//! ferry's configuration file.
//!
//! - [`schema`]: the TOML shape, every key documented where it is defined.
//! - [`substitute`]: `${VAR}` / `${VAR:-default}` expansion in string values,
//!   and `{ file = "..." }` secrets.
//! - [`load`] / [`parse`]: text -> substituted -> typed -> validated
//!   [`Config`], or a [`ConfigError`] naming the offending key path.
//! - [`reference`]: the book's page of every key, from [`json_schema`].
//!
//! Validation here is pure (no network, no filesystem); the daemon adds the
//! checks that need the outside world, such as whether a plugin file loads.

mod amqp;
mod component;
mod endpoint;
mod http;
mod instance;
mod nats;
mod redis;
pub mod reference;
pub mod schema;
pub mod substitute;
mod validate;

pub use validate::{simplemq_queue_name_ok, valid_plugin_name};

use std::path::Path;

pub use schema::*;

/// A configuration problem, with the key path it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Dotted key path such as `routes[0].bindings[1].sender`; `(file)` for
    /// problems with the file as a whole.
    pub path: String,
    /// What is wrong and, where it helps, what would be right.
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

impl Config {
    /// The config with its admin server on `listen` (`ferry run
    /// --admin-listen`), validated again: the same rules apply as to the
    /// key in the file.
    pub fn with_admin_listen(mut self, listen: &str) -> Result<Self, ConfigError> {
        self.admin.listen = Some(listen.to_owned());
        validate::validate(&self)?;
        Ok(self)
    }
}

/// Reads, substitutes, parses and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with_secrets(path).map(|(config, _)| config)
}

/// [`load`], also returning the text of every secret file the config read
/// (`{ file = "..." }`), for output that must not show them.
pub fn load_with_secrets(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("(file)", format!("cannot read {}: {e}", path.display())))?;
    parse_collecting_secrets(&text, &|name| std::env::var(name).ok())
}

/// Parses and validates config text using the process environment.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    parse_with_env(text, &|name| std::env::var(name).ok())
}

/// Parses and validates config text, resolving `${VAR}` with `env`.
pub fn parse_with_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    parse_collecting_secrets(text, env).map(|(config, _)| config)
}

fn parse_collecting_secrets(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Vec<String>), ConfigError> {
    let mut value: toml::Value = toml::from_str(text).map_err(|e| ConfigError::new("(file)", toml_message(&e)))?;
    let mut secrets = Vec::new();
    substitute::substitute_value(&mut value, "", env, &mut secrets)?;
    let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "(file)".to_owned() } else { path };
        ConfigError::new(path, e.into_inner().to_string())
    })?;
    instance::resolve(&mut config, env)?;
    validate::validate(&config)?;
    Ok((config, secrets))
}

fn toml_message(e: &toml::de::Error) -> String {
    e.to_string().trim().replace('\n', " ")
}

#[cfg(test)]
mod tests;

/// A JSON Schema (draft 2020-12) of the config file, from the config types:
/// their doc comments as descriptions, serde's names and defaults. Any
/// string may also be written as `{ file = "…" }` (a secret read from a
/// file), which the schema allows wherever it allows a string.
pub fn json_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Config)).unwrap_or_default();
    allow_secret_files(&mut schema);
    if let Some(map) = schema.as_object_mut() {
        map.insert("title".into(), "ferry configuration".into());
    }
    schema
}

/// `{"type": "string", …}` becomes `{"anyOf": [{…}, {"type": "object",
/// "properties": {"file": {"type": "string"}}, …}]}`.
fn allow_secret_files(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            let is_string = match map.get("type") {
                Some(serde_json::Value::String(t)) => t == "string",
                Some(serde_json::Value::Array(types)) => types.iter().any(|t| t == "string"),
                _ => false,
            } && !map.contains_key("const")
                && !map.contains_key("enum");
            for v in map.values_mut() {
                allow_secret_files(v);
            }
            if is_string {
                let plain = serde_json::Value::Object(std::mem::take(map));
                let file = serde_json::json!({
                    "type": "object",
                    "description": "A secret read from this file (its trailing newline removed)",
                    "properties": { "file": { "type": "string" } },
                    "required": ["file"],
                    "additionalProperties": false
                });
                map.insert("anyOf".into(), serde_json::json!([plain, file]));
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(allow_secret_files),
        _ => {}
    }
}
