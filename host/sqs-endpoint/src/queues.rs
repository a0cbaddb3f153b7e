//! [`QueueStore`]: the one interface of the two places queues are kept. A
//! module of its own, so that the engine and the shared store both use it
//! and neither imports the other for it.

use std::collections::BTreeMap;

use crate::error::SqsError;
use crate::records::{Depth, Outgoing, ReceiveOptions, Received, SendResult};

/// Where the queues are kept: in memory over the embedded store
/// ([`crate::engine`]) or in a shared store's tables (`crate::shared`). Each action of
/// the API is one call here; what is the same for both (name checks,
/// ranges, the count of receives under way) stays in [`crate::engine::Engine`].
#[async_trait::async_trait]
pub(crate) trait QueueStore: Send + Sync {
    async fn list(&self, prefix: &str) -> Result<Vec<String>, SqsError>;
    async fn exists(&self, name: &str) -> Result<bool, SqsError>;
    /// Creates a queue, or finds the one of that name when its attributes
    /// are the same. Returns whether it was created.
    async fn create(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> Result<bool, SqsError>;
    async fn delete(&self, name: &str) -> Result<(), SqsError>;
    async fn purge(&self, name: &str) -> Result<(), SqsError>;
    async fn attributes(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError>;
    async fn depths(&self) -> Result<Vec<(String, Depth)>, SqsError>;
    async fn set_attributes(&self, name: &str, attributes: BTreeMap<String, String>) -> Result<(), SqsError>;
    async fn tags(&self, name: &str) -> Result<BTreeMap<String, String>, SqsError>;
    async fn retag(&self, name: &str, set: BTreeMap<String, String>, remove: &[String]) -> Result<(), SqsError>;
    async fn queue_kind(&self, name: &str) -> Result<(bool, bool, i64), SqsError>;
    async fn send(&self, name: &str, messages: Vec<Outgoing>) -> Result<Vec<SendResult>, SqsError>;
    async fn receive(&self, name: &str, options: ReceiveOptions) -> Result<Vec<Received>, SqsError>;
    async fn delete_messages(&self, name: &str, handles: &[String]) -> Result<Vec<Result<(), SqsError>>, SqsError>;
    async fn change_visibility(&self, name: &str, handle: &str, timeout_s: i64) -> Result<(), SqsError>;
    /// Housekeeping between requests (expired messages and deduplication
    /// entries of a shared store).
    async fn sweep(&self) -> Result<(), SqsError>;
    /// Whether other instances serve these queues too.
    fn is_shared(&self) -> bool;
}
