//! `ferry dlq …` and `ferry outbox stats`: the operator's view of the
//! store. With the daemon stopped they open the store; while it runs (the
//! store's file is locked by it) they ask the daemon's admin server, which runs the same
//! operations here on its open store.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_config::Config;
use ferry_core::metrics::Metrics;
use ferry_envelope::Timestamp;
use ferry_store::{OpenError, Store, StoreOptions, StoredDeadLetter};
use serde::Deserialize;

use crate::cli::{Failure, load_config};
use crate::runtime::dead_letters::{ReplayReport, StatsReport, purge_entries, replay_entries, stats};
use crate::wiring::store_engine;

/// Where the store is reached.
enum Access {
    /// Opened here (the daemon is stopped).
    Local(Box<Config>, Arc<dyn Store>),
    /// Through a running daemon's admin server.
    Remote(Admin),
}

/// Opens the config's store. The embedded store, locked by a running
/// daemon, is reached through that daemon's admin server. A PostgreSQL
/// store is opened here whether daemons run or not; only a replay
/// (`through_daemon`) goes through a running daemon when `[admin] listen`
/// names one that answers, so it sends on the daemon's own connections
/// rather than opening second ones under the same client ids.
async fn open(path: &Path, through_daemon: bool) -> Result<Access, Failure> {
    let config = load_config(path)?;
    let engine = store_engine(&config);
    let admin = Admin::of(&config);
    if let (ferry_store::Engine::Postgres { .. }, true, Some(admin)) = (&engine, through_daemon, &admin)
        && daemon_answers(admin).await
    {
        return Ok(Access::Remote(admin.clone()));
    }
    match ferry_store::open(&engine, StoreOptions::default()).await {
        Ok(store) => Ok(Access::Local(Box::new(config), store)),
        Err(OpenError::Locked { path }) => match admin {
            Some(admin) => Ok(Access::Remote(admin)),
            None => Err(Failure::input(format!(
                "{path}: the store is in use by a running ferry and [admin] listen is not set, so it cannot be reached; set it or stop ferry"
            ))),
        },
        Err(e) => Err(Failure::input(e)),
    }
}

/// A running daemon's admin server: `http://host:port`, and the token it
/// wants (`admin.token`).
#[derive(Clone)]
pub(crate) struct Admin {
    base: String,
    token: Option<ferry_config::Secret>,
}

impl Admin {
    /// The admin server of the running daemon: `FERRY_ADMIN` (`host:port`)
    /// when set — the address a daemon announced, when its `admin.listen`
    /// (or `ferry run --admin-listen`) has port 0 — else the config's
    /// `admin.listen`, if any. The token is the config's either way.
    pub(crate) fn of(config: &ferry_config::Config) -> Option<Self> {
        let announced = std::env::var("FERRY_ADMIN").ok().filter(|a| !a.is_empty());
        let listen = announced.or_else(|| config.admin.listen.clone())?;
        Some(Admin { base: format!("http://{listen}"), token: config.admin.token.clone() })
    }

    /// The running daemon that the config file at `path` names (see
    /// [`Admin::of`]), or why none can be reached: the commands that only
    /// talk to a running daemon (`ferry ctl`, `tap`, `top`) start here.
    pub(crate) fn of_file(path: &Path) -> Result<Self, String> {
        let config = ferry_config::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::of(&config).ok_or_else(|| {
            format!(
                "{}: [admin] listen is not set (nor FERRY_ADMIN), so no running daemon can be reached",
                path.display()
            )
        })
    }

    pub(crate) fn request(
        &self,
        client: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let request = client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token.expose()),
            None => request,
        }
    }
}

/// Whether a daemon's admin server answers.
async fn daemon_answers(admin: &Admin) -> bool {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build();
    match client {
        Ok(client) => admin.request(&client, reqwest::Method::GET, "/healthz").send().await.is_ok(),
        Err(_) => false,
    }
}

/// A request to a running daemon's admin server; the JSON it answers.
async fn remote(admin: &Admin, method: reqwest::Method, path: String) -> Result<serde_json::Value, Failure> {
    let client = reqwest::Client::new();
    let url = format!("{}{path}", admin.base);
    let response =
        admin.request(&client, method, &path).send().await.map_err(|e| Failure::input(format!("{url}: {e}")))?;
    let status = response.status();
    let text = response.text().await.map_err(Failure::failed)?;
    let value: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    if status.is_success() {
        Ok(value)
    } else {
        Err(Failure::input(
            value.get("error").and_then(|e| e.as_str()).map_or_else(|| value.to_string(), str::to_owned),
        ))
    }
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| {
            v.as_ref()
                .map(|v| format!("{k}={}", url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()))
        })
        .collect();
    if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
}

fn join_ids(ids: &[u64]) -> Option<String> {
    (!ids.is_empty()).then(|| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

fn time(t: Timestamp) -> String {
    let secs = t.as_millis().div_euclid(1000);
    let millis = t.as_millis().rem_euclid(1000);
    format!("{secs}.{millis:03}")
}

fn decode<T: for<'de> Deserialize<'de>>(value: serde_json::Value) -> Result<T, Failure> {
    serde_json::from_value(value).map_err(Failure::failed)
}

/// `ferry dlq list`: oldest first, as a table or JSON lines.
pub async fn list(path: &Path, route: Option<&str>, limit: usize, json: bool) -> Result<(), Failure> {
    let entries: Vec<StoredDeadLetter> = match open(path, false).await? {
        Access::Local(_, store) => store.dead_letters(route, limit).await.map_err(Failure::failed)?,
        Access::Remote(admin) => {
            let q = query(&[("route", route.map(str::to_owned)), ("limit", Some(limit.to_string()))]);
            decode(remote(&admin, reqwest::Method::GET, format!("/dlq{q}")).await?)?
        }
    };
    if json {
        for e in &entries {
            println!("{}", serde_json::to_string(e).map_err(Failure::failed)?);
        }
        return Ok(());
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
    Ok(())
}

/// `ferry dlq show ID`: everything about one entry, with a payload preview.
pub async fn show(path: &Path, id: u64) -> Result<(), Failure> {
    let found: Option<StoredDeadLetter> = match open(path, false).await? {
        Access::Local(_, store) => store.dead_letter(id).await.map_err(Failure::failed)?,
        Access::Remote(admin) => match remote(&admin, reqwest::Method::GET, format!("/dlq/{id}")).await? {
            serde_json::Value::Null => None,
            v => Some(decode(v)?),
        },
    };
    let StoredDeadLetter { id, entry } = found.ok_or_else(|| Failure::input(format!("no dead letter {id}")))?;
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
    Ok(())
}

/// `ferry dlq purge`: removes entries for good.
pub async fn purge(path: &Path, ids: &[u64], route: Option<&str>) -> Result<(), Failure> {
    let purged = match open(path, false).await? {
        Access::Local(_, store) => purge_entries(store.as_ref(), ids, route).await.map_err(Failure::input)?,
        Access::Remote(admin) => {
            let q = query(&[("ids", join_ids(ids)), ("route", route.map(str::to_owned))]);
            decode::<crate::api::PurgeReply>(remote(&admin, reqwest::Method::POST, format!("/dlq/purge{q}")).await?)?
                .purged
        }
    };
    println!("purged {purged} dead letter(s)");
    Ok(())
}

/// `ferry dlq replay`: see [`replay_entries`].
pub async fn replay(path: &Path, ids: &[u64], route: Option<&str>, dry_run: bool) -> Result<(), Failure> {
    let report: ReplayReport = match open(path, true).await? {
        Access::Local(config, store) => {
            replay_entries(&config, store.as_ref(), ids, route, dry_run, None, &Metrics::new())
                .await
                .map_err(Failure::input)?
        }
        Access::Remote(admin) => {
            let q = query(&[
                ("ids", join_ids(ids)),
                ("route", route.map(str::to_owned)),
                ("dry_run", dry_run.then(|| "true".to_owned())),
            ]);
            decode(remote(&admin, reqwest::Method::POST, format!("/dlq/replay{q}")).await?)?
        }
    };
    for line in &report.lines {
        println!("{line}");
    }
    if report.failed == 0 { Ok(()) } else { Err(Failure::failed("")) }
}

/// `ferry outbox stats`: depth and oldest record per partition.
pub async fn outbox_stats(path: &Path) -> Result<(), Failure> {
    let report: StatsReport = match open(path, false).await? {
        Access::Local(_, store) => stats(store.as_ref()).await.map_err(Failure::failed)?,
        Access::Remote(admin) => decode(remote(&admin, reqwest::Method::GET, "/outbox/stats".to_owned()).await?)?,
    };
    let now = Timestamp::now().as_millis();
    println!("{:<40} {:>10} {:>16}", "partition", "depth", "oldest age (s)");
    for p in &report.partitions {
        let age = p.oldest_ms.map_or("-".to_owned(), |ms| format!("{:.1}", (now - ms).max(0) as f64 / 1000.0));
        println!("{:<40} {:>10} {:>16}", p.partition, p.depth, age);
    }
    println!("{} dead letter(s) in the store", report.dead_letters);
    Ok(())
}
