//! `[receivers.NAME]` and `[senders.NAME]` of a transport that reads its
//! own keys: the config reads `type` and `wire_format` (keys every part
//! has) and keeps the rest as written, for the transport's crate to
//! deserialise into its own config type and check (the daemon's transport
//! table hands it over).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ConfigError, WireFormat};

/// A receiver or sender as written, for its transport to read. Its
/// `Debug` names the keys but prints no value (any may be a secret).
#[derive(Clone, PartialEq)]
pub struct PartTable {
    /// `type`: the transport's name in config and metrics.
    pub kind: String,
    /// `wire_format`, which every receiver and sender has, where it is
    /// written.
    pub wire_format: Option<WireFormat>,
    /// Every other key, as written (after `${VAR}` and `{ file = … }`).
    pub keys: toml::Table,
}

impl PartTable {
    /// The part of `kind` with these `keys` (`type` and `wire_format`
    /// among them are taken out and read).
    pub fn new(kind: impl Into<String>, mut keys: toml::Table) -> Result<Self, ConfigError> {
        keys.remove("type");
        let wire_format = match keys.remove("wire_format") {
            None => None,
            Some(v) => Some(v.try_into().map_err(|e: toml::de::Error| ConfigError::new("wire_format", e.message()))?),
        };
        Ok(Self { kind: kind.into(), wire_format, keys })
    }

    /// The part's `type`: its transport's name in config and metrics.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The part's `wire_format`, `"none"` where it is not written (a
    /// transport that reads the wire format itself has its own default in
    /// its own config).
    pub fn wire_format(&self) -> WireFormat {
        self.wire_format.unwrap_or_default()
    }

    /// The keys as the transport's config type `T`; on failure the key
    /// path below the part's (empty for the part as a whole) and why.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        read_table(self.keys.clone())
    }

    /// As [`PartTable::parse`], for a transport that reads or writes the
    /// wire format itself: `T` has a `wire_format` key of its own (with
    /// the transport's default), given where it is written.
    pub fn parse_with_wire_format<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let mut keys = self.keys.clone();
        if let Some(format) = self.wire_format {
            let value = toml::Value::try_from(format).map_err(|e| ConfigError::new("wire_format", e.to_string()))?;
            keys.insert("wire_format".into(), value);
        }
        read_table(keys)
    }
}

/// `keys` as `T`; on failure the key path below the table's (empty for the
/// table as a whole) and why.
pub(crate) fn read_table<T: DeserializeOwned>(keys: toml::Table) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(keys)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // Where serde reports an unknown or missing key depends on
        // the table's order; name the key itself.
        let named = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|prefix| message.strip_prefix(prefix))
            .and_then(|rest| rest.split('`').next());
        let path = match (path.as_str(), named) {
            (".", Some(key)) => key.to_owned(),
            (".", None) => String::new(),
            _ => path,
        };
        ConfigError::new(path, message)
    })
}

impl std::fmt::Debug for PartTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartTable")
            .field("kind", &self.kind)
            .field("wire_format", &self.wire_format)
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Serialize for PartTable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut all = self.keys.clone();
        all.insert("type".into(), toml::Value::String(self.kind.clone()));
        if let Some(format) = self.wire_format {
            let format = toml::Value::try_from(format).map_err(serde::ser::Error::custom)?;
            all.insert("wire_format".into(), format);
        }
        all.serialize(serializer)
    }
}

/// Takes the parts out of `value`'s `table` (`receivers` or `senders`),
/// each read with its key path; the parts taken, by name. A part without
/// a `type` is left for [`PartTable`]'s `Deserialize` to refuse.
pub(crate) fn take_tables(value: &mut toml::Value, table: &str) -> Result<Vec<(String, PartTable)>, ConfigError> {
    let Some(parts) = value.get_mut(table).and_then(toml::Value::as_table_mut) else { return Ok(Vec::new()) };
    let names: Vec<String> = parts
        .iter()
        .filter(|(_, part)| part.get("type").is_some_and(toml::Value::is_str))
        .map(|(n, _)| n.clone())
        .collect();
    let mut taken = Vec::new();
    for name in names {
        let Some(toml::Value::Table(keys)) = parts.remove(&name) else { continue };
        let kind = keys.get("type").and_then(toml::Value::as_str).unwrap_or_default().to_owned();
        let part = PartTable::new(kind, keys)
            .map_err(|e| ConfigError::new(format!("{table}.{name}.{}", e.path), e.message))?;
        taken.push((name, part));
    }
    Ok(taken)
}

/// A part as a table with a `type` (the ones [`take_tables`] did not take:
/// refused, naming what is missing).
impl<'de> Deserialize<'de> for PartTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let keys = toml::Table::deserialize(deserializer)?;
        let kind = match keys.get("type") {
            Some(toml::Value::String(kind)) => kind.clone(),
            Some(_) => return Err(serde::de::Error::custom("`type` must be a string naming a transport")),
            None => return Err(serde::de::Error::missing_field("type")),
        };
        PartTable::new(kind, keys).map_err(|e| serde::de::Error::custom(format!("{}: {}", e.path, e.message)))
    }
}
