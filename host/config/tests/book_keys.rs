//! README's configuration tables against the schema derived from the config
//! types: every key a table names exists, and every key of those sections
//! is in a table, so the two cannot drift apart.

use std::collections::BTreeSet;

use serde_json::Value;

/// The backticked words of a table row's first cell.
fn keys_of_row(row: &str) -> Vec<String> {
    let cell = row.trim_start_matches('|').split('|').next().unwrap_or("");
    cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Table keys under each `### ` heading of README's configuration section.
fn readme_tables() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README");
    let start = readme.find("\n## Configuration").expect("a Configuration section");
    let end = readme[start..].find("\n### What happens to a message").map_or(readme.len(), |i| start + i);
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for line in readme[start..end].lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            tables.push((heading.to_owned(), Vec::new()));
        } else if line.starts_with("| `")
            && let Some((_, keys)) = tables.last_mut()
        {
            keys.extend(keys_of_row(line));
        }
    }
    tables
}

fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/")) {
        Some(name) => &schema["$defs"][name],
        None => node,
    }
}

fn properties(node: &Value) -> BTreeSet<String> {
    node["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()
}

/// The variant of a `type`-tagged enum (`ReceiverConfig`, `SenderConfig`).
fn variant<'a>(schema: &'a Value, enum_name: &str, tag: &str) -> &'a Value {
    schema["$defs"][enum_name]["oneOf"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["properties"]["type"]["const"] == tag)
        .unwrap_or_else(|| panic!("{enum_name} has no type = {tag:?}"))
}

/// Whether `key` is documented: named, covered by a `prefix_*` entry, or
/// the parent of dotted entries (`backoff` by `backoff.initial_ms`).
fn documented(key: &str, keys: &[String]) -> bool {
    keys.iter().any(|k| {
        k == key
            || k.strip_suffix('*').is_some_and(|prefix| key.starts_with(prefix))
            || k.strip_prefix(key).is_some_and(|rest| rest.starts_with('.'))
    })
}

#[test]
fn every_documented_key_exists_and_every_key_is_documented() {
    let schema = ferry_config::json_schema();
    let mut checked = 0;
    for (heading, keys) in readme_tables() {
        let target: Vec<(&str, &Value)> = if heading.starts_with("`[instance]`") {
            ["instance", "admin", "plugins", "store"]
                .into_iter()
                .map(|section| (section, resolve(&schema, &schema["properties"][section])))
                .collect()
        } else if heading.starts_with("`[endpoints.sqs]`") {
            vec![("endpoints.sqs", &schema["$defs"]["SqsEndpointConfig"])]
        } else if heading.starts_with("`[[routes]]`") {
            vec![("", &schema["$defs"]["RouteConfig"])]
        } else {
            let tag = heading.split("type = \"").nth(1).and_then(|r| r.split('"').next()).expect("a type tag");
            let enum_name = if heading.contains("receiver") { "ReceiverConfig" } else { "SenderConfig" };
            vec![("", variant(&schema, enum_name, tag))]
        };
        for (section, node) in target {
            let prefix = if section.is_empty() { String::new() } else { format!("{section}.") };
            let section_keys: Vec<String> =
                keys.iter().filter_map(|k| k.strip_prefix(prefix.as_str()).map(str::to_owned)).collect();
            let known = properties(node);
            for key in &section_keys {
                let top = key.split('.').next().unwrap_or(key).trim_end_matches('*');
                let exists = known.contains(top) || (key.ends_with('*') && known.iter().any(|k| k.starts_with(top)));
                assert!(exists, "README ({heading}) documents {prefix}{key}, which the config does not have");
                checked += 1;
            }
            for key in known.iter().filter(|k| *k != "type") {
                assert!(documented(key, &section_keys), "{prefix}{key} is not in README's table ({heading})");
            }
        }
    }
    assert!(checked > 80, "only {checked} keys found in README's tables");
}

/// `contrib/ferry.schema.json` is what `ferry schema` prints now, and every
/// example points editors at it with a `#:schema` line (taplo).
#[test]
fn the_committed_schema_is_current_and_the_examples_name_it() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let committed = std::fs::read_to_string(format!("{root}/contrib/ferry.schema.json")).expect("committed schema");
    let committed: Value = serde_json::from_str(&committed).expect("JSON");
    assert!(
        committed == ferry_config::json_schema(),
        "contrib/ferry.schema.json is stale: run `ferry schema > contrib/ferry.schema.json`"
    );
    let validator = jsonschema::validator_for(&committed).expect("a valid JSON Schema");
    let mut examples = 0;
    for entry in std::fs::read_dir(format!("{root}/examples")).expect("examples") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).expect("example");
            assert!(
                text.starts_with("#:schema ../contrib/ferry.schema.json\n"),
                "{} lacks the #:schema line",
                path.display()
            );
            ferry_config::parse_with_env(&text, &|_| None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // As an editor would see it once `${VAR:-default}` is filled in.
            let mut value: toml::Value = toml::from_str(&text).expect("TOML");
            ferry_config::substitute::substitute_value(&mut value, "", &|_| None, &mut Vec::new())
                .expect("substituted");
            let instance = serde_json::to_value(&value).expect("JSON");
            let errors: Vec<String> =
                validator.iter_errors(&instance).map(|e| format!("{} at {}", e, e.instance_path)).collect();
            assert!(errors.is_empty(), "{} does not match the schema: {errors:#?}", path.display());
            examples += 1;
        }
    }
    assert!(examples >= 6);
}
