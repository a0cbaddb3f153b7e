//! The `ferry` binary itself. Beyond what it checks, this target makes
//! `cargo test --workspace` build `target/<profile>/ferry` with the same
//! features as every test binary, so `just test` compiles the dependencies
//! once (a separate `cargo build -p ferry-daemon` unifies features
//! differently and compiled some 200 crates a second time).

use std::process::Command;

#[test]
fn the_binary_names_its_version_and_lists_its_commands() {
    let ferry = env!("CARGO_BIN_EXE_ferry");
    let version = Command::new(ferry).arg("--version").output().expect("ferry runs");
    assert!(version.status.success(), "{version:?}");
    let version = String::from_utf8_lossy(&version.stdout);
    let line = version.trim();
    let bare = format!("ferry {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&bare), "{line:?} does not start with {bare:?}");
    assert!(line.contains(", plugin contract ferry:plugin@") && line.ends_with(')'), "{line:?}");
    let help = Command::new(ferry).arg("--help").output().expect("ferry runs");
    let help = String::from_utf8_lossy(&help.stdout);
    for command in ["run", "validate", "test", "tap", "plugins", "dlq", "outbox"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(command)), "{command} missing from:\n{help}");
    }
}
