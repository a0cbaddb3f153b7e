//! ferry's WebAssembly plugin host.
//!
//! - [`engine`]: the shared wasmtime engine and its epoch ticker (the clock
//!   behind every call deadline).
//! - [`registry`]: loads every `*.wasm` in the plugin directory, compiles it
//!   once and checks it targets `ferry:plugin/processor@0.1.0`.
//! - [`processor`]: a configured plugin as a route processor — a pool of
//!   reusable instances, each call bounded by a deadline and a memory cap; a
//!   trap fails only its message and the instance is replaced.
//! - `bindings` (private): the single `bindgen!` of `wit/plugin.wit` and the
//!   host side of the `message` resource.

mod bindings;
pub mod engine;
pub mod processor;
pub mod registry;

pub use engine::{PluginEngine, PluginLimits};
pub use processor::WasmProcessor;
pub use registry::{LoadedPlugin, PluginError, PluginRegistry};
