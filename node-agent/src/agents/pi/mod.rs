//! The `pi` agent (`@mariozechner/pi-coding-agent`): one live `pi --mode rpc` per
//! session, a `prompt` command on its stdin per turn, its events read until the
//! `agent_end` that closes the prompt.
//!
//! - Model: where the session's HOME has no `~/.pi/agent/models.json`, the driver
//!   writes one naming a provider `agentplane` from the session's env
//!   (`ANTHROPIC_BASE_URL` → `anthropic-messages`, else `OPENAI_BASE_URL` →
//!   `openai-completions`; the key by the name of its variable, so that no secret is
//!   written to disk) and runs `--provider agentplane --model <model>`. A user's own
//!   file is never overwritten: then `--model` is passed as given.
//! - Permissions: pi has none, it runs every tool. `bypass` (or no permission mode)
//!   is what it does; `plan` is honoured by offering only pi's read-only tools
//!   (`--tools read,grep,find,ls`); `default` (asking first) cannot be, and is
//!   `mode_not_supported`, as is any `agentMode`.
//! - Turns end at `agent_end`. pi retries a failed model request on its own after
//!   `agent_end` (`auto_retry_start`), which would spill the retry into the next turn:
//!   the driver turns that off (`set_auto_retry`), so a failed request fails the turn.
//! - Resume: pi's session id and file (from `get_state`) are saved; a new process
//!   (after the node agent or pi itself restarted) runs `--session <file>`.

pub mod convert;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::process::Command;

use super::ConversationFiles;
use super::catalog::{Catalog, CredentialPlaces, CredentialSources, non_empty_string, provider_entries};
use super::child::LineChild;
use super::convert::Converter as _;
use super::{
    Agent, AgentDriver, AgentId, DriverConfig, Interrupted, Launch, Package, TurnContext, TurnInput, TurnOutcome,
};
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};

pub use convert::Converter;

/// The provider the driver configures in a `models.json` it writes.
const PROVIDER: &str = "agentplane";
/// The model named when the session names none (the scripted model server takes any).
const DEFAULT_MODEL: &str = "default";
/// pi's read-only tools: what a `plan` session may use.
const PLAN_TOOLS: &str = "read,grep,find,ls";
/// How long pi may take to start and answer its first command (node on a loaded machine).
const STARTUP: Duration = Duration::from_secs(90);
/// How long pi gets to exit on SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(3);

/// pi, as the registry lists it.
pub struct Pi;

impl Agent for Pi {
    fn id(&self) -> AgentId {
        AgentId::Pi
    }

    fn name(&self) -> &'static str {
        "pi"
    }

    fn package(&self) -> Option<Package> {
        Some(Package { name: "@mariozechner/pi-coding-agent", bin: "pi", default_version: "0.73.1" })
    }

    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities { permissions: false, questions: false, resume: true, streaming_deltas: true, mcp: false }
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
            models: &[],
            default_model: None,
            models_note: "a model id of a provider pi knows or of ~/.pi/agent/models.json (`pi --list-models` lists them)",
        }
    }

    /// The session file under `~/.pi/agent/sessions`, named by its id; the driver
    /// runs `--session <file>` with that path.
    fn conversation_files(&self, places: &CredentialPlaces<'_>, id: &str) -> Vec<ConversationFiles> {
        places
            .dir("PI_CODING_AGENT_DIR", ".pi/agent")
            .map(|d| ConversationFiles::naming(d.join("sessions"), id))
            .into_iter()
            .collect()
    }

    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        let files = places
            .dir("PI_CODING_AGENT_DIR", ".pi/agent")
            .map(|d| {
                vec![
                    (d.join("auth.json"), provider_entries as fn(&str) -> bool),
                    (d.join("models.json"), models_api_key),
                ]
            })
            .unwrap_or_default();
        Some(CredentialSources {
            env: &[
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GEMINI_API_KEY",
                "OPENROUTER_API_KEY",
                "MISTRAL_API_KEY",
                "GROQ_API_KEY",
                "XAI_API_KEY",
            ],
            files,
        })
    }
}

/// pi's models.json: a provider with an `apiKey`.
fn models_api_key(text: &str) -> bool {
    let Ok(json) = serde_json::from_str::<Value>(text) else { return false };
    json["providers"].as_object().is_some_and(|providers| providers.values().any(|p| non_empty_string(&p["apiKey"])))
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode {
        return Err(Error::ModeNotSupported(format!("pi has no agent modes (asked for {mode:?})")));
    }
    if request.permission_mode == Some(PermissionMode::Default) {
        return Err(Error::ModeNotSupported(
            "pi cannot ask before running a tool: use permissionMode bypass (what pi does) or plan (read-only tools)"
                .into(),
        ));
    }
    Ok(())
}

async fn start(launch: Launch<'_>) -> Result<Box<dyn AgentDriver>> {
    let saved: Option<PiState> = launch.saved_state("pi")?;
    let bin = launch.bin()?;
    let config = launch.config;
    let home = session_home(config);
    let provider = configure_models(&home, config).await?;
    let mut driver = PiDriver {
        bin,
        home,
        provider,
        config: config.clone(),
        state: saved.unwrap_or_default(),
        child: None,
        converter: Converter::default(),
        pending: Vec::new(),
    };
    driver.spawn().await?;
    Ok(Box::new(driver))
}

/// The HOME the agent runs with: the session's own when its env sets one, else the node agent's.
pub(crate) fn session_home(config: &DriverConfig) -> PathBuf {
    match config.env.get("HOME") {
        Some(home) if !home.is_empty() => PathBuf::from(home),
        _ => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| config.session_dir.clone()),
    }
}

/// Writes `~/.pi/agent/models.json` from the session's env when there is none and the
/// env names a model API; returns the provider to run with, if the driver configured one.
async fn configure_models(home: &Path, config: &DriverConfig) -> Result<Option<String>> {
    let path = home.join(".pi").join("agent").join("models.json");
    if tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Ok(None);
    }
    let Some(models) = models_json(&config.env, config.model.as_deref()) else {
        return Ok(None);
    };
    let dir = path.parent().expect("a file in a directory");
    tokio::fs::create_dir_all(dir).await.map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let text = serde_json::to_string_pretty(&models).expect("JSON serializes");
    tokio::fs::write(&path, text).await.map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(Some(PROVIDER.to_string()))
}

/// The `models.json` for a session env naming a model API, if it names one.
fn models_json(env: &std::collections::BTreeMap<String, String>, model: Option<&str>) -> Option<Value> {
    let set = |name: &str| env.get(name).filter(|v| !v.is_empty());
    let (api, base_url, key) = if let Some(url) = set("ANTHROPIC_BASE_URL") {
        ("anthropic-messages", url.trim_end_matches('/').to_string(), "ANTHROPIC_API_KEY")
    } else if let Some(url) = set("OPENAI_BASE_URL") {
        ("openai-completions", url.trim_end_matches('/').to_string(), "OPENAI_API_KEY")
    } else {
        return None;
    };
    // pi reads a key named by its variable at request time; a literal only when unset
    // (a local server wants some key and checks none).
    let api_key = if set(key).is_some() { key.to_string() } else { "none".to_string() };
    let model = model.unwrap_or(DEFAULT_MODEL);
    Some(json!({
        "providers": {
            PROVIDER: {
                "baseUrl": base_url,
                "api": api,
                "apiKey": api_key,
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                "models": [{"id": model}],
            }
        }
    }))
}

/// What the driver keeps to resume pi's conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PiState {
    session_id: Option<String>,
    session_file: Option<String>,
}

pub struct PiDriver {
    bin: PathBuf,
    home: PathBuf,
    /// The provider of a `models.json` the driver wrote.
    provider: Option<String>,
    config: DriverConfig,
    state: PiState,
    child: Option<LineChild>,
    converter: Converter,
    /// Lines pi printed while the driver set it up, reported with the next turn.
    pending: Vec<String>,
}

impl PiDriver {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command.env_remove(crate::TOKEN_VARIABLE);
        command.arg("--mode").arg("rpc");
        match (&self.provider, &self.config.model) {
            (Some(provider), model) => {
                command.arg("--provider").arg(provider).arg("--model").arg(model.as_deref().unwrap_or(DEFAULT_MODEL));
            }
            (None, Some(model)) => {
                command.arg("--model").arg(model);
            }
            (None, None) => {}
        }
        if self.config.permission_mode == PermissionMode::Plan {
            command.arg("--tools").arg(PLAN_TOOLS);
        }
        // A file survives a working directory that changed; the id is looked up in
        // the directory's sessions.
        let resume =
            self.state.session_file.clone().filter(|f| Path::new(f).exists()).or_else(|| self.state.session_id.clone());
        if let Some(session) = resume {
            command.arg("--session").arg(session);
        }
        command.envs(&self.config.env).env("HOME", &self.home).env("PI_OFFLINE", "1").env("PI_TELEMETRY", "0");
        if let Some(dir) = &self.config.working_dir {
            command.current_dir(dir);
        }
        command
    }

    /// Starts pi, turns off its own retries and learns its session.
    async fn spawn(&mut self) -> Result<()> {
        let mut child = LineChild::spawn(self.command())?;
        child.send(&json!({"id": "setup-retry", "type": "set_auto_retry", "enabled": false})).await?;
        child.send(&json!({"id": "setup-state", "type": "get_state"})).await?;
        let handshake = async {
            loop {
                let Some(line) = child.next_line().await else {
                    return Err(child.exited().await);
                };
                let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                let answered = value.get("id").and_then(Value::as_str) == Some("setup-state");
                if answered {
                    if value.get("success").and_then(Value::as_bool) != Some(true) {
                        let error = value.get("error").and_then(Value::as_str).unwrap_or("no reason given").to_string();
                        self.pending.push(line);
                        return Err(Error::StreamError(format!("pi did not report its state: {error}")));
                    }
                    if let Some(id) = value.pointer("/data/sessionId").and_then(Value::as_str) {
                        self.state.session_id = Some(id.to_string());
                    }
                    if let Some(file) = value.pointer("/data/sessionFile").and_then(Value::as_str) {
                        self.state.session_file = Some(file.to_string());
                    }
                }
                self.pending.push(line);
                if answered {
                    return Ok(());
                }
            }
        };
        match tokio::time::timeout(STARTUP, handshake).await {
            Ok(Ok(())) => {
                self.child = Some(child);
                Ok(())
            }
            Ok(Err(error)) => {
                child.stop(GRACE).await;
                Err(error)
            }
            Err(_) => {
                let tail = child.stderr_tail();
                child.stop(GRACE).await;
                Err(Error::Timeout(format!(
                    "pi did not answer get_state within {} s; stderr: {tail}",
                    STARTUP.as_secs()
                )))
            }
        }
    }

    async fn emit_line(&mut self, ctx: &TurnContext, line: &str) -> Result<(), Interrupted> {
        ctx.report(&mut self.converter, line).await
    }

    /// Reports an error that fails the turn.
    async fn fail(&mut self, ctx: &TurnContext, error: Error) -> Result<TurnOutcome, Interrupted> {
        ctx.fail_turn(&error).await
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        // Usage of an earlier turn cut short is not this turn's.
        self.converter.take_usage();
        // A turn run again after a restart gets ids of its own.
        self.converter.set_prefix(if resume {
            format!("turn-{}-resumed", turn.number)
        } else {
            format!("turn-{}", turn.number)
        });
        if self.child.is_none() {
            // pi went away in an earlier turn: a new one resumes its session.
            if let Err(error) = self.spawn().await {
                return self.fail(ctx, error).await;
            }
        }
        for line in std::mem::take(&mut self.pending) {
            self.emit_line(ctx, &line).await?;
        }
        ctx.save_state(serde_json::to_value(&self.state).expect("the state serializes"));
        let request_id = format!("turn-{}", turn.number);
        let prompt = json!({"id": request_id, "type": "prompt", "message": turn.message});
        let Some(child) = self.child.as_mut() else {
            return self.fail(ctx, Error::StreamError("pi is not running".into())).await;
        };
        if let Err(error) = child.send(&prompt).await {
            self.child = None;
            return self.fail(ctx, error).await;
        }
        loop {
            let Some(child) = self.child.as_mut() else {
                return self.fail(ctx, Error::StreamError("pi is not running".into())).await;
            };
            // A stopping node agent does not wait for the turn: it resumes after the restart.
            let line = tokio::select! {
                line = child.next_line() => line,
                why = ctx.interrupted() => return Err(why),
            };
            let Some(line) = line else {
                let error = child.exited().await;
                self.child = None;
                return self.fail(ctx, error).await;
            };
            self.emit_line(ctx, &line).await?;
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            match value.get("type").and_then(Value::as_str) {
                Some("response")
                    if value.get("id").and_then(Value::as_str) == Some(request_id.as_str())
                        && value.get("success").and_then(Value::as_bool) == Some(false) =>
                {
                    let error = value.get("error").and_then(Value::as_str).unwrap_or("no reason given");
                    return Ok(TurnOutcome::failed(format!("pi refused the prompt: {error}")));
                }
                Some("agent_end") => return Ok(outcome_of(&value).with_usage(self.converter.take_usage())),
                _ => {}
            }
        }
    }
}

/// A turn failed when pi's last assistant message ended in an error.
fn outcome_of(agent_end: &Value) -> TurnOutcome {
    let messages = agent_end.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let last = messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("assistant"));
    match last {
        Some(message) if message.get("stopReason").and_then(Value::as_str) == Some("error") => {
            let error = message.get("errorMessage").and_then(Value::as_str).unwrap_or("the model request failed");
            TurnOutcome::failed(error.to_string())
        }
        Some(message) if message.get("stopReason").and_then(Value::as_str) == Some("aborted") => {
            TurnOutcome::failed("pi aborted the turn")
        }
        _ => TurnOutcome::completed(),
    }
}

impl AgentDriver for PiDriver {
    fn agent_session_id(&self) -> Option<String> {
        self.state.session_id.clone()
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
        Box::pin(async move {
            if let Some(mut child) = self.child.take() {
                child.stop(GRACE).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_json_follows_the_session_env() {
        let env = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let anthropic =
            models_json(&env(&[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"), ("ANTHROPIC_API_KEY", "k")]), None)
                .unwrap();
        let provider = &anthropic["providers"][PROVIDER];
        assert_eq!(provider["api"], "anthropic-messages");
        assert_eq!(provider["baseUrl"], "http://127.0.0.1:9");
        // The key by its variable's name: no secret on disk.
        assert_eq!(provider["apiKey"], "ANTHROPIC_API_KEY");
        assert_eq!(provider["models"][0]["id"], DEFAULT_MODEL);
        let openai = models_json(&env(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]), Some("m")).unwrap();
        assert_eq!(openai["providers"][PROVIDER]["api"], "openai-completions");
        assert_eq!(openai["providers"][PROVIDER]["apiKey"], "none");
        assert_eq!(openai["providers"][PROVIDER]["models"][0]["id"], "m");
        assert!(models_json(&env(&[("HOME", "/tmp")]), None).is_none());
    }

    #[test]
    fn a_turn_fails_when_the_last_assistant_message_is_an_error() {
        let ok = json!({"type": "agent_end", "messages": [{"role": "assistant", "stopReason": "stop"}]});
        assert_eq!(outcome_of(&ok), TurnOutcome::completed());
        let failed = json!({"type": "agent_end", "messages": [{"role": "assistant", "stopReason": "error", "errorMessage": "Connection error."}]});
        assert_eq!(outcome_of(&failed), TurnOutcome::failed("Connection error."));
    }
}
