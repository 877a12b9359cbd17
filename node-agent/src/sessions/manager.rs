//! All sessions of a node agent: the rules of creating one (ids, the agent's checks,
//! labels, env, workspace, the limit of live sessions), restarting a failed one,
//! ending one with the processes that feed it, loading and resuming those a previous
//! run left, and stopping every runner at shutdown.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use time::OffsetDateTime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::log::EventLog;
use super::record::{SessionRecord, validate_id};
use super::session::Session;
use super::{conversation, feed, persist, runner};
use crate::agents::catalog::CredentialPlaces;
use crate::agents::{AgentHost, AgentId, agent_from_request};
use crate::error::{Error, Result};
use crate::metrics::AgentLabel;
use crate::model::{ConversationStaged, CreateProcessRequest, CreateSessionRequest, SessionInfo};
use crate::process::{Process, ProcessManager};
use crate::workspace::WorkspaceRecord;

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

impl Sessions {
    /// Sessions not ended, those being created included (they are live the moment
    /// they are listed).
    fn live(&self) -> usize {
        self.by_id.values().filter(|s| !s.record().state.is_final()).count() + self.reserved.len()
    }
}

impl SessionManager {
    /// Loads the sessions kept under `root` and resumes the live ones.
    pub async fn load(
        root: PathBuf,
        host: Arc<AgentHost>,
        options: SessionOptions,
        shutdown: CancellationToken,
    ) -> Result<SessionManager> {
        let (loaded_root, events_in_memory) = (root.clone(), options.events_in_memory);
        let loaded = tokio::task::spawn_blocking(move || persist::load_all(&loaded_root, events_in_memory))
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
        let max_queued = self.inner.options.max_queued_messages;
        Arc::new(Session::new(agent, dir, record, log, max_queued, self.inner.host.metrics.clone()))
    }

    fn spawn_runner(&self, session: Arc<Session>, resumed: bool) {
        let runner = runner::spawn(session, Arc::clone(&self.inner.host), self.inner.shutdown.clone(), resumed);
        let mut runners = self.inner.runners.lock().unwrap_or_else(|e| e.into_inner());
        runners.retain(|r| !r.is_finished());
        runners.push(runner);
    }

    /// The error for one live session too many.
    fn limit_exceeded(&self, live: usize) -> Error {
        let max = self.inner.options.max_sessions;
        Error::LimitExceeded(format!("{live} sessions are live, the limit is {max} (--max-sessions); end one first"))
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
            let live = sessions.live();
            if live >= self.inner.options.max_sessions {
                return Err(self.limit_exceeded(live));
            }
            sessions.reserved.insert(id.to_string());
        }
        let created = self.create_reserved(id, agent, request, workspace).await;
        let mut sessions = self.sessions();
        sessions.reserved.remove(id);
        let (session, continued) = created?;
        sessions.by_id.insert(id.to_string(), Arc::clone(&session));
        drop(sessions);
        if continued {
            tracing::info!(session = %session.id, label = ?session.label, "continuing a conversation brought from elsewhere");
        }
        self.spawn_runner(Arc::clone(&session), continued);
        Ok(session)
    }

    /// Makes the session's directory, record and log: a new conversation, or the one
    /// staged for this id (true then; see [`Self::stage_conversation`]).
    async fn create_reserved(
        &self,
        id: &str,
        agent: AgentId,
        request: CreateSessionRequest,
        workspace: Option<WorkspaceRecord>,
    ) -> Result<(Arc<Session>, bool)> {
        let record = SessionRecord::new(id, agent, request, workspace);
        let dir = self.inner.root.join(id);
        let capacity = self.inner.options.events_in_memory;
        let staged = self.staged(id);
        let (created_dir, mut created_record) = (dir.clone(), record);
        let (log, record, continued) = tokio::task::spawn_blocking(move || {
            let Some((bytes, floor)) = read_staged(&staged) else {
                return persist::create(&created_dir, &created_record, capacity)
                    .map(|log| (log, created_record, false));
            };
            let log = persist::create_continuing(&created_dir, &mut created_record, capacity, &bytes, floor)?;
            // Taken up: it never applies again (a session of this id made later is new).
            let _ = std::fs::remove_file(&staged);
            let _ = std::fs::remove_file(staged.with_extension("after"));
            Ok::<_, Error>((log, created_record, true))
        })
        .await
        .map_err(|e| Error::io("creating the session", std::io::Error::other(e)))??;
        Ok((self.session(agent, dir, record, log), continued))
    }

    /// Where a conversation staged for session `id` waits for its creation.
    fn staged(&self, id: &str) -> PathBuf {
        self.inner.root.parent().unwrap_or(&self.inner.root).join("staged-conversations").join(format!("{id}.tar"))
    }

    /// Session `id`'s conversation as a tar (see [`conversation`]): its record's
    /// history, its event log, and the files its agent keeps it in.
    pub async fn conversation(&self, id: &str) -> Result<Vec<u8>> {
        let session = self.get(id)?;
        session.persist().await;
        let (record, agent, dir) = (session.record().clone(), session.agent, session.dir.clone());
        tokio::task::spawn_blocking(move || {
            let home = record.agent_home();
            let files = match &record.agent_session_id {
                Some(agent_session) => {
                    let env = |name: &str| record.agent_env_var(name);
                    let places = CredentialPlaces::new(&env, home.as_deref());
                    agent.agent().conversation_files(&places, agent_session)
                }
                None => Vec::new(),
            };
            conversation::pack(&dir, &record, home.as_deref(), &files)
        })
        .await
        .map_err(|e| Error::io("packing the conversation", std::io::Error::other(e)))?
    }

    /// Keeps `bytes`, the conversation of session `id` packed by another node agent,
    /// for the creation of that session here, which continues it: its events go on
    /// after the newest it holds and after `after` (the newest a client saw there).
    /// Checked whole first; a session of that id here already is a conflict. Staged
    /// again, the newer replaces the older.
    pub async fn stage_conversation(&self, id: &str, bytes: Vec<u8>, after: u64) -> Result<ConversationStaged> {
        validate_id(id)?;
        {
            let sessions = self.sessions();
            if sessions.by_id.contains_key(id) || sessions.reserved.contains(id) {
                return Err(Error::SessionAlreadyExists(id.to_string()));
            }
        }
        let (staged, id) = (self.staged(id), id.to_string());
        tokio::task::spawn_blocking(move || {
            let record = conversation::check(&bytes, &id)?;
            let folder = staged.parent().expect("in a folder");
            let context = |e| Error::io("staging the conversation", e);
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(folder).map_err(context)?;
            persist::write_private(&staged.with_extension("after"), after.to_string().as_bytes()).map_err(context)?;
            persist::write_private(&staged, &bytes).map_err(context)?;
            Ok(ConversationStaged { bytes: bytes.len() as u64, last_sequence: record.last_sequence.max(after) })
        })
        .await
        .map_err(|e| Error::io("staging the conversation", std::io::Error::other(e)))?
    }

    /// Restarts a session's agent, in the same conversation, with `env` when given.
    /// A live session's agent is stopped between turns (after the one under way) and
    /// started again, resumed by the agent's own id; asked twice before that happens,
    /// it restarts once. A failed session starts again: a new run of the same
    /// conversation, as after a restart of the node agent (the turn under way when it
    /// failed goes on, then the queued messages; nothing accepted is lost); asked
    /// twice, or while another restart is under way, it starts once (the second is a
    /// `conflict`), and it counts against `--max-sessions` as a new session does. An
    /// ended session is a `conflict`.
    pub async fn restart(&self, id: &str, env: Option<BTreeMap<String, String>>) -> Result<Arc<Session>> {
        let session = self.get(id)?;
        // A live session keeps its runner: the agent restarts between turns.
        if !session.record().state.is_final() {
            session.relaunch(env).await?;
            return Ok(session);
        }
        {
            let mut sessions = self.sessions();
            if sessions.reserved.contains(id) {
                return Err(Error::Conflict(format!("session {id:?} is being restarted")));
            }
            let live = sessions.live();
            if session.record().state.is_final() && live >= self.inner.options.max_sessions {
                return Err(self.limit_exceeded(live));
            }
            // Counted as live (and not restarted twice) until its state says so.
            sessions.reserved.insert(id.to_string());
        }
        if let Some(env) = env
            && session.record().state == crate::model::SessionState::Failed
        {
            session.record().set_env(env);
        }
        let reopened = session.reopen(self.inner.options.events_in_memory).await;
        self.sessions().reserved.remove(id);
        let resumable = reopened?;
        self.spawn_runner(Arc::clone(&session), resumable);
        Ok(session)
    }

    /// Ends a session (see [`Session::end`]) and stops the processes that feed it
    /// (their stop signal, then SIGKILL after the node agent's stop timeout) before
    /// it answers. Ending an ended session answers the same (and stops any feeding
    /// process left).
    pub async fn end(&self, id: &str, processes: &ProcessManager) -> Result<SessionInfo> {
        let info = self.get(id)?.end().await;
        feed::stop_feeding(id, processes).await;
        Ok(info)
    }

    /// Starts a process; with `sessionId`, one that feeds that live session (see
    /// [`feed`]): an ended session takes none (`conflict`).
    pub async fn spawn_process(
        &self,
        processes: &ProcessManager,
        request: CreateProcessRequest,
    ) -> Result<Arc<Process>> {
        let session = request.session_id.as_deref().map(|id| self.get(id)).transpose()?;
        feed::spawn(session, processes, request).await
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

/// The conversation staged at `path` and the sequence its events go on after; none
/// when nothing is staged (or it cannot be read: the session then starts anew).
fn read_staged(path: &Path) -> Option<(Vec<u8>, u64)> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "cannot read a staged conversation; starting anew");
            return None;
        }
    };
    let floor = std::fs::read_to_string(path.with_extension("after")).ok().and_then(|t| t.trim().parse().ok());
    Some((bytes, floor.unwrap_or(0)))
}
