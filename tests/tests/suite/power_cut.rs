//! Power loss under a `shared_outbox` route (issue 34): the embedded store
//! lives on the power-cut filesystem (tests/src/powercut.rs), which keeps
//! writes in a volatile cache until they are synced. A RabbitMQ queue is
//! drained through the outbox to a webhook while the power is cut at random
//! moments: the daemon is SIGKILLed, everything it wrote but did not sync
//! is thrown away, the disk is mounted again and ferry restarts on it.
//!
//! What RabbitMQ still holds was not acknowledged and comes back; what it
//! no longer holds was acknowledged after the outbox commit that covers it
//! was synced, or it is lost. So the test passes only if, at the end, every
//! message published reached the webhook (duplicates are counted and
//! reported, not failed: at-least-once).
//!
//! `just test` runs a short form (`FERRY_POWERCUT_MESSAGES`, default 2,000,
//! and `FERRY_POWERCUT_CUTS`, default 5); `just chaos` runs 20,000 messages
//! and 50 cuts.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::powercut::PowerCutDisk;
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::webhook::WebhookTarget;
use ferry_tests::{env_or, eventually, unique};
use rand::Rng;

fn arrived(target: &WebhookTarget) -> HashSet<String> {
    target.hits().iter().map(|h| String::from_utf8_lossy(&h.body).into_owned()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_acknowledged_message_survives_power_cuts_of_the_embedded_store() {
    let messages: usize = env_or("FERRY_POWERCUT_MESSAGES", 2_000);
    let cuts: usize = env_or("FERRY_POWERCUT_CUTS", 5);
    let rabbit = Rabbit::connect().await;
    let queue = unique("powercut");
    rabbit.declare_queue(&queue).await;
    rabbit.publish_persistent(&queue, (0..messages).map(|i| format!("m-{i}"))).await;
    let target = WebhookTarget::start().await;

    let ws = Workspace::with_plugins(&[]);
    let mount_at = ws.path().join("disk");
    std::fs::create_dir_all(&mount_at).expect("mount point");
    let admin = ANY_PORT.to_owned();
    ws.config(&format!(
        r#"
[admin]
listen = "{admin}"

[store]
path = "{store}"

[receivers.in]
type = "amqp091"
url = "{URL091}"
queue = "{queue}"
prefetch = 200
reconnect_initial_ms = 100

[senders.hook]
type = "http"
url = "{hook}"

[[routes]]
id = "powercut"
receiver = "in"
delivery_mode = "shared_outbox"
max_in_flight = 100
max_replay_attempts = 1000
[routes.backoff]
initial_ms = 50
max_ms = 500

[[routes.bindings]]
sender = "hook"
"#,
        store = mount_at.join("store").display(),
        hook = target.url("/in"),
    ));

    let disk = PowerCutDisk::new();
    let mut rng = rand::rng();
    let started = Instant::now();
    let mut lost_per_cut = Vec::new();
    for cut in 0..cuts {
        let mounted = disk.mount(&mount_at);
        let daemon = Daemon::start(&ws, 1);
        let admin = daemon.admin();
        let ready = admin.clone();
        eventually("/readyz 200", move || ferry_tests::http::get(&ready, "/readyz").is_ok_and(|(s, _)| s == 200)).await;
        // Cut after a random share of what is left has moved, or a random
        // moment if the queue is already through.
        let before = target.count();
        let step = (messages / cuts).max(1);
        let at = rng.random_range(1..=step);
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(200..3_000));
        while target.count() < before + at && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        daemon.kill();
        mounted.unmount();
        let report = disk.cut();
        lost_per_cut.push(report.bytes_lost);
        eprintln!(
            "power cut {}/{cuts}: {} deliveries so far, {} unsynced bytes in {} files thrown away",
            cut + 1,
            target.count(),
            report.bytes_lost,
            report.files_rolled_back
        );
    }

    // Power stays on: everything left must come through.
    let mounted = disk.mount(&mount_at);
    let daemon = Daemon::start(&ws, 1);
    let want: HashSet<String> = (0..messages).map(|i| format!("m-{i}")).collect();
    let drain_started = Instant::now();
    loop {
        let got = arrived(&target);
        if want.is_subset(&got) && rabbit.depth(&queue).await == 0 {
            break;
        }
        if drain_started.elapsed() > Duration::from_secs(120) {
            let missing: Vec<&String> = want.difference(&got).take(10).collect();
            panic!(
                "{} of {messages} messages never arrived after {cuts} power cuts (queue still holds {}), first: {missing:?}\n{}",
                want.difference(&got).count(),
                rabbit.depth(&queue).await,
                daemon.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deliveries = target.count();
    let (syncs, synced) = disk.syncs();
    eprintln!(
        "power cuts: {messages} messages, {cuts} cuts, 0 lost, {} duplicates, {syncs} syncs ({synced} bytes), \
         unsynced bytes lost per cut {lost_per_cut:?}, {:.1} s",
        deliveries - messages,
        started.elapsed().as_secs_f64()
    );
    assert!(daemon.terminate().success(), "clean stop on the disk after the cuts");
    mounted.unmount();
    rabbit.delete_queue(&queue).await;
}

/// The filesystem itself: what was synced survives a cut, what was not is
/// gone, and a remount shows the disk as the cut left it.
#[test]
fn the_disk_keeps_exactly_what_was_synced() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = PowerCutDisk::new();
    let mounted = disk.mount(dir.path());
    let synced = dir.path().join("synced");
    let unsynced = dir.path().join("unsynced");
    {
        let mut f = std::fs::File::create(&synced).expect("create");
        f.write_all(b"durable").expect("write");
        f.sync_data().expect("fdatasync");
        f.write_all(b" and volatile").expect("write more");
        let mut g = std::fs::File::create(&unsynced).expect("create");
        g.write_all(b"never synced").expect("write");
    }
    assert_eq!(std::fs::read(&synced).expect("read"), b"durable and volatile", "before the cut, reads see every write");
    mounted.unmount();
    let report = disk.cut();
    assert_eq!(report.files_rolled_back, 2);
    let mounted = disk.mount(dir.path());
    assert_eq!(std::fs::read(&synced).expect("read"), b"durable");
    assert_eq!(std::fs::read(&unsynced).expect("read"), b"", "created, never synced: empty");
    mounted.unmount();
}
