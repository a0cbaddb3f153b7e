//! The plugin registry: every `*.wasm` component in the plugin directory,
//! compiled once and checked against one of the plugin worlds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{info, warn};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker};

use crate::bindings::mapper::HeaderMapperPre;
use crate::bindings::settling::SettlingProcessorPre;
use crate::bindings::transport_receiver::TransportReceiverPre;
use crate::bindings::transport_sender::TransportSenderPre;
use crate::bindings::{HostState, ProcessorPre};
use crate::engine::PluginEngine;

/// The plugin package and version this host provides (`wit/plugin.wit`).
pub const PLUGIN_PACKAGE: &str = "ferry:plugin";
pub const PLUGIN_VERSION: &str = "1.3.0";
/// The versions a component may be built against (`MAJOR.MINOR`): the
/// current minor and the previous one of the same major
/// (`wit/previous/plugin.wit`). The linker resolves an import of the
/// previous minor to this host's definitions, which only add to it.
pub const LOADS: [(u64, u64); 2] = [(1, 3), (1, 2)];

/// Whether a component built against `version` loads here.
pub fn loads(version: &str) -> bool {
    let mut parts = version.split('.').map(str::parse::<u64>);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), Some(Ok(_patch)), None) => LOADS.contains(&(major, minor)),
        _ => false,
    }
}

/// The versions [`LOADS`] names, for messages: `1.3 and 1.2`.
fn loaded_versions() -> String {
    LOADS.iter().map(|(major, minor)| format!("{major}.{minor}")).collect::<Vec<_>>().join(" and ")
}

/// Why a plugin cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot read plugin directory {dir}: {source}")]
    Dir { dir: PathBuf, source: std::io::Error },
    #[error("plugin {name:?} ({path}): cannot read: {source}")]
    Read { name: String, path: PathBuf, source: std::io::Error },
    #[error("plugin {name:?} ({path}) is not a valid WebAssembly component: {detail}")]
    Compile { name: String, path: PathBuf, detail: String },
    #[error("plugin {name:?} ({path}) does not fit this host: {detail}")]
    WrongWorld { name: String, path: PathBuf, detail: String },
    #[error("{0}")]
    Refused(String),
    #[error("no plugin named {name:?} in {dir} (found: {found})")]
    Missing { name: String, dir: PathBuf, found: String },
    #[error("plugin {plugin:?} refused its configuration for route {route:?}: {message}")]
    Init { plugin: String, route: String, message: String },
    #[error("plugin {plugin:?} could not start for route {route:?}: {detail}")]
    Instantiate { plugin: String, route: String, detail: String },
}

/// Which world of `ferry:plugin` a component targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginWorld {
    /// `processor`: `init` + `process`.
    Processor,
    /// `settling-processor`: a processor that also exports `settled`.
    SettlingProcessor,
    /// `header-mapper`: `init` + `map-headers`, run per binding.
    HeaderMapper,
    /// `transport-receiver`: exports `receiver` (since 1.2.0).
    TransportReceiver,
    /// `transport-sender`: exports `sender` (since 1.2.0).
    TransportSender,
    /// `transport`: exports both.
    Transport,
}

impl PluginWorld {
    pub fn name(self) -> &'static str {
        match self {
            PluginWorld::Processor => "processor",
            PluginWorld::SettlingProcessor => "settling-processor",
            PluginWorld::HeaderMapper => "header-mapper",
            PluginWorld::TransportReceiver => "transport-receiver",
            PluginWorld::TransportSender => "transport-sender",
            PluginWorld::Transport => "transport",
        }
    }

    /// Whether it can stand in a route's processor chain.
    pub fn is_processor(self) -> bool {
        matches!(self, PluginWorld::Processor | PluginWorld::SettlingProcessor)
    }

    /// Whether it can be a `type = "component"` receiver.
    pub fn receives(self) -> bool {
        matches!(self, PluginWorld::TransportReceiver | PluginWorld::Transport)
    }

    /// Whether it can be a `type = "component"` sender.
    pub fn sends(self) -> bool {
        matches!(self, PluginWorld::TransportSender | PluginWorld::Transport)
    }
}

/// The instantiation recipe of a loaded component, by world.
pub(crate) enum Pre {
    Processor(ProcessorPre<HostState>),
    Settling(SettlingProcessorPre<HostState>),
    Mapper(HeaderMapperPre<HostState>),
    Transport { receiver: Option<TransportReceiverPre<HostState>>, sender: Option<TransportSenderPre<HostState>> },
}

/// A compiled plugin that passed the world check.
pub struct LoadedPlugin {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    /// A hash of the file's bytes: a reload swaps in the plugins whose
    /// digests changed, and reuses the compiled code of those that did not.
    pub digest: u64,
    pub world: PluginWorld,
    /// The contract version it was built against (one the host [`loads`]).
    pub contract: String,
    /// Whether the compiled code came from the on-disk cache.
    pub from_cache: bool,
    /// Whether the component imports a WASI interface whose calls can wait
    /// (see [`WAITING_IMPORTS`]): its calls then run on a blocking thread.
    pub may_wait: bool,
    pub(crate) pre: Pre,
}

impl LoadedPlugin {
    /// The full name of the world it targets, at the contract version it
    /// was built against (`ferry:plugin/processor@1.3.0`).
    pub fn world_at_contract(&self) -> String {
        format!("{PLUGIN_PACKAGE}/{}@{}", self.world.name(), self.contract)
    }
}

/// WASI interfaces whose calls can wait: a clock subscription (`sleep`),
/// files, sockets, HTTP. The streams and poll every Rust component imports
/// (for stderr) are not on the list: a plugin writes there only when it
/// panics, and then its message fails either way.
pub const WAITING_IMPORTS: [&str; 4] =
    ["wasi:clocks/monotonic-clock", "wasi:filesystem/", "wasi:sockets/", "wasi:http/"];

/// The plugins of one directory. A clone shares the compiled plugins.
#[derive(Clone)]
pub struct PluginRegistry {
    engine: PluginEngine,
    dir: PathBuf,
    plugins: BTreeMap<String, Arc<LoadedPlugin>>,
    refused: BTreeMap<String, String>,
}

impl PluginRegistry {
    /// Loads every `*.wasm` file in `dir`. A file that does not load is
    /// logged and remembered with its reason; only the directory itself
    /// being unreadable is an error here.
    pub fn load_dir(engine: &PluginEngine, dir: &Path) -> Result<Self, PluginError> {
        Self::reload_dir(engine, dir, None)
    }

    /// As [`PluginRegistry::load_dir`], reusing the compiled plugins of
    /// `previous` whose files have not changed (same path and digest).
    pub fn reload_dir(
        engine: &PluginEngine,
        dir: &Path,
        previous: Option<&PluginRegistry>,
    ) -> Result<Self, PluginError> {
        Self::reload_named(engine, dir, previous, None)
    }

    /// As [`PluginRegistry::reload_dir`], loading only the plugins named in
    /// `wanted` (when given): a config's start-up does not compile
    /// components it does not use, however many the directory holds.
    pub fn reload_named(
        engine: &PluginEngine,
        dir: &Path,
        previous: Option<&PluginRegistry>,
        wanted: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Self, PluginError> {
        let entries = std::fs::read_dir(dir).map_err(|source| PluginError::Dir { dir: dir.to_owned(), source })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
            .filter(|p| wanted.is_none_or(|names| names.contains(&plugin_name(p))))
            .collect();
        paths.sort();
        let mut registry =
            Self { engine: engine.clone(), dir: dir.to_owned(), plugins: BTreeMap::new(), refused: BTreeMap::new() };
        // Files that must be compiled (new or changed). Their bytes are read
        // again to load them, so that a directory of large components is
        // not held in memory all at once.
        let mut changed = Vec::new();
        for path in paths {
            let name = plugin_name(&path);
            let Some(bytes) = registry.read(&name, &path) else { continue };
            let unchanged =
                previous.and_then(|p| p.plugins.get(&name)).filter(|p| p.path == path && p.digest == digest(&bytes));
            match unchanged {
                Some(plugin) => {
                    registry.plugins.insert(name, plugin.clone());
                }
                None => changed.push((name, path)),
            }
        }
        let files: Vec<PathBuf> = changed.iter().map(|(_, path)| path.clone()).collect();
        if let Err(e) = engine.precompile(&files) {
            warn!(error = %e, "plugins could not be compiled in a child process; compiling them here");
        }
        for (name, path) in changed {
            let Some(bytes) = registry.read(&name, &path) else { continue };
            match load_bytes(engine, &path, &bytes) {
                Ok(plugin) => {
                    info!(
                        plugin = %name,
                        size = plugin.size,
                        world = plugin.world.name(),
                        from_cache = plugin.from_cache,
                        "plugin loaded"
                    );
                    registry.plugins.insert(name, Arc::new(plugin));
                }
                Err(e) => {
                    warn!(plugin = %name, error = %e, "plugin refused");
                    registry.refused.insert(name, e.to_string());
                }
            }
        }
        Ok(registry)
    }

    /// A plugin file's bytes; a file that cannot be read is refused (logged
    /// and remembered with the reason).
    fn read(&mut self, name: &str, path: &Path) -> Option<Vec<u8>> {
        match std::fs::read(path) {
            Ok(b) => Some(b),
            Err(source) => {
                let e = PluginError::Read { name: name.to_owned(), path: path.to_owned(), source };
                warn!(plugin = %name, error = %e, "plugin refused");
                self.refused.insert(name.to_owned(), e.to_string());
                None
            }
        }
    }

    /// The plugin named `name`, or why it is not available.
    pub fn get(&self, name: &str) -> Result<Arc<LoadedPlugin>, PluginError> {
        if let Some(p) = self.plugins.get(name) {
            return Ok(p.clone());
        }
        if let Some(reason) = self.refused.get(name) {
            return Err(PluginError::Refused(reason.clone()));
        }
        let found: Vec<&str> = self.plugins.keys().map(String::as_str).collect();
        Err(PluginError::Missing {
            name: name.to_owned(),
            dir: self.dir.clone(),
            found: if found.is_empty() { "none".into() } else { found.join(", ") },
        })
    }

    /// The plugins that did not load, with why.
    pub fn refused(&self) -> impl Iterator<Item = (&str, &str)> {
        self.refused.iter().map(|(name, why)| (name.as_str(), why.as_str()))
    }

    /// Names of the plugins that loaded.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.plugins.keys().map(String::as_str)
    }

    pub fn engine(&self) -> &PluginEngine {
        &self.engine
    }
}

/// The plugin name a file provides: its file name without `.wasm`.
pub fn plugin_name(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Compiles one component and checks it against the plugin worlds.
pub fn load_file(engine: &PluginEngine, path: &Path) -> Result<LoadedPlugin, PluginError> {
    let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
        name: plugin_name(path),
        path: path.to_owned(),
        source,
    })?;
    load_bytes(engine, path, &bytes)
}

fn load_bytes(engine: &PluginEngine, path: &Path, bytes: &[u8]) -> Result<LoadedPlugin, PluginError> {
    let name = plugin_name(path);
    let wrong = |detail: String| PluginError::WrongWorld { name: name.clone(), path: path.to_owned(), detail };
    // With the engine's cache on, a component compiled before (same bytes,
    // same wasmtime) is read back from disk instead of compiled again.
    let hits = engine.cache_hits();
    let component = Component::from_binary(engine.engine(), bytes).map_err(|e| PluginError::Compile {
        name: name.clone(),
        path: path.to_owned(),
        detail: format!("{e:#}"),
    })?;
    let from_cache = engine.cache_hits() > hits;
    let may_wait = component
        .component_type()
        .imports(engine.engine())
        .any(|(import, _)| WAITING_IMPORTS.iter().any(|w| import.starts_with(w)));
    let (world, contract) = check_world(engine, &component).map_err(&wrong)?;
    let mut linker: Linker<HostState> = Linker::new(engine.engine());
    // Transport components are called asynchronously (on the async
    // workers, their WASI waits awaited there); processors synchronously.
    if world.receives() || world.sends() {
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| wrong(format!("{e:#}")))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(|e| wrong(format!("{e:#}")))?;
    } else {
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| wrong(format!("{e:#}")))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker).map_err(|e| wrong(format!("{e:#}")))?;
    }
    crate::bindings::Processor::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(&mut linker, |s| s)
        .map_err(|e| wrong(format!("{e:#}")))?;
    let mismatch =
        |e: wasmtime::Error| wrong(format!("does not match world {PLUGIN_PACKAGE}/{}@{contract}: {e:#}", world.name()));
    let instance_pre = linker.instantiate_pre(&component).map_err(mismatch)?;
    let pre = match world {
        PluginWorld::Processor => Pre::Processor(ProcessorPre::new(instance_pre).map_err(mismatch)?),
        PluginWorld::SettlingProcessor => Pre::Settling(SettlingProcessorPre::new(instance_pre).map_err(mismatch)?),
        PluginWorld::HeaderMapper => Pre::Mapper(HeaderMapperPre::new(instance_pre).map_err(mismatch)?),
        PluginWorld::TransportReceiver | PluginWorld::TransportSender | PluginWorld::Transport => Pre::Transport {
            receiver: world
                .receives()
                .then(|| TransportReceiverPre::new(instance_pre.clone()))
                .transpose()
                .map_err(mismatch)?,
            sender: world.sends().then(|| TransportSenderPre::new(instance_pre)).transpose().map_err(mismatch)?,
        },
    };
    Ok(LoadedPlugin {
        name,
        path: path.to_owned(),
        size: bytes.len() as u64,
        digest: digest(bytes),
        world,
        contract,
        from_cache,
        may_wait,
        pre,
    })
}

fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Finds the world and contract version a component targets, or explains,
/// before linking, why it targets none of this host's: a package version it
/// does not load, a missing export, or an import the host does not provide.
fn check_world(engine: &PluginEngine, component: &Component) -> Result<(PluginWorld, String), String> {
    let ty = component.component_type();
    let mut contract: Option<String> = None;
    for (import, item) in ty.imports(engine.engine()) {
        if matches!(item.ty, ComponentItem::Type(_) | ComponentItem::Resource(_)) {
            // Types a world `use`s (such as `message`) are named imports too.
            continue;
        }
        if let Some(rest) = import.strip_prefix(&format!("{PLUGIN_PACKAGE}/")) {
            let version = rest.split_once('@').map(|(_, v)| v).unwrap_or("(unversioned)");
            if !loads(version) {
                return Err(format!(
                    "built against {PLUGIN_PACKAGE}@{version} (imports {import}); this host provides {PLUGIN_PACKAGE}@{PLUGIN_VERSION} and loads components built against {} — rebuild the plugin against wit/ of this ferry",
                    loaded_versions()
                ));
            }
            match &contract {
                Some(seen) if seen != version => {
                    return Err(format!("imports {PLUGIN_PACKAGE} at two versions, {seen} and {version}"));
                }
                _ => contract = Some(version.to_owned()),
            }
        } else if !import.starts_with("wasi:") {
            return Err(format!("imports {import}, which ferry does not provide to plugins"));
        }
    }
    let exports: Vec<&str> = ty.exports(engine.engine()).map(|(n, _)| n).collect();
    // An interface export is named with its package and version
    // (`ferry:plugin/receiver@1.3.0`).
    let exports_interface = |name: &str| {
        exports.iter().any(|e| {
            e.strip_prefix(PLUGIN_PACKAGE)
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|r| r.split('@').next() == Some(name))
        })
    };
    let (receiver, sender) = (exports_interface("receiver"), exports_interface("sender"));
    let world = if receiver && sender {
        PluginWorld::Transport
    } else if receiver {
        PluginWorld::TransportReceiver
    } else if sender {
        PluginWorld::TransportSender
    } else if exports.contains(&"map-headers") {
        PluginWorld::HeaderMapper
    } else if exports.contains(&"settled") {
        PluginWorld::SettlingProcessor
    } else {
        PluginWorld::Processor
    };
    let required: &[&str] = match world {
        PluginWorld::HeaderMapper => &["init", "map-headers"],
        PluginWorld::SettlingProcessor => &["init", "process", "settled"],
        PluginWorld::Processor => &["init", "process"],
        // Found by their exports.
        PluginWorld::TransportReceiver | PluginWorld::TransportSender | PluginWorld::Transport => &[],
    };
    for required in required {
        if !exports.contains(required) {
            return Err(format!(
                "does not export `{required}` (exports: {}); it is not a {PLUGIN_PACKAGE}/{}@{} component",
                if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") },
                world.name(),
                contract.as_deref().unwrap_or(PLUGIN_VERSION)
            ));
        }
    }
    // A component that imports nothing of the contract (a pure function
    // of its message) is taken as built against the current version.
    Ok((world, contract.unwrap_or_else(|| PLUGIN_VERSION.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_the_current_and_the_previous_minor_only() {
        assert!(loads(PLUGIN_VERSION));
        assert!(loads("1.3.7") && loads("1.2.0"));
        for refused in ["0.1.0", "1.1.0", "1.4.0", "2.0.0", "1.3", "1.3.0-rc1", "(unversioned)"] {
            assert!(!loads(refused), "{refused}");
        }
        assert_eq!(loaded_versions(), "1.3 and 1.2");
    }
}
