//! SDK client set-up, queue URL resolution and error classification.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::meta::region::RegionProviderChain;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_types::body::SdkBody;
use ferry_core::TransportError;

/// Where a queue is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTarget {
    pub queue_url: Option<String>,
    pub queue_name: Option<String>,
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
}

impl QueueTarget {
    /// Whether the queue is FIFO (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.queue_url.as_deref().or(self.queue_name.as_deref()).is_some_and(|q| q.ends_with(".fifo"))
    }

    /// The queue as configured, for logs.
    pub fn label(&self) -> &str {
        self.queue_url.as_deref().or(self.queue_name.as_deref()).unwrap_or("?")
    }
}

/// Builds a client from the standard AWS chain plus the overrides.
pub async fn client(target: &QueueTarget) -> Client {
    let region = RegionProviderChain::first_try(target.region.clone().map(aws_sdk_sqs::config::Region::new))
        .or_default_provider()
        .or_else("us-east-1");
    // Every call is bounded, so a stalled endpoint shows up as a transient
    // error (and a stopping daemon is never stuck behind one). One attempt
    // outlasts the longest long poll (20 s).
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(90))
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).region(region).timeout_config(timeouts);
    if let Some(endpoint) = &target.endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    let config = aws_sdk_sqs::config::Builder::from(&loader.load().await).interceptor(ResponseCap).build();
    Client::from_conf(config)
}

/// The most of one SQS answer ferry reads: ten messages of SQS's largest
/// size (1 MiB), escaped, with their attributes, fit several times over.
pub const MAX_RESPONSE_BYTES: usize = 32 << 20;

/// Bounds every answer's body at [`MAX_RESPONSE_BYTES`]. The SDK reads a
/// whole body before decoding it, so an endpoint that streams one without
/// end would otherwise grow the daemon for as long as the attempt lasts;
/// past the bound the attempt fails as a transient response error and the
/// connection is dropped.
#[derive(Debug)]
struct ResponseCap;

impl aws_sdk_sqs::config::Intercept for ResponseCap {
    fn name(&self) -> &'static str {
        "ferry::ResponseCap"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_sdk_sqs::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _: &aws_sdk_sqs::config::RuntimeComponents,
        _: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let body = context.response_mut().body_mut();
        let unbounded = std::mem::replace(body, SdkBody::taken());
        *body = SdkBody::from_body_1_x(http_body_util::Limited::new(unbounded, MAX_RESPONSE_BYTES));
        Ok(())
    }
}

/// The queue URL: as configured, or looked up by name.
pub async fn queue_url(client: &Client, target: &QueueTarget) -> Result<String, TransportError> {
    if let Some(url) = &target.queue_url {
        return Ok(url.clone());
    }
    let name = target.queue_name.as_deref().unwrap_or_default();
    let out = client.get_queue_url().queue_name(name).send().await.map_err(classify)?;
    out.queue_url()
        .map(str::to_owned)
        .ok_or_else(|| TransportError::transient(format!("no URL returned for queue {name}")))
}

/// Error codes that mean "slow down / try later".
const THROTTLING: [&str; 5] = [
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
    "KmsThrottled",
];

/// Classifies an SDK error once. No answer (a refused or broken
/// connection, DNS, a timeout), throttling and 5xx say the service takes
/// nothing now (*unavailable*: an outage, no replay is spent); a queue that
/// does not exist (yet) is *transient*; anything else the service refused
/// (validation) is *permanent*.
pub fn classify<E, R>(err: SdkError<E, R>) -> TransportError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
    SdkError<E, R>: std::error::Error,
{
    let text = format!("{}", aws_sdk_sqs::error::DisplayErrorContext(&err));
    match &err {
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            let status = format!("{:?}", service.raw());
            let server_side = status.contains("status: 5") || status.contains("StatusCode(5");
            if THROTTLING.contains(&code)
                || code.contains("Throttl")
                || server_side
                || code.contains("InternalError")
                || code.contains("ServiceUnavailable")
            {
                TransportError::unavailable(text)
            } else if code.contains("QueueDoesNotExist") || code == "AWS.SimpleQueueService.NonExistentQueue" {
                TransportError::transient(text)
            } else {
                TransportError::permanent(text)
            }
        }
        _ => TransportError::unavailable(text),
    }
}

/// `ferry validate --connect`: resolves the queue and reads one attribute
/// of it, so the endpoint, the credentials and the queue are all checked.
pub async fn probe(target: &QueueTarget) -> Result<String, TransportError> {
    let client = client(target).await;
    let url = queue_url(&client, target).await?;
    client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .map_err(classify)?;
    Ok(format!("queue {url} reachable"))
}
