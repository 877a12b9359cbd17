//! An ACP agent (the Agent Client Protocol that editors speak: Zed, JetBrains, Neovim
//! and VS Code plugins) in front of node agents' sessions, so that every agent
//! agentplane runs, sandboxed or not, is an agent in any ACP editor.
//!
//! [`serve`] speaks JSON-RPC 2.0, one message per line, over any reader and writer
//! (`agentplane acp` gives it stdin and stdout) and maps the protocol onto the node
//! agent's API through a [`Client`]:
//!
//! | ACP | node agent |
//! |---|---|
//! | `initialize` | capabilities: `loadSession`, text and embedded context in prompts, stdio and HTTP MCP servers |
//! | `session/new` (cwd, MCP servers) | `POST /v1/sessions/{id}` ([`SessionMaker`] says where), or the session `--session` names |
//! | `session/load` | the session's event log replayed as updates, then followed |
//! | `session/prompt` | `POST .../messages`; answered with the turn's stop reason when its `turn.ended` arrives |
//! | `session/update` | the session's events, followed over SSE (see [`updates`]) |
//! | `session/request_permission` | each permission request and question, answered through `.../reply` |
//! | `session/cancel` | `POST .../interrupt`: the turn ends `cancelled` |
//!
//! This file holds the protocol's plumbing (lines in, lines out, requests asked of the
//! editor and their answers) and the methods; `session.rs` what is done for each
//! session (following its events, prompts, permission requests and questions);
//! `updates.rs` the events as ACP updates. The editor is trusted as the person at the
//! keyboard is; a node agent is not: what it streams is bounded by the client, and
//! nothing it says is run or followed here.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::client::{Client, ClientError};
use crate::model::{CreateSessionRequest, McpServer};

mod session;
pub mod updates;

use session::{Followed, Replay};

/// The ACP protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;
/// The longest line taken from the editor: a prompt with embedded files fits.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Messages waiting to be written to the editor before senders wait.
const OUTBOX: usize = 256;
/// Requests of the editor's answered at once (a prompt holds one for its whole turn);
/// one past it is refused.
const MAX_IN_FLIGHT: usize = 64;

/// JSON-RPC's error codes, and ACP's.
mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// A session as ACP names it, and where it runs.
#[derive(Debug, Clone)]
pub struct Target {
    /// The node agent it runs on.
    pub client: Client,
    /// Its id there.
    pub id: String,
}

/// What a `session/new` made (or found).
#[derive(Debug, Clone)]
pub struct Made {
    /// The `sessionId` the editor gets.
    pub name: String,
    pub target: Target,
    /// A conversation that was there before (`--session`): its history is shown.
    pub existing: bool,
}

/// Where sessions are made and found: on one node agent, or as resources whose
/// sandboxes the controller makes (the CLI's `--session`, `--sandbox-template`).
pub trait SessionMaker: Send + Sync {
    /// Makes the session of a `session/new`; `request` has the editor's cwd (when it
    /// applies) and MCP servers in it.
    fn make(&self, request: CreateSessionRequest) -> BoxFuture<'_, Result<Made, String>>;
    /// The session a `session/load` or a prompt names.
    fn find<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Target, String>>;
    /// The editor went: what to do with a session [`SessionMaker::make`] made.
    fn release<'a>(&'a self, made: &'a Made) -> BoxFuture<'a, ()> {
        let _ = made;
        Box::pin(async {})
    }
}

/// Makes every session on one node agent, from one request, under a new id.
pub struct OnNodeAgent {
    pub client: Client,
    /// End the sessions made here when the editor goes.
    pub end_on_exit: bool,
}

impl SessionMaker for OnNodeAgent {
    fn make(&self, request: CreateSessionRequest) -> BoxFuture<'_, Result<Made, String>> {
        Box::pin(async move {
            let id = format!("acp-{}", crate::random::hex(8));
            self.client.create_session(&id, &request).await.map_err(|e| e.to_string())?;
            Ok(Made { name: id.clone(), target: Target { client: self.client.clone(), id }, existing: false })
        })
    }

    fn find<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Target, String>> {
        Box::pin(async move { Ok(Target { client: self.client.clone(), id: name.to_string() }) })
    }

    fn release<'a>(&'a self, made: &'a Made) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if self.end_on_exit
                && let Err(error) = made.target.client.end_session(&made.target.id).await
            {
                tracing::warn!(session = %made.target.id, %error, "could not end the session");
            }
        })
    }
}

/// How `session/new` builds its request.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// What a new session is: the agent, its mode, model, permission mode, env. Its
    /// `working_dir`, when absent, is the editor's `cwd` if [`Options::client_cwd`].
    pub create: CreateSessionRequest,
    /// Give a new session the editor's `cwd` as its working directory (when the node
    /// agent sees the editor's files: on this machine, not in a sandbox).
    pub client_cwd: bool,
    /// What `initialize` says this agent is (`agentInfo.title`).
    pub title: String,
}

/// A JSON-RPC error, as the editor gets it.
#[derive(Debug)]
pub(crate) struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(code::INTERNAL_ERROR, message)
    }
}

impl From<ClientError> for RpcError {
    fn from(error: ClientError) -> RpcError {
        let not_found = error.code().is_some_and(|c| c.as_str().ends_with("not_found"));
        RpcError::new(if not_found { code::RESOURCE_NOT_FOUND } else { code::INTERNAL_ERROR }, error.to_string())
    }
}

type RpcResult = Result<Value, RpcError>;

/// Serves ACP on `input` and `output` until the editor closes `input`.
pub async fn serve<R, W>(maker: Arc<dyn SessionMaker>, options: Options, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, outbox) = mpsc::channel(OUTBOX);
    let writer = tokio::spawn(write_all(output, outbox));
    let acp = Arc::new(Acp {
        maker,
        options,
        out,
        asked: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        sessions: Mutex::new(HashMap::new()),
        made: Mutex::new(Vec::new()),
        in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
    });
    let read = read_all(&acp, input).await;
    acp.close().await;
    drop(acp);
    // Everything queued is written before the end.
    let written = writer.await.unwrap_or(Ok(()));
    read.and(written)
}

async fn read_all<R: AsyncBufRead + Unpin>(acp: &Arc<Acp>, mut input: R) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let (complete, too_long) = read_line(&mut input, &mut line).await?;
        if !complete && line.is_empty() && !too_long {
            return Ok(());
        }
        if too_long {
            acp.send(error_answer(
                Value::Null,
                code::INVALID_REQUEST,
                &format!("a message longer than {MAX_LINE_BYTES} bytes"),
            ))
            .await;
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice::<Value>(&line) {
                Ok(message) => Arc::clone(acp).dispatch(message).await,
                Err(error) => {
                    acp.send(error_answer(Value::Null, code::PARSE_ERROR, &format!("not JSON: {error}"))).await
                }
            }
        }
        if !complete {
            return Ok(());
        }
    }
}

fn error_answer(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Reads one line into `line` (without its newline): whether it ended in a newline,
/// and whether it was longer than [`MAX_LINE_BYTES`] (then skipped to its end).
async fn read_line<R: AsyncBufRead + Unpin>(input: &mut R, line: &mut Vec<u8>) -> std::io::Result<(bool, bool)> {
    let mut too_long = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok((false, too_long));
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buf.len(), false),
        };
        let body = if done { &buf[..take - 1] } else { &buf[..take] };
        if line.len() + body.len() > MAX_LINE_BYTES {
            too_long = true;
            line.clear();
        } else if !too_long {
            line.extend_from_slice(body);
        }
        input.consume(take);
        if done {
            return Ok((true, too_long));
        }
    }
}

async fn write_all<W: AsyncWrite + Unpin>(mut output: W, mut outbox: mpsc::Receiver<Value>) -> std::io::Result<()> {
    while let Some(message) = outbox.recv().await {
        let mut bytes = serde_json::to_vec(&message).expect("values serialize");
        bytes.push(b'\n');
        output.write_all(&bytes).await?;
        // Several queued: one flush for them all.
        if outbox.is_empty() {
            output.flush().await?;
        }
    }
    output.flush().await
}

struct Acp {
    maker: Arc<dyn SessionMaker>,
    options: Options,
    out: mpsc::Sender<Value>,
    /// Requests asked of the editor, by id, waiting for its answer.
    asked: Mutex<HashMap<u64, oneshot::Sender<Result<Value, Value>>>>,
    next_id: AtomicU64,
    /// The sessions followed, by the editor's name for them.
    sessions: Mutex<HashMap<String, Arc<Followed>>>,
    /// The sessions made here, released when the editor goes.
    made: Mutex<Vec<Made>>,
    /// Bounds the requests answered at once.
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl Acp {
    async fn send(&self, message: Value) {
        // The writer is gone only when the editor is: nothing to tell it.
        let _ = self.out.send(message).await;
    }

    async fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
    }

    /// Asks the editor; its answer, or `Err` with its error (or null when it went).
    async fn ask(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.asked.lock().expect("not poisoned").insert(id, tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        rx.await.unwrap_or(Err(Value::Null))
    }

    async fn dispatch(self: Arc<Self>, message: Value) {
        let id = message.get("id").cloned();
        let method = message.get("method").and_then(Value::as_str).map(str::to_string);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match (id, method) {
            // An answer to one of ours.
            (Some(id), None) => {
                let waiting = id.as_u64().and_then(|id| self.asked.lock().expect("not poisoned").remove(&id));
                if let Some(waiting) = waiting {
                    let answer = match message.get("error") {
                        Some(error) => Err(error.clone()),
                        None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = waiting.send(answer);
                }
            }
            (Some(id), Some(method)) => {
                // Each request on its own: a prompt waits for its turn while others go
                // on. Past MAX_IN_FLIGHT one is refused at once (reading never waits: the
                // answers that let the others finish come on the same input).
                let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
                    let busy = format!("{MAX_IN_FLIGHT} requests are being answered already: try again");
                    self.send(error_answer(id, code::INTERNAL_ERROR, &busy)).await;
                    return;
                };
                tokio::spawn(async move {
                    let _permit = permit;
                    let mut after = None;
                    let answer = match self.request(&method, params, &mut after).await {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                        Err(error) => error_answer(id, error.code, &error.message),
                    };
                    self.send(answer).await;
                    if let Some(after) = after {
                        let _ = after.send(());
                    }
                });
            }
            (None, Some(method)) => {
                if method == "session/cancel"
                    && let Some(name) = params.get("sessionId").and_then(Value::as_str)
                {
                    self.cancel(name).await;
                }
                // Other notifications (extensions) are not for us.
            }
            (None, None) => {
                let what = "neither a request, a notification nor an answer";
                self.send(error_answer(Value::Null, code::INVALID_REQUEST, what)).await
            }
        }
    }

    /// Answers a request; `after` is told once the answer is on its way.
    async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        after: &mut Option<oneshot::Sender<()>>,
    ) -> RpcResult {
        match method {
            "initialize" => Ok(self.initialize()),
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(&params, after).await,
            "session/load" => self.load_session(&params).await,
            "session/prompt" => self.prompt(&params).await,
            "session/set_mode" => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                "the mode is the session's: give it with `agentplane acp --mode`",
            )),
            _ => Err(RpcError::new(code::METHOD_NOT_FOUND, format!("no method {method:?}"))),
        }
    }

    fn initialize(&self) -> Value {
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
            },
            "authMethods": [],
            "agentInfo": {"name": "agentplane", "title": self.options.title, "version": env!("CARGO_PKG_VERSION")},
        })
    }

    async fn new_session(self: &Arc<Self>, params: &Value, after: &mut Option<oneshot::Sender<()>>) -> RpcResult {
        let mut request = self.options.create.clone();
        if request.working_dir.is_none() && self.options.client_cwd {
            request.working_dir = params.get("cwd").and_then(Value::as_str).map(str::to_string);
        }
        let servers = params.get("mcpServers").cloned().unwrap_or(Value::Null);
        request.mcp_servers.extend(mcp_servers(&servers)?);
        if request.label.is_none() {
            request.label = Some("acp".into());
        }
        let made = self.maker.make(request).await.map_err(RpcError::internal)?;
        let info = made.target.client.get_session(&made.target.id).await?;
        let replay = if made.existing {
            // A conversation from before: once this answer is out, its history is
            // shown, then it goes on as any.
            let (answered, gate) = oneshot::channel();
            *after = Some(answered);
            Replay::After(gate)
        } else {
            Replay::No
        };
        self.follow(&made.name, made.target.clone(), info.last_sequence, replay);
        let name = made.name.clone();
        if !made.existing {
            self.made.lock().expect("not poisoned").push(made);
        }
        Ok(json!({"sessionId": name}))
    }

    /// Replays the session's history as updates, then answers: the editor shows the
    /// conversation as it was, and goes on from there.
    async fn load_session(self: &Arc<Self>, params: &Value) -> RpcResult {
        let name = session_id(params)?;
        let target = self.maker.find(name).await.map_err(|e| RpcError::new(code::RESOURCE_NOT_FOUND, e))?;
        let info = target.client.get_session(&target.id).await?;
        let (tell, replayed) = oneshot::channel();
        self.follow(name, target, info.last_sequence, Replay::Before(tell));
        match replayed.await {
            Ok(Ok(())) => Ok(Value::Null),
            Ok(Err(error)) => Err(error.into()),
            Err(_) => Err(RpcError::internal("the replay stopped")),
        }
    }

    /// The session followed under `name`, found (and followed from now) when the
    /// editor names one it did not make or load here.
    async fn followed(self: &Arc<Self>, name: &str) -> Result<Arc<Followed>, RpcError> {
        if let Some(followed) = self.sessions.lock().expect("not poisoned").get(name).cloned() {
            return Ok(followed);
        }
        let target = self.maker.find(name).await.map_err(|e| RpcError::new(code::RESOURCE_NOT_FOUND, e))?;
        let info = target.client.get_session(&target.id).await?;
        Ok(self.follow(name, target, info.last_sequence, Replay::No))
    }

    async fn cancel(self: &Arc<Self>, name: &str) {
        let followed = self.sessions.lock().expect("not poisoned").get(name).cloned();
        let Some(followed) = followed else { return };
        if let Err(error) = followed.target.client.interrupt_session(&followed.target.id).await {
            tracing::warn!(session = %followed.target.id, %error, "could not interrupt the turn");
        }
    }

    /// The editor went: stop following, and release what was made here.
    async fn close(&self) {
        let followed: Vec<Arc<Followed>> =
            self.sessions.lock().expect("not poisoned").drain().map(|(_, f)| f).collect();
        for followed in followed {
            followed.stop();
        }
        self.asked.lock().expect("not poisoned").clear();
        let made = std::mem::take(&mut *self.made.lock().expect("not poisoned"));
        for made in made {
            self.maker.release(&made).await;
        }
    }
}

fn session_id(params: &Value) -> Result<&str, RpcError> {
    params.get("sessionId").and_then(Value::as_str).ok_or_else(|| RpcError::params("`sessionId` is missing"))
}

/// A prompt's content blocks as the one message the session is sent: text as it is,
/// an embedded resource's text in a fenced block naming its URI, a link as its URI.
fn prompt_text(blocks: &Value) -> Result<String, RpcError> {
    let blocks = blocks.as_array().ok_or_else(|| RpcError::params("`prompt` must be a list of content blocks"))?;
    let mut parts = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(block.get("text").and_then(Value::as_str).unwrap_or_default().to_string()),
            Some("resource_link") => {
                let uri = block.get("uri").and_then(Value::as_str).unwrap_or_default();
                parts.push(format!("@{uri}"));
            }
            Some("resource") => {
                let resource = block.get("resource").unwrap_or(&Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or_default();
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => parts.push(format!("{uri}:\n```\n{text}\n```")),
                    None => parts.push(format!("@{uri}")),
                }
            }
            Some(other) => {
                return Err(RpcError::params(format!(
                    "a {other:?} block: this agent takes text, resource links and embedded text resources"
                )));
            }
            None => return Err(RpcError::params("a content block without a `type`")),
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(RpcError::params("the prompt is empty"));
    }
    Ok(text)
}

/// ACP's MCP servers as a session's: stdio (command, args, env) and HTTP (url,
/// headers); SSE is not offered (`mcpCapabilities.sse` is false).
fn mcp_servers(servers: &Value) -> Result<Vec<McpServer>, RpcError> {
    let Some(list) = servers.as_array() else { return Ok(Vec::new()) };
    let pairs = |value: Option<&Value>| -> BTreeMap<String, String> {
        value
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|p| Some((p.get("name")?.as_str()?.to_string(), p.get("value")?.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    };
    list.iter()
        .map(|server| {
            let name = server.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            match server.get("type").and_then(Value::as_str) {
                Some("http") => Ok(McpServer {
                    name,
                    url: server.get("url").and_then(Value::as_str).map(str::to_string),
                    headers: pairs(server.get("headers")),
                    ..Default::default()
                }),
                Some("sse") => Err(RpcError::params(format!(
                    "MCP server {name:?}: SSE servers are not supported (initialize says so); use HTTP or stdio"
                ))),
                _ => Ok(McpServer {
                    name,
                    command: server.get("command").and_then(Value::as_str).map(str::to_string),
                    args: server
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                        .unwrap_or_default(),
                    env: pairs(server.get("env")),
                    ..Default::default()
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_becomes_one_message_and_refuses_what_it_cannot_carry() {
        let blocks = json!([
            {"type": "text", "text": "look at this"},
            {"type": "resource", "resource": {"uri": "file:///a.rs", "text": "fn main() {}"}},
            {"type": "resource_link", "uri": "file:///b.rs", "name": "b.rs"},
        ]);
        assert_eq!(
            prompt_text(&blocks).unwrap(),
            "look at this\n\nfile:///a.rs:\n```\nfn main() {}\n```\n\n@file:///b.rs"
        );
        assert_eq!(prompt_text(&json!([{"type": "image", "data": ""}])).unwrap_err().code, code::INVALID_PARAMS);
        assert_eq!(prompt_text(&json!([{"type": "text", "text": " "}])).unwrap_err().code, code::INVALID_PARAMS);
        assert_eq!(prompt_text(&json!("hi")).unwrap_err().code, code::INVALID_PARAMS);
    }

    #[test]
    fn mcp_servers_keep_their_kind_and_sse_is_refused() {
        let servers = json!([
            {"name": "fs", "command": "/bin/mcp-fs", "args": ["--root", "/w"], "env": [{"name": "A", "value": "1"}]},
            {"type": "http", "name": "web", "url": "https://mcp.example/", "headers": [{"name": "Authorization", "value": "Bearer x"}]},
        ]);
        let got = mcp_servers(&servers).unwrap();
        assert_eq!(got[0].command.as_deref(), Some("/bin/mcp-fs"));
        assert_eq!(got[0].args, ["--root", "/w"]);
        assert_eq!(got[0].env.get("A").map(String::as_str), Some("1"));
        assert_eq!(got[1].url.as_deref(), Some("https://mcp.example/"));
        assert_eq!(got[1].headers.get("Authorization").map(String::as_str), Some("Bearer x"));
        let sse = json!([{"type": "sse", "name": "old", "url": "http://x/"}]);
        assert_eq!(mcp_servers(&sse).unwrap_err().code, code::INVALID_PARAMS);
        assert!(mcp_servers(&Value::Null).unwrap().is_empty());
    }

    #[tokio::test]
    async fn lines_are_bounded_and_a_last_line_without_newline_counts() {
        let mut input: &[u8] = b"{\"a\":1}\n\n{\"b\":2}";
        let mut line = Vec::new();
        assert_eq!(read_line(&mut input, &mut line).await.unwrap(), (true, false));
        assert_eq!(line, b"{\"a\":1}");
        line.clear();
        assert_eq!(read_line(&mut input, &mut line).await.unwrap(), (true, false));
        assert!(line.is_empty());
        line.clear();
        assert_eq!(read_line(&mut input, &mut line).await.unwrap(), (false, false));
        assert_eq!(line, b"{\"b\":2}");
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        let mut input = std::io::Cursor::new([long, b"\n{}\n".to_vec()].concat());
        let mut line = Vec::new();
        assert_eq!(read_line(&mut input, &mut line).await.unwrap(), (true, true));
        assert!(line.is_empty(), "what was too long is not kept");
        assert_eq!(read_line(&mut input, &mut line).await.unwrap(), (true, false));
        assert_eq!(line, b"{}");
    }
}
