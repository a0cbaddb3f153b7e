//! Envelope -> AMQP 1.0 message: the rules of seed 000 ("AMQP 1.0 out of the
//! envelope").

use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Data, Header, Message, MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Symbol, Timestamp as AmqpTime};
use ferry_core::TransportError;
use ferry_envelope::{Envelope, HeaderValue, names};

use crate::config::{Amqp10Profile, Amqp10SenderConfig};
use crate::ingress::{
    CONTENT_ENCODING, CONTENT_TYPE, CORRELATION_ID, CREATION_TIME, GROUP_ID, GROUP_SEQUENCE, MESSAGE_ID, PARTITION_KEY,
    PREFIX, REPLY_TO, REPLY_TO_GROUP_ID, SCHEDULED_ENQUEUE_TIME, TO,
};

/// A message id from a header: text, a non-negative number, or bytes.
fn id_from(value: &HeaderValue) -> Option<MessageId> {
    match value {
        HeaderValue::Text(s) => Some(MessageId::String(s.clone())),
        HeaderValue::Integer(n) => u64::try_from(*n).ok().map(MessageId::Ulong),
        HeaderValue::Bytes(b) => Some(MessageId::Binary(Binary::from(b.to_vec()))),
        _ => None,
    }
}

fn text(envelope: &Envelope, name: &str) -> Option<String> {
    envelope.text_header(name).map(str::to_owned)
}

/// An envelope value as an application-property value.
pub(crate) fn simple(value: &HeaderValue) -> SimpleValue {
    match value {
        HeaderValue::Text(s) => SimpleValue::String(s.clone()),
        HeaderValue::Integer(n) => SimpleValue::Long(*n),
        HeaderValue::Float(f) => SimpleValue::Double((*f).into()),
        HeaderValue::Boolean(b) => SimpleValue::Bool(*b),
        HeaderValue::Time(t) => SimpleValue::Timestamp(AmqpTime::from_milliseconds(t.as_millis())),
        HeaderValue::Bytes(b) => SimpleValue::Binary(Binary::from(b.to_vec())),
    }
}

/// Refuses a per-message address other than the sender's link address: an
/// AMQP 1.0 link has one target.
pub fn check_address(config: &Amqp10SenderConfig, address: &str) -> Result<(), TransportError> {
    if !address.is_empty() && address != config.address {
        return Err(TransportError::permanent(format!(
            "address {address:?} differs from the sender's link address {:?}; an AMQP 1.0 link has one target",
            config.address
        )));
    }
    Ok(())
}

/// The message annotations a sender writes: `amqp10.partition-key` as
/// `x-opt-partition-key` and a time in `amqp10.scheduled-enqueue-time` as
/// `x-opt-scheduled-enqueue-time` (Service Bus enqueues the message then).
/// With the Service Bus profile the ordering key is the partition key when
/// none is set, as Service Bus wants it equal to the session id.
fn annotations(envelope: &Envelope, ordering_key: Option<&str>) -> Option<MessageAnnotations> {
    let mut builder = MessageAnnotations::builder();
    let mut any = false;
    if let Some(key) = envelope.text_header(PARTITION_KEY).or(ordering_key) {
        builder = builder.insert(Symbol::from("x-opt-partition-key"), key.to_owned());
        any = true;
    }
    if let Some(HeaderValue::Time(t)) = envelope.headers.get(SCHEDULED_ENQUEUE_TIME) {
        builder =
            builder.insert(Symbol::from("x-opt-scheduled-enqueue-time"), AmqpTime::from_milliseconds(t.as_millis()));
        any = true;
    }
    any.then(|| builder.build())
}

/// Builds the message for `envelope`. `durable` is the sender's setting;
/// with the Service Bus `profile`, the ordering key (`x-bridge.ordering-key`)
/// becomes the session id (`group-id`) unless `amqp10.group-id` is set.
pub fn to_message(envelope: &Envelope, durable: bool, profile: Amqp10Profile) -> Result<Message<Data>, TransportError> {
    let ordering_key = match profile {
        Amqp10Profile::AzureServiceBus => {
            envelope.derived_header(names::ORDERING_KEY).and_then(HeaderValue::as_text).filter(|k| !k.is_empty())
        }
        Amqp10Profile::Generic => None,
    };
    let message_id =
        envelope.headers.get(MESSAGE_ID).and_then(id_from).unwrap_or_else(|| MessageId::String(envelope.id.clone()));
    let correlation_id = envelope
        .headers
        .get(CORRELATION_ID)
        .and_then(id_from)
        .or_else(|| envelope.text_header(names::CORRELATION_ID).map(|s| MessageId::String(s.to_owned())));
    let creation_time = match envelope.headers.get(CREATION_TIME) {
        Some(HeaderValue::Time(t)) => *t,
        _ => envelope.created_at,
    };
    let group_sequence = match envelope.headers.get(GROUP_SEQUENCE) {
        Some(HeaderValue::Integer(n)) => Some(u32::try_from(*n).map_err(|_| {
            TransportError::permanent(format!("{GROUP_SEQUENCE} {n} is not a sequence number (0..=4294967295)"))
        })?),
        _ => None,
    };
    let properties = Properties {
        message_id: Some(message_id),
        user_id: None,
        to: text(envelope, TO),
        subject: envelope.subject.clone(),
        reply_to: text(envelope, REPLY_TO),
        correlation_id,
        content_type: text(envelope, CONTENT_TYPE).or_else(|| text(envelope, names::CONTENT_TYPE)).map(Symbol::from),
        content_encoding: text(envelope, CONTENT_ENCODING).map(Symbol::from),
        absolute_expiry_time: envelope.expires_at.map(|t| AmqpTime::from_milliseconds(t.as_millis())),
        creation_time: Some(AmqpTime::from_milliseconds(creation_time.as_millis())),
        group_id: text(envelope, GROUP_ID).or_else(|| ordering_key.map(str::to_owned)),
        group_sequence,
        reply_to_group_id: text(envelope, REPLY_TO_GROUP_ID),
    };
    let mut app = OrderedMap::new();
    for (name, value) in &envelope.headers {
        if name.starts_with(PREFIX) || names::is_private(name) {
            continue;
        }
        app.insert(name.clone(), simple(value));
    }
    Ok(Message {
        header: Some(Header { durable, ..Default::default() }),
        delivery_annotations: None,
        message_annotations: annotations(envelope, ordering_key),
        properties: Some(properties),
        application_properties: (!app.is_empty()).then_some(ApplicationProperties(app)),
        body: Data(Binary::from(envelope.payload().to_vec())),
        footer: None,
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use fe2o3_amqp::types::messaging::Body;
    use fe2o3_amqp::types::primitives::Value;
    use ferry_envelope::Timestamp;

    use super::*;
    use crate::ingress::{self, SUBJECT};

    #[test]
    fn a_message_survives_egress_then_ingress() {
        let mut e = Envelope::new("env-id", &b"payload"[..]);
        e.subject = Some("order.created".into());
        e.created_at = Timestamp(1_000);
        e.expires_at = Some(Timestamp(9_000));
        e.set_header(CORRELATION_ID, HeaderValue::Bytes(Bytes::from_static(&[1, 2])));
        e.set_header(CONTENT_TYPE, "text/plain");
        e.set_header(REPLY_TO, "replies");
        e.set_header(GROUP_SEQUENCE, HeaderValue::Integer(3));
        e.set_header(SUBJECT, "never used");
        e.set_header("count", HeaderValue::Integer(5));
        e.set_header("ratio", HeaderValue::Float(0.5));
        e.set_header("at", HeaderValue::Time(Timestamp(77)));
        e.set_header(names::ROUTE_ID, "private");
        e.set_header(names::TENANT_ID, "acme");
        let m = to_message(&e, true, Amqp10Profile::Generic).expect("maps");
        let p = m.properties.as_ref().expect("properties");
        assert_eq!(p.message_id, Some(MessageId::String("env-id".into())));
        assert_eq!(p.subject.as_deref(), Some("order.created"));
        assert!(m.header.as_ref().is_some_and(|h| h.durable));
        let app = &m.application_properties.as_ref().expect("app properties").0;
        assert!(app.get("x-bridge.route-id").is_none(), "private headers stay home");
        assert!(app.get(SUBJECT).is_none(), "amqp10.* headers are not application properties");
        assert_eq!(app.get("x-bridge.tenant-id"), Some(&SimpleValue::String("acme".into())));

        let back = Message {
            header: m.header.clone(),
            delivery_annotations: None,
            message_annotations: None,
            properties: m.properties.clone(),
            application_properties: m.application_properties.clone(),
            body: Body::<Value>::Data(vec![m.body.clone()].into()),
            footer: None,
        };
        let i = ingress::to_envelope(&back, 1024, Timestamp(0)).expect("converts").envelope;
        assert_eq!(i.id, "env-id");
        assert_eq!(i.subject.as_deref(), Some("order.created"));
        assert_eq!(i.payload().as_ref(), b"payload");
        assert_eq!(i.created_at, Timestamp(1_000));
        assert_eq!(i.expires_at, Some(Timestamp(9_000)));
        assert_eq!(i.headers.get(CORRELATION_ID), Some(&HeaderValue::Bytes(Bytes::from_static(&[1, 2]))));
        assert_eq!(i.text_header(CONTENT_TYPE), Some("text/plain"));
        assert_eq!(i.text_header(REPLY_TO), Some("replies"));
        assert_eq!(i.headers.get(GROUP_SEQUENCE), Some(&HeaderValue::Integer(3)));
        assert_eq!(i.headers.get("count"), Some(&HeaderValue::Integer(5)));
        assert_eq!(i.headers.get("ratio"), Some(&HeaderValue::Float(0.5)));
        assert_eq!(i.headers.get("at"), Some(&HeaderValue::Time(Timestamp(77))));
    }

    #[test]
    fn a_producer_chooses_the_message_id_and_bad_sequences_fail_permanently() {
        let mut e = Envelope::new("env-id", &b""[..]);
        e.set_header(MESSAGE_ID, HeaderValue::Integer(12));
        e.set_header(names::CORRELATION_ID, "corr");
        let m = to_message(&e, false, Amqp10Profile::Generic).expect("maps");
        let p = m.properties.as_ref().expect("properties");
        assert_eq!(p.message_id, Some(MessageId::Ulong(12)));
        assert_eq!(p.correlation_id, Some(MessageId::String("corr".into())));
        assert!(m.header.as_ref().is_some_and(|h| !h.durable));
        e.set_header(GROUP_SEQUENCE, HeaderValue::Integer(-1));
        assert!(!to_message(&e, true, Amqp10Profile::Generic).expect_err("negative").is_transient());
    }

    #[test]
    fn service_bus_sends_the_ordering_key_as_session_and_partition_key() {
        let mut e = Envelope::new("env-id", &b"x"[..]);
        e.derive_header(names::ORDERING_KEY, "customer-7");
        e.set_header(SCHEDULED_ENQUEUE_TIME, HeaderValue::Time(Timestamp(1_800_000_000_000)));
        let m = to_message(&e, true, Amqp10Profile::AzureServiceBus).expect("maps");
        assert_eq!(m.properties.as_ref().and_then(|p| p.group_id.as_deref()), Some("customer-7"));
        let annotations = m.message_annotations.as_ref().expect("annotations");
        let get = |key: &str| {
            annotations.0.iter().find_map(|(k, v)| {
                matches!(k, fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s) if s.0 == key).then_some(v)
            })
        };
        assert_eq!(get("x-opt-partition-key"), Some(&Value::String("customer-7".into())));
        assert_eq!(
            get("x-opt-scheduled-enqueue-time"),
            Some(&Value::Timestamp(AmqpTime::from_milliseconds(1_800_000_000_000)))
        );
        // A group id set on purpose wins; other brokers get no session.
        e.set_header(GROUP_ID, "g");
        let m = to_message(&e, true, Amqp10Profile::AzureServiceBus).expect("maps");
        assert_eq!(m.properties.as_ref().and_then(|p| p.group_id.as_deref()), Some("g"));
        let m = to_message(&e, true, Amqp10Profile::Generic).expect("maps");
        assert_eq!(m.properties.as_ref().and_then(|p| p.group_id.as_deref()), Some("g"));
        e.headers.remove(GROUP_ID);
        let m = to_message(&e, true, Amqp10Profile::Generic).expect("maps");
        assert_eq!(m.properties.as_ref().and_then(|p| p.group_id.clone()), None);
        assert!(m.message_annotations.is_some(), "the scheduled time is sent to any broker");
    }
}
