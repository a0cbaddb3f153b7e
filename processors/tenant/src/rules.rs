//! The tenant rules, independent of the host so they can be unit tested.

use std::collections::BTreeSet;

use serde::Deserialize;

/// The tenant processor's config (the route's `config` table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    header: Option<String>,
    from: Option<TenantFrom>,
    separator: Option<String>,
    allow: Vec<String>,
    #[serde(default)]
    on_unknown: Action,
    #[serde(default)]
    on_missing: Action,
}

/// Where else the tenant may come from.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TenantFrom {
    Subject,
}

/// Where the tenant is read.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Header(String),
    Subject { separator: String },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    #[default]
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

impl TenantRules {
    /// Checks the decoded config.
    pub fn new(config: TenantConfig) -> Result<Self, String> {
        let source = match (config.header, config.from) {
            (Some(_), Some(_)) => return Err("give `header` or `from = \"subject\"`, not both".into()),
            (Some(h), None) if h.is_empty() => return Err("header: empty".into()),
            (Some(h), None) => Source::Header(h),
            (None, Some(TenantFrom::Subject)) => {
                let separator = config.separator.unwrap_or_else(|| ".".into());
                if separator.is_empty() {
                    return Err("separator: empty".into());
                }
                Source::Subject { separator }
            }
            (None, None) => Source::Header("tenant".into()),
        };
        let allow: BTreeSet<String> = config.allow.into_iter().collect();
        if allow.is_empty() || allow.iter().any(String::is_empty) {
            return Err("allow: must list at least one non-empty tenant".into());
        }
        Ok(Self { source, allow, on_unknown: config.on_unknown, on_missing: config.on_missing })
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

    fn rules(config: serde_json::Value) -> Result<TenantRules, String> {
        TenantRules::new(ferry_plugin_sdk::decode_config(&config.to_string())?)
    }

    #[test]
    fn header_allow_list() {
        let r = rules(json!({"allow": ["acme", "globex"]})).expect("valid config");
        assert_eq!(r.source, Source::Header("tenant".into()));
        assert_eq!(r.decide(Some("acme")), Decision::Accept("acme".into()));
        assert!(matches!(r.decide(Some("ACME")), Decision::Reject(m) if m.starts_with("unknown_tenant")));
        assert!(matches!(r.decide(None), Decision::Reject(m) if m.starts_with("missing_tenant")));
        assert!(matches!(r.decide(Some("")), Decision::Reject(m) if m.starts_with("missing_tenant")));
    }

    #[test]
    fn subject_prefix_and_drop() {
        let r = rules(json!({"from": "subject", "allow": ["acme"], "on_unknown": "drop", "on_missing": "drop"}))
            .expect("valid config");
        assert_eq!(r.decide(Some("acme.orders.created")), Decision::Accept("acme".into()));
        assert!(matches!(r.decide(Some("initech.orders")), Decision::Drop(_)));
        assert!(matches!(r.decide(Some(".orders")), Decision::Drop(m) if m.starts_with("missing_tenant")));
        let slash = rules(json!({"from": "subject", "separator": "/", "allow": ["a"]})).expect("valid config");
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
            assert!(rules(bad.clone()).is_err(), "{bad}");
        }
        assert_eq!(rules(json!({})).expect_err("refused"), "missing field `allow`");
        let err = rules(json!({"allow": ["a"], "on_unknown": "ignore"})).expect_err("refused");
        assert!(err.starts_with("on_unknown: unknown variant `ignore`"), "{err}");
    }
}
