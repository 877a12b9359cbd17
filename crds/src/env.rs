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

/// A secret a program uses but never holds: inside the sandbox, the variable `name`
/// holds a random placeholder; the sandbox's egress proxy, outside, puts the value in
/// its place in the headers of requests to `hosts`, and only there. Needs an isolated
/// sandbox whose network goes through the proxy (`network: allowlist`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credential {
    /// The variable the program reads.
    #[schemars(length(min = 1), regex(pattern = r"^[^=\x00]+$"))]
    pub name: String,
    /// Where the value is kept: a Secret's key (cluster store) or a `KEY=VALUE` file's
    /// (directory store, inside the watched folder).
    pub value_from: EnvVarSource,
    /// Where the value may be sent, written as the allowlist's entries (`host`,
    /// `host:port`, `*.example.com`). These hosts are allowed as if in `allow`.
    #[schemars(length(min = 1))]
    pub hosts: Vec<String>,
}

/// What a sandbox's status says of one credential: never its value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialStatus {
    pub name: String,
    pub hosts: Vec<String>,
    /// Requests to a listed host that got the value in place of the placeholder.
    #[serde(default)]
    pub sent: u64,
    /// Requests to a host not listed that carried the placeholder (which is all they got).
    #[serde(default)]
    pub blocked: u64,
}
