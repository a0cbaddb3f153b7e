//! mqbridge configs run unchanged (issue 42): the three bridges of
//! mqbridge's README (RabbitMQ -> two SimpleMQ queues, SimpleMQ -> RabbitMQ
//! by the message's content, SimpleMQ -> two SimpleMQ queues), written as
//! there in Jsonnet with its native functions, run by
//! `ferry run -c bridges.jsonnet` against RabbitMQ and the SimpleMQ
//! stand-in; `ferry render` prints the ferry config they became.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::rabbit::Rabbit;
use ferry_tests::simplemq::{self, FakeSimpleMq};
use ferry_tests::{eventually, unique};
use lapin::BasicProperties;

const WAIT: Duration = Duration::from_secs(30);

/// mqbridge's README example, its names taken from the environment so
/// that the test's are its own.
const BRIDGES: &str = r"
local env = std.native('env');
local must_env = std.native('must_env');
{
  rabbitmq: {
    url: must_env('RABBITMQ_URL'),
  },
  simplemq: {
    api_url: env('SIMPLEMQ_API_URL', 'http://localhost:18080'),
  },
  bridges: [
    {
      name: 'rmq-to-smq',
      from: {
        rabbitmq: {
          queue: must_env('SOURCE_QUEUE'),
          exchange: must_env('SOURCE_EXCHANGE'),
          exchange_type: 'topic',
          routing_key: '#',
          exchange_passive: false,
        },
      },
      to: [
        { simplemq: { queue: must_env('DEST_QUEUE_1'), api_key: must_env('SIMPLEMQ_API_KEY_1') } },
        { simplemq: { queue: must_env('DEST_QUEUE_2'), api_key: must_env('SIMPLEMQ_API_KEY_2') } },
      ],
    },
    {
      name: 'smq-to-rmq',
      from: {
        simplemq: {
          queue: must_env('INBOUND_QUEUE'),
          api_key: must_env('SIMPLEMQ_API_KEY_INBOUND'),
          polling_interval: '1s',
        },
      },
      to: [
        { rabbitmq: {} },
      ],
    },
    {
      name: 'smq-to-smq',
      from: {
        simplemq: {
          queue: must_env('SMQ_SOURCE_QUEUE'),
          api_key: must_env('SIMPLEMQ_API_KEY_SOURCE'),
          polling_interval: '1s',
        },
      },
      to: [
        { simplemq: { queue: must_env('FANOUT_QUEUE_1'), api_key: must_env('SIMPLEMQ_API_KEY_FANOUT_1') } },
        { simplemq: { queue: must_env('FANOUT_QUEUE_2'), api_key: must_env('SIMPLEMQ_API_KEY_FANOUT_2') } },
      ],
    },
  ],
}
";

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_bridges_run_as_written() {
    let smq = FakeSimpleMq::start(WAIT).await;
    let names: Vec<(&str, String, &str)> = vec![
        ("DEST_QUEUE_1", unique("dest-queue-1"), "SIMPLEMQ_API_KEY_1"),
        ("DEST_QUEUE_2", unique("dest-queue-2"), "SIMPLEMQ_API_KEY_2"),
        ("INBOUND_QUEUE", unique("inbound-queue"), "SIMPLEMQ_API_KEY_INBOUND"),
        ("SMQ_SOURCE_QUEUE", unique("source-queue"), "SIMPLEMQ_API_KEY_SOURCE"),
        ("FANOUT_QUEUE_1", unique("fanout-queue-1"), "SIMPLEMQ_API_KEY_FANOUT_1"),
        ("FANOUT_QUEUE_2", unique("fanout-queue-2"), "SIMPLEMQ_API_KEY_FANOUT_2"),
    ];
    let mut env: Vec<(String, String)> = Vec::new();
    for (var, queue, key_var) in &names {
        let key = format!("key-{queue}");
        smq.create_queue(queue, &key);
        env.push(((*var).to_owned(), queue.clone()));
        env.push(((*key_var).to_owned(), key));
    }
    let queue = |var: &str| names.iter().find(|(v, _, _)| *v == var).map(|(_, q, _)| q.clone()).expect("named");
    let rabbit = Rabbit::connect().await;
    let (source_queue, source_exchange) = (unique("source-queue"), unique("source-exchange"));
    let (routed_exchange, routed_queue) = (unique("routed"), unique("routed-queue"));
    rabbit.declare_exchange(&routed_exchange, lapin::ExchangeKind::Direct).await;
    rabbit.declare_queue(&routed_queue).await;
    rabbit.bind(&routed_queue, &routed_exchange, "orders.created").await;
    env.push(("RABBITMQ_URL".into(), "amqp://guest:guest@127.0.0.1:5672/%2f".into()));
    env.push(("SOURCE_QUEUE".into(), source_queue.clone()));
    env.push(("SOURCE_EXCHANGE".into(), source_exchange.clone()));
    env.push(("SIMPLEMQ_API_URL".into(), smq.url()));
    let vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ws = Workspace::with_plugins(&[]).with_env(&vars);
    std::fs::write(ws.path().join("bridges.jsonnet"), BRIDGES).expect("write bridges.jsonnet");

    // What it became, for a user moving to ferry's format.
    let rendered = ws.ferry(&["render", "-c", "bridges.jsonnet"]);
    assert!(rendered.status.success(), "render: {}", String::from_utf8_lossy(&rendered.stderr));
    let text = String::from_utf8_lossy(&rendered.stdout).to_string();
    for id in ["rmq-to-smq", "smq-to-rmq", "smq-to-smq"] {
        assert!(text.contains(&format!("id = \"{id}\"")), "route {id} in:\n{text}");
    }
    assert!(!text.contains("key-"), "no API key from the environment in the rendered TOML:\n{text}");
    // Saved, it runs as ferry's own config with the same environment.
    ws.config(&text);
    let validated = ws.ferry(&["validate", "-c", "ferry.toml"]);
    assert!(validated.status.success(), "the rendered TOML: {}", String::from_utf8_lossy(&validated.stderr));
    let validated = ws.ferry(&["validate", "-c", "bridges.jsonnet"]);
    assert!(validated.status.success(), "validate: {}", String::from_utf8_lossy(&validated.stderr));

    let daemon = Daemon::start_config(&ws, "bridges.jsonnet", 1);

    // RabbitMQ -> both SimpleMQ queues, in mqbridge's wire format.
    rabbit.publish(&source_exchange, "orders.created", b"{\"order\":1}", BasicProperties::default()).await;
    let (d1, d2) = (queue("DEST_QUEUE_1"), queue("DEST_QUEUE_2"));
    eventually("a copy in both destination queues", || smq.messages(&d1).len() == 1 && smq.messages(&d2).len() == 1)
        .await;
    for q in [&d1, &d2] {
        let doc = simplemq::document(&smq.messages(q)[0].content);
        assert_eq!(doc["headers"]["rabbitmq.exchange"], source_exchange.as_str());
        assert_eq!(doc["headers"]["rabbitmq.routing_key"], "orders.created");
        assert_eq!(doc["body"], "{\"order\":1}");
    }

    // SimpleMQ -> RabbitMQ, to the exchange and key the message names.
    smq.put(
        &queue("INBOUND_QUEUE"),
        &simplemq::content(&serde_json::json!({
            "headers": { "rabbitmq.exchange": routed_exchange, "rabbitmq.routing_key": "orders.created" },
            "body": "{\"order\":2}"
        })),
    );
    let got = rabbit.get(&routed_queue, WAIT).await.expect("routed by the message's headers");
    assert_eq!(got.delivery.data, b"{\"order\":2}");

    // SimpleMQ -> both fan-out queues.
    smq.put(&queue("SMQ_SOURCE_QUEUE"), &simplemq::content(&serde_json::json!({ "body": "fanned" })));
    let (f1, f2) = (queue("FANOUT_QUEUE_1"), queue("FANOUT_QUEUE_2"));
    eventually("a copy in both fan-out queues", || smq.messages(&f1).len() == 1 && smq.messages(&f2).len() == 1).await;
    assert_eq!(simplemq::document(&smq.messages(&f1)[0].content)["body"], "fanned");
    eventually("the sources emptied", || {
        smq.messages(&queue("INBOUND_QUEUE")).is_empty() && smq.messages(&queue("SMQ_SOURCE_QUEUE")).is_empty()
    })
    .await;

    assert!(daemon.terminate().success());
    assert_eq!(rabbit.depth(&source_queue).await, 0, "acknowledged once both queues took it");
    for q in [&source_queue, &routed_queue] {
        rabbit.delete_queue(q).await;
    }
    for x in [&source_exchange, &routed_exchange] {
        rabbit.delete_exchange(x).await;
    }
}

#[test]
fn a_missing_variable_and_secret_are_refused_by_name() {
    let ws = Workspace::with_plugins(&[]);
    std::fs::write(ws.path().join("bridges.jsonnet"), BRIDGES).expect("write");
    let out = ws.ferry(&["validate", "-c", "bridges.jsonnet"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("must_env: ") && said.contains(" is not set"), "{said}");
    std::fs::write(
        ws.path().join("secret.jsonnet"),
        "local secret = std.native('secret'); { bridges: [{ from: { simplemq: { queue: 'q', api_key: secret('v', 'n') } }, to: [] }] }",
    )
    .expect("write");
    let out = ws.ferry(&["validate", "-c", "secret.jsonnet"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("Secret Manager"), "{said}");
}
