//! ferry's server-sent events transport (`type = "sse"`).
//!
//! - [`sender`]: [`SseSender`] serves each stream at `GET /stream/{name}`
//!   to any number of clients, with `Last-Event-ID` resume from a bounded
//!   replay buffer; a send is accepted once its event is in the buffer.
//! - [`receiver`]: [`SseReceiver`] follows a remote stream, each event a
//!   message, and resumes after a lost connection from the last event its
//!   route settled, leaving out the events it already took.
//! - [`ingress`]: an event -> envelope.
//! - [`config`]: the receiver's and sender's keys and their checks.
//! - [`fixture`]: events in and out as JSON, for `ferry test`.
//! - [`transport`]: [`Sse`], the crate's entry in the daemon's transport
//!   table.

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub CLIENTS = ferry_core::metrics::Declared::gauge(
    "sse_clients",
    &["sender", "stream"],
    "Clients an SSE sender serves now, by stream"
));
ferry_core::declare_metric!(pub REPLAY_GAPS = ferry_core::metrics::Declared::counter(
    "sse_replay_gaps",
    &["sender"],
    "Clients that resumed from an event the SSE sender no longer kept (they got all it kept)"
));
ferry_core::declare_metric!(pub EVENTS_MISSED = ferry_core::metrics::Declared::counter(
    "sse_events_missed",
    &["sender"],
    "Events a slow client of an SSE sender never got because they left the replay buffer first"
));
ferry_core::declare_metric!(pub EVENTS_SKIPPED = ferry_core::metrics::Declared::counter(
    "sse_events_skipped",
    &["receiver"],
    "Events an SSE receiver left out because it had taken them already (a reconnection's repeats)"
));

pub mod config;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod transport;

pub use receiver::SseReceiver;
pub use sender::SseSender;
pub use transport::Sse;
