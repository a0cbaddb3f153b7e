//! SQS routes through the real daemon, against moto_server and Mosquitto:
//! the header mapping both ways and its "crossing transports" effects,
//! redelivery with a growing receive count ending in the DLQ, a target
//! outage that holds the message without counting receives, and a
//! message held for longer than its visibility timeout delivered once.

use std::collections::HashMap;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::{get, sample, wait_for_sample};
use ferry_tests::mqtt::{TestMqtt, broker_url, topic, user_property};
use ferry_tests::sqs::{self, attribute, create_queue, depth, receive, receive_first, text};
use ferry_tests::unique;
use ferry_tests::webhook::{WebhookTarget, answer};

fn sqs_to_mqtt(admin: &str, queue_url: &str, mqtt_url: &str, dst: &str, route_extra: &str, processors: &str) -> String {
    format!(
        r#"
[admin]
listen = "{admin}"
[plugins]
call_timeout_ms = 10000
[receivers.q]
type = "sqs"
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout = 2
[senders.m]
type = "mqtt"
url = "{mqtt_url}"
client_id = "{sid}"
reconnect_initial_ms = 100
reconnect_max_ms = 300
ack_timeout_ms = 1000
[[routes]]
id = "sqs-in"
receiver = "q"
{route_extra}
[routes.backoff]
initial_ms = 100
max_ms = 200
{processors}
[[routes.bindings]]
sender = "m"
address = "{dst}/out"
"#,
        endpoint = sqs::endpoint(),
        sid = unique("ferry-m"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_to_mqtt_maps_attributes_and_drops_numeric_sqs_headers_with_a_count() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-in", false).await;
    let admin = ANY_PORT.to_owned();
    let dst = unique("bb/sqs");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&sqs_to_mqtt(&admin, &url, &broker_url(), &dst, "", ""));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;

    let mut attrs = HashMap::new();
    attrs.insert("Subject".to_owned(), text("order.created"));
    attrs.insert("kind".to_owned(), text("temp"));
    attrs.insert("x-bridge.tenant-id".to_owned(), text("spoof"));
    sqs::send(&client, &url, "{\"order\":42}", attrs).await;

    let p = sub.next(Duration::from_secs(15)).await.expect("crossed to MQTT");
    assert_eq!(topic(&p), format!("{dst}/out"));
    assert_eq!(p.payload.as_ref(), b"{\"order\":42}");
    assert_eq!(user_property(&p, "gobridge.subject"), Some("order.created"));
    assert_eq!(user_property(&p, "Subject"), Some("order.created"));
    assert_eq!(user_property(&p, "kind"), Some("temp"));
    assert!(user_property(&p, "mqtt.message-id").is_some_and(|id| !id.is_empty()), "the SQS MessageId is the identity");
    assert_eq!(user_property(&p, "x-bridge.tenant-id"), None);
    // sqs.ApproximateReceiveCount (a number) and sqs.SentTimestamp (a time)
    // cannot be MQTT user properties: dropped and counted.
    assert_eq!(user_property(&p, "sqs.ApproximateReceiveCount"), None);
    assert_eq!(user_property(&p, "sqs.SentTimestamp"), None);
    assert!(user_property(&p, "sqs.SenderId").is_some(), "text system attributes cross");
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    assert_eq!(sample(&metrics, "ferry_mqtt_non_string_header_dropped_total", "sender=\"m\""), Some(2.0));
    assert_eq!(sqs::wait_until_empty(&client, &url).await, (0, 0), "acked = deleted");
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_sqs_maps_user_properties_to_attributes() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-out", false).await;
    let src = unique("bb/mq");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&sqs::mqtt_to_sqs_config(&broker_url(), &src, &url, "", "", ""));
    let daemon = Daemon::start(&ws, 1);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher
        .publish_with(
            &format!("{src}/a"),
            "{\"t\":21}",
            &[
                ("mqtt.message-id", "mq-1"),
                ("gobridge.subject", "reading.taken"),
                ("traceparent", "00-abc-def-01"),
                ("site", "Malmö"),
            ],
        )
        .await;
    let got = receive_first(&client, &url, Duration::from_secs(1)).await;
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.body(), Some("{\"t\":21}"));
    assert_eq!(attribute(m, "Subject"), Some("reading.taken"));
    assert_eq!(attribute(m, "mqtt.message-id"), Some("mq-1"));
    assert_eq!(attribute(m, "mqtt.topic"), Some(format!("{src}/a").as_str()));
    assert_eq!(attribute(m, "traceparent"), Some("00-abc-def-01"));
    assert_eq!(attribute(m, "site"), Some("Malmö"));
    assert_eq!(attribute(m, "x-bridge.route-id"), None, "private bookkeeping stays home");
    let qos = m.message_attributes().and_then(|a| a.get("mqtt.qos")).expect("mqtt.qos");
    assert_eq!((qos.data_type(), qos.string_value()), ("Number", Some("1")));
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// SQSDroppedAttributes through `/metrics`: more headers than SQS's ten
/// attributes are counted as they are dropped.
#[tokio::test(flavor = "multi_thread")]
async fn attributes_over_the_sqs_limit_are_counted_on_the_metrics_endpoint() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-many", false).await;
    let src = unique("bb/many");
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    let config = sqs::mqtt_to_sqs_config(&broker_url(), &src, &url, "", "", "");
    ws.config(&format!("[admin]\nlisten = \"{admin}\"\n{config}"));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let before =
        sample(&get(&admin, "/metrics").expect("metrics").1, "ferry_sqs_dropped_attributes_total", "").unwrap_or(0.0);
    assert_eq!(before, 0.0);
    let publisher = TestMqtt::connect(&broker_url()).await;
    let names: Vec<String> = (0..12).map(|i| format!("p{i:02}")).collect();
    let props: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    publisher.publish_with(&format!("{src}/a"), "many", &props).await;
    let got = receive_first(&client, &url, Duration::from_secs(1)).await;
    assert_eq!(got.len(), 1);
    let kept = got[0].message_attributes().map_or(0, |a| a.len());
    assert_eq!(kept, 10, "SQS keeps ten attributes");
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    let dropped = sample(&metrics, "ferry_sqs_dropped_attributes_total", "").unwrap_or(0.0);
    // 12 properties plus mqtt.topic, mqtt.qos, mqtt.retained, the generated
    // mqtt.message-id and the correlation id: at least 6 did not fit.
    assert!(dropped >= 6.0, "{metrics}");
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// `[receivers.q]` on `queue_url` and one route to `[senders.out]`
/// (`sender`, a TOML body).
fn sqs_to(admin: &str, queue_url: &str, sender: &str, route_extra: &str) -> String {
    format!(
        r#"
[admin]
listen = "{admin}"
[receivers.q]
type = "sqs"
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"
wait_time_seconds = 1
visibility_timeout = 2
[senders.out]
{sender}
[[routes]]
id = "sqs-in"
receiver = "q"
{route_extra}
[routes.backoff]
initial_ms = 100
max_ms = 200
[[routes.bindings]]
sender = "out"
"#,
        endpoint = sqs::endpoint(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_target_makes_sqs_redeliver_with_a_growing_count_until_the_dlq() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-replay", false).await;
    // The target fails the message for itself (500): each failure spends
    // a replay, and SQS counts the receives.
    let target = WebhookTarget::start().await;
    target.answer_all(answer(500, None));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    let sender = format!("type = \"http\"\nurl = \"{}\"", target.url("/hook"));
    ws.config(&sqs_to(&admin, &url, &sender, "max_replay_attempts = 2"));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    sqs::send(&client, &url, "never delivered", HashMap::new()).await;

    daemon.wait_for_total("ferry_messages_dead_lettered_total", "", 1.0, Duration::from_secs(30));
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    assert!(sample(&metrics, "ferry_messages_retried_total", "route=\"sqs-in\"").unwrap_or(0.0) >= 2.0);
    assert_eq!(sqs::wait_until_empty(&client, &url).await, (0, 0), "deleted after dead-lettering");
    let log = daemon.log_text();
    assert_eq!(daemon.terminate().code(), Some(0));
    let dead = ws.dead_letters();
    assert_eq!(dead.len(), 1, "dead-lettered once the replays ran out:\n{log}");
    assert_eq!(dead[0]["reason"], "replay_exhausted");
    assert_eq!(dead[0]["envelope"]["headers"]["sqs.ApproximateReceiveCount"]["value"], 3);
    assert_eq!(target.count(), 3, "one send per receive");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_down_longer_than_the_budget_holds_the_sqs_message_without_counting_receives() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-outage", false).await;
    // Down for the first 20 s (its port refuses connections), far longer
    // than the budget (2 replays of 100-200 ms) and ten times the queue's
    // visibility timeout.
    let down = ferry_tests::ports::ClosedPort::new();
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    let sender = format!("type = \"http\"\nurl = \"http://{}/hook\"\nconnect_timeout_ms = 500", down.addr());
    ws.config(&sqs_to(&admin, &url, &sender, "max_replay_attempts = 2"));
    let daemon = Daemon::start(&ws, 1);
    sqs::send(&client, &url, "waits out the outage", HashMap::new()).await;
    daemon.wait_for_total("ferry_send_unavailable_total", "route=\"sqs-in\"", 1.0, Duration::from_secs(30));
    let admin = daemon.admin();
    let (status, body) = get(&admin, "/readyz").expect("readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("target unavailable"), "{body}");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(ws.dead_letters().is_empty());
    let target = WebhookTarget::start_on(down.listen()).await;
    let hits = target.wait_for(1, Duration::from_secs(30), |_| true).await;
    assert_eq!(hits.len(), 1, "delivered once the target is back");
    assert_eq!(hits[0].body.as_ref(), b"waits out the outage");
    let receives: u64 =
        hits[0].header("x-ferry-sqs.approximatereceivecount").and_then(|v| v.parse().ok()).expect("receive count");
    assert!(receives <= 2, "held at the source, not given back to be counted: {receives}");
    assert_eq!(sqs::wait_until_empty(&client, &url).await, (0, 0), "deleted once delivered");
    wait_for_sample(&admin, "ferry_binding_available", "route=\"sqs-in\"", 1.0, Duration::from_secs(10));
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    assert_eq!(sample(&metrics, "ferry_messages_retried_total", "route=\"sqs-in\""), None, "no replay spent");
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(ws.dead_letters().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn processing_three_times_the_visibility_timeout_still_delivers_once() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-sqs-slow", false).await;
    let admin = ANY_PORT.to_owned();
    let dst = unique("bb/slow");
    let ws = Workspace::with_plugins(&["hostile"]);
    ws.config(&sqs_to_mqtt(&admin, &url, &broker_url(), &dst, "", "[[routes.processors]]\nplugin = \"hostile\"\n"));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let mut attrs = HashMap::new();
    attrs.insert("hostile".to_owned(), text("slow"));
    attrs.insert("sleep-ms".to_owned(), text("6000"));
    sqs::send(&client, &url, "slow", attrs).await;

    let got = sub.drain(Duration::from_secs(12)).await;
    assert_eq!(got.len(), 1, "delivered exactly once although processing took 3x the 2 s visibility timeout");
    let (_, metrics) = get(&admin, "/metrics").expect("metrics");
    assert_eq!(sample(&metrics, "ferry_messages_received_total", "route=\"sqs-in\""), Some(1.0));
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_a_fifo_queue_keeps_order_within_a_group_end_to_end() {
    let client = sqs::client();
    let (_, url) = create_queue(&client, "bb-fifo", true).await;
    let src = unique("bb/fifo");
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&sqs::mqtt_to_sqs_config(
        &broker_url(),
        &src,
        &url,
        "message_group_header = \"device\"",
        "max_in_flight = 1",
        &format!("[admin]\nlisten = \"{admin}\""),
    ));
    let daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..20 {
        let id = format!("fifo-{i}");
        publisher
            .publish_with(&format!("{src}/a"), &i.to_string(), &[("device", "d1"), ("mqtt.message-id", &id)])
            .await;
    }
    // The same identity again: its deduplication id matches, SQS drops it.
    publisher.publish_with(&format!("{src}/a"), "3", &[("device", "d1"), ("mqtt.message-id", "fifo-3")]).await;
    // Wait until ferry has sent all 21 (moto only deduplicates against
    // messages still on the queue, so nothing is consumed before that).
    wait_for_sample(&admin, "ferry_messages_acked_total", "route=\"to-sqs\"", 21.0, Duration::from_secs(30));
    assert_eq!(depth(&client, &url).await.0, 20, "21 sends, one duplicate dropped by its deduplication id");

    let bodies = sqs::consume_bodies(&client, &url, 20, 30).await;
    let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(bodies, expected, "in publish order, the duplicate dropped");
    assert!(receive(&client, &url, Duration::from_secs(1)).await.is_empty());
    assert_eq!(daemon.terminate().code(), Some(0));
}
