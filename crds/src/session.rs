//! The Session resource: one conversation with a coding agent (its agent, workspace,
//! MCP servers, messages and replies), and its status (phase, pending questions and
//! permissions, workspace changes, token usage).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Credential, EnvFromSource, EnvVar, EnvVarSource, SecretReference, is_false, is_zero, local_sandbox};

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
    /// Secrets the agent uses but never holds (its model API key): a placeholder in its
    /// environment, swapped for the value by the sandbox's proxy on the way to the hosts
    /// listed. Needs an isolated sandbox with `network: allowlist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
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

impl Session {
    /// The sandbox it runs on: where the store placed it (a claimed sandbox), else the
    /// one its spec names.
    pub fn placed_sandbox(&self) -> &str {
        self.status.as_ref().and_then(|s| s.sandbox.as_deref()).unwrap_or(&self.spec.sandbox)
    }
}
