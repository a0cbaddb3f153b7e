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

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub REQUESTS = ferry_core::metrics::Declared::counter(
    "http_requests",
    &["receiver", "status"],
    "Requests an HTTP receiver answered, by status"
));
ferry_core::declare_metric!(pub HEADER_DROPPED = ferry_core::metrics::Declared::counter(
    "http_header_dropped",
    &["sender"],
    "Headers an HTTP sender could not send"
));

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
