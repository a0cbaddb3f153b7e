//! `ferry run`: the daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::metrics::Metrics;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cli::Failure;
use crate::runtime::watchdog::Watchdog;
use crate::wiring::{Bridge, ReloadRequest};

/// `ferry run`: runs until SIGTERM/SIGINT, then stops receiving, finishes
/// or releases in-flight messages and exits 0. SIGHUP reloads plugins, and
/// with `watch` the config file too (see [`Bridge`]'s reload).
pub async fn run(
    path: &Path,
    watch: bool,
    admin_listen: Option<&str>,
    metrics_export: Option<crate::telemetry::metrics::MetricsSettings>,
) -> Result<ExitCode, Failure> {
    let config = match ferry_config::load(path).and_then(|c| match admin_listen {
        Some(listen) => c.with_admin_listen(listen),
        None => Ok(c),
    }) {
        Ok(c) => c,
        Err(e) => {
            error!(config = %path.display(), error = %e, "invalid configuration");
            return Err(Failure::input(format!("{}: {e}", path.display())));
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
            return Err(Failure::input(format!("{}: {e}", path.display())));
        }
    };
    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let watchdog = Watchdog::new(stall_secs, bridge.store(), bridge.metrics.clone(), bridge.readiness.clone());
    watchdog
        .start(admin_stop.clone())
        .map_err(|e| Failure::failed(format!("cannot start the watchdog thread: {e}")))?;
    stop_on_signals(shutdown.clone(), shutdown_timeout, watchdog.clone())
        .map_err(|e| Failure::failed(format!("cannot install the SIGTERM/SIGINT handler: {e}")))?;
    let (reload_tx, reload_rx) = mpsc::channel(4);
    let mut admin = None;
    if let Some(listen) = &admin_listen {
        let addr = listen.parse().map_err(|e| Failure::input(format!("{}: admin.listen: {e}", path.display())))?;
        let state = crate::runtime::admin::AdminState {
            watchdog: watchdog.clone(),
            metrics: bridge.metrics.clone(),
            ready: crate::runtime::admin::ReadyView {
                readiness: bridge.readiness.clone(),
                listeners: bridge.listeners.clone(),
            },
            store: bridge.store_access(),
            access: crate::runtime::admin::AdminAccess {
                token: admin_token.map(|t| t.expose().into()),
                read_only: admin_read_only,
                stopping: shutdown.clone(),
            },
            control: crate::runtime::admin::ControlAccess {
                controls: bridge.controls.clone(),
                reloads: reload_tx.clone(),
                config_path: path.to_owned(),
                rates: crate::runtime::control::RateMeter::default(),
            },
        };
        match crate::runtime::admin::serve(addr, state, admin_stop.clone()).await {
            Ok(task) => admin = Some(task),
            Err(e) => {
                error!(%listen, error = %e, "cannot bind the admin server");
                return Err(Failure::input(format!("{}: admin.listen: cannot bind {listen}: {e}", path.display())));
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
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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
