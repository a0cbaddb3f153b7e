//! ferry's Redis Streams transport, on redis-rs.
//!
//! - [`config`]: the receiver's and sender's keys, their defaults and
//!   checks.
//! - [`ingress`]: a stream entry -> envelope (the payload field, the
//!   identity field, other fields as headers, the stream, entry id,
//!   delivery count and time as `redis.*` headers).
//! - [`egress`]: envelope -> `XADD` (stream key templates, the identity
//!   and payload fields, headers as fields).
//! - [`receiver`]: [`RedisReceiver`], a consumer in a consumer group: an
//!   entry is acknowledged only after its route is done with it, held
//!   entries are kept from other consumers, idle ones are claimed.
//! - [`sender`]: [`RedisSender`], which completes a send once Redis
//!   answered with the new entry's id.
//! - [`entry`]: entries out of Redis's replies.
//! - [`fixture`]: fixture entries in and outbound `XADD`s as JSON, for
//!   `ferry test`.
//! - [`link`]: connections and the `--connect` probe.
//! - [`transport`]: [`RedisStreams`], the crate's entry in the daemon's
//!   transport table.

// This transport's own metric families (registered at start, listed in the
// book's metrics reference).
ferry_core::declare_metric!(pub FIELD_DROPPED = ferry_core::metrics::Declared::counter(
    "redis_field_dropped",
    &["name", "direction"],
    "Redis Streams fields that could not cross, by name and direction"
));

pub mod config;
pub mod egress;
pub mod entry;
pub mod fixture;
pub mod ingress;
pub mod link;
pub mod receiver;
pub mod sender;
pub mod transport;

pub use receiver::RedisReceiver;
pub use sender::RedisSender;
pub use transport::RedisStreams;
