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
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
