//! ferry's HTTP transport (`type = "http"`).
//!
//! - [`receiver`]: ferry listens; each POST is a message, and the reply
//!   waits for the route (200/202 once it is safe, 503 with `Retry-After`
//!   when it is not).
//! - [`sender`]: each message is a request; 408, 429 and 5xx are transient
//!   and honour `Retry-After`, other statuses permanent.
//! - [`simplemq`]: Sakura Cloud's SimpleMQ queue (`type = "simplemq"`),
//!   receiver and sender, with mqbridge's header names when asked.
//! - [`config`]: the receivers' and senders' keys and their checks.
//! - [`auth`]: bearer tokens and `X-Ferry-Signature` HMACs.
//! - [`fixture`]: requests for `ferry test`.
//! - [`transport`]: [`Http`] and [`Simplemq`], the crate's entries in the
//!   daemon's transport table.

pub mod auth;
pub mod config;
pub mod fixture;
pub mod probe;
pub mod receiver;
pub mod sender;
pub mod simplemq;
pub mod transport;

pub use receiver::HttpReceiver;
pub use sender::HttpSender;
pub use simplemq::{SimplemqReceiver, SimplemqSender};
pub use transport::{Http, Simplemq};
