//! Cross-key checks that the schema alone cannot express.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Config, ConfigError, DeliveryMode};

pub(crate) fn validate(config: &Config) -> Result<(), ConfigError> {
    let p = &config.plugins;
    if p.dir.trim().is_empty() {
        return Err(ConfigError::new("plugins.dir", "must not be empty"));
    }
    if p.call_timeout_ms == 0 {
        return Err(ConfigError::new("plugins.call_timeout_ms", "must be at least 1"));
    }
    if p.memory_limit_mib == 0 || p.memory_limit_mib > 4096 {
        return Err(ConfigError::new("plugins.memory_limit_mib", "must be between 1 and 4096"));
    }
    if let Some(listen) = &config.admin.listen {
        let Ok(addr) = listen.parse::<std::net::SocketAddr>() else {
            return Err(ConfigError::new("admin.listen", format!("{listen:?} is not an address like 127.0.0.1:9464")));
        };
        if !addr.ip().is_loopback() && config.admin.token.is_none() && !config.admin.read_only {
            return Err(ConfigError::new(
                "admin.listen",
                format!(
                    "{listen} is not a loopback address: set admin.token (every request then needs it), or admin.read_only = true (no dead-letter replay or purge)"
                ),
            ));
        }
    }
    if let Some(token) = &config.admin.token
        && (token.expose().chars().count() < 16 || token.expose().chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(ConfigError::new("admin.token", "must be at least 16 characters, without spaces"));
    }
    if config.admin.stall_secs == 0 {
        return Err(ConfigError::new("admin.stall_secs", "must be at least 1"));
    }
    if config.admin.shutdown_timeout_secs == 0 {
        return Err(ConfigError::new("admin.shutdown_timeout_secs", "must be at least 1"));
    }
    if config.store.path.trim().is_empty() {
        return Err(ConfigError::new("store.path", "must not be empty"));
    }
    check_store(&config.store)?;

    if config.routes.is_empty() && config.endpoints.sqs.is_none() {
        return Err(ConfigError::new("routes", "at least one [[routes]] entry (or an [endpoints.sqs]) is required"));
    }
    let mut route_ids = BTreeSet::new();
    let mut receiver_users: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, route) in config.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        if route.id.trim().is_empty() {
            return Err(ConfigError::new(format!("{key}.id"), "must not be empty"));
        }
        if route.delivery_mode == DeliveryMode::SharedOutbox && route.id.contains(['/', '\0']) {
            return Err(ConfigError::new(
                format!("{key}.id"),
                "must not contain '/' in a shared_outbox route: it names the outbox partition <route>/<binding>",
            ));
        }
        if !route_ids.insert(route.id.as_str()) {
            return Err(ConfigError::new(format!("{key}.id"), format!("route id {:?} is used twice", route.id)));
        }
        if !config.receivers.contains_key(&route.receiver) {
            return Err(ConfigError::new(
                format!("{key}.receiver"),
                format!("no receiver named {:?} (known: {})", route.receiver, known(config.receivers.keys())),
            ));
        }
        if let Some(other) = receiver_users.insert(route.receiver.as_str(), route.id.as_str()) {
            return Err(ConfigError::new(
                format!("{key}.receiver"),
                format!(
                    "receiver {:?} already feeds route {other:?}; give each route its own receiver",
                    route.receiver
                ),
            ));
        }
        if route.delivery_mode == DeliveryMode::SharedOutbox && route.max_outbox_depth == 0 {
            return Err(ConfigError::new(format!("{key}.max_outbox_depth"), "must be at least 1"));
        }
        if !(1..=MAX_OUTBOX_PARTITIONS).contains(&route.outbox_partitions) {
            return Err(ConfigError::new(
                format!("{key}.outbox_partitions"),
                format!("must be between 1 and {MAX_OUTBOX_PARTITIONS}"),
            ));
        }
        if route.max_hops == 0 {
            return Err(ConfigError::new(
                format!("{key}.max_hops"),
                "must be at least 1 (a message crosses this bridge)",
            ));
        }
        if route.max_in_flight == 0 || route.max_in_flight > usize::from(u16::MAX) {
            return Err(ConfigError::new(format!("{key}.max_in_flight"), "must be between 1 and 65535"));
        }
        let b = &route.backoff;
        if b.initial_ms == 0 {
            return Err(ConfigError::new(format!("{key}.backoff.initial_ms"), "must be at least 1"));
        }
        if b.max_ms < b.initial_ms {
            return Err(ConfigError::new(format!("{key}.backoff.max_ms"), "must be at least backoff.initial_ms"));
        }
        if !(b.multiplier.is_finite() && b.multiplier >= 1.0) {
            return Err(ConfigError::new(format!("{key}.backoff.multiplier"), "must be a number >= 1"));
        }
        if !(0.0..=1.0).contains(&b.jitter) {
            return Err(ConfigError::new(format!("{key}.backoff.jitter"), "must be between 0 and 1"));
        }
        for (j, proc) in route.processors.iter().enumerate() {
            if !valid_plugin_name(&proc.plugin) {
                return Err(ConfigError::new(
                    format!("{key}.processors[{j}].plugin"),
                    format!(
                        "{:?} is not a plugin name (letters, digits, '-' and '_'; the file is <name>.wasm)",
                        proc.plugin
                    ),
                ));
            }
            if let Some(dir) = &proc.grants.dir
                && !std::path::Path::new(dir).is_dir()
            {
                return Err(ConfigError::new(
                    format!("{key}.processors[{j}].grants.dir"),
                    format!("{dir:?} is not a directory"),
                ));
            }
        }
        if route.bindings.is_empty() {
            return Err(ConfigError::new(format!("{key}.bindings"), "at least one binding is required"));
        }
        let mut binding_ids = BTreeSet::new();
        for (j, binding) in route.bindings.iter().enumerate() {
            let bkey = format!("{key}.bindings[{j}]");
            if let Some(mapper) = &binding.header_mapper
                && !valid_plugin_name(mapper)
            {
                return Err(ConfigError::new(
                    format!("{bkey}.header_mapper"),
                    format!("{mapper:?} is not a plugin name (letters, digits, '-' and '_'; the file is <name>.wasm)"),
                ));
            }
            if !config.senders.contains_key(&binding.sender) {
                return Err(ConfigError::new(
                    format!("{bkey}.sender"),
                    format!("no sender named {:?} (known: {})", binding.sender, known(config.senders.keys())),
                ));
            }
            if route.delivery_mode == DeliveryMode::SharedOutbox && binding.id().contains(['/', '\0']) {
                return Err(ConfigError::new(
                    format!("{bkey}.id"),
                    "must not contain '/' in a shared_outbox route (set `id`): it names the outbox partition <route>/<binding>",
                ));
            }
            if !binding_ids.insert(binding.id()) {
                return Err(ConfigError::new(
                    format!("{bkey}.id"),
                    format!("binding id {:?} is used twice in this route; set distinct `id`s", binding.id()),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `name` can name a plugin file.
pub fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn known<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let list: Vec<&str> = names.map(String::as_str).collect();
    if list.is_empty() { "none".to_owned() } else { list.join(", ") }
}

/// What is wrong with a part's `reconnect_initial_ms` and
/// `reconnect_max_ms`: the key and why (every transport's rule).
pub fn reconnect_problem(initial: u64, max: u64) -> Option<(&'static str, &'static str)> {
    if initial == 0 {
        return Some(("reconnect_initial_ms", "must be at least 1"));
    }
    if max < initial {
        return Some(("reconnect_max_ms", "must be at least reconnect_initial_ms"));
    }
    None
}

/// `routes[].outbox_partitions` at most.
const MAX_OUTBOX_PARTITIONS: u32 = 256;

fn check_store(store: &crate::StoreConfig) -> Result<(), ConfigError> {
    if !(1..=3600).contains(&store.lease_ttl_secs) {
        return Err(ConfigError::new("store.lease_ttl_secs", "must be between 1 and 3600"));
    }
    if !(1..=256).contains(&store.pool_size) {
        return Err(ConfigError::new("store.pool_size", "must be between 1 and 256"));
    }
    match (store.kind, &store.url) {
        (crate::StoreKind::Embedded, Some(_)) => {
            Err(ConfigError::new("store.url", "is for type = \"postgres\"; the embedded store lives under store.path"))
        }
        (crate::StoreKind::Embedded, None) => Ok(()),
        (crate::StoreKind::Postgres, None) => {
            Err(ConfigError::new("store.url", "type = \"postgres\" needs url = \"postgres://user@host:5432/database\""))
        }
        (crate::StoreKind::Postgres, Some(url)) => {
            let scheme_ok = url.starts_with("postgres://") || url.starts_with("postgresql://");
            if !scheme_ok {
                return Err(ConfigError::new("store.url", "must start with postgres:// or postgresql://"));
            }
            Ok(())
        }
    }
}
