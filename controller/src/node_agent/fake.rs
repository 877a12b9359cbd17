//! A node agent in memory, for the reconcilers' scenario tests (as controller-rs's
//! `ApiServerVerifier` plays a scenario against its reconciler): it keeps processes and
//! sessions as the real one does, records every call, and lets a test play what a node
//! agent does on its own: a process exiting, the node agent restarting (losing what it
//! ran), becoming unreachable, a session's turn ending or asking a question.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use agentplane_node_agent::client::{ClientError, SessionStreamItem, SseMessage};
use agentplane_node_agent::model::{
    ConversationStaged, CreateProcessRequest, CreateSessionRequest, DeleteProcessQuery, Health, InstallRequest,
    InstallResult, PermissionMode, ProcessInfo, ProcessStatus, PtySize, SessionInfo, SessionState,
};
use agentplane_node_agent::universal::{PermissionReply, PermissionRequest, Question, QuestionRequest};
use agentplane_node_agent::{Problem, ProblemCode};
use reqwest::Url;
use time::OffsetDateTime;

use super::{Call, NodeAgent, Stream};

/// What the fake holds.
#[derive(Debug, Default)]
struct State {
    processes: BTreeMap<String, ProcessInfo>,
    sessions: BTreeMap<String, SessionInfo>,
    /// Every message each session received, in order.
    messages: BTreeMap<String, Vec<String>>,
    /// Every reply each session received: (request id, how).
    replies: BTreeMap<String, Vec<(String, String)>>,
    /// Every restart of each session's agent: the environment it was given, if any.
    restarts: BTreeMap<String, Vec<Option<BTreeMap<String, String>>>>,
    /// Every call, as `verb id`.
    calls: Vec<String>,
    unreachable: bool,
    next_pid: u32,
    /// Conversations staged for sessions not created yet (see `stage_conversation`).
    staged: BTreeMap<String, SessionInfo>,
}

#[derive(Debug, Default)]
pub struct FakeNodeAgent {
    state: Mutex<State>,
}

fn problem(code: ProblemCode, detail: impl Into<String>) -> ClientError {
    ClientError::Problem(Problem {
        kind: format!("{}{}", agentplane_node_agent::error::PROBLEM_TYPE_PREFIX, code.as_str()),
        title: code.as_str().into(),
        status: 400,
        detail: detail.into(),
    })
}

fn unreachable() -> ClientError {
    ClientError::Unexpected { url: "http://fake".into(), status: 502, body: "the fake is unreachable".into() }
}

impl FakeNodeAgent {
    pub fn new() -> Arc<FakeNodeAgent> {
        Arc::new(FakeNodeAgent::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a call; answers `Err` while unreachable.
    fn call(&self, what: &str, id: &str) -> Result<MutexGuard<'_, State>, ClientError> {
        let mut state = self.lock();
        state.calls.push(format!("{what} {id}"));
        if state.unreachable { Err(unreachable()) } else { Ok(state) }
    }

    /// The calls made so far, as `verb id`, and forgets them.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().calls)
    }

    /// The calls made so far whose verb is `verb`.
    pub fn count(&self, verb: &str) -> usize {
        self.lock().calls.iter().filter(|c| c.split(' ').next() == Some(verb)).count()
    }

    pub fn set_unreachable(&self, unreachable: bool) {
        self.lock().unreachable = unreachable;
    }

    /// The sandbox was replaced by a new one: its node agent knows no session.
    pub fn replace(&self) {
        let mut state = self.lock();
        state.processes.clear();
        state.sessions.clear();
        state.staged.clear();
    }

    /// The node agent restarted: it keeps no process and loses its sessions' runners
    /// (a session is kept on disk and comes back, idle).
    pub fn restart(&self) {
        let mut state = self.lock();
        state.processes.clear();
        for session in state.sessions.values_mut() {
            if !session.state.is_final() {
                session.state = SessionState::Idle;
            }
        }
    }

    pub fn process(&self, id: &str) -> Option<ProcessInfo> {
        self.lock().processes.get(id).cloned()
    }

    /// The process exits with `code`.
    pub fn exit(&self, id: &str, code: i32) {
        if let Some(p) = self.lock().processes.get_mut(id) {
            p.status = ProcessStatus::Exited;
            p.exit_code = Some(code);
            p.exited_at = Some(OffsetDateTime::now_utc());
        }
    }

    /// When the exited process exited.
    pub fn exited_at(&self, id: &str, at: OffsetDateTime) {
        if let Some(p) = self.lock().processes.get_mut(id) {
            p.exited_at = Some(at);
        }
    }

    pub fn session(&self, id: &str) -> Option<SessionInfo> {
        self.lock().sessions.get(id).cloned()
    }

    pub fn messages(&self, id: &str) -> Vec<String> {
        self.lock().messages.get(id).cloned().unwrap_or_default()
    }

    pub fn restarts(&self, id: &str) -> Vec<Option<BTreeMap<String, String>>> {
        self.lock().restarts.get(id).cloned().unwrap_or_default()
    }

    pub fn replies(&self, id: &str) -> Vec<(String, String)> {
        self.lock().replies.get(id).cloned().unwrap_or_default()
    }

    /// The session's turn ends: idle, every message answered.
    pub fn finish_turn(&self, id: &str) {
        if let Some(s) = self.lock().sessions.get_mut(id) {
            s.state = SessionState::Idle;
            s.turns_completed = s.messages_received;
            s.turn_error = None;
            s.last_sequence += 1;
        }
    }

    /// The session's turn ends failed with `error`: idle, the next message gets a turn.
    pub fn fail_turn(&self, id: &str, error: &str) {
        if let Some(s) = self.lock().sessions.get_mut(id) {
            s.state = SessionState::Idle;
            s.turns_completed = s.messages_received;
            s.turns_failed += 1;
            s.turn_error = Some(error.to_string());
            s.last_sequence += 1;
        }
    }

    /// A message given through the API (a person in the inspector), not declared.
    pub fn api_message(&self, id: &str, message: &str) {
        let mut state = self.lock();
        if let Some(s) = state.sessions.get_mut(id) {
            s.messages_received += 1;
            s.state = SessionState::Running;
            state.messages.entry(id.to_string()).or_default().push(message.to_string());
        }
    }

    /// A permission request answered through the API (a person clicking "Allow once").
    pub fn api_reply_permission(&self, id: &str, request_id: &str, reply: PermissionReply) {
        let mut state = self.lock();
        if let Some(s) = state.sessions.get_mut(id) {
            s.pending_permissions.retain(|p| p.id != request_id);
            s.state = SessionState::Running;
            state.replies.entry(id.to_string()).or_default().push((request_id.to_string(), format!("{reply:?}")));
        }
    }

    /// The session asks for permission to run a tool, under `request_id`.
    pub fn ask_permission(&self, id: &str, request_id: &str) {
        if let Some(s) = self.lock().sessions.get_mut(id) {
            s.state = SessionState::AwaitingInput;
            s.pending_permissions.push(PermissionRequest {
                id: request_id.into(),
                tool: "Bash".into(),
                input: serde_json::json!({"command": "touch x"}),
                options: vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject],
                item_id: None,
            });
        }
    }

    /// The session asks a question, under `request_id`.
    pub fn ask_question(&self, id: &str, request_id: &str) {
        if let Some(s) = self.lock().sessions.get_mut(id) {
            s.state = SessionState::AwaitingInput;
            s.pending_questions.push(QuestionRequest {
                id: request_id.into(),
                questions: vec![Question {
                    question: "which?".into(),
                    header: None,
                    options: vec!["a".into(), "b".into()],
                    multi_select: false,
                }],
            });
        }
    }
}

/// A process as the fake reports it.
pub fn process_info(request: &CreateProcessRequest, pid: u32) -> ProcessInfo {
    ProcessInfo {
        id: request.id.clone().unwrap_or_default(),
        tag: request.tag.clone(),
        label: request.label.clone(),
        annotations: request.annotations.clone(),
        command: request.command.clone(),
        args: request.args.clone(),
        cwd: request.cwd.clone().unwrap_or_else(|| "/".into()),
        pid,
        pty: request.pty.is_some(),
        size: request.pty,
        stdin: request.stdin,
        status: ProcessStatus::Running,
        exit_code: None,
        signal: None,
        created_at: OffsetDateTime::now_utc(),
        exited_at: None,
        output_offset: 0,
        stderr_offset: None,
        session_id: request.session_id.clone(),
    }
}

fn session_info(id: &str, request: &CreateSessionRequest) -> SessionInfo {
    SessionInfo {
        id: id.into(),
        label: request.label.clone(),
        agent: request.agent.clone(),
        agent_version: request.agent_version.clone(),
        agent_mode: request.agent_mode.clone(),
        permission_mode: request.permission_mode.unwrap_or(PermissionMode::Default),
        model: request.model.clone(),
        variant: request.variant.clone(),
        working_dir: request.working_dir.clone(),
        state: SessionState::Idle,
        agent_session_id: Some(format!("agent-{id}")),
        created_at: OffsetDateTime::now_utc(),
        ended_at: None,
        messages_received: 0,
        declared_messages_received: 0,
        turns_completed: 0,
        turns_failed: 0,
        turn_error: None,
        usage: Default::default(),
        last_sequence: 1,
        pending_permissions: Vec::new(),
        pending_questions: Vec::new(),
        error: None,
        workspace: None,
    }
}

impl NodeAgent for FakeNodeAgent {
    fn health(&self) -> Call<'_, Health> {
        let answer = self.call("health", "").map(|_| Health { status: "ok".into(), version: "fake".into() });
        Box::pin(async move { answer })
    }

    fn create_process<'a>(&'a self, request: &'a CreateProcessRequest) -> Call<'a, ProcessInfo> {
        let id = request.id.clone().unwrap_or_default();
        let answer = self.call("create_process", &id).and_then(|mut state| {
            if state.processes.contains_key(&id) {
                return Err(problem(ProblemCode::ProcessAlreadyExists, id.clone()));
            }
            state.next_pid += 1;
            let info = process_info(request, 1000 + state.next_pid);
            state.processes.insert(id.clone(), info.clone());
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn get_process<'a>(&'a self, id: &'a str) -> Call<'a, ProcessInfo> {
        let answer = self.call("get_process", id).and_then(|state| {
            state.processes.get(id).cloned().ok_or_else(|| problem(ProblemCode::ProcessNotFound, id))
        });
        Box::pin(async move { answer })
    }

    fn list_processes(&self) -> Call<'_, Vec<ProcessInfo>> {
        let answer = self.call("list_processes", "").map(|state| state.processes.values().cloned().collect());
        Box::pin(async move { answer })
    }

    fn delete_process<'a>(&'a self, id: &'a str, query: &'a DeleteProcessQuery) -> Call<'a, ProcessInfo> {
        let answer = self.call("delete_process", id).and_then(|mut state| {
            let mut info = state.processes.get(id).cloned().ok_or_else(|| problem(ProblemCode::ProcessNotFound, id))?;
            if info.status == ProcessStatus::Running {
                info.status = ProcessStatus::Exited;
                info.signal = Some(query.signal.clone().unwrap_or_else(|| "SIGTERM".into()));
                info.exited_at = Some(OffsetDateTime::now_utc());
            }
            if query.purge {
                state.processes.remove(id);
            } else {
                state.processes.insert(id.to_string(), info.clone());
            }
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn resize<'a>(&'a self, id: &'a str, size: PtySize) -> Call<'a, ProcessInfo> {
        let answer = self.call("resize", id).and_then(|mut state| {
            let info = state.processes.get_mut(id).ok_or_else(|| problem(ProblemCode::ProcessNotFound, id))?;
            info.size = Some(size);
            Ok(info.clone())
        });
        Box::pin(async move { answer })
    }

    fn connect_url(&self, id: &str) -> Url {
        Url::parse(&format!("ws://fake/v1/processes/{id}/connect")).expect("a valid URL")
    }

    fn lifecycle_events(&self, _last_event_id: Option<u64>) -> Call<'_, Stream<SseMessage>> {
        Box::pin(async { Ok(Box::pin(futures_util::stream::pending()) as Stream<SseMessage>) })
    }

    fn create_session<'a>(&'a self, id: &'a str, request: &'a CreateSessionRequest) -> Call<'a, SessionInfo> {
        let answer = self.call("create_session", id).and_then(|mut state| {
            if state.sessions.contains_key(id) {
                return Err(problem(ProblemCode::SessionAlreadyExists, id));
            }
            // A conversation staged for it goes on: its counts and events, this request's settings.
            let info = match state.staged.remove(id) {
                Some(earlier) => SessionInfo { state: SessionState::Idle, ..earlier },
                None => session_info(id, request),
            };
            state.sessions.insert(id.to_string(), info.clone());
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn get_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo> {
        let answer = self
            .call("get_session", id)
            .and_then(|state| state.sessions.get(id).cloned().ok_or_else(|| problem(ProblemCode::SessionNotFound, id)));
        Box::pin(async move { answer })
    }

    fn end_session<'a>(&'a self, id: &'a str) -> Call<'a, SessionInfo> {
        let answer = self.call("end_session", id).and_then(|mut state| {
            let info = state.sessions.get_mut(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            info.state = SessionState::Ended;
            info.ended_at = Some(OffsetDateTime::now_utc());
            Ok(info.clone())
        });
        Box::pin(async move { answer })
    }

    fn restart_session<'a>(
        &'a self,
        id: &'a str,
        env: Option<std::collections::BTreeMap<String, String>>,
    ) -> Call<'a, SessionInfo> {
        let answer = self.call("restart_session", id).and_then(|mut state| {
            let info = state.sessions.get_mut(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            if info.state == SessionState::Ended {
                return Err(problem(ProblemCode::Conflict, "ended"));
            }
            if info.state == SessionState::Failed {
                info.state = SessionState::Idle;
            }
            let info = info.clone();
            state.restarts.entry(id.to_string()).or_default().push(env);
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn send_message<'a>(&'a self, id: &'a str, message: &'a str, declared: Option<u64>) -> Call<'a, SessionInfo> {
        let answer = self.call("send_message", id).and_then(|mut state| {
            let info = state.sessions.get_mut(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            // As the node agent takes a declared message: once, in order, by its index.
            match declared {
                Some(index) if index < info.declared_messages_received => return Ok(info.clone()),
                Some(index) if index > info.declared_messages_received => {
                    return Err(problem(ProblemCode::Conflict, "out of order"));
                }
                _ => {}
            }
            if info.state.is_final() {
                return Err(problem(ProblemCode::Conflict, "ended"));
            }
            info.messages_received += 1;
            info.declared_messages_received += u64::from(declared.is_some());
            info.state = SessionState::Running;
            let info = info.clone();
            state.messages.entry(id.to_string()).or_default().push(message.to_string());
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn reply_permission<'a>(
        &'a self,
        id: &'a str,
        permission_id: &'a str,
        reply: PermissionReply,
    ) -> Call<'a, SessionInfo> {
        let answer = self.call("reply_permission", id).and_then(|mut state| {
            // Answered before: the same answer again changes nothing, another is a
            // conflict, as on the node agent.
            let given = format!("{reply:?}");
            let earlier = state.replies.get(id).and_then(|r| r.iter().find(|(rid, _)| rid == permission_id).cloned());
            let info = state.sessions.get_mut(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            match earlier {
                Some((_, earlier)) if earlier == given => return Ok(info.clone()),
                Some(_) => return Err(problem(ProblemCode::Conflict, "already answered")),
                None => {}
            }
            let before = info.pending_permissions.len();
            info.pending_permissions.retain(|p| p.id != permission_id);
            if info.pending_permissions.len() == before {
                return Err(problem(ProblemCode::PermissionNotFound, permission_id));
            }
            info.state = SessionState::Running;
            let info = info.clone();
            state.replies.entry(id.to_string()).or_default().push((permission_id.to_string(), format!("{reply:?}")));
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn reply_question<'a>(
        &'a self,
        id: &'a str,
        question_id: &'a str,
        answers: Vec<Vec<String>>,
    ) -> Call<'a, SessionInfo> {
        let answer = self.call("reply_question", id).and_then(|mut state| {
            let info = state.sessions.get_mut(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            let before = info.pending_questions.len();
            info.pending_questions.retain(|q| q.id != question_id);
            if info.pending_questions.len() == before {
                return Err(problem(ProblemCode::QuestionNotFound, question_id));
            }
            info.state = SessionState::Running;
            let info = info.clone();
            state.replies.entry(id.to_string()).or_default().push((question_id.to_string(), format!("{answers:?}")));
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn reject_question<'a>(&'a self, id: &'a str, question_id: &'a str) -> Call<'a, SessionInfo> {
        let answer = self.call("reject_question", id).and_then(|mut state| {
            let info = state.sessions.get_mut(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            let before = info.pending_questions.len();
            info.pending_questions.retain(|q| q.id != question_id);
            if info.pending_questions.len() == before {
                return Err(problem(ProblemCode::QuestionNotFound, question_id));
            }
            let info = info.clone();
            state.replies.entry(id.to_string()).or_default().push((question_id.to_string(), "rejected".into()));
            Ok(info)
        });
        Box::pin(async move { answer })
    }

    fn session_events_url(&self, id: &str) -> Url {
        Url::parse(&format!("http://fake/v1/sessions/{id}/events/sse")).expect("a valid URL")
    }

    fn session_events(&self, _id: &str, _last_event_id: Option<u64>) -> Call<'_, Stream<SessionStreamItem>> {
        Box::pin(async { Ok(Box::pin(futures_util::stream::pending()) as Stream<SessionStreamItem>) })
    }

    /// Its "tar" is the session as it is, in JSON.
    fn conversation<'a>(&'a self, id: &'a str) -> Call<'a, Vec<u8>> {
        let answer = self.call("conversation", id).and_then(|state| {
            let info = state.sessions.get(id).ok_or_else(|| problem(ProblemCode::SessionNotFound, id))?;
            Ok(serde_json::to_vec(info).expect("serializes"))
        });
        Box::pin(async move { answer })
    }

    fn stage_conversation<'a>(&'a self, id: &'a str, tar: Vec<u8>, after: u64) -> Call<'a, ConversationStaged> {
        let answer = self.call("stage_conversation", id).and_then(|mut state| {
            if state.sessions.contains_key(id) {
                return Err(problem(ProblemCode::SessionAlreadyExists, id));
            }
            let mut info: SessionInfo =
                serde_json::from_slice(&tar).map_err(|e| problem(ProblemCode::InvalidRequest, e.to_string()))?;
            info.last_sequence = info.last_sequence.max(after);
            let staged = ConversationStaged { bytes: tar.len() as u64, last_sequence: info.last_sequence };
            state.staged.insert(id.to_string(), info);
            Ok(staged)
        });
        Box::pin(async move { answer })
    }

    fn install_agent<'a>(&'a self, agent: &'a str, _request: &'a InstallRequest) -> Call<'a, InstallResult> {
        let answer = self.call("install_agent", agent).map(|_| InstallResult {
            agent: agent.to_string(),
            version: "1.0.0".into(),
            path: format!("/fake/{agent}"),
            already_installed: false,
            integrity: None,
        });
        Box::pin(async move { answer })
    }
}
