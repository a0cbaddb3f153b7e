//! The tenant rules, independent of the host so they can be unit tested.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    header: Option<String>,
    from: Option<String>,
    separator: Option<String>,
    allow: Option<Vec<String>>,
    on_unknown: Option<String>,
    on_missing: Option<String>,
}

/// Where the tenant is read.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Header(String),
    Subject { separator: String },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    Reject,
    Drop,
}

/// A validated tenant configuration.
#[derive(Debug)]
pub struct TenantRules {
    pub source: Source,
    allow: BTreeSet<String>,
    on_unknown: Action,
    on_missing: Action,
}

/// What to do with one message.
#[derive(Debug, PartialEq)]
pub enum Decision {
    Accept(String),
    Drop(String),
    Reject(String),
}

fn action(v: Option<&str>, key: &str) -> Result<Action, String> {
    match v {
        None | Some("reject") => Ok(Action::Reject),
        Some("drop") => Ok(Action::Drop),
        Some(other) => Err(format!("tenant config: {key} must be \"reject\" or \"drop\", not {other:?}")),
    }
}

impl TenantRules {
    pub fn from_config(config: Value) -> Result<Self, String> {
        let raw: RawConfig = serde_json::from_value(config).map_err(|e| format!("tenant config: {e}"))?;
        let source = match (raw.header, raw.from.as_deref()) {
            (Some(_), Some(_)) => return Err("tenant config: give `header` or `from = \"subject\"`, not both".into()),
            (Some(h), None) if h.is_empty() => return Err("tenant config: `header` is empty".into()),
            (Some(h), None) => Source::Header(h),
            (None, Some("subject")) => {
                let separator = raw.separator.unwrap_or_else(|| ".".into());
                if separator.is_empty() {
                    return Err("tenant config: `separator` is empty".into());
                }
                Source::Subject { separator }
            }
            (None, Some(other)) => return Err(format!("tenant config: `from` can only be \"subject\", not {other:?}")),
            (None, None) => Source::Header("tenant".into()),
        };
        let allow: BTreeSet<String> =
            raw.allow.ok_or("tenant config: `allow` (the accepted tenants) is required")?.into_iter().collect();
        if allow.is_empty() || allow.iter().any(String::is_empty) {
            return Err("tenant config: `allow` must list at least one non-empty tenant".into());
        }
        Ok(Self {
            source,
            allow,
            on_unknown: action(raw.on_unknown.as_deref(), "on_unknown")?,
            on_missing: action(raw.on_missing.as_deref(), "on_missing")?,
        })
    }

    /// Decides for a message whose header or subject is `found`.
    pub fn decide(&self, found: Option<&str>) -> Decision {
        let tenant = match (&self.source, found) {
            (Source::Subject { separator }, Some(s)) => s.split(separator.as_str()).next().filter(|t| !t.is_empty()),
            (_, found) => found.filter(|t| !t.is_empty()),
        };
        let (action, reason) = match tenant {
            Some(t) if self.allow.contains(t) => return Decision::Accept(t.to_owned()),
            Some(t) => (self.on_unknown, format!("unknown_tenant: tenant {t:?} is not allowed on this route")),
            None => (self.on_missing, "missing_tenant: the message names no tenant".to_owned()),
        };
        match action {
            Action::Reject => Decision::Reject(reason),
            Action::Drop => Decision::Drop(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn header_allow_list() {
        let r = TenantRules::from_config(json!({"allow": ["acme", "globex"]})).unwrap();
        assert_eq!(r.source, Source::Header("tenant".into()));
        assert_eq!(r.decide(Some("acme")), Decision::Accept("acme".into()));
        assert!(matches!(r.decide(Some("ACME")), Decision::Reject(m) if m.starts_with("unknown_tenant")));
        assert!(matches!(r.decide(None), Decision::Reject(m) if m.starts_with("missing_tenant")));
        assert!(matches!(r.decide(Some("")), Decision::Reject(m) if m.starts_with("missing_tenant")));
    }

    #[test]
    fn subject_prefix_and_drop() {
        let r = TenantRules::from_config(
            json!({"from": "subject", "allow": ["acme"], "on_unknown": "drop", "on_missing": "drop"}),
        )
        .unwrap();
        assert_eq!(r.decide(Some("acme.orders.created")), Decision::Accept("acme".into()));
        assert!(matches!(r.decide(Some("initech.orders")), Decision::Drop(_)));
        assert!(matches!(r.decide(Some(".orders")), Decision::Drop(m) if m.starts_with("missing_tenant")));
        let slash = TenantRules::from_config(json!({"from": "subject", "separator": "/", "allow": ["a"]})).unwrap();
        assert_eq!(slash.decide(Some("a/b")), Decision::Accept("a".into()));
    }

    #[test]
    fn bad_configs_are_refused() {
        for bad in [
            json!({}),
            json!({"allow": []}),
            json!({"allow": ["a"], "on_unknown": "ignore"}),
            json!({"allow": ["a"], "from": "payload"}),
            json!({"allow": ["a"], "header": "t", "from": "subject"}),
            json!({"allow": ["a"], "colour": 1}),
        ] {
            assert!(TenantRules::from_config(bad.clone()).is_err(), "{bad}");
        }
    }
}
