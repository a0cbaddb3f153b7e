//! The dead-letter queue: where messages go that cannot be delivered.
//!
//! [`DeadLetterStore`] is the port; [`FileDeadLetterStore`] appends one JSON
//! line per entry to `<store.path>/dlq.jsonl` and syncs it to disk before
//! returning, so an entry the route was told is stored survives a crash.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use ferry_envelope::{Envelope, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

/// One dead-lettered message and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Route that gave up on the message.
    pub route: String,
    /// Binding the send was for, when the failure was at a binding.
    pub binding: Option<String>,
    /// Outbound address, kept apart from the envelope's subject.
    pub address: Option<String>,
    /// Short machine-readable reason (`expired`, `rejected`, `plugin_trap`, …).
    pub reason: String,
    /// Human-readable detail.
    pub detail: String,
    /// Attempts made before giving up.
    pub attempts: u32,
    pub first_failure: Timestamp,
    pub last_failure: Timestamp,
    pub envelope: Envelope,
}

/// Durable storage for dead letters.
#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// Stores the entry durably; only an `Ok` lets the route acknowledge the
    /// source message.
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()>;
}

/// Appends entries as JSON lines to one file, fsynced per entry.
pub struct FileDeadLetterStore {
    path: PathBuf,
    file: Mutex<Option<tokio::fs::File>>,
}

impl FileDeadLetterStore {
    /// A store writing to `<dir>/dlq.jsonl` (the directory is created on the
    /// first write).
    pub fn in_dir(dir: &Path) -> Self {
        Self { path: dir.join("dlq.jsonl"), file: Mutex::new(None) }
    }

    /// The file entries are written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads every entry back (for tests and operators).
    pub fn read_all(path: &Path) -> std::io::Result<Vec<DeadLetter>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
            .collect()
    }
}

#[async_trait]
impl DeadLetterStore for FileDeadLetterStore {
    async fn put(&self, entry: DeadLetter) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut guard = self.file.lock().await;
        if guard.is_none() {
            if let Some(dir) = self.path.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            let file = tokio::fs::OpenOptions::new().create(true).append(true).open(&self.path).await?;
            *guard = Some(file);
        }
        let Some(file) = guard.as_mut() else {
            return Err(std::io::Error::other("dead-letter file is not open"));
        };
        let result = async {
            file.write_all(&line).await?;
            file.sync_data().await
        }
        .await;
        if result.is_err() {
            // Reopen next time rather than appending after a partial write.
            *guard = None;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_survive_reopening() {
        let dir = std::env::temp_dir().join(format!("ferry-dlq-{}", uuid::Uuid::new_v4()));
        let store = FileDeadLetterStore::in_dir(&dir);
        let now = Timestamp::now();
        for i in 0..3 {
            let entry = DeadLetter {
                route: "r".into(),
                binding: Some("b".into()),
                address: Some("t/1".into()),
                reason: "rejected".into(),
                detail: format!("n{i}"),
                attempts: 1,
                first_failure: now,
                last_failure: now,
                envelope: Envelope::new(format!("id{i}"), &b"payload"[..]),
            };
            store.put(entry).await.expect("put");
        }
        let all = FileDeadLetterStore::read_all(store.path()).expect("read");
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].envelope.id, "id2");
        assert_eq!(all[2].envelope.payload().as_ref(), b"payload");
        let _ = std::fs::remove_dir_all(dir);
    }
}
