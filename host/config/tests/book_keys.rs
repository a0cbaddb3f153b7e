//! The book's configuration tables against the schema derived from the
//! config types: every key a table names exists, and every key of those
//! sections is in a table, so the two cannot drift apart. The tables are
//! the ones under the headings that name a section: "`[instance]`, …" in
//! operating/configuration.md, "`[[routes]]`" in concepts/routes.md, and
//! "X receiver (`type = "x"` …)", "X sender (…)" and "`[endpoints.sqs]`" in
//! the transport pages.

use std::collections::BTreeSet;

use serde_json::Value;

/// The backticked words of a table row's first cell.
fn keys_of_row(row: &str) -> Vec<String> {
    let cell = row.trim_start_matches('|').split('|').next().unwrap_or("");
    cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Whether a heading names a config section whose keys a table lists.
fn names_a_section(heading: &str) -> bool {
    heading.starts_with("`[instance]`")
        || heading.starts_with("`[endpoints.sqs]`")
        || heading.starts_with("`[[routes]]`")
        || heading.contains("(`type = ")
}

/// The book pages with key tables.
fn pages() -> Vec<std::path::PathBuf> {
    let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src"));
    let mut pages = vec![src.join("operating/configuration.md"), src.join("concepts/routes.md")];
    let mut transports: Vec<_> = std::fs::read_dir(src.join("transports"))
        .expect("docs/src/transports")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    transports.sort();
    pages.extend(transports);
    pages
}

/// Table keys under each section heading of the book's pages; a table
/// ends at the next heading of any level.
fn book_tables() -> Vec<(String, Vec<String>)> {
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let mut current: Option<usize> = None;
        let mut in_code = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_code = !in_code;
            }
            if in_code {
                continue;
            }
            if line.starts_with('#') {
                let heading = line.trim_start_matches('#').trim();
                current = names_a_section(heading).then(|| {
                    tables.push((heading.to_owned(), Vec::new()));
                    tables.len() - 1
                });
            } else if line.starts_with("| `")
                && let Some(i) = current
            {
                tables[i].1.extend(keys_of_row(line));
            }
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
    for (heading, keys) in book_tables() {
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
                assert!(exists, "the book ({heading}) documents {prefix}{key}, which the config does not have");
                checked += 1;
            }
            for key in known.iter().filter(|k| *k != "type") {
                assert!(documented(key, &section_keys), "{prefix}{key} is not in the book's table ({heading})");
            }
        }
    }
    assert!(checked > 80, "only {checked} keys found in the book's tables");
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
