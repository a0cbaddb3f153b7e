//! `type = "component"`: the keys of a receiver or sender that is a
//! transport component from the plugin directory (`ferry:plugin` 1.2.0 and
//! later, the `transport-*` worlds), their defaults and checks.

use ferry_core::transport::KeyProblem;
use schemars::JsonSchema;
use serde::Deserialize;

fn empty_table() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn default_max_messages() -> u32 {
    10
}

fn default_wait_ms() -> u32 {
    1000
}

fn default_call_timeout_ms() -> u64 {
    10_000
}

/// `type = "component"` receiver: the component's `receiver` export polled
/// by the host.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentReceiverConfig {
    /// The component: the file `<plugins.dir>/<component>.wasm`, built for
    /// the `transport-receiver` or `transport` world.
    pub component: String,
    /// Handed to the component's `open` as JSON.
    #[serde(default = "empty_table")]
    pub config: serde_json::Value,
    /// The `host:port`s the component may reach (HTTP requests and TCP
    /// connections); everything else is refused and counted in
    /// `ferry_plugin_network_refused_total`. Default: none.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// At most this many messages per `poll` (1 to 1000), never more than
    /// the route has room for. Default 10.
    #[serde(default = "default_max_messages")]
    pub max_messages: u32,
    /// How long `poll` may wait for a first message, in milliseconds; after
    /// an empty poll the host waits out what is left of it, so an empty
    /// source is polled at most once per `wait_ms`. Default 1000.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u32,
    /// Deadline of one call into the component (`open`, `poll`, `settle`,
    /// `extend`), network waits included, in milliseconds. Default 10000.
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
}

/// `type = "component"` sender: the component's `sender` export.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentSenderConfig {
    /// The component: the file `<plugins.dir>/<component>.wasm`, built for
    /// the `transport-sender` or `transport` world.
    pub component: String,
    /// Handed to the component's `open` as JSON.
    #[serde(default = "empty_table")]
    pub config: serde_json::Value,
    /// As for a component receiver.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Deadline of one call into the component (`open`, `send`), network
    /// waits included, in milliseconds. Default 10000.
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
}

/// An `allow_hosts` entry as `(host, port)`, the host in lower case: a name
/// or address, a colon and a port (`[v6]:port` for an IPv6 address).
pub fn host_port(entry: &str) -> Result<(String, u16), String> {
    let (host, port) = entry.rsplit_once(':').ok_or_else(|| format!("{entry:?} is not host:port"))?;
    let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let host = bracketed.unwrap_or(host);
    if host.is_empty() || host.contains(['/', '@', ' ', '[', ']']) || (host.contains(':') && bracketed.is_none()) {
        return Err(format!("{entry:?} is not host:port (write an IPv6 address as [addr]:port)"));
    }
    let port: u16 = port.parse().map_err(|_| format!("{entry:?}: {port:?} is not a port"))?;
    if port == 0 {
        return Err(format!("{entry:?}: port 0 names no service"));
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// The keys both halves have.
fn check_component(component: &str, allow_hosts: &[String], call_timeout_ms: u64) -> Result<(), KeyProblem> {
    if !ferry_config::valid_plugin_name(component) {
        return Err(KeyProblem::new(
            "component",
            format!("{component:?} is not a plugin name (letters, digits, '-' and '_': the file name without .wasm)"),
        ));
    }
    for (i, entry) in allow_hosts.iter().enumerate() {
        host_port(entry).map_err(|e| KeyProblem::new(format!("allow_hosts[{i}]"), e))?;
    }
    if !(1..=600_000).contains(&call_timeout_ms) {
        return Err(KeyProblem::new("call_timeout_ms", "must be between 1 and 600000"));
    }
    Ok(())
}

impl ComponentReceiverConfig {
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_component(&self.component, &self.allow_hosts, self.call_timeout_ms)?;
        if !(1..=1000).contains(&self.max_messages) {
            return Err(KeyProblem::new("max_messages", "must be between 1 and 1000"));
        }
        if self.wait_ms > 60_000 {
            return Err(KeyProblem::new("wait_ms", "must be at most 60000"));
        }
        Ok(())
    }
}

impl ComponentSenderConfig {
    pub fn check(&self) -> Result<(), KeyProblem> {
        check_component(&self.component, &self.allow_hosts, self.call_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use ferry_core::transport::read_part;

    use super::*;

    #[test]
    fn allow_hosts_entries_are_host_and_port() {
        assert_eq!(host_port("Queue.Internal:443"), Ok(("queue.internal".into(), 443)));
        assert_eq!(host_port("[::1]:9000"), Ok(("::1".into(), 9000)));
        for bad in ["queue.internal", "queue.internal:0", "queue.internal:http", ":443", "::1:443", "a/b:1", "u@h:1"] {
            assert!(host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parts_read_with_their_defaults() {
        let r: ComponentReceiverConfig =
            read_part("component", "component = \"q\"", ComponentReceiverConfig::check).expect("valid");
        assert_eq!((r.max_messages, r.wait_ms, r.call_timeout_ms), (10, 1000, 10_000));
        assert_eq!(r.config, serde_json::json!({}));
        let s: ComponentSenderConfig =
            read_part("component", "component = \"q\"\nconfig = { url = \"x\", n = 3 }", ComponentSenderConfig::check)
                .expect("valid");
        assert_eq!(s.config, serde_json::json!({"url": "x", "n": 3}));
    }

    #[test]
    fn each_bad_key_is_named() {
        for (text, key) in [
            ("component = \"a.b\"", "component"),
            ("component = \"q\"\nallow_hosts = [\"h\"]", "allow_hosts[0]"),
            ("component = \"q\"\ncall_timeout_ms = 0", "call_timeout_ms"),
            ("component = \"q\"\nmax_messages = 1001", "max_messages"),
            ("component = \"q\"\nwait_ms = 60001", "wait_ms"),
            ("component = \"q\"\nsurprise = 1", "surprise"),
            ("config = {}", "component"),
        ] {
            let got = read_part::<ComponentReceiverConfig>("component", text, ComponentReceiverConfig::check);
            assert_eq!(got.err().as_deref(), Some(key), "{text}");
        }
        let got = read_part::<ComponentSenderConfig>(
            "component",
            "component = \"q\"\nmax_messages = 3",
            ComponentSenderConfig::check,
        );
        assert_eq!(got.err().as_deref(), Some("max_messages"));
    }
}
