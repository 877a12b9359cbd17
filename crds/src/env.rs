//! Environment variables and where their values are kept (a Secret's key in the
//! cluster store, a `KEY=VALUE` file beside the resource in the directory store):
//! the pieces Processes, Sessions and Sandboxes share.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An environment variable: a value, or a reference to where the value is kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVar {
    /// The variable's name.
    #[schemars(length(min = 1), regex(pattern = r"^[^=\x00]+$"))]
    pub name: String,
    /// A literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where to read the value from instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// A value kept elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVarSource {
    /// A key of a Secret in the resource's namespace (cluster store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeySelector>,
    /// A key of a `KEY=VALUE` file, relative to the resource's file (directory store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_key_ref: Option<FileKeySelector>,
}

/// Every variable of a source at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvFromSource {
    /// All keys of a Secret in the resource's namespace (cluster store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// All lines of a `KEY=VALUE` file, relative to the resource's file (directory store);
    /// keep it out of version control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretKeySelector {
    /// The Secret's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The key within it.
    #[schemars(length(min = 1))]
    pub key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileKeySelector {
    /// The file, relative to the resource's own file.
    #[schemars(length(min = 1))]
    pub path: String,
    /// The key within it.
    #[schemars(length(min = 1))]
    pub key: String,
}
