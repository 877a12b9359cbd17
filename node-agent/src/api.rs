//! The HTTP API under `/v1`: REST lifecycle calls, output by offset, the terminal
//! WebSocket, lifecycle events over SSE, agents and sessions (events by offset and
//! over SSE), and the OpenAPI document generated from these handlers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next as MiddlewareNext};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use futures_util::{SinkExt, Stream, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowOrigin, CorsLayer};
use utoipa::OpenApi;

use crate::agents::AgentId;
use crate::auth::Auth;
use crate::error::{Error, Problem, Result};
use crate::metrics::{Metrics, Snapshot};
use crate::model::*;
use crate::output::{Next, OutputBuffer};
use crate::process::{Process, ProcessManager, RunState};
use crate::sessions::SessionManager;
use crate::signals::parse_signal;
use crate::universal::*;

/// Largest binary frame sent to a terminal client: big enough that a fast producer
/// costs few frames, small enough to keep latency and memory per client low.
const MAX_FRAME: usize = 256 * 1024;
/// Largest message a terminal client may send: keystrokes and pastes, not files. With
/// the bounded input queue this caps what one client can make the node agent hold.
const MAX_CLIENT_MESSAGE: usize = 1024 * 1024;
/// Largest response of `GET .../output`.
const MAX_OUTPUT_READ: usize = 1024 * 1024;
/// Session events per `GET .../events` by default, and at most.
const DEFAULT_EVENTS_READ: usize = 1000;
const MAX_EVENTS_READ: usize = 10_000;
/// Session events an SSE stream reads from the log at a time: the stream pulls at
/// the client's pace, so this bounds what it holds, not what it can catch up on.
const SSE_EVENTS_READ: usize = 256;

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub processes: ProcessManager,
    pub sessions: SessionManager,
    pub auth: Arc<Auth>,
    pub allowed_origins: Arc<Vec<HeaderValue>>,
    /// Fired on shutdown: open streams and sockets end so the server can stop.
    pub shutdown: CancellationToken,
    /// What `/metrics` serves; the processes and sessions count into the same.
    pub metrics: Metrics,
}

/// A JSON body whose rejection is a problem document.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(Error))]
struct Json<T>(T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// A raw body whose rejection (too large) is a problem document.
struct RawBody(bytes::Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Error;

    async fn from_request(request: Request, state: &S) -> Result<Self> {
        Ok(RawBody(bytes::Bytes::from_request(request, state).await?))
    }
}

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Error))]
struct Query<T>(T);

/// The `{id}` of a process route.
struct PathId(String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self> {
        let axum::extract::Path(id) = axum::extract::Path::<String>::from_request_parts(parts, state).await?;
        Ok(PathId(id))
    }
}

/// The `{id}` and the `{pid}` or `{qid}` of a session request route.
struct PathIds(String, String);

impl<S: Send + Sync> FromRequestParts<S> for PathIds {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self> {
        let axum::extract::Path((id, request)) =
            axum::extract::Path::<(String, String)>::from_request_parts(parts, state).await?;
        Ok(PathIds(id, request))
    }
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi_json))
        .route("/v1/processes", get(list_processes).post(create_process))
        .route("/v1/processes/{id}", get(get_process).delete(delete_process))
        .route("/v1/processes/{id}/signal", post(signal_process))
        .route("/v1/processes/{id}/resize", post(resize_process))
        .route("/v1/processes/{id}/input", post(write_input))
        .route("/v1/processes/{id}/output", get(read_output))
        .route("/v1/processes/{id}/ticket", post(issue_ticket))
        .route("/v1/processes/{id}/connect", get(connect))
        .route("/v1/events/sse", get(lifecycle_events))
        .route("/v1/agents", get(list_agents))
        .route("/v1/agents/{agent}", get(get_agent))
        .route("/v1/agents/{agent}/install", post(install_agent))
        .route("/v1/agents/{agent}/modes", get(agent_modes))
        .route("/v1/agents/{agent}/models", get(agent_models))
        .route("/v1/sessions", get(list_sessions))
        .route("/v1/sessions/{id}", get(get_session).post(create_session).delete(end_session))
        .route("/v1/sessions/{id}/messages", post(send_message))
        .route("/v1/sessions/{id}/events", get(session_events))
        .route("/v1/sessions/{id}/events/sse", get(session_events_sse))
        .route("/v1/sessions/{id}/permissions/{pid}/reply", post(reply_permission))
        .route("/v1/sessions/{id}/questions/{qid}/reply", post(reply_question))
        .route("/v1/sessions/{id}/questions/{qid}/reject", post(reject_question))
        .route("/metrics", get(metrics))
        .fallback(|uri: axum::http::Uri| async move { Error::RouteNotFound(uri.path().to_string()) })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        // Outside authentication, so that refused requests are counted too.
        .layer(middleware::from_fn_with_state(state.clone(), count_request))
        .layer(tower_http::trace::TraceLayer::new_for_http());
    let api = if state.allowed_origins.is_empty() {
        api
    } else {
        // Outside authentication, so that preflight requests (which carry no token) are answered.
        api.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(state.allowed_origins.iter().cloned()))
                .allow_methods(tower_http::cors::Any)
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, "last-event-id".parse().expect("valid")]),
        )
    };
    api.with_state(state)
}

/// `/metrics` alone and without the token, for `--metrics-listen`'s own address.
pub fn metrics_router(state: AppState) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(state)
}

/// Counts each request by its route template (`MatchedPath`, set by routing before
/// this layer runs) and status.
async fn count_request(State(state): State<AppState>, request: Request, next: MiddlewareNext) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().clone();
    let response = next.run(request).await;
    state.metrics.http_request(method.as_str(), &route, response.status().as_u16());
    response
}

/// Prometheus metrics of this node agent (OpenMetrics text): what exists now
/// (processes, sessions, pending requests) and what happened since it started.
#[utoipa::path(get, path = "/metrics", tag = "system", responses((status = 200, content_type = "application/openmetrics-text", description = "OpenMetrics text")))]
async fn metrics(State(state): State<AppState>) -> Result<Response> {
    let mut now = Snapshot::default();
    for process in state.processes.list(None, None) {
        let running = !process.run_state().is_exited();
        *now.processes.entry(if running { "running" } else { "exited" }.to_string()).or_default() += 1;
    }
    for session in state.sessions.list() {
        let info = session.info();
        let state_name = serde_json::to_value(info.state).ok().and_then(|v| v.as_str().map(str::to_string));
        *now.sessions.entry((info.agent.clone(), state_name.unwrap_or_default())).or_default() += 1;
        if !info.pending_permissions.is_empty() {
            *now.requests_pending.entry((info.agent.clone(), "permission")).or_default() +=
                info.pending_permissions.len();
        }
        if !info.pending_questions.is_empty() {
            *now.requests_pending.entry((info.agent.clone(), "question")).or_default() += info.pending_questions.len();
        }
    }
    let text = state
        .metrics
        .encode(&now)
        .map_err(|e| Error::io("encoding the metrics", std::io::Error::other(e.to_string())))?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

async fn authenticate(State(state): State<AppState>, request: Request, next: MiddlewareNext) -> Response {
    let path = request.uri().path();
    if path == "/v1/health" || !state.auth.enabled() {
        return next.run(request).await;
    }
    let header = request.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
    if state.auth.check_bearer(header) || ticket_grants(&state, &request) {
        return next.run(request).await;
    }
    Error::Unauthorized.into_response()
}

/// A WebSocket request carrying a valid single-use ticket for this very process.
fn ticket_grants(state: &AppState, request: &Request) -> bool {
    let Some(id) = request.uri().path().strip_prefix("/v1/processes/").and_then(|rest| rest.strip_suffix("/connect"))
    else {
        return false;
    };
    let Some(ticket) = request.uri().query().and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("ticket=")))
    else {
        return false;
    };
    match state.processes.get(id) {
        Ok(process) => state.auth.redeem_ticket(ticket, &process.id),
        Err(_) => false,
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentplane node agent",
        description = "Persistent processes, terminals and agent sessions in a sandbox. Every route but health needs `Authorization: Bearer TOKEN`. Errors are RFC 7807 problem documents with `urn:agentplane:error:*` types."
    ),
    paths(
        health, openapi_json, metrics, create_process, list_processes, get_process, delete_process,
        signal_process, resize_process, write_input, read_output, issue_ticket, connect, lifecycle_events,
        list_agents, get_agent, install_agent, agent_modes, agent_models, create_session, list_sessions, get_session, end_session, send_message,
        session_events, session_events_sse, reply_permission, reply_question, reject_question
    ),
    components(schemas(Problem, ControlMessage, LifecycleEvent, UniversalEvent, EventData, EventType, EventSource, Gap, InstallProgress)),
    modifiers(&ApiConventions),
    tags(
        (name = "processes", description = "Processes and terminals"),
        (name = "agents", description = "The agents this node agent can drive"),
        (name = "sessions", description = "Conversations with agents, as universal events"),
        (name = "system", description = "Health and the API document")
    )
)]
pub struct ApiDoc;

/// What holds for every route: the bearer token, and errors as problem documents
/// (a `default` response, so every status an operation can fail with is described).
struct ApiConventions;

impl utoipa::Modify for ApiConventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
        let problem = ResponseBuilder::new()
            .description("An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>`")
            .content(
                "application/problem+json",
                ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                operation.responses.responses.insert("default".to_string(), problem.clone().into());
            }
        }
    }
}

/// Liveness; the only route that needs no token.
#[utoipa::path(get, path = "/v1/health", tag = "system", security(()), responses((status = 200, body = Health)))]
async fn health() -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI 3.1 document")))]
async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// Starts a process, on a PTY when `pty` is given. With `sessionId` it feeds that
/// session: a `tool_result` item there when it starts and when it exits (with its exit
/// and the last 64 KiB of its output), that output prepended to the message of the
/// session's next turn, and the process stopped when the session is ended.
#[utoipa::path(post, path = "/v1/processes", tag = "processes", request_body = CreateProcessRequest,
    responses(
        (status = 201, body = ProcessInfo),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "session_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "process_already_exists; conflict: the session has ended"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "spawn_failed"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "limit_exceeded"),
    ))]
async fn create_process(
    State(state): State<AppState>,
    Json(request): Json<CreateProcessRequest>,
) -> Result<(StatusCode, Json<ProcessInfo>)> {
    let session = match &request.session_id {
        Some(id) => {
            let session = state.sessions.get(id)?;
            if session.info().state.is_final() {
                return Err(Error::Conflict(format!("session {id:?} has ended: no process can feed it")));
            }
            Some(session)
        }
        None => None,
    };
    let processes = state.processes.clone();
    // Spawning forks and opens a PTY: blocking calls, kept off the async workers.
    let process = tokio::task::spawn_blocking(move || processes.spawn(request))
        .await
        .map_err(|e| Error::io("spawning", std::io::Error::other(e)))??;
    if let Some(session) = session {
        if let Err(error) = session.process_started(&process).await {
            // The session ended while the process started: it must not outlive it.
            let signal =
                if process.is_pty() { nix::sys::signal::Signal::SIGHUP } else { nix::sys::signal::Signal::SIGTERM };
            state.processes.stop(&process, signal, state.processes.limits().stop_timeout).await?;
            return Err(error);
        }
        crate::sessions::feed::follow(session, Arc::clone(&process));
    }
    Ok((StatusCode::CREATED, Json(process.info())))
}

/// Processes in the order they were created.
#[utoipa::path(get, path = "/v1/processes", tag = "processes", params(ListProcessesQuery),
    responses((status = 200, body = ProcessList)))]
async fn list_processes(State(state): State<AppState>, Query(query): Query<ListProcessesQuery>) -> Json<ProcessList> {
    let processes = state
        .processes
        .list_for(query.tag.as_deref(), query.pty, query.session.as_deref())
        .iter()
        .map(|p| p.info())
        .collect();
    Json(ProcessList { processes })
}

/// One process, by id or else by tag (the newest with it).
#[utoipa::path(get, path = "/v1/processes/{id}", tag = "processes", params(("id" = String, Path, description = "Process id or tag")),
    responses((status = 200, body = ProcessInfo), (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_process(State(state): State<AppState>, PathId(id): PathId) -> Result<Json<ProcessInfo>> {
    Ok(Json(state.processes.get(&id)?.info()))
}

/// Stops a process: the stop signal to its whole group, SIGKILL after the timeout.
/// Answers once it has exited. The record stays, as exited, unless `purge=true`.
#[utoipa::path(delete, path = "/v1/processes/{id}", tag = "processes", params(("id" = String, Path, description = "Process id or tag"), DeleteProcessQuery),
    responses((status = 200, body = ProcessInfo), (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn delete_process(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<DeleteProcessQuery>,
) -> Result<Json<ProcessInfo>> {
    let process = state.processes.get(&id)?;
    // A terminal closing means SIGHUP to its programs (interactive shells ignore SIGTERM).
    let default_signal = if process.is_pty() { "SIGHUP" } else { "SIGTERM" };
    let signal = parse_signal(query.signal.as_deref().unwrap_or(default_signal)).map_err(Error::InvalidRequest)?;
    let timeout = match query.timeout {
        Some(t) if t.is_finite() && (0.0..=3600.0).contains(&t) => Duration::from_secs_f64(t),
        Some(t) => return Err(Error::InvalidRequest(format!("timeout {t} must be between 0 and 3600 seconds"))),
        None => state.processes.limits().stop_timeout,
    };
    let info = state.processes.stop(&process, signal, timeout).await?;
    if query.purge {
        state.processes.purge(&process)?;
    }
    Ok(Json(info))
}

/// Sends a signal to the process group (or the terminal's foreground group).
#[utoipa::path(post, path = "/v1/processes/{id}/signal", tag = "processes", params(("id" = String, Path)), request_body = SignalRequest,
    responses((status = 200, body = ProcessInfo), (status = 409, body = Problem, content_type = "application/problem+json")))]
async fn signal_process(
    State(state): State<AppState>,
    PathId(id): PathId,
    Json(request): Json<SignalRequest>,
) -> Result<Json<ProcessInfo>> {
    let process = state.processes.get(&id)?;
    let signal = parse_signal(&request.signal).map_err(Error::InvalidRequest)?;
    process.signal(signal, request.target)?;
    Ok(Json(process.info()))
}

/// Resizes the terminal; the program gets SIGWINCH.
#[utoipa::path(post, path = "/v1/processes/{id}/resize", tag = "processes", params(("id" = String, Path)), request_body = PtySize,
    responses((status = 200, body = ProcessInfo), (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn resize_process(
    State(state): State<AppState>,
    PathId(id): PathId,
    Json(size): Json<PtySize>,
) -> Result<Json<ProcessInfo>> {
    let process = state.processes.get(&id)?;
    process.resize(size)?;
    state.processes.publish_updated(&process);
    Ok(Json(process.info()))
}

/// Writes to the program's input (text, or base64 bytes); `eof` closes it after.
#[utoipa::path(post, path = "/v1/processes/{id}/input", tag = "processes", params(("id" = String, Path)), request_body = InputRequest,
    responses((status = 200, body = ProcessInfo), (status = 409, body = Problem, content_type = "application/problem+json")))]
async fn write_input(
    State(state): State<AppState>,
    PathId(id): PathId,
    Json(request): Json<InputRequest>,
) -> Result<Json<ProcessInfo>> {
    let process = state.processes.get(&id)?;
    let data = if request.base64 {
        base64::engine::general_purpose::STANDARD
            .decode(request.data.as_bytes())
            .map_err(|e| Error::InvalidRequest(format!("`data` is not valid base64: {e}")))?
    } else {
        request.data.into_bytes()
    };
    process.write_input(data.into()).await?;
    if request.eof {
        process.close_input()?;
        state.processes.publish_updated(&process);
    }
    Ok(Json(process.info()))
}

/// Retained output from a byte offset, for clients without WebSocket. With `wait`,
/// waits for output past the offset (a long poll).
#[utoipa::path(get, path = "/v1/processes/{id}/output", tag = "processes", params(("id" = String, Path), OutputQuery),
    responses((status = 200, body = OutputChunk), (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn read_output(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<OutputQuery>,
) -> Result<Json<OutputChunk>> {
    let process = state.processes.get(&id)?;
    let stream = query.stream.unwrap_or(if process.is_pty() { OutputStream::Pty } else { OutputStream::Stdout });
    let buffer = Arc::clone(process.output(stream)?);
    let offset = query.offset.unwrap_or(0);
    let total = buffer.state().total;
    if offset > total {
        return Err(Error::InvalidRequest(format!("offset {offset} is past the end of the output ({total} bytes)")));
    }
    let limit = query.limit.unwrap_or(MAX_OUTPUT_READ).clamp(1, MAX_OUTPUT_READ);
    if let Some(wait) = query.wait {
        if !wait.is_finite() || !(0.0..=60.0).contains(&wait) {
            return Err(Error::InvalidRequest(format!("wait {wait} must be between 0 and 60 seconds")));
        }
        let mut run_state = process.watch_state();
        let _ = tokio::time::timeout(Duration::from_secs_f64(wait), async {
            tokio::select! {
                () = buffer.wait_past(offset) => {}
                _ = run_state.wait_for(RunState::is_exited) => {}
                () = state.shutdown.cancelled() => {}
            }
        })
        .await;
    }
    let read = buffer.read(offset, limit);
    let encoding = query.encoding.unwrap_or_default();
    let next_offset = read.offset + read.data.len() as u64;
    let data = match encoding {
        OutputEncoding::Utf8 => String::from_utf8_lossy(&read.data).into_owned(),
        OutputEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&read.data),
    };
    Ok(Json(OutputChunk {
        stream,
        offset: read.offset,
        next_offset,
        gap: read.gap,
        encoding,
        data,
        eof: read.closed && next_offset == read.total,
        status: process.info().status,
    }))
}

/// A short-lived single-use ticket to open the WebSocket without the token.
#[utoipa::path(post, path = "/v1/processes/{id}/ticket", tag = "processes", params(("id" = String, Path)),
    responses((status = 200, body = Ticket), (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn issue_ticket(State(state): State<AppState>, PathId(id): PathId) -> Result<Json<Ticket>> {
    let process = state.processes.get(&id)?;
    let (ticket, expires_at) = state.auth.issue_ticket(&process.id);
    Ok(Json(Ticket { ticket, expires_at }))
}

/// The terminal WebSocket. Binary frames carry raw bytes both ways; text frames carry
/// JSON [`ControlMessage`]s. Closing it never stops the process.
#[utoipa::path(get, path = "/v1/processes/{id}/connect", tag = "processes", params(("id" = String, Path), ConnectQuery),
    responses((status = 101, description = "Switching to the WebSocket protocol"), (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn connect(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<ConnectQuery>,
    headers: HeaderMap,
    upgrade: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response> {
    // Browsers send Origin; a page from an origin not allowed must not drive a terminal.
    if let Some(origin) = headers.get(header::ORIGIN)
        && !state.allowed_origins.iter().any(|allowed| allowed == origin)
    {
        return Err(Error::Forbidden(format!(
            "origin {:?} is not allowed (--cors-origin)",
            origin.to_str().unwrap_or("?")
        )));
    }
    let process = state.processes.get(&id)?;
    let stream = query.stream.unwrap_or(OutputStream::Stdout);
    let buffer = Arc::clone(process.output(stream)?);
    if let Some(offset) = query.offset {
        let total = buffer.state().total;
        if offset > total {
            return Err(Error::InvalidRequest(format!(
                "offset {offset} is past the end of the output ({total} bytes)"
            )));
        }
    }
    let upgrade = upgrade.map_err(|e| Error::InvalidRequest(format!("not a WebSocket request: {}", e.body_text())))?;
    let upgrade = upgrade.max_message_size(MAX_CLIENT_MESSAGE).max_frame_size(MAX_CLIENT_MESSAGE);
    Ok(upgrade.on_upgrade(move |socket| terminal_session(socket, state, process, buffer, query.offset)))
}

async fn terminal_session(
    socket: WebSocket,
    state: AppState,
    process: Arc<Process>,
    buffer: Arc<OutputBuffer>,
    offset: Option<u64>,
) {
    let mut subscription = buffer.subscribe(offset);
    let _attached = Attached::new(&state.metrics);
    let (mut sink, mut source) = socket.split();
    // Answers to the client's control messages: at most one per message received, and
    // the receiver stops reading while this is full.
    let (replies_tx, mut replies_rx) = mpsc::channel::<ControlMessage>(16);

    let send = async {
        let ready = ControlMessage::Ready { offset: subscription.position() };
        sink.send(control_frame(&ready)).await?;
        let mut run_state = process.watch_state();
        loop {
            match subscription.try_next(MAX_FRAME) {
                Some(Next::Data { data, .. }) => {
                    sink.send(Message::Binary(data.into())).await?;
                    continue;
                }
                Some(Next::Gap(gap)) => {
                    state.metrics.count_gap("terminal");
                    sink.send(control_frame(&ControlMessage::Gap { from: gap.from, to: gap.to })).await?;
                    continue;
                }
                Some(Next::Closed) | None => {
                    // The exit is announced only after the readers drained the program's last output.
                    let current = *run_state.borrow_and_update();
                    if let RunState::Exited { code, signal, .. } = current {
                        let exit =
                            ControlMessage::Exit { exit_code: code, signal: signal.map(|s| s.as_str().to_string()) };
                        sink.send(control_frame(&exit)).await?;
                        sink.send(Message::Close(None)).await?;
                        return Ok::<(), axum::Error>(());
                    }
                }
            }
            tokio::select! {
                () = subscription.changed() => {}
                _ = run_state.changed() => {}
                Some(reply) = replies_rx.recv() => sink.send(control_frame(&reply)).await?,
                () = state.shutdown.cancelled() => {
                    let _ = sink.send(Message::Close(None)).await;
                    return Ok(());
                }
            }
        }
    };

    // Ends with the close frame to send when the client broke a rule of the socket.
    let receive = async {
        loop {
            let message = match source.next().await {
                Some(Ok(message)) => message,
                Some(Err(error)) => return refusal(error),
                None => return None,
            };
            let failure = match message {
                Message::Binary(data) => process.write_input(data).await.err().map(|e| e.to_string()),
                Message::Text(text) => apply_control(&state, &process, text.as_str()).err(),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => None,
            };
            if let Some(message) = failure
                && replies_tx.send(ControlMessage::Error { message }).await.is_err()
            {
                break;
            }
        }
        None
    };

    let refused = tokio::select! {
        result = send => {
            if let Err(e) = result {
                tracing::debug!(process = %process.id, error = %e, "terminal client went away");
            }
            None
        }
        refused = receive => refused,
    };
    if let Some(frame) = refused {
        tracing::debug!(process = %process.id, code = frame.code, reason = %frame.reason, "closing a terminal socket");
        // The send side is done with the sink: the close frame is the last thing sent.
        if sink.send(Message::Close(Some(frame))).await.is_ok() {
            // Read (and drop) what the client still sends until it answers the close, so
            // that unread bytes do not make the kernel reset the connection before the
            // client has read the reason; bounded in time, as a client may never answer.
            let drained = async { while let Some(Ok(_)) = source.next().await {} };
            let _ = tokio::time::timeout(CLOSE_GRACE, drained).await;
        }
    }
}

/// One terminal client counted in `attached_clients` while it lives.
struct Attached(prometheus_client::metrics::gauge::Gauge);

impl Attached {
    fn new(metrics: &Metrics) -> Attached {
        metrics.attached_clients.inc();
        Attached(metrics.attached_clients.clone())
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// How long a refused client has to answer the close frame before the socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The close frame for a read that failed because the client broke a limit
/// (1009: a message past [`MAX_CLIENT_MESSAGE`]); `None` when the client just went away.
fn refusal(error: axum::Error) -> Option<axum::extract::ws::CloseFrame> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let error = error.into_inner();
    match error.downcast_ref::<WsError>() {
        Some(WsError::Capacity(_)) => Some(axum::extract::ws::CloseFrame {
            code: axum::extract::ws::close_code::SIZE,
            reason: format!("message too large: at most {MAX_CLIENT_MESSAGE} bytes").into(),
        }),
        _ => None,
    }
}

fn apply_control(state: &AppState, process: &Process, text: &str) -> std::result::Result<(), String> {
    match serde_json::from_str::<ControlMessage>(text) {
        Ok(ControlMessage::Resize { rows, cols }) => {
            process.resize(PtySize { rows, cols }).map_err(|e| e.to_string())?;
            state.processes.publish_updated(process);
            Ok(())
        }
        Ok(ControlMessage::Signal { signal }) => {
            let signal = parse_signal(&signal)?;
            // On a terminal a signal means what the keyboard means: the foreground job.
            let target = if process.is_pty() { SignalTarget::Foreground } else { SignalTarget::Group };
            process.signal(signal, target).map_err(|e| e.to_string())
        }
        Ok(other) => Err(format!("{other:?} is sent by the server, not the client")),
        Err(e) => Err(format!("invalid control message: {e}")),
    }
}

fn control_frame(message: &ControlMessage) -> Message {
    Message::Text(serde_json::to_string(message).expect("control messages serialize").into())
}

/// Lifecycle events of all processes. Without `Last-Event-ID`, from now on;
/// with it, everything after that id (or a `gap` event for what is no longer kept).
/// An id from an earlier run of the node agent (past the newest) gets a `reset`
/// event with id 0, then this run's events from the start.
#[utoipa::path(get, path = "/v1/events/sse", tag = "processes",
    params(("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event")),
    responses((status = 200, content_type = "text/event-stream", body = LifecycleEvent)))]
async fn lifecycle_events(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = std::result::Result<Event, Infallible>>>> {
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| Error::InvalidRequest("Last-Event-ID must be an event sequence number".into()))?,
        None => state.processes.events().latest(),
    };
    struct Cursor {
        state: AppState,
        after: u64,
        latest: tokio::sync::watch::Receiver<u64>,
        pending: std::collections::VecDeque<Event>,
    }
    let mut cursor = Cursor { latest: state.processes.events().subscribe(), state, after, pending: Default::default() };
    // Sequences only grow within one run of the node agent, so an id past the newest
    // was given by an earlier run (sequences restart at 1) or is bogus: without a word
    // the client would wait for numbers it already saw. `reset` says "start over" and
    // carries id 0, so a client that resumes by `Last-Event-ID` (an EventSource, our
    // followers) replays this run's events from the start.
    let latest = cursor.state.processes.events().latest();
    if cursor.after > latest {
        let data =
            serde_json::json!({ "reason": "Last-Event-ID is not from this run of the node agent", "latest": latest });
        cursor.pending.push_back(Event::default().id("0").event("reset").data(data.to_string()));
        cursor.after = 0;
    }
    let stream = futures_util::stream::unfold(cursor, |mut cursor| async move {
        loop {
            if let Some(event) = cursor.pending.pop_front() {
                return Some((Ok(event), cursor));
            }
            cursor.latest.borrow_and_update();
            let (gap, events) = cursor.state.processes.events().since(cursor.after);
            if let Some(gap) = gap {
                // Past the gap once it is told: a cursor left before it sent the same
                // gap on every pass, an endless stream.
                cursor.after = cursor.after.max(gap.to.saturating_sub(1));
                cursor.state.metrics.count_gap("lifecycle");
                let data = serde_json::to_string(&gap).expect("gap serializes");
                cursor.pending.push_back(Event::default().event("gap").data(data));
            }
            for event in events {
                cursor.after = event.sequence;
                let data = serde_json::to_string(&event).expect("events serialize");
                cursor
                    .pending
                    .push_back(Event::default().id(event.sequence.to_string()).event(event.kind.as_str()).data(data));
            }
            if !cursor.pending.is_empty() {
                continue;
            }
            tokio::select! {
                changed = cursor.latest.changed() => if changed.is_err() { return None },
                () = cursor.state.shutdown.cancelled() => return None,
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The agents this node agent can drive.
#[utoipa::path(get, path = "/v1/agents", tag = "agents", responses((status = 200, body = AgentList)))]
async fn list_agents(State(state): State<AppState>) -> Json<AgentList> {
    let host = state.sessions.host();
    let mut agents = Vec::with_capacity(AgentId::ALL.len());
    for agent in AgentId::ALL {
        agents.push(agent.info(host).await);
    }
    Json(AgentList { agents })
}

/// One agent.
#[utoipa::path(get, path = "/v1/agents/{agent}", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentInfo), (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent")))]
async fn get_agent(
    State(state): State<AppState>,
    axum::extract::Path(agent): axum::extract::Path<String>,
) -> Result<Json<AgentInfo>> {
    let agent = AgentId::parse(&agent).ok_or(Error::AgentNotFound(agent))?;
    Ok(Json(agent.info(state.sessions.host()).await))
}

/// An agent id from a route's path (`unsupported_agent`, 404).
fn agent_from_path(agent: String) -> Result<AgentId> {
    AgentId::parse(&agent).ok_or(Error::AgentNotFound(agent))
}

/// Installs an agent's CLI from the npm registry (the user's npm configuration
/// applies), verified against the registry's integrity. The same version again is a
/// no-op (`alreadyInstalled`) unless `reinstall`. With `Accept: text/event-stream` the
/// answer is an SSE stream of `install.progress` events ending in `install.completed`
/// (an `InstallResult`) or `install.failed` (a problem document). The install goes on
/// if the client goes away.
#[utoipa::path(post, path = "/v1/agents/{agent}/install", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    request_body(content = Option<InstallRequest>, description = "Optional: the pinned version by default"),
    responses(
        (status = 200, body = InstallResult, description = "Installed, or already there"),
        (status = 200, content_type = "text/event-stream", body = InstallProgress, description = "When asked for: `install.progress`, then `install.completed` or `install.failed`"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request: not an exact version, or the built-in mock"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent"),
        (status = 502, body = Problem, content_type = "application/problem+json", description = "install_failed, with npm's error; what was installed before is untouched"),
    ))]
async fn install_agent(
    State(state): State<AppState>,
    axum::extract::Path(agent): axum::extract::Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response> {
    let agent = agent_from_path(agent)?;
    let request: InstallRequest = if body.iter().all(u8::is_ascii_whitespace) {
        InstallRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| Error::InvalidRequest(format!("invalid install request: {e}")))?
    };
    if agent.package().is_none() {
        return Err(Error::InvalidRequest(format!("{} is built in: there is nothing to install", agent.as_str())));
    }
    if let Some(version) = &request.version {
        crate::agents::install::check_version(version)?;
    }
    let wants_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    // Progress is small and cumulative: a few phase changes wait for room, counts
    // beyond this are dropped (the next one carries the totals).
    let (tx, mut rx) = mpsc::channel::<InstallProgress>(64);
    let host = Arc::clone(state.sessions.host());
    let options = crate::agents::install::InstallOptions { version: request.version, reinstall: request.reinstall };
    // Its own task, so that a client going away does not leave a half-done install.
    let install = tokio::spawn(async move {
        let outcome = host.installer.install(agent, &options, Some(&tx)).await;
        outcome.map(|o| InstallResult {
            agent: agent.as_str().to_string(),
            version: o.installed.version,
            path: o.installed.bin.display().to_string(),
            already_installed: o.already_installed,
            integrity: o.integrity,
        })
    });
    let joined = |joined: std::result::Result<Result<InstallResult>, tokio::task::JoinError>| {
        joined.unwrap_or_else(|e| Err(Error::InstallFailed(format!("the install stopped: {e}"))))
    };
    if !wants_sse {
        return Ok(Json(joined(install.await)?).into_response());
    }
    let shutdown = state.shutdown.clone();
    let stream = async_stream_of(move |out| async move {
        while let Some(progress) = rx.recv().await {
            let data = serde_json::to_string(&progress).expect("progress serializes");
            if out.send(Event::default().event("install.progress").data(data)).await.is_err() {
                return;
            }
        }
        let event = tokio::select! {
            result = install => match joined(result) {
                Ok(result) => Event::default().event("install.completed").data(serde_json::to_string(&result).expect("results serialize")),
                Err(error) => Event::default().event("install.failed").data(serde_json::to_string(&error.to_problem()).expect("problems serialize")),
            },
            () = shutdown.cancelled() => return,
        };
        let _ = out.send(event).await;
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// A stream fed by a task through a bounded channel (one event in flight: the task
/// goes at the client's pace).
fn async_stream_of<F, Fut>(produce: F) -> impl Stream<Item = std::result::Result<Event, Infallible>>
where
    F: FnOnce(mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(produce(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// The agent's own modes (`agentMode`) and the permission modes its driver accepts.
#[utoipa::path(get, path = "/v1/agents/{agent}/modes", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentModes), (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent")))]
async fn agent_modes(axum::extract::Path(agent): axum::extract::Path<String>) -> Result<Json<AgentModes>> {
    Ok(Json(crate::agents::catalog::modes(agent_from_path(agent)?)))
}

/// The models a session's `model` may name, as far as the node agent knows them
/// (`source` says from where; `note` what else the agent takes).
#[utoipa::path(get, path = "/v1/agents/{agent}/models", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentModels), (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent")))]
async fn agent_models(axum::extract::Path(agent): axum::extract::Path<String>) -> Result<Json<AgentModels>> {
    Ok(Json(crate::agents::catalog::models(agent_from_path(agent)?)))
}

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
    let info = state.sessions.get(&id)?.end().await;
    let feeding = state.processes.list_for(None, None, Some(&id));
    let timeout = state.processes.limits().stop_timeout;
    let stops = feeding.iter().filter(|p| !p.run_state().is_exited()).map(|p| {
        let signal = if p.is_pty() { nix::sys::signal::Signal::SIGHUP } else { nix::sys::signal::Signal::SIGTERM };
        state.processes.stop(p, signal, timeout)
    });
    for stopped in futures_util::future::join_all(stops).await {
        if let Err(error) = stopped {
            tracing::warn!(session = %id, %error, "could not stop a process of an ended session");
        }
    }
    Ok(Json(info))
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
    if request.message.is_empty() {
        return Err(Error::InvalidRequest("`message` must not be empty".into()));
    }
    Ok((StatusCode::ACCEPTED, Json(session.send_message(request.message).await?)))
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
