//! The generated bindings of the plugin contract, one module per world.
//! The three share the `types`, `host` and `kv` interfaces of the first, so
//! a [`Message`](crate::Message) or a
//! [`HeaderValue`](crate::HeaderValue) is one type whichever world a plugin
//! targets. Plugins do not use this module: they implement the SDK's traits
//! and call its `export_*!` macros.
//!
//! By default they are those of `wit/plugin.wit` (`ferry:plugin@1.1.0`).
//! With the feature `previous-contract` they are those of
//! `wit/previous/plugin.wit` (1.0.0), for a plugin that must also load on a
//! ferry of the previous minor; what 1.1 added (`kv::keys`) is then absent.

macro_rules! contract {
    ($wit:literal, $types:literal, $host:literal, $kv:literal) => {
        wit_bindgen::generate!({
            path: $wit,
            world: "processor",
            pub_export_macro: true,
            export_macro_name: "export_processor_world",
            default_bindings_module: "ferry_plugin_sdk::bindings",
            additional_derives: [PartialEq],
        });

        /// The `settling-processor` world.
        pub mod settling {
            wit_bindgen::generate!({
                path: $wit,
                world: "settling-processor",
                with: {
                    $types: ferry_plugin_sdk::bindings::ferry::plugin::types,
                    $host: ferry_plugin_sdk::bindings::ferry::plugin::host,
                    $kv: ferry_plugin_sdk::bindings::ferry::plugin::kv,
                },
                pub_export_macro: true,
                export_macro_name: "export_settling_world",
                default_bindings_module: "ferry_plugin_sdk::bindings::settling",
            });
        }

        /// The `header-mapper` world.
        pub mod mapper {
            wit_bindgen::generate!({
                path: $wit,
                world: "header-mapper",
                with: {
                    $types: ferry_plugin_sdk::bindings::ferry::plugin::types,
                    $host: ferry_plugin_sdk::bindings::ferry::plugin::host,
                    $kv: ferry_plugin_sdk::bindings::ferry::plugin::kv,
                },
                pub_export_macro: true,
                export_macro_name: "export_mapper_world",
                default_bindings_module: "ferry_plugin_sdk::bindings::mapper",
            });
        }
    };
}

// The interface names carry the version: wit-bindgen's `with` wants them
// exactly as the package declares them.
#[cfg(not(feature = "previous-contract"))]
contract!("../../wit", "ferry:plugin/types@1.1.0", "ferry:plugin/host@1.1.0", "ferry:plugin/kv@1.1.0");
#[cfg(feature = "previous-contract")]
contract!("../../wit/previous", "ferry:plugin/types@1.0.0", "ferry:plugin/host@1.0.0", "ferry:plugin/kv@1.0.0");
