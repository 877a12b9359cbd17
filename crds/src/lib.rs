//! The agentplane resources: `Session`, `Process`, `Sandbox`, `SandboxTemplate` and
//! `SandboxWarmPool` (group `agentplane.dev`,
//! version `v1alpha1`). The one place the schema lives: the same types are read from
//! YAML in a watched directory and served as CustomResourceDefinitions, and
//! `cargo run -p agentplane-crds --bin crdgen` writes the CRD YAML in `crds/` from them.

// kube's `printcolumn(name = .., type_ = ..)` repeats its keys by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

mod identity;
pub use identity::{API_VERSION, IdentityError, Key, Kind, Object, ResourceRef};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "agentplane.dev";
pub const VERSION: &str = "v1alpha1";
/// The sandbox every resource runs on unless it names another: the node agent that
/// `agentplane up` embeds.
pub const LOCAL_SANDBOX: &str = "local";

fn local_sandbox() -> String {
    LOCAL_SANDBOX.to_string()
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

// ---------------------------------------------------------------------------------
// Shared pieces

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

// ---------------------------------------------------------------------------------
// Process

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

// ---------------------------------------------------------------------------------
// Session

/// One conversation with a coding agent.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "agentplane.dev",
    version = "v1alpha1",
    kind = "Session",
    namespaced,
    derive = "PartialEq",
    status = "SessionStatus",
    shortname = "sess",
    category = "agentplane",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Agent", type_ = "string", json_path = ".spec.agent"),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model"),
    printcolumn(name = "Delivered", type_ = "integer", json_path = ".status.deliveredMessages"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Sandbox", type_ = "string", json_path = ".spec.sandbox", priority = 1),
    printcolumn(name = "Agent Session", type_ = "string", json_path = ".status.agentSessionId", priority = 1)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionSpec {
    /// The sandbox (node agent) to run on; `local` is the one `agentplane up` embeds.
    #[serde(default = "local_sandbox")]
    #[schemars(length(min = 1))]
    pub sandbox: String,
    /// A SandboxTemplate (same namespace) to get a sandbox of its own from, instead
    /// of naming one in `sandbox`: a ready one from a warm pool when there is one, else
    /// a new one. It is kept while this resource lives, shown in `status.sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub sandbox_template: Option<String>,
    /// Which coding agent.
    pub agent: AgentKind,
    /// The agent's version, pinned (its npm version); the node agent's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The agent's own mode (e.g. `build` or `plan` for OpenCode), as it names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    /// Whether the agent asks before acting.
    #[serde(default)]
    pub permission_mode: PermissionMode,
    /// The model, as the agent names it; the agent's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A model variant (e.g. a reasoning effort), where the agent has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The directory the agent works in, on the sandbox. The same setting as
    /// `workspace.path`: give one (or both the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// What the agent works on: a git repository cloned on the sandbox before the agent
    /// starts (phase `Preparing`), and/or the directory it runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    /// Environment variables for the agent (API keys, base URLs), added to the node agent's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Environment variables from Secrets or files, all keys at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    /// MCP servers the agent is given, written into its own configuration (see
    /// docs/agents.md for which agents take them; the others refuse the session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub mcp_servers: Vec<McpServerSpec>,
    /// What to say, in order. Append-only: each entry is delivered once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// Answers to the agent's questions and permission requests (ids from the status).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replies: Vec<Reply>,
    /// End the conversation.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ended: bool,
}

/// An MCP server of a Session: exactly one of `command` (a stdio server the agent
/// starts) or `url` (a server speaking MCP's streamable HTTP transport).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerSpec {
    /// Unique in the Session; agents name the server's tools after it.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub name: String,
    /// The stdio server's program, found on the agent's `PATH` unless it contains a `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The stdio server's environment: values, or references as in `env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// The HTTP server's URL (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers of every request to the HTTP server: values, or references as in `env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HttpHeader>,
}

/// An HTTP header: a value, or a reference to where the value is kept (a Secret's key,
/// or in the directory store a key of a file beside the resource).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpHeader {
    /// The header's name (`Authorization`, ...).
    #[schemars(length(min = 1), regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// A Session's workspace. With `git`, the repository is cloned into `path` (or
/// `workingDir`; else a directory named after the session under the node agent's data
/// directory, `workspaces/<id>`), which must not exist or be empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workspace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitWorkspace>,
    /// An absolute directory on the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub path: Option<String>,
}

/// A git repository, cloned with the `git` CLI.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitWorkspace {
    /// `https://...`, `ssh://...`, `git@host:path` or `file://...`. No credentials in
    /// it: use `credentials`.
    #[schemars(length(min = 1))]
    pub url: String,
    /// A branch, a tag or a commit sha (with `depth`: a branch, a tag or a full sha);
    /// the default branch when absent.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub git_ref: Option<String>,
    /// A shallow clone of this many commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub depth: Option<u32>,
    /// Where the clone's credentials are kept: never shown in the status, logs or events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<GitCredentialsSource>,
}

/// A git clone's credentials: an HTTPS `token` (with an optional `username`, default
/// `x-access-token`) and/or an `sshPrivateKey`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitCredentialsSource {
    /// A Secret in the resource's namespace (cluster store) with the keys `token`,
    /// `username` and `sshPrivateKey`, any of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// A `KEY=VALUE` file relative to the resource's file (directory store), with
    /// `token` and optionally `username`; keep it out of version control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub file: Option<String>,
    /// An SSH private key file relative to the resource's file (directory store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub ssh_private_key_file: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    Claude,
    Codex,
    Opencode,
    Amp,
    Pi,
    Gemini,
    /// Built in, scripted, nothing to install: for demos and tests.
    Mock,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PermissionMode {
    /// Ask before acting, as the agent does by default.
    #[default]
    Default,
    /// Plan only, change nothing.
    Plan,
    /// Never ask.
    Bypass,
}

/// An answer to a pending question or permission request. Give `decision` for a
/// permission, `answers` or `reject` for a question.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reply {
    /// The id of the question or permission request (from the status).
    #[schemars(length(min = 1))]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<PermissionDecision>,
    /// One list of chosen options (or free text) per question asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<Vec<String>>,
    /// Decline to answer the question.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reject: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PermissionDecision {
    Once,
    Always,
    Reject,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SessionPhase>,
    /// The agent's own id of the conversation (used to resume it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session_id: Option<String>,
    /// How many entries of `spec.messages` were delivered (taken by the node agent,
    /// each by its index: a message given through the API never counts as one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delivered_messages: u32,
    /// Messages given through the node agent's API rather than `spec.messages` (a
    /// person in the inspector, a program): each ran as a turn of its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub api_messages: u32,
    /// Turns that ended failed (the agent's error, a model it could not reach); the
    /// newest one's error is the `TurnSucceeded` condition's message until a turn
    /// succeeds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_turns: u32,
    /// The sequence number of the last universal event seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_sequence: Option<u64>,
    /// Questions waiting for a reply in `spec.replies`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_questions: Vec<PendingQuestion>,
    /// Permission requests waiting for a reply in `spec.replies`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_permissions: Vec<PendingPermission>,
    /// The sandbox it runs on, when that is not simply `spec.sandbox` (claimed from
    /// `spec.sandboxTemplate`, or its Session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The universal event stream (SSE) on the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_url: Option<String>,
    /// Ids of `spec.replies` whose request has been answered (by that reply, or
    /// before it): nothing more to do for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered_replies: Vec<String>,
    /// Ids of `spec.replies` whose request had been answered otherwise through the API
    /// (a person in the inspector, a program) before the reply was read: that answer
    /// stands, and this reply was not given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered_through_api: Vec<String>,
    /// Ids of `spec.replies` that named no request of this session when they were
    /// first seen. They are never applied, not even to a request with that id that
    /// comes later: a reply approves only what its writer saw asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_replies: Vec<String>,
    /// The restart request (`agentplane.dev/restartedAt`, from `agentplane restart`)
    /// last honoured: the agent was restarted for it in the same conversation (a live
    /// session's between turns, a failed session's at once), or the session had ended
    /// and there was nothing to do. Each request is honoured once, never applied to a
    /// later failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_at: Option<String>,
    /// A digest of the environment the agent was given (SHA-256 over the resource's uid
    /// and each variable: never a value), by which a changed env file is noticed: the
    /// agent is then restarted with the new environment between turns, resuming its
    /// conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_digest: Option<String>,
    /// When the environment last changed and the agent was restarted with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_changed_at: Option<Time>,
    /// The workspace: the commit checked out and the files changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceStatus>,
    /// Tokens the agent reported, summed over the session's turns (absent until it
    /// reports any; some agents never do, see docs/agents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<SessionUsage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Tokens of a Session's turns, summed, as its agent reported them. The four counts
/// are disjoint: `inputTokens` is the input neither read from nor written to the
/// prompt cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// What the agent says the tokens cost, in US dollars, where it says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// A Session's workspace as it is: `agentplane diff session/NAME` shows the changes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStatus {
    /// The directory on the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The ref asked for.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The commit checked out by the clone, which the changes are against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Files that differ from `commit` (untracked ones too) as of the last turn's end;
    /// at most 1,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<ChangedFile>,
    /// More files changed than `changedFiles` lists.
    #[serde(default, skip_serializing_if = "is_false")]
    pub changed_files_truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangedFile {
    pub path: String,
    pub status: FileChangeStatus,
    /// For a renamed file: its path before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileChangeStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SessionPhase {
    Pending,
    /// The workspace's git repository is being cloned.
    Preparing,
    /// The agent's CLI is being installed.
    Installing,
    Starting,
    /// A turn is in progress.
    Running,
    /// A question or permission request waits for `spec.replies`.
    AwaitingInput,
    /// Between turns: every message so far has been answered.
    Idle,
    Ended,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingQuestion {
    /// Reply with this id.
    pub id: String,
    pub questions: Vec<Question>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub multi_select: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingPermission {
    /// Reply with this id.
    pub id: String,
    /// The tool the agent wants to use.
    pub tool: String,
    /// What it wants to do with it, shortened for reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The decisions on offer.
    pub options: Vec<PermissionDecision>,
}

// ---------------------------------------------------------------------------------
// Sandbox

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
    /// Managed, cluster only: the Pod's image, resources, `runtimeClassName` (gVisor,
    /// Kata), node selectors, tolerations and volumes. The controller adds the node
    /// agent's container command, its token and a hardened securityContext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub pod_template: Option<serde_json::Value>,
}

impl SandboxSpec {
    /// Whether the controller creates and owns this sandbox's node agent.
    pub fn is_managed(&self) -> bool {
        self.endpoint.is_none()
    }
}

impl Process {
    /// The sandbox it runs on: where the store placed it (a claimed sandbox, or its
    /// Session's), else the one its spec names.
    pub fn placed_sandbox(&self) -> &str {
        self.status.as_ref().and_then(|s| s.sandbox.as_deref()).unwrap_or(&self.spec.sandbox)
    }
}

impl Session {
    /// The sandbox it runs on: where the store placed it (a claimed sandbox), else the
    /// one its spec names.
    pub fn placed_sandbox(&self) -> &str {
        self.status.as_ref().and_then(|s| s.sandbox.as_deref()).unwrap_or(&self.spec.sandbox)
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
    /// Managed: Pending, Starting, Ready, Restarting, Failed.
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
}

// ---------------------------------------------------------------------------------
// SandboxTemplate and SandboxWarmPool

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

// ---------------------------------------------------------------------------------
// The CRDs

/// The CustomResourceDefinitions, generated from the types above.
///
/// An optional enum's schema lists `null` among its values; `nullable: true` already
/// says the same, and API servers before 1.22 or so reject a CRD whose `enum` holds a
/// `null` (with a misleading "per-version schemas may not all be set to identical
/// values"), so the `null` is taken out.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [Session::crd(), Process::crd(), Sandbox::crd(), SandboxTemplate::crd(), SandboxWarmPool::crd()]
        .into_iter()
        .map(without_null_enum_values)
        .collect()
}

fn without_null_enum_values(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    if key == "enum"
                        && let serde_json::Value::Array(values) = child
                    {
                        values.retain(|v| !v.is_null());
                    }
                    walk(child);
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes");
    walk(&mut value);
    serde_json::from_value(value).expect("a CRD without null enum values still reads")
}

/// The directories that hold the committed CRD YAML: `crds/` itself and
/// `manifests/crds/` (what `kubectl apply -k manifests/` installs).
pub fn crd_dirs() -> Vec<std::path::PathBuf> {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = crate_dir.parent().expect("CARGO_MANIFEST_DIR is absolute");
    vec![crate_dir.to_path_buf(), repo.join("manifests").join("crds")]
}

/// The file name of a CRD in `crds/`: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// A CRD as the YAML committed in `crds/`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    let body = serde_yaml_ng::to_string(crd).expect("a CRD serializes to YAML");
    format!("# Generated by `cargo run -p agentplane-crds --bin crdgen` from crds/src/lib.rs: do not edit.\n{body}")
}
