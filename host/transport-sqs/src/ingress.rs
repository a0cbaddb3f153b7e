//! SQS message -> envelope (seed 000, "SQS into the envelope").

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ferry_envelope::{Envelope, HeaderValue, Timestamp, names};

use crate::attributes::{AttrBytes, SUBJECT, md5_of_attributes, md5_of_body};

/// Why a received message was not converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngressError {
    /// The body or attributes do not match the MD5 SQS sent with them: the
    /// message is left on the queue to come back.
    Md5Mismatch(String),
}

/// Prefix of the headers made from system attributes.
pub const SYSTEM_PREFIX: &str = "sqs.";

/// Converts one received message after checking its digests. `now` is
/// the receive time.
pub fn to_envelope(message: &Message, sns_unwrap: bool, now: Timestamp) -> Result<Envelope, IngressError> {
    check_digests(message)?;
    Ok(convert(message, sns_unwrap, now))
}

/// Whether the body and attributes match the MD5 digests SQS sent with them.
pub fn check_digests(message: &Message) -> Result<(), IngressError> {
    let body = message.body().unwrap_or_default();
    if let Some(expected) = message.md5_of_body()
        && !expected.eq_ignore_ascii_case(&md5_of_body(body))
    {
        return Err(IngressError::Md5Mismatch("MD5OfBody does not match the body".into()));
    }
    if let Some(attrs) = message.message_attributes().filter(|a| !a.is_empty())
        && let Some(expected) = message.md5_of_message_attributes()
    {
        let actual = md5_of_attributes(attrs.iter().map(|(name, v)| {
            let bytes = match v.binary_value() {
                Some(b) if v.data_type().starts_with("Binary") => AttrBytes::Binary(b.as_ref()),
                _ => AttrBytes::Text(v.string_value().unwrap_or_default()),
            };
            (name.as_str(), v.data_type(), bytes)
        }));
        if !expected.eq_ignore_ascii_case(&actual) {
            return Err(IngressError::Md5Mismatch("MD5OfMessageAttributes does not match the attributes".into()));
        }
    }
    Ok(())
}

/// Converts one received message without checking its digests (see
/// [`check_digests`]).
pub fn convert(message: &Message, sns_unwrap: bool, now: Timestamp) -> Envelope {
    let body = message.body().unwrap_or_default();
    let mut envelope = Envelope::new(String::new(), body.as_bytes().to_vec());
    envelope.created_at = now;
    match message.message_id() {
        Some(id) if !id.is_empty() => envelope.id = id.to_owned(),
        _ => {
            envelope.id = uuid::Uuid::new_v4().to_string();
            envelope.derive_header(names::GENERATED_ID, HeaderValue::Boolean(true));
        }
    }

    for (name, value) in message.message_attributes().into_iter().flatten() {
        let header = match value.binary_value() {
            Some(b) if value.data_type().starts_with("Binary") => HeaderValue::Bytes(b.as_ref().to_vec().into()),
            _ => HeaderValue::Text(value.string_value().unwrap_or_default().to_owned()),
        };
        if name == SUBJECT
            && value.data_type().starts_with("String")
            && let HeaderValue::Text(s) = &header
        {
            envelope.subject = Some(s.clone());
        }
        envelope.headers.insert(name.clone(), header);
    }

    for (name, value) in message.attributes().into_iter().flatten() {
        let key = format!("{SYSTEM_PREFIX}{}", name.as_str());
        let header = match name {
            MessageSystemAttributeName::SentTimestamp => match value.parse::<i64>() {
                Ok(ms) => {
                    envelope.created_at = Timestamp(ms);
                    HeaderValue::Time(Timestamp(ms))
                }
                Err(_) => HeaderValue::Text(value.clone()),
            },
            MessageSystemAttributeName::ApproximateReceiveCount => {
                value.parse::<i64>().map(HeaderValue::Integer).unwrap_or_else(|_| HeaderValue::Text(value.clone()))
            }
            _ => HeaderValue::Text(value.clone()),
        };
        envelope.headers.insert(key, header);
    }

    if sns_unwrap {
        unwrap_sns(&mut envelope, body);
    }
    envelope
}

/// The receive count SQS reported, if any.
pub fn receive_count(message: &Message) -> Option<u32> {
    message.attributes()?.get(&MessageSystemAttributeName::ApproximateReceiveCount)?.parse().ok()
}

/// Replaces an SNS notification body with the message inside it and maps
/// its MessageAttributes (`{Type, Value}`, Binary in base64) to headers.
/// A body that is not an SNS notification is left as it is.
fn unwrap_sns(envelope: &mut Envelope, body: &str) {
    let Ok(serde_json::Value::Object(doc)) = serde_json::from_str::<serde_json::Value>(body) else { return };
    if doc.get("Type").and_then(|t| t.as_str()) != Some("Notification") {
        return;
    }
    let Some(inner) = doc.get("Message").and_then(|m| m.as_str()) else { return };
    envelope.set_payload(inner.as_bytes().to_vec());
    for (key, header) in [("TopicArn", "sns.TopicArn"), ("MessageId", "sns.MessageId"), ("Subject", "sns.Subject")] {
        if let Some(v) = doc.get(key).and_then(|v| v.as_str()) {
            envelope.set_header(header, v);
        }
    }
    if let Some(serde_json::Value::Object(attrs)) = doc.get("MessageAttributes") {
        for (name, attr) in attrs {
            let ty = attr.get("Type").and_then(|t| t.as_str()).unwrap_or("String");
            let Some(value) = attr.get("Value").and_then(|v| v.as_str()) else { continue };
            let header = if ty.starts_with("Binary") {
                match STANDARD.decode(value) {
                    Ok(bytes) => HeaderValue::Bytes(bytes.into()),
                    Err(_) => continue,
                }
            } else {
                HeaderValue::Text(value.to_owned())
            };
            envelope.headers.insert(name.clone(), header);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::primitives::Blob;
    use aws_sdk_sqs::types::MessageAttributeValue;

    fn attr(ty: &str, s: Option<&str>, b: Option<&[u8]>) -> MessageAttributeValue {
        let mut v = MessageAttributeValue::builder().data_type(ty);
        if let Some(s) = s {
            v = v.string_value(s);
        }
        if let Some(b) = b {
            v = v.binary_value(Blob::new(b.to_vec()));
        }
        v.build().expect("attribute")
    }

    #[test]
    fn attributes_system_attributes_and_subject_map_as_the_seed_says() {
        let m = Message::builder()
            .message_id("mid-1")
            .body("{\"a\":1}")
            .md5_of_body(md5_of_body("{\"a\":1}"))
            .message_attributes("Subject", attr("String", Some("order.created"), None))
            .message_attributes("count", attr("Number", Some("7"), None))
            .message_attributes("raw", attr("Binary", None, Some(&[0, 1])))
            .message_attributes("x-bridge.tenant-id", attr("String", Some("spoof"), None))
            .attributes(MessageSystemAttributeName::SentTimestamp, "1700000000123")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "3")
            .attributes(MessageSystemAttributeName::SenderId, "AIDA")
            .build();
        let e = to_envelope(&m, false, Timestamp(5)).expect("converts");
        assert_eq!(e.id, "mid-1");
        assert_eq!(e.payload().as_ref(), b"{\"a\":1}");
        assert_eq!(e.subject.as_deref(), Some("order.created"));
        assert_eq!(e.text_header("Subject"), Some("order.created"));
        assert_eq!(e.text_header("count"), Some("7"));
        assert_eq!(e.headers.get("raw"), Some(&HeaderValue::Bytes(vec![0u8, 1].into())));
        // Handed to the route, whose header rules decide.
        assert_eq!(e.text_header("x-bridge.tenant-id"), Some("spoof"));
        assert_eq!(e.headers.get("sqs.SentTimestamp"), Some(&HeaderValue::Time(Timestamp(1_700_000_000_123))));
        assert_eq!(e.created_at, Timestamp(1_700_000_000_123));
        assert_eq!(e.headers.get("sqs.ApproximateReceiveCount"), Some(&HeaderValue::Integer(3)));
        assert_eq!(e.text_header("sqs.SenderId"), Some("AIDA"));
        assert_eq!(receive_count(&m), Some(3));
    }

    #[test]
    fn a_body_whose_md5_does_not_match_is_refused() {
        let m =
            Message::builder().message_id("m").body("hello").md5_of_body("00000000000000000000000000000000").build();
        assert!(matches!(to_envelope(&m, false, Timestamp(0)), Err(IngressError::Md5Mismatch(_))));
    }

    #[test]
    fn sns_notifications_are_unwrapped() {
        let body = serde_json::json!({
            "Type": "Notification",
            "MessageId": "sns-1",
            "TopicArn": "arn:aws:sns:us-east-1:000000000000:t",
            "Message": "{\"inner\":true}",
            "MessageAttributes": {
                "kind": {"Type": "String", "Value": "temp"},
                "blob": {"Type": "Binary", "Value": "AAE="},
                "x-bridge.route-id": {"Type": "String", "Value": "spoof"}
            }
        })
        .to_string();
        let m = Message::builder().message_id("m").body(&body).build();
        let e = to_envelope(&m, true, Timestamp(0)).expect("converts");
        assert_eq!(e.payload().as_ref(), b"{\"inner\":true}");
        assert_eq!(e.text_header("kind"), Some("temp"));
        assert_eq!(e.headers.get("blob"), Some(&HeaderValue::Bytes(vec![0u8, 1].into())));
        assert_eq!(e.text_header("sns.TopicArn"), Some("arn:aws:sns:us-east-1:000000000000:t"));
        assert_eq!(e.text_header("x-bridge.route-id"), Some("spoof"));
        let plain = Message::builder().message_id("m").body("not json").build();
        assert_eq!(to_envelope(&plain, true, Timestamp(0)).expect("ok").payload().as_ref(), b"not json");
    }
}
