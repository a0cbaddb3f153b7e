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

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub INGRESS_HEADER_DROPPED = ferry_core::metrics::Declared::counter(
    "mqtt_ingress_header_dropped",
    &["receiver"],
    "MQTT user properties refused at ingress (MQTTIngressHeaderDropped)"
));
ferry_core::declare_metric!(pub INGRESS_POISON_DROPPED = ferry_core::metrics::Declared::counter(
    "mqtt_ingress_poison_dropped",
    &["receiver", "reason"],
    "MQTT publishes dropped whole as poison (MQTTIngressPoisonDropped)"
));
ferry_core::declare_metric!(pub NON_STRING_HEADER_DROPPED = ferry_core::metrics::Declared::counter(
    "mqtt_non_string_header_dropped",
    &["sender"],
    "Non-text headers an MQTT sender dropped (MQTTNonStringHeaderDropped)"
));

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
