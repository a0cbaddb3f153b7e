//! The SSE transport through the real daemon: MQTT to a stream ferry
//! serves, read by a plain HTTP client (no SSE library: the bytes as a
//! browser gets them), resumed with `Last-Event-ID`, and followed by a
//! second daemon's SSE receiver into MQTT, across that daemon's restart
//! (its position file) and against a server that sends an endless line.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::mqtt::{TestMqtt, broker_url, user_property};
use ferry_tests::unique;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(15);
pub(crate) const TOKEN: &str = "sse-test-token";

fn mqtt_receiver(topic: &str) -> String {
    format!(
        "type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\ntopics = [\"{topic}\"]\nreconnect_initial_ms = 100\n",
        broker_url(),
        unique("ferry-in")
    )
}

fn mqtt_sender() -> String {
    format!("type = \"mqtt\"\nurl = \"{}\"\nclient_id = \"{}\"\n", broker_url(), unique("ferry-out"))
}

/// A daemon serving MQTT `base/#` as the stream `feed` (bearer token
/// [`TOKEN`], a ring of `ring` events).
fn serving(base: &str, ring: usize) -> (Workspace, Daemon) {
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        "[receivers.in]\n{}\n[senders.out]\ntype = \"sse\"\nlisten = \"{ANY_PORT}\"\nstream = \"feed\"\nbearer_token = \"{TOKEN}\"\nreplay_events = {ring}\nkeepalive_ms = 500\n\n[[routes]]\nid = \"serve\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"out\"\n",
        mqtt_receiver(&format!("{base}/#"))
    ));
    let daemon = Daemon::start(&ws, 2);
    (ws, daemon)
}

/// An SSE event as the test reads it off the wire.
#[derive(Debug, Default)]
pub(crate) struct Event {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// A plain HTTP reader of a `text/event-stream` body.
pub(crate) struct Stream {
    response: reqwest::Response,
    buffer: String,
}

impl Stream {
    pub async fn open(url: &str, token: Option<&str>, last_id: Option<&str>) -> reqwest::Response {
        let mut request = reqwest::Client::new().get(url);
        if let Some(t) = token {
            request = request.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(id) = last_id {
            request = request.header("Last-Event-ID", id);
        }
        tokio::time::timeout(WAIT, request.send()).await.expect("in time").expect("the stream answers")
    }

    pub async fn follow(url: &str, last_id: Option<&str>) -> Self {
        Self::follow_with(url, TOKEN, last_id).await
    }

    pub async fn follow_with(url: &str, token: &str, last_id: Option<&str>) -> Self {
        let response = Self::open(url, Some(token), last_id).await;
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"].to_str().expect("text").to_owned();
        assert!(content_type.starts_with("text/event-stream"), "{content_type}");
        Self { response, buffer: String::new() }
    }

    /// The next event with data (the `retry:` greeting and keep-alive
    /// comments are skipped), within [`WAIT`].
    pub async fn next(&mut self) -> Event {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = Event::default();
                let mut data: Vec<&str> = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        event.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event.event = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push(v);
                    }
                }
                if !data.is_empty() {
                    event.data = data.join("\n");
                    return event;
                }
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("an event in time")
                .expect("the stream reads")
                .expect("the stream stays open");
            self.buffer.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }
}

pub(crate) fn document(event: &Event) -> Value {
    serde_json::from_str(&event.data).unwrap_or_else(|e| panic!("data is not JSON ({e}): {event:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn mqtt_messages_are_served_as_events_and_resumed_after_the_last_id() {
    let base = unique("sse/in");
    let (_ws, daemon) = serving(&base, 4);
    let url = format!("http://{}/stream/feed", daemon.listener("sse", "out"));

    assert_eq!(Stream::open(&url, None, None).await.status(), 401, "no token");
    assert_eq!(Stream::open(&url, Some("wrong"), None).await.status(), 401, "a wrong token");
    let other = format!("http://{}/stream/nothing-here", daemon.listener("sse", "out"));
    assert_eq!(Stream::open(&other, Some(TOKEN), None).await.status(), 404);

    let mut stream = Stream::follow(&url, None).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let user = |n: usize| {
        vec![
            ("mqtt.message-id".to_owned(), format!("m-{n}")),
            ("gobridge.subject".to_owned(), format!("orders.{n}")),
            ("kind".to_owned(), "temp".to_owned()),
        ]
    };
    let publish = |n: usize| {
        let props = rumqttc::v5::mqttbytes::v5::PublishProperties { user_properties: user(n), ..Default::default() };
        let publisher = &publisher;
        let topic = format!("{base}/t");
        async move { publisher.publish(&topic, format!("body {n}"), props).await }
    };
    publish(1).await;
    let first = stream.next().await;
    assert_eq!(first.id.as_deref(), Some("m-1"), "{first:?}");
    assert_eq!(first.event.as_deref(), Some("orders.1"));
    let doc = document(&first);
    assert_eq!(doc["body"], "body 1");
    assert_eq!(doc["headers"]["kind"], "temp");
    assert_eq!(doc["headers"]["gobridge.subject"], "orders.1");

    // Two more while the client is away: a resume from m-1 gets them.
    drop(stream);
    // One at a time into the ring (the route sends two at once and may
    // write them swapped): m-2 is in before m-3 is published.
    publish(2).await;
    daemon.wait_for_total("ferry_messages_acked_total", "route=\"serve\"", 2.0, WAIT);
    publish(3).await;
    daemon.wait_for_total("ferry_messages_acked_total", "route=\"serve\"", 3.0, WAIT);
    let mut resumed = Stream::follow(&url, Some("m-1")).await;
    assert_eq!(resumed.next().await.id.as_deref(), Some("m-2"));
    assert_eq!(resumed.next().await.id.as_deref(), Some("m-3"));
    publish(4).await;
    assert_eq!(resumed.next().await.id.as_deref(), Some("m-4"), "then live events");

    // The ring keeps four: m-1 is still there, m-5 pushes it out; a client
    // resuming from m-1 then gets all that is kept, and the gap is counted.
    publish(5).await;
    assert_eq!(resumed.next().await.id.as_deref(), Some("m-5"));
    let mut gap = Stream::follow(&url, Some("m-1")).await;
    let ids: Vec<Option<String>> =
        [gap.next().await, gap.next().await, gap.next().await, gap.next().await].into_iter().map(|e| e.id).collect();
    assert_eq!(ids, ["m-2", "m-3", "m-4", "m-5"].map(|s| Some(s.to_owned())));
    daemon.wait_for_total("ferry_sse_replay_gaps_total", "sender=\"out\"", 1.0, WAIT);
    daemon.wait_for_total("ferry_sse_clients", "stream=\"feed\"", 2.0, WAIT);
}

/// A daemon following `url` into MQTT `topic`, keeping its position in
/// `position`.
fn following(ws: &Workspace, url: &str, topic: &str, extra: &str) -> Daemon {
    following_ready(ws, url, topic, extra, 2)
}

/// [`following`], waiting for `ready` parts (0: only for the admin
/// server, for a receiver meant never to connect).
fn following_ready(ws: &Workspace, url: &str, topic: &str, extra: &str, ready: usize) -> Daemon {
    ws.config(&format!(
        "[receivers.follow]\ntype = \"sse\"\nurl = \"{url}\"\nbearer_token = \"{TOKEN}\"\nreconnect_initial_ms = 50\nreconnect_max_ms = 500\n{extra}\n[senders.mq]\n{}\n[[routes]]\nid = \"follow\"\nreceiver = \"follow\"\n[[routes.bindings]]\nsender = \"mq\"\naddress = \"{topic}\"\n",
        mqtt_sender()
    ));
    Daemon::start(ws, ready)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_follows_another_daemons_stream_and_resumes_after_a_restart() {
    let base = unique("sse/chain");
    let out = unique("sse/out");
    let (_ws, server) = serving(&base, 64);
    let url = format!("http://{}/stream/feed", server.listener("sse", "out"));
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&out).await;
    let ws = Workspace::with_plugins(&[]);
    let position = ws.path().join("follow.position");
    let extra = format!("position_file = \"{}\"\n", position.display());
    let follower = following(&ws, &url, &out, &extra);
    server.wait_for_total("ferry_sse_clients", "stream=\"feed\"", 1.0, WAIT);

    let publisher = TestMqtt::connect(&broker_url()).await;
    for n in 1..=2 {
        publisher
            .publish_with(
                &format!("{base}/t"),
                &format!("body {n}"),
                &[("mqtt.message-id", &format!("c-{n}")), ("gobridge.subject", "chain.subject"), ("kind", "temp")],
            )
            .await;
        // One at a time into the stream, so its last event is c-2 (the
        // serving route sends two at once and could write them swapped).
        server.wait_for_total("ferry_messages_acked_total", "route=\"serve\"", n as f64, WAIT);
    }
    let mut got = sub.collect(2).await;
    // The route sends two at a time: order is not promised.
    got.sort_by(|a, b| a.payload.cmp(&b.payload));
    for (n, p) in got.iter().enumerate() {
        assert_eq!(p.payload.as_ref(), format!("body {}", n + 1).as_bytes());
        assert_eq!(user_property(p, "kind"), Some("temp"), "headers cross both legs");
        assert_eq!(user_property(p, "gobridge.subject"), Some("chain.subject"));
        assert_eq!(user_property(p, "sse.id"), Some(format!("c-{}", n + 1).as_str()));
    }
    follower.wait_for_total("ferry_messages_acked_total", "route=\"follow\"", 2.0, WAIT);
    let deadline = std::time::Instant::now() + WAIT;
    while std::fs::read_to_string(&position).unwrap_or_default().trim() != "c-2" {
        assert!(std::time::Instant::now() < deadline, "the position file never said c-2");
        std::thread::sleep(Duration::from_millis(20));
    }
    follower.terminate();

    // While the follower is down, c-3 goes into the server's ring; the
    // restarted follower resumes after c-2 and gets c-3 only.
    publisher.publish_with(&format!("{base}/t"), "body 3", &[("mqtt.message-id", "c-3"), ("kind", "temp")]).await;
    server.wait_for_total("ferry_messages_acked_total", "route=\"serve\"", 3.0, WAIT);
    let follower = following(&ws, &url, &out, &extra);
    let again = sub.collect(1).await;
    assert_eq!(again[0].payload.as_ref(), b"body 3");
    assert!(sub.drain(Duration::from_millis(500)).await.is_empty(), "nothing settled before the restart comes again");
    drop(follower);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_line_drops_the_connection_and_the_next_one_is_read() {
    // A server whose first answer is a line that never ends, then a good
    // event on the next connection.
    let listener = TcpListener::bind(ANY_PORT).expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
            if n == 0 {
                let chunk = vec![b'x'; 64 * 1024];
                let _ = stream.write_all(b"data: ");
                while stream.write_all(&chunk).is_ok() {}
            } else {
                let _ = stream.write_all(b"id: good-1\ndata: fine\n\n");
                // Open until the daemon hangs up (a read that ends).
                while stream.read(&mut head).is_ok_and(|n| n > 0) {}
            }
        }
    });
    let out = unique("sse/hostile");
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&out).await;
    let ws = Workspace::with_plugins(&[]);
    let daemon = following(&ws, &format!("http://{addr}/stream"), &out, "max_event_bytes = 100000\n");
    let got = sub.collect(1).await;
    assert_eq!(got[0].payload.as_ref(), b"fine");
    assert!(daemon.count_log("max_event_bytes") >= 1, "the reason is logged:\n{}", daemon.log_text());
    daemon.wait_for_total("ferry_transport_connections_total", "kind=\"sse\",role=\"receiver\"", 2.0, WAIT);
}

/// `https://` with a private CA: the follower reads a stream served behind
/// a TLS front whose certificate the test's own CA signed, trusting it
/// through `tls.ca_file`; without it the handshake fails and nothing
/// arrives.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_over_https_is_followed_with_a_private_ca() {
    let certs = ferry_tests::tls::TestCerts::generate();
    let base = unique("sse/tls");
    let out = unique("sse/tls-out");
    let (_ws, server) = serving(&base, 64);
    let front = ferry_tests::tcp_proxy::TlsFront::start(server.listener("sse", "out"), &certs).await;
    let url = format!("https://127.0.0.1:{}/stream/feed", front.port);
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&out).await;

    // No CA of its own: the system's CAs refuse the test's certificate.
    let untrusting = Workspace::with_plugins(&[]);
    let refused = following_ready(&untrusting, &url, &out, "", 0);
    // Its reason names the certificate (the error's causes are logged).
    refused.wait_for_line(&["the stream is lost", "UnknownIssuer"], WAIT);

    let ws = Workspace::with_plugins(&[]);
    let follower = following(&ws, &url, &out, &format!("tls = {{ ca_file = \"{}\" }}\n", certs.ca().display()));
    server.wait_for_total("ferry_sse_clients", "stream=\"feed\"", 1.0, WAIT);
    // Kept until the message arrives: a client dropped at once may not
    // have flushed its publish.
    let publisher = TestMqtt::connect(&broker_url()).await;
    publisher.publish_with(&format!("{base}/t"), "over tls", &[("mqtt.message-id", "tls-1")]).await;
    let got = sub.collect(1).await;
    drop(publisher);
    assert_eq!(got[0].payload.as_ref(), b"over tls");
    assert_eq!(user_property(&got[0], "sse.id"), Some("tls-1"));
    assert!(sub.drain(Duration::from_millis(300)).await.is_empty(), "the untrusting follower got nothing");
    drop(follower);
    drop(refused);
}
