//! `ferry test`: fixture messages through a config's routes with no broker.
//! The examples' test files pass; a wrong expectation fails with a diff in
//! text and in JSON; and the features a route combines (a route verdict
//! naming two addresses, a tenant check, a header mapper, fan-out to two
//! transports, a `shared_outbox` route, expiry, ingress poison) come out as
//! a running daemon would send them.

use ferry_tests::daemon::Workspace;
use ferry_tests::repo_root;
use serde_json::Value;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_example_has_a_test_file_and_it_passes() {
    let ws = Workspace::with_plugins(&["filter"]);
    let examples = repo_root().join("examples");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&examples).expect("examples/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|x| x == "toml") {
            let test = examples.join("tests").join(path.file_name().expect("name"));
            assert!(test.is_file(), "{} has no test file {}", path.display(), test.display());
            files.push(test.to_string_lossy().into_owned());
        }
    }
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let mut args = vec!["test"];
    args.extend(files.iter().map(String::as_str));
    let out = ws.ferry(&args);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(" 0 failed"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
}

const MIXED: &str = r#"
[plugins]
dir = "plugins"

[store]
path = "data"

[receivers.in]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
topics = ["site/#"]

[senders.mqtt-out]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"

[senders.rabbit]
type = "amqp091"
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
exchange = "events"

[[routes]]
id = "mixed"
receiver = "in"
delivery_mode = "shared_outbox"
dispatch_mode = "fan_out"
on_permanent_failure = "dlq"

[[routes.processors]]
plugin = "tenant"
grants = { tenant_id = true }
config = { header = "org", allow = ["acme"], on_missing = "drop" }

[[routes.processors]]
plugin = "filter"
config = { when = [{ header = "kind", op = "eq", value = "alert" }], action = "route", route = ["alerts/a", "alerts/b"] }

[[routes.bindings]]
sender = "mqtt-out"
address = "out/{mqtt.topic}"
header_mapper = "header-map"
header_mapper_config = { set = { mapped = "yes" }, drop = ["secret"] }

[[routes.bindings]]
sender = "rabbit"
address = "key.{org}"
"#;

const MIXED_CASES: &str = r#"
config = "ferry.toml"

[[case]]
name = "an ordinary message goes to both transports, mapped on the MQTT binding only"
[case.input]
topic = "site/boiler"
payload = "on"
user_properties = { org = "acme", secret = "s3", kind = "state" }
[case.expect]
outcome = "delivered"
[case.expect.bindings.mqtt-out]
topic = "out/site/boiler"
user_properties = { mapped = "yes", "x-bridge.tenant-id" = "acme", org = "acme" }
absent = ["user_properties.secret"]
[case.expect.bindings.rabbit]
exchange = "events"
routing_key = "key.acme"
headers = { secret = "s3", "x-bridge.tenant-id" = "acme" }
absent = ["headers.mapped"]

[[case]]
name = "a route verdict with two addresses makes two copies per binding"
[case.input]
topic = "site/boiler"
payload = "hot"
user_properties = { org = "acme", kind = "alert" }
[case.expect]
outcome = "delivered"
bindings.mqtt-out = [{ topic = "alerts/a", user_properties = { mapped = "yes" } }, { topic = "alerts/b" }]
bindings.rabbit = [{ routing_key = "alerts/a" }, { routing_key = "alerts/b" }]

[[case]]
name = "an unknown tenant is dead-lettered and sent nowhere"
[case.input]
topic = "site/boiler"
payload = "on"
user_properties = { org = "evil" }
[case.expect]
outcome = "dead_lettered"
reason = "plugin_rejected"
detail = "unknown_tenant"
bindings = { mqtt-out = "absent", rabbit = "absent" }

[[case]]
name = "a message without a tenant is dropped by the processor"
[case.input]
topic = "site/boiler"
payload = "on"
[case.expect]
outcome = "dropped"
reason = "filtered"
detail = "tenant"

[[case]]
name = "an expired message is not delivered"
[case.input]
topic = "site/boiler"
payload = "late"
properties = { message_expiry_interval = 0 }
user_properties = { org = "acme" }
[case.expect]
outcome = "dropped"
reason = "expired"

[[case]]
name = "a publish over max_payload_bytes is refused at ingress"
[case.input]
topic = "site/boiler"
payload = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
[case.expect]
outcome = "dropped"
reason = "payload_too_large"
"#;

#[test]
fn combined_features_come_out_as_a_daemon_would_send_them() {
    let ws = Workspace::with_plugins(&["tenant", "filter", "header-map"]);
    // A small payload limit, so that the last case is poison at ingress.
    ws.config(&MIXED.replace("topics = [\"site/#\"]", "topics = [\"site/#\"]\nmax_payload_bytes = 100"));
    std::fs::write(ws.path().join("cases.toml"), MIXED_CASES).expect("write cases");
    let out = ws.ferry(&["test", "cases.toml"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("6 cases: 6 passed, 0 failed"), "{text}");
}

#[test]
fn a_wrong_expectation_fails_with_a_diff_in_text_and_json() {
    let ws = Workspace::with_plugins(&["tenant", "filter", "header-map"]);
    ws.config(MIXED);
    let wrong = r#"
config = "ferry.toml"

[[case]]
name = "right"
[case.input]
topic = "site/boiler"
user_properties = { org = "acme" }
[case.expect]
outcome = "delivered"

[[case]]
name = "wrong topic and a header that is there"
[case.input]
topic = "site/boiler"
payload = "on"
user_properties = { org = "acme", secret = "s3" }
[case.expect]
outcome = "delivered"
[case.expect.bindings.mqtt-out]
topic = "elsewhere/site/boiler"
absent = ["user_properties.org"]

[[case]]
name = "wrong outcome"
[case.input]
topic = "site/boiler"
user_properties = { org = "evil" }
[case.expect]
outcome = "delivered"
bindings.nope = "absent"
"#;
    std::fs::write(ws.path().join("wrong.toml"), wrong).expect("write cases");
    let out = ws.ferry(&["test", "wrong.toml"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("  ok    right"), "{text}");
    assert!(text.contains("  FAIL  wrong topic and a header that is there"), "{text}");
    assert!(
        text.contains(r#"bindings.mqtt-out.topic: expected "elsewhere/site/boiler", got "out/site/boiler""#),
        "{text}"
    );
    assert!(text.contains(r#"bindings.mqtt-out.user_properties.org: expected absent, got "acme""#), "{text}");
    assert!(text.contains("outcome: expected delivered, got dead_lettered (plugin_rejected)"), "{text}");
    assert!(text.contains("bindings.nope: the route has no such binding"), "{text}");
    assert!(text.contains("3 cases: 1 passed, 2 failed"), "{text}");

    let out = ws.ferry(&["test", "--format", "json", "wrong.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(report["passed"], 1);
    assert_eq!(report["failed"], 2);
    let cases = report["files"][0]["cases"].as_array().expect("cases");
    assert_eq!(cases[0]["passed"], true);
    assert_eq!(cases[1]["passed"], false);
    assert_eq!(cases[1]["bindings"]["mqtt-out"][0]["topic"], "out/site/boiler");
    assert_eq!(cases[1]["bindings"]["rabbit"][0]["routing_key"], "key.acme");
    assert_eq!(cases[2]["outcome"]["kind"], "dead_lettered");
    assert_eq!(cases[2]["dead_letters"][0]["reason"], "plugin_rejected");
    assert!(cases[2]["processors"][0]["reject"].is_string(), "{}", cases[2]);
}

#[test]
fn unusable_files_are_errors_not_passes() {
    let ws = Workspace::with_plugins(&[]);
    std::fs::write(
        ws.path().join("none.toml"),
        "config = \"missing.toml\"\n[[case]]\nname = \"x\"\ninput = {}\nexpect = { outcome = \"delivered\" }\n",
    )
    .expect("write");
    std::fs::write(ws.path().join("typo.toml"), "config = \"missing.toml\"\n[[case]]\nname = \"x\"\nexpectt = {}\n")
        .expect("write");
    let out = ws.ferry(&["test", "none.toml", "typo.toml"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("missing.toml"), "{text}");
    assert!(text.contains("not a test file"), "{text}");
    assert!(text.contains("2 cases: 0 passed, 2 failed"), "{text}");
}

#[test]
fn explain_reports_what_crosses_and_strict_fails_on_losses() {
    let ws = Workspace::with_plugins(&["filter"]);
    let example = |name: &str| repo_root().join("examples").join(name).to_string_lossy().into_owned();

    // MQTT -> SQS: the identity lands in an attribute; expiry and user
    // properties beyond SQS's ten attributes do not cross.
    let sqs = example("mqtt-to-sqs.toml");
    let out = ws.ferry(&["validate", "--explain", "-c", &sqs]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("route telemetry-to-sqs -> binding queue: mqtt (receivers.telemetry) -> sqs"), "{text}");
    assert!(text.contains("ok    identity (mqtt.message-id) -> message_attributes.mqtt.message-id"), "{text}");
    assert!(text.contains("ok    subject (gobridge.subject) -> message_attributes.Subject"), "{text}");
    assert!(text.contains("LOST  expiry (message expiry interval) (SQS has no per-message expiry"), "{text}");
    assert!(text.contains("LOST  other user properties (13): only "), "{text}");
    let strict = ws.ferry(&["validate", "--explain", "--strict", "-c", &sqs]);
    assert_eq!(strict.status.code(), Some(1), "{}", stdout(&strict));

    // MQTT -> MQTT loses nothing, and says that the filter is not shown.
    let mqtt = example("ferry.toml");
    let out = ws.ferry(&["validate", "--explain", "--strict", "-c", &mqtt]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("route sensors: 1 processor(s) run before the bindings"), "{text}");
    assert!(text.contains("ok    expiry (message expiry interval) -> properties.message_expiry_interval"), "{text}");
    assert!(text.contains("nothing is lost"), "{text}");

    // AMQP 0-9-1 -> MQTT: typed headers cannot be MQTT user properties.
    let config = r#"
[plugins]
dir = "plugins"
[receivers.in]
type = "amqp091"
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
queue = "q"
[senders.out]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
[[routes]]
id = "r"
receiver = "in"
[[routes.bindings]]
sender = "out"
address = "x/{amqp091.routing-key}"
"#;
    let path = ws.config(config);
    let out = ws.ferry(&["validate", "--explain", "-c", &path.to_string_lossy()]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ok    text header -> user_properties.probe-text"), "{text}");
    assert!(text.contains("LOST  integer header (MQTT user properties are text"), "{text}");
    assert!(text.contains("ok    expiry (expiration) -> properties.message_expiry_interval"), "{text}");
}

#[test]
fn a_test_file_covers_a_python_plugin() {
    let ws = Workspace::with_plugins(&["redact"]);
    ws.config(
        r#"
[plugins]
dir = "plugins"
[store]
path = "data"
[receivers.in]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
topics = ["pay/#"]
[senders.out]
type = "mqtt"
url = "mqtt://127.0.0.1:1883"
[[routes]]
id = "payments"
receiver = "in"
on_permanent_failure = "dlq"
[[routes.processors]]
plugin = "redact"
config = { fields = ["card", "customer.email"] }
[[routes.bindings]]
sender = "out"
address = "clean/{mqtt.topic}"
"#,
    );
    let cases = r#"
config = "ferry.toml"

[[case]]
name = "card numbers and e-mail addresses are masked"
[case.input]
topic = "pay/eu"
payload = '{"card":"4111111111111111","amount":12,"customer":{"email":"a@b.c","name":"Ann"}}'
[case.expect]
outcome = "delivered"
[case.expect.bindings.out]
topic = "clean/pay/eu"
payload_json = { card = "***", amount = 12, customer = { email = "***", name = "Ann" } }
user_properties = { redacted = "2" }

[[case]]
name = "a payload that is not JSON is dead-lettered"
[case.input]
topic = "pay/eu"
payload = "card=4111"
[case.expect]
outcome = "dead_lettered"
reason = "plugin_rejected"
bindings.out = "absent"
"#;
    std::fs::write(ws.path().join("cases.toml"), cases).expect("write cases");
    let out = ws.ferry(&["test", "cases.toml"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("2 cases: 2 passed, 0 failed"), "{text}");
}
