//! The wire types of the node agent's API, shared by the server and the typed client.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::{IntoParams, ToSchema};

mod fs;
pub use fs::*;
mod workspace;
pub use workspace::*;

/// Body of `POST /v1/processes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateProcessRequest {
    /// A stable id chosen by the caller (letters, digits, `.`, `_`, `-`; at most 63).
    /// Omit it and the node agent picks one. Controllers derive it from a resource uid
    /// so that a restarted controller finds what it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    pub id: Option<String>,
    /// The program, found on `PATH` unless it contains a `/`.
    #[schema(min_length = 1)]
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory; the node agent's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added to (or overriding) the node agent's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Present means: run on a pseudo-terminal of this size (`TERM=xterm-256color` unless `env` sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    /// Keep stdin open for a process without a PTY (a PTY always has input).
    #[serde(default)]
    pub stdin: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Caller's metadata kept with the process and returned as given (at most 64
    /// entries, 16 KiB in all). A controller records here which resource, and which
    /// version of its spec, a process was started for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// A session this process feeds (`session_not_found` if there is none; `conflict`
    /// if it has ended). The session gets an `item.started` of kind `tool_result`
    /// (source `daemon`, status `inProgress`) when the process starts and the same
    /// item `item.completed` when it exits: `input` holds `command`, `args`,
    /// `processId`, `exitCode` and `signal`; `output` the last 64 KiB of its output
    /// (stdout, then stderr under a `--- stderr ---` line; a first line saying how
    /// many bytes were cut when there was more). The next turn the session starts
    /// gets that output prepended to the message delivered to the agent, as
    /// ``Output of `CMD` (exit 0):`` and a fenced block; the turn's user message item
    /// keeps the person's own text. Ending the session stops its processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    #[schema(minimum = 1, maximum = 4096)]
    pub rows: u16,
    #[schema(minimum = 1, maximum = 4096)]
    pub cols: u16,
}

impl PtySize {
    pub fn validate(&self) -> Result<(), String> {
        if self.rows == 0 || self.cols == 0 || self.rows > 4096 || self.cols > 4096 {
            return Err(format!(
                "terminal size {}x{} is out of range (rows and cols must be 1..=4096)",
                self.rows, self.cols
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessStatus {
    Running,
    Exited,
}

/// A process as the node agent knows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub id: String,
    pub tag: Option<String>,
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub command: String,
    pub args: Vec<String>,
    pub cwd: String,
    pub pid: u32,
    /// Whether it runs on a pseudo-terminal.
    pub pty: bool,
    /// The terminal size, for a PTY process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
    /// Whether its stdin is open for input.
    pub stdin: bool,
    pub status: ProcessStatus,
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did (e.g. `SIGTERM`).
    pub signal: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub exited_at: Option<OffsetDateTime>,
    /// Bytes of output so far: the terminal's for a PTY, stdout's otherwise.
    pub output_offset: u64,
    /// Bytes written to stderr so far (processes without a PTY).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_offset: Option<u64>,
    /// The session this process feeds, if any (see `CreateProcessRequest.sessionId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// Query of `GET /v1/processes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListProcessesQuery {
    /// Only processes with this tag.
    pub tag: Option<String>,
    /// Only processes with (true) or without (false) a PTY.
    pub pty: Option<bool>,
    /// Only processes that feed this session.
    pub session: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProcessList {
    pub processes: Vec<ProcessInfo>,
}

/// Query of `DELETE /v1/processes/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteProcessQuery {
    /// The stop signal sent to the whole process group (default `SIGHUP` for a PTY, as when a
    /// terminal closes; `SIGTERM` otherwise).
    pub signal: Option<String>,
    /// Seconds to wait after the stop signal before `SIGKILL` (default: the node agent's stop timeout).
    pub timeout: Option<f64>,
    /// Forget the record too, instead of keeping it as exited.
    #[serde(default)]
    pub purge: bool,
}

/// Who receives a signal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SignalTarget {
    /// The process group the node agent started (the default).
    #[default]
    Group,
    /// The terminal's foreground process group, as if typed at the keyboard (PTY only).
    Foreground,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalRequest {
    /// A signal name (`SIGINT`, `INT`) or number.
    pub signal: String,
    #[serde(default)]
    pub target: SignalTarget,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputRequest {
    /// Text to write, or base64 when `base64` is true.
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub base64: bool,
    /// Close stdin after writing (`^D` on a PTY).
    #[serde(default)]
    pub eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// stdout, or the terminal for a PTY process.
    #[default]
    Stdout,
    Stderr,
    /// The terminal of a PTY process.
    Pty,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutputEncoding {
    /// UTF-8 text; invalid sequences become U+FFFD (offsets still count raw bytes).
    #[default]
    Utf8,
    Base64,
}

/// Query of `GET /v1/processes/{id}/output`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OutputQuery {
    /// Absolute byte offset to read from (default 0: the oldest retained byte).
    pub offset: Option<u64>,
    pub stream: Option<OutputStream>,
    /// Most bytes to return (default and maximum 1 MiB).
    pub limit: Option<usize>,
    pub encoding: Option<OutputEncoding>,
    /// Seconds to wait for output past `offset` when there is none yet (at most 60).
    pub wait: Option<f64>,
}

/// A range of output that was lost to the client: overwritten before it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Gap {
    pub from: u64,
    pub to: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputChunk {
    pub stream: OutputStream,
    /// The offset of the first byte of `data`.
    pub offset: u64,
    /// The offset to ask for next.
    pub next_offset: u64,
    /// Bytes between the requested offset and `offset` that are no longer retained.
    pub gap: Option<Gap>,
    pub encoding: OutputEncoding,
    pub data: String,
    /// True when the stream is closed and `nextOffset` is its end: nothing more will come.
    pub eof: bool,
    pub status: ProcessStatus,
}

/// Query of `GET /v1/processes/{id}/output/interleaved`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InterleavedOutputQuery {
    /// Sequence number of the first chunk to return (default 0: the oldest kept).
    pub seq: Option<u64>,
    /// Only chunks received at or after this time: RFC 3339, or a number of seconds before now.
    pub since: Option<String>,
    /// Most bytes of data to return (default and maximum 1 MiB); at least one chunk is returned whole.
    pub limit: Option<usize>,
    pub encoding: Option<OutputEncoding>,
    /// Seconds to wait for a chunk at or past `seq` when there is none yet (at most 60).
    pub wait: Option<f64>,
}

/// A chunk of stdout or stderr as the node agent received it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputFrame {
    /// Arrival order across both streams.
    pub seq: u64,
    pub stream: OutputStream,
    /// The offset in `stream` of the first byte of `data`.
    pub offset: u64,
    /// When the node agent received it; never earlier than the frame before it.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub time: OffsetDateTime,
    /// Bytes of the chunk no longer kept (offsets in `stream`): `data` is what is left.
    pub gap: Option<Gap>,
    pub data: String,
}

/// stdout and stderr of a process without a terminal, chunk by chunk in the order they arrived.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterleavedOutput {
    pub frames: Vec<OutputFrame>,
    /// The `seq` to ask for next.
    pub next_seq: u64,
    /// Chunks asked for whose order is no longer kept (sequence numbers, `to` exclusive).
    pub gap: Option<Gap>,
    pub encoding: OutputEncoding,
    /// True when both streams are closed and `nextSeq` is past their last chunk.
    pub eof: bool,
    pub status: ProcessStatus,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ticket {
    /// Single use, for `GET /v1/processes/{id}/connect?ticket=`.
    pub ticket: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
}

/// Query of `GET /v1/processes/{id}/connect`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ConnectQuery {
    /// Resume from this byte offset; absent: from the oldest retained byte.
    pub offset: Option<u64>,
    /// For a process without a PTY: which output to stream (default stdout).
    pub stream: Option<OutputStream>,
    /// A single-use ticket from `POST /v1/processes/{id}/ticket`, for clients that cannot set headers.
    pub ticket: Option<String>,
    /// The client will `ack` what it consumes: at most 1 MiB is sent ahead of its
    /// last ack from the first byte on (without it, only once it first acks).
    pub ack: Option<bool>,
}

/// JSON control messages of the terminal WebSocket (text frames), both directions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ControlMessage {
    /// Client → server: resize the terminal.
    Resize { rows: u16, cols: u16 },
    /// Client → server: send a signal (to the terminal's foreground group on a PTY).
    Signal { signal: String },
    /// Client → server: output up to this offset has been consumed (a terminal drew
    /// it). Once a client sends one, at most 1 MiB is sent past its last `ack`: flow
    /// control for a client that cannot push back, as a browser's WebSocket cannot.
    /// Falling further behind is then what it is for any slow client: the program is
    /// held back for a while, then the client gets a gap.
    Ack { offset: u64 },
    /// Server → client, first: binary frames that follow start at this offset.
    Ready { offset: u64 },
    /// Server → client: bytes in `[from, to)` were lost to this client.
    Gap { from: u64, to: u64 },
    /// Server → client, last: the process ended.
    #[serde(rename_all = "camelCase")]
    Exit { exit_code: Option<i32>, signal: Option<String> },
    /// Server → client: a control message could not be carried out.
    Error { message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum LifecycleEventType {
    #[serde(rename = "process.created")]
    ProcessCreated,
    #[serde(rename = "process.updated")]
    ProcessUpdated,
    #[serde(rename = "process.exited")]
    ProcessExited,
    #[serde(rename = "process.deleted")]
    ProcessDeleted,
}

impl LifecycleEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleEventType::ProcessCreated => "process.created",
            LifecycleEventType::ProcessUpdated => "process.updated",
            LifecycleEventType::ProcessExited => "process.exited",
            LifecycleEventType::ProcessDeleted => "process.deleted",
        }
    }
}

/// One entry of `GET /v1/events/sse`; the SSE `id:` is `sequence`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEvent {
    pub sequence: u64,
    #[serde(rename = "type")]
    pub kind: LifecycleEventType,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub time: OffsetDateTime,
    pub process: ProcessInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

/// What keeps a node agent busy, and how long nothing has (`GET /v1/activity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActivityReport {
    /// What is going on now, one line each; empty when nothing is.
    pub busy: Vec<String>,
    /// Whole seconds since something last went on (0 while busy).
    pub idle_seconds: u64,
}

// ---- Agents ----

/// What a driver can do; clients hide what an agent does not offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// Asks before running tools (`permission.requested`).
    pub permissions: bool,
    /// Asks the user questions (`question.requested`).
    pub questions: bool,
    /// Continues a conversation after the node agent restarts.
    pub resume: bool,
    /// Streams text as `item.delta` events before `item.completed`.
    pub streaming_deltas: bool,
    /// Takes MCP servers (`mcpServers` of a session); an agent that cannot refuses a
    /// session that names any (`mcp_not_supported`).
    #[serde(default)]
    pub mcp: bool,
}

/// An agent the node agent can drive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfo {
    /// `claude`, `codex`, ..., `mock`.
    pub id: String,
    pub installed: bool,
    pub version: Option<String>,
    /// The installed executable; `null` for a built-in agent.
    pub path: Option<String>,
    pub capabilities: AgentCapabilities,
    /// Whether the credentials it needs are available to it.
    pub credentials_available: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentInfo>,
}

// ---- Installing agents ----

/// Body of `POST /v1/agents/{agent}/install` (all optional: an empty body installs
/// the pinned version).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstallRequest {
    /// An exact npm version (`2.1.330`); default: the version this node agent pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Install again even when this version is there (swapped in once complete).
    #[serde(default)]
    pub reinstall: bool,
}

/// What an install did (`install.completed` over SSE).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallResult {
    pub agent: String,
    pub version: String,
    /// The installed executable.
    pub path: String,
    /// The version was there already: nothing was fetched.
    pub already_installed: bool,
    /// npm's integrity of the agent's package (`sha512-...`), checked against the
    /// registry's; `null` for an install made before integrity was recorded.
    pub integrity: Option<String>,
}

/// Where an install is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstallPhase {
    /// npm reads the packages' metadata and picks versions.
    Resolving,
    /// npm fetches (or takes from its cache) the packages' tarballs.
    Downloading,
    /// The installed package's integrity is compared with the registry's.
    Verifying,
    /// Installed and in place.
    Done,
}

/// One `install.progress` event. The counts are totals so far, so a client that
/// misses one loses nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallProgress {
    pub agent: String,
    pub version: String,
    pub phase: InstallPhase,
    /// Package documents fetched from the registry.
    pub packages_resolved: u64,
    /// Tarballs fetched or taken from npm's cache (npm does not say how many to expect).
    pub tarballs_fetched: u64,
    /// What npm just did (a package name), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One mode an agent has (`agentMode` of a session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AgentModeInfo {
    pub id: String,
    pub description: String,
}

/// `GET /v1/agents/{agent}/modes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentModes {
    pub agent: String,
    /// The values a session's `agentMode` may take (empty: the agent has none).
    pub agent_modes: Vec<AgentModeInfo>,
    /// The mode a session gets when it names none.
    pub default_agent_mode: Option<String>,
    /// The `permissionMode`s this agent's driver accepts; others answer `mode_not_supported`.
    pub permission_modes: Vec<PermissionMode>,
}

/// One model a session's `model` may name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelInfo {
    pub id: String,
    pub description: String,
}

/// `GET /v1/agents/{agent}/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentModels {
    pub agent: String,
    pub models: Vec<ModelInfo>,
    /// The model the agent picks when a session names none, when known.
    pub default_model: Option<String>,
    /// Where the list comes from (`catalog`: what this node agent knows of the
    /// agent's pinned version, not asked of the agent or its provider).
    pub source: String,
    /// What else `model` may name.
    pub note: String,
}

// ---- Sessions ----

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PermissionMode {
    /// The agent asks before running tools.
    #[default]
    Default,
    /// The agent plans and does not change anything.
    Plan,
    /// The agent runs tools without asking.
    Bypass,
}

/// Body of `POST /v1/sessions/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSessionRequest {
    /// An agent id from `GET /v1/agents`.
    pub agent: String,
    /// A pinned version; absent means the installed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The agent's own mode (e.g. `build`, `plan`); absent means its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// An existing directory; the node agent's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Variables for the agent's environment. Kept in the node agent's data directory
    /// (readable by its user only) so that the session can resume; never echoed back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// What people read in the node agent's log lines for this session, beside its id
    /// (a controller sets `Session/<namespace>/<name>`). At most 512 bytes, no control
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 512)]
    pub label: Option<String>,
    /// MCP servers the agent is given, written into its own configuration the way it
    /// takes them (stdio: `command`; HTTP: `url`). Values are resolved (no secret
    /// references); kept with `env` and, like it, never echoed back or logged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServer>,
    /// What the session works on: a git repository cloned before the agent starts
    /// (state `preparing`), and/or the directory it runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceRequest>,
}

/// One MCP server of a session: exactly one of `command` (a stdio server the agent
/// starts, with `args` and `env`) or `url` (a streamable HTTP server, with `headers`).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    /// Unique in the session: letters, digits, `_` and `-`, at most 64 (agents name the
    /// server's tools after it, e.g. Claude's `mcp__<name>__<tool>`).
    #[schema(max_length = 64)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The stdio server's environment (added to what the agent passes it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `http://` or `https://`: a server speaking MCP's streamable HTTP transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers of every request to the HTTP server (`Authorization`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `env` and `headers` may hold secrets: only their names are shown.
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionState {
    /// The workspace is being prepared (its git repository cloned).
    Preparing,
    /// The agent's CLI is being installed (from the npm registry, pinned).
    Installing,
    /// The agent is being started.
    Starting,
    /// A turn is under way (or messages wait for one).
    Running,
    /// A turn waits for a reply to a permission request or a question.
    AwaitingInput,
    /// Ready for a message.
    Idle,
    Ended,
    /// The agent could not be installed or started (or its driver broke); see
    /// `error`. `POST /v1/sessions/{id}/restart` starts it again. A turn that fails
    /// (the agent's process exiting in it, say) does not fail the session.
    Failed,
}

impl SessionState {
    /// Whether the session takes messages and replies no more.
    pub fn is_final(self) -> bool {
        matches!(self, SessionState::Ended | SessionState::Failed)
    }
}

/// A session as the node agent knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub id: String,
    /// The label it was created with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub agent: String,
    pub agent_version: Option<String>,
    pub agent_mode: Option<String>,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    pub state: SessionState,
    /// The agent's own id of the conversation, once it has one.
    pub agent_session_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ended_at: Option<OffsetDateTime>,
    /// Messages accepted so far (each runs as one turn, in order).
    pub messages_received: u64,
    /// Of those, the declared ones (sent with `declared`, by a controller from a
    /// resource's `spec.messages`); the rest came through the API without it.
    #[serde(default)]
    pub declared_messages_received: u64,
    pub turns_completed: u64,
    /// Turns that ended failed, among `turnsCompleted`.
    #[serde(default)]
    pub turns_failed: u64,
    /// Why the newest finished turn failed; absent when it succeeded (or none ended yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_error: Option<String>,
    /// The tokens of every turn so far, summed (each turn's is on its `turn.ended`);
    /// zeros while the agent has reported none.
    #[serde(default)]
    pub usage: crate::universal::Usage,
    /// The sequence of the newest event (0 when none).
    pub last_sequence: u64,
    pub pending_permissions: Vec<crate::universal::PermissionRequest>,
    pub pending_questions: Vec<crate::universal::QuestionRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its workspace, when it was created with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionInfo>,
}

/// Body of `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendMessageRequest {
    #[schema(min_length = 1)]
    pub message: String,
    /// For a controller: this message's index in the resource's `spec.messages`. Each
    /// index is taken once and in order: one already taken changes nothing (the answer
    /// is the session as it is), one past the next is refused (409). A message without
    /// it (a person, a program, the inspector) is counted apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<u64>,
}

/// Body of `POST /v1/sessions/{id}/restart` (optional: no body restarts with the same
/// environment).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartSessionRequest {
    /// The agent's environment from now on, in place of the one it was created with
    /// (an env file that changed). Kept like `env` at creation, never echoed back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

/// Body of `POST /v1/sessions/{id}/permissions/{pid}/reply`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionReplyRequest {
    pub reply: crate::universal::PermissionReply,
}

/// Body of `POST /v1/sessions/{id}/questions/{qid}/reply`: one list of answers per question.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuestionReplyRequest {
    pub answers: Vec<Vec<String>>,
}

/// Query of `GET /v1/sessions/{id}/events`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionEventsQuery {
    /// Events with a sequence greater than this (default 0: from the first).
    pub offset: Option<u64>,
    /// Most events to return (default 1000, at most 10000).
    pub limit: Option<usize>,
}

/// Answer of `GET /v1/sessions/{id}/events`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionEvents {
    pub events: Vec<crate::universal::UniversalEvent>,
    /// Whether events past the last one returned exist already.
    pub has_more: bool,
    /// Sequences after `offset` that are lost (not in the event log any more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<Gap>,
}

/// Query of `PUT /v1/sessions/{id}/conversation`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StageConversationQuery {
    /// The newest event sequence a client saw of this session where it was before:
    /// the continued log's go on after it (and after the newest the tar holds).
    pub after: Option<u64>,
}

/// Answer of `PUT /v1/sessions/{id}/conversation`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationStaged {
    /// The tar's size.
    pub bytes: u64,
    /// The session's events will go on after this sequence.
    pub last_sequence: u64,
}

/// Query of `GET /v1/sessions/{id}/events/sse`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionSseQuery {
    /// Events with a sequence greater than this (default 0). `Last-Event-ID` takes precedence.
    pub offset: Option<u64>,
}

// ---- Logging in from a browser ----

/// Answer of `POST /v1/auth/codes`: a one-time code for `POST /v1/auth/exchange`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoginCode {
    /// 128 random bits as hex: single use. Meant for a URL fragment (`/ui/#code=...`),
    /// which no browser sends to a server.
    pub code: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
}

/// Body of `POST /v1/auth/exchange`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExchangeCodeRequest {
    /// A code from `POST /v1/auth/codes` (or the `inspector:` line `agentplane up` prints).
    pub code: String,
}

/// Answer of `POST /v1/auth/exchange`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrowserToken {
    /// A bearer token of the page's own (not the node agent's `--token`), accepted
    /// until the node agent stops; the 64 newest are kept.
    pub token: String,
}

// ---- Resources (served by `agentplane up`) ----

/// The kinds of resource a store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub enum ResourceKind {
    Process,
    Session,
    Sandbox,
    SandboxTemplate,
    SandboxWarmPool,
}

/// A condition of a resource's status, in the Kubernetes `metav1.Condition` shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCondition {
    /// `Ready`, `Valid`, `RepliesAccepted`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339: when `status` last changed.
    #[schema(format = DateTime)]
    pub last_transition_time: String,
}

/// One resource of the store, with what a page needs to list it and open it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceView {
    pub kind: ResourceKind,
    pub namespace: String,
    pub name: String,
    /// Given by the store when it first saw the resource; stable while it lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// As `agentplane get` shows it: the status's phase, `Pending` before there is
    /// one, `Terminating` while being cleaned up, `External` for a Sandbox with an
    /// endpoint; absent for kinds without a phase (templates, pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why it is not where it should be, in one word (`get`'s REASON column:
    /// `BackOff`, `EnvNotResolved`, `InvalidSpec`, ...); absent when all is well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The message of the condition `reason` comes from, else that of `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub conditions: Vec<ResourceCondition>,
    /// The YAML file that declares it, relative to the watched folder; absent for what
    /// the store made itself (sandboxes of a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Process and Session: the Sandbox it runs on (`local`: the node agent serving
    /// this list; `processId` and `sessionId` are ids on that sandbox's node agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Process: its id on its sandbox's node agent (`/v1/processes/{id}`, its terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    /// Session: its id on its sandbox's node agent (`/v1/sessions/{id}`, its events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// RFC 3339: the latest time the resource records (created, a condition's
    /// transition, started, exited, deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
    /// The spec as the store took it (what `agentplane get -o json` shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    /// The whole status as the store records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub status: Option<serde_json::Value>,
}

/// Why a file of the watched folder was not taken (it keeps its resources at their
/// last good spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileError {
    /// Relative to the watched folder.
    pub file: String,
    /// 1-based, when the error has a place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// 1-based, when the error has a place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    pub message: String,
}

/// Answer of `GET /v1/resources`, and the data of each `resources` event of
/// `GET /v1/resources/sse`: everything, each time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceList {
    /// By kind, namespace and name.
    pub resources: Vec<ResourceView>,
    /// The files that were not taken, by file.
    pub file_errors: Vec<FileError>,
    /// Goes up with every change the store records (from 0 at each start of `up`).
    pub revision: u64,
}

/// Answer of `POST /v1/resources/sandboxes/{namespace}/{name}/wake`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWake {
    /// True when the sandbox was suspended and is now asked to wake: the resources'
    /// stream shows it `Starting`, then `Ready`. False when it was not suspended
    /// (awake, starting, failed): nothing was done.
    pub woken: bool,
}
