//! The `codex` agent (`@openai/codex`), driven through one live `codex app-server`
//! per session: JSON-RPC over stdio, one object a line. `initialize` and the
//! `initialized` notification, then `thread/start` (or `thread/resume` with the thread
//! id saved for the session, after a node agent restart or a dead process), then one
//! `turn/start` per message, reading until its `turn/completed`. Codex's approval
//! requests (commands, file changes) become permission requests, its user-input
//! requests questions.
//!
//! Nothing of the user's codex configuration is written: the model provider comes
//! from `-c` overrides built from the session's env (`OPENAI_BASE_URL`, with the key
//! in `OPENAI_API_KEY`) and spec (model, variant as reasoning effort). Codex keeps its
//! own state under `CODEX_HOME`, else `$HOME/.codex` with the session env's `HOME`.

pub mod convert;

use std::path::PathBuf;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use self::convert::Converter;
use super::ConversationFiles;
use super::catalog::{Catalog, CredentialPlaces, CredentialSources, json_strings};
use super::child::LineChild;
use super::convert::Converter as _;
use super::{
    Agent, AgentDriver, AgentId, DriverConfig, Interrupted, Launch, Package, TurnContext, TurnInput, TurnOutcome,
};
use crate::driver::QuestionAnswer;
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};
use crate::universal::{EventData, PermissionReply, Role};

/// How long the app-server may take to answer `initialize` and `thread/start|resume`
/// (it starts in about a second; a loaded machine is slower).
const STARTUP: Duration = Duration::from_secs(120);
/// Codex retries a model provider it cannot reach without end ("Reconnecting... waiting
/// for network", about every 10 s, whatever its retry settings): after this many retries
/// in a row with nothing else happening the turn fails with `timeout` instead of hanging.
const MAX_RECONNECTS: u32 = 3;
/// How long codex gets to exit on SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Codex's reasoning efforts, which a session's `variant` names.
const EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

/// Codex, as the registry lists it.
pub struct Codex;

impl Agent for Codex {
    fn id(&self) -> AgentId {
        AgentId::Codex
    }

    fn name(&self) -> &'static str {
        "codex"
    }

    fn package(&self) -> Option<Package> {
        Some(Package { name: "@openai/codex", bin: "codex", default_version: "0.169.0" })
    }

    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities { permissions: true, questions: true, resume: true, streaming_deltas: true, mcp: true }
    }

    fn validate(&self, request: &CreateSessionRequest) -> Result<()> {
        validate(request)
    }

    fn launch<'a>(&'a self, launch: Launch<'a>) -> BoxFuture<'a, Result<Box<dyn AgentDriver>>> {
        Box::pin(start(launch))
    }

    fn converter(&self) -> Box<dyn super::convert::Converter> {
        Box::new(Converter::default())
    }

    fn catalog(&self) -> Catalog {
        Catalog {
            modes: &[],
            default_mode: None,
            models: &[("gpt-5.5", "A model of codex's built-in catalog")],
            default_model: None,
            models_note: "or another name of codex's built-in catalog; an unknown one fails the turn",
        }
    }

    /// The thread's rollout, `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-...-<thread>.jsonl`,
    /// which `thread/resume` reads.
    fn conversation_files(&self, places: &CredentialPlaces<'_>, id: &str) -> Vec<ConversationFiles> {
        places
            .dir("CODEX_HOME", ".codex")
            .map(|d| ConversationFiles::naming(d.join("sessions"), id))
            .into_iter()
            .collect()
    }

    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        let auth = |t: &str| {
            json_strings(t, &[&["OPENAI_API_KEY"], &["tokens", "access_token"], &["tokens", "refresh_token"]])
        };
        let files = places.dir("CODEX_HOME", ".codex").map(|d| (d.join("auth.json"), auth as fn(&str) -> bool));
        Some(CredentialSources { env: &["OPENAI_API_KEY", "CODEX_API_KEY"], files: files.into_iter().collect() })
    }
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode {
        // Codex's collaboration modes are not selectable through app-server's
        // thread/turn API; plan-like behaviour is `permissionMode: plan`.
        return Err(Error::ModeNotSupported(format!(
            "codex has no agent mode {mode:?} the node agent can select; use permissionMode plan for a read-only session"
        )));
    }
    super::mcp::codex_validate(&request.mcp_servers)?;
    if let Some(variant) = &request.variant
        && !EFFORTS.contains(&variant.as_str())
    {
        return Err(Error::InvalidRequest(format!(
            "codex's variant is its reasoning effort, one of {}, not {variant:?}",
            EFFORTS.join(", ")
        )));
    }
    Ok(())
}

async fn start(launch: Launch<'_>) -> Result<Box<dyn AgentDriver>> {
    let bin = launch.bin()?;
    let state = launch.saved_state("codex")?.unwrap_or_default();
    let lookup = bin.clone();
    let bwrap_dir = tokio::task::spawn_blocking(move || vendored_bwrap_dir(&lookup)).await.ok().flatten();
    let mut driver =
        CodexDriver { config: launch.config.clone(), bin, bwrap_dir, state, server: None, backlog: Vec::new() };
    driver.connect().await?;
    Ok(Box::new(driver))
}

/// Codex sandboxes its commands with the first `bwrap` on its PATH, else with the one
/// it ships. A distro's bubblewrap older than 0.9 has no `--argv0`, and codex then
/// re-executes itself as `codex-linux-sandbox` through a PATH alias it refuses to
/// create when its home is under /tmp: every sandboxed command (all of plan mode)
/// failed with `execvp codex-linux-sandbox` on a machine with Debian 12's bwrap
/// installed. Its own bwrap, first on PATH, has `--argv0` and always works.
fn vendored_bwrap_dir(bin: &std::path::Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(bin).ok()?;
    let node_modules = real.ancestors().find(|d| d.file_name().is_some_and(|n| n == "node_modules"))?;
    let scope = node_modules.join("@openai");
    for package in std::fs::read_dir(&scope).ok()?.flatten() {
        if !package.file_name().to_string_lossy().starts_with("codex-linux-") {
            continue;
        }
        for triple in std::fs::read_dir(package.path().join("vendor")).ok()?.flatten() {
            let resources = triple.path().join("codex-resources");
            if resources.join("bwrap").is_file() {
                return Some(resources);
            }
        }
    }
    None
}

/// What a session keeps to resume its conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CodexState {
    thread_id: Option<String>,
    /// The turn that was sent to codex and has not completed (a restart loses it).
    turn_in_codex: Option<u64>,
    /// The permission request or question of that turn awaiting a reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    waiting: Option<Waiting>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "id")]
enum Waiting {
    Permission(String),
    Question(String),
}

/// Whether this node agent runs in an agentplane sandbox (the controller says so in
/// its environment): codex's own sandbox, bubblewrap in a user namespace, cannot start
/// in one (no further user namespace can be made there), and the outer one is the
/// boundary.
pub(crate) fn inside_a_sandbox() -> bool {
    std::env::var_os(crate::ISOLATION_VARIABLE).is_some_and(|v| v == "bubblewrap")
}

/// Codex's approval policy and sandbox for a permission mode. Inside an agentplane
/// sandbox codex's own is off (`danger-full-access`); what needs a person's approval
/// still does, and a plan, which codex would keep read-only, asks before anything it
/// does not know to be read-only.
fn policy(mode: PermissionMode, sandboxed: bool) -> (&'static str, &'static str) {
    match (mode, sandboxed) {
        (PermissionMode::Default, false) => ("untrusted", "workspace-write"),
        // Read-only, and nothing to approve: under `untrusted` an approved command runs
        // outside the sandbox (seen with 0.169: `touch` wrote its file), which would let
        // a plan change things.
        (PermissionMode::Plan, false) => ("never", "read-only"),
        (PermissionMode::Default | PermissionMode::Plan, true) => ("untrusted", "danger-full-access"),
        (PermissionMode::Bypass, _) => ("never", "danger-full-access"),
    }
}

/// One running app-server.
struct AppServer {
    child: LineChild,
    converter: Converter,
    next_id: u64,
}

pub struct CodexDriver {
    config: DriverConfig,
    /// The folder of the bubblewrap codex ships, put first on its PATH (see
    /// [`vendored_bwrap_dir`]).
    bwrap_dir: Option<PathBuf>,
    bin: PathBuf,
    state: CodexState,
    server: Option<AppServer>,
    /// Lines read while starting, before there was a turn to report them in.
    backlog: Vec<String>,
}

impl CodexDriver {
    /// The `-c` overrides that point codex at the session's provider and keep it quiet.
    fn overrides(&self) -> Vec<String> {
        let env = &self.config.env;
        let mut overrides = vec![
            "check_for_update_on_startup=false".to_string(),
            "analytics.enabled=false".to_string(),
            // Codex offers `request_user_input` only in its plan collaboration mode, which
            // app-server cannot select; a session's person answers questions over the API
            // in every mode, so the tool is on.
            "features.default_mode_request_user_input=true".to_string(),
        ];
        if let Some(base_url) = env.get("OPENAI_BASE_URL").filter(|u| !u.is_empty()) {
            // A custom provider speaking the Responses API at that URL. Against a server on
            // this machine a retry only delays the failure it reports.
            let local = base_url.contains("://127.0.0.1") || base_url.contains("://localhost");
            let retries = if local { ", request_max_retries = 0, stream_max_retries = 0" } else { "" };
            overrides.push("model_provider=\"agentplane\"".into());
            overrides.push(format!(
                "model_providers.agentplane={{ name = \"agentplane\", base_url = {}, env_key = \"OPENAI_API_KEY\", wire_api = \"responses\"{retries} }}",
                toml_string(base_url)
            ));
        }
        if let Some(model) = &self.config.model {
            overrides.push(format!("model={}", toml_string(model)));
        }
        if let Some(variant) = &self.config.variant {
            overrides.push(format!("model_reasoning_effort={}", toml_string(variant)));
        }
        overrides.extend(super::mcp::codex_overrides(&self.config.mcp_servers).0);
        overrides
    }

    fn policy(&self) -> (&'static str, &'static str) {
        policy(self.config.permission_mode, inside_a_sandbox())
    }

    fn working_dir(&self) -> Option<String> {
        self.config.working_dir.clone().or_else(|| std::env::current_dir().ok().map(|d| d.display().to_string()))
    }

    /// Starts an app-server and opens the session's thread: a new one, or the saved one resumed.
    async fn connect(&mut self) -> Result<()> {
        let mut command = tokio::process::Command::new(&self.bin);
        command.env_remove(crate::TOKEN_VARIABLE);
        command.arg("app-server");
        for o in self.overrides() {
            command.arg("-c").arg(o);
        }
        command.envs(&self.config.env);
        // The MCP servers' values, named (not held) by the overrides above.
        command.envs(super::mcp::codex_overrides(&self.config.mcp_servers).1);
        if let Some(dir) = &self.bwrap_dir {
            let path = self.config.env.get("PATH").cloned().or_else(|| std::env::var("PATH").ok()).unwrap_or_default();
            command.env("PATH", format!("{}:{path}", dir.display()));
        }
        let cwd = self.working_dir();
        if let Some(dir) = &cwd {
            command.current_dir(dir);
        }
        let child = LineChild::spawn(command)?;
        let mut suffix = [0u8; 4];
        getrandom::fill(&mut suffix).map_err(|e| Error::StreamError(format!("no random source: {e}")))?;
        let prefix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
        let mut server = AppServer { child, converter: Converter::with_prefix(format!("codex-{prefix}")), next_id: 0 };
        let (approval, sandbox) = self.policy();
        let params = json!({"cwd": cwd, "approvalPolicy": approval, "sandbox": sandbox});
        let thread_id = self.state.thread_id.clone();
        let mcp_names: Vec<String> = self.config.mcp_servers.iter().map(|s| s.name.clone()).collect();
        let backlog = &mut self.backlog;
        let opened = tokio::time::timeout(STARTUP, async {
            let client =
                json!({"name": "agentplane", "title": "agentplane node agent", "version": env!("CARGO_PKG_VERSION")});
            server.request("initialize", json!({ "clientInfo": client }), backlog).await?;
            server.child.send(&json!({"jsonrpc": "2.0", "method": "initialized"})).await?;
            let result = match thread_id {
                Some(thread_id) => {
                    let mut params = params;
                    params["threadId"] = json!(thread_id);
                    server.request("thread/resume", params, backlog).await
                }
                None => server.request("thread/start", params, backlog).await,
            }?;
            server.settle_mcp(&mcp_names, backlog).await?;
            Ok(result)
        })
        .await;
        let result = match opened {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => {
                server.child.stop(STOP_GRACE).await;
                return Err(error);
            }
            Err(_) => {
                server.child.stop(STOP_GRACE).await;
                let tail = server.child.stderr_tail();
                return Err(Error::Timeout(format!(
                    "codex app-server did not open a thread within {} s; stderr: {tail}",
                    STARTUP.as_secs()
                )));
            }
        };
        let Some(thread_id) = result.pointer("/thread/id").and_then(Value::as_str) else {
            server.child.stop(STOP_GRACE).await;
            return Err(Error::StreamError(format!("codex answered without a thread id: {result}")));
        };
        self.state.thread_id = Some(thread_id.to_string());
        self.server = Some(server);
        Ok(())
    }

    fn save(&self, ctx: &TurnContext) {
        ctx.save_state(serde_json::to_value(&self.state).unwrap_or(Value::Null));
    }

    /// Reports a native line as the events it converts to. Codex echoes the user's
    /// message as an item; the session manager has reported that message already.
    async fn report(ctx: &TurnContext, converter: &mut Converter, line: &str) -> Result<(), Interrupted> {
        let users = |event: &EventData| matches!(event, EventData::ItemStarted { item } | EventData::ItemCompleted { item } if item.role == Some(Role::User));
        ctx.line(line).emit_all(converter.convert(line).into_iter().filter(|event| !users(event))).await
    }

    /// Reports what the app-server said while it started, in the order it said it.
    async fn report_backlog(&mut self, ctx: &TurnContext) -> Result<(), Interrupted> {
        if let Some(server) = self.server.as_mut() {
            for line in std::mem::take(&mut self.backlog) {
                Self::report(ctx, &mut server.converter, &line).await?;
            }
        }
        Ok(())
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        if resume && self.state.turn_in_codex == Some(turn.number) {
            // The request is offered again after the restart; its reply has nobody left to
            // go to, but taking it settles the session instead of leaving it awaiting input.
            match self.state.waiting.take() {
                Some(Waiting::Permission(id)) => {
                    ctx.wait_permission(&id).await?;
                }
                Some(Waiting::Question(id)) => {
                    ctx.wait_question(&id).await?;
                }
                None => {}
            }
            self.state.turn_in_codex = None;
            self.save(ctx);
            let message = "the node agent stopped while codex ran this turn, and codex does not continue an interrupted turn: send the message again";
            ctx.emit(EventData::Error { message: message.into(), code: Some("turn_interrupted".into()) }).await?;
            return Ok(TurnOutcome::failed(message));
        }
        self.report_backlog(ctx).await?;
        if let Some(server) = self.server.as_mut() {
            // What codex said since the last turn ended; if it died meanwhile, say so and
            // run this turn on a new app-server that resumes the thread.
            while let Some(line) = server.child.next_line().now_or_never() {
                match line {
                    Some(line) => Self::report(ctx, &mut server.converter, &line).await?,
                    None => {
                        let error = server.child.exited().await;
                        ctx.emit(EventData::Error { message: error.to_string(), code: Some(error.code().to_string()) })
                            .await?;
                        self.server = None;
                        break;
                    }
                }
            }
        }
        if self.server.is_none()
            && let Err(error) = self.connect().await
        {
            return self.failed(ctx, &error).await;
        }
        self.report_backlog(ctx).await?;
        let Some(server) = self.server.as_mut() else {
            return self.failed(ctx, &Error::StreamError("codex is not running".into())).await;
        };
        let thread_id = self.state.thread_id.clone().unwrap_or_default();
        self.state.turn_in_codex = Some(turn.number);
        ctx.save_state(serde_json::to_value(&self.state).unwrap_or(Value::Null));
        let request_id = server.next_id;
        server.next_id += 1;
        let start = json!({"jsonrpc": "2.0", "id": request_id, "method": "turn/start",
            "params": {"threadId": thread_id, "input": [{"type": "text", "text": turn.message}]}});
        if let Err(error) = server.child.send(&start).await {
            return self.failed(ctx, &error).await;
        }
        let mut reconnects = 0;
        loop {
            let Some(server) = self.server.as_mut() else {
                return self.failed(ctx, &Error::StreamError("codex is not running".into())).await;
            };
            let line = tokio::select! {
                line = server.child.next_line() => line,
                why = ctx.interrupted() => return Err(why),
            };
            let Some(line) = line else {
                let error = server.child.exited().await;
                return self.failed(ctx, &error).await;
            };
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let method = value.get("method").and_then(Value::as_str);
            if let (Some(method), Some(id)) = (method, value.get("id")) {
                let (method, id) = (method.to_string(), id.clone());
                self.answer(ctx, &line, &method, id, value.get("params").cloned().unwrap_or(Value::Null)).await?;
                continue;
            }
            Self::report(ctx, &mut server.converter, &line).await?;
            if method == Some("error") && value.pointer("/params/willRetry").and_then(Value::as_bool) == Some(true) {
                reconnects += 1;
                if reconnects >= MAX_RECONNECTS {
                    let detail = value
                        .pointer("/params/error/additionalDetails")
                        .and_then(Value::as_str)
                        .unwrap_or("no details");
                    let error = Error::Timeout(format!(
                        "codex could not reach its model provider after {reconnects} attempts ({detail}); the turn is given up"
                    ));
                    // The app-server goes with it; the next turn resumes the thread in a new one.
                    return self.failed(ctx, &error).await;
                }
            } else if method.is_some_and(|m| m.starts_with("item/")) {
                reconnects = 0;
            }
            if method.is_none()
                && value.get("id").and_then(Value::as_u64) == Some(request_id)
                && value.get("error").is_some()
            {
                self.state.turn_in_codex = None;
                self.save(ctx);
                let message =
                    value.pointer("/error/message").and_then(Value::as_str).unwrap_or("codex refused the turn");
                return Ok(TurnOutcome::failed(message));
            }
            if method == Some("turn/completed")
                && value.pointer("/params/threadId").and_then(Value::as_str) == Some(thread_id.as_str())
            {
                self.state.turn_in_codex = None;
                self.save(ctx);
                return Ok(match value.pointer("/params/turn/status").and_then(Value::as_str) {
                    Some("completed") | None => TurnOutcome::completed(),
                    Some(status) => {
                        let error =
                            value.pointer("/params/turn/error/message").and_then(Value::as_str).unwrap_or(status);
                        TurnOutcome::failed(format!("codex's turn {status}: {error}"))
                    }
                });
            }
        }
    }

    /// Answers one of codex's requests: an approval through a permission request, a
    /// request for user input through a question; anything else is refused, so that
    /// codex does not wait for an answer that never comes.
    async fn answer(
        &mut self,
        ctx: &TurnContext,
        line: &str,
        method: &str,
        id: Value,
        params: Value,
    ) -> Result<(), Interrupted> {
        let result = if let Some(request) = convert::permission_request(method, &id, &params) {
            let reply = if self.config.permission_mode == PermissionMode::Bypass {
                PermissionReply::Once
            } else {
                let pid = request.id.clone();
                self.state.waiting = Some(Waiting::Permission(pid.clone()));
                self.save(ctx);
                ctx.line(line).request_permission(request).await?;
                let reply = ctx.wait_permission(&pid).await?;
                self.state.waiting = None;
                reply
            };
            let decision = match reply {
                PermissionReply::Once => "accept",
                PermissionReply::Always => "acceptForSession",
                PermissionReply::Reject => "decline",
            };
            Some(json!({ "decision": decision }))
        } else if let Some(request) = convert::question_request(method, &id, &params) {
            let qid = request.id.clone();
            self.state.waiting = Some(Waiting::Question(qid.clone()));
            self.save(ctx);
            ctx.line(line).ask_question(request).await?;
            let answer = ctx.wait_question(&qid).await?;
            self.state.waiting = None;
            let answers = match answer {
                QuestionAnswer::Answered(answers) => answers,
                QuestionAnswer::Rejected => Vec::new(),
            };
            let by_id: serde_json::Map<String, Value> = convert::question_ids(&params)
                .into_iter()
                .zip(answers)
                .map(|(q, a)| (q, json!({ "answers": a })))
                .collect();
            Some(json!({ "answers": by_id }))
        } else {
            None
        };
        let Some(server) = self.server.as_mut() else { return Ok(()) };
        let message = match result {
            Some(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            None => {
                Self::report(ctx, &mut server.converter, line).await?;
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("the agentplane node agent does not handle {method}")}})
            }
        };
        // A write that fails means codex died: the next read says how.
        let _ = server.child.send(&message).await;
        Ok(())
    }

    /// Ends a turn on an error of the app-server (it died, or would not start): says so
    /// and forgets the process, so that the next turn starts another and resumes the thread.
    async fn failed(&mut self, ctx: &TurnContext, error: &Error) -> Result<TurnOutcome, Interrupted> {
        if let Some(mut server) = self.server.take() {
            server.child.stop(STOP_GRACE).await;
        }
        self.state.turn_in_codex = None;
        self.state.waiting = None;
        self.save(ctx);
        ctx.fail_turn(error).await
    }
}

impl AppServer {
    /// Reads until every MCP server named has started (or failed to): codex starts them
    /// in the background, and a turn begun before one is ready is offered none of its
    /// tools (seen with 0.169: the first turn went without them).
    async fn settle_mcp(&mut self, names: &[String], backlog: &mut Vec<String>) -> Result<()> {
        let settled_by = |line: &str| -> Option<String> {
            let value: Value = serde_json::from_str(line).ok()?;
            if value.get("method").and_then(Value::as_str) != Some("mcpServer/startupStatus/updated") {
                return None;
            }
            let params = value.get("params")?;
            let status = params.get("status").and_then(Value::as_str)?;
            (status != "starting").then(|| params.get("name").and_then(Value::as_str).map(str::to_string)).flatten()
        };
        let mut waiting: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
        for line in backlog.iter() {
            if let Some(name) = settled_by(line) {
                waiting.remove(name.as_str());
            }
        }
        while !waiting.is_empty() {
            let Some(line) = self.child.next_line().await else { return Err(self.child.exited().await) };
            if let Some(name) = settled_by(&line) {
                waiting.remove(name.as_str());
            }
            backlog.push(line);
        }
        Ok(())
    }

    /// Sends a request and reads until its response; the lines read meanwhile go to `backlog`.
    async fn request(&mut self, method: &str, params: Value, backlog: &mut Vec<String>) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.child.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        loop {
            let Some(line) = self.child.next_line().await else { return Err(self.child.exited().await) };
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let answered = value.get("method").is_none() && value.get("id").and_then(Value::as_u64) == Some(id);
            backlog.push(line);
            if answered {
                if let Some(error) = value.get("error") {
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
                    return Err(Error::StreamError(format!("codex refused {method}: {message}")));
                }
                return Ok(value.get("result").cloned().unwrap_or(Value::Null));
            }
        }
    }
}

impl AgentDriver for CodexDriver {
    fn agent_session_id(&self) -> Option<String> {
        self.state.thread_id.clone()
    }

    fn run_turn<'a>(
        &'a mut self,
        ctx: &'a TurnContext,
        turn: &'a TurnInput,
        resume: bool,
    ) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>> {
        Box::pin(async move {
            let outcome = self.turn(ctx, turn, resume).await?;
            // What codex reported while this turn ran (an app-server that died with the
            // turn took its counts along).
            let usage = self.server.as_mut().and_then(|server| server.converter.take_usage());
            Ok(outcome.with_usage(usage))
        })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            if let Some(mut server) = self.server.take() {
                server.child.stop(STOP_GRACE).await;
            }
        })
    }
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn inside_an_agentplane_sandbox_codex_sandboxes_nothing_but_still_asks() {
        assert_eq!(policy(PermissionMode::Default, false), ("untrusted", "workspace-write"));
        assert_eq!(policy(PermissionMode::Plan, false), ("never", "read-only"));
        assert_eq!(policy(PermissionMode::Default, true), ("untrusted", "danger-full-access"));
        assert_eq!(policy(PermissionMode::Plan, true), ("untrusted", "danger-full-access"));
        assert_eq!(policy(PermissionMode::Bypass, true), ("never", "danger-full-access"));
    }
}
