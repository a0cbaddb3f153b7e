//! From a validated [`Config`] to running routes, in three steps, one
//! module each:
//!
//! 1. [`parts`]: build the parts a config names (plugins, processor
//!    chains, header mappers, senders, receivers, bindings);
//! 2. [`plan`]: decide what a config needs beyond what already runs (at
//!    start: everything; at a reload: the routes whose [`plan::RouteKey`]
//!    changed, chains to swap, senders to carry over);
//! 3. [`bridge`]: run the routes, apply reloads, stop cleanly.
//!
//! `ferry run` calls [`Bridge::build`] (steps 1 and 2 for the whole
//! config, and opens the store) and [`Bridge::run`]; a reload goes through
//! `plan::prepare` again with the running routes and senders.

mod bridge;
mod endpoint;
mod parts;
mod plan;

pub use bridge::{Bridge, ReloadRequest};
pub use parts::{
    Processors, RouteBindings, StandaloneBindings, StartError, build_processors, check_urls, compile_in_child, leasing,
    store_engine, validate_plugins,
};
