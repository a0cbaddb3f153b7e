//! The PostgreSQL store against a real server: migrations, group commit
//! and duplicate suppression, lease expiry and fencing, LISTEN wake-ups,
//! the dead-letter queue, and persist under 256 concurrent writers.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::outbox::{NewRecord, OutboxStore, StoreError};
use ferry_envelope::{Envelope, Timestamp};
use ferry_store::postgres::PgStore;
use ferry_store::{Store, StoreOptions};
use ferry_tests::pg;

const TTL: Duration = Duration::from_secs(15);

fn record(partition: &str, id: &str, address: &str) -> NewRecord {
    let mut envelope = Envelope::new(id, format!("payload of {id}").into_bytes());
    envelope.subject = Some("order.created".into());
    envelope.set_header("k", "v");
    NewRecord {
        partition: partition.to_owned(),
        route: "r".into(),
        binding: "b".into(),
        address: address.to_owned(),
        envelope,
    }
}

async fn open(db: &pg::TestDb, listen: bool) -> Arc<PgStore> {
    PgStore::open(&db.url, 4, StoreOptions { listen, ..Default::default() }).await.expect("open")
}

#[tokio::test]
async fn migrations_apply_once_even_when_instances_start_together() {
    let db = pg::TestDb::new().await;
    let (a, b, c) = tokio::join!(open(&db, false), open(&db, false), open(&db, false));
    let client = db.client().await;
    let rows = client.query("SELECT version FROM ferry_schema_version", &[]).await.expect("versions");
    let known = ferry_store::postgres::migrations::MIGRATIONS.len();
    assert_eq!(rows.len(), known, "each migration applied once");
    drop((a, b, c));
    // A newer schema than this ferry knows is refused, not misread.
    client
        .execute("INSERT INTO ferry_schema_version (version, description) VALUES (999, 'future')", &[])
        .await
        .expect("mark a future schema version");
    let refused = PgStore::open(&db.url, 2, StoreOptions::default()).await.err().expect("refused");
    assert!(refused.to_string().contains("version 999"), "{refused}");
    db.drop().await;
}

#[tokio::test]
async fn persist_claim_complete_and_duplicates_suppressed_within_the_window() {
    let db = pg::TestDb::new().await;
    let store = open(&db, false).await;
    let done = store.persist(vec![record("r/b", "m1", "x"), record("r/b", "m1", "y"), record("r/b", "m2", "x")]).await;
    assert_eq!(done.expect("persist").stored, 3, "one message to two addresses is two records");
    let again = store.persist(vec![record("r/b", "m1", "x"), record("r/b", "m3", "x")]).await.expect("persist");
    assert_eq!((again.stored, again.duplicates), (1, 1), "a pending key is not stored twice");
    assert_eq!(store.depth("r/b"), 4);

    let token = store.acquire_lease("r/b", "me", TTL).await.expect("lease").expect("granted");
    let batch = store.claim("r/b", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    let got: Vec<(&str, &str)> = batch.iter().map(|r| (r.envelope.id.as_str(), r.address.as_str())).collect();
    assert_eq!(got, [("m1", "x"), ("m1", "y"), ("m2", "x"), ("m3", "x")], "oldest first");
    assert_eq!(batch[0].envelope.payload(), b"payload of m1".as_slice(), "the envelope comes back whole");
    assert!(
        store.claim("r/b", &token, 10, Timestamp::now().as_millis()).await.expect("claim").is_empty(),
        "claimed records are not handed out twice under one lease"
    );
    // Sent: kept as a key for the window (a redelivery is suppressed), or
    // forgotten at once with a zero window.
    store.complete(&batch[0], &token, Duration::from_secs(300)).await.expect("complete");
    store.complete(&batch[1], &token, Duration::ZERO).await.expect("complete");
    let redelivered = store.persist(vec![record("r/b", "m1", "x"), record("r/b", "m1", "y")]).await.expect("persist");
    assert_eq!((redelivered.stored, redelivered.duplicates), (1, 1));
    assert_eq!(store.fresh_stats().await.expect("stats")[0].depth, 3);
    // A replay counts the failure and makes the record due later.
    let later = Timestamp::now().as_millis() + 60_000;
    assert_eq!(store.replay(&batch[2], &token, later).await.expect("replay"), 1);
    let due = store.claim("r/b", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    let ids: Vec<&str> = due.iter().map(|r| r.envelope.id.as_str()).collect();
    assert_eq!(ids, ["m1"], "only the record persisted again is due; the replayed one waits");
    let at_retry = store.claim("r/b", &token, 10, later).await.expect("claim");
    assert_eq!(at_retry.len(), 1);
    assert_eq!((at_retry[0].replay_count, at_retry[0].first_failure_ms.is_some()), (1, true));
    db.drop().await;
}

#[tokio::test]
async fn an_expired_key_is_a_new_record() {
    let db = pg::TestDb::new().await;
    let store = open(&db, false).await;
    store.persist(vec![record("r/b", "m1", "x")]).await.expect("persist");
    let token = store.acquire_lease("r/b", "me", TTL).await.expect("lease").expect("granted");
    let batch = store.claim("r/b", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    store.complete(&batch[0], &token, Duration::from_millis(200)).await.expect("complete");
    assert_eq!(store.persist(vec![record("r/b", "m1", "x")]).await.expect("persist").duplicates, 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after = store.persist(vec![record("r/b", "m1", "x")]).await.expect("persist");
    assert_eq!((after.stored, after.duplicates), (1, 0), "the window ran out: a new message");
    let batch = store.claim("r/b", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(batch.len(), 1);
    assert!(batch[0].seq > 0 && batch[0].replay_count == 0);
    db.drop().await;
}

#[tokio::test]
async fn a_lease_is_held_until_it_expires_and_the_new_version_fences_the_old_holder() {
    let db = pg::TestDb::new().await;
    let a = open(&db, false).await;
    let b = open(&db, false).await;
    a.persist(vec![record("p", "m1", "x"), record("p", "m2", "x")]).await.expect("persist");
    let ttl = Duration::from_secs(1);
    let old = a.acquire_lease("p", "a", ttl).await.expect("lease").expect("granted");
    assert!(b.acquire_lease("p", "b", ttl).await.expect("lease").is_none(), "held and not expired");
    let claimed = a.claim("p", &old, 1, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(claimed.len(), 1);
    assert!(a.renew_lease("p", &old, ttl).await.expect("renew"));

    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(a.claim("p", &old, 1, Timestamp::now().as_millis()).await.is_err(), "an expired lease claims nothing");
    let new = b.acquire_lease("p", "b", ttl).await.expect("lease").expect("expired: taken over");
    assert_eq!(new.version, old.version + 1);
    assert!(!a.renew_lease("p", &old, ttl).await.expect("renew"), "the old holder finds it taken");
    let stale = |r: Result<(), StoreError>| matches!(r, Err(StoreError::StaleFencingToken { .. }));
    assert!(stale(a.complete(&claimed[0], &old, Duration::from_secs(60)).await), "complete is fenced");
    assert!(
        matches!(a.replay(&claimed[0], &old, 0).await, Err(StoreError::StaleFencingToken { .. })),
        "replay is fenced"
    );
    // The new holder gets both: the one the old holder had claimed (it
    // never completed it) too.
    let taken = b.claim("p", &new, 10, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(taken.len(), 2);
    b.release_lease("p", &new).await.expect("release");
    assert!(a.acquire_lease("p", "a", ttl).await.expect("lease").is_some(), "a released lease is free at once");
    db.drop().await;
}

#[tokio::test]
async fn lease_view_counts_live_instances_and_holders() {
    let db = pg::TestDb::new().await;
    let store = open(&db, false).await;
    let ttl = Duration::from_secs(2);
    let parts = vec!["r/b".to_owned(), "r/b/1".to_owned(), "r/b/2".to_owned()];
    store.lease_view("one", ttl, &parts).await.expect("view");
    store.acquire_lease("r/b/1", "one", ttl).await.expect("lease").expect("granted");
    let view = store.lease_view("two", ttl, &parts).await.expect("view");
    assert_eq!(view.live_owners, 2);
    assert_eq!(view.holders.get("r/b/1").map(String::as_str), Some("one"));
    assert_eq!(view.holders.len(), 1);
    store.leave("one").await.expect("leave");
    assert_eq!(store.lease_view("two", ttl, &parts).await.expect("view").live_owners, 1, "a clean stop counts out");
    db.drop().await;
}

#[tokio::test]
async fn records_from_another_instance_wake_the_drainer_through_listen() {
    let db = pg::TestDb::new().await;
    let writer = open(&db, false).await;
    let drainer = open(&db, true).await;
    let partition = format!("wake/{}", db.schema);
    let wake = drainer.arrivals(&partition).expect("a shared store wakes drainers");
    // The listener connects in the background: retry until a notification
    // arrives, which it must within a few seconds.
    let mut woken = false;
    for i in 0..20 {
        writer.persist(vec![record(&partition, &format!("m{i}"), "x")]).await.expect("persist");
        if tokio::time::timeout(Duration::from_millis(500), wake.notified()).await.is_ok() {
            woken = true;
            break;
        }
    }
    assert!(woken, "a record persisted by another instance woke the partition's drainer");
    db.drop().await;
}

#[tokio::test]
async fn dead_letters_are_stored_listed_and_removed() {
    let db = pg::TestDb::new().await;
    let store = open(&db, false).await;
    for (route, id) in [("a", "m1"), ("b", "m2"), ("a", "m3")] {
        let entry = DeadLetter {
            route: route.into(),
            binding: Some("b".into()),
            address: Some("x".into()),
            reason: ferry_core::FailureReason::SendRejected,
            detail: "refused".into(),
            attempts: 1,
            first_failure: Timestamp::now(),
            last_failure: Timestamp::now(),
            envelope: Envelope::new(id, b"body".to_vec()),
        };
        store.put(entry).await.expect("put");
    }
    assert_eq!(store.dead_letter_count().await.expect("count"), 3);
    let of_a = Store::dead_letters(store.as_ref(), Some("a"), 10).await.expect("list");
    assert_eq!(of_a.iter().map(|e| e.entry.envelope.id.as_str()).collect::<Vec<_>>(), ["m1", "m3"]);
    let one = Store::dead_letter(store.as_ref(), of_a[1].id).await.expect("show").expect("exists");
    assert_eq!(one.entry.envelope.payload(), b"body".as_slice());
    assert_eq!(Store::remove_dead_letters(store.as_ref(), &[of_a[0].id, 999_999]).await.expect("remove"), 1);
    assert_eq!(store.dead_letter_count().await.expect("count"), 2);
    db.drop().await;
}

/// 256 writers at once: every record stored once, in group commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persist_under_256_concurrent_writers() {
    let db = pg::TestDb::new().await;
    let store = open(&db, false).await;
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..256 {
        let store = store.clone();
        writers.spawn(async move {
            let mut stored = 0;
            for i in 0..20 {
                let done = store.persist(vec![record("load/b", &format!("w{w}-{i}"), "x")]).await.expect("persist");
                stored += done.stored;
            }
            stored
        });
    }
    let mut total = 0;
    while let Some(n) = writers.join_next().await {
        total += n.expect("writer");
    }
    assert_eq!(total, 256 * 20);
    let stats = store.fresh_stats().await.expect("stats");
    assert_eq!(stats[0].depth, 256 * 20);
    db.drop().await;
}

/// Completions arriving together are grouped into one statement; each is
/// still checked against its own lease version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_completions_are_fenced_one_by_one() {
    let db = pg::TestDb::new().await;
    let store = open(&db, false).await;
    let records: Vec<_> = (0..100).map(|i| record("p", &format!("m{i}"), "x")).collect();
    store.persist(records).await.expect("persist");
    store.persist(vec![record("q", "old", "x")]).await.expect("persist");
    let ttl = Duration::from_secs(30);
    let p = store.acquire_lease("p", "me", ttl).await.expect("lease").expect("granted");
    let q_old = store.acquire_lease("q", "me", ttl).await.expect("lease").expect("granted");
    let batch = store.claim("p", &p, 100, Timestamp::now().as_millis()).await.expect("claim");
    let stale = store.claim("q", &q_old, 1, Timestamp::now().as_millis()).await.expect("claim");
    let q_new = store.acquire_lease("q", "me", ttl).await.expect("lease").expect("same owner: granted anew");
    assert_eq!(q_new.version, q_old.version + 1);

    let mut calls = tokio::task::JoinSet::new();
    for (i, r) in batch.into_iter().enumerate() {
        let (store, token) = (store.clone(), p.clone());
        let keep = if i % 2 == 0 { Duration::ZERO } else { Duration::from_secs(60) };
        calls.spawn(async move { store.complete(&r, &token, keep).await });
    }
    let (old_store, old_record) = (store.clone(), stale[0].clone());
    calls.spawn(async move { old_store.complete(&old_record, &q_old, Duration::ZERO).await });
    let mut done = 0;
    let mut refused = 0;
    while let Some(result) = calls.join_next().await {
        match result.expect("join") {
            Ok(()) => done += 1,
            Err(StoreError::StaleFencingToken { partition, .. }) if partition == "q" => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((done, refused), (100, 1));
    let stats = store.fresh_stats().await.expect("stats");
    let depth = |name: &str| stats.iter().find(|s| s.partition == name).map_or(0, |s| s.depth);
    assert_eq!((depth("p"), depth("q")), (0, 1), "the fenced-out record is still pending");
    let kept = store.persist((0..100).map(|i| record("p", &format!("m{i}"), "x")).collect()).await.expect("persist");
    assert_eq!((kept.stored, kept.duplicates), (50, 50), "keys kept for their window, the others forgotten");
    db.drop().await;
}

/// The keyed records (the SQS endpoint's queues): puts replace, deletes
/// remove, a load reads one space in key order, and another instance on
/// the same database sees them.
#[tokio::test]
async fn keyed_records_commit_together_and_load_by_space() {
    use ferry_core::records::{RecordChange, RecordStore};
    let db = pg::TestDb::new().await;
    let a = open(&db, false).await;
    let mut change = RecordChange::default();
    change.put("sqs.queue", "b", vec![2]);
    change.put("sqs.queue", "a", vec![1]);
    change.put("sqs.message", "a/1", vec![9]);
    RecordStore::commit(a.as_ref(), change).await.expect("commit");
    let mut change = RecordChange::default();
    change.put("sqs.queue", "a", vec![3]);
    change.delete("sqs.message", "a/1");
    change.delete("sqs.message", "never-there");
    RecordStore::commit(a.as_ref(), change).await.expect("commit");
    let b = open(&db, false).await;
    let queues = RecordStore::load(b.as_ref(), "sqs.queue").await.expect("load");
    assert_eq!(queues, vec![("a".to_owned(), vec![3]), ("b".to_owned(), vec![2])]);
    assert!(RecordStore::load(b.as_ref(), "sqs.message").await.expect("load").is_empty());
    drop((a, b));
    db.drop().await;
}
