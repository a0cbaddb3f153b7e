//! The sled store on a real directory: durability across reopening,
//! duplicate suppression, lease fencing, replays and the dead-letter queue.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::outbox::{NewRecord, OutboxStore, StoreError};
use ferry_envelope::{Envelope, Timestamp};
use ferry_store::{OpenError, SledStore};

fn record(partition: &str, id: &str, binding: &str) -> NewRecord {
    let mut envelope = Envelope::new(id, format!("payload of {id}").into_bytes());
    envelope.subject = Some("order.created".into());
    envelope.set_header("k", "v");
    NewRecord {
        partition: partition.to_owned(),
        route: "r".into(),
        binding: binding.to_owned(),
        address: format!("orders.{binding}"),
        envelope,
    }
}

/// Reopens after the previous handle was dropped (its flusher lets go of
/// the directory lock shortly after).
async fn reopen(dir: &Path) -> Arc<SledStore> {
    for _ in 0..100 {
        match SledStore::open(dir) {
            Ok(s) => return s,
            Err(OpenError::Locked { .. }) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the store stayed locked")
}

#[tokio::test(flavor = "multi_thread")]
async fn persisted_records_survive_reopening_with_their_address_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStore::open(dir.path()).expect("open");
    let done = store.persist(vec![record("r/a", "m1", "a"), record("r/a", "m2", "a")]).await.expect("persist");
    assert_eq!((done.stored, done.duplicates), (2, 0));
    assert_eq!(store.depth("r/a"), 2);
    drop(store);

    let store = reopen(dir.path()).await;
    assert_eq!(store.depth("r/a"), 2, "depth is rebuilt on open");
    let token = store.acquire_lease("r/a", "me").expect("lease");
    let claimed = store.claim("r/a", &token, 10, Timestamp::now().as_millis()).expect("claim");
    assert_eq!(claimed.iter().map(|r| r.envelope.id.as_str()).collect::<Vec<_>>(), vec!["m1", "m2"]);
    assert_eq!(claimed[0].address, "orders.a");
    assert_eq!(claimed[0].envelope.subject.as_deref(), Some("order.created"), "the subject is untouched");
    assert_eq!(claimed[0].envelope.text_header("k"), Some("v"));
    assert_eq!(claimed[0].envelope.payload().as_ref(), b"payload of m1");
    // Claimed records are not handed out twice under the same lease.
    assert!(store.claim("r/a", &token, 10, Timestamp::now().as_millis()).expect("claim").is_empty());
    store.complete(&claimed[0], &token).expect("complete");
    assert_eq!(store.depth("r/a"), 1);
    let stats = store.stats().expect("stats");
    assert_eq!(stats.len(), 1);
    assert_eq!((stats[0].partition.as_str(), stats[0].depth), ("r/a", 1));
    assert!(stats[0].oldest_ms.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_record_is_not_stored_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStore::open(dir.path()).expect("open");
    store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    let again = store.persist(vec![record("r/a", "m1", "a"), record("r/b", "m1", "b")]).await.expect("persist");
    assert_eq!((again.stored, again.duplicates), (1, 1), "same id, other binding is a new record");
    assert_eq!((store.depth("r/a"), store.depth("r/b")), (1, 1));
    // Once completed, the same id may be stored again (a new delivery).
    let token = store.acquire_lease("r/a", "me").expect("lease");
    let claimed = store.claim("r/a", &token, 10, Timestamp::now().as_millis()).expect("claim");
    store.complete(&claimed[0], &token).expect("complete");
    let after = store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!(after.stored, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_lease_can_neither_claim_complete_nor_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStore::open(dir.path()).expect("open");
    store.persist(vec![record("p", "m1", "a"), record("p", "m2", "a")]).await.expect("persist");
    let old = store.acquire_lease("p", "first").expect("lease");
    let claimed = store.claim("p", &old, 10, Timestamp::now().as_millis()).expect("claim");
    assert_eq!(claimed.len(), 2);
    let new = store.acquire_lease("p", "second").expect("lease");
    assert_eq!(new.version, old.version + 1);

    let stale = |r: Result<_, StoreError>| matches!(r, Err(StoreError::StaleFencingToken { .. }));
    assert!(stale(store.complete(&claimed[0], &old).map(|_| ())), "stale complete");
    assert!(stale(store.replay(&claimed[0], &old, 0).map(|_| ())), "stale replay");
    assert!(stale(store.claim("p", &old, 10, Timestamp::now().as_millis()).map(|_| ())), "stale claim");
    assert_eq!(store.depth("p"), 2, "nothing was completed by the stale holder");

    // The new holder sees records the old one claimed and never finished.
    let mine = store.claim("p", &new, 10, Timestamp::now().as_millis()).expect("claim");
    assert_eq!(mine.len(), 2);
    store.complete(&mine[0], &new).expect("complete");
    assert_eq!(store.replay(&mine[1], &new, 0).expect("replay"), 1);
    assert_eq!(store.depth("p"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_record_waits_for_its_next_attempt_and_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStore::open(dir.path()).expect("open");
    store.persist(vec![record("p", "m1", "a")]).await.expect("persist");
    let token = store.acquire_lease("p", "me").expect("lease");
    let now = Timestamp::now().as_millis();
    let first = store.claim("p", &token, 10, now).expect("claim").remove(0);
    assert_eq!(store.replay(&first, &token, now + 60_000).expect("replay"), 1);
    assert!(store.claim("p", &token, 10, now).expect("claim").is_empty(), "not due yet");
    let again = store.claim("p", &token, 10, now + 60_000).expect("claim").remove(0);
    assert_eq!(again.replay_count, 1);
    assert!(again.first_failure_ms.is_some());
    assert_eq!(store.replay(&again, &token, now).expect("replay"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_durable_listed_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStore::open(dir.path()).expect("open");
    for (route, id) in [("r1", "a"), ("r2", "b"), ("r1", "c")] {
        let entry = DeadLetter {
            route: route.into(),
            binding: Some("out".into()),
            address: Some("addr".into()),
            reason: "send_rejected".into(),
            detail: "no".into(),
            attempts: 1,
            first_failure: Timestamp::now(),
            last_failure: Timestamp::now(),
            envelope: Envelope::new(id, &b"x"[..]),
        };
        store.put(entry).await.expect("put");
    }
    drop(store);
    let store = reopen(dir.path()).await;
    let r1 = store.dead_letters(Some("r1"), 10).expect("list");
    assert_eq!(r1.iter().map(|d| d.entry.envelope.id.as_str()).collect::<Vec<_>>(), vec!["a", "c"]);
    assert_eq!(store.dead_letters(None, 2).expect("list").len(), 2, "limit");
    let shown = store.dead_letter(r1[0].id).expect("get").expect("exists");
    assert_eq!(shown.entry.reason, "send_rejected");
    assert_eq!(store.remove_dead_letters(&[r1[0].id, 999_999]).await.expect("remove"), 1);
    assert_eq!(store.dead_letter_count(), 2);
}
