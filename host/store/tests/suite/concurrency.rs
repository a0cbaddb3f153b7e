//! Many concurrent persists (a busy route's max_in_flight) all return:
//! group commit must not strand a writer.

use std::time::Duration;

use ferry_core::outbox::{NewRecord, OutboxStore};
use ferry_envelope::Envelope;
use ferry_store::{RedbStore, StoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_persists_all_become_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbStore::open(dir.path(), StoreOptions::default()).expect("open");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..2_000 {
        let store = store.clone();
        tasks.spawn(async move {
            let record = NewRecord {
                partition: "r/b".into(),
                route: "r".into(),
                binding: "b".into(),
                address: "a".into(),
                envelope: Envelope::new(format!("m{i}"), &b"x"[..]),
            };
            store.persist(vec![record]).await.expect("persist")
        });
        if i % 256 == 255 {
            tokio::task::yield_now().await;
        }
    }
    let all = tokio::time::timeout(Duration::from_secs(30), async {
        let mut n = 0;
        while let Some(r) = tasks.join_next().await {
            n += r.expect("join").stored;
        }
        n
    })
    .await
    .expect("every persist returned");
    assert_eq!(all, 2_000);
    assert_eq!(store.depth("r/b"), 2_000);
}
