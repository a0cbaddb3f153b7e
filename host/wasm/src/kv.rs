//! The host side of the `kv` interface: one small key-value space per
//! (plugin, route), shared by every instance of the plugin on the route and
//! kept across instance replacement and hot reloads (it lives in the
//! engine, which outlives both).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ferry_envelope::kv::Space;

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
        self.with(|s| s.get(key))
    }

    pub fn set(&self, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.with(|s| s.set(key, value))
    }

    pub fn delete(&self, key: &str) {
        self.with(|s| s.delete(key));
    }

    pub fn compare_and_swap(&self, key: &str, expected: Option<&[u8]>, value: Option<Vec<u8>>) -> Result<bool, String> {
        self.with(|s| s.compare_and_swap(key, expected, value))
    }

    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
        self.with(|s| s.increment(key, delta))
    }

    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.with(|s| s.keys(prefix))
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
}
