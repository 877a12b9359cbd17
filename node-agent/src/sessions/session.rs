//! One live session: its [`SessionRecord`] under a lock, its event log, and the
//! signal that wakes its runner. Clients change it through the methods here
//! (messages, replies, end); each change is one of the record's transitions, made
//! inside the log's append step so that the events announcing it are sequenced with
//! it, and then saved (see [`super::persist`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;

use super::log::EventLog;
use super::persist;
use super::record::SessionRecord;
use crate::agents::AgentId;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::model::SessionInfo;
use crate::universal::PermissionReply;

pub struct Session {
    pub id: String,
    /// The record's label, for log lines ("" when none).
    pub(super) label: String,
    pub(super) agent: AgentId,
    pub(super) dir: PathBuf,
    record: Mutex<SessionRecord>,
    pub(super) log: EventLog,
    /// Bumped on every change a runner may wait for (a message, a reply, the end).
    pub(super) changes: watch::Sender<u64>,
    /// The version of the record last written to disk.
    persisted: tokio::sync::Mutex<u64>,
    version: AtomicU64,
    max_queued: usize,
    pub(super) metrics: Metrics,
    /// When each pending request was opened in this run, for the wait it is answered after.
    opened: Mutex<HashMap<String, Instant>>,
}

impl Session {
    pub(super) fn new(
        agent: AgentId,
        dir: PathBuf,
        record: SessionRecord,
        log: EventLog,
        max_queued: usize,
        metrics: Metrics,
    ) -> Session {
        Session {
            id: record.id.clone(),
            label: record.label.clone().unwrap_or_default(),
            agent,
            dir,
            record: Mutex::new(record),
            log,
            changes: watch::Sender::new(0),
            persisted: tokio::sync::Mutex::new(0),
            version: AtomicU64::new(0),
            max_queued,
            metrics,
            opened: Mutex::default(),
        }
    }

    pub(super) fn record(&self) -> MutexGuard<'_, SessionRecord> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn opened(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
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
        self.record().info(self.log.latest())
    }

    pub(super) fn notify(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// After a change made under the log's lock (if there was one): wakes the runner and
    /// saves the record.
    pub(super) async fn settled(&self, changed: bool) {
        if changed {
            self.notify();
            self.persist().await;
        }
    }

    /// Writes the record (atomically: see [`persist::write_record`]). A save that lost
    /// the race to a newer one is skipped.
    pub(super) async fn persist(&self) {
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
        match tokio::task::spawn_blocking(move || persist::write_record(&dir, &bytes)).await {
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
    /// Queues a message; `declared` is its index in a resource's `spec.messages` when a
    /// controller sends it (see [`super::record`]'s `queue_message`).
    pub async fn send_message(&self, message: String, declared: Option<u64>) -> Result<SessionInfo> {
        if message.is_empty() {
            return Err(Error::InvalidRequest("`message` must not be empty".into()));
        }
        if self.record().queue_message(message, declared, self.max_queued)? {
            self.notify();
            self.persist().await;
        }
        Ok(self.info())
    }

    pub async fn reply_permission(&self, id: &str, reply: PermissionReply) -> Result<SessionInfo> {
        let changed = self.log.append_with(|batch| self.record().reply_permission(id, reply, batch)).await?;
        if changed {
            self.answered(id, "permission");
        }
        self.settled(changed).await;
        Ok(self.info())
    }

    /// Answers a question (`Some(answers)`, one list per question) or rejects it (`None`).
    pub async fn reply_question(&self, id: &str, answers: Option<Vec<Vec<String>>>) -> Result<SessionInfo> {
        let changed = self.log.append_with(|batch| self.record().reply_question(id, answers, batch)).await?;
        if changed {
            self.answered(id, "question");
        }
        self.settled(changed).await;
        Ok(self.info())
    }

    /// Ends the session: a turn under way ends as interrupted, pending requests are
    /// cancelled, `session.ended` is the last event. Ending an ended session changes
    /// nothing. (Processes that feed it are stopped by [`super::SessionManager::end`].)
    pub async fn end(&self) -> SessionInfo {
        let changed = self.log.append_with(|batch| self.record().end(batch)).await;
        // Its requests were cancelled, not answered: no wait to count.
        self.opened().clear();
        if changed {
            tracing::info!(session = %self.id, label = ?self.label, "session ended");
        }
        self.settled(changed).await;
        self.info()
    }

    /// The agent could not start or went away; `code` is the error's problem code.
    pub(super) async fn fail(&self, error: String, code: Option<String>) {
        let changed = self.log.append_with(|batch| self.record().fail(&error, code, batch)).await;
        if changed {
            tracing::warn!(session = %self.id, label = ?self.label, %error, "session failed");
        }
        self.settled(changed).await;
    }

    /// Starts a failed session again (see [`super::SessionManager::restart`]): the log
    /// takes events again, the state is `Starting`, and what the conversation was
    /// stays (see [`SessionRecord::reopen`]). Any other state is a `conflict`: live,
    /// there is nothing to restart; ended, the session was ended on purpose. True when
    /// the record holds a conversation to resume.
    /// Restarts a live session's agent between turns, resuming, with `env` when given
    /// (see `SessionRecord::relaunch`).
    pub(super) async fn relaunch(&self, env: Option<std::collections::BTreeMap<String, String>>) -> Result<()> {
        self.record().relaunch(env)?;
        tracing::info!(session = %self.id, label = ?self.label, "restart of the agent asked for");
        self.settled(true).await;
        Ok(())
    }

    /// Cuts the turn under way short (see `SessionRecord::interrupt`); answers the
    /// session as it is. With no turn under way, nothing changes.
    pub async fn interrupt(&self) -> Result<SessionInfo> {
        let turn = self.record().interrupt()?;
        if let Some(turn) = turn {
            tracing::info!(session = %self.id, label = ?self.label, turn, "interrupt of the turn asked for");
            self.notify();
        }
        Ok(self.info())
    }

    /// Resolves once the turn `number` is to be cut short; never when the session
    /// ends (the turn then ends through the driver).
    pub(super) async fn interrupt_asked(&self, number: u64) {
        let mut changes = self.changes.subscribe();
        loop {
            if self.record().interrupt_asked(number) {
                return;
            }
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    pub(super) async fn reopen(&self, capacity: usize) -> Result<bool> {
        let resumable = self.log.reopen(capacity, || self.record().reopen()).await?;
        tracing::info!(session = %self.id, label = ?self.label, "session restarted");
        self.settled(true).await;
        Ok(resumable)
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
}
