//! Runs the real `ferry` binary.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `ferry` binary of the same build: beside this executable (a bench
/// binary in `target/<profile>/`) or one level up (a test in
/// `target/<profile>/deps/`). A binary older than the daemon's sources is
/// refused (`cargo test -p ferry-tests` does not build it): the tests
/// would run yesterday's daemon without a word.
pub fn ferry_binary() -> PathBuf {
    static CHECKED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    match CHECKED.get_or_init(find_ferry_binary) {
        Ok(bin) => bin.clone(),
        Err(why) => panic!("{why}"),
    }
}

fn find_ferry_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let candidates = [Some(dir.join("ferry")), dir.parent().map(|d| d.join("ferry"))];
    let Some(bin) = candidates.into_iter().flatten().find(|b| b.is_file()) else {
        return Err(format!(
            "no ferry binary near {}: run the tests with `just t FILTER` (or `just test`), which build it",
            exe.display()
        ));
    };
    match stale_because(&bin, &crate::repo_root()) {
        Some(why) => Err(why),
        None => Ok(bin),
    }
}

/// Why `bin` is older than the code it is built from — a source file or
/// manifest of the daemon or of a `ferry-*` crate it depends on, changed
/// after it was linked — or `None` when it is not. Files of crates the
/// daemon does not link (the bench, the fuzz targets, the tests) do not
/// count: changing them does not rebuild it.
pub fn stale_because(bin: &Path, root: &Path) -> Option<String> {
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok()?;
    let manifest = std::fs::read_to_string(root.join("host/daemon/Cargo.toml")).ok()?;
    let mut crates = vec![root.join("host/daemon")];
    let dependencies = manifest.split("\n[dependencies]").nth(1)?.split("\n[").next()?;
    for line in dependencies.lines() {
        if let Some(rest) = line.trim().strip_prefix("ferry-") {
            let name = rest.split(['.', ' ', '=']).next().unwrap_or_default();
            crates.push(root.join("host").join(name));
        }
    }
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut note = |path: PathBuf| {
        if let Ok(t) = std::fs::metadata(&path).and_then(|m| m.modified())
            && newest.as_ref().is_none_or(|(n, _)| t > *n)
        {
            newest = Some((t, path));
        }
    };
    for dir in crates {
        note(dir.join("Cargo.toml"));
        let mut pending = vec![dir.join("src")];
        while let Some(d) = pending.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    note(path);
                }
            }
        }
    }
    let (changed, file) = newest.filter(|(t, _)| *t > built)?;
    let ahead = changed.duration_since(built).unwrap_or_default();
    Some(format!(
        "{} is older than the code it is built from ({} changed {:.0} s after it was linked): the tests would \
         run an old daemon. Build it and run the tests with `just t FILTER` (or `just test`).",
        bin.display(),
        file.strip_prefix(root).unwrap_or(&file).display(),
        ahead.as_secs_f64().ceil()
    ))
}

/// How long one `ferry` command of a test may run (a `ferry test` of a
/// JavaScript component compiles 12 MB of it on a cold cache).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// A working directory with a plugin folder and a config file.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    /// Extra environment for every `ferry` this workspace runs.
    env: Vec<(String, String)>,
    /// The admin address of the daemon running here, which the CLI
    /// commands run here reach (`FERRY_ADMIN`).
    running: Arc<Mutex<Option<String>>>,
}

impl Workspace {
    /// A fresh directory whose `plugins/` holds the named components.
    pub fn with_plugins(plugins: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("plugins")).expect("plugins dir");
        for name in plugins {
            std::fs::copy(crate::plugin_file(name), dir.path().join("plugins").join(format!("{name}.wasm")))
                .expect("copy plugin");
        }
        Self { dir, env: Vec::new(), running: Arc::default() }
    }

    /// Sets environment variables for every `ferry` run here (configs may
    /// use them as `${VAR}`).
    pub fn with_env(mut self, vars: &[(&str, &str)]) -> Self {
        self.env.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        self
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `ferry.toml` and returns its path.
    pub fn config(&self, text: &str) -> PathBuf {
        let p = self.dir.path().join("ferry.toml");
        std::fs::write(&p, text).expect("write config");
        p
    }

    /// Runs `ferry <args>` to completion in this directory; `ferry dlq`,
    /// `outbox` and `tap` reach the daemon running here, if one is.
    pub fn ferry(&self, args: &[&str]) -> Output {
        let child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ferry runs");
        crate::wait_within(child, COMMAND_TIMEOUT, &format!("ferry {}", args.join(" ")))
    }

    /// `ferry <args>` in this directory, with this workspace's environment
    /// and the admin address of the daemon running here (`FERRY_ADMIN`).
    pub fn command(&self, args: &[&str]) -> Command {
        let admin = self.running.lock().ok().and_then(|r| r.clone());
        let mut command = Command::new(ferry_binary());
        command
            .args(args)
            .current_dir(self.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(admin.map(|a| ("FERRY_ADMIN", a)));
        command
    }

    /// The dead letters in this workspace's store, read with
    /// `ferry dlq list --json`: a stopped daemon's embedded store, a running
    /// one's through its admin server, or the PostgreSQL store.
    pub fn dead_letters(&self) -> Vec<serde_json::Value> {
        let out = self.ferry(&["dlq", "list", "-c", "ferry.toml", "--json", "--limit", "1000000"]);
        assert!(out.status.success(), "ferry dlq list: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}

/// A listener address for a config: loopback, a port the system picks.
/// The daemon announces what it got ([`Daemon::listener`]).
pub const ANY_PORT: &str = "127.0.0.1:0";

/// `config` with an admin server on `admin` (`host:port`).
pub fn with_admin(admin: &str, config: String) -> String {
    format!("[admin]\nlisten = \"{admin}\"\n{config}")
}

/// A listener a daemon announced on stdout (`{"listening": {kind, name,
/// addr}}`): its kind, name and address; `None` for any other line.
pub fn listening(line: &str) -> Option<(String, String, SocketAddr)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let l = &v["listening"];
    let addr = l["addr"].as_str()?.parse().ok()?;
    Some((l["kind"].as_str()?.to_owned(), l["name"].as_str()?.to_owned(), addr))
}

/// Waits (at most `timeout`) until the admin server at `admin` answers
/// `/readyz` with 200; else what it answered last.
pub fn wait_readyz(admin: &str, token: Option<&str>, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < timeout {
        match crate::http::request(admin, "GET", "/readyz", token) {
            Ok((200, _)) => return Ok(()),
            Ok((status, body)) => last = format!("{status} {body}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(last)
}

/// A running daemon; its log lines are kept for assertions.
///
/// Every daemon runs with `--admin-listen 127.0.0.1:0` (unless the test
/// passes its own): the addresses it announces on stdout are read into
/// [`Daemon::listener`], and readiness is its `/readyz`, never log text.
pub struct Daemon {
    child: Option<Child>,
    pub log: Arc<Mutex<Vec<String>>>,
    /// What the daemon announced it listens on, by (kind, name).
    bound: Arc<Mutex<BTreeMap<(String, String), SocketAddr>>>,
    /// The admin token of the workspace's config, if it sets one.
    token: Option<String>,
    /// The workspace's view of the running daemon (cleared on exit).
    running: Arc<Mutex<Option<String>>>,
}

/// How long a daemon may take to announce its admin server and to become
/// ready. Generous: a debug daemon on a busy 2-core machine takes over
/// 30 s to compile the 12 MB JavaScript example when its cache is cold
/// (seen in CI). A start that works returns as soon as it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(120);

impl Daemon {
    /// Starts `ferry run -c ferry.toml` in `ws` and, when `expect_ready` is
    /// more than 0, waits until its `/readyz` answers 200 (every receiver
    /// and sender connected, every route running); with 0 only until its
    /// admin server listens (the parts may be meant never to connect).
    pub fn start(ws: &Workspace, expect_ready: usize) -> Self {
        Self::start_with_args(ws, &[], expect_ready)
    }

    /// The daemon's process id (for CPU and memory readings).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// As [`Daemon::start`], with more arguments for `ferry run`.
    pub fn start_with_args(ws: &Workspace, args: &[&str], expect_ready: usize) -> Self {
        let daemon = Self::spawn(ws, args, true);
        let admin = daemon.admin();
        if expect_ready > 0 {
            daemon.wait_ready(&admin, START_TIMEOUT);
        }
        daemon
    }

    /// A daemon with no admin server unless its config has one (for what
    /// a daemon without one does), started once `connected` parts logged
    /// their connection: the one readiness wait that reads log text, as
    /// without an admin server there is no `/readyz`.
    pub fn start_without_admin(ws: &Workspace, connected: usize) -> Self {
        let daemon = Self::spawn(ws, &[], false);
        daemon.wait_for_log("connected", connected, START_TIMEOUT);
        daemon
    }

    /// As [`Daemon::start`], with the config file `config` of the
    /// workspace instead of `ferry.toml` (an mqbridge `.jsonnet`).
    pub fn start_config(ws: &Workspace, config: &str, expect_ready: usize) -> Self {
        let daemon = Self::spawn_config(ws, config, &[], true);
        let admin = daemon.admin();
        if expect_ready > 0 {
            daemon.wait_ready(&admin, START_TIMEOUT);
        }
        daemon
    }

    fn spawn(ws: &Workspace, args: &[&str], admin: bool) -> Self {
        Self::spawn_config(ws, "ferry.toml", args, admin)
    }

    fn spawn_config(ws: &Workspace, config: &str, args: &[&str], admin: bool) -> Self {
        let own_admin = !admin || args.iter().any(|a| a.starts_with("--admin-listen"));
        let mut child = Command::new(ferry_binary())
            .args(["run", "-c", config, "--log-level", "info"])
            .args(if own_admin { &[][..] } else { &["--admin-listen", "127.0.0.1:0"][..] })
            .args(args)
            .current_dir(ws.path())
            .env("NO_COLOR", "1")
            .envs(crate::sqs::aws_env())
            .envs(ws.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ferry starts");
        crate::leftovers::record(child.id());
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if std::env::var_os("FERRY_TEST_ECHO").is_some() {
                    eprintln!("ferry: {line}");
                }
                if let Ok(mut l) = sink.lock() {
                    l.push(line);
                }
            }
        });
        let bound = Arc::new(Mutex::new(BTreeMap::new()));
        let stdout = child.stdout.take().expect("stdout");
        let announced = bound.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some((kind, name, addr)) = listening(&line)
                    && let Ok(mut b) = announced.lock()
                {
                    b.insert((kind, name), addr);
                }
            }
        });
        // The admin token, read as the daemon reads it: `${VAR}` from the
        // workspace's environment first.
        let text = std::fs::read_to_string(ws.path().join(config)).unwrap_or_default();
        let lookup = |name: &str| {
            ws.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok())
        };
        let token = ferry_config::parse_with_env(&text, &lookup)
            .ok()
            .and_then(|c| c.admin.token)
            .map(|t| t.expose().to_owned());
        Self { child: Some(child), log, bound, token, running: ws.running.clone() }
    }

    /// `host:port` of the admin server, waiting (up to the start timeout)
    /// for the daemon to announce it.
    pub fn admin(&self) -> String {
        let addr = self.listener("admin", "admin").to_string();
        if let Ok(mut r) = self.running.lock() {
            *r = Some(addr.clone());
        }
        addr
    }

    /// Where the listener `kind`/`name` is bound (`http` and a receiver's
    /// name, `sqs_endpoint`/`sqs`, `admin`/`admin`), waiting up to the start
    /// timeout for the daemon to announce it. Panics, with the log, when the
    /// daemon exits or the time runs out first.
    pub fn listener(&self, kind: &str, name: &str) -> SocketAddr {
        let key = (kind.to_owned(), name.to_owned());
        let started = Instant::now();
        loop {
            if let Some(addr) = self.bound.lock().ok().and_then(|b| b.get(&key).copied()) {
                return addr;
            }
            assert!(!self.exited(), "ferry exited before it listened on {kind} {name}:\n{}", self.log_text());
            assert!(
                started.elapsed() < START_TIMEOUT,
                "ferry did not listen on {kind} {name} within {START_TIMEOUT:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A daemon some of whose parts are meant never to connect (a target
    /// that is down), so that `/readyz` stays 503: started once each of
    /// `parts` (role, name) reports itself connected.
    pub fn start_with_connected(ws: &Workspace, parts: &[(&str, &str)]) -> Self {
        let daemon = Self::start(ws, 0);
        for (role, name) in parts {
            daemon.wait_connected(role, name, START_TIMEOUT);
        }
        daemon
    }

    /// Waits until the part `role` `name` reports itself connected
    /// (`ferry_transport_connected{…,role,name} 1`).
    pub fn wait_connected(&self, role: &str, name: &str, timeout: Duration) {
        let labels = format!("role=\"{role}\",name=\"{name}\"");
        let name = "ferry_transport_connected";
        self.wait_for_metrics(&format!("{name}{{{labels}}} = 1"), name, timeout, |text| {
            crate::http::sample(text, name, &labels) == Some(1.0)
        });
    }

    /// Waits until the samples of `name` whose labels contain `labels` add
    /// up to at least `at_least` (a counter moves when its event happened:
    /// `ferry_messages_dead_lettered_total` once the dead letter is stored);
    /// panics with the last scrape and the log after `timeout`.
    pub fn wait_for_total(&self, name: &str, labels: &str, at_least: f64, timeout: Duration) {
        self.wait_for_metrics(&format!("{name}{{{labels}}} >= {at_least}"), name, timeout, |text| {
            crate::http::total(text, name, labels) >= at_least
        });
    }

    /// Scrapes `/metrics` (with the config's token) until `holds` is true
    /// of it; panics naming `what`, with the last scrape's `name` lines and
    /// the log, after `timeout`.
    fn wait_for_metrics(&self, what: &str, name: &str, timeout: Duration, holds: impl Fn(&str) -> bool) {
        let admin = self.admin();
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < timeout {
            if let Ok((200, text)) = crate::http::request(&admin, "GET", "/metrics", self.token.as_deref()) {
                let undocumented = crate::http::undocumented(&text);
                assert!(
                    undocumented.is_empty(),
                    "series with labels the book's metrics reference lacks: {undocumented:?}"
                );
                if holds(&text) {
                    return;
                }
                last = text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let lines: Vec<&str> = last.lines().filter(|l| l.starts_with(name)).collect();
        panic!("{what} not seen within {timeout:?}: {lines:?}\n{}", self.log_text());
    }

    /// Whether the process has exited (a zombie not yet waited for counts).
    fn exited(&self) -> bool {
        let Some(child) = self.child.as_ref() else { return true };
        crate::leftovers::stat_fields(child.id()).is_none_or(|fields| fields.first().is_none_or(|s| s == "Z"))
    }

    /// This daemon stopped: the workspace's CLI calls no longer go to it.
    fn forget(&self) {
        let own = self.bound.lock().ok().and_then(|b| b.get(&("admin".to_owned(), "admin".to_owned())).copied());
        if let (Ok(mut running), Some(own)) = (self.running.lock(), own)
            && running.as_deref() == Some(own.to_string().as_str())
        {
            *running = None;
        }
    }

    /// `http://host:port` of the HTTP receiver `name`.
    pub fn http_url(&self, name: &str) -> String {
        format!("http://{}", self.listener("http", name))
    }

    /// Waits until `/readyz` answers 200; panics with its last answer and
    /// the log when `timeout` passes first.
    pub fn wait_ready(&self, admin: &str, timeout: Duration) {
        if let Err(last) = wait_readyz(admin, self.token.as_deref(), timeout) {
            panic!("ferry was not ready within {timeout:?}; /readyz: {last}\n{}", self.log_text());
        }
    }

    /// Waits until `needle` appears in at least `count` log lines.
    pub fn wait_for_log(&self, needle: &str, count: usize, timeout: Duration) {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if self.count_log(needle) >= count {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {count}x {needle:?} in the daemon log:\n{}", self.log_text());
    }

    /// Waits until one log line contains every one of `parts`.
    pub fn wait_for_line(&self, parts: &[&str], timeout: Duration) {
        let started = Instant::now();
        while started.elapsed() < timeout {
            let found =
                self.log.lock().map(|l| l.iter().any(|line| parts.iter().all(|p| line.contains(p)))).unwrap_or(false);
            if found {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for a line with {parts:?} in the daemon log:\n{}", self.log_text());
    }

    pub fn count_log(&self, needle: &str) -> usize {
        self.log.lock().map(|l| l.iter().filter(|line| line.contains(needle)).count()).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends a signal (`HUP`, `TERM`, ...) without waiting.
    pub fn signal(&self, name: &str) {
        if let Some(child) = self.child.as_ref() {
            let _ = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status();
        }
    }

    /// SIGTERM, then waits for the exit status.
    pub fn terminate(self) -> ExitStatus {
        self.signal("TERM");
        self.wait_for_exit()
    }

    /// Waits (30 s at most) for the process to exit, after a stop signal
    /// sent already; its exit status.
    pub fn wait_for_exit(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                crate::leftovers::forget(child.id());
                return status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                crate::leftovers::forget(child.id());
                panic!("ferry did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: the crash case.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            crate::leftovers::forget(child.id());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.forget();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            crate::leftovers::forget(child.id());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn touch(path: &Path, at: SystemTime) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        std::fs::write(path, "x").expect("write");
        std::fs::File::options().write(true).open(path).expect("open").set_modified(at).expect("mtime");
    }

    #[test]
    fn a_binary_older_than_a_source_it_links_is_stale_and_others_are_not() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        let t0 = SystemTime::now() - Duration::from_secs(3600);
        let manifest = "[package]\nname = \"ferry-daemon\"\n\n[dependencies]\nferry-core.workspace = true\nferry-transport-mqtt.workspace = true\nserde = \"1\"\n\n[dev-dependencies]\nferry-bench.workspace = true\n";
        std::fs::create_dir_all(root.join("host/daemon")).expect("dirs");
        std::fs::write(root.join("host/daemon/Cargo.toml"), manifest).expect("manifest");
        std::fs::File::options()
            .write(true)
            .open(root.join("host/daemon/Cargo.toml"))
            .expect("open")
            .set_modified(t0)
            .expect("mtime");
        touch(&root.join("host/daemon/src/main.rs"), t0);
        touch(&root.join("host/core/src/route/binding.rs"), t0);
        touch(&root.join("host/transport-mqtt/src/lib.rs"), t0);
        let bin = root.join("target/debug/ferry");
        touch(&bin, t0 + Duration::from_secs(60));
        assert_eq!(stale_because(&bin, root), None);

        // Crates the daemon does not link, and its own tests, do not count.
        touch(&root.join("host/bench/src/main.rs"), t0 + Duration::from_secs(120));
        touch(&root.join("host/daemon/tests/it.rs"), t0 + Duration::from_secs(120));
        assert_eq!(stale_because(&bin, root), None);

        // A one-line change to a linked crate, deep in its tree, does.
        touch(&root.join("host/core/src/route/binding.rs"), t0 + Duration::from_secs(120));
        let why = stale_because(&bin, root).expect("stale");
        assert!(why.contains("host/core/src/route/binding.rs changed 60 s after"), "{why}");
        assert!(why.contains("just t"), "{why}");

        // Built again: fresh.
        touch(&bin, t0 + Duration::from_secs(180));
        assert_eq!(stale_because(&bin, root), None);
        touch(&root.join("host/transport-mqtt/Cargo.toml"), t0 + Duration::from_secs(240));
        assert!(stale_because(&bin, root).is_some(), "a manifest counts too");
    }
}
