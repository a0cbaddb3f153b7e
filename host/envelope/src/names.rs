//! Reserved header names: the `x-bridge.*` namespace owned by ferry and the
//! carriers every transport agrees on.

/// Prefix of every header ferry owns. Publishers cannot set these.
pub const RESERVED_PREFIX: &str = "x-bridge.";

/// Correlation id: stamped by the route when missing.
pub const CORRELATION_ID: &str = "x-bridge.correlation-id";
/// Binary correlation data as unpadded URL-safe base64 (MQTT ingress only).
pub const CORRELATION_DATA: &str = "x-bridge.correlation-data";
/// Content type read from the source transport.
pub const CONTENT_TYPE: &str = "x-bridge.content-type";
/// Marks an identity the ingress adapter minted (the source had none).
pub const GENERATED_ID: &str = "x-bridge.generated-id";
/// The route that handled the message.
pub const ROUTE_ID: &str = "x-bridge.route-id";
/// The receiver the message came from.
pub const SOURCE_ID: &str = "x-bridge.source-id";
/// Id of the message that caused this one (set on replay).
pub const CAUSATION_ID: &str = "x-bridge.causation-id";
/// Tenant stamped by the tenant processor.
pub const TENANT_ID: &str = "x-bridge.tenant-id";
/// Bridge that forwarded the message.
pub const FORWARDED_FROM: &str = "x-bridge.forwarded-from";
/// Hop count across bridges.
pub const FORWARDED_HOP: &str = "x-bridge.forwarded-hop";
/// Idempotency key kept first by the SQS attribute budget.
pub const IDEMPOTENCY_KEY: &str = "x-bridge.idempotency-key";
/// Deduplication id for FIFO targets.
pub const DEDUP_ID: &str = "x-bridge.dedup-id";
/// Ordering key for FIFO targets.
pub const ORDERING_KEY: &str = "x-bridge.ordering-key";

/// The explicit carrier of the logical subject on transports with headers.
pub const SUBJECT_CARRIER: &str = "gobridge.subject";

/// Reserved headers a receiving adapter derives from the wire itself. It
/// records them with `Envelope::derive_header`, apart from the publisher's
/// headers; a publisher's header of one of these names is just another
/// reserved header, which the route strips unless it trusts bridge headers.
pub const ADAPTER_DERIVED: [&str; 4] = [CORRELATION_ID, CORRELATION_DATA, CONTENT_TYPE, GENERATED_ID];

/// Reserved headers that never leave the process as ordinary headers:
/// transports either map them onto native fields or skip them. The
/// bridge-to-bridge headers (correlation, causation, tenant, forwarded-*) are
/// not private: transports with headers send them on.
pub const PRIVATE: [&str; 5] = [CORRELATION_DATA, CONTENT_TYPE, GENERATED_ID, ROUTE_ID, SOURCE_ID];

/// Whether a header name is in ferry's reserved namespace.
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// Whether a header is private bookkeeping (see [`PRIVATE`]).
pub fn is_private(name: &str) -> bool {
    PRIVATE.contains(&name)
}
