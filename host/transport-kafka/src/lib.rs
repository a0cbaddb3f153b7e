//! ferry's Kafka transport, on rdkafka (librdkafka).
//!
//! - [`config`]: the sender's keys, their defaults and checks.
//! - [`egress`]: envelope -> record (the topic from a template, the key
//!   from a header, headers as record headers, the identity and subject
//!   as headers of their own).
//! - [`sender`]: [`KafkaSender`], an idempotent producer (`acks=all`)
//!   whose send ends with the record's delivery report.
//! - [`fixture`]: fixture records in and outbound records as JSON, for
//!   `ferry test`.
//! - [`ingress`]: record -> envelope (the identity header or the record's
//!   place in the log, headers as text or bytes, the topic, partition,
//!   offset, key and timestamp as `kafka.*` headers).
//! - [`offsets`]: which offset of each partition a consumer may commit:
//!   never past one the route still holds.
//! - [`receiver`]: [`KafkaReceiver`], a consumer in a consumer group that
//!   commits behind settled records and holds given-back ones itself.
//!
//! - [`transport`]: [`Kafka`], the crate's entry in the daemon's
//!   transport table.

pub mod config;
pub mod egress;
pub mod fixture;
pub mod ingress;
pub mod offsets;
pub mod receiver;
pub mod sender;
pub mod transport;

/// The client, for tests and tools that talk to the same cluster.
pub use rdkafka;
pub use receiver::KafkaReceiver;
pub use sender::KafkaSender;
pub use transport::Kafka;
