//! An agent CLI run as a child that speaks JSON lines over stdio (claude
//! stream-json, codex app-server, pi rpc, gemini, amp): spawn it, write lines, read
//! lines, and when it ends say why, with its exit code and the tail of its stderr.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// Lines of stderr kept for an error message.
const STDERR_LINES: usize = 20;
/// stdout lines read ahead of the driver; the child blocks on its pipe beyond that.
const LINES_AHEAD: usize = 256;

pub struct LineChild {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    program: String,
}

impl LineChild {
    /// Spawns `command` with piped stdio in its own process group, killed if dropped.
    pub fn spawn(mut command: Command) -> Result<LineChild> {
        let program = command.as_std().get_program().to_string_lossy().into_owned();
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
        let mut child = command.spawn().map_err(|source| Error::SpawnFailed { command: program.clone(), source })?;
        crate::reaper::ours(child.id());
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel(LINES_AHEAD);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if line.trim().is_empty() {
                    continue;
                }
                if tx.send(line).await.is_err() {
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&tail);
        let name = program.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                tracing::debug!(agent = %name, "stderr: {line}");
                let mut tail = kept.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(LineChild { stdin: child.stdin.take(), child, lines, stderr: tail, program })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Writes one line (a newline is added).
    pub async fn send_line(&mut self, line: &str) -> Result<()> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(Error::StreamError(format!("{}'s stdin is closed", self.program)));
        };
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        match stdin.write_all(&bytes).await {
            Ok(()) => stdin.flush().await.map_err(|e| Error::StreamError(format!("writing to {}: {e}", self.program))),
            // The child went away: say why, with its code and stderr.
            Err(_) => Err(self.exited().await),
        }
    }

    /// Writes one JSON value as a line.
    pub async fn send(&mut self, value: &serde_json::Value) -> Result<()> {
        self.send_line(&value.to_string()).await
    }

    /// Closes stdin (some CLIs end at EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next non-empty stdout line; `None` once stdout is closed.
    pub async fn next_line(&mut self) -> Option<String> {
        self.lines.recv().await
    }

    /// The last lines of stderr, joined.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// After stdout closed: waits (briefly) for the exit and says how it ended.
    pub async fn exited(&mut self) -> Error {
        let code = match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => None,
        };
        // Let the stderr reader catch the last lines.
        tokio::task::yield_now().await;
        Error::AgentProcessExited { code, stderr_tail: self.stderr_tail() }
    }

    /// Stops the child: SIGTERM to its group, SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        self.stdin = None;
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
            if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                return;
            }
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.child.wait().await;
    }
}
