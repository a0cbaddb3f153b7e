//! ferry's AWS SQS transport, on aws-sdk-sqs.
//!
//! - [`attributes`]: headers -> message attributes under SQS's ten-attribute
//!   and byte budgets (seed 000), body checks, and the MD5 digests SQS
//!   returns (seed 003).
//! - [`config`]: the receiver's and sender's keys and their checks.
//! - [`fixture`]: fixture messages in and outbound messages as JSON, for
//!   `ferry test`.
//! - [`ingress`]: SQS message -> envelope (attributes, system attributes,
//!   SNS unwrap).
//! - [`client`]: SDK client set-up, queue URL resolution, and the one place
//!   SDK errors are classified as transient or permanent.
//! - [`receiver`]: [`SqsReceiver`], long polling with a visibility
//!   heartbeat per held message and batched deletes.
//! - [`sender`]: [`SqsSender`], batching sends with per-message results,
//!   FIFO group and deduplication ids, and MD5 checks.
//! - [`transport`]: [`Sqs`], the crate's entry in the daemon's transport
//!   table.

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub DROPPED_ATTRIBUTES = ferry_core::metrics::Declared::counter(
    "sqs_dropped_attributes",
    &["sender"],
    "Headers an SQS sender could not send as attributes (SQSDroppedAttributes)"
));
ferry_core::declare_metric!(pub MD5_MISMATCH = ferry_core::metrics::Declared::counter(
    "sqs_md5_mismatch",
    &["receiver"],
    "SQS messages whose MD5 did not match what was received"
));

pub mod attributes;
pub mod client;
pub mod config;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod transport;

pub use receiver::SqsReceiver;
pub use sender::SqsSender;
pub use transport::Sqs;
