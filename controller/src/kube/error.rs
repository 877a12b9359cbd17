//! The cluster store's errors: the reconcile core's, and the Kubernetes API's, which
//! the core never sees (it knows nothing of where resources are kept).

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Core(#[from] crate::Error),
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    /// The store's own setup or bookkeeping (leader election, its caches).
    #[error("{0}")]
    Config(String),
}

impl Error {
    /// The `reason` of a `Ready=False` condition caused by this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Core(e) => e.reason(),
            Error::Api(_) => "KubernetesApiError",
            Error::Config(_) => "Error",
        }
    }
}

impl From<super::lend::LendError> for Error {
    fn from(error: super::lend::LendError) -> Error {
        match error {
            super::lend::LendError::Api(e) => Error::Api(e),
            other => Error::Config(other.to_string()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
