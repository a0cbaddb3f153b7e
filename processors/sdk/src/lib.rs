//! The guest SDK: write a ferry plugin — a processor, a settling processor
//! or a header mapper — in a few lines of Rust, and test it with plain
//! `cargo test`.
//!
//! ```
//! use ferry_plugin_sdk::{Failure, Message, Plugin, Processor, Verdict};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config { kind: String }
//!
//! struct OnlyKind(Config);
//!
//! impl Plugin for OnlyKind {
//!     type Config = Config;
//!     fn init(config: Config) -> Result<Self, String> { Ok(OnlyKind(config)) }
//! }
//!
//! impl Processor for OnlyKind {
//!     fn process(&self, msg: &Message) -> Result<Verdict, Failure> {
//!         match msg.text_header("kind") {
//!             Some(k) if k == self.0.kind => Ok(Verdict::Pass),
//!             _ => Ok(Verdict::Drop("another kind".into())),
//!         }
//!     }
//! }
//!
//! ferry_plugin_sdk::export_processor!(OnlyKind);
//!
//! # fn main() {
//! // Under `cargo test`, the same plugin runs on the host's double:
//! let p = ferry_plugin_sdk::testing::plugin::<OnlyKind>(serde_json::json!({ "kind": "temp" })).unwrap();
//! let msg = ferry_plugin_sdk::testing::message().header("kind", "humidity").build();
//! assert_eq!(p.process(&msg), Ok(Verdict::Drop("another kind".into())));
//! # }
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2` and copy the
//! `.wasm` into the daemon's plugin directory as `<name>.wasm`.
//!
//! - [`Plugin`]: the typed config and `init` every plugin has. A config
//!   that does not decode is refused with the key that is wrong (`ferry
//!   validate` prints it), e.g. `` when[0].op: unknown variant `like` ``.
//! - [`Processor`] + [`export_processor!`] (world `processor`);
//!   [`SettlingProcessor`] + [`export_settling_processor!`] (world
//!   `settling-processor`, which also hears how each send ended);
//!   [`HeaderMapper`] + [`export_header_mapper!`] (world `header-mapper`).
//! - [`Message`]: the message, with typed [`HeaderValue`]s and their
//!   conversions to and from text and JSON.
//! - [`log`], [`kv`], [`now`]: the host's services.
//! - [`transport`]: transport components (a receiver, a sender, or both,
//!   for a system ferry has no transport for), with [`transport::http`].
//! - [`testing`] (native builds only): the host's double for unit tests.
//! - [`names`]: reserved header names, shared with the host.

// The bindings name the SDK by its crate name, which also works inside it.
extern crate self as ferry_plugin_sdk;

#[doc(hidden)]
pub mod bindings;
mod header;
mod message;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
#[cfg(not(feature = "previous-contract"))]
pub mod transport;

pub use bindings::ferry::plugin::host::Level;
pub use bindings::ferry::plugin::types::{Failure, HeaderValue, RetryAfter, SendOutcome, Verdict};
/// The reserved header names the host uses (shared with the host's
/// envelope crate, so guest and host never disagree on a name).
pub use ferry_envelope::names;
pub use message::Message;
pub use serde_json;

#[cfg(target_arch = "wasm32")]
use bindings::ferry::plugin::{host as host_api, kv as kv_api};
#[cfg(not(target_arch = "wasm32"))]
use testing::{host as host_api, kv as kv_api};

use serde::de::DeserializeOwned;

/// What every plugin has: a typed config and a constructor. One value is
/// made per plugin instance and then handles many messages.
pub trait Plugin: Sized + 'static {
    /// The route's `config` table (a binding's `header_mapper_config` for
    /// a header mapper), decoded with serde. Use [`NoConfig`] for none.
    type Config: DeserializeOwned;

    /// Builds the plugin from its decoded config. An error refuses the
    /// route's configuration with that text.
    fn init(config: Self::Config) -> Result<Self, String>;
}

/// A processor (world `processor`): a filter, transform or router that runs
/// on every message of the routes that list it.
pub trait Processor: Plugin {
    /// Decides what happens to one message; it may change the message.
    fn process(&self, msg: &Message) -> Result<Verdict, Failure>;
}

/// A processor that is also told how the sends of each message it passed
/// ended (world `settling-processor`), e.g. a circuit breaker.
pub trait SettlingProcessor: Processor {
    /// Called after each send attempt of a message this processor passed,
    /// with the message as it was sent. Changes to it are ignored.
    fn settled(&self, msg: &Message, outcome: SendOutcome);
}

/// A header mapper (world `header-mapper`): runs per binding on the
/// outbound copy of a message, after the processors.
pub trait HeaderMapper: Plugin {
    /// Maps one outbound copy for `binding`, planned for `address` (empty:
    /// the sender's default). Returns the address to send to instead, or
    /// `None` to keep it. `Reject` fails this binding's copy for good,
    /// `Retry` retries it like a failed send.
    fn map_headers(&self, msg: &Message, binding: &str, address: &str) -> Result<Option<String>, Failure>;
}

/// The config of a plugin that takes none: only an empty table decodes.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

/// Decodes a config given as JSON; an error names the key that is wrong.
pub fn decode_config<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let why = e.inner().to_string();
        // serde_json places the error in the JSON text the host made, which
        // is not what the operator wrote: keep the key path instead.
        let why = why.split(" at line ").next().unwrap_or(&why);
        if path == "." { why.to_owned() } else { format!("{path}: {why}") }
    })
}

/// Decodes the config and builds the plugin: what the component's `init`
/// runs, and what [`testing::plugin`] runs.
#[doc(hidden)]
pub fn start<P: Plugin>(config_json: &str) -> Result<P, String> {
    P::init(decode_config(config_json)?)
}

/// Writes to the host's log, tagged with the plugin and route.
pub mod log {
    use crate::{Level, host_api};

    pub fn debug(message: &str) {
        host_api::log(Level::Debug, message);
    }
    pub fn info(message: &str) {
        host_api::log(Level::Info, message);
    }
    pub fn warn(message: &str) {
        host_api::log(Level::Warn, message);
    }
    pub fn error(message: &str) {
        host_api::log(Level::Error, message);
    }
}

/// The host's wall clock: milliseconds since the Unix epoch.
pub fn now() -> i64 {
    host_api::now()
}

/// The key-value store the host keeps for this plugin on this route: shared
/// by all its instances, kept across traps and hot reloads, gone when the
/// daemon stops. See `interface kv` in `wit/plugin.wit` for the limits.
pub mod kv {
    pub use crate::kv_api::{compare_and_swap, delete, get, increment, keys, set};
}

/// The glue the `export_*!` macros expand to.
#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;

    use crate::{Failure, Plugin};

    /// The one plugin value of this instance, set by `init`.
    pub struct Slot<P>(RefCell<Option<P>>);

    impl<P: Plugin> Default for Slot<P> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<P: Plugin> Slot<P> {
        pub const fn new() -> Self {
            Slot(RefCell::new(None))
        }

        pub fn init(&self, config_json: &str) -> Result<(), String> {
            let plugin = crate::start::<P>(config_json)?;
            *self.0.borrow_mut() = Some(plugin);
            Ok(())
        }

        /// Runs `f` on the plugin; a call before `init` is refused.
        pub fn with<R>(&self, f: impl FnOnce(&P) -> Result<R, Failure>) -> Result<R, Failure> {
            match self.0.borrow().as_ref() {
                Some(p) => f(p),
                None => Err(Failure::Reject("plugin used before init".into())),
            }
        }

        /// As [`Slot::with`] for a call that cannot fail.
        pub fn run(&self, f: impl FnOnce(&P)) {
            if let Some(p) = self.0.borrow().as_ref() {
                f(p)
            }
        }
    }

    /// The SDK's view of the host's message.
    #[cfg(target_arch = "wasm32")]
    pub fn message(msg: &crate::bindings::ferry::plugin::types::Message) -> &crate::Message {
        <crate::Message as ref_cast::RefCast>::ref_cast(msg)
    }
}

/// What the `export_*!` macros share: the instance's plugin value, `init`,
/// the world's export glue, and (natively) keeping the plugin's code alive
/// for the dead-code lint, since nothing is exported under `cargo test`.
#[doc(hidden)]
#[macro_export]
macro_rules! __export {
    ($ty:ty, [$($world:tt)*], $export:ident, [$($trait:path => $method:ident),*], { $($methods:tt)* }) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            ::std::thread_local! {
                static INSTANCE: $crate::__private::Slot<$ty> = const { $crate::__private::Slot::new() };
            }
            struct Guest;
            impl $($world)*::Guest for Guest {
                fn init(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                    INSTANCE.with(|s| s.init(&config))
                }
                $($methods)*
            }
            $($world)*::$export!(Guest);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            let _ = $crate::start::<$ty>;
            $(let _ = <$ty as $trait>::$method;)*
        };
    };
}

/// Exports a [`Processor`] as the component's `init` and `process`.
#[macro_export]
macro_rules! export_processor {
    ($ty:ty) => {
        $crate::__export!($ty, [$crate::bindings], export_processor_world, [$crate::Processor => process], {
            fn process(
                msg: &$crate::bindings::ferry::plugin::types::Message,
            ) -> ::std::result::Result<$crate::Verdict, $crate::Failure> {
                INSTANCE.with(|s| s.with(|p| $crate::Processor::process(p, $crate::__private::message(msg))))
            }
        });
    };
}

/// Exports a [`SettlingProcessor`] as the component's `init`, `process`
/// and `settled`.
#[macro_export]
macro_rules! export_settling_processor {
    ($ty:ty) => {
        $crate::__export!(
            $ty,
            [$crate::bindings::settling],
            export_settling_world,
            [$crate::Processor => process, $crate::SettlingProcessor => settled],
            {
                fn process(
                    msg: &$crate::bindings::ferry::plugin::types::Message,
                ) -> ::std::result::Result<$crate::Verdict, $crate::Failure> {
                    INSTANCE.with(|s| s.with(|p| $crate::Processor::process(p, $crate::__private::message(msg))))
                }
                fn settled(msg: &$crate::bindings::ferry::plugin::types::Message, outcome: $crate::SendOutcome) {
                    INSTANCE.with(|s| {
                        s.run(|p| $crate::SettlingProcessor::settled(p, $crate::__private::message(msg), outcome))
                    })
                }
            }
        );
    };
}

/// Exports a [`HeaderMapper`] as the component's `init` and `map-headers`.
#[macro_export]
macro_rules! export_header_mapper {
    ($ty:ty) => {
        $crate::__export!($ty, [$crate::bindings::mapper], export_mapper_world, [$crate::HeaderMapper => map_headers], {
            fn map_headers(
                msg: &$crate::bindings::ferry::plugin::types::Message,
                binding: ::std::string::String,
                address: ::std::string::String,
            ) -> ::std::result::Result<::std::option::Option<::std::string::String>, $crate::Failure> {
                INSTANCE.with(|s| {
                    s.with(|p| $crate::HeaderMapper::map_headers(p, $crate::__private::message(msg), &binding, &address))
                })
            }
        });
    };
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rule {
        #[allow(dead_code)]
        op: Op,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Op {
        Eq,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[allow(dead_code)]
        when: Vec<Rule>,
        #[allow(dead_code)]
        #[serde(default)]
        limit: u32,
    }

    #[test]
    fn config_errors_name_the_key() {
        let err = decode_config::<Config>(r#"{"when": [{"op": "eq"}, {"op": "like"}]}"#).expect_err("refused");
        assert!(err.starts_with("when[1].op: unknown variant `like`"), "{err}");
        assert!(!err.contains("line 1"), "{err}");
        let err = decode_config::<Config>(r#"{"when": [], "limit": "ten"}"#).expect_err("refused");
        assert!(err.starts_with("limit: invalid type: string \"ten\""), "{err}");
        let err = decode_config::<Config>(r#"{"when": [], "colour": 1}"#).expect_err("refused");
        assert!(err.contains("unknown field `colour`"), "{err}");
        assert!(decode_config::<Config>(r#"{"when": [{"op": "eq"}]}"#).is_ok());
        assert!(decode_config::<NoConfig>("{}").is_ok());
        assert!(decode_config::<NoConfig>(r#"{"x": 1}"#).is_err());
    }

    #[test]
    fn the_double_refuses_reserved_headers_unless_granted() {
        let msg = testing::message().header(names::TENANT_ID, "from-transport").build();
        msg.set_header(names::TENANT_ID, "acme");
        msg.remove_header(names::TENANT_ID);
        assert_eq!(msg.text_header(names::TENANT_ID).as_deref(), Some("from-transport"));
        assert_eq!(testing::refused_reserved(&msg), 2);
        let granted = testing::message().grant(names::TENANT_ID).build();
        granted.set_header(names::TENANT_ID, "acme");
        assert_eq!(granted.text_header(names::TENANT_ID).as_deref(), Some("acme"));
        assert_eq!(testing::refused_reserved(&granted), 0);
    }

    #[test]
    fn the_double_keeps_host_services_per_test() {
        testing::set_now(1_000);
        testing::advance(500);
        assert_eq!(now(), 1_500);
        assert_eq!(kv::increment("n", 2), Ok(2));
        assert_eq!(kv::get("n"), Some(2i64.to_le_bytes().to_vec()));
        assert!(kv::set(&"k".repeat(300), b"v").expect_err("limit").contains("longer than 256"));
        kv::set("m", b"1").expect("kv");
        assert_eq!(kv::keys(""), ["m", "n"]);
        log::warn("careful");
        assert_eq!(testing::logs(), vec![(Level::Warn, "careful".to_owned())]);
        assert!(testing::logs().is_empty());
    }
}
