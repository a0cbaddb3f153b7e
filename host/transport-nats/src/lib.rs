//! ferry's NATS JetStream transport, on async-nats.
//!
//! - [`config`]: the receiver's and sender's keys, their defaults and
//!   checks.
//! - [`ingress`]: a JetStream message -> envelope (headers as text, the
//!   identity from `Nats-Msg-Id`, the subject, stream sequence, delivery
//!   count and time as `nats.*` headers).
//! - [`egress`]: envelope -> publish (subject templates, `Nats-Msg-Id`,
//!   headers as text; JetStream's own `Nats-*` headers never pass).
//! - [`receiver`]: [`NatsReceiver`], a durable pull consumer: a message is
//!   acknowledged only after its route is done with it, and progress
//!   acknowledgements keep it while ferry holds it.
//! - [`sender`]: [`NatsSender`], which completes a send on the stream's
//!   acknowledgement (or, with `jetstream = false`, once written).
//! - [`fixture`]: fixture messages in and outbound publishes as JSON, for
//!   `ferry test`.
//! - [`connection`]: client options and the `--connect` probe.
//! - [`transport`]: [`Nats`], the crate's entry in the daemon's transport
//!   table.

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub HEADER_DROPPED = ferry_core::metrics::Declared::counter(
    "nats_header_dropped",
    &["sender"],
    "Headers a NATS sender could not send"
));
ferry_core::declare_metric!(pub DUPLICATES = ferry_core::metrics::Declared::counter(
    "nats_duplicates",
    &["sender", "stream"],
    "Publishes a JetStream stream acknowledged as duplicates (Nats-Msg-Id)"
));

pub mod config;
pub mod connection;
pub mod egress;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod transport;

pub use receiver::NatsReceiver;
pub use sender::NatsSender;
pub use transport::Nats;
