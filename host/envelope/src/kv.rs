//! One plugin's key-value space on one route, with the limits of
//! `interface kv` in `wit/plugin.wit`. The host keeps one per (plugin,
//! route) behind a lock; the guest SDK's test double keeps one per test, so
//! a plugin's tests meet the same limits and errors as the daemon.

use std::collections::HashMap;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
/// Most keys in one space.
pub const MAX_KEYS: usize = 10_000;
/// Most bytes (keys and values) in one space.
pub const MAX_SPACE_BYTES: usize = 16 << 20;

/// The keys and values of one space.
#[derive(Debug, Default)]
pub struct Space {
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

    /// The value stored at `key`.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.entries.get(key).cloned()
    }

    /// Stores `value` at `key`, within the limits.
    pub fn set(&mut self, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.check(key, &value)?;
        self.bytes += key.len() + value.len();
        if let Some(old) = self.entries.insert(key.to_owned(), value) {
            self.bytes -= key.len() + old.len();
        }
        Ok(())
    }

    /// Removes `key`; an absent key is not an error.
    pub fn delete(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= key.len() + old.len();
        }
    }

    /// Replaces the value at `key` (removes it when `value` is none) only if
    /// it currently is `expected` (none: absent); returns whether it did.
    pub fn compare_and_swap(
        &mut self,
        key: &str,
        expected: Option<&[u8]>,
        value: Option<Vec<u8>>,
    ) -> Result<bool, String> {
        if self.entries.get(key).map(Vec::as_slice) != expected {
            return Ok(false);
        }
        match value {
            Some(v) => self.set(key, v)?,
            None => self.delete(key),
        }
        Ok(true)
    }

    /// The keys that start with `prefix`, in byte order.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let mut keys: Vec<String> = self.entries.keys().filter(|k| k.starts_with(prefix)).cloned().collect();
        keys.sort_unstable();
        keys
    }

    /// Adds `delta` to the little-endian i64 counter at `key` (absent: 0).
    pub fn increment(&mut self, key: &str, delta: i64) -> Result<i64, String> {
        let current = match self.entries.get(key) {
            None => 0,
            Some(v) => match <[u8; 8]>::try_from(v.as_slice()) {
                Ok(b) => i64::from_le_bytes(b),
                Err(_) => return Err(format!("kv: {key:?} holds {} bytes, not a counter", v.len())),
            },
        };
        let next = current.wrapping_add(delta);
        self.set(key, next.to_le_bytes().to_vec())?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_swap_and_increment() {
        let mut s = Space::default();
        assert!(s.compare_and_swap("k", None, Some(b"a".to_vec())).expect("kv"));
        assert!(!s.compare_and_swap("k", None, Some(b"b".to_vec())).expect("kv"));
        assert!(s.compare_and_swap("k", Some(b"a"), None).expect("kv"));
        assert_eq!(s.get("k"), None);
        assert_eq!(s.increment("n", 2).expect("kv"), 2);
        assert_eq!(s.increment("n", -5).expect("kv"), -3);
        s.set("t", b"text".to_vec()).expect("kv");
        assert!(s.increment("t", 1).expect_err("refused").contains("not a counter"));
        assert_eq!(s.keys(""), ["n", "t"]);
        assert_eq!(s.keys("t"), ["t"]);
        assert!(s.keys("x").is_empty());
    }

    #[test]
    fn limits_refuse_writes_and_keep_accounts() {
        let mut s = Space::default();
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
        let expected: usize = s.entries.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert_eq!(s.bytes, expected);
    }
}
