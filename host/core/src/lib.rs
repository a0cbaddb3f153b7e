//! ferry's core: everything between a receiver and a sender, with no
//! transport SDK and no WebAssembly engine in sight.
//!
//! - [`address`]: binding address templates (`orders.{region}`).
//! - [`error`]: failures classified once as transient or permanent.
//! - [`failure`]: the typed reason a message failed for good.
//! - [`fidelity`]: the probe messages of `ferry validate --explain`.
//! - [`ports`]: the traits adapters implement — [`ports::Receiver`],
//!   [`ports::DeliveryHandle`], [`ports::Sender`], [`ports::Processor`].
//! - [`headers`]: the header rules every route applies on ingress.
//! - [`backoff`]: exponential backoff with jitter.
//! - [`clock`]: the route's time source (pausable in tests).
//! - [`dlq`]: the dead-letter store port.
//! - [`outbox`]: the outbox store port (`shared_outbox` delivery).
//! - [`ledger`]: redelivery counts for sources that do not keep one.
//! - [`listeners`]: the addresses the daemon's listeners are bound to.
//! - [`metrics`]: the counters ferry exports, in Prometheus form.
//! - [`records`]: keyed records ferry keeps of its own (the SQS endpoint).
//! - [`redact`]: passwords out of logged URLs.
//! - [`shadow`]: a shadow processor beside a live one (shadow rollout).
//! - [`route`]: the route runtime (direct_hold delivery, dispatch, retries).
//! - [`trace`]: OpenTelemetry spans and W3C trace context in headers.
//! - [`tap`]: live copies of a route's messages for `ferry tap`.
//! - [`wire`]: messages as a transport carries them, as JSON (`ferry test`).
//! - [`supervisor`]: keeps a sender's connection up and replaces it when broken.
//! - [`transport`]: the trait each transport crate implements for the
//!   daemon's one table of transports.

pub mod address;
pub mod backoff;
pub mod clock;
pub mod dlq;
pub mod error;
pub mod failure;
pub mod fidelity;
pub mod headers;
pub mod json_wire;
pub mod ledger;
pub mod listeners;
pub mod metrics;
pub mod outbox;
pub mod ports;
pub mod records;
pub mod redact;
pub mod route;
pub mod shadow;
pub mod supervisor;
pub mod tap;
pub mod trace;
pub mod transport;
pub mod wire;

pub use error::{ErrorClass, TransportError};
pub use failure::{Failure, FailureReason};
