//! `ferry plugins list` and `ferry plugins check` on real components: the
//! built filter loads, a component for another version of the contract and
//! a file that is not a component are refused with the reason.

use ferry_tests::daemon::Workspace;
use ferry_tests::plugin_file;

#[test]
fn list_and_check_tell_which_components_load_and_why_not() {
    let ws = Workspace::with_plugins(&["filter", "filter-previous"]);
    let plugins = ws.path().join("plugins");
    let future = wat::parse_file(ferry_tests::repo_root().join("tests/plugins/future-version.wat")).expect("wat");
    std::fs::write(plugins.join("future-version.wasm"), future).expect("write");
    std::fs::write(plugins.join("broken.wasm"), b"not a component").expect("write");

    let out = ws.ferry(&["plugins", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a refused component makes list fail:\n{text}");
    let line = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_owned();
    let filter = line("filter ");
    assert!(filter.contains("ferry:plugin/processor@1.3.0") && filter.ends_with("yes"), "{text}");
    // Built against the previous minor: loads, and says so.
    let previous = line("filter-previous ");
    assert!(previous.contains("ferry:plugin/processor@1.2.0") && previous.ends_with("yes"), "{text}");
    let size = std::fs::metadata(plugin_file("filter")).expect("filter.wasm").len().to_string();
    assert!(filter.contains(&size), "the size is shown: {text}");
    assert!(line("future-version").contains("no: "), "{text}");
    assert!(line("broken").contains("not a valid WebAssembly component"), "{text}");

    let ok = ws.ferry(&["plugins", "check", &plugins.join("filter.wasm").to_string_lossy()]);
    assert!(ok.status.success());
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok: plugin \"filter\""));
    let refused = ws.ferry(&["plugins", "check", &plugins.join("future-version.wasm").to_string_lossy()]);
    assert_eq!(refused.status.code(), Some(2));
    let why = String::from_utf8_lossy(&refused.stdout);
    assert!(why.contains("refused") && why.contains("2.0.0") && why.contains("1.3.0"), "names both versions: {why}");

    let only_good = Workspace::with_plugins(&["filter"]);
    assert!(only_good.ferry(&["plugins", "list"]).status.success());
}

/// Transport components: `plugins list` names their world, and `ferry
/// validate` loads each `type = "component"` part's plugin, checks it
/// exports that half, and opens it with its config.
#[test]
fn transport_components_are_listed_with_their_world_and_opened_by_validate() {
    let ws = Workspace::with_plugins(&["simplemq", "filter"]);
    let out = ws.ferry(&["plugins", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let simplemq = text.lines().find(|l| l.starts_with("simplemq ")).unwrap_or_default();
    assert!(simplemq.contains("ferry:plugin/transport@1.3.0") && simplemq.ends_with("yes"), "{text}");

    let validate = |receiver: &str, sender: &str| {
        ws.config(&format!(
            r#"
[receivers.q]
type = "component"
{receiver}

[senders.out]
type = "component"
{sender}

[[routes]]
id = "r"
receiver = "q"
[[routes.bindings]]
sender = "out"
"#
        ));
        let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let good_receiver = r#"component = "simplemq"
config = { queue = "orders", api_key = "k" }"#;
    let good_sender = r#"component = "simplemq"
config = { queue = "orders", api_key = "k" }"#;
    let (code, text) = validate(good_receiver, good_sender);
    assert_eq!(code, Some(0), "{text}");

    // open refuses the config: named with the part and the component's reason.
    let (code, text) = validate(
        r#"component = "simplemq"
config = { queue = "x", api_key = "k" }"#,
        good_sender,
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("receivers.q") && text.contains("open refused the config: queue:"), "{text}");
    let (code, text) = validate(
        good_receiver,
        r#"component = "simplemq"
config = { api_key = "k", api_url = "ftp://x" }"#,
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("senders.out") && text.contains("api_url"), "{text}");
    // A processor is not a transport; a missing plugin is named.
    let (code, text) = validate(
        r#"component = "filter"
config = {}"#,
        good_sender,
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("receivers.q") && text.contains("not a transport receiver"), "{text}");
    let (code, text) = validate(
        r#"component = "nowhere"
config = {}"#,
        good_sender,
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("nowhere"), "{text}");
}
