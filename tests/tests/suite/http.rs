//! The HTTP transport through the real daemon: webhooks in to MQTT and
//! RabbitMQ, MQTT out to a webhook with retries, Retry-After and the DLQ,
//! the JSON wire format across an MQTT leg, and bad requests answered with
//! a clear status while the daemon stays up.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::wait_for_sample;
use ferry_tests::mqtt::{TestMqtt, broker_url, user_property};
use ferry_tests::rabbit::{Rabbit, URL091};
use ferry_tests::unique;
use ferry_tests::webhook::{WebhookTarget, answer};
use lapin::types::AMQPValue;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn http_receiver(listen: &str, extra: &str) -> String {
    format!("type = \"http\"\nlisten = \"{listen}\"\npath = \"/in\"\n{extra}")
}

fn mqtt_receiver(topic: &str, extra: &str) -> String {
    format!(
        "type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{topic}\"]\nreconnect_initial_ms = 100\n{extra}",
        broker_url(),
        unique("ferry-in")
    )
}

fn mqtt_sender(extra: &str) -> String {
    format!("type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\n{extra}", broker_url(), unique("ferry-out"))
}

fn http_sender(url: &str, extra: &str) -> String {
    format!("type = \"http\"\nurl = \"{url}\"\ntimeout_ms = 3000\n{extra}")
}

/// A route from `[receivers.in]` to the given bindings (`sender`, `address`).
fn route(id: &str, receiver: &str, bindings: &[(&str, &str)], extra: &str) -> String {
    let mut out = format!(
        "[[routes]]\nid = \"{id}\"\nreceiver = \"{receiver}\"\n{extra}\n[routes.backoff]\ninitial_ms = 50\nmax_ms = 200\n"
    );
    for (sender, address) in bindings {
        out.push_str(&format!("[[routes.bindings]]\nsender = \"{sender}\"\naddress = \"{address}\"\n"));
    }
    out
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("client")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_reaches_mqtt_and_rabbitmq_with_its_headers() {
    let listen = ANY_PORT.to_owned();
    let dst = unique("web/dst");
    let queue = unique("web-q");
    let rabbit = Rabbit::connect().await;
    rabbit.declare_queue(&queue).await;
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\n{}\n[senders.mq]\n{}\n[senders.rmq]\ntype = \"amqp091\"\nurl = \"{URL091}\"\n{}",
        http_receiver(&listen, ""),
        mqtt_sender(""),
        route("web", "in", &[("mq", &dst), ("rmq", &queue)], "dispatch_mode = \"fan_out\""),
    ));
    let daemon = Daemon::start(&ws, 2);
    let listen = daemon.listener("http", "in").to_string();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&dst).await;

    let reply = client()
        .post(format!("http://{listen}/in"))
        .header("Idempotency-Key", "order-17")
        .header("Content-Type", "application/json")
        .header("X-Ferry-Kind", "temp")
        .header("X-Ferry-Site", "Malmö")
        .header("X-Other", "not ours")
        .body(r#"{"c":21}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(reply.status(), 200, "answered once both bindings accepted");
    let body: Value = serde_json::from_str(&reply.text().await.expect("reply")).expect("json reply");
    assert_eq!(body["id"], "order-17");

    let got = sub.next(WAIT).await.expect("on MQTT");
    assert_eq!(got.payload.as_ref(), br#"{"c":21}"#);
    assert_eq!(user_property(&got, "kind"), Some("temp"));
    assert_eq!(user_property(&got, "site"), Some("Malmö"));
    assert_eq!(user_property(&got, "other"), None, "only headers under the prefix are the message's");
    let props = got.properties.as_ref().expect("properties");
    assert_eq!(props.content_type.as_deref(), Some("application/json"));
    assert_eq!(user_property(&got, "mqtt.message-id"), Some("order-17"));

    let m = rabbit.get(&queue, WAIT).await.expect("on RabbitMQ");
    assert_eq!(m.delivery.data, br#"{"c":21}"#);
    let p = &m.delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("order-17"));
    let headers = p.headers().as_ref().expect("headers");
    let kind = headers.inner().get("kind").expect("kind header");
    assert!(matches!(kind, AMQPValue::LongString(s) if s.as_bytes() == b"temp"), "{kind:?}");
    assert_eq!(daemon.terminate().code(), Some(0));
    rabbit.delete_queue(&queue).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_to_a_webhook_retries_503_after_its_retry_after_and_dead_letters_400() {
    let src = unique("hook/src");
    let target = WebhookTarget::start().await;
    target.script("later", &[answer(503, Some(2))]);
    target.script("never", &[answer(400, None)]);
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\n{}\n[senders.hook]\n{}\n{}",
            mqtt_receiver(&format!("{src}/#"), ""),
            http_sender(&target.url("/hooks/{site}"), "bearer_token = \"tok-1\"\nhmac_secret = \"s3cret\""),
            route("hook", "in", &[("hook", "")], ""),
        ),
    ));
    let daemon = Daemon::start(&ws, 1);
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher
        .publish_with(
            &format!("{src}/a"),
            "first",
            &[("mqtt.message-id", "m-later"), ("site", "north"), ("script", "later")],
        )
        .await;
    publisher
        .publish_with(
            &format!("{src}/b"),
            "second",
            &[("mqtt.message-id", "m-never"), ("site", "south"), ("script", "never")],
        )
        .await;

    let later = target.wait_for(2, WAIT, |h| h.header("idempotency-key") == Some("m-later")).await;
    assert_eq!(later.len(), 2, "503 first, then delivered: {later:?}");
    assert_eq!(later[0].path, "/hooks/north", "the URL template takes the header");
    let gap = later[1].at - later[0].at;
    // The route's own backoff is 50 ms; the target asked for 2 s.
    assert!(gap >= Duration::from_millis(1800), "Retry-After honoured: retried after {gap:?}");
    let first = &later[0];
    assert_eq!(first.body.as_ref(), b"first");
    assert_eq!(first.header("x-ferry-site"), Some("north"));
    assert_eq!(first.header("authorization"), Some("Bearer tok-1"));
    assert_eq!(
        first.header("x-ferry-signature").map(str::to_owned),
        Some(ferry_transport_http::auth::sign("s3cret", b"first")),
        "HMAC-SHA256 over the body"
    );
    assert!(first.header("x-ferry-x-bridge.correlation-id").is_none(), "bridge headers stay home by default");

    let never = target.wait_for(1, WAIT, |h| h.header("idempotency-key") == Some("m-never")).await;
    assert_eq!(never.len(), 1);
    let dead = ferry_tests::eventually("a dead letter", || {
        let dead = ws.dead_letters();
        if dead.is_empty() { Err(dead) } else { Ok(dead) }
    })
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["envelope"]["id"], "m-never");
    assert!(dead[0]["detail"].as_str().is_some_and(|d| d.contains("400")), "{:?}", dead[0]);
    tokio::time::sleep(ferry_tests::QUIET).await;
    let tries = target.hits().iter().filter(|h| h.header("idempotency-key") == Some("m-never")).count();
    assert_eq!(tries, 1, "a 400 is permanent: not retried");
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_wire_format_carries_typed_headers_and_binary_bodies_across_an_mqtt_leg() {
    let listen = ANY_PORT.to_owned();
    let leg = unique("wire/leg");
    let target = WebhookTarget::start().await;
    let ws = Workspace::with_plugins(&[]);
    // HTTP (JSON) -> MQTT (JSON) -> ferry again -> webhook (JSON).
    ws.config(&format!(
        "[receivers.web]\n{}\n[receivers.leg]\n{}\n[senders.mq]\n{}\n[senders.hook]\n{}\n{}{}",
        http_receiver(&listen, "wire_format = \"json\""),
        mqtt_receiver(&leg, "wire_format = \"json\""),
        mqtt_sender("wire_format = \"json\""),
        http_sender(&target.url("/out"), "wire_format = \"json\""),
        route("in", "web", &[("mq", &leg)], ""),
        route("out", "leg", &[("hook", "")], ""),
    ));
    let daemon = Daemon::start(&ws, 2);
    let listen = daemon.listener("http", "web").to_string();
    let doc = json!({
        "headers": {
            "kind": "temp", "count": 3, "ratio": 0.5, "ok": true,
            "at": {"time_ms": 1_700_000_000_123i64}, "raw": {"base64": "AP8Q"},
            "gobridge.subject": "reading.taken"
        },
        "body": "AJ+Slv8=",
        "body_encoding": "base64"
    });
    let reply = client()
        .post(format!("http://{listen}/in"))
        .header("Idempotency-Key", "w-1")
        .body(doc.to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(reply.status(), 200);
    // Not the format: a plain body with no headers.
    let reply = client()
        .post(format!("http://{listen}/in"))
        .header("Idempotency-Key", "w-2")
        .body("just text {")
        .send()
        .await
        .expect("POST");
    assert_eq!(reply.status(), 200);

    let hits = target.wait_for(2, WAIT, |_| true).await;
    assert_eq!(hits.len(), 2, "{hits:?}");
    let by_id = |id: &str| hits.iter().find(|h| h.header("idempotency-key") == Some(id)).expect(id).clone();
    let w1: Value = serde_json::from_slice(&by_id("w-1").body).expect("wire JSON at the target");
    let h = &w1["headers"];
    assert_eq!(h["kind"], "temp");
    assert_eq!(h["count"], 3, "an integer stays an integer across MQTT, which carries only text");
    assert_eq!(h["ratio"], 0.5);
    assert_eq!(h["ok"], true);
    assert_eq!(h["at"]["time_ms"], 1_700_000_000_123i64);
    assert_eq!(h["raw"]["base64"], "AP8Q");
    assert_eq!(h["gobridge.subject"], "reading.taken");
    assert_eq!(w1["body_encoding"], "base64");
    assert_eq!(w1["body"], "AJ+Slv8=");
    let w2: Value = serde_json::from_slice(&by_id("w-2").body).expect("wire JSON at the target");
    assert_eq!(w2["body"], "just text {");
    assert!(w2.get("body_encoding").is_none(), "UTF-8 bodies are written as text");
    assert!(w2["headers"].get("kind").is_none());
    assert_eq!(by_id("w-2").header("content-type"), Some("application/json"));
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// Sends raw bytes and reads the reply's status (0 when the server closed
/// the connection without one).
fn raw(addr: &str, parts: &[(&[u8], Duration)]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    for (bytes, pause) in parts {
        if s.write_all(bytes).is_err() {
            break;
        }
        std::thread::sleep(*pause);
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    let status = reply.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, reply)
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_a_clear_status_are_counted_and_the_daemon_stays_up() {
    let listen = ANY_PORT.to_owned();
    let admin = ANY_PORT.to_owned();
    let dst = unique("bad/dst");
    let ws = Workspace::with_plugins(&[]);
    let receiver = http_receiver(
        &listen,
        "wire_format = \"json\"\nbearer_token = \"tok\"\nmax_body_bytes = 1024\nread_timeout_ms = 1000",
    );
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.in]\n{receiver}\n[senders.mq]\n{}\n{}",
            mqtt_sender(""),
            route("bad", "in", &[("mq", &dst)], "")
        ),
    ));
    let mut daemon = Daemon::start(&ws, 1);
    let admin = daemon.admin();
    let listen = daemon.listener("http", "in").to_string();
    let url = format!("http://{listen}/in");
    let c = client();
    let post = |body: &'static str, token: Option<&'static str>| {
        let mut r = c.post(&url).body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    assert_eq!(post("x", None).await.expect("POST").status(), 401);
    assert_eq!(post("x", Some("wrong")).await.expect("POST").status(), 401);
    let big = c.post(&url).bearer_auth("tok").body(vec![b'x'; 4096]).send().await.expect("POST");
    assert_eq!(big.status(), 413);
    let malformed = post(r#"{"body": "x", "headers": {"a": [1]}}"#, Some("tok")).await.expect("POST");
    assert_eq!(malformed.status(), 400);
    assert!(malformed.text().await.expect("text").contains("header a"), "the reason is named");
    assert_eq!(c.get(&url).bearer_auth("tok").send().await.expect("GET").status(), 405);
    assert_eq!(c.post(format!("http://{listen}/elsewhere")).send().await.expect("POST").status(), 404);

    // Slow clients: headers that never finish are cut off; a body that
    // trickles in past read_timeout_ms gets 408.
    let (status, _) = raw(&listen, &[(b"POST /in HTTP/1.1\r\nHost: x\r\n", Duration::from_millis(2500))]);
    assert_eq!(status, 0, "an unfinished request head is closed without a reply");
    let head = b"POST /in HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 100\r\n\r\n";
    let (status, _) = raw(&listen, &[(head, Duration::ZERO), (b"0123456789", Duration::from_millis(2500))]);
    assert_eq!(status, 408);

    // Still serving.
    let ok = post(r#"{"body": "fine", "headers": {"n": 1}}"#, Some("tok")).await.expect("POST");
    assert_eq!(ok.status(), 200);
    assert!(daemon.is_running());
    for (status, n) in [("401", 2.0), ("413", 1.0), ("400", 1.0), ("408", 1.0), ("200", 1.0)] {
        wait_for_sample(&admin, "ferry_http_requests_total", &format!("status=\"{status}\""), n, WAIT);
    }
    wait_for_sample(&admin, "ferry_wire_format_read_total", "outcome=\"malformed\"", 1.0, WAIT);
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_whose_target_is_down_gets_503_with_retry_after_unless_the_outbox_holds_it() {
    let (direct, outbox) = (ANY_PORT.to_owned(), ANY_PORT.to_owned());
    // The target is down: its port refuses connections.
    let down = ferry_tests::ports::ClosedPort::new();
    let nobody = format!("http://{}/down", down.addr());
    let ws = Workspace::with_plugins(&[]);
    let admin = ANY_PORT.to_owned();
    ws.config(&with_admin(
        &admin,
        format!(
            "[receivers.direct]\n{}\n[receivers.outbox]\n{}\n[senders.hook]\n{}\n{}{}",
            http_receiver(&direct, ""),
            http_receiver(&outbox, ""),
            http_sender(&nobody, "connect_timeout_ms = 500"),
            route("direct", "direct", &[("hook", "")], ""),
            route("outbox", "outbox", &[("hook", "")], "delivery_mode = \"shared_outbox\""),
        ),
    ));
    let daemon = Daemon::start(&ws, 0);
    let direct = daemon.listener("http", "direct").to_string();
    let outbox = daemon.listener("http", "outbox").to_string();
    let reply = client().post(format!("http://{direct}/in")).body("m").send().await.expect("POST");
    assert_eq!(reply.status(), 503, "not delivered, not acknowledged");
    let wait: u64 = reply.headers()["retry-after"].to_str().expect("text").parse().expect("seconds");
    assert!(wait >= 1);
    let reply = client().post(format!("http://{outbox}/in")).body("m").send().await.expect("POST");
    assert_eq!(reply.status(), 202, "durable in the outbox: accepted for later delivery");
    assert!(ws.dead_letters().is_empty());
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// ferry to ferry over HTTP: MQTT -> HTTP sender (signed, with its bridge
/// headers) -> HTTP receiver that checks the signature and the token ->
/// MQTT. The identity and the correlation id cross; a forged signature or
/// no token is refused.
#[tokio::test(flavor = "multi_thread")]
async fn ferry_to_ferry_over_signed_http_keeps_identity_and_refuses_forgeries() {
    let (src, dst) = (unique("f2f/src"), unique("f2f/dst"));
    // The receiving ferry first, on a port of its choosing; the sending
    // one posts to the address it announced.
    let far = Workspace::with_plugins(&[]);
    far.config(&format!(
        "[receivers.web]\n{}\n[senders.out]\n{}\n{}",
        http_receiver(ANY_PORT, "bearer_token = \"tok\"\nhmac_secret = \"shared\""),
        mqtt_sender(""),
        route("in", "web", &[("out", &dst)], "trust_bridge_headers = true"),
    ));
    let far_daemon = Daemon::start(&far, 2);
    let listen = far_daemon.listener("http", "web").to_string();
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.mq]\n{}\n[senders.hook]\n{}\n{}",
        mqtt_receiver(&format!("{src}/#"), ""),
        http_sender(
            &format!("http://{listen}/in"),
            "bearer_token = \"tok\"\nhmac_secret = \"shared\"\nbridge_headers = true"
        ),
        route("out", "mq", &[("hook", "")], ""),
    ));
    let daemon = Daemon::start(&ws, 2);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&dst).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{src}/a"), "signed", &[("mqtt.message-id", "f2f-1"), ("kind", "temp")]).await;
    let got = sub.next(WAIT).await.expect("across two hops");
    assert_eq!(got.payload.as_ref(), b"signed");
    assert_eq!(user_property(&got, "mqtt.message-id"), Some("f2f-1"), "Idempotency-Key kept the identity");
    assert_eq!(user_property(&got, "kind"), Some("temp"));
    // The receiving route trusts the bridge headers: it counts the hop (an
    // untrusted route sets no hop header at all).
    assert_eq!(user_property(&got, "x-bridge.forwarded-hop"), Some("1"));

    let c = client();
    let url = format!("http://{listen}/in");
    let forged = c.post(&url).bearer_auth("tok").header("X-Ferry-Signature", "sha256=00").body("x").send().await;
    assert_eq!(forged.expect("POST").status(), 401);
    let unsigned = c.post(&url).bearer_auth("tok").body("x").send().await.expect("POST");
    assert_eq!(unsigned.status(), 401);
    let sig = ferry_transport_http::auth::sign("shared", b"x");
    let no_token = c.post(&url).header("X-Ferry-Signature", &sig).body("x").send().await.expect("POST");
    assert_eq!(no_token.status(), 401);
    let good = c.post(&url).bearer_auth("tok").header("X-Ferry-Signature", &sig).body("x").send().await;
    assert_eq!(good.expect("POST").status(), 200);
    assert_eq!(daemon.terminate().code(), Some(0));
    assert_eq!(far_daemon.terminate().code(), Some(0));
}
