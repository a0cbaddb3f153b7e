//! Redis for the tests: a private `redis-server` of the test's own (its
//! own port and directory, with every write fsynced to its append-only
//! file, so a restart keeps what it acknowledged and touches no other
//! test) and a client to add entries and read what arrived.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ::redis::Value;
use ::redis::aio::MultiplexedConnection;

/// A redis-server of the test's own, stopped on drop.
pub struct PrivateRedis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The port while it is stopped, kept for its next start.
    held: crate::ports::Held,
}

impl PrivateRedis {
    fn binary() -> PathBuf {
        for p in ["/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"] {
            if std::path::Path::new(p).exists() {
                return PathBuf::from(p);
            }
        }
        PathBuf::from("redis-server")
    }

    /// Starts one on a free port and waits until it listens; another port
    /// is tried when one was taken meanwhile.
    pub async fn start() -> Self {
        let mut r = Self {
            port: crate::ports::broker_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
            held: crate::ports::Held::default(),
        };
        for _ in 0..5 {
            if r.try_start().await {
                return r;
            }
            r.stop();
            r.port = crate::ports::broker_port();
        }
        panic!("private redis-server did not start on any of five ports");
    }

    /// The server's process id while it runs (the bench reads its CPU).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// (Re)starts it on the same port and directory: what it acknowledged
    /// survives (append-only file, fsync always).
    pub async fn restart(&mut self) {
        if !self.try_start().await {
            panic!("private redis-server did not listen on port {} again", self.port);
        }
    }

    async fn try_start(&mut self) -> bool {
        self.stop();
        self.held = crate::ports::Held::default();
        let child = Command::new(Self::binary())
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--dir"])
            .arg(self.dir.path())
            .args(["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"])
            .args(["--protected-mode", "no", "--logfile", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (is it installed? scripts/provision redis)");
        crate::leftovers::record(child.id());
        let child = self.child.insert(child);
        crate::ports::until_listening(child, &[self.port], Duration::from_secs(10)).await
    }

    /// Stops it (SIGKILL: the append-only file has every acknowledged
    /// write) and holds its port until it starts again.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            self.held = crate::ports::kill_and_hold(child, [self.port]);
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One stream entry as [`Redis::read_all`] returns it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: String,
    pub fields: Vec<(String, Vec<u8>)>,
}

impl Entry {
    /// The first value of field `name`, as text.
    pub fn field(&self, name: &str) -> Option<String> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// A Redis client for a test.
pub struct Redis {
    conn: MultiplexedConnection,
    url: String,
}

impl Redis {
    /// redis-rs bounds a reply by 500 ms unless told otherwise; a CI
    /// machine running daemons beside the server misses that (a 5 000
    /// entry XRANGE did), so a test's client waits as long as any other
    /// bounded wait of the suite.
    pub async fn connect(url: &str) -> Self {
        let client = ::redis::Client::open(url).unwrap_or_else(|e| panic!("redis url {url}: {e}"));
        let config = ::redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        Self { conn, url: url.to_owned() }
    }

    async fn run(&self, cmd: &::redis::Cmd) -> Result<Value, String> {
        cmd.query_async::<Value>(&mut self.conn.clone()).await.map_err(|e| e.to_string())
    }

    /// Adds an entry with `fields` (in order) to `stream`; its id.
    pub async fn add(&self, stream: &str, fields: &[(&str, &[u8])]) -> String {
        self.try_add(stream, fields).await.unwrap_or_else(|e| panic!("XADD to {stream} on {}: {e}", self.url))
    }

    /// As [`Redis::add`], saying why Redis refused (still loading after a
    /// restart, say).
    pub async fn try_add(&self, stream: &str, fields: &[(&str, &[u8])]) -> Result<String, String> {
        let mut cmd = ::redis::cmd("XADD");
        cmd.arg(stream).arg("*");
        for (k, v) in fields {
            cmd.arg(*k).arg(*v);
        }
        match self.run(&cmd).await? {
            Value::BulkString(id) => Ok(String::from_utf8_lossy(&id).into_owned()),
            other => Err(format!("XADD answered {other:?}")),
        }
    }

    /// Sets plain string key `key` to `value`.
    pub async fn set(&self, key: &str, value: &str) {
        self.run(::redis::cmd("SET").arg(key).arg(value)).await.unwrap_or_else(|e| panic!("SET {key}: {e}"));
    }

    /// Adds `payload` with identity `id` and `headers` as fields.
    pub async fn add_message(&self, stream: &str, id: &str, payload: &str, headers: &[(&str, &str)]) -> String {
        let mut fields: Vec<(&str, &[u8])> = vec![("message_id", id.as_bytes()), ("payload", payload.as_bytes())];
        fields.extend(headers.iter().map(|(k, v)| (*k, v.as_bytes())));
        self.add(stream, &fields).await
    }

    /// Makes consumer group `group` on `stream` (and the stream) reading
    /// from the start.
    pub async fn group(&self, stream: &str, group: &str) {
        let mut cmd = ::redis::cmd("XGROUP");
        cmd.arg("CREATE").arg(stream).arg(group).arg("0").arg("MKSTREAM");
        self.run(&cmd).await.unwrap_or_else(|e| panic!("XGROUP CREATE {stream} {group}: {e}"));
    }

    /// How many entries `stream` holds.
    pub async fn len(&self, stream: &str) -> u64 {
        match self.run(::redis::cmd("XLEN").arg(stream)).await {
            Ok(Value::Int(n)) => u64::try_from(n).unwrap_or(0),
            other => panic!("XLEN {stream}: {other:?}"),
        }
    }

    /// Every entry of `stream`, in order, read a page at a time so that
    /// no one reply is large.
    pub async fn read_all(&self, stream: &str) -> Vec<Entry> {
        const PAGE: usize = 1_000;
        let mut all = Vec::new();
        let mut from = "-".to_owned();
        loop {
            let mut cmd = ::redis::cmd("XRANGE");
            cmd.arg(stream).arg(&from).arg("+").arg("COUNT").arg(PAGE);
            let reply = self.run(&cmd).await.unwrap_or_else(|e| panic!("XRANGE {stream} from {from}: {e}"));
            let page = entries(reply);
            let full = page.len() == PAGE;
            if let Some(last) = page.last() {
                // An exclusive start: the next page begins after this id.
                from = format!("({}", last.id);
            }
            all.extend(page);
            if !full {
                return all;
            }
        }
    }

    /// What `group` on `stream` still has: (entries not yet delivered to
    /// any consumer, entries delivered and not acknowledged).
    pub async fn backlog(&self, stream: &str, group: &str) -> (bool, u64) {
        let info = self.run(::redis::cmd("XINFO").arg("STREAM").arg(stream)).await.expect("XINFO STREAM");
        let last = text_field(&info, "last-generated-id").unwrap_or_default();
        let groups = self.run(::redis::cmd("XINFO").arg("GROUPS").arg(stream)).await.expect("XINFO GROUPS");
        let Value::Array(groups) = groups else { panic!("XINFO GROUPS answered {groups:?}") };
        let g = groups
            .iter()
            .find(|g| text_field(g, "name").as_deref() == Some(group))
            .unwrap_or_else(|| panic!("stream {stream} has no group {group}"));
        let delivered = text_field(g, "last-delivered-id").unwrap_or_default();
        let pending = match field(g, "pending") {
            Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
            other => panic!("pending: {other:?}"),
        };
        (delivered != last, pending)
    }

    /// Waits until `group` has delivered every entry of `stream` and has
    /// none waiting for an acknowledgement (`what` says why, for the
    /// failure message).
    pub async fn wait_drained(&self, stream: &str, group: &str, what: &str) {
        crate::eventually_async(what, || async {
            let backlog = self.backlog(stream, group).await;
            if backlog == (false, 0) { Ok(backlog) } else { Err(backlog) }
        })
        .await;
    }

    /// The consumers of `group` and how many entries each has pending.
    pub async fn consumers(&self, stream: &str, group: &str) -> Vec<(String, i64)> {
        let reply =
            self.run(::redis::cmd("XINFO").arg("CONSUMERS").arg(stream).arg(group)).await.expect("XINFO CONSUMERS");
        let Value::Array(list) = reply else { panic!("XINFO CONSUMERS answered {reply:?}") };
        list.iter()
            .map(|c| {
                let pending = match field(c, "pending") {
                    Some(Value::Int(n)) => *n,
                    _ => 0,
                };
                (text_field(c, "name").unwrap_or_default(), pending)
            })
            .collect()
    }
}

/// Field `name` of a reply that is a flat list of names and values.
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Array(flat) = v else { return None };
    flat.chunks_exact(2).find(|p| matches!(&p[0], Value::BulkString(k) if k == name.as_bytes())).map(|p| &p[1])
}

fn text_field(v: &Value, name: &str) -> Option<String> {
    match field(v, name)? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The entries of an XRANGE reply.
fn entries(reply: Value) -> Vec<Entry> {
    let Value::Array(rows) = reply else { panic!("XRANGE answered {reply:?}") };
    rows.into_iter()
        .map(|row| {
            let Value::Array(mut parts) = row else { panic!("entry {row:?}") };
            let Some(Value::Array(flat)) = parts.pop() else { panic!("fields of {parts:?}") };
            let Some(Value::BulkString(id)) = parts.pop() else { panic!("entry id") };
            let fields = flat
                .chunks_exact(2)
                .map(|p| match (&p[0], &p[1]) {
                    (Value::BulkString(k), Value::BulkString(v)) => {
                        (String::from_utf8_lossy(k).into_owned(), v.clone())
                    }
                    other => panic!("field {other:?}"),
                })
                .collect();
            Entry { id: String::from_utf8_lossy(&id).into_owned(), fields }
        })
        .collect()
}
