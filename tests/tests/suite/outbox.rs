//! `shared_outbox` through the daemon, MQTT in and AMQP 0-9-1 out to a
//! private RabbitMQ node that is down at first: the source is acknowledged
//! once the records are durable, a duplicate id is suppressed and counted, a
//! full partition stops receiving without dropping anything, and everything
//! arrives once the target is back. Sends refused for want of a connection
//! do not spend the records' replay budget (the default five), so nothing
//! is dead-lettered by the outage.

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::{metrics, sample, wait_for_sample};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::rabbit::{PrivateRabbit, Rabbit};
use ferry_tests::unique;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn ack_after_persist_duplicates_and_backpressure_with_the_target_down() {
    let mut broker = PrivateRabbit::start().await;
    let (wide, narrow) = (unique("ob-wide"), unique("ob-narrow"));
    {
        let rabbit = Rabbit::connect_to(&broker.url091()).await;
        rabbit.declare_queue(&wide).await;
        rabbit.declare_queue(&narrow).await;
    }
    broker.stop().await;

    let (topic_wide, topic_narrow) = (unique("ob/wide"), unique("ob/narrow"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[admin]
listen = "{admin}"

[receivers.wide]
type = "mqtt"
url = "{mqtt}"
client_id = "{cw}"
topics = ["{topic_wide}"]

[receivers.narrow]
type = "mqtt"
url = "{mqtt}"
client_id = "{cn}"
topics = ["{topic_narrow}"]

[senders.rabbit]
type = "amqp091"
url = "{amqp}"
reconnect_initial_ms = 100
reconnect_max_ms = 500

[[routes]]
id = "wide"
receiver = "wide"
delivery_mode = "shared_outbox"
[routes.backoff]
initial_ms = 50
max_ms = 300
[[routes.bindings]]
sender = "rabbit"
address = "{wide}"

[[routes]]
id = "narrow"
receiver = "narrow"
delivery_mode = "shared_outbox"
max_outbox_depth = 5
max_in_flight = 1
[routes.backoff]
initial_ms = 50
max_ms = 300
[[routes.bindings]]
sender = "rabbit"
address = "{narrow}"
"#,
        mqtt = broker_url(),
        amqp = broker.url091(),
        cw = unique("ob-w"),
        cn = unique("ob-n"),
    ));
    // The RabbitMQ target is down: both receivers, not the sender.
    let daemon = Daemon::start_with_connected(&ws, &[("receiver", "wide"), ("receiver", "narrow")]);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..20 {
        publisher.publish_with(&topic_wide, &format!("w-{i}"), &[("mqtt.message-id", &format!("w-{i}"))]).await;
        publisher.publish_with(&topic_narrow, &format!("n-{i}"), &[("mqtt.message-id", &format!("n-{i}"))]).await;
    }
    // The same identity again while the first is still pending (once the
    // first is persisted: the route handles deliveries concurrently, so an
    // earlier duplicate could otherwise be the one stored).
    wait_for_sample(&admin, "ferry_messages_acked_total", "route=\"wide\"", 20.0, WAIT);
    publisher.publish_with(&topic_wide, "w-0 again", &[("mqtt.message-id", "w-0")]).await;

    // With the target down, the wide route acknowledged everything it
    // persisted, the duplicate included.
    wait_for_sample(&admin, "ferry_messages_acked_total", "route=\"wide\"", 21.0, WAIT);
    let m = wait_for_sample(&admin, "ferry_outbox_depth", "route=\"wide\"", 20.0, WAIT);
    assert_eq!(sample(&m, "ferry_outbox_duplicate_suppressed_total", "route=\"wide\""), Some(1.0), "{m}");
    assert!(sample(&m, "ferry_outbox_oldest_age_seconds", "route=\"wide\"").is_some(), "{m}");

    // The narrow route stopped at its limit and left the rest at the source.
    tokio::time::sleep(ferry_tests::QUIET).await;
    let m = metrics(&admin);
    let narrow_acked = sample(&m, "ferry_messages_acked_total", "route=\"narrow\"").unwrap_or(0.0);
    assert!((5.0..=6.0).contains(&narrow_acked), "narrow acked {narrow_acked}:\n{m}");
    assert!(sample(&m, "ferry_outbox_backpressure_total", "route=\"narrow\"").is_some_and(|n| n >= 1.0), "{m}");

    broker.restart().await;
    let rabbit = Rabbit::connect_to(&broker.url091()).await;
    for (queue, prefix) in [(&wide, "w"), (&narrow, "n")] {
        let got = rabbit.collect(queue, 20, WAIT).await;
        let bodies: BTreeSet<String> = got.iter().map(|d| String::from_utf8_lossy(&d.data).into_owned()).collect();
        let expected: BTreeSet<String> = (0..20).map(|i| format!("{prefix}-{i}")).collect();
        assert_eq!(bodies, expected, "{queue}: every message arrived once the target came back");
    }
    // Nothing more: the duplicate was not sent, and no record is left.
    assert!(rabbit.get(&wide, Duration::from_millis(500)).await.is_none(), "the duplicate was sent");
    ferry_tests::eventually("the outbox empty", || {
        let m = metrics(&admin);
        let left = sample(&m, "ferry_outbox_depth", "route=\"wide\"").unwrap_or(-1.0)
            + sample(&m, "ferry_outbox_depth", "route=\"narrow\"").unwrap_or(-1.0);
        if left == 0.0 { Ok(()) } else { Err(m) }
    })
    .await;
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty(), "{:?}", ws.dead_letters());
    // A clean stop leaves nothing to send again at the next start.
    let again = Daemon::start(&ws, 3);
    assert!(rabbit.get(&wide, Duration::from_secs(1)).await.is_none(), "a record was sent twice");
    assert!(rabbit.get(&narrow, Duration::from_millis(200)).await.is_none(), "a record was sent twice");
    assert!(again.terminate().success());
    broker.stop().await;
}

/// A record the target refuses for good is dead-lettered from the outbox
/// with its binding and address, and leaves the outbox.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_record_is_dead_lettered_with_its_binding_and_address() {
    let topic = unique("ob/refused");
    let nobody = unique("ob-nobody-listens");
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[admin]
listen = "{admin}"

[receivers.in]
type = "mqtt"
url = "{mqtt}"
client_id = "{client}"
topics = ["{topic}"]

[senders.rabbit]
type = "amqp091"
url = "{amqp}"

[[routes]]
id = "refused"
receiver = "in"
delivery_mode = "shared_outbox"
[[routes.bindings]]
sender = "rabbit"
address = "{nobody}"
"#,
        mqtt = broker_url(),
        amqp = ferry_tests::rabbit::URL091,
        client = unique("ob-r"),
    ));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&topic, "unroutable", &[("mqtt.message-id", "u-1")]).await;
    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, WAIT);
    wait_for_sample(&admin, "ferry_outbox_depth", "route=\"refused\"", 0.0, WAIT);
    assert!(daemon.terminate().success());
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "send_rejected");
    assert_eq!(dead[0]["binding"], "rabbit");
    assert_eq!(dead[0]["address"], nobody.as_str());
    assert_eq!(dead[0]["envelope"]["id"], "u-1");
}
