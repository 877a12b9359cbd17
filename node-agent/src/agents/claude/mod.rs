//! The `claude` agent (Claude Code): one live `claude -p` process per session,
//! speaking stream-json both ways, with permission requests over stdio
//! (`--permission-prompt-tool stdio`: Claude sends `control_request can_use_tool`, the
//! driver answers a `control_response`).
//!
//! The driver names the conversation itself (`--session-id`, a fresh UUID), so the
//! session knows its agent session id before the first turn; a process that died, or
//! a node agent that restarted, continues it with `--resume <id>`. A turn that the
//! node agent's restart cut short is sent again to the resumed conversation: Claude
//! keeps what it had done in its own session store, and the model sees the message
//! twice rather than never. A permission request pending at the restart is still
//! answered by its client: the reply is kept and given to Claude when it asks for
//! the same tool call again.

pub mod convert;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::process::Command;

pub use self::convert::Converter;
use self::convert::{APPROVE_PLAN, ASK_USER_QUESTION, EXIT_PLAN_MODE};
use super::ConversationFiles;
use super::catalog::{Catalog, CredentialFile, CredentialPlaces, CredentialSources, json_strings};
use super::child::LineChild;
use super::convert::Converter as _;
use super::{
    Agent, AgentDriver, AgentId, DriverConfig, Interrupted, Launch, Package, TurnContext, TurnInput, TurnOutcome,
};
use crate::driver::QuestionAnswer;
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};
use crate::universal::{EventData, PermissionReply};

/// How long a stopping `claude` gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Claude Code, as the registry lists it.
pub struct Claude;

impl Agent for Claude {
    fn id(&self) -> AgentId {
        AgentId::Claude
    }

    fn name(&self) -> &'static str {
        "claude"
    }

    fn package(&self) -> Option<Package> {
        Some(Package { name: "@anthropic-ai/claude-code", bin: "claude", default_version: "2.1.330" })
    }

    fn capabilities(&self) -> AgentCapabilities {
        // Questions: plan approval (ExitPlanMode) and AskUserQuestion.
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
            models: &[
                ("sonnet", "Claude Code's alias for the latest Sonnet"),
                ("opus", "Claude Code's alias for the latest Opus"),
                ("haiku", "Claude Code's alias for the latest Haiku"),
                ("opusplan", "Opus while planning, Sonnet otherwise"),
            ],
            default_model: None,
            models_note: "or a full model name (claude-sonnet-4-5, ...), passed as --model",
        }
    }

    /// `~/.claude/projects/<working dir>/<id>.jsonl` (and the folder of the same name
    /// its subagents and large tool results go into); `--resume <id>` finds it there.
    fn conversation_files(&self, places: &CredentialPlaces<'_>, id: &str) -> Vec<ConversationFiles> {
        places
            .dir("CLAUDE_CONFIG_DIR", ".claude")
            .map(|d| ConversationFiles::naming(d.join("projects"), id))
            .into_iter()
            .collect()
    }

    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        let mut files: Vec<CredentialFile> = Vec::new();
        if let Some(config) = places.dir("CLAUDE_CONFIG_DIR", ".claude") {
            files.push((config.join(".credentials.json"), |t| {
                json_strings(t, &[&["claudeAiOauth", "accessToken"], &["claudeAiOauth", "refreshToken"]])
            }));
        }
        if let Some(home) = places.home() {
            files.push((home.join(".claude.json"), |t| json_strings(t, &[&["primaryApiKey"]])));
        }
        Some(CredentialSources {
            env: &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"],
            files,
        })
    }
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode {
        return Err(Error::ModeNotSupported(format!(
            "claude has no agent modes (asked for {mode:?}); its plan mode is permissionMode \"plan\""
        )));
    }
    if let Some(variant) = &request.variant {
        return Err(Error::ModeNotSupported(format!("claude has no model variants (asked for {variant:?})")));
    }
    Ok(())
}

async fn start(launch: Launch<'_>) -> Result<Box<dyn AgentDriver>> {
    let bin = launch.bin()?;
    let state = match launch.saved_state("claude")? {
        Some(state) => state,
        None => ClaudeState { agent_session_id: new_uuid(), ..Default::default() },
    };
    let mut converter = Converter::default();
    converter.set_cost_so_far(state.cost_so_far);
    let mut driver = ClaudeDriver { config: launch.config.clone(), bin, state, child: None, converter };
    driver.spawn().await?;
    Ok(Box::new(driver))
}

/// What the driver keeps across restarts (the session saves it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeState {
    agent_session_id: String,
    /// Claude has stored the conversation (a message was sent): continue it with `--resume`.
    conversation_started: bool,
    /// Tools allowed `always` in this session.
    always_allowed: BTreeSet<String>,
    /// A permission request open when the state was saved.
    pending: Option<PendingPermission>,
    /// Claude's `total_cost_usd` at its last `result`: a resumed `claude` goes on
    /// from it, and a turn's cost is what it adds.
    #[serde(default)]
    cost_so_far: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingPermission {
    id: String,
    tool: String,
    input: Value,
}

pub struct ClaudeDriver {
    config: DriverConfig,
    bin: PathBuf,
    state: ClaudeState,
    child: Option<LineChild>,
    converter: Converter,
}

/// A random version-4 UUID (Claude wants its session ids so).
fn new_uuid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn permission_mode_flag(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Default => "default",
        PermissionMode::Plan => "plan",
        PermissionMode::Bypass => "bypassPermissions",
    }
}

impl ClaudeDriver {
    /// The command line of a `claude` for this session.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command.env_remove(crate::TOKEN_VARIABLE);
        command.args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
        ]);
        command.args([
            "--permission-prompt-tool",
            "stdio",
            "--permission-mode",
            permission_mode_flag(self.config.permission_mode),
        ]);
        if self.state.conversation_started {
            command.args(["--resume", &self.state.agent_session_id]);
        } else {
            command.args(["--session-id", &self.state.agent_session_id]);
        }
        if let Some(model) = &self.config.model {
            command.args(["--model", model]);
        }
        if !self.config.mcp_servers.is_empty() {
            // A file (written by `spawn`), not JSON on the command line, which any user
            // can read; strict, so that only the session's servers are there.
            command.arg("--mcp-config").arg(self.mcp_config_path()).arg("--strict-mcp-config");
        }
        command.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1").env("DISABLE_AUTOUPDATER", "1");
        // As root Claude refuses bypassPermissions unless told it runs in a sandbox,
        // which a node agent's session does (the variable means nothing else to it).
        if self.config.permission_mode == PermissionMode::Bypass {
            command.env("IS_SANDBOX", "1");
        }
        command.envs(&self.config.env);
        if let Some(dir) = &self.config.working_dir {
            command.current_dir(dir);
        }
        command
    }

    /// The session's MCP servers as `--mcp-config` reads them.
    fn mcp_config_path(&self) -> PathBuf {
        self.config.session_dir.join("claude-mcp.json")
    }

    /// Writes the `--mcp-config` file, readable by the node agent's user only (it may
    /// hold the servers' secrets), in the session's own directory.
    async fn write_mcp_config(&self) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.mcp_config_path();
        let bytes = serde_json::to_vec(&super::mcp::claude_config(&self.config.mcp_servers))
            .map_err(|e| Error::InvalidRequest(format!("the MCP configuration: {e}")))?;
        tokio::task::spawn_blocking(move || {
            let mut file =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
            file.write_all(&bytes)
        })
        .await
        .map_err(|e| Error::io("writing claude's MCP configuration", std::io::Error::other(e)))?
        .map_err(|e| Error::io("writing claude's MCP configuration", e))
    }

    /// Starts `claude` and sends `initialize` (its answer is read with the first turn).
    async fn spawn(&mut self) -> Result<()> {
        if !self.config.mcp_servers.is_empty() {
            self.write_mcp_config().await?;
        }
        let mut child = LineChild::spawn(self.command())?;
        tracing::info!(session = %self.config.session_id, pid = ?child.pid(), resume = self.state.conversation_started, "claude started");
        child.send(&json!({"type": "control_request", "request_id": "initialize", "request": {"subtype": "initialize", "hooks": null}})).await?;
        self.child = Some(child);
        if !self.state.conversation_started {
            self.converter.set_cost_so_far(0.0);
        }
        Ok(())
    }

    fn save(&mut self, ctx: &TurnContext) {
        self.state.cost_so_far = self.converter.cost_so_far();
        ctx.save_state(serde_json::to_value(&self.state).expect("claude's state serializes"));
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        // A reply to a request pending at the restart, for Claude's next ask of the same call.
        let mut carried = None;
        if resume && let Some(pending) = self.state.pending.clone() {
            let reply = ctx.wait_permission(&pending.id).await?;
            carried = Some((pending, reply));
        }
        self.state.pending = None;
        match self.send_message(&turn.message).await {
            Ok(()) => {}
            Err(error) => return self.failed(ctx, error).await,
        }
        self.state.conversation_started = true;
        self.save(ctx);
        let mut restarted_fresh = false;
        loop {
            let line = {
                let Some(child) = self.child.as_mut() else {
                    return self.failed(ctx, Error::StreamError("claude is not running".into())).await;
                };
                tokio::select! {
                    line = child.next_line() => line,
                    why = ctx.interrupted() => return Err(why),
                }
            };
            let Some(line) = line else {
                let error = match self.child.take() {
                    Some(mut child) => child.exited().await,
                    None => Error::StreamError("claude is not running".into()),
                };
                return self.failed(ctx, error).await;
            };
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind == "control_request" {
                self.control_request(ctx, &line, &value, &mut carried).await?;
                continue;
            }
            ctx.report(&mut self.converter, &line).await?;
            if kind == "result" {
                let is_error = value.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                if !is_error {
                    self.save(ctx);
                    return Ok(TurnOutcome::completed());
                }
                let message = convert::result_error(&value);
                if message.contains("No conversation found") && !restarted_fresh {
                    // Claude died before it stored the conversation: nothing is there to
                    // resume, so the conversation starts again under the same id.
                    restarted_fresh = true;
                    tracing::warn!(session = %self.config.session_id, "claude has no stored conversation to resume; starting it afresh");
                    if let Some(mut child) = self.child.take() {
                        child.stop(STOP_GRACE).await;
                    }
                    self.state.conversation_started = false;
                    if let Err(error) = self.send_message(&turn.message).await {
                        return self.failed(ctx, error).await;
                    }
                    self.state.conversation_started = true;
                    self.save(ctx);
                    continue;
                }
                self.save(ctx);
                return Ok(TurnOutcome::failed(format!("claude ended the turn with an error: {message}")));
            }
        }
    }

    /// Writes the user's message, starting `claude` again (resuming) if it is gone.
    async fn send_message(&mut self, message: &str) -> Result<()> {
        if self.child.is_none() {
            self.spawn().await?;
        }
        let line = json!({
            "type": "user",
            "message": {"role": "user", "content": message},
            "parent_tool_use_id": null,
            "session_id": self.state.agent_session_id,
        });
        let child = self.child.as_mut().expect("spawned above");
        if child.send(&line).await.is_ok() {
            return Ok(());
        }
        // It died while idle (nothing of a turn is lost): start it again, resuming.
        if let Some(mut dead) = self.child.take() {
            let error = dead.exited().await;
            tracing::warn!(session = %self.config.session_id, %error, "claude was gone between turns; starting it again");
        }
        self.spawn().await?;
        let child = self.child.as_mut().expect("spawned above");
        match child.send(&line).await {
            Ok(()) => Ok(()),
            Err(error) => {
                self.child = None;
                Err(error)
            }
        }
    }

    /// The turn failed because `claude` went away: say so; the next turn resumes it.
    async fn failed(&mut self, ctx: &TurnContext, error: Error) -> Result<TurnOutcome, Interrupted> {
        if let Some(mut child) = self.child.take() {
            child.stop(STOP_GRACE).await;
        }
        self.save(ctx);
        ctx.fail_turn(&error).await
    }

    /// Answers one of Claude's `control_request`s: a tool permission, a plan approval or
    /// questions go to the session's clients; anything else is declined.
    async fn control_request(
        &mut self,
        ctx: &TurnContext,
        line: &str,
        value: &Value,
        carried: &mut Option<(PendingPermission, PermissionReply)>,
    ) -> Result<(), Interrupted> {
        let request_id = value.get("request_id").and_then(Value::as_str).unwrap_or_default().to_string();
        let request = value.get("request").cloned().unwrap_or(Value::Null);
        if request.get("subtype").and_then(Value::as_str) != Some("can_use_tool") {
            ctx.report(&mut self.converter, line).await?;
            let subtype = request.get("subtype").and_then(Value::as_str).unwrap_or("?");
            let error = format!("the node agent does not answer {subtype} requests");
            return self.respond(json!({"subtype": "error", "request_id": request_id, "error": error})).await;
        }
        let tool = request.get("tool_name").and_then(Value::as_str).unwrap_or_default().to_string();
        let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
        let tool_use_id = request.get("tool_use_id").and_then(Value::as_str).map(str::to_string);
        let mut events = self.converter.convert(line);
        let decision = match events.pop() {
            Some(EventData::QuestionRequested(question)) => {
                let qid = question.id.clone();
                ctx.line(line).ask_question(question).await?;
                let answer = ctx.wait_question(&qid).await?;
                answer_question(&tool, &input, answer)
            }
            Some(EventData::PermissionRequested(permission)) => {
                let preset = match carried.take() {
                    Some((pending, reply)) if pending.tool == tool && pending.input == input => Some(reply),
                    other => {
                        *carried = other;
                        self.state.always_allowed.contains(&tool).then_some(PermissionReply::Always)
                    }
                };
                let reply = match preset {
                    Some(reply) => {
                        let text = format!("{tool} allowed without asking: the user chose {reply:?} before");
                        ctx.line(line).emit(super::convert::status(format!("{request_id}-auto"), text)).await?;
                        reply
                    }
                    None => {
                        self.state.pending = Some(PendingPermission {
                            id: permission.id.clone(),
                            tool: tool.clone(),
                            input: input.clone(),
                        });
                        self.save(ctx);
                        let pid = permission.id.clone();
                        ctx.line(line).request_permission(permission).await?;
                        let reply = ctx.wait_permission(&pid).await?;
                        self.state.pending = None;
                        reply
                    }
                };
                if reply == PermissionReply::Always {
                    self.state.always_allowed.insert(tool.clone());
                }
                self.save(ctx);
                match reply {
                    PermissionReply::Once | PermissionReply::Always => {
                        json!({"behavior": "allow", "updatedInput": input})
                    }
                    PermissionReply::Reject => {
                        if let Some(id) = &tool_use_id {
                            self.converter.denied(id);
                        }
                        json!({"behavior": "deny", "message": format!("The user did not allow this {tool} call.")})
                    }
                }
            }
            other => {
                // The converter always makes a request of can_use_tool; should it not, deny.
                tracing::warn!(?other, "claude's permission request converted to something else");
                json!({"behavior": "deny", "message": "The node agent could not ask the user."})
            }
        };
        self.respond(json!({"subtype": "success", "request_id": request_id, "response": decision})).await
    }

    async fn respond(&mut self, response: Value) -> Result<(), Interrupted> {
        let line = json!({"type": "control_response", "response": response});
        let sent = match self.child.as_mut() {
            Some(child) => child.send(&line).await,
            None => Err(Error::StreamError("claude is not running".into())),
        };
        if let Err(error) = sent {
            // The turn's read loop sees the end of stdout next and reports the exit.
            tracing::warn!(%error, "answering claude failed");
        }
        Ok(())
    }
}

/// Claude's answer to a plan approval or to `AskUserQuestion`.
fn answer_question(tool: &str, input: &Value, answer: QuestionAnswer) -> Value {
    let answers = match answer {
        QuestionAnswer::Answered(answers) => answers,
        QuestionAnswer::Rejected => {
            let message = if tool == EXIT_PLAN_MODE {
                "The user rejected the plan: keep planning."
            } else {
                "The user declined to answer."
            };
            return json!({"behavior": "deny", "message": message});
        }
    };
    let first = answers.first().map(|a| a.join(", ")).unwrap_or_default();
    if tool == EXIT_PLAN_MODE {
        if first.trim().eq_ignore_ascii_case(APPROVE_PLAN) {
            return json!({
                "behavior": "allow",
                "updatedInput": input,
                "updatedPermissions": [{"type": "setMode", "mode": "default", "destination": "session"}],
            });
        }
        return json!({"behavior": "deny", "message": format!("The user wants to keep planning: {first}")});
    }
    debug_assert_eq!(tool, ASK_USER_QUESTION);
    // AskUserQuestion takes the answers in its input, by question text.
    let mut updated = input.clone();
    let mut by_question = serde_json::Map::new();
    for (question, answer) in input.get("questions").and_then(Value::as_array).into_iter().flatten().zip(&answers) {
        if let Some(text) = question.get("question").and_then(Value::as_str) {
            by_question.insert(text.to_string(), Value::String(answer.join(", ")));
        }
    }
    if let Some(object) = updated.as_object_mut() {
        object.insert("answers".into(), Value::Object(by_question));
    }
    json!({"behavior": "allow", "updatedInput": updated})
}

impl AgentDriver for ClaudeDriver {
    fn agent_session_id(&self) -> Option<String> {
        Some(self.state.agent_session_id.clone())
    }

    fn run_turn<'a>(
        &'a mut self,
        ctx: &'a TurnContext,
        turn: &'a TurnInput,
        resume: bool,
    ) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>> {
        Box::pin(async move {
            // Usage of an earlier turn cut short is not this turn's.
            self.converter.take_usage();
            let outcome = self.turn(ctx, turn, resume).await?;
            Ok(outcome.with_usage(self.converter.take_usage()))
        })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(mut child) = self.child.take() {
                child.stop(STOP_GRACE).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_uuids() {
        let id = new_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(id.as_bytes()[14], b'4');
        assert_ne!(id, new_uuid());
    }

    #[test]
    fn a_plan_is_approved_or_kept_in_planning() {
        let input = json!({"plan": "1. do it"});
        let approved = answer_question(EXIT_PLAN_MODE, &input, QuestionAnswer::Answered(vec![vec!["approve".into()]]));
        assert_eq!(approved["behavior"], "allow");
        assert_eq!(approved["updatedInput"], input);
        let kept =
            answer_question(EXIT_PLAN_MODE, &input, QuestionAnswer::Answered(vec![vec!["keep planning".into()]]));
        assert_eq!(kept["behavior"], "deny");
        assert_eq!(answer_question(EXIT_PLAN_MODE, &input, QuestionAnswer::Rejected)["behavior"], "deny");
    }

    #[test]
    fn questions_are_answered_in_the_tool_input() {
        let input = json!({"questions": [{"question": "Which color?", "header": "color", "options": [{"label": "red"}, {"label": "blue"}], "multiSelect": false}]});
        let answer = answer_question(ASK_USER_QUESTION, &input, QuestionAnswer::Answered(vec![vec!["blue".into()]]));
        assert_eq!(answer["behavior"], "allow");
        assert_eq!(answer["updatedInput"]["answers"], json!({"Which color?": "blue"}));
    }
}
