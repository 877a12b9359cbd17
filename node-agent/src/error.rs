//! Errors of the node agent, and their RFC 7807 `application/problem+json` form.
//!
//! Every failure a client can see has a stable `type` URN, so programs branch on
//! the URN and people read `detail`.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, named for what failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("no process with id or tag {0:?}")]
    ProcessNotFound(String),
    #[error("a process with id {0:?} already exists")]
    ProcessAlreadyExists(String),
    #[error("process {0:?} is not running")]
    ProcessNotRunning(String),
    #[error("stdin of process {0:?} is not open (create it with \"stdin\": true or a pty)")]
    StdinClosed(String),
    #[error("could not start {command:?}: {source}")]
    SpawnFailed {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    LimitExceeded(String),
    /// An agent id this node agent cannot drive, named in a request body.
    #[error("agent {0:?} is not supported (see GET /v1/agents)")]
    UnsupportedAgent(String),
    /// An agent id this node agent cannot drive, named in the path.
    #[error("agent {0:?} is not supported (see GET /v1/agents)")]
    AgentNotFound(String),
    #[error("{0}")]
    ModeNotSupported(String),
    /// A session names MCP servers and its agent cannot take them.
    #[error("agent {0:?} cannot take MCP servers (see capabilities.mcp in GET /v1/agents)")]
    McpNotSupported(String),
    /// The agent's CLI is not installed and the request does not install it.
    #[error("{0}")]
    AgentNotInstalled(String),
    /// npm (or the download) failed; `detail` carries its error. What was installed
    /// before is untouched.
    #[error("{0}")]
    InstallFailed(String),
    /// The agent's process ended when it should not have.
    #[error("the agent process exited{}{}", code.map(|c| format!(" with code {c}")).unwrap_or_default(), if stderr_tail.is_empty() { String::new() } else { format!(": {stderr_tail}") })]
    AgentProcessExited { code: Option<i32>, stderr_tail: String },
    /// The agent refused to do something (e.g. a tool its permission mode forbids).
    #[error("{0}")]
    PermissionDenied(String),
    /// The agent's output could not be read (a broken stream, an unparseable protocol).
    #[error("{0}")]
    StreamError(String),
    /// The agent did not answer in time.
    #[error("{0}")]
    Timeout(String),
    #[error("no session with id {0:?}")]
    SessionNotFound(String),
    #[error("a session with id {0:?} already exists")]
    SessionAlreadyExists(String),
    #[error("session {session:?} has no permission request {id:?}")]
    PermissionNotFound { session: String, id: String },
    #[error("session {session:?} has no question {id:?}")]
    QuestionNotFound { session: String, id: String },
    /// The request contradicts the state it would change (a second, different reply; a
    /// message to an ended session).
    #[error("{0}")]
    Conflict(String),
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// `POST /v1/auth/exchange` with a code that was never minted, was used, or expired.
    #[error(
        "the login code is unknown, already used or expired: ask for a new one (`agentplane ui`, or POST /v1/auth/codes)"
    )]
    InvalidLoginCode,
    #[error("{0}")]
    Forbidden(String),
    #[error("no route for {0}")]
    RouteNotFound(String),
    /// A route this node agent has but does not serve (resources without `agentplane up`).
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed for this route")]
    MethodNotAllowed,
    /// A request body past the node agent's limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// A session's workspace could not be prepared (git's message, without credentials).
    #[error("{0}")]
    WorkspaceFailed(String),
    /// A file path outside the node agent's file roots, or one that would be
    /// reached through a symlink leading out of them.
    #[error("{0}")]
    ForbiddenPath(String),
    #[error("{0}")]
    NotADirectory(String),
    #[error("{0}")]
    IsADirectory(String),
    #[error("{0}")]
    DirectoryNotEmpty(String),
    /// A `Range` a file cannot satisfy (`416`).
    #[error("{0}")]
    InvalidRange(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// The stable machine-readable name of this error; the URN is `urn:agentplane:error:<code>`.
    pub fn code(&self) -> ProblemCode {
        match self {
            Error::InvalidRequest(_) => ProblemCode::InvalidRequest,
            Error::ProcessNotFound(_) => ProblemCode::ProcessNotFound,
            Error::ProcessAlreadyExists(_) => ProblemCode::ProcessAlreadyExists,
            Error::ProcessNotRunning(_) => ProblemCode::ProcessNotRunning,
            Error::StdinClosed(_) => ProblemCode::StdinClosed,
            Error::SpawnFailed { .. } => ProblemCode::SpawnFailed,
            Error::LimitExceeded(_) => ProblemCode::LimitExceeded,
            Error::UnsupportedAgent(_) | Error::AgentNotFound(_) => ProblemCode::UnsupportedAgent,
            Error::ModeNotSupported(_) => ProblemCode::ModeNotSupported,
            Error::McpNotSupported(_) => ProblemCode::McpNotSupported,
            Error::AgentNotInstalled(_) => ProblemCode::AgentNotInstalled,
            Error::InstallFailed(_) => ProblemCode::InstallFailed,
            Error::AgentProcessExited { .. } => ProblemCode::AgentProcessExited,
            Error::PermissionDenied(_) => ProblemCode::PermissionDenied,
            Error::StreamError(_) => ProblemCode::StreamError,
            Error::Timeout(_) => ProblemCode::Timeout,
            Error::SessionNotFound(_) => ProblemCode::SessionNotFound,
            Error::SessionAlreadyExists(_) => ProblemCode::SessionAlreadyExists,
            Error::PermissionNotFound { .. } => ProblemCode::PermissionNotFound,
            Error::QuestionNotFound { .. } => ProblemCode::QuestionNotFound,
            Error::Conflict(_) => ProblemCode::Conflict,
            Error::Unauthorized | Error::InvalidLoginCode => ProblemCode::Unauthorized,
            Error::Forbidden(_) => ProblemCode::Forbidden,
            Error::RouteNotFound(_) | Error::NotFound(_) => ProblemCode::NotFound,
            Error::MethodNotAllowed => ProblemCode::MethodNotAllowed,
            Error::PayloadTooLarge(_) => ProblemCode::PayloadTooLarge,
            Error::WorkspaceFailed(_) => ProblemCode::WorkspaceFailed,
            Error::ForbiddenPath(_) => ProblemCode::ForbiddenPath,
            Error::NotADirectory(_) => ProblemCode::NotADirectory,
            Error::IsADirectory(_) => ProblemCode::IsADirectory,
            Error::DirectoryNotEmpty(_) => ProblemCode::DirectoryNotEmpty,
            Error::InvalidRange(_) => ProblemCode::InvalidRange,
            Error::Io { .. } => ProblemCode::Internal,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::InvalidRequest(_)
            | Error::UnsupportedAgent(_)
            | Error::ModeNotSupported(_)
            | Error::McpNotSupported(_) => StatusCode::BAD_REQUEST,
            Error::ProcessNotFound(_)
            | Error::RouteNotFound(_)
            | Error::NotFound(_)
            | Error::AgentNotFound(_)
            | Error::SessionNotFound(_)
            | Error::PermissionNotFound { .. }
            | Error::QuestionNotFound { .. } => StatusCode::NOT_FOUND,
            Error::ProcessAlreadyExists(_)
            | Error::ProcessNotRunning(_)
            | Error::StdinClosed(_)
            | Error::SessionAlreadyExists(_)
            | Error::Conflict(_) => StatusCode::CONFLICT,
            Error::SpawnFailed { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::AgentNotInstalled(_) | Error::PermissionDenied(_) => StatusCode::CONFLICT,
            Error::InstallFailed(_) | Error::AgentProcessExited { .. } | Error::StreamError(_) => {
                StatusCode::BAD_GATEWAY
            }
            Error::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Error::LimitExceeded(_) => StatusCode::TOO_MANY_REQUESTS,
            Error::Unauthorized | Error::InvalidLoginCode => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::WorkspaceFailed(_) => StatusCode::BAD_GATEWAY,
            Error::ForbiddenPath(_) => StatusCode::FORBIDDEN,
            Error::NotADirectory(_) | Error::IsADirectory(_) | Error::DirectoryNotEmpty(_) => StatusCode::CONFLICT,
            Error::InvalidRange(_) => StatusCode::RANGE_NOT_SATISFIABLE,
            Error::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Error::InvalidRequest(_) => "Invalid request",
            Error::ProcessNotFound(_) => "Process not found",
            Error::ProcessAlreadyExists(_) => "Process already exists",
            Error::ProcessNotRunning(_) => "Process not running",
            Error::StdinClosed(_) => "Stdin not open",
            Error::SpawnFailed { .. } => "Spawn failed",
            Error::LimitExceeded(_) => "Limit exceeded",
            Error::UnsupportedAgent(_) | Error::AgentNotFound(_) => "Unsupported agent",
            Error::ModeNotSupported(_) => "Mode not supported",
            Error::McpNotSupported(_) => "MCP not supported",
            Error::AgentNotInstalled(_) => "Agent not installed",
            Error::InstallFailed(_) => "Install failed",
            Error::AgentProcessExited { .. } => "Agent process exited",
            Error::PermissionDenied(_) => "Permission denied",
            Error::StreamError(_) => "Stream error",
            Error::Timeout(_) => "Timeout",
            Error::SessionNotFound(_) => "Session not found",
            Error::SessionAlreadyExists(_) => "Session already exists",
            Error::PermissionNotFound { .. } => "Permission request not found",
            Error::QuestionNotFound { .. } => "Question not found",
            Error::Conflict(_) => "Conflict",
            Error::Unauthorized | Error::InvalidLoginCode => "Unauthorized",
            Error::Forbidden(_) => "Forbidden",
            Error::RouteNotFound(_) | Error::NotFound(_) => "Not found",
            Error::MethodNotAllowed => "Method not allowed",
            Error::PayloadTooLarge(_) => "Payload too large",
            Error::WorkspaceFailed(_) => "Workspace failed",
            Error::ForbiddenPath(_) => "Path outside the file roots",
            Error::NotADirectory(_) => "Not a directory",
            Error::IsADirectory(_) => "Is a directory",
            Error::DirectoryNotEmpty(_) => "Directory not empty",
            Error::InvalidRange(_) => "Range not satisfiable",
            Error::Io { .. } => "Internal error",
        }
    }

    pub fn to_problem(&self) -> Problem {
        Problem {
            kind: format!("{PROBLEM_TYPE_PREFIX}{}", self.code().as_str()),
            title: self.title().to_string(),
            status: self.status().as_u16(),
            detail: self.to_string(),
        }
    }
}

pub const PROBLEM_TYPE_PREFIX: &str = "urn:agentplane:error:";

/// The stable machine-readable name of a problem (the URN is
/// `urn:agentplane:error:<code>`): one enum for what the server answers and what every
/// client compares, so no caller matches on text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemCode {
    InvalidRequest,
    ProcessNotFound,
    ProcessAlreadyExists,
    ProcessNotRunning,
    StdinClosed,
    SpawnFailed,
    LimitExceeded,
    UnsupportedAgent,
    ModeNotSupported,
    McpNotSupported,
    AgentNotInstalled,
    InstallFailed,
    AgentProcessExited,
    PermissionDenied,
    StreamError,
    Timeout,
    SessionNotFound,
    SessionAlreadyExists,
    PermissionNotFound,
    QuestionNotFound,
    Conflict,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    WorkspaceFailed,
    ForbiddenPath,
    NotADirectory,
    IsADirectory,
    DirectoryNotEmpty,
    InvalidRange,
    Internal,
}

impl ProblemCode {
    pub const ALL: [ProblemCode; 33] = [
        ProblemCode::InvalidRequest,
        ProblemCode::ProcessNotFound,
        ProblemCode::ProcessAlreadyExists,
        ProblemCode::ProcessNotRunning,
        ProblemCode::StdinClosed,
        ProblemCode::SpawnFailed,
        ProblemCode::LimitExceeded,
        ProblemCode::UnsupportedAgent,
        ProblemCode::ModeNotSupported,
        ProblemCode::McpNotSupported,
        ProblemCode::AgentNotInstalled,
        ProblemCode::InstallFailed,
        ProblemCode::AgentProcessExited,
        ProblemCode::PermissionDenied,
        ProblemCode::StreamError,
        ProblemCode::Timeout,
        ProblemCode::SessionNotFound,
        ProblemCode::SessionAlreadyExists,
        ProblemCode::PermissionNotFound,
        ProblemCode::QuestionNotFound,
        ProblemCode::Conflict,
        ProblemCode::Unauthorized,
        ProblemCode::Forbidden,
        ProblemCode::NotFound,
        ProblemCode::MethodNotAllowed,
        ProblemCode::PayloadTooLarge,
        ProblemCode::WorkspaceFailed,
        ProblemCode::ForbiddenPath,
        ProblemCode::NotADirectory,
        ProblemCode::IsADirectory,
        ProblemCode::DirectoryNotEmpty,
        ProblemCode::InvalidRange,
        ProblemCode::Internal,
    ];

    /// The code as the wire writes it (`process_not_found`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemCode::InvalidRequest => "invalid_request",
            ProblemCode::ProcessNotFound => "process_not_found",
            ProblemCode::ProcessAlreadyExists => "process_already_exists",
            ProblemCode::ProcessNotRunning => "process_not_running",
            ProblemCode::StdinClosed => "stdin_closed",
            ProblemCode::SpawnFailed => "spawn_failed",
            ProblemCode::LimitExceeded => "limit_exceeded",
            ProblemCode::UnsupportedAgent => "unsupported_agent",
            ProblemCode::ModeNotSupported => "mode_not_supported",
            ProblemCode::McpNotSupported => "mcp_not_supported",
            ProblemCode::AgentNotInstalled => "agent_not_installed",
            ProblemCode::InstallFailed => "install_failed",
            ProblemCode::AgentProcessExited => "agent_process_exited",
            ProblemCode::PermissionDenied => "permission_denied",
            ProblemCode::StreamError => "stream_error",
            ProblemCode::Timeout => "timeout",
            ProblemCode::SessionNotFound => "session_not_found",
            ProblemCode::SessionAlreadyExists => "session_already_exists",
            ProblemCode::PermissionNotFound => "permission_not_found",
            ProblemCode::QuestionNotFound => "question_not_found",
            ProblemCode::Conflict => "conflict",
            ProblemCode::Unauthorized => "unauthorized",
            ProblemCode::Forbidden => "forbidden",
            ProblemCode::NotFound => "not_found",
            ProblemCode::MethodNotAllowed => "method_not_allowed",
            ProblemCode::PayloadTooLarge => "payload_too_large",
            ProblemCode::WorkspaceFailed => "workspace_failed",
            ProblemCode::ForbiddenPath => "forbidden_path",
            ProblemCode::NotADirectory => "not_a_directory",
            ProblemCode::IsADirectory => "is_a_directory",
            ProblemCode::DirectoryNotEmpty => "directory_not_empty",
            ProblemCode::InvalidRange => "invalid_range",
            ProblemCode::Internal => "internal",
        }
    }

    /// The code a problem document's type names, if it is one of ours.
    pub fn parse(code: &str) -> Option<ProblemCode> {
        ProblemCode::ALL.into_iter().find(|c| c.as_str() == code)
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ProblemCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 7807 problem document.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct Problem {
    /// A stable URN, `urn:agentplane:error:<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
}

impl Problem {
    /// The `<code>` part of the type URN, as written.
    pub fn code(&self) -> &str {
        self.kind.strip_prefix(PROBLEM_TYPE_PREFIX).unwrap_or(&self.kind)
    }

    /// The code, when it is one this node agent knows.
    pub fn problem_code(&self) -> Option<ProblemCode> {
        ProblemCode::parse(self.code())
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if matches!(self, Error::Io { .. }) {
            tracing::error!(error = %self, "internal error");
        }
        let problem = self.to_problem();
        let mut response = (self.status(), axum::Json(problem)).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        if matches!(self, Error::Unauthorized) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Rejections of a body read past the limit are 413 like axum's own, as a problem;
/// the rest are the client's mistakes.
fn body_rejection(status: StatusCode, text: String) -> Error {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        Error::PayloadTooLarge(format!("the request body is larger than the node agent accepts: {text}"))
    } else {
        Error::InvalidRequest(text)
    }
}

impl From<axum::extract::rejection::JsonRejection> for Error {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> Self {
        body_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<axum::extract::rejection::BytesRejection> for Error {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        body_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for Error {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        Error::InvalidRequest(rejection.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for Error {
    fn from(rejection: axum::extract::rejection::PathRejection) -> Self {
        Error::InvalidRequest(rejection.body_text())
    }
}
