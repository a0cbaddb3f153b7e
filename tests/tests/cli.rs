//! The command line's own pages: shell completions and man pages come from
//! the clap definitions, so they name every subcommand the parser knows.

use ferry_tests::daemon::Workspace;

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
