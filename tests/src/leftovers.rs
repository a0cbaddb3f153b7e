//! Processes a test run started and a killed run could not stop.
//!
//! Every daemon and private broker a test starts is stopped by its guard's
//! `Drop`, also when the test panics. A run that is killed (SIGKILL, a
//! timeout) runs no `Drop`, and its children live on, holding ports and
//! files. So each child is also recorded in a PID file of this run
//! (`$TMPDIR/ferry-test-pids/<pid>`: the child's start time, and the
//! test process's pid and start time), removed when the guard stops it.
//! The first child a run starts first sweeps the directory: a file whose
//! test process is gone names a leftover, which is killed if it is still
//! the same process (same start time). Nothing is ever found or killed by
//! its name.

use std::path::PathBuf;
use std::sync::Once;

fn dir() -> PathBuf {
    std::env::temp_dir().join("ferry-test-pids")
}

/// The fields of `/proc/<pid>/stat` after the command name (which is in
/// parentheses and may hold spaces): the state (`R`, `S`, `Z` for a zombie
/// not yet waited for, ...) first. `None` when there is no such process.
pub(crate) fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The start time of `pid` (clock ticks since boot), if it runs: the 22nd
/// field of its stat, the 20th after the name.
fn started(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Records `pid`, a child this process started, sweeping leftovers of
/// earlier runs first (once per test process).
pub fn record(pid: u32) {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(sweep);
    let own = std::process::id();
    let (Some(child_start), Some(own_start)) = (started(pid), started(own)) else { return };
    let _ = std::fs::create_dir_all(dir());
    let _ = std::fs::write(dir().join(pid.to_string()), format!("{child_start} {own} {own_start}\n"));
}

/// `pid` was stopped by its guard.
pub fn forget(pid: u32) {
    let _ = std::fs::remove_file(dir().join(pid.to_string()));
}

/// Kills what earlier runs left: children whose test process is gone.
/// A file of a test process that still runs (a parallel run) is left
/// alone.
fn sweep() {
    let Ok(entries) = std::fs::read_dir(dir()) else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let fields: Vec<u64> = text.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        let [child_start, owner, owner_start] = fields[..] else {
            let _ = std::fs::remove_file(entry.path());
            continue;
        };
        let owner_alive = u32::try_from(owner).ok().and_then(started) == Some(owner_start);
        if owner_alive {
            continue;
        }
        if started(pid) == Some(child_start) {
            eprintln!("ferry-tests: stopping pid {pid}, left running by an earlier test run that was killed");
            let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        }
        let _ = std::fs::remove_file(entry.path());
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    use super::*;

    #[test]
    fn a_child_of_a_gone_test_process_is_stopped_and_one_of_a_running_process_is_not() {
        // A "test process" that is gone: a child that ran and was reaped.
        let mut gone = Command::new("sleep").arg("60").spawn().expect("sleep");
        let (gone_pid, gone_start) = (gone.id(), started(gone.id()).expect("start time"));
        gone.kill().expect("kill");
        gone.wait().expect("reaped");
        let mut orphan = Command::new("sleep").arg("60").spawn().expect("sleep");
        let orphan_start = started(orphan.id()).expect("start time");
        std::fs::create_dir_all(dir()).expect("dir");
        std::fs::write(dir().join(orphan.id().to_string()), format!("{orphan_start} {gone_pid} {gone_start}\n"))
            .expect("pid file");
        // One of this (running) process: left alone.
        let mut kept = Command::new("sleep").arg("60").spawn().expect("sleep");
        record(kept.id());

        sweep();
        let status = orphan.wait().expect("the orphan ends");
        assert_eq!(status.signal(), Some(9), "killed: {status:?}");
        assert!(!dir().join(orphan.id().to_string()).exists(), "its file is removed");
        assert!(matches!(kept.try_wait(), Ok(None)), "the running process's child is left alone");
        assert!(dir().join(kept.id().to_string()).exists());
        kept.kill().expect("kill");
        kept.wait().expect("reaped");
        forget(kept.id());
        assert!(!dir().join(kept.id().to_string()).exists());
    }
}
