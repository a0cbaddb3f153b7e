//! The container image (issue 42): `scripts/image` builds it from the
//! daemon the tests use (`just image` does the same from the release
//! build), podman runs it on the host's network, and the example bridge
//! inside it (MQTT sensors/# -> the filter plugin -> bridged/<topic>)
//! becomes ready and moves a message, while the filter drops another.
//!
//! Skipped, saying why, only where podman is not installed; `just test`
//! provisions it (`scripts/provision podman`), so in CI it runs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ferry_tests::daemon::{ferry_binary, listening, wait_readyz};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, topic};
use ferry_tests::{QUIET, repo_root, unique, wait_within};

/// How long building the image (copying a debug daemon of a few hundred
/// MiB) and starting it may take.
const BOUND: Duration = Duration::from_secs(300);

/// podman's global arguments, or why there is no podman: runc where it is
/// installed (crun refuses a machine with both cgroup versions mounted,
/// as this one).
fn podman() -> Result<Vec<String>, String> {
    let found = |name: &str| Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
    if !found("podman") {
        return Err("podman is not installed (scripts/provision podman installs it)".into());
    }
    let mut args = Vec::new();
    if found("runc") {
        args.extend(["--runtime".to_owned(), "runc".to_owned()]);
    }
    Ok(args)
}

/// Resource limits within the machine's hard limits: podman's defaults
/// ask for more than a sandbox grants, and the container does not start.
fn run_limits() -> Vec<String> {
    let hard_nofile = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().ok())
        .unwrap_or(1024);
    vec!["--ulimit".into(), format!("nofile={hard_nofile}:{hard_nofile}"), "--ulimit".into(), "nproc=4096:4096".into()]
}

/// Removes the container and the image however the test ends.
struct Cleanup {
    podman: Vec<String>,
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for args in [vec!["rm", "-f", "-t", "2", self.container.as_str()], vec!["rmi", "-f", self.image.as_str()]] {
            let _ = Command::new("podman")
                .args(&self.podman)
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_starts_ready_and_bridges_through_its_plugin() {
    let podman = match podman() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let name = unique("ferry-image");
    let image = format!("localhost/{name}:test");
    let cleanup = Cleanup { podman: podman.clone(), container: name.clone(), image: image.clone() };

    let build = Command::new(repo_root().join("scripts/image"))
        .arg(ferry_binary())
        .arg(&image)
        .arg(repo_root().join("plugins"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("scripts/image starts");
    let built = wait_within(build, BOUND, "scripts/image");
    assert!(built.status.success(), "the image was not built: {}", String::from_utf8_lossy(&built.stderr));
    let user = Command::new("podman")
        .args(&podman)
        .args(["image", "inspect", "--format", "{{.Config.User}}", &image])
        .output()
        .expect("podman image inspect");
    assert_eq!(String::from_utf8_lossy(&user.stdout).trim(), "65532:65532", "the daemon does not run as root");

    let broker = PrivateMosquitto::start().await;
    let mut watcher = TestMqtt::connect(&broker.url()).await;
    watcher.subscribe("bridged/#").await;

    let mut child: Child = Command::new("podman")
        .args(&podman)
        .args(["run", "--rm", "--name", &name, "--network", "host"])
        .args(run_limits())
        .args(["-e", "FERRY_ADMIN=127.0.0.1:0", "-e", &format!("FERRY_MQTT_URL={}", broker.url())])
        .arg(&image)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("podman run starts");
    // The daemon announces its admin listener on stdout, as outside a
    // container.
    let (tx, announced) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((kind, _, addr)) = listening(&line)
                && kind == "admin"
            {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let stderr = child.stderr.take().expect("stderr");
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(mut l) = keep.lock() {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
    let said = || log.lock().map(|l| l.clone()).unwrap_or_default();
    let admin = tokio::task::block_in_place(|| announced.recv_timeout(BOUND))
        .unwrap_or_else(|_| panic!("the container announced no admin listener within {BOUND:?}:\n{}", said()));
    let ready = tokio::task::block_in_place(|| wait_readyz(&admin, None, BOUND));
    assert!(ready.is_ok(), "the container's daemon was not ready within {BOUND:?} ({ready:?}):\n{}", said());

    let room = unique("room");
    watcher.publish_with(&format!("sensors/{room}"), "{\"rh\":40}", &[("kind", "humidity")]).await;
    watcher.publish_with(&format!("sensors/{room}"), "{\"c\":21.5}", &[("kind", "temp")]).await;
    let got = watcher.next(Duration::from_secs(30)).await.unwrap_or_else(|| panic!("nothing bridged:\n{}", said()));
    assert_eq!(topic(&got), format!("bridged/sensors/{room}"));
    assert_eq!(&got.payload[..], b"{\"c\":21.5}", "the humidity reading is the one the filter drops");
    assert!(watcher.drain(QUIET).await.is_empty(), "the filter plugin in the image dropped the humidity reading");

    let _ = child.kill();
    let _ = child.wait();
    drop(cleanup);
}
