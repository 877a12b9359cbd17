//! A typed client of the node agent's API: what the CLI, the tests and the
//! controller use to drive a node agent.
//!
//! A node agent is hostile input, whether the controller started it or someone else
//! runs it (an external `endpoint`, or a program in a sandbox posing as one): whatever
//! it answers, and however slowly, its caller stays bounded. An answer read whole is
//! read up to a limit and no further; a stream is cut into events of bounded size; an
//! error quotes at most [`MAX_QUOTED_BYTES`] of what was sent; and every call has a
//! deadline (see [`Timeouts`]): a total one for a request and its answer, an idle one
//! for a stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::{Method, RequestBuilder, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::error::Problem;
use crate::model::*;
use crate::universal::{PermissionReply, UniversalEvent};

/// The largest JSON answer read whole. The largest the node agent makes by design is a
/// page of output: 1 MiB of bytes, which JSON's escapes (`\u0000`) can make six times
/// longer; 8 MiB holds that with room. The controller's 32 workers, each reading one
/// hostile answer at once, hold at most 256 MiB.
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// A page of session events (`GET .../events`): up to 1,000 events by default and
/// 10,000 when asked, each as large as the agent's native line made it. Only the CLI
/// reads pages; the controller follows the SSE stream, one event at a time.
pub const MAX_EVENTS_PAGE_BYTES: usize = 64 * 1024 * 1024;
/// One server-sent event (its lines up to the blank one) is one JSON document: the
/// same bound as an answer.
pub const MAX_SSE_EVENT_BYTES: usize = MAX_ANSWER_BYTES;
/// How much of an error's body is read: a problem document is a title and a line or
/// two of detail, and a proxy's error page fits too. The rest is left unread.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// How much of a text a node agent sent (a body, a problem's detail, an event that did
/// not parse) an error quotes: enough to recognise it by, and little enough that a
/// status message holding it stays small.
pub const MAX_QUOTED_BYTES: usize = 1024;
/// A problem's type and title are a few words (`urn:agentplane:error:conflict`, `Conflict`).
const MAX_TITLE_BYTES: usize = 256;
/// The largest WebSocket message or frame taken from a terminal: the node agent sends
/// frames of at most 256 KiB (its `MAX_FRAME`) and small JSON control messages.
const MAX_TERMINAL_MESSAGE_BYTES: usize = 1024 * 1024;
/// How long a delete may wait on the node agent's own stop timeout when the call names
/// none: its default is 10 s unless configured otherwise.
const DEFAULT_STOP_ALLOWANCE: Duration = Duration::from_secs(60);
/// The longest stop timeout the node agent accepts in a delete.
const MAX_STOP_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long an install may take: the node agent gives npm 15 minutes and the version
/// lookup 2 before it gives up itself.
const INSTALL_ALLOWANCE: Duration = Duration::from_secs(20 * 60);
/// The longest long poll the node agent accepts (`wait` on output reads).
const MAX_LONG_POLL: Duration = Duration::from_secs(60);

/// How long a node agent may take. The defaults fit a node agent on this machine, on a
/// cluster's network or on a LAN; tests give short ones to see a hang in a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To connect (TCP, and TLS where used). 10 s: a node agent that has not accepted
    /// by then (three SYN retransmissions) is not there.
    pub connect: Duration,
    /// A health check, whole. 10 s: it is answered from memory, so this is only for a
    /// machine under load; and it is what says a sandbox is unreachable, so it says so soon.
    pub health: Duration,
    /// An ordinary call, whole: request, answer head and body. 30 s: the node agent
    /// answers from memory or after a short system call (spawn, signal, stat, rename).
    /// Calls that wait on purpose get their wait on top: a delete its stop timeout, a
    /// long poll its `wait`, an install the node agent's own install deadline.
    pub answer: Duration,
    /// A stream (SSE, a file's or a diff's bytes, the answer to an upload), which has
    /// no total deadline: the longest silence before its head and between two reads.
    /// 120 s: the node agent's SSE sends a keep-alive every 15 s, so this is eight
    /// missed; a diff's first bytes may wait on git refreshing its index.
    ///
    /// A terminal's WebSocket has none once open: a terminal may stay quiet for hours,
    /// and the person attached to it bounds it.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            health: Duration::from_secs(10),
            answer: Duration::from_secs(30),
            idle: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node agent answered with a problem document (its texts cut to size).
    #[error("{}: {}", .0.title, .0.detail)]
    Problem(Problem),
    #[error("request to {url} failed: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// An answer that is neither what was asked for nor a problem; `body` quotes it (see
    /// [`MAX_QUOTED_BYTES`]).
    #[error("unexpected answer {status} from {url}: {body}")]
    Unexpected { url: String, status: u16, body: String },
    /// An answer (or one event of a stream) larger than the client reads; the rest of it
    /// was left unread.
    #[error("{url}: answer larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// Nothing came in time: no connection, no answer, or on a stream no next bytes.
    #[error("{url}: {what} within {after:?}")]
    TimedOut { url: String, what: &'static str, after: Duration },
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

    /// The problem's code, when the server sent one this client knows: what callers
    /// compare (never the text).
    pub fn code(&self) -> Option<crate::error::ProblemCode> {
        match self {
            ClientError::Problem(p) => p.problem_code(),
            _ => None,
        }
    }
}

pub type ClientResult<T> = std::result::Result<T, ClientError>;

pub type TerminalSocket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A response body as it arrives: what [`Client::fs_read`] and [`Client::fs_download`] answer.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = ClientResult<bytes::Bytes>> + Send>>;

/// How long a text that was cut was, as far as the client knows.
#[derive(Debug, Clone, Copy)]
enum Length {
    Exactly(u64),
    /// Not read past this.
    MoreThan(usize),
}

/// `text` cut to `max` bytes on a character boundary; when cut, it says how long it was.
fn cut(text: &str, max: usize, length: Length) -> String {
    let whole = matches!(length, Length::Exactly(n) if n == text.len() as u64);
    if whole && text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max.min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    let length = match length {
        Length::Exactly(n) => format!("{n} bytes in all"),
        Length::MoreThan(n) => format!("more than {n} bytes"),
    };
    format!("{}… ({length})", &text[..end])
}

/// What an error quotes of a text a node agent sent, read whole.
fn quote(text: &str) -> String {
    cut(text, MAX_QUOTED_BYTES, Length::Exactly(text.len() as u64))
}

/// A problem document with its texts cut to size: it ends up in errors, logs and
/// status messages.
fn bounded(problem: Problem) -> Problem {
    let whole = |text: &str| Length::Exactly(text.len() as u64);
    Problem {
        kind: cut(&problem.kind, MAX_TITLE_BYTES, whole(&problem.kind)),
        title: cut(&problem.title, MAX_TITLE_BYTES, whole(&problem.title)),
        status: problem.status,
        detail: quote(&problem.detail),
    }
}

/// A failed exchange with the node agent: a deadline passed (a connection within
/// `timeouts.connect`, anything else within `after`), or the transport failed.
fn transport(url: &str, source: reqwest::Error, timeouts: &Timeouts, after: Duration) -> ClientError {
    match (source.is_timeout(), source.is_connect()) {
        (true, true) => ClientError::TimedOut { url: url.to_string(), what: "no connection", after: timeouts.connect },
        (true, false) => ClientError::TimedOut { url: url.to_string(), what: "no answer", after },
        _ => ClientError::Http { url: url.to_string(), source },
    }
}

/// The first `limit` bytes of a body, and whether that was all of it. What is past
/// `limit` is not read: dropping the response closes its connection.
async fn read_up_to(response: &mut reqwest::Response, limit: usize) -> reqwest::Result<(Vec<u8>, bool)> {
    let declared = response.content_length().map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut body = Vec::with_capacity(declared.min(limit));
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

#[derive(Clone, Debug)]
pub struct Client {
    base: Url,
    token: Option<String>,
    timeouts: Timeouts,
    /// Ordinary calls: a total deadline on each (`timeouts.answer`, or the call's own).
    http: reqwest::Client,
    /// Streams: an idle deadline on each read (`timeouts.idle`), none in total.
    streams: reqwest::Client,
    /// Uploads: neither, since reqwest's read deadline runs from the request's start,
    /// and an upload's length is the caller's; see [`Client::upload`].
    uploads: reqwest::Client,
}

impl Client {
    /// A client with the default [`Timeouts`].
    pub fn new(base: &str, token: Option<String>) -> ClientResult<Self> {
        Self::with_timeouts(base, token, Timeouts::default())
    }

    pub fn with_timeouts(base: &str, token: Option<String>, timeouts: Timeouts) -> ClientResult<Self> {
        let base = Url::parse(base).map_err(|_| ClientError::InvalidUrl(base.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(ClientError::InvalidUrl(base.to_string()));
        }
        let build = |builder: reqwest::ClientBuilder| {
            builder
                .tcp_nodelay(true)
                .connect_timeout(timeouts.connect)
                // A node agent never redirects: one that does is not followed elsewhere.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|source| ClientError::Http { url: base.to_string(), source })
        };
        let http = build(reqwest::Client::builder().timeout(timeouts.answer))?;
        let streams = build(reqwest::Client::builder().read_timeout(timeouts.idle))?;
        let uploads = build(reqwest::Client::builder())?;
        Ok(Client { base, token, timeouts, http, streams, uploads })
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

    fn authorized(&self, builder: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// An ordinary call's request.
    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.authorized(self.http.request(method, self.url(segments)))
    }

    /// A request whose answer is a stream.
    fn stream_request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.authorized(self.streams.request(method, self.url(segments)))
    }

    /// A request whose body is an upload.
    fn upload_request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.authorized(self.uploads.request(method, self.url(segments)))
    }

    async fn send<T: DeserializeOwned>(&self, builder: RequestBuilder) -> ClientResult<T> {
        self.call(builder, MAX_ANSWER_BYTES, self.timeouts.answer).await
    }

    /// An ordinary call: its JSON answer, at most `limit` bytes, all within `after`.
    async fn call<T: DeserializeOwned>(
        &self,
        builder: RequestBuilder,
        limit: usize,
        after: Duration,
    ) -> ClientResult<T> {
        let (client, request) = builder.timeout(after).build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let response = client.execute(request).await.map_err(|e| transport(&url, e, &self.timeouts, after))?;
        self.answer(url, response, limit, after).await
    }

    /// A JSON answer read up to `limit`, or what the node agent said instead.
    async fn answer<T: DeserializeOwned>(
        &self,
        url: String,
        mut response: reqwest::Response,
        limit: usize,
        after: Duration,
    ) -> ClientResult<T> {
        let status = response.status();
        if !status.is_success() {
            return Err(self.refusal(url, response, after).await);
        }
        // Said in advance: not a byte of it is read.
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(ClientError::TooLarge { url, limit });
        }
        let (bytes, whole) =
            read_up_to(&mut response, limit).await.map_err(|e| transport(&url, e, &self.timeouts, after))?;
        if !whole {
            return Err(ClientError::TooLarge { url, limit });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Unexpected {
            url,
            status: status.as_u16(),
            body: format!("{e}: {}", quote(&String::from_utf8_lossy(&bytes))),
        })
    }

    /// What an answer that is not a success says: its problem document, or else the
    /// start of what was sent. Read within `timeouts.answer` whatever the call (a
    /// stream's connection has no total deadline of its own).
    async fn refusal(&self, url: String, mut response: reqwest::Response, after: Duration) -> ClientError {
        let status = response.status().as_u16();
        let declared = response.content_length();
        let answer = self.timeouts.answer;
        let (bytes, whole) = match tokio::time::timeout(answer, read_up_to(&mut response, MAX_ERROR_BODY_BYTES)).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => return transport(&url, e, &self.timeouts, after),
            Err(_) => return ClientError::TimedOut { url, what: "no answer", after: answer },
        };
        if whole && let Ok(problem) = serde_json::from_slice::<Problem>(&bytes) {
            return ClientError::Problem(bounded(problem));
        }
        let length = match (whole, declared) {
            (true, _) => Length::Exactly(bytes.len() as u64),
            (false, Some(n)) => Length::Exactly(n),
            (false, None) => Length::MoreThan(MAX_ERROR_BODY_BYTES),
        };
        ClientError::Unexpected { url, status, body: cut(&String::from_utf8_lossy(&bytes), MAX_QUOTED_BYTES, length) }
    }

    /// Sends an upload, whose body is the caller's stream, and reads its JSON answer.
    /// Its length and pace are the caller's, so there is no total deadline: the node
    /// agent must take some of the body, or answer, within `timeouts.idle` of the last
    /// chunk it took; its answer is then read within `timeouts.answer`.
    async fn upload<T: DeserializeOwned>(&self, builder: RequestBuilder, body: reqwest::Body) -> ClientResult<T> {
        let progress = Arc::new(Mutex::new(Instant::now()));
        let touched = Arc::clone(&progress);
        // A reqwest body is an HTTP body: seen as a stream of chunks through axum's
        // adapter, each chunk the connection takes marks progress.
        let chunks = axum::body::Body::new(body).into_data_stream().inspect(move |_| {
            *touched.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        });
        let (client, request) = builder.body(reqwest::Body::wrap_stream(chunks)).build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let idle = self.timeouts.idle;
        let sending = client.execute(request);
        tokio::pin!(sending);
        let quiet = || idle.saturating_sub(progress.lock().unwrap_or_else(|e| e.into_inner()).elapsed());
        let response = loop {
            tokio::select! {
                sent = &mut sending => break sent.map_err(|e| transport(&url, e, &self.timeouts, idle))?,
                () = tokio::time::sleep(quiet()) => {
                    if quiet().is_zero() {
                        return Err(ClientError::TimedOut { url, what: "no answer", after: idle });
                    }
                }
            }
        };
        let after = self.timeouts.answer;
        match tokio::time::timeout(after, self.answer(url.clone(), response, MAX_ANSWER_BYTES, after)).await {
            Ok(answer) => answer,
            Err(_) => Err(ClientError::TimedOut { url, what: "no answer", after }),
        }
    }

    pub async fn health(&self) -> ClientResult<Health> {
        self.call(self.request(Method::GET, &["health"]), MAX_ANSWER_BYTES, self.timeouts.health).await
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

    /// Stops a process; the node agent answers once it has exited, so the call may
    /// take its stop timeout on top of an ordinary answer.
    pub async fn delete_process(&self, id: &str, query: &DeleteProcessQuery) -> ClientResult<ProcessInfo> {
        let stop = match query.timeout {
            Some(seconds) => Duration::try_from_secs_f64(seconds).unwrap_or(MAX_STOP_TIMEOUT).min(MAX_STOP_TIMEOUT),
            None => DEFAULT_STOP_ALLOWANCE,
        };
        let builder = self.request(Method::DELETE, &["processes", id]).query(query);
        self.call(builder, MAX_ANSWER_BYTES, self.timeouts.answer.saturating_add(stop)).await
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

    /// The deadline of a read that may long-poll for `wait` seconds.
    fn long_poll(&self, wait: Option<f64>) -> Duration {
        let wait = wait.and_then(|w| Duration::try_from_secs_f64(w).ok()).unwrap_or(Duration::ZERO);
        self.timeouts.answer.saturating_add(wait.min(MAX_LONG_POLL))
    }

    pub async fn output(&self, id: &str, query: &OutputQuery) -> ClientResult<OutputChunk> {
        let builder = self.request(Method::GET, &["processes", id, "output"]).query(query);
        self.call(builder, MAX_ANSWER_BYTES, self.long_poll(query.wait)).await
    }

    /// stdout and stderr interleaved in the order the node agent received them.
    pub async fn interleaved_output(
        &self,
        id: &str,
        query: &InterleavedOutputQuery,
    ) -> ClientResult<InterleavedOutput> {
        let builder = self.request(Method::GET, &["processes", id, "output", "interleaved"]).query(query);
        self.call(builder, MAX_ANSWER_BYTES, self.long_poll(query.wait)).await
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
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_TERMINAL_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_TERMINAL_MESSAGE_BYTES));
        // The handshake is an answer like any other; the open socket has no deadline
        // (see `Timeouts::idle`).
        let after = self.timeouts.answer;
        let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
        match tokio::time::timeout(after, connecting).await {
            Err(_) => Err(ClientError::TimedOut { url: url.to_string(), what: "no answer", after }),
            Ok(Ok((socket, _))) => Ok(socket),
            // tungstenite reads at most 64 KiB of a handshake, body included.
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                let body = response.body().as_deref().unwrap_or_default();
                match serde_json::from_slice::<Problem>(body) {
                    Ok(problem) => Err(ClientError::Problem(bounded(problem))),
                    Err(_) => Err(ClientError::Unexpected {
                        url: url.to_string(),
                        status: response.status().as_u16(),
                        body: quote(&String::from_utf8_lossy(body)),
                    }),
                }
            }
            Ok(Err(e)) => Err(ws_error(e)),
        }
    }

    /// Lifecycle events over SSE, resuming after `last_event_id` when given.
    pub async fn lifecycle_events(
        &self,
        last_event_id: Option<u64>,
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<SseMessage>>> {
        let mut builder = self.stream_request(Method::GET, &["events", "sse"]);
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
        let (timeouts, idle) = (self.timeouts, self.timeouts.idle);
        let response = builder.send().await.map_err(|e| transport(&url, e, &timeouts, idle))?;
        if !response.status().is_success() {
            return Err(self.refusal(url, response, idle).await);
        }
        let read_url = url.clone();
        let bytes =
            response.bytes_stream().map(move |chunk| chunk.map_err(|e| transport(&read_url, e, &timeouts, idle)));
        Ok(sse_messages(bytes, url).boxed())
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
        let messages = self.open_sse(self.stream_request(Method::GET, &segments), &segments).await?;
        Ok(messages
            .map(move |message| {
                let message = message?;
                serde_json::from_str(&message.data).map_err(|e| ClientError::Unexpected {
                    url: url.clone(),
                    status: 200,
                    body: format!("{e}: {}", quote(&message.data)),
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
        let builder = self.request(Method::POST, &["agents", agent, "install"]).json(request);
        self.call(builder, MAX_ANSWER_BYTES, INSTALL_ALLOWANCE).await
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
        let builder = self
            .stream_request(Method::POST, &segments)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(request);
        let mut messages = self.open_sse(builder, &segments).await?;
        let unexpected = |body: String| ClientError::Unexpected { url: url.clone(), status: 200, body };
        while let Some(message) = messages.next().await {
            let message = message?;
            let parse_error = |e: serde_json::Error| unexpected(format!("{e}: {}", quote(&message.data)));
            match message.event.as_deref() {
                Some("install.progress") => on_progress(&serde_json::from_str(&message.data).map_err(parse_error)?),
                Some("install.completed") => return serde_json::from_str(&message.data).map_err(parse_error),
                Some("install.failed") => {
                    let problem = serde_json::from_str(&message.data).map_err(parse_error)?;
                    return Err(ClientError::Problem(bounded(problem)));
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

    /// Restarts the session's agent in the same conversation: a live one between
    /// turns, a failed one at once; `conflict` when it has ended (or a failed one is
    /// being restarted by another caller).
    pub async fn restart_session(&self, id: &str) -> ClientResult<SessionInfo> {
        self.send(self.request(Method::POST, &["sessions", id, "restart"])).await
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
        let mut builder = self.stream_request(Method::GET, &["fs", "file"]).query(&[("path", path)]);
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
            .upload_request(Method::PUT, &["fs", "file"])
            .query(&query)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
        self.upload(builder, body).await
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
        let builder = self.request(Method::DELETE, &["fs", "entry"]).query(&query);
        let after = self.timeouts.answer;
        let (client, request) = builder.build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let response = client.execute(request).await.map_err(|e| transport(&url, e, &self.timeouts, after))?;
        if !response.status().is_success() {
            return Err(self.refusal(url, response, after).await);
        }
        Ok(())
    }

    /// Extracts a tar stream into the directory `dir` (created when missing).
    pub async fn fs_upload(&self, dir: &str, tar: reqwest::Body) -> ClientResult<FsUploadResult> {
        let builder = self
            .upload_request(Method::POST, &["fs", "upload"])
            .query(&[("path", dir)])
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar");
        self.upload(builder, tar).await
    }

    /// A tar stream of a directory (entries relative to it) or of one file.
    pub async fn fs_download(&self, path: &str) -> ClientResult<ByteStream> {
        self.open_bytes(self.stream_request(Method::GET, &["fs", "download"]).query(&[("path", path)])).await
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
        let messages = self.open_sse(self.stream_request(Method::GET, &segments).query(&query), &segments).await?;
        Ok(messages.map(move |message| {
            let message = message?;
            serde_json::from_str(&message.data).map_err(|e| ClientError::Unexpected {
                url: url.clone(),
                status: 200,
                body: format!("{e}: {}", quote(&message.data)),
            })
        }))
    }

    /// A stream of bytes (a file, a tar, a diff) as it arrives, each read within
    /// `timeouts.idle`; its problem when the node agent refused.
    async fn open_bytes(&self, builder: RequestBuilder) -> ClientResult<ByteStream> {
        let (client, request) = builder.build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let (timeouts, idle) = (self.timeouts, self.timeouts.idle);
        let response = client.execute(request).await.map_err(|e| transport(&url, e, &timeouts, idle))?;
        if !response.status().is_success() {
            return Err(self.refusal(url, response, idle).await);
        }
        Ok(Box::pin(response.bytes_stream().map(move |chunk| chunk.map_err(|e| transport(&url, e, &timeouts, idle)))))
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

/// The events of an SSE body. An event is held until its blank line comes, so one is
/// at most [`MAX_SSE_EVENT_BYTES`]: past that the stream ends with
/// [`ClientError::TooLarge`], reading no further. It ends after any error.
fn sse_messages(
    bytes: impl Stream<Item = ClientResult<bytes::Bytes>> + Send + 'static,
    url: String,
) -> impl Stream<Item = ClientResult<SseMessage>> + Send + 'static {
    struct State<S> {
        bytes: std::pin::Pin<Box<S>>,
        buffer: Vec<u8>,
        /// Where the search for the next blank line goes on: the bytes before it were
        /// searched (a large event arrives in many chunks; each is searched once).
        searched: usize,
        url: String,
        ended: bool,
    }
    let state = State { bytes: Box::pin(bytes), buffer: Vec::new(), searched: 0, url, ended: false };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        loop {
            if let Some(end) = find_event_end(&state.buffer, state.searched) {
                let block: Vec<u8> = state.buffer.drain(..end.1).collect();
                state.searched = 0;
                let message = parse_sse_block(&String::from_utf8_lossy(&block[..end.0]));
                match message {
                    Some(message) => return Some((Ok(message), state)),
                    None => continue, // a comment (keep-alive)
                }
            }
            // A blank line may begin in the last bytes and end in the next chunk.
            state.searched = state.buffer.len().saturating_sub(3);
            if state.buffer.len() > MAX_SSE_EVENT_BYTES {
                state.ended = true;
                state.buffer = Vec::new();
                let error = ClientError::TooLarge { url: state.url.clone(), limit: MAX_SSE_EVENT_BYTES };
                return Some((Err(error), state));
            }
            match state.bytes.next().await {
                Some(Ok(chunk)) => state.buffer.extend_from_slice(&chunk),
                Some(Err(error)) => {
                    state.ended = true;
                    return Some((Err(error), state));
                }
                None => return None,
            }
        }
    })
}

/// (end of the block, end including the blank line), searching from `from` on.
fn find_event_end(buffer: &[u8], from: usize) -> Option<(usize, usize)> {
    let from = from.min(buffer.len());
    let rest = &buffer[from..];
    let lf = rest.windows(2).position(|w| w == b"\n\n").map(|i| (from + i, from + i + 2));
    let crlf = rest.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (from + i, from + i + 4));
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

    // ---- A node agent is hostile input ----

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A call that has not ended by then hangs: the test fails instead of waiting for ever.
    const PATIENCE: Duration = Duration::from_secs(10);
    /// The short timeouts the tests give a client, so a hang is seen in a moment.
    const SHORT: Duration = Duration::from_millis(300);

    async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
        tokio::time::timeout(PATIENCE, future)
            .await
            .unwrap_or_else(|_| panic!("{what} did not end within {PATIENCE:?}"))
    }

    /// What a hostile node agent sends after a request's head.
    #[derive(Clone)]
    enum Answer {
        /// This response head, then `len` bytes of `fill` made as they are sent, then
        /// the connection held open.
        Flood { head: String, prefix: Vec<u8>, fill: u8, len: u64 },
        /// This response head, then nothing, the connection held open (none: not even a head).
        Stall(Option<String>),
    }

    /// A node agent on a loopback port that gives every request `answer`, counting
    /// the body bytes it managed to hand to the kernel.
    struct Hostile {
        url: String,
        written: Arc<AtomicU64>,
        /// Connections whose answer ended (written whole, or cut by the client).
        ended: Arc<tokio::sync::Semaphore>,
    }

    impl Hostile {
        async fn start(answer: Answer) -> Hostile {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let written = Arc::new(AtomicU64::new(0));
            let ended = Arc::new(tokio::sync::Semaphore::new(0));
            let (w, e) = (Arc::clone(&written), Arc::clone(&ended));
            tokio::spawn(async move {
                loop {
                    let Ok((socket, _)) = listener.accept().await else { return };
                    tokio::spawn(serve(socket, answer.clone(), Arc::clone(&w), Arc::clone(&e)));
                }
            });
            Hostile { url, written, ended }
        }

        fn client(&self) -> Client {
            let short = Timeouts { connect: SHORT, health: SHORT, answer: SHORT, idle: SHORT };
            Client::with_timeouts(&self.url, Some("t".into()), short).unwrap()
        }

        /// Waits until one answer has ended, and says how many body bytes were sent.
        async fn sent(&self) -> u64 {
            within("the answer", self.ended.acquire()).await.unwrap().forget();
            self.written.load(Ordering::SeqCst)
        }
    }

    async fn serve(
        mut socket: tokio::net::TcpStream,
        answer: Answer,
        written: Arc<AtomicU64>,
        ended: Arc<tokio::sync::Semaphore>,
    ) {
        // The request's head (and whatever body fits with it): enough to answer.
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 64 * 1024 {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        match answer {
            Answer::Flood { head, prefix, fill, len } => {
                let chunk = vec![fill; 64 * 1024];
                let mut left = len;
                let mut ok = socket.write_all(head.as_bytes()).await.is_ok() && socket.write_all(&prefix).await.is_ok();
                while ok && left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    ok = socket.write_all(&chunk[..n]).await.is_ok();
                    if ok {
                        written.fetch_add(n as u64, Ordering::SeqCst);
                        left -= n as u64;
                    }
                }
                ended.add_permits(1);
                if ok {
                    std::future::pending::<()>().await;
                }
            }
            Answer::Stall(head) => {
                if let Some(head) = head {
                    let _ = socket.write_all(head.as_bytes()).await;
                }
                std::future::pending::<()>().await;
            }
        }
    }

    fn flood(head: &str, len: u64) -> Answer {
        Answer::Flood { head: head.to_string(), prefix: Vec::new(), fill: b'x', len }
    }

    const SIXTY_FOUR_MIB: u64 = 64 * 1024 * 1024;

    #[tokio::test]
    async fn an_answer_larger_than_the_limit_is_an_error_and_is_read_no_further() {
        // Its length unsaid (the connection's end would say it): counted as it comes.
        let server = Hostile::start(flood(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
            SIXTY_FOUR_MIB,
        ))
        .await;
        let error = within("health", server.client().health()).await.unwrap_err().to_string();
        assert!(error.contains(&format!("answer larger than {MAX_ANSWER_BYTES} bytes")), "{:.300}", error);
        assert!(error.len() <= 2048, "the error holds {} bytes", error.len());
        let sent = server.sent().await;
        // What the kernel's socket buffers took beyond the limit, at most.
        assert!(sent < MAX_ANSWER_BYTES as u64 + 16 * 1024 * 1024, "{sent} bytes were taken of {SIXTY_FOUR_MIB}");

        // Said in advance: refused before a byte of it is read.
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", 1u64 << 40);
        let server = Hostile::start(Answer::Stall(Some(head))).await;
        let error = within("health", server.client().health()).await.unwrap_err().to_string();
        assert!(error.contains(&format!("answer larger than {MAX_ANSWER_BYTES} bytes")), "{error:.300}");
    }

    #[tokio::test]
    async fn an_error_body_is_quoted_short_with_its_length() {
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
            10 << 20
        );
        let server = Hostile::start(Answer::Flood { head, prefix: Vec::new(), fill: b'e', len: 10 << 20 }).await;
        let error = within("get_process", server.client().get_process("p")).await.unwrap_err().to_string();
        assert!(error.len() <= 2048, "the error holds {} bytes: {:.300}", error.len(), error);
        assert!(error.contains("500") && error.contains("eeee"), "{error}");
        assert!(error.contains(&(10u64 << 20).to_string()), "says how long the body was: {error}");
    }

    #[tokio::test]
    async fn a_problem_document_with_a_huge_detail_is_bounded() {
        let problem = |len: u64| Answer::Flood {
            head: "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\nconnection: close\r\n\r\n"
                .to_string(),
            prefix: br#"{"type":"urn:agentplane:error:conflict","title":"Conflict","status":409,"detail":""#.to_vec(),
            fill: b'd',
            len,
        };
        // 10 MiB of detail, and no end to the document: never a problem the client takes whole.
        let server = Hostile::start(problem(10 << 20)).await;
        let error = within("end_session", server.client().end_session("s")).await.unwrap_err().to_string();
        assert!(error.len() <= 2048, "the error holds {} bytes: {:.300}", error.len(), error);
        assert!(error.contains("409"), "{error}");

        // A whole problem document with a long detail is still a problem (its code is
        // kept), its detail cut.
        let detail = "d".repeat(50 * 1024);
        let body = format!(
            r#"{{"type":"urn:agentplane:error:conflict","title":"Conflict","status":409,"detail":"{detail}"}}"#
        );
        let head = format!(
            "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let server = Hostile::start(Answer::Flood { head, prefix: body.into_bytes(), fill: b' ', len: 0 }).await;
        let error = within("end_session", server.client().end_session("s")).await.unwrap_err();
        assert_eq!(error.problem_code(), Some("conflict"));
        let text = error.to_string();
        assert!(text.len() <= 2048, "the error holds {} bytes", text.len());
        assert!(text.contains(&(50 * 1024).to_string()), "says how long the detail was: {text:.300}");
    }

    #[tokio::test]
    async fn a_call_that_gets_no_answer_times_out() {
        // Nothing at all, not even a head.
        let server = Hostile::start(Answer::Stall(None)).await;
        let error = within("get_process", server.client().get_process("p")).await.unwrap_err().to_string();
        assert!(error.contains("no answer") && error.contains("300ms"), "{error}");
        let error = within("health", server.client().health()).await.unwrap_err().to_string();
        assert!(error.contains("no answer"), "{error}");
        // A head, then a body that never comes.
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
        let server = Hostile::start(Answer::Stall(Some(head.into()))).await;
        let error = within("list_processes", server.client().list_processes(&ListProcessesQuery::default()))
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("no answer"), "{error}");
        // The terminal's WebSocket: its handshake is an answer too.
        let server = Hostile::start(Answer::Stall(None)).await;
        let error =
            within("connect", server.client().connect("p", &ConnectQuery::default())).await.unwrap_err().to_string();
        assert!(error.contains("no answer"), "{error}");
    }

    #[tokio::test]
    async fn an_sse_event_larger_than_the_limit_ends_the_stream() {
        // An event split into one-byte chunks still parses; then one that never ends
        // is an error once it passes the limit, and nothing more is read.
        let pulled = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&pulled);
        let first = b"id: 1\nevent: process.created\ndata: {}\n\n".iter().map(|b| bytes::Bytes::copy_from_slice(&[*b]));
        let endless = std::iter::once(bytes::Bytes::from_static(b"data: "))
            .chain(std::iter::repeat_with(|| bytes::Bytes::from(vec![b'x'; 64 * 1024])));
        let chunks = first.chain(endless).take(4096).map(move |chunk| {
            counted.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            Ok(chunk)
        });
        // Each chunk as from a socket: the runtime gets its turn between them.
        let chunks = futures_util::stream::iter(chunks).then(|chunk| async move {
            tokio::task::yield_now().await;
            chunk
        });
        let mut messages = Box::pin(sse_messages(chunks, "u".into()));
        let message = within("the first event", messages.next()).await.unwrap().unwrap();
        assert_eq!(
            message,
            SseMessage { id: Some("1".into()), event: Some("process.created".into()), data: "{}".into() }
        );
        let error =
            within("the endless event", messages.next()).await.expect("an error, not the end").unwrap_err().to_string();
        assert!(error.contains(&format!("answer larger than {MAX_SSE_EVENT_BYTES} bytes")), "{error:.300}");
        assert!(within("the stream's end", messages.next()).await.is_none(), "nothing after the error");
        let pulled = pulled.load(Ordering::SeqCst);
        assert!(pulled <= MAX_SSE_EVENT_BYTES as u64 + 128 * 1024, "{pulled} bytes were read");

        // From a server too: the stream ends with the error.
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let server = Hostile::start(Answer::Flood {
            head: head.into(),
            prefix: b"data: ".to_vec(),
            fill: b'x',
            len: SIXTY_FOUR_MIB,
        })
        .await;
        let mut events = within("lifecycle_events", server.client().lifecycle_events(None)).await.unwrap();
        let error =
            within("the endless event", events.next()).await.expect("an error, not the end").unwrap_err().to_string();
        assert!(error.contains("larger than"), "{error:.300}");
        drop(events);
        let sent = server.sent().await;
        assert!(sent < SIXTY_FOUR_MIB, "all of it was read");
    }

    #[tokio::test]
    async fn an_upload_the_node_agent_stops_taking_times_out() {
        // It reads the request's head and then no more of it.
        let server = Hostile::start(Answer::Stall(None)).await;
        let endless =
            futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![0u8; 64 * 1024])));
        let body = reqwest::Body::wrap_stream(endless);
        let (client, options) = (server.client(), FsWriteOptions::default());
        let error = within("fs_write", client.fs_write("/f", body, &options)).await.unwrap_err().to_string();
        assert!(error.contains("no answer") && error.contains("300ms"), "{error}");
    }

    #[tokio::test]
    async fn a_silent_stream_times_out_at_its_idle_limit() {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let server = Hostile::start(Answer::Stall(Some(head.into()))).await;
        let mut events = within("lifecycle_events", server.client().lifecycle_events(None)).await.unwrap();
        let error = within("an event", events.next()).await.expect("an error, not the end").unwrap_err().to_string();
        assert!(error.contains("no answer") && error.contains("300ms"), "{error}");
        // A file's bytes: a stream too.
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let server = Hostile::start(Answer::Stall(Some(head.into()))).await;
        let mut bytes = within("fs_read", server.client().fs_read("/f", None)).await.unwrap();
        let error = within("a chunk", bytes.next()).await.expect("an error, not the end").unwrap_err().to_string();
        assert!(error.contains("no answer"), "{error}");
    }
}
