//! Sessions: creation, messages, replies to permission requests and questions, and
//! their events by offset and over SSE.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Problem, Result};
use crate::metrics::Metrics;
use crate::model::*;
use crate::universal::*;

use super::{AppState, Json, PathId, PathIds, Query, Route, route};

/// Session events per `GET .../events` by default, and at most.
const DEFAULT_EVENTS_READ: usize = 1000;
const MAX_EVENTS_READ: usize = 10_000;
/// Session events an SSE stream reads from the log at a time: the stream pulls at
/// the client's pace, so this bounds what it holds, not what it can catch up on.
const SSE_EVENTS_READ: usize = 256;

/// Each route with its document (see `processes::routes`).
pub(super) const ROUTES: &[Route] = &[
    route!(list_sessions),
    route!(get_session, create_session, end_session),
    route!(send_message),
    route!(restart_session),
    route!(interrupt_session),
    route!(session_diff),
    route!(session_conversation, stage_conversation),
    route!(session_events),
    route!(session_events_sse),
    route!(reply_permission),
    route!(reply_question),
    route!(reject_question),
];

/// Starts a session with an agent. The id is the caller's (letters, digits, `.`, `_`,
/// `-`; at most 63), so that a restarted controller finds the session it started.
#[utoipa::path(post, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = "Session id")),
    request_body = CreateSessionRequest,
    responses(
        (status = 201, body = SessionInfo),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request, unsupported_agent, mode_not_supported"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "session_already_exists"),
    ))]
async fn create_session(
    State(state): State<AppState>,
    PathId(id): PathId,
    Json(request): Json<CreateSessionRequest>,
) -> Result<(StatusCode, Json<SessionInfo>)> {
    let session = state.sessions.create(&id, request).await?;
    Ok((StatusCode::CREATED, Json(session.info())))
}

/// Sessions in the order they were created, ended ones too.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", responses((status = 200, body = SessionList)))]
async fn list_sessions(State(state): State<AppState>) -> Json<SessionList> {
    Json(SessionList { sessions: state.sessions.list().iter().map(|s| s.info()).collect() })
}

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionInfo), (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found")))]
async fn get_session(State(state): State<AppState>, PathId(id): PathId) -> Result<Json<SessionInfo>> {
    Ok(Json(state.sessions.get(&id)?.info()))
}

/// Ends a session: `session.ended` is its last event. It stays listed, as ended;
/// ending it again answers the same. Processes that feed it are stopped (their
/// stop signal, then SIGKILL after the node agent's stop timeout) before the answer.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionInfo), (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found")))]
async fn end_session(State(state): State<AppState>, PathId(id): PathId) -> Result<Json<SessionInfo>> {
    Ok(Json(state.sessions.end(&id, &state.processes).await?))
}

/// Restarts the session's agent in the same conversation, with a new environment when
/// the body gives one (`{"env": {...}}`; no body keeps the one it has).
///
/// A **live** session (`idle`, `running`, `awaitingInput`, or still starting): the
/// agent is stopped between turns (after the one under way, before any queued one)
/// and started again, resumed by its own id (`session.started` with `resumed: true`);
/// asked twice before that, it restarts once. The answer is the session as it is.
///
/// A **failed** session starts again: its event log reopens (`session.started` with
/// `resumed` follows; sequences continue), the turn under way when it failed goes on,
/// then the messages accepted before it failed; the state is `starting` (or
/// `installing`) and `messagesReceived` is unchanged. Asked twice, it starts once
/// (the second is a `conflict`). An **ended** session is a `conflict`.
#[utoipa::path(post, path = "/v1/sessions/{id}/restart", tag = "sessions", params(("id" = String, Path)),
    request_body(content = Option<RestartSessionRequest>, description = "Optional: the new environment"),
    responses(
        (status = 200, body = SessionInfo, description = "Restarted, or to restart between turns"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request: a body that is not a RestartSessionRequest"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: the session has ended, or is being restarted"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "limit_exceeded: --max-sessions live sessions"),
    ))]
async fn restart_session(
    State(state): State<AppState>,
    PathId(id): PathId,
    body: axum::body::Bytes,
) -> Result<Json<SessionInfo>> {
    let request: RestartSessionRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RestartSessionRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| Error::InvalidRequest(format!("the restart's body: {e}")))?
    };
    Ok(Json(state.sessions.restart(&id, request.env).await?.info()))
}

/// Cuts the turn under way short, as a person pressing Escape in the agent's own
/// interface: the agent is stopped in the middle of it, the turn ends `interrupted`
/// (`turn.ended`), its pending permission requests and questions are cancelled, and
/// the agent starts again in the same conversation (`session.started` with
/// `resumed: true`), ready for the next message; messages queued behind the turn run
/// after it as usual. With no turn under way nothing changes. The answer is the
/// session as it is (the turn ends a moment later: follow the events).
#[utoipa::path(post, path = "/v1/sessions/{id}/interrupt", tag = "sessions", params(("id" = String, Path)),
    responses(
        (status = 200, body = SessionInfo, description = "Interrupted, or nothing to interrupt"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: the session has ended or failed"),
    ))]
async fn interrupt_session(State(state): State<AppState>, PathId(id): PathId) -> Result<Json<SessionInfo>> {
    Ok(Json(state.sessions.get(&id)?.interrupt().await?))
}

/// The session's workspace against the commit it was cloned at, as a unified diff
/// (`git diff`, renames detected): changes in the working tree, new commits, and
/// untracked files as new files (ignored ones not). Streamed as git writes it, never
/// held whole; cut after 10 minutes. Empty when nothing changed.
#[utoipa::path(get, path = "/v1/sessions/{id}/diff", tag = "sessions", params(("id" = String, Path)),
    responses(
        (status = 200, content_type = "text/x-diff", body = String, description = "The diff"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: no git workspace, or not cloned yet"),
        (status = 502, body = Problem, content_type = "application/problem+json", description = "workspace_failed: git could not compare it"),
    ))]
async fn session_diff(State(state): State<AppState>, PathId(id): PathId) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    let (path, commit) = state.sessions.get(&id)?.cloned_workspace()?;
    let diff = crate::workspace::diff(&path, &commit).await.map_err(|e| Error::WorkspaceFailed(e.to_string()))?;
    let headers = [(axum::http::header::CONTENT_TYPE, "text/x-diff; charset=utf-8")];
    Ok((headers, axum::body::Body::from_stream(diff)).into_response())
}

/// The session's conversation as a tar, to continue it in another node agent (a new
/// sandbox after its old one is gone): its record's history (counts, the agent's own
/// id and what resuming needs, requests still open; never its environment or MCP
/// servers), its event log, and the files its agent's CLI keeps the conversation in,
/// below the agent's HOME. At most 64 MiB. Taken between turns, it is whole; taken
/// during one, that turn runs again where it is continued.
#[utoipa::path(get, path = "/v1/sessions/{id}/conversation", tag = "sessions", params(("id" = String, Path)),
    responses(
        (status = 200, content_type = "application/x-tar", body = Vec<u8>, description = "The conversation"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "limit_exceeded: over 64 MiB packed"),
    ))]
async fn session_conversation(State(state): State<AppState>, PathId(id): PathId) -> Result<axum::response::Response> {
    use axum::response::IntoResponse;
    let tar = state.sessions.conversation(&id).await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-tar")], tar).into_response())
}

/// Stages a conversation another node agent packed (`GET .../conversation`) for the
/// session of this id, which is not here yet: creating it (`POST /v1/sessions/{id}`,
/// with the settings it is to have) then continues that conversation. Its counts go
/// on (a declared message is taken once across both), its events after the newest
/// the tar holds and after `after`, and the agent resumes its own conversation from
/// its files, written into its HOME where no file of that name is. The tar is checked
/// whole before it is kept: only `session/session.json` (naming this session),
/// `session/events.jsonl` and regular files below `home/`, nothing else; staged again,
/// the newer replaces the older.
#[utoipa::path(put, path = "/v1/sessions/{id}/conversation", tag = "sessions", params(("id" = String, Path), StageConversationQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A conversation's tar"),
    responses(
        (status = 200, body = ConversationStaged, description = "Staged: the session's creation continues it"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request: not a conversation's tar, or another session's"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "session_already_exists"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "limit_exceeded: over 64 MiB"),
    ))]
async fn stage_conversation(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<StageConversationQuery>,
    body: axum::body::Body,
) -> Result<Json<ConversationStaged>> {
    use futures_util::StreamExt;
    let limit = crate::sessions::conversation::MAX_CONVERSATION_BYTES as usize;
    let mut bytes = Vec::new();
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| Error::InvalidRequest(format!("reading the tar: {e}")))?;
        if bytes.len() + chunk.len() > limit {
            return Err(Error::LimitExceeded(format!("a conversation is at most {} MiB", limit >> 20)));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Json(state.sessions.stage_conversation(&id, bytes, query.after.unwrap_or(0)).await?))
}

/// Sends a message: it runs as the next turn, after any before it. Output of
/// processes that fed the session (`sessionId` on `POST /v1/processes`) and exited
/// since the last turn started is delivered to the agent before the message, as
/// ``Output of `CMD` (exit 0):`` and a fenced block each, then a blank line; the
/// turn's user message item keeps the message as sent.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "sessions", params(("id" = String, Path)), request_body = SendMessageRequest,
    responses(
        (status = 202, body = SessionInfo, description = "Accepted; `messagesReceived` counts it"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: the session has ended"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "limit_exceeded: too many messages waiting"),
    ))]
async fn send_message(
    State(state): State<AppState>,
    PathId(id): PathId,
    Json(request): Json<SendMessageRequest>,
) -> Result<(StatusCode, Json<SessionInfo>)> {
    let session = state.sessions.get(&id)?;
    Ok((StatusCode::ACCEPTED, Json(session.send_message(request.message, request.declared).await?)))
}

/// Events after `offset` (exclusive), oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "sessions", params(("id" = String, Path), SessionEventsQuery),
    responses((status = 200, body = SessionEvents), (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn session_events(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<SessionEventsQuery>,
) -> Result<Json<SessionEvents>> {
    let session = state.sessions.get(&id)?;
    let after = query.offset.unwrap_or(0);
    let limit = query.limit.unwrap_or(DEFAULT_EVENTS_READ).clamp(1, MAX_EVENTS_READ);
    let (gap, events) = session.log().read(after, limit).await;
    let reached = events.last().map(|e| e.sequence).or(gap.map(|g| g.to - 1)).unwrap_or(after);
    let has_more = reached < session.log().latest();
    Ok(Json(SessionEvents { events, has_more, gap }))
}

/// Events over SSE: `id:` is the sequence, `event:` the type, `data:` the envelope.
/// Starts after `Last-Event-ID` or else `offset` (default 0: from the first event); a
/// `gap` event (`{from, to}`, `to` exclusive) names sequences that are lost. Ends after
/// `session.ended`.
#[utoipa::path(get, path = "/v1/sessions/{id}/events/sse", tag = "sessions",
    params(("id" = String, Path), SessionSseQuery, ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event")),
    responses((status = 200, content_type = "text/event-stream", body = UniversalEvent), (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn session_events_sse(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<SessionSseQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = std::result::Result<Event, Infallible>>>> {
    let session = state.sessions.get(&id)?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| Error::InvalidRequest("Last-Event-ID must be an event sequence number".into()))?,
        None => query.offset.unwrap_or(0),
    };
    struct Cursor {
        session: Arc<crate::sessions::Session>,
        shutdown: CancellationToken,
        metrics: Metrics,
        _following: crate::activity::Following,
        after: u64,
        latest: tokio::sync::watch::Receiver<u64>,
        pending: std::collections::VecDeque<Event>,
        done: bool,
    }
    let cursor = Cursor {
        latest: session.log().subscribe(),
        session,
        shutdown: state.shutdown.clone(),
        metrics: state.metrics.clone(),
        _following: state.activity.follow(&headers),
        after,
        pending: Default::default(),
        done: false,
    };
    let stream = futures_util::stream::unfold(cursor, |mut cursor| async move {
        loop {
            if let Some(event) = cursor.pending.pop_front() {
                return Some((Ok(event), cursor));
            }
            if cursor.done {
                return None;
            }
            cursor.latest.borrow_and_update();
            // Seen before reading: once closed, this read reaches the last event.
            let closed = cursor.session.log().is_closed();
            let (gap, events) = cursor.session.log().read(cursor.after, SSE_EVENTS_READ).await;
            if let Some(gap) = gap {
                cursor.after = cursor.after.max(gap.to - 1);
                cursor.metrics.count_gap("session");
                let data = serde_json::to_string(&gap).expect("gap serializes");
                cursor.pending.push_back(Event::default().event("gap").data(data));
            }
            for event in events {
                cursor.after = event.sequence;
                let data = serde_json::to_string(&event).expect("events serialize");
                cursor
                    .pending
                    .push_back(Event::default().id(event.sequence.to_string()).event(event.kind().as_str()).data(data));
            }
            if !cursor.pending.is_empty() {
                continue;
            }
            if closed {
                cursor.done = true;
                continue;
            }
            tokio::select! {
                changed = cursor.latest.changed() => if changed.is_err() { return None },
                () = cursor.shutdown.cancelled() => return None,
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Answers a permission request. The same reply again answers the same; a different
/// reply to a request already resolved is a `conflict`.
#[utoipa::path(post, path = "/v1/sessions/{id}/permissions/{pid}/reply", tag = "sessions",
    params(("id" = String, Path), ("pid" = String, Path, description = "Permission request id")), request_body = PermissionReplyRequest,
    responses(
        (status = 200, body = SessionInfo),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found, permission_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict"),
    ))]
async fn reply_permission(
    State(state): State<AppState>,
    PathIds(id, pid): PathIds,
    Json(request): Json<PermissionReplyRequest>,
) -> Result<Json<SessionInfo>> {
    let session = state.sessions.get(&id)?;
    Ok(Json(session.reply_permission(&pid, request.reply).await?))
}

/// Answers a question: one list of answers per question asked.
#[utoipa::path(post, path = "/v1/sessions/{id}/questions/{qid}/reply", tag = "sessions",
    params(("id" = String, Path), ("qid" = String, Path, description = "Question id")), request_body = QuestionReplyRequest,
    responses(
        (status = 200, body = SessionInfo),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found, question_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict"),
    ))]
async fn reply_question(
    State(state): State<AppState>,
    PathIds(id, qid): PathIds,
    Json(request): Json<QuestionReplyRequest>,
) -> Result<Json<SessionInfo>> {
    let session = state.sessions.get(&id)?;
    Ok(Json(session.reply_question(&qid, Some(request.answers)).await?))
}

/// Declines to answer a question.
#[utoipa::path(post, path = "/v1/sessions/{id}/questions/{qid}/reject", tag = "sessions",
    params(("id" = String, Path), ("qid" = String, Path, description = "Question id")),
    responses(
        (status = 200, body = SessionInfo),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found, question_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict"),
    ))]
async fn reject_question(State(state): State<AppState>, PathIds(id, qid): PathIds) -> Result<Json<SessionInfo>> {
    let session = state.sessions.get(&id)?;
    Ok(Json(session.reply_question(&qid, None).await?))
}
