//! SandboxTemplate (a managed Sandbox's spec, by name, for Sessions and Processes to
//! get a sandbox of their own from) and SandboxWarmPool (ready sandboxes of a template
//! kept waiting for them).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::SandboxSpec;

/// A managed Sandbox's spec, by name: Sessions and Processes name it in
/// `sandboxTemplate` to get a sandbox of their own, and warm pools keep sandboxes of
/// it ready.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "agentplane.dev",
    version = "v1alpha1",
    kind = "SandboxTemplate",
    namespaced,
    derive = "PartialEq",
    shortname = "sbxt",
    category = "agentplane",
    printcolumn(name = "Network", type_ = "string", json_path = ".spec.sandbox.network"),
    printcolumn(name = "TTL", type_ = "integer", json_path = ".spec.ttlSecondsAfterFinished"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxTemplateSpec {
    /// The spec of every Sandbox made from it (a managed one: no `endpoint`).
    #[serde(default = "managed_sandbox")]
    pub sandbox: SandboxSpec,
    /// Seconds a claimed sandbox is kept after its Session ends or is deleted (or its
    /// Process is deleted) before it is deleted; 0 deletes it at once.
    #[serde(default = "default_ttl")]
    #[schemars(range(max = 604800))]
    pub ttl_seconds_after_finished: u32,
}

fn managed_sandbox() -> SandboxSpec {
    SandboxSpec::default()
}

fn default_ttl() -> u32 {
    60
}

/// Keeps `replicas` ready, unclaimed sandboxes of a template, so that a Session
/// naming that template starts at once.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "agentplane.dev",
    version = "v1alpha1",
    kind = "SandboxWarmPool",
    namespaced,
    derive = "PartialEq",
    status = "SandboxWarmPoolStatus",
    shortname = "sbxpool",
    category = "agentplane",
    printcolumn(name = "Template", type_ = "string", json_path = ".spec.template"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxWarmPoolSpec {
    /// The SandboxTemplate (same namespace) its sandboxes are made from.
    #[schemars(length(min = 1))]
    pub template: String,
    /// How many ready, unclaimed sandboxes to keep.
    #[schemars(range(max = 1000))]
    pub replicas: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Unclaimed sandboxes of the pool, ready or not.
    #[serde(default)]
    pub replicas: u32,
    /// Unclaimed sandboxes that are ready.
    #[serde(default)]
    pub ready_replicas: u32,
    /// Their names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandboxes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
