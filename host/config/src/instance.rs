//! The instance id (`[instance] id`) and the defaults that carry it.

use crate::{Config, ConfigError};

/// Longest instance id: it goes into MQTT client ids and metric labels.
const MAX_ID_LEN: usize = 64;

/// Settles the instance id (the config's, else `$FERRY_INSTANCE_ID`, else
/// the host name). Transports take it for names that must differ between
/// instances of one config (MQTT client ids, Redis consumers).
pub(crate) fn resolve(config: &mut Config, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let id = match config.instance.id.take() {
        Some(id) => checked(id, "instance.id")?,
        None => match env("FERRY_INSTANCE_ID").filter(|v| !v.is_empty()) {
            Some(id) => checked(id, "instance.id (from $FERRY_INSTANCE_ID)")?,
            None => host_name(),
        },
    };
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
