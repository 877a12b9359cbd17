//! A turn: the next queued message begun as a turn, the session's side of the
//! driver's [`TurnContext`] while it runs (events, saved state, requests and the
//! waits for their replies), and its end recorded.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::log::EventDraft;
use super::record::{OpenedRequest, RequestOpened, SessionRecord, public_request_id};
use super::session::Session;
use crate::driver::{Interrupted, QuestionAnswer, TurnInput, TurnOutcome, TurnPort};
use crate::model::PermissionMode;
use crate::universal::{EventData, EventSource, PermissionReply, PermissionRequest, QuestionOutcome, QuestionRequest};

impl Session {
    /// Takes the oldest queued message as the next turn, or says that the agent is to
    /// be restarted first; `None` when the session ended or the node agent stops.
    pub(super) async fn next_turn(&self, shutdown: &CancellationToken) -> Option<Next> {
        let mut changes = self.changes.subscribe();
        loop {
            {
                let rec = self.record();
                if rec.state.is_final() {
                    return None;
                }
                if rec.relaunch_asked() {
                    return Some(Next::Relaunch);
                }
                if rec.has_next_turn() {
                    break;
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return None },
                () = shutdown.cancelled() => return None,
            }
        }
        let turn = self.log.append_with(|batch| self.record().begin_turn(batch)).await;
        self.persist().await;
        turn.map(Next::Turn)
    }

    /// Counts a turn that ended (one the node agent's stop cut short goes on after the
    /// restart: counted then).
    pub(super) fn count_turn(&self, outcome: &Result<TurnOutcome, Interrupted>, started: Instant) {
        let status = match outcome {
            Ok(outcome) if outcome.interrupted => "interrupted",
            Ok(outcome) if outcome.failed => "failed",
            Ok(_) => "completed",
            Err(Interrupted::Ended) => "interrupted",
            Err(Interrupted::Shutdown) => return,
        };
        self.metrics.turn_ended(self.agent.as_str(), status, started.elapsed());
    }

    /// Records the end of a turn; `Err` when the runner is to stop.
    pub(super) async fn finish_turn(
        &self,
        turn: &TurnInput,
        outcome: Result<TurnOutcome, Interrupted>,
    ) -> Result<(), Interrupted> {
        // Stopping: the turn stays current in the record and resumes on the next start.
        let outcome = outcome?;
        let recorded = self.log.append_with(|batch| self.record().finish_turn(turn, outcome, batch)).await;
        self.opened().clear();
        self.persist().await;
        if recorded { Ok(()) } else { Err(Interrupted::Ended) }
    }
}

/// What the runner does next.
pub(super) enum Next {
    Turn(TurnInput),
    /// Stop the agent and start it again, resuming (see `SessionRecord::relaunch`).
    Relaunch,
}

/// The session's side of a driver's [`crate::driver::TurnContext`].
pub(super) struct SessionTurn {
    pub(super) session: Arc<Session>,
    pub(super) shutdown: CancellationToken,
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
        Box::pin(self.open_request(OpenedRequest::Permission(request), raw))
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
        Box::pin(self.open_request(OpenedRequest::Question(request), raw))
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
    async fn open_request(&self, request: OpenedRequest, raw: Option<&str>) -> Result<(), Interrupted> {
        let public = public_request_id(request.kind());
        let opened = self
            .session
            .log
            .append_with(|batch| {
                let opened = self.session.record().open_request(request, &public, raw, batch);
                if opened == RequestOpened::Opened {
                    self.session.opened().insert(public.clone(), Instant::now());
                }
                opened
            })
            .await;
        self.session.persist().await;
        if opened == RequestOpened::Ended { Err(Interrupted::Ended) } else { Ok(()) }
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
