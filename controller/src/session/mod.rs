//! Reconciling a `Session`: the node agent's session created from the spec, each entry
//! of `spec.messages` delivered once and in order, each entry of `spec.replies` given
//! to the question or permission request it names, the session ended when
//! `spec.ended` says so or the resource goes. A restart request (`agentplane restart`)
//! restarts the agent once, resuming its conversation (a failed session starts again),
//! and so does a change of the environment its env files resolve to: the node agent
//! restarts it between turns with the new one.
//!
//! Exactly once: the node agent persists how many messages a session has accepted
//! (`messagesReceived`), and that count, not the controller's own memory, says which
//! entries are still to send. A controller killed between sending and writing status
//! sends nothing twice.
//!
//! A node agent at one of its limits (`--max-sessions`) refuses with the problem code
//! `limit_exceeded`: that is no outage but a wait for a slot, reported as
//! `LimitExceeded` with the way to raise the limit, and asked again with a back-off.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::{
    ChangedFile, FileChangeStatus, PendingPermission, PendingQuestion, PermissionDecision, PermissionMode, Question,
    Session, SessionPhase, SessionStatus, SessionUsage, WorkspaceStatus,
};
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::ClientError;
use agentplane_node_agent::model::{
    CreateSessionRequest, PermissionMode as NodePermissionMode, SessionInfo, SessionState,
};
use agentplane_node_agent::universal::PermissionReply;

use crate::conditions::{self, READY, Status};
use crate::conversations::Conversations;
use crate::node_agent::NodeAgent;
use crate::sandboxes::Sandboxes;
use crate::{Error, Reconciled, Result};

const RETRY_UNREACHABLE: Duration = Duration::from_secs(5);
const RETRY_LATER: Duration = Duration::from_secs(30);
/// Longest tool input shown in a pending permission's summary.
const SUMMARY_CHARS: usize = 200;
/// The condition that names replies refused for naming no request.
const REPLIES_ACCEPTED: &str = "RepliesAccepted";
/// The condition that says the newest turn failed, present only while it is so.
pub const TURN_SUCCEEDED: &str = "TurnSucceeded";
/// The `Ready` reason of a Session that waits for a node agent's limit.
pub const LIMIT_EXCEEDED: &str = "LimitExceeded";
/// A Session refused for a limit asks again after as long as it has waited so far (so
/// the waits double), within these bounds: a slot frees only when another session ends,
/// and thousands of Sessions past the limit asking every few seconds would be a load of
/// their own.
const LIMIT_RETRY_MIN: Duration = Duration::from_secs(5);
const LIMIT_RETRY_MAX: Duration = Duration::from_secs(300);

/// Which of a node agent's limits refused a call: what its message tells people to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// `--max-sessions`, for a new or restarted session.
    Sessions,
    /// A session's queue of messages waiting for their turn.
    QueuedMessages,
}

impl Limit {
    fn advice(self) -> &'static str {
        match self {
            Limit::Sessions => {
                "It starts when a live session there ends (asked again with a back-off); to run more at once, \
                 start that node agent with a higher --max-sessions (env AGENTPLANE_MAX_SESSIONS; \
                 `agentplane up --max-sessions N` for the sandbox \"local\")"
            }
            Limit::QueuedMessages => {
                "The rest are sent as its turns take the ones waiting (asked again with a back-off)"
            }
        }
    }
}

/// The `Ready` reason for a call to the node agent that failed: `LimitExceeded` for a
/// limit it enforces (told by its problem code, never by the message's words), else
/// `NodeAgentUnreachable`.
fn failure_reason(e: &ClientError) -> &'static str {
    if e.code() == Some(ProblemCode::LimitExceeded) { LIMIT_EXCEEDED } else { "NodeAgentUnreachable" }
}

/// The wait before asking again after a refusal for a limit, given how long the
/// resource has waited so far: as long again, within bounds, stretched by up to a
/// quarter by its uid so that many refused together do not all ask together again.
fn limit_retry(waited: Duration, uid: &str) -> Duration {
    let base = waited.clamp(LIMIT_RETRY_MIN, LIMIT_RETRY_MAX);
    let spread = uid.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b))) % 26;
    base + base * spread / 100
}

/// The node-agent id of a Session resource's session.
pub fn node_session_id(uid: &str) -> String {
    format!("sess-{uid}")
}

pub struct SessionInput<'a> {
    pub session: &'a Session,
    pub env: std::result::Result<BTreeMap<String, String>, String>,
    pub spec_problem: Option<String>,
    /// The workspace's git credentials as the store resolved them (a Secret, or files
    /// beside the YAML); `Ok(None)` when the spec names none.
    pub git_credentials: std::result::Result<Option<agentplane_node_agent::model::GitCredentials>, String>,
    /// `spec.mcpServers` with their values resolved as `env` is (see [`crate::mcp`]).
    pub mcp_servers: std::result::Result<Vec<agentplane_node_agent::model::McpServer>, String>,
}

pub struct SessionReconciler {
    pub sandboxes: Arc<Sandboxes>,
    /// Where conversations are kept outside their sandbox, when the store keeps them
    /// (see [`crate::conversations`]).
    pub conversations: Option<Arc<Conversations>>,
}

/// The condition that says whether the conversation outlives its sandbox.
pub const DURABLE: &str = "Durable";

fn not_found(e: &ClientError) -> bool {
    e.code() == Some(ProblemCode::SessionNotFound)
}

fn phase_of(state: SessionState) -> SessionPhase {
    match state {
        SessionState::Preparing => SessionPhase::Preparing,
        SessionState::Installing => SessionPhase::Installing,
        SessionState::Starting => SessionPhase::Starting,
        SessionState::Running => SessionPhase::Running,
        SessionState::AwaitingInput => SessionPhase::AwaitingInput,
        SessionState::Idle => SessionPhase::Idle,
        SessionState::Ended => SessionPhase::Ended,
        SessionState::Failed => SessionPhase::Failed,
    }
}

/// How much of what a node agent reports goes into a Session's status: a status is
/// written whole at every change, and a node agent is hostile input. More than any
/// person reads in `describe`; the full lists stay on the node agent.
const MAX_LISTED: usize = 100;
/// A path, an id or a name.
const MAX_NAME: usize = 1024;
/// A question or an option.
const MAX_TEXT: usize = 4096;

fn cut(text: &str, max: usize) -> String {
    crate::conditions::cut(text.to_string(), max)
}

/// The status's view of a git workspace: what was checked out, what changed since.
fn workspace_status(info: &agentplane_node_agent::model::WorkspaceInfo) -> WorkspaceStatus {
    use agentplane_node_agent::model::FileChangeStatus as Node;
    WorkspaceStatus {
        path: Some(cut(&info.path, MAX_NAME)),
        git_ref: info.git_ref.as_deref().map(|r| cut(r, MAX_NAME)),
        commit: info.commit.as_deref().map(|c| cut(c, MAX_NAME)),
        changed_files: info
            .changed_files
            .iter()
            .take(MAX_LISTED)
            .map(|f| ChangedFile {
                path: cut(&f.path, MAX_NAME),
                status: match f.status {
                    Node::Added => FileChangeStatus::Added,
                    Node::Modified => FileChangeStatus::Modified,
                    Node::Deleted => FileChangeStatus::Deleted,
                    Node::Renamed => FileChangeStatus::Renamed,
                },
                from: f.from.as_deref().map(|p| cut(p, MAX_NAME)),
            })
            .collect(),
        changed_files_truncated: info.changed_files_truncated || info.changed_files.len() > MAX_LISTED,
    }
}

/// The node agent's workspace request for a Session's `spec.workspace`.
fn workspace_request(
    workspace: &agentplane_crds::Workspace,
    credentials: Option<agentplane_node_agent::model::GitCredentials>,
) -> agentplane_node_agent::model::WorkspaceRequest {
    agentplane_node_agent::model::WorkspaceRequest {
        git: workspace.git.as_ref().map(|git| agentplane_node_agent::model::GitSource {
            url: git.url.clone(),
            git_ref: git.git_ref.clone(),
            depth: git.depth,
            credentials,
        }),
        path: workspace.path.clone(),
    }
}

fn decision(reply: PermissionReply) -> PermissionDecision {
    match reply {
        PermissionReply::Once => PermissionDecision::Once,
        PermissionReply::Always => PermissionDecision::Always,
        PermissionReply::Reject => PermissionDecision::Reject,
    }
}

fn node_reply(decision: PermissionDecision) -> PermissionReply {
    match decision {
        PermissionDecision::Once => PermissionReply::Once,
        PermissionDecision::Always => PermissionReply::Always,
        PermissionDecision::Reject => PermissionReply::Reject,
    }
}

fn summary(input: &serde_json::Value) -> Option<String> {
    let text = match input {
        serde_json::Value::Null => return None,
        serde_json::Value::Object(map) if map.len() == 1 => match map.values().next() {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => input.to_string(),
        },
        _ => input.to_string(),
    };
    let mut short: String = text.chars().take(SUMMARY_CHARS).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    Some(short)
}

struct Step<'a> {
    session: &'a Session,
    status: SessionStatus,
    generation: Option<i64>,
}

impl Step<'_> {
    fn ready(&mut self, status: impl Into<Status>, reason: &str, message: impl Into<String>) {
        conditions::set(&mut self.status.conditions, READY, status, reason, message, self.generation);
    }

    fn done(self, requeue_after: Option<Duration>) -> Reconciled<SessionStatus> {
        Reconciled { status: self.status, requeue_after }
    }

    fn unreachable(mut self, e: &ClientError) -> Reconciled<SessionStatus> {
        self.status.phase.get_or_insert(SessionPhase::Pending);
        let sandbox = &self.session.spec.sandbox;
        self.ready(Status::Unknown, "NodeAgentUnreachable", format!("sandbox {sandbox:?}: {e}"));
        self.done(Some(RETRY_UNREACHABLE))
    }

    /// A call the node agent did not take: a limit of its (`limit`) is waited for with
    /// a back-off, anything else is an outage.
    fn refused(mut self, e: &ClientError, limit: Limit) -> Reconciled<SessionStatus> {
        if failure_reason(e) != LIMIT_EXCEEDED {
            return self.unreachable(e);
        }
        self.status.phase.get_or_insert(SessionPhase::Pending);
        // Waited since `Ready` turned false for it: recorded, so a restarted controller
        // goes on with the same back-off.
        let waited = conditions::get(&self.status.conditions, READY)
            .filter(|c| c.status == "False" && c.reason == LIMIT_EXCEEDED)
            .and_then(|c| conditions::now().0.duration_since(c.last_transition_time.0).try_into().ok())
            .unwrap_or_default();
        let detail = match e {
            ClientError::Problem(problem) => problem.detail.as_str(),
            _ => "",
        };
        let sandbox = &self.session.spec.sandbox;
        let message = format!("the node agent of sandbox {sandbox:?} is at its limit: {detail}. {}", limit.advice());
        self.ready(false, LIMIT_EXCEEDED, message);
        let uid = self.session.metadata.uid.as_deref().unwrap_or_default();
        self.done(Some(limit_retry(waited, uid)))
    }

    fn failed(mut self, reason: &str, e: &ClientError) -> Reconciled<SessionStatus> {
        self.status.phase = Some(SessionPhase::Failed);
        self.ready(false, reason, e.to_string());
        self.done(None)
    }

    /// `RepliesAccepted` False while some reply named no request, with their ids; gone
    /// when none did, so the usual session carries no condition about it.
    fn replies_condition(&mut self) {
        let refused = &self.status.refused_replies;
        if refused.is_empty() {
            self.status.conditions.retain(|c| c.type_ != REPLIES_ACCEPTED);
            return;
        }
        let message = format!(
            "spec.replies names {} that no request of this session had when it was read, so it is never applied \
             (answer the ids in status.pendingPermissions and status.pendingQuestions): {}",
            if refused.len() == 1 { "an id" } else { "ids" },
            refused.iter().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
        );
        conditions::set(
            &mut self.status.conditions,
            REPLIES_ACCEPTED,
            false,
            "ReplyNotPending",
            message,
            self.generation,
        );
    }

    /// The status as the node agent's session says.
    fn observe(&mut self, info: &SessionInfo) {
        let messages = self.session.spec.messages.len() as u64;
        let status = &mut self.status;
        status.phase = Some(phase_of(info.state));
        status.agent_session_id = info.agent_session_id.as_deref().map(|id| cut(id, MAX_NAME));
        status.delivered_messages = info.declared_messages_received.min(messages) as u32;
        status.api_messages = info.messages_received.saturating_sub(info.declared_messages_received) as u32;
        status.failed_turns = info.turns_failed.min(u32::MAX as u64) as u32;
        status.last_event_sequence = (info.last_sequence > 0).then_some(info.last_sequence);
        status.pending_permissions = info
            .pending_permissions
            .iter()
            .take(MAX_LISTED)
            .map(|p| PendingPermission {
                id: cut(&p.id, MAX_NAME),
                tool: cut(&p.tool, MAX_NAME),
                summary: summary(&p.input),
                options: p.options.iter().copied().map(decision).collect(),
            })
            .collect();
        status.pending_questions = info
            .pending_questions
            .iter()
            .take(MAX_LISTED)
            .map(|q| PendingQuestion {
                id: cut(&q.id, MAX_NAME),
                questions: q
                    .questions
                    .iter()
                    .take(MAX_LISTED)
                    .map(|q| Question {
                        question: cut(&q.question, MAX_TEXT),
                        header: q.header.as_deref().map(|h| cut(h, MAX_NAME)),
                        options: q.options.iter().take(MAX_LISTED).map(|o| cut(o, MAX_TEXT)).collect(),
                        multi_select: q.multi_select,
                    })
                    .collect(),
            })
            .collect();
        status.workspace = info.workspace.as_ref().filter(|w| w.url.is_some()).map(workspace_status);
        let usage = &info.usage;
        status.usage = (*usage != Default::default()).then_some(SessionUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: usage.cost_usd,
        });
        let (ready, reason, message) = match info.state {
            SessionState::Preparing => {
                (Status::False, "Preparing", "the workspace's git repository is being cloned".to_string())
            }
            SessionState::Installing => (Status::False, "Installing", "the agent's CLI is being installed".to_string()),
            SessionState::Starting => (Status::False, "Starting", "the agent is starting".to_string()),
            SessionState::Running => (Status::True, "Running", "a turn is under way".to_string()),
            SessionState::AwaitingInput => (
                Status::True,
                "AwaitingInput",
                "waiting for a reply in spec.replies (ids in status.pendingPermissions and status.pendingQuestions)"
                    .to_string(),
            ),
            SessionState::Idle if info.turn_error.is_some() => {
                (Status::True, "Idle", "waiting for a message; the last turn failed (see TurnSucceeded)".to_string())
            }
            SessionState::Idle => (Status::True, "Idle", "every message so far was answered".to_string()),
            SessionState::Ended => (Status::False, "Ended", "the session has ended".to_string()),
            SessionState::Failed => {
                // Failed before a commit was checked out: the clone, not the agent.
                let cloning = info.workspace.as_ref().is_some_and(|w| w.url.is_some() && w.commit.is_none());
                let reason = if cloning { "CloneFailed" } else { "AgentFailed" };
                (Status::False, reason, info.error.clone().unwrap_or_else(|| "the agent failed".to_string()))
            }
        };
        self.ready(ready, reason, message);
        // A failed turn is no failed session (the next message gets a turn of its own),
        // but it must not look like success: `TurnSucceeded` False says why, and `get`
        // shows its reason, until a turn succeeds.
        match &info.turn_error {
            Some(error) if !info.state.is_final() => conditions::set(
                &mut self.status.conditions,
                TURN_SUCCEEDED,
                false,
                "TurnFailed",
                format!("the last turn failed: {error}"),
                self.generation,
            ),
            _ => self.status.conditions.retain(|c| c.type_ != TURN_SUCCEEDED),
        }
    }
}

/// Whether a Session has something for its node agent: a message not delivered, a
/// reply not applied, an end not yet recorded, or a turn its node agent was stopped in
/// the middle of (a message delivered just as its sandbox was suspended).
fn has_work(session: &Session) -> bool {
    let (spec, none) = (&session.spec, SessionStatus::default());
    let status = session.status.as_ref().unwrap_or(&none);
    status.phase == Some(SessionPhase::Running)
        || spec.messages.len() > status.delivered_messages as usize
        || spec
            .replies
            .iter()
            .any(|r| !status.answered_replies.contains(&r.id) && !status.refused_replies.contains(&r.id))
        || (spec.ended && status.phase != Some(SessionPhase::Ended))
}

impl SessionReconciler {
    pub fn new(sandboxes: Arc<Sandboxes>) -> Self {
        SessionReconciler { sandboxes, conversations: None }
    }

    /// A reconciler that keeps each conversation in `conversations` after every turn
    /// and continues it from there in a sandbox that does not have it.
    pub fn keeping(sandboxes: Arc<Sandboxes>, conversations: Arc<Conversations>) -> Self {
        SessionReconciler { sandboxes, conversations: Some(conversations) }
    }

    /// Stages the conversation kept for Session `uid` in the node agent about to
    /// create its session `id`, which then continues it. An error is the node agent
    /// not answering: the reconcile ends there and asks again later (creating the
    /// session anew meanwhile would lose what was kept).
    async fn stage_kept(
        &self,
        step: &mut Step<'_>,
        client: &dyn NodeAgent,
        uid: &str,
        id: &str,
    ) -> std::result::Result<(), ClientError> {
        let Some(conversations) = &self.conversations else { return Ok(()) };
        let Some(tar) = conversations.kept_tar(uid).await else { return Ok(()) };
        let seen = step.status.last_event_sequence.unwrap_or(0);
        let generation = step.generation;
        let (status, reason, message) = match client.stage_conversation(id, tar, seen).await {
            Ok(staged) => {
                tracing::info!(session = %id, after = staged.last_sequence, "continuing the kept conversation in a sandbox that did not have it");
                (
                    Status::True,
                    "Continued",
                    format!(
                        "continued in this sandbox from the conversation kept outside the one before; events go on \
                         after {}",
                        staged.last_sequence
                    ),
                )
            }
            Err(e) if e.code() == Some(ProblemCode::SessionAlreadyExists) => return Ok(()),
            Err(e @ ClientError::Problem(_)) => {
                tracing::warn!(session = %id, error = %e, "the kept conversation was refused: starting anew");
                (
                    Status::False,
                    "NotContinued",
                    format!("the conversation kept outside the sandbox was refused there ({e}); it starts anew"),
                )
            }
            Err(e) => return Err(e),
        };
        conditions::set(&mut step.status.conditions, DURABLE, status, reason, message, generation);
        Ok(())
    }

    /// Keeps Session `uid`'s conversation outside its sandbox when a turn has ended
    /// since it was last kept. A failure says so in `Durable` and waits for the next
    /// turn (what was kept before stays).
    async fn keep(&self, step: &mut Step<'_>, client: &dyn NodeAgent, uid: &str, id: &str, info: &SessionInfo) {
        let Some(conversations) = &self.conversations else { return };
        let between_turns = matches!(info.state, SessionState::Idle | SessionState::Failed);
        if !between_turns || info.last_sequence == 0 || conversations.kept_through(uid) >= Some(info.last_sequence) {
            return;
        }
        let kept = match client.conversation(id).await {
            Ok(tar) => conversations.keep(uid, info.last_sequence, tar).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if kept.is_err() {
            // Not tried again before the next turn (what was kept before stays).
            conversations.attempted(uid, info.last_sequence);
        }
        let (status, reason, message) = match kept {
            Ok(()) => (
                Status::True,
                "Kept",
                format!(
                    "the conversation through event {} is kept in {}, outside the sandbox: a sandbox that replaces \
                     this one continues it",
                    info.last_sequence,
                    conversations.dir().display()
                ),
            ),
            Err(error) => {
                tracing::warn!(session = %id, %error, "cannot keep the conversation outside the sandbox");
                (
                    Status::False,
                    "KeepFailed",
                    format!("the conversation could not be kept outside the sandbox: {error}"),
                )
            }
        };
        conditions::set(&mut step.status.conditions, DURABLE, status, reason, message, step.generation);
    }

    /// The client of the sandbox a Session runs on, and its node-agent session id.
    pub fn target(&self, session: &Session) -> Option<(Arc<dyn NodeAgent>, String)> {
        let uid = session.metadata.uid.as_deref()?;
        let sandbox = self.sandboxes.for_resource(&session.metadata, &session.spec.sandbox).ok()?;
        Some((Arc::clone(&sandbox.node), node_session_id(uid)))
    }

    pub async fn reconcile(&self, input: SessionInput<'_>) -> Reconciled<SessionStatus> {
        let session = input.session;
        let spec = &session.spec;
        let generation = session.metadata.generation;
        let mut step = Step { session, status: session.status.clone().unwrap_or_default(), generation };
        step.status.observed_generation = generation;
        conditions::set_valid(&mut step.status.conditions, input.spec_problem.as_deref(), generation);
        let Some(uid) = session.metadata.uid.as_deref() else {
            step.status.phase.get_or_insert(SessionPhase::Pending);
            step.ready(false, "NoUid", "the store gave this resource no uid");
            return step.done(None);
        };
        if let Some(template) = &spec.sandbox_template {
            // Not placed by its store: never run anywhere else instead, it asked for a
            // sandbox of its own.
            step.status.phase.get_or_insert(SessionPhase::Pending);
            step.ready(false, "SandboxNotClaimed", crate::sandboxes::template_not_placed(template));
            return step.done(None);
        }
        let sandbox = match self.sandboxes.for_resource(&session.metadata, &spec.sandbox) {
            Ok(sandbox) => sandbox,
            Err(e) => {
                // A suspended sandbox is woken by work for it (when it sleeps for being
                // idle); the status until then is what it was, with why nothing moves.
                if matches!(e, Error::SandboxSuspended { .. }) && has_work(session) {
                    self.sandboxes.wake(&self.sandboxes.key(session.metadata.namespace.as_deref(), &spec.sandbox));
                }
                step.status.phase.get_or_insert(SessionPhase::Pending);
                step.ready(false, e.reason(), e.to_string());
                return step.done(Some(RETRY_LATER));
            }
        };
        let client = sandbox.node.as_ref();
        let id = node_session_id(uid);
        // What people read in logs: the resource's name; the node-agent id beside it.
        let resource = format!(
            "{}/{}",
            session.metadata.namespace.as_deref().unwrap_or("default"),
            session.metadata.name.as_deref().unwrap_or_default()
        );
        step.status.events_url = Some(client.session_events_url(&id).to_string());
        let observed = match client.get_session(&id).await {
            Ok(info) => Some(info),
            Err(e) if not_found(&e) => None,
            Err(e) => return step.unreachable(&e),
        };

        if spec.ended {
            let info = match observed {
                Some(info) if !info.state.is_final() => match client.end_session(&id).await {
                    Ok(info) => Some(info),
                    Err(e) if not_found(&e) => None,
                    Err(e) => return step.unreachable(&e),
                },
                other => other,
            };
            if let Some(info) = &info {
                step.observe(info);
            }
            step.status.phase = Some(SessionPhase::Ended);
            step.status.pending_permissions.clear();
            step.status.pending_questions.clear();
            step.ready(false, "Ended", "ended, as spec.ended asks");
            return step.done(None);
        }

        let mut info = match observed {
            Some(info) => info,
            None => {
                let env = match &input.env {
                    Ok(env) => env.clone(),
                    Err(problem) => {
                        step.status.phase.get_or_insert(SessionPhase::Pending);
                        step.ready(false, "EnvNotResolved", problem.clone());
                        return step.done(Some(RETRY_LATER));
                    }
                };
                let mcp_servers = match input.mcp_servers {
                    Ok(servers) => servers,
                    Err(problem) => {
                        step.status.phase.get_or_insert(SessionPhase::Pending);
                        step.ready(false, "McpServersNotResolved", problem);
                        return step.done(Some(RETRY_LATER));
                    }
                };
                let git_credentials = match input.git_credentials {
                    Ok(credentials) => credentials,
                    Err(problem) => {
                        step.status.phase.get_or_insert(SessionPhase::Pending);
                        step.ready(false, "CredentialsNotResolved", problem);
                        return step.done(Some(RETRY_LATER));
                    }
                };
                let agent = serde_json::to_value(spec.agent)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                // A managed sandbox sees the agents directory read-only: the CLI is
                // installed into it from outside first (a no-op when it is there).
                if let Some(installer) = &sandbox.installer
                    && spec.agent != agentplane_crds::AgentKind::Mock
                {
                    let request = agentplane_node_agent::model::InstallRequest {
                        version: spec.agent_version.clone(),
                        reinstall: false,
                    };
                    if let Err(e) = installer.install_agent(&agent, &request).await {
                        step.status.phase = Some(SessionPhase::Pending);
                        step.ready(false, "InstallFailed", format!("installing {agent} for the sandbox: {e}"));
                        return step.done(Some(RETRY_LATER));
                    }
                }
                let request = CreateSessionRequest {
                    agent,
                    agent_version: spec.agent_version.clone(),
                    agent_mode: spec.agent_mode.clone(),
                    permission_mode: Some(match spec.permission_mode {
                        PermissionMode::Default => NodePermissionMode::Default,
                        PermissionMode::Plan => NodePermissionMode::Plan,
                        PermissionMode::Bypass => NodePermissionMode::Bypass,
                    }),
                    model: spec.model.clone(),
                    variant: spec.variant.clone(),
                    working_dir: spec.working_dir.clone(),
                    env,
                    // The node agent's log lines name the resource, not only its uid.
                    label: Some(format!("Session/{resource}")),
                    workspace: spec.workspace.as_ref().map(|w| workspace_request(w, git_credentials)),
                    mcp_servers,
                };
                if let Err(e) = self.stage_kept(&mut step, client, uid, &id).await {
                    return step.unreachable(&e);
                }
                let created = client.create_session(&id, &request).await;
                if created.is_ok() {
                    step.status.env_digest = Some(env_digest(uid, &request.env));
                }
                match created {
                    Ok(info) => info,
                    // Created by an earlier pass whose answer was lost: adopt it.
                    Err(e) if e.code() == Some(ProblemCode::SessionAlreadyExists) => {
                        match client.get_session(&id).await {
                            Ok(info) => info,
                            Err(e) => return step.unreachable(&e),
                        }
                    }
                    Err(e) => match e.code() {
                        Some(
                            code @ (ProblemCode::UnsupportedAgent
                            | ProblemCode::ModeNotSupported
                            | ProblemCode::McpNotSupported
                            | ProblemCode::InvalidRequest
                            | ProblemCode::AgentNotInstalled
                            | ProblemCode::InstallFailed),
                        ) => {
                            let reason = match code {
                                ProblemCode::UnsupportedAgent => "UnsupportedAgent",
                                ProblemCode::ModeNotSupported => "ModeNotSupported",
                                ProblemCode::McpNotSupported => "McpNotSupported",
                                ProblemCode::AgentNotInstalled => "AgentNotInstalled",
                                ProblemCode::InstallFailed => "InstallFailed",
                                _ => "InvalidRequest",
                            };
                            return step.failed(reason, &e);
                        }
                        _ => return step.refused(&e, Limit::Sessions),
                    },
                }
            }
        };

        // The environment as the store resolved it now (an env file edited since the
        // session started, say), when it resolved, and its digest.
        let env = input.env.as_ref().ok().map(|env| (env_digest(uid, env), env));
        // A restart asked for with `agentplane restart session/NAME` (see `restart`),
        // honoured once: the agent starts again where its conversation was (a live
        // session's between turns, a failed session's at once; the node agent resumes
        // the agent's own session), with the environment as it is now. The request is
        // recorded as honoured whatever the state, so it never applies to a later failure.
        if let Some(at) = crate::restart::requested(&session.metadata)
            && step.status.restarted_at.as_deref() != Some(at)
        {
            if info.state != SessionState::Ended {
                tracing::info!(%resource, session = %id, requested = %at, state = ?info.state, "restarting the session's agent");
                info = match client.restart_session(&id, env.as_ref().map(|(_, env)| (*env).clone())).await {
                    Ok(info) => info,
                    // Restarted meanwhile by another pass: what it is now is what counts.
                    Err(e) if e.code() == Some(ProblemCode::Conflict) => match client.get_session(&id).await {
                        Ok(info) => info,
                        Err(e) => return step.unreachable(&e),
                    },
                    // Restarting counts against --max-sessions as a new session does.
                    Err(e) => return step.refused(&e, Limit::Sessions),
                };
                if let Some((digest, _)) = &env {
                    step.status.env_digest = Some(digest.clone());
                }
            }
            step.status.restarted_at = Some(at.to_string());
        }

        // An env file is desired state: when what it resolves to changed, the agent is
        // restarted with it between turns (its next turn sees it), resuming its
        // conversation. A status from before the digest only records it.
        if let Some((digest, env)) = &env
            && !info.state.is_final()
            && step.status.env_digest.as_ref() != Some(digest)
        {
            if step.status.env_digest.is_some() {
                tracing::info!(%resource, session = %id, "the environment changed: restarting the agent with it");
                info = match client.restart_session(&id, Some((*env).clone())).await {
                    Ok(info) => info,
                    Err(e) => return step.refused(&e, Limit::Sessions),
                };
                step.status.env_changed_at = Some(conditions::now());
            }
            step.status.env_digest = Some(digest.clone());
        }

        if !info.state.is_final() {
            // Messages not yet accepted, in order; the node agent queues them behind a turn.
            // Each by its index, so a message given through the API meanwhile is never
            // taken for one of these.
            let accepted = info.declared_messages_received as usize;
            for (index, message) in spec.messages.iter().enumerate().skip(accepted) {
                match client.send_message(&id, message, Some(index as u64)).await {
                    Ok(after) => info = after,
                    Err(e) => return step.refused(&e, Limit::QueuedMessages),
                }
            }
            // Each reply is settled once: given to the request it names while that is
            // pending, or refused for good when its id names nothing this session has
            // asked. A refused reply is never applied to a request that arrives later
            // with its id: it was not written for that request.
            for reply in &spec.replies {
                let status = &step.status;
                if status.answered_replies.contains(&reply.id)
                    || status.refused_replies.contains(&reply.id)
                    || status.answered_through_api.contains(&reply.id)
                {
                    continue;
                }
                let permission = info.pending_permissions.iter().any(|p| p.id == reply.id);
                if permission && reply.decision.is_none() {
                    step.ready(
                        false,
                        "InvalidReply",
                        format!("reply {:?} answers a permission request: give `decision`", reply.id),
                    );
                    continue;
                }
                // Not pending in what was read a moment ago: the node agent still says
                // whether it was answered before (a restart of the controller, another
                // client) or never asked; asking it is the same idempotent call.
                let question = info.pending_questions.iter().any(|q| q.id == reply.id);
                let result = match reply.decision {
                    Some(decision) if !question => client.reply_permission(&id, &reply.id, node_reply(decision)).await,
                    _ if reply.reject => client.reject_question(&id, &reply.id).await,
                    _ => client.reply_question(&id, &reply.id, reply.answers.clone()).await,
                };
                match result {
                    Ok(after) => {
                        info = after;
                        step.status.answered_replies.push(reply.id.clone());
                    }
                    Err(e)
                        if matches!(
                            e.code(),
                            Some(ProblemCode::PermissionNotFound | ProblemCode::QuestionNotFound)
                        ) =>
                    {
                        tracing::warn!(%resource, session = %id, reply = %reply.id, "reply names no request of this session: refused for good");
                        step.status.refused_replies.push(reply.id.clone());
                    }
                    // Answered before, differently (through the API: this reply would
                    // have answered as it did before): settled, the request is gone,
                    // and this reply was not the one given.
                    Err(e) if e.code() == Some(ProblemCode::Conflict) => {
                        tracing::warn!(%resource, session = %id, reply = %reply.id, error = %e, "reply refused");
                        step.status.answered_through_api.push(reply.id.clone());
                    }
                    // Does not fit the request (an option it does not offer): left to be
                    // corrected in place, and tried again then.
                    Err(e) if e.code() == Some(ProblemCode::InvalidRequest) => {
                        tracing::warn!(%resource, session = %id, reply = %reply.id, error = %e, "reply refused");
                    }
                    Err(e) => return step.unreachable(&e),
                }
            }
        }
        step.observe(&info);
        step.replies_condition();
        self.keep(&mut step, client, uid, &id, &info).await;
        step.done(None)
    }

    /// Ends the resource's session. Idempotent; nothing to end is success.
    pub async fn cleanup(&self, session: &Session) -> Result<()> {
        let Some(uid) = session.metadata.uid.as_deref() else { return Ok(()) };
        if let Some(conversations) = &self.conversations {
            conversations.forget(uid).await;
        }
        let sandbox = match self.sandboxes.for_resource(&session.metadata, &session.spec.sandbox) {
            Ok(sandbox) => sandbox,
            Err(Error::SandboxNotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        match sandbox.node.end_session(&node_session_id(uid)).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(source) => Err(Error::NodeAgent { sandbox: session.spec.sandbox.clone(), source }),
        }
    }
}

/// SHA-256 over the resource's uid and each variable, in order: says whether the
/// environment changed without keeping a value (the uid keeps equal environments of
/// two Sessions from having equal digests).
fn env_digest(uid: &str, env: &BTreeMap<String, String>) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(uid.as_bytes());
    for (name, value) in env {
        for part in [name, value] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
    }
    format!("sha256:{:x}", hash.finalize())
}

/// Follows a node-agent session's events from `last` and calls `notify` whenever
/// something other than a text delta happens (or a gap says something was missed),
/// reconnecting with back-off. Ends when the session ends or is gone, or when `notify`
/// answers false (nobody listens any more).
pub async fn follow_events<F, Fut>(node: Arc<dyn NodeAgent>, id: String, mut last: Option<u64>, notify: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    use agentplane_node_agent::client::SessionStreamItem;
    use agentplane_node_agent::universal::EventType;
    use futures_util::StreamExt;
    let mut delay = Duration::from_millis(100);
    loop {
        match node.session_events(&id, last).await {
            Ok(mut events) => {
                delay = Duration::from_millis(100);
                while let Some(item) = events.next().await {
                    let kind = match item {
                        Ok(SessionStreamItem::Event(event)) => {
                            last = Some(event.sequence);
                            Some(event.kind())
                        }
                        Ok(SessionStreamItem::Gap(_)) => None,
                        Err(_) => break,
                    };
                    if kind != Some(EventType::ItemDelta) && !notify().await {
                        return;
                    }
                    if kind == Some(EventType::SessionEnded) {
                        return;
                    }
                }
            }
            Err(e) if e.code() == Some(ProblemCode::SessionNotFound) => return,
            Err(e) => tracing::debug!(session = %id, error = %e, "session events unavailable"),
        }
        if !notify().await {
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentplane_node_agent::error::Error as NodeError;

    #[test]
    fn a_limit_the_node_agent_enforces_is_limit_exceeded_by_its_code_and_the_rest_unreachable() {
        // The problem exactly as the node agent's error makes it.
        let limit = ClientError::Problem(NodeError::LimitExceeded("3 sessions are live".into()).to_problem());
        assert_eq!(failure_reason(&limit), LIMIT_EXCEEDED);
        // The code decides, not the words.
        let mut reworded = NodeError::LimitExceeded("x".into()).to_problem();
        reworded.title = "Too many".into();
        reworded.detail = "something else".into();
        assert_eq!(failure_reason(&ClientError::Problem(reworded)), LIMIT_EXCEEDED);
        let mut worded = NodeError::Conflict("Limit exceeded".into()).to_problem();
        worded.title = "Limit exceeded".into();
        assert_eq!(failure_reason(&ClientError::Problem(worded)), "NodeAgentUnreachable");
        let down = ClientError::Unexpected { url: "http://x".into(), status: 502, body: "Limit exceeded".into() };
        assert_eq!(failure_reason(&down), "NodeAgentUnreachable");
    }

    #[test]
    fn asking_again_for_a_slot_backs_off_doubling_to_a_cap_and_spreads_by_uid() {
        let uid = "0b6f3c1e-1111-4222-8333-444455556666";
        let at = |secs| limit_retry(Duration::from_secs(secs), uid);
        let spread = at(0).as_secs_f64() / LIMIT_RETRY_MIN.as_secs_f64();
        assert!((1.0..=1.25).contains(&spread), "{spread}");
        // Each wait is as long as all the waits before: the total doubles.
        let mut waited = Duration::ZERO;
        let mut waits = Vec::new();
        for _ in 0..10 {
            let wait = limit_retry(waited, uid);
            waits.push(wait);
            waited += wait;
        }
        assert!(waits.windows(2).all(|w| w[1] >= w[0]), "{waits:?}");
        // Past the floor, each wait is at least twice the one before, up to the cap.
        assert!(waits[2..6].windows(2).all(|w| w[1] >= 2 * w[0]), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= LIMIT_RETRY_MAX + LIMIT_RETRY_MAX / 4), "{waits:?}");
        assert_eq!(at(10_000), at(1_000_000), "capped");
        assert_eq!(limit_retry(Duration::from_secs(7), uid), limit_retry(Duration::from_secs(7), uid));
        // Many refused at once are spread over a quarter of the wait, not asked at one instant.
        let spreads: std::collections::BTreeSet<Duration> =
            (0..100).map(|n| limit_retry(Duration::ZERO, &format!("uid-{n}"))).collect();
        assert!(spreads.len() > 10, "{spreads:?}");
    }
}

#[cfg(test)]
mod scenarios;
