//! The AMQP 1.0 transport's Azure Service Bus profile against the scripted
//! Service Bus namespace (`ferry_tests::amqp10_peer::ServiceBusPeer`): no
//! real Service Bus is reachable from here, so the peer plays `$cbs`
//! (checking each SAS token's signature), `$management` (renew-lock) and an
//! entity that refuses links without a token, offers messages with the
//! `x-opt-*` annotations and lock tokens, and honours a session filter.

use std::time::Duration;

use ferry_tests::amqp10_peer::{Offered, ServiceBusPeer};
use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::unique;
use ferry_tests::webhook::{WebhookTarget, answer};

const WAIT: Duration = Duration::from_secs(20);
const KEY_NAME: &str = "RootManageSharedAccessKey";
const KEY: &str = "c2NyaXB0ZWQtc2VydmljZS1idXMta2V5PQ==";

fn offered(body: &str, session: Option<&str>, sequence: i64, script: Option<&str>) -> Offered {
    Offered {
        body: body.as_bytes().to_vec(),
        session: session.map(str::to_owned),
        sequence,
        properties: script.map(|s| vec![("script".to_owned(), s.to_owned())]).unwrap_or_default(),
    }
}

fn service_bus(peer: &ServiceBusPeer, key: &str, extra: &str) -> String {
    format!(
        "type = \"amqp10\"\nprofile = \"azure_service_bus\"\nurl = \"{}\"\naddress = \"{}\"\n\
         sas_key_name = \"{KEY_NAME}\"\nsas_key = \"{key}\"\nreconnect_initial_ms = 100\n{extra}",
        peer.url(),
        peer.entity
    )
}

fn config(receiver: &str, sender: &str, route_extra: &str) -> String {
    format!(
        r#"
[receivers.in]
{receiver}

[senders.out]
{sender}

[[routes]]
id = "service-bus"
receiver = "in"
{route_extra}
[routes.backoff]
initial_ms = 1500
max_ms = 1500

[[routes.bindings]]
sender = "out"
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_bus_receiver_puts_a_token_renews_it_renews_held_locks_and_reads_the_annotations() {
    let entity = unique("orders");
    let hold = unique("hold");
    let peer = ServiceBusPeer::start(
        KEY_NAME,
        KEY,
        &entity,
        vec![offered("first", None, 11, Some(&hold)), offered("second", None, 12, None)],
    )
    .await;
    let target = WebhookTarget::start().await;
    // A 503 holds the first message through a backoff of 1.5 s (the route
    // keeps it, so its lock must stay).
    target.script(&hold, &[answer(503, None)]);
    let ws = Workspace::with_plugins(&[]);
    let sender = format!("type = \"http\"\nurl = \"{}\"", target.url("/hook"));
    ws.config(&config(&service_bus(&peer, KEY, "token_lifetime_s = 2\nlock_renew_ms = 300"), &sender, ""));
    let daemon = Daemon::start(&ws, 2);

    // The first message twice (a 503, then 200), then the second.
    let hits = target.wait_for(3, WAIT, |_| true).await;
    let sequence: Vec<Option<&str>> = hits.iter().map(|h| h.header("x-ferry-amqp10.sequence-number")).collect();
    assert_eq!(sequence, vec![Some("11"), Some("11"), Some("12")], "{hits:?}");
    assert!(hits.iter().all(|h| h.header("x-ferry-amqp10.enqueued-time").is_some()), "{hits:?}");
    // A token lives 2 s and is renewed when a fifth of that is left.
    assert!(
        peer.wait_for(WAIT, |log| log.tokens.iter().filter(|t| t.audience == peer.audience()).count() >= 3).await,
        "the token is renewed before it runs out: {:?}",
        peer.tokens()
    );
    let tokens = peer.tokens();
    assert!(tokens.iter().all(|t| t.valid && t.token_type == "servicebus.windows.net:sastoken"), "{tokens:?}");
    daemon.wait_for_total("ferry_amqp10_sas_tokens_total", "outcome=\"put\"", 3.0, WAIT);
    let log = peer.log.lock().expect("log");
    assert_eq!(log.refused, 0, "no link was attached before its token");
    let outcomes: Vec<&str> = log.outcomes.iter().map(|(_, o)| o.as_str()).collect();
    assert_eq!(outcomes.last(), Some(&"accepted"), "{outcomes:?}");
    assert!(outcomes.iter().all(|o| *o == "accepted" || *o == "modified"), "{outcomes:?}");
    // The first message's lock was renewed while the route kept it.
    let lock = log.locks.first().map(|(_, l)| *l).expect("sent");
    let renewed = log.renewals.iter().filter(|tokens| tokens.contains(&lock)).count();
    assert!(renewed >= 3, "renewed {renewed} times: {:?}", log.renewals);
    assert!(log.session_renewals.is_empty(), "no session: {:?}", log.session_renewals);
    drop(log);
    assert!(daemon.terminate().success(), "clean shutdown");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_bus_receiver_reads_its_session_renews_the_session_lock_and_dead_letters_failures() {
    let entity = unique("sessions");
    let hold = unique("hold");
    let refuse = unique("refuse");
    let peer = ServiceBusPeer::start(
        KEY_NAME,
        KEY,
        &entity,
        vec![
            offered("other session", Some("s-2"), 1, None),
            offered("held a while", Some("s-1"), 2, Some(&hold)),
            offered("refused for good", Some("s-1"), 3, Some(&refuse)),
        ],
    )
    .await;
    let target = WebhookTarget::start().await;
    // Two 503s hold the message through two backoffs of 1.5 s (the route
    // keeps it, so its lock must stay); a 400 is a failure for good.
    target.script(&hold, &[answer(503, None), answer(503, None)]);
    target.script(&refuse, &[answer(400, None)]);
    let ws = Workspace::with_plugins(&[]);
    let sender = format!("type = \"http\"\nurl = \"{}\"", target.url("/hook"));
    let receiver = service_bus(&peer, KEY, "lock_renew_ms = 300\nsession = \"s-1\"");
    ws.config(&config(&receiver, &sender, "on_permanent_failure = \"drop\""));
    let daemon = Daemon::start(&ws, 2);

    assert!(
        peer.wait_for(WAIT, |log| log.outcomes.iter().any(|(b, _)| b == b"refused for good")).await,
        "{:?}",
        peer.log.lock().expect("log")
    );
    let log = peer.log.lock().expect("log");
    assert_eq!(log.session_filters, vec![Some(Some("s-1".to_owned()))]);
    let outcomes: Vec<(String, String)> =
        log.outcomes.iter().map(|(b, o)| (String::from_utf8_lossy(b).into_owned(), o.clone())).collect();
    assert!(outcomes.iter().all(|(b, _)| b != "other session"), "only session s-1 is read: {outcomes:?}");
    let held: Vec<&String> = outcomes.iter().filter(|(b, _)| b == "held a while").map(|(_, o)| o).collect();
    assert_eq!(held.last().map(|o| o.as_str()), Some("accepted"), "{outcomes:?}");
    let (_, refused) = outcomes.iter().find(|(b, _)| b == "refused for good").expect("settled");
    assert!(
        refused.contains("com.microsoft:dead-letter") && refused.contains("DeadLetterReason"),
        "dead-lettered with a reason: {refused}"
    );
    // The session's lock was renewed while the route kept its message.
    let renewed = log.session_renewals.iter().filter(|s| *s == "s-1").count();
    assert!(renewed >= 3, "renewed {renewed} times: {:?}", log.session_renewals);
    assert_eq!(log.session_renewals.len(), renewed, "only the session read: {:?}", log.session_renewals);
    assert!(log.renewals.is_empty(), "a session's messages are locked by the session: {:?}", log.renewals);
    drop(log);
    daemon.wait_for_total("ferry_amqp10_lock_renewals_total", "outcome=\"renewed\"", 3.0, WAIT);
    assert!(daemon.terminate().success(), "clean shutdown");
    assert!(ws.dead_letters().is_empty(), "dropped into Service Bus's dead-letter queue, not ferry's");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_bus_sender_puts_a_token_before_it_sends_and_a_wrong_key_is_refused() {
    let entity = unique("out");
    let peer = ServiceBusPeer::start(KEY_NAME, KEY, &entity, Vec::new()).await;
    let ws = Workspace::with_plugins(&[]);
    let receiver = "type = \"http\"\nlisten = \"127.0.0.1:0\"";
    ws.config(&config(receiver, &service_bus(&peer, KEY, ""), ""));
    let daemon = Daemon::start(&ws, 2);
    let url = format!("{}/", daemon.http_url("in"));
    let posted = reqwest::Client::new()
        .post(url)
        .header("x-ferry-amqp10.partition-key", "p-7")
        .body("to the queue")
        .send()
        .await
        .expect("post");
    assert!(posted.status().is_success(), "{posted:?}");
    assert!(peer.wait_for(WAIT, |log| !log.received.is_empty()).await, "the message arrives");
    let log = peer.log.lock().expect("log");
    assert_eq!(log.received[0].body, b"to the queue");
    let annotations = &log.received[0].annotations;
    assert!(
        annotations.iter().any(|(k, v)| k.contains("x-opt-partition-key") && v.contains("p-7")),
        "amqp10.partition-key is the x-opt-partition-key annotation: {annotations:?}"
    );
    assert_eq!(log.refused, 0);
    assert!(log.tokens.iter().all(|t| t.valid && t.audience == peer.audience()), "{:?}", log.tokens);
    drop(log);
    assert!(daemon.terminate().success(), "clean shutdown");

    // A wrong key: $cbs refuses the token, and `ferry validate --connect`
    // says so.
    ws.config(&config(receiver, &service_bus(&peer, "d3Jvbmcta2V5", ""), ""));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("senders.out (amqp10): FAILED") && text.contains("refused the SAS token"), "{text}");
    assert!(!text.contains("d3Jvbmcta2V5"), "the key is not printed: {text}");
    ws.config(&config(receiver, &service_bus(&peer, KEY, ""), ""));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("$cbs took the SAS token"), "{text}");
}
