//! Hot reload of plugins through the real daemon: the plugin directory is
//! watched, a changed component is swapped in for new messages without
//! restarting the route, a corrupt or removed one is refused and the old
//! one keeps working; the circuit breaker's state survives the swap.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace, with_admin};
use ferry_tests::http::{counter, metrics, sample, wait_for_sample};
use ferry_tests::mqtt::{PrivateMosquitto, TestMqtt, broker_url, route_config, user_property};
use ferry_tests::{plugin_file, unique};

const WAIT: Duration = Duration::from_secs(15);

/// The same component with a custom section appended: other bytes, same
/// behaviour (a "new version" for the reload to pick up).
fn rebuilt(plugin: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(plugin_file(plugin)).expect("plugin");
    let name = b"ferry-test-build";
    let payload = b"2";
    let size = 1 + name.len() + payload.len();
    bytes.extend([0u8, u8::try_from(size).expect("small"), u8::try_from(name.len()).expect("small")]);
    bytes.extend(name);
    bytes.extend(payload);
    bytes
}

async fn publish_seq(publisher: &TestMqtt, src: &str, range: std::ops::Range<u32>, gap: Duration) {
    for i in range {
        publisher.publish_with(&format!("{src}/x"), &i.to_string(), &[("seq", &i.to_string())]).await;
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
    }
}

fn write_over(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write plugin");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_filter_is_swapped_in_while_messages_flow_and_a_corrupt_or_removed_one_is_refused() {
    let (src, dst) = (unique("hr/src"), unique("hr/dst"));
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["filter"]);
    let filter =
        "[[routes.processors]]\nplugin = \"filter\"\nconfig = { when = [{ header = \"seq\", op = \"exists\" }] }\n";
    // One message at a time, so "before the swap" and "after" are a clean
    // cut in publish order.
    ws.config(&with_admin(
        &admin,
        route_config(&broker_url(), &src, &broker_url(), &format!("{dst}/out"), filter, "max_in_flight = 1", ""),
    ));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let mut sub = TestMqtt::connect(&broker_url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    let publisher = TestMqtt::connect(&broker_url()).await;
    let plugin = ws.path().join("plugins/filter.wasm");

    // Before: everything passes.
    publish_seq(&publisher, &src, 0..30, Duration::ZERO).await;
    let mut arrived = Vec::new();
    while arrived.len() < 30 {
        let p = sub.next(WAIT).await.expect("messages pass before the swap");
        arrived.push(user_property(&p, "seq").expect("seq").parse::<u32>().expect("number"));
    }

    // The swap, while messages flow: a version that drops everything.
    let flow = {
        let src = src.clone();
        let publisher = TestMqtt::connect(&broker_url()).await;
        tokio::spawn(async move {
            publish_seq(&publisher, &src, 30..430, Duration::from_millis(5)).await;
            publisher
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    write_over(&plugin, &std::fs::read(plugin_file("drop-all")).expect("drop-all"));
    daemon.wait_for_line(&["reload applied", "processors_swapped=[\"r1\"]"], WAIT);
    let _publisher2 = flow.await.expect("publisher");
    publish_seq(&publisher, &src, 430..460, Duration::ZERO).await;

    // A corrupt file in its place is refused; the dropping version stays.
    write_over(&plugin, b"\0asm this is not a component");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"refused\"", 1.0, WAIT);
    publish_seq(&publisher, &src, 460..490, Duration::ZERO).await;
    // So is removing the file a route uses.
    std::fs::remove_file(&plugin).expect("remove");
    daemon.wait_for_total("ferry_reloads_total", "outcome=\"refused\"", 2.0, WAIT);
    publish_seq(&publisher, &src, 490..520, Duration::ZERO).await;

    // Every message is accounted for exactly once: sent before the swap or
    // dropped after it.
    let started = Instant::now();
    loop {
        while let Some(p) = sub.next(Duration::from_millis(100)).await {
            arrived.push(user_property(&p, "seq").expect("seq").parse().expect("number"));
        }
        let dropped = counter(&admin, "ferry_messages_dropped_total", "reason=\"filtered\"");
        if arrived.len() + dropped as usize >= 520 || started.elapsed() > WAIT {
            break;
        }
    }
    let m = metrics(&admin);
    let dropped = sample(&m, "ferry_messages_dropped_total", "reason=\"filtered\"").unwrap_or(0.0) as usize;
    let unique_arrivals: BTreeSet<u32> = arrived.iter().copied().collect();
    assert_eq!(unique_arrivals.len(), arrived.len(), "a message was sent twice: {arrived:?}");
    assert_eq!(arrived.len() + dropped, 520, "arrived {} + dropped {dropped}", arrived.len());
    let passed = arrived.len() as u32;
    assert!((30..430).contains(&passed), "the swap happened while messages flowed: {passed} passed");
    assert_eq!(unique_arrivals, (0..passed).collect(), "the old filter handled exactly the messages before the swap");
    let calls = |outcome: &str| {
        sample(&m, "ferry_plugin_calls_total", &format!("plugin=\"filter\",route=\"r1\",outcome=\"{outcome}\""))
            .unwrap_or(0.0)
    };
    assert_eq!(calls("pass") + calls("drop"), 520.0, "each message was handled once");
    assert_eq!(sample(&m, "ferry_reloads_total", "outcome=\"refused\""), Some(2.0));
    assert_eq!(daemon.count_log("route started"), 1, "the route was never restarted");
    assert!(sub.drain(Duration::from_millis(300)).await.is_empty());
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(ws.dead_letters().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_circuit_breaker_opens_holds_and_closes_across_an_instance_replacement() {
    let (src, dst) = (unique("cb/src"), unique("cb/dst"));
    let admin = ANY_PORT.to_owned();
    let mut target = PrivateMosquitto::start().await;
    let ws = Workspace::with_plugins(&["circuitbreaker"]);
    let breaker = "[[routes.processors]]\nplugin = \"circuitbreaker\"\nconfig = { failure_threshold = 2, open_ms = 4000, half_open_probes = 1 }\n";
    ws.config(&with_admin(
        &admin,
        route_config(
            &broker_url(),
            &src,
            &target.url(),
            &format!("{dst}/out"),
            breaker,
            "",
            // The sender reconnects slowly enough that the test subscriber is
            // always back on the restarted target before ferry is.
            "reconnect_initial_ms = 1500\nreconnect_max_ms = 2000\nack_timeout_ms = 2000",
        ),
    ));
    let daemon = Daemon::start(&ws, 2);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&broker_url()).await;
    let send = |id: &'static str| {
        let (publisher, src) = (&publisher, src.clone());
        async move { publisher.publish_with(&format!("{src}/x"), id, &[("mqtt.message-id", id)]).await }
    };

    // Closed: a message goes through.
    let mut sub = TestMqtt::connect(&target.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    send("m0").await;
    assert!(sub.next(WAIT).await.is_some(), "m0 arrives while the breaker is closed");

    // The target goes down: two failed sends open the breaker.
    target.stop();
    send("m1").await;
    daemon.wait_for_line(&["circuit route: open after 2 failed sends"], WAIT);
    // Open: the next message is held at the source, never sent.
    send("m2").await;
    wait_for_sample(
        &admin,
        "ferry_plugin_calls_total",
        "plugin=\"circuitbreaker\",route=\"r1\",outcome=\"retry\"",
        1.0,
        WAIT,
    );

    // Instance replacement while open: a new build of the plugin is swapped
    // in (m2, in flight, keeps the instance it started with). A new message
    // gets the new instances, which read the state from the host's store:
    // still open, so m3 is held too instead of passing.
    write_over(&ws.path().join("plugins/circuitbreaker.wasm"), &rebuilt("circuitbreaker"));
    daemon.wait_for_line(&["reload applied", "processors_swapped=[\"r1\"]"], WAIT);
    let calls = |outcome: &str| {
        counter(
            &admin,
            "ferry_plugin_calls_total",
            &format!("plugin=\"circuitbreaker\",route=\"r1\",outcome=\"{outcome}\""),
        )
    };
    let (retries, passes) = (calls("retry"), calls("pass"));
    send("m3").await;
    let started = Instant::now();
    while calls("retry") <= retries && started.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(calls("retry") > retries, "m3 was held by the new instance");
    assert_eq!(calls("pass"), passes, "nothing passed while the breaker was open");

    // The target comes back: after open_ms a probe goes through, succeeds,
    // and the breaker closes; everything held arrives.
    target.restart().await;
    let mut sub = TestMqtt::connect(&target.url()).await;
    sub.subscribe(&format!("{dst}/#")).await;
    daemon.wait_for_line(&["circuit route: closed: the probes succeeded"], Duration::from_secs(20));
    send("m4").await;
    let mut ids = BTreeSet::new();
    let started = Instant::now();
    while ids.len() < 4 && started.elapsed() < WAIT {
        if let Some(p) = sub.next(Duration::from_millis(500)).await {
            ids.insert(String::from_utf8_lossy(&p.payload).into_owned());
        }
    }
    assert_eq!(ids, ["m1", "m2", "m3", "m4"].map(String::from).into_iter().collect::<BTreeSet<_>>());
    // Only one opening from closed: the swap did not reset the breaker (a
    // reset one would have counted two new failures and opened again).
    assert_eq!(daemon.count_log("open after 2 failed sends"), 1, "{}", daemon.log_text());
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(ws.dead_letters().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn compiled_components_are_cached_so_a_restart_does_not_compile_again() {
    let src = unique("cache/src");
    let ws = Workspace::with_plugins(&["filter"]);
    let filter =
        "[[routes.processors]]\nplugin = \"filter\"\nconfig = { when = [{ header = \"k\", op = \"exists\" }] }\n";
    let config = route_config(&broker_url(), &src, &broker_url(), "x", filter, "", "");
    ws.config(&config);
    // The first start compiles the plugin in a child process (`ferry
    // plugins compile`) and reads the result from the cache: the
    // compiler's memory never becomes the daemon's.
    let first = Daemon::start(&ws, 2);
    first.wait_for_line(&["plugins compiled in a child process", "plugins=1", "compiled=1"], WAIT);
    first.wait_for_line(&["plugin loaded", "plugin=filter", "from_cache=true"], WAIT);
    assert_eq!(first.terminate().code(), Some(0));
    assert!(ws.path().join("ferry-data/plugin-cache").read_dir().expect("cache dir").next().is_some(), "cached");

    let second = Daemon::start(&ws, 2);
    second.wait_for_line(&["plugins compiled in a child process", "plugins=1", "compiled=0"], WAIT);
    second.wait_for_line(&["plugin loaded", "plugin=filter", "from_cache=true"], WAIT);
    assert_eq!(second.terminate().code(), Some(0));

    // `ferry plugins compile` fills a cache for the daemon to read.
    let cache = ws.path().join("precompiled");
    let out = ws.ferry(&["plugins", "compile", "--cache-dir", "precompiled", "plugins/filter.wasm"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("plugins/filter.wasm: compiled"), "{out:?}");
    assert!(cache.read_dir().expect("cache dir").next().is_some(), "cached");

    // A changed file is compiled again, and the cache can be turned off
    // (then there is no child: the daemon compiles it itself).
    std::fs::write(ws.path().join("plugins/filter.wasm"), rebuilt("filter")).expect("write");
    ws.config(&format!("[plugins]\ncache_dir = \"\"\n{config}"));
    let third = Daemon::start(&ws, 2);
    third.wait_for_line(&["plugin loaded", "plugin=filter", "from_cache=false"], WAIT);
    assert_eq!(third.terminate().code(), Some(0));
}

/// A transport component changed on disk restarts the route it receives
/// and sends for (drained first), and the messages put on the queue before,
/// during and after the swap all arrive.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_transport_component_restarts_its_route_and_loses_nothing() {
    use ferry_tests::simplemq::FakeSimpleMq;

    let smq = FakeSimpleMq::start(Duration::from_secs(2)).await;
    let (from, to) = (unique("hr-from"), unique("hr-to"));
    smq.create_queue(&from, "key");
    smq.create_queue(&to, "key");
    let admin = ANY_PORT.to_owned();
    let ws = Workspace::with_plugins(&["simplemq"]);
    let api = smq.url();
    let host = api.trim_start_matches("http://");
    ws.config(&with_admin(
        &admin,
        format!(
            r#"
[receivers.q]
type = "component"
component = "simplemq"
allow_hosts = ["{host}"]
wait_ms = 50
config = {{ queue = "{from}", api_key = "key", api_url = "{api}", extend_every_secs = 1 }}

[senders.out]
type = "component"
component = "simplemq"
allow_hosts = ["{host}"]
config = {{ queue = "{to}", api_key = "key", api_url = "{api}" }}

[[routes]]
id = "q2q"
receiver = "q"
[[routes.bindings]]
sender = "out"
"#
        ),
    ));
    let daemon = Daemon::start(&ws, 0);
    let admin = daemon.admin();
    let put = |range: std::ops::Range<u32>| {
        for i in range {
            smq.put(&from, &base64(&i.to_string()));
        }
    };
    put(0..10);
    let arrived = |n: usize| smq.messages(&to).len() >= n;
    ferry_tests::eventually("the first messages through", || arrived(10)).await;

    put(10..20);
    write_over(&ws.path().join("plugins/simplemq.wasm"), &rebuilt("simplemq"));
    ferry_tests::eventually("the reload applied", || {
        counter(&admin, "ferry_reloads_total", "outcome=\"applied\"") >= 1.0
    })
    .await;
    put(20..30);
    ferry_tests::eventually("every message through", || {
        let got: BTreeSet<String> = smq.messages(&to).iter().map(|m| decoded(&m.content)).collect();
        got == (0..30).map(|i| i.to_string()).collect()
    })
    .await;
    ferry_tests::eventually("the source queue emptied", || smq.messages(&from).is_empty()).await;
    assert_eq!(daemon.count_log("route started"), 2, "the route was restarted once, for the new component");
    assert_eq!(daemon.terminate().code(), Some(0));
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn decoded(content: &str) -> String {
    use base64::Engine as _;
    String::from_utf8_lossy(&base64::engine::general_purpose::STANDARD.decode(content).expect("base64")).into_owned()
}
