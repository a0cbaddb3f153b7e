//! The generated bindings of the plugin contract, one module per world.
//! The three share the `types`, `host` and `kv` interfaces of the first, so
//! a [`Message`](crate::Message) or a
//! [`HeaderValue`](crate::HeaderValue) is one type whichever world a plugin
//! targets. Plugins do not use this module: they implement the SDK's traits
//! and call its `export_*!` macros.
//!
//! By default they are those of `wit/plugin.wit` (`ferry:plugin@1.3.0`).
//! With the feature `previous-contract` they are those of
//! `wit/previous/plugin.wit` (1.2.0), for a plugin that must also load on a
//! ferry of the previous minor; the SDK then offers the processor and
//! mapper worlds only.

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

/// The transport worlds (since contract 1.2): `transport-receiver` and
/// `transport-sender`, the second sharing the first's `transport-types`.
/// A component with both halves (world `transport`) invokes both export
/// macros: the two worlds' exports and imports add up to that world's,
/// and the `transport` world's own bindings would define the same export
/// macros a second time (wit-bindgen names them by interface).
#[cfg(not(feature = "previous-contract"))]
macro_rules! transports {
    ($wit:literal, $types:literal, $host:literal, $kv:literal, $ttypes:literal) => {
        /// The `transport-receiver` world.
        pub mod transport_receiver {
            wit_bindgen::generate!({
                path: $wit,
                world: "transport-receiver",
                with: {
                    $types: ferry_plugin_sdk::bindings::ferry::plugin::types,
                    $host: ferry_plugin_sdk::bindings::ferry::plugin::host,
                    $kv: ferry_plugin_sdk::bindings::ferry::plugin::kv,
                },
                pub_export_macro: true,
                export_macro_name: "export_transport_receiver_world",
                default_bindings_module: "ferry_plugin_sdk::bindings::transport_receiver",
                additional_derives: [PartialEq],
            });
        }

        /// The `transport-sender` world.
        pub mod transport_sender {
            wit_bindgen::generate!({
                path: $wit,
                world: "transport-sender",
                with: {
                    $types: ferry_plugin_sdk::bindings::ferry::plugin::types,
                    $host: ferry_plugin_sdk::bindings::ferry::plugin::host,
                    $kv: ferry_plugin_sdk::bindings::ferry::plugin::kv,
                    $ttypes: ferry_plugin_sdk::bindings::transport_receiver::ferry::plugin::transport_types,
                },
                pub_export_macro: true,
                export_macro_name: "export_transport_sender_world",
                default_bindings_module: "ferry_plugin_sdk::bindings::transport_sender",
            });
        }
    };
}

// The interface names carry the version: wit-bindgen's `with` wants them
// exactly as the package declares them.
#[cfg(not(feature = "previous-contract"))]
contract!("../../wit", "ferry:plugin/types@1.3.0", "ferry:plugin/host@1.3.0", "ferry:plugin/kv@1.3.0");
#[cfg(not(feature = "previous-contract"))]
transports!(
    "../../wit",
    "ferry:plugin/types@1.3.0",
    "ferry:plugin/host@1.3.0",
    "ferry:plugin/kv@1.3.0",
    "ferry:plugin/transport-types@1.3.0"
);
#[cfg(feature = "previous-contract")]
contract!("../../wit/previous", "ferry:plugin/types@1.2.0", "ferry:plugin/host@1.2.0", "ferry:plugin/kv@1.2.0");
