//! The ferry daemon as a library, so the binary stays a thin CLI.
//!
//! - [`admin`]: the admin HTTP server (metrics, health, readiness).
//! - [`api`]: the admin API's requests and answers as types.
//! - [`control`]: pause, resume, drain and reload of a running daemon;
//!   [`ctl`]: `ferry ctl`, its command line.
//! - [`wiring`]: config -> transports, plugins and routes ([`wiring::Bridge`]).
//! - [`commands`]: `run`, `validate` and `render`.
//! - [`telemetry`]: OTLP trace export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//! - [`explain`]: `ferry validate --explain`, the fidelity report.
//! - [`dlq`]: `ferry dlq …` and `ferry outbox stats` on the store.
//! - [`pipeline_test`]: `ferry test`, fixture messages through a config's
//!   routes with no broker.
//! - [`plugins`]: `ferry plugins list` and `ferry plugins check`.
//! - [`tap`]: `ferry tap`, live messages of a running route.
//! - [`top`]: `ferry top`, a terminal view of a running daemon's routes.
//! - [`watch`]: hot reload of plugins on changes in the plugin directory.
//! - [`logging`]: tracing setup (`--log-format`, `--log-level`, `FERRY_LOG`).
//! - [`watchdog`]: whether the daemon is stuck (`/healthz`, `ferry_stalled`).
//! - [`transports`]: the one table of transports, looked up by `type`.

pub mod admin;
pub mod api;
pub mod commands;
pub mod control;
pub mod ctl;
pub mod dlq;
pub mod explain;
pub mod exposition;
pub mod logging;
pub mod mqbridge;
pub mod pipeline_test;
pub mod plugins;
pub mod process;
pub mod readiness;
pub mod scaffold;
pub mod tap;
pub mod telemetry;
pub mod top;
pub mod transports;
pub mod watch;
pub mod watchdog;
pub mod wiring;
