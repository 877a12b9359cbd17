//! The scripted model server: a test tool, what the real agent CLIs talk to on
//! 127.0.0.1 in tests and demos instead of a model provider. It is a crate of its own,
//! a dev-dependency of the crates whose tests drive real agents, so the release binary
//! carries none of it; `cargo run -p agentplane-model-server` serves it by hand.
//!
//! It speaks the APIs the CLIs call (Anthropic Messages, OpenAI Responses and Chat
//! Completions, Gemini, Amp's internal API) and answers by a script, the same for every
//! API:
//!
//! - when the last message is a tool result, a text answer that quotes it
//!   (`tool said: <output>`);
//! - when the last user message holds `[[run:COMMAND]]`, a call of the request's
//!   shell tool running COMMAND (`[[run]]` alone runs `echo hi`);
//! - when it holds `[[tool:NAME {JSON}]]`, a call of the offered tool NAME with
//!   that JSON object as its input (how tests make an agent ask a question or
//!   leave plan mode), loaded first with `ToolSearch` where the CLI defers it;
//!   `[[tool:*SUFFIX ...]]` calls the offered tool whose name ends with SUFFIX;
//! - else a text answer saying how many messages were in context
//!   (`scripted reply: N messages in context`), so that a resumed conversation shows.
//!
//! Every request is logged (method, path and query, JSON body) for tests to read,
//! and so is the token usage each answer reports ([`ModelServer::usage`]): counts
//! that differ per answer and per field, so that a test can tell which answers an
//! agent summed into what it reports.

pub mod amp;
pub mod anthropic;
pub mod chat;
pub mod gemini;
pub mod responses;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What failed: the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (taken, or not this machine's).
    #[error("the scripted model server could not listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct LoggedRequest {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The body as JSON (`null` when it was not JSON).
    pub body: Value,
    /// The headers, names lowercase (a repeated one's values joined by `, `): what a
    /// test asks of the credentials a request carried.
    pub headers: std::collections::BTreeMap<String, String>,
}

/// The conversation a request carries, reduced to what the script looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    pub messages: Vec<Message>,
    /// The tools the request offers.
    pub tools: Vec<Tool>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User(String),
    Assistant(String),
    /// A tool call the assistant made (in context, from an earlier response).
    ToolCall {
        name: String,
    },
    ToolResult(String),
}

/// A tool offered in a request: its name and the JSON schema of its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub schema: Value,
}

/// The token usage the server reported with one answer, in the one sense of the
/// universal `Usage`: `input` is the input neither read from nor written to the
/// cache (an API whose input count includes cached tokens was sent `input +
/// cache_read`), `cache_write` is 0 for an API without such a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedUsage {
    /// The API that answered: `anthropic`, `responses`, `chat` or `gemini`.
    pub api: &'static str,
    /// The model the request asked for.
    pub model: String,
    /// How many tools the request offered: none in an agent's side requests (a
    /// title, a summary), which it may not count as the conversation's.
    pub tools: usize,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// What the script answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    /// A call of `tool` with `arguments` (an object), built for the tool's schema.
    ToolCall {
        tool: String,
        arguments: Value,
    },
}

/// Names of shell tools, most specific first, across the CLIs.
const SHELL_TOOLS: [&str; 8] =
    ["Bash", "bash", "shell", "exec_command", "shell_command", "run_shell_command", "local_shell", "Shell"];

impl Conversation {
    /// The script's answer to this conversation.
    pub fn reply(&self) -> Reply {
        if let Some(reply) = self.marked_tool_call() {
            return reply;
        }
        match self.messages.last() {
            Some(Message::ToolResult(output)) => Reply::Text(format!("tool said: {}", output.trim())),
            Some(Message::User(text)) if command_in(text).is_some() => {
                let command = command_in(text).unwrap_or_default();
                match self.shell_tool() {
                    Some(tool) => {
                        Reply::ToolCall { tool: tool.name.clone(), arguments: shell_arguments(tool, &command) }
                    }
                    None => Reply::Text(format!("no shell tool offered to run {command:?}")),
                }
            }
            _ => Reply::Text(format!("scripted reply: {} messages in context", self.messages.len())),
        }
    }

    /// The answer to a `[[tool:NAME {JSON}]]` marker in the last user message: the
    /// call, when the tool is offered. Claude Code offers some tools by name only,
    /// to be loaded with its `ToolSearch` tool: as a model would, the script loads
    /// NAME first and calls it once the search's result is in.
    fn marked_tool_call(&self) -> Option<Reply> {
        // A user message right before a tool result is text sent along with the
        // result (Claude Code's "Tool loaded."), not the person's next message.
        let with_result = |i: usize| matches!(self.messages.get(i + 1), Some(Message::ToolResult(_)));
        let (index, text) = self.messages.iter().enumerate().rev().find_map(|(i, m)| match m {
            Message::User(text) if !with_result(i) => Some((i, text)),
            _ => None,
        })?;
        let call = match tool_call_in(text)? {
            Ok(call) => call,
            Err(error) => return (index + 1 == self.messages.len()).then_some(Reply::Text(error)),
        };
        let (name, arguments) = call;
        // `*SUFFIX`: the offered tool whose name ends with SUFFIX, for a test that does
        // not know how the agent names a tool (each names an MCP server's its own way:
        // `mcp__fixture__reveal_secret`, `fixture_reveal_secret`, ...).
        let name = match name.strip_prefix('*') {
            Some(suffix) => {
                self.tools.iter().find(|t| t.name.ends_with(suffix)).map_or(name.clone(), |t| t.name.clone())
            }
            None => name,
        };
        let offered = self.tools.iter().any(|t| t.name == name);
        let since: Vec<&Message> = self
            .messages
            .iter()
            .enumerate()
            .skip(index + 1)
            .filter(|(i, m)| !(matches!(m, Message::User(_)) && with_result(*i)))
            .map(|(_, m)| m)
            .collect();
        match since.as_slice() {
            [] if offered => Some(Reply::ToolCall { tool: name, arguments }),
            [] => match self.tools.iter().find(|t| TOOL_SEARCHES.contains(&t.name.as_str())) {
                Some(search) => {
                    Some(Reply::ToolCall { tool: search.name.clone(), arguments: tool_search_arguments(search, &name) })
                }
                None => Some(Reply::Text(format!("no tool {name:?} offered"))),
            },
            [Message::ToolCall { name: searched }, Message::ToolResult(_)]
                if TOOL_SEARCHES.contains(&searched.as_str()) && offered =>
            {
                Some(Reply::ToolCall { tool: name, arguments })
            }
            [Message::ToolCall { name: searched }, Message::ToolResult(_)]
                if TOOL_SEARCHES.contains(&searched.as_str()) =>
            {
                Some(Reply::Text(format!("no tool {name:?} offered, even after {searched}")))
            }
            _ => None,
        }
    }

    /// The request's shell tool, if it offers one.
    pub fn shell_tool(&self) -> Option<&Tool> {
        SHELL_TOOLS.iter().find_map(|name| self.tools.iter().find(|t| t.name == *name))
    }
}

/// The command a `[[run:COMMAND]]` marker asks for (`echo hi` for `[[run]]`).
pub fn command_in(text: &str) -> Option<String> {
    if text.contains("[[run]]") {
        return Some("echo hi".into());
    }
    let start = text.find("[[run:")? + "[[run:".len();
    let end = text[start..].find("]]")? + start;
    Some(text[start..end].trim().to_string())
}

/// The tool call a `[[tool:NAME {JSON}]]` marker asks for: `None` without one,
/// an error (said back as the reply) when its JSON is not an object.
pub fn tool_call_in(text: &str) -> Option<Result<(String, Value), String>> {
    let start = text.find("[[tool:")? + "[[tool:".len();
    let rest = &text[start..];
    let name_end = rest.find(|c: char| c.is_whitespace() || c == ']').unwrap_or(rest.len());
    let name = rest[..name_end].to_string();
    let after_name = rest[name_end..].trim_start();
    if after_name.starts_with("]]") {
        return Some(Ok((name, json!({}))));
    }
    // The JSON may hold `]]` itself: parse one value, then expect the marker's end.
    let mut values = serde_json::Deserializer::from_str(after_name).into_iter::<Value>();
    let parsed = match values.next() {
        Some(Ok(Value::Object(arguments))) if after_name[values.byte_offset()..].trim_start().starts_with("]]") => {
            Ok((name, Value::Object(arguments)))
        }
        Some(Ok(_)) => Err(format!("the [[tool:{name} ...]] marker needs one JSON object and then ]]")),
        Some(Err(e)) => Err(format!("the [[tool:{name} ...]] marker's JSON: {e}")),
        None => Err(format!("the [[tool:{name} ...]] marker has no ]]")),
    };
    Some(parsed)
}

/// Claude Code's tool that loads the tools it offers by name only.
const TOOL_SEARCH: &str = "ToolSearch";
/// The tools that load deferred tools: Claude Code's, and codex's (for an MCP server's).
const TOOL_SEARCHES: [&str; 2] = [TOOL_SEARCH, "tool_search"];

/// A search's arguments finding one tool: Claude's `ToolSearch` selects it by name
/// (`select:NAME`, with a result limit when its schema has one); codex's
/// `tool_search` searches for the name (without a marker's `*`).
fn tool_search_arguments(tool: &Tool, name: &str) -> Value {
    let name = name.trim_start_matches('*');
    let mut arguments = serde_json::Map::new();
    if tool.name != TOOL_SEARCH {
        arguments.insert("query".into(), json!(name));
        arguments.insert("limit".into(), json!(8));
        return Value::Object(arguments);
    }
    arguments.insert("query".into(), json!(format!("select:{name}")));
    if tool.schema.get("properties").and_then(|p| p.get("max_results")).is_some() {
        arguments.insert("max_results".into(), json!(5));
    }
    Value::Object(arguments)
}

/// Arguments for a shell tool, shaped by its schema: an argv array
/// (`["bash", "-lc", cmd]`) where `command` is an array, `cmd` where the tool names
/// it so, else `command` as a string; a `description` when the schema has one.
pub fn shell_arguments(tool: &Tool, command: &str) -> Value {
    let properties = tool.schema.get("properties").cloned().unwrap_or(Value::Null);
    let mut arguments = serde_json::Map::new();
    match properties.get("command").and_then(|p| p.get("type")).and_then(Value::as_str) {
        Some("array") => {
            arguments.insert("command".into(), json!(["bash", "-lc", command]));
        }
        _ if properties.get("cmd").is_some() => {
            arguments.insert("cmd".into(), json!(command));
        }
        _ => {
            arguments.insert("command".into(), json!(command));
        }
    }
    if properties.get("description").is_some() {
        arguments.insert("description".into(), json!("run a command"));
    }
    Value::Object(arguments)
}

#[derive(Clone, Default)]
pub struct Shared {
    log: Arc<Mutex<Vec<LoggedRequest>>>,
    /// The usage reported with each answer, oldest first.
    usage: Arc<Mutex<Vec<ReportedUsage>>>,
    /// The threads amp syncs to its server (see the amp module).
    amp_threads: amp::Threads,
}

impl Shared {
    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, request: LoggedRequest) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(request);
    }

    /// The usage of the next answer, logged: the Nth answer of this server reports
    /// `200 + N` input, `30 + N` output, `4000 + N` cache read and (where the API
    /// has the field) `500 + N` cache write tokens. Every field differs from the
    /// others and from answer to answer, so a sum names the answers in it; and they
    /// stay small, far from any agent's context window (none compacts because of them).
    fn report_usage(&self, api: &'static str, model: &str, tools: usize, cache_write: bool) -> ReportedUsage {
        let mut log = self.usage.lock().unwrap_or_else(|e| e.into_inner());
        let n = log.len() as u64 + 1;
        let usage = ReportedUsage {
            api,
            model: model.to_string(),
            tools,
            input: 200 + n,
            output: 30 + n,
            cache_read: 4000 + n,
            cache_write: if cache_write { 500 + n } else { 0 },
        };
        log.push(usage.clone());
        usage
    }
}

/// A running scripted model server; stops when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Shared,
    shutdown: CancellationToken,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves.
    pub async fn start() -> Result<ModelServer> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Binds `addr` and serves.
    pub async fn bind(addr: SocketAddr) -> Result<ModelServer> {
        let listen = |source| Error::Listen { addr, source };
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen)?;
        let addr = listener.local_addr().map_err(listen)?;
        let shared = Shared::default();
        let shutdown = CancellationToken::new();
        let app = router(shared.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        Ok(ModelServer { addr, shared, shutdown })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.shared.requests()
    }

    /// What the server keeps, for a test whose server runs on another thread.
    pub fn shared(&self) -> Shared {
        self.shared.clone()
    }

    /// The usage reported with every answer so far, oldest first.
    pub fn usage(&self) -> Vec<ReportedUsage> {
        self.shared.usage.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serves until `shutdown` fires (for the `agentplane-model-server` binary).
    pub async fn wait(self, shutdown: CancellationToken) {
        shutdown.cancelled().await;
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn router(shared: Shared) -> Router {
    Router::new()
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/api/provider/anthropic/v1/messages", post(anthropic::messages))
        .route("/v1/responses", post(responses::create))
        .route("/v1/chat/completions", post(chat::completions))
        .route("/chat/completions", post(chat::completions))
        .route("/v1beta/models/{*rest}", post(gemini::generate))
        .route("/api/{*rest}", any(amp::api))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), log_request))
        .with_state(shared)
}

/// Logs every request with its JSON body, then hands it on.
async fn log_request(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("reading the body: {e}")).into_response(),
    };
    let mut headers = std::collections::BTreeMap::<String, String>::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers.entry(name.as_str().to_string()).and_modify(|v| *v = format!("{v}, {value}")).or_insert(value);
    }
    shared.record(LoggedRequest {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        headers,
    });
    tracing::debug!(method = %parts.method, uri = %parts.uri, "model server request");
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

async fn not_found(request: Request) -> Response {
    (StatusCode::NOT_FOUND, axum::Json(json!({"error": {"message": format!("the scripted model server has no {} {}", request.method(), request.uri())}})))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash() -> Tool {
        Tool {
            name: "Bash".into(),
            schema: json!({"properties": {"command": {"type": "string"}, "description": {"type": "string"}}}),
        }
    }

    #[test]
    fn the_script_quotes_tool_results_runs_markers_and_counts_messages() {
        let mut conversation = Conversation { messages: vec![Message::User("hello".into())], tools: vec![bash()] };
        assert_eq!(conversation.reply(), Reply::Text("scripted reply: 1 messages in context".into()));
        conversation.messages.push(Message::Assistant("hi".into()));
        conversation.messages.push(Message::User("now [[run:touch x]] please".into()));
        assert_eq!(
            conversation.reply(),
            Reply::ToolCall {
                tool: "Bash".into(),
                arguments: json!({"command": "touch x", "description": "run a command"})
            }
        );
        conversation.messages.push(Message::ToolCall { name: "Bash".into() });
        conversation.messages.push(Message::ToolResult("done\n".into()));
        assert_eq!(conversation.reply(), Reply::Text("tool said: done".into()));
    }

    #[test]
    fn a_tool_marker_calls_the_named_tool_with_its_json() {
        let ask = Tool { name: "AskUserQuestion".into(), schema: json!({}) };
        let text =
            r#"ask [[tool:AskUserQuestion {"questions": [{"question": "Which?", "options": [{"label": "A"}]}]}]] now"#;
        let conversation = Conversation { messages: vec![Message::User(text.into())], tools: vec![bash(), ask] };
        let arguments = json!({"questions": [{"question": "Which?", "options": [{"label": "A"}]}]});
        assert_eq!(conversation.reply(), Reply::ToolCall { tool: "AskUserQuestion".into(), arguments });
        assert_eq!(tool_call_in("[[tool:ExitPlanMode]]"), Some(Ok(("ExitPlanMode".into(), json!({})))));
        let unknown = Conversation { messages: vec![Message::User("[[tool:Nope {}]]".into())], tools: vec![bash()] };
        assert_eq!(unknown.reply(), Reply::Text("no tool \"Nope\" offered".into()));
        assert!(matches!(tool_call_in("[[tool:X [1]]]"), Some(Err(e)) if e.contains("one JSON object")));
        assert!(matches!(tool_call_in("[[tool:X {\"a\": }]]"), Some(Err(e)) if e.contains("JSON")));
        assert!(matches!(tool_call_in("[[tool:X {} and no end"), Some(Err(_))));
        assert_eq!(tool_call_in("no marker"), None);
    }

    #[test]
    fn a_star_names_the_offered_tool_that_ends_so() {
        let mcp = Tool { name: "mcp__fixture__reveal_secret".into(), schema: json!({}) };
        let mut conversation =
            Conversation { messages: vec![Message::User("[[tool:*reveal_secret]]".into())], tools: vec![bash(), mcp] };
        assert_eq!(
            conversation.reply(),
            Reply::ToolCall { tool: "mcp__fixture__reveal_secret".into(), arguments: json!({}) }
        );
        conversation.messages.push(Message::ToolCall { name: "mcp__fixture__reveal_secret".into() });
        conversation.messages.push(Message::ToolResult("the secret is x".into()));
        assert_eq!(conversation.reply(), Reply::Text("tool said: the secret is x".into()));
        let none = Conversation { messages: vec![Message::User("[[tool:*nothing]]".into())], tools: vec![bash()] };
        assert_eq!(none.reply(), Reply::Text("no tool \"*nothing\" offered".into()));
    }

    #[test]
    fn a_tool_offered_by_name_only_is_loaded_with_tool_search_then_called() {
        let search =
            Tool { name: "ToolSearch".into(), schema: json!({"properties": {"query": {}, "max_results": {}}}) };
        let plan = Tool { name: "ExitPlanMode".into(), schema: json!({}) };
        let text = r#"go [[tool:ExitPlanMode {"plan": "p"}]]"#;
        let mut conversation =
            Conversation { messages: vec![Message::User(text.into())], tools: vec![bash(), search.clone()] };
        let select = json!({"query": "select:ExitPlanMode", "max_results": 5});
        assert_eq!(conversation.reply(), Reply::ToolCall { tool: "ToolSearch".into(), arguments: select });
        conversation.messages.push(Message::ToolCall { name: "ToolSearch".into() });
        conversation.messages.push(Message::User("Tool loaded.".into()));
        conversation.messages.push(Message::ToolResult(String::new()));
        assert_eq!(conversation.reply(), Reply::Text("no tool \"ExitPlanMode\" offered, even after ToolSearch".into()));
        conversation.tools.push(plan);
        assert_eq!(
            conversation.reply(),
            Reply::ToolCall { tool: "ExitPlanMode".into(), arguments: json!({"plan": "p"}) }
        );
        // Once called, its result is quoted like any other.
        conversation.messages.push(Message::ToolCall { name: "ExitPlanMode".into() });
        conversation.messages.push(Message::ToolResult("approved".into()));
        assert_eq!(conversation.reply(), Reply::Text("tool said: approved".into()));
    }

    #[test]
    fn shell_arguments_follow_the_tool_schema() {
        let argv = Tool { name: "shell".into(), schema: json!({"properties": {"command": {"type": "array"}}}) };
        assert_eq!(shell_arguments(&argv, "echo hi"), json!({"command": ["bash", "-lc", "echo hi"]}));
        let cmd = Tool { name: "exec_command".into(), schema: json!({"properties": {"cmd": {"type": "string"}}}) };
        assert_eq!(shell_arguments(&cmd, "ls"), json!({"cmd": "ls"}));
        assert_eq!(command_in("go [[run]]"), Some("echo hi".into()));
        assert_eq!(command_in("plain"), None);
    }
}
