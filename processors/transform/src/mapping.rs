//! The transform's mapping rules, independent of the host so they can be
//! unit tested natively.

use ferry_plugin_sdk::names::{self, ORDERING_KEY};
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    to: String,
    from: Option<String>,
    from_header: Option<String>,
    value: Option<Value>,
    #[serde(rename = "type")]
    kind: Option<Kind>,
    default: Option<Value>,
    #[serde(default)]
    required: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    name: String,
    from: Option<String>,
    from_field: Option<String>,
    #[serde(rename = "type")]
    kind: Option<Kind>,
    default: Option<Value>,
    #[serde(default)]
    required: bool,
}

/// The transform's config (the route's `config` table).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    #[serde(default)]
    keep: bool,
    #[serde(default)]
    fields: Vec<RawField>,
    #[serde(default)]
    headers: Vec<RawHeader>,
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    String,
    Number,
    Integer,
    Boolean,
}

#[derive(Debug)]
enum Source {
    Input(Vec<Step>),
    Output(Vec<Step>),
    Header(String),
    Const(Value),
}

#[derive(Debug)]
struct Rule {
    /// Output field path or header name, for messages.
    target: String,
    source: Source,
    kind: Option<Kind>,
    default: Option<Value>,
    required: bool,
}

/// A validated transform configuration.
#[derive(Debug)]
pub struct Transform {
    keep: bool,
    fields: Vec<(Vec<String>, Rule)>,
    headers: Vec<Rule>,
}

/// What a transform produced: the new document and the headers to set.
#[derive(Debug, PartialEq)]
pub struct Output {
    pub document: Value,
    pub headers: Vec<(String, Value)>,
}

/// Parses a JSONPath-style path: `$`, `$.a.b`, `$.a[0]`, `$['a b'].c`; the
/// leading `$` is optional (`a.b`).
fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    let bad = |why: &str| format!("path {path:?}: {why}");
    let rest = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    // A path without `$` may start with a bare name.
    let mut expect_name = !path.starts_with('$');
    while i < chars.len() || expect_name {
        if expect_name || chars[i] == '.' {
            if !expect_name {
                i += 1;
            }
            expect_name = false;
            let start = i;
            while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                i += 1;
            }
            if start == i {
                return Err(bad("empty name"));
            }
            steps.push(Step::Key(chars[start..i].iter().collect()));
        } else if chars[i] == '[' {
            let close = chars[i..].iter().position(|c| *c == ']').map(|p| p + i).ok_or_else(|| bad("missing ]"))?;
            let inner: String = chars[i + 1..close].iter().collect();
            let quoted = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            match quoted {
                Some(name) => steps.push(Step::Key(name.to_owned())),
                None => steps.push(Step::Index(inner.trim().parse().map_err(|_| bad("index is not a number"))?)),
            }
            i = close + 1;
        } else {
            return Err(bad("expected . or ["));
        }
    }
    Ok(steps)
}

fn lookup<'a>(doc: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, step| match step {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(*i),
    })
}

/// Converts `value` to `kind`.
fn coerce(value: Value, kind: Kind) -> Result<Value, String> {
    let fail = |v: &Value| Err(format!("cannot make {v} a {kind:?}").to_lowercase());
    match kind {
        Kind::String => Ok(match value {
            Value::String(s) => Value::String(s),
            Value::Number(n) => Value::String(n.to_string()),
            Value::Bool(b) => Value::String(b.to_string()),
            other => Value::String(other.to_string()),
        }),
        Kind::Number => match &value {
            Value::Number(_) => Ok(value),
            Value::Bool(b) => Ok(Value::from(u8::from(*b))),
            Value::String(s) => {
                let t = s.trim();
                if let Ok(i) = t.parse::<i64>() {
                    Ok(Value::from(i))
                } else {
                    match t.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                        Some(n) => Ok(Value::Number(n)),
                        None => fail(&value),
                    }
                }
            }
            _ => fail(&value),
        },
        Kind::Integer => match coerce(value.clone(), Kind::Number)? {
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(Value::Number(n)),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Value::from(f as i64)),
                _ => fail(&value),
            },
            _ => fail(&value),
        },
        Kind::Boolean => match &value {
            Value::Bool(_) => Ok(value),
            Value::Number(n) => Ok(Value::Bool(n.as_f64().is_some_and(|f| f != 0.0))),
            Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Ok(Value::Bool(true)),
                "false" | "no" | "off" | "0" => Ok(Value::Bool(false)),
                _ => fail(&value),
            },
            _ => fail(&value),
        },
    }
}

fn set_path(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let mut cur = doc;
    for (i, key) in path.iter().enumerate() {
        let Value::Object(map) = cur else {
            return Err(format!("{}: {:?} is not an object", path.join("."), path[..i].join(".")));
        };
        if i + 1 == path.len() {
            map.insert(key.clone(), value);
            return Ok(());
        }
        cur = map.entry(key.clone()).or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

impl Rule {
    fn resolve(
        &self,
        input: &Value,
        output: &Value,
        header: &dyn Fn(&str) -> Option<Value>,
    ) -> Result<Option<Value>, String> {
        let found = match &self.source {
            Source::Input(p) => lookup(input, p).cloned(),
            Source::Output(p) => lookup(output, p).cloned(),
            Source::Header(h) => header(h),
            Source::Const(v) => Some(v.clone()),
        }
        .filter(|v| !v.is_null());
        let value = match (found, &self.default) {
            (Some(v), _) => v,
            (None, Some(d)) => d.clone(),
            (None, None) if self.required => return Err(format!("{}: required source is missing", self.target)),
            (None, None) => return Ok(None),
        };
        match self.kind {
            Some(kind) => coerce(value, kind).map(Some).map_err(|e| format!("{}: {e}", self.target)),
            None => Ok(Some(value)),
        }
    }
}

impl Transform {
    /// Checks the decoded config.
    pub fn new(raw: TransformConfig) -> Result<Self, String> {
        let mut fields = Vec::new();
        for (i, f) in raw.fields.into_iter().enumerate() {
            let target = format!("fields[{i}] ({})", f.to);
            let to: Vec<String> = f.to.split('.').map(str::to_owned).collect();
            if to.iter().any(String::is_empty) {
                return Err(format!("{target}: `to` must be a dotted path of names"));
            }
            let source = match (f.from, f.from_header, f.value) {
                (Some(p), None, None) => Source::Input(parse_path(&p).map_err(|e| format!("{target}: {e}"))?),
                (None, Some(h), None) => Source::Header(h),
                (None, None, Some(v)) => Source::Const(v),
                _ => return Err(format!("{target}: give exactly one of `from`, `from_header` or `value`")),
            };
            let rule = Rule { target: f.to.clone(), source, kind: f.kind, default: f.default, required: f.required };
            fields.push((to, rule));
        }
        let mut headers = Vec::new();
        for (i, h) in raw.headers.into_iter().enumerate() {
            let target = format!("headers[{i}] ({})", h.name);
            let reserved = names::is_reserved(&h.name.to_ascii_lowercase());
            if h.name.is_empty() || (reserved && h.name != ORDERING_KEY) {
                return Err(format!(
                    "{target}: a header name must be given and may not be a reserved x-bridge.* name \
                     (but for {ORDERING_KEY}, with the route's ordering_key grant)"
                ));
            }
            let source = match (h.from, h.from_field) {
                (Some(p), None) => Source::Input(parse_path(&p).map_err(|e| format!("{target}: {e}"))?),
                (None, Some(p)) => Source::Output(parse_path(&p).map_err(|e| format!("{target}: {e}"))?),
                _ => return Err(format!("{target}: give exactly one of `from` or `from_field`")),
            };
            headers.push(Rule { target: h.name, source, kind: h.kind, default: h.default, required: h.required });
        }
        if fields.is_empty() && headers.is_empty() && !raw.keep {
            return Err("no `fields` or `headers`; the payload would become {}".into());
        }
        Ok(Self { keep: raw.keep, fields, headers })
    }

    /// Applies the mapping to `input`; `header` reads the message's headers.
    pub fn apply(&self, input: &Value, header: impl Fn(&str) -> Option<Value>) -> Result<Output, String> {
        let mut document = if self.keep {
            match input {
                Value::Object(_) => input.clone(),
                _ => return Err("keep = true needs a JSON object payload".into()),
            }
        } else {
            Value::Object(Map::new())
        };
        for (to, rule) in &self.fields {
            if let Some(v) = rule.resolve(input, &document, &header)? {
                set_path(&mut document, to, v)?;
            }
        }
        let mut headers = Vec::new();
        for rule in &self.headers {
            if let Some(v) = rule.resolve(input, &document, &header)? {
                headers.push((rule.target.clone(), v));
            }
        }
        Ok(Output { document, headers })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn transform(config: Value) -> Result<Transform, String> {
        Transform::new(ferry_plugin_sdk::decode_config(&config.to_string())?)
    }

    fn run(config: Value, input: Value) -> Result<Output, String> {
        let headers = |name: &str| (name == "device-id").then(|| json!("dev-7"));
        transform(config)?.apply(&input, headers)
    }

    #[test]
    fn paths_parse() {
        assert_eq!(parse_path("$").unwrap(), vec![]);
        assert_eq!(
            parse_path("$.a['b c'][2].d").unwrap(),
            vec![Step::Key("a".into()), Step::Key("b c".into()), Step::Index(2), Step::Key("d".into())]
        );
        assert_eq!(parse_path("a.b").unwrap(), vec![Step::Key("a".into()), Step::Key("b".into())]);
        assert!(parse_path("$.a[x]").is_err());
        assert!(parse_path("$..a").is_err());
        assert!(parse_path("$.a[0").is_err());
    }

    #[test]
    fn maps_coerces_defaults_and_copies_headers() {
        let out = run(
            json!({
                "fields": [
                    {"to": "celsius", "from": "$.reading.value", "type": "number"},
                    {"to": "meta.site", "from": "$.meta['site name']", "default": "unknown"},
                    {"to": "device", "from_header": "device-id"},
                    {"to": "schema", "value": 2},
                    {"to": "ok", "from": "$.status", "type": "boolean"},
                    {"to": "first", "from": "$.list[0]", "type": "string"},
                    {"to": "absent", "from": "$.nope"},
                ],
                "headers": [
                    {"name": "kind", "from": "$.type"},
                    {"name": "celsius", "from_field": "celsius", "type": "integer"},
                ],
            }),
            json!({"reading": {"value": "21"}, "status": "yes", "list": [7, 8], "type": "temp"}),
        )
        .unwrap();
        assert_eq!(
            out.document,
            json!({"celsius": 21, "meta": {"site": "unknown"}, "device": "dev-7", "schema": 2, "ok": true, "first": "7"})
        );
        assert_eq!(out.headers, vec![("kind".into(), json!("temp")), ("celsius".into(), json!(21))]);
    }

    #[test]
    fn keep_starts_from_the_input() {
        let out = run(json!({"keep": true, "fields": [{"to": "b", "value": 1}]}), json!({"a": 0})).unwrap();
        assert_eq!(out.document, json!({"a": 0, "b": 1}));
        assert!(run(json!({"keep": true}), json!([1])).unwrap_err().contains("object"));
    }

    #[test]
    fn failures_name_the_field() {
        let required = json!({"fields": [{"to": "x", "from": "$.x", "required": true}]});
        assert_eq!(run(required, json!({})).unwrap_err(), "x: required source is missing");
        let bad = json!({"fields": [{"to": "n", "from": "$.n", "type": "number"}]});
        assert_eq!(run(bad, json!({"n": "many"})).unwrap_err(), "n: cannot make \"many\" a number");
        let frac = json!({"fields": [{"to": "n", "from": "$.n", "type": "integer"}]});
        assert!(run(frac, json!({"n": 1.5})).is_err());
    }

    #[test]
    fn the_ordering_key_is_the_one_reserved_header_a_transform_may_name() {
        let t = transform(json!({"keep": true, "headers": [{"name": ORDERING_KEY, "from": "$.device"}]}));
        assert!(t.is_ok(), "{:?}", t.err());
    }

    #[test]
    fn config_errors_are_refused_at_init() {
        for bad in [
            json!({"fields": [{"to": "a", "from": "$.a", "value": 1}]}),
            json!({"fields": [{"to": "a", "from": "$.a", "type": "date"}]}),
            json!({"fields": [{"to": "a..b", "value": 1}]}),
            json!({"headers": [{"name": "x-bridge.route-id", "from": "$.a"}]}),
            json!({"fields": [], "colour": "blue"}),
            json!({}),
        ] {
            assert!(transform(bad.clone()).is_err(), "{bad} should be refused");
        }
    }
}
