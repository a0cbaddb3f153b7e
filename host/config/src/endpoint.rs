//! `[endpoints]`: servers ferry runs for applications to call. Each is a
//! section whose keys its crate reads and checks ([`SectionTable`]), as a
//! transport reads its parts; the daemon adds its schema
//! ([`crate::json_schema_with`]).

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `[endpoints]`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointsConfig {
    /// An SQS-compatible server: applications on any AWS SDK point their
    /// endpoint at it; its queues live in ferry's store.
    #[serde(default)]
    pub sqs: Option<SectionTable>,
}

/// A section of the document that its own crate reads (`[endpoints.sqs]`
/// by the SQS endpoint's), its keys as written (after `${VAR}` and `{ file
/// = … }`). Its `Debug` names the keys but prints no value (any may be a
/// secret).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SectionTable(pub toml::Table);

impl SectionTable {
    /// The keys as the section's config type `T`; on failure the key path
    /// below the section's and why.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        crate::part::read_table(self.0.clone())
    }
}

impl std::fmt::Debug for SectionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SectionTable").field(&self.0.keys().collect::<Vec<_>>()).finish()
    }
}

/// A placeholder: [`crate::json_schema_with`] puts the section's own
/// schema where it is named.
impl JsonSchema for SectionTable {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SectionTable".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object" })
    }
}

/// A section's schema, for [`crate::json_schema_with`]: its dotted `path`
/// in the document (`endpoints.sqs`) and the schema of its config type
/// (made with the generator handed over, so shared tables are defined
/// once).
pub struct SectionSchema {
    pub path: &'static str,
    pub schema: schemars::Schema,
}
