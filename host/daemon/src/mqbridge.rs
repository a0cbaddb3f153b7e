//! Configs of mqbridge, the RabbitMQ ⇄ SimpleMQ bridge, read as they are
//! written: `ferry run -c bridges.jsonnet` (or `.json`). The file is
//! evaluated as Jsonnet (plain JSON is Jsonnet too) with mqbridge's native
//! functions, `std.native('env')(name, default)` and
//! `std.native('must_env')(name)`; `std.native('secret')` (a cloud secret
//! manager) is refused with a message saying what to use instead. The
//! result is checked as mqbridge checks it (an unknown field is an error)
//! and becomes ferry's TOML, which is then read like any config:
//! `ferry render -c bridges.jsonnet` prints it, so a user can move to it
//! for good. A variable `env()` or `must_env()` read stays a variable
//! there (`${NAME}`, `${NAME:-default}`), read when ferry loads the
//! config: the printed TOML holds no key that came from the environment,
//! and runs with the same environment as the Jsonnet file.
//!
//! What each bridge becomes, with mqbridge's semantics:
//!
//! - `from.rabbitmq` → an `amqp091` receiver (`queue`, `exchange`,
//!   `exchange_type` default `direct`, `routing_key` one or several,
//!   default `#`, `exchange_passive`), its `url` the bridge's or the global
//!   `rabbitmq.url`.
//! - `from.simplemq` → a `simplemq` receiver in mqbridge's wire format
//!   (`headers = "mqbridge"`), `polling_interval` a Go duration (default
//!   and fallback for a value that is not one: 1 s, as in mqbridge);
//!   `api_url` the bridge's, the global `simplemq.api_url`, or SimpleMQ's
//!   public endpoint.
//! - `to: [{ simplemq: … }]` → a `simplemq` sender each, in mqbridge's
//!   format; `to: [{ rabbitmq: {} }]` → an `amqp091` sender publishing to
//!   the exchange and routing key the message's `rabbitmq.exchange` and
//!   `rabbitmq.routing_key` headers name, which the SimpleMQ receiver then
//!   requires (a message without them is dropped and counted).
//! - one route per bridge, named by `name` (default `bridge-<index>`),
//!   fanned out to every destination when there are several.
//!
//! Refused as mqbridge refuses them: a bridge from RabbitMQ to RabbitMQ,
//! a bridge without destinations, a RabbitMQ side with no `url` here or
//! globally.

use std::path::Path;

use rsjsonnet_lang::arena::Arena;
use rsjsonnet_lang::interner::InternedStr;
use rsjsonnet_lang::program::{
    Callbacks, EvalError, EvalErrorKind, EvalStackTraceItem, ImportError, NativeError, Program, Thunk, Value,
};
use rsjsonnet_lang::span::SpanId;
use serde::Deserialize;
use toml::Table;

/// SimpleMQ's public endpoint, mqbridge's default `api_url`.
const SIMPLEMQ_API_URL: &str = "https://simplemq.tk1b.api.sacloud.jp";
/// mqbridge's `polling_interval` when none is given or it cannot be read.
const DEFAULT_POLL_MS: u64 = 1000;

/// For `ferry_config::read_foreign_with`: a `.jsonnet` or `.json` file as
/// ferry's TOML; `None` for any other file.
pub fn read(path: &Path, text: &str) -> Option<Result<String, String>> {
    let ext = path.extension().and_then(|e| e.to_str())?;
    if !matches!(ext, "jsonnet" | "libsonnet" | "json") {
        return None;
    }
    let env = |name: &str| std::env::var(name).ok();
    Some(to_toml(text, &path.display().to_string(), &env))
}

/// An mqbridge config (Jsonnet or JSON) as ferry's TOML, `${VAR}`
/// resolved through `env`.
pub fn to_toml(text: &str, file: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let json = evaluate(text, file, env)?;
    let config: MqBridge = serde_path_to_error::deserialize(json).map_err(|e| {
        let at = e.path().to_string();
        format!("mqbridge config: {at}: {}", e.into_inner())
    })?;
    let table = translate(&config)?;
    let header = format!(
        "# ferry's config made from the mqbridge config {file}: one route per bridge.\n\
         # Save it as a .toml file to run it as it is from now on.\n\n"
    );
    toml::to_string(&table).map(|t| header + &t).map_err(|e| format!("mqbridge config: {e}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MqBridge {
    #[serde(default)]
    rabbitmq: GlobalRabbit,
    #[serde(default)]
    simplemq: GlobalSimple,
    bridges: Vec<Bridge>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GlobalRabbit {
    url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GlobalSimple {
    api_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Bridge {
    name: Option<String>,
    from: Side<RabbitFrom, SimpleFrom>,
    to: Vec<Side<RabbitTo, SimpleTo>>,
}

/// One end of a bridge: exactly one of the two.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Side<R, S> {
    rabbitmq: Option<R>,
    simplemq: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RabbitFrom {
    url: Option<String>,
    queue: String,
    exchange: Option<String>,
    exchange_type: Option<String>,
    routing_key: Option<OneOrMany>,
    #[serde(default)]
    exchange_passive: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SimpleFrom {
    api_url: Option<String>,
    queue: String,
    api_key: String,
    polling_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RabbitTo {
    url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SimpleTo {
    api_url: Option<String>,
    queue: String,
    api_key: String,
}

/// Which of the two a side is; an error naming `what` when it is neither
/// or both.
fn one_of<'a, R, S>(side: &'a Side<R, S>, what: &str) -> Result<Result<&'a R, &'a S>, String> {
    match (&side.rabbitmq, &side.simplemq) {
        (Some(r), None) => Ok(Ok(r)),
        (None, Some(s)) => Ok(Err(s)),
        _ => Err(format!("{what}: give exactly one of rabbitmq and simplemq")),
    }
}

/// Where `env()` or `must_env()` read variable `NAME`, the value holds
/// `OPEN NAME CLOSE` (or `OPEN NAME DEFAULT_SEP default CLOSE`), which
/// becomes ferry's `${NAME}` (`${NAME:-default}`): the variable is read
/// when ferry loads the config, as mqbridge read it, and the TOML that
/// `ferry render` prints names it instead of holding its value (a key).
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';
const DEFAULT_SEP: char = '\u{E002}';

/// A variable's reference as a Jsonnet string value.
fn reference(name: &str, default: Option<&str>) -> String {
    match default {
        Some(d) => format!("{OPEN}{name}{DEFAULT_SEP}{d}{CLOSE}"),
        None => format!("{OPEN}{name}{CLOSE}"),
    }
}

/// Whether `${name}` / `${name:-default}` can stand for it in ferry's
/// TOML: a name of letters, digits and `_`, a default without `}` or `$`.
fn referable(name: &str, default: Option<&str>) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && default.is_none_or(|d| !d.contains(['}', '$', OPEN, CLOSE, DEFAULT_SEP]))
}

/// A string value as it must stand in ferry's TOML, whose string values
/// expand `${VAR}`: a `$` of mqbridge's is literal, and a variable read by
/// `env()` or `must_env()` becomes a reference ferry resolves.
fn literal(s: &str) -> toml::Value {
    let escaped = s.replace('$', "$$");
    toml::Value::String(escaped.replace(OPEN, "${").replace(DEFAULT_SEP, ":-").replace(CLOSE, "}"))
}

/// A Go duration (`1s`, `500ms`, `1m30s`, `1.5s`) in milliseconds.
fn go_duration_ms(s: &str) -> Option<u64> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-6,
            "us" | "µs" => 1e-3,
            "ms" => 1.0,
            "s" => 1e3,
            "m" => 60e3,
            "h" => 3600e3,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    // At least a millisecond: ferry polls no faster.
    Some((total.round() as u64).max(1))
}

fn translate(config: &MqBridge) -> Result<Table, String> {
    let (mut receivers, mut senders, mut routes) = (Table::new(), Table::new(), Vec::new());
    let rabbit_url = |own: &Option<String>, bridge: &str| {
        own.as_ref().or(config.rabbitmq.url.as_ref()).map(|u| literal(u)).ok_or_else(|| {
            format!("bridge {bridge}: rabbitmq.url is required (in the bridge's rabbitmq block or globally)")
        })
    };
    let api_url = |own: &Option<String>| {
        literal(own.as_deref().or(config.simplemq.api_url.as_deref()).unwrap_or(SIMPLEMQ_API_URL))
    };
    let mut seen = std::collections::BTreeSet::new();
    for (index, bridge) in config.bridges.iter().enumerate() {
        let name = bridge.name.clone().unwrap_or_else(|| format!("bridge-{index}"));
        if !seen.insert(name.clone()) {
            return Err(format!("bridges[{index}]: the name {name:?} is used by another bridge"));
        }
        let from = one_of(&bridge.from, &format!("bridge {name}: from"))?;
        if bridge.to.is_empty() {
            return Err(format!("bridge {name}: to lists no destination"));
        }
        let to_rabbit = bridge.to.iter().any(|t| t.rabbitmq.is_some());
        let receiver_name = format!("{name}-from");
        let mut receiver = Table::new();
        match from {
            Ok(r) => {
                if to_rabbit {
                    return Err(format!(
                        "bridge {name}: RabbitMQ to RabbitMQ is not supported (as in mqbridge); use RabbitMQ's exchange bindings or the shovel plugin"
                    ));
                }
                receiver.insert("type".into(), "amqp091".into());
                receiver.insert("url".into(), rabbit_url(&r.url, &name)?);
                receiver.insert("queue".into(), literal(&r.queue));
                if let Some(exchange) = &r.exchange {
                    receiver.insert("exchange".into(), literal(exchange));
                    receiver.insert("exchange_type".into(), literal(r.exchange_type.as_deref().unwrap_or("direct")));
                    let keys = match &r.routing_key {
                        None => vec!["#".to_owned()],
                        Some(OneOrMany::One(k)) => vec![k.clone()],
                        Some(OneOrMany::Many(ks)) => ks.clone(),
                    };
                    receiver
                        .insert("routing_key".into(), toml::Value::Array(keys.iter().map(|k| literal(k)).collect()));
                    if r.exchange_passive {
                        receiver.insert("exchange_passive".into(), true.into());
                    }
                }
            }
            Err(s) => {
                receiver.insert("type".into(), "simplemq".into());
                receiver.insert("queue".into(), literal(&s.queue));
                receiver.insert("api_key".into(), literal(&s.api_key));
                receiver.insert("api_url".into(), api_url(&s.api_url));
                let poll = s.polling_interval.as_deref().and_then(go_duration_ms).unwrap_or(DEFAULT_POLL_MS);
                receiver.insert(
                    "polling_interval_ms".into(),
                    toml::Value::Integer(i64::try_from(poll).unwrap_or(i64::MAX)),
                );
                receiver.insert("headers".into(), "mqbridge".into());
                if to_rabbit {
                    receiver.insert("require_rabbitmq_headers".into(), true.into());
                }
            }
        }
        receivers.insert(receiver_name.clone(), receiver.into());
        let mut bindings = Vec::new();
        for (i, to) in bridge.to.iter().enumerate() {
            let sender_name = format!("{name}-to-{i}");
            let mut sender = Table::new();
            let mut binding = Table::new();
            binding.insert("sender".into(), sender_name.clone().into());
            match one_of(to, &format!("bridge {name}: to[{i}]"))? {
                Ok(r) => {
                    sender.insert("type".into(), "amqp091".into());
                    sender.insert("url".into(), rabbit_url(&r.url, &name)?);
                    sender.insert("exchange_from_header".into(), true.into());
                    binding.insert("address".into(), "{amqp091.routing-key}".into());
                }
                Err(s) => {
                    sender.insert("type".into(), "simplemq".into());
                    sender.insert("queue".into(), literal(&s.queue));
                    sender.insert("api_key".into(), literal(&s.api_key));
                    sender.insert("api_url".into(), api_url(&s.api_url));
                    sender.insert("headers".into(), "mqbridge".into());
                }
            }
            senders.insert(sender_name, sender.into());
            bindings.push(toml::Value::Table(binding));
        }
        let mut route = Table::new();
        route.insert("id".into(), literal(&name));
        route.insert("receiver".into(), receiver_name.into());
        if bindings.len() > 1 {
            route.insert("dispatch_mode".into(), "fan_out".into());
        }
        route.insert("bindings".into(), toml::Value::Array(bindings));
        routes.push(toml::Value::Table(route));
    }
    let mut table = Table::new();
    table.insert("receivers".into(), receivers.into());
    table.insert("senders".into(), senders.into());
    table.insert("routes".into(), toml::Value::Array(routes));
    Ok(table)
}

/// Evaluates `text` as Jsonnet with mqbridge's native functions.
fn evaluate(text: &str, file: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<serde_json::Value, String> {
    let arena = Arena::new();
    let mut program = Program::new(&arena);
    for (name, params) in
        [("env", &["name", "default"][..]), ("must_env", &["name"][..]), ("secret", &["vault", "name"][..])]
    {
        let params: Vec<InternedStr<'_>> = params.iter().map(|p| program.intern_str(p)).collect();
        let name = program.intern_str(name);
        program.register_native_func(name, &params);
    }
    let (span_ctx, _) = program.span_manager_mut().insert_source_context(text.len());
    let thunk = program
        .load_source(span_ctx, text.as_bytes(), true, file)
        .map_err(|e| format!("{file}: not Jsonnet: {e:?}"))?;
    let mut natives = Natives { env, failure: None };
    let value = program.eval_value(&thunk, &mut natives).map_err(|e| match natives.failure.take() {
        Some(why) => format!("{file}: {why}"),
        None => format!("{file}: {}", eval_error(&e, text, &program)),
    })?;
    let json =
        program.manifest_json(&value, false).map_err(|e| format!("{file}: {}", eval_error(&e, text, &program)))?;
    serde_json::from_str(&json).map_err(|e| format!("{file}: {e}"))
}

/// The line a span starts on, 1-based.
fn line_of(span: SpanId, text: &str, program: &Program<'_>) -> usize {
    let (_, start, _) = program.span_manager().get_span(span);
    text.as_bytes()[..start.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

fn eval_error(e: &EvalError, text: &str, program: &Program<'_>) -> String {
    let line = e.stack_trace.iter().find_map(|item| match item {
        EvalStackTraceItem::Expr { span } | EvalStackTraceItem::Variable { span, .. } => Some(*span),
        _ => None,
    });
    let what = match &e.kind {
        EvalErrorKind::ExplicitError { message, .. } => message.clone(),
        other => format!("{other:?}"),
    };
    match line {
        Some(span) => format!("line {}: {what}", line_of(span, text, program)),
        None => what,
    }
}

/// mqbridge's native functions; the reason a call failed, which the
/// evaluator's error cannot carry.
struct Natives<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    failure: Option<String>,
}

impl<'p> Callbacks<'p> for Natives<'_> {
    fn import(&mut self, _: &mut Program<'p>, _: SpanId, path: &str) -> Result<Thunk<'p>, ImportError> {
        self.failure = Some(format!("import {path:?}: an mqbridge config is one file"));
        Err(ImportError)
    }

    fn import_str(&mut self, _: &mut Program<'p>, _: SpanId, path: &str) -> Result<String, ImportError> {
        self.failure = Some(format!("importstr {path:?}: an mqbridge config is one file"));
        Err(ImportError)
    }

    fn import_bin(&mut self, _: &mut Program<'p>, _: SpanId, path: &str) -> Result<Vec<u8>, ImportError> {
        self.failure = Some(format!("importbin {path:?}: an mqbridge config is one file"));
        Err(ImportError)
    }

    fn trace(&mut self, _: &mut Program<'p>, message: &str, _: &[EvalStackTraceItem]) {
        tracing::info!(message, "std.trace in the mqbridge config");
    }

    fn native_call(
        &mut self,
        _: &mut Program<'p>,
        name: InternedStr<'p>,
        args: &[Value<'p>],
    ) -> Result<Value<'p>, NativeError> {
        let arg = |i: usize| args.get(i).and_then(Value::to_string);
        let result = match (name.value(), arg(0)) {
            ("env", Some(var)) => {
                let default = args.get(1).and_then(Value::to_string);
                match (self.env)(&var) {
                    // A string default goes with the reference, so the
                    // variable may also be unset when ferry runs.
                    _ if default.is_some() && referable(&var, default.as_deref()) => {
                        Ok(Value::string(&reference(&var, default.as_deref())))
                    }
                    Some(_) if referable(&var, None) => Ok(Value::string(&reference(&var, None))),
                    Some(v) => Ok(Value::string(&v)),
                    None => Ok(args.get(1).cloned().unwrap_or_else(Value::null)),
                }
            }
            ("must_env", Some(var)) => match (self.env)(&var) {
                Some(_) if referable(&var, None) => Ok(Value::string(&reference(&var, None))),
                Some(v) => Ok(Value::string(&v)),
                None => Err(format!("must_env: {var} is not set")),
            },
            ("secret", _) => Err("secret(): ferry does not read Sakura Cloud Secret Manager; give the value with env() or must_env(), or render the config (ferry render) and read it from a file there ({ file = \"/run/secrets/…\" })".to_owned()),
            (other, _) => Err(format!("{other}(): its first argument must be a string")),
        };
        result.map_err(|why| {
            self.failure = Some(why);
            NativeError
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three bridges of mqbridge's README, as written there.
    const README: &str = r"
local must_env = std.native('must_env');
{
  rabbitmq: {
    url: must_env('RABBITMQ_URL'),
  },
  simplemq: {
    api_url: 'http://localhost:18080',
  },
  bridges: [
    {
      name: 'rmq-to-smq',
      from: {
        rabbitmq: {
          queue: 'source-queue',
          exchange: 'source-exchange',
          exchange_type: 'topic',
          routing_key: '#',
          exchange_passive: false,
        },
      },
      to: [
        { simplemq: { queue: 'dest-queue-1', api_key: must_env('SIMPLEMQ_API_KEY_1') } },
        { simplemq: { queue: 'dest-queue-2', api_key: must_env('SIMPLEMQ_API_KEY_2') } },
      ],
    },
    {
      name: 'smq-to-rmq',
      from: {
        simplemq: {
          queue: 'inbound-queue',
          api_key: must_env('SIMPLEMQ_API_KEY_INBOUND'),
          polling_interval: '1s',
        },
      },
      to: [
        { rabbitmq: {} },
      ],
    },
    {
      name: 'smq-to-smq',
      from: {
        simplemq: {
          queue: 'source-queue',
          api_key: must_env('SIMPLEMQ_API_KEY_SOURCE'),
          polling_interval: '250ms',
        },
      },
      to: [
        { simplemq: { queue: 'fanout-queue-1', api_key: must_env('SIMPLEMQ_API_KEY_FANOUT_1') } },
        { simplemq: { queue: 'fanout-queue-2', api_key: must_env('SIMPLEMQ_API_KEY_FANOUT_2') } },
      ],
    },
  ],
}
";

    fn env(name: &str) -> Option<String> {
        match name {
            "RABBITMQ_URL" => Some("amqp://guest:guest@127.0.0.1:5672/%2f".into()),
            n if n.starts_with("SIMPLEMQ_API_KEY") => Some(format!("key-{}", n.to_lowercase())),
            _ => None,
        }
    }

    fn toml_of(text: &str) -> Result<Table, String> {
        to_toml(text, "test.jsonnet", &env).map(|t| t.parse::<Table>().expect("TOML"))
    }

    #[test]
    fn the_readme_bridges_become_three_routes_with_their_semantics() {
        let t = toml_of(README).expect("translated");
        let r = &t["receivers"];
        assert_eq!(r["rmq-to-smq-from"]["type"].as_str(), Some("amqp091"));
        assert_eq!(r["rmq-to-smq-from"]["url"].as_str(), Some("${RABBITMQ_URL}"), "must_env's variable, read by ferry");
        assert_eq!(r["rmq-to-smq-from"]["exchange_type"].as_str(), Some("topic"));
        assert_eq!(r["rmq-to-smq-from"]["routing_key"].as_array().map(Vec::len), Some(1));
        assert_eq!(r["smq-to-rmq-from"]["require_rabbitmq_headers"].as_bool(), Some(true));
        assert_eq!(r["smq-to-rmq-from"]["polling_interval_ms"].as_integer(), Some(1000));
        assert_eq!(r["smq-to-smq-from"]["polling_interval_ms"].as_integer(), Some(250));
        assert_eq!(r["smq-to-smq-from"]["api_url"].as_str(), Some("http://localhost:18080"), "the global api_url");
        assert!(r["smq-to-smq-from"].get("require_rabbitmq_headers").is_none());
        let s = &t["senders"];
        assert_eq!(s["rmq-to-smq-to-1"]["queue"].as_str(), Some("dest-queue-2"));
        assert_eq!(
            s["rmq-to-smq-to-1"]["api_key"].as_str(),
            Some("${SIMPLEMQ_API_KEY_2}"),
            "the key stays in the environment"
        );
        assert_eq!(s["rmq-to-smq-to-1"]["headers"].as_str(), Some("mqbridge"));
        assert_eq!(s["smq-to-rmq-to-0"]["type"].as_str(), Some("amqp091"));
        assert_eq!(s["smq-to-rmq-to-0"]["exchange_from_header"].as_bool(), Some(true));
        let routes = t["routes"].as_array().expect("routes");
        assert_eq!(routes.len(), 3);
        assert_eq!(routes[0]["dispatch_mode"].as_str(), Some("fan_out"));
        assert!(routes[1].get("dispatch_mode").is_none());
        assert_eq!(routes[1]["bindings"][0]["address"].as_str(), Some("{amqp091.routing-key}"));
    }

    #[test]
    fn the_translation_is_a_config_ferry_reads_with_the_same_environment() {
        let text = to_toml(README, "test.jsonnet", &env).expect("translated");
        assert!(!text.contains("key-simplemq"), "no key from the environment is written out:\n{text}");
        let config = ferry_config::parse_with_env(&text, &env).expect("ferry reads it");
        assert_eq!(config.routes.len(), 3);
        let key = config.senders["rmq-to-smq-to-0"].0.keys["api_key"].as_str().map(str::to_owned);
        assert_eq!(key.as_deref(), Some("key-simplemq_api_key_1"), "read from the environment when ferry loads it");
        let fallback = to_toml(
            "local env = std.native('env'); { bridges: [{ name: 'b', from: { simplemq: { queue: env('UNSET_QUEUE', 'q'), api_key: 'k' } }, to: [{ simplemq: { queue: 'd', api_key: 'k' } }] }] }",
            "t.jsonnet",
            &env,
        )
        .expect("translated");
        let config = ferry_config::parse_with_env(&fallback, &env).expect("ferry reads it");
        assert_eq!(config.receivers["b-from"].0.keys["queue"].as_str(), Some("q"), "env()'s default");
    }

    #[test]
    fn a_bridge_url_overrides_the_global_one_and_routing_keys_may_be_a_list() {
        let t = toml_of(
            "{ rabbitmq: { url: 'amqp://default/' }, bridges: [
               { from: { rabbitmq: { url: 'amqp://other/', queue: 'q', exchange: 'x', routing_key: ['a.*', 'b.*'] } },
                 to: [{ simplemq: { queue: 'd', api_key: 'k' } }] },
               { from: { rabbitmq: { queue: 'q2', exchange: 'x2' } }, to: [{ simplemq: { queue: 'd2', api_key: 'k2' } }] } ] }",
        )
        .expect("translated");
        let r = &t["receivers"];
        assert_eq!(r["bridge-0-from"]["url"].as_str(), Some("amqp://other/"));
        assert_eq!(r["bridge-0-from"]["routing_key"].as_array().map(Vec::len), Some(2));
        assert_eq!(r["bridge-1-from"]["url"].as_str(), Some("amqp://default/"));
        assert_eq!(r["bridge-1-from"]["exchange_type"].as_str(), Some("direct"), "mqbridge's default");
        assert_eq!(r["bridge-1-from"]["routing_key"][0].as_str(), Some("#"), "mqbridge's default");
        assert_eq!(t["senders"]["bridge-0-to-0"]["api_url"].as_str(), Some(SIMPLEMQ_API_URL));
    }

    #[test]
    fn what_mqbridge_refuses_is_refused_by_name() {
        let cases = [
            ("{ bridges: [], extra: 1 }", "extra"),
            ("{ bridges: [{ from: { rabbitmq: { queue: 'q', exchange: 'x', colour: 'red' } }, to: [] }] }", "colour"),
            (
                "{ rabbitmq: { url: 'amqp://h/' }, bridges: [{ name: 'loop', from: { rabbitmq: { queue: 'q' } }, to: [{ rabbitmq: {} }] }] }",
                "RabbitMQ to RabbitMQ",
            ),
            (
                "{ bridges: [{ name: 'b', from: { rabbitmq: { queue: 'q' } }, to: [{ simplemq: { queue: 'd', api_key: 'k' } }] }] }",
                "rabbitmq.url",
            ),
            (
                "{ bridges: [{ name: 'b', from: { simplemq: { queue: 'q', api_key: 'k' } }, to: [] }] }",
                "no destination",
            ),
            ("{ bridges: [{ name: 'b', from: {}, to: [{ simplemq: { queue: 'd', api_key: 'k' } }] }] }", "exactly one"),
            (
                "{ bridges: [{ from: { simplemq: { queue: 'q', api_key: std.native('must_env')('NOT_SET_ANYWHERE') } }, to: [] }] }",
                "NOT_SET_ANYWHERE is not set",
            ),
            (
                "local secret = std.native('secret'); { bridges: [{ from: { simplemq: { queue: 'q', api_key: secret('v', 'n') } }, to: [] }] }",
                "Secret Manager",
            ),
            ("{ bridges: [ }", "not Jsonnet"),
            ("{ bridges: error 'broken on purpose' }", "broken on purpose"),
        ];
        for (text, says) in cases {
            let e = to_toml(text, "t.jsonnet", &env).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn env_falls_back_to_its_default_and_dollars_stay_literal() {
        let t = toml_of(
            "local env = std.native('env'); { bridges: [{ name: 'b', from: { simplemq: { queue: env('UNSET_QUEUE', 'fallback'), api_key: 'k$1', polling_interval: 'soon' } }, to: [{ simplemq: { queue: 'd', api_key: 'k' } }] }] }",
        )
        .expect("translated");
        let r = &t["receivers"]["b-from"];
        assert_eq!(r["queue"].as_str(), Some("${UNSET_QUEUE:-fallback}"));
        assert_eq!(r["api_key"].as_str(), Some("k$$1"), "ferry reads $$ as one $");
        assert_eq!(
            r["polling_interval_ms"].as_integer(),
            Some(1000),
            "a value that is not a duration falls back to 1 s"
        );
        let text = to_toml(
            "{ bridges: [{ name: 'b', from: { simplemq: { queue: 'q${HOME}', api_key: 'k' } }, to: [{ simplemq: { queue: 'd', api_key: 'k' } }] }] }",
            "t.jsonnet",
            &env,
        )
        .expect("translated");
        let config = ferry_config::parse_with_env(&text, &|_| Some("expanded".into())).expect("ferry reads it");
        let queue = config.receivers["b-from"].0.keys["queue"].as_str().map(str::to_owned);
        assert_eq!(queue.as_deref(), Some("q${HOME}"), "mqbridge's ${{HOME}} is text, not a variable");
    }

    #[test]
    fn go_durations_are_read() {
        assert_eq!(go_duration_ms("1s"), Some(1000));
        assert_eq!(go_duration_ms("500ms"), Some(500));
        assert_eq!(go_duration_ms("1m30s"), Some(90_000));
        assert_eq!(go_duration_ms("1.5s"), Some(1500));
        assert_eq!(go_duration_ms("10"), None);
        assert_eq!(go_duration_ms(""), None);
        assert_eq!(go_duration_ms("1d"), None);
    }

    #[test]
    fn only_jsonnet_and_json_files_are_read_as_mqbridge() {
        assert!(read(Path::new("ferry.toml"), "").is_none());
        assert!(read(Path::new("bridges.json"), "{\"bridges\": []}").is_some());
    }
}
