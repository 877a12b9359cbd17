//! The session's data and its state machine: what `session.json` holds (the session
//! as clients see it, plus what resuming needs), and every change of state as a
//! method that makes it on the record and pushes the events announcing it into a
//! [`Batch`]. Pure: no locks, no files, no tasks; [`super::session::Session`] runs
//! each change under the log's append step so that events read in the order the
//! changes happened.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::log::{Batch, EventDraft};
use crate::agents::{AgentHost, AgentId, DriverConfig};
use crate::driver::{TurnInput, TurnOutcome};
use crate::error::{Error, Result};
use crate::model::{CreateSessionRequest, McpServer, PermissionMode, SessionInfo, SessionState};
use crate::universal::{
    EndReason, EventData, EventSource, Item, ItemKind, PermissionReply, PermissionRequest, QuestionOutcome,
    QuestionRequest, Role, TurnStatus, Usage,
};
use crate::workspace::WorkspaceRecord;

/// Resolved requests remembered per session, so that a repeated reply is answered the
/// same way: enough for any conversation a person follows; the oldest are forgotten
/// past it (a reply to one of those is then `..._not_found`).
const MAX_RESOLUTIONS: usize = 1024;

/// What `session.json` holds: the session as clients see it, plus what resuming needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub(super) id: String,
    /// What people read in logs for this session (a controller's `Session/ns/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) label: Option<String>,
    pub(super) agent: String,
    pub(super) agent_version: Option<String>,
    agent_mode: Option<String>,
    pub(super) permission_mode: PermissionMode,
    model: Option<String>,
    variant: Option<String>,
    pub(super) working_dir: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Kept, like `env`, in this file of mode 0600 so that a restarted node agent gives
    /// the agent the same servers; never in `SessionInfo`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mcp_servers: Vec<McpServer>,
    /// Its workspace (a git one's credentials are never saved: see `WorkspaceRecord`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) workspace: Option<WorkspaceRecord>,
    pub(super) state: SessionState,
    pub(super) agent_session_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub(super) created_at: OffsetDateTime,
    #[serde(default, with = "time::serde::rfc3339::option")]
    ended_at: Option<OffsetDateTime>,
    messages_received: u64,
    /// How many of a controller's declared messages (each sent with its index in the
    /// resource's `spec.messages`) were accepted, among `messages_received`. `None` in
    /// a record written before messages were told apart, when every message was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    declared_received: Option<u64>,
    turns_started: u64,
    turns_completed: u64,
    /// Turns that ended failed, and the error of the newest turn while it is one that
    /// failed (a turn that succeeds clears it).
    #[serde(default)]
    turns_failed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    turn_error: Option<String>,
    /// The tokens of the turns so far, summed (a record from before usage has none).
    #[serde(default)]
    usage: Usage,
    /// The newest event sequence when this was written: sequences continue past it.
    pub(super) last_sequence: u64,
    #[serde(default)]
    pending_permissions: Vec<PermissionRequest>,
    #[serde(default)]
    pending_questions: Vec<QuestionRequest>,
    /// The driver's own id of each pending request, by the public id clients see and
    /// reply to (see [`public_request_id`]). Kept so that a restarted node agent offers
    /// the same public id while the driver still waits on its own. A request absent
    /// here (a record from before public ids) is its own native id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    native_ids: BTreeMap<String, String>,
    #[serde(default)]
    error: Option<String>,
    /// Accepted messages not yet begun, oldest first.
    #[serde(default)]
    queue: VecDeque<String>,
    /// The turn under way, if any: it resumes after a restart.
    #[serde(default)]
    pub(super) current_turn: Option<TurnInput>,
    #[serde(default)]
    resolutions: VecDeque<Resolution>,
    /// Whatever the driver needs to resume its conversation.
    #[serde(default)]
    pub(super) driver_state: Option<Value>,
    /// Output of processes that fed this session, for the next turn (see [`super::feed`]).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(super) process_outputs: VecDeque<String>,
    /// A restart of the live session's agent was asked for (see [`Self::relaunch`]): its
    /// runner stops the agent before the next turn and starts it again, resuming.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    relaunch: bool,
    /// The turn of this number is to be cut short (see [`Self::interrupt`]). Not
    /// saved: a turn that a stop of the node agent cut short resumes whole.
    #[serde(skip)]
    interrupt: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Resolution {
    #[serde(rename_all = "camelCase")]
    Permission {
        id: String,
        reply: Option<PermissionReply>,
        /// The driver's id of the request; `id` when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        native: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Question {
        id: String,
        outcome: QuestionOutcome,
        answers: Option<Vec<Vec<String>>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        native: Option<String>,
    },
}

impl Resolution {
    /// The driver's id of the resolved request.
    fn native(&self) -> &str {
        match self {
            Resolution::Permission { id, native, .. } | Resolution::Question { id, native, .. } => {
                native.as_deref().unwrap_or(id)
            }
        }
    }
}

/// The kind of request a driver opens, and the prefix of its public id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RequestKind {
    Permission,
    Question,
}

impl RequestKind {
    fn prefix(self) -> &'static str {
        match self {
            RequestKind::Permission => "perm",
            RequestKind::Question => "q",
        }
    }
}

/// The id clients see for a request and reply to: 128 random bits, so that no reply can
/// be written ahead for a request that does not exist yet (agents' own ids, such as the
/// mock's `turn-N-permission` or a JSON-RPC counter, can be guessed). `kind` keeps it
/// readable: `perm-...`, `q-...`.
pub(super) fn public_request_id(kind: RequestKind) -> String {
    format!("{}-{}", kind.prefix(), crate::random::hex(16))
}

/// Session ids follow the rules of process ids: safe as a path segment and a file name.
pub fn validate_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "session id {id:?} is invalid: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )))
    }
}

impl SessionRecord {
    /// A new session's record, `state` `Starting` (or `Preparing` when its workspace
    /// is cloned first). The agent's version is pinned now: the one asked for, the
    /// package's default, or a built-in agent's own.
    pub(super) fn new(
        id: &str,
        agent: AgentId,
        request: CreateSessionRequest,
        workspace: Option<WorkspaceRecord>,
    ) -> SessionRecord {
        let state = if workspace.as_ref().is_some_and(|w| w.needs_clone()) {
            SessionState::Preparing
        } else {
            SessionState::Starting
        };
        let agent = agent.agent();
        SessionRecord {
            id: id.to_string(),
            label: request.label,
            agent: agent.name().to_string(),
            agent_version: match agent.package() {
                Some(package) => Some(request.agent_version.unwrap_or_else(|| package.default_version.to_string())),
                None => agent.builtin_version().map(str::to_string),
            },
            agent_mode: request.agent_mode,
            permission_mode: request.permission_mode.unwrap_or_default(),
            model: request.model,
            variant: request.variant,
            working_dir: request.working_dir,
            env: request.env,
            mcp_servers: request.mcp_servers,
            workspace,
            state,
            agent_session_id: None,
            created_at: OffsetDateTime::now_utc(),
            ended_at: None,
            messages_received: 0,
            declared_received: Some(0),
            turns_started: 0,
            turns_completed: 0,
            turns_failed: 0,
            turn_error: None,
            usage: Usage::default(),
            last_sequence: 0,
            pending_permissions: Vec::new(),
            pending_questions: Vec::new(),
            native_ids: BTreeMap::new(),
            error: None,
            queue: VecDeque::new(),
            current_turn: None,
            resolutions: VecDeque::new(),
            driver_state: None,
            process_outputs: VecDeque::new(),
            relaunch: false,
            interrupt: None,
        }
    }

    /// What of this record goes with the conversation to another node agent (see
    /// [`super::conversation`]): its history, without its settings. The environment,
    /// the MCP servers (whose values may be secrets), the workspace and the label are
    /// the create request's there.
    pub(super) fn portable(&self) -> SessionRecord {
        let mut history = self.clone();
        history.env.clear();
        history.mcp_servers.clear();
        history.workspace = None;
        history.label = None;
        history.relaunch = false;
        history
    }

    /// A variable as the session's agent sees it: its env's, else the node agent's.
    pub(super) fn agent_env_var(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned().or_else(|| std::env::var(name).ok())
    }

    /// The home of the session's agent: its env's `HOME`, else the node agent's.
    pub(super) fn agent_home(&self) -> Option<PathBuf> {
        crate::sessions::conversation::home_of(&self.env)
    }

    /// Takes up the history of `earlier`, this conversation as another node agent
    /// left it: what was said and counted (so messages are never delivered twice),
    /// what the driver saved to resume, the requests still open, and the turn under
    /// way. Sequences go on after the newest it or the caller (`floor`) saw. A record
    /// of another agent gives its counts, not its conversation.
    pub(super) fn continue_from(&mut self, earlier: SessionRecord, floor: u64) {
        self.created_at = earlier.created_at;
        self.messages_received = earlier.messages_received;
        self.declared_received = earlier.declared_received;
        self.turns_started = earlier.turns_started;
        self.turns_completed = earlier.turns_completed;
        self.turns_failed = earlier.turns_failed;
        self.turn_error = earlier.turn_error;
        self.usage = earlier.usage;
        self.last_sequence = earlier.last_sequence.max(floor);
        self.queue = earlier.queue;
        self.process_outputs = earlier.process_outputs;
        if earlier.agent != self.agent {
            return;
        }
        self.agent_session_id = earlier.agent_session_id;
        self.driver_state = earlier.driver_state;
        self.current_turn = earlier.current_turn;
        self.pending_permissions = earlier.pending_permissions;
        self.pending_questions = earlier.pending_questions;
        self.native_ids = earlier.native_ids;
        self.resolutions = earlier.resolutions;
    }

    /// The session as clients see it; `last_sequence` is the log's newest.
    pub(super) fn info(&self, last_sequence: u64) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            label: self.label.clone(),
            agent: self.agent.clone(),
            agent_version: self.agent_version.clone(),
            agent_mode: self.agent_mode.clone(),
            permission_mode: self.permission_mode,
            model: self.model.clone(),
            variant: self.variant.clone(),
            working_dir: self.working_dir.clone(),
            state: self.state,
            agent_session_id: self.agent_session_id.clone(),
            created_at: self.created_at,
            ended_at: self.ended_at,
            messages_received: self.messages_received,
            declared_messages_received: self.declared_received(),
            turns_completed: self.turns_completed,
            turns_failed: self.turns_failed,
            turn_error: self.turn_error.clone(),
            usage: self.usage,
            last_sequence,
            pending_permissions: self.pending_permissions.clone(),
            pending_questions: self.pending_questions.clone(),
            error: self.error.clone(),
            workspace: self.workspace.as_ref().map(WorkspaceRecord::info),
        }
    }

    pub(super) fn driver_config(&self, session_dir: PathBuf, host: Arc<AgentHost>) -> DriverConfig {
        DriverConfig {
            session_id: self.id.clone(),
            agent_version: self.agent_version.clone(),
            session_dir,
            host,
            agent_mode: self.agent_mode.clone(),
            permission_mode: self.permission_mode,
            model: self.model.clone(),
            variant: self.variant.clone(),
            working_dir: self.working_dir.clone(),
            env: self.env.clone(),
            mcp_servers: self.mcp_servers.clone(),
        }
    }

    pub(super) fn draft(&self, source: EventSource, data: EventData) -> EventDraft {
        EventDraft { source, agent_session_id: self.agent_session_id.clone(), data, raw: None }
    }

    /// Whether the session is still starting (its driver is not up yet).
    fn starting(&self) -> bool {
        matches!(self.state, SessionState::Starting | SessionState::Installing | SessionState::Preparing)
    }

    /// The state that follows from what is pending (a final or starting state stays).
    pub(super) fn settle(&mut self) {
        if self.state.is_final() || self.starting() {
            return;
        }
        self.state = if !self.pending_permissions.is_empty() || !self.pending_questions.is_empty() {
            SessionState::AwaitingInput
        } else if self.current_turn.is_some() || !self.queue.is_empty() {
            SessionState::Running
        } else {
            SessionState::Idle
        };
    }

    fn resolve(&mut self, resolution: Resolution) {
        if self.resolutions.len() == MAX_RESOLUTIONS {
            self.resolutions.pop_front();
        }
        self.resolutions.push_back(resolution);
    }

    /// The driver's id of a pending request, by its public id.
    fn native_id<'a>(&'a self, public: &'a str) -> &'a str {
        self.native_ids.get(public).map_or(public, String::as_str)
    }

    /// Records that a pending request is resolved: by its public id, with the driver's id.
    fn resolve_permission(&mut self, id: String, reply: Option<PermissionReply>) {
        let native = self.native_ids.remove(&id);
        self.resolve(Resolution::Permission { id, reply, native });
    }

    fn resolve_question(&mut self, id: String, outcome: QuestionOutcome, answers: Option<Vec<Vec<String>>>) {
        let native = self.native_ids.remove(&id);
        self.resolve(Resolution::Question { id, outcome, answers, native });
    }

    /// How the request clients know as `id` was resolved, if it was.
    fn permission_resolution(&self, id: &str) -> Option<Option<PermissionReply>> {
        self.resolutions.iter().rev().find_map(|r| match r {
            Resolution::Permission { id: rid, reply, .. } if rid == id => Some(*reply),
            _ => None,
        })
    }

    fn question_resolution(&self, id: &str) -> Option<(QuestionOutcome, Option<Vec<Vec<String>>>)> {
        self.resolutions.iter().rev().find_map(|r| match r {
            Resolution::Question { id: rid, outcome, answers, .. } if rid == id => Some((*outcome, answers.clone())),
            _ => None,
        })
    }

    /// The driver's view: how its request `native` was resolved. A request of that id
    /// still pending is not (an agent may use an id again, such as a JSON-RPC counter
    /// after its restart: the newest request of the id is the one meant).
    pub(super) fn permission_resolution_of_native(&self, native: &str) -> Option<Option<PermissionReply>> {
        if self.pending_permissions.iter().any(|p| self.native_id(&p.id) == native) {
            return None;
        }
        self.resolutions.iter().rev().find_map(|r| match r {
            Resolution::Permission { reply, .. } if r.native() == native => Some(*reply),
            _ => None,
        })
    }

    pub(super) fn question_resolution_of_native(
        &self,
        native: &str,
    ) -> Option<(QuestionOutcome, Option<Vec<Vec<String>>>)> {
        if self.pending_questions.iter().any(|q| self.native_id(&q.id) == native) {
            return None;
        }
        self.resolutions.iter().rev().find_map(|r| match r {
            Resolution::Question { outcome, answers, .. } if r.native() == native => Some((*outcome, answers.clone())),
            _ => None,
        })
    }

    /// Cancels every pending request (nobody can answer them any more: the session
    /// ended, or the turn that asked is over), announcing each as resolved without
    /// an answer.
    fn cancel_pending(&mut self, batch: &mut Batch) {
        for request in std::mem::take(&mut self.pending_permissions) {
            self.resolve_permission(request.id.clone(), None);
            batch.push(self.draft(EventSource::Daemon, EventData::PermissionResolved { id: request.id, reply: None }));
        }
        for request in std::mem::take(&mut self.pending_questions) {
            let outcome = QuestionOutcome::Cancelled;
            self.resolve_question(request.id.clone(), outcome, None);
            batch.push(
                self.draft(EventSource::Daemon, EventData::QuestionResolved { id: request.id, outcome, answers: None }),
            );
        }
    }

    /// Declared messages accepted so far (see `declared_received`).
    fn declared_received(&self) -> u64 {
        self.declared_received.unwrap_or(self.messages_received)
    }

    /// Queues a message; it runs as a turn after those before it. A declared message
    /// (`declared`: its index in the resource's `spec.messages`) is taken once and in
    /// order, by that index: one already taken changes nothing (false), one past the
    /// next is refused. So a message given through the API in between (a person in the
    /// inspector) never makes a declared one count as sent.
    pub(super) fn queue_message(&mut self, message: String, declared: Option<u64>, max_queued: usize) -> Result<bool> {
        let next = self.declared_received();
        match declared {
            Some(index) if index < next => return Ok(false),
            Some(index) if index > next => {
                return Err(Error::Conflict(format!(
                    "declared message {index} comes before message {next}, which session {:?} has not received: \
                     declared messages are taken in order",
                    self.id
                )));
            }
            _ => {}
        }
        if self.state.is_final() {
            return Err(Error::Conflict(format!("session {:?} has ended: it takes no more messages", self.id)));
        }
        if self.queue.len() >= max_queued {
            return Err(Error::LimitExceeded(format!(
                "session {:?} already has {max_queued} messages waiting for their turn",
                self.id
            )));
        }
        self.queue.push_back(message);
        self.messages_received += 1;
        if declared.is_some() {
            self.declared_received = Some(next + 1);
        } else {
            self.declared_received = Some(next);
        }
        self.settle();
        Ok(true)
    }

    /// Answers a pending permission request; false when it was answered so already.
    pub(super) fn reply_permission(&mut self, id: &str, reply: PermissionReply, batch: &mut Batch) -> Result<bool> {
        if let Some(earlier) = self.permission_resolution(id) {
            return match earlier {
                Some(earlier) if earlier == reply => Ok(false),
                Some(earlier) => Err(Error::Conflict(format!(
                    "permission request {id:?} was already answered {}",
                    serde_json::to_string(&earlier).expect("replies serialize")
                ))),
                None => Err(Error::Conflict(format!("permission request {id:?} was cancelled: the session ended"))),
            };
        }
        let Some(at) = self.pending_permissions.iter().position(|p| p.id == id) else {
            return Err(Error::PermissionNotFound { session: self.id.clone(), id: id.to_string() });
        };
        if self.state.is_final() {
            return Err(Error::Conflict(format!("session {:?} has ended", self.id)));
        }
        if !self.pending_permissions[at].options.contains(&reply) {
            return Err(Error::InvalidRequest(format!("permission request {id:?} does not offer that reply")));
        }
        self.pending_permissions.remove(at);
        self.resolve_permission(id.to_string(), Some(reply));
        self.settle();
        batch.push(
            self.draft(EventSource::Daemon, EventData::PermissionResolved { id: id.to_string(), reply: Some(reply) }),
        );
        Ok(true)
    }

    /// Answers a pending question (`Some(answers)`, one list per question) or rejects
    /// it (`None`); false when it was resolved so already.
    pub(super) fn reply_question(
        &mut self,
        id: &str,
        answers: Option<Vec<Vec<String>>>,
        batch: &mut Batch,
    ) -> Result<bool> {
        let outcome = if answers.is_some() { QuestionOutcome::Answered } else { QuestionOutcome::Rejected };
        if let Some((earlier, earlier_answers)) = self.question_resolution(id) {
            return if earlier == outcome && earlier_answers == answers {
                Ok(false)
            } else if earlier == QuestionOutcome::Cancelled {
                Err(Error::Conflict(format!("question {id:?} was cancelled: the session ended")))
            } else {
                Err(Error::Conflict(format!("question {id:?} was already resolved differently")))
            };
        }
        let Some(at) = self.pending_questions.iter().position(|q| q.id == id) else {
            return Err(Error::QuestionNotFound { session: self.id.clone(), id: id.to_string() });
        };
        if self.state.is_final() {
            return Err(Error::Conflict(format!("session {:?} has ended", self.id)));
        }
        if let Some(answers) = &answers {
            let asked = self.pending_questions[at].questions.len();
            if answers.len() != asked {
                return Err(Error::InvalidRequest(format!(
                    "question {id:?} asks {asked} question(s): give one list of answers for each, {} given",
                    answers.len()
                )));
            }
        }
        self.pending_questions.remove(at);
        self.resolve_question(id.to_string(), outcome, answers.clone());
        self.settle();
        batch.push(
            self.draft(EventSource::Daemon, EventData::QuestionResolved { id: id.to_string(), outcome, answers }),
        );
        Ok(true)
    }

    /// Ends the session: a turn under way ends as interrupted, pending requests are
    /// cancelled, `session.ended` is the last event. False when it had ended already.
    pub(super) fn end(&mut self, batch: &mut Batch) -> bool {
        if self.state.is_final() {
            return false;
        }
        // Nothing is left to clone for (a clone under way has its own copy).
        if let Some(workspace) = self.workspace.as_mut() {
            workspace.forget_credentials();
        }
        if let Some(turn) = self.current_turn.take() {
            batch.push(self.draft(
                EventSource::Daemon,
                EventData::TurnEnded { turn: turn.number, status: TurnStatus::Interrupted, error: None, usage: None },
            ));
        }
        self.cancel_pending(batch);
        self.queue.clear();
        self.state = SessionState::Ended;
        self.ended_at = Some(OffsetDateTime::now_utc());
        batch.push(
            self.draft(EventSource::Daemon, EventData::SessionEnded { reason: EndReason::Requested, error: None }),
        );
        batch.close();
        true
    }

    /// The agent could not start or went away; `code` is the error's problem code.
    /// False when the session had ended already.
    pub(super) fn fail(&mut self, error: &str, code: Option<String>, batch: &mut Batch) -> bool {
        if self.state.is_final() {
            return false;
        }
        self.state = SessionState::Failed;
        self.error = Some(error.to_string());
        self.ended_at = Some(OffsetDateTime::now_utc());
        // The queue stays: those messages were accepted (`messagesReceived` counts
        // them, so nobody sends them again) and run if the session is restarted.
        batch.push(self.draft(EventSource::Daemon, EventData::Error { message: error.to_string(), code }));
        batch.push(self.draft(
            EventSource::Daemon,
            EventData::SessionEnded { reason: EndReason::Failed, error: Some(error.to_string()) },
        ));
        batch.close();
        true
    }

    /// A failed session starts again: `Starting`, with what the conversation was (the
    /// agent's id, the driver's saved state, the queue, `messagesReceived`, the turn
    /// under way). Any other state is a `conflict`. True when the record holds a
    /// conversation to resume.
    pub(super) fn reopen(&mut self) -> Result<bool> {
        if self.state != SessionState::Failed {
            return Err(Error::Conflict(format!(
                "session {:?} is {:?}: only a failed session is restarted",
                self.id, self.state
            )));
        }
        self.state = SessionState::Starting;
        self.error = None;
        self.ended_at = None;
        Ok(self.agent_session_id.is_some() || self.driver_state.is_some())
    }

    /// Asks for a live session's agent to be stopped and started again, resuming its
    /// conversation, with `env` when given (an env file that changed): at once when no
    /// turn is under way, else after it, and before any later message's turn. A
    /// failed session is reopened instead ([`Self::reopen`]); an ended one is a conflict.
    pub(super) fn relaunch(&mut self, env: Option<BTreeMap<String, String>>) -> Result<()> {
        if self.state.is_final() {
            return Err(Error::Conflict(format!(
                "session {:?} is {:?}: only a live session's agent is restarted",
                self.id, self.state
            )));
        }
        // Still starting with the environment it has: it starts as asked anyway.
        if env.is_none() && self.starting() {
            return Ok(());
        }
        if let Some(env) = env {
            self.env = env;
        }
        self.relaunch = true;
        Ok(())
    }

    /// Asks for the turn under way to be cut short: its runner stops the agent, ends
    /// the turn `interrupted` (its pending requests cancelled) and starts the agent
    /// again, resuming the conversation; later messages run after it as usual. The
    /// turn's number, or `None` when no turn is under way (nothing to do). An ended
    /// session is a conflict.
    pub(super) fn interrupt(&mut self) -> Result<Option<u64>> {
        if self.state.is_final() {
            return Err(Error::Conflict(format!(
                "session {:?} is {:?}: it has no turn to interrupt",
                self.id, self.state
            )));
        }
        let turn = self.current_turn.as_ref().map(|t| t.number);
        if turn.is_some() {
            self.interrupt = turn;
        }
        Ok(turn)
    }

    /// Whether the turn `number` is to be cut short.
    pub(super) fn interrupt_asked(&self, number: u64) -> bool {
        self.interrupt == Some(number) && !self.state.is_final()
    }

    /// Whether the runner is to restart the agent before the next turn.
    pub(super) fn relaunch_asked(&self) -> bool {
        self.relaunch && !self.state.is_final()
    }

    /// The new environment for a failed session about to reopen.
    pub(super) fn set_env(&mut self, env: BTreeMap<String, String>) {
        self.env = env;
    }

    /// Moves a session that has not started yet between `Preparing`, `Installing` and
    /// `Starting`; false when it is past starting (resumed, or ended) or there already.
    pub(super) fn set_state_while_starting(&mut self, state: SessionState) -> bool {
        if self.starting() && self.state != state {
            self.state = state;
            true
        } else {
            false
        }
    }

    /// The driver is up; false when the session ended meanwhile.
    pub(super) fn started(&mut self, agent_session_id: Option<String>, resumed: bool, batch: &mut Batch) -> bool {
        if self.state.is_final() {
            return false;
        }
        self.agent_session_id = agent_session_id.clone();
        self.relaunch = false;
        if self.starting() {
            self.state = SessionState::Idle;
        }
        self.settle();
        batch.push(self.draft(
            EventSource::Daemon,
            EventData::SessionStarted { agent: self.agent.clone(), agent_session_id, resumed },
        ));
        true
    }

    /// Whether a turn can begin now: the session is live and a message waits.
    pub(super) fn has_next_turn(&self) -> bool {
        !self.state.is_final() && !self.queue.is_empty()
    }

    /// Begins the oldest queued message as the next turn: `turn.started` and the
    /// user's message item. `None` when the session ended or nothing is queued.
    pub(super) fn begin_turn(&mut self, batch: &mut Batch) -> Option<TurnInput> {
        if self.state.is_final() {
            return None;
        }
        let message = self.queue.pop_front()?;
        self.turns_started += 1;
        // The agent gets what processes printed meanwhile; the item shows what was said.
        let delivered = self.take_process_outputs(&message);
        let turn = TurnInput { number: self.turns_started, message: delivered };
        self.current_turn = Some(turn.clone());
        self.settle();
        batch.push(self.draft(EventSource::Daemon, EventData::TurnStarted { turn: turn.number }));
        let item = Item {
            id: format!("turn-{}-message", turn.number),
            kind: ItemKind::Message,
            role: Some(Role::User),
            text: Some(message),
            ..Default::default()
        };
        batch.push(self.draft(EventSource::Daemon, EventData::ItemCompleted { item }));
        Some(turn)
    }

    /// Records the end of a turn; false when the session ended meanwhile.
    pub(super) fn finish_turn(&mut self, turn: &TurnInput, outcome: TurnOutcome, batch: &mut Batch) -> bool {
        if self.state.is_final() {
            return false;
        }
        self.current_turn = None;
        self.interrupt = None;
        self.turns_completed += 1;
        if outcome.interrupted {
            // Cut short on request: neither a success nor a failure of the agent.
        } else if outcome.failed {
            self.turns_failed += 1;
            self.turn_error = Some(outcome.error.clone().unwrap_or_else(|| "the turn failed".to_string()));
        } else {
            self.turn_error = None;
        }
        // A request the turn left unanswered (its agent went away) can no longer be
        // answered: cancelled, so the session does not wait for it.
        self.cancel_pending(batch);
        self.settle();
        if let Some(usage) = &outcome.usage {
            self.usage.add(usage);
        }
        let status = if outcome.interrupted {
            TurnStatus::Interrupted
        } else if outcome.failed {
            TurnStatus::Failed
        } else {
            TurnStatus::Completed
        };
        batch.push(self.draft(
            EventSource::Daemon,
            EventData::TurnEnded { turn: turn.number, status, error: outcome.error, usage: outcome.usage },
        ));
        true
    }

    /// Opens a driver's request under the public id `public` and announces it (with
    /// the native line that asked, if any); nothing is opened on an ended session, nor
    /// again while a request of the driver's id `native` is pending. False when the
    /// session has ended; `opened` is told whether a request was opened.
    pub(super) fn open_request(
        &mut self,
        request: OpenedRequest,
        public: &str,
        raw: Option<&str>,
        batch: &mut Batch,
    ) -> RequestOpened {
        if self.state.is_final() {
            return RequestOpened::Ended;
        }
        let native = request.native_id().to_string();
        let pending = match request {
            OpenedRequest::Permission(_) => self.pending_permissions.iter().any(|p| self.native_id(&p.id) == native),
            OpenedRequest::Question(_) => self.pending_questions.iter().any(|q| self.native_id(&q.id) == native),
        };
        if pending {
            return RequestOpened::AlreadyPending;
        }
        self.native_ids.insert(public.to_string(), native);
        let event = match request {
            OpenedRequest::Permission(request) => {
                let request = PermissionRequest { id: public.to_string(), ..request };
                self.pending_permissions.push(request.clone());
                EventData::PermissionRequested(request)
            }
            OpenedRequest::Question(request) => {
                let request = QuestionRequest { id: public.to_string(), ..request };
                self.pending_questions.push(request.clone());
                EventData::QuestionRequested(request)
            }
        };
        self.settle();
        batch.push(EventDraft { raw: raw.map(str::to_string), ..self.draft(EventSource::Agent, event) });
        RequestOpened::Opened
    }
}

/// A request a driver opens, under its own id.
pub(super) enum OpenedRequest {
    Permission(PermissionRequest),
    Question(QuestionRequest),
}

impl OpenedRequest {
    pub(super) fn kind(&self) -> RequestKind {
        match self {
            OpenedRequest::Permission(_) => RequestKind::Permission,
            OpenedRequest::Question(_) => RequestKind::Question,
        }
    }

    fn native_id(&self) -> &str {
        match self {
            OpenedRequest::Permission(request) => &request.id,
            OpenedRequest::Question(request) => &request.id,
        }
    }
}

/// What opening a request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RequestOpened {
    Opened,
    /// A request of the same driver id is pending: it stands.
    AlreadyPending,
    /// The session has ended: nothing is opened.
    Ended,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universal::{EventType, Question};

    /// A mock session whose driver is up.
    fn started() -> SessionRecord {
        let request = CreateSessionRequest { agent: "mock".into(), ..Default::default() };
        let mut record = SessionRecord::new("s1", AgentId::Mock, request, None);
        assert_eq!(record.state, SessionState::Starting);
        assert!(record.started(Some("mock-1".into()), false, &mut Batch::default()));
        assert_eq!(record.state, SessionState::Idle);
        record
    }

    fn kinds(batch: &Batch) -> Vec<EventType> {
        batch.drafts().iter().map(|d| d.data.kind()).collect()
    }

    fn permission(id: &str) -> OpenedRequest {
        OpenedRequest::Permission(PermissionRequest {
            id: id.into(),
            tool: "bash".into(),
            input: serde_json::json!({"command": "true"}),
            options: vec![PermissionReply::Once, PermissionReply::Reject],
            item_id: None,
        })
    }

    fn question(id: &str) -> OpenedRequest {
        let question =
            Question { question: "go on?".into(), header: None, options: vec!["yes".into()], multi_select: false };
        OpenedRequest::Question(QuestionRequest { id: id.into(), questions: vec![question] })
    }

    /// A turn under way that waits for a permission (`perm-1`, the driver's `p`) and
    /// a question (`q-1`, the driver's `q`).
    fn waiting() -> (SessionRecord, TurnInput) {
        let mut record = started();
        record.queue_message("hello".into(), None, 10).unwrap();
        assert_eq!(record.state, SessionState::Running);
        let turn = record.begin_turn(&mut Batch::default()).unwrap();
        let mut batch = Batch::default();
        assert_eq!(record.open_request(permission("p"), "perm-1", Some("native"), &mut batch), RequestOpened::Opened);
        assert_eq!(record.open_request(question("q"), "q-1", None, &mut batch), RequestOpened::Opened);
        assert_eq!(kinds(&batch), [EventType::PermissionRequested, EventType::QuestionRequested]);
        assert_eq!(batch.drafts()[0].raw.as_deref(), Some("native"));
        assert_eq!(record.state, SessionState::AwaitingInput);
        (record, turn)
    }

    #[test]
    fn a_turn_takes_the_oldest_message_with_the_process_outputs_before_it() {
        let mut record = started();
        record.queue_message("first".into(), None, 2).unwrap();
        record.queue_message("second".into(), None, 2).unwrap();
        assert_eq!(record.queue_message("third".into(), None, 2).unwrap_err().code(), "limit_exceeded");
        record.process_outputs.push_back("Output of `true` (exit 0):\n```\n```".into());
        let mut batch = Batch::default();
        let turn = record.begin_turn(&mut batch).unwrap();
        assert_eq!(turn, TurnInput { number: 1, message: "Output of `true` (exit 0):\n```\n```\n\nfirst".into() });
        assert_eq!(kinds(&batch), [EventType::TurnStarted, EventType::ItemCompleted]);
        assert!(record.process_outputs.is_empty());
        let mut batch = Batch::default();
        assert!(record.finish_turn(&turn, TurnOutcome::completed(), &mut batch));
        assert_eq!(kinds(&batch), [EventType::TurnEnded]);
        // The second message waits: still running.
        assert_eq!(record.state, SessionState::Running);
        assert_eq!(record.begin_turn(&mut Batch::default()).unwrap().message, "second");
    }

    /// The inspector's message, then the CLI's declared one: both run. Declared messages
    /// are told apart by their index, never by how many messages came before.
    #[test]
    fn a_declared_message_is_taken_once_by_its_index_whatever_came_through_the_api() {
        let mut record = started();
        assert!(record.queue_message("typed in the browser".into(), None, 10).unwrap());
        assert!(record.queue_message("first declared".into(), Some(0), 10).unwrap());
        // The same index again (a controller that lost the answer): nothing more.
        assert!(!record.queue_message("first declared".into(), Some(0), 10).unwrap());
        // Out of order: refused, nothing queued.
        assert_eq!(record.queue_message("third".into(), Some(2), 10).unwrap_err().code(), "conflict");
        assert!(record.queue_message("second declared".into(), Some(1), 10).unwrap());
        let info = record.info(0);
        assert_eq!((info.messages_received, info.declared_messages_received), (3, 2));
        let mut batch = Batch::default();
        let queued: Vec<String> = std::iter::from_fn(|| {
            record.begin_turn(&mut batch).map(|t| t.message).inspect(|_| record.current_turn = None)
        })
        .collect();
        assert_eq!(queued, ["typed in the browser", "first declared", "second declared"]);
    }

    /// A record written before messages were told apart counted declared messages only.
    #[test]
    fn a_record_from_before_declared_counts_takes_every_message_as_declared() {
        let mut record = started();
        record.queue_message("a".into(), Some(0), 10).unwrap();
        record.queue_message("b".into(), Some(1), 10).unwrap();
        let mut old = serde_json::to_value(&record).unwrap();
        old.as_object_mut().unwrap().remove("declaredReceived");
        let mut old: SessionRecord = serde_json::from_value(old).unwrap();
        assert_eq!(old.info(0).declared_messages_received, 2);
        assert!(!old.queue_message("b".into(), Some(1), 10).unwrap(), "not sent twice after an upgrade");
        assert!(old.queue_message("from the API".into(), None, 10).unwrap());
        assert!(old.queue_message("c".into(), Some(2), 10).unwrap());
        assert_eq!(old.info(0).declared_messages_received, 3);
    }

    /// A failed turn is counted and its error kept until a turn succeeds.
    #[test]
    fn a_failed_turn_is_told_until_a_turn_succeeds() {
        let mut record = started();
        for m in ["fix the failing test", "again", "and again"] {
            record.queue_message(m.into(), None, 10).unwrap();
        }
        let turn = record.begin_turn(&mut Batch::default()).unwrap();
        record.finish_turn(&turn, TurnOutcome::failed("the mock cannot fix tests"), &mut Batch::default());
        let info = record.info(0);
        assert_eq!((info.turns_completed, info.turns_failed), (1, 1));
        assert_eq!(info.turn_error.as_deref(), Some("the mock cannot fix tests"));
        let turn = record.begin_turn(&mut Batch::default()).unwrap();
        record.finish_turn(&turn, TurnOutcome::completed(), &mut Batch::default());
        let info = record.info(0);
        assert_eq!((info.turns_completed, info.turns_failed, info.turn_error), (2, 1, None));
    }

    #[test]
    fn a_reply_resolves_once_and_a_different_one_after_it_is_a_conflict() {
        let (mut record, _) = waiting();
        // The driver's own id asked again while pending opens nothing more.
        assert_eq!(
            record.open_request(permission("p"), "perm-2", None, &mut Batch::default()),
            RequestOpened::AlreadyPending
        );
        assert_eq!(record.permission_resolution_of_native("p"), None);
        assert_eq!(
            record.reply_permission("perm-1", PermissionReply::Always, &mut Batch::default()).unwrap_err().code(),
            "invalid_request",
            "a reply the request does not offer"
        );
        let mut batch = Batch::default();
        assert!(record.reply_permission("perm-1", PermissionReply::Once, &mut batch).unwrap());
        assert_eq!(kinds(&batch), [EventType::PermissionResolved]);
        assert_eq!(record.permission_resolution_of_native("p"), Some(Some(PermissionReply::Once)));
        assert!(!record.reply_permission("perm-1", PermissionReply::Once, &mut Batch::default()).unwrap());
        let again = record.reply_permission("perm-1", PermissionReply::Reject, &mut Batch::default());
        assert_eq!(again.unwrap_err().code(), "conflict");
        assert_eq!(
            record.reply_permission("perm-9", PermissionReply::Once, &mut Batch::default()).unwrap_err().code(),
            "permission_not_found"
        );
        // The question still waits.
        assert_eq!(record.state, SessionState::AwaitingInput);
        let wrong = record.reply_question("q-1", Some(vec![]), &mut Batch::default());
        assert_eq!(wrong.unwrap_err().code(), "invalid_request", "one list of answers per question");
        assert!(record.reply_question("q-1", Some(vec![vec!["yes".into()]]), &mut Batch::default()).unwrap());
        assert_eq!(record.state, SessionState::Running);
    }

    #[test]
    fn ending_interrupts_the_turn_cancels_what_is_pending_and_closes_the_log() {
        let (mut record, _) = waiting();
        record.queue_message("later".into(), None, 10).unwrap();
        let mut batch = Batch::default();
        assert!(record.end(&mut batch));
        assert_eq!(
            kinds(&batch),
            [EventType::TurnEnded, EventType::PermissionResolved, EventType::QuestionResolved, EventType::SessionEnded]
        );
        assert!(batch.closes());
        assert_eq!(record.state, SessionState::Ended);
        assert!(record.queue.is_empty() && record.current_turn.is_none());
        // Cancelled: the driver is told the session ended; a reply is a conflict.
        assert_eq!(record.permission_resolution_of_native("p"), Some(None));
        let late = record.reply_permission("perm-1", PermissionReply::Once, &mut Batch::default());
        assert_eq!(late.unwrap_err().code(), "conflict");
        assert!(!record.end(&mut Batch::default()), "ending again changes nothing");
        assert_eq!(record.queue_message("more".into(), None, 10).unwrap_err().code(), "conflict");
    }

    #[test]
    fn a_finished_turn_cancels_the_requests_it_left() {
        let (mut record, turn) = waiting();
        let mut batch = Batch::default();
        assert!(record.finish_turn(&turn, TurnOutcome::failed("gone"), &mut batch));
        assert_eq!(kinds(&batch), [EventType::PermissionResolved, EventType::QuestionResolved, EventType::TurnEnded]);
        assert!(!batch.closes());
        assert_eq!(record.state, SessionState::Idle);
        assert_eq!(
            record.question_resolution_of_native("q").map(|(outcome, _)| outcome),
            Some(QuestionOutcome::Cancelled)
        );
    }

    #[test]
    fn an_interrupt_cuts_short_only_the_turn_under_way_and_ends_it_interrupted() {
        let mut record = started();
        assert_eq!(record.interrupt().unwrap(), None, "no turn: nothing to interrupt");
        assert!(!record.interrupt_asked(1));
        let (mut record, turn) = waiting();
        record.queue_message("later".into(), None, 10).unwrap();
        assert_eq!(record.interrupt().unwrap(), Some(turn.number));
        assert!(record.interrupt_asked(turn.number));
        assert!(!record.interrupt_asked(turn.number + 1), "a later turn is not cut short");
        let mut batch = Batch::default();
        assert!(record.finish_turn(&turn, TurnOutcome::interrupted(), &mut batch));
        assert_eq!(kinds(&batch), [EventType::PermissionResolved, EventType::QuestionResolved, EventType::TurnEnded]);
        let Some(EventData::TurnEnded { status, error, .. }) = batch.drafts().last().map(|d| d.data.clone()) else {
            panic!("the turn's end is the last event")
        };
        assert_eq!((status, error), (TurnStatus::Interrupted, None));
        assert_eq!((record.turns_failed, record.turn_error.as_deref()), (0, None), "not a failure of the agent");
        assert!(!record.interrupt_asked(turn.number), "the ask went with the turn");
        assert!(record.has_next_turn(), "the queued message still runs");
        assert!(record.end(&mut Batch::default()));
        assert_eq!(record.interrupt().unwrap_err().code(), "conflict");
    }

    #[test]
    fn only_a_failed_session_reopens_keeping_its_conversation() {
        let mut record = started();
        assert_eq!(record.reopen().unwrap_err().code(), "conflict");
        let mut batch = Batch::default();
        assert!(record.fail("the agent went away", Some("agent_process_exited".into()), &mut batch));
        assert_eq!(kinds(&batch), [EventType::Error, EventType::SessionEnded]);
        assert_eq!(record.state, SessionState::Failed);
        assert!(record.reopen().unwrap(), "the agent's session id is there to resume");
        assert_eq!((record.state, record.error.as_deref()), (SessionState::Starting, None));
        assert!(record.set_state_while_starting(SessionState::Installing));
        assert!(!record.set_state_while_starting(SessionState::Installing));
    }
}
