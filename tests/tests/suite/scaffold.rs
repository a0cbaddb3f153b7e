//! `ferry plugins new` (issue 18, part 2): for each language, scaffold a
//! project, run its own first test, build it with its one command, load it
//! with `ferry plugins check`, and run messages through it in the daemon.
//! The same for a transport component (`--kind transport`, issue 35) in
//! Rust and JavaScript, on both ends of a route over the fake SimpleMQ.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, route_config, user_property};
use ferry_tests::{repo_root, unique};

/// Runs `program args` in `dir` with `path` before `$PATH`; panics with
/// its output when it fails.
fn run(dir: &Path, program: &str, args: &[&str], path: Option<&Path>, env: &[(&str, &Path)]) {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir).envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(first) = path {
        let rest = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![first.to_path_buf()];
        dirs.extend(std::env::split_paths(&rest));
        cmd.env("PATH", std::env::join_paths(dirs).expect("PATH"));
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{program} {args:?} in {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "{program} {args:?} in {} failed:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The target directory of this build (`target/` above `debug/deps/`), so
/// the scaffolded Rust project reuses what the workspace compiled.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

/// The Python tools `just plugins` provisions (componentize-py).
fn python_tools() -> PathBuf {
    let venv = std::env::var_os("FERRY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ferry/venv"));
    let bin = venv.join("bin");
    assert!(bin.join("componentize-py").is_file(), "no componentize-py in {}: run `just plugins`", bin.display());
    bin
}

/// Scaffolds `name` in `lang`, runs its test and build, and returns the
/// component it built.
fn scaffold(ws: &Workspace, name: &str, lang: &str, kind: &str) -> PathBuf {
    let project = ws.path().join(name);
    let out = ws.ferry(&["plugins", "new", name, "--lang", lang, "--kind", kind]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "plugins new: {said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains(&format!("wrote {name}")), "{said}");
    match lang {
        "rust" => {
            // The processors' lock file pins the versions the workspace
            // already compiled; a user's project resolves its own.
            std::fs::copy(repo_root().join("processors/Cargo.lock"), project.join("Cargo.lock")).expect("lock");
            let target = target_dir().join("scaffold");
            run(&project, "cargo", &["test", "--quiet"], None, &[("CARGO_TARGET_DIR", &target)]);
            run(&project, "./build", &[], None, &[("CARGO_TARGET_DIR", &target)]);
        }
        "python" => {
            let tools = python_tools();
            run(&project, "./test", &[], Some(&tools), &[]);
            run(&project, "./build", &[], Some(&tools), &[]);
        }
        "js" => {
            run(&project, "npm", &["install", "--prefer-offline", "--no-audit", "--no-fund", "--silent"], None, &[]);
            run(&project, "npm", &["test", "--silent"], None, &[]);
            run(&project, "npm", &["run", "build", "--silent"], None, &[]);
        }
        other => panic!("no language {other}"),
    }
    let wasm = project.join(format!("{name}.wasm"));
    let out = ws.ferry(&["plugins", "check", wasm.to_str().expect("utf-8 path")]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "plugins check: {said}");
    assert!(said.contains(&format!("ok: plugin {name:?}, world ferry:plugin/{kind}@")), "{said}");
    wasm
}

/// Scaffolds and builds a `lang` plugin, then runs a reading and a noise
/// message through it: the reading arrives stamped, the noise is dropped.
async fn through_the_daemon(lang: &str) {
    let name = format!("stamp-{lang}");
    let ws = Workspace::with_plugins(&[]);
    let wasm = scaffold(&ws, &name, lang, "processor");
    std::fs::copy(&wasm, ws.path().join("plugins").join(format!("{name}.wasm"))).expect("install");
    let (src, dst) = (unique("scaffold/src"), unique("scaffold/dst"));
    let processors = format!(
        "[[routes.processors]]\nplugin = \"{name}\"\nconfig = {{ header = \"stamped\", drop_kind = \"noise\" }}\n"
    );
    let url = broker_url();
    ws.config(&route_config(&url, &src, &url, &format!("{dst}/{{mqtt.topic}}"), &processors, "", ""));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&url).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&url).await;
    publisher.publish_with(&format!("{src}/a"), "r", &[("kind", "reading")]).await;
    publisher.publish_with(&format!("{src}/a"), "n", &[("kind", "noise")]).await;
    let got = sub.drain(Duration::from_secs(3)).await;
    assert_eq!(got.len(), 1, "the noise is dropped, the reading delivered");
    assert_eq!(user_property(&got[0], "kind"), Some("reading"));
    assert_eq!(user_property(&got[0], "stamped"), Some(name.as_str()));
    assert!(daemon.terminate().success());
}

/// The Rust scaffold, as the book's first-processor page tells it: its
/// shell blocks run as written (with this build's `ferry` for
/// `target/debug/ferry`), `check` prints what the page says, and the page's
/// config lines, added to the route of `examples/ferry.toml` after the
/// filter, stamp a reading that crosses a private Mosquitto.
#[tokio::test(flavor = "multi_thread")]
async fn a_rust_scaffold_builds_tests_loads_and_runs_as_the_first_processor_page_says() {
    use crate::book::{fenced, read};
    use ferry_tests::mqtt::PrivateMosquitto;

    let page = read("docs/src/getting-started/first-processor.md");
    let ws = Workspace::with_plugins(&["filter"]);
    let ferry = ferry_tests::daemon::ferry_binary();
    let target = target_dir().join("scaffold");
    let mut printed = String::new();
    for (i, block) in fenced(&page, "sh").iter().enumerate() {
        if i == 1 {
            // The processors' lock file pins the versions the workspace
            // already compiled; a user's project resolves its own.
            std::fs::copy(repo_root().join("processors/Cargo.lock"), ws.path().join("stamp/Cargo.lock")).expect("lock");
        }
        let script = block.replace("target/debug/ferry", &ferry.to_string_lossy());
        if script.contains("mosquitto_sub") {
            continue;
        }
        let out = Command::new("sh")
            .arg("-ec")
            .arg(&script)
            .current_dir(ws.path())
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("sh runs");
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{script}\nfailed:\n{said}\n{}", String::from_utf8_lossy(&out.stderr));
        printed.push_str(&said);
    }
    assert!(ws.path().join("plugins/stamp.wasm").is_file(), "the page's commands did not install plugins/stamp.wasm");
    let says = page.split_once("`check` prints `").and_then(|(_, rest)| rest.split_once('`')).map(|(s, _)| s);
    let says = says.expect("the page says what check prints");
    assert!(printed.contains(says), "check printed {printed:?}, the page says {says:?}");

    let processor = fenced(&page, "toml").into_iter().next().expect("the page's config lines");
    let broker = PrivateMosquitto::start().await;
    let config = format!("{}\n{processor}", read("examples/ferry.toml"));
    let ws = ws.with_env(&[("FERRY_MQTT_URL", &broker.url())]);
    ws.config(&config);
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker.url()).await;
    sub.subscribe("bridged/#").await;
    let publisher = TestMqtt::connect(&broker.url()).await;
    publisher.publish_with("sensors/kitchen", "{\"c\":21.5}", &[("kind", "temp")]).await;
    let got = sub.next(Duration::from_secs(20)).await.expect("the reading arrived");
    assert_eq!(user_property(&got, "processed-by"), Some("stamp"), "the page says it arrives stamped");
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_scaffold_builds_tests_loads_and_runs() {
    through_the_daemon("python").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_scaffold_builds_tests_loads_and_runs() {
    through_the_daemon("js").await;
}

/// Scaffolds and builds a `lang` transport, then runs it as the receiver
/// of one queue and the sender to another: the messages cross, byte for
/// byte, and leave the first queue.
async fn transport_through_the_daemon(lang: &str) {
    use base64::Engine as _;
    use ferry_tests::simplemq::FakeSimpleMq;

    let name = format!("queue-{lang}");
    let ws = Workspace::with_plugins(&[]);
    let wasm = scaffold(&ws, &name, lang, "transport");
    std::fs::copy(&wasm, ws.path().join("plugins").join(format!("{name}.wasm"))).expect("install");
    let smq = FakeSimpleMq::start(Duration::from_secs(5)).await;
    let (from, to) = (unique("scaffold-from"), unique("scaffold-to"));
    smq.create_queue(&from, "key");
    smq.create_queue(&to, "key");
    ws.config(&smq.http_queue_route(&name, &from, &to));
    let daemon = Daemon::start(&ws, 0);
    smq.wait_for_a_receive(&daemon).await;
    let b64 = base64::engine::general_purpose::STANDARD;
    for body in ["one", "two"] {
        smq.put(&from, &b64.encode(body));
    }
    ferry_tests::eventually("both messages on the other queue", || smq.messages(&to).len() >= 2).await;
    let mut got: Vec<Vec<u8>> = smq.messages(&to).iter().map(|m| b64.decode(&m.content).expect("base64")).collect();
    got.sort();
    assert_eq!(got, [b"one".to_vec(), b"two".to_vec()]);
    ferry_tests::eventually("the first queue emptied", || smq.messages(&from).is_empty()).await;
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rust_transport_scaffold_builds_tests_loads_and_runs() {
    transport_through_the_daemon("rust").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_transport_scaffold_builds_tests_loads_and_runs() {
    transport_through_the_daemon("js").await;
}

#[test]
fn plugins_wit_prints_the_contract() {
    let ws = Workspace::with_plugins(&[]);
    let out = ws.ferry(&["plugins", "wit"]);
    assert!(out.status.success());
    let contract = std::fs::read_to_string(repo_root().join("wit/plugin.wit")).expect("wit");
    assert_eq!(String::from_utf8_lossy(&out.stdout), contract);
}
