//! The `ferry` subcommands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::metrics::Metrics;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::watchdog::Watchdog;
use crate::wiring::{Bridge, ReloadRequest, check_urls, validate_plugins};

/// `ferry validate`: config, plugins and each processor's `init`, without
/// connecting to any broker. Prints `ok` or `<key path>: <why>`.
pub fn validate(path: &Path) -> ExitCode {
    let config = match ferry_config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    if let Err(e) = check_urls(&config).and_then(|()| validate_plugins(&config, &Metrics::new())) {
        eprintln!("{}: {e}", path.display());
        return ExitCode::from(2);
    }
    println!("{}: ok", path.display());
    ExitCode::SUCCESS
}

/// `ferry validate --explain`: the fidelity report (see
/// [`crate::explain`]); with `strict`, exit 1 when something is lost.
pub fn explain(path: &Path, strict: bool) -> ExitCode {
    let config = match ferry_config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let (text, losses) = crate::explain::report(&config);
    print!("{text}");
    match losses {
        0 => println!("nothing is lost"),
        n => println!("{n} loss(es): see the LOST lines"),
    }
    if strict && losses > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// `ferry validate --connect`: connects to every receiver's and sender's
/// broker or queue and prints one line each; exit 2 when one fails.
pub async fn probe(path: &Path) -> ExitCode {
    let config = match ferry_config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let mut failed = 0;
    let mut report = |key: String, kind: &str, result: Result<String, ferry_core::TransportError>| match result {
        Ok(what) => println!("{key} ({kind}): ok, {what}"),
        Err(e) => {
            failed += 1;
            println!("{key} ({kind}): FAILED: {e}");
        }
    };
    for (name, r) in &config.receivers {
        let result = match crate::transports::of_receiver(r) {
            Ok(transport) => transport.probe_receiver(name, r).await,
            Err(e) => Err(ferry_core::TransportError::permanent(e)),
        };
        report(format!("receivers.{name}"), r.kind(), result);
    }
    for (name, s) in &config.senders {
        let result = match crate::transports::of_sender(s) {
            Ok(transport) => transport.probe_sender(name, s).await,
            Err(e) => Err(ferry_core::TransportError::permanent(e)),
        };
        report(format!("senders.{name}"), s.kind(), result);
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

/// `ferry render`: the resolved config (defaults filled in, `${VAR}`
/// substituted) as JSON, with passwords in URLs and every secret read from
/// a file masked.
pub fn render(path: &Path) -> ExitCode {
    // An mqbridge config: the ferry TOML it became (its variables still
    // variables), once ferry reads it, so it can be saved and used as is.
    // The file is read and evaluated once; its TOML is checked as `load`
    // would check it. (A command of its own process, not on a runtime.)
    let translated = std::fs::read_to_string(path).ok().and_then(|text| crate::mqbridge::read(path, &text));
    if let Some(Ok(toml)) = translated {
        return match ferry_config::parse(&toml) {
            Ok(_) => {
                print!("{toml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                ExitCode::from(2)
            }
        };
    }
    let masked = ferry_config::load_with_secrets(path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|(config, secrets)| masked(&config, secrets))
        .and_then(|value| serde_json::to_string_pretty(&value).map_err(|e| format!("cannot render: {e}")));
    match masked {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// The config as JSON with its secrets masked: `secrets` (the secret files'
/// texts), the admin token, the transports' own secrets and the SQS
/// endpoint's keys wherever their text appears, every key that names a
/// secret and every URL's password (`ferry render`, `GET /config`).
pub fn masked(config: &ferry_config::Config, mut secrets: Vec<String>) -> Result<serde_json::Value, String> {
    let mut value = serde_json::to_value(config).map_err(|e| format!("cannot render: {e}"))?;
    // The admin token is a secret however it was written.
    secrets.extend(config.admin.token.as_ref().map(|t| t.expose().to_owned()));
    // So are the transports' own (tokens, signing secrets, API keys).
    for r in config.receivers.values() {
        secrets.extend(crate::transports::of_receiver(r).map(|t| t.receiver_secrets(r)).unwrap_or_default());
    }
    for s in config.senders.values() {
        secrets.extend(crate::transports::of_sender(s).map(|t| t.sender_secrets(s)).unwrap_or_default());
    }
    // And the SQS endpoint's access key secrets; its section as its crate
    // reads it, with its defaults.
    if let Ok(Some(sqs)) = ferry_sqs_endpoint::config::section(config) {
        secrets.extend(sqs.access_keys.iter().map(|k| k.secret.expose().to_owned()));
        if let (Ok(read), Some(endpoints)) = (serde_json::to_value(&sqs), value.get_mut("endpoints")) {
            endpoints["sqs"] = read;
        }
    }
    mask_secrets(&mut value, &secrets);
    Ok(value)
}

/// Whether a key names a secret by the usual spellings (`password`,
/// `api_key`, `token`, `secret`, …), wherever it is: in a transport
/// component's free-form `config` table ferry knows nothing else of it. A
/// key naming a file (`credentials_file`) holds a path, not the secret.
fn names_a_secret(key: &str) -> bool {
    const WORDS: [&str; 9] =
        ["password", "passwd", "secret", "token", "api_key", "apikey", "access_key", "private_key", "seed"];
    let key = key.to_ascii_lowercase();
    !key.ends_with("_file") && WORDS.iter().any(|w| key.contains(w))
}

/// Masks the password of every URL (each of a list too) under a key that
/// names URLs (`url`, `…_url`, `urls`), every text under a key that names a
/// secret ([`names_a_secret`]), and the text of every secret (secret files,
/// the admin token, what the transports declare) wherever it appears.
fn mask_secrets(value: &mut serde_json::Value, secrets: &[String]) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if names_a_secret(k) {
                    match v {
                        serde_json::Value::String(s) if !s.is_empty() => *s = "****".to_owned(),
                        serde_json::Value::Array(items) => {
                            for item in items {
                                if let serde_json::Value::String(s) = item {
                                    *s = "****".to_owned();
                                }
                            }
                        }
                        _ => {}
                    }
                }
                if k == "url" || k.ends_with("_url") || k == "urls" {
                    match v {
                        serde_json::Value::String(s) => *s = ferry_core::redact::url(s),
                        serde_json::Value::Array(items) => {
                            for item in items {
                                if let serde_json::Value::String(s) = item {
                                    *s = ferry_core::redact::url(s);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                mask_secrets(v, secrets);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| mask_secrets(v, secrets)),
        serde_json::Value::String(s) => {
            for secret in secrets {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), "****");
                }
            }
        }
        _ => {}
    }
}

/// `ferry run`: runs until SIGTERM/SIGINT, then stops receiving, finishes
/// or releases in-flight messages and exits 0. SIGHUP reloads plugins, and
/// with `watch` the config file too (see [`Bridge`]'s reload).
pub async fn run(
    path: &Path,
    watch: bool,
    admin_listen: Option<&str>,
    metrics_export: Option<crate::telemetry::metrics::MetricsSettings>,
) -> ExitCode {
    let config = match ferry_config::load(path).and_then(|c| match admin_listen {
        Some(listen) => c.with_admin_listen(listen),
        None => Ok(c),
    }) {
        Ok(c) => c,
        Err(e) => {
            error!(config = %path.display(), error = %e, "invalid configuration");
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let admin_listen = config.admin.listen.clone();
    let (admin_token, admin_read_only) = (config.admin.token.clone(), config.admin.read_only);
    let (stall_secs, shutdown_timeout) =
        (config.admin.stall_secs, Duration::from_secs(config.admin.shutdown_timeout_secs));
    let version = env!("CARGO_PKG_VERSION");
    info!(instance = config.instance.id(), version, "ferry starting");
    let metrics = Metrics::new();
    metrics
        .instance_info
        .get_or_create(&ferry_core::metrics::labels(&[("instance", config.instance.id()), ("version", version)]))
        .set(1);
    metrics
        .build_info
        .get_or_create(&ferry_core::metrics::labels(&[("version", version), ("commit", env!("FERRY_COMMIT"))]))
        .set(1);
    let bridge = match Bridge::build(config, metrics).await {
        Ok(b) => b,
        Err(e) => {
            error!(config = %path.display(), error = %e, "cannot start");
            eprintln!("{}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let watchdog = Watchdog::new(stall_secs, bridge.store(), bridge.metrics.clone(), bridge.readiness.clone());
    if let Err(e) = watchdog.start(admin_stop.clone()) {
        eprintln!("cannot start the watchdog thread: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = stop_on_signals(shutdown.clone(), shutdown_timeout, watchdog.clone()) {
        eprintln!("cannot install the SIGTERM/SIGINT handler: {e}");
        return ExitCode::FAILURE;
    }
    let (reload_tx, reload_rx) = mpsc::channel(4);
    let mut admin = None;
    if let Some(listen) = &admin_listen {
        let addr = match listen.parse() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{}: admin.listen: {e}", path.display());
                return ExitCode::from(2);
            }
        };
        let state = crate::admin::AdminState {
            watchdog: watchdog.clone(),
            metrics: bridge.metrics.clone(),
            ready: crate::admin::ReadyView { readiness: bridge.readiness.clone(), listeners: bridge.listeners.clone() },
            store: bridge.store_access(),
            access: crate::admin::AdminAccess {
                token: admin_token.map(|t| t.expose().into()),
                read_only: admin_read_only,
                stopping: shutdown.clone(),
            },
            control: crate::admin::ControlAccess {
                controls: bridge.controls.clone(),
                reloads: reload_tx.clone(),
                config_path: path.to_owned(),
            },
        };
        match crate::admin::serve(addr, state, admin_stop.clone()).await {
            Ok(task) => admin = Some(task),
            Err(e) => {
                error!(%listen, error = %e, "cannot bind the admin server");
                eprintln!("{}: admin.listen: cannot bind {listen}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    if let Some(dir) = bridge.watched_plugin_dir()
        && let Err(e) = crate::watch::watch_plugins(&dir, reload_tx.clone(), shutdown.clone())
    {
        warn!(dir = %dir.display(), error = %e, "cannot watch the plugin directory; reload plugins with SIGHUP");
    }
    let export = metrics_export.map(|settings| {
        tokio::spawn(crate::telemetry::metrics::export(settings, bridge.metrics.clone(), admin_stop.clone()))
    });
    let reload_source = watch.then(|| path.to_owned());
    tokio::spawn(handle_reload_signals(shutdown.clone(), reload_tx, reload_source, bridge.metrics.clone()));
    info!(routes = bridge.route_count(), watch, "ferry running");
    let clean = bridge.run(shutdown, reload_rx).await;
    admin_stop.cancel();
    if let Some(task) = admin {
        let _ = task.await;
    }
    // The last export (the totals at the stop) is bounded by its timeout.
    if let Some(task) = export {
        let _ = task.await;
    }
    if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// SIGTERM and SIGINT stop the daemon, handled on a thread of their own so
/// they work even when the async runtime does not. The first one starts a
/// clean stop (`shutdown`); if the process is still there `timeout` later,
/// the watchdog's report says what was stuck and the process exits 1. A
/// second signal more than a second after the first exits 1 at once (one
/// that comes sooner is the same request: `timeout`, for one, signals the
/// process and then its process group). Either way nothing acknowledged
/// is lost: a source message is acknowledged only after what it needs is
/// durable, and one that was not is redelivered by its broker.
fn stop_on_signals(shutdown: CancellationToken, timeout: Duration, watchdog: Arc<Watchdog>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new().name("ferry-signals".into()).spawn(move || {
        let mut first: Option<std::time::Instant> = None;
        for signal in signals.forever() {
            let name = if signal == SIGTERM { "SIGTERM" } else { "SIGINT" };
            if let Some(at) = first {
                if at.elapsed() < Duration::from_secs(1) {
                    continue;
                }
                error!(signal = name, "second stop signal: exiting now without finishing in-flight messages");
                std::process::exit(1);
            }
            info!(signal = name, timeout_secs = timeout.as_secs(), "shutting down");
            first = Some(std::time::Instant::now());
            shutdown.cancel();
            let watchdog = watchdog.clone();
            let _ = std::thread::Builder::new().name("ferry-shutdown-deadline".into()).spawn(move || {
                std::thread::sleep(timeout);
                let report = watchdog.check();
                error!(
                    timeout_secs = timeout.as_secs(),
                    reasons = ?report.reasons,
                    store_oldest_op = ?report.store_oldest_op,
                    routes_not_moving = ?report.routes_not_moving,
                    "shutdown did not finish in time; exiting 1 (unacknowledged messages stay with their brokers)"
                );
                std::process::exit(1);
            });
        }
    })?;
    Ok(())
}

/// SIGHUP asks for a reload: of the plugins, and of the config file when
/// `reload_source` is set (a config that does not load is refused here and
/// nothing changes). Ends with `shutdown`.
async fn handle_reload_signals(
    shutdown: CancellationToken,
    reloads: mpsc::Sender<ReloadRequest>,
    reload_source: Option<PathBuf>,
    metrics: Metrics,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        error!("cannot install the SIGHUP handler; reload by restarting ferry");
        return;
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = hup.recv() => {
                let request = match &reload_source {
                    None => {
                        info!("SIGHUP: reloading plugins");
                        ReloadRequest::plugins()
                    }
                    Some(path) => match ferry_config::load(path) {
                        Ok(config) => {
                            info!(config = %path.display(), "SIGHUP: reloading config and plugins");
                            ReloadRequest::config(config)
                        }
                        Err(e) => {
                            Metrics::inc(&metrics.reloads, &[("outcome", "refused")]);
                            error!(config = %path.display(), error = %e, "reload refused: invalid configuration; everything keeps running as it was");
                            continue;
                        }
                    },
                };
                if reloads.send(request).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_masks_every_password_of_a_url_list_and_every_url_key() {
        let mut config = serde_json::json!({
            "receivers": { "in": { "type": "nats", "url": "nats://a:pw-one@h1:4222,nats://b:pw-two@h2:4222" } },
            "senders": {
                "out": { "type": "sqs", "endpoint_url": "http://k:pw-three@h:4566" },
                "many": { "urls": ["amqp://c:pw-four@h:5672"] }
            },
            "admin": { "token": "the-admin-token" }
        });
        mask_secrets(&mut config, &["the-admin-token".to_owned()]);
        let text = config.to_string();
        for secret in ["pw-one", "pw-two", "pw-three", "pw-four", "the-admin-token"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("nats://a:****@h1:4222,nats://b:****@h2:4222"), "{text}");
    }

    #[test]
    fn keys_that_name_a_secret_are_masked_in_any_table() {
        let mut v = serde_json::json!({"senders": {"c": {"config": {
            "api_key": "k1", "Password": "k2", "auth": {"client_secret": "k3", "tokens": ["k4"]},
            "routing_key": "orders", "credentials_file": "/etc/ferry/nats.creds", "queue": "q"
        }}}});
        mask_secrets(&mut v, &[]);
        let text = v.to_string();
        for secret in ["k1", "k2", "k3", "k4"] {
            assert!(!text.contains(&format!("\"{secret}\"")), "{secret} in {text}");
        }
        let c = &v["senders"]["c"]["config"];
        assert_eq!(c["routing_key"], "orders", "a routing key is not a secret");
        assert_eq!(c["credentials_file"], "/etc/ferry/nats.creds", "a path is not a secret");
        assert_eq!(c["queue"], "q");
    }

    #[test]
    fn url_passwords_are_masked() {
        let mut v = serde_json::json!({"senders": {"a": {"url": "mqtt://u:secret@h:1883"}}, "x": ["mqtt://no-pass"]});
        mask_secrets(&mut v, &[]);
        assert_eq!(v["senders"]["a"]["url"], "mqtt://u:****@h:1883");
        assert!(!v.to_string().contains("secret"));
    }

    #[test]
    fn secrets_from_files_are_masked_wherever_they_appear() {
        let mut v =
            serde_json::json!({"r": {"url": "amqp://user@h/s3cr3t-vhost", "config": {"token": "s3cr3t-vhost"}}});
        mask_secrets(&mut v, &["s3cr3t-vhost".to_owned()]);
        assert!(!v.to_string().contains("s3cr3t"), "{v}");
        assert_eq!(v["r"]["config"]["token"], "****");
    }
}
