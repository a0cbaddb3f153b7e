//! Several `ferry` daemons on one config (issue 16, part 1): instance ids
//! in the default MQTT client ids, and an MQTT 5 shared subscription that
//! splits a topic's messages between them on the real Mosquitto.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http;
use ferry_tests::mqtt::{TestMqtt, broker_url, topic};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::{sqs, unique};
use lapin::BasicProperties;

/// One instance's config: no `client_id` anywhere, so both daemons run
/// with the defaults their instance ids make distinct. Each binds to its
/// own sub-topic of `dst`, to show which instance carried a message.
fn instance_config(src: &str, dst: &str, group: &str, lane: &str) -> String {
    format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{url}"
topics = ["{src}/#"]
share_group = "{group}"
session_expiry_secs = 120
reconnect_initial_ms = 100
reconnect_max_ms = 500

[senders.out]
type = "mqtt"
url = "{url}"

[[routes]]
id = "r1"
receiver = "in"
max_in_flight = 20

[[routes.bindings]]
sender = "out"
address = "{dst}/{lane}"
"#,
        url = broker_url()
    )
}

/// Publishes `from..to` as QoS 1 payloads `"<n>"` on `src/m`.
async fn publish_range(publisher: &TestMqtt, src: &str, from: usize, to: usize) {
    for n in from..to {
        publisher.publish_with(&format!("{src}/m"), &n.to_string(), &[]).await;
    }
}

/// The message number a test payload carries.
fn number(p: &rumqttc::v5::mqttbytes::v5::Publish) -> usize {
    String::from_utf8_lossy(&p.payload).parse().expect("numeric payload")
}

/// How often each payload arrived, and by which lane.
#[derive(Default)]
struct Tally {
    seen: BTreeMap<usize, usize>,
    lanes: BTreeMap<String, usize>,
}

impl Tally {
    async fn collect(&mut self, sub: &mut TestMqtt, dst: &str, want: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.seen.len() < want {
            let Ok(Some(p)) = tokio::time::timeout_at(deadline, sub.next(Duration::from_secs(60))).await else {
                break;
            };
            *self.seen.entry(number(&p)).or_default() += 1;
            let lane = topic(&p).trim_start_matches(&format!("{dst}/")).to_owned();
            *self.lanes.entry(lane).or_default() += 1;
        }
        // Late duplicates arrive within a moment of the last new message.
        for p in sub.drain(Duration::from_millis(500)).await {
            *self.seen.entry(number(&p)).or_default() += 1;
        }
    }

    fn missing(&self, total: usize) -> Vec<usize> {
        (0..total).filter(|n| !self.seen.contains_key(n)).collect()
    }

    fn duplicates(&self) -> usize {
        self.seen.values().map(|c| c - 1).sum()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_in_one_share_group_split_a_topic_and_one_carries_on_when_the_other_dies() {
    let (src, dst, group) = (unique("so/src"), unique("so/dst"), unique("g"));
    let (id_a, id_b) = (unique("inst-a"), unique("inst-b"));
    let admin = ANY_PORT.to_owned();
    let ws_a = Workspace::with_plugins(&[]).with_env(&[("FERRY_INSTANCE_ID", &id_a)]);
    ws_a.config(&with_admin(&admin, instance_config(&src, &dst, &group, "a")));
    let ws_b = Workspace::with_plugins(&[]).with_env(&[("FERRY_INSTANCE_ID", &id_b)]);
    ws_b.config(&instance_config(&src, &dst, &group, "b"));
    let a = Daemon::start(&ws_a, 2);
    let admin = a.admin();
    let b = Daemon::start(&ws_b, 2);

    // The instance id is logged and exported.
    assert!(a.log_text().contains(&format!("instance=\"{id_a}\"")), "{}", a.log_text());
    let scrape = http::metrics(&admin);
    assert_eq!(http::sample(&scrape, "ferry_instance_info", &format!("instance=\"{id_a}\"")), Some(1.0), "{scrape}");

    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;

    // Both running: every message once, and both instances take a share.
    const FIRST: usize = 300;
    publish_range(&publisher, &src, 0, FIRST).await;
    let mut tally = Tally::default();
    tally.collect(&mut sub, &dst, FIRST, Duration::from_secs(30)).await;
    assert_eq!(tally.missing(FIRST), Vec::<usize>::new(), "lanes {:?}", tally.lanes);
    assert_eq!(tally.duplicates(), 0, "a shared subscription delivers each message to one member");
    for lane in ["a", "b"] {
        assert!(tally.lanes.get(lane).copied().unwrap_or(0) > 0, "instance {lane} took none: {:?}", tally.lanes);
    }
    // Had the default client ids collided, the broker would have kicked one
    // daemon off for the other in a loop.
    for (name, d) in [("a", &a), ("b", &b)] {
        assert_eq!(d.count_log("connection lost"), 0, "daemon {name}:\n{}", d.log_text());
    }

    // B dies mid-stream; A carries on with its share. Mosquitto keeps a
    // member whose session has not expired in the group: B's share of what
    // is published meanwhile (and what B held unacknowledged) waits in B's
    // session, so A delivers about half of what follows, not all of it.
    const SECOND: usize = 600;
    publish_range(&publisher, &src, FIRST, FIRST + 100).await;
    b.kill();
    publish_range(&publisher, &src, FIRST + 100, SECOND).await;
    let mut after = Tally::default();
    after.collect(&mut sub, &dst, SECOND - FIRST, Duration::from_secs(10)).await;
    let a_after_kill = after.lanes.get("a").copied().unwrap_or(0);
    assert!(a_after_kill >= 100, "A carried only {a_after_kill} after B died: {:?}", after.lanes);

    // B restarted with the same instance id (so the same client id) resumes
    // its session and delivers what waited there: nothing is lost.
    let b = Daemon::start(&ws_b, 2);
    let mut rest = Tally::default();
    let still_missing = (FIRST..SECOND).filter(|n| !after.seen.contains_key(n)).count();
    rest.collect(&mut sub, &dst, still_missing, Duration::from_secs(30)).await;
    let missing: Vec<usize> =
        (FIRST..SECOND).filter(|n| !after.seen.contains_key(n) && !rest.seen.contains_key(n)).collect();
    assert_eq!(
        missing,
        Vec::<usize>::new(),
        "lost across B's crash (after {:?}, resumed {:?})",
        after.lanes,
        rest.lanes
    );
    // Only what B had in flight (its route's max_in_flight plus what the
    // broker had sent ahead) can come twice.
    let dupes = after.duplicates() + rest.seen.keys().filter(|n| after.seen.contains_key(n)).count();
    assert!(dupes <= 40, "{dupes} duplicates");

    assert_eq!(a.terminate().code(), Some(0));
    assert_eq!(b.terminate().code(), Some(0));
}

/// One instance's config with two competing-consumer sources: the AMQP
/// 0-9-1 queue `queue` and the SQS queue at `queue_url`, each routed to
/// `<dst>/<source>-<lane>` on MQTT.
fn competing_config(queue: &str, queue_url: &str, dst: &str, lane: &str) -> String {
    format!(
        r#"
[receivers.rabbit]
type = "amqp091"
url = "{URL091}"
queue = "{queue}"
prefetch = 20
reconnect_initial_ms = 100

[receivers.sqs]
type = "sqs"
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout = 30

[senders.out]
type = "mqtt"
url = "{mqtt}"

[[routes]]
id = "from-rabbit"
receiver = "rabbit"
[[routes.bindings]]
sender = "out"
address = "{dst}/amqp-{lane}"

[[routes]]
id = "from-sqs"
receiver = "sqs"
[[routes.bindings]]
sender = "out"
address = "{dst}/sqs-{lane}"
"#,
        endpoint = sqs::endpoint(),
        mqtt = broker_url(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_on_one_amqp_queue_and_one_sqs_queue_deliver_each_message_once() {
    sqs::require_aws_env();
    let rabbit = Rabbit::connect().await;
    let queue = unique("so-q");
    rabbit.declare_queue(&queue).await;
    let client = sqs::client();
    let (_, queue_url) = sqs::create_queue(&client, "so-sqs", false).await;
    let dst = unique("so/dst");
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;

    let mut daemons = Vec::new();
    for lane in ["a", "b"] {
        let ws = Workspace::with_plugins(&[]).with_env(&[("FERRY_INSTANCE_ID", &unique(lane))]);
        ws.config(&competing_config(&queue, &queue_url, &dst, lane));
        daemons.push((Daemon::start(&ws, 2), ws));
    }
    rabbit.wait_for_consumer(&queue, Duration::from_secs(10)).await;

    const EACH: usize = 200;
    for n in 0..EACH {
        rabbit.publish("", &queue, n.to_string().as_bytes(), BasicProperties::default()).await;
    }
    for n in EACH..2 * EACH {
        sqs::send(&client, &queue_url, &n.to_string(), Default::default()).await;
    }
    let mut tally = Tally::default();
    tally.collect(&mut sub, &dst, 2 * EACH, Duration::from_secs(60)).await;
    assert_eq!(tally.missing(2 * EACH), Vec::<usize>::new(), "lanes {:?}", tally.lanes);
    let repeats = |range: std::ops::Range<usize>| -> usize {
        tally.seen.iter().filter(|(n, _)| range.contains(n)).map(|(_, c)| c - 1).sum()
    };
    let (amqp_repeats, sqs_repeats) = (repeats(0..EACH), repeats(EACH..2 * EACH));
    assert_eq!(amqp_repeats, 0, "a competing consumer took a message another had: {:?}", tally.lanes);
    // A standard SQS queue delivers at least once (AWS says a message may
    // come twice), and moto's ReceiveMessage marks messages received
    // without a lock, so two concurrent receives can both get one (seen
    // once in a full run: 201 deliveries of 200). Far fewer than the
    // instances' in-flight windows, which two consumers that did not
    // compete would repeat.
    assert!(sqs_repeats <= 2, "{sqs_repeats} SQS messages came twice: {:?}", tally.lanes);
    let count = |lane: &str| tally.lanes.get(lane).copied().unwrap_or(0);
    assert_eq!(count("amqp-a") + count("amqp-b"), EACH);
    let sqs = count("sqs-a") + count("sqs-b");
    assert!((EACH..=EACH + sqs_repeats).contains(&sqs), "{sqs} SQS deliveries: {:?}", tally.lanes);
    // RabbitMQ deals a queue's messages out between its consumers.
    assert!(count("amqp-a") > 0 && count("amqp-b") > 0, "one instance took the whole queue: {:?}", tally.lanes);

    for (daemon, _ws) in daemons {
        assert_eq!(daemon.terminate().code(), Some(0));
    }
    assert_eq!(rabbit.depth(&queue).await, 0);
    rabbit.delete_queue(&queue).await;
}

/// One instance's config on the shared PostgreSQL store: a `shared_outbox`
/// route from the AMQP 0-9-1 queue `queue` (a competing consumer) to
/// `<dst>/m`, its binding in six partitions.
fn pg_outbox_config(db_url: &str, queue: &str, dst: &str) -> String {
    format!(
        r#"
[store]
type = "postgres"
url = "{db_url}"
lease_ttl_secs = {PG_TTL_SECS}

[receivers.rabbit]
type = "amqp091"
url = "{URL091}"
queue = "{queue}"
prefetch = 50
reconnect_initial_ms = 100

[senders.out]
type = "mqtt"
url = "{mqtt}"

[[routes]]
id = "pg"
receiver = "rabbit"
delivery_mode = "shared_outbox"
outbox_partitions = {PG_PARTITIONS}
max_in_flight = {PG_IN_FLIGHT}

[[routes.bindings]]
sender = "out"
address = "{dst}/m"
"#,
        mqtt = broker_url(),
    )
}

const PG_TTL_SECS: u64 = 3;
const PG_PARTITIONS: usize = 6;
const PG_IN_FLIGHT: usize = 20;

/// Publishes `from..to` to `queue` as payloads `"<n>"` with message ids
/// `m-<n>` (a redelivery keeps its id, so the outbox can tell it).
async fn publish_numbered(rabbit: &Rabbit, queue: &str, from: usize, to: usize) {
    for n in from..to {
        let properties = BasicProperties::default().with_message_id(format!("m-{n}").into());
        rabbit.publish("", queue, n.to_string().as_bytes(), properties).await;
    }
}

/// Live leases per instance id (the owner name is `<instance>/<random>`).
async fn lease_holders(db: &tokio_postgres::Client) -> BTreeMap<String, usize> {
    let rows = db
        .query("SELECT split_part(owner, '/', 1), count(*) FROM ferry_leases WHERE expires_at > now() GROUP BY 1", &[])
        .await
        .expect("leases");
    rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as usize)).collect()
}

/// Waits until `pred` holds for the live leases; returns them and how long it took.
async fn wait_for_leases(
    db: &tokio_postgres::Client,
    timeout: Duration,
    pred: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> (BTreeMap<String, usize>, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        let holders = lease_holders(db).await;
        if pred(&holders) || started.elapsed() > timeout {
            return (holders, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_daemons_on_one_postgres_store_lose_nothing_when_one_is_killed_and_one_stopped() {
    let db = ferry_tests::pg::TestDb::new().await;
    let sql = db.client().await;
    let rabbit = Rabbit::connect().await;
    let queue = unique("pg-q");
    rabbit.declare_queue(&queue).await;
    let dst = unique("pg/dst");
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;

    let ids = [unique("pg-a"), unique("pg-b"), unique("pg-c")];
    let admin = ANY_PORT.to_owned();
    let mut workspaces = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let ws = Workspace::with_plugins(&[]).with_env(&[("FERRY_INSTANCE_ID", id)]);
        let config = pg_outbox_config(&db.url, &queue, &dst);
        // C serves the admin endpoints the CLI checks below.
        ws.config(&if i == 2 { with_admin(&admin, config) } else { config });
        workspaces.push(ws);
    }
    let mut daemons: Vec<Option<Daemon>> = workspaces.iter().map(|ws| Some(Daemon::start(ws, 2))).collect();
    let admin = daemons[2].as_ref().expect("c").admin();
    rabbit.wait_for_consumer(&queue, Duration::from_secs(10)).await;

    // The six partitions spread: two per instance.
    let (spread, took) = wait_for_leases(&sql, Duration::from_secs(6 * PG_TTL_SECS), |h| {
        h.len() == 3 && h.values().all(|n| *n == PG_PARTITIONS / 3)
    })
    .await;
    assert!(spread.len() == 3 && spread.values().all(|n| *n == 2), "leases after {took:?}: {spread:?}");

    const TOTAL: usize = 10_000;
    let publish = |from: usize, to: usize| publish_numbered(&rabbit, &queue, from, to);
    publish(0, 3_000).await;
    // A dies mid-stream: what it had persisted stays in the store, its
    // unacknowledged deliveries go back to the queue, and its partitions
    // are taken over once their leases expire.
    daemons[0].take().expect("a").kill();
    // The takeover is watched while the stream goes on, so its time is the
    // interval the lease TTL bounds, not that plus the publishing.
    let ((after_kill, takeover), ()) = tokio::join!(
        wait_for_leases(&sql, Duration::from_secs(PG_TTL_SECS + 10), |h| {
            !h.contains_key(&ids[0]) && h.values().sum::<usize>() == PG_PARTITIONS
        }),
        publish(3_000, 6_000),
    );
    assert!(
        !after_kill.contains_key(&ids[0]) && after_kill.values().sum::<usize>() == PG_PARTITIONS,
        "A's partitions not taken over: {after_kill:?}"
    );
    assert!(
        takeover <= Duration::from_secs(PG_TTL_SECS + 5),
        "A's partitions taken over {takeover:?} after the kill (ttl {PG_TTL_SECS} s)"
    );
    // B stops cleanly: it finishes its sends and gives its leases up at once.
    assert_eq!(daemons[1].take().expect("b").terminate().code(), Some(0));
    let (after_stop, handover) = wait_for_leases(&sql, Duration::from_secs(PG_TTL_SECS), |h| {
        h.len() == 1 && h.get(&ids[2]) == Some(&PG_PARTITIONS)
    })
    .await;
    assert_eq!(after_stop.get(&ids[2]), Some(&PG_PARTITIONS), "C holds everything after {handover:?}: {after_stop:?}");
    let held = PG_PARTITIONS as f64;
    http::wait_for_sample(&admin, "ferry_outbox_leases_held", "route=\"pg\"", held, Duration::from_secs(PG_TTL_SECS));
    publish(6_000, TOTAL).await;

    let mut tally = Tally::default();
    tally.collect(&mut sub, &dst, TOTAL, Duration::from_secs(180)).await;
    let missing = tally.missing(TOTAL);
    assert_eq!(missing.len(), 0, "lost: {:?}", &missing[..missing.len().min(20)]);
    // Only what A was sending when it died can come twice: at most its
    // route's in-flight sends on each partition it held.
    let dupes = tally.duplicates();
    eprintln!(
        "postgres store: {TOTAL} messages, {dupes} duplicates, A's partitions taken over in {takeover:?}, B's in {handover:?}"
    );
    assert!(dupes <= 2 * PG_IN_FLIGHT, "{dupes} duplicates");

    // The operator's tools reach the shared store while C runs.
    let stats = workspaces[0].ferry(&["outbox", "stats", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.status.success(), "{text}{}", String::from_utf8_lossy(&stats.stderr));
    assert!(text.contains("0 dead letter(s)"), "{text}");
    let listed = workspaces[2].ferry(&["dlq", "list", "-c", "ferry.toml"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));

    assert_eq!(daemons[2].take().expect("c").terminate().code(), Some(0));
    assert_eq!(rabbit.depth(&queue).await, 0);
    rabbit.delete_queue(&queue).await;
    db.drop().await;
}

/// The database goes away under load and comes back: the route retries its
/// persists (the source keeps its messages meanwhile), the drainers stop
/// and take their leases again, and every message arrives.
#[tokio::test(flavor = "multi_thread")]
async fn the_postgres_store_going_away_and_coming_back_loses_nothing() {
    let db = ferry_tests::pg::TestDb::new().await;
    let proxy = ferry_tests::tcp_proxy::TcpProxy::start(db.address()).await;
    let rabbit = Rabbit::connect().await;
    let queue = unique("pgdown-q");
    rabbit.declare_queue(&queue).await;
    let dst = unique("pgdown/dst");
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let ws = Workspace::with_plugins(&[]).with_env(&[("FERRY_INSTANCE_ID", &unique("pgdown"))]);
    ws.config(&pg_outbox_config(&db.url_via(proxy.port), &queue, &dst));
    let daemon = Daemon::start(&ws, 2);
    rabbit.wait_for_consumer(&queue, Duration::from_secs(10)).await;

    const TOTAL: usize = 1_000;
    let publish = |from: usize, to: usize| publish_numbered(&rabbit, &queue, from, to);
    publish(0, 300).await;
    let mut tally = Tally::default();
    tally.collect(&mut sub, &dst, 300, Duration::from_secs(30)).await;
    assert_eq!(tally.missing(300), Vec::<usize>::new());

    proxy.cut();
    publish(300, TOTAL).await;
    tokio::time::sleep(Duration::from_secs(2 * PG_TTL_SECS)).await;
    assert!(daemon.count_log("cannot persist to the outbox") > 0, "{}", daemon.log_text());
    proxy.restore();

    tally.collect(&mut sub, &dst, TOTAL, Duration::from_secs(60)).await;
    let missing = tally.missing(TOTAL);
    assert_eq!(missing.len(), 0, "lost: {:?}", &missing[..missing.len().min(20)]);
    eprintln!("postgres outage: {TOTAL} messages, {} duplicates", tally.duplicates());
    // The leases ran out during the outage: every drainer stopped, and
    // started again under a new lease once the database was back.
    assert!(daemon.count_log("outbox drainer started") >= 2 * PG_PARTITIONS, "{}", daemon.log_text());
    assert_eq!(daemon.count_log("message dead-lettered"), 0, "an outage is not the messages' fault");
    assert!(tally.duplicates() <= PG_PARTITIONS * PG_IN_FLIGHT, "{} duplicates", tally.duplicates());
    assert_eq!(daemon.terminate().code(), Some(0));
    assert_eq!(rabbit.depth(&queue).await, 0);
    rabbit.delete_queue(&queue).await;
    db.drop().await;
}

/// One receiver with three sessions (`connections = 3`) on Mosquitto: three
/// client ids in one shared subscription, every message delivered once,
/// and `/readyz` ready only with all three connected.
#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_with_three_connections_delivers_each_message_once() {
    let (src, dst) = (unique("conn/src"), unique("conn/dst"));
    let admin = ANY_PORT.to_owned();
    let client = unique("conn-rx");
    let ws = Workspace::with_plugins(&[]);
    let config = instance_config(&src, &dst, "unused", "a")
        .replace("share_group = \"unused\"\n", &format!("client_id = \"{client}\"\nconnections = 3\n"));
    ws.config(&with_admin(&admin, config));
    let daemon = Daemon::start(&ws, 4);
    let admin = daemon.admin();
    for id in [client.clone(), format!("{client}-1"), format!("{client}-2")] {
        assert!(daemon.log_text().contains(&format!("client_id=\"{id}\"")), "{id}:\n{}", daemon.log_text());
    }
    assert_eq!(http::get(&admin, "/readyz").expect("readyz").0, 200);

    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    const N: usize = 600;
    publish_range(&publisher, &src, 0, N).await;
    let mut tally = Tally::default();
    tally.collect(&mut sub, &dst, N, Duration::from_secs(30)).await;
    assert_eq!(tally.missing(N), Vec::<usize>::new());
    assert_eq!(tally.duplicates(), 0, "one shared subscription: each message to one session");
    assert_eq!(daemon.terminate().code(), Some(0));
}
