//! RabbitMQ for tests: the shared broker on 127.0.0.1:5672 (AMQP 0-9-1, and
//! AMQP 1.0 through the `rabbitmq_amqp1_0` plugin), plain clients for both
//! protocols, and a private RabbitMQ node that a test can restart.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fe2o3_amqp::types::messaging::{Body, Message, Outcome};
use fe2o3_amqp::types::primitives::Value;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

/// The shared broker's AMQP 0-9-1 URL.
pub const URL091: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// The shared broker's AMQP 1.0 URL.
pub const URL10: &str = "amqp://guest:guest@127.0.0.1:5672";

/// An AMQP 0-9-1 client with one confirm-mode channel.
pub struct Rabbit {
    pub connection: Connection,
    pub channel: Channel,
}

impl Rabbit {
    /// Connects to the shared broker.
    pub async fn connect() -> Self {
        Self::connect_to(URL091).await
    }

    pub async fn connect_to(url: &str) -> Self {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ at {url} (is it running?): {e}"));
        let channel = connection.create_channel().await.expect("channel");
        channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm mode");
        Self { connection, channel }
    }

    /// Declares a durable queue.
    pub async fn declare_queue(&self, name: &str) {
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        self.channel.queue_declare(name.into(), options, FieldTable::default()).await.expect("queue.declare");
    }

    /// Declares a durable queue with arguments (e.g. `x-dead-letter-exchange`).
    pub async fn declare_queue_with(&self, name: &str, arguments: FieldTable) {
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        self.channel.queue_declare(name.into(), options, arguments).await.expect("queue.declare");
    }

    pub async fn delete_queue(&self, name: &str) {
        let _ = self.channel.queue_delete(name.into(), QueueDeleteOptions::default()).await;
    }

    /// Declares a durable exchange (as ferry does).
    pub async fn declare_exchange(&self, name: &str, kind: ExchangeKind) {
        let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
        self.channel
            .exchange_declare(name.into(), kind, options, FieldTable::default())
            .await
            .expect("exchange.declare");
    }

    /// Binds `queue` to `exchange` with `key`.
    pub async fn bind(&self, queue: &str, exchange: &str, key: &str) {
        self.channel
            .queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), FieldTable::default())
            .await
            .expect("queue.bind");
    }

    pub async fn delete_exchange(&self, name: &str) {
        let _ = self.channel.exchange_delete(name.into(), ExchangeDeleteOptions::default()).await;
    }

    /// Publishes and waits for the broker's confirm.
    pub async fn publish(&self, exchange: &str, routing_key: &str, body: &[u8], properties: BasicProperties) {
        let confirm = self
            .channel
            .basic_publish(exchange.into(), routing_key.into(), BasicPublishOptions::default(), body, properties)
            .await
            .expect("basic.publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack(), "broker did not confirm the publish");
    }

    /// Publishes every body to `queue` (the default exchange) as a
    /// persistent message whose `message_id` is the body, all under way at
    /// once, and waits for every confirm.
    pub async fn publish_persistent(&self, queue: &str, bodies: impl IntoIterator<Item = String>) {
        let mut confirms = Vec::new();
        for body in bodies {
            let properties = BasicProperties::default().with_delivery_mode(2).with_message_id(body.as_str().into());
            let confirm = self
                .channel
                .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body.as_bytes(), properties)
                .await
                .expect("basic.publish");
            confirms.push(confirm);
        }
        for c in confirms {
            assert!(c.await.expect("confirm").is_ack(), "broker did not confirm a publish");
        }
    }

    /// Messages ready in `queue`.
    pub async fn depth(&self, queue: &str) -> u32 {
        let options = QueueDeclareOptions { passive: true, ..Default::default() };
        self.channel
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .expect("queue exists")
            .message_count()
    }

    /// Waits until `queue` exists and has a consumer (a receiver finished
    /// declaring and binding it). Probes on channels of their own, since a
    /// failed passive declare closes its channel.
    pub async fn wait_for_consumer(&self, queue: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let channel = self.connection.create_channel().await.expect("channel");
            let options = QueueDeclareOptions { passive: true, ..Default::default() };
            if let Ok(q) = channel.queue_declare(queue.into(), options, FieldTable::default()).await {
                let _ = channel.close(200, "probe".into()).await;
                if q.consumer_count() > 0 {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "no consumer on {queue} within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes one message from `queue` (acked), waiting up to `timeout`.
    pub async fn get(&self, queue: &str, timeout: Duration) -> Option<lapin::message::BasicGetMessage> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("basic.get");
            if got.is_some() || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Consumes until `n` messages arrived or `timeout` passed (acking each).
    pub async fn collect(&self, queue: &str, n: usize, timeout: Duration) -> Vec<lapin::message::Delivery> {
        let channel = self.connection.create_channel().await.expect("channel");
        let mut consumer = channel
            .basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await
            .expect("basic.consume");
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        while out.len() < n {
            match tokio::time::timeout_at(deadline, consumer.next()).await {
                Ok(Some(Ok(d))) => {
                    d.ack(BasicAckOptions::default()).await.expect("ack");
                    out.push(d);
                }
                _ => break,
            }
        }
        let _ = channel.close(200, "done".into()).await;
        out
    }
}

/// A plain AMQP 1.0 client: one connection and session.
pub struct Amqp10Client {
    connection: fe2o3_amqp::connection::ConnectionHandle<()>,
    session: fe2o3_amqp::session::SessionHandle<()>,
}

/// How long one step of the test's AMQP 1.0 client (open, attach, accept,
/// detach, close) may take: a step that never answers fails the test, or
/// is given up at cleanup, instead of hanging the run (seen once, after
/// fourteen runs that passed).
const AMQP10_STEP: Duration = Duration::from_secs(15);

impl Amqp10Client {
    pub async fn connect(url: &str) -> Self {
        let opening = fe2o3_amqp::Connection::open(crate::unique("ferry-test"), url);
        let mut connection = tokio::time::timeout(AMQP10_STEP, opening)
            .await
            .unwrap_or_else(|_| panic!("AMQP 1.0 at {url}: no open within {AMQP10_STEP:?}"))
            .unwrap_or_else(|e| panic!("AMQP 1.0 at {url} (is rabbitmq_amqp1_0 enabled?): {e}"));
        let session = tokio::time::timeout(AMQP10_STEP, fe2o3_amqp::Session::begin(&mut connection))
            .await
            .expect("session begun in time")
            .expect("session");
        Self { connection, session }
    }

    /// Sends one message to `address` and returns the broker's outcome.
    pub async fn send<T: fe2o3_amqp::types::messaging::SerializableBody>(
        &mut self,
        address: &str,
        message: Message<T>,
    ) -> Outcome {
        let mut sender = fe2o3_amqp::Sender::attach(&mut self.session, crate::unique("test-sender"), address)
            .await
            .expect("attach sender");
        let outcome = sender.send(message).await.expect("send");
        let _ = sender.detach().await;
        outcome
    }

    /// Receives up to `n` messages from `address` (accepting each) within
    /// `timeout`.
    pub async fn receive(&mut self, address: &str, n: usize, timeout: Duration) -> Vec<Message<Body<Value>>> {
        let attaching = fe2o3_amqp::Receiver::attach(&mut self.session, crate::unique("test-receiver"), address);
        let mut receiver = tokio::time::timeout(AMQP10_STEP, attaching)
            .await
            .expect("receiver attached in time")
            .expect("attach receiver");
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        while out.len() < n {
            match tokio::time::timeout_at(deadline, receiver.recv::<Body<Value>>()).await {
                Ok(Ok(d)) => {
                    tokio::time::timeout(AMQP10_STEP, receiver.accept(&d))
                        .await
                        .expect("accepted in time")
                        .expect("accept");
                    out.push(d.into_message());
                }
                _ => break,
            }
        }
        let _ = tokio::time::timeout(AMQP10_STEP, receiver.detach()).await;
        out
    }

    /// Ends the session and closes the connection; a broker that does not
    /// answer within [`AMQP10_STEP`] is left to drop them.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(AMQP10_STEP, self.session.end()).await;
        let _ = tokio::time::timeout(AMQP10_STEP, self.connection.close()).await;
    }
}

/// A RabbitMQ node of the test's own (its own port, data directory and
/// Erlang cookie), for tests that stop and restart the broker. Messages
/// in durable queues survive a restart.
pub struct PrivateRabbit {
    pub port: u16,
    /// The second listener's port, when the configuration names
    /// [`crate::mqtt::SECOND_PORT`] (a TLS listener, say).
    pub second_port: Option<u16>,
    node: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The ports while the node is stopped, kept for its next start.
    held: crate::ports::Held,
}

impl PrivateRabbit {
    /// Starts one with the AMQP 1.0 plugin and waits until it is ready.
    pub async fn start() -> Self {
        Self::start_with("", "").await
    }

    /// Starts one with extra `rabbitmq.conf` lines (e.g. a TLS listener)
    /// and, unless empty, an `advanced.config` (Erlang terms, for settings
    /// `rabbitmq.conf` has no key for).
    /// A node that does not come up is given up and another started on
    /// other ports (its distribution port, the one above, may have been
    /// taken meanwhile: CI saw a first start time out once).
    pub async fn start_with(conf: &str, advanced: &str) -> Self {
        for attempt in 1..=3 {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join("enabled_plugins"), "[rabbitmq_amqp1_0].\n").expect("plugins file");
            let second_port = conf.contains(crate::mqtt::SECOND_PORT).then(Self::node_port);
            let conf = conf.replace(crate::mqtt::SECOND_PORT, &second_port.unwrap_or_default().to_string());
            std::fs::write(dir.path().join("rabbitmq.conf"), conf).expect("rabbitmq.conf");
            if !advanced.is_empty() {
                std::fs::write(dir.path().join("advanced.config"), advanced).expect("advanced.config");
            }
            let node = format!("{}@localhost", crate::unique("ferrytest"));
            let mut r = Self {
                port: Self::node_port(),
                second_port,
                node,
                dir,
                child: None,
                held: crate::ports::Held::default(),
            };
            if r.boot(Duration::from_secs(60)).await {
                return r;
            }
            eprintln!("private RabbitMQ {} did not start on port {} (attempt {attempt} of 3)", r.node, r.port);
            r.stop().await;
        }
        panic!("no private RabbitMQ started in three attempts");
    }

    /// A port for a node (or one of its listeners), clear of the range
    /// rabbitmqctl takes (35672-35682) and with room for the distribution
    /// port above it; [`crate::ports::broker_port`], so a start checks that
    /// the node is what listens there.
    pub fn node_port() -> u16 {
        loop {
            let port = crate::ports::broker_port();
            if !(35_000..36_000).contains(&port) && port < 64_000 {
                return port;
            }
        }
    }

    pub fn url091(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    pub fn url10(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.port)
    }

    fn bin(name: &str) -> PathBuf {
        PathBuf::from("/usr/lib/rabbitmq/bin").join(name)
    }

    fn command(&self, program: &str) -> Command {
        let d = self.dir.path();
        let mut c = Command::new(Self::bin(program));
        c.env("HOME", d)
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", (self.port + 1).to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_PID_FILE", d.join("pid"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"));
        c
    }

    /// (Re)starts the node on the same port and data directory. Its ports
    /// were held while it was stopped; a node a loaded machine is slow to
    /// bring up is given two minutes.
    pub async fn restart(&mut self) {
        if !self.boot(Duration::from_secs(120)).await {
            panic!(
                "private RabbitMQ {} did not start again on port {}; its log ends:\n{}",
                self.node,
                self.port,
                self.log_tail()
            );
        }
    }

    /// The last lines of the node's logs, for a failure message.
    fn log_tail(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path().join("log")).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("== {}\n", entry.path().display()));
            for line in &lines[lines.len().saturating_sub(30)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Stops the node if it runs, starts it, and waits (`patience` at
    /// most) until it takes connections: whether it does.
    async fn boot(&mut self, patience: Duration) -> bool {
        self.stop().await;
        // Its ports go back to it just before it binds them.
        self.held = crate::ports::Held::default();
        let child = self
            .command("rabbitmq-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rabbitmq-server starts (is RabbitMQ installed?)");
        self.child = Some(child);
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            let ready = self
                .command("rabbitmqctl")
                .arg("-n")
                .arg(&self.node)
                .arg("wait")
                .arg(self.dir.path().join("pid"))
                .arg("--timeout")
                .arg("30")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            // The node itself must be what listens: another process may
            // have taken the port since it was chosen.
            let pid = std::fs::read_to_string(self.dir.path().join("pid")).ok().and_then(|p| p.trim().parse().ok());
            if let (true, Some(pid)) = (ready, pid)
                && crate::ports::listens(pid, self.port)
                && self.second_port.is_none_or(|p| crate::ports::listens(pid, p))
            {
                crate::leftovers::record(pid);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        false
    }

    /// Stops the node cleanly (`rabbitmqctl stop`, which flushes queues to
    /// disk) and waits for it to exit; kills it if that fails.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = std::fs::read_to_string(self.dir.path().join("pid")).ok().and_then(|p| p.trim().parse::<i32>().ok());
        // Bounded: a node that does not answer is killed below.
        let mut ctl = self.command("rabbitmqctl");
        ctl.arg("-n").arg(&self.node).arg("stop").stdout(Stdio::null()).stderr(Stdio::null());
        if let Ok(mut ctl) = tokio::process::Command::from(ctl).kill_on_drop(true).spawn()
            && tokio::time::timeout(Duration::from_secs(60), ctl.wait()).await.is_err()
        {
            let _ = ctl.kill().await;
        }
        if let Some(pid) = pid {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && std::path::Path::new(&format!("/proc/{pid}")).exists() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            crate::leftovers::forget(pid.unsigned_abs());
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.dir.path().join("pid"));
        self.held = crate::ports::Held::ports([self.port, self.port + 1].into_iter().chain(self.second_port));
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.dir.path().join("pid")).ok();
        if let Some(pid) = pid {
            let _ = Command::new("kill").arg("-KILL").arg(pid.trim()).status();
            if let Ok(pid) = pid.trim().parse() {
                crate::leftovers::forget(pid);
            }
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
