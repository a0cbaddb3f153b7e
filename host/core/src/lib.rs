//! ferry's core: everything between a receiver and a sender, with no
//! transport SDK and no WebAssembly engine in sight.
//!
//! - [`error`]: failures classified once as transient or permanent.
//! - [`ports`]: the traits adapters implement — [`ports::Receiver`],
//!   [`ports::DeliveryHandle`], [`ports::Sender`], [`ports::Processor`].
//! - [`headers`]: the header rules every route applies on ingress.
//! - [`backoff`]: exponential backoff with jitter.
//! - [`dlq`]: the dead-letter store port and its file-backed default.
//! - [`metrics`]: the counters ferry exports, in Prometheus form.
//! - [`route`]: the route runtime (direct_hold delivery, dispatch, retries).

pub mod backoff;
pub mod dlq;
pub mod error;
pub mod headers;
pub mod metrics;
pub mod ports;
pub mod route;

pub use error::{ErrorClass, TransportError};
