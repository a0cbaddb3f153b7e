//! The store engine comparison of issue 13: redb (what ferry uses), fjall
//! (the other candidate) and sled 0.34 (what ferry used before, which
//! deadlocks under load), each behind the same group-commit writer, key
//! layout and workload:
//!
//! - durable persist, one writer: each record (value + index key) waits for
//!   the commit that covers it;
//! - durable persist, 256 writers at once: the commits are grouped;
//! - claim and complete: read every record back in batches of 256, then
//!   remove it and its index key, 256 completions at once;
//! - bulk: fill the engine to `FERRY_BENCH_STORE_RECORDS` (default
//!   1,000,000) records with 256 writers, then its RSS and disk use.
//!
//! Each engine runs in a child process of its own (`ferry-bench --engine
//! NAME`), so the RSS is its alone and a hang is seen: a child that prints
//! nothing for 60 s is killed and reported as hung. Every commit is durable
//! (redb `Durability::Immediate`, fjall `PersistMode::SyncAll`, sled
//! `flush`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WRITERS: usize = 256;
const RECORD_BYTES: usize = 1024;
const HANG: Duration = Duration::from_secs(60);

type Put = (Vec<u8>, Vec<u8>);

/// One engine: apply puts and removes atomically and durably, read a value.
trait Engine: Send + Sync {
    fn commit(&self, puts: &[Put], removes: &[Vec<u8>]) -> Result<(), String>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

struct Redb(redb::Database);
const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("outbox");

impl Engine for Redb {
    fn commit(&self, puts: &[Put], removes: &[Vec<u8>]) -> Result<(), String> {
        let e = |e: redb::Error| e.to_string();
        let mut txn = self.0.begin_write().map_err(|x| e(x.into()))?;
        txn.set_durability(redb::Durability::Immediate).map_err(|x| x.to_string())?;
        {
            let mut t = txn.open_table(TABLE).map_err(|x| e(x.into()))?;
            for (k, v) in puts {
                t.insert(k.as_slice(), v.as_slice()).map_err(|x| e(x.into()))?;
            }
            for k in removes {
                t.remove(k.as_slice()).map_err(|x| e(x.into()))?;
            }
        }
        txn.commit().map_err(|x| e(x.into()))
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        use redb::ReadableDatabase;
        let txn = self.0.begin_read().map_err(|e| e.to_string())?;
        let t = txn.open_table(TABLE).map_err(|e| e.to_string())?;
        Ok(t.get(key).map_err(|e| e.to_string())?.map(|v| v.value().to_vec()))
    }
}

struct Fjall(fjall::Keyspace, fjall::PartitionHandle);

impl Engine for Fjall {
    fn commit(&self, puts: &[Put], removes: &[Vec<u8>]) -> Result<(), String> {
        let mut batch = self.0.batch();
        for (k, v) in puts {
            batch.insert(&self.1, k, v);
        }
        for k in removes {
            batch.remove(&self.1, k);
        }
        batch.commit().map_err(|e| e.to_string())?;
        self.0.persist(fjall::PersistMode::SyncAll).map_err(|e| e.to_string())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.1.get(key).map_err(|e| e.to_string())?.map(|v| v.to_vec()))
    }
}

struct Sled(sled::Db);

impl Engine for Sled {
    fn commit(&self, puts: &[Put], removes: &[Vec<u8>]) -> Result<(), String> {
        let mut batch = sled::Batch::default();
        for (k, v) in puts {
            batch.insert(k.as_slice(), v.as_slice());
        }
        for k in removes {
            batch.remove(k.as_slice());
        }
        self.0.apply_batch(batch).map_err(|e| e.to_string())?;
        self.0.flush().map(|_| ()).map_err(|e| e.to_string())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.0.get(key).map_err(|e| e.to_string())?.map(|v| v.to_vec()))
    }
}

fn open(name: &str, dir: &Path) -> Box<dyn Engine> {
    match name {
        // The cache ferry's store uses (redb's default is 1 GiB).
        "redb" => Box::new(Redb(
            redb::Database::builder().set_cache_size(64 << 20).create(dir.join("bench.redb")).expect("open redb"),
        )),
        "fjall" => {
            let keyspace = fjall::Config::new(dir).open().expect("open fjall");
            let partition =
                keyspace.open_partition("outbox", fjall::PartitionCreateOptions::default()).expect("partition");
            Box::new(Fjall(keyspace, partition))
        }
        "sled" => Box::new(Sled(sled::open(dir).expect("open sled"))),
        other => panic!("unknown engine {other}"),
    }
}

/// A change waiting for the group commit that covers it.
struct Change {
    puts: Vec<Put>,
    removes: Vec<Vec<u8>>,
    done: mpsc::SyncSender<()>,
}

/// Group commit: one thread applies every change waiting in one commit.
fn writer(engine: &dyn Engine, changes: mpsc::Receiver<Change>) {
    while let Ok(first) = changes.recv() {
        let mut group = vec![first];
        group.extend(changes.try_iter().take(4095));
        let puts: Vec<Put> = group.iter().flat_map(|c| c.puts.iter().cloned()).collect();
        let removes: Vec<Vec<u8>> = group.iter().flat_map(|c| c.removes.iter().cloned()).collect();
        engine.commit(&puts, &removes).expect("commit");
        for c in group {
            let _ = c.done.send(());
        }
    }
}

/// 1 KiB that does not compress (an engine that compresses, as fjall does
/// by default, must not look better on repeated bytes than on real
/// payloads): a xorshift stream seeded by the record's number.
fn payload(seq: u64) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(RECORD_BYTES);
    while out.len() < RECORD_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn record_key(seq: u64) -> Vec<u8> {
    let mut k = b"r/bench/out\0".to_vec();
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn index_key(seq: u64) -> Vec<u8> {
    format!("i/bench/out\0m-{seq}\0out").into_bytes()
}

/// Runs `per_writer` changes on each of `writers` threads; the rate.
fn concurrent(
    tx: &mpsc::Sender<Change>,
    writers: usize,
    first: u64,
    count: u64,
    change: impl Fn(u64) -> (Vec<Put>, Vec<Vec<u8>>) + Sync,
) -> f64 {
    let started = Instant::now();
    let per = count.div_ceil(writers as u64);
    std::thread::scope(|s| {
        for w in 0..writers as u64 {
            let (tx, change) = (tx.clone(), &change);
            s.spawn(move || {
                for seq in (first + w * per)..(first + ((w + 1) * per).min(count)) {
                    let (puts, removes) = change(seq);
                    let (done, wait) = mpsc::sync_channel(1);
                    tx.send(Change { puts, removes, done }).expect("writer");
                    wait.recv().expect("commit");
                }
            });
        }
    });
    count as f64 / started.elapsed().as_secs_f64()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => std::os::unix::fs::MetadataExt::blocks(&m) * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The child: measures one engine and prints `progress …` lines while it
/// works and one `result {json}` line at the end.
pub fn run_child(name: &str, records: u64, bulk: u64) {
    let dir = std::env::temp_dir().join(ferry_tests::unique(&format!("ferry-bench-{name}")));
    std::fs::create_dir_all(&dir).expect("dir");
    let engine = open(name, &dir);
    let put = |seq: u64| (vec![(record_key(seq), payload(seq)), (index_key(seq), seq.to_be_bytes().to_vec())], vec![]);
    let (tx, rx) = mpsc::channel::<Change>();
    let result = std::thread::scope(|s| {
        let engine = engine.as_ref();
        s.spawn(move || writer(engine, rx));
        let single_n = 2_000.min(records);
        let single = concurrent(&tx, 1, 0, single_n, put);
        println!("progress persist-1 {single:.0}");
        let grouped = concurrent(&tx, WRITERS, single_n, records, put);
        println!("progress persist-256 {grouped:.0}");
        // Claim: read back in batches, as a drainer does; then complete.
        let started = Instant::now();
        for chunk in (0..records).collect::<Vec<_>>().chunks(256) {
            for seq in chunk {
                assert!(engine.get(&record_key(*seq)).expect("get").is_some(), "record {seq} is there");
            }
        }
        let complete = concurrent(&tx, WRITERS, 0, records, |seq| (vec![], vec![record_key(seq), index_key(seq)]));
        let claim_complete = records as f64 / (started.elapsed().as_secs_f64());
        println!("progress claim-complete {claim_complete:.0} (completes alone {complete:.0})");
        let bulk_started = Instant::now();
        let step = 50_000.min(bulk.max(1));
        let mut filled = 0;
        while filled < bulk {
            let n = step.min(bulk - filled);
            concurrent(&tx, WRITERS, 1_000_000_000 + filled, n, put);
            filled += n;
            println!("progress bulk {filled}");
        }
        let bulk_rate = bulk as f64 / bulk_started.elapsed().as_secs_f64();
        drop(tx);
        serde_json::json!({
            "engine": name,
            "persist_1": single,
            "persist_256": grouped,
            "claim_complete": claim_complete,
            "bulk_records": bulk,
            "bulk_rate": bulk_rate,
            "rss_mib": rss_kib() as f64 / 1024.0,
            "disk_mib": disk_bytes(&dir) as f64 / (1024.0 * 1024.0),
        })
    });
    println!("result {result}");
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the parent got from one child.
enum Outcome {
    Done(serde_json::Value),
    Hung { last: String },
    Failed(String),
}

fn measure(name: &str, records: u64, bulk: u64) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let mut child = match Command::new(exe)
        .args(["--engine", name, "--records", &records.to_string(), "--bulk", &bulk.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let Some(stdout) = child.stdout.take() else { return Outcome::Failed("no stdout".into()) };
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut last = String::from("(nothing yet)");
    loop {
        match lines.recv_timeout(HANG) {
            Ok(line) => {
                if let Some(json) = line.strip_prefix("result ") {
                    let _ = child.wait();
                    return serde_json::from_str(json).map_or_else(|e| Outcome::Failed(e.to_string()), Outcome::Done);
                }
                last = line;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::Hung { last };
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Outcome::Failed(format!("exited ({status}) after {last}"));
            }
        }
    }
}

/// Prints the comparison: persist and claim/complete rates of `records`
/// records, then RSS and disk after `bulk` more.
pub fn rows(records: u64, bulk: u64) {
    println!(
        "\nstore engines, 1 KiB records, durable group commit ({records} records; RSS and disk after {bulk} more)"
    );
    println!(
        "  {:<8} {:>14} {:>16} {:>16} {:>12} {:>9} {:>9}",
        "engine", "persist x1/s", "persist x256/s", "claim+compl/s", "bulk/s", "RSS MiB", "disk MiB"
    );
    for name in ["redb", "fjall", "sled"] {
        eprintln!("store engines: {name}…");
        match measure(name, records, bulk) {
            Outcome::Done(v) => {
                let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
                println!(
                    "  {:<8} {:>14.0} {:>16.0} {:>16.0} {:>12.0} {:>9.0} {:>9.0}",
                    name,
                    f("persist_1"),
                    f("persist_256"),
                    f("claim_complete"),
                    f("bulk_rate"),
                    f("rss_mib"),
                    f("disk_mib")
                );
            }
            Outcome::Hung { last } => {
                println!("  {name:<8} hung: no progress for {} s (last: {last})", HANG.as_secs());
            }
            Outcome::Failed(why) => println!("  {name:<8} failed: {why}"),
        }
    }
}
