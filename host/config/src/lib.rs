//! ferry's configuration file.
//!
//! - [`schema`]: the TOML shape, every key documented where it is defined.
//! - [`substitute`]: `${VAR}` / `${VAR:-default}` expansion in string values,
//!   and `{ file = "..." }` secrets.
//! - [`load`] / [`parse`]: text -> substituted -> typed -> validated
//!   [`Config`], or a [`ConfigError`] naming the offending key path.
//!
//! Validation here is pure (no network, no filesystem); the daemon adds the
//! checks that need the outside world, such as whether a plugin file loads.

mod amqp;
mod instance;
pub mod schema;
pub mod substitute;
mod validate;

pub use validate::valid_plugin_name;

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
