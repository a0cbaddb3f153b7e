//! What a running daemon serves beside its routes. Nothing here imports a
//! command of [`crate::cli`].
//!
//! - [`admin`]: the admin HTTP server (metrics, health, readiness, the
//!   admin API and the console).
//! - [`control`]: pause, resume, drain and reload of a running daemon.
//! - [`dead_letters`]: select, purge and replay dead letters; outbox depth.
//! - [`masking`]: the config with every secret masked.
//! - [`readiness`]: what must be up for `/readyz`.
//! - [`watchdog`]: whether the daemon is stuck (`/healthz`, `ferry_stalled`).

pub mod admin;
pub mod control;
pub mod dead_letters;
pub mod masking;
pub mod readiness;
pub mod watchdog;
