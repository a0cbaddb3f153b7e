use super::*;

const VALID: &str = r#"
[plugins]
dir = "plugins"
[receivers.in]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
topics = ["sensors/#"]
[senders.out]
type = "mqtt"
url = "${BROKER:-mqtt://127.0.0.1:1883}"
default_topic = "bridged"
[[routes]]
id = "sensors"
receiver = "in"
delivery_mode = "direct_hold"
[[routes.processors]]
plugin = "filter"
config = { when = [{ header = "kind", op = "eq", value = "temp" }] }
[[routes.bindings]]
sender = "out"
address = "bridged/{mqtt.topic}"
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn the_documented_example_parses_with_defaults() {
    let c = parse_with_env(VALID, &no_env).expect("valid");
    let out = &c.senders["out"].0;
    assert_eq!((out.kind.as_str(), out.keys["url"].as_str()), ("mqtt", Some("mqtt://127.0.0.1:1883")));
    assert_eq!(c.routes[0].max_in_flight, 100);
    assert_eq!(c.routes[0].processors[0].config["when"][0]["op"], "eq");
    assert_eq!(c.routes[0].bindings[0].id(), "out");
}

#[test]
fn env_variables_are_substituted_in_values() {
    let env = |n: &str| (n == "BROKER").then(|| "mqtt://broker:1884".to_owned());
    let c = parse_with_env(VALID, &env).expect("valid");
    let out = &c.senders["out"].0;
    assert_eq!(out.keys["url"].as_str(), Some("mqtt://broker:1884"));
}

#[test]
fn a_missing_variable_without_default_names_the_key() {
    let text = VALID.replace("${BROKER:-mqtt://127.0.0.1:1883}", "${NOPE_NOT_SET}");
    let err = parse_with_env(&text, &no_env).expect_err("must fail");
    assert_eq!(err.path, "senders.out.url");
    assert!(err.message.contains("NOPE_NOT_SET"), "{err}");
}

#[test]
fn dollar_dollar_is_a_literal_dollar() {
    assert_eq!(substitute::expand("a$$b$", &no_env).as_deref(), Ok("a$b$"));
}

/// Each invalid fixture, with the key path and message fragment it must report.
#[test]
fn invalid_fixtures_report_their_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("[[routes]]\nid = \"sensors\"", "[[routes]]\nid = \"sensors\"\nbogus = 1", "routes[0]"),
        ("sender = \"out\"", "sender = \"nowhere\"", "routes[0].bindings[0].sender"),
        ("receiver = \"in\"", "receiver = \"missing\"", "routes[0].receiver"),
        ("plugin = \"filter\"", "plugin = \"../etc/passwd\"", "routes[0].processors[0].plugin"),
        ("delivery_mode = \"direct_hold\"", "delivery_mode = \"sometimes\"", "routes[0].delivery_mode"),
        (
            "delivery_mode = \"direct_hold\"",
            "delivery_mode = \"shared_outbox\"\nmax_outbox_depth = 0",
            "routes[0].max_outbox_depth",
        ),
        ("delivery_mode = \"direct_hold\"", "delivery_mode = \"direct_hold\"\nmax_hops = 0", "routes[0].max_hops"),
        (
            "id = \"sensors\"\nreceiver = \"in\"\ndelivery_mode = \"direct_hold\"",
            "id = \"sen/sors\"\nreceiver = \"in\"\ndelivery_mode = \"shared_outbox\"",
            "routes[0].id",
        ),
        ("[plugins]\ndir = \"plugins\"", "[plugins]\ndir = \"plugins\"\ncolour = \"blue\"", "plugins"),
        (
            "[plugins]\ndir = \"plugins\"",
            "[admin]\nlisten = \"localhost\"\n[plugins]\ndir = \"plugins\"",
            "admin.listen",
        ),
        ("[plugins]\ndir = \"plugins\"", "[admin]\nstall_secs = 0\n[plugins]\ndir = \"plugins\"", "admin.stall_secs"),
        (
            "[plugins]\ndir = \"plugins\"",
            "[admin]\nshutdown_timeout_secs = 0\n[plugins]\ndir = \"plugins\"",
            "admin.shutdown_timeout_secs",
        ),
    ];
    for (from, to, path) in cases {
        assert!(VALID.contains(from), "fixture anchor {from:?} missing");
        let text = VALID.replacen(from, to, 1);
        let err = parse_with_env(&text, &no_env).expect_err(to);
        assert!(err.path.starts_with(path), "{to:?}: expected path {path}, got {err}");
    }
}

#[test]
fn unknown_key_message_names_the_key() {
    let text = VALID.replace("[[routes]]\nid = \"sensors\"", "[[routes]]\nid = \"sensors\"\nbogus = 1");
    let err = parse_with_env(&text, &no_env).expect_err("unknown key");
    assert!(err.message.contains("bogus"), "{err}");
}

#[test]
fn malformed_toml_is_a_file_error() {
    let err = parse_with_env("[receivers.in\n", &no_env).expect_err("bad toml");
    assert_eq!(err.path, "(file)");
}

#[test]
fn amqp_parts_read_their_own_keys() {
    let text = r#"
[receivers.a10]
type = "amqp10"
url = "amqp://guest:guest@127.0.0.1:5672"
address = "/amq/queue/in"
[senders.o091]
type = "amqp091"
url = "amqp://127.0.0.1"
wire_format = "json"
[[routes]]
id = "one"
receiver = "a10"
[[routes.bindings]]
sender = "o091"
"#;
    let c = parse_with_env(text, &no_env).expect("valid");
    // Their crates read and check the keys (their config tests).
    assert!(matches!(&c.receivers["a10"], t if t.kind == "amqp10"));
    assert!(matches!(&c.senders["o091"], t if t.kind == "amqp091" && t.wire_format == Some(WireFormat::Json)));
}

#[test]
fn a_transport_that_reads_its_own_keys_gets_them_as_written() {
    let text = r#"
[receivers.rs]
type = "redis_streams"
url = "redis://:${PW}@127.0.0.1:6379/2"
stream = "orders"
wire_format = "json"
tls = { ca_file = "/ca.pem" }
[senders.out]
type = "no_such_transport"
anything = [1, 2]
[[routes]]
id = "one"
receiver = "rs"
[[routes.bindings]]
sender = "out"
"#;
    let env = |name: &str| (name == "PW").then(|| "s3cret".to_owned());
    let c = parse_with_env(text, &env).expect("valid: the transports check their own keys");
    let r = &c.receivers["rs"].0;
    assert_eq!(
        (r.kind.as_str(), c.receivers["rs"].kind(), r.wire_format),
        ("redis_streams", "redis_streams", Some(WireFormat::Json))
    );
    assert_eq!(r.keys["url"].as_str(), Some("redis://:s3cret@127.0.0.1:6379/2"), "substituted");
    assert!(r.keys.get("type").is_none() && r.keys.get("wire_format").is_none(), "{:?}", r.keys);
    assert_eq!(r.keys["tls"]["ca_file"].as_str(), Some("/ca.pem"));
    let s = &c.senders["out"].0;
    assert_eq!((s.kind.as_str(), s.wire_format), ("no_such_transport", None), "not written");
    assert_eq!(c.senders["out"].wire_format(), WireFormat::None);

    // Written out (`ferry render`) as it was written.
    let json = serde_json::to_value(&c).expect("serialises");
    assert_eq!(json["receivers"]["rs"]["type"], "redis_streams");
    assert_eq!(json["receivers"]["rs"]["wire_format"], "json");
    assert_eq!(json["receivers"]["rs"]["stream"], "orders");
    assert_eq!(json["senders"]["out"]["anything"], serde_json::json!([1, 2]));

    // What every part has is still checked here, with its key path.
    let err = parse_with_env(&text.replace("wire_format = \"json\"", "wire_format = \"xml\""), &env).expect_err("bad");
    assert_eq!(err.path, "receivers.rs.wire_format", "{err}");
    // The typed view of a table, with the path below the part's.
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Mine {
        url: String,
        stream: String,
        tls: Option<TlsConfig>,
    }
    let mine: Mine = r.parse().expect("parses");
    assert_eq!(mine.stream, "orders");
    let mut bad = r.clone();
    bad.keys.insert("tls".into(), toml::Value::Table(toml::from_str("ca_flie = \"/x\"").expect("toml")));
    let err = bad.parse::<Mine>().expect_err("unknown key");
    assert_eq!(err.path, "tls.ca_flie", "{err}");
    assert!(err.message.contains("ca_flie"), "{err}");
    bad.keys.remove("tls");
    bad.keys.remove("url");
    assert_eq!(bad.parse::<Mine>().expect_err("missing").path, "url", "a missing key is named");
}

#[test]
fn secrets_come_from_files_and_are_reported_for_masking() {
    let dir = std::env::temp_dir().join(format!("ferry-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("amqp-url");
    std::fs::write(&file, "amqp://ferry:pa55@rabbit:5672/%2f\n").expect("write secret");
    let text = r#"
[receivers.in]
type = "amqp091"
url = { file = "${SECRETS}/amqp-url" }
queue = "q"
[senders.out]
type = "mqtt"
url = "mqtt://127.0.0.1"
[[routes]]
id = "r"
receiver = "in"
[[routes.bindings]]
sender = "out"
"#;
    let env = |n: &str| (n == "SECRETS").then(|| dir.to_string_lossy().into_owned());
    let (c, secrets) = parse_collecting_secrets(text, &env).expect("valid");
    let r = &c.receivers["in"].0;
    let url = r.keys["url"].as_str().expect("a string");
    assert_eq!(url, "amqp://ferry:pa55@rabbit:5672/%2f", "the trailing newline is not part of it");
    assert_eq!(secrets, vec![url.to_owned()]);

    let missing = text.replace("amqp-url", "nope");
    let err = parse_with_env(&missing, &env).expect_err("missing file");
    assert_eq!(err.path, "receivers.in.url.file");
    assert!(err.message.contains("cannot read secret file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_instance_id_comes_from_the_config_then_the_environment_then_the_host_name() {
    let env = |n: &str| (n == "FERRY_INSTANCE_ID").then(|| "pod-7".to_owned());
    let from_env = parse_with_env(VALID, &env).expect("valid");
    assert_eq!(from_env.instance.id(), "pod-7");
    let text = format!("[instance]\nid = \"eu-1\"\n{VALID}");
    let from_config = parse_with_env(&text, &env).expect("valid");
    assert_eq!(from_config.instance.id(), "eu-1");

    let from_host = parse_with_env(VALID, &no_env).expect("valid");
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    assert!(!from_host.instance.id().is_empty());
    if host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) && !host.is_empty() {
        assert_eq!(from_host.instance.id(), host);
    }
}

#[test]
fn an_instance_id_that_cannot_name_a_client_is_refused() {
    for bad in ["", "a b", "a/b", "ü", &"x".repeat(65)] {
        let text = format!("[instance]\nid = \"{bad}\"\n{VALID}");
        let err = parse_with_env(&text, &no_env).expect_err(bad);
        assert_eq!(err.path, "instance.id", "{bad:?}: {err}");
        let env = |n: &str| (n == "FERRY_INSTANCE_ID").then(|| bad.to_owned());
        if !bad.is_empty() {
            let err = parse_with_env(VALID, &env).expect_err(bad);
            assert!(err.path.contains("FERRY_INSTANCE_ID"), "{bad:?}: {err}");
        }
    }
    let err = parse_with_env(&format!("[instance]\nname = \"x\"\n{VALID}"), &no_env).expect_err("unknown key");
    assert!(err.path.starts_with("instance"), "{err}");
}

#[test]
fn the_store_is_embedded_by_default_and_postgres_needs_a_url() {
    let c = parse_with_env(VALID, &no_env).expect("valid");
    assert_eq!((c.store.kind, c.store.url.as_deref(), c.store.lease_ttl_secs), (StoreKind::Embedded, None, 15));
    assert_eq!(c.routes[0].outbox_partitions, 1);

    let pg = format!("[store]\ntype = \"postgres\"\nurl = \"${{PG_URL}}\"\nlease_ttl_secs = 5\npool_size = 4\n{VALID}");
    let env = |n: &str| (n == "PG_URL").then(|| "postgres://ferry:secret@db:5432/ferry".to_owned());
    let c = parse_with_env(&pg, &env).expect("valid");
    assert_eq!(c.store.kind, StoreKind::Postgres);
    assert_eq!(c.store.url.as_deref(), Some("postgres://ferry:secret@db:5432/ferry"));
    assert_eq!((c.store.lease_ttl_secs, c.store.pool_size), (5, 4));

    let cases = [
        ("[store]\ntype = \"postgres\"\n", "store.url", "needs url"),
        ("[store]\nurl = \"postgres://db/ferry\"\n", "store.url", "is for type = \"postgres\""),
        ("[store]\ntype = \"postgres\"\nurl = \"mysql://db/ferry\"\n", "store.url", "postgres://"),
        ("[store]\nlease_ttl_secs = 0\n", "store.lease_ttl_secs", "between 1 and 3600"),
        ("[store]\npool_size = 0\n", "store.pool_size", "between 1 and 256"),
        ("[store]\ntype = \"sqlite\"\n", "store.type", "unknown variant"),
    ];
    for (store, key, message) in cases {
        let err = parse_with_env(&format!("{store}{VALID}"), &no_env).expect_err(store);
        assert!(err.path.starts_with(key) || err.to_string().contains(key), "{store}: {err}");
        assert!(err.message.contains(message), "{store}: {err}");
    }
}

#[test]
fn outbox_partitions_are_between_1_and_256() {
    for (n, ok) in [(0, false), (1, true), (8, true), (256, true), (257, false)] {
        let text = VALID.replace("delivery_mode = \"direct_hold\"", &format!("outbox_partitions = {n}"));
        match parse_with_env(&text, &no_env) {
            Ok(c) => assert!(ok && c.routes[0].outbox_partitions == n, "{n}"),
            Err(e) => assert!(!ok && e.path == "routes[0].outbox_partitions", "{n}: {e}"),
        }
    }
}

#[test]
fn an_admin_server_beyond_loopback_needs_a_token_or_read_only() {
    let with = |admin: &str| format!("[admin]\n{admin}\n{VALID}");
    assert!(parse_with_env(&with("listen = \"127.0.0.1:9464\""), &no_env).is_ok());
    assert!(parse_with_env(&with("listen = \"[::1]:9464\""), &no_env).is_ok());
    let open = parse_with_env(&with("listen = \"0.0.0.0:9464\""), &no_env).expect_err("open");
    assert_eq!(open.path, "admin.listen");
    assert!(open.message.contains("admin.token") && open.message.contains("read_only"), "{open}");
    let token = "token = \"0123456789abcdef\"";
    let c = parse_with_env(&with(&format!("listen = \"0.0.0.0:9464\"\n{token}")), &no_env).expect("token");
    assert_eq!(c.admin.token.as_ref().map(crate::Secret::expose), Some("0123456789abcdef"));
    assert!(parse_with_env(&with("listen = \"0.0.0.0:9464\"\nread_only = true"), &no_env).is_ok());
    let short = parse_with_env(&with("listen = \"127.0.0.1:9464\"\ntoken = \"short\""), &no_env).expect_err("short");
    assert_eq!(short.path, "admin.token");
}

#[test]
fn an_admin_listen_from_the_command_line_is_checked_as_the_key_is() {
    let config = parse_with_env(VALID, &no_env).expect("valid");
    let any_port = config.clone().with_admin_listen("127.0.0.1:0").expect("loopback, port 0");
    assert_eq!(any_port.admin.listen.as_deref(), Some("127.0.0.1:0"));
    let open = config.clone().with_admin_listen("0.0.0.0:0").expect_err("no token");
    assert_eq!(open.path, "admin.listen");
    assert_eq!(config.with_admin_listen("nowhere").expect_err("not an address").path, "admin.listen");
}

#[test]
fn a_parsed_config_prints_no_secret_in_debug() {
    let text = format!(
        "[admin]\ntoken = \"admin-token-0123456789\"\n\
         [endpoints.sqs]\nlisten = \"127.0.0.1:0\"\nauth = \"verify\"\n\
         [[endpoints.sqs.access_keys]]\nid = \"AKID\"\nsecret = \"endpoint-secret-key\"\n\
         [senders.hook]\ntype = \"http\"\nurl = \"https://user:url-password@hooks.example/x\"\n\
         bearer_token = \"hook-bearer-token\"\n{VALID}"
    );
    let c = parse_with_env(&text, &no_env).expect("valid");
    let printed = format!("{c:?} {c:#?}");
    for secret in ["admin-token-0123456789", "endpoint-secret-key", "url-password", "hook-bearer-token"] {
        assert!(!printed.contains(secret), "{secret} in {printed}");
    }
    assert!(printed.contains("bearer_token"), "a part's Debug names its keys: {printed}");
}
