//! The instance id (`[instance] id`) and the defaults that carry it.

use crate::{Config, ConfigError, ReceiverConfig, SenderConfig};

/// Longest instance id: it goes into MQTT client ids and metric labels.
const MAX_ID_LEN: usize = 64;

/// Settles the instance id (the config's, else `$FERRY_INSTANCE_ID`, else
/// the host name) and gives every MQTT receiver and sender without a
/// `client_id` the default `ferry-<instance id>-<name>`, so two instances
/// of one config never take each other's client id at a broker. (A
/// transport that reads its own keys takes the instance id from the
/// [`crate::InstanceConfig`] it is handed.)
pub(crate) fn resolve(config: &mut Config, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let id = match config.instance.id.take() {
        Some(id) => checked(id, "instance.id")?,
        None => match env("FERRY_INSTANCE_ID").filter(|v| !v.is_empty()) {
            Some(id) => checked(id, "instance.id (from $FERRY_INSTANCE_ID)")?,
            None => host_name(),
        },
    };
    let client_id = |name: &str| format!("ferry-{id}-{name}");
    for (name, receiver) in &mut config.receivers {
        if let ReceiverConfig::Mqtt(m) = receiver {
            m.client_id.get_or_insert_with(|| client_id(name));
        }
    }
    for (name, sender) in &mut config.senders {
        if let SenderConfig::Mqtt(m) = sender {
            m.client_id.get_or_insert_with(|| client_id(name));
        }
    }
    config.instance.id = Some(id);
    Ok(())
}

fn checked(id: String, key: &str) -> Result<String, ConfigError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(ConfigError::new(key, format!("must be 1 to {MAX_ID_LEN} characters long, not {}", id.len())));
    }
    if let Some(c) = id.chars().find(|&c| !allowed(c)) {
        return Err(ConfigError::new(key, format!("{id:?} contains {c:?}; use letters, digits, '.', '_' and '-'")));
    }
    Ok(id)
}

/// A character an instance id may hold.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// The host name, with characters an id may not hold replaced by `-`
/// (`ferry` when the system has none).
fn host_name() -> String {
    let name = gethostname::gethostname().to_string_lossy().into_owned();
    let cleaned: String = name.chars().map(|c| if allowed(c) { c } else { '-' }).take(MAX_ID_LEN).collect();
    if cleaned.is_empty() { "ferry".to_owned() } else { cleaned }
}
