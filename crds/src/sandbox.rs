//! The Sandbox resource: one node agent and the isolation around it (external, or
//! managed by the controller with its network mode, limits and binds), and its status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{AgentKind, Credential, CredentialStatus, EnvVar, SecretKeySelector, is_false, is_zero};

/// One node agent and the isolation around it. With `endpoint`, a node agent someone
/// else runs (external); without, the controller creates it, owns it, restarts it and
/// deletes it (managed). In the directory store a sandbox named `local` is implicit:
/// the node agent `agentplane up` embeds, not isolated.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "agentplane.dev",
    version = "v1alpha1",
    kind = "Sandbox",
    namespaced,
    derive = "PartialEq",
    status = "SandboxStatus",
    shortname = "sbx",
    category = "agentplane",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Isolation", type_ = "string", json_path = ".status.isolation"),
    printcolumn(name = "Network", type_ = "string", json_path = ".spec.network"),
    printcolumn(name = "Claimed By", type_ = "string", json_path = ".status.claimedBy"),
    printcolumn(name = "Suspended", type_ = "date", json_path = ".status.suspendedAt"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".status.endpoint", priority = 1),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.nodeAgentVersion", priority = 1),
    printcolumn(name = "Heartbeat", type_ = "date", json_path = ".status.lastHeartbeat", priority = 1)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxSpec {
    /// The URL of a node agent someone else runs, e.g. `http://10.0.0.7:2468`. Absent:
    /// the controller creates and manages the node agent (a bubblewrap sandbox in a
    /// folder, a Pod in a cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://"))]
    pub endpoint: Option<String>,
    /// The Secret key holding an external node agent's bearer token (a managed one's
    /// token is generated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeySelector>,
    /// Agents to install ahead of the first session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentInstall>,
    /// Managed only: how the node agent is kept from the host (default `bubblewrap` in
    /// a folder; a cluster isolates with the Pod, see `podTemplate`). `none` runs it as
    /// a plain process of the user running `up`: allowed only when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Managed only: what the sandbox may reach on the network.
    #[serde(default)]
    pub network: NetworkMode,
    /// With `network: allowlist`: the destinations allowed, `host` or `host:port`
    /// (`*.example.com` for its subdomains); everything else is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Managed only: resource limits for everything in the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<SandboxLimits>,
    /// Managed, folder only: the host directory mounted writable at `/workspace`
    /// (relative to the Sandbox's file; it must be inside the watched folder or bound
    /// by `binds`). Default: a fresh directory of the sandbox's own in the state directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Managed, folder only: more host paths visible inside, read-only unless asked.
    /// Nothing of the host user's HOME is visible otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<SandboxBind>,
    /// Managed only: the sandbox's whole environment besides what the node agent sets
    /// (`HOME`, `PATH`, `TMPDIR`, the proxy variables): the host's is not passed in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Managed, with `network: allowlist`: secrets everything in the sandbox uses but
    /// never holds. Each variable holds a placeholder inside; the proxy outside swaps in
    /// the value on requests to the credential's hosts, and counts the placeholder going
    /// anywhere else (`status.credentials`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
    /// Managed, cluster only: the Pod's image, resources, `runtimeClassName` (gVisor,
    /// Kata), node selectors, tolerations and volumes. The controller adds the node
    /// agent's container command, its token and a hardened securityContext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub pod_template: Option<serde_json::Value>,
    /// Managed: `true` suspends it now and keeps it suspended, as a Job's `suspend`
    /// (in a folder its node agent and every process stopped, its folder and
    /// conversations kept; on a cluster its Pod deleted, its data claim kept); `false`
    /// wakes it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
    /// Managed: suspend it after this long idle (no session in a turn or with messages
    /// or replies waiting, no client following a terminal or a stream, no process
    /// output). A new message or reply wakes it (in a folder, any client of its
    /// endpoint too). Absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub idle_timeout_seconds: Option<u32>,
    /// Managed, cluster only: the data volume the controller claims for the sandbox, on
    /// which its sessions, its agents' HOME and its workspace outlive the Pod (a Pod
    /// deleted, replaced, or suspended). Absent: a claim of 1Gi of the cluster's
    /// default StorageClass where one is marked default. A `data` volume in
    /// `podTemplate` is used instead of any claim. The folder store keeps
    /// conversations in its state directory and ignores this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<VolumeClaimTemplate>,
}

/// The PersistentVolumeClaim a managed Sandbox's data lives on (`<sandbox>-data`,
/// owned by the Sandbox: deleted with it, kept while only its Pod goes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeClaimTemplate {
    /// The StorageClass; absent: the cluster's default one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Its size, as Kubernetes writes quantities (default `1Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

impl SandboxSpec {
    /// Whether the controller creates and owns this sandbox's node agent.
    pub fn is_managed(&self) -> bool {
        self.endpoint.is_none()
    }
}

impl Sandbox {
    /// Where its node agent is reached: the spec's endpoint when external, else the one
    /// the controller recorded in the status once it started it.
    pub fn endpoint(&self) -> Option<&str> {
        self.spec.endpoint.as_deref().or_else(|| self.status.as_ref()?.endpoint.as_deref())
    }
}

/// A free-form object kept as written (a Pod template is validated by the API server
/// when the Pod is created).
fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Namespaces (mount, PID, IPC, UTS, and network unless `network: host`), a
    /// read-only host, no new privileges (folder store; Debian's `bubblewrap`).
    Bubblewrap,
    /// A plain process of the user running `agentplane up`: no isolation at all.
    None,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// The host's network, as any local program.
    #[default]
    Host,
    /// No network at all (only the sandbox's own loopback).
    None,
    /// Only the destinations in `allow`, through a proxy of the controller's.
    Allowlist,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxLimits {
    /// Memory, as Kubernetes writes quantities (`512Mi`, `2Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPUs, as Kubernetes writes quantities (`1`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Most processes (and threads) at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pids: Option<u32>,
    /// The size of the private `/tmp` (a tmpfs, whose pages are memory): `256Mi` by
    /// default, or a quarter of `memory` when that is less.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxBind {
    /// The host path (relative to the Sandbox's file, or absolute).
    #[schemars(length(min = 1))]
    pub host_path: String,
    /// Where it appears inside (default: the same path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Writable from inside.
    #[serde(default, skip_serializing_if = "is_false")]
    pub writable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentInstall {
    pub agent: AgentKind,
    /// A pinned version; the node agent's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Managed: Pending, Starting, Ready, Restarting, Failed, Suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SandboxPhase>,
    /// The last time the node agent reported in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_agent_version: Option<String>,
    /// Installed agents and their versions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub installed_agents: BTreeMap<AgentKind, String>,
    /// Managed: where the controller reaches the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Managed: the isolation in force (`bubblewrap`, `none`, `pod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// Managed: where it runs (`pid 1234 on host`, `Pod ns/name on node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_on: Option<String>,
    /// Managed: since when the current node agent runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Managed: how many times the node agent was started again after it died.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
    /// Managed: each limit of the spec, and how it is enforced (`memory: 512Mi
    /// (cgroup v2 memory.max)`). A limit that cannot be enforced keeps the sandbox from
    /// starting: never a running sandbox without its limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_limits: Vec<String>,
    /// Managed, isolated: the host uid its processes run as (uid 1000 inside a user
    /// namespace of its own): one of its own when the controller runs as root, the
    /// controller's user otherwise. Never 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_uid: Option<u32>,
    /// Managed, isolated: the seccomp filter in force, and what it refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<String>,
    /// Managed, `network: allowlist`: connections the proxy refused.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub denied_connections: u64,
    /// The last destinations refused (at most 10, newest last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_denied: Vec<String>,
    /// Managed: each credential the proxy holds for the sandbox (its own, and those of
    /// the Sessions and Processes on it), with the requests that got its value and the
    /// ones to other hosts that carried its placeholder. Never a value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialStatus>,
    /// Managed: since when it is suspended (phase `Suspended`; the `Ready` condition's
    /// reason says why: `Idle` or `Requested`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_at: Option<Time>,
    /// The template it was made from, when a pool or a claim made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The resource it serves (`Session/ns/name`), when claimed from a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// `Ready`: the node agent answers (and, when external, its heartbeat is recent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SandboxPhase {
    /// Accepted, not started (e.g. bubblewrap is missing, or the spec is invalid).
    Pending,
    /// The node agent is starting.
    Starting,
    /// The node agent answers.
    Ready,
    /// The node agent died and is being started again.
    Restarting,
    /// It cannot be started as specified.
    Failed,
    /// Its node agent and processes are stopped; its folder is kept (see `suspend`).
    Suspended,
}
