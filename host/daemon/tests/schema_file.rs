//! `contrib/ferry.schema.json` is what the config types say now (the
//! document's in `host/config`, every transport's in its crate), and every
//! example names it. (The book's key tables are generated from the same
//! schema: `ferry reference`, checked by `the_book_reference_is_current`.)

use serde_json::Value;

/// `contrib/ferry.schema.json` is what `ferry schema` prints now, and every
/// example points editors at it with a `#:schema` line (taplo).
#[test]
fn the_committed_schema_is_current_and_the_examples_name_it() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let committed = std::fs::read_to_string(format!("{root}/contrib/ferry.schema.json")).expect("committed schema");
    let committed: Value = serde_json::from_str(&committed).expect("JSON");
    assert!(
        committed == ferry_daemon::transports::json_schema(),
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
