//! The contract between an agent's driver and the session that runs it: what a turn
//! is given ([`TurnInput`]), how it reports and asks ([`TurnContext`]), how it ends
//! ([`TurnOutcome`], [`Interrupted`]) and what a driver is ([`AgentDriver`]). Events
//! that a native line of the agent's produced are reported through that line
//! ([`NativeLine`]), which attaches it as their `raw`: the same for every agent.
//!
//! Both sides depend on this module and not on each other: `agents` implements
//! drivers against it without knowing the session machinery, and `sessions` provides
//! the [`TurnPort`] behind each context.

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::error::Error;
use crate::model::PermissionMode;
use crate::universal::{EventData, PermissionReply, PermissionRequest, QuestionRequest, Usage};

/// Why a driver has to stop in the middle of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// The session ended (or failed): nothing more is recorded.
    Ended,
    /// The node agent is stopping; the turn resumes when it starts again.
    Shutdown,
}

/// A client's answer to a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuestionAnswer {
    Answered(Vec<Vec<String>>),
    Rejected,
}

/// One message to run as a turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TurnInput {
    /// Turns of this session, from 1.
    pub number: u64,
    pub message: String,
}

/// How a turn ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub failed: bool,
    /// Cut short by a client's interrupt (the session's, never a driver's, to say).
    pub interrupted: bool,
    pub error: Option<String>,
    /// The turn's tokens, as the agent reported them (`None`: it reported none).
    pub usage: Option<Usage>,
}

impl TurnOutcome {
    pub fn completed() -> Self {
        TurnOutcome { failed: false, interrupted: false, error: None, usage: None }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        TurnOutcome { failed: true, interrupted: false, error: Some(error.into()), usage: None }
    }

    /// A turn a client interrupted.
    pub fn interrupted() -> Self {
        TurnOutcome { interrupted: true, ..TurnOutcome::completed() }
    }

    /// This outcome with the turn's usage.
    pub fn with_usage(self, usage: Option<Usage>) -> Self {
        TurnOutcome { usage, ..self }
    }
}

/// An agent's native output, line by line, into the events each line became. A
/// driver reports them through [`TurnContext::report`] or [`TurnContext::line`] (and
/// `node-agent convert` prints them), each in an envelope with the line as `raw`.
pub trait Converter: Send {
    /// Converts one native line (a JSON line, or an SSE `data:` payload). Never empty:
    /// a line that means nothing to a client still yields an event (`agent.unparsed`
    /// when the converter does not know it).
    fn convert(&mut self, line: &str) -> Vec<EventData>;

    /// The tokens the lines converted since the last call reported, summed (`None`
    /// when they reported none): the driver takes it at the end of a turn for its
    /// `turn.ended`.
    fn take_usage(&mut self) -> Option<Usage> {
        None
    }
}

/// One running conversation with an agent. Object safe, so that the session manager
/// holds any driver the same way.
pub trait AgentDriver: Send {
    /// The agent's own id of the conversation.
    fn agent_session_id(&self) -> Option<String>;

    /// Runs one turn: everything the agent does for `turn.message`, reported through
    /// `ctx`, until it is done. `resume` means this turn was under way when the node
    /// agent stopped: continue it from the state the driver saved with
    /// [`TurnContext::save_state`] (a permission request or question still pending is
    /// answered through the context as before). `turn.started`/`turn.ended` and the
    /// user's message item are the session manager's; the driver reports the rest.
    fn run_turn<'a>(
        &'a mut self,
        ctx: &'a TurnContext,
        turn: &'a TurnInput,
        resume: bool,
    ) -> BoxFuture<'a, Result<TurnOutcome, Interrupted>>;

    /// The session is over (ended, or the node agent stops): release what the driver holds.
    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// What a session offers the turn of its driver; the session manager implements it.
/// Request ids here are the driver's own: the session shows clients other ones.
pub trait TurnPort: Send + Sync {
    fn session_id(&self) -> &str;
    fn permission_mode(&self) -> PermissionMode;
    fn emit_raw(&self, data: EventData, raw: Option<String>) -> BoxFuture<'_, Result<(), Interrupted>>;
    fn save_state(&self, state: Value);
    fn request_permission<'a>(
        &'a self,
        request: PermissionRequest,
        raw: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Interrupted>>;
    fn wait_permission<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<PermissionReply, Interrupted>>;
    fn ask_question<'a>(
        &'a self,
        request: QuestionRequest,
        raw: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Interrupted>>;
    fn wait_question<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<QuestionAnswer, Interrupted>>;
    fn interrupted(&self) -> BoxFuture<'_, Interrupted>;
}

/// What a driver uses to report events and to ask for replies.
pub struct TurnContext {
    port: Box<dyn TurnPort>,
}

impl TurnContext {
    pub fn new(port: impl TurnPort + 'static) -> TurnContext {
        TurnContext { port: Box::new(port) }
    }

    pub fn session_id(&self) -> &str {
        self.port.session_id()
    }

    pub fn permission_mode(&self) -> PermissionMode {
        self.port.permission_mode()
    }

    /// A line the agent wrote: every event reported through it carries the line as
    /// its envelope's `raw`. The one way a driver attaches native output to events,
    /// the same for every agent.
    pub fn line<'a>(&'a self, line: &'a str) -> NativeLine<'a> {
        NativeLine { ctx: self, line }
    }

    /// Converts one native line and reports every event it became, each with the line.
    pub async fn report(&self, converter: &mut dyn Converter, line: &str) -> Result<(), Interrupted> {
        self.line(line).emit_all(converter.convert(line)).await
    }

    /// Reports what went wrong as an `error` event with the error's problem code, and
    /// gives the outcome of a failed turn.
    pub async fn fail_turn(&self, error: &Error) -> Result<TurnOutcome, Interrupted> {
        let message = error.to_string();
        self.emit(EventData::Error { message: message.clone(), code: Some(error.code().to_string()) }).await?;
        Ok(TurnOutcome::failed(message))
    }

    /// Reports an event of the driver's own, which no native line produced (see
    /// [`TurnContext::line`] for those that one did).
    pub async fn emit(&self, data: EventData) -> Result<(), Interrupted> {
        self.port.emit_raw(data, None).await
    }

    /// Keeps what the driver needs to resume; written with the session's next save
    /// (a request or the end of a turn), so save it before asking.
    pub fn save_state(&self, state: Value) {
        self.port.save_state(state)
    }

    /// Announces a permission request of the driver's own (one the agent asked for in
    /// a native line is announced through [`NativeLine::request_permission`]); the
    /// session awaits input until it is answered. `request.id` is the driver's own:
    /// clients see the request under an unguessable id of the session's, and the
    /// driver waits with its own ([`TurnContext::wait_permission`]). Asking again while
    /// a request of the same id is pending changes nothing.
    pub async fn request_permission(&self, request: PermissionRequest) -> Result<(), Interrupted> {
        self.port.request_permission(request, None).await
    }

    /// Waits for the reply to a permission request (also one re-offered after a
    /// restart); `id` is the driver's own, as it asked with.
    pub async fn wait_permission(&self, id: &str) -> Result<PermissionReply, Interrupted> {
        self.port.wait_permission(id).await
    }

    /// Asks questions, under a public id as [`TurnContext::request_permission`] does.
    pub async fn ask_question(&self, request: QuestionRequest) -> Result<(), Interrupted> {
        self.port.ask_question(request, None).await
    }

    /// `id` is the driver's own, as it asked with.
    pub async fn wait_question(&self, id: &str) -> Result<QuestionAnswer, Interrupted> {
        self.port.wait_question(id).await
    }

    /// Resolves when the turn has to stop: the session ended, or the node agent stops.
    /// For a driver that waits on its agent's output rather than on a reply.
    pub async fn interrupted(&self) -> Interrupted {
        self.port.interrupted().await
    }
}

/// A native line of the agent's, as its driver reports it (see [`TurnContext::line`]):
/// what is reported through it carries the line as `raw`.
#[derive(Clone, Copy)]
pub struct NativeLine<'a> {
    ctx: &'a TurnContext,
    line: &'a str,
}

impl NativeLine<'_> {
    /// Reports an event this line produced.
    pub async fn emit(&self, data: EventData) -> Result<(), Interrupted> {
        self.ctx.port.emit_raw(data, Some(self.line.to_string())).await
    }

    /// Reports the events this line produced, in order.
    pub async fn emit_all(&self, events: impl IntoIterator<Item = EventData>) -> Result<(), Interrupted> {
        for event in events {
            self.emit(event).await?;
        }
        Ok(())
    }

    /// Announces the permission request this line is, as
    /// [`TurnContext::request_permission`] does.
    pub async fn request_permission(&self, request: PermissionRequest) -> Result<(), Interrupted> {
        self.ctx.port.request_permission(request, Some(self.line)).await
    }

    /// Asks the questions this line asks, as [`TurnContext::ask_question`] does.
    pub async fn ask_question(&self, request: QuestionRequest) -> Result<(), Interrupted> {
        self.ctx.port.ask_question(request, Some(self.line)).await
    }
}
