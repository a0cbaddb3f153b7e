//! The endpoint's time windows on paused time: a message's delay, its
//! visibility timeout, the long poll's wait, FIFO deduplication and
//! retention. The engine reads tokio's clock, and the records live in
//! memory (commits finish at once), so `advance` moves every window exactly
//! and nothing here sleeps. What the AWS SDK sees of the same windows over
//! HTTP is tested in `tests/suite/sdk.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ferry_core::clock::Clock;
use ferry_core::outbox::StoreError;
use ferry_core::records::{RecordChange, RecordStore};
use tokio::time::{Instant, advance};

use crate::engine::{Engine, Identity, Outgoing, ReceiveOptions};

/// Records in memory: each commit applies at once.
#[derive(Default)]
struct Memory(Mutex<BTreeMap<(String, String), Vec<u8>>>);

#[async_trait]
impl RecordStore for Memory {
    async fn commit(&self, change: RecordChange) -> Result<(), StoreError> {
        let mut map = self.0.lock().expect("lock");
        for (space, key) in change.deletes {
            map.remove(&(space, key));
        }
        for (space, key, value) in change.puts {
            map.insert((space, key), value);
        }
        Ok(())
    }

    async fn load(&self, space: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let map = self.0.lock().expect("lock");
        Ok(map.iter().filter(|((s, _), _)| s == space).map(|((_, k), v)| (k.clone(), v.clone())).collect())
    }
}

async fn engine() -> Arc<Engine> {
    let identity = Identity { region: "us-east-1".into(), account: "000000000000".into() };
    Engine::open(Arc::new(Memory::default()), identity, Clock::tokio()).await.expect("open")
}

async fn queue(engine: &Engine, name: &str, attributes: &[(&str, &str)]) {
    let attributes = attributes.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    engine.create(name, attributes, BTreeMap::new()).await.expect("created");
}

fn message(body: &str) -> Outgoing {
    Outgoing {
        body: body.into(),
        attributes: Vec::new(),
        trace_header: None,
        delay_s: None,
        group: None,
        dedup_id: None,
        sender_id: "tester".into(),
    }
}

fn now(visibility_s: Option<i64>) -> ReceiveOptions {
    ReceiveOptions { max: 10, visibility_s, wait: Some(Duration::ZERO) }
}

async fn bodies(engine: &Engine, name: &str, options: ReceiveOptions) -> Vec<String> {
    let got = engine.receive(name, options).await.expect("receive");
    got.iter().map(|r| r.stored.body.clone()).collect()
}

async fn counts(engine: &Engine, name: &str) -> BTreeMap<String, String> {
    engine.attributes(name).await.expect("attributes")
}

#[tokio::test(start_paused = true)]
async fn a_delayed_message_appears_when_its_delay_ends_and_not_a_millisecond_before() {
    let engine = engine().await;
    queue(&engine, "delayed", &[]).await;
    engine.send("delayed", vec![Outgoing { delay_s: Some(3), ..message("later") }]).await.expect("sent");
    assert_eq!(counts(&engine, "delayed").await["ApproximateNumberOfMessagesDelayed"], "1");
    advance(Duration::from_millis(2_999)).await;
    assert!(bodies(&engine, "delayed", now(None)).await.is_empty(), "still delayed 1 ms before the end");
    advance(Duration::from_millis(1)).await;
    assert_eq!(bodies(&engine, "delayed", now(None)).await, ["later"]);

    // The queue's DelaySeconds applies to a message that names none.
    queue(&engine, "slow", &[("DelaySeconds", "60")]).await;
    engine.send("slow", vec![message("queued")]).await.expect("sent");
    advance(Duration::from_secs(59)).await;
    assert!(bodies(&engine, "slow", now(None)).await.is_empty());
    advance(Duration::from_secs(1)).await;
    assert_eq!(bodies(&engine, "slow", now(None)).await, ["queued"]);
}

#[tokio::test(start_paused = true)]
async fn a_received_message_is_hidden_for_its_visibility_timeout_then_comes_back() {
    let engine = engine().await;
    queue(&engine, "vis", &[("VisibilityTimeout", "30")]).await;
    engine.send("vis", vec![message("m")]).await.expect("sent");
    let first = engine.receive("vis", now(None)).await.expect("receive");
    assert_eq!(first.len(), 1);
    assert_eq!(counts(&engine, "vis").await["ApproximateNumberOfMessagesNotVisible"], "1");
    advance(Duration::from_millis(29_999)).await;
    assert!(bodies(&engine, "vis", now(None)).await.is_empty(), "hidden until the queue's 30 s are up");
    advance(Duration::from_millis(1)).await;
    let again = engine.receive("vis", now(Some(5))).await.expect("receive");
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].receive_count, 2);

    // A receive's own timeout, then one changed by ChangeMessageVisibility.
    advance(Duration::from_millis(4_999)).await;
    assert!(bodies(&engine, "vis", now(None)).await.is_empty(), "hidden for the receive's 5 s");
    advance(Duration::from_millis(1)).await;
    let third = engine.receive("vis", now(None)).await.expect("receive");
    assert_eq!(third.len(), 1);
    engine.change_visibility("vis", &third[0].receipt_handle, 120).await.expect("changed");
    advance(Duration::from_secs(119)).await;
    assert!(bodies(&engine, "vis", now(None)).await.is_empty(), "hidden for the changed 120 s");
    advance(Duration::from_secs(1)).await;
    assert_eq!(bodies(&engine, "vis", now(None)).await, ["m"]);
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_waits_its_time_and_wakes_on_a_send_or_a_delay_ending() {
    let engine = engine().await;
    queue(&engine, "poll", &[]).await;
    let wait = |s| ReceiveOptions { max: 10, visibility_s: None, wait: Some(Duration::from_secs(s)) };

    // Empty: the poll ends after exactly its wait.
    let started = Instant::now();
    assert!(engine.receive("poll", wait(20)).await.expect("receive").is_empty());
    assert_eq!(started.elapsed(), Duration::from_secs(20));

    // A send wakes a waiting poll at once.
    let poll = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = engine.receive("poll", wait(20)).await.expect("receive");
            (started.elapsed(), got.len())
        })
    };
    while engine.receives_in_progress() == 0 {
        tokio::task::yield_now().await;
    }
    advance(Duration::from_secs(7)).await;
    engine.send("poll", vec![message("wake")]).await.expect("sent");
    let (waited, got) = poll.await.expect("poll");
    assert_eq!((waited, got), (Duration::from_secs(7), 1), "woken by the send, not by its timeout");
    assert_eq!(engine.receives_in_progress(), 0);

    // A message delayed 4 s wakes a 20 s poll when its delay ends.
    engine.send("poll", vec![Outgoing { delay_s: Some(4), ..message("delayed") }]).await.expect("sent");
    let started = Instant::now();
    let got = engine.receive("poll", wait(20)).await.expect("receive");
    assert_eq!(got.len(), 1);
    assert_eq!(started.elapsed(), Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn a_fifo_deduplication_id_holds_for_five_minutes() {
    let engine = engine().await;
    queue(&engine, "orders.fifo", &[("FifoQueue", "true")]).await;
    let fifo = |body: &str| Outgoing { group: Some("g".into()), dedup_id: Some("d-1".into()), ..message(body) };
    let first = engine.send("orders.fifo", vec![fifo("one")]).await.expect("sent");
    advance(Duration::from_millis(299_999)).await;
    let again = engine.send("orders.fifo", vec![fifo("two")]).await.expect("sent");
    assert_eq!(again[0].message_id, first[0].message_id, "a duplicate within the window is the same message");
    advance(Duration::from_millis(1)).await;
    let later = engine.send("orders.fifo", vec![fifo("three")]).await.expect("sent");
    assert_ne!(later[0].message_id, first[0].message_id, "after five minutes the id is new again");
    let got = bodies(&engine, "orders.fifo", now(None)).await;
    assert_eq!(got, ["one", "three"]);
}

#[tokio::test(start_paused = true)]
async fn a_message_past_its_retention_period_is_gone() {
    let engine = engine().await;
    queue(&engine, "brief", &[("MessageRetentionPeriod", "60")]).await;
    engine.send("brief", vec![message("old")]).await.expect("sent");
    advance(Duration::from_secs(30)).await;
    engine.send("brief", vec![message("new")]).await.expect("sent");
    advance(Duration::from_secs(30)).await;
    assert_eq!(bodies(&engine, "brief", now(Some(0))).await, ["new"], "60 s after it was sent, old is gone");
    advance(Duration::from_secs(30)).await;
    assert!(bodies(&engine, "brief", now(None)).await.is_empty());
    assert_eq!(counts(&engine, "brief").await["ApproximateNumberOfMessages"], "0");
}
