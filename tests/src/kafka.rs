//! Kafka for the tests: a private broker process of the test's own (tansu,
//! a Kafka-API broker, on its own port; `scripts/provision kafka` builds
//! it once into a cache outside the clone) and a client, rdkafka as ferry
//! uses it, to make topics, write records and read records and group
//! offsets back.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferry_transport_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use ferry_transport_kafka::rdkafka::client::DefaultClientContext;
use ferry_transport_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use ferry_transport_kafka::rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use ferry_transport_kafka::rdkafka::mocking::MockCluster;
use ferry_transport_kafka::rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord};
use ferry_transport_kafka::rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Where `scripts/provision kafka` puts the broker, unless `FERRY_TANSU`
/// names another.
const CACHED: &str = "/var/tmp/ferry-tools/bin/tansu";

/// The longest any one request of a test's client waits.
const PATIENCE: Duration = Duration::from_secs(30);

/// A Kafka-API broker of the test's own, stopped on drop. Its storage is
/// in memory (a restart starts empty) unless it was started with
/// [`PrivateKafka::start_persistent`].
pub struct PrivateKafka {
    pub port: u16,
    /// The directory of its SQLite storage, when it keeps its data across
    /// a restart.
    storage: Option<tempfile::TempDir>,
    /// Whether clients must authenticate (SASL).
    authentication: bool,
    /// The port clients are told to connect to, when not `port` (a TLS
    /// front's).
    advertised: Option<u16>,
    child: Option<Child>,
    held: crate::ports::Held,
    /// The TLS front clients reach it through, if any.
    front: Option<crate::tcp_proxy::TlsFront>,
}

impl PrivateKafka {
    fn binary() -> PathBuf {
        if let Some(path) = std::env::var_os("FERRY_TANSU") {
            return PathBuf::from(path);
        }
        if std::path::Path::new(CACHED).exists() {
            return PathBuf::from(CACHED);
        }
        PathBuf::from("tansu")
    }

    /// Starts one on a free port and waits until it listens; another port
    /// is tried when one was taken meanwhile.
    pub async fn start() -> Self {
        Self::start_as(None).await
    }

    /// One that clients reach over TLS only, through a TLS front of the
    /// test's own with the server certificate of `certs` (tansu 0.6 cannot
    /// be given a certificate and its key on its command line), which it
    /// advertises as its address.
    pub async fn start_behind_tls(certs: &crate::tls::TestCerts) -> Self {
        Self::start_as(Some(certs)).await
    }

    /// One whose topics, records, group offsets and SCRAM users are kept
    /// in a SQLite file of its own, so [`PrivateKafka::restart`] finds them
    /// again.
    pub async fn start_persistent() -> Self {
        let mut k = Self::unstarted();
        k.storage = Some(tempfile::tempdir().expect("a directory for the broker's storage"));
        k.start_here(None).await;
        k
    }

    fn unstarted() -> Self {
        Self {
            port: crate::ports::broker_port(),
            storage: None,
            authentication: false,
            advertised: None,
            child: None,
            held: crate::ports::Held::default(),
            front: None,
        }
    }

    async fn start_as(tls: Option<&crate::tls::TestCerts>) -> Self {
        let mut k = Self::unstarted();
        k.start_here(tls).await;
        k
    }

    async fn start_here(&mut self, tls: Option<&crate::tls::TestCerts>) {
        let k = self;
        for _ in 0..5 {
            if let Some(certs) = tls {
                let target = std::net::SocketAddr::from(([127, 0, 0, 1], k.port));
                let front = crate::tcp_proxy::TlsFront::start(target, certs).await;
                k.advertised = Some(front.port);
                k.front = Some(front);
            }
            if k.try_start().await {
                return;
            }
            k.stop();
            k.port = crate::ports::broker_port();
        }
        panic!("private Kafka broker (tansu) did not start on any of five ports");
    }

    /// `127.0.0.1:<port>` (the TLS front's, when it has one), for `brokers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.advertised.unwrap_or(self.port))
    }

    /// The broker's process id while it runs (the bench reads its CPU).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    async fn try_start(&mut self) -> bool {
        self.stop();
        self.held = crate::ports::Held::default();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://127.0.0.1:{}", self.advertised.unwrap_or(self.port));
        let mut command = Command::new(Self::binary());
        command.args(["broker", "--listener-url", &url, "--advertised-listener-url", &advertised]);
        match &self.storage {
            // The file is named relative to the working directory.
            Some(dir) => command.current_dir(dir.path()).args(["--storage-engine", "sqlite:///tansu.db"]),
            None => command.args(["--storage-engine", "memory://tansu/"]),
        };
        if self.authentication {
            command.arg("--authentication");
        }
        let child = command
            .arg("--silent")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Kafka broker starts (is tansu built? scripts/provision kafka)");
        crate::leftovers::record(child.id());
        let child = self.child.insert(child);
        crate::ports::until_listening(child, &[self.port], Duration::from_secs(20)).await
    }

    /// Stops it (SIGKILL) and holds its port.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            self.held = crate::ports::kill_and_hold(child, [self.port]);
        }
    }

    /// Adds a SCRAM user (`mechanism` as tansu names it: `scram256` or
    /// `scram512`), through the broker, which must not require
    /// authentication yet; only a persistent broker keeps it.
    pub fn create_user(&self, name: &str, password: &str, mechanism: &str) {
        let broker = format!("tcp://127.0.0.1:{}", self.port);
        let out = Command::new(Self::binary())
            .args(["user", "create", "--broker", &broker, "--mechanism", mechanism, name, password])
            .output()
            .expect("tansu user create runs");
        assert!(out.status.success(), "tansu user create {name}: {out:?}");
    }

    /// Whether clients must authenticate from the next (re)start on.
    pub fn require_authentication(&mut self, on: bool) {
        self.authentication = on;
    }

    /// Starts it again on the same port (empty, unless it is persistent).
    pub async fn restart(&mut self) {
        if !self.try_start().await {
            panic!("private Kafka broker did not listen on port {} again", self.port);
        }
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        self.stop();
    }
}

/// librdkafka's mock cluster: a Kafka-protocol cluster that this test
/// process serves on 127.0.0.1 (a daemon reaches it over TCP like any
/// broker). Its group coordinator moves partitions between members and
/// expires silent ones as Kafka does, which the tests of rebalances and of
/// a killed member need; tansu 0.6 gave a second member of a group no
/// partitions (see the Kafka page).
pub struct MockKafka {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl MockKafka {
    pub fn start() -> Self {
        Self { cluster: MockCluster::new(1).expect("librdkafka's mock cluster") }
    }

    /// Its bootstrap address, for `brokers`.
    pub fn brokers(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// Makes `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.cluster.create_topic(topic, partitions, 1).unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
    }

    /// Takes the cluster's one broker down (its connections closed, new
    /// ones refused; its data kept), or (`false`) brings it back.
    pub fn set_up(&self, up: bool) {
        let done = if up { self.cluster.broker_up(1) } else { self.cluster.broker_down(1) };
        done.unwrap_or_else(|e| panic!("broker up={up}: {e}"));
    }
}

/// One record as the tests read it back.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    fn of(m: &OwnedMessage) -> Self {
        Self {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            payload: m.payload().unwrap_or_default().to_vec(),
            headers: m
                .headers()
                .map(|h| h.iter().map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec())).collect())
                .unwrap_or_default(),
        }
    }

    /// The first header `name`, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// The key as text.
    pub fn key_text(&self) -> Option<String> {
        self.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned())
    }

    /// The payload as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

/// A consumer in `group` (committing nothing itself) and every partition
/// of `topic`, each at `offset`.
fn consumer_of(base: &ClientConfig, group: &str, topic: &str, offset: Offset) -> (BaseConsumer, TopicPartitionList) {
    let consumer: BaseConsumer =
        base.clone().set("group.id", group).set("enable.auto.commit", "false").create().expect("the test's consumer");
    let metadata = consumer.fetch_metadata(Some(topic), PATIENCE).expect("metadata");
    let mut list = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            list.add_partition_offset(topic, p.id(), offset).expect("partition");
        }
    }
    (consumer, list)
}

/// A test's Kafka client.
pub struct Kafka {
    /// How every client of the test reaches the cluster (brokers, and TLS
    /// or SASL settings when it needs them).
    base: ClientConfig,
    producer: FutureProducer,
}

impl Kafka {
    pub fn new(brokers: &str) -> Self {
        Self::with(ClientConfig::new().set("bootstrap.servers", brokers).clone())
    }

    /// A client whose every connection uses `base`'s settings.
    pub fn with(base: ClientConfig) -> Self {
        let producer = base
            .clone()
            .set("message.timeout.ms", PATIENCE.as_millis().to_string())
            .create()
            .expect("the test's producer");
        Self { base, producer }
    }

    /// Makes `topic` with `partitions` partitions and waits until the
    /// cluster's metadata shows them all.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.base.create().expect("admin client");
        let options = AdminOptions::new().operation_timeout(Some(PATIENCE)).request_timeout(Some(PATIENCE));
        let results = admin
            .create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &options)
            .await
            .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
        for r in results {
            if let Err((name, e)) = r {
                panic!("create topic {name}: {e}");
            }
        }
        let (base, topic) = (self.base.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let client: BaseConsumer = base.create().expect("client");
            let deadline = Instant::now() + PATIENCE;
            loop {
                let seen = client
                    .fetch_metadata(Some(&topic), Duration::from_secs(5))
                    .ok()
                    .and_then(|m| m.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len()));
                if seen == Some(partitions as usize) {
                    return;
                }
                assert!(Instant::now() < deadline, "topic {topic}: {seen:?} partitions, waited for {partitions}");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .await
        .expect("metadata");
    }

    /// Writes a record; its (partition, offset).
    pub async fn produce(
        &self,
        topic: &str,
        key: Option<&str>,
        payload: &[u8],
        headers: &[(&str, &[u8])],
    ) -> (i32, i64) {
        let mut h = OwnedHeaders::new();
        for (k, v) in headers {
            h = h.insert(Header { key: k, value: Some(*v) });
        }
        let mut record: FutureRecord<'_, str, [u8]> = FutureRecord::to(topic).payload(payload).headers(h);
        if let Some(key) = key {
            record = record.key(key);
        }
        let delivered =
            self.producer.send(record, PATIENCE).await.unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
        (delivered.partition, delivered.offset)
    }

    /// Writes one record per `(identity, payload)`, all at once (the
    /// producer batches them), each with its identity as `message_id`.
    pub async fn produce_all(&self, topic: &str, records: &[(String, String)]) {
        let sends = records.iter().map(|(id, payload)| {
            let headers = OwnedHeaders::new().insert(Header { key: "message_id", value: Some(id.as_bytes()) });
            let record: FutureRecord<'_, str, [u8]> =
                FutureRecord::to(topic).payload(payload.as_bytes()).headers(headers);
            self.producer.send(record, PATIENCE)
        });
        for sent in futures_util::future::join_all(sends).await {
            sent.unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
        }
    }

    /// How many records of `topic` a reader from the start finds, stopping
    /// at `n` or after `within`. Counted by reading, not from the high
    /// watermarks: tansu 0.6 reports a partition's high watermark as the
    /// first offset of its last batch, so the records of that batch are
    /// missing from it (seen as 4,903 of 5,000 for minutes).
    pub async fn arrivals(&self, topic: &str, n: usize, within: Duration) -> usize {
        let (base, topic) = (self.base.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let group = format!("arrivals-{}", uuid::Uuid::new_v4().simple());
            let (consumer, list) = consumer_of(&base, &group, &topic, Offset::Beginning);
            consumer.assign(&list).expect("assign");
            let deadline = Instant::now() + within;
            let mut seen = 0;
            while seen < n && Instant::now() < deadline {
                if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
                    seen += 1;
                }
            }
            seen
        })
        .await
        .unwrap_or(0)
    }

    /// Reads `n` records of `topic` as a member of a new group, committing
    /// asynchronously every 100 (as a consumer that must not skip does);
    /// how many it read within `within`.
    pub async fn consume_committing(&self, topic: &str, n: usize, within: Duration) -> usize {
        let (base, topic) = (self.base.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = base
                .clone()
                .set("group.id", format!("raw-{}", uuid::Uuid::new_v4().simple()))
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .create()
                .expect("the raw consumer");
            consumer.subscribe(&[&topic]).expect("subscribe");
            let deadline = Instant::now() + within;
            let mut done = 0;
            while done < n && Instant::now() < deadline {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    done += 1;
                    if done % 100 == 0 || done == n {
                        let _ =
                            consumer.commit_message(&m, ferry_transport_kafka::rdkafka::consumer::CommitMode::Async);
                    }
                }
            }
            done
        })
        .await
        .unwrap_or(0)
    }

    /// Every record of `topic` from the start, once `n` are there (or
    /// `within` has passed), ordered by partition then offset.
    pub async fn read(&self, topic: &str, n: usize, within: Duration) -> Vec<Record> {
        let (base, topic) = (self.base.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let group = format!("reader-{}", uuid::Uuid::new_v4().simple());
            let (consumer, list) = consumer_of(&base, &group, &topic, Offset::Beginning);
            consumer.assign(&list).expect("assign");
            let mut out = Vec::new();
            let deadline = Instant::now() + within;
            while out.len() < n && Instant::now() < deadline {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    out.push(Record::of(&m.detach()));
                }
            }
            out.sort_by_key(|r| (r.partition, r.offset));
            out
        })
        .await
        .expect("reader")
    }

    /// The committed offsets of `group` on every partition of `topic`
    /// (`None` where it has committed none).
    pub async fn committed(&self, group: &str, topic: &str) -> Vec<Option<i64>> {
        let (base, group, topic) = (self.base.clone(), group.to_owned(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            let (consumer, list) = consumer_of(&base, &group, &topic, Offset::Invalid);
            let got = consumer.committed_offsets(list, PATIENCE).expect("committed offsets");
            let mut offsets: Vec<(i32, Option<i64>)> = got
                .elements()
                .iter()
                .map(|e| (e.partition(), if let Offset::Offset(o) = e.offset() { Some(o) } else { None }))
                .collect();
            offsets.sort_unstable();
            offsets.into_iter().map(|(_, o)| o).collect()
        })
        .await
        .expect("committed")
    }
}
