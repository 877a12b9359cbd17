//! A scripted model server on 127.0.0.1: what the real agent CLIs talk to in tests
//! and demos instead of a model provider. It speaks the APIs the CLIs call
//! (Anthropic Messages, OpenAI Responses and Chat Completions, Gemini, Amp's
//! internal API) and answers by a script, the same for every API:
//!
//! - when the last message is a tool result, a text answer that quotes it
//!   (`tool said: <output>`);
//! - when the last user message holds `[[run:COMMAND]]`, a call of the request's
//!   shell tool running COMMAND (`[[run]]` alone runs `echo hi`);
//! - else a text answer saying how many messages were in context
//!   (`scripted reply: N messages in context`), so that a resumed conversation shows.
//!
//! Every request is logged (method, path and query, JSON body) for tests to read.

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

/// One request the server received.
#[derive(Debug, Clone)]
pub struct LoggedRequest {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The body as JSON (`null` when it was not JSON).
    pub body: Value,
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
    ToolCall { name: String },
    ToolResult(String),
}

/// A tool offered in a request: its name and the JSON schema of its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub schema: Value,
}

/// What the script answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    /// A call of `tool` with `arguments` (an object), built for the tool's schema.
    ToolCall { tool: String, arguments: Value },
}

/// Names of shell tools, most specific first, across the CLIs.
const SHELL_TOOLS: [&str; 8] = ["Bash", "bash", "shell", "exec_command", "shell_command", "run_shell_command", "local_shell", "Shell"];

impl Conversation {
    /// The script's answer to this conversation.
    pub fn reply(&self) -> Reply {
        match self.messages.last() {
            Some(Message::ToolResult(output)) => Reply::Text(format!("tool said: {}", output.trim())),
            Some(Message::User(text)) if command_in(text).is_some() => {
                let command = command_in(text).unwrap_or_default();
                match self.shell_tool() {
                    Some(tool) => Reply::ToolCall { tool: tool.name.clone(), arguments: shell_arguments(tool, &command) },
                    None => Reply::Text(format!("no shell tool offered to run {command:?}")),
                }
            }
            _ => Reply::Text(format!("scripted reply: {} messages in context", self.messages.len())),
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

#[derive(Clone)]
pub struct Shared {
    log: Arc<Mutex<Vec<LoggedRequest>>>,
    /// The threads amp syncs to its server (see the amp module).
    amp_threads: amp::Threads,
}

impl Shared {
    fn record(&self, request: LoggedRequest) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(request);
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
    pub async fn start() -> std::io::Result<ModelServer> {
        Self::bind("127.0.0.1:0".parse().expect("an address")).await
    }

    pub async fn bind(addr: SocketAddr) -> std::io::Result<ModelServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Shared { log: Arc::new(Mutex::new(Vec::new())), amp_threads: amp::Threads::default() };
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
        self.shared.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serves until `shutdown` fires (for `agentplane node-agent model-server`).
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
    shared.record(LoggedRequest {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
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
        Tool { name: "Bash".into(), schema: json!({"properties": {"command": {"type": "string"}, "description": {"type": "string"}}}) }
    }

    #[test]
    fn the_script_quotes_tool_results_runs_markers_and_counts_messages() {
        let mut conversation = Conversation { messages: vec![Message::User("hello".into())], tools: vec![bash()] };
        assert_eq!(conversation.reply(), Reply::Text("scripted reply: 1 messages in context".into()));
        conversation.messages.push(Message::Assistant("hi".into()));
        conversation.messages.push(Message::User("now [[run:touch x]] please".into()));
        assert_eq!(
            conversation.reply(),
            Reply::ToolCall { tool: "Bash".into(), arguments: json!({"command": "touch x", "description": "run a command"}) }
        );
        conversation.messages.push(Message::ToolCall { name: "Bash".into() });
        conversation.messages.push(Message::ToolResult("done\n".into()));
        assert_eq!(conversation.reply(), Reply::Text("tool said: done".into()));
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
