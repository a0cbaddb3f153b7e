//! SQS errors, with the names each protocol gives them.
//!
//! AWS JSON 1.0 answers `{"__type": "com.amazonaws.sqs#<Shape>", "message":
//! …}` with the header `x-amzn-query-error: <Code>;Sender` (SQS is "query
//! compatible": SDKs read the query code from that header and give it as
//! the error code). The query protocol answers an `<ErrorResponse>` whose
//! `<Code>` is the same query code.

use std::fmt;

/// One SQS error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsError {
    /// The JSON protocol's shape name (`QueueDoesNotExist`).
    pub shape: &'static str,
    /// The query protocol's code (`AWS.SimpleQueueService.NonExistentQueue`).
    pub code: &'static str,
    pub status: u16,
    /// Whether the caller is at fault (`Sender`) rather than the service.
    pub sender: bool,
    pub message: String,
}

impl fmt::Display for SqsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for SqsError {}

/// Why [`SqsError::message_gone`] refuses.
const GONE: &str = "Message does not exist or is not available for visibility timeout change.";

impl SqsError {
    fn sender(shape: &'static str, code: &'static str, status: u16, message: impl Into<String>) -> Self {
        Self { shape, code, status, sender: true, message: message.into() }
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::sender("InvalidParameterValueException", "InvalidParameterValue", 400, message)
    }

    /// A parameter whose value is out of its range.
    pub fn invalid_value(name: &str, value: impl fmt::Display, reason: &str) -> Self {
        Self::invalid_parameter(format!("Value {value} for parameter {name} is invalid. Reason: {reason}."))
    }

    pub fn missing_parameter(name: &str) -> Self {
        Self::sender(
            "MissingRequiredParameterException",
            "MissingParameter",
            400,
            format!("The request must contain the parameter {name}."),
        )
    }

    pub fn no_queue() -> Self {
        Self::sender(
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
            "The specified queue does not exist.",
        )
    }

    /// A queue name SQS would not take.
    pub fn bad_queue_name() -> Self {
        Self::invalid_parameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    }

    pub fn queue_exists(message: impl Into<String>) -> Self {
        Self::sender("QueueNameExists", "QueueAlreadyExists", 400, message)
    }

    pub fn invalid_receipt(handle: &str) -> Self {
        Self::sender(
            "ReceiptHandleIsInvalid",
            "ReceiptHandleIsInvalid",
            404,
            format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
        )
    }

    /// ChangeMessageVisibility of a message that is no longer in the queue
    /// (deleted, purged, past its retention). A handle that is only stale
    /// (its visibility ran out, or the message was received again since)
    /// is answered 200 by AWS and changes nothing.
    pub fn message_gone(handle: &str) -> Self {
        Self::invalid_parameter(format!("Value {handle} for parameter ReceiptHandle is invalid. Reason: {GONE}"))
    }

    /// DeleteMessage on a FIFO queue with the latest receipt handle of a
    /// message whose visibility ran out (AWS keeps the message).
    pub fn receipt_expired() -> Self {
        Self::invalid_parameter("The receipt handle has expired.")
    }

    /// Whether this is [`SqsError::message_gone`].
    pub fn is_message_gone(&self) -> bool {
        self.code == "InvalidParameterValue" && self.message.ends_with(GONE)
    }

    pub fn empty_batch(entry: &str) -> Self {
        Self::sender(
            "EmptyBatchRequest",
            "AWS.SimpleQueueService.EmptyBatchRequest",
            400,
            format!("There should be at least one {entry} in the request."),
        )
    }

    pub fn too_many_entries(n: usize) -> Self {
        Self::sender(
            "TooManyEntriesInBatchRequest",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400,
            format!("Maximum number of entries per request are 10. You have sent {n}."),
        )
    }

    pub fn ids_not_distinct(id: &str) -> Self {
        Self::sender(
            "BatchEntryIdsNotDistinct",
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            400,
            format!("Id {id} repeated."),
        )
    }

    pub fn invalid_batch_id() -> Self {
        Self::sender(
            "InvalidBatchEntryId",
            "AWS.SimpleQueueService.InvalidBatchEntryId",
            400,
            "A batch entry id can only contain alphanumeric characters, hyphens and underscores. \
             It can be at most 80 letters long.",
        )
    }

    pub fn batch_too_long(length: usize, limit: usize) -> Self {
        Self::sender(
            "BatchRequestTooLong",
            "AWS.SimpleQueueService.BatchRequestTooLong",
            400,
            format!("Batch requests cannot be longer than {limit} bytes. You have sent {length} bytes."),
        )
    }

    pub fn invalid_attribute_name(name: &str) -> Self {
        Self::sender("InvalidAttributeName", "InvalidAttributeName", 400, format!("Unknown Attribute {name}."))
    }

    /// An attribute this queue cannot have, and why.
    pub fn invalid_attribute_name_because(message: impl Into<String>) -> Self {
        Self::sender("InvalidAttributeName", "InvalidAttributeName", 400, message)
    }

    pub fn invalid_attribute_value(name: &str, reason: &str) -> Self {
        Self::sender(
            "InvalidAttributeValue",
            "InvalidAttributeValue",
            400,
            format!("Invalid value for the parameter {name}. Reason: {reason}"),
        )
    }

    pub fn invalid_contents() -> Self {
        Self::sender(
            "InvalidMessageContents",
            "InvalidMessageContents",
            400,
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | \
             #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    }

    pub fn purge_in_progress(queue_arn: &str) -> Self {
        Self::sender(
            "PurgeQueueInProgress",
            "AWS.SimpleQueueService.PurgeQueueInProgress",
            403,
            format!("Only one PurgeQueue operation on {queue_arn} is allowed every 60 seconds."),
        )
    }

    pub fn invalid_action(action: &str) -> Self {
        Self::sender(
            "InvalidAction",
            "InvalidAction",
            400,
            format!("The action {action} is not valid for this endpoint."),
        )
    }

    /// A signed request its key may not make (`access_keys[].actions` and
    /// `resources`).
    pub fn access_denied(key: &str, action: &str, resource: Option<&str>) -> Self {
        let on = resource.map(|r| format!(" on resource: {r}")).unwrap_or_default();
        Self::sender(
            "AccessDeniedException",
            "AccessDenied",
            403,
            format!("The access key {key} is not authorized to perform: {action}{on}"),
        )
    }

    /// A query request on a queue's URL that names no action: SQS answers
    /// 404 with an empty `UnknownOperationException` document.
    pub fn unknown_operation() -> Self {
        Self::sender("UnknownOperationException", "UnknownOperationException", 404, "")
    }

    /// A body the protocol cannot read (not JSON, not a form).
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::sender("SerializationException", "MalformedQueryString", 400, message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::sender(
            "RequestEntityTooLarge",
            "RequestEntityTooLarge",
            413,
            format!("Request body larger than {limit} bytes."),
        )
    }

    pub fn signature_mismatch() -> Self {
        Self::sender(
            "SignatureDoesNotMatch",
            "SignatureDoesNotMatch",
            403,
            "The request signature we calculated does not match the signature you provided. Check your AWS \
             Secret Access Key and signing method. Consult the service documentation for details.",
        )
    }

    /// A signed request whose time is too far from the server's.
    pub fn expired(amz_date: &str) -> Self {
        Self::sender(
            "SignatureDoesNotMatch",
            "SignatureDoesNotMatch",
            403,
            format!("Signature expired: {amz_date} is more than 15 minutes away from the server's time."),
        )
    }

    pub fn unknown_key() -> Self {
        Self::sender(
            "InvalidClientTokenId",
            "InvalidClientTokenId",
            403,
            "The security token included in the request is invalid.",
        )
    }

    pub fn missing_auth() -> Self {
        Self::sender(
            "MissingAuthenticationTokenException",
            "MissingAuthenticationToken",
            403,
            "Request is missing Authentication Token",
        )
    }

    /// The store failed: the request may be retried.
    pub fn internal(detail: impl fmt::Display) -> Self {
        Self {
            shape: "InternalFailure",
            code: "InternalFailure",
            status: 500,
            sender: false,
            message: format!("The request processing has failed because of an unknown error: {detail}"),
        }
    }

    /// An SNS error: SNS speaks the query protocol only, so the code is all
    /// a client sees (`NotFound`, `InvalidParameter`, …).
    pub fn sns(code: &'static str, status: u16, message: impl Into<String>) -> Self {
        Self::sender(code, code, status, message)
    }

    /// SNS's `InvalidParameter`: `Invalid parameter: {what}`.
    pub fn sns_invalid(what: impl fmt::Display) -> Self {
        Self::sns("InvalidParameter", 400, format!("Invalid parameter: {what}"))
    }

    /// SNS's `NotFound` (`Topic does not exist`, …).
    pub fn sns_not_found(message: impl Into<String>) -> Self {
        Self::sns("NotFound", 404, message)
    }

    /// `Sender` or `Receiver`, as both protocols write it.
    pub fn fault(&self) -> &'static str {
        if self.sender { "Sender" } else { "Receiver" }
    }
}
