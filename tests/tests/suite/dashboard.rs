//! The Grafana dashboard in `contrib/grafana/ferry.json`: every metric its
//! queries name is on a running daemon's `/metrics` once messages have
//! passed, failed, been retried and dropped, so no panel stays empty
//! because of a renamed or missing metric.

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_tests::daemon::{ANY_PORT, Daemon, Workspace};
use ferry_tests::http::{metrics, wait_for_sample};
use ferry_tests::mqtt::{TestMqtt, broker_url};
use ferry_tests::{repo_root, unique};

/// Metric names in a PromQL expression: `ferry_…` and `process_…` words.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(|c: char| c.is_ascii_lowercase()) {
        rest = &rest[at..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let word = &rest[..end];
        if word.starts_with("ferry_") || word.starts_with("process_") {
            names.push(word.to_owned());
        }
        rest = &rest[end..];
    }
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_the_dashboard_queries_is_exported() {
    let text = std::fs::read_to_string(repo_root().join("contrib/grafana/ferry.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut wanted = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            wanted.extend(metric_names(target["expr"].as_str().expect("expr")));
        }
    }
    assert!(wanted.len() >= 15, "{wanted:?}");

    let (src, dst) = (unique("dash/src"), unique("dash/dst"));
    let admin = ANY_PORT.to_owned();
    let url = broker_url();
    let ws = Workspace::with_plugins(&["hostile"]);
    ws.config(&format!(
        r#"
[admin]
listen = "{admin}"

[receivers.kept]
type = "mqtt"
url = "{url}"
topics = ["{src}/kept/#"]

[receivers.dropping]
type = "mqtt"
url = "{url}"
topics = ["{src}/dropping/#"]

[senders.out]
type = "mqtt"
url = "{url}"

[[routes]]
id = "outbox"
receiver = "kept"
delivery_mode = "shared_outbox"
[[routes.processors]]
plugin = "hostile"
[[routes.bindings]]
sender = "out"
address = "{dst}/out"

[[routes]]
id = "direct"
receiver = "dropping"
on_permanent_failure = "drop"
[[routes.processors]]
plugin = "hostile"
[[routes.bindings]]
sender = "out"
address = "{dst}/out"
"#
    ));
    let daemon = Daemon::start(&ws, 3);
    let admin = daemon.admin();
    let publisher = TestMqtt::connect(&url).await;
    publisher.publish_with(&format!("{src}/kept/a"), "passes", &[]).await;
    publisher.publish_with(&format!("{src}/kept/b"), "rejected", &[("hostile", "reject")]).await;
    publisher.publish_with(&format!("{src}/kept/c"), "retried", &[("hostile", "retry")]).await;
    publisher.publish_with(&format!("{src}/dropping/d"), "dropped", &[("hostile", "reject")]).await;
    wait_for_sample(&admin, "ferry_messages_dropped_total", "route=\"direct\"", 1.0, Duration::from_secs(15));
    wait_for_sample(&admin, "ferry_messages_dead_lettered_total", "route=\"outbox\"", 1.0, Duration::from_secs(15));
    let scrape = metrics(&admin);
    let exported = |name: &str| {
        scrape.lines().any(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
    };
    let missing: Vec<&String> = wanted.iter().filter(|name| !exported(name)).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics /metrics lacks: {missing:?}\n{scrape}");
    assert!(scrape.contains("ferry_build_info{"), "{scrape}");
    assert!(daemon.terminate().success());
}
