//! The admin API's views of a running daemon (issue 41): `GET /routes`
//! with each route's receiver, bindings, connections, outbox depth and
//! oldest age while a target is down and after it is back; `GET /config`
//! with every secret masked and the fidelity report; `GET /plugins` is
//! read in the shadow suite, where a shadow's agreement exists.

use std::time::{Duration, Instant};

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::{get, request};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::ports::ClosedPort;
use ferry_tests::unique;
use ferry_tests::webhook::WebhookTarget;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// `GET /routes` until `pred` holds for route `id` (bounded by [`WAIT`]).
fn wait_for_route(admin: &str, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, body) = get(admin, "/routes").expect("GET /routes");
        let routes: Value = serde_json::from_str(&body).expect("JSON");
        let route = routes.as_array().into_iter().flatten().find(|r| r["id"] == id).cloned();
        if let Some(route) = route.filter(|r| pred(r)) {
            return route;
        }
        assert!(Instant::now() < deadline, "route {id}: {what} never held: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn binding<'v>(route: &'v Value, id: &str) -> &'v Value {
    route["bindings"].as_array().into_iter().flatten().find(|b| b["id"] == id).unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread")]
async fn routes_show_links_and_the_outbox_of_a_binding_whose_target_is_down() {
    let src = unique("api/src");
    let up = WebhookTarget::start().await;
    let down = ClosedPort::new();
    let receiver = unique("ferry-api-in");
    let config = format!(
        "[receivers.in]\ntype = \"mqtt\"\nurl = \"{url}\"\nclient_id = \"{receiver}\"\ntopics = [\"{src}/#\"]\n\
         [senders.up]\ntype = \"http\"\nurl = \"{up}\"\n\
         [senders.down]\ntype = \"http\"\nurl = \"http://{down}/down\"\nconnect_timeout_ms = 500\n\
         [[routes]]\nid = \"hooks\"\nreceiver = \"in\"\ndelivery_mode = \"shared_outbox\"\ndispatch_mode = \"fan_out\"\n\
         backoff = {{ initial_ms = 50, max_ms = 200 }}\n\
         [[routes.bindings]]\nsender = \"up\"\n[[routes.bindings]]\nid = \"late\"\nsender = \"down\"\n",
        url = broker_url(),
        up = up.url("/up"),
        down = down.addr(),
    );
    let ws = Workspace::with_plugins(&[]);
    ws.config(&with_admin(ANY_PORT, config));
    let daemon = Daemon::start(&ws, 0);
    let admin = daemon.admin();
    daemon.wait_connected("receiver", "in", WAIT);
    let publisher = TestMqtt::connect(&broker_url()).await;
    for i in 0..5 {
        publisher.publish_with(&format!("{src}/x"), &format!("m{i}"), &[]).await;
    }
    assert_eq!(up.wait_for(5, WAIT, |_| true).await.len(), 5);
    // The daemon's own rate (its counters sampled every second) moved.
    wait_for_route(&admin, "hooks", "a rate of messages received", |r| {
        r["rates"]["received_per_s"].as_f64().is_some_and(|rate| rate > 0.0)
    });

    // The binding whose target is down holds its five records; the other
    // has sent (and counted) all of its own.
    let held = wait_for_route(&admin, "hooks", "five records held for `late`, none for `up`", |r| {
        binding(r, "late")["outbox_depth"] == 5
            && binding(r, "late")["available"] == false
            && binding(r, "up")["outbox_depth"] == 0
    });
    assert_eq!(held["receiver"]["name"], "in", "{held}");
    assert_eq!(held["receiver"]["kind"], "mqtt", "{held}");
    assert_eq!(held["receiver"]["connected"], true, "{held}");
    let late = binding(&held, "late");
    assert_eq!(late["sender"]["name"], "down", "{held}");
    assert_eq!(late["sender"]["kind"], "http", "{held}");
    assert!(late["outbox_oldest_age_s"].as_f64().is_some_and(|a| a >= 0.0), "{held}");
    let first = binding(&held, "up");
    assert_eq!((&first["available"], &first["outbox_depth"]), (&Value::Bool(true), &Value::from(0)), "{held}");
    assert_eq!(first["outbox_oldest_age_s"], Value::Null, "{held}");
    assert_eq!(held["outbox_depth"], 5, "{held}");
    assert!(held["last_progress_s"].as_f64().is_some_and(|t| t > 1.0e9), "Unix seconds: {held}");

    // The target comes back: the records go, and the route shows it.
    let back = WebhookTarget::start_on(down.listen()).await;
    assert_eq!(back.wait_for(5, WAIT, |_| true).await.len(), 5);
    let caught_up = wait_for_route(&admin, "hooks", "the outbox emptied", |r| {
        r["outbox_depth"] == 0 && binding(r, "late")["available"] == true
    });
    assert_eq!(caught_up["outbox_oldest_age_s"], Value::Null, "{caught_up}");
    assert!(daemon.terminate().success());
    assert!(ws.dead_letters().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_view_masks_every_secret_and_carries_the_fidelity_report() {
    const TOKEN: &str = "admin-token-in-view-7f3a";
    const BEARER: &str = "bearer-from-a-file-9c1d";
    const URL_PASSWORD: &str = "url-pass-4e8b";
    let target = WebhookTarget::start().await;
    let ws = Workspace::with_plugins(&[]);
    let secret_file = ws.path().join("bearer.txt");
    std::fs::write(&secret_file, BEARER).expect("write the secret file");
    let hook = target.url("/in").replacen("http://", &format!("http://user:{URL_PASSWORD}@"), 1);
    let config = format!(
        "[admin]\nlisten = \"{ANY_PORT}\"\ntoken = \"{TOKEN}\"\n\
         [receivers.in]\ntype = \"mqtt\"\nurl = \"{url}\"\nclient_id = \"{client}\"\ntopics = [\"{topic}/#\"]\n\
         [senders.out]\ntype = \"http\"\nurl = \"{hook}\"\nbearer_token = {{ file = \"{file}\" }}\n\
         [[routes]]\nid = \"r\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"out\"\n",
        url = broker_url(),
        client = unique("ferry-api-cfg"),
        topic = unique("api/cfg"),
        file = secret_file.display(),
    );
    ws.config(&config);
    let daemon = Daemon::start(&ws, 0);
    let admin = daemon.admin();

    let (status, _) = get(&admin, "/config").expect("GET /config");
    assert_eq!(status, 401, "the config view wants the token");
    let (status, body) = request(&admin, "GET", "/config", Some(TOKEN)).expect("GET /config");
    assert_eq!(status, 200, "{body}");
    for secret in [TOKEN, BEARER, URL_PASSWORD] {
        assert!(!body.contains(secret), "{secret} shown: {body}");
    }
    let view: Value = serde_json::from_str(&body).expect("JSON");
    let out = &view["config"]["senders"]["out"];
    assert_eq!(out["type"], "http", "{body}");
    assert!(out["url"].as_str().is_some_and(|u| u.contains("user:") && u.contains("/in")), "{body}");
    assert_eq!(view["config"]["routes"][0]["id"], "r", "{body}");
    let explain = view["explain"].as_str().expect("the report");
    assert!(explain.contains("route r -> binding out"), "{explain}");
    assert!(view["losses"].is_u64(), "{body}");
    assert!(daemon.terminate().success());
}
