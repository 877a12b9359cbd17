//! The agents the node agent can drive, and the driver interface each implements.
//!
//! A driver turns the session machinery's calls (start, run a turn for a message)
//! into whatever its agent speaks (a scripted play for `mock`; later, stdio JSON or
//! JSON-RPC to a real CLI) and reports back in universal events through a
//! [`TurnContext`]. Everything around it (queueing, persistence, replies, the event
//! log, resume after a restart) is the session manager's and shared by all drivers.

pub mod mock;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::{AgentInfo, CreateSessionRequest, PermissionMode};
pub use crate::sessions::{Interrupted, TurnContext};

/// The agents this node agent knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentId {
    /// Built in and scripted: for demos and tests of everything around the agents.
    Mock,
}

impl AgentId {
    pub const ALL: [AgentId; 1] = [AgentId::Mock];

    pub fn parse(id: &str) -> Option<AgentId> {
        AgentId::ALL.into_iter().find(|a| a.as_str() == id)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AgentId::Mock => "mock",
        }
    }

    /// What is installed, and what the driver can do.
    pub fn info(self) -> AgentInfo {
        match self {
            AgentId::Mock => mock::info(),
        }
    }

    /// Checks what a session asks of this agent before it is created.
    pub fn validate(self, request: &CreateSessionRequest) -> Result<()> {
        match self {
            AgentId::Mock => mock::validate(request),
        }
    }

    /// Starts (or, given the state saved by a previous driver, resumes) a conversation.
    pub async fn start(self, config: &DriverConfig, saved: Option<Value>) -> Result<Box<dyn AgentDriver>> {
        match self {
            AgentId::Mock => Ok(Box::new(mock::MockDriver::start(config, saved)?)),
        }
    }
}

/// Parses an agent id from a request body (`unsupported_agent`, 400).
pub fn agent_from_request(id: &str) -> Result<AgentId> {
    AgentId::parse(id).ok_or_else(|| Error::UnsupportedAgent(id.to_string()))
}

/// What a session asked of its agent.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub session_id: String,
    pub agent_mode: Option<String>,
    pub permission_mode: PermissionMode,
    pub model: Option<String>,
    pub variant: Option<String>,
    pub working_dir: Option<String>,
    pub env: std::collections::BTreeMap<String, String>,
}

/// One message to run as a turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TurnInput {
    /// Turns of this session, from 1.
    pub number: u64,
    pub message: String,
}

/// How a turn ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    pub failed: bool,
    pub error: Option<String>,
}

impl TurnOutcome {
    pub fn completed() -> Self {
        TurnOutcome { failed: false, error: None }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        TurnOutcome { failed: true, error: Some(error.into()) }
    }
}

/// One running conversation with an agent. Object safe, so that the session manager
/// holds any driver the same way.
pub trait AgentDriver: Send {
    /// The agent's own id of the conversation.
    fn agent_session_id(&self) -> Option<String>;

    /// Runs one turn: everything the agent does for `turn.message`, reported through
    /// `ctx`, until it is done. `resume` means this turn was under way when the node
    /// agent stopped: continue it from the state the driver saved with
    /// [`TurnContext::save_state`] (a permission request or question still pending is
    /// answered through the context as before). `turn.started`/`turn.ended` and the
    /// user's message item are the session manager's; the driver reports the rest.
    fn run_turn<'a>(&'a mut self, ctx: &'a TurnContext, turn: &'a TurnInput, resume: bool) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>>;

    /// The session is over (ended, or the node agent stops): release what the driver holds.
    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
