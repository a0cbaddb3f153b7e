//! The ferry daemon as a library, so the binary stays a thin CLI.
//!
//! - [`cli`]: one module per `ferry` command, each returning its exit code
//!   through one path ([`cli::Failure`]).
//! - [`runtime`]: what a running daemon serves beside its routes: the admin
//!   server, readiness, the watchdog, runtime control, dead-letter
//!   operations and the masked config.
//! - [`api`]: the admin API's requests and answers as types, shared by the
//!   admin server and the commands that call it.
//! - [`wiring`]: config -> transports, plugins and routes ([`wiring::Bridge`]).
//! - [`telemetry`]: OTLP traces and metrics when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//! - [`explain`]: the fidelity report (`ferry validate --explain`, `GET /config`).
//! - [`exposition`]: the `/metrics` text, written and read back.
//! - [`watch`]: hot reload of plugins on changes in the plugin directory.
//! - [`logging`]: tracing setup (`--log-format`, `--log-level`, `FERRY_LOG`).
//! - [`transports`]: the one table of transports, looked up by `type`.

pub mod api;
pub mod cli;
pub mod explain;
pub mod exposition;
pub mod logging;
pub mod mqbridge;
pub mod process;
pub mod runtime;
pub mod telemetry;
pub mod transports;
pub mod watch;
pub mod wiring;
