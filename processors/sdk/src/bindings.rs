//! The generated bindings of `ferry:plugin@0.1.0`, one module per world.
//! The three share the `types`, `host` and `kv` interfaces of the first, so
//! a [`Message`](crate::Message) or a
//! [`HeaderValue`](crate::HeaderValue) is one type whichever world a plugin
//! targets. Plugins do not use this module: they implement the SDK's traits
//! and call its `export_*!` macros.

wit_bindgen::generate!({
    path: "../../wit",
    world: "processor",
    pub_export_macro: true,
    export_macro_name: "export_processor_world",
    default_bindings_module: "ferry_plugin_sdk::bindings",
    additional_derives: [PartialEq],
});

/// The `settling-processor` world.
pub mod settling {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "settling-processor",
        with: {
            "ferry:plugin/types@0.1.0": ferry_plugin_sdk::bindings::ferry::plugin::types,
            "ferry:plugin/host@0.1.0": ferry_plugin_sdk::bindings::ferry::plugin::host,
            "ferry:plugin/kv@0.1.0": ferry_plugin_sdk::bindings::ferry::plugin::kv,
        },
        pub_export_macro: true,
        export_macro_name: "export_settling_world",
        default_bindings_module: "ferry_plugin_sdk::bindings::settling",
    });
}

/// The `header-mapper` world.
pub mod mapper {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "header-mapper",
        with: {
            "ferry:plugin/types@0.1.0": ferry_plugin_sdk::bindings::ferry::plugin::types,
            "ferry:plugin/host@0.1.0": ferry_plugin_sdk::bindings::ferry::plugin::host,
            "ferry:plugin/kv@0.1.0": ferry_plugin_sdk::bindings::ferry::plugin::kv,
        },
        pub_export_macro: true,
        export_macro_name: "export_mapper_world",
        default_bindings_module: "ferry_plugin_sdk::bindings::mapper",
    });
}
