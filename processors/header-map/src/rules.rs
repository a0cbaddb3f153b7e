//! The mapping rules, independent of the host so they can be unit tested.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Prefix {
    from: String,
    to: String,
}

/// The mapper's config (the binding's `header_mapper_config`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MappingConfig {
    #[serde(default)]
    rename_prefix: Vec<Prefix>,
    #[serde(default)]
    rename: BTreeMap<String, String>,
    #[serde(default)]
    drop: Vec<String>,
    #[serde(default)]
    drop_prefix: Vec<String>,
    #[serde(default)]
    set: BTreeMap<String, String>,
    address: Option<String>,
}

/// A validated mapping.
#[derive(Debug)]
pub struct Mapping {
    raw: MappingConfig,
}

/// One change to make, in order.
#[derive(Debug, PartialEq)]
pub enum Action {
    Rename { from: String, to: String },
    Remove(String),
    Set { name: String, value: String },
}

impl Mapping {
    /// Checks the decoded config.
    pub fn new(raw: MappingConfig) -> Result<Self, String> {
        if raw.rename_prefix.iter().any(|p| p.from.is_empty()) || raw.drop_prefix.iter().any(String::is_empty) {
            return Err("an empty prefix would match every header".into());
        }
        if let Some(a) = &raw.address {
            let opens = a.matches('{').count();
            if opens != a.matches('}').count() || a.contains("{}") {
                return Err(format!("address: {a:?} has unbalanced or empty {{}}"));
            }
        }
        Ok(Self { raw })
    }

    /// The changes for a message with these header names.
    pub fn actions(&self, names: &[String]) -> Vec<Action> {
        let mut out = Vec::new();
        for name in names {
            if let Some(p) = self.raw.rename_prefix.iter().find(|p| name.starts_with(&p.from)) {
                out.push(Action::Rename { from: name.clone(), to: format!("{}{}", p.to, &name[p.from.len()..]) });
            }
        }
        for (from, to) in &self.raw.rename {
            if names.contains(from) {
                out.push(Action::Rename { from: from.clone(), to: to.clone() });
            }
        }
        for name in &self.raw.drop {
            out.push(Action::Remove(name.clone()));
        }
        for name in names {
            if self.raw.drop_prefix.iter().any(|p| name.starts_with(p.as_str())) {
                out.push(Action::Remove(name.clone()));
            }
        }
        for (name, value) in &self.raw.set {
            out.push(Action::Set { name: name.clone(), value: value.clone() });
        }
        out
    }

    /// The address to choose, if the config names one; `header` reads a
    /// header's text after the changes.
    pub fn address(&self, header: impl Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
        let Some(template) = &self.raw.address else { return Ok(None) };
        let mut out = String::new();
        let mut rest = template.as_str();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = rest[open..].find('}').map(|c| c + open).ok_or("unbalanced {")?;
            let name = &rest[open + 1..close];
            out.push_str(
                &header(name).ok_or_else(|| format!("header-map: address needs header {name:?}, which is missing"))?,
            );
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mapping(config: serde_json::Value) -> Result<Mapping, String> {
        Mapping::new(ferry_plugin_sdk::decode_config(&config.to_string())?)
    }

    #[test]
    fn actions_in_order() {
        let m = mapping(json!({
            "rename_prefix": [{"from": "amqp091.", "to": "amqp10."}],
            "rename": {"kind": "type"},
            "drop": ["secret"],
            "drop_prefix": ["debug."],
            "set": {"origin": "ferry"},
        }))
        .unwrap();
        let names: Vec<String> =
            ["amqp091.correlation-id", "kind", "debug.a", "plain"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            m.actions(&names),
            vec![
                Action::Rename { from: "amqp091.correlation-id".into(), to: "amqp10.correlation-id".into() },
                Action::Rename { from: "kind".into(), to: "type".into() },
                Action::Remove("secret".into()),
                Action::Remove("debug.a".into()),
                Action::Set { name: "origin".into(), value: "ferry".into() },
            ]
        );
    }

    #[test]
    fn address_template() {
        let m = mapping(json!({"address": "t/{tenant}/{kind}"})).unwrap();
        let h = |n: &str| match n {
            "tenant" => Some("acme".to_owned()),
            "kind" => Some("temp".to_owned()),
            _ => None,
        };
        assert_eq!(m.address(h).unwrap().as_deref(), Some("t/acme/temp"));
        assert!(m.address(|_| None).unwrap_err().contains("tenant"));
        assert_eq!(mapping(json!({})).unwrap().address(h).unwrap(), None);
        assert!(mapping(json!({"address": "a/{b"})).is_err());
        assert!(mapping(json!({"drop_prefix": [""]})).is_err());
    }
}
