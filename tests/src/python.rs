//! Python clients (boto3 for the SQS endpoint) run as real applications
//! would: a script on stdin, its JSON result on stdout.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A Python that can `import module`: the project's virtual environment
/// (`scripts/provision` puts moto, and with it boto3, there when the
/// machine's Python lacks them), else the machine's `python3`. Panics when
/// neither can: `just test` provisions it.
pub fn python_with(module: &str) -> PathBuf {
    let venv = std::env::var_os("FERRY_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
        cache.join("ferry").join("venv")
    });
    for python in [venv.join("bin").join("python"), PathBuf::from("python3")] {
        let ok = Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return python;
        }
    }
    panic!("no Python here can import {module}: run `scripts/provision moto`");
}

/// Runs `script` with a Python that has `module`, `args` as `sys.argv[1:]`;
/// returns what it printed last, as JSON. Panics with its stderr on failure.
pub fn run_json(module: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let mut child = Command::new(python_with(module))
        .arg("-")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("script written");
    let out = crate::wait_within(child, std::time::Duration::from_secs(120), &format!("python ({module})"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("python printed {last:?}, not JSON: {e}"))
}
