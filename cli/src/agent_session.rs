//! `agentplane session ...`: the session endpoints of a node agent, from a terminal
//! (as `agentplane proc ...` is for its processes): create, list, show, send, read
//! and follow the events, answer requests, end.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::{Client, ClientError, SessionStreamItem};
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::{EventData, EventType, ItemStatus, PermissionReply, UniversalEvent};
use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use futures_util::StreamExt;

use crate::printing::{Format, age, print_structured, print_table};
use crate::workspace::NodeAgentTarget;

/// Consecutive failed (re)connections of `events -f` before it gives up; with the
/// backoff below that is about a minute of a node agent that cannot be reached.
const MAX_RECONNECTS: u32 = 15;
const MAX_BACKOFF: Duration = Duration::from_secs(5);

#[derive(Args, Debug)]
pub struct SessionArgs {
    #[command(flatten)]
    target: NodeAgentTarget,
    /// Output format of create, ls, get, send, reply and end.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: SessionCommand,
}

#[derive(Subcommand, Debug)]
enum SessionCommand {
    /// Start a session with an agent: `agentplane session create s1 --agent claude`.
    Create(CreateArgs),
    /// List the sessions, ended ones too.
    Ls,
    /// Show one session: its state, and what it waits for.
    Get { id: String },
    /// Send a message: it runs as the session's next turn.
    Send { id: String, message: String },
    /// Print a session's events: readable lines, or (--json) the events as they are.
    Events {
        id: String,
        /// Only events after this sequence.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Keep following (over SSE) until the session ends.
        #[arg(short, long)]
        follow: bool,
        /// One universal event a line, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Answer a permission request (--once, --always, --reject) or a question
    /// (--answer, or --reject to decline it).
    Reply(ReplyArgs),
    /// End a session (and stop the processes that feed it).
    End { id: String },
}

#[derive(Args, Debug)]
struct CreateArgs {
    id: String,
    /// claude, codex, opencode, pi, gemini, amp, or mock.
    #[arg(long)]
    agent: String,
    #[command(flatten)]
    session: SessionFlags,
    /// The agent's working directory (on the node agent's machine).
    #[arg(long)]
    cwd: Option<String>,
}

/// What a session is made of: `session create`'s flags, and `acp`'s.
#[derive(Args, Debug, Clone)]
pub struct SessionFlags {
    /// A pinned version of the agent (default: the node agent's pin).
    #[arg(long)]
    pub version: Option<String>,
    /// The agent's own mode (e.g. build, plan).
    #[arg(long)]
    pub agent_mode: Option<String>,
    #[arg(long, value_enum)]
    permission_mode: Option<PermissionModeArg>,
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long)]
    pub variant: Option<String>,
    /// KEY=VALUE for the agent's environment, repeatable.
    #[arg(long = "env", short = 'e')]
    env: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PermissionModeArg {
    Default,
    Plan,
    Bypass,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("decision").required(true).args(["once", "always", "reject", "answer"]))]
struct ReplyArgs {
    id: String,
    /// The permission request's or question's id (from the events, or `session get`).
    request_id: String,
    /// Allow this call.
    #[arg(long)]
    once: bool,
    /// Allow this call and every later call of the same tool.
    #[arg(long)]
    always: bool,
    /// Refuse the call, or decline to answer the question.
    #[arg(long)]
    reject: bool,
    /// An answer, repeatable: one per question asked, or several choices of one question.
    #[arg(long, num_args = 1)]
    answer: Vec<String>,
}

pub async fn run(args: SessionArgs) -> anyhow::Result<i32> {
    let client = args.target.client()?;
    let format = args.output;
    let info = match args.command {
        SessionCommand::Create(create) => client.create_session(&create.id, &create.request()?).await?,
        SessionCommand::Ls => {
            let list = client.list_sessions().await?;
            print_sessions(format, &list, false)?;
            return Ok(0);
        }
        SessionCommand::Get { id } => client.get_session(&id).await?,
        SessionCommand::Send { id, message } => client.send_message(&id, &message).await?,
        SessionCommand::Events { id, offset, follow, json } => return events(&client, &id, offset, follow, json).await,
        SessionCommand::Reply(reply) => reply.send(&client).await?,
        SessionCommand::End { id } => client.end_session(&id).await?,
    };
    print_sessions(format, &[info], true)?;
    Ok(0)
}

impl CreateArgs {
    fn request(&self) -> anyhow::Result<CreateSessionRequest> {
        Ok(CreateSessionRequest { working_dir: self.cwd.clone(), ..self.session.request(&self.agent)? })
    }
}

impl SessionFlags {
    /// The session of `agent` these flags make (no working directory: the caller's to say).
    pub fn request(&self, agent: &str) -> anyhow::Result<CreateSessionRequest> {
        let env = self
            .env
            .iter()
            .map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect::<Option<BTreeMap<_, _>>>()
            .context("--env takes KEY=VALUE")?;
        Ok(CreateSessionRequest {
            agent: agent.to_string(),
            agent_version: self.version.clone(),
            agent_mode: self.agent_mode.clone(),
            permission_mode: self.permission_mode.map(|m| match m {
                PermissionModeArg::Default => PermissionMode::Default,
                PermissionModeArg::Plan => PermissionMode::Plan,
                PermissionModeArg::Bypass => PermissionMode::Bypass,
            }),
            model: self.model.clone(),
            variant: self.variant.clone(),
            working_dir: None,
            env,
            label: None,
            mcp_servers: Vec::new(),
            workspace: None,
        })
    }
}

impl ReplyArgs {
    /// A permission request or a question: the flags say which, and where they do not
    /// (`--reject`), what the session waits for does.
    async fn send(&self, client: &Client) -> anyhow::Result<SessionInfo> {
        let (id, request) = (self.id.as_str(), self.request_id.as_str());
        let permission = match (self.once, self.always, self.reject) {
            (true, _, _) => Some(PermissionReply::Once),
            (_, true, _) => Some(PermissionReply::Always),
            (_, _, true) => Some(PermissionReply::Reject),
            _ => None,
        };
        if [self.once, self.always, self.reject, !self.answer.is_empty()].iter().filter(|b| **b).count() > 1 {
            bail!("give one of --once, --always, --reject or --answer");
        }
        if !self.answer.is_empty() {
            let session = client.get_session(id).await?;
            let asked = session.pending_questions.iter().find(|q| q.id == request).map(|q| q.questions.len());
            let answers = match asked {
                Some(1) | None => vec![self.answer.clone()],
                Some(n) if n == self.answer.len() => self.answer.iter().map(|a| vec![a.clone()]).collect(),
                Some(n) => bail!("question {request:?} asks {n} questions: give one --answer for each"),
            };
            return Ok(client.reply_question(id, request, answers).await?);
        }
        let reply = permission.expect("clap requires one decision");
        if reply == PermissionReply::Reject {
            let session = client.get_session(id).await?;
            if session.pending_questions.iter().any(|q| q.id == request) {
                return Ok(client.reject_question(id, request).await?);
            }
        }
        match client.reply_permission(id, request, reply).await {
            // Not a permission request: maybe a question already declined (a repeat answers the same).
            Err(e) if reply == PermissionReply::Reject && e.code() == Some(ProblemCode::PermissionNotFound) => {
                match client.reject_question(id, request).await {
                    Err(q) if q.code() == Some(ProblemCode::QuestionNotFound) => {
                        bail!("session {id:?} has no permission request or question {request:?}")
                    }
                    other => Ok(other?),
                }
            }
            other => Ok(other?),
        }
    }
}

fn print_sessions(format: Format, list: &[SessionInfo], single: bool) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|s| {
                    let waiting: Vec<&str> = s
                        .pending_permissions
                        .iter()
                        .map(|p| p.id.as_str())
                        .chain(s.pending_questions.iter().map(|q| q.id.as_str()))
                        .collect();
                    vec![
                        s.id.clone(),
                        s.agent.clone(),
                        s.agent_version.clone().unwrap_or_default(),
                        enum_name(&s.state),
                        s.turns_completed.to_string(),
                        s.last_sequence.to_string(),
                        age(s.created_at),
                        waiting.join(","),
                    ]
                })
                .collect();
            print_table(&["ID", "AGENT", "VERSION", "STATE", "TURNS", "EVENTS", "AGE", "WAITING"], &rows);
            if single && let Some(error) = list.first().and_then(|s| s.error.as_ref()) {
                println!("error: {error}");
            }
        }
        _ if single => print_structured(format, &list[0])?,
        _ => print_structured(format, &SessionList { sessions: list.to_vec() })?,
    }
    Ok(())
}

/// How serde names a unit variant (`awaitingInput`, `tool_result`).
fn enum_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The events after `offset`; with `follow`, then the rest over SSE (reconnecting
/// with `Last-Event-ID` when the connection drops) until the session ends.
async fn events(client: &Client, id: &str, offset: u64, follow: bool, json: bool) -> anyhow::Result<i32> {
    // Not locked for the whole run: the lock would be held across awaits.
    let mut out = std::io::stdout();
    let mut last = offset;
    if !follow {
        loop {
            let page = client.session_events(id, &SessionEventsQuery { offset: Some(last), limit: None }).await?;
            if let Some(gap) = &page.gap {
                eprintln!("(events {} to {} are lost)", gap.from, gap.to.saturating_sub(1));
                last = last.max(gap.to.saturating_sub(1));
            }
            for event in &page.events {
                if !print(&mut out, event, id, json)? {
                    return Ok(0);
                }
                last = event.sequence;
            }
            if !page.has_more {
                return Ok(0);
            }
        }
    }
    let mut failures = 0u32;
    loop {
        let resume = (last > 0).then_some(last);
        let mut stream = match client.session_events_sse(id, Some(last), resume).await {
            Ok(stream) => stream,
            // The node agent answered: no point asking again.
            Err(e @ ClientError::Problem(_)) => return Err(e.into()),
            Err(e) => {
                failures = backoff(failures, &e).await?;
                continue;
            }
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(SessionStreamItem::Event(event)) => {
                    failures = 0;
                    last = event.sequence;
                    if !print(&mut out, &event, id, json)? || event.kind() == EventType::SessionEnded {
                        return Ok(0);
                    }
                }
                Ok(SessionStreamItem::Gap(gap)) => {
                    eprintln!("(events {} to {} are lost)", gap.from, gap.to.saturating_sub(1));
                    last = last.max(gap.to.saturating_sub(1));
                }
                Err(e) => {
                    failures = backoff(failures, &e).await?;
                    break;
                }
            }
        }
        // The stream ended without `session.ended`: over if the session is (its end
        // was read before), else the connection dropped.
        match client.get_session(id).await {
            Ok(info) if info.state.is_final() && info.last_sequence <= last => return Ok(0),
            Ok(_) => {}
            Err(e @ ClientError::Problem(_)) => return Err(e.into()),
            Err(e) => failures = backoff(failures, &e).await?,
        }
    }
}

/// Waits before the next connection, longer each time; gives up after [`MAX_RECONNECTS`].
async fn backoff(failures: u32, error: &ClientError) -> anyhow::Result<u32> {
    let failures = failures + 1;
    if failures > MAX_RECONNECTS {
        bail!("gave up following the session after {MAX_RECONNECTS} failed connections: {error}");
    }
    eprintln!("(connection lost: {error}; reconnecting)");
    tokio::time::sleep((Duration::from_millis(100) * 2u32.pow(failures.min(6))).min(MAX_BACKOFF)).await;
    Ok(failures)
}

/// Prints one event; false when the reader went away (`| head`): nothing more to do.
fn print(out: &mut impl Write, event: &UniversalEvent, session: &str, json: bool) -> anyhow::Result<bool> {
    let line = if json {
        serde_json::to_string(event)?
    } else {
        let answer = |id: &str, permission: bool| match permission {
            // Pasted as it is, it runs: one decision, the others named after it.
            true => format!("agentplane session reply {session} {id} --once, or --always, or --reject"),
            false => format!("agentplane session reply {session} {id} --answer ..."),
        };
        match event_lines(event, &answer) {
            Some(line) => line,
            None => return Ok(true),
        }
    };
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing stdout"),
    }
}

/// Where the continuation lines of an event start: under its type, past the sequence
/// number and the time.
const CONTINUATION: &str = "               ";

/// An event as a person reads it, the same in `session events` and `logs session/X`:
/// one line (the sequence, the time, the type and what it says), and the rest of a
/// text or a tool's output on continuation lines indented under the type, in sequence
/// order: a tool call is announced (`item.started`), then asked for and allowed, then
/// `item.completed` when it ran. `None` for what says nothing new: text deltas (the
/// completed item has the text) and items started bare. `answer` gives the command
/// that answers a request (`id`, whether a permission).
pub(crate) fn event_lines(event: &UniversalEvent, answer: &dyn Fn(&str, bool) -> String) -> Option<String> {
    let kind = event.kind().as_str();
    let what = match &event.data {
        EventData::ItemDelta { .. } => return None,
        EventData::ItemStarted { item } if item.text.is_none() && item.tool.is_none() && item.input.is_none() => {
            return None;
        }
        EventData::SessionStarted { agent, agent_session_id, resumed } => {
            let mut what = agent.clone();
            if let Some(native) = agent_session_id {
                what.push_str(&format!(" ({native})"));
            }
            if *resumed {
                what.push_str(" resumed");
            }
            what
        }
        EventData::SessionEnded { reason, error } => match error {
            Some(error) => format!("{}: {error}", enum_name(reason)),
            None => enum_name(reason),
        },
        EventData::TurnStarted { turn } => format!("turn {turn}"),
        EventData::TurnEnded { turn, status, error, .. } => match error {
            Some(error) => format!("turn {turn} {}: {error}", enum_name(status)),
            None => format!("turn {turn} {}", enum_name(status)),
        },
        EventData::ItemStarted { item } | EventData::ItemCompleted { item } => {
            let mut what = enum_name(&item.kind);
            if let Some(role) = item.role {
                what.push_str(&format!(" {}", enum_name(&role)));
            }
            if let Some(tool) = &item.tool {
                what.push_str(&format!(" {tool}"));
            }
            // The status an item has at that point goes without saying.
            let expected = if matches!(event.data, EventData::ItemStarted { .. }) {
                ItemStatus::InProgress
            } else {
                ItemStatus::Completed
            };
            if let Some(status) = item.status.filter(|s| *s != expected) {
                what.push_str(&format!(" [{}]", enum_name(&status)));
            }
            if let Some(text) = &item.text {
                what.push_str(&format!(": {text}"));
            } else if let Some(input) = &item.input {
                what.push_str(&format!(": {input}"));
            }
            if let Some(output) = &item.output {
                what.push('\n');
                what.push_str(output);
            }
            what
        }
        EventData::PermissionRequested(request) => {
            format!("{}: {} {} (answer: {})", request.id, request.tool, request.input, answer(&request.id, true))
        }
        EventData::PermissionResolved { id, reply } => match reply {
            Some(reply) => format!("{id}: {}", enum_name(reply)),
            None => format!("{id}: cancelled"),
        },
        EventData::QuestionRequested(request) => {
            let questions: Vec<String> = request
                .questions
                .iter()
                .map(|q| {
                    if q.options.is_empty() {
                        q.question.clone()
                    } else {
                        format!("{} [{}]", q.question, q.options.join(" / "))
                    }
                })
                .collect();
            format!("{}: {} (answer: {})", request.id, questions.join("; "), answer(&request.id, false))
        }
        EventData::QuestionResolved { id, outcome, answers } => match answers {
            Some(answers) => format!("{id}: {} {answers:?}", enum_name(outcome)),
            None => format!("{id}: {}", enum_name(outcome)),
        },
        EventData::Error { message, code } => match code {
            Some(code) => format!("{message} ({code})"),
            None => message.clone(),
        },
        EventData::AgentUnparsed { reason } => {
            let raw = event.raw.as_deref().unwrap_or_default();
            match reason {
                Some(reason) => format!("{reason}: {raw}"),
                None => raw.to_string(),
            }
        }
    };
    let time = event.time.to_offset(time::UtcOffset::UTC);
    let time = format!("{:02}:{:02}:{:02}", time.hour(), time.minute(), time.second());
    // A line of its own for each line of the text, indented, and no trailing blank.
    let mut lines = what.trim_end().lines();
    let mut out = format!("{:>5} {time} {kind} {}", event.sequence, lines.next().unwrap_or_default());
    for line in lines {
        out.push('\n');
        out.push_str(CONTINUATION);
        out.push_str(line);
    }
    Some(out)
}
