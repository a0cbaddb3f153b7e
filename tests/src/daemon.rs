//! Runs the real `ferry` binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `ferry` binary of the same build: beside this executable (a bench
/// binary in `target/<profile>/`) or one level up (a test in
/// `target/<profile>/deps/`).
pub fn ferry_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let candidates = [Some(dir.join("ferry")), dir.parent().map(|d| d.join("ferry"))];
    for bin in candidates.into_iter().flatten() {
        if bin.is_file() {
            return bin;
        }
    }
    panic!("no ferry binary near {}: run `cargo build -p ferry-daemon` (just test does)", exe.display());
}

/// A working directory with a plugin folder and a config file.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    /// Extra environment for every `ferry` this workspace runs.
    env: Vec<(String, String)>,
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
        Self { dir, env: Vec::new() }
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

    /// Runs `ferry <args>` to completion in this directory.
    pub fn ferry(&self, args: &[&str]) -> Output {
        Command::new(ferry_binary())
            .args(args)
            .current_dir(self.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("ferry runs")
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

/// `config` with an admin server on `admin` (`host:port`).
pub fn with_admin(admin: &str, config: String) -> String {
    format!("[admin]\nlisten = \"{admin}\"\n{config}")
}

/// A running daemon; its log lines are kept for assertions.
pub struct Daemon {
    child: Option<Child>,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `ferry run -c ferry.toml` in `ws` and waits until every
    /// receiver and sender named in `expect_connected` logged a connection.
    pub fn start(ws: &Workspace, expect_connected: usize) -> Self {
        Self::start_with_args(ws, &[], expect_connected)
    }

    /// The daemon's process id (for CPU and memory readings).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// As [`Daemon::start`], with more arguments for `ferry run`.
    pub fn start_with_args(ws: &Workspace, args: &[&str], expect_connected: usize) -> Self {
        let mut child = Command::new(ferry_binary())
            .args(["run", "-c", "ferry.toml", "--log-level", "info"])
            .args(args)
            .current_dir(ws.path())
            .env("NO_COLOR", "1")
            .envs(crate::sqs::aws_env())
            .envs(ws.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ferry starts");
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
        let daemon = Self { child: Some(child), log };
        // Generous: a debug daemon on a busy 2-core machine takes over 30 s
        // to compile the 12 MB JavaScript example when its cache is cold
        // (seen in CI). A start that works returns as soon as it connected.
        daemon.wait_for_log("connected", expect_connected, Duration::from_secs(120));
        daemon
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
                return status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
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
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
