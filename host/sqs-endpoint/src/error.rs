//! SQS errors, with the names each protocol gives them.
//!
//! AWS JSON 1.0 answers `{"__type": "com.amazonaws.sqs#<Shape>", "message":
//! …}` with the header `x-amzn-query-error: <Code>;Sender` (SQS is "query
//! compatible": SDKs read the query code from that header and give it as
//! the error code). The query protocol answers an `<ErrorResponse>` whose
//! `<Code>` is the same query code.
//!
//! Code that must tell errors apart matches on [`ErrorKind`], never on the
//! names: two kinds may share a code (a receipt handle that expired and any
//! other invalid value are both `InvalidParameterValue`).

use std::fmt;

/// What went wrong, one variant per error ferry answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidParameterValue,
    /// ChangeMessageVisibility of a message no longer in the queue.
    MessageGone,
    /// FIFO DeleteMessage with a receipt handle whose visibility ran out.
    ReceiptExpired,
    MissingParameter,
    NonExistentQueue,
    QueueAlreadyExists,
    ReceiptHandleIsInvalid,
    EmptyBatchRequest,
    TooManyEntriesInBatchRequest,
    BatchEntryIdsNotDistinct,
    InvalidBatchEntryId,
    BatchRequestTooLong,
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidMessageContents,
    PurgeQueueInProgress,
    InvalidAction,
    AccessDenied,
    /// A query request on a queue URL that names no action.
    UnknownOperation,
    /// A body the protocol cannot read.
    Malformed,
    RequestEntityTooLarge,
    SignatureDoesNotMatch,
    InvalidClientTokenId,
    MissingAuthenticationToken,
    /// The store failed: the request may be retried.
    Internal,
    /// SNS's errors (query protocol only: the code is the shape).
    SnsInvalidParameter,
    SnsParameterValueInvalid,
    SnsNotFound,
    SnsEmptyBatchRequest,
    SnsTooManyEntriesInBatchRequest,
    SnsInvalidBatchEntryId,
    SnsBatchEntryIdsNotDistinct,
    SnsBatchRequestTooLong,
}

impl ErrorKind {
    /// The JSON protocol's shape, the query protocol's code and the HTTP
    /// status.
    fn names(self) -> (&'static str, &'static str, u16) {
        use ErrorKind::*;
        match self {
            InvalidParameterValue | MessageGone | ReceiptExpired => {
                ("InvalidParameterValueException", "InvalidParameterValue", 400)
            }
            MissingParameter => ("MissingRequiredParameterException", "MissingParameter", 400),
            NonExistentQueue => ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400),
            QueueAlreadyExists => ("QueueNameExists", "QueueAlreadyExists", 400),
            ReceiptHandleIsInvalid => ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404),
            EmptyBatchRequest => ("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400),
            TooManyEntriesInBatchRequest => {
                ("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400)
            }
            BatchEntryIdsNotDistinct => {
                ("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400)
            }
            InvalidBatchEntryId => ("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400),
            BatchRequestTooLong => ("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400),
            InvalidAttributeName => ("InvalidAttributeName", "InvalidAttributeName", 400),
            InvalidAttributeValue => ("InvalidAttributeValue", "InvalidAttributeValue", 400),
            InvalidMessageContents => ("InvalidMessageContents", "InvalidMessageContents", 400),
            PurgeQueueInProgress => ("PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403),
            InvalidAction => ("InvalidAction", "InvalidAction", 400),
            AccessDenied => ("AccessDeniedException", "AccessDenied", 403),
            UnknownOperation => ("UnknownOperationException", "UnknownOperationException", 404),
            Malformed => ("SerializationException", "MalformedQueryString", 400),
            RequestEntityTooLarge => ("RequestEntityTooLarge", "RequestEntityTooLarge", 413),
            SignatureDoesNotMatch => ("SignatureDoesNotMatch", "SignatureDoesNotMatch", 403),
            InvalidClientTokenId => ("InvalidClientTokenId", "InvalidClientTokenId", 403),
            MissingAuthenticationToken => ("MissingAuthenticationTokenException", "MissingAuthenticationToken", 403),
            Internal => ("InternalFailure", "InternalFailure", 500),
            SnsInvalidParameter => ("InvalidParameter", "InvalidParameter", 400),
            SnsParameterValueInvalid => ("ParameterValueInvalid", "ParameterValueInvalid", 400),
            SnsNotFound => ("NotFound", "NotFound", 404),
            SnsEmptyBatchRequest => ("EmptyBatchRequest", "EmptyBatchRequest", 400),
            SnsTooManyEntriesInBatchRequest => ("TooManyEntriesInBatchRequest", "TooManyEntriesInBatchRequest", 400),
            SnsInvalidBatchEntryId => ("InvalidBatchEntryId", "InvalidBatchEntryId", 400),
            SnsBatchEntryIdsNotDistinct => ("BatchEntryIdsNotDistinct", "BatchEntryIdsNotDistinct", 400),
            SnsBatchRequestTooLong => ("BatchRequestTooLong", "BatchRequestTooLong", 400),
        }
    }

    /// The JSON protocol's shape name (`QueueDoesNotExist`).
    pub fn shape(self) -> &'static str {
        self.names().0
    }

    /// The query protocol's code (`AWS.SimpleQueueService.NonExistentQueue`).
    pub fn code(self) -> &'static str {
        self.names().1
    }

    pub fn status(self) -> u16 {
        self.names().2
    }

    /// Whether the caller is at fault (`Sender`) rather than the service.
    pub fn is_sender_fault(self) -> bool {
        self != ErrorKind::Internal
    }
}

/// One SQS (or SNS) error: its kind and the message a client reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsError {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for SqsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

impl std::error::Error for SqsError {}

/// Why [`SqsError::message_gone`] refuses.
const GONE: &str = "Message does not exist or is not available for visibility timeout change.";

impl SqsError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn shape(&self) -> &'static str {
        self.kind.shape()
    }

    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    pub fn status(&self) -> u16 {
        self.kind.status()
    }

    pub fn is_sender_fault(&self) -> bool {
        self.kind.is_sender_fault()
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParameterValue, message)
    }

    /// A parameter whose value is out of its range.
    pub fn invalid_value(name: &str, value: impl fmt::Display, reason: &str) -> Self {
        Self::invalid_parameter(format!("Value {value} for parameter {name} is invalid. Reason: {reason}."))
    }

    pub fn missing_parameter(name: &str) -> Self {
        Self::new(ErrorKind::MissingParameter, format!("The request must contain the parameter {name}."))
    }

    pub fn no_queue() -> Self {
        Self::new(ErrorKind::NonExistentQueue, "The specified queue does not exist.")
    }

    /// A queue name SQS would not take.
    pub fn bad_queue_name() -> Self {
        Self::invalid_parameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    }

    pub fn queue_exists(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::QueueAlreadyExists, message)
    }

    pub fn invalid_receipt(handle: &str) -> Self {
        Self::new(
            ErrorKind::ReceiptHandleIsInvalid,
            format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
        )
    }

    /// ChangeMessageVisibility of a message that is no longer in the queue
    /// (deleted, purged, past its retention). A handle that is only stale
    /// (its visibility ran out, or the message was received again since)
    /// is answered 200 by AWS and changes nothing.
    pub fn message_gone(handle: &str) -> Self {
        Self::new(
            ErrorKind::MessageGone,
            format!("Value {handle} for parameter ReceiptHandle is invalid. Reason: {GONE}"),
        )
    }

    /// DeleteMessage on a FIFO queue with the latest receipt handle of a
    /// message whose visibility ran out (AWS keeps the message).
    pub fn receipt_expired() -> Self {
        Self::new(ErrorKind::ReceiptExpired, "The receipt handle has expired.")
    }

    pub fn empty_batch(entry: &str) -> Self {
        Self::new(ErrorKind::EmptyBatchRequest, format!("There should be at least one {entry} in the request."))
    }

    pub fn too_many_entries(n: usize) -> Self {
        Self::new(
            ErrorKind::TooManyEntriesInBatchRequest,
            format!("Maximum number of entries per request are 10. You have sent {n}."),
        )
    }

    pub fn ids_not_distinct(id: &str) -> Self {
        Self::new(ErrorKind::BatchEntryIdsNotDistinct, format!("Id {id} repeated."))
    }

    pub fn invalid_batch_id() -> Self {
        Self::new(
            ErrorKind::InvalidBatchEntryId,
            "A batch entry id can only contain alphanumeric characters, hyphens and underscores. \
             It can be at most 80 letters long.",
        )
    }

    pub fn batch_too_long(length: usize, limit: usize) -> Self {
        Self::new(
            ErrorKind::BatchRequestTooLong,
            format!("Batch requests cannot be longer than {limit} bytes. You have sent {length} bytes."),
        )
    }

    pub fn invalid_attribute_name(name: &str) -> Self {
        Self::new(ErrorKind::InvalidAttributeName, format!("Unknown Attribute {name}."))
    }

    /// An attribute this queue cannot have, and why.
    pub fn invalid_attribute_name_because(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidAttributeName, message)
    }

    pub fn invalid_attribute_value(name: &str, reason: &str) -> Self {
        Self::new(ErrorKind::InvalidAttributeValue, format!("Invalid value for the parameter {name}. Reason: {reason}"))
    }

    pub fn invalid_contents() -> Self {
        Self::new(
            ErrorKind::InvalidMessageContents,
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | \
             #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    }

    pub fn purge_in_progress(queue_arn: &str) -> Self {
        Self::new(
            ErrorKind::PurgeQueueInProgress,
            format!("Only one PurgeQueue operation on {queue_arn} is allowed every 60 seconds."),
        )
    }

    pub fn invalid_action(action: &str) -> Self {
        Self::new(ErrorKind::InvalidAction, format!("The action {action} is not valid for this endpoint."))
    }

    /// A signed request its key may not make (`access_keys[].actions` and
    /// `resources`).
    pub fn access_denied(key: &str, action: &str, resource: Option<&str>) -> Self {
        let on = resource.map(|r| format!(" on resource: {r}")).unwrap_or_default();
        Self::new(ErrorKind::AccessDenied, format!("The access key {key} is not authorized to perform: {action}{on}"))
    }

    /// A query request on a queue's URL that names no action: SQS answers
    /// 404 with an empty `UnknownOperationException` document.
    pub fn unknown_operation() -> Self {
        Self::new(ErrorKind::UnknownOperation, "")
    }

    /// A body the protocol cannot read (not JSON, not a form).
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Malformed, message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(ErrorKind::RequestEntityTooLarge, format!("Request body larger than {limit} bytes."))
    }

    pub fn signature_mismatch() -> Self {
        Self::new(
            ErrorKind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your AWS \
             Secret Access Key and signing method. Consult the service documentation for details.",
        )
    }

    /// A signed request whose time is too far from the server's.
    pub fn expired(amz_date: &str) -> Self {
        Self::new(
            ErrorKind::SignatureDoesNotMatch,
            format!("Signature expired: {amz_date} is more than 15 minutes away from the server's time."),
        )
    }

    pub fn unknown_key() -> Self {
        Self::new(ErrorKind::InvalidClientTokenId, "The security token included in the request is invalid.")
    }

    pub fn missing_auth() -> Self {
        Self::new(ErrorKind::MissingAuthenticationToken, "Request is missing Authentication Token")
    }

    /// The store failed: the request may be retried.
    pub fn internal(detail: impl fmt::Display) -> Self {
        Self::new(
            ErrorKind::Internal,
            format!("The request processing has failed because of an unknown error: {detail}"),
        )
    }

    /// SNS's `InvalidParameter`: `Invalid parameter: {what}`.
    pub fn sns_invalid(what: impl fmt::Display) -> Self {
        Self::new(ErrorKind::SnsInvalidParameter, format!("Invalid parameter: {what}"))
    }

    /// SNS's `NotFound` (`Topic does not exist`, …).
    pub fn sns_not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::SnsNotFound, message)
    }

    /// `Sender` or `Receiver`, as both protocols write it.
    pub fn fault(&self) -> &'static str {
        if self.is_sender_fault() { "Sender" } else { "Receiver" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_that_share_a_code_stay_apart() {
        let gone = SqsError::message_gone("h");
        // A client's own text that reads like it is still another error.
        let other = SqsError::invalid_parameter(format!("Reason: {GONE}"));
        assert_eq!((gone.code(), gone.shape(), gone.status()), (other.code(), other.shape(), other.status()));
        assert_eq!(gone.kind, ErrorKind::MessageGone);
        assert_eq!(other.kind, ErrorKind::InvalidParameterValue);
        assert_eq!(SqsError::receipt_expired().code(), "InvalidParameterValue");
        assert_eq!(SqsError::internal("x").fault(), "Receiver");
        assert_eq!(SqsError::no_queue().fault(), "Sender");
        assert_eq!(SqsError::sns_not_found("t").code(), "NotFound");
        assert_eq!(SqsError::sns_not_found("t").status(), 404);
    }
}
