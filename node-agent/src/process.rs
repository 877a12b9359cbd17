//! The process manager: spawns programs on PTYs or pipes, keeps their output, takes
//! their input, and stops whole process groups.
//!
//! Every blocking call lives on a thread of its own (PTY and pipe reads, stdin
//! writes, `waitpid`), never on the async runtime. A process outlives every client
//! connection; only `stop`, its own exit, or the node agent's shutdown ends it.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use portable_pty::{CommandBuilder, MasterPty, native_pty_system};
use time::OffsetDateTime;
use tokio::sync::{mpsc, watch};

use crate::error::{Error, Result};
use crate::events::EventLog;
use crate::leftovers::ChildRegistry;
use crate::metrics::Metrics;
use crate::model::{
    CreateProcessRequest, LifecycleEventType, OutputStream, ProcessInfo, ProcessStatus, PtySize, SignalTarget,
};
use crate::output::{ChunkIndex, OutputBuffer};

/// Threads here only copy bytes or wait: a small stack is plenty, and with many
/// processes the default 2 MiB per thread would be address space wasted.
const IO_THREAD_STACK: usize = 256 * 1024;
/// Size of one read from a PTY or pipe.
const READ_CHUNK: usize = 64 * 1024;
/// Input chunks queued per process. Bounded so that a program that stops reading its
/// input pushes back on the clients typing into it instead of growing memory.
const STDIN_QUEUE: usize = 64;
/// After the program exits, how long to let the readers drain what it wrote last
/// before the exit is announced (a background child may keep the pipe open forever).
const EXIT_DRAIN: Duration = Duration::from_millis(200);

/// How long SIGKILLed processes get to disappear before a stop gives up on them (only
/// a process in uninterruptible sleep takes longer).
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Limits and defaults of the process manager.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most processes running at once; more answers `limit_exceeded`.
    pub max_running: usize,
    /// Most exited records kept; the oldest are forgotten past this.
    pub max_exited: usize,
    /// Bytes retained per output stream.
    pub output_buffer_bytes: usize,
    /// How long the output writer waits for a live client that fell behind before overwriting.
    pub slow_client_timeout: Duration,
    /// Default time between the stop signal and SIGKILL.
    pub stop_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_running: 256,
            max_exited: 256,
            output_buffer_bytes: 1024 * 1024,
            slow_client_timeout: Duration::from_millis(500),
            stop_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunState {
    Running,
    Exited { code: Option<i32>, signal: Option<Signal>, at: OffsetDateTime },
}

impl RunState {
    pub fn is_exited(&self) -> bool {
        matches!(self, RunState::Exited { .. })
    }
}

pub struct Process {
    pub id: String,
    seq: u64,
    command: String,
    args: Vec<String>,
    cwd: String,
    tag: Option<String>,
    label: Option<String>,
    annotations: BTreeMap<String, String>,
    session_id: Option<String>,
    created_at: OffsetDateTime,
    pid: u32,
    pty: Option<Mutex<PtyHandle>>,
    primary: Arc<OutputBuffer>,
    stderr: Option<Arc<OutputBuffer>>,
    stdin: Mutex<Option<mpsc::Sender<Bytes>>>,
    state: watch::Sender<RunState>,
}

struct PtyHandle {
    master: Box<dyn MasterPty + Send>,
    size: PtySize,
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn is_pty(&self) -> bool {
        self.pty.is_some()
    }

    /// The session this process feeds, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    pub fn args(&self) -> &[String] {
        &self.args
    }

    pub fn run_state(&self) -> RunState {
        *self.state.borrow()
    }

    pub fn watch_state(&self) -> watch::Receiver<RunState> {
        self.state.subscribe()
    }

    fn pgid(&self) -> Pid {
        // Both spawn paths make the child the leader of a new process group.
        Pid::from_raw(self.pid as i32)
    }

    /// The output buffer of a stream; `stdout` and `pty` both name a PTY's terminal.
    pub fn output(&self, stream: OutputStream) -> Result<&Arc<OutputBuffer>> {
        match (stream, self.is_pty()) {
            (OutputStream::Stdout | OutputStream::Pty, true) | (OutputStream::Stdout, false) => Ok(&self.primary),
            (OutputStream::Stderr, false) => Ok(self.stderr.as_ref().expect("pipe processes keep stderr")),
            (OutputStream::Stderr, true) => Err(Error::InvalidRequest(format!(
                "process {:?} runs on a PTY: its stdout and stderr are one stream, `pty`",
                self.id
            ))),
            (OutputStream::Pty, false) => {
                Err(Error::InvalidRequest(format!("process {:?} has no PTY: ask for `stdout` or `stderr`", self.id)))
            }
        }
    }

    pub fn info(&self) -> ProcessInfo {
        let state = self.run_state();
        let (status, exit_code, signal, exited_at) = match state {
            RunState::Running => (ProcessStatus::Running, None, None, None),
            RunState::Exited { code, signal, at } => {
                (ProcessStatus::Exited, code, signal.map(|s| s.as_str().to_string()), Some(at))
            }
        };
        ProcessInfo {
            id: self.id.clone(),
            tag: self.tag.clone(),
            label: self.label.clone(),
            annotations: self.annotations.clone(),
            command: self.command.clone(),
            args: self.args.clone(),
            cwd: self.cwd.clone(),
            pid: self.pid,
            pty: self.is_pty(),
            size: self.pty.as_ref().map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).size),
            stdin: !state.is_exited() && self.stdin.lock().unwrap_or_else(|e| e.into_inner()).is_some(),
            status,
            exit_code,
            signal,
            created_at: self.created_at,
            exited_at,
            output_offset: self.primary.state().total,
            stderr_offset: self.stderr.as_ref().map(|b| b.state().total),
            session_id: self.session_id.clone(),
        }
    }

    /// Queues bytes for the program's input; waits while the queue is full.
    pub async fn write_input(&self, data: Bytes) -> Result<()> {
        if self.run_state().is_exited() {
            return Err(Error::ProcessNotRunning(self.id.clone()));
        }
        let sender = self.stdin.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(sender) = sender else {
            return Err(Error::StdinClosed(self.id.clone()));
        };
        if data.is_empty() {
            return Ok(());
        }
        sender.send(data).await.map_err(|_| Error::ProcessNotRunning(self.id.clone()))
    }

    /// Closes the program's input once what is queued has been written.
    pub fn close_input(&self) -> Result<()> {
        match self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(_) => Ok(()),
            None => Err(Error::StdinClosed(self.id.clone())),
        }
    }

    pub fn resize(&self, size: PtySize) -> Result<()> {
        size.validate().map_err(Error::InvalidRequest)?;
        let Some(pty) = &self.pty else {
            return Err(Error::InvalidRequest(format!("process {:?} has no PTY to resize", self.id)));
        };
        if self.run_state().is_exited() {
            return Err(Error::ProcessNotRunning(self.id.clone()));
        }
        let mut pty = pty.lock().unwrap_or_else(|e| e.into_inner());
        pty.master
            .resize(to_portable(size))
            .map_err(|e| Error::io("resizing the terminal", std::io::Error::other(e.to_string())))?;
        pty.size = size;
        Ok(())
    }

    pub fn signal(&self, signal: Signal, target: SignalTarget) -> Result<()> {
        if self.run_state().is_exited() {
            return Err(Error::ProcessNotRunning(self.id.clone()));
        }
        let group = match target {
            SignalTarget::Group => self.pgid(),
            SignalTarget::Foreground => {
                let Some(pty) = &self.pty else {
                    return Err(Error::InvalidRequest(format!(
                        "process {:?} has no PTY, so no foreground group: use target \"group\"",
                        self.id
                    )));
                };
                let leader = pty.lock().unwrap_or_else(|e| e.into_inner()).master.process_group_leader();
                match leader {
                    Some(pgid) if pgid > 0 => Pid::from_raw(pgid),
                    _ => self.pgid(),
                }
            }
        };
        match killpg(group, signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(Error::io(format!("sending {signal} to process group {group}"), e.into())),
        }
    }

    /// What a stop must reach. A terminal's shell puts each job in a process group of
    /// its own, so for a PTY that is the whole session (as a hangup reaches every job);
    /// otherwise the process group the node agent started.
    fn stop_scope(&self) -> Scope {
        let leader = self.pgid().as_raw();
        if self.is_pty() { Scope::Session(leader) } else { Scope::Group(leader) }
    }

    /// The process groups a stop must signal: the leader's, and for a terminal every
    /// group of its session. Blocking (reads /proc for a terminal).
    fn stop_groups(&self) -> Vec<i32> {
        let leader = self.pgid().as_raw();
        match self.stop_scope() {
            Scope::Group(_) => vec![leader],
            scope @ Scope::Session(_) => {
                let mut groups = groups_of(&live_members(scope));
                if !groups.contains(&leader) {
                    groups.push(leader);
                }
                groups
            }
        }
    }
}

/// The distinct process groups of some (pid, group) members.
pub(crate) fn groups_of(members: &[(i32, i32)]) -> Vec<i32> {
    let mut groups: Vec<i32> = members.iter().map(|&(_, group)| group).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

pub(crate) fn signal_groups(groups: &[i32], signal: Signal) {
    for &group in groups {
        let _ = killpg(Pid::from_raw(group), signal);
    }
}

/// [`Process::stop_groups`] off the async runtime.
async fn stop_groups(process: &Arc<Process>) -> Vec<i32> {
    let process = Arc::clone(process);
    let leader = process.pgid().as_raw();
    tokio::task::spawn_blocking(move || process.stop_groups()).await.unwrap_or_else(|_| vec![leader])
}

/// A process group, or a session (every group in it).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope {
    Group(i32),
    Session(i32),
}

/// What is left alive of a scope once its leader is gone. A process group is first
/// asked of the kernel (`kill(-group, 0)`): no process has it (`ESRCH`), the usual end
/// of a stop, costs one call, where reading /proc costs a read of every process's
/// `stat`, and stopping each of 1,000 processes that way read /proc a thousand times.
/// Only when the group still has a member, which may be a zombie, is /proc read (off
/// the async runtime).
async fn members_left(scope: Scope) -> Vec<(i32, i32)> {
    if let Scope::Group(group) = scope
        && killpg(Pid::from_raw(group), None) == Err(Errno::ESRCH)
    {
        return Vec::new();
    }
    tokio::task::spawn_blocking(move || live_members(scope)).await.unwrap_or_default()
}

/// Live (not zombie) processes in a scope, as (pid, process group), read from /proc.
pub(crate) fn live_members(scope: Scope) -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the command name, which is in parentheses and may hold anything.
        let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(group), Some(session)) = (
            fields.first(),
            fields.get(2).and_then(|f| f.parse::<i32>().ok()),
            fields.get(3).and_then(|f| f.parse::<i32>().ok()),
        ) else {
            continue;
        };
        let inside = match scope {
            Scope::Group(g) => group == g,
            Scope::Session(s) => session == s,
        };
        if inside && !matches!(*state, "Z" | "X") {
            members.push((pid, group));
        }
    }
    members
}

fn to_portable(size: PtySize) -> portable_pty::PtySize {
    portable_pty::PtySize { rows: size.rows, cols: size.cols, pixel_width: 0, pixel_height: 0 }
}

struct Shared {
    processes: Mutex<HashMap<String, Arc<Process>>>,
    running: AtomicUsize,
    next_seq: AtomicU64,
    events: EventLog,
    limits: Limits,
    children: Option<ChildRegistry>,
    metrics: Metrics,
}

/// Owns every process of the node agent. Cheap to clone.
#[derive(Clone)]
pub struct ProcessManager {
    shared: Arc<Shared>,
}

impl ProcessManager {
    pub fn new(limits: Limits) -> Self {
        Self::with_registry(limits, None)
    }

    /// A manager that marks its children for `children`, so a node agent started after
    /// a crash can kill what this one left running.
    pub fn with_registry(limits: Limits, children: Option<ChildRegistry>) -> Self {
        Self::metered(limits, children, Metrics::new())
    }

    /// [`ProcessManager::with_registry`], counting into `metrics`.
    pub fn metered(limits: Limits, children: Option<ChildRegistry>, metrics: Metrics) -> Self {
        ProcessManager {
            shared: Arc::new(Shared {
                processes: Mutex::new(HashMap::new()),
                running: AtomicUsize::new(0),
                next_seq: AtomicU64::new(0),
                // Enough history for a client reconnecting after a short outage.
                events: EventLog::new(4096),
                limits,
                children,
                metrics,
            }),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    pub fn events(&self) -> &EventLog {
        &self.shared.events
    }

    pub fn spawn(&self, request: CreateProcessRequest) -> Result<Arc<Process>> {
        validate(&request)?;
        let shared = &self.shared;
        let id = match &request.id {
            Some(id) => id.clone(),
            None => new_id(),
        };
        if self.lock().contains_key(&id) {
            return Err(Error::ProcessAlreadyExists(id));
        }
        let running = shared.running.fetch_add(1, Ordering::SeqCst);
        if running >= shared.limits.max_running {
            shared.running.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::LimitExceeded(format!(
                "{running} processes are running, the limit is {} (--max-processes)",
                shared.limits.max_running
            )));
        }
        let result = self.start(id, request);
        if result.is_err() {
            shared.running.fetch_sub(1, Ordering::SeqCst);
        }
        result
    }

    fn start(&self, id: String, request: CreateProcessRequest) -> Result<Arc<Process>> {
        let limits = &self.shared.limits;
        // Set before the spawn: no moment at which a child runs unmarked.
        let mark = self.shared.children.as_ref().map(|c| c.mark());
        let cwd = match &request.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir()
                .map_err(|e| Error::io("reading the node agent's working directory", e))?
                .to_string_lossy()
                .into_owned(),
        };
        if !Path::new(&cwd).is_dir() {
            return Err(Error::SpawnFailed {
                command: request.command.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("working directory {cwd:?} does not exist"),
                ),
            });
        }
        let new_buffer = || OutputBuffer::new(limits.output_buffer_bytes, limits.slow_client_timeout);
        let primary = new_buffer();
        let (state_tx, _) = watch::channel(RunState::Running);
        let (stdin_tx, stdin_rx) = mpsc::channel(STDIN_QUEUE);
        let mut readers = Vec::new();
        let mut guard = SpawnGuard(None);

        let (pid, pty, stderr, stdin) = if let Some(size) = request.pty {
            let pair = native_pty_system()
                .openpty(to_portable(size))
                .map_err(|e| Error::io("opening a PTY", std::io::Error::other(e.to_string())))?;
            let mut cmd = CommandBuilder::new(&request.command);
            cmd.args(&request.args);
            cmd.cwd(&cwd);
            cmd.env_remove(crate::TOKEN_VARIABLE);
            for (key, value) in &request.env {
                cmd.env(key, value);
            }
            if let Some((key, value)) = mark {
                cmd.env(key, value);
            }
            if !request.env.contains_key("TERM") {
                cmd.env("TERM", "xterm-256color");
            }
            let child = pair.slave.spawn_command(cmd).map_err(|e| Error::SpawnFailed {
                command: request.command.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            // Only the child may hold the slave side, so its exit closes the terminal.
            drop(pair.slave);
            let pid = child
                .process_id()
                .ok_or_else(|| Error::io("spawning on a PTY", std::io::Error::other("the child has no pid")))?;
            // We reap it ourselves with waitpid, which reports the exact signal.
            drop(child);
            crate::reaper::ours(Some(pid));
            guard.arm(pid);
            let reader = pair.master.try_clone_reader().map_err(pty_io("cloning the PTY reader"))?;
            let writer = pair.master.take_writer().map_err(pty_io("taking the PTY writer"))?;
            readers.push(spawn_reader(
                &id,
                "pty",
                reader,
                Arc::clone(&primary),
                self.shared.metrics.count_output("stdout"),
            )?);
            spawn_writer(&id, writer, stdin_rx)?;
            let pty = Mutex::new(PtyHandle { master: pair.master, size });
            (pid, Some(pty), None, Some(stdin_tx))
        } else {
            use std::os::unix::process::CommandExt;
            let mut cmd = std::process::Command::new(&request.command);
            cmd.args(&request.args)
                .current_dir(&cwd)
                .env_remove(crate::TOKEN_VARIABLE)
                .envs(&request.env)
                .envs(mark)
                .stdin(if request.stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
            let mut child =
                cmd.spawn().map_err(|source| Error::SpawnFailed { command: request.command.clone(), source })?;
            crate::reaper::ours(Some(child.id()));
            guard.arm(child.id());
            let stderr = new_buffer();
            // The order and time of both streams' chunks, for reading them interleaved.
            let index = ChunkIndex::new(limits.output_buffer_bytes, 2);
            primary.record_in(&index, OutputStream::Stdout);
            stderr.record_in(&index, OutputStream::Stderr);
            let out = child.stdout.take().expect("stdout is piped");
            let err = child.stderr.take().expect("stderr is piped");
            readers.push(spawn_pipe_reader(
                &id,
                [out.into(), err.into()],
                [Arc::clone(&primary), Arc::clone(&stderr)],
                [self.shared.metrics.count_output("stdout"), self.shared.metrics.count_output("stderr")],
            )?);
            let stdin = match child.stdin.take() {
                Some(pipe) => {
                    spawn_writer(&id, Box::new(pipe), stdin_rx)?;
                    Some(stdin_tx)
                }
                None => None,
            };
            (child.id(), None, Some(stderr), stdin)
        };

        let process = Arc::new(Process {
            id: id.clone(),
            seq: self.shared.next_seq.fetch_add(1, Ordering::SeqCst),
            command: request.command,
            args: request.args,
            cwd,
            tag: request.tag,
            label: request.label,
            annotations: request.annotations,
            session_id: request.session_id,
            created_at: OffsetDateTime::now_utc(),
            pid,
            pty,
            primary,
            stderr,
            stdin: Mutex::new(stdin),
            state: state_tx,
        });
        // Registered and announced as one step, so no event about it can precede `created`.
        let registered = self.shared.events.publish_with(LifecycleEventType::ProcessCreated, || {
            let mut processes = self.lock();
            if processes.contains_key(&id) {
                return None;
            }
            processes.insert(id.clone(), Arc::clone(&process));
            Some(process.info())
        });
        if registered.is_none() {
            // Lost a race with a create of the same id: this one must not run (the
            // guard kills and reaps it).
            return Err(Error::ProcessAlreadyExists(id));
        }
        if let Err(e) = self.spawn_waiter(Arc::clone(&process), readers) {
            // No thread to reap it with: the guard kills it, and the record goes too.
            if self.lock().remove(&id).is_some() {
                self.shared.events.publish(LifecycleEventType::ProcessDeleted, process.info());
            }
            return Err(e);
        }
        // The waiter thread owns the child now: it reaps it whatever happens next.
        guard.disarm();

        // The label (a controller's `Process/ns/name`) is what people know it by;
        // quoted, as it is not checked for line breaks.
        let label = process.label.as_deref().unwrap_or_default();
        tracing::info!(process = %id, ?label, pid, command = %process.command, pty = process.is_pty(), "process started");
        Ok(process)
    }

    fn spawn_waiter(&self, process: Arc<Process>, readers: Vec<std::sync::mpsc::Receiver<()>>) -> Result<()> {
        let manager = self.clone();
        std::thread::Builder::new()
            .name(format!("wait-{}", process.id))
            .stack_size(IO_THREAD_STACK)
            .spawn(move || {
                let (code, signal) = wait_for_exit(process.pid);
                let deadline = std::time::Instant::now() + EXIT_DRAIN;
                for done in readers {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let _ = done.recv_timeout(left);
                }
                // The program is gone: input has nowhere to go.
                process.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
                let exited = RunState::Exited { code, signal, at: OffsetDateTime::now_utc() };
                manager.shared.running.fetch_sub(1, Ordering::SeqCst);
                // The state change and its event as one step: whoever sees the process
                // exited (and deletes it, say) publishes after `process.exited`.
                manager.shared.events.publish_with(LifecycleEventType::ProcessExited, || {
                    process.state.send_replace(exited);
                    Some(process.info())
                });
                let label = process.label.as_deref().unwrap_or_default();
                tracing::info!(process = %process.id, ?label, exit_code = ?code, signal = ?signal, "process exited");
                manager.prune_exited();
            })
            .map_err(|e| Error::io("starting the wait thread", e))?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Process>>> {
        self.shared.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Finds a process by id, or else the newest one with that tag.
    pub fn get(&self, id_or_tag: &str) -> Result<Arc<Process>> {
        let processes = self.lock();
        if let Some(process) = processes.get(id_or_tag) {
            return Ok(Arc::clone(process));
        }
        processes
            .values()
            .filter(|p| p.tag.as_deref() == Some(id_or_tag))
            .max_by_key(|p| p.seq)
            .cloned()
            .ok_or_else(|| Error::ProcessNotFound(id_or_tag.to_string()))
    }

    /// Processes in the order they were created.
    pub fn list(&self, tag: Option<&str>, pty: Option<bool>) -> Vec<Arc<Process>> {
        self.list_for(tag, pty, None)
    }

    /// [`ProcessManager::list`], also filtered by the session a process feeds.
    pub fn list_for(&self, tag: Option<&str>, pty: Option<bool>, session: Option<&str>) -> Vec<Arc<Process>> {
        let mut list: Vec<_> = self
            .lock()
            .values()
            .filter(|p| tag.is_none_or(|t| p.tag.as_deref() == Some(t)))
            .filter(|p| pty.is_none_or(|want| p.is_pty() == want))
            .filter(|p| session.is_none_or(|s| p.session_id.as_deref() == Some(s)))
            .cloned()
            .collect();
        list.sort_by_key(|p| p.seq);
        list
    }

    pub fn publish_updated(&self, process: &Process) {
        self.shared.events.publish(LifecycleEventType::ProcessUpdated, process.info());
    }

    /// Stops a process: `signal` to its whole group (a terminal: to every group of its
    /// session), SIGKILL to whatever is left of them after `timeout`. Returns once the
    /// program has exited and nothing of it is left.
    pub async fn stop(&self, process: &Arc<Process>, signal: Signal, timeout: Duration) -> Result<ProcessInfo> {
        if process.run_state().is_exited() {
            return Ok(process.info());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let scope = process.stop_scope();
        let groups = stop_groups(process).await;
        signal_groups(&groups, signal);
        // A stopped process (a job suspended with ^Z, or by reading a terminal it does
        // not own) acts on the stop signal only once continued, as systemd also knows.
        if !matches!(signal, Signal::SIGKILL | Signal::SIGCONT) {
            signal_groups(&groups, Signal::SIGCONT);
        }
        let mut state = process.watch_state();
        if tokio::time::timeout_at(deadline, state.wait_for(RunState::is_exited)).await.is_err() {
            tracing::info!(process = %process.id, "stop timeout passed; killing what is left");
            // Looked up again: the shell may have started jobs since.
            signal_groups(&stop_groups(process).await, Signal::SIGKILL);
            let _ = state.wait_for(RunState::is_exited).await;
        }
        // The leader is gone; what it left behind gets until the deadline too. Nothing
        // announces a process group emptying, so /proc is looked at with a backoff.
        let mut delay = Duration::from_millis(2);
        let mut killed_at: Option<tokio::time::Instant> = None;
        loop {
            let left = members_left(scope).await;
            if left.is_empty() {
                break;
            }
            let now = tokio::time::Instant::now();
            match killed_at {
                None if now >= deadline => {
                    tracing::info!(process = %process.id, left = left.len(), "killing processes left behind");
                    signal_groups(&groups_of(&left), Signal::SIGKILL);
                    // SIGKILL lands asynchronously: answer once they are really gone.
                    killed_at = Some(now);
                }
                Some(at) if now >= at + KILL_GRACE => {
                    tracing::warn!(process = %process.id, left = left.len(), "processes outlived SIGKILL (uninterruptible sleep?)");
                    break;
                }
                _ => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(100));
        }
        Ok(process.info())
    }

    /// Forgets an exited process.
    pub fn purge(&self, process: &Arc<Process>) -> Result<()> {
        if !process.run_state().is_exited() {
            return Err(Error::InvalidRequest(format!(
                "process {:?} is still running: stop it before purging",
                process.id
            )));
        }
        if self.lock().remove(&process.id).is_some() {
            self.shared.events.publish(LifecycleEventType::ProcessDeleted, process.info());
        }
        Ok(())
    }

    fn prune_exited(&self) {
        let removed: Vec<Arc<Process>> = {
            let mut processes = self.lock();
            let mut exited: Vec<_> =
                processes.values().filter(|p| p.run_state().is_exited()).map(|p| (p.seq, p.id.clone())).collect();
            if exited.len() <= self.shared.limits.max_exited {
                return;
            }
            exited.sort();
            let excess = exited.len() - self.shared.limits.max_exited;
            exited[..excess].iter().filter_map(|(_, id)| processes.remove(id)).collect()
        };
        for process in removed {
            self.shared.events.publish(LifecycleEventType::ProcessDeleted, process.info());
        }
    }

    /// SIGKILL to everything still running, at once and without waiting: for a teardown
    /// that cannot wait for [`ProcessManager::shutdown`] (an embedding being dropped).
    pub fn kill_all(&self) {
        for process in self.running() {
            signal_groups(&process.stop_groups(), Signal::SIGKILL);
        }
    }

    fn running(&self) -> Vec<Arc<Process>> {
        self.list(None, None).into_iter().filter(|p| !p.run_state().is_exited()).collect()
    }

    /// Stops every running process (for the node agent's shutdown).
    pub async fn shutdown(&self, timeout: Duration) {
        let running = self.running();
        if running.is_empty() {
            return;
        }
        tracing::info!(count = running.len(), "stopping processes");
        let stops = running.iter().map(|p| {
            let signal = if p.is_pty() { Signal::SIGHUP } else { Signal::SIGTERM };
            self.stop(p, signal, timeout)
        });
        futures_util::future::join_all(stops).await;
    }
}

/// Kills and reaps a child whose start failed half-way (a thread or a descriptor could
/// not be had), so that nothing runs that the node agent does not know about.
struct SpawnGuard(Option<u32>);

impl SpawnGuard {
    fn arm(&mut self, pid: u32) {
        self.0 = Some(pid);
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for SpawnGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = std::thread::Builder::new().name("reap".into()).spawn(move || wait_for_exit(pid));
        }
    }
}

/// portable-pty reports errors as `anyhow::Error`; keep their text.
fn pty_io<E: std::fmt::Display>(context: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::io(context, std::io::Error::other(e.to_string()))
}

/// Annotations are metadata, not storage: small enough that listing many processes stays cheap.
const MAX_ANNOTATIONS: usize = 64;
const MAX_ANNOTATION_BYTES: usize = 16 * 1024;

fn validate(request: &CreateProcessRequest) -> Result<()> {
    if request.command.is_empty() {
        return Err(Error::InvalidRequest("`command` must not be empty".into()));
    }
    if let Some(id) = &request.id {
        let ok = !id.is_empty()
            && id.len() <= 63
            && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !ok {
            return Err(Error::InvalidRequest(format!(
                "id {id:?} is invalid: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )));
        }
    }
    if let Some(size) = &request.pty {
        size.validate().map_err(Error::InvalidRequest)?;
    }
    let annotation_bytes: usize = request.annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if request.annotations.len() > MAX_ANNOTATIONS || annotation_bytes > MAX_ANNOTATION_BYTES {
        return Err(Error::InvalidRequest(format!(
            "annotations are limited to {MAX_ANNOTATIONS} entries and {MAX_ANNOTATION_BYTES} bytes in all"
        )));
    }
    if request.annotations.keys().any(|k| k.is_empty()) {
        return Err(Error::InvalidRequest("an annotation key must not be empty".into()));
    }
    for key in request.env.keys() {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(Error::InvalidRequest(format!("environment variable name {key:?} is invalid")));
        }
    }
    Ok(())
}

fn new_id() -> String {
    format!("p-{}", crate::random::hex(6))
}

fn spawn_reader(
    id: &str,
    stream: &str,
    mut source: impl Read + Send + 'static,
    buffer: Arc<OutputBuffer>,
    written: prometheus_client::metrics::counter::Counter,
) -> Result<std::sync::mpsc::Receiver<()>> {
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("read-{stream}-{id}"))
        .stack_size(IO_THREAD_STACK)
        .spawn(move || {
            let mut chunk = vec![0u8; READ_CHUNK];
            loop {
                match source.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        buffer.append(&chunk[..n]);
                        written.inc_by(n as u64);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // EIO: the PTY's last slave fd closed. Anything else also ends the stream.
                    Err(_) => break,
                }
            }
            buffer.close();
            let _ = done_tx.send(());
        })
        .map_err(|e| Error::io("starting the output reader thread", e))?;
    Ok(done_rx)
}

/// Reads a pipe process's stdout and stderr on one thread, so that their chunks reach
/// the index in the order this thread saw them become readable. With a thread each,
/// the order was whichever the scheduler ran first: a line printed later on stderr
/// could be recorded before an earlier one on stdout. Streams found readable at the
/// same wake-up have no known order between them; stdout's chunk is taken first, one
/// chunk each, so neither stream can hold the other back.
fn spawn_pipe_reader(
    id: &str,
    sources: [std::os::fd::OwnedFd; 2],
    buffers: [Arc<OutputBuffer>; 2],
    written: [prometheus_client::metrics::counter::Counter; 2],
) -> Result<std::sync::mpsc::Receiver<()>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("read-pipes-{id}"))
        .stack_size(IO_THREAD_STACK)
        .spawn(move || {
            let mut sources = sources.map(|fd| Some(std::fs::File::from(fd)));
            let mut chunk = vec![0u8; READ_CHUNK];
            loop {
                let open: Vec<usize> = (0..2).filter(|&i| sources[i].is_some()).collect();
                let ready: Vec<usize> = {
                    let mut fds: Vec<PollFd> = open
                        .iter()
                        .filter_map(|&i| sources[i].as_ref())
                        .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
                        .collect();
                    if fds.is_empty() {
                        break;
                    }
                    match poll(&mut fds, PollTimeout::NONE) {
                        Ok(_) => {}
                        Err(Errno::EINTR) => continue,
                        Err(e) => {
                            tracing::error!(error = %e, "polling a process's output pipes failed");
                            break;
                        }
                    }
                    // POLLHUP and POLLERR count as ready: the read sees the end.
                    open.iter()
                        .zip(&fds)
                        .filter(|(_, fd)| fd.revents().is_some_and(|r| !r.is_empty()))
                        .map(|(&i, _)| i)
                        .collect()
                };
                for i in ready {
                    let Some(source) = sources[i].as_mut() else { continue };
                    match source.read(&mut chunk) {
                        Ok(0) => sources[i] = None,
                        Ok(n) => {
                            buffers[i].append(&chunk[..n]);
                            written[i].inc_by(n as u64);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => sources[i] = None,
                    }
                    if sources[i].is_none() {
                        buffers[i].close();
                    }
                }
            }
            for buffer in &buffers {
                buffer.close();
            }
            let _ = done_tx.send(());
        })
        .map_err(|e| Error::io("starting the output reader thread", e))?;
    Ok(done_rx)
}

fn spawn_writer(id: &str, mut sink: Box<dyn Write + Send>, mut input: mpsc::Receiver<Bytes>) -> Result<()> {
    std::thread::Builder::new()
        .name(format!("write-{id}"))
        .stack_size(IO_THREAD_STACK)
        .spawn(move || {
            while let Some(data) = input.blocking_recv() {
                if sink.write_all(&data).and_then(|()| sink.flush()).is_err() {
                    break;
                }
            }
            // Dropping the sink closes a pipe, or sends ^D to a PTY.
        })
        .map_err(|e| Error::io("starting the input writer thread", e))?;
    Ok(())
}

fn wait_for_exit(pid: u32) -> (Option<i32>, Option<Signal>) {
    loop {
        match waitpid(Pid::from_raw(pid as i32), None) {
            Ok(WaitStatus::Exited(_, code)) => return (Some(code), None),
            Ok(WaitStatus::Signaled(_, signal, _)) => return (None, Some(signal)),
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::error!(pid, error = %e, "waitpid failed");
                return (None, None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use nix::sys::wait::{Id, WaitPidFlag, waitid};

    use super::*;

    /// What is left of a process group: its live member; then nothing once that member
    /// is a zombie (which the kernel still counts in the group, so /proc is read); then
    /// nothing once it is reaped (which the kernel answers alone).
    #[tokio::test]
    async fn a_group_is_left_while_a_member_lives_and_not_once_it_is_a_zombie_or_gone() {
        let mut child = std::process::Command::new("sleep").arg("60").process_group(0).spawn().expect("sleep");
        let group = child.id() as i32;
        assert_eq!(members_left(Scope::Group(group)).await, vec![(group, group)]);

        killpg(Pid::from_raw(group), Signal::SIGKILL).expect("kill");
        // Waits for its exit without reaping it: a zombie from here on.
        waitid(Id::Pid(Pid::from_raw(group)), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT).expect("waitid");
        assert_eq!(killpg(Pid::from_raw(group), None), Ok(()), "the kernel still counts the zombie");
        assert_eq!(members_left(Scope::Group(group)).await, vec![]);

        child.wait().expect("reaped");
        assert_eq!(killpg(Pid::from_raw(group), None), Err(Errno::ESRCH));
        assert_eq!(members_left(Scope::Group(group)).await, vec![]);
    }
}
