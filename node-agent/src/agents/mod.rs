//! The agents the node agent can drive, and the driver interface each implements.
//!
//! A driver turns the session machinery's calls (start, run a turn for a message)
//! into whatever its agent speaks (a scripted play for `mock`; stdio JSON, JSON-RPC
//! or HTTP for a real CLI) and reports back in universal events through a
//! [`TurnContext`] (the contract in [`crate::driver`]). Everything around it (queueing, persistence, replies, the event
//! log, resume after a restart) is the session manager's and shared by all drivers.
//!
//! Each real agent has a module with its driver and its converter (native lines to
//! universal events, see [`convert`]); [`install`] puts its CLI in the data directory.

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

use serde_json::Value;

pub use crate::driver::{AgentDriver, Interrupted, TurnContext, TurnInput, TurnOutcome};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::model::{AgentCapabilities, AgentInfo, CreateSessionRequest, PermissionMode};

/// The agents this node agent knows.
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

impl AgentId {
    pub const ALL: [AgentId; 7] =
        [AgentId::Claude, AgentId::Codex, AgentId::Opencode, AgentId::Pi, AgentId::Gemini, AgentId::Amp, AgentId::Mock];

    pub fn parse(id: &str) -> Option<AgentId> {
        AgentId::ALL.into_iter().find(|a| a.as_str() == id)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AgentId::Claude => "claude",
            AgentId::Codex => "codex",
            AgentId::Opencode => "opencode",
            AgentId::Pi => "pi",
            AgentId::Gemini => "gemini",
            AgentId::Amp => "amp",
            AgentId::Mock => "mock",
        }
    }

    /// The npm package of a real agent; `None` for the built-in mock.
    pub fn package(self) -> Option<Package> {
        let (name, bin, default_version) = match self {
            AgentId::Claude => ("@anthropic-ai/claude-code", "claude", "2.1.330"),
            AgentId::Codex => ("@openai/codex", "codex", "0.169.0"),
            AgentId::Opencode => ("opencode-ai", "opencode", "1.18.33"),
            AgentId::Pi => ("@mariozechner/pi-coding-agent", "pi", "0.73.1"),
            AgentId::Gemini => ("@google/gemini-cli", "gemini", "0.61.0"),
            // The last pure-JS release that runs its agent loop locally (see the amp module).
            AgentId::Amp => ("@sourcegraph/amp", "amp", "0.0.1767830505-ga62310"),
            AgentId::Mock => return None,
        };
        Some(Package { name, bin, default_version })
    }

    /// The version of a built-in agent (the node agent's own).
    pub fn capabilities_version(self) -> Option<String> {
        match self {
            AgentId::Mock => mock::info().version,
            _ => None,
        }
    }

    /// What the driver can do.
    pub fn capabilities(self) -> AgentCapabilities {
        match self {
            AgentId::Claude => claude::capabilities(),
            AgentId::Codex => codex::capabilities(),
            AgentId::Opencode => opencode::capabilities(),
            AgentId::Pi => pi::capabilities(),
            AgentId::Gemini => gemini::capabilities(),
            AgentId::Amp => amp::capabilities(),
            AgentId::Mock => mock::info().capabilities,
        }
    }

    /// What is installed, and what the driver can do.
    pub async fn info(self, host: &AgentHost) -> AgentInfo {
        if self == AgentId::Mock {
            return mock::info();
        }
        let installed = host.installer.installed(self).await;
        AgentInfo {
            id: self.as_str().into(),
            installed: installed.is_some(),
            version: installed.as_ref().map(|i| i.version.clone()),
            path: installed.as_ref().map(|i| i.bin.display().to_string()),
            capabilities: self.capabilities(),
            credentials_available: catalog::credentials_available(self).await,
        }
    }

    /// Checks what a session asks of this agent before it is created.
    pub fn validate(self, request: &CreateSessionRequest) -> Result<()> {
        mcp::validate(self, &request.mcp_servers)?;
        match self {
            AgentId::Claude => claude::validate(request),
            AgentId::Codex => codex::validate(request),
            AgentId::Opencode => opencode::validate(request),
            AgentId::Pi => pi::validate(request),
            AgentId::Gemini => gemini::validate(request),
            AgentId::Amp => amp::validate(request),
            AgentId::Mock => mock::validate(request),
        }
    }

    /// Starts (or, given the state saved by a previous driver, resumes) a conversation.
    pub async fn start(self, config: &DriverConfig, saved: Option<Value>) -> Result<Box<dyn AgentDriver>> {
        match self {
            AgentId::Claude => claude::start(config, saved).await,
            AgentId::Codex => codex::start(config, saved).await,
            AgentId::Opencode => opencode::start(config, saved).await,
            AgentId::Pi => pi::start(config, saved).await,
            AgentId::Gemini => gemini::start(config, saved).await,
            AgentId::Amp => amp::start(config, saved).await,
            AgentId::Mock => Ok(Box::new(mock::MockDriver::start(config, saved)?)),
        }
    }

    /// A fresh converter of this agent's native output (for `node-agent convert`
    /// and the drivers themselves).
    pub fn converter(self) -> Box<dyn convert::Converter> {
        match self {
            AgentId::Claude => Box::new(claude::Converter::default()),
            AgentId::Codex => Box::new(codex::Converter::default()),
            AgentId::Opencode => Box::new(opencode::Converter::default()),
            AgentId::Pi => Box::new(pi::Converter::default()),
            AgentId::Gemini => Box::new(gemini::Converter::default()),
            AgentId::Amp => Box::new(amp::Converter::default()),
            AgentId::Mock => Box::new(convert::Unconverted),
        }
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
