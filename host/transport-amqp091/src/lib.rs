//! ferry's AMQP 0-9-1 transport (RabbitMQ), on lapin.
//!
//! - [`config`]: the receiver's and sender's keys, their defaults and
//!   checks.
//! - [`fixture`]: fixture messages in and outbound messages as JSON, for
//!   `ferry test`.
//! - [`ingress`]: delivery -> envelope (routing key, exchange, properties
//!   and typed headers; `gobridge.subject` is the subject carrier).
//! - [`egress`]: envelope -> publish (routing key from the binding address,
//!   exchange from config or a header, properties and headers).
//! - [`receiver`]: [`Amqp091Receiver`], a queue consumer acked by the route;
//!   retries are nack/requeue after the backoff, counted so they end.
//! - [`settle`]: [`Settler`](settle::Settler), one task per consumer
//!   channel writing its acks, in ranges (`multiple`) where that is safe.
//! - [`sender`]: [`Amqp091Sender`], publisher confirms and mandatory
//!   publishing on a supervised connection.
//! - [`connection`]: connecting with a deadline.
//! - [`transport`]: [`Amqp091`], the crate's entry in the daemon's transport
//!   table.

pub mod config;
pub mod connection;
pub mod egress;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod settle;
pub mod transport;

pub use config::{Amqp091ReceiverConfig, Amqp091SenderConfig, RoutingKeys};
pub use receiver::Amqp091Receiver;
pub use sender::Amqp091Sender;
pub use transport::Amqp091;
