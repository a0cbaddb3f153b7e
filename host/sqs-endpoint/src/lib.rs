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
//! - [`topics`]: SNS topics, subscriptions and their fan-out to queues,
//!   webhooks and routes; [`filter`]: subscription filter policies.
//! - [`sns`]: the SNS actions (query protocol) on the same listener.
//! - [`bridge`]: the `sqs_endpoint` receiver and sender routes use;
//!   [`transport`]: [`SqsEndpoint`], their entry in the daemon's transport
//!   table.

pub mod actions;
pub mod auth;
pub mod bridge;
pub mod config;
pub mod engine;
pub mod error;
pub mod filter;
pub mod model;
pub mod protocol;
pub mod records;
pub mod server;
mod shared;
pub mod sns;
pub mod topics;
pub mod transport;
#[cfg(test)]
mod windows_tests;
pub mod xml;

pub use engine::{Engine, Identity};
pub use error::SqsError;
pub use server::{ServerOptions, serve};
pub use topics::Topics;
pub use transport::SqsEndpoint;
