//! The task of one session: prepares its workspace, installs its agent (the only
//! place an agent is installed for a session), launches the driver, then runs the
//! queued messages as turns, one at a time, until the session ends or the node agent
//! stops.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::session::Session;
use super::turn::{Next, SessionTurn};
use crate::agents::install::Installed;
use crate::agents::{AgentHost, DriverConfig, Launch};
use crate::driver::{AgentDriver, TurnContext, TurnInput, TurnOutcome};
use crate::error::Error;
use crate::model::SessionState;

/// Starts the runner of `session`; `resumed` when it continues a conversation (after
/// a restart of the node agent, or of the failed session).
pub(super) fn spawn(
    session: Arc<Session>,
    host: Arc<AgentHost>,
    shutdown: CancellationToken,
    resumed: bool,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // A driver that panics fails its session instead of leaving it running forever.
        let ran = std::panic::AssertUnwindSafe(run(Arc::clone(&session), host, shutdown, resumed)).catch_unwind().await;
        if ran.is_err() {
            session.fail("the agent driver panicked".into(), None).await;
        }
    })
}

async fn run(session: Arc<Session>, host: Arc<AgentHost>, shutdown: CancellationToken, mut resumed: bool) {
    if !session.prepare_workspace(&shutdown).await {
        return;
    }
    // One launch per pass: a restart of the live session's agent (a changed env, or
    // `restart` asked for) stops it between turns and starts it again, resuming.
    loop {
        let (config, saved) = {
            let rec = session.record();
            (rec.driver_config(session.dir.clone(), Arc::clone(&host)), rec.driver_state.clone())
        };
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
        let Some(installed) = session.install(&config, &shutdown).await else { return };
        let launch = Launch { config: &config, installed, saved };
        let mut driver = match session.agent.agent().launch(launch).await {
            Ok(driver) => driver,
            Err(error) => {
                tracing::warn!(session = %session.id, label = ?session.label, %error, "the agent did not start");
                session.fail(error.to_string(), Some(error.code().to_string())).await;
                return;
            }
        };
        let mut relaunch = false;
        if session.started(driver.agent_session_id(), resumed).await {
            let ctx = TurnContext::new(SessionTurn { session: Arc::clone(&session), shutdown: shutdown.clone() });
            relaunch = drive(&session, &shutdown, &ctx, driver.as_mut()).await;
            // Requests a stopped driver left are answered by nobody in this run.
            session.opened().clear();
        }
        driver.stop().await;
        if !relaunch {
            return;
        }
        tracing::info!(session = %session.id, label = ?session.label, "restarting the agent, resuming its conversation");
        resumed = true;
    }
}

/// Runs the turn a stop cut short (if any), then each queued message, until the
/// session ends or the node agent stops (false) or the agent is to be restarted (true).
async fn drive(
    session: &Session,
    shutdown: &CancellationToken,
    ctx: &TurnContext,
    driver: &mut dyn AgentDriver,
) -> bool {
    let cut_short = session.record().current_turn.clone();
    if let Some(turn) = cut_short {
        tracing::info!(session = %session.id, label = ?session.label, turn = turn.number, "resuming a turn");
        match run_turn(session, ctx, driver, &turn, true).await {
            Ran::On => {}
            Ran::Stop => return false,
            Ran::Interrupted => return true,
        }
    }
    loop {
        let turn = match session.next_turn(shutdown).await {
            Some(Next::Turn(turn)) => turn,
            Some(Next::Relaunch) => return true,
            None => return false,
        };
        match run_turn(session, ctx, driver, &turn, false).await {
            Ran::On => {}
            Ran::Stop => return false,
            Ran::Interrupted => return true,
        }
    }
}

/// How a turn went, for the runner.
enum Ran {
    /// Recorded: on to the next.
    On,
    /// The session ended or the node agent stops.
    Stop,
    /// A client cut it short: recorded as interrupted; the agent, stopped in the
    /// middle of it, is started again, resuming its conversation.
    Interrupted,
}

/// Runs one turn to its end, or until a client interrupts it, and records its end.
async fn run_turn(
    session: &Session,
    ctx: &TurnContext,
    driver: &mut dyn AgentDriver,
    turn: &TurnInput,
    resume: bool,
) -> Ran {
    let started = Instant::now();
    let mut interrupted = false;
    let outcome = tokio::select! {
        outcome = driver.run_turn(ctx, turn, resume) => outcome,
        () = session.interrupt_asked(turn.number) => {
            interrupted = true;
            Ok(TurnOutcome::interrupted())
        }
    };
    session.count_turn(&outcome, started);
    session.refresh_changed_files().await;
    if session.finish_turn(turn, outcome).await.is_err() {
        return Ran::Stop;
    }
    if interrupted { Ran::Interrupted } else { Ran::On }
}

impl Session {
    /// Installs the session's agent, once, before its driver starts, so that the
    /// session says it is installing (and a failed install says why); the driver runs
    /// what was installed. `Some(None)` for a built-in agent; `None` when the session
    /// failed for it or the node agent stops.
    async fn install(&self, config: &DriverConfig, shutdown: &CancellationToken) -> Option<Option<Installed>> {
        if self.agent.package().is_none() {
            return Some(None);
        }
        let installing = self.set_state_while_starting(SessionState::Installing).await;
        let installed = tokio::select! {
            installed = config.host.installer.ensure(self.agent, config.agent_version.as_deref()) => installed,
            () = shutdown.cancelled() => return None,
        };
        match installed {
            Ok(installed) => {
                if installing {
                    self.set_state_while_starting(SessionState::Starting).await;
                }
                Some(Some(installed))
            }
            Err(error) => {
                tracing::warn!(session = %self.id, label = ?self.label, %error, "the agent could not be installed");
                self.fail(error.to_string(), Some(error.code().to_string())).await;
                None
            }
        }
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

    /// Moves a session that has not started yet between `Preparing`, `Installing` and
    /// `Starting`; false when it is past starting (resumed, or ended).
    async fn set_state_while_starting(&self, state: SessionState) -> bool {
        let changed = self.record().set_state_while_starting(state);
        if changed {
            self.settled(true).await;
        }
        changed
    }

    /// The driver is up; false when the session ended meanwhile.
    async fn started(&self, agent_session_id: Option<String>, resumed: bool) -> bool {
        let started = self.log.append_with(|batch| self.record().started(agent_session_id, resumed, batch)).await;
        if started {
            tracing::info!(session = %self.id, label = ?self.label, agent = %self.agent.as_str(), resumed, "session started");
        }
        self.persist().await;
        started
    }
}
