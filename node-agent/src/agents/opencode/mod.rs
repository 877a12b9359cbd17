//! The `opencode` agent (`opencode-ai` on npm), driven through `opencode serve`: an
//! HTTP server with a bus of events over SSE, the only way OpenCode asks for
//! permissions interactively (`opencode run` rejects every "ask").
//!
//! One server serves every opencode session of a node agent that runs with the same
//! environment (HOME, provider settings: what reaches the process), started when the
//! first such session starts and stopped when the last one stops. One `GET
//! /global/event` subscription per server is demultiplexed to the sessions by the
//! events' `sessionID`. A session is `POST /session` (its id is the agentSessionId,
//! saved so that a new server on the same HOME continues it after a restart); a turn
//! is `POST /session/:id/prompt_async` and the session's events until `session.idle`;
//! `permission.asked` becomes a permission request whose reply goes back as `POST
//! /permission/:id/reply`.
//!
//! Configuration never touches the user's files: when the session's environment (or
//! the node agent's) has `OPENAI_BASE_URL`, the driver passes OpenCode a provider
//! `fake` (`@ai-sdk/openai-compatible` at that URL, key `OPENAI_API_KEY`, the
//! session's model or `default`) in `OPENCODE_CONFIG_CONTENT`, unless the session sets
//! `OPENCODE_CONFIG_CONTENT` itself; without a base URL OpenCode uses its own
//! configuration and credentials under HOME. Permission modes become the session's
//! permission rules (`POST /session {permission}`), so sessions of different modes
//! share a server. A session's MCP servers are OpenCode's `mcp` section (`local` or
//! `remote`), added to that inline configuration.

pub mod convert;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::convert::Converter;
use super::ConversationFiles;
use super::catalog::{Catalog, CredentialPlaces, CredentialSources, provider_entries};
use super::child::LineChild;
use super::convert::Converter as _;
use super::{
    Agent, AgentDriver, AgentHost, AgentId, DriverConfig, Interrupted, Launch, Package, TurnContext, TurnInput,
    TurnOutcome,
};
use crate::driver::QuestionAnswer;
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};
use crate::universal::{EventData, Item, ItemKind, ItemStatus, PermissionReply, Role};

/// OpenCode's own agents a session may choose as its mode.
const MODES: [&str; 2] = ["build", "plan"];
/// The provider the driver configures when it is given a base URL.
const PROVIDER: &str = "fake";
/// The model named in that provider when the session names none.
const DEFAULT_MODEL: &str = "default";
/// How long a server may take to answer its health check: it starts in seconds, but a
/// loaded two-core machine runs several at once.
const STARTUP: Duration = Duration::from_secs(120);
/// Time for one request to the server (all answer at once; `prompt_async` returns
/// before the model is called).
const REQUEST: Duration = Duration::from_secs(60);
/// Events read ahead for one session. The reader of a server's event stream waits
/// when a session's buffer is full; a session drains its buffer throughout a turn
/// (also while a permission request waits), so that wait is short.
const EVENTS_AHEAD: usize = 256;
/// How long a turn may go without any event of its session while no reply is awaited
/// (a model streams, and OpenCode reports each retry): past it the turn fails as
/// timed out instead of hanging.
const QUIET: Duration = Duration::from_secs(600);
/// What one SSE event may weigh before it is dropped (a whole session's diff can be big).
const MAX_EVENT: usize = 32 << 20;

/// OpenCode, as the registry lists it.
pub struct Opencode;

impl Agent for Opencode {
    fn id(&self) -> AgentId {
        AgentId::Opencode
    }

    fn name(&self) -> &'static str {
        "opencode"
    }

    fn package(&self) -> Option<Package> {
        Some(Package { name: "opencode-ai", bin: "opencode", default_version: "1.18.33" })
    }

    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities { permissions: true, questions: true, resume: true, streaming_deltas: true, mcp: true }
    }

    fn validate(&self, request: &CreateSessionRequest) -> Result<()> {
        validate(request)
    }

    fn launch<'a>(&'a self, launch: Launch<'a>) -> BoxFuture<'a, Result<Box<dyn AgentDriver>>> {
        Box::pin(async move {
            let driver = OpencodeDriver::start(launch).await?;
            Ok(Box::new(driver) as Box<dyn AgentDriver>)
        })
    }

    fn converter(&self) -> Box<dyn super::convert::Converter> {
        Box::new(Converter::default())
    }

    fn catalog(&self) -> Catalog {
        Catalog {
            modes: &[
                ("build", "The default agent: edits files and runs commands"),
                ("plan", "Plans without changing anything: edits and commands are denied"),
            ],
            default_mode: Some("build"),
            models: &[],
            default_model: None,
            models_note: "a provider/model id configured for opencode (`opencode models` lists them), e.g. anthropic/claude-sonnet-4-5",
        }
    }

    /// Its storage (`$XDG_DATA_HOME/opencode/storage`, or its database in later
    /// versions): messages and parts are kept by their own ids, so all of it goes.
    fn conversation_files(&self, places: &CredentialPlaces<'_>, _id: &str) -> Vec<ConversationFiles> {
        let Some(data) = places.data_home().map(|d| d.join("opencode")) else { return Vec::new() };
        ["storage", "opencode.db", "opencode.db-wal", "opencode.db-shm"]
            .into_iter()
            .map(|name| ConversationFiles::all(data.join(name)))
            .collect()
    }

    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        let files = places.data_home().map(|d| (d.join("opencode/auth.json"), provider_entries as fn(&str) -> bool));
        Some(CredentialSources {
            env: &[
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GEMINI_API_KEY",
                "GOOGLE_GENERATIVE_AI_API_KEY",
                "OPENROUTER_API_KEY",
                "OPENCODE_API_KEY",
            ],
            files: files.into_iter().collect(),
        })
    }
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode
        && !MODES.contains(&mode.as_str())
    {
        return Err(Error::ModeNotSupported(format!("opencode has no mode {mode:?} (it has {})", MODES.join(", "))));
    }
    // The MCP servers are added to the session's inline configuration: it must be an object.
    if !request.mcp_servers.is_empty()
        && let Some(inline) = request.env.get("OPENCODE_CONFIG_CONTENT")
        && !serde_json::from_str::<Value>(inline).is_ok_and(|v| v.is_object())
    {
        return Err(Error::InvalidRequest(
            "OPENCODE_CONFIG_CONTENT must be a JSON object for mcpServers to be added to it".into(),
        ));
    }
    Ok(())
}

/// What all opencode sessions of a node agent share: their servers, one per
/// environment. Weak, so that a server goes when its last session does.
#[derive(Default)]
pub struct Shared {
    servers: tokio::sync::Mutex<HashMap<String, Weak<Server>>>,
}

impl Shared {
    /// The running server for `launch`, started if there is none (or it died).
    async fn server(&self, launch: &ServerLaunch) -> Result<Arc<Server>> {
        // Held while a server starts: a second session of the same environment
        // waits for it instead of starting another.
        let mut servers = self.servers.lock().await;
        servers.retain(|_, server| server.strong_count() > 0);
        if let Some(server) = servers.get(&launch.key).and_then(Weak::upgrade)
            && server.exit().is_none()
        {
            return Ok(server);
        }
        let server = Arc::new(Server::start(launch).await?);
        servers.insert(launch.key.clone(), Arc::downgrade(&server));
        Ok(server)
    }
}

/// How to start a server: the executable and the environment it gets.
#[derive(Debug, Clone)]
struct ServerLaunch {
    bin: PathBuf,
    env: BTreeMap<String, String>,
    /// Identifies servers that are interchangeable: the executable and the environment.
    key: String,
}

impl ServerLaunch {
    fn new(bin: PathBuf, env: BTreeMap<String, String>) -> ServerLaunch {
        let key = format!("{}\0{}", bin.display(), serde_json::to_string(&env).unwrap_or_default());
        ServerLaunch { bin, env, key }
    }
}

/// How a server ended.
#[derive(Debug, Clone)]
struct Exit {
    code: Option<i32>,
    stderr_tail: String,
}

impl Exit {
    fn error(&self) -> Error {
        Error::AgentProcessExited { code: self.code, stderr_tail: self.stderr_tail.clone() }
    }
}

type Routes = Arc<Mutex<HashMap<String, mpsc::Sender<String>>>>;

/// One `opencode serve`, its event stream, and the sessions listening to it.
struct Server {
    url: String,
    http: reqwest::Client,
    routes: Routes,
    exit: watch::Receiver<Option<Exit>>,
    stop: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Server {
    async fn start(launch: &ServerLaunch) -> Result<Server> {
        let port = free_port()?;
        let mut command = tokio::process::Command::new(&launch.bin);
        command.env_remove(crate::TOKEN_VARIABLE);
        command.args(["serve", "--port", &port.to_string(), "--hostname", "127.0.0.1"]).envs(&launch.env);
        let mut child = LineChild::spawn(command)?;
        tracing::info!(pid = child.pid(), port, "started opencode serve");
        let (exit_tx, exit) = watch::channel(None);
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        // Owns the child: logs its stdout, and says how it ended.
        let monitor = tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = child.next_line() => match line {
                        Some(line) => tracing::debug!(agent = "opencode", "stdout: {line}"),
                        None => {
                            let exit = match child.exited().await {
                                Error::AgentProcessExited { code, stderr_tail } => Exit { code, stderr_tail },
                                other => Exit { code: None, stderr_tail: other.to_string() },
                            };
                            tracing::warn!(code = ?exit.code, stderr_tail = %exit.stderr_tail, "opencode serve exited");
                            let _ = exit_tx.send(Some(exit));
                            return;
                        }
                    },
                    () = stopping.cancelled() => {
                        child.stop(Duration::from_secs(5)).await;
                        let _ = exit_tx.send(Some(Exit { code: None, stderr_tail: "stopped by the node agent".into() }));
                        return;
                    }
                }
            }
        });
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| Error::StreamError(format!("an HTTP client: {e}")))?;
        let server = Server {
            url: format!("http://127.0.0.1:{port}"),
            http,
            routes: Arc::default(),
            exit,
            stop,
            tasks: Mutex::new(vec![monitor]),
        };
        // Dropping `server` on an error below stops the child.
        server.wait_healthy().await?;
        server.subscribe().await?;
        Ok(server)
    }

    fn exit(&self) -> Option<Exit> {
        self.exit.borrow().clone()
    }

    /// Polls `/global/health`: a request sent before the server is ready can hang for minutes.
    async fn wait_healthy(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            if let Some(exit) = self.exit() {
                return Err(exit.error());
            }
            let health =
                self.http.get(format!("{}/global/health", self.url)).timeout(Duration::from_secs(2)).send().await;
            if let Ok(response) = health
                && response.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "opencode serve did not answer its health check within {} s",
                    STARTUP.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Subscribes to the server's events and routes them to sessions; returns once the
    /// subscription is live (so that no event of a prompt sent after it is missed).
    async fn subscribe(&self) -> Result<()> {
        let (ready_tx, mut ready) = watch::channel(false);
        let (http, url, routes, stop) =
            (self.http.clone(), self.url.clone(), Arc::clone(&self.routes), self.stop.clone());
        let reader = tokio::spawn(async move {
            // Reconnects while the server runs: a dropped stream would leave turns waiting.
            while !stop.is_cancelled() {
                tokio::select! {
                    () = read_events(&http, &url, &routes, &ready_tx) => {}
                    () = stop.cancelled() => return,
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(reader);
        let mut exit = self.exit.clone();
        tokio::select! {
            ready = tokio::time::timeout(STARTUP, ready.wait_for(|ready| *ready)) => match ready {
                Ok(Ok(_)) => Ok(()),
                _ => Err(Error::Timeout("opencode serve's event stream did not open".into())),
            },
            _ = exit.wait_for(Option::is_some) => Err(self.exit().map(|e| e.error()).unwrap_or_else(|| Error::StreamError("opencode serve went away".into()))),
        }
    }

    fn route(&self, session: &str) -> (mpsc::Receiver<String>, RouteGuard) {
        let (tx, rx) = mpsc::channel(EVENTS_AHEAD);
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).insert(session.to_string(), tx);
        (rx, RouteGuard { routes: Arc::clone(&self.routes), session: session.to_string() })
    }

    /// A JSON request to the server, in the session's directory; its JSON answer.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        directory: Option<&str>,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request = self.http.request(method.clone(), format!("{}{path}", self.url)).timeout(REQUEST);
        if let Some(directory) = directory {
            request = request.query(&[("directory", directory)]);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = tokio::select! {
            response = request.send() => response.map_err(|e| Error::StreamError(format!("opencode serve {method} {path}: {e}")))?,
            exit = wait_exit(self.exit.clone()) => return Err(exit.error()),
        };
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(Error::StreamError(format!("opencode serve {method} {path} answered {status}: {text}")));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Asks the server to stop a session's turn, without waiting for the answer.
    fn abort(&self, session: &str, directory: Option<&str>) {
        let mut request = self.http.post(format!("{}/session/{session}/abort", self.url)).timeout(REQUEST);
        if let Some(directory) = directory {
            request = request.query(&[("directory", directory)]);
        }
        tokio::spawn(async move {
            let _ = request.send().await;
        });
    }

    /// Stops the server and waits until it is gone.
    async fn shutdown(self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The monitor stops the child's whole process group (its tools' processes too).
        self.stop.cancel();
    }
}

async fn wait_exit(mut exit: watch::Receiver<Option<Exit>>) -> Exit {
    match exit.wait_for(Option::is_some).await {
        Ok(exit) => exit.clone().unwrap_or_else(|| Exit { code: None, stderr_tail: String::new() }),
        Err(_) => Exit { code: None, stderr_tail: "opencode serve went away".into() },
    }
}

/// Unroutes a session's events when its turn is over.
struct RouteGuard {
    routes: Routes,
    session: String,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.session);
    }
}

/// Reads `GET /global/event` until it ends, handing each event's `data:` to the
/// session it names. Events of no session (plugins loading, heartbeats) and of
/// sessions not in a turn go nowhere.
async fn read_events(http: &reqwest::Client, url: &str, routes: &Routes, ready: &watch::Sender<bool>) {
    let response = match http.get(format!("{url}/global/event")).header("accept", "text/event-stream").send().await {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => return tracing::warn!(status = %response.status(), "opencode's event stream refused"),
        Err(error) => return tracing::warn!(%error, "opencode's event stream failed"),
    };
    let mut stream = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut data = String::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                let event = std::mem::take(&mut data);
                if !event.is_empty() {
                    dispatch(event, routes, ready).await;
                }
            } else if let Some(value) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
        }
        if buffer.len() + data.len() > MAX_EVENT {
            tracing::warn!(bytes = buffer.len() + data.len(), "dropping an opencode event too big to keep");
            buffer.clear();
            data.clear();
        }
    }
}

async fn dispatch(event: String, routes: &Routes, ready: &watch::Sender<bool>) {
    let Ok(value) = serde_json::from_str::<Value>(&event) else {
        return tracing::debug!("an opencode event that is not JSON: {event}");
    };
    let payload = value.get("payload").unwrap_or(&value);
    if payload.get("type").and_then(Value::as_str) == Some("server.connected") {
        ready.send_replace(true);
    }
    let Some(session) = payload.pointer("/properties/sessionID").and_then(Value::as_str) else { return };
    let route = routes.lock().unwrap_or_else(|e| e.into_inner()).get(session).cloned();
    if let Some(route) = route {
        // Waits when the session's buffer is full; errs only when the turn is over.
        let _ = route.send(event).await;
    }
}

/// A free port on 127.0.0.1, for the server to listen on.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("finding a free port", e))?;
    Ok(listener.local_addr().map_err(|e| Error::io("finding a free port", e))?.port())
}

/// What the driver saves to resume a conversation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Saved {
    session_id: String,
    /// Permission requests a client has not answered yet: a turn resumed after a
    /// restart asks OpenCode again, and the same request from before stands for it.
    #[serde(default)]
    pending: Vec<Pending>,
}

/// A permission request as the client saw it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Pending {
    id: String,
    tool: String,
    input: Value,
}

struct OpencodeDriver {
    host: Arc<AgentHost>,
    launch: ServerLaunch,
    server: Option<Arc<Server>>,
    session: String,
    /// Unanswered permission requests of the turn under way (saved with the session).
    pending: Vec<Pending>,
    directory: Option<String>,
    agent: Option<String>,
    model: Option<Value>,
    variant: Option<String>,
}

impl OpencodeDriver {
    async fn start(launch: Launch<'_>) -> Result<OpencodeDriver> {
        let config = launch.config;
        let (env, configured) = environment(config);
        let model = model_ref(config, configured)?;
        let saved: Option<Saved> = launch.saved_state("the opencode driver")?;
        let launch = ServerLaunch::new(launch.bin()?, env);
        let server = config.host.opencode.server(&launch).await?;
        let directory = config.working_dir.clone();
        let mut pending = Vec::new();
        let session = match saved {
            Some(saved) => {
                // The server keeps its sessions under HOME: a new one knows the old session.
                server
                    .call(reqwest::Method::GET, &format!("/session/{}", saved.session_id), directory.as_deref(), None)
                    .await?;
                pending = saved.pending;
                saved.session_id
            }
            None => {
                let body = json!({"title": format!("agentplane {}", config.session_id), "permission": permission_rules(config.permission_mode)});
                let created = server.call(reqwest::Method::POST, "/session", directory.as_deref(), Some(body)).await?;
                created
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| Error::StreamError(format!("opencode created a session without an id: {created}")))?
            }
        };
        let agent = config
            .agent_mode
            .clone()
            .or_else(|| (config.permission_mode == PermissionMode::Plan).then(|| "plan".to_string()));
        Ok(OpencodeDriver {
            host: Arc::clone(&config.host),
            launch,
            server: Some(server),
            session,
            pending,
            directory,
            agent,
            model,
            variant: config.variant.clone(),
        })
    }

    /// The server, started again if it died since the last turn.
    async fn live_server(&mut self) -> Result<Arc<Server>> {
        match &self.server {
            Some(server) if server.exit().is_none() => Ok(Arc::clone(server)),
            _ => {
                self.server = None;
                let server = self.host.opencode.server(&self.launch).await?;
                self.server = Some(Arc::clone(&server));
                Ok(server)
            }
        }
    }

    fn save(&self, ctx: &TurnContext) {
        ctx.save_state(json!(Saved { session_id: self.session.clone(), pending: self.pending.clone() }));
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        // Requests from before a restart, which OpenCode will ask again.
        if !resume {
            self.pending.clear();
        }
        let mut asked_before = self.pending.clone();
        self.save(ctx);
        let server = match self.live_server().await {
            Ok(server) => server,
            Err(error) => return Ok(TurnOutcome::failed(error.to_string())),
        };
        let (mut events, _route) = server.route(&self.session);
        let mut body = json!({"parts": [{"type": "text", "text": turn.message}]});
        if let Some(agent) = &self.agent {
            body["agent"] = json!(agent);
        }
        if let Some(model) = &self.model {
            body["model"] = model.clone();
        }
        if let Some(variant) = &self.variant {
            body["variant"] = json!(variant);
        }
        let path = format!("/session/{}/prompt_async", self.session);
        if let Err(error) = server.call(reqwest::Method::POST, &path, self.directory.as_deref(), Some(body)).await {
            return Ok(TurnOutcome::failed(error.to_string()));
        }

        let mut converter = Converter::default();
        let mut replies: FuturesUnordered<BoxFuture<'_, Answer>> = FuturesUnordered::new();
        let mut failure: Option<String> = None;
        let mut interrupted = std::pin::pin!(ctx.interrupted());
        let mut exit = std::pin::pin!(wait_exit(server.exit.clone()));
        let quiet = tokio::time::sleep(QUIET);
        let mut quiet = std::pin::pin!(quiet);
        loop {
            tokio::select! {
                line = events.recv() => {
                    quiet.as_mut().reset(tokio::time::Instant::now() + QUIET);
                    let Some(line) = line else {
                        return Ok(TurnOutcome::failed("opencode's event stream ended"));
                    };
                    let idle = is_idle(&line);
                    for event in converter.convert(&line) {
                        match event {
                            EventData::PermissionRequested(request) => {
                                let opencode_id = request.id.clone();
                                let same = |p: &Pending| p.tool == request.tool && p.input == request.input;
                                let client_id = match asked_before.iter().position(same) {
                                    // The client's request from before the restart stands for this one.
                                    Some(at) => asked_before.remove(at).id,
                                    None => {
                                        self.pending.push(Pending { id: opencode_id.clone(), tool: request.tool.clone(), input: request.input.clone() });
                                        self.save(ctx);
                                        ctx.line(&line).request_permission(request).await?;
                                        opencode_id.clone()
                                    }
                                };
                                replies.push(
                                    async move {
                                        let reply = ctx.wait_permission(&client_id).await;
                                        Answer::Permission { opencode_id, client_id, reply }
                                    }
                                    .boxed(),
                                );
                            }
                            EventData::QuestionRequested(request) => {
                                let id = request.id.clone();
                                ctx.line(&line).ask_question(request).await?;
                                replies.push(async move { Answer::Question(id.clone(), ctx.wait_question(&id).await) }.boxed());
                            }
                            // The node agent announced the client's reply already: this is OpenCode applying it.
                            EventData::PermissionResolved { id, .. } | EventData::QuestionResolved { id, .. } => {
                                ctx.line(&line).emit(applied(&line, &id)).await?;
                            }
                            EventData::Error { message, code } => {
                                failure = Some(message.clone());
                                ctx.line(&line).emit(EventData::Error { message, code }).await?;
                            }
                            event => ctx.line(&line).emit(event).await?,
                        }
                    }
                    if idle {
                        let outcome = match failure {
                            Some(error) => TurnOutcome::failed(error),
                            None => TurnOutcome::completed(),
                        };
                        // The converter lives for this turn: its usage is the turn's steps'.
                        return Ok(outcome.with_usage(converter.take_usage()));
                    }
                }
                Some(answer) = replies.next() => {
                    let (path, body) = match answer {
                        Answer::Permission { opencode_id: id, client_id, reply } => {
                            let reply = reply?;
                            self.pending.retain(|p| p.id != client_id);
                            self.save(ctx);
                            let reply = match reply {
                                PermissionReply::Once => "once",
                                PermissionReply::Always => "always",
                                PermissionReply::Reject => "reject",
                            };
                            (format!("/permission/{id}/reply"), Some(json!({"reply": reply})))
                        }
                        Answer::Question(id, answer) => match answer? {
                            QuestionAnswer::Answered(answers) => (format!("/question/{id}/reply"), Some(json!({"answers": answers}))),
                            QuestionAnswer::Rejected => (format!("/question/{id}/reject"), None),
                        },
                    };
                    if let Err(error) = server.call(reqwest::Method::POST, &path, self.directory.as_deref(), body).await {
                        return Ok(TurnOutcome::failed(error.to_string()));
                    }
                }
                why = &mut interrupted => {
                    if why == Interrupted::Ended {
                        // Best effort: the session is over, its model calls need not go on.
                        server.abort(&self.session, self.directory.as_deref());
                    }
                    return Err(why);
                }
                exit = &mut exit => return Ok(TurnOutcome::failed(exit.error().to_string())),
                // Silence while nobody is asked anything: OpenCode lost the turn.
                () = &mut quiet, if replies.is_empty() => {
                    server.abort(&self.session, self.directory.as_deref());
                    let error = Error::Timeout(format!("opencode said nothing about the turn for {} s", QUIET.as_secs()));
                    return Ok(TurnOutcome::failed(error.to_string()));
                }
            }
        }
    }
}

enum Answer {
    Permission { opencode_id: String, client_id: String, reply: Result<PermissionReply, Interrupted> },
    Question(String, Result<QuestionAnswer, Interrupted>),
}

/// Whether a bus event is the end of the session's turn.
fn is_idle(line: &str) -> bool {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v.get("payload").unwrap_or(&v).get("type").and_then(Value::as_str).map(|t| t == "session.idle"))
        .unwrap_or(false)
}

/// A status item saying that OpenCode applied a reply (the node agent announced it
/// when the client gave it).
fn applied(line: &str, id: &str) -> EventData {
    let event_id = serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v.get("payload").unwrap_or(&v).get("id").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| format!("{id}-applied"));
    EventData::ItemCompleted {
        item: Item {
            id: event_id,
            kind: ItemKind::Status,
            role: Some(Role::System),
            text: Some(format!("opencode applied the reply to {id}")),
            status: Some(ItemStatus::Completed),
            ..Default::default()
        },
    }
}

impl AgentDriver for OpencodeDriver {
    fn agent_session_id(&self) -> Option<String> {
        Some(self.session.clone())
    }

    fn run_turn<'a>(
        &'a mut self,
        ctx: &'a TurnContext,
        turn: &'a TurnInput,
        resume: bool,
    ) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>> {
        // A turn cut short by a restart is sent again (the new server has no memory of
        // the old one's work in progress); permission requests it asks again are the
        // ones the client already has.
        Box::pin(self.turn(ctx, turn, resume))
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // The last session of a server stops it and waits until it is gone.
            if let Some(server) = self.server.take()
                && let Ok(server) = Arc::try_unwrap(server)
            {
                server.shutdown().await;
            }
        })
    }
}

/// The environment `opencode serve` runs with: the session's, plus what keeps it
/// offline-friendly and, given a base URL, the provider it talks to (then `true`).
fn environment(config: &DriverConfig) -> (BTreeMap<String, String>, bool) {
    let mut env = config.env.clone();
    let mut configured = false;
    let lookup = |key: &str| config.env.get(key).cloned().or_else(|| std::env::var(key).ok()).filter(|v| !v.is_empty());
    if !env.contains_key("OPENCODE_CONFIG_CONTENT")
        && let Some(base_url) = lookup("OPENAI_BASE_URL")
    {
        let api_key = lookup("OPENAI_API_KEY").unwrap_or_else(|| "agentplane".into());
        env.insert(
            "OPENCODE_CONFIG_CONTENT".into(),
            provider_config(&base_url, &api_key, &model_id(config)).to_string(),
        );
        configured = true;
    }
    if !config.mcp_servers.is_empty() {
        // OpenCode's `mcp` section, added to the configuration given inline (the
        // session's own, or the provider's above), else given alone: OpenCode merges
        // inline configuration over the user's files. In the environment, not on a
        // command line; the server's key holds it, so sessions share a server only
        // when their MCP servers are the same.
        let mut inline = env
            .get("OPENCODE_CONFIG_CONTENT")
            .and_then(|c| serde_json::from_str::<Value>(c).ok())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        inline["mcp"] = super::mcp::opencode_config(&config.mcp_servers);
        env.insert("OPENCODE_CONFIG_CONTENT".into(), inline.to_string());
    }
    env.entry("OPENCODE_DISABLE_MODELS_FETCH".into()).or_insert_with(|| "1".into());
    env.entry("OPENCODE_DISABLE_AUTOUPDATE".into()).or_insert_with(|| "1".into());
    (env, configured)
}

/// The model of the configured provider: the session's (without a `fake/` prefix), else `default`.
fn model_id(config: &DriverConfig) -> String {
    match config.model.as_deref() {
        Some(model) => model.strip_prefix(&format!("{PROVIDER}/")).unwrap_or(model).to_string(),
        None => DEFAULT_MODEL.to_string(),
    }
}

fn provider_config(base_url: &str, api_key: &str, model: &str) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "model": format!("{PROVIDER}/{model}"),
        "small_model": format!("{PROVIDER}/{model}"),
        "autoupdate": false,
        "share": "disabled",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "OpenAI-compatible (agentplane)",
                "options": {"baseURL": base_url, "apiKey": api_key},
                "models": {model: {"name": model}},
            }
        }
    })
}

/// The `model` of a prompt: `provider/model` as given, or a bare name in the
/// configured provider; none (OpenCode's default) when the session names none.
fn model_ref(config: &DriverConfig, configured: bool) -> Result<Option<Value>> {
    let Some(model) = config.model.as_deref() else { return Ok(None) };
    match model.split_once('/') {
        Some((provider, model)) => Ok(Some(json!({"providerID": provider, "modelID": model}))),
        None if configured => Ok(Some(json!({"providerID": PROVIDER, "modelID": model}))),
        None => Err(Error::InvalidRequest(format!(
            "opencode names models provider/model: {model:?} needs its provider (or OPENAI_BASE_URL, which configures the provider {PROVIDER:?})"
        ))),
    }
}

/// The session's permission rules for a permission mode (later rules win over the
/// agent's own).
fn permission_rules(mode: PermissionMode) -> Value {
    let rule = |permission: &str, action: &str| json!({"permission": permission, "pattern": "*", "action": action});
    match mode {
        PermissionMode::Bypass => json!([rule("*", "allow")]),
        PermissionMode::Default => json!([
            rule("bash", "ask"),
            rule("edit", "ask"),
            rule("webfetch", "ask"),
            rule("external_directory", "ask")
        ]),
        PermissionMode::Plan => json!([
            rule("bash", "ask"),
            rule("edit", "deny"),
            rule("webfetch", "ask"),
            rule("external_directory", "ask")
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_opencodes_agents() {
        let request = |mode: &str| CreateSessionRequest {
            agent: "opencode".into(),
            agent_mode: Some(mode.into()),
            ..Default::default()
        };
        assert!(validate(&request("plan")).is_ok());
        assert!(matches!(validate(&request("yolo")), Err(Error::ModeNotSupported(_))));
    }

    #[test]
    fn a_base_url_configures_the_fake_provider() {
        let config = provider_config("http://127.0.0.1:9/v1", "k", "m1");
        assert_eq!(config["model"], "fake/m1");
        assert_eq!(config["provider"]["fake"]["options"]["baseURL"], "http://127.0.0.1:9/v1");
        assert!(config["provider"]["fake"]["models"]["m1"].is_object());
        assert_eq!(permission_rules(PermissionMode::Bypass)[0]["action"], "allow");
        assert!(is_idle(
            r#"{"directory":"/","payload":{"id":"evt_1","type":"session.idle","properties":{"sessionID":"ses_1"}}}"#
        ));
        assert!(!is_idle(r#"{"type":"session.status","properties":{}}"#));
    }
}
