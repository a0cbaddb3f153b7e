//! ferry's WebAssembly plugin host.
//!
//! - [`engine`]: the shared wasmtime engine and its epoch ticker (the clock
//!   behind every call deadline).
//! - [`registry`]: loads every `*.wasm` in the plugin directory, compiles it
//!   once (cached on disk by content hash) and finds which world of
//!   `ferry:plugin@0.1.0` it targets: `processor`, `settling-processor` or
//!   `header-mapper`.
//! - [`kv`]: the key-value store plugins get per (plugin, route).
//! - [`grants`]: what a route may grant a plugin beyond the default of
//!   nothing (environment variables, a read-only directory, network).
//! - [`processor`]: a configured plugin as a route processor — a pool of
//!   reusable instances, each call bounded by a deadline and a memory cap; a
//!   trap fails only its message and the instance is replaced.
//! - [`transport`]: a transport component as a `type = "component"`
//!   receiver or sender.
//! - `bindings` (private): the `bindgen!`s of `wit/plugin.wit` and the
//!   host side of the `message` resource.

mod bindings;
pub mod component_config;
pub mod engine;
pub mod grants;
mod http_client;
pub mod kv;
pub mod processor;
pub mod registry;
pub mod transport;

pub use engine::{PluginEngine, PluginLimits};
pub use grants::Grants;
pub use processor::{WasmHeaderMapper, WasmProcessor};
pub use registry::{LoadedPlugin, PluginError, PluginRegistry, PluginWorld};
pub use transport::{ComponentReceiver, ComponentSender, ComponentSpec};
