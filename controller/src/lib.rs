//! The agentplane controller.
//!
//! One reconcile core (`process`, later `session`) drives node agents through their
//! typed HTTP client and computes each resource's status from its spec and what the
//! node agent reports. It knows nothing of where resources are kept: a store feeds it
//! resources and writes back the status it returns. `dir` is the store behind
//! `agentplane up`: YAML files in a watched directory, status in a state directory
//! beside them.

pub mod conditions;
pub mod conversations;
pub mod dir;
pub mod error;
pub mod follow;
pub mod kube;
pub mod mcp;
pub mod metrics;
pub mod node_agent;
pub mod process;
pub mod queue;
pub mod restart;
pub mod sandboxes;
pub mod session;
pub mod templates;

pub use error::{Error, Result};

/// What a Sandbox's status shows of a credential its proxy counted (either store's).
pub(crate) fn credential_status(count: agentplane_egress::CredentialCount) -> agentplane_crds::CredentialStatus {
    agentplane_crds::CredentialStatus { name: count.name, hosts: count.hosts, sent: count.sent, blocked: count.blocked }
}

/// What a reconcile hands back to its store: the status to write (only written when it
/// differs from the stored one) and when to look again without being asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled<S> {
    pub status: S,
    pub requeue_after: Option<std::time::Duration>,
}

/// Annotations the controller puts on what it starts on a node agent.
pub mod annotations {
    /// `<Kind>/<namespace>/<name>` of the resource a node-agent object belongs to.
    pub const RESOURCE: &str = "agentplane.dev/resource";
    /// The resource's uid: a recreated resource of the same name is another owner.
    pub const UID: &str = "agentplane.dev/uid";
    /// What the run was started from (see `ProcessStatus::spec_hash`).
    pub const SPEC_HASH: &str = "agentplane.dev/spec-hash";
    /// On a resource in the directory store: the file (and document) that declares it.
    pub const SOURCE: &str = "agentplane.dev/source";
}
