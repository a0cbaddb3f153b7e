//! The book (`docs/`) and the README hold together: every page is in
//! `SUMMARY.md` and every entry there is a page, and every link between
//! pages (and from the README into the book) names a file that exists and,
//! with `#anchor`, a heading it has, as mdBook derives heading ids.
//!
//! And the getting-started paths work as their pages tell them: the first
//! bridge's `mosquitto_pub` lines against the daemon `just run` starts, and
//! the first test file with `ferry test` (the first processor's commands run
//! in `scaffold.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> PathBuf {
    ferry_tests::repo_root()
}

fn book_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = Vec::new();
    walk(&root().join("docs/src"), &mut pages);
    pages.sort();
    pages
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut in_code = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                return false;
            }
            !in_code
        })
        .collect()
}

/// The fenced code blocks of `text` whose info string is `lang`, each as
/// its lines (indented as on the page).
pub fn fenced(text: &str, lang: &str) -> Vec<String> {
    let opening = format!("```{lang}");
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start();
        match block.as_mut() {
            None if fence == opening => block = Some(String::new()),
            None => {}
            Some(_) if fence == "```" => blocks.extend(block.take()),
            Some(lines) => {
                lines.push_str(line);
                lines.push('\n');
            }
        }
    }
    blocks
}

/// A file of the repository, as text.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A heading's id as mdBook makes it: the text without markup, lower
/// case, whitespace as `-`, other punctuation dropped; a repeated id gets
/// `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) else { continue };
        if !heading.starts_with(' ') {
            continue;
        }
        let plain = strip_links(heading.trim());
        let id: String = plain
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let n = seen.entry(id.clone()).or_default();
        out.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
        *n += 1;
    }
    out
}

/// `[text](target)` becomes `text`.
fn strip_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| after[close + 2..].find(')').map(|end| (close, close + 2 + end))) {
            Some((close, end)) => {
                out.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the Markdown links on a page, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        // Inline code is not a link.
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_page_is_in_the_summary_and_every_entry_is_a_page() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let listed: BTreeSet<PathBuf> =
        links(&summary).into_iter().filter(|l| !l.is_empty()).map(|l| src.join(l)).collect();
    for entry in &listed {
        assert!(entry.exists(), "SUMMARY.md lists {}, which does not exist", entry.display());
    }
    for page in book_pages().into_iter().filter(|p| !p.ends_with("SUMMARY.md")) {
        assert!(listed.contains(&page), "{} is not in SUMMARY.md: mdBook would not build it", page.display());
    }
}

#[test]
fn every_link_names_a_page_and_heading_that_exist() {
    let mut pages = book_pages();
    pages.push(root().join("README.md"));
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { page.clone() } else { page.parent().expect("dir").join(file) };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&target).expect("target");
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {link}: no heading #{anchor} there", page.display()));
                    continue;
                }
            }
            checked += 1;
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 100, "only {checked} links checked");
}

/// The TOML blocks of the book and the README that are whole configs (a
/// receiver, a sender and a route): each is what `ferry validate` accepts.
#[test]
fn every_whole_config_in_the_book_validates() {
    let mut pages = book_pages();
    pages.push(root().join("README.md"));
    let mut validated = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for config in fenced(&text, "toml") {
            if config.contains("[[routes]]") && config.contains("[receivers.") && config.contains("[senders.") {
                let plugins: Vec<&str> = config
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix("plugin = \""))
                    .filter_map(|rest| rest.split('"').next())
                    .collect();
                let ws = ferry_tests::daemon::Workspace::with_plugins(&plugins);
                ws.config(&config);
                let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
                assert!(
                    out.status.success(),
                    "a config in {} does not validate: {}\n{config}",
                    page.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                validated += 1;
            }
        }
    }
    assert!(validated >= 2, "only {validated} whole configs found");
}

/// The key tables of the book are the generated reference's: every
/// `<!-- reference: ID … -->` block names an anchor the reference has (its
/// content is checked current by the daemon's
/// `the_book_pages_carry_the_current_key_tables`), and every table of the
/// reference is carried by some page, so the
/// keys of each transport are on its page and no hand-written key table
/// comes back beside them.
#[test]
fn every_reference_table_is_included_and_every_include_resolves() {
    let reference = read("docs/src/reference/config.md");
    let anchors: BTreeSet<String> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("<!-- ANCHOR: ")?.strip_suffix(" -->").map(str::to_owned))
        .collect();
    assert!(anchors.len() > 20, "only {} anchored tables in the reference", anchors.len());
    let mut included = BTreeSet::new();
    for page in book_pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        assert!(
            !text.contains("{{#include ../reference/config.md"),
            "{} includes a key table; pages carry it (run `ferry reference`)",
            page.display()
        );
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("<!-- reference: ") else { continue };
            let id = rest.split(' ').next().unwrap_or_default();
            assert!(
                anchors.contains(id),
                "{} carries the table {id}, which the reference has no anchor for",
                page.display()
            );
            included.insert(id.to_owned());
        }
        for line in prose(&text) {
            assert!(
                !line.starts_with("| key | default |"),
                "{} has a hand-written key table; include the reference's instead",
                page.display()
            );
        }
    }
    let missing: Vec<&String> = anchors.difference(&included).collect();
    assert!(missing.is_empty(), "reference tables no page includes: {missing:?}");
}

/// The cookbook shows the examples it names as they are: every TOML block
/// on the page is one of `examples/*.toml` or `examples/tests/*.toml`,
/// whole, and there are five recipes, each a config and its test file.
#[test]
fn the_cookbook_shows_the_examples_unchanged() {
    let page = read("docs/src/operating/cookbook.md");
    let blocks = fenced(&page, "toml");
    let mut files: Vec<(String, String)> = Vec::new();
    for dir in ["examples", "examples/tests"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("examples").filter_map(Result::ok) {
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "toml") {
                let name = format!("{dir}/{}", entry.file_name().to_string_lossy());
                files.push((name, std::fs::read_to_string(&path).expect("example")));
            }
        }
    }
    let mut shown: Vec<&str> = Vec::new();
    for block in &blocks {
        let Some((name, _)) = files.iter().find(|(_, text)| text.trim_end() == block.trim_end()) else {
            panic!("a block of the cookbook is no example file as it is now:\n{block}");
        };
        assert!(page.contains(&format!("`{name}`")), "the cookbook shows {name} without naming it");
        shown.push(name);
    }
    let configs = shown.iter().filter(|n| !n.starts_with("examples/tests/")).count();
    assert_eq!((configs, shown.len()), (5, 10), "five recipes, each a config and its test file: {shown:?}");
    for name in shown.iter().filter(|n| !n.starts_with("examples/tests/")) {
        let test = name.replacen("examples/", "examples/tests/", 1);
        assert!(shown.contains(&test.as_str()), "{name} is shown without {test}");
    }
}

#[test]
fn the_readme_stays_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines; the book is where the rest goes");
}

#[test]
fn anchors_are_derived_as_mdbook_does() {
    let ids = anchors("# The `[[routes]]` table\n## Running more than one ferry\n## Step\n## Step\n```\n# not\n```\n");
    let want: BTreeSet<String> =
        ["the-routes-table", "running-more-than-one-ferry", "step", "step-1"].into_iter().map(String::from).collect();
    assert_eq!(ids, want);
    assert_eq!(links("see [a](x.md#y) and `[b](not)` [c](z.md)"), ["x.md#y", "z.md"]);
}

/// The first bridge as its page tells it: `just run` is `ferry run` on
/// `examples/ferry.toml`, and of the page's `mosquitto_pub` lines, run as
/// written, the one marked "arrives" comes out under `bridged/` and the one
/// marked "dropped" is dropped by the filter. On a private Mosquitto, so
/// the example's fixed topics meet no other test.
#[tokio::test(flavor = "multi_thread")]
async fn the_first_bridge_works_as_its_page_says() {
    use ferry_tests::daemon::{Daemon, Workspace};
    use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, topic};

    let page = read("docs/src/getting-started/first-bridge.md");
    assert!(read("justfile").contains("ferry run -c examples/ferry.toml"), "`just run` no longer runs the example");
    let broker = PrivateMosquitto::start().await;
    let ws = Workspace::with_plugins(&["filter"]).with_env(&[("FERRY_MQTT_URL", &broker.url())]);
    ws.config(&read("examples/ferry.toml"));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe("bridged/#").await;

    let (mut arrives, mut dropped) = (Vec::new(), 0);
    let blocks = fenced(&page, "sh");
    for line in blocks.iter().flat_map(|b| b.lines()).filter(|l| l.trim_start().starts_with("mosquitto_pub")) {
        let (command, fate) = line.rsplit_once(" # ").expect("each mosquitto_pub line says what becomes of it");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{command} -h 127.0.0.1 -p {}", broker.port))
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        let payload = command.split_once("-m '").and_then(|(_, rest)| rest.split_once('\'')).map(|(p, _)| p);
        match fate.trim() {
            "arrives" => arrives.push(payload.expect("-m 'payload'").to_owned()),
            "dropped" => dropped += 1,
            other => panic!("a mosquitto_pub line says {other:?}, not arrives or dropped"),
        }
    }
    assert!(!arrives.is_empty() && dropped > 0, "the page publishes one that arrives and one that is dropped");
    for payload in &arrives {
        let got = sub.next(Duration::from_secs(20)).await.expect("the reading arrived under bridged/");
        assert_eq!(topic(&got), "bridged/sensors/kitchen");
        assert_eq!(String::from_utf8_lossy(&got.payload), *payload);
    }
    daemon.wait_for_total(
        "ferry_messages_dropped_total",
        "reason=\"filtered\"",
        dropped as f64,
        Duration::from_secs(20),
    );
    assert!(sub.drain(ferry_tests::QUIET).await.is_empty(), "a dropped message arrived");
    assert!(daemon.terminate().success());
}

/// The first test file, as its page gives it, passes with `ferry test`
/// beside the example config it names.
#[test]
fn the_first_test_file_passes_as_its_page_says() {
    let page = read("docs/src/getting-started/first-test.md");
    let file = fenced(&page, "toml").into_iter().find(|b| b.contains("[[case]]")).expect("the page has a test file");
    let ws = ferry_tests::daemon::Workspace::with_plugins(&["filter"]);
    let tests = ws.path().join("examples/tests");
    std::fs::create_dir_all(&tests).expect("examples/tests");
    std::fs::write(ws.path().join("examples/ferry.toml"), read("examples/ferry.toml")).expect("config");
    std::fs::write(tests.join("first.toml"), &file).expect("test file");
    let out = ws.ferry(&["test", "examples/tests/first.toml"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ferry test: {said}{}", String::from_utf8_lossy(&out.stderr));
    let cases = file.matches("[[case]]").count();
    assert!(said.contains(&format!("{cases} cases: {cases} passed, 0 failed")), "{said}");
}
