//! Hot reload of plugins: a watch on the plugin directory that asks for the
//! same reload as SIGHUP when a component is added, changed or removed.

use std::path::Path;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::wiring::ReloadRequest;

/// Changes are gathered until the directory has been quiet this long, so a
/// file being copied in is read once it is complete.
pub const SETTLE: Duration = Duration::from_millis(300);

/// Starts watching `dir`; the watch ends with `shutdown`.
pub fn watch_plugins(
    dir: &Path,
    reloads: mpsc::Sender<ReloadRequest>,
    shutdown: CancellationToken,
) -> Result<(), notify::Error> {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, EventKind::Access(_) | EventKind::Any | EventKind::Other) {
            return;
        }
        if let Some(path) = event.paths.iter().find(|p| p.extension().is_some_and(|e| e == "wasm")) {
            let _ = tx.send(path.display().to_string());
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    info!(dir = %dir.display(), "watching the plugin directory");
    tokio::spawn(async move {
        // The watcher stops when dropped: it lives as long as this task.
        let _watcher = watcher;
        loop {
            let first = tokio::select! {
                _ = shutdown.cancelled() => return,
                path = rx.recv() => match path {
                    Some(p) => p,
                    None => return,
                },
            };
            let mut changed = vec![first];
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(SETTLE) => break,
                    path = rx.recv() => match path {
                        Some(p) => if !changed.contains(&p) { changed.push(p) },
                        None => return,
                    },
                }
            }
            info!(?changed, "plugin directory changed; reloading plugins");
            if reloads.send(ReloadRequest::plugins()).await.is_err() {
                warn!("the daemon no longer takes reloads; plugin watch stopped");
                return;
            }
        }
    });
    Ok(())
}
