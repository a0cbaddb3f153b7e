//! ferry's MQTT 5 transport, on rumqttc's v5 client.
//!
//! - [`ingress`]: MQTT publish -> envelope (seed 000 "MQTT into the
//!   envelope" and seed 002: reserved `mqtt.*` headers, user-property
//!   admission, poison rules, identity precedence, correlation data).
//! - [`egress`]: envelope -> MQTT publish (topic templates, correlation
//!   data, expiry, user properties, non-text header drops).
//! - [`receiver`]: [`MqttReceiver`], a persistent session with manual acks:
//!   a QoS 1/2 message is acknowledged only when the route is done with it.
//! - [`sender`]: [`MqttSender`], which completes a send on PUBACK (QoS 1)
//!   or PUBCOMP (QoS 2).
//! - [`fixture`]: fixture publishes in and outbound publishes as JSON, for
//!   `ferry test`.
//! - [`config`]: the receiver's and sender's keys and their checks.
//! - [`connection`]: URL parsing, client options and reconnect backoff.
//! - [`transport`]: [`Mqtt`], the crate's entry in the daemon's transport
//!   table.

pub mod config;
pub mod connection;
pub mod egress;
pub mod fixture;
pub mod ingress;
pub mod receiver;
pub mod sender;
pub mod transport;

pub use receiver::MqttReceiver;
pub use sender::MqttSender;
pub use transport::Mqtt;
