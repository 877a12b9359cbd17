//! The built-in `mock` agent: scripted, in-process, deterministic. It needs no
//! install and no network, and exercises every part of the session machinery that a
//! real agent does (streamed text, tool calls behind permission requests, questions,
//! reasoning, errors, native lines nobody understands, resume after a restart).
//!
//! Each message is one turn; cue words in it choose what happens, in this order:
//! `reasoning` (a reasoning item), `unparsed` (an `agent.unparsed` event),
//! `permission` (a `bash` tool call behind a permission request; the command is what
//! follows `run `), `question` (a yes/no question), then `fail` (an `error` and a failed
//! turn) or else a streamed answer `mock reply #N to: <message>`, N being the turn,
//! which names the value of each `$NAME` in the message from the environment the
//! session gave it (`NAME=value`, or `NAME unset`): what a restart with a new
//! environment changed is seen in the conversation.
//! A completed turn reports the same [`USAGE`] every time.

use std::collections::BTreeSet;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::catalog::{Catalog, CredentialPlaces, CredentialSources};
use super::{Agent, AgentDriver, AgentId, Interrupted, Launch, Package, TurnContext, TurnInput, TurnOutcome};
use crate::driver::QuestionAnswer;
use crate::error::{Error, Result};
use crate::model::{AgentCapabilities, CreateSessionRequest, PermissionMode};
use crate::universal::{
    EventData, Item, ItemKind, ItemStatus, PermissionReply, PermissionRequest, Question, QuestionRequest, Role, Usage,
};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const MODES: [&str; 2] = ["build", "plan"];
const TOOL: &str = "bash";
/// What the mock says each completed turn used: fixed, so that tests of what sums
/// usage (the session's info, a Session's status) know what to expect.
pub const USAGE: Usage =
    Usage { input_tokens: 100, output_tokens: 20, cache_read_tokens: 30, cache_write_tokens: 4, cost_usd: Some(0.25) };

/// The mock, as the registry lists it.
pub struct Mock;

impl Agent for Mock {
    fn id(&self) -> AgentId {
        AgentId::Mock
    }

    fn name(&self) -> &'static str {
        "mock"
    }

    fn package(&self) -> Option<Package> {
        None
    }

    fn builtin_version(&self) -> Option<&'static str> {
        Some(VERSION)
    }

    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities {
            permissions: true,
            questions: true,
            resume: true,
            streaming_deltas: true,
            // The mock runs no tools of anyone else's, so it would have nothing to do with them.
            mcp: false,
        }
    }

    fn validate(&self, request: &CreateSessionRequest) -> Result<()> {
        validate(request)
    }

    fn launch<'a>(&'a self, launch: Launch<'a>) -> BoxFuture<'a, Result<Box<dyn AgentDriver>>> {
        Box::pin(async move { Ok(Box::new(MockDriver::start(&launch)?) as Box<dyn AgentDriver>) })
    }

    /// The mock has no native output: whatever is given to convert is unparsed.
    fn converter(&self) -> Box<dyn super::convert::Converter> {
        Box::new(super::convert::Unconverted)
    }

    fn catalog(&self) -> Catalog {
        Catalog {
            modes: &[
                ("build", "The default agent: edits files and runs commands"),
                ("plan", "Plans without changing anything: edits and commands are denied"),
            ],
            default_mode: Some("build"),
            models: &[("mock", "The scripted mock: no model at all")],
            default_model: Some("mock"),
            models_note: "the mock ignores the model",
        }
    }

    /// Built in: it needs none.
    fn credentials(&self, _places: &CredentialPlaces<'_>) -> Option<CredentialSources> {
        None
    }
}

fn validate(request: &CreateSessionRequest) -> Result<()> {
    if let Some(mode) = &request.agent_mode
        && !MODES.contains(&mode.as_str())
    {
        return Err(Error::ModeNotSupported(format!(
            "the mock agent has no mode {mode:?} (it has {})",
            MODES.join(", ")
        )));
    }
    if let Some(version) = &request.agent_version
        && version != VERSION
    {
        return Err(Error::InvalidRequest(format!(
            "the mock agent is built in: its only version is {VERSION}, not {version:?}"
        )));
    }
    Ok(())
}

/// What the mock keeps across restarts (the session saves it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MockState {
    agent_session_id: String,
    /// Tools allowed `always` in this conversation.
    always_allowed: BTreeSet<String>,
    /// The turn under way, when it waits for a reply.
    turn: Option<Progress>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Progress {
    number: u64,
    /// Index of the step under way.
    step: usize,
    /// The request that step waits for.
    waiting: Option<String>,
    /// What happened so far, quoted in the answer.
    notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Reasoning,
    Unparsed,
    Permission,
    Question,
    Fail,
    Answer,
}

fn plan(message: &str) -> Vec<Step> {
    let lower = message.to_lowercase();
    let mut steps = Vec::new();
    for (cue, step) in [
        ("reasoning", Step::Reasoning),
        ("unparsed", Step::Unparsed),
        ("permission", Step::Permission),
        ("question", Step::Question),
    ] {
        if lower.contains(cue) {
            steps.push(step);
        }
    }
    steps.push(if lower.contains("fail") { Step::Fail } else { Step::Answer });
    steps
}

/// The command of a `permission` message: what follows `run `.
fn command_of(message: &str) -> String {
    match message.find("run ") {
        Some(at) => message[at + 4..].trim().to_string(),
        None => "true".to_string(),
    }
}

pub struct MockDriver {
    state: MockState,
    permission_mode: PermissionMode,
    env: std::collections::BTreeMap<String, String>,
}

/// `NAME=value` (or `NAME unset`) for each `$NAME` in `message`, from `env`.
fn env_notes(message: &str, env: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    message
        .split('$')
        .skip(1)
        .map(|rest| rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or_default())
        .filter(|name| !name.is_empty())
        .map(|name| match env.get(name) {
            Some(value) => format!("{name}={value}"),
            None => format!("{name} unset"),
        })
        .collect()
}

impl MockDriver {
    fn start(launch: &Launch<'_>) -> Result<MockDriver> {
        let state = match launch.saved_state("the mock")? {
            Some(state) => state,
            None => MockState { agent_session_id: format!("mock-{}", crate::random::hex(6)), ..Default::default() },
        };
        Ok(MockDriver { state, permission_mode: launch.config.permission_mode, env: launch.config.env.clone() })
    }

    fn save(&self, ctx: &TurnContext) {
        ctx.save_state(serde_json::to_value(&self.state).expect("the mock's state serializes"));
    }

    async fn turn(&mut self, ctx: &TurnContext, turn: &TurnInput, resume: bool) -> Result<TurnOutcome, Interrupted> {
        let n = turn.number;
        let mut progress = match self.state.turn.take() {
            Some(progress) if resume && progress.number == n => progress,
            _ => Progress { number: n, step: 0, waiting: None, notes: Vec::new() },
        };
        let steps = plan(&turn.message);
        while let Some(step) = steps.get(progress.step).copied() {
            match step {
                Step::Reasoning => {
                    let text = format!("The user wrote {:?}; a mock has nothing to think about.", turn.message);
                    let item = Item {
                        id: format!("turn-{n}-reasoning"),
                        kind: ItemKind::Reasoning,
                        text: Some(text),
                        ..Default::default()
                    };
                    ctx.emit(EventData::ItemCompleted { item }).await?;
                }
                Step::Unparsed => {
                    let raw = format!("~mock~ native line of turn {n} that no converter understands");
                    let reason = Some("not a line of the mock's protocol".into());
                    ctx.line(&raw).emit(EventData::AgentUnparsed { reason }).await?;
                }
                Step::Permission => self.tool_call(ctx, turn, &mut progress).await?,
                Step::Question => {
                    let id = format!("turn-{n}-question");
                    if progress.waiting.is_none() {
                        progress.waiting = Some(id.clone());
                        self.state.turn = Some(progress.clone());
                        self.save(ctx);
                        let question = Question {
                            question: "Shall the mock go on?".into(),
                            header: Some("mock".into()),
                            options: vec!["yes".into(), "no".into()],
                            multi_select: false,
                        };
                        ctx.ask_question(QuestionRequest { id: id.clone(), questions: vec![question] }).await?;
                    }
                    let note = match ctx.wait_question(&id).await? {
                        QuestionAnswer::Answered(answers) => {
                            let answer = answers.first().map(|a| a.join(", ")).unwrap_or_default();
                            format!("answer: {answer:?}")
                        }
                        QuestionAnswer::Rejected => "question rejected".to_string(),
                    };
                    progress.notes.push(note);
                    progress.waiting = None;
                }
                Step::Fail => {
                    let message = "the mock failed, as asked".to_string();
                    ctx.emit(EventData::Error { message: message.clone(), code: Some("mock_failure".into()) }).await?;
                    self.done(ctx);
                    return Ok(TurnOutcome::failed(message));
                }
                Step::Answer => {
                    let mut text = format!("mock reply #{n} to: {}", turn.message);
                    progress.notes.extend(env_notes(&turn.message, &self.env));
                    if !progress.notes.is_empty() {
                        text.push_str(&format!(" ({})", progress.notes.join("; ")));
                    }
                    self.answer(ctx, n, text).await?;
                }
            }
            progress.step += 1;
        }
        self.done(ctx);
        Ok(TurnOutcome::completed().with_usage(Some(USAGE)))
    }

    fn done(&mut self, ctx: &TurnContext) {
        self.state.turn = None;
        self.save(ctx);
    }

    async fn tool_call(
        &mut self,
        ctx: &TurnContext,
        turn: &TurnInput,
        progress: &mut Progress,
    ) -> Result<(), Interrupted> {
        let n = turn.number;
        let command = command_of(&turn.message);
        let input = json!({ "command": command });
        let call_id = format!("turn-{n}-tool");
        let permission_id = format!("turn-{n}-permission");
        let reply = if progress.waiting.is_some() {
            ctx.wait_permission(&permission_id).await?
        } else {
            let call = Item {
                id: call_id.clone(),
                kind: ItemKind::ToolCall,
                tool: Some(TOOL.into()),
                input: Some(input.clone()),
                status: Some(ItemStatus::InProgress),
                ..Default::default()
            };
            ctx.emit(EventData::ItemStarted { item: call }).await?;
            if self.permission_mode == PermissionMode::Bypass || self.state.always_allowed.contains(TOOL) {
                PermissionReply::Once
            } else {
                progress.waiting = Some(permission_id.clone());
                self.state.turn = Some(progress.clone());
                self.save(ctx);
                let request = PermissionRequest {
                    id: permission_id.clone(),
                    tool: TOOL.into(),
                    input: input.clone(),
                    options: vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject],
                    item_id: Some(call_id.clone()),
                };
                ctx.request_permission(request).await?;
                ctx.wait_permission(&permission_id).await?
            }
        };
        progress.waiting = None;
        let result = |status, output: String| Item {
            id: format!("turn-{n}-tool-result"),
            kind: ItemKind::ToolResult,
            call_id: Some(call_id.clone()),
            output: Some(output),
            status: Some(status),
            ..Default::default()
        };
        match reply {
            PermissionReply::Once | PermissionReply::Always => {
                if reply == PermissionReply::Always {
                    self.state.always_allowed.insert(TOOL.into());
                }
                let call = Item {
                    id: call_id.clone(),
                    kind: ItemKind::ToolCall,
                    tool: Some(TOOL.into()),
                    input: Some(input),
                    status: Some(ItemStatus::Completed),
                    ..Default::default()
                };
                ctx.emit(EventData::ItemCompleted { item: call }).await?;
                // Nothing really runs: the mock only says it did.
                ctx.emit(EventData::ItemCompleted { item: result(ItemStatus::Completed, format!("ran: {command}")) })
                    .await?;
                progress.notes.push(format!("ran `{command}`"));
            }
            PermissionReply::Reject => {
                ctx.emit(EventData::ItemCompleted { item: result(ItemStatus::Denied, "permission denied".into()) })
                    .await?;
                progress.notes.push(format!("not allowed to run `{command}`"));
            }
        }
        Ok(())
    }

    /// Streams `text` as a few deltas, then completes the message.
    async fn answer(&self, ctx: &TurnContext, n: u64, text: String) -> Result<(), Interrupted> {
        let id = format!("turn-{n}-reply");
        let started = Item {
            id: id.clone(),
            kind: ItemKind::Message,
            role: Some(Role::Assistant),
            status: Some(ItemStatus::InProgress),
            ..Default::default()
        };
        ctx.emit(EventData::ItemStarted { item: started }).await?;
        for delta in chunks(&text, 3) {
            ctx.emit(EventData::ItemDelta { item_id: id.clone(), delta }).await?;
        }
        let item = Item {
            id,
            kind: ItemKind::Message,
            role: Some(Role::Assistant),
            text: Some(text),
            status: Some(ItemStatus::Completed),
            ..Default::default()
        };
        ctx.emit(EventData::ItemCompleted { item }).await
    }
}

/// `text` in pieces of `words` words each (spaces kept), which concatenate to it.
fn chunks(text: &str, words: usize) -> Vec<String> {
    let pieces: Vec<&str> = text.split_inclusive(' ').collect();
    pieces.chunks(words).map(|c| c.concat()).collect()
}

impl AgentDriver for MockDriver {
    fn agent_session_id(&self) -> Option<String> {
        Some(self.state.agent_session_id.clone())
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
    fn cues_choose_the_steps() {
        assert_eq!(plan("hello"), vec![Step::Answer]);
        assert_eq!(plan("Ask PERMISSION to run touch x, then fail"), vec![Step::Permission, Step::Fail]);
        assert_eq!(plan("question with reasoning"), vec![Step::Reasoning, Step::Question, Step::Answer]);
        assert_eq!(command_of("ask permission to run touch x"), "touch x");
        assert_eq!(chunks("a b c d e", 2).concat(), "a b c d e");
        assert_eq!(chunks("mock reply #1 to: hi", 3).len(), 2);
        let env = std::collections::BTreeMap::from([("KEY".to_string(), "v1".to_string())]);
        assert_eq!(env_notes("what is $KEY, and $OTHER? $", &env), ["KEY=v1", "OTHER unset"]);
    }
}
