//! The `ferry` commands, one module each:
//!
//! - [`run`]: the daemon; [`validate`] (with `--explain`, `--connect`);
//!   [`render`]; [`test`]: fixture messages through a config's routes with
//!   no broker;
//! - [`dlq`]: `ferry dlq …` and `ferry outbox stats`; [`ctl`]: runtime
//!   control; [`tap`]: live messages of a route; [`top`]: a terminal view;
//! - [`plugins`]: `ferry plugins list|check|compile`; [`scaffold`]:
//!   `ferry plugins new|wit`.
//!
//! A command that fails says why on stderr and exits 2 (bad input: the
//! config, the arguments, a daemon that refuses) or 1 (it ran and found a
//! failure), through [`Failure`].

use std::path::Path;
use std::process::ExitCode;

use ferry_config::Config;

pub mod ctl;
pub mod dlq;
pub mod plugins;
pub mod render;
pub mod run;
pub mod scaffold;
pub mod tap;
pub mod test;
pub mod top;
pub mod validate;

/// Why a command failed: what it prints on stderr, and its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Exit 2: the input is wrong (a config that does not load, an
    /// argument, a daemon that refuses the request).
    pub fn input(message: impl std::fmt::Display) -> Self {
        Self { code: 2, message: message.to_string() }
    }

    /// Exit 1: the command ran and what it checked failed.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        Self { code: 1, message: message.to_string() }
    }
}

/// The config at `path`, or a [`Failure::input`] naming the file.
pub fn load_config(path: &Path) -> Result<Config, Failure> {
    ferry_config::load(path).map_err(|e| Failure::input(format!("{}: {e}", path.display())))
}

/// The one place a command's outcome becomes its exit code (and a failure
/// its line on stderr).
pub fn exit(outcome: Result<ExitCode, Failure>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(Failure { code, message }) => {
            if !message.is_empty() {
                eprintln!("{message}");
            }
            ExitCode::from(code)
        }
    }
}
