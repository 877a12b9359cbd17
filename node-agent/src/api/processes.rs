//! Processes and terminals: the REST lifecycle calls, output by offset, the
//! terminal WebSocket, and lifecycle events over SSE.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::response::sse::{Event, KeepAlive, Sse};
use base64::Engine as _;
use futures_util::{SinkExt, Stream, StreamExt};
use tokio::sync::mpsc;

use crate::error::{Error, Problem, Result};
use crate::metrics::Metrics;
use crate::model::*;
use crate::output::{Next, OutputBuffer};
use crate::process::{Process, RunState};
use crate::signals::parse_signal;

use super::{AppState, Json, PathId, Query, Route, route};

/// Largest binary frame sent to a terminal client: big enough that a fast producer
/// costs few frames, small enough to keep latency and memory per client low.
const MAX_FRAME: usize = 256 * 1024;
/// Output floods when frames this large follow each other within [`FLOOD_WINDOW`]:
/// then the sender waits [`FLOOD_WAIT`] for more before the next frame, so a flood goes
/// out in frames of tens of KiB instead of one per PTY read (4 KiB: the line
/// discipline's buffer), each costing a wake-up, a frame and a write. Typing and
/// prompts are small frames, and never wait.
const FLOOD_FRAME: usize = 4 * 1024;
const FLOOD_WINDOW: Duration = Duration::from_millis(2);
const FLOOD_WAIT: Duration = Duration::from_millis(1);
/// What a flood's frame gathers before it goes without waiting.
const FLOOD_GATHER: u64 = 64 * 1024;
/// Whether the terminal sender waits [`FLOOD_WAIT`] before its next frame: the last
/// frame was a flood's (large, and recent), and less than a full frame's worth waits.
fn gathers(last_frame: usize, since_last: Duration, available: u64, closed: bool) -> bool {
    last_frame >= FLOOD_FRAME && since_last < FLOOD_WINDOW && available < FLOOD_GATHER && !closed
}

/// Largest message a terminal client may send: keystrokes and pastes, not files. With
/// the bounded input queue this caps what one client can make the node agent hold.
const MAX_CLIENT_MESSAGE: usize = 1024 * 1024;
/// Most bytes sent past a client's last `ack`, once it acks (see `ControlMessage::Ack`).
const ACK_WINDOW: u64 = 1024 * 1024;
/// Largest response of `GET .../output`.
const MAX_OUTPUT_READ: usize = 1024 * 1024;

/// Each route with its document: the path and method come from the handler's
/// `#[utoipa::path]`, so a route cannot be served without being described.
pub(super) const ROUTES: &[Route] = &[
    route!(list_processes, create_process),
    route!(get_process, delete_process),
    route!(signal_process),
    route!(resize_process),
    route!(write_input),
    route!(read_output),
    route!(read_interleaved_output),
    route!(issue_ticket),
    route!(connect),
    route!(lifecycle_events),
];

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
    let info = crate::in_process::create_process(&state.processes, &state.sessions, request).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Processes in the order they were created.
#[utoipa::path(get, path = "/v1/processes", tag = "processes", params(ListProcessesQuery),
    responses((status = 200, body = ProcessList)))]
async fn list_processes(State(state): State<AppState>, Query(query): Query<ListProcessesQuery>) -> Json<ProcessList> {
    Json(ProcessList { processes: crate::in_process::list_processes(&state.processes, &query) })
}

/// One process, by id or else by tag (the newest with it).
#[utoipa::path(get, path = "/v1/processes/{id}", tag = "processes", params(("id" = String, Path, description = "Process id or tag")),
    responses((status = 200, body = ProcessInfo), (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_process(State(state): State<AppState>, PathId(id): PathId) -> Result<Json<ProcessInfo>> {
    Ok(Json(crate::in_process::get_process(&state.processes, &id)?))
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
    Ok(Json(crate::in_process::delete_process(&state.processes, &id, &query).await?))
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

/// The `wait` of an output read (a long poll): until `more` comes, the process exits,
/// the node agent stops, or `wait` seconds pass; nothing without `wait`.
async fn long_poll(
    state: &AppState,
    headers: &HeaderMap,
    process: &Process,
    wait: Option<f64>,
    more: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let Some(wait) = wait else { return Ok(()) };
    if !wait.is_finite() || !(0.0..=60.0).contains(&wait) {
        return Err(Error::InvalidRequest(format!("wait {wait} must be between 0 and 60 seconds")));
    }
    // A client waiting for output follows it, as one on a socket does.
    let _following = state.activity.follow(headers);
    let mut run_state = process.watch_state();
    let _ = tokio::time::timeout(Duration::from_secs_f64(wait), async {
        tokio::select! {
            () = more => {}
            _ = run_state.wait_for(RunState::is_exited) => {}
            () = state.shutdown.cancelled() => {}
        }
    })
    .await;
    Ok(())
}

/// Retained output from a byte offset, for clients without WebSocket. With `wait`,
/// waits for output past the offset (a long poll).
#[utoipa::path(get, path = "/v1/processes/{id}/output", tag = "processes", params(("id" = String, Path), OutputQuery),
    responses((status = 200, body = OutputChunk), (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn read_output(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<OutputQuery>,
    headers: HeaderMap,
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
    long_poll(&state, &headers, &process, query.wait, buffer.wait_past(offset)).await?;
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

/// stdout and stderr of a process without a terminal, chunk by chunk in the order
/// the node agent received them, each with its stream, offset and time: what
/// `kubectl logs` shows. `seq` and `nextSeq` page through it; with `wait`, waits for
/// a chunk at or past `seq` (a long poll). Bytes a ring dropped are a `gap` on their
/// frame; chunks whose order is no longer kept are the response's `gap`.
#[utoipa::path(get, path = "/v1/processes/{id}/output/interleaved", tag = "processes", params(("id" = String, Path), InterleavedOutputQuery),
    responses((status = 200, body = InterleavedOutput), (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request: a process on a PTY (one stream: use `/output`), or a bad parameter")))]
async fn read_interleaved_output(
    State(state): State<AppState>,
    PathId(id): PathId,
    Query(query): Query<InterleavedOutputQuery>,
    headers: HeaderMap,
) -> Result<Json<InterleavedOutput>> {
    let process = state.processes.get(&id)?;
    let stdout = Arc::clone(process.output(OutputStream::Stdout)?);
    let Some(index) = stdout.index().cloned() else {
        return Err(Error::InvalidRequest(format!(
            "process {id:?} runs on a PTY: its output is one stream, in order: read it from `/output`"
        )));
    };
    let stderr = Arc::clone(process.output(OutputStream::Stderr)?);
    let since = query.since.as_deref().map(parse_since).transpose()?;
    let seq = query.seq.unwrap_or(0);
    let limit = query.limit.unwrap_or(MAX_OUTPUT_READ).clamp(1, MAX_OUTPUT_READ);
    long_poll(&state, &headers, &process, query.wait, index.wait_past(seq)).await?;
    // Read after the index: every chunk it names was in its ring before it was recorded.
    let read = index.read(seq, since, usize::MAX);
    let encoding = query.encoding.unwrap_or_default();
    let mut frames = Vec::new();
    let mut bytes = 0usize;
    let mut next_seq = read.next_seq;
    for entry in read.entries {
        if !frames.is_empty() && bytes.saturating_add(entry.len as usize) > limit {
            next_seq = entry.seq;
            break;
        }
        let buffer = if entry.stream == OutputStream::Stderr { &stderr } else { &stdout };
        let end = entry.offset.saturating_add(entry.len);
        let mut got = buffer.read(entry.offset, entry.len as usize);
        // Past a gap the ring reads on from its oldest byte: keep only this chunk's.
        let kept = end.saturating_sub(got.offset) as usize;
        got.data.truncate(kept);
        let gap = got.gap.map(|gap| Gap { from: gap.from, to: gap.to.min(end) });
        bytes = bytes.saturating_add(got.data.len());
        let data = match encoding {
            OutputEncoding::Utf8 => String::from_utf8_lossy(&got.data).into_owned(),
            OutputEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&got.data),
        };
        frames.push(OutputFrame {
            seq: entry.seq,
            stream: entry.stream,
            offset: got.offset.min(end),
            time: entry.at,
            gap,
            data,
        });
    }
    if read.gap.is_some() {
        state.metrics.count_gap("output");
    }
    Ok(Json(InterleavedOutput {
        eof: read.closed && next_seq == read.next_seq,
        frames,
        next_seq,
        gap: read.gap,
        encoding,
        status: process.info().status,
    }))
}

/// `since=`: an RFC 3339 time, or a number of seconds before now.
fn parse_since(text: &str) -> Result<time::OffsetDateTime> {
    let now = time::OffsetDateTime::now_utc();
    if let Ok(seconds) = text.trim().parse::<f64>() {
        return match time::Duration::checked_seconds_f64(seconds) {
            Some(ago) if seconds >= 0.0 => Ok(now.checked_sub(ago).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)),
            _ => Err(Error::InvalidRequest(format!("since {text:?} must be a number of seconds, 0 or more"))),
        };
    }
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| Error::InvalidRequest(format!("since {text:?} is neither an RFC 3339 time nor seconds: {e}")))
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
    check_origin(&state, &headers)?;
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
    let following = state.activity.follow(&headers);
    Ok(upgrade.on_upgrade(move |socket| async move {
        terminal_session(socket, state, process, buffer, query.offset, query.ack == Some(true)).await;
        drop(following);
    }))
}

/// Browsers send Origin; a page from an origin not allowed must not drive a terminal
/// (or an agent). The node agent's own pages (the inspector at `/ui/`) are of the
/// origin the request is addressed to.
pub(super) fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<()> {
    if let Some(origin) = headers.get(header::ORIGIN)
        && !state.allowed_origins.iter().any(|allowed| allowed == origin)
        && !same_origin(origin, headers)
    {
        return Err(Error::Forbidden(format!(
            "origin {:?} is not allowed (--cors-origin)",
            origin.to_str().unwrap_or("?")
        )));
    }
    Ok(())
}

/// Whether `origin` is `http://HOST` or `https://HOST` of the `Host` the request was
/// sent to: a page this node agent served itself.
fn same_origin(origin: &HeaderValue, headers: &HeaderMap) -> bool {
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), headers.get(header::HOST).map(|h| h.to_str())) else {
        return false;
    };
    let Some(origin_host) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

async fn terminal_session(
    socket: WebSocket,
    state: AppState,
    process: Arc<Process>,
    buffer: Arc<OutputBuffer>,
    offset: Option<u64>,
    acks: bool,
) {
    let mut subscription = buffer.subscribe(offset);
    let _attached = Attached::new(&state.metrics);
    let (mut sink, mut source) = socket.split();
    // Answers to the client's control messages: at most one per message received, and
    // the receiver stops reading while this is full.
    let (replies_tx, mut replies_rx) = mpsc::channel::<ControlMessage>(16);
    // The client's last `ack`, if it acks at all.
    let (acked_tx, mut acked_rx) = tokio::sync::watch::channel::<Option<u64>>(acks.then(|| subscription.position()));

    let send = async {
        let ready = ControlMessage::Ready { offset: subscription.position() };
        sink.send(control_frame(&ready)).await?;
        let mut run_state = process.watch_state();
        // Where what is in flight starts when the client's ack is older: where this
        // connection started, or the end of the last gap (bytes never sent are not in
        // flight, so a stale ack cannot shut the window for good).
        let mut floor = subscription.position();
        // The last data frame sent: its size and when.
        let mut last_frame = (0usize, tokio::time::Instant::now());
        loop {
            if gathers(last_frame.0, last_frame.1.elapsed(), subscription.available(), subscription.closed()) {
                tokio::select! {
                    () = tokio::time::sleep(FLOOD_WAIT) => {}
                    () = state.shutdown.cancelled() => {
                        let _ = sink.send(Message::Close(None)).await;
                        return Ok(());
                    }
                }
            }
            let room = match *acked_rx.borrow_and_update() {
                Some(acked) => ACK_WINDOW.saturating_sub(subscription.position().saturating_sub(acked.max(floor))),
                None => MAX_FRAME as u64,
            };
            if room == 0 {
                // Not reading holds the program back as a slow client does, then gaps.
                tokio::select! {
                    changed = acked_rx.changed() => if changed.is_err() { return Ok(()) },
                    Some(reply) = replies_rx.recv() => sink.send(control_frame(&reply)).await?,
                    () = state.shutdown.cancelled() => {
                        let _ = sink.send(Message::Close(None)).await;
                        return Ok(());
                    }
                }
                continue;
            }
            let max = usize::try_from(room).unwrap_or(MAX_FRAME).min(MAX_FRAME);
            match subscription.try_next(max) {
                Some(Next::Data { data, .. }) => {
                    let size = data.len();
                    sink.send(Message::Binary(data.into())).await?;
                    last_frame = (size, tokio::time::Instant::now());
                    continue;
                }
                Some(Next::Gap(gap)) => {
                    floor = floor.max(gap.to);
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
                Message::Text(text) => apply_control(&state, &process, &acked_tx, text.as_str()).err(),
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

fn apply_control(
    state: &AppState,
    process: &Process,
    acked: &tokio::sync::watch::Sender<Option<u64>>,
    text: &str,
) -> std::result::Result<(), String> {
    match serde_json::from_str::<ControlMessage>(text) {
        Ok(ControlMessage::Ack { offset }) => {
            // Only forward: an ack older than the last one changes nothing.
            acked.send_if_modified(|last| {
                let newer = last.is_none_or(|last| offset > last);
                if newer {
                    *last = Some(offset);
                }
                newer
            });
            Ok(())
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_is_the_host_the_request_was_sent_to() {
        let headers = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            headers
        };
        let origin = |o: &str| HeaderValue::from_str(o).unwrap();
        let local = headers("127.0.0.1:2468");
        assert!(same_origin(&origin("http://127.0.0.1:2468"), &local));
        assert!(same_origin(&origin("https://127.0.0.1:2468"), &local));
        assert!(same_origin(&origin("http://LOCALHOST:9"), &headers("localhost:9")));
        assert!(!same_origin(&origin("http://127.0.0.1:2469"), &local));
        assert!(!same_origin(&origin("http://127.0.0.1"), &local));
        assert!(!same_origin(&origin("http://127.0.0.1:2468.evil.example"), &local));
        assert!(!same_origin(&origin("null"), &local));
        assert!(!same_origin(&origin("ws://127.0.0.1:2468"), &local));
        assert!(!same_origin(&origin("http://127.0.0.1:2468"), &HeaderMap::new()));
        assert!(!same_origin(&origin("http://"), &headers("")));
    }

    #[test]
    fn only_a_flood_waits_to_gather_its_next_frame() {
        let recent = Duration::from_micros(300);
        // A flood: a full read's frame just sent, less than a gathered frame waiting.
        assert!(gathers(4096, recent, 4096, false));
        assert!(gathers(60 * 1024, Duration::ZERO, 0, false));
        // Typing, prompts, a line of output: small frames never wait.
        assert!(!gathers(1, recent, 1, false));
        assert!(!gathers(FLOOD_FRAME - 1, recent, 100, false));
        // A large frame long ago is not a flood: the next goes at once.
        assert!(!gathers(256 * 1024, FLOOD_WINDOW, 10, false));
        // Enough gathered already, or nothing more will come: no wait.
        assert!(!gathers(4096, recent, FLOOD_GATHER, false));
        assert!(!gathers(4096, recent, 10, true));
    }
}
