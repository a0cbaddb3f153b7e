//! ferry as an SQS server (issue 20, seed 003): applications keep their AWS
//! SDK code, point its endpoint at ferry, and their queues live in ferry's
//! store.
//!
//! - [`engine`]: the queues — registry, visibility, receipt handles,
//!   retention, delays, FIFO groups and deduplication, redrive — written
//!   through to the store before any call that changed them returns: in
//!   memory over the embedded store, in PostgreSQL's tables (`shared`)
//!   over a shared store, where every instance serves them.
//! - [`model`]: message attributes and queue attributes, with SQS's limits.
//! - [`protocol`]: AWS JSON 1.0 and the query protocol, read into one shape
//!   and written back in their own.
//! - [`actions`]: the SQS actions over that shape.
//! - [`auth`]: SigV4 verification of requests (`auth = "verify"`).
//! - [`error`]: SQS's errors as each protocol names them.
//! - [`server`]: the HTTP server.
//! - [`sns`]: SNS in a module tree of its own: its actions (query
//!   protocol) on the same listener; [`sns::topics`]: topics,
//!   subscriptions and their fan-out to queues, webhooks and routes;
//!   [`sns::filter`]: subscription filter policies.
//! - [`bridge`]: the `sqs_endpoint` receiver and sender routes use;
//!   [`transport`]: [`SqsEndpoint`], their entry in the daemon's transport
//!   table.

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub REQUESTS = ferry_core::metrics::Declared::counter(
    "sqs_endpoint_requests",
    &["action", "queue", "code"],
    "Requests the SQS endpoint answered, by action, queue and code"
));
ferry_core::declare_metric!(pub SNS_DELIVERIES = ferry_core::metrics::Declared::counter(
    "sns_endpoint_deliveries",
    &["topic", "protocol", "outcome"],
    "Deliveries of SNS publishes on the endpoint, by topic, protocol and outcome"
));
ferry_core::declare_metric!(pub MESSAGES = ferry_core::metrics::Declared::gauge(
    "sqs_endpoint_messages",
    &["queue", "state"],
    "Messages in an SQS endpoint queue, by state"
));
ferry_core::declare_metric!(pub OLDEST_AGE_SECONDS = ferry_core::metrics::Declared::gauge(
    "sqs_endpoint_oldest_age_seconds",
    &["queue"],
    "Age of the oldest message in an SQS endpoint queue"
));

pub mod actions;
pub mod auth;
pub mod bridge;
pub mod config;
pub mod engine;
pub mod error;
pub mod model;
pub mod protocol;
mod queues;
pub mod records;
pub mod server;
mod shared;
pub mod sns;
pub mod transport;
#[cfg(test)]
mod windows_tests;
pub mod xml;

pub use engine::{Engine, Identity};
pub use error::SqsError;
pub use server::{ServerOptions, serve};
pub use sns::topics::Topics;
pub use transport::SqsEndpoint;
