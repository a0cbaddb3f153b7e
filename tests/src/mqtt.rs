//! MQTT 5 helpers for tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::mpsc;

/// The shared broker the tests use (Mosquitto on 1883 unless
/// `FERRY_TEST_MQTT_URL` says otherwise).
pub fn broker_url() -> String {
    std::env::var("FERRY_TEST_MQTT_URL").unwrap_or_else(|_| "mqtt://127.0.0.1:1883".to_owned())
}

/// A one-route daemon config: route `r1` from MQTT `<src>/#` through
/// `processors` (`[[routes.processors]]` tables) to an MQTT binding at
/// `dst_address`, with short reconnect and retry delays. `extra_route` and
/// `sender_extra` add lines to the route and the sender.
pub fn route_config(
    source_url: &str,
    src: &str,
    target_url: &str,
    dst_address: &str,
    processors: &str,
    extra_route: &str,
    sender_extra: &str,
) -> String {
    format!(
        r#"
[receivers.in]
type = "mqtt"
url = "{source_url}"
client_id = "{rid}"
topics = ["{src}/#"]
reconnect_initial_ms = 100
reconnect_max_ms = 500

[senders.out]
type = "mqtt"
url = "{target_url}"
client_id = "{sid}"
default_topic = "unused"
{sender_extra}

[[routes]]
id = "r1"
receiver = "in"
{extra_route}
[routes.backoff]
initial_ms = 50
max_ms = 500

{processors}

[[routes.bindings]]
sender = "out"
address = "{dst_address}"
"#,
        rid = crate::unique("ferry-in"),
        sid = crate::unique("ferry-out"),
    )
}

fn host_port(url: &str) -> (String, u16) {
    let rest = url.trim_start_matches("mqtt://");
    let hostport = rest.rsplit('@').next().unwrap_or(rest);
    match hostport.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.parse().unwrap_or(1883)),
        None => (hostport.to_owned(), 1883),
    }
}

/// A test client: publishes, and collects what its subscriptions deliver.
pub struct TestMqtt {
    pub client: AsyncClient,
    received: mpsc::UnboundedReceiver<Publish>,
    connected: mpsc::UnboundedReceiver<()>,
    task: tokio::task::JoinHandle<()>,
}

impl TestMqtt {
    /// Connects (clean session) and waits for the CONNACK.
    pub async fn connect(url: &str) -> Self {
        let (host, port) = host_port(url);
        let mut options = MqttOptions::new(crate::unique("test"), host, port);
        options.set_max_packet_size(Some(64 << 20));
        options.set_keep_alive(Duration::from_secs(30));
        let (client, mut events) = AsyncClient::new(options, 1000);
        let (tx, received) = mpsc::unbounded_channel();
        let (ctx, mut connected) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let _ = tx.send(p);
                    }
                    Ok(Event::Incoming(Packet::ConnAck(_) | Packet::SubAck(_))) => {
                        let _ = ctx.send(());
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), connected.recv()).await.expect("test client connects");
        Self { client, received, connected, task }
    }

    /// Subscribes at QoS 1 and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str) {
        while self.connected.try_recv().is_ok() {}
        self.client.subscribe(filter, QoS::AtLeastOnce).await.expect("subscribe");
        tokio::time::timeout(Duration::from_secs(10), self.connected.recv()).await.expect("suback");
    }

    /// Publishes with properties at QoS 1.
    pub async fn publish(&self, topic: &str, payload: impl Into<Bytes>, properties: PublishProperties) {
        self.client
            .publish_with_properties(topic, QoS::AtLeastOnce, false, payload.into(), properties)
            .await
            .expect("publish");
    }

    /// Publishes with only user properties.
    pub async fn publish_with(&self, topic: &str, payload: &str, user: &[(&str, &str)]) {
        let props = PublishProperties {
            user_properties: user.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..Default::default()
        };
        self.publish(topic, payload.to_owned(), props).await;
    }

    /// The next delivered publish, or `None` after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Publish> {
        tokio::time::timeout(timeout, self.received.recv()).await.ok().flatten()
    }

    /// The next `n` publishes, waiting up to [`crate::PATIENCE`] in all;
    /// panics with how many came when they do not.
    pub async fn collect(&mut self, n: usize) -> Vec<Publish> {
        let deadline = tokio::time::Instant::now() + crate::PATIENCE;
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match tokio::time::timeout_at(deadline, self.received.recv()).await {
                Ok(Some(p)) => got.push(p),
                _ => panic!("{} of {n} publishes arrived within {:?}", got.len(), crate::PATIENCE),
            }
        }
        got
    }

    /// Everything delivered within `window`.
    pub async fn drain(&mut self, window: Duration) -> Vec<Publish> {
        let mut all = Vec::new();
        let deadline = tokio::time::Instant::now() + window;
        while let Ok(Some(p)) = tokio::time::timeout_at(deadline, self.received.recv()).await {
            all.push(p);
        }
        all
    }
}

impl Drop for TestMqtt {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A user property's value on a received publish (last one wins).
pub fn user_property<'a>(p: &'a Publish, name: &str) -> Option<&'a str> {
    p.properties.as_ref()?.user_properties.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The topic of a received publish as text.
pub fn topic(p: &Publish) -> String {
    String::from_utf8_lossy(&p.topic).into_owned()
}

/// A private Mosquitto on its own port, for tests that stop a broker.
/// Stands for a second listener's port in a private broker's extra
/// configuration; the harness chooses it and checks the broker holds it.
pub const SECOND_PORT: &str = "{second_port}";

pub struct PrivateMosquitto {
    pub port: u16,
    /// The second listener's port, when the extra lines name
    /// [`SECOND_PORT`].
    pub second_port: Option<u16>,
    extra_conf: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The ports while it is stopped, kept for its next start.
    held: crate::ports::Held,
}

impl PrivateMosquitto {
    /// Starts one on a free port and waits until it accepts connections.
    pub async fn start() -> Self {
        Self::start_with("").await
    }

    /// Starts one with extra `mosquitto.conf` lines. Where they say
    /// [`SECOND_PORT`] (a second listener), the harness puts a port of its
    /// choosing and checks that this broker listens there too.
    pub async fn start_with(extra_conf: &str) -> Self {
        let second = || extra_conf.contains(SECOND_PORT).then(crate::ports::broker_port);
        let mut m = Self {
            port: crate::ports::broker_port(),
            second_port: second(),
            extra_conf: extra_conf.to_owned(),
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
            held: crate::ports::Held::default(),
        };
        // The port was free when chosen; another process may have taken it
        // since, and then another one is tried.
        for _ in 0..5 {
            if m.try_start().await {
                return m;
            }
            m.stop();
            m.port = crate::ports::broker_port();
            m.second_port = second();
        }
        panic!("private mosquitto did not start on any of five ports");
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The broker's process id while it runs (for CPU readings).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn binary() -> PathBuf {
        for p in ["/usr/sbin/mosquitto", "/usr/bin/mosquitto", "/usr/local/sbin/mosquitto"] {
            if std::path::Path::new(p).exists() {
                return PathBuf::from(p);
            }
        }
        PathBuf::from("mosquitto")
    }

    /// (Re)starts it on the same port (held for it while it was stopped).
    pub async fn restart(&mut self) {
        if !self.try_start().await {
            panic!("private mosquitto did not listen on port {} again (taken by another process?)", self.port);
        }
    }

    /// Starts it on its port; whether it listens there.
    async fn try_start(&mut self) -> bool {
        self.stop();
        self.held = crate::ports::Held::default();
        let conf = self.dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {} 127.0.0.1\nallow_anonymous true\npersistence false\n{}\n",
                self.port,
                self.extra_conf.replace(SECOND_PORT, &self.second_port.unwrap_or_default().to_string())
            ),
        )
        .expect("write conf");
        let child = Command::new(Self::binary())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto starts (is it installed?)");
        crate::leftovers::record(child.id());
        let ports: Vec<u16> = [self.port].into_iter().chain(self.second_port).collect();
        let child = self.child.insert(child);
        crate::ports::until_listening(child, &ports, Duration::from_secs(5)).await
    }

    /// Stops it (SIGKILL) and waits for the port to close.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            self.held = crate::ports::kill_and_hold(child, [self.port].into_iter().chain(self.second_port));
        }
    }
}

impl Drop for PrivateMosquitto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Two MQTT routes through one sender `out`: `a` from `a_in` to
/// `{out}/{a_address}` and `b` from `b_in` to `{out}/b`, with an admin
/// server on `admin` (`extra_admin`: more lines of `[admin]`).
pub struct TwoRoutes {
    pub a_in: String,
    pub b_in: String,
    pub out: String,
    pub client_a: String,
    pub client_b: String,
    pub client_out: String,
    pub admin: String,
}

impl TwoRoutes {
    pub fn config(&self, a_address: &str, extra_admin: &str) -> String {
        let n = self;
        format!(
            r#"
[admin]
listen = "{admin}"
{extra_admin}

[receivers.in-a]
type = "mqtt"
url = "{url}"
client_id = "{client_a}"
topics = ["{a_in}"]

[receivers.in-b]
type = "mqtt"
url = "{url}"
client_id = "{client_b}"
topics = ["{b_in}"]

[senders.out]
type = "mqtt"
url = "{url}"
client_id = "{client_out}"
default_topic = "unused"

[[routes]]
id = "a"
receiver = "in-a"
[[routes.bindings]]
sender = "out"
address = "{out}/{a_address}"

[[routes]]
id = "b"
receiver = "in-b"
[[routes.bindings]]
sender = "out"
address = "{out}/b"
"#,
            url = broker_url(),
            admin = n.admin,
            client_a = n.client_a,
            client_b = n.client_b,
            client_out = n.client_out,
            a_in = n.a_in,
            b_in = n.b_in,
            out = n.out,
        )
    }
}
