//! The filter's rules, independent of the host so they can be unit tested
//! natively.

use ferry_plugin_sdk::{Message, Verdict};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

/// One condition of `when`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    header: Option<String>,
    #[serde(default)]
    subject: bool,
    field: Option<String>,
    op: OpName,
    value: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OpName {
    Eq,
    Ne,
    Contains,
    Regex,
    Gt,
    Lt,
    Exists,
    In,
}

impl std::fmt::Display for OpName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            OpName::Eq => "eq",
            OpName::Ne => "ne",
            OpName::Contains => "contains",
            OpName::Regex => "regex",
            OpName::Gt => "gt",
            OpName::Lt => "lt",
            OpName::Exists => "exists",
            OpName::In => "in",
        };
        f.write_str(name)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum MatchMode {
    #[default]
    All,
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ActionName {
    Pass,
    Drop,
    Route,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OtherwiseName {
    Pass,
    Drop,
}

/// The filter's config (the route's `config` table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    #[serde(default)]
    when: Vec<ConditionConfig>,
    #[serde(default, rename = "match")]
    match_mode: MatchMode,
    #[serde(default)]
    action: Option<ActionName>,
    #[serde(default)]
    route: Vec<String>,
    #[serde(default)]
    otherwise: Option<OtherwiseName>,
}

/// What a condition looks at.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Header(String),
    Subject,
    Field(Vec<String>),
}

#[derive(Debug)]
enum Op {
    Eq(Value),
    Ne(Value),
    Contains(String),
    Regex(Regex),
    Gt(f64),
    Lt(f64),
    Exists,
    In(Vec<Value>),
}

#[derive(Debug)]
struct Condition {
    operand: Operand,
    op: Op,
}

#[derive(Debug, Clone, PartialEq)]
enum Action {
    Pass,
    Drop,
    Route(Vec<String>),
}

/// A validated filter configuration.
#[derive(Debug)]
pub struct Filter {
    conditions: Vec<Condition>,
    any: bool,
    action: Action,
    otherwise: Action,
    uses_payload: bool,
}

impl Filter {
    /// Checks the decoded config; errors name the offending key.
    pub fn new(config: FilterConfig) -> Result<Self, String> {
        let mut conditions = Vec::new();
        for (i, c) in config.when.into_iter().enumerate() {
            conditions.push(condition(c).map_err(|e| format!("when[{i}]: {e}"))?);
        }
        let any = matches!(config.match_mode, MatchMode::Any);
        let action = match config.action {
            None | Some(ActionName::Pass) => Action::Pass,
            Some(ActionName::Drop) => Action::Drop,
            Some(ActionName::Route) if !config.route.is_empty() => Action::Route(config.route),
            Some(ActionName::Route) => {
                return Err("route: `action = \"route\"` needs a non-empty `route` list".into());
            }
        };
        let otherwise = match config.otherwise {
            None if action == Action::Pass => Action::Drop,
            None => Action::Pass,
            Some(OtherwiseName::Pass) => Action::Pass,
            Some(OtherwiseName::Drop) => Action::Drop,
        };
        let uses_payload = conditions.iter().any(|c| matches!(c.operand, Operand::Field(_)));
        Ok(Self { conditions, any, action, otherwise, uses_payload })
    }

    /// Whether the conditions hold for `msg`.
    pub fn matches(&self, msg: &Message) -> bool {
        // A payload that is not JSON matches no `field` condition.
        let payload = if self.uses_payload { msg.payload_json::<Value>().ok() } else { None };
        let mut results = self.conditions.iter().map(|c| c.holds(msg, payload.as_ref()));
        if self.any { results.any(|r| r) } else { results.all(|r| r) }
    }

    /// The verdict for `msg`.
    pub fn decide(&self, msg: &Message) -> Verdict {
        let action = if self.matches(msg) { &self.action } else { &self.otherwise };
        match action {
            Action::Pass => Verdict::Pass,
            Action::Drop => Verdict::Drop("filtered".into()),
            Action::Route(addresses) => Verdict::Route(addresses.clone()),
        }
    }
}

fn condition(c: ConditionConfig) -> Result<Condition, String> {
    let operand = match (c.header, c.subject, c.field) {
        (Some(h), false, None) => Operand::Header(h),
        (None, true, None) => Operand::Subject,
        (None, false, Some(f)) if !f.is_empty() => Operand::Field(f.split('.').map(str::to_owned).collect()),
        _ => return Err("name exactly one of `header`, `subject = true` or `field`".into()),
    };
    let need = |v: Option<Value>| v.ok_or_else(|| format!("op `{}` needs a `value`", c.op));
    let number = |v: Value| as_number(&v).ok_or_else(|| format!("op `{}` needs a numeric `value`", c.op));
    let op = match c.op {
        OpName::Eq => Op::Eq(need(c.value)?),
        OpName::Ne => Op::Ne(need(c.value)?),
        OpName::Contains => Op::Contains(as_text(&need(c.value)?)),
        OpName::Regex => {
            let pattern = as_text(&need(c.value)?);
            Op::Regex(Regex::new(&pattern).map_err(|e| format!("invalid regex {pattern:?}: {e}"))?)
        }
        OpName::Gt => Op::Gt(number(need(c.value)?)?),
        OpName::Lt => Op::Lt(number(need(c.value)?)?),
        OpName::Exists => Op::Exists,
        OpName::In => match need(c.value)? {
            Value::Array(items) => Op::In(items),
            _ => return Err("op `in` needs a list `value`".into()),
        },
    };
    Ok(Condition { operand, op })
}

impl Condition {
    fn holds(&self, msg: &Message, payload: Option<&Value>) -> bool {
        let actual = match &self.operand {
            Operand::Header(name) => msg.header(name).map(|v| v.to_json()),
            Operand::Subject => msg.subject().map(Value::String),
            Operand::Field(path) => payload.and_then(|p| lookup(p, path)).cloned(),
        };
        let Some(actual) = actual else {
            return matches!(self.op, Op::Ne(_));
        };
        match &self.op {
            Op::Eq(v) => loosely_equal(&actual, v),
            Op::Ne(v) => !loosely_equal(&actual, v),
            Op::Contains(needle) => match &actual {
                Value::Array(items) => items.iter().any(|i| as_text(i) == *needle),
                other => as_text(other).contains(needle.as_str()),
            },
            Op::Regex(re) => re.is_match(&as_text(&actual)),
            Op::Gt(n) => as_number(&actual).is_some_and(|a| a > *n),
            Op::Lt(n) => as_number(&actual).is_some_and(|a| a < *n),
            Op::Exists => true,
            Op::In(items) => items.iter().any(|i| loosely_equal(&actual, i)),
        }
    }
}

fn lookup<'a>(mut value: &'a Value, path: &[String]) -> Option<&'a Value> {
    for segment in path {
        value = match value {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// Numbers compare numerically; anything else by its text form, so a text
/// header "1" equals the config value 1 and an integer header 1 equals "1".
fn loosely_equal(a: &Value, b: &Value) -> bool {
    match (as_number(a), as_number(b)) {
        (Some(x), Some(y)) if a.is_number() || b.is_number() => x == y,
        _ => as_text(a) == as_text(b),
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use ferry_plugin_sdk::{decode_config, testing};

    fn msg() -> Message {
        testing::message()
            .header("kind", "temp")
            .header("mqtt.qos", 1)
            .header("site", "Malmö")
            .subject("order.created")
            .json(&json!({"reading": {"value": 21.5, "tags": ["a", "b"]}, "items": [{"id": 7}]}))
            .build()
    }

    fn filter(config: Value) -> Result<Filter, String> {
        Filter::new(decode_config(&config.to_string())?)
    }

    fn verdict(config: Value) -> Verdict {
        filter(config).expect("valid config").decide(&msg())
    }

    #[test]
    fn each_operator_on_headers_subject_and_fields() {
        let pass = |cond: Value| verdict(json!({"when": [cond]})) == Verdict::Pass;
        assert!(pass(json!({"header": "kind", "op": "eq", "value": "temp"})));
        assert!(!pass(json!({"header": "kind", "op": "eq", "value": "humidity"})));
        assert!(pass(json!({"header": "kind", "op": "ne", "value": "humidity"})));
        assert!(pass(json!({"header": "missing", "op": "ne", "value": "x"})));
        assert!(pass(json!({"header": "site", "op": "contains", "value": "mö"})));
        assert!(pass(json!({"subject": true, "op": "regex", "value": "^order\\."})));
        assert!(!pass(json!({"subject": true, "op": "regex", "value": "^invoice\\."})));
        assert!(pass(json!({"field": "reading.value", "op": "gt", "value": 20})));
        assert!(!pass(json!({"field": "reading.value", "op": "lt", "value": 20})));
        assert!(pass(json!({"field": "reading.tags", "op": "contains", "value": "b"})));
        assert!(pass(json!({"field": "items.0.id", "op": "eq", "value": 7})));
        assert!(pass(json!({"header": "kind", "op": "exists"})));
        assert!(!pass(json!({"header": "nope", "op": "exists"})));
        assert!(pass(json!({"header": "kind", "op": "in", "value": ["x", "temp"]})));
        assert!(pass(json!({"header": "mqtt.qos", "op": "eq", "value": "1"})));
        assert!(!pass(json!({"field": "reading.missing", "op": "eq", "value": 1})));
    }

    #[test]
    fn actions_and_defaults() {
        let cond = json!({"header": "kind", "op": "eq", "value": "temp"});
        let miss = json!({"header": "kind", "op": "eq", "value": "nope"});
        assert_eq!(verdict(json!({"when": [miss.clone()]})), Verdict::Drop("filtered".into()));
        assert_eq!(verdict(json!({"when": [cond.clone()], "action": "drop"})), Verdict::Drop("filtered".into()));
        assert_eq!(verdict(json!({"when": [miss.clone()], "action": "drop"})), Verdict::Pass);
        assert_eq!(
            verdict(json!({"when": [cond.clone()], "action": "route", "route": ["alerts/x"]})),
            Verdict::Route(vec!["alerts/x".into()])
        );
        assert_eq!(verdict(json!({"when": [cond.clone(), miss.clone()], "match": "any"})), Verdict::Pass);
        assert_eq!(verdict(json!({"when": [cond, miss]})), Verdict::Drop("filtered".into()));
        assert_eq!(verdict(json!({})), Verdict::Pass);
    }

    #[test]
    fn bad_configs_name_the_problem() {
        let err = |c: Value| filter(c).expect_err("must refuse");
        assert!(
            err(json!({"when": [{"header": "a", "op": "like", "value": 1}]}))
                .contains("when[0].op: unknown variant `like`")
        );
        assert!(err(json!({"when": [{"header": "a", "op": "regex", "value": "("}]})).contains("invalid regex"));
        assert!(err(json!({"when": [{"op": "exists"}]})).contains("exactly one"));
        assert!(err(json!({"when": [{"header": "a", "op": "gt", "value": "x"}]})).contains("numeric"));
        assert!(err(json!({"action": "route"})).contains("route"));
        assert!(err(json!({"colour": 1})).contains("colour"));
    }
}
