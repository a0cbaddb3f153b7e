//! The guest SDK: write a ferry processor in a few lines of Rust.
//!
//! ```ignore
//! use ferry_plugin_sdk::{Message, Processor, Verdict, Failure};
//!
//! struct OnlyTemp;
//! impl Processor for OnlyTemp {
//!     fn init(_config: serde_json::Value) -> Result<Self, String> { Ok(OnlyTemp) }
//!     fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
//!         match msg.text_header("kind").as_deref() {
//!             Some("temp") => Ok(Verdict::Pass),
//!             _ => Ok(Verdict::Drop("not a temperature".into())),
//!         }
//!     }
//! }
//! ferry_plugin_sdk::export_processor!(OnlyTemp);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2` and copy the
//! `.wasm` into the daemon's plugin directory as `<name>.wasm`.
//!
//! - [`bindings`]: the generated WIT bindings (`ferry:plugin@0.1.0`).
//! - [`Processor`]: the trait a plugin implements.
//! - [`export_processor!`]: wires a `Processor` to the component exports.
//! - [`log`]: write to the host's log.
//! - [`kv`]: the host's key-value store for this plugin on this route.
//! - [`now`]: the host's clock.
//! - [`names`]: reserved header names, from the host's envelope crate.

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "processor",
        pub_export_macro: true,
        export_macro_name: "export_guest",
        default_bindings_module: "ferry_plugin_sdk::bindings",
        additional_derives: [PartialEq],
    });
}

pub use bindings::ferry::plugin::types::{Failure, HeaderValue, Message, RetryAfter, Verdict};
/// The reserved header names the host uses (shared with the host's
/// envelope crate, so guest and host never disagree on a name).
pub use ferry_envelope::names;
pub use serde_json;

/// A message processor. One value is created per plugin instance by
/// [`Processor::init`] and then handles many messages.
pub trait Processor: Sized + 'static {
    /// Builds the processor from the route's `config` table (as JSON).
    /// An error refuses the route's configuration with that text.
    fn init(config: serde_json::Value) -> Result<Self, String>;

    /// Decides what happens to one message; it may change the message.
    fn process(&self, msg: &Message) -> Result<Verdict, Failure>;
}

/// Conveniences on the host-owned message.
pub trait MessageExt {
    /// A header's value when it is text.
    fn text_header(&self, name: &str) -> Option<String>;
}

impl MessageExt for Message {
    fn text_header(&self, name: &str) -> Option<String> {
        match self.header(name) {
            Some(HeaderValue::Text(s)) => Some(s),
            _ => None,
        }
    }
}

/// A header value as JSON: text as a string, numbers and booleans as
/// themselves, a time as its milliseconds, bytes as (lossy) UTF-8 text.
pub fn header_json(value: HeaderValue) -> serde_json::Value {
    match value {
        HeaderValue::Text(s) => serde_json::Value::String(s),
        HeaderValue::Integer(i) => i.into(),
        HeaderValue::Float(f) => serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into),
        HeaderValue::Boolean(b) => b.into(),
        HeaderValue::Time(t) => t.into(),
        HeaderValue::Bytes(b) => serde_json::Value::String(String::from_utf8_lossy(&b).into_owned()),
    }
}

/// Writes to the host's log, tagged with the plugin and route.
pub mod log {
    use crate::bindings::ferry::plugin::host::{Level, log};

    pub fn debug(message: &str) {
        log(Level::Debug, message);
    }
    pub fn info(message: &str) {
        log(Level::Info, message);
    }
    pub fn warn(message: &str) {
        log(Level::Warn, message);
    }
    pub fn error(message: &str) {
        log(Level::Error, message);
    }
}

/// The host's wall clock: milliseconds since the Unix epoch.
pub fn now() -> i64 {
    bindings::ferry::plugin::host::now()
}

/// The key-value store the host keeps for this plugin on this route: shared
/// by all its instances, kept across traps and hot reloads, gone when the
/// daemon stops. See `interface kv` in `wit/plugin.wit` for the limits.
pub mod kv {
    pub use crate::bindings::ferry::plugin::kv::{compare_and_swap, delete, get, increment, set};
}

#[doc(hidden)]
pub fn parse_config(config: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(config).map_err(|e| format!("config is not valid JSON: {e}"))
}

/// Exports a [`Processor`] implementation as the component's `init` and
/// `process` functions.
#[macro_export]
macro_rules! export_processor {
    ($ty:ty) => {
        struct __FerryGuest;

        ::std::thread_local! {
            static __FERRY_PROCESSOR: ::std::cell::RefCell<::std::option::Option<$ty>> =
                const { ::std::cell::RefCell::new(::std::option::Option::None) };
        }

        impl $crate::bindings::Guest for __FerryGuest {
            fn init(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                let value = $crate::parse_config(&config)?;
                let processor = <$ty as $crate::Processor>::init(value)?;
                __FERRY_PROCESSOR.with(|p| *p.borrow_mut() = ::std::option::Option::Some(processor));
                ::std::result::Result::Ok(())
            }

            fn process(msg: &$crate::Message) -> ::std::result::Result<$crate::Verdict, $crate::Failure> {
                __FERRY_PROCESSOR.with(|p| match p.borrow().as_ref() {
                    ::std::option::Option::Some(processor) => $crate::Processor::process(processor, msg),
                    ::std::option::Option::None => {
                        ::std::result::Result::Err($crate::Failure::Reject("processor used before init".into()))
                    }
                })
            }
        }

        $crate::bindings::export_guest!(__FerryGuest);
    };
}
