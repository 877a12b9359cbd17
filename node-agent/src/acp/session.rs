//! What is done for each session the editor has: its events followed and shown as
//! updates, its permission requests and questions asked of the editor and the
//! answers given back, and prompts answered when their turn ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::updates::{self, Updates};
use super::{Acp, RpcError, RpcResult, Target, prompt_text, session_id};
use crate::client::{ClientError, SessionStreamItem};
use crate::model::SessionEventsQuery;
use crate::universal::{EndReason, EventData, PermissionRequest, QuestionRequest, TurnStatus, UniversalEvent};

/// Turn outcomes remembered per session, for prompts that wait on them.
const KEPT_OUTCOMES: usize = 64;

/// A session whose events are followed.
pub(super) struct Followed {
    pub(super) target: Target,
    progress: watch::Sender<Progress>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Followed {
    pub(super) fn stop(&self) {
        if let Some(task) = self.task.lock().expect("not poisoned").take() {
            task.abort();
        }
    }
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What of a session's history a new follower shows before it follows.
pub(super) enum Replay {
    No,
    /// All of it, then says how that went (a load answers after it).
    Before(oneshot::Sender<Result<(), ClientError>>),
    /// All of it, once told (`--session`'s new: after its answer is out).
    After(oneshot::Receiver<()>),
}

/// How a session's turns ended, as its events said.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// Recent turns' ends: number, status, error.
    ended: BTreeMap<u64, (TurnStatus, Option<String>)>,
    /// The session ended: how.
    over: Option<(EndReason, Option<String>)>,
}

impl Acp {
    /// Follows the session's events after `after`, once `replay` says what of the
    /// history before to show first. A session followed already goes on being
    /// followed as it is (a prompt may wait on it): only the replay asked for is done.
    pub(super) fn follow(self: &Arc<Self>, name: &str, target: Target, after: u64, replay: Replay) -> Arc<Followed> {
        let (followed, new) = {
            let mut sessions = self.sessions.lock().expect("not poisoned");
            match sessions.get(name) {
                Some(existing) => (Arc::clone(existing), false),
                None => {
                    let progress = watch::Sender::new(Progress::default());
                    let followed = Arc::new(Followed { target, progress, task: Mutex::new(None) });
                    sessions.insert(name.to_string(), Arc::clone(&followed));
                    (followed, true)
                }
            }
        };
        let acp = Arc::clone(self);
        let (name, target, weak) = (name.to_string(), followed.target.clone(), Arc::downgrade(&followed));
        let task = tokio::spawn(async move {
            match replay {
                Replay::No => {}
                Replay::Before(tell) => {
                    let replayed = acp.replay(&name, &target, after).await;
                    let failed = replayed.is_err();
                    let _ = tell.send(replayed);
                    if failed && new {
                        acp.sessions.lock().expect("not poisoned").remove(&name);
                        return;
                    }
                }
                Replay::After(gate) => {
                    let _ = gate.await;
                    if let Err(error) = acp.replay(&name, &target, after).await {
                        tracing::warn!(session = %target.id, %error, "could not replay the session's history");
                    }
                }
            }
            if new {
                acp.follower(name, after, weak).await
            }
        });
        if new {
            *followed.task.lock().expect("not poisoned") = Some(task);
        }
        followed
    }

    /// Shows the session's events up to `through` as updates, the user's messages too.
    async fn replay(&self, name: &str, target: &Target, through: u64) -> Result<(), ClientError> {
        let mut shown = Updates::default();
        let mut offset = 0;
        while offset < through {
            let query = SessionEventsQuery { offset: Some(offset), limit: None };
            let page = target.client.session_events(&target.id, &query).await?;
            let Some(last) = page.events.last().map(|e| e.sequence) else { break };
            for event in page.events.iter().take_while(|e| e.sequence <= through) {
                for update in shown.of(&event.data, true) {
                    self.notify("session/update", json!({"sessionId": name, "update": update})).await;
                }
            }
            offset = last;
            if !page.has_more {
                break;
            }
        }
        Ok(())
    }

    /// Follows a session's events after `cursor` over SSE, resuming after a broken
    /// stream, until its last event. Holds the session weakly: it goes when it does.
    async fn follower(self: Arc<Self>, name: String, mut cursor: u64, followed: std::sync::Weak<Followed>) {
        let mut shown = Updates::default();
        let mut failures = 0u32;
        loop {
            let Some(target) = followed.upgrade().map(|f| f.target.clone()) else { return };
            let mut stream = match target.client.session_events_sse(&target.id, None, Some(cursor)).await {
                Ok(stream) => stream,
                Err(error) => {
                    if error.code().is_some_and(|c| c.as_str() == "session_not_found") {
                        if let Some(followed) = followed.upgrade() {
                            let over = (EndReason::Failed, Some(error.to_string()));
                            followed.progress.send_modify(|p| p.over = Some(over));
                        }
                        return;
                    }
                    failures += 1;
                    tracing::warn!(session = %target.id, %error, "following the session's events");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(failures.min(25)))).await;
                    continue;
                }
            };
            while let Some(item) = stream.next().await {
                match item {
                    Ok(SessionStreamItem::Event(event)) => {
                        failures = 0;
                        cursor = cursor.max(event.sequence);
                        let Some(followed) = followed.upgrade() else { return };
                        if self.on_event(&name, &event, &mut shown, &followed).await {
                            return;
                        }
                    }
                    Ok(SessionStreamItem::Gap(gap)) => cursor = cursor.max(gap.to.saturating_sub(1)),
                    Err(error) => {
                        tracing::warn!(session = %target.id, %error, "the session's event stream broke: resuming");
                        break;
                    }
                }
            }
            failures += 1;
            tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(25)))).await;
        }
    }

    /// Shows one event; true when it was the session's last.
    async fn on_event(
        self: &Arc<Self>,
        name: &str,
        event: &UniversalEvent,
        shown: &mut Updates,
        followed: &Followed,
    ) -> bool {
        for update in shown.of(&event.data, false) {
            self.notify("session/update", json!({"sessionId": name, "update": update})).await;
        }
        match &event.data {
            EventData::PermissionRequested(request) => {
                let (acp, name, target, request) =
                    (Arc::clone(self), name.to_string(), followed.target.clone(), request.clone());
                tokio::spawn(async move { acp.ask_permission(&name, &target, &request).await });
            }
            EventData::QuestionRequested(request) => {
                let (acp, name, target, request) =
                    (Arc::clone(self), name.to_string(), followed.target.clone(), request.clone());
                tokio::spawn(async move { acp.answer_question(&name, &target, &request).await });
            }
            EventData::TurnEnded { turn, status, error, .. } => followed.progress.send_modify(|p| {
                p.ended.insert(*turn, (*status, error.clone()));
                while p.ended.len() > KEPT_OUTCOMES {
                    p.ended.pop_first();
                }
            }),
            EventData::SessionEnded { reason, error } => {
                followed.progress.send_modify(|p| p.over = Some((*reason, error.clone())));
                return true;
            }
            _ => {}
        }
        false
    }

    /// A permission request, asked of the editor; the option it chose is the reply.
    /// Cancelled (the editor's `session/cancel`), nothing is replied: the interrupt
    /// cancels the request with its turn.
    async fn ask_permission(&self, name: &str, target: &Target, request: &PermissionRequest) {
        let answer = self.ask("session/request_permission", updates::permission_request(name, request)).await;
        let Some(reply) = answer.ok().and_then(|a| updates::permission_reply(&a, &request.options)) else {
            return;
        };
        if let Err(error) = target.client.reply_permission(&target.id, &request.id, reply).await {
            tracing::info!(session = %target.id, %error, "the permission's reply was not taken");
        }
    }

    /// A question, as one `session/request_permission` per question asked: each
    /// suggested answer an option, and one to decline. Declined or cancelled, the
    /// question is rejected.
    async fn answer_question(&self, name: &str, target: &Target, request: &QuestionRequest) {
        let mut answers = Vec::new();
        for (n, question) in request.questions.iter().enumerate() {
            let mut options: Vec<Value> = question
                .options
                .iter()
                .enumerate()
                .map(|(i, option)| json!({"optionId": format!("answer-{i}"), "name": option, "kind": "allow_once"}))
                .collect();
            options.push(json!({"optionId": "decline", "name": "Decline to answer", "kind": "reject_once"}));
            let title = match &question.header {
                Some(header) => format!("{header}: {}", question.question),
                None => question.question.clone(),
            };
            let params = json!({
                "sessionId": name,
                "toolCall": {"toolCallId": format!("{}-{n}", request.id), "title": title, "kind": "other", "status": "pending"},
                "options": options,
            });
            let answer = self.ask("session/request_permission", params).await.ok();
            let chosen = answer
                .as_ref()
                .and_then(updates::selected_option)
                .and_then(|o| o.strip_prefix("answer-"))
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| question.options.get(i));
            match chosen {
                Some(option) => answers.push(vec![option.clone()]),
                None => {
                    if let Err(error) = target.client.reject_question(&target.id, &request.id).await {
                        tracing::info!(session = %target.id, %error, "the question's rejection was not taken");
                    }
                    return;
                }
            }
        }
        if let Err(error) = target.client.reply_question(&target.id, &request.id, answers).await {
            tracing::info!(session = %target.id, %error, "the question's answer was not taken");
        }
    }

    /// Sends the prompt as the session's next message and answers when its turn ends:
    /// `end_turn`, `cancelled` (interrupted, or the session ended), or an error saying
    /// why the turn or the session failed.
    pub(super) async fn prompt(self: &Arc<Self>, params: &Value) -> RpcResult {
        let name = session_id(params)?;
        let text = prompt_text(params.get("prompt").unwrap_or(&Value::Null))?;
        let followed = self.followed(name).await?;
        let mut progress = followed.progress.subscribe();
        let info = followed.target.client.send_message(&followed.target.id, &text).await?;
        // Each message is one turn, in the order received: this one's number.
        let turn = info.messages_received;
        let ended = progress
            .wait_for(|p| p.ended.contains_key(&turn) || p.over.is_some())
            .await
            .map_err(|_| RpcError::internal("the session's events stopped"))?
            .clone();
        if let Some((status, error)) = ended.ended.get(&turn) {
            return match status {
                TurnStatus::Completed => Ok(json!({"stopReason": "end_turn"})),
                TurnStatus::Interrupted => Ok(json!({"stopReason": "cancelled"})),
                TurnStatus::Failed => Err(RpcError::internal(format!(
                    "the turn failed: {}",
                    error.as_deref().unwrap_or("the agent said no more")
                ))),
            };
        }
        match ended.over {
            Some((EndReason::Requested, _)) => Ok(json!({"stopReason": "cancelled"})),
            Some((EndReason::Failed, error)) => Err(RpcError::internal(format!(
                "the session failed: {}",
                error.as_deref().unwrap_or("the agent went away")
            ))),
            None => Err(RpcError::internal("the session's events stopped")),
        }
    }
}
