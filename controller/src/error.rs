//! The controller's errors.

use agentplane_node_agent::client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("sandbox {sandbox:?}: {source}")]
    NodeAgent {
        sandbox: String,
        #[source]
        source: ClientError,
    },
    #[error("sandbox {0:?} is not known")]
    SandboxNotFound(String),
    #[error("sandbox {sandbox:?} is not ready: {why}")]
    SandboxNotReady { sandbox: String, why: String },
    #[error("sandbox {sandbox:?} is suspended: {why}")]
    SandboxSuspended { sandbox: String, why: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("another `agentplane up` already runs on {0}")]
    AlreadyRunning(String),
}

impl Error {
    /// The `reason` of a `Ready=False` condition caused by this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NodeAgent { .. } => "NodeAgentUnreachable",
            Error::SandboxNotFound(_) => "SandboxNotFound",
            Error::SandboxNotReady { .. } => "SandboxNotReady",
            Error::SandboxSuspended { .. } => "SandboxSuspended",
            Error::Io { .. } | Error::Config(_) | Error::AlreadyRunning(_) => "Error",
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
