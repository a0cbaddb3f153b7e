//! The host side of the `kv` interface: one small key-value space per
//! (plugin, route), shared by every instance of the plugin on the route and
//! kept across instance replacement and hot reloads (it lives in the
//! engine, which outlives both).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
/// Most keys in one space.
pub const MAX_KEYS: usize = 10_000;
/// Most bytes (keys and values) in one space.
pub const MAX_SPACE_BYTES: usize = 16 << 20;

#[derive(Default)]
struct Space {
    entries: HashMap<String, Vec<u8>>,
    bytes: usize,
}

impl Space {
    fn check(&self, key: &str, value: &[u8]) -> Result<(), String> {
        if key.len() > MAX_KEY_BYTES {
            return Err(format!("kv: key of {} bytes is longer than {MAX_KEY_BYTES}", key.len()));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!("kv: value of {} bytes is larger than {MAX_VALUE_BYTES}", value.len()));
        }
        let old = self.entries.get(key).map(|v| key.len() + v.len()).unwrap_or(0);
        if old == 0 && self.entries.len() >= MAX_KEYS {
            return Err(format!("kv: this plugin already holds {MAX_KEYS} keys on this route"));
        }
        if self.bytes - old + key.len() + value.len() > MAX_SPACE_BYTES {
            return Err(format!("kv: this plugin's store on this route would exceed {MAX_SPACE_BYTES} bytes"));
        }
        Ok(())
    }

    fn put(&mut self, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.check(key, &value)?;
        self.bytes += key.len() + value.len();
        if let Some(old) = self.entries.insert(key.to_owned(), value) {
            self.bytes -= key.len() + old.len();
        }
        Ok(())
    }

    fn remove(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= key.len() + old.len();
        }
    }
}

/// Every plugin's key-value space.
#[derive(Clone, Default)]
pub struct KvStore {
    spaces: Arc<Mutex<HashMap<(String, String), Space>>>,
}

/// One plugin's view: its own space on one route.
#[derive(Clone)]
pub struct KvScope {
    store: KvStore,
    key: (String, String),
}

impl KvStore {
    pub fn scope(&self, plugin: &str, route: &str) -> KvScope {
        KvScope { store: self.clone(), key: (plugin.to_owned(), route.to_owned()) }
    }
}

impl KvScope {
    fn with<R>(&self, f: impl FnOnce(&mut Space) -> R) -> R {
        // A poisoned lock only means another call panicked mid-update of a
        // map that stays consistent; keep serving.
        let mut spaces = self.store.spaces.lock().unwrap_or_else(|p| p.into_inner());
        f(spaces.entry(self.key.clone()).or_default())
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.with(|s| s.entries.get(key).cloned())
    }

    pub fn set(&self, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.with(|s| s.put(key, value))
    }

    pub fn delete(&self, key: &str) {
        self.with(|s| s.remove(key));
    }

    pub fn compare_and_swap(&self, key: &str, expected: Option<&[u8]>, value: Option<Vec<u8>>) -> Result<bool, String> {
        self.with(|s| {
            if s.entries.get(key).map(Vec::as_slice) != expected {
                return Ok(false);
            }
            match value {
                Some(v) => s.put(key, v)?,
                None => s.remove(key),
            }
            Ok(true)
        })
    }

    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
        self.with(|s| {
            let current = match s.entries.get(key) {
                None => 0,
                Some(v) => match <[u8; 8]>::try_from(v.as_slice()) {
                    Ok(b) => i64::from_le_bytes(b),
                    Err(_) => return Err(format!("kv: {key:?} holds {} bytes, not a counter", v.len())),
                },
            };
            let next = current.wrapping_add(delta);
            s.put(key, next.to_le_bytes().to_vec())?;
            Ok(next)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_are_separate_per_plugin_and_route() {
        let store = KvStore::default();
        let a = store.scope("breaker", "r1");
        let b = store.scope("breaker", "r2");
        a.set("k", b"1".to_vec()).expect("kv");
        assert_eq!(a.get("k").as_deref(), Some(&b"1"[..]));
        assert_eq!(b.get("k"), None);
        assert_eq!(store.scope("breaker", "r1").get("k").as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn compare_and_swap_and_increment() {
        let s = KvStore::default().scope("p", "r");
        assert!(s.compare_and_swap("k", None, Some(b"a".to_vec())).expect("kv"));
        assert!(!s.compare_and_swap("k", None, Some(b"b".to_vec())).expect("kv"));
        assert!(s.compare_and_swap("k", Some(b"a"), None).expect("kv"));
        assert_eq!(s.get("k"), None);
        assert_eq!(s.increment("n", 2).expect("kv"), 2);
        assert_eq!(s.increment("n", -5).expect("kv"), -3);
        s.set("t", b"text".to_vec()).expect("kv");
        assert!(s.increment("t", 1).expect_err("refused").contains("not a counter"));
    }

    #[test]
    fn limits_refuse_writes_and_keep_accounts() {
        let s = KvStore::default().scope("p", "r");
        assert!(s.set(&"k".repeat(MAX_KEY_BYTES + 1), vec![]).is_err());
        assert!(s.set("big", vec![0; MAX_VALUE_BYTES + 1]).is_err());
        for i in 0..MAX_KEYS {
            s.set(&i.to_string(), vec![]).expect("kv");
        }
        assert!(s.set("one-more", vec![]).expect_err("refused").contains("10000 keys"));
        // Overwriting an existing key is still allowed at the key limit.
        s.set("0", b"x".to_vec()).expect("kv");
        s.delete("1");
        s.set("one-more", vec![]).expect("kv");
        let total = s.with(|sp| sp.bytes);
        let expected: usize = s.with(|sp| sp.entries.iter().map(|(k, v)| k.len() + v.len()).sum());
        assert_eq!(total, expected);
    }
}
