//! The `amp` agent: the last pure-JS `@sourcegraph/amp` (0.0.1767830505-ga62310),
//! whose agent loop runs locally. Later releases run the loop on Amp's servers
//! (`POST /api/thread-actors`) and cannot be pointed at a local model server.
//!
//! - The session's env points it at a server (`AMP_URL`, `AMP_API_KEY`): amp calls
//!   `/api/internal?<method>` there and its model at
//!   `/api/provider/anthropic/v1/messages`.
//! - One thread per session: `amp threads new` when the session starts (so its id is
//!   known from the start), then one `amp threads continue <thread> -x --stream-json`
//!   per turn with the message on its stdin, which is also how a session resumes
//!   after a restart.
//!   `threads new` exits without waiting for its local write of the thread; when
//!   that write is lost, amp fetches the thread from its server (which keeps what
//!   amp uploads: the scripted model server does too).
//!   (`--stream-json-input` keeps one process for several messages, but then amp
//!   reports a `result` only at the end of its input, so a turn's end is not told.)
//! - Permissions: amp cannot ask over this protocol. `bypass` runs with
//!   `--dangerously-allow-all`; in `default` amp applies its own rules, and a tool
//!   they would ask about is either refused (the turn fails with
//!   `permission_denied`) or, in some runs of `threads continue -x`, waits for an
//!   approval nobody can give, until the turn's timeout (below); `plan`
//!   is `mode_not_supported`. `agentMode` is amp's `--mode`, of which
//!   `--stream-json` allows only `smart`.
//! - A turn that outlives its timeout (120 s, or `AGENTPLANE_AMP_TURN_TIMEOUT_SECS`
//!   in the session's env) is killed, with its process group, and fails with
//!   `timeout`.

pub mod convert;

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::process::Command;

use super::catalog::{Catalog, CredentialPlaces, CredentialSources, non_empty_string};
use super::child::LineChild;
use super::convert::Converter as _;
use super::{
    Agent, AgentDriver, AgentId, DriverConfig, Interrupted, Launch, Package, TurnContext, TurnInput, TurnOutcome,
};
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};

pub use convert::Converter;

/// amp's agent modes (`--mode`) this driver can run: amp refuses `--stream-json`
/// in any mode but `smart` ("Stream JSON mode is not permitted with 'rush' mode").
const MODES: [&str; 1] = ["smart"];
/// The session env variable that sets a turn's timeout, in seconds.
pub const TURN_TIMEOUT_ENV: &str = "AGENTPLANE_AMP_TURN_TIMEOUT_SECS";
const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `amp threads new` may take (node starting on a loaded machine).
const STARTUP: Duration = Duration::from_secs(90);
const GRACE: Duration = Duration::from_secs(3);

/// Amp, as the registry lists it.
pub struct Amp;

impl Agent for Amp {
    fn id(&self) -> AgentId {
        AgentId::Amp
    }

    fn name(&self) -> &'static str {
        "amp"
    }

    fn package(&self) -> Option<Package> {
        // The last pure-JS release that runs its agent loop locally (see the module's doc).
        Some(Package { name: "@sourcegraph/amp", bin: "amp", default_version: "0.0.1767830505-ga62310" })
    }

    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities { permissions: false, questions: false, resume: true, streaming_deltas: false, mcp: false }
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
            // `amp --mode`; `free` and `dojo` need Amp's own servers.
            modes: &[
                ("smart", "The most capable model and set of tools"),
                ("rush", "Faster and cheaper for small, well-defined tasks"),
                ("large", "The biggest context window possible"),
            ],
            default_mode: Some("smart"),
            models: &[],
            default_model: None,
            models_note: "amp picks its model from the agent mode (see the modes); it takes no model",
        }
    }

    fn credentials(&self, places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        let files = places.data_home().map(|d| (d.join("amp/secrets.json"), secrets as fn(&str) -> bool));
        Some(CredentialSources { env: &["AMP_API_KEY"], files: files.into_iter().collect() })
    }
}

/// amp's secrets.json: `{"apiKey@https://ampcode.com/": "..."}`.
fn secrets(text: &str) -> bool {
    let Ok(Value::Object(secrets)) = serde_json::from_str::<Value>(text) else { return false };
    secrets.iter().any(|(key, value)| key.starts_with("apiKey") && non_empty_string(value))
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode
        && !MODES.contains(&mode.as_str())
    {
        return Err(Error::ModeNotSupported(format!("amp has no mode {mode:?} (it has {})", MODES.join(", "))));
    }
    if request.permission_mode == Some(PermissionMode::Plan) {
        return Err(Error::ModeNotSupported("amp has no plan mode: use permissionMode default or bypass".into()));
    }
    if let Some(value) = request.env.get(TURN_TIMEOUT_ENV) {
        parse_timeout(value)?;
    }
    Ok(())
}

fn parse_timeout(value: &str) -> Result<Duration> {
    match value.trim().parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(Error::InvalidRequest(format!(
            "{TURN_TIMEOUT_ENV} must be a positive number of seconds, not {value:?}"
        ))),
    }
}

async fn start(launch: Launch<'_>) -> Result<Box<dyn AgentDriver>> {
    let saved: Option<AmpState> = launch.saved_state("amp")?;
    let bin = launch.bin()?;
    let config = launch.config;
    let turn_timeout = match config.env.get(TURN_TIMEOUT_ENV) {
        Some(value) => parse_timeout(value)?,
        None => DEFAULT_TURN_TIMEOUT,
    };
    let mut driver = AmpDriver {
        bin,
        home: crate::agents::pi::session_home(config),
        config: config.clone(),
        state: saved.unwrap_or_default(),
        turn_timeout,
        converter: Converter::default(),
    };
    if driver.state.thread_id.is_none() {
        driver.state.thread_id = Some(driver.new_thread().await?);
    }
    Ok(Box::new(driver))
}

/// What the driver keeps to resume amp's conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AmpState {
    thread_id: Option<String>,
}

pub struct AmpDriver {
    bin: PathBuf,
    home: PathBuf,
    config: DriverConfig,
    state: AmpState,
    turn_timeout: Duration,
    converter: Converter,
}

impl AmpDriver {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command.env_remove(crate::TOKEN_VARIABLE);
        command.envs(&self.config.env).env("HOME", &self.home).env("AMP_SKIP_UPDATE_CHECK", "1");
        if let Some(dir) = &self.config.working_dir {
            command.current_dir(dir);
        }
        command
    }

    /// `amp threads new`: prints the new thread's id. amp writes the thread to its
    /// store after printing the id, so it is let run to its end.
    async fn new_thread(&self) -> Result<String> {
        let mut command = self.command();
        command.args(["threads", "new"]);
        let mut child = LineChild::spawn(command)?;
        child.close_stdin();
        let run = async {
            let mut thread = None;
            while let Some(line) = child.next_line().await {
                if let Some(id) = line.split_whitespace().find(|w| w.starts_with("T-")) {
                    thread = Some(id.to_string());
                }
            }
            match (thread, child.exited().await) {
                (Some(thread), Error::AgentProcessExited { code: Some(0), .. }) => Ok(thread),
                (_, exited) => Err(exited),
            }
        };
        match tokio::time::timeout(STARTUP, run).await {
            Ok(result) => result,
            Err(_) => {
                child.stop(GRACE).await;
                Err(Error::Timeout(format!("`amp threads new` did not finish within {} s", STARTUP.as_secs())))
            }
        }
    }

    async fn emit_line(&mut self, ctx: &TurnContext, line: &str) -> Result<(), Interrupted> {
        ctx.report(&mut self.converter, line).await
    }

    async fn fail(&mut self, ctx: &TurnContext, error: Error) -> Result<TurnOutcome, Interrupted> {
        ctx.fail_turn(&error).await
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        // Usage of an earlier turn cut short is not this turn's.
        self.converter.take_usage();
        self.converter.set_prefix(if resume {
            format!("turn-{}-resumed", turn.number)
        } else {
            format!("turn-{}", turn.number)
        });
        ctx.save_state(serde_json::to_value(&self.state).expect("the state serializes"));
        let Some(thread) = self.state.thread_id.clone() else {
            return self.fail(ctx, Error::StreamError("amp has no thread".into())).await;
        };
        let mut command = self.command();
        // The message goes on stdin: as an argument, one starting with `-` would be
        // taken for an option (and a long one could pass the kernel's limit).
        command.args(["threads", "continue", &thread, "--execute", "--stream-json"]);
        if self.config.permission_mode == PermissionMode::Bypass {
            command.arg("--dangerously-allow-all");
        }
        if let Some(mode) = &self.config.agent_mode {
            command.arg("--mode").arg(mode);
        }
        let mut child = match LineChild::spawn(command) {
            Ok(child) => child,
            Err(error) => return self.fail(ctx, error).await,
        };
        // In `-x` mode amp reads its stdin to the end as the message (trimmed).
        let sent = child.send_line(&turn.message).await;
        child.close_stdin();
        if let Err(error) = sent {
            return self.fail(ctx, error).await;
        }
        let deadline = tokio::time::Instant::now() + self.turn_timeout;
        let mut result: Option<TurnOutcome> = None;
        loop {
            let next = tokio::select! {
                next = tokio::time::timeout_at(deadline, child.next_line()) => next,
                // A stopping node agent does not wait for the turn: it runs again after the restart.
                why = ctx.interrupted() => {
                    child.stop(GRACE).await;
                    return Err(why);
                }
            };
            let line = match next {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(_) => {
                    let tail = child.stderr_tail();
                    child.stop(GRACE).await;
                    let mut message = format!(
                        "amp did not finish the turn within {} s (a tool waiting for an approval `-x` cannot give?); it was stopped",
                        self.turn_timeout.as_secs()
                    );
                    if !tail.is_empty() {
                        message.push_str(&format!("; stderr: {tail}"));
                    }
                    return self.fail(ctx, Error::Timeout(message)).await;
                }
            };
            if let Err(interrupted) = self.emit_line(ctx, &line).await {
                child.stop(GRACE).await;
                return Err(interrupted);
            }
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if value.get("type").and_then(Value::as_str) == Some("result") {
                result = Some(outcome_of(&value));
            }
        }
        let exited = child.exited().await;
        match result {
            Some(outcome) => Ok(outcome.with_usage(self.converter.take_usage())),
            // Its output ended without a result: it died.
            None => self.fail(ctx, exited).await,
        }
    }
}

fn outcome_of(result: &Value) -> TurnOutcome {
    if result.get("is_error").and_then(Value::as_bool).unwrap_or(false) {
        let message =
            result.get("error").or_else(|| result.get("result")).and_then(Value::as_str).unwrap_or("amp failed");
        TurnOutcome::failed(message)
    } else {
        TurnOutcome::completed()
    }
}

impl AgentDriver for AmpDriver {
    fn agent_session_id(&self) -> Option<String> {
        self.state.thread_id.clone()
    }

    fn run_turn<'a>(
        &'a mut self,
        ctx: &'a TurnContext,
        turn: &'a TurnInput,
        resume: bool,
    ) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>> {
        Box::pin(self.turn(ctx, turn, resume))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_the_timeout_knob_are_checked() {
        let request = |mode: Option<&str>, permission: Option<PermissionMode>| CreateSessionRequest {
            agent: "amp".into(),
            agent_mode: mode.map(str::to_string),
            permission_mode: permission,
            ..Default::default()
        };
        assert!(validate(&request(Some("smart"), Some(PermissionMode::Bypass))).is_ok());
        assert_eq!(validate(&request(Some("rush"), None)).unwrap_err().code(), "mode_not_supported");
        assert!(validate(&request(None, Some(PermissionMode::Default))).is_ok());
        assert_eq!(validate(&request(Some("build"), None)).unwrap_err().code(), "mode_not_supported");
        assert_eq!(validate(&request(None, Some(PermissionMode::Plan))).unwrap_err().code(), "mode_not_supported");
        assert_eq!(parse_timeout("5").unwrap(), Duration::from_secs(5));
        assert!(parse_timeout("0").is_err() && parse_timeout("soon").is_err());
    }
}
