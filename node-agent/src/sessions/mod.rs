//! Sessions: one conversation with an agent each, driven by a task of its own, its
//! state and events kept in the data directory so that it survives a restart of the
//! node agent.
//!
//! Layout: `data_dir/sessions/<id>/session.json` (the [`SessionRecord`], rewritten
//! atomically on every change of state) and `events.jsonl` (see [`log`]).
//!
//! Clients change a session through [`Session`] methods (messages, replies, end); the
//! session's runner task consumes the queue of messages, one turn each, and hands them
//! to the agent's driver. Both sides meet in the record, under its lock, and every
//! change that announces itself with an event is made inside the log's append step, so
//! the events read in the order the changes happened.

pub mod feed;
pub mod log;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agents::{AgentHost, AgentId, DriverConfig, Launch, agent_from_request};
use crate::driver::{AgentDriver, Interrupted, QuestionAnswer, TurnContext, TurnInput, TurnOutcome, TurnPort};
use crate::error::{Error, Result};
use crate::metrics::{AgentLabel, Metrics};
use crate::model::{CreateSessionRequest, PermissionMode, SessionInfo, SessionState};
use crate::universal::{
    EndReason, EventData, EventSource, Item, ItemKind, PermissionReply, PermissionRequest, QuestionOutcome,
    QuestionRequest, Role, TurnStatus, Usage,
};
use log::{EventDraft, EventLog};

/// Resolved requests remembered per session, so that a repeated reply is answered the
/// same way: enough for any conversation a person follows; the oldest are forgotten
/// past it (a reply to one of those is then `..._not_found`).
const MAX_RESOLUTIONS: usize = 1024;
/// Longest session label: a controller's `Session/<namespace>/<name>` is at most 325.
const MAX_LABEL_BYTES: usize = 512;

#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Events of a live session kept in memory; older ones are read from its file.
    pub events_in_memory: usize,
    /// Messages waiting for their turn, per session; more answers `limit_exceeded`.
    pub max_queued_messages: usize,
    /// Sessions not ended at once (each real agent is a process of hundreds of MB);
    /// one more answers `limit_exceeded`.
    pub max_sessions: usize,
    /// Where agent CLIs are installed; `<data dir>/agents` when absent. Node agents
    /// may share one (installs lock per agent and version).
    pub agents_dir: Option<PathBuf>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions { events_in_memory: 10_000, max_queued_messages: 1_000, max_sessions: 64, agents_dir: None }
    }
}

/// What `session.json` holds: the session as clients see it, plus what resuming needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    id: String,
    /// What people read in logs for this session (a controller's `Session/ns/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    agent: String,
    agent_version: Option<String>,
    agent_mode: Option<String>,
    permission_mode: PermissionMode,
    model: Option<String>,
    variant: Option<String>,
    working_dir: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Kept, like `env`, in this file of mode 0600 so that a restarted node agent gives
    /// the agent the same servers; never in `SessionInfo`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mcp_servers: Vec<crate::model::McpServer>,
    /// Its workspace (a git one's credentials are never saved: see `WorkspaceRecord`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workspace: Option<crate::workspace::WorkspaceRecord>,
    state: SessionState,
    agent_session_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    #[serde(default, with = "time::serde::rfc3339::option")]
    ended_at: Option<OffsetDateTime>,
    messages_received: u64,
    turns_started: u64,
    turns_completed: u64,
    /// The tokens of the turns so far, summed (a record from before usage has none).
    #[serde(default)]
    usage: Usage,
    /// The newest event sequence when this was written: sequences continue past it.
    last_sequence: u64,
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
    current_turn: Option<TurnInput>,
    #[serde(default)]
    resolutions: VecDeque<Resolution>,
    /// Whatever the driver needs to resume its conversation.
    #[serde(default)]
    driver_state: Option<Value>,
    /// Output of processes that fed this session, for the next turn (see [`feed`]).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    process_outputs: VecDeque<String>,
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

/// The id clients see for a request and reply to: 128 random bits, so that no reply can
/// be written ahead for a request that does not exist yet (agents' own ids, such as the
/// mock's `turn-N-permission` or a JSON-RPC counter, can be guessed). `kind` keeps it
/// readable: `perm-...`, `q-...`.
fn public_request_id(kind: &str) -> String {
    format!("{kind}-{}", crate::random::hex(16))
}

impl SessionRecord {
    fn draft(&self, source: EventSource, data: EventData) -> EventDraft {
        EventDraft { source, agent_session_id: self.agent_session_id.clone(), data, raw: None }
    }

    /// The state that follows from what is pending (a final or starting state stays).
    fn settle(&mut self) {
        if self.state.is_final()
            || matches!(self.state, SessionState::Starting | SessionState::Installing | SessionState::Preparing)
        {
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
    fn permission_resolution_of_native(&self, native: &str) -> Option<Option<PermissionReply>> {
        if self.pending_permissions.iter().any(|p| self.native_id(&p.id) == native) {
            return None;
        }
        self.resolutions.iter().rev().find_map(|r| match r {
            Resolution::Permission { reply, .. } if r.native() == native => Some(*reply),
            _ => None,
        })
    }

    fn question_resolution_of_native(&self, native: &str) -> Option<(QuestionOutcome, Option<Vec<Vec<String>>>)> {
        if self.pending_questions.iter().any(|q| self.native_id(&q.id) == native) {
            return None;
        }
        self.resolutions.iter().rev().find_map(|r| match r {
            Resolution::Question { outcome, answers, .. } if r.native() == native => Some((*outcome, answers.clone())),
            _ => None,
        })
    }

    fn driver_config(&self, session_dir: PathBuf, host: Arc<AgentHost>) -> DriverConfig {
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
}

pub struct Session {
    pub id: String,
    /// The record's label, for log lines ("" when none).
    label: String,
    agent: AgentId,
    dir: PathBuf,
    record: Mutex<SessionRecord>,
    log: EventLog,
    /// Bumped on every change a runner may wait for (a message, a reply, the end).
    changes: watch::Sender<u64>,
    /// The version of the record last written to disk.
    persisted: tokio::sync::Mutex<u64>,
    version: AtomicU64,
    max_queued: usize,
    metrics: Metrics,
    /// When each pending request was opened in this run, for the wait it is answered after.
    opened: Mutex<HashMap<String, Instant>>,
}

impl Session {
    fn record(&self) -> MutexGuard<'_, SessionRecord> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn opened(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.opened.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts how long a request that was just answered waited (unknown for one opened
    /// before a restart).
    fn answered(&self, id: &str, kind: &'static str) {
        if let Some(at) = self.opened().remove(id) {
            self.metrics.request_answered(self.agent.as_str(), kind, at.elapsed());
        }
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    pub fn info(&self) -> SessionInfo {
        let rec = self.record();
        SessionInfo {
            id: rec.id.clone(),
            label: rec.label.clone(),
            agent: rec.agent.clone(),
            agent_version: rec.agent_version.clone(),
            agent_mode: rec.agent_mode.clone(),
            permission_mode: rec.permission_mode,
            model: rec.model.clone(),
            variant: rec.variant.clone(),
            working_dir: rec.working_dir.clone(),
            state: rec.state,
            agent_session_id: rec.agent_session_id.clone(),
            created_at: rec.created_at,
            ended_at: rec.ended_at,
            messages_received: rec.messages_received,
            turns_completed: rec.turns_completed,
            usage: rec.usage,
            last_sequence: self.log.latest(),
            pending_permissions: rec.pending_permissions.clone(),
            pending_questions: rec.pending_questions.clone(),
            error: rec.error.clone(),
            workspace: rec.workspace.as_ref().map(crate::workspace::WorkspaceRecord::info),
        }
    }

    fn notify(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// After a change made under the log's lock (if there was one): wakes the runner and
    /// saves the record.
    async fn settled(&self, changed: bool) {
        if changed {
            self.notify();
            self.persist().await;
        }
    }

    /// Writes the record (atomically: a temporary file renamed over it). A save that
    /// lost the race to a newer one is skipped. Not fsynced: this survives the node
    /// agent crashing, as the event log does, not the machine losing power.
    async fn persist(&self) {
        let (version, bytes) = {
            let mut rec = self.record();
            rec.last_sequence = rec.last_sequence.max(self.log.latest());
            let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
            (version, serde_json::to_vec_pretty(&*rec).expect("records serialize"))
        };
        let mut written = self.persisted.lock().await;
        if *written >= version {
            return;
        }
        let dir = self.dir.clone();
        match tokio::task::spawn_blocking(move || write_record(&dir, &bytes)).await {
            Ok(Ok(())) => *written = version,
            Ok(Err(error)) => {
                tracing::error!(session = %self.id, label = ?self.label, %error, "could not save the session")
            }
            Err(error) => {
                tracing::error!(session = %self.id, label = ?self.label, %error, "could not save the session")
            }
        }
    }

    /// Queues a message; it runs as a turn after those before it.
    pub async fn send_message(&self, message: String) -> Result<SessionInfo> {
        {
            let mut rec = self.record();
            if rec.state.is_final() {
                return Err(Error::Conflict(format!("session {:?} has ended: it takes no more messages", self.id)));
            }
            if rec.queue.len() >= self.max_queued {
                return Err(Error::LimitExceeded(format!(
                    "session {:?} already has {} messages waiting for their turn",
                    self.id, self.max_queued
                )));
            }
            rec.queue.push_back(message);
            rec.messages_received += 1;
            rec.settle();
        }
        self.notify();
        self.persist().await;
        Ok(self.info())
    }

    pub async fn reply_permission(&self, id: &str, reply: PermissionReply) -> Result<SessionInfo> {
        let changed = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if let Some(earlier) = rec.permission_resolution(id) {
                    return match earlier {
                        Some(earlier) if earlier == reply => Ok(false),
                        Some(earlier) => Err(Error::Conflict(format!(
                            "permission request {id:?} was already answered {}",
                            serde_json::to_string(&earlier).expect("replies serialize")
                        ))),
                        None => {
                            Err(Error::Conflict(format!("permission request {id:?} was cancelled: the session ended")))
                        }
                    };
                }
                let Some(at) = rec.pending_permissions.iter().position(|p| p.id == id) else {
                    return Err(Error::PermissionNotFound { session: self.id.clone(), id: id.to_string() });
                };
                if rec.state.is_final() {
                    return Err(Error::Conflict(format!("session {:?} has ended", self.id)));
                }
                if !rec.pending_permissions[at].options.contains(&reply) {
                    return Err(Error::InvalidRequest(format!("permission request {id:?} does not offer that reply")));
                }
                rec.pending_permissions.remove(at);
                rec.resolve_permission(id.to_string(), Some(reply));
                rec.settle();
                batch.push(rec.draft(
                    EventSource::Daemon,
                    EventData::PermissionResolved { id: id.to_string(), reply: Some(reply) },
                ));
                Ok(true)
            })
            .await?;
        if changed {
            self.answered(id, "permission");
        }
        self.settled(changed).await;
        Ok(self.info())
    }

    /// Answers a question (`Some(answers)`, one list per question) or rejects it (`None`).
    pub async fn reply_question(&self, id: &str, answers: Option<Vec<Vec<String>>>) -> Result<SessionInfo> {
        let outcome = if answers.is_some() { QuestionOutcome::Answered } else { QuestionOutcome::Rejected };
        let changed = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if let Some((earlier, earlier_answers)) = rec.question_resolution(id) {
                    return if earlier == outcome && earlier_answers == answers {
                        Ok(false)
                    } else if earlier == QuestionOutcome::Cancelled {
                        Err(Error::Conflict(format!("question {id:?} was cancelled: the session ended")))
                    } else {
                        Err(Error::Conflict(format!("question {id:?} was already resolved differently")))
                    };
                }
                let Some(at) = rec.pending_questions.iter().position(|q| q.id == id) else {
                    return Err(Error::QuestionNotFound { session: self.id.clone(), id: id.to_string() });
                };
                if rec.state.is_final() {
                    return Err(Error::Conflict(format!("session {:?} has ended", self.id)));
                }
                if let Some(answers) = &answers {
                    let asked = rec.pending_questions[at].questions.len();
                    if answers.len() != asked {
                        return Err(Error::InvalidRequest(format!(
                            "question {id:?} asks {asked} question(s): give one list of answers for each, {} given",
                            answers.len()
                        )));
                    }
                }
                rec.pending_questions.remove(at);
                rec.resolve_question(id.to_string(), outcome, answers.clone());
                rec.settle();
                batch.push(rec.draft(
                    EventSource::Daemon,
                    EventData::QuestionResolved { id: id.to_string(), outcome, answers: answers.clone() },
                ));
                Ok(true)
            })
            .await?;
        if changed {
            self.answered(id, "question");
        }
        self.settled(changed).await;
        Ok(self.info())
    }

    /// Ends the session: a turn under way ends as interrupted, pending requests are
    /// cancelled, `session.ended` is the last event. Ending an ended session changes nothing.
    pub async fn end(&self) -> SessionInfo {
        let changed = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if rec.state.is_final() {
                    return false;
                }
                // Nothing is left to clone for (a clone under way has its own copy).
                if let Some(workspace) = rec.workspace.as_mut() {
                    workspace.forget_credentials();
                }
                if let Some(turn) = rec.current_turn.take() {
                    batch.push(rec.draft(
                        EventSource::Daemon,
                        EventData::TurnEnded {
                            turn: turn.number,
                            status: TurnStatus::Interrupted,
                            error: None,
                            usage: None,
                        },
                    ));
                }
                for request in std::mem::take(&mut rec.pending_permissions) {
                    rec.resolve_permission(request.id.clone(), None);
                    batch.push(
                        rec.draft(EventSource::Daemon, EventData::PermissionResolved { id: request.id, reply: None }),
                    );
                }
                for request in std::mem::take(&mut rec.pending_questions) {
                    let outcome = QuestionOutcome::Cancelled;
                    rec.resolve_question(request.id.clone(), outcome, None);
                    batch.push(rec.draft(
                        EventSource::Daemon,
                        EventData::QuestionResolved { id: request.id, outcome, answers: None },
                    ));
                }
                rec.queue.clear();
                rec.state = SessionState::Ended;
                rec.ended_at = Some(OffsetDateTime::now_utc());
                batch.push(
                    rec.draft(
                        EventSource::Daemon,
                        EventData::SessionEnded { reason: EndReason::Requested, error: None },
                    ),
                );
                batch.close();
                true
            })
            .await;
        // Its requests were cancelled, not answered: no wait to count.
        self.opened().clear();
        if changed {
            tracing::info!(session = %self.id, label = ?self.label, "session ended");
        }
        self.settled(changed).await;
        self.info()
    }

    /// The agent could not start or went away; `code` is the error's problem code.
    async fn fail(&self, error: String, code: Option<String>) {
        let changed = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if rec.state.is_final() {
                    return false;
                }
                rec.state = SessionState::Failed;
                rec.error = Some(error.clone());
                rec.ended_at = Some(OffsetDateTime::now_utc());
                // The queue stays: those messages were accepted (`messagesReceived`
                // counts them, so nobody sends them again) and run if the session is
                // restarted (see `restart`).
                batch.push(rec.draft(EventSource::Daemon, EventData::Error { message: error.clone(), code }));
                batch.push(rec.draft(
                    EventSource::Daemon,
                    EventData::SessionEnded { reason: EndReason::Failed, error: Some(error.clone()) },
                ));
                batch.close();
                true
            })
            .await;
        if changed {
            tracing::warn!(session = %self.id, label = ?self.label, %error, "session failed");
        }
        self.settled(changed).await;
    }

    /// Starts a failed session again (see [`SessionManager::restart`]): the log takes
    /// events again, the state is `Starting`, and what the conversation was (the
    /// agent's id, the driver's saved state, the queue, `messagesReceived`, the turn
    /// under way) stays. Any other state is a `conflict`: live, there is nothing to
    /// restart; ended, the session was ended on purpose. True when the record holds a
    /// conversation to resume.
    async fn reopen(&self, capacity: usize) -> Result<bool> {
        let resumable = self
            .log
            .reopen(capacity, || {
                let mut rec = self.record();
                if rec.state != SessionState::Failed {
                    return Err(Error::Conflict(format!(
                        "session {:?} is {:?}: only a failed session is restarted",
                        self.id, rec.state
                    )));
                }
                rec.state = SessionState::Starting;
                rec.error = None;
                rec.ended_at = None;
                Ok(rec.agent_session_id.is_some() || rec.driver_state.is_some())
            })
            .await?;
        tracing::info!(session = %self.id, label = ?self.label, "session restarted");
        self.settled(true).await;
        Ok(resumable)
    }

    /// Clones the session's git workspace when it is not cloned yet (state
    /// `preparing`); false when the session failed for it or the node agent stops.
    async fn prepare_workspace(&self, shutdown: &CancellationToken) -> bool {
        let pending = self.record().workspace.clone().filter(|w| w.needs_clone());
        let Some(workspace) = pending else { return true };
        let Some(git) = &workspace.git else { return true };
        self.set_state_while_starting(SessionState::Preparing).await;
        let url = crate::workspace::display_url(&git.url);
        tracing::info!(session = %self.id, label = ?self.label, %url, git_ref = ?git.git_ref, "cloning the workspace");
        let prepared = tokio::select! {
            prepared = crate::workspace::prepare(&self.id, git, Path::new(&workspace.path), &self.dir) => prepared,
            () = shutdown.cancelled() => return false,
        };
        match prepared {
            Ok(commit) => {
                tracing::info!(session = %self.id, label = ?self.label, %commit, "workspace cloned");
                if let Some(workspace) = self.record().workspace.as_mut() {
                    workspace.cloned(commit);
                }
                self.set_state_while_starting(SessionState::Starting).await;
                true
            }
            Err(error) => {
                let hint = if workspace.credentials_lost() {
                    " (the credentials it was given are not kept across a restart of the node agent, which \
                     happened before this clone finished: create the session anew to give them again)"
                } else {
                    ""
                };
                let error = Error::WorkspaceFailed(format!("cloning {url}: {error}{hint}"));
                self.fail(error.to_string(), Some(error.code().to_string())).await;
                false
            }
        }
    }

    /// Lists the files a turn left changed in a cloned workspace; called before
    /// `turn.ended`, so that whoever reads the session on that event sees them.
    async fn refresh_changed_files(&self) {
        let cloned = self.record().workspace.as_ref().and_then(|w| Some((w.path.clone(), w.commit.clone()?)));
        let Some((path, commit)) = cloned else { return };
        match crate::workspace::changed_files(Path::new(&path), &commit).await {
            Ok((files, truncated)) => {
                if let Some(workspace) = self.record().workspace.as_mut() {
                    workspace.changed_files = files;
                    workspace.changed_files_truncated = truncated;
                }
            }
            Err(error) => {
                tracing::warn!(session = %self.id, label = ?self.label, %error, "could not list the workspace's changes")
            }
        }
    }

    /// The directory and commit of the session's cloned workspace, which its diff compares.
    pub fn cloned_workspace(&self) -> Result<(PathBuf, String)> {
        let rec = self.record();
        match rec.workspace.as_ref() {
            Some(w) if w.git.is_some() => match &w.commit {
                Some(commit) => Ok((PathBuf::from(&w.path), commit.clone())),
                None => Err(Error::Conflict(format!("session {:?}: its workspace is not cloned yet", self.id))),
            },
            _ => Err(Error::Conflict(format!(
                "session {:?} has no git workspace: there is no commit to compare with",
                self.id
            ))),
        }
    }

    /// Moves a session that has not started yet between `Installing` and `Starting`;
    /// false when it is past starting (resumed, or ended).
    async fn set_state_while_starting(&self, state: SessionState) -> bool {
        let changed = {
            let mut rec = self.record();
            if matches!(rec.state, SessionState::Starting | SessionState::Installing | SessionState::Preparing)
                && rec.state != state
            {
                rec.state = state;
                true
            } else {
                false
            }
        };
        if changed {
            self.settled(true).await;
        }
        changed
    }

    /// The driver is up; false when the session ended meanwhile.
    async fn started(&self, agent_session_id: Option<String>, resumed: bool) -> bool {
        let started = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if rec.state.is_final() {
                    return false;
                }
                rec.agent_session_id = agent_session_id.clone();
                if matches!(rec.state, SessionState::Starting | SessionState::Installing | SessionState::Preparing) {
                    rec.state = SessionState::Idle;
                }
                rec.settle();
                batch.push(rec.draft(
                    EventSource::Daemon,
                    EventData::SessionStarted { agent: rec.agent.clone(), agent_session_id, resumed },
                ));
                true
            })
            .await;
        if started {
            tracing::info!(session = %self.id, label = ?self.label, agent = %self.agent.as_str(), resumed, "session started");
        }
        self.persist().await;
        started
    }

    /// Takes the oldest queued message as the next turn; `None` when the session ended
    /// or the node agent stops.
    async fn next_turn(&self, shutdown: &CancellationToken) -> Option<TurnInput> {
        let mut changes = self.changes.subscribe();
        loop {
            {
                let rec = self.record();
                if rec.state.is_final() {
                    return None;
                }
                if !rec.queue.is_empty() {
                    break;
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return None },
                () = shutdown.cancelled() => return None,
            }
        }
        let turn = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if rec.state.is_final() {
                    return None;
                }
                let message = rec.queue.pop_front()?;
                rec.turns_started += 1;
                // The agent gets what processes printed meanwhile; the item shows what was said.
                let delivered = rec.take_process_outputs(&message);
                let turn = TurnInput { number: rec.turns_started, message: delivered };
                rec.current_turn = Some(turn.clone());
                rec.settle();
                batch.push(rec.draft(EventSource::Daemon, EventData::TurnStarted { turn: turn.number }));
                let item = Item {
                    id: format!("turn-{}-message", turn.number),
                    kind: ItemKind::Message,
                    role: Some(Role::User),
                    text: Some(message),
                    ..Default::default()
                };
                batch.push(rec.draft(EventSource::Daemon, EventData::ItemCompleted { item }));
                Some(turn)
            })
            .await;
        self.persist().await;
        turn
    }

    /// Counts a turn that ended (one the node agent's stop cut short goes on after the
    /// restart: counted then).
    fn count_turn(&self, outcome: &Result<TurnOutcome, Interrupted>, started: Instant) {
        let status = match outcome {
            Ok(outcome) if outcome.failed => "failed",
            Ok(_) => "completed",
            Err(Interrupted::Ended) => "interrupted",
            Err(Interrupted::Shutdown) => return,
        };
        self.metrics.turn_ended(self.agent.as_str(), status, started.elapsed());
    }

    /// Records the end of a turn; `Err` when the runner is to stop.
    async fn finish_turn(
        &self,
        turn: &TurnInput,
        outcome: Result<TurnOutcome, Interrupted>,
    ) -> Result<(), Interrupted> {
        // Stopping: the turn stays current in the record and resumes on the next start.
        let outcome = outcome?;
        let recorded = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if rec.state.is_final() {
                    return false;
                }
                rec.current_turn = None;
                rec.turns_completed += 1;
                // A request the turn left unanswered (its agent went away) can no
                // longer be answered: cancelled, so the session does not wait for it.
                for request in std::mem::take(&mut rec.pending_permissions) {
                    rec.resolve_permission(request.id.clone(), None);
                    batch.push(
                        rec.draft(EventSource::Daemon, EventData::PermissionResolved { id: request.id, reply: None }),
                    );
                }
                for request in std::mem::take(&mut rec.pending_questions) {
                    let outcome = QuestionOutcome::Cancelled;
                    rec.resolve_question(request.id.clone(), outcome, None);
                    batch.push(rec.draft(
                        EventSource::Daemon,
                        EventData::QuestionResolved { id: request.id, outcome, answers: None },
                    ));
                }
                rec.settle();
                if let Some(usage) = &outcome.usage {
                    rec.usage.add(usage);
                }
                let status = if outcome.failed { TurnStatus::Failed } else { TurnStatus::Completed };
                batch.push(rec.draft(
                    EventSource::Daemon,
                    EventData::TurnEnded { turn: turn.number, status, error: outcome.error, usage: outcome.usage },
                ));
                true
            })
            .await;
        self.opened().clear();
        self.persist().await;
        if recorded { Ok(()) } else { Err(Interrupted::Ended) }
    }
}

/// The session's side of a driver's [`TurnContext`].
struct SessionTurn {
    session: Arc<Session>,
    shutdown: CancellationToken,
}

impl TurnPort for SessionTurn {
    fn session_id(&self) -> &str {
        &self.session.id
    }

    fn permission_mode(&self) -> PermissionMode {
        self.session.record().permission_mode
    }

    fn emit_raw(&self, data: EventData, raw: Option<String>) -> BoxFuture<'_, Result<(), Interrupted>> {
        Box::pin(async move {
            let draft = EventDraft { raw, ..self.session.record().draft(EventSource::Agent, data) };
            if self.session.log.append(draft).await { Ok(()) } else { Err(Interrupted::Ended) }
        })
    }

    fn save_state(&self, state: Value) {
        self.session.record().driver_state = Some(state);
    }

    fn request_permission<'a>(
        &'a self,
        request: PermissionRequest,
        raw: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Interrupted>> {
        Box::pin(self.open_request(
            "perm",
            request.id.clone(),
            move |rec, public| {
                let request = PermissionRequest { id: public.to_string(), ..request };
                rec.pending_permissions.push(request.clone());
                EventData::PermissionRequested(request)
            },
            |rec, native| rec.pending_permissions.iter().any(|p| rec.native_id(&p.id) == native),
            raw,
        ))
    }

    fn wait_permission<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<PermissionReply, Interrupted>> {
        Box::pin(self.wait(move |rec| match rec.permission_resolution_of_native(id) {
            Some(Some(reply)) => Some(Ok(reply)),
            Some(None) => Some(Err(Interrupted::Ended)),
            None => None,
        }))
    }

    fn ask_question<'a>(
        &'a self,
        request: QuestionRequest,
        raw: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Interrupted>> {
        Box::pin(self.open_request(
            "q",
            request.id.clone(),
            move |rec, public| {
                let request = QuestionRequest { id: public.to_string(), ..request };
                rec.pending_questions.push(request.clone());
                EventData::QuestionRequested(request)
            },
            |rec, native| rec.pending_questions.iter().any(|q| rec.native_id(&q.id) == native),
            raw,
        ))
    }

    fn wait_question<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<QuestionAnswer, Interrupted>> {
        Box::pin(self.wait(move |rec| match rec.question_resolution_of_native(id) {
            Some((QuestionOutcome::Answered, answers)) => {
                Some(Ok(QuestionAnswer::Answered(answers.unwrap_or_default())))
            }
            Some((QuestionOutcome::Rejected, _)) => Some(Ok(QuestionAnswer::Rejected)),
            Some((QuestionOutcome::Cancelled, _)) => Some(Err(Interrupted::Ended)),
            None => None,
        }))
    }

    fn interrupted(&self) -> BoxFuture<'_, Interrupted> {
        Box::pin(async move {
            match self.wait(|_| None::<Result<(), Interrupted>>).await {
                Err(why) => why,
                Ok(()) => Interrupted::Ended,
            }
        })
    }
}

impl SessionTurn {
    /// Records a pending request under a new public id (see [`public_request_id`]) and
    /// announces it as one step, then saves the session so a restart re-offers it;
    /// nothing is opened on an ended session, nor again while the driver's id is pending.
    async fn open_request(
        &self,
        kind: &str,
        native: String,
        add: impl FnOnce(&mut SessionRecord, &str) -> EventData,
        pending: impl Fn(&SessionRecord, &str) -> bool,
        raw: Option<&str>,
    ) -> Result<(), Interrupted> {
        let public = public_request_id(kind);
        let opened = self
            .session
            .log
            .append_with(|batch| {
                let mut rec = self.session.record();
                if rec.state.is_final() {
                    return false;
                }
                if pending(&rec, &native) {
                    return true;
                }
                rec.native_ids.insert(public.clone(), native);
                self.session.opened().insert(public.clone(), Instant::now());
                let event = add(&mut rec, &public);
                rec.settle();
                batch.push(EventDraft { raw: raw.map(str::to_string), ..rec.draft(EventSource::Agent, event) });
                true
            })
            .await;
        self.session.persist().await;
        if opened { Ok(()) } else { Err(Interrupted::Ended) }
    }

    async fn wait<T>(
        &self,
        mut ready: impl FnMut(&SessionRecord) -> Option<Result<T, Interrupted>>,
    ) -> Result<T, Interrupted> {
        let mut changes = self.session.changes.subscribe();
        loop {
            {
                let rec = self.session.record();
                if let Some(result) = ready(&rec) {
                    return result;
                }
                if rec.state.is_final() {
                    return Err(Interrupted::Ended);
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return Err(Interrupted::Ended) },
                () = self.shutdown.cancelled() => return Err(Interrupted::Shutdown),
            }
        }
    }
}

/// The task of one session: starts the driver, then runs the queued messages as
/// turns, one at a time, until the session ends or the node agent stops.
async fn run(session: Arc<Session>, host: Arc<AgentHost>, shutdown: CancellationToken, resumed: bool) {
    let (config, saved) = {
        let rec = session.record();
        (rec.driver_config(session.dir.clone(), host), rec.driver_state.clone())
    };
    if !session.prepare_workspace(&shutdown).await {
        return;
    }
    // Checked at creation, but it may have gone since (before a restart of the node
    // agent, say): the session fails saying so, the same for every agent, and a
    // restart once it is back resumes the conversation.
    if let Some(dir) = &config.working_dir
        && !tokio::fs::metadata(dir).await.is_ok_and(|m| m.is_dir())
    {
        let error = Error::InvalidRequest(format!("working directory {dir:?} does not exist"));
        session.fail(error.to_string(), Some(error.code().to_string())).await;
        return;
    }
    // Installed here, once, before the driver starts, so that a session says it is
    // installing (and a failed install says why); the driver runs what was installed.
    let installed = match session.agent.package() {
        Some(_) => {
            let installing = session.set_state_while_starting(SessionState::Installing).await;
            let installed = tokio::select! {
                installed = config.host.installer.ensure(session.agent, config.agent_version.as_deref()) => installed,
                () = shutdown.cancelled() => return,
            };
            match installed {
                Ok(installed) => {
                    if installing {
                        session.set_state_while_starting(SessionState::Starting).await;
                    }
                    Some(installed)
                }
                Err(error) => {
                    tracing::warn!(session = %session.id, label = ?session.label, %error, "the agent could not be installed");
                    session.fail(error.to_string(), Some(error.code().to_string())).await;
                    return;
                }
            }
        }
        None => None,
    };
    let launch = Launch { config: &config, installed, saved };
    let mut driver = match session.agent.agent().launch(launch).await {
        Ok(driver) => driver,
        Err(error) => {
            tracing::warn!(session = %session.id, label = ?session.label, %error, "the agent did not start");
            session.fail(error.to_string(), Some(error.code().to_string())).await;
            return;
        }
    };
    if session.started(driver.agent_session_id(), resumed).await {
        let ctx = TurnContext::new(SessionTurn { session: Arc::clone(&session), shutdown: shutdown.clone() });
        drive(&session, &shutdown, &ctx, driver.as_mut()).await;
        // Requests a stopped driver left are answered by nobody in this run.
        session.opened().clear();
    }
    driver.stop().await;
}

async fn drive(session: &Session, shutdown: &CancellationToken, ctx: &TurnContext, driver: &mut dyn AgentDriver) {
    let interrupted = session.record().current_turn.clone();
    if let Some(turn) = interrupted {
        tracing::info!(session = %session.id, label = ?session.label, turn = turn.number, "resuming a turn");
        let started = Instant::now();
        let outcome = driver.run_turn(ctx, &turn, true).await;
        session.count_turn(&outcome, started);
        session.refresh_changed_files().await;
        if session.finish_turn(&turn, outcome).await.is_err() {
            return;
        }
    }
    while let Some(turn) = session.next_turn(shutdown).await {
        let started = Instant::now();
        let outcome = driver.run_turn(ctx, &turn, false).await;
        session.count_turn(&outcome, started);
        session.refresh_changed_files().await;
        if session.finish_turn(&turn, outcome).await.is_err() {
            return;
        }
    }
}

/// All sessions of this node agent. Cheap to clone.
#[derive(Clone)]
pub struct SessionManager {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    host: Arc<AgentHost>,
    options: SessionOptions,
    sessions: Mutex<Sessions>,
    runners: Mutex<Vec<JoinHandle<()>>>,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, Arc<Session>>,
    /// Ids being created: taken, though not listed yet.
    reserved: HashSet<String>,
}

impl SessionManager {
    /// Loads the sessions kept under `root` and resumes the live ones.
    pub async fn load(
        root: PathBuf,
        host: Arc<AgentHost>,
        options: SessionOptions,
        shutdown: CancellationToken,
    ) -> Result<SessionManager> {
        let (loaded_root, loaded_options) = (root.clone(), options.clone());
        let loaded = tokio::task::spawn_blocking(move || load_all(&loaded_root, &loaded_options))
            .await
            .map_err(|e| Error::io("loading sessions", std::io::Error::other(e)))??;
        let manager = SessionManager {
            inner: Arc::new(Inner {
                root,
                host,
                options,
                sessions: Mutex::new(Sessions::default()),
                runners: Mutex::new(Vec::new()),
                shutdown,
            }),
        };
        for (agent, dir, record, log) in loaded {
            let live = !record.state.is_final();
            let session = manager.session(agent, dir, record, log);
            manager.sessions().by_id.insert(session.id.clone(), Arc::clone(&session));
            if live {
                tracing::info!(session = %session.id, label = ?session.label, "resuming a session");
                manager.spawn_runner(session, true);
            }
        }
        Ok(manager)
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.inner.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn session(&self, agent: AgentId, dir: PathBuf, record: SessionRecord, log: EventLog) -> Arc<Session> {
        log.count_into(self.inner.host.metrics.events.get_or_create(&AgentLabel { agent: agent.as_str() }).clone());
        Arc::new(Session {
            id: record.id.clone(),
            label: record.label.clone().unwrap_or_default(),
            agent,
            dir,
            record: Mutex::new(record),
            log,
            changes: watch::Sender::new(0),
            persisted: tokio::sync::Mutex::new(0),
            version: AtomicU64::new(0),
            max_queued: self.inner.options.max_queued_messages,
            metrics: self.inner.host.metrics.clone(),
            opened: Mutex::default(),
        })
    }

    fn spawn_runner(&self, session: Arc<Session>, resumed: bool) {
        use futures_util::FutureExt;
        let shutdown = self.inner.shutdown.clone();
        let host = Arc::clone(&self.inner.host);
        let runner = tokio::spawn(async move {
            // A driver that panics fails its session instead of leaving it running forever.
            let ran =
                std::panic::AssertUnwindSafe(run(Arc::clone(&session), host, shutdown, resumed)).catch_unwind().await;
            if ran.is_err() {
                session.fail("the agent driver panicked".into(), None).await;
            }
        });
        let mut runners = self.inner.runners.lock().unwrap_or_else(|e| e.into_inner());
        runners.retain(|r| !r.is_finished());
        runners.push(runner);
    }

    pub async fn create(&self, id: &str, request: CreateSessionRequest) -> Result<Arc<Session>> {
        validate_id(id)?;
        let agent = agent_from_request(&request.agent)?;
        agent.validate(&request)?;
        // Checked now with the installer's rule: `$(id)` or a dist-tag would otherwise
        // be taken and fail only when the install runs.
        if let Some(version) = &request.agent_version {
            crate::agents::install::check_version(version)?;
        }
        if let Some(label) = &request.label
            && (label.len() > MAX_LABEL_BYTES || label.chars().any(char::is_control))
        {
            return Err(Error::InvalidRequest(format!(
                "label must be at most {MAX_LABEL_BYTES} bytes without control characters (it goes in log lines)"
            )));
        }
        for key in request.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(Error::InvalidRequest(format!("environment variable name {key:?} is invalid")));
            }
        }
        let mut request = request;
        // `workspace.path` and `workingDir` are one setting; a git workspace's directory
        // is made by its clone, so it is not there yet.
        let workspaces = self.inner.root.parent().unwrap_or(&self.inner.root).join("workspaces");
        let (working_dir, workspace) =
            crate::workspace::plan(id, request.workspace.take(), request.working_dir.take(), &workspaces).await?;
        request.working_dir = working_dir;
        let cloned_later = workspace.as_ref().is_some_and(|w| w.git.is_some());
        if let Some(dir) = request.working_dir.as_ref().filter(|_| !cloned_later) {
            let is_dir = tokio::fs::metadata(dir).await.is_ok_and(|m| m.is_dir());
            if !is_dir {
                return Err(Error::InvalidRequest(format!("working directory {dir:?} does not exist")));
            }
        }
        {
            let mut sessions = self.sessions();
            if sessions.by_id.contains_key(id) || sessions.reserved.contains(id) {
                return Err(Error::SessionAlreadyExists(id.to_string()));
            }
            // Those being created count: they are live the moment they are listed.
            let live =
                sessions.by_id.values().filter(|s| !s.record().state.is_final()).count() + sessions.reserved.len();
            let max = self.inner.options.max_sessions;
            if live >= max {
                return Err(Error::LimitExceeded(format!(
                    "{live} sessions are live, the limit is {max} (--max-sessions); end one first"
                )));
            }
            sessions.reserved.insert(id.to_string());
        }
        let created = self.create_reserved(id, agent, request, workspace).await;
        let mut sessions = self.sessions();
        sessions.reserved.remove(id);
        let session = created?;
        sessions.by_id.insert(id.to_string(), Arc::clone(&session));
        drop(sessions);
        self.spawn_runner(Arc::clone(&session), false);
        Ok(session)
    }

    async fn create_reserved(
        &self,
        id: &str,
        agent: AgentId,
        request: CreateSessionRequest,
        workspace: Option<crate::workspace::WorkspaceRecord>,
    ) -> Result<Arc<Session>> {
        let state = if workspace.as_ref().is_some_and(|w| w.needs_clone()) {
            SessionState::Preparing
        } else {
            SessionState::Starting
        };
        let record = SessionRecord {
            id: id.to_string(),
            label: request.label,
            agent: agent.as_str().to_string(),
            agent_version: match agent.package() {
                Some(package) => Some(request.agent_version.unwrap_or_else(|| package.default_version.to_string())),
                None => agent.agent().builtin_version().map(str::to_string),
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
            turns_started: 0,
            turns_completed: 0,
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
        };
        let dir = self.inner.root.join(id);
        let bytes = serde_json::to_vec_pretty(&record).expect("records serialize");
        let capacity = self.inner.options.events_in_memory;
        let (session_dir, session_id) = (dir.clone(), id.to_string());
        let log = tokio::task::spawn_blocking(move || -> Result<EventLog> {
            let context = || format!("creating the session directory {}", session_dir.display());
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(session_dir.parent().expect("under the root"))
                .map_err(|e| Error::io(context(), e))?;
            match std::fs::DirBuilder::new().mode(0o700).create(&session_dir) {
                Ok(()) => {}
                // Left by a session that could not be loaded: not to be mixed with a new one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(Error::SessionAlreadyExists(session_id));
                }
                Err(e) => return Err(Error::io(context(), e)),
            }
            write_record(&session_dir, &bytes).map_err(|e| Error::io("saving the session", e))?;
            EventLog::open(&session_dir.join("events.jsonl"), &session_id, capacity, 0, false)
                .map_err(|e| Error::io("creating the event log", e))
        })
        .await
        .map_err(|e| Error::io("creating the session", std::io::Error::other(e)))??;
        Ok(self.session(agent, dir, record, log))
    }

    /// Starts a failed session again: a new run of the same conversation, resumed by
    /// the agent's own id as after a restart of the node agent (the turn under way
    /// when it failed goes on, then the queued messages; nothing accepted is lost).
    /// Only a failed session: any other state is a `conflict`, so a caller that asks
    /// twice, or asks while another restart is under way, starts it once. Counts
    /// against `--max-sessions` as a new session does.
    pub async fn restart(&self, id: &str) -> Result<Arc<Session>> {
        let session = self.get(id)?;
        {
            let mut sessions = self.sessions();
            if sessions.reserved.contains(id) {
                return Err(Error::Conflict(format!("session {id:?} is being restarted")));
            }
            let live =
                sessions.by_id.values().filter(|s| !s.record().state.is_final()).count() + sessions.reserved.len();
            let max = self.inner.options.max_sessions;
            if session.record().state.is_final() && live >= max {
                return Err(Error::LimitExceeded(format!(
                    "{live} sessions are live, the limit is {max} (--max-sessions); end one first"
                )));
            }
            // Counted as live (and not restarted twice) until its state says so.
            sessions.reserved.insert(id.to_string());
        }
        let reopened = session.reopen(self.inner.options.events_in_memory).await;
        self.sessions().reserved.remove(id);
        let resumable = reopened?;
        self.spawn_runner(Arc::clone(&session), resumable);
        Ok(session)
    }

    /// What the sessions' agents share: installs, opencode's server.
    pub fn host(&self) -> &Arc<AgentHost> {
        &self.inner.host
    }

    pub fn get(&self, id: &str) -> Result<Arc<Session>> {
        self.sessions().by_id.get(id).cloned().ok_or_else(|| Error::SessionNotFound(id.to_string()))
    }

    /// Sessions in the order they were created, ended ones too.
    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut sessions: Vec<(OffsetDateTime, Arc<Session>)> =
            self.sessions().by_id.values().map(|s| (s.record().created_at, Arc::clone(s))).collect();
        sessions.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        sessions.into_iter().map(|(_, s)| s).collect()
    }

    /// Stops every runner (sessions stay as they are, to resume on the next start).
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let runners = std::mem::take(&mut *self.inner.runners.lock().unwrap_or_else(|e| e.into_inner()));
        for runner in runners {
            if let Err(error) = runner.await {
                tracing::error!(%error, "a session runner failed");
            }
        }
        let sessions: Vec<_> = self.sessions().by_id.values().cloned().collect();
        for session in sessions {
            session.persist().await;
        }
    }
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

/// Readable by the node agent's user only: it holds the session's environment.
fn write_record(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = dir.join("session.json.tmp");
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&temporary, dir.join("session.json"))
}

type Loaded = (AgentId, PathBuf, SessionRecord, EventLog);

fn load_all(root: &Path, options: &SessionOptions) -> Result<Vec<Loaded>> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading {}", root.display()), e)),
    };
    let mut loaded = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        match load_one(&dir, options) {
            Ok(Some(session)) => loaded.push(session),
            Ok(None) => {}
            Err(error) => tracing::error!(dir = %dir.display(), %error, "could not load a session; leaving it alone"),
        }
    }
    Ok(loaded)
}

fn load_one(dir: &Path, options: &SessionOptions) -> std::result::Result<Option<Loaded>, String> {
    let bytes = match std::fs::read(dir.join("session.json")) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let record: SessionRecord = serde_json::from_slice(&bytes).map_err(|e| format!("session.json: {e}"))?;
    let named = dir.file_name().and_then(|n| n.to_str());
    if named != Some(record.id.as_str()) || validate_id(&record.id).is_err() {
        return Err(format!("session.json names session {:?}", record.id));
    }
    // Saved by a node agent that kept git credentials on disk: the file is written
    // again without them at once (what was read still serves a clone left to make,
    // from memory, as for a session created in this run).
    if record.workspace.as_ref().and_then(|w| w.git.as_ref()).is_some_and(|g| g.credentials.is_some()) {
        let bytes = serde_json::to_vec_pretty(&record).expect("records serialize");
        write_record(dir, &bytes).map_err(|e| format!("removing git credentials from session.json: {e}"))?;
        tracing::info!(session = %record.id, "removed the git credentials an earlier node agent saved");
    }
    // The SSH key of a clone the previous node agent was killed in (or stopped) during.
    if crate::workspace::remove_key_dirs(dir) {
        tracing::info!(session = %record.id, "removed the SSH key of a clone that was cut off");
    }
    let agent = AgentId::parse(&record.agent).ok_or_else(|| format!("unknown agent {:?}", record.agent))?;
    let finished = record.state.is_final();
    // An ended session keeps nothing in memory: its events are read from the file.
    let capacity = if finished { 0 } else { options.events_in_memory };
    let log = EventLog::open(&dir.join("events.jsonl"), &record.id, capacity, record.last_sequence, finished)
        .map_err(|e| format!("events.jsonl: {e}"))?;
    Ok(Some((agent, dir.to_path_buf(), record, log)))
}
