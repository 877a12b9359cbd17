//! The agents the node agent can drive: the [`Agent`] contract each implements, and
//! the [`registry`] that lists them once.
//!
//! An agent is one module: a unit value implementing [`Agent`] (its id, install
//! spec, capabilities, rules for a session, catalog, credentials), its driver and its
//! converter. A driver turns the session machinery's calls (start, run a turn for a
//! message) into whatever its agent speaks (a scripted play for `mock`; stdio JSON,
//! JSON-RPC or HTTP for a real CLI) and reports back in universal events through a
//! [`TurnContext`] (the contract in [`crate::driver`]). Everything around it (the
//! install, queueing, persistence, replies, the event log, resume after a restart) is
//! the session manager's and shared by all drivers: adding an agent is its module and
//! one line in [`registry`] (and its name in [`AgentId`], the wire enum).
//!
//! [`convert`] holds what converters share (native lines to universal events);
//! [`install`] puts a CLI in the data directory; [`catalog`] answers for modes, models
//! and credentials from what each agent declares.

pub mod amp;
pub mod catalog;
pub mod child;
pub mod claude;
pub mod codex;
pub mod convert;
pub mod gemini;
pub mod install;
pub mod mcp;
pub mod mock;
pub mod opencode;
pub mod pi;

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use self::catalog::{Catalog, CredentialPlaces, CredentialSources};
pub use crate::driver::{AgentDriver, Interrupted, TurnContext, TurnInput, TurnOutcome};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::model::{AgentCapabilities, AgentInfo, CreateSessionRequest, PermissionMode};

/// The agents this node agent knows, as requests, records and URLs name them. What
/// each one is and does is its [`Agent`], found with [`AgentId::agent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentId {
    Claude,
    Codex,
    Opencode,
    Pi,
    Gemini,
    Amp,
    /// Built in and scripted: for demos and tests of everything around the agents.
    Mock,
}

/// Where a real agent's CLI comes from: an npm package, pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    pub name: &'static str,
    /// The executable's name in the package's `bin`.
    pub bin: &'static str,
    /// The version installed when a session or an install names none: pinned, so
    /// that a node agent runs what its tests ran.
    pub default_version: &'static str,
}

/// One agent the node agent can drive: everything the rest of the node agent asks of
/// it. Object safe: the [`registry`] holds every agent the same way.
pub trait Agent: Send + Sync {
    fn id(&self) -> AgentId;

    /// Its name in requests, records, URLs and the install directory.
    fn name(&self) -> &'static str;

    /// Where its CLI comes from; `None` for an agent built into the node agent, which
    /// is launched without an install.
    fn package(&self) -> Option<Package>;

    /// The version of a built-in agent (the node agent's own); `None` for one that
    /// is installed.
    fn builtin_version(&self) -> Option<&'static str> {
        None
    }

    /// What its driver can do.
    fn capabilities(&self) -> AgentCapabilities;

    /// Its own rules for what a session asks of it (modes, variants, settings in the
    /// env). The rules all agents share ([`mcp::validate`]) are checked before, by
    /// [`AgentId::validate`].
    fn validate(&self, request: &CreateSessionRequest) -> Result<()>;

    /// Starts (or, given the state saved by a previous driver, resumes) a
    /// conversation, with the CLI the session's runner installed.
    fn launch<'a>(&'a self, launch: Launch<'a>) -> BoxFuture<'a, Result<Box<dyn AgentDriver>>>;

    /// A fresh converter of its native output (for `node-agent convert` and its driver).
    fn converter(&self) -> Box<dyn convert::Converter>;

    /// What the node agent tells of its modes and models without running it.
    fn catalog(&self) -> Catalog;

    /// Where it finds credentials, first source first; `None` when it needs none.
    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources>;

    /// The files its CLI keeps a conversation in (the one named `agent_session_id`),
    /// which go with the session when it continues in another node agent (see
    /// `sessions::conversation`); none for an agent that keeps nothing on disk.
    fn conversation_files(&self, _places: &CredentialPlaces<'_>, _agent_session_id: &str) -> Vec<ConversationFiles> {
        Vec::new()
    }
}

/// Files of an agent's conversation: everything under `root` (a directory, or one
/// file), or only what has `naming` in its path below `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationFiles {
    pub root: PathBuf,
    pub naming: Option<String>,
}

impl ConversationFiles {
    pub fn all(root: PathBuf) -> ConversationFiles {
        ConversationFiles { root, naming: None }
    }

    pub fn naming(root: PathBuf, naming: &str) -> ConversationFiles {
        ConversationFiles { root, naming: Some(naming.to_string()) }
    }
}

/// Every agent, once, in the order `GET /v1/agents` lists them.
static REGISTRY: [&dyn Agent; 7] =
    [&claude::Claude, &codex::Codex, &opencode::Opencode, &pi::Pi, &gemini::Gemini, &amp::Amp, &mock::Mock];

/// The agents this node agent can drive.
pub fn registry() -> &'static [&'static dyn Agent] {
    &REGISTRY
}

impl AgentId {
    /// Every id, in the registry's order (a test keeps the two the same).
    pub const ALL: [AgentId; 7] =
        [AgentId::Claude, AgentId::Codex, AgentId::Opencode, AgentId::Pi, AgentId::Gemini, AgentId::Amp, AgentId::Mock];

    pub fn parse(id: &str) -> Option<AgentId> {
        registry().iter().find(|a| a.name() == id).map(|a| a.id())
    }

    /// The agent of this id.
    pub fn agent(self) -> &'static dyn Agent {
        *registry().iter().find(|a| a.id() == self).expect("every agent id is in the registry")
    }

    pub fn as_str(self) -> &'static str {
        self.agent().name()
    }

    /// The npm package of a real agent; `None` for the built-in mock.
    pub fn package(self) -> Option<Package> {
        self.agent().package()
    }

    /// What the driver can do.
    pub fn capabilities(self) -> AgentCapabilities {
        self.agent().capabilities()
    }

    /// What is installed, and what the driver can do.
    pub async fn info(self, host: &AgentHost) -> AgentInfo {
        let agent = self.agent();
        let (installed, version, path) = match agent.package() {
            None => (true, agent.builtin_version().map(str::to_string), None),
            Some(_) => match host.installer.installed(self).await {
                Some(installed) => (true, Some(installed.version), Some(installed.bin.display().to_string())),
                None => (false, None, None),
            },
        };
        AgentInfo {
            id: agent.name().into(),
            installed,
            version,
            path,
            capabilities: agent.capabilities(),
            credentials_available: catalog::credentials_available(self).await,
        }
    }

    /// Checks what a session asks of this agent before it is created: the rules all
    /// agents share, then the agent's own.
    pub fn validate(self, request: &CreateSessionRequest) -> Result<()> {
        mcp::validate(self, &request.mcp_servers)?;
        self.agent().validate(request)
    }

    /// A fresh converter of this agent's native output (for `node-agent convert`
    /// and the drivers themselves).
    pub fn converter(self) -> Box<dyn convert::Converter> {
        self.agent().converter()
    }
}

/// What a driver starts from: the session's settings, the CLI the runner installed,
/// and what the conversation's previous driver saved.
pub struct Launch<'a> {
    pub config: &'a DriverConfig,
    /// The agent's CLI, installed by the session's runner (once) before the launch;
    /// `None` for a built-in agent.
    pub installed: Option<install::Installed>,
    /// The state the previous driver saved ([`TurnContext::save_state`]); `None` for a
    /// new conversation.
    pub saved: Option<Value>,
}

impl Launch<'_> {
    /// The executable to run: the runner installs every agent that has a package
    /// before it launches it.
    pub fn bin(&self) -> Result<PathBuf> {
        self.installed.as_ref().map(|installed| installed.bin.clone()).ok_or_else(|| {
            Error::AgentNotInstalled(format!(
                "session {:?}: its agent was launched uninstalled",
                self.config.session_id
            ))
        })
    }

    /// The saved state as the driver wrote it; `Err` (naming `agent`) when it does not read.
    pub fn saved_state<T: serde::de::DeserializeOwned>(&self, agent: &str) -> Result<Option<T>> {
        self.saved
            .clone()
            .map(|saved| serde_json::from_value(saved))
            .transpose()
            .map_err(|e| Error::InvalidRequest(format!("{agent}'s saved state is unreadable: {e}")))
    }
}

/// Parses an agent id from a request body (`unsupported_agent`, 400).
pub fn agent_from_request(id: &str) -> Result<AgentId> {
    AgentId::parse(id).ok_or_else(|| Error::UnsupportedAgent(id.to_string()))
}

/// What the node agent shares among the sessions of all agents: where CLIs are
/// installed, and state an agent keeps per node agent (opencode's one server).
pub struct AgentHost {
    /// The node agent's data directory.
    pub data_dir: PathBuf,
    pub installer: install::Installer,
    pub opencode: opencode::Shared,
    /// What the sessions count into (events, turns, requests, installs).
    pub metrics: Metrics,
}

impl AgentHost {
    pub fn new(data_dir: PathBuf, agents_dir: PathBuf) -> Arc<AgentHost> {
        Self::metered(data_dir, agents_dir, Metrics::new())
    }

    /// [`AgentHost::new`], counting into `metrics`.
    pub fn metered(data_dir: PathBuf, agents_dir: PathBuf, metrics: Metrics) -> Arc<AgentHost> {
        Arc::new(AgentHost {
            data_dir,
            installer: install::Installer::metered(agents_dir, metrics.clone()),
            opencode: opencode::Shared::default(),
            metrics,
        })
    }
}

/// What a session asked of its agent.
#[derive(Clone)]
pub struct DriverConfig {
    pub session_id: String,
    /// The version to run (installed first when missing); the agent's pinned
    /// default when the session named none.
    pub agent_version: Option<String>,
    pub agent_mode: Option<String>,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    pub variant: Option<String>,
    pub working_dir: Option<String>,
    pub env: std::collections::BTreeMap<String, String>,
    /// MCP servers to give the agent (checked by [`mcp::validate`]); values may be secrets.
    pub mcp_servers: Vec<crate::model::McpServer>,
    /// The session's own directory in the data dir (for the agent's HOME, logs, ...).
    pub session_dir: PathBuf,
    pub host: Arc<AgentHost>,
}

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `env` may hold secrets: only its names are shown.
        f.debug_struct("DriverConfig")
            .field("session_id", &self.session_id)
            .field("agent_version", &self.agent_version)
            .field("agent_mode", &self.agent_mode)
            .field("permission_mode", &self.permission_mode)
            .field("model", &self.model)
            .field("working_dir", &self.working_dir)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("mcp_servers", &self.mcp_servers.iter().map(|s| &s.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_has_every_id_once_by_its_name() {
        let ids: Vec<AgentId> = registry().iter().map(|a| a.id()).collect();
        assert_eq!(ids, AgentId::ALL);
        for id in AgentId::ALL {
            assert_eq!(id.agent().id(), id);
            assert_eq!(AgentId::parse(id.as_str()), Some(id));
        }
        assert_eq!(AgentId::parse("clippy"), None);
        // A built-in agent has a version of its own; one that is installed has a package.
        for agent in registry() {
            assert_ne!(agent.package().is_some(), agent.builtin_version().is_some(), "{}", agent.name());
        }
    }
}
