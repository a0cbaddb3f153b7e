//! TLS through the daemon: an `mqtts://` receiver on a TLS-only Mosquitto,
//! `amqps://` AMQP 0-9-1 and AMQP 1.0 senders and an AMQP 1.0 receiver on a
//! RabbitMQ TLS listener, all verified against the test's own CA through
//! `tls.ca_file`.

use std::time::Duration;

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::mqtt::{PrivateMosquitto, SECOND_PORT, TestMqtt};
use ferry_tests::rabbit::{PrivateRabbit, Rabbit};
use ferry_tests::tls::TestCerts;
use ferry_tests::unique;

#[tokio::test(flavor = "multi_thread")]
async fn mqtts_in_amqps_out() {
    let certs = TestCerts::generate();
    let (ca, cert, key) = (certs.ca(), certs.server_cert(), certs.server_key());
    // The first listener is TLS; a plain one for the test's publisher, on
    // a second port the harness chooses and checks.
    let mosquitto = PrivateMosquitto::start_with(&format!(
        "cafile {}\ncertfile {}\nkeyfile {}\nlistener {SECOND_PORT} 127.0.0.1\n",
        ca.display(),
        cert.display(),
        key.display()
    ))
    .await;
    let plain = mosquitto.second_port.expect("the plain listener");
    let rabbit = PrivateRabbit::start_with(&format!(
        "listeners.ssl.default = {SECOND_PORT}\nssl_options.cacertfile = {}\nssl_options.certfile = {}\nssl_options.keyfile = {}\nssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n",
        ca.display(),
        cert.display(),
        key.display()
        ),
        "",
    )
    .await;
    let tls_port = rabbit.second_port.expect("the TLS listener");
    let (dst, dst10, dst2) = (unique("tls-dst"), unique("tls-dst10"), unique("tls-dst2"));
    let client = Rabbit::connect_to(&rabbit.url091()).await;
    for q in [&dst, &dst10, &dst2] {
        client.declare_queue(q).await;
    }

    let topic = unique("tls/in");
    let ws = Workspace::with_plugins(&[]);
    ws.config(&format!(
        r#"
[receivers.in]
type = "mqtt"
url = "mqtts://127.0.0.1:{mqtt_tls}"
client_id = "{rid}"
topics = ["{topic}/#"]
tls = {{ ca_file = "{ca}" }}

[senders.out]
type = "amqp091"
url = "amqps://guest:guest@127.0.0.1:{tls_port}/%2f"
tls = {{ ca_file = "{ca}" }}

[senders.out10]
type = "amqp10"
url = "amqps://guest:guest@127.0.0.1:{tls_port}"
address = "/amq/queue/{dst10}"
tls = {{ ca_file = "{ca}" }}

[receivers.in10]
type = "amqp10"
url = "amqps://guest:guest@127.0.0.1:{tls_port}"
address = "/amq/queue/{dst10}"
tls = {{ ca_file = "{ca}" }}

[[routes]]
id = "tls"
receiver = "in"
dispatch_mode = "fan_out"

[[routes.bindings]]
sender = "out"
address = "{dst}"

[[routes.bindings]]
sender = "out10"

[[routes]]
id = "tls10"
receiver = "in10"

[[routes.bindings]]
sender = "out"
address = "{dst2}"
"#,
        mqtt_tls = mosquitto.port,
        rid = unique("ferry-tls"),
        ca = ca.display(),
    ));
    let daemon = Daemon::start(&ws, 4);
    let publisher = TestMqtt::connect(&format!("mqtt://127.0.0.1:{plain}")).await;
    publisher.publish_with(&format!("{topic}/a"), "over tls", &[("k", "v")]).await;
    let got = client.get(&dst, Duration::from_secs(20)).await.expect("crossed both TLS connections");
    assert_eq!(got.delivery.data, b"over tls");
    // MQTT -> AMQP 1.0 sender -> queue -> AMQP 1.0 receiver -> AMQP 0-9-1.
    let got = client.get(&dst2, Duration::from_secs(20)).await.expect("crossed the AMQP 1.0 TLS links");
    assert_eq!(got.delivery.data, b"over tls");
    assert!(daemon.terminate().success());
    drop(certs);
}
