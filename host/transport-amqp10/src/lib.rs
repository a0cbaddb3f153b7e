//! ferry's AMQP 1.0 transport, on fe2o3-amqp.
//!
//! - [`fixture`]: fixture messages in and outbound messages as JSON, for
//!   `ferry test`.
//! - [`ingress`]: AMQP 1.0 message -> envelope (seed 000 "AMQP 1.0 into the
//!   envelope").
//! - [`egress`]: envelope -> AMQP 1.0 message (seed 000 "AMQP 1.0 out of the
//!   envelope").
//! - [`receiver`]: [`Amqp10Receiver`], one receiving link; a message is
//!   settled (accepted, modified/released, rejected) only when the route is
//!   done with it.
//! - [`sender`]: [`Amqp10Sender`], one sending link; a send completes on the
//!   broker's outcome.
//! - [`config`]: the `type = "amqp10"` keys, their defaults and checks.
//! - [`connection`]: opening connections and sessions with a deadline.
//! - [`transport`]: [`Amqp10`], the crate's entry in the daemon's transport
//!   table.

pub mod config;
pub mod connection;
pub mod egress;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod transport;

pub use config::{Amqp10ReceiverConfig, Amqp10RetryOutcome, Amqp10SenderConfig};
pub use receiver::Amqp10Receiver;
pub use sender::Amqp10Sender;
pub use transport::Amqp10;
