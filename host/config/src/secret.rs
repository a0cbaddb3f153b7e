//! [`Secret`]: a password, token or key as the config holds it.

use std::borrow::Cow;

use schemars::JsonSchema;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A password, token or key from the config. `Debug` prints `****`, there
/// is no `Display` (so no `to_string` or `format!("{}")` can write it by
/// mistake), and its memory is zeroed when dropped (`secrecy`); the code
/// that sends it calls [`Secret::expose`].
///
/// It serialises as its text, for what must compare or write the config
/// (a route's restart fingerprint; `ferry render`, which masks every key
/// that names a secret and every secret's text).
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Self(SecretString::from(text.into()))
    }

    /// The secret's text, for the request or connection that sends it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl From<&str> for Secret {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.expose())
    }
}

impl JsonSchema for Secret {
    fn schema_name() -> Cow<'static, str> {
        "Secret".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn a_secret_never_prints_but_reads_and_compares() {
        let s: Secret = serde_json::from_str("\"hunter2-token\"").expect("a string");
        assert_eq!(s.expose(), "hunter2-token");
        for printed in [format!("{s:?}"), format!("{:?}", Some(&s)), format!("{:#?}", vec![s.clone()])] {
            assert!(!printed.contains("hunter2"), "{printed}");
        }
        assert_eq!(s, Secret::from("hunter2-token"));
        assert_ne!(s, Secret::from("other"));
        assert_eq!(serde_json::to_string(&s).expect("serialises"), "\"hunter2-token\"");
        assert!(serde_json::from_str::<Secret>("5").is_err());
    }
}
