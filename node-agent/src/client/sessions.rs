//! The calls on sessions: start, end, restart, messages, events (a page, or the SSE
//! stream with its gaps), replies to permissions and questions, and the workspace's diff.

use futures_util::{Stream, StreamExt};
use reqwest::Method;

use super::error::quote;
use super::{Client, ClientError, ClientResult, MAX_EVENTS_PAGE_BYTES};
use crate::model::*;
use crate::universal::{PermissionReply, UniversalEvent};

impl Client {
    /// Starts a session under the caller's id.
    pub async fn create_session(&self, id: &str, request: &CreateSessionRequest) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id]).json(request)).await
    }

    pub async fn list_sessions(&self) -> ClientResult<Vec<SessionInfo>> {
        let list: SessionList = self.send(self.request(Method::GET, &["sessions"])).await?;
        Ok(list.sessions)
    }

    pub async fn get_session(&self, id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::GET, &["sessions", id])).await
    }

    /// Ends a session (again: answers the same).
    pub async fn end_session(&self, id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::DELETE, &["sessions", id])).await
    }

    /// Restarts the session's agent in the same conversation: a live one between
    /// turns, a failed one at once; `conflict` when it has ended (or a failed one is
    /// being restarted by another caller).
    pub async fn restart_session(&self, id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id, "restart"])).await
    }

    /// Cuts the turn under way short (nothing changes when none is): it ends
    /// `interrupted` and the agent starts again in the same conversation.
    pub async fn interrupt_session(&self, id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id, "interrupt"])).await
    }

    /// [`Self::restart_session`] with a new environment for the agent (`request.env`).
    pub async fn restart_session_with(&self, id: &str, request: &RestartSessionRequest) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id, "restart"]).json(request)).await
    }

    /// The session's workspace against the commit it was cloned at (`text/x-diff`),
    /// as a stream of bytes: a diff can be as large as the tree.
    pub async fn session_diff(&self, id: &str) -> ClientResult<impl Stream<Item = ClientResult<bytes::Bytes>> + use<>> {
        self.open_bytes(self.stream_request(Method::GET, &["sessions", id, "diff"])).await
    }

    /// The session's conversation as a tar, to continue it in another node agent
    /// ([`Self::stage_conversation`] there); at most 64 MiB.
    pub async fn conversation(&self, id: &str) -> ClientResult<Vec<u8>> {
        let limit = crate::sessions::conversation::MAX_CONVERSATION_BYTES as usize;
        let segments = ["sessions", id, "conversation"];
        let mut stream = self.open_bytes(self.stream_request(Method::GET, &segments)).await?;
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if tar.len() + chunk.len() > limit {
                return Err(ClientError::TooLarge { url: self.url(&segments).to_string(), limit });
            }
            tar.extend_from_slice(&chunk);
        }
        Ok(tar)
    }

    /// Stages a conversation packed elsewhere for session `id`, not created here yet:
    /// creating it continues that conversation, its events after `after`.
    pub async fn stage_conversation(&self, id: &str, tar: Vec<u8>, after: u64) -> ClientResult<ConversationStaged> {
        let builder = self
            .upload_request(Method::PUT, &["sessions", id, "conversation"])
            .query(&[("after", after)])
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar");
        self.upload(builder, reqwest::Body::from(tar)).await
    }

    /// Queues a message; it runs as a turn after those before it.
    pub async fn send_message(&self, id: &str, message: &str) -> ClientResult<SessionInfo> {
        self.send_declared_message(id, message, None).await
    }

    /// Queues a message a controller declared: `declared` is its index in the
    /// resource's `spec.messages`, by which the node agent takes it once and in order.
    pub async fn send_declared_message(
        &self,
        id: &str,
        message: &str,
        declared: Option<u64>,
    ) -> ClientResult<SessionInfo> {
        let body = SendMessageRequest { message: message.to_string(), declared };
        self.send(self.request(Method::POST, &["sessions", id, "messages"]).json(&body)).await
    }

    /// Events after `query.offset`, at most `query.limit`.
    pub async fn session_events(&self, id: &str, query: &SessionEventsQuery) -> ClientResult<SessionEvents> {
        let builder = self.request(Method::GET, &["sessions", id, "events"]).query(query);
        self.call(builder, MAX_EVENTS_PAGE_BYTES, self.timeouts.answer).await
    }

    /// A session's events over SSE, after `last_event_id` (sent as `Last-Event-ID`,
    /// which wins over `offset`) or else after `offset`. Ends after `session.ended`.
    pub async fn session_events_sse(
        &self,
        id: &str,
        offset: Option<u64>,
        last_event_id: Option<u64>,
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<SessionStreamItem>>> {
        let segments = ["sessions", id, "events", "sse"];
        let mut builder = self.stream_request(Method::GET, &segments).query(&SessionSseQuery { offset });
        if let Some(last) = last_event_id {
            builder = builder.header("last-event-id", last.to_string());
        }
        let url = self.url(&segments).to_string();
        let messages = self.open_sse(builder, &segments).await?;
        Ok(messages
            .map(move |message| {
                let message = message?;
                let parsed = match message.event.as_deref() {
                    Some("gap") => serde_json::from_str(&message.data).map(SessionStreamItem::Gap),
                    _ => serde_json::from_str(&message.data).map(SessionStreamItem::Event),
                };
                parsed.map_err(|e| ClientError::Unexpected {
                    url: url.clone(),
                    status: 200,
                    body: format!("{e}: {}", quote(&message.data)),
                })
            })
            .boxed())
    }

    pub async fn reply_permission(
        &self,
        id: &str,
        permission_id: &str,
        reply: PermissionReply,
    ) -> ClientResult<SessionInfo> {
        let body = PermissionReplyRequest { reply };
        self.send(self.request(Method::POST, &["sessions", id, "permissions", permission_id, "reply"]).json(&body))
            .await
    }

    /// Answers a question: one list of answers per question asked.
    pub async fn reply_question(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> ClientResult<SessionInfo> {
        let body = QuestionReplyRequest { answers };
        self.send(self.request(Method::POST, &["sessions", id, "questions", question_id, "reply"]).json(&body)).await
    }

    pub async fn reject_question(&self, id: &str, question_id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id, "questions", question_id, "reject"])).await
    }
}

/// One item of a session's SSE stream.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionStreamItem {
    Event(Box<UniversalEvent>),
    /// These sequences are lost (`to` exclusive); the stream goes on after them.
    Gap(Gap),
}
