//! `ferry dlq …` and `ferry outbox stats`: the operator's view of the
//! store. They open the store of a stopped daemon; sled locks it while a
//! daemon runs, and then they say so instead of touching it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ferry_config::{Config, DispatchMode};
use ferry_core::outbox::OutboxStore as _;
use ferry_core::ports::{OutboundMessage, Sender};
use ferry_envelope::{Timestamp, names};
use ferry_store::{OpenError, SledStore, StoredDeadLetter};

use crate::wiring::{start_sender, store_dir};

/// How long a replay waits for a sender to connect.
const CONNECT_WAIT: Duration = Duration::from_secs(15);

fn open(path: &Path) -> Result<(Config, Arc<SledStore>), ExitCode> {
    let config = ferry_config::load(path).map_err(|e| {
        eprintln!("{}: {e}", path.display());
        ExitCode::from(2)
    })?;
    let dir = store_dir(&config);
    match SledStore::open(&dir) {
        Ok(store) => Ok((config, store)),
        Err(OpenError::Locked { .. }) => {
            eprintln!(
                "{}: the store is in use by a running ferry; stop it first (reaching a running daemon's store is not supported yet)",
                dir.display()
            );
            Err(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("{e}");
            Err(ExitCode::from(2))
        }
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("{e}");
    ExitCode::FAILURE
}

fn time(t: Timestamp) -> String {
    let secs = t.as_millis().div_euclid(1000);
    let millis = t.as_millis().rem_euclid(1000);
    format!("{secs}.{millis:03}")
}

/// `ferry dlq list`: oldest first, as a table or JSON lines.
pub async fn list(path: &Path, route: Option<&str>, limit: usize, json: bool) -> ExitCode {
    let (_, store) = match open(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let entries = match store.dead_letters(route, limit) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    if json {
        for e in &entries {
            match serde_json::to_string(e) {
                Ok(line) => println!("{line}"),
                Err(e) => return fail(e),
            }
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "{:>8}  {:<16} {:<12} {:<18} {:>8}  {:<15}  message id",
        "id", "route", "binding", "reason", "attempts", "last failure"
    );
    for StoredDeadLetter { id, entry } in &entries {
        println!(
            "{id:>8}  {:<16} {:<12} {:<18} {:>8}  {:<15}  {}",
            entry.route,
            entry.binding.as_deref().unwrap_or("-"),
            entry.reason,
            entry.attempts,
            time(entry.last_failure),
            entry.envelope.id
        );
    }
    println!("{} dead letter(s)", entries.len());
    ExitCode::SUCCESS
}

/// `ferry dlq show ID`: everything about one entry, with a payload preview.
pub async fn show(path: &Path, id: u64) -> ExitCode {
    let (_, store) = match open(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let Some(StoredDeadLetter { id, entry }) = (match store.dead_letter(id) {
        Ok(e) => e,
        Err(e) => return fail(e),
    }) else {
        eprintln!("no dead letter {id}");
        return ExitCode::from(2);
    };
    let env = &entry.envelope;
    println!("id:            {id}");
    println!("route:         {}", entry.route);
    println!("binding:       {}", entry.binding.as_deref().unwrap_or("-"));
    println!("address:       {}", entry.address.as_deref().unwrap_or("-"));
    println!("reason:        {}", entry.reason);
    println!("detail:        {}", entry.detail);
    println!("attempts:      {}", entry.attempts);
    println!("first failure: {}", time(entry.first_failure));
    println!("last failure:  {}", time(entry.last_failure));
    println!("message id:    {}", env.id);
    println!("subject:       {}", env.subject.as_deref().unwrap_or("-"));
    println!("headers:");
    for (name, value) in &env.headers {
        println!("  {name} = {}", serde_json::to_string(value).unwrap_or_default());
    }
    let payload = env.payload();
    let preview: String = String::from_utf8_lossy(&payload[..payload.len().min(512)]).into_owned();
    println!("payload ({} bytes): {preview}{}", payload.len(), if payload.len() > 512 { "…" } else { "" });
    ExitCode::SUCCESS
}

fn select(store: &SledStore, ids: &[u64], route: Option<&str>) -> Result<Vec<StoredDeadLetter>, ExitCode> {
    if ids.is_empty() && route.is_none() {
        eprintln!("name dead letters by id, or all of a route with --route");
        return Err(ExitCode::from(2));
    }
    if ids.is_empty() {
        return store.dead_letters(route, usize::MAX).map_err(fail);
    }
    let mut out = Vec::new();
    for id in ids {
        match store.dead_letter(*id) {
            Ok(Some(e)) => out.push(e),
            Ok(None) => {
                eprintln!("no dead letter {id}");
                return Err(ExitCode::from(2));
            }
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(out)
}

/// `ferry dlq purge`: removes entries for good.
pub async fn purge(path: &Path, ids: &[u64], route: Option<&str>) -> ExitCode {
    let (_, store) = match open(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let chosen = match select(&store, ids, route) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ids: Vec<u64> = chosen.iter().map(|e| e.id).collect();
    match store.remove_dead_letters(&ids).await {
        Ok(n) => {
            println!("purged {n} dead letter(s)");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `ferry dlq replay`: sends each entry again through its route's binding
/// (the one that failed, or the route's bindings when the failure was
/// before dispatch) with a fresh id and `x-bridge.causation-id` naming the
/// original; an entry every send accepted is removed.
pub async fn replay(path: &Path, ids: &[u64], route: Option<&str>, dry_run: bool) -> ExitCode {
    let (config, store) = match open(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let chosen = match select(&store, ids, route) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let metrics = ferry_core::metrics::Metrics::new();
    let mut senders: BTreeMap<String, Arc<dyn Sender>> = BTreeMap::new();
    let mut failed = 0;
    for StoredDeadLetter { id, entry } in chosen {
        let Some(route) = config.routes.iter().find(|r| r.id == entry.route) else {
            eprintln!("{id}: route {:?} is not in the config; kept", entry.route);
            failed += 1;
            continue;
        };
        let bindings: Vec<_> = match &entry.binding {
            Some(b) => route.bindings.iter().filter(|x| x.id() == b).collect(),
            None if route.dispatch_mode == DispatchMode::Single => route.bindings.iter().take(1).collect(),
            None => route.bindings.iter().collect(),
        };
        if bindings.is_empty() {
            eprintln!("{id}: binding {:?} is not in route {:?}; kept", entry.binding, route.id);
            failed += 1;
            continue;
        }
        let mut envelope = entry.envelope.clone();
        envelope.id = uuid::Uuid::new_v4().to_string();
        envelope.set_header(names::CAUSATION_ID, entry.envelope.id.clone());
        let mut all_sent = true;
        for binding in bindings {
            let address = entry.address.clone().unwrap_or_else(|| binding.address.clone());
            if dry_run {
                println!("{id}: would send {} to {} ({address:?}) as {}", entry.envelope.id, binding.id(), envelope.id);
                continue;
            }
            let sender = match senders.get(&binding.sender) {
                Some(s) => s.clone(),
                None => {
                    let Some(cfg) = config.senders.get(&binding.sender) else {
                        all_sent = false;
                        continue;
                    };
                    match start_sender(&binding.sender, cfg, &metrics) {
                        Ok(s) => {
                            senders.insert(binding.sender.clone(), s.clone());
                            s
                        }
                        Err(e) => {
                            eprintln!("{id}: {e}");
                            all_sent = false;
                            continue;
                        }
                    }
                }
            };
            match send_when_connected(sender.as_ref(), OutboundMessage { envelope: envelope.clone(), address }).await {
                Ok(()) => println!("{id}: sent {} to {} as {}", entry.envelope.id, binding.id(), envelope.id),
                Err(e) => {
                    eprintln!("{id}: {} refused: {e}; kept", binding.id());
                    all_sent = false;
                }
            }
        }
        if dry_run {
            continue;
        }
        if all_sent {
            if let Err(e) = store.remove_dead_letters(&[id]).await {
                eprintln!("{id}: sent but not removed: {e}");
                failed += 1;
            }
        } else {
            failed += 1;
        }
    }
    for sender in senders.values() {
        sender.close().await;
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Sends once the sender has a connection (a fresh client is still
/// connecting), giving up after [`CONNECT_WAIT`].
async fn send_when_connected(sender: &dyn Sender, msg: OutboundMessage) -> Result<(), ferry_core::TransportError> {
    let deadline = tokio::time::Instant::now() + CONNECT_WAIT;
    loop {
        match sender.send(msg.clone()).await {
            Err(e) if e.is_unavailable() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// `ferry outbox stats`: depth and oldest record per partition.
pub async fn outbox_stats(path: &Path) -> ExitCode {
    let (_, store) = match open(path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let stats = match store.stats() {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let now = Timestamp::now().as_millis();
    println!("{:<40} {:>10} {:>16}", "partition", "depth", "oldest age (s)");
    for p in &stats {
        let age = p.oldest_ms.map_or("-".to_owned(), |ms| format!("{:.1}", (now - ms).max(0) as f64 / 1000.0));
        println!("{:<40} {:>10} {:>16}", p.partition, p.depth, age);
    }
    println!("{} dead letter(s) in the store", store.dead_letter_count());
    ExitCode::SUCCESS
}
