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

mod endpoint;
mod instance;
mod part;
pub mod reference;
pub mod schema;
mod secret;
pub mod substitute;
mod validate;
mod wire_format;

pub use validate::{reconnect_problem, valid_plugin_name};

use std::path::Path;

pub use schema::*;
pub use secret::Secret;

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
    /// Whether the section at the dotted `path` (`endpoints.sqs`) is set:
    /// what a transport may need besides its part (the transport trait's
    /// `needs_section`).
    pub fn has_section(&self, path: &str) -> bool {
        let Ok(document) = serde_json::to_value(self) else { return false };
        let pointer = format!("/{}", path.replace('.', "/"));
        document.pointer(&pointer).is_some_and(|v| !v.is_null())
    }

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
    let text = match FOREIGN.get().and_then(|read| read(path, &text)) {
        None => text,
        Some(Ok(toml)) => toml,
        Some(Err(e)) => return Err(ConfigError::new("(file)", e)),
    };
    parse_collecting_secrets(&text, &|name| std::env::var(name).ok())
}

/// Reads a config file written for another tool (chosen by the file's
/// name) as ferry's TOML text; `None` for a file that is ferry's own.
pub type ForeignReader = fn(&Path, &str) -> Option<Result<String, String>>;

static FOREIGN: std::sync::OnceLock<ForeignReader> = std::sync::OnceLock::new();

/// Has [`load`] read configs of another tool with `reader` (the daemon's
/// mqbridge mode: `ferry run -c bridges.jsonnet`). Set once, at start;
/// the transports' names stay out of this crate.
pub fn read_foreign_with(reader: ForeignReader) {
    let _ = FOREIGN.set(reader);
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
    let receivers = part::take_tables(&mut value, "receivers")?;
    let senders = part::take_tables(&mut value, "senders")?;
    let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "(file)".to_owned() } else { path };
        ConfigError::new(path, e.into_inner().to_string())
    })?;
    config.receivers.extend(receivers.into_iter().map(|(name, part)| (name, ReceiverConfig(part))));
    config.senders.extend(senders.into_iter().map(|(name, part)| (name, SenderConfig(part))));
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
///
/// No transport's tables are in it, nor the endpoints' sections; the
/// daemon's [`json_schema_with`] adds them.
pub fn json_schema() -> serde_json::Value {
    json_schema_with(|_| (Vec::new(), Vec::new()))
}

/// A transport's `[receivers.NAME]` and `[senders.NAME]` keys, for the
/// schema: its `type` and the schemas of its two config types (made with
/// the generator handed to it, so the tables they share are defined once).
pub struct PartSchemas {
    pub kind: &'static str,
    pub receiver: schemars::Schema,
    pub sender: schemars::Schema,
}

/// [`json_schema`] with the tables `added` makes: each transport's
/// receiver and sender become a variant of `ReceiverConfig` and
/// `SenderConfig` with its `type` and the `wire_format` every part has;
/// each section's schema takes the place of its [`SectionTable`].
pub fn json_schema_with(
    added: impl FnOnce(&mut schemars::SchemaGenerator) -> (Vec<PartSchemas>, Vec<SectionSchema>),
) -> serde_json::Value {
    let mut generator = schemars::generate::SchemaSettings::default().into_generator();
    let root = generator.root_schema_for::<Config>();
    let wire_format = generator.subschema_for::<WireFormat>();
    let (parts, sections) = added(&mut generator);
    let mut schema = serde_json::to_value(root).unwrap_or_default();
    let defs: serde_json::Map<String, serde_json::Value> =
        generator.definitions().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    add_parts(&mut schema, defs, &parts, &serde_json::to_value(wire_format).unwrap_or_default());
    for section in &sections {
        place_section(&mut schema, section);
    }
    drop_unnamed_defs(&mut schema);
    allow_secret_files(&mut schema);
    if let Some(map) = schema.as_object_mut() {
        map.insert("title".into(), "ferry configuration".into());
    }
    schema
}

/// Puts `parts` into `schema`: their definitions into `$defs` (those of
/// their config types inlined as the variants), each as one more variant
/// of `ReceiverConfig` and `SenderConfig`.
fn add_parts(
    schema: &mut serde_json::Value,
    defs: serde_json::Map<String, serde_json::Value>,
    parts: &[PartSchemas],
    wire_format: &serde_json::Value,
) {
    let mut defs = defs;
    let mut variant = |part: &schemars::Schema, kind: &str| {
        let mut node = serde_json::to_value(part).unwrap_or_default();
        if let Some(name) = node.get("$ref").and_then(|r| r.as_str()).and_then(|r| r.strip_prefix("#/$defs/")) {
            node = defs.remove(name).unwrap_or_default();
        }
        if let Some(map) = node.as_object_mut() {
            let properties = map.entry("properties").or_insert_with(|| serde_json::json!({}));
            if let Some(properties) = properties.as_object_mut() {
                let mut with_type = serde_json::Map::new();
                with_type.insert("type".into(), serde_json::json!({ "type": "string", "const": kind }));
                // A transport that reads the wire format itself documents
                // its own key (and its default).
                let own_format = properties.contains_key("wire_format");
                with_type.extend(std::mem::take(properties));
                if !own_format {
                    let mut format = wire_format.clone();
                    if let Some(f) = format.as_object_mut() {
                        f.insert("description".into(), WIRE_FORMAT_DOC.into());
                        f.insert("default".into(), "none".into());
                    }
                    with_type.insert("wire_format".into(), format);
                }
                *properties = with_type;
            }
            let required = map.entry("required").or_insert_with(|| serde_json::json!([]));
            if let Some(list) = required.as_array_mut() {
                list.insert(0, "type".into());
            }
        }
        node
    };
    let variants: Vec<(serde_json::Value, serde_json::Value)> =
        parts.iter().map(|p| (variant(&p.receiver, p.kind), variant(&p.sender, p.kind))).collect();
    let Some(all) = schema.get_mut("$defs").and_then(|d| d.as_object_mut()) else { return };
    for (name, def) in defs {
        all.entry(name).or_insert(def);
    }
    for (def, pick) in [("ReceiverConfig", 0), ("SenderConfig", 1)] {
        if let Some(list) = all.get_mut(def).and_then(|d| d.get_mut("oneOf")).and_then(|l| l.as_array_mut()) {
            list.extend(variants.iter().map(|v| if pick == 0 { v.0.clone() } else { v.1.clone() }));
        }
    }
}

/// Puts `section`'s schema where its path's key names a [`SectionTable`]
/// (`properties.endpoints` → `EndpointsConfig` → `properties.sqs`).
fn place_section(schema: &mut serde_json::Value, section: &SectionSchema) {
    let named = <SectionTable as schemars::JsonSchema>::schema_name();
    let placeholder = serde_json::json!({ "$ref": format!("#/$defs/{named}") });
    let own = serde_json::to_value(&section.schema).unwrap_or_default();
    let mut keys = section.path.split('.');
    let Some(first) = keys.next() else { return };
    let mut at = format!("/properties/{first}");
    for key in keys {
        let named = schema.pointer(&at).and_then(|n| n.get("$ref")).and_then(|r| r.as_str()).map(str::to_owned);
        let base = match named.as_deref().and_then(|r| r.strip_prefix("#")) {
            Some(def) => def.to_owned(),
            None => at,
        };
        at = format!("{base}/properties/{key}");
    }
    fn replace(node: &mut serde_json::Value, placeholder: &serde_json::Value, own: &serde_json::Value) {
        if node == placeholder {
            *node = own.clone();
            return;
        }
        match node {
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| replace(v, placeholder, own)),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| replace(v, placeholder, own)),
            _ => {}
        }
    }
    if let Some(node) = schema.pointer_mut(&at) {
        replace(node, &placeholder, &own);
    }
}

/// The generator also defined the built-in transports' config types, which
/// the document's variants have inline, and the sections' placeholder:
/// only what is named stays.
fn drop_unnamed_defs(schema: &mut serde_json::Value) {
    loop {
        let mut named = std::collections::BTreeSet::new();
        refs(schema, &mut named);
        let Some(all) = schema.get_mut("$defs").and_then(|d| d.as_object_mut()) else { return };
        let before = all.len();
        all.retain(|name, _| named.contains(name));
        if all.len() == before {
            return;
        }
    }
}

/// The names of the definitions `value` refers to (`#/$defs/NAME`).
fn refs(value: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(name) = map.get("$ref").and_then(|r| r.as_str()).and_then(|r| r.strip_prefix("#/$defs/")) {
                out.insert(name.to_owned());
            }
            map.values().for_each(|v| refs(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// The description of `wire_format` in every part's table.
const WIRE_FORMAT_DOC: &str = "`\"json\"`: payloads are the [JSON wire format](../concepts/wire-format.md#the-json-wire-format) (headers and body in one document): a receiver unpacks them (what is not that JSON stays a plain body), a sender packs into it. Default `\"none\"`.";

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
