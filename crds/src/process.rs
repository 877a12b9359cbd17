//! The Process resource: a command or an interactive terminal, kept in its desired
//! state on a sandbox, and its status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Credential, EnvFromSource, EnvVar, is_false, is_zero, local_sandbox};

/// A command or an interactive terminal, kept in its desired state on a sandbox.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "agentplane.dev",
    version = "v1alpha1",
    kind = "Process",
    namespaced,
    derive = "PartialEq",
    status = "ProcessStatus",
    shortname = "proc",
    category = "agentplane",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Command", type_ = "string", json_path = ".spec.command"),
    printcolumn(name = "Restarts", type_ = "integer", json_path = ".status.restarts"),
    printcolumn(name = "Exit", type_ = "integer", json_path = ".status.exitCode"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Sandbox", type_ = "string", json_path = ".spec.sandbox", priority = 1),
    printcolumn(name = "PID", type_ = "integer", json_path = ".status.pid", priority = 1)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessSpec {
    /// The sandbox (node agent) to run on; `local` is the one `agentplane up` embeds.
    /// With `sessionRef` and no sandbox named, the Session's own.
    #[serde(default = "local_sandbox")]
    #[schemars(length(min = 1))]
    pub sandbox: String,
    /// A SandboxTemplate (same namespace) to get a sandbox of its own from, instead
    /// of naming one in `sandbox`: a ready one from a warm pool when there is one, else
    /// a new one. It is kept while this resource lives, shown in `status.sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub sandbox_template: Option<String>,
    /// The program, found on `PATH` unless it contains a `/`.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Working directory; the node agent's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment variables, added to the node agent's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Environment variables from Secrets or files, all keys at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    /// Secrets the process uses but never holds: a placeholder in its environment,
    /// swapped for the value by the sandbox's proxy on the way to the hosts listed.
    /// Needs an isolated sandbox with `network: allowlist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
    /// Run on a terminal of this size (`tty: {}` for 24x80). Absent: plain pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
    /// Keep stdin open (a terminal always has input).
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdin: bool,
    /// A tag to find it by on the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// A Session (same namespace) whose agent gets this process's output as context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_ref: Option<String>,
    /// Running (the default) or Stopped.
    #[serde(default)]
    pub desired_state: DesiredState,
    /// What to do when it exits while it should be running.
    #[serde(default)]
    pub restart_policy: RestartPolicy,
    /// The signal that stops it (default SIGHUP on a terminal, SIGTERM otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(SIG)?[A-Z0-9+-]+$|^[0-9]+$"))]
    pub stop_signal: Option<String>,
    /// Seconds between the stop signal and SIGKILL (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 3600))]
    pub stop_timeout_seconds: Option<u32>,
}

/// A terminal's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    #[serde(default = "default_rows")]
    #[schemars(range(min = 1, max = 4096))]
    pub rows: u16,
    #[serde(default = "default_cols")]
    #[schemars(range(min = 1, max = 4096))]
    pub cols: u16,
}

fn default_rows() -> u16 {
    24
}

fn default_cols() -> u16 {
    80
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DesiredState {
    #[default]
    Running,
    Stopped,
}

/// As a Pod's: restarts back off exponentially (10 s doubling to 5 min), reset after
/// 10 minutes of running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RestartPolicy {
    #[default]
    Never,
    OnFailure,
    Always,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ProcessPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the last run, if one did (e.g. `SIGTERM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_at: Option<Time>,
    /// Restarts under the restart policy.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
    /// The sandbox it runs on, when that is not simply `spec.sandbox` (claimed from
    /// `spec.sandboxTemplate`, or its Session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The terminal WebSocket on the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_url: Option<String>,
    /// A digest of what the current or last run was started from (command, args, cwd,
    /// env, tty, stdin, tag, sessionRef): when the spec's differs, the process is started anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// `Ready` (running as desired), `Valid` (the spec parsed and validated), and others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProcessPhase {
    /// Accepted, not started yet (e.g. its sandbox is not ready).
    Pending,
    Running,
    /// Waiting to be restarted after a failure.
    BackOff,
    /// Stopped because `desiredState: Stopped`.
    Stopped,
    /// Exited with 0 and will not be restarted.
    Succeeded,
    /// Exited otherwise and will not be restarted, or could not start.
    Failed,
}

impl Process {
    /// The sandbox it runs on: where the store placed it (a claimed sandbox, or its
    /// Session's), else the one its spec names.
    pub fn placed_sandbox(&self) -> &str {
        self.status.as_ref().and_then(|s| s.sandbox.as_deref()).unwrap_or(&self.spec.sandbox)
    }
}
