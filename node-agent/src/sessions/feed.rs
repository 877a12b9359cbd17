//! Processes that feed a session: a process started with a `sessionId` shows up in
//! that session as a `tool_result` item (source `daemon`), started when it starts and
//! completed, with its exit and the tail of its output, when it exits. That output
//! then waits in the session's record and is prepended to the message of the next
//! turn the session starts, so that a person can hand the agent what a command
//! printed without pasting it; the turn's user message item keeps the person's own
//! text.
//!
//! The item is one item (`process-<process id>`) of kind `tool_result` from start to
//! end, rather than a `tool_call` followed by a result: nobody called a tool, the
//! node agent only reports what ran.
//!
//! A process that feeds a session does not outlive it: one started as the session
//! ends is stopped at once, and ending the session stops those still running.

use std::sync::Arc;

use serde_json::json;

use super::record::SessionRecord;
use super::session::Session;
use crate::error::{Error, Result};
use crate::model::{CreateProcessRequest, OutputStream};
use crate::output::OutputBuffer;
use crate::process::{Process, ProcessManager, RunState};
use crate::universal::{EventData, EventSource, Item, ItemKind, ItemStatus};

/// Most bytes of a process's output that reach the session: the last ones (what a
/// person reads first after a command ends), enough for a build's errors, small
/// enough for an agent's context.
pub const OUTPUT_CAP: usize = 64 * 1024;
/// Of [`OUTPUT_CAP`], at most this much for stderr (when there is any).
const STDERR_CAP: usize = 16 * 1024;
/// Outputs kept for the next turn; the oldest are dropped past this, so that a
/// session fed by many processes and never sent a message stays bounded (at most
/// this many times [`OUTPUT_CAP`], plus their headers).
pub const MAX_PENDING_OUTPUTS: usize = 16;

/// The item a process is reported as in its session.
fn item_id(process: &Process) -> String {
    format!("process-{}", process.id)
}

/// `command args...`, as a person would type it (arguments with spaces quoted).
fn command_line(process: &Process) -> String {
    std::iter::once(process.command())
        .chain(process.args().iter().map(String::as_str))
        .map(|word| {
            if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
                word.to_string()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `cap` bytes of a stream, as text, and how many bytes before them are
/// not shown.
fn tail(buffer: &OutputBuffer, cap: usize) -> (String, u64) {
    let total = buffer.state().total;
    let read = buffer.read(total.saturating_sub(cap as u64), cap);
    let mut data = read.data.as_slice();
    let mut cut = read.offset;
    // A cut may fall inside a UTF-8 sequence: start at the next character.
    if cut > 0 {
        let skip = data.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count();
        data = &data[skip..];
        cut += skip as u64;
    }
    (String::from_utf8_lossy(data).into_owned(), cut)
}

/// What a process printed, for the item's `output`: stdout (a PTY's terminal), then
/// stderr under a separator line, each with a first line saying how much was cut.
fn output_of(process: &Process) -> String {
    let stderr = process.output(OutputStream::Stderr).ok().filter(|b| b.state().total > 0);
    let stderr_share = stderr.map_or(0, |b| (b.state().total as usize).min(STDERR_CAP));
    let mut text = String::new();
    if let Ok(stdout) = process.output(OutputStream::Stdout) {
        let (shown, cut) = tail(stdout, OUTPUT_CAP - stderr_share);
        if cut > 0 {
            text.push_str(&format!("[{cut} earlier bytes cut]\n"));
        }
        text.push_str(&shown);
    }
    if let Some(stderr) = stderr {
        let (shown, cut) = tail(stderr, stderr_share);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("--- stderr ---\n");
        if cut > 0 {
            text.push_str(&format!("[{cut} earlier bytes cut]\n"));
        }
        text.push_str(&shown);
    }
    text
}

/// `exit 0`, or `killed by SIGTERM`.
fn exit_of(state: RunState) -> String {
    match state {
        RunState::Exited { code: Some(code), .. } => format!("exit {code}"),
        RunState::Exited { signal: Some(signal), .. } => format!("killed by {}", signal.as_str()),
        _ => "exit unknown".to_string(),
    }
}

/// The text prepended to the next turn's message.
fn context_block(command: &str, exit: &str, output: &str) -> String {
    // A fence longer than any run of backticks in the output, so it cannot end early.
    let mut fence = "```".to_string();
    while output.contains(&fence) {
        fence.push('`');
    }
    let newline = if output.is_empty() || output.ends_with('\n') { "" } else { "\n" };
    format!("Output of `{command}` ({exit}):\n{fence}\n{output}{newline}{fence}")
}

impl SessionRecord {
    /// The message delivered to the agent: the outputs waiting for it, then the
    /// person's message.
    pub(super) fn take_process_outputs(&mut self, message: &str) -> String {
        if self.process_outputs.is_empty() {
            return message.to_string();
        }
        let mut delivered: Vec<String> = self.process_outputs.drain(..).collect();
        delivered.push(message.to_string());
        delivered.join("\n\n")
    }
}

impl Session {
    /// Announces a process that feeds this session; `Err(Conflict)` when the session
    /// has ended (the caller then stops the process).
    pub async fn process_started(&self, process: &Process) -> Result<()> {
        let item = Item {
            id: item_id(process),
            kind: ItemKind::ToolResult,
            tool: Some("process".into()),
            text: Some(format!("`{}` is running", command_line(process))),
            input: Some(json!({"command": process.command(), "args": process.args(), "processId": process.id})),
            call_id: Some(process.id.clone()),
            status: Some(ItemStatus::InProgress),
            ..Default::default()
        };
        let started = self
            .log
            .append_with(|batch| {
                let rec = self.record();
                if rec.state.is_final() {
                    return false;
                }
                batch.push(rec.draft(EventSource::Daemon, EventData::ItemStarted { item }));
                true
            })
            .await;
        if started {
            Ok(())
        } else {
            Err(Error::Conflict(format!("session {:?} has ended: no process can feed it", self.id)))
        }
    }

    /// Reports the exit of a process that feeds this session, and keeps its output
    /// for the next turn. Nothing happens once the session has ended.
    pub async fn process_exited(&self, process: &Process) {
        let state = process.run_state();
        let command = command_line(process);
        let exit = exit_of(state);
        let output = output_of(process);
        let (code, signal) = match state {
            RunState::Exited { code, signal, .. } => (code, signal.map(|s| s.as_str())),
            RunState::Running => (None, None),
        };
        let item = Item {
            id: item_id(process),
            kind: ItemKind::ToolResult,
            tool: Some("process".into()),
            text: Some(format!("`{command}` ended ({exit})")),
            input: Some(json!({
                "command": process.command(), "args": process.args(), "processId": process.id,
                "exitCode": code, "signal": signal,
            })),
            call_id: Some(process.id.clone()),
            output: Some(output.clone()),
            status: Some(if code == Some(0) { ItemStatus::Completed } else { ItemStatus::Failed }),
            ..Default::default()
        };
        let block = context_block(&command, &exit, &output);
        let changed = self
            .log
            .append_with(|batch| {
                let mut rec = self.record();
                if rec.state.is_final() {
                    return false;
                }
                if rec.process_outputs.len() == MAX_PENDING_OUTPUTS {
                    rec.process_outputs.pop_front();
                }
                rec.process_outputs.push_back(block);
                batch.push(rec.draft(EventSource::Daemon, EventData::ItemCompleted { item }));
                true
            })
            .await;
        if changed {
            self.persist().await;
        }
    }
}

/// Starts a process; with a session, one that feeds it. The session must be live; one
/// that ends while the process starts stops it again (`conflict`).
pub(super) async fn spawn(
    session: Option<Arc<Session>>,
    processes: &ProcessManager,
    request: CreateProcessRequest,
) -> Result<Arc<Process>> {
    if let Some(session) = &session
        && session.record().state.is_final()
    {
        return Err(Error::Conflict(format!("session {:?} has ended: no process can feed it", session.id)));
    }
    let spawner = processes.clone();
    // Spawning forks and opens a PTY: blocking calls, kept off the async workers.
    let process = tokio::task::spawn_blocking(move || spawner.spawn(request))
        .await
        .map_err(|e| Error::io("spawning", std::io::Error::other(e)))??;
    if let Some(session) = session {
        if let Err(error) = session.process_started(&process).await {
            // The session ended while the process started: it must not outlive it.
            stop(processes, &process).await?;
            return Err(error);
        }
        follow(session, Arc::clone(&process));
    }
    Ok(process)
}

/// Stops the processes still running that feed the session `id` (it has ended).
pub(super) async fn stop_feeding(id: &str, processes: &ProcessManager) {
    let feeding = processes.list_for(None, None, Some(id));
    let stops = feeding.iter().filter(|p| !p.run_state().is_exited()).map(|p| stop(processes, p));
    for stopped in futures_util::future::join_all(stops).await {
        if let Err(error) = stopped {
            tracing::warn!(session = %id, %error, "could not stop a process of an ended session");
        }
    }
}

/// Stops a process as its session's end does: SIGHUP to a terminal's programs (as a
/// terminal closing does), SIGTERM otherwise; SIGKILL after the node agent's stop timeout.
async fn stop(processes: &ProcessManager, process: &Arc<Process>) -> Result<crate::model::ProcessInfo> {
    let signal = if process.is_pty() { nix::sys::signal::Signal::SIGHUP } else { nix::sys::signal::Signal::SIGTERM };
    processes.stop(process, signal, processes.limits().stop_timeout).await
}

/// Reports `process` to `session` until it exits: call after
/// [`Session::process_started`] succeeded.
fn follow(session: Arc<Session>, process: Arc<Process>) {
    tokio::spawn(async move {
        let mut state = process.watch_state();
        // The sender lives as long as the process: an error only means it is gone.
        let _ = state.wait_for(RunState::is_exited).await;
        session.process_exited(&process).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_blocks_fence_the_output_safely() {
        assert_eq!(context_block("echo hi", "exit 0", "hi\n"), "Output of `echo hi` (exit 0):\n```\nhi\n```");
        assert_eq!(context_block("true", "exit 0", ""), "Output of `true` (exit 0):\n```\n```");
        let tricky = context_block("cat x", "exit 1", "a ``` b");
        assert!(tricky.starts_with("Output of `cat x` (exit 1):\n````\na ``` b\n````"), "{tricky}");
    }

    #[test]
    fn tails_keep_the_last_bytes_and_count_what_is_cut() {
        let buffer = OutputBuffer::new(1024, std::time::Duration::from_millis(10));
        buffer.append("héllo world".as_bytes());
        assert_eq!(tail(&buffer, 100), ("héllo world".to_string(), 0));
        // The cut lands inside `é` (2 bytes): the text starts at the next character.
        let (shown, cut) = tail(&buffer, 10);
        assert_eq!((shown.as_str(), cut), ("llo world", 3));
        assert_eq!(tail(&buffer, 5), ("world".to_string(), 7));
    }
}
