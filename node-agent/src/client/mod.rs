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
//!
//! This file holds the [`Client`], its bounds and timeouts, and the exchanges every
//! call is made of (an ordinary call, an upload, a stream of bytes); `error.rs` the
//! [`ClientError`] and how a node agent's texts are cut before an error quotes them;
//! `sse.rs` server-sent events (the lifecycle stream, and the parser every stream
//! shares). Each API area has a file of calls: `node.rs` (health, login codes, the
//! resources of an `up`), `processes.rs` (with the terminal's WebSocket),
//! `sessions.rs`, `agents.rs` (installs), `fs.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::{Method, RequestBuilder, Url};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::Problem;

mod agents;
mod error;
mod fs;
mod node;
mod processes;
mod sessions;
mod sse;
#[cfg(test)]
mod tests;

pub use error::{ClientError, ClientResult};
use error::{Length, cut, quote, transport};
pub use processes::TerminalSocket;
pub use sessions::SessionStreamItem;
pub use sse::SseMessage;

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

/// A response body as it arrives: what [`Client::fs_read`] and [`Client::fs_download`] answer.
pub type ByteStream = std::pin::Pin<Box<dyn Stream<Item = ClientResult<bytes::Bytes>> + Send>>;

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
    /// Says on every request that it only observes (see [`Client::observing`]).
    observer: bool,
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
        Ok(Client { base, token, timeouts, http, streams, uploads, observer: false })
    }

    /// The same node agent and token, with other `timeouts`.
    pub fn with_other_timeouts(&self, timeouts: Timeouts) -> ClientResult<Client> {
        let client = Client::with_timeouts(self.base.as_str(), self.token.clone(), timeouts)?;
        Ok(Client { observer: self.observer, ..client })
    }

    /// This client, saying on each request that it only observes: the streams it
    /// follows do not keep the node agent busy (see `GET /v1/activity`). For a
    /// controller, whose streams last as long as the sandbox.
    pub fn observing(mut self) -> Client {
        self.observer = true;
        self
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
        let builder = if self.observer { builder.header(crate::activity::OBSERVER_HEADER, "1") } else { builder };
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
            return ClientError::from_problem(problem);
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
