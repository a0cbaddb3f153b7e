//! The command line's own pages: shell completions and man pages come from
//! the clap definitions, so they name every subcommand the parser knows.

use ferry_tests::daemon::Workspace;

#[test]
fn version_names_the_commit_and_the_plugin_contract() {
    let out = Workspace::with_plugins(&[]).ferry(&["--version"]);
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // The contract's version, as wit/ declares it.
    let contract = std::fs::read_dir(ferry_tests::repo_root().join("wit"))
        .expect("wit/")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .find_map(|text| {
            text.lines().find_map(|l| {
                l.trim().strip_prefix("package ferry:plugin@").map(|v| v.trim_end_matches(';').to_owned())
            })
        })
        .expect("package ferry:plugin@… in wit/");
    assert!(line.starts_with(&format!("ferry {} (commit ", env!("CARGO_PKG_VERSION"))), "{line}");
    assert!(line.ends_with(&format!(", plugin contract ferry:plugin@{contract})")), "{line}");
    let commit = line.split("(commit ").nth(1).and_then(|r| r.split(',').next()).unwrap_or_default();
    assert!(!commit.is_empty(), "{line}");
    // The second word is the bare version, which `just image` tags with.
    assert_eq!(line.split_whitespace().nth(1), Some(env!("CARGO_PKG_VERSION")));
}

#[test]
fn completions_name_every_subcommand() {
    let ws = Workspace::with_plugins(&[]);
    for shell in ["bash", "zsh", "fish"] {
        let out = ws.ferry(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8_lossy(&out.stdout);
        for sub in ["run", "validate", "dlq", "replay", "outbox", "plugins"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    assert!(!ws.ferry(&["completions", "tcsh"]).status.success(), "an unknown shell is refused");
}

#[test]
fn man_pages_cover_the_subcommands() {
    let ws = Workspace::with_plugins(&[]);
    let page = ws.ferry(&["man"]);
    assert!(page.status.success());
    let text = String::from_utf8_lossy(&page.stdout);
    assert!(text.starts_with(".ie") || text.contains(".TH ferry"), "{text}");
    assert!(text.contains("dlq"), "{text}");

    let out = ws.ferry(&["man", "--dir", "man"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in ["ferry.1", "ferry-run.1", "ferry-dlq.1", "ferry-dlq-replay.1", "ferry-outbox-stats.1"] {
        let page = std::fs::read_to_string(ws.path().join("man").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(page.contains(".TH"), "{name}: {page}");
    }
    let replay = std::fs::read_to_string(ws.path().join("man/ferry-dlq-replay.1")).expect("page");
    assert!(replay.contains("dry") && replay.contains("route"), "the options are documented: {replay}");
}

/// `ferry validate` parses each URL with the code its transport connects
/// with: what cannot work is refused with its key, before any connection.
#[test]
fn validate_refuses_urls_the_transports_could_not_use() {
    let ws = Workspace::with_plugins(&[]);
    let config = |receiver_url: &str, sender: &str| {
        format!(
            "[receivers.in]\ntype = \"mqtt\"\nurl = \"{receiver_url}\"\ntopics = [\"t/#\"]\n\n[senders.out]\n{sender}\n\n[[routes]]\nid = \"r\"\nreceiver = \"in\"\n[[routes.bindings]]\nsender = \"out\"\naddress = \"q\"\n"
        )
    };
    let amqp = |url: &str| format!("type = \"amqp091\"\nurl = \"{url}\"");
    let cases = [
        (config("mqtt://127.0.0.1:70000", &amqp("amqp://127.0.0.1/%2f")), "receivers.in.url"),
        (config("mqtt://user:%FF@127.0.0.1", &amqp("amqp://127.0.0.1/%2f")), "receivers.in.url"),
        (config("mqtt://127.0.0.1", &amqp("amqp://127.0.0.1:99999/%2f")), "senders.out.url"),
        (config("mqtt://127.0.0.1", &amqp("amqp://guest:%FF@127.0.0.1/%2f")), "senders.out.url"),
        (config("mqtt://127.0.0.1", &amqp("amqp://127.0.0.1/%2f?heartbeat=often")), "senders.out.url"),
        (
            config("mqtt://127.0.0.1", "type = \"amqp10\"\nurl = \"amqp://127.0.0.1:123456\"\naddress = \"/q\""),
            "senders.out.url",
        ),
    ];
    for (text, key) in cases {
        ws.config(&text);
        let out = ws.ferry(&["validate", "-c", "ferry.toml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}\n{stderr}");
        assert!(stderr.contains(key), "{key} in: {stderr}");
    }
    ws.config(&config("mqtt://[::1]:1883", &amqp("amqp://guest:gu%40st@[::1]:5672/%2f")));
    let ok = ws.ferry(&["validate", "-c", "ferry.toml"]);
    assert!(
        ok.status.success(),
        "IPv6 hosts and encoded credentials are fine: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// `ferry validate --connect` reaches every broker and queue the config
/// names, one line each, and exits 2 when one cannot be reached.
#[tokio::test(flavor = "multi_thread")]
async fn validate_connect_reaches_every_broker_and_queue() {
    use ferry_tests::{mqtt, rabbit, sqs};
    sqs::require_aws_env();
    let queue = ferry_tests::unique("probe-q");
    let client = sqs::client();
    let (_, queue_url) = sqs::create_queue(&client, "probe", false).await;
    let closed = ferry_tests::ports::ClosedPort::new();
    let ws = Workspace::with_plugins(&[]).with_env(&[("FERRY_INSTANCE_ID", "probe")]);
    let config = |amqp_queue: &str, mqtt_out: &str| {
        format!(
            r#"
[receivers.in]
type = "amqp091"
url = "{amqp}"
queue = "{amqp_queue}"
queue_passive = true

[senders.sqs]
type = "sqs"
queue_url = "{queue_url}"
endpoint_url = "{endpoint}"

[senders.mqtt]
type = "mqtt"
url = "{mqtt_out}"

[[routes]]
id = "r"
receiver = "in"
dispatch_mode = "fan_out"
[[routes.bindings]]
sender = "sqs"
[[routes.bindings]]
sender = "mqtt"
address = "t"
"#,
            amqp = rabbit::URL091,
            endpoint = sqs::endpoint(),
        )
    };
    ws.config(&config(&queue, &format!("mqtt://{}", closed.addr())));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("receivers.in (amqp091): FAILED") && text.contains(&queue), "no such queue: {text}");
    assert!(text.contains("senders.mqtt (mqtt): FAILED"), "nothing listens there: {text}");
    assert!(text.contains("senders.sqs (sqs): ok"), "{text}");

    let rabbit = rabbit::Rabbit::connect().await;
    rabbit.declare_queue(&queue).await;
    ws.config(&config(&queue, &mqtt::broker_url()));
    let out = ws.ferry(&["validate", "--connect", "-c", "ferry.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("): ok, ").count(), 3, "{text}");
    rabbit.delete_queue(&queue).await;
}
