//! The `gemini` agent: Gemini CLI (`@google/gemini-cli`) driven over the Agent
//! Client Protocol, one live `gemini --acp` process per session.
//!
//! The driver speaks JSON-RPC 2.0 over the child's stdio: `initialize`, then
//! `session/new` (or `session/load` to resume the CLI's own session after a restart),
//! one `session/prompt` per turn. The CLI's `session/request_permission` requests
//! become the session's permission requests, answered with the option the client
//! chose. Permission modes map onto Gemini CLI's approval modes (`--approval-mode`):
//! `default` asks, `bypass` is `yolo`, `plan` is its read-only `plan` mode.
//!
//! Where the CLI finds its model: `GOOGLE_GEMINI_BASE_URL` and `GEMINI_API_KEY` from
//! the session's env, and `~/.gemini/settings.json` in the session's HOME, which the
//! driver writes when there is none (without it the CLI exits with code 41).

mod convert;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::process::Command;

pub use convert::Converter;

use super::ConversationFiles;
use super::catalog::{Catalog, CredentialPlaces, CredentialSources, dotenv_sets, json_strings};
use super::child::LineChild;
use super::convert::Converter as _;
use super::{
    Agent, AgentDriver, AgentId, DriverConfig, Interrupted, Launch, Package, TurnContext, TurnInput, TurnOutcome,
};
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};
use crate::universal::{EventData, PermissionReply};

/// The model when the session names none: the CLI's default router (`auto`) asks the
/// model to route in JSON and retries for 100 s when it does not.
const DEFAULT_MODEL: &str = "gemini-2.5-pro";
/// How long the CLI may take to answer `initialize`, `session/new` or `session/load`
/// (a cold start on a loaded machine takes 10 s).
const HANDSHAKE: Duration = Duration::from_secs(90);
/// How long a turn may go without a line from the CLI (outside waits for a person)
/// before it counts as hung.
const SILENCE: Duration = Duration::from_secs(600);
/// After `session/load`, the CLI replays the conversation as `session/update`s and
/// then announces its slash commands; the replay is skipped up to that, or this long.
const REPLAY: Duration = Duration::from_secs(10);
/// What the CLI needs to use an API key (and a base URL) rather than a Google login.
/// Its session cleanup is off: it deletes a conversation that was resumed once (the
/// resume leaves an empty file with the same short id, which it counts as corrupt).
const SETTINGS: &str =
    r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"general":{"sessionRetention":{"enabled":false}}}"#;

/// Gemini CLI, as the registry lists it.
pub struct Gemini;

impl Agent for Gemini {
    fn id(&self) -> AgentId {
        AgentId::Gemini
    }

    fn name(&self) -> &'static str {
        "gemini"
    }

    fn package(&self) -> Option<Package> {
        Some(Package { name: "@google/gemini-cli", bin: "gemini", default_version: "0.61.0" })
    }

    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities { permissions: true, questions: false, resume: true, streaming_deltas: true, mcp: true }
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
            models: &[
                ("gemini-2.5-pro", "The most capable Gemini 2.5 model"),
                ("gemini-2.5-flash", "Faster and cheaper"),
                ("gemini-2.5-flash-lite", "The fastest and cheapest"),
            ],
            default_model: Some(DEFAULT_MODEL),
            models_note: "or another Gemini model name, passed as -m",
        }
    }

    /// `~/.gemini/tmp` (each project's chats, which `session/load` reads) and the
    /// table of projects that names their folders. Chats are not named by the whole
    /// session id, so every project's are kept.
    fn conversation_files(&self, places: &CredentialPlaces<'_>, _id: &str) -> Vec<ConversationFiles> {
        let Some(home) = places.home() else { return Vec::new() };
        vec![
            ConversationFiles::all(home.join(".gemini/tmp")),
            ConversationFiles::all(home.join(".gemini/projects.json")),
        ]
    }

    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        let files = places
            .home()
            .map(|h| {
                vec![
                    (
                        h.join(".gemini/oauth_creds.json"),
                        (|t| json_strings(t, &[&["access_token"], &["refresh_token"]])) as fn(&str) -> bool,
                    ),
                    (h.join(".gemini/.env"), |t| dotenv_sets(t, &["GEMINI_API_KEY", "GOOGLE_API_KEY"])),
                ]
            })
            .unwrap_or_default();
        Some(CredentialSources { env: &["GEMINI_API_KEY", "GOOGLE_API_KEY"], files })
    }
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode {
        return Err(Error::ModeNotSupported(format!(
            "gemini has no agent modes (asked for {mode:?}); its approval modes follow permissionMode (default, plan, bypass)"
        )));
    }
    if let Some(variant) = &request.variant {
        return Err(Error::ModeNotSupported(format!(
            "gemini has no model variants (asked for {variant:?}): name the model instead"
        )));
    }
    Ok(())
}

async fn start(launch: Launch<'_>) -> Result<Box<dyn AgentDriver>> {
    let session_id = launch.saved.as_ref().and_then(|s| s.get("sessionId")).and_then(Value::as_str).map(str::to_string);
    let process = CliLaunch::new(launch.config, launch.bin()?).await?;
    let mut driver = GeminiDriver { launch: process, process: None, session_id, converter: Converter::default() };
    driver.ensure_running().await?;
    Ok(Box::new(driver))
}

/// Everything needed to start the CLI again (after it died, or to resume).
struct CliLaunch {
    bin: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    home: PathBuf,
    mcp_servers: Vec<crate::model::McpServer>,
}

impl CliLaunch {
    async fn new(config: &DriverConfig, bin: PathBuf) -> Result<CliLaunch> {
        let home = match config.env.get("HOME").filter(|h| !h.is_empty()) {
            Some(home) => PathBuf::from(home),
            None => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| config.session_dir.join("home")),
        };
        write_settings(&home).await?;
        let cwd = match &config.working_dir {
            Some(dir) => PathBuf::from(dir),
            None => std::env::current_dir()
                .map_err(|e| Error::InvalidRequest(format!("the node agent has no working directory: {e}")))?,
        };
        let approval = match config.permission_mode {
            PermissionMode::Default => "default",
            PermissionMode::Plan => "plan",
            PermissionMode::Bypass => "yolo",
        };
        let model = config.model.clone().unwrap_or_else(|| DEFAULT_MODEL.to_string());
        // `--skip-trust`: an untrusted folder refuses `yolo` and skips the project's settings.
        let args =
            ["--acp", "--skip-trust", "--approval-mode", approval, "--model", &model].map(str::to_string).to_vec();
        let mut env: Vec<(String, String)> = config.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.push(("HOME".into(), home.display().to_string()));
        // One process to stop and to wait for, rather than a relaunched child with a larger heap.
        env.push(("GEMINI_CLI_NO_RELAUNCH".into(), "true".into()));
        Ok(CliLaunch { bin, args, env, cwd, home, mcp_servers: config.mcp_servers.clone() })
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command.env_remove(crate::TOKEN_VARIABLE);
        command.args(&self.args).current_dir(&self.cwd);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }
}

/// Writes `~/.gemini/settings.json` in `home` unless the user has one.
async fn write_settings(home: &Path) -> Result<()> {
    let dir = home.join(".gemini");
    let path = dir.join("settings.json");
    if tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Ok(());
    }
    let io = |context: String| move |source| Error::Io { context, source };
    tokio::fs::create_dir_all(&dir).await.map_err(io(format!("creating {}", dir.display())))?;
    tokio::fs::write(&path, SETTINGS).await.map_err(io(format!("writing {}", path.display())))
}

/// One running `gemini --acp`.
struct Acp {
    child: LineChild,
    next_id: u64,
}

impl Acp {
    async fn send_request(&mut self, method: &str, params: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.child.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        Ok(id)
    }

    /// The next line within `patience`: `timeout` when the CLI says nothing,
    /// `agent_process_exited` when it is gone.
    async fn next_line(&mut self, patience: Duration, what: &str) -> Result<String> {
        match tokio::time::timeout(patience, self.child.next_line()).await {
            Ok(Some(line)) => Ok(line),
            Ok(None) => Err(self.child.exited().await),
            Err(_) => Err(Error::Timeout(format!("gemini said nothing for {} s while {what}", patience.as_secs()))),
        }
    }

    /// Sends a request and waits for its answer; lines before it are only logged (a
    /// handshake has no turn to report them in).
    async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.call_within(method, params, HANDSHAKE).await
    }

    async fn call_within(&mut self, method: &str, params: Value, patience: Duration) -> Result<Value> {
        let id = self.send_request(method, params).await?;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.next_line(left, &format!("answering {method}")).await?;
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                tracing::debug!(agent = "gemini", "not JSON before {method} answered: {line}");
                continue;
            };
            if message.get("id").and_then(Value::as_u64) == Some(id) && message.get("method").is_none() {
                if let Some(error) = message.get("error") {
                    return Err(Error::StreamError(format!("gemini refused {method}: {}", rpc_error_text(error))));
                }
                return Ok(message.get("result").cloned().unwrap_or(Value::Null));
            }
            tracing::debug!(agent = "gemini", "before {method} answered: {line}");
        }
    }

    /// Skips the history a `session/load` replays, up to the slash commands the CLI
    /// announces after it (or `REPLAY`, if they never come).
    async fn skip_replay(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + REPLAY;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = match self.next_line(left, "replaying the conversation").await {
                Ok(line) => line,
                Err(Error::Timeout(_)) => return Ok(()),
                Err(error) => return Err(error),
            };
            tracing::debug!(agent = "gemini", "replayed: {line}");
            if line.contains("\"available_commands_update\"") {
                return Ok(());
            }
        }
    }
}

/// A `{code, message, data: {details}}` error as one line.
fn rpc_error_text(error: &Value) -> String {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("an error");
    match error.pointer("/data/details").and_then(Value::as_str) {
        Some(details) => format!("{message}: {details}"),
        None => message.to_string(),
    }
}

pub struct GeminiDriver {
    launch: CliLaunch,
    /// `None` once the CLI died: the next turn starts it again and loads the session.
    process: Option<Acp>,
    /// The CLI's session id, once it has one.
    session_id: Option<String>,
    converter: Converter,
}

impl GeminiDriver {
    /// Starts the CLI unless it runs, and opens the session: a new one, or the
    /// CLI's own by its id.
    async fn ensure_running(&mut self) -> Result<&mut Acp> {
        if self.process.is_none() {
            let child = LineChild::spawn(self.launch.command())?;
            let mut acp = Acp { child, next_id: 1 };
            let opened = self.open(&mut acp).await;
            if let Err(error) = opened {
                acp.child.stop(Duration::from_secs(2)).await;
                return Err(error);
            }
            self.process = Some(acp);
        }
        Ok(self.process.as_mut().expect("just started"))
    }

    async fn open(&mut self, acp: &mut Acp) -> Result<()> {
        let capabilities = json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false});
        acp.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await?;
        let cwd = self.launch.cwd.display().to_string();
        // The protocol's own way to give MCP servers, per session: nothing is written
        // to the user's settings, and values stay off the command line.
        let mcp_servers = super::mcp::acp_servers(&self.launch.mcp_servers);
        match &self.session_id {
            Some(id) => {
                avoid_same_minute_clash(&self.launch.home, id).await;
                acp.call("session/load", json!({"sessionId": id, "cwd": cwd, "mcpServers": mcp_servers})).await?;
                acp.skip_replay().await?;
            }
            None => {
                let result = acp.call("session/new", json!({"cwd": cwd, "mcpServers": mcp_servers})).await?;
                let id = result.get("sessionId").and_then(Value::as_str);
                let id = id.ok_or_else(|| {
                    Error::StreamError(format!("gemini's session/new answered no sessionId: {result}"))
                })?;
                self.session_id = Some(id.to_string());
            }
        }
        Ok(())
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        if resume {
            // The CLI that ran this turn went with the node agent; what it did of the
            // turn is in its session, but not how far it got.
            let message =
                "the node agent restarted during this turn; gemini does not continue it: send the message again"
                    .to_string();
            ctx.emit(EventData::Error { message: message.clone(), code: Some("turn_interrupted".into()) }).await?;
            return Ok(TurnOutcome::failed(message));
        }
        if let Err(error) = self.ensure_running().await {
            return fail(ctx, error).await;
        }
        if let Some(id) = &self.session_id {
            ctx.save_state(json!({"sessionId": id}));
        }
        self.converter.begin_turn(turn.number);
        match self.prompt(ctx, &turn.message).await {
            Ok(outcome) => Ok(outcome),
            Err(TurnError::Interrupted(interrupted)) => Err(interrupted),
            Err(TurnError::Agent(error)) => {
                if let Some(mut acp) = self.process.take() {
                    acp.child.stop(Duration::from_secs(2)).await;
                }
                fail(ctx, error).await
            }
        }
    }

    /// One `session/prompt`, reporting what the CLI does until it answers.
    async fn prompt(&mut self, ctx: &TurnContext, message: &str) -> Result<TurnOutcome, TurnError> {
        let session_id = self.session_id.clone().unwrap_or_default();
        let acp = self.process.as_mut().ok_or_else(|| Error::StreamError("gemini is not running".into()))?;
        let prompt_id = acp
            .send_request(
                "session/prompt",
                json!({"sessionId": session_id, "prompt": [{"type": "text", "text": message}]}),
            )
            .await?;
        loop {
            let line = acp.next_line(SILENCE, "running a turn").await?;
            let Ok(native) = serde_json::from_str::<Value>(&line) else {
                ctx.report(&mut self.converter, &line).await?;
                continue;
            };
            let method = native.get("method").and_then(Value::as_str);
            let request_id = native.get("id").cloned().filter(|_| method.is_some());
            match (method, request_id) {
                (Some("session/request_permission"), Some(request_id)) => {
                    let params = native.get("params").cloned().unwrap_or(Value::Null);
                    let events = self.converter.convert(&line);
                    let mut asked = None;
                    for event in events {
                        match event {
                            EventData::PermissionRequested(request) => {
                                asked = Some(request.id.clone());
                                ctx.line(&line).request_permission(request).await?;
                            }
                            other => ctx.line(&line).emit(other).await?,
                        }
                    }
                    let Some(permission_id) = asked else {
                        // Unreadable: refuse, rather than leave the CLI waiting.
                        acp.child.send(&json!({"jsonrpc": "2.0", "id": request_id, "result": {"outcome": {"outcome": "cancelled"}}})).await?;
                        continue;
                    };
                    let reply = ctx.wait_permission(&permission_id).await?;
                    let outcome = match convert::option_for(&params, reply) {
                        Some(option) => json!({"outcome": "selected", "optionId": option}),
                        None => json!({"outcome": "cancelled"}),
                    };
                    acp.child
                        .send(&json!({"jsonrpc": "2.0", "id": request_id, "result": {"outcome": outcome}}))
                        .await?;
                    if reply == PermissionReply::Reject {
                        for event in self.converter.denied(&permission_id) {
                            ctx.emit(event).await?;
                        }
                    }
                }
                (Some(other), Some(request_id)) => {
                    // A client method this driver did not offer in `initialize`.
                    ctx.report(&mut self.converter, &line).await?;
                    let error = json!({"code": -32601, "message": format!("{other} is not offered by this client")});
                    acp.child.send(&json!({"jsonrpc": "2.0", "id": request_id, "error": error})).await?;
                }
                (Some("session/update"), None)
                    if native.pointer("/params/update/sessionUpdate").and_then(Value::as_str)
                        == Some("user_message_chunk") =>
                {
                    // History the CLI replays; the user's message is the session's own event.
                    tracing::debug!(agent = "gemini", "skipped: {line}");
                }
                _ => {
                    ctx.report(&mut self.converter, &line).await?;
                    if native.get("id").and_then(Value::as_u64) == Some(prompt_id) && method.is_none() {
                        return Ok(outcome_of(&native).with_usage(self.converter.take_usage()));
                    }
                }
            }
        }
    }
}

/// How a `session/prompt` answer ends the turn.
fn outcome_of(answer: &Value) -> TurnOutcome {
    if let Some(error) = answer.get("error") {
        return TurnOutcome::failed(format!("gemini: {}", rpc_error_text(error)));
    }
    match answer.pointer("/result/stopReason").and_then(Value::as_str) {
        Some("cancelled") => TurnOutcome::failed("gemini cancelled the turn"),
        Some("refusal") => TurnOutcome::failed("gemini refused to go on"),
        _ => TurnOutcome::completed(),
    }
}

enum TurnError {
    Interrupted(Interrupted),
    Agent(Error),
}

impl From<Interrupted> for TurnError {
    fn from(interrupted: Interrupted) -> Self {
        TurnError::Interrupted(interrupted)
    }
}

impl From<Error> for TurnError {
    fn from(error: Error) -> Self {
        TurnError::Agent(error)
    }
}

/// Reports what went wrong with the CLI as an `error` event, and fails the turn.
async fn fail(ctx: &TurnContext, error: Error) -> Result<TurnOutcome, Interrupted> {
    ctx.fail_turn(&error).await
}

/// Gemini CLI names a conversation's file by the minute it started
/// (`session-2026-01-02T03-04-<first 8 of the id>.jsonl`), and `session/load` first
/// starts a fresh recording under the same id: in the same minute that is the same
/// file, whose history the fresh start then blanks, and the load fails. Renaming
/// such a file (the CLI finds sessions by the id inside, and names ending in the short
/// id) keeps it apart from the fresh recording.
async fn avoid_same_minute_clash(home: &Path, session_id: &str) {
    let Some(short) = session_id.get(..8) else { return };
    let minute = minute_stamp(std::time::SystemTime::now());
    let clashing = format!("session-{minute}-{short}.jsonl");
    let Ok(mut projects) = tokio::fs::read_dir(home.join(".gemini").join("tmp")).await else { return };
    while let Ok(Some(project)) = projects.next_entry().await {
        let chats = project.path().join("chats");
        let from = chats.join(&clashing);
        if !tokio::fs::try_exists(&from).await.unwrap_or(false) {
            continue;
        }
        for n in 1..100 {
            let to = chats.join(format!("session-{minute}-r{n}-{short}.jsonl"));
            if !tokio::fs::try_exists(&to).await.unwrap_or(true) {
                match tokio::fs::rename(&from, &to).await {
                    Ok(()) => tracing::debug!(agent = "gemini", "moved {} aside to {}", from.display(), to.display()),
                    Err(error) => tracing::warn!(agent = "gemini", %error, "could not move {} aside", from.display()),
                }
                break;
            }
        }
    }
}

/// `YYYY-MM-DDTHH-MM` in UTC, as Gemini CLI stamps its session files.
fn minute_stamp(now: std::time::SystemTime) -> String {
    let now = time::OffsetDateTime::from(now);
    format!("{:04}-{:02}-{:02}T{:02}-{:02}", now.year(), u8::from(now.month()), now.day(), now.hour(), now.minute())
}

impl AgentDriver for GeminiDriver {
    fn agent_session_id(&self) -> Option<String> {
        self.session_id.clone()
    }

    fn run_turn<'a>(
        &'a mut self,
        ctx: &'a TurnContext,
        turn: &'a TurnInput,
        resume: bool,
    ) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>> {
        Box::pin(self.turn(ctx, turn, resume))
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            if let Some(mut acp) = self.process.take() {
                acp.child.stop(Duration::from_secs(3)).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Acp {
        let mut command = Command::new("sh");
        command.env_remove(crate::TOKEN_VARIABLE);
        command.args(["-c", script]);
        Acp { child: LineChild::spawn(command).unwrap(), next_id: 1 }
    }

    #[tokio::test]
    async fn a_cli_that_says_nothing_is_a_timeout_and_one_that_dies_says_how() {
        let mut silent = shell("cat >/dev/null");
        let error = silent.call_within("initialize", json!({}), Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(&error, Error::Timeout(m) if m.contains("initialize")), "{error:?}");
        silent.child.stop(Duration::from_secs(1)).await;

        let mut dying = shell("read line; echo 'not json'; echo 'no API key' >&2; exit 41");
        match dying.call_within("initialize", json!({}), Duration::from_secs(20)).await.unwrap_err() {
            Error::AgentProcessExited { code, stderr_tail } => {
                assert_eq!((code, stderr_tail.as_str()), (Some(41), "no API key"))
            }
            other => panic!("{other:?}"),
        }

        let mut refusing = shell(
            r#"read line; echo '{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"details":"auth"}}}'; cat >/dev/null"#,
        );
        let error = refusing.call_within("session/new", json!({}), Duration::from_secs(20)).await.unwrap_err();
        assert!(
            matches!(&error, Error::StreamError(m) if m == "gemini refused session/new: Internal error: auth"),
            "{error:?}"
        );
        refusing.child.stop(Duration::from_secs(1)).await;
    }

    #[test]
    fn minute_stamps_read_like_the_clis() {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_795_414_544);
        assert_eq!(minute_stamp(t), "2026-11-23T06-15");
    }

    #[test]
    fn agent_modes_and_variants_are_refused() {
        let request =
            CreateSessionRequest { agent: "gemini".into(), agent_mode: Some("build".into()), ..Default::default() };
        assert!(matches!(validate(&request), Err(Error::ModeNotSupported(_))));
        let request =
            CreateSessionRequest { agent: "gemini".into(), variant: Some("high".into()), ..Default::default() };
        assert!(matches!(validate(&request), Err(Error::ModeNotSupported(_))));
        assert!(validate(&CreateSessionRequest { agent: "gemini".into(), ..Default::default() }).is_ok());
    }

    #[test]
    fn prompt_answers_end_turns() {
        assert_eq!(outcome_of(&json!({"id": 3, "result": {"stopReason": "end_turn"}})), TurnOutcome::completed());
        assert!(outcome_of(&json!({"id": 3, "result": {"stopReason": "cancelled"}})).failed);
        let failed = outcome_of(
            &json!({"id": 3, "error": {"code": -32603, "message": "Internal error", "data": {"details": "quota"}}}),
        );
        assert_eq!(failed.error.as_deref(), Some("gemini: Internal error: quota"));
    }
}
