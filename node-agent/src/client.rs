//! A typed client of the node agent's API: what the CLI, the tests and the
//! controller use to drive a node agent.

use futures_util::{Stream, StreamExt};
use reqwest::{Method, RequestBuilder, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::error::Problem;
use crate::model::*;
use crate::universal::{PermissionReply, UniversalEvent};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node agent answered with a problem document.
    #[error("{}: {}", .0.title, .0.detail)]
    Problem(Problem),
    #[error("request to {url} failed: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("unexpected answer {status} from {url}: {body}")]
    Unexpected { url: String, status: u16, body: String },
    #[error("WebSocket to {url}: {source}")]
    WebSocket {
        url: String,
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
    #[error("invalid node agent URL {0:?}")]
    InvalidUrl(String),
}

impl ClientError {
    /// The problem's code (`process_not_found`, ...), when the server sent one.
    pub fn problem_code(&self) -> Option<&str> {
        match self {
            ClientError::Problem(p) => Some(p.code()),
            _ => None,
        }
    }
}

pub type ClientResult<T> = std::result::Result<T, ClientError>;

pub type TerminalSocket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A response body as it arrives: what [`Client::fs_read`] and [`Client::fs_download`] answer.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = ClientResult<bytes::Bytes>> + Send>>;

#[derive(Clone, Debug)]
pub struct Client {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> ClientResult<Self> {
        let base = Url::parse(base).map_err(|_| ClientError::InvalidUrl(base.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(ClientError::InvalidUrl(base.to_string()));
        }
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .map_err(|source| ClientError::Http { url: base.to_string(), source })?;
        Ok(Client { base, token, http })
    }

    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// `base/v1/<segments...>`, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        {
            let mut path = url.path_segments_mut().expect("checked in new");
            path.pop_if_empty().push("v1");
            path.extend(segments);
        }
        url
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let builder = self.http.request(method, self.url(segments));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    async fn send<T: DeserializeOwned>(&self, builder: RequestBuilder) -> ClientResult<T> {
        let (client, request) = builder.build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let response =
            client.execute(request).await.map_err(|source| ClientError::Http { url: url.clone(), source })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|source| ClientError::Http { url: url.clone(), source })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| ClientError::Unexpected {
                url,
                status: status.as_u16(),
                body: format!("{e}: {}", String::from_utf8_lossy(&bytes)),
            });
        }
        match serde_json::from_slice::<Problem>(&bytes) {
            Ok(problem) => Err(ClientError::Problem(problem)),
            Err(_) => Err(ClientError::Unexpected {
                url,
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            }),
        }
    }

    pub async fn health(&self) -> ClientResult<Health> {
        self.send(self.request(Method::GET, &["health"])).await
    }

    pub async fn create_process(&self, request: &CreateProcessRequest) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes"]).json(request)).await
    }

    pub async fn list_processes(&self, query: &ListProcessesQuery) -> ClientResult<Vec<ProcessInfo>> {
        let list: ProcessList = self.send(self.request(Method::GET, &["processes"]).query(query)).await?;
        Ok(list.processes)
    }

    pub async fn get_process(&self, id: &str) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::GET, &["processes", id])).await
    }

    pub async fn delete_process(&self, id: &str, query: &DeleteProcessQuery) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::DELETE, &["processes", id]).query(query)).await
    }

    pub async fn signal(&self, id: &str, request: &SignalRequest) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes", id, "signal"]).json(request)).await
    }

    pub async fn resize(&self, id: &str, size: PtySize) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes", id, "resize"]).json(&size)).await
    }

    pub async fn input(&self, id: &str, request: &InputRequest) -> ClientResult<ProcessInfo> {
        self.send(self.request(Method::POST, &["processes", id, "input"]).json(request)).await
    }

    pub async fn output(&self, id: &str, query: &OutputQuery) -> ClientResult<OutputChunk> {
        self.send(self.request(Method::GET, &["processes", id, "output"]).query(query)).await
    }

    /// stdout and stderr interleaved in the order the node agent received them.
    pub async fn interleaved_output(
        &self,
        id: &str,
        query: &InterleavedOutputQuery,
    ) -> ClientResult<InterleavedOutput> {
        self.send(self.request(Method::GET, &["processes", id, "output", "interleaved"]).query(query)).await
    }

    pub async fn ticket(&self, id: &str) -> ClientResult<Ticket> {
        self.send(self.request(Method::POST, &["processes", id, "ticket"])).await
    }

    /// The URL of a process's terminal WebSocket (without credentials).
    pub fn connect_url(&self, id: &str, query: &ConnectQuery) -> Url {
        let mut url = self.url(&["processes", id, "connect"]);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme).expect("ws and wss are valid schemes");
        let encoded = serde_urlencoded(query);
        url.set_query((!encoded.is_empty()).then_some(encoded.as_str()));
        url
    }

    /// Opens the terminal WebSocket, authenticated with the bearer token.
    pub async fn connect(&self, id: &str, query: &ConnectQuery) -> ClientResult<TerminalSocket> {
        let url = self.connect_url(id, query);
        let ws_error = |source| ClientError::WebSocket { url: url.to_string(), source: Box::new(source) };
        let mut request = url.as_str().into_client_request().map_err(ws_error)?;
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| ClientError::InvalidUrl("the token is not a valid header value".into()))?;
            request.headers_mut().insert("authorization", value);
        }
        match tokio_tungstenite::connect_async_with_config(request, None, true).await {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body = response.body().as_deref().unwrap_or_default();
                match serde_json::from_slice::<Problem>(body) {
                    Ok(problem) => Err(ClientError::Problem(problem)),
                    Err(_) => Err(ClientError::Unexpected {
                        url: url.to_string(),
                        status: response.status().as_u16(),
                        body: String::from_utf8_lossy(body).into_owned(),
                    }),
                }
            }
            Err(e) => Err(ws_error(e)),
        }
    }

    /// Lifecycle events over SSE, resuming after `last_event_id` when given.
    pub async fn lifecycle_events(
        &self,
        last_event_id: Option<u64>,
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<SseMessage>>> {
        let mut builder = self.request(Method::GET, &["events", "sse"]);
        if let Some(id) = last_event_id {
            builder = builder.header("last-event-id", id.to_string());
        }
        self.open_sse(builder, &["events", "sse"]).await
    }

    async fn open_sse(
        &self,
        builder: RequestBuilder,
        segments: &[&str],
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<SseMessage>>> {
        let url = self.url(segments).to_string();
        let response = builder.send().await.map_err(|source| ClientError::Http { url: url.clone(), source })?;
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            return Err(match serde_json::from_str::<Problem>(&body) {
                Ok(problem) => ClientError::Problem(problem),
                Err(_) => ClientError::Unexpected { url, status, body },
            });
        }
        Ok(sse_messages(response.bytes_stream(), url).boxed())
    }

    /// A one-time login code for a browser page (`/ui/#code=CODE`).
    pub async fn create_login_code(&self) -> ClientResult<LoginCode> {
        self.send(self.request(Method::POST, &["auth", "codes"])).await
    }

    /// Exchanges a login code for a bearer token of its own (needs no token).
    pub async fn exchange_login_code(&self, code: &str) -> ClientResult<BrowserToken> {
        let body = ExchangeCodeRequest { code: code.to_string() };
        self.send(self.http.post(self.url(&["auth", "exchange"])).json(&body)).await
    }

    /// The resources of the `agentplane up` this node agent is embedded in.
    pub async fn resources(&self) -> ClientResult<ResourceList> {
        self.send(self.request(Method::GET, &["resources"])).await
    }

    /// The resources again each time they change: the whole list per event, the
    /// first at once.
    pub async fn resource_events(
        &self,
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<ResourceList>>> {
        let segments = ["resources", "sse"];
        let url = self.url(&segments).to_string();
        let messages = self.open_sse(self.request(Method::GET, &segments), &segments).await?;
        Ok(messages
            .map(move |message| {
                let message = message?;
                serde_json::from_str(&message.data).map_err(|e| ClientError::Unexpected {
                    url: url.clone(),
                    status: 200,
                    body: format!("{e}: {}", message.data),
                })
            })
            .boxed())
    }

    pub async fn list_agents(&self) -> ClientResult<Vec<AgentInfo>> {
        let list: AgentList = self.send(self.request(Method::GET, &["agents"])).await?;
        Ok(list.agents)
    }

    pub async fn get_agent(&self, agent: &str) -> ClientResult<AgentInfo> {
        self.send(self.request(Method::GET, &["agents", agent])).await
    }

    /// Installs an agent (the pinned version unless `request.version`), waiting for it.
    pub async fn install_agent(&self, agent: &str, request: &InstallRequest) -> ClientResult<InstallResult> {
        self.send(self.request(Method::POST, &["agents", agent, "install"]).json(request)).await
    }

    /// Installs an agent over SSE, calling `on_progress` with each progress event;
    /// `install.failed` becomes [`ClientError::Problem`].
    pub async fn install_agent_with_progress(
        &self,
        agent: &str,
        request: &InstallRequest,
        mut on_progress: impl FnMut(&InstallProgress),
    ) -> ClientResult<InstallResult> {
        let segments = ["agents", agent, "install"];
        let url = self.url(&segments).to_string();
        let builder =
            self.request(Method::POST, &segments).header(reqwest::header::ACCEPT, "text/event-stream").json(request);
        let mut messages = self.open_sse(builder, &segments).await?;
        let unexpected = |body: String| ClientError::Unexpected { url: url.clone(), status: 200, body };
        while let Some(message) = messages.next().await {
            let message = message?;
            let parse_error = |e: serde_json::Error| unexpected(format!("{e}: {}", message.data));
            match message.event.as_deref() {
                Some("install.progress") => on_progress(&serde_json::from_str(&message.data).map_err(parse_error)?),
                Some("install.completed") => return serde_json::from_str(&message.data).map_err(parse_error),
                Some("install.failed") => {
                    return Err(ClientError::Problem(serde_json::from_str(&message.data).map_err(parse_error)?));
                }
                _ => {}
            }
        }
        Err(unexpected("the install stream ended before the install did".into()))
    }

    /// The agent's own modes and the permission modes its driver accepts.
    pub async fn agent_modes(&self, agent: &str) -> ClientResult<AgentModes> {
        self.send(self.request(Method::GET, &["agents", agent, "modes"])).await
    }

    /// The models a session may name for the agent, as the node agent knows them.
    pub async fn agent_models(&self, agent: &str) -> ClientResult<AgentModels> {
        self.send(self.request(Method::GET, &["agents", agent, "models"])).await
    }

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

    /// Starts a failed session again, resuming its conversation; `conflict` when it
    /// is not failed (live, ended, or restarted meanwhile by another caller).
    pub async fn restart_session(&self, id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id, "restart"])).await
    }

    /// The session's workspace against the commit it was cloned at (`text/x-diff`),
    /// as a stream of bytes: a diff can be as large as the tree.
    pub async fn session_diff(&self, id: &str) -> ClientResult<impl Stream<Item = ClientResult<bytes::Bytes>> + use<>> {
        let builder = self.request(Method::GET, &["sessions", id, "diff"]);
        let (client, request) = builder.build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let response =
            client.execute(request).await.map_err(|source| ClientError::Http { url: url.clone(), source })?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await.map_err(|source| ClientError::Http { url: url.clone(), source })?;
            return Err(match serde_json::from_slice::<Problem>(&bytes) {
                Ok(problem) => ClientError::Problem(problem),
                Err(_) => ClientError::Unexpected {
                    url,
                    status: status.as_u16(),
                    body: String::from_utf8_lossy(&bytes).into_owned(),
                },
            });
        }
        Ok(response
            .bytes_stream()
            .map(move |chunk| chunk.map_err(|source| ClientError::Http { url: url.clone(), source })))
    }

    /// Queues a message; it runs as a turn after those before it.
    pub async fn send_message(&self, id: &str, message: &str) -> ClientResult<SessionInfo> {
        let body = SendMessageRequest { message: message.to_string() };
        self.send(self.request(Method::POST, &["sessions", id, "messages"]).json(&body)).await
    }

    /// Events after `query.offset`, at most `query.limit`.
    pub async fn session_events(&self, id: &str, query: &SessionEventsQuery) -> ClientResult<SessionEvents> {
        self.send(self.request(Method::GET, &["sessions", id, "events"]).query(query)).await
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
        let mut builder = self.request(Method::GET, &segments).query(&SessionSseQuery { offset });
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
                    body: format!("{e}: {}", message.data),
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

    /// A directory's entries, by name.
    pub async fn fs_entries(&self, path: &str) -> ClientResult<FsEntries> {
        self.send(self.request(Method::GET, &["fs", "entries"]).query(&[("path", path)])).await
    }

    /// One entry, as `lstat` sees it (a symlink is reported, not followed).
    pub async fn fs_stat(&self, path: &str) -> ClientResult<FsEntry> {
        self.send(self.request(Method::GET, &["fs", "stat"]).query(&[("path", path)])).await
    }

    /// A file's bytes as they arrive; `range` is `(first, last)`, both inclusive
    /// (`last` `None`: to the end), as in an HTTP `Range`.
    pub async fn fs_read(&self, path: &str, range: Option<(u64, Option<u64>)>) -> ClientResult<ByteStream> {
        let mut builder = self.request(Method::GET, &["fs", "file"]).query(&[("path", path)]);
        if let Some((first, last)) = range {
            let last = last.map(|l| l.to_string()).unwrap_or_default();
            builder = builder.header(reqwest::header::RANGE, format!("bytes={first}-{last}"));
        }
        self.open_bytes(builder).await
    }

    /// Writes a file from `body`, atomically (readers see the old or the new file).
    pub async fn fs_write(&self, path: &str, body: reqwest::Body, options: &FsWriteOptions) -> ClientResult<FsEntry> {
        let query = FsWriteQuery {
            path: path.to_string(),
            mode: options.mode.map(|mode| format!("{mode:o}")),
            parents: options.parents,
        };
        let builder = self
            .request(Method::PUT, &["fs", "file"])
            .query(&query)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body);
        self.send(builder).await
    }

    /// Creates a directory and its missing parents; an existing directory is fine.
    pub async fn fs_mkdir(&self, path: &str) -> ClientResult<FsEntry> {
        self.send(self.request(Method::POST, &["fs", "mkdir"]).query(&[("path", path)])).await
    }

    /// Renames `from` to `to`; `conflict` when `to` exists and `overwrite` is false.
    pub async fn fs_move(&self, request: &FsMoveRequest) -> ClientResult<FsEntry> {
        self.send(self.request(Method::POST, &["fs", "move"]).json(request)).await
    }

    /// Deletes a file, a symlink (never what it points to) or a directory
    /// (`directory_not_empty` unless `recursive`).
    pub async fn fs_delete(&self, path: &str, recursive: bool) -> ClientResult<()> {
        let query = FsDeleteQuery { path: path.to_string(), recursive };
        let response = self.open(self.request(Method::DELETE, &["fs", "entry"]).query(&query)).await?;
        drop(response);
        Ok(())
    }

    /// Extracts a tar stream into the directory `dir` (created when missing).
    pub async fn fs_upload(&self, dir: &str, tar: reqwest::Body) -> ClientResult<FsUploadResult> {
        let builder = self
            .request(Method::POST, &["fs", "upload"])
            .query(&[("path", dir)])
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
            .body(tar);
        self.send(builder).await
    }

    /// A tar stream of a directory (entries relative to it) or of one file.
    pub async fn fs_download(&self, path: &str) -> ClientResult<ByteStream> {
        self.open_bytes(self.request(Method::GET, &["fs", "download"]).query(&[("path", path)])).await
    }

    /// Changes under `path` as they happen. The watch is in place when this returns.
    pub async fn fs_watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> ClientResult<impl Stream<Item = ClientResult<FsEvent>> + Send + 'static> {
        let segments = ["fs", "watch"];
        let url = self.url(&segments).to_string();
        let query = FsWatchQuery { path: path.to_string(), recursive };
        let messages = self.open_sse(self.request(Method::GET, &segments).query(&query), &segments).await?;
        Ok(messages.map(move |message| {
            let message = message?;
            serde_json::from_str(&message.data).map_err(|e| ClientError::Unexpected {
                url: url.clone(),
                status: 200,
                body: format!("{e}: {}", message.data),
            })
        }))
    }

    /// Sends a request and answers its response when it succeeded, its problem when not.
    async fn open(&self, builder: RequestBuilder) -> ClientResult<reqwest::Response> {
        let (client, request) = builder.build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let response =
            client.execute(request).await.map_err(|source| ClientError::Http { url: url.clone(), source })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Err(match serde_json::from_str::<Problem>(&body) {
            Ok(problem) => ClientError::Problem(problem),
            Err(_) => ClientError::Unexpected { url, status, body },
        })
    }

    async fn open_bytes(&self, builder: RequestBuilder) -> ClientResult<ByteStream> {
        let response = self.open(builder).await?;
        let url = response.url().to_string();
        Ok(Box::pin(
            response
                .bytes_stream()
                .map(move |chunk| chunk.map_err(|source| ClientError::Http { url: url.clone(), source })),
        ))
    }
}

/// One item of a session's SSE stream.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionStreamItem {
    Event(Box<UniversalEvent>),
    /// These sequences are lost (`to` exclusive); the stream goes on after them.
    Gap(Gap),
}

fn serde_urlencoded<T: Serialize>(value: &T) -> String {
    // reqwest's own encoder, borrowed through a throwaway request.
    reqwest::Client::new()
        .get("http://x/")
        .query(value)
        .build()
        .ok()
        .and_then(|r| r.url().query().map(str::to_string))
        .unwrap_or_default()
}

/// One server-sent event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseMessage {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

fn sse_messages(
    bytes: impl Stream<Item = reqwest::Result<bytes::Bytes>> + Send + 'static,
    url: String,
) -> impl Stream<Item = ClientResult<SseMessage>> + Send + 'static {
    struct State<S> {
        bytes: std::pin::Pin<Box<S>>,
        buffer: Vec<u8>,
        url: String,
    }
    let state = State { bytes: Box::pin(bytes), buffer: Vec::new(), url };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(end) = find_event_end(&state.buffer) {
                let block: Vec<u8> = state.buffer.drain(..end.1).collect();
                let message = parse_sse_block(&String::from_utf8_lossy(&block[..end.0]));
                match message {
                    Some(message) => return Some((Ok(message), state)),
                    None => continue, // a comment (keep-alive)
                }
            }
            match state.bytes.next().await {
                Some(Ok(chunk)) => state.buffer.extend_from_slice(&chunk),
                Some(Err(source)) => return Some((Err(ClientError::Http { url: state.url.clone(), source }), state)),
                None => return None,
            }
        }
    })
}

/// (end of the block, end including the blank line)
fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, i + 2));
    let crlf = buffer.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn parse_sse_block(block: &str) -> Option<SseMessage> {
    let mut message = SseMessage::default();
    let mut data_lines = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
        match field {
            "id" => message.id = Some(value.to_string()),
            "event" => message.event = Some(value.to_string()),
            "data" => data_lines.push(value),
            _ => {}
        }
    }
    if message.id.is_none() && message.event.is_none() && data_lines.is_empty() {
        return None;
    }
    message.data = data_lines.join("\n");
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_segments_and_queries() {
        let client = Client::new("http://127.0.0.1:2468/", None).unwrap();
        assert_eq!(client.url(&["processes", "a b/c"]).as_str(), "http://127.0.0.1:2468/v1/processes/a%20b%2Fc");
        let url = client.connect_url("p1", &ConnectQuery { offset: Some(5), ..Default::default() });
        assert_eq!(url.as_str(), "ws://127.0.0.1:2468/v1/processes/p1/connect?offset=5");
        assert!(Client::new("not a url", None).is_err());
    }

    #[test]
    fn sse_blocks() {
        assert_eq!(
            parse_sse_block("id: 3\nevent: process.created\ndata: {\"a\":1}"),
            Some(SseMessage { id: Some("3".into()), event: Some("process.created".into()), data: "{\"a\":1}".into() })
        );
        assert_eq!(parse_sse_block(":keep-alive"), None);
    }
}
