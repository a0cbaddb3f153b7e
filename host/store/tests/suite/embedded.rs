//! The redb store on a real directory: durability across reopening,
//! duplicate suppression, lease fencing, replays, the dead-letter queue,
//! the old sled layout refused, and a hung operation seen by the tracker.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::clock::Clock;
use ferry_core::dlq::{DeadLetter, DeadLetterStore};
use ferry_core::outbox::{NewRecord, OutboxStore, StoreError};
use ferry_envelope::{Envelope, Timestamp};
use ferry_store::{Fault, Op, OpenError, RedbStore, StoreOptions};

/// Leases never expire in the embedded store; the time to live is ignored.
const LEASE_TTL: Duration = Duration::from_secs(15);

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

fn open(dir: &Path) -> Arc<RedbStore> {
    RedbStore::open(dir, StoreOptions::default()).expect("open")
}

/// Reopens after the previous handle was dropped (its writer thread lets go
/// of the file shortly after).
async fn reopen(dir: &Path) -> Arc<RedbStore> {
    reopen_with(dir, StoreOptions::default()).await
}

/// Reopens with `options`, waiting in real time on the blocking pool, so a
/// test on paused time does not skip past the writer's release (tokio does
/// not advance paused time while a blocking task runs).
async fn reopen_with(dir: &Path, options: StoreOptions) -> Arc<RedbStore> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        for _ in 0..250 {
            match RedbStore::open(&dir, options.clone()) {
                Ok(s) => return s,
                Err(OpenError::Locked { .. }) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("the store stayed locked")
    })
    .await
    .expect("reopen")
}

#[tokio::test(flavor = "multi_thread")]
async fn persisted_records_survive_reopening_with_their_address_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let done = store.persist(vec![record("r/a", "m1", "a"), record("r/a", "m2", "a")]).await.expect("persist");
    assert_eq!((done.stored, done.duplicates), (2, 0));
    assert_eq!(store.depth("r/a"), 2);
    drop(store);

    let store = reopen(dir.path()).await;
    assert_eq!(store.depth("r/a"), 2, "depth is rebuilt on open");
    let token = store.acquire_lease("r/a", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("r/a", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(claimed.iter().map(|r| r.envelope.id.as_str()).collect::<Vec<_>>(), vec!["m1", "m2"]);
    assert_eq!(claimed[0].address, "orders.a");
    assert_eq!(claimed[0].envelope.subject.as_deref(), Some("order.created"), "the subject is untouched");
    assert_eq!(claimed[0].envelope.text_header("k"), Some("v"));
    assert_eq!(claimed[0].envelope.payload().as_ref(), b"payload of m1");
    // Claimed records are not handed out twice under the same lease.
    assert!(store.claim("r/a", &token, 10, Timestamp::now().as_millis()).await.expect("claim").is_empty());
    store.complete(&claimed[0], &token, Duration::ZERO).await.expect("complete");
    assert_eq!(store.depth("r/a"), 1);
    let stats = store.stats();
    assert_eq!(stats.len(), 1);
    assert_eq!((stats[0].partition.as_str(), stats[0].depth), ("r/a", 1));
    assert!(stats[0].oldest_ms.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_record_is_not_stored_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    let again = store.persist(vec![record("r/a", "m1", "a"), record("r/b", "m1", "b")]).await.expect("persist");
    assert_eq!((again.stored, again.duplicates), (1, 1), "same id, other binding is a new record");
    assert_eq!((store.depth("r/a"), store.depth("r/b")), (1, 1));
    // Completed with no dedup window, the same id may be stored again.
    let token = store.acquire_lease("r/a", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("r/a", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    store.complete(&claimed[0], &token, Duration::ZERO).await.expect("complete");
    let after = store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!(after.stored, 1);
}

/// Two addresses of one binding (a route verdict naming both) are two
/// records, not a duplicate: the key holds the address.
#[tokio::test(flavor = "multi_thread")]
async fn one_binding_two_addresses_are_two_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut to_b = record("r/a", "m1", "a");
    to_b.address = "orders.b".into();
    let done = store.persist(vec![record("r/a", "m1", "a"), to_b.clone()]).await.expect("persist");
    assert_eq!((done.stored, done.duplicates), (2, 0));
    let again = store.persist(vec![record("r/a", "m1", "a"), to_b]).await.expect("persist");
    assert_eq!((again.stored, again.duplicates), (0, 2));
    let token = store.acquire_lease("r/a", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("r/a", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    let mut addresses: Vec<_> = claimed.iter().map(|r| r.address.as_str()).collect();
    addresses.sort_unstable();
    assert_eq!(addresses, vec!["orders.a", "orders.b"]);
}

/// A sent record's key outlives it for the dedup window, across a reopen,
/// and is free again once the window passed (and swept). The store reads
/// tokio's paused clock, so the windows pass by `advance`, not by sleeping.
#[tokio::test(start_paused = true)]
async fn a_completed_key_suppresses_redeliveries_for_its_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions { clock: Clock::tokio(), ..StoreOptions::default() };
    let store = RedbStore::open(dir.path(), options.clone()).expect("open");
    store.persist(vec![record("r/a", "m1", "a"), record("r/a", "m2", "a")]).await.expect("persist");
    let token = store.acquire_lease("r/a", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("r/a", &token, 10, options.clock.now().as_millis()).await.expect("claim");
    store.complete(&claimed[0], &token, Duration::from_secs(3600)).await.expect("complete");
    store.complete(&claimed[1], &token, Duration::from_millis(300)).await.expect("complete");
    assert_eq!(store.depth("r/a"), 0);
    let again = store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!((again.stored, again.duplicates), (0, 1), "sent within the window: suppressed");
    tokio::time::advance(Duration::from_millis(299)).await;
    let again = store.persist(vec![record("r/a", "m2", "a")]).await.expect("persist");
    assert_eq!(again.duplicates, 1, "1 ms before its window ends the key still holds");
    drop(store);

    let store = reopen_with(dir.path(), options.clone()).await;
    let again = store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!(again.duplicates, 1, "the window survives a restart");
    tokio::time::advance(Duration::from_millis(2)).await;
    let later = store.persist(vec![record("r/a", "m2", "a")]).await.expect("persist");
    assert_eq!((later.stored, later.duplicates), (1, 0), "past its window the key is free");
    // A sweep runs in the first commit a second after the last one; m2's
    // fresh key must survive it, and m1's hour-long one too.
    tokio::time::advance(Duration::from_millis(1000)).await;
    let other = store.persist(vec![record("r/b", "x", "b")]).await.expect("persist");
    assert_eq!(other.stored, 1);
    let dup = store.persist(vec![record("r/a", "m2", "a"), record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!(dup.duplicates, 2, "the pending m2 and the completed m1 are still duplicates after a sweep");
    // An hour on, m1's key has expired and been swept.
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(store.persist(vec![record("r/b", "y", "b")]).await.expect("persist").stored, 1);
    let m1 = store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!((m1.stored, m1.duplicates), (1, 0), "an hour on, m1 is a new message");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_lease_can_neither_claim_complete_nor_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store.persist(vec![record("p", "m1", "a"), record("p", "m2", "a")]).await.expect("persist");
    let old = store.acquire_lease("p", "first", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("p", &old, 10, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(claimed.len(), 2);
    let new = store.acquire_lease("p", "second", LEASE_TTL).await.expect("lease").expect("granted");
    assert_eq!(new.version, old.version + 1);

    let stale = |r: Result<_, StoreError>| matches!(r, Err(StoreError::StaleFencingToken { .. }));
    assert!(stale(store.complete(&claimed[0], &old, Duration::ZERO).await.map(|_| ())), "stale complete");
    assert!(stale(store.replay(&claimed[0], &old, 0).await.map(|_| ())), "stale replay");
    assert!(stale(store.claim("p", &old, 10, Timestamp::now().as_millis()).await.map(|_| ())), "stale claim");
    assert_eq!(store.depth("p"), 2, "nothing was completed by the stale holder");

    // The new holder sees records the old one claimed and never finished.
    let mine = store.claim("p", &new, 10, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(mine.len(), 2);
    store.complete(&mine[0], &new, Duration::ZERO).await.expect("complete");
    assert_eq!(store.replay(&mine[1], &new, 0).await.expect("replay"), 1);
    assert_eq!(store.depth("p"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_record_waits_for_its_next_attempt_and_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store.persist(vec![record("p", "m1", "a")]).await.expect("persist");
    let token = store.acquire_lease("p", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let now = Timestamp::now().as_millis();
    let first = store.claim("p", &token, 10, now).await.expect("claim").remove(0);
    assert_eq!(store.replay(&first, &token, now + 60_000).await.expect("replay"), 1);
    assert!(store.claim("p", &token, 10, now).await.expect("claim").is_empty(), "not due yet");
    let again = store.claim("p", &token, 10, now + 60_000).await.expect("claim").remove(0);
    assert_eq!(again.replay_count, 1);
    assert!(again.first_failure_ms.is_some());
    assert_eq!(store.replay(&again, &token, now).await.expect("replay"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_durable_listed_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for (route, id) in [("r1", "a"), ("r2", "b"), ("r1", "c")] {
        let entry = DeadLetter {
            route: route.into(),
            binding: Some("out".into()),
            address: Some("addr".into()),
            reason: ferry_core::FailureReason::SendRejected,
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
    let r1 = store.dead_letters(Some("r1"), 10).await.expect("list");
    assert_eq!(r1.iter().map(|d| d.entry.envelope.id.as_str()).collect::<Vec<_>>(), vec!["a", "c"]);
    assert_eq!(store.dead_letters(None, 2).await.expect("list").len(), 2, "limit");
    let shown = store.dead_letter(r1[0].id).await.expect("get").expect("exists");
    assert_eq!(shown.entry.reason, ferry_core::FailureReason::SendRejected);
    assert_eq!(store.remove_dead_letters(&[r1[0].id, 999_999]).await.expect("remove"), 1);
    assert_eq!(store.dead_letter_count().await.expect("count"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_process_view_of_an_open_store_is_refused_as_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _store = open(dir.path());
    let second = RedbStore::open(dir.path(), StoreOptions::default());
    assert!(matches!(second, Err(OpenError::Locked { .. })), "{:?}", second.err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_of_the_old_sled_layout_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("sled")).expect("mkdir");
    std::fs::write(dir.path().join("sled").join("db"), b"old").expect("write");
    let err = RedbStore::open(dir.path(), StoreOptions::default()).err().expect("refused");
    let text = err.to_string();
    assert!(matches!(err, OpenError::OldLayout { .. }), "{text}");
    assert!(text.contains("old sled layout") && text.contains("ferry outbox stats"), "{text}");
    assert!(!dir.path().join("ferry.redb").exists(), "nothing was created beside it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_commit_is_seen_while_other_calls_still_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions { fault: Some(Fault::Hang(Op::Persist)), ..StoreOptions::default() };
    let store = RedbStore::open(dir.path(), options).expect("open");
    let hung = {
        let store = store.clone();
        tokio::spawn(async move { store.persist(vec![record("p", "m1", "a")]).await })
    };
    let stuck = ferry_tests::eventually("an operation in flight for 250 ms", || match store.oldest_operation() {
        Some(stuck) if stuck.age >= Duration::from_millis(250) => Ok(stuck),
        other => Err(other),
    })
    .await;
    assert!(["persist", "commit"].contains(&stuck.op), "{stuck:?}");
    // The in-memory reads answer, and the runtime is free: this test runs.
    assert_eq!(store.depth("p"), 0, "nothing was acknowledged as stored");
    assert!(!hung.is_finished());
    hung.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn completions_are_durable_when_they_return() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let records: Vec<_> = (0..50).map(|i| record("p", &format!("m{i}"), "a")).collect();
    store.persist(records).await.expect("persist");
    let token = store.acquire_lease("p", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("p", &token, 100, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(claimed.len(), 50);
    for r in &claimed[..30] {
        store.complete(r, &token, Duration::ZERO).await.expect("complete");
    }
    drop(store);
    let store = reopen(dir.path()).await;
    assert_eq!(store.depth("p"), 20, "completed records stay completed after reopening");
    let token = store.acquire_lease("p", "me again", LEASE_TTL).await.expect("lease").expect("granted");
    let left = store.claim("p", &token, 100, Timestamp::now().as_millis()).await.expect("claim");
    let ids: Vec<_> = left.iter().map(|r| r.envelope.id.clone()).collect();
    assert_eq!(ids, (30..50).map(|i| format!("m{i}")).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_that_fails_to_commit_leaves_the_record_to_be_sent_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions { fault: Some(Fault::Fail(Op::Complete)), ..StoreOptions::default() };
    let store = RedbStore::open(dir.path(), options).expect("open");
    store.persist(vec![record("p", "m1", "a")]).await.expect("persist");
    let token = store.acquire_lease("p", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let claimed = store.claim("p", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    let err = store.complete(&claimed[0], &token, Duration::ZERO).await.expect_err("the commit fails");
    assert!(matches!(err, StoreError::Io(_)), "{err}");
    assert_eq!(store.depth("p"), 1, "still pending");
    let again = store.claim("p", &token, 10, Timestamp::now().as_millis()).await.expect("claim");
    assert_eq!(again.len(), 1, "claimable again, so the drainer sends it again rather than never");
}

/// A file of format 1 (duplicate keys without the address) is upgraded at
/// open: its pending records keep their keys, now with the address.
#[tokio::test(flavor = "multi_thread")]
async fn a_format_1_file_is_upgraded_with_its_pending_keys() {
    use ferry_core::outbox::OutboxRecord;
    use ferry_store::layout::{self, META, RECORDS};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = redb::Database::create(dir.path().join(layout::FILE_NAME)).expect("create");
        let txn = db.begin_write().expect("write");
        {
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert(layout::FORMAT_KEY, 1).expect("format");
            meta.insert(layout::NEXT_SEQ_KEY, 2).expect("seq");
            let stored = OutboxRecord::stored(&record("r/a", "m1", "a"), 1, Timestamp::now().as_millis());
            let mut records = txn.open_table(RECORDS).expect("records");
            records.insert(("r/a", 1), layout::encode(&stored).expect("encode").as_slice()).expect("record");
            let old: redb::TableDefinition<(&str, &str, &str), u64> = redb::TableDefinition::new(layout::DEDUP_V1);
            txn.open_table(old).expect("dedup").insert(("r/a", "m1", "a"), 1).expect("key");
        }
        txn.commit().expect("commit");
    }
    let store = reopen(dir.path()).await;
    assert_eq!(store.depth("r/a"), 1);
    let again = store.persist(vec![record("r/a", "m1", "a")]).await.expect("persist");
    assert_eq!((again.stored, again.duplicates), (0, 1), "the pending key survived the upgrade");
    let mut other = record("r/a", "m1", "a");
    other.address = "orders.other".into();
    assert_eq!(store.persist(vec![other]).await.expect("persist").stored, 1, "another address is another record");
}

/// A file of format 2 (no depth counters) has them counted once at open.
#[tokio::test(flavor = "multi_thread")]
async fn a_format_2_file_gets_its_depth_counters() {
    use ferry_core::outbox::OutboxRecord;
    use ferry_store::layout::{self, META, RECORDS};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = redb::Database::create(dir.path().join(layout::FILE_NAME)).expect("create");
        let txn = db.begin_write().expect("write");
        {
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert(layout::FORMAT_KEY, 2).expect("format");
            meta.insert(layout::NEXT_SEQ_KEY, 10).expect("seq");
            let mut records = txn.open_table(RECORDS).expect("records");
            for (partition, seq) in [("r/a", 1), ("r/a", 2), ("r/b", 3)] {
                let stored = OutboxRecord::stored(&record(partition, &format!("m{seq}"), "a"), seq, 1_000 + seq as i64);
                records.insert((partition, seq), layout::encode(&stored).expect("encode").as_slice()).expect("record");
            }
        }
        txn.commit().expect("commit");
    }
    let store = reopen(dir.path()).await;
    assert_eq!((store.depth("r/a"), store.depth("r/b")), (2, 1));
    assert_eq!(store.oldest("r/a"), Some(1_001));
    let token = store.acquire_lease("r/a", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let batch = store.claim("r/a", &token, 10, i64::MAX).await.expect("claim");
    assert_eq!(batch.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
}

/// A backlog far larger than the window: opening reads one counter per
/// partition, memory holds at most the window, and the drain takes every
/// record once, oldest first.
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_beyond_the_window_opens_without_reading_it_and_drains_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let total = ferry_store::OUTBOX_WINDOW * 2 + 500;
    {
        let store = open(dir.path());
        for chunk in 0..total.div_ceil(1_000) {
            let records: Vec<_> = (chunk * 1_000..((chunk + 1) * 1_000).min(total))
                .map(|i| record("big", &format!("m{i}"), "a"))
                .collect();
            store.persist(records).await.expect("persist");
        }
        store.persist(vec![record("small", "s", "a")]).await.expect("persist");
    }
    let store = reopen(dir.path()).await;
    assert_eq!((store.depth("big"), store.depth("small")), (total as u64, 1));
    assert_eq!(store.records_in_memory(), 0, "opening read no record");
    assert!(store.oldest("big").is_some());

    let token = store.acquire_lease("big", "me", LEASE_TTL).await.expect("lease").expect("granted");
    let mut last_seq = 0;
    let mut ids = Vec::new();
    let mut most_in_memory = 0;
    loop {
        let batch = store.claim("big", &token, 256, i64::MAX).await.expect("claim");
        if batch.is_empty() {
            break;
        }
        most_in_memory = most_in_memory.max(store.records_in_memory());
        for r in &batch {
            assert!(r.seq > last_seq, "oldest first, each once");
            last_seq = r.seq;
            ids.push(r.envelope.id.clone());
        }
        // A record arriving meanwhile joins behind the backlog.
        if ids.len() == 1_024 {
            store.persist(vec![record("big", "late", "a")]).await.expect("persist");
        }
        for r in batch {
            store.complete(&r, &token, Duration::ZERO).await.expect("complete");
        }
    }
    let mut want: Vec<String> = (0..total).map(|i| format!("m{i}")).collect();
    want.push("late".into());
    assert!(ids == want, "{} records drained, not the {} persisted in order", ids.len(), want.len());
    assert!(most_in_memory <= ferry_store::OUTBOX_WINDOW, "{most_in_memory} records in memory");
    assert_eq!(store.depth("big"), 0);
    drop(store);
    let store = reopen(dir.path()).await;
    assert_eq!((store.depth("big"), store.depth("small")), (0, 1), "the counters are durable");
}
