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
//! - [`service_bus`]: the Azure Service Bus profile: SAS tokens on `$cbs`,
//!   lock renewal, sessions, dead-lettering.
//! - [`transport`]: [`Amqp10`], the crate's entry in the daemon's transport
//!   table.

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub TOKENS = ferry_core::metrics::Declared::counter(
    "amqp10_sas_tokens",
    &["name", "outcome"],
    "SAS tokens a Service Bus receiver or sender put on $cbs (outcome put) or had refused (refused)"
));
ferry_core::declare_metric!(pub LOCK_RENEWALS = ferry_core::metrics::Declared::counter(
    "amqp10_lock_renewals",
    &["receiver", "outcome"],
    "Lock renewals of messages a Service Bus receiver holds: renewed, or failed (the lock may be lost and the message comes again)"
));

pub mod config;
pub mod connection;
pub mod egress;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod service_bus;
pub mod transport;

pub use config::{Amqp10Profile, Amqp10ReceiverConfig, Amqp10RetryOutcome, Amqp10SenderConfig};
pub use receiver::Amqp10Receiver;
pub use sender::Amqp10Sender;
pub use transport::Amqp10;
