//! A real node agent on a loopback port, and a terminal client that reads its
//! WebSocket the way a person's terminal would. Waits are on bytes and events; the
//! timeouts only turn a hang into a failure.

#![allow(dead_code)]

use std::time::Duration;

use agentplane_node_agent::client::{Client, TerminalSocket};
use agentplane_node_agent::model::{ConnectQuery, ControlMessage, CreateProcessRequest, ProcessInfo, PtySize};
use agentplane_node_agent::resources::ResourceSource;
use agentplane_node_agent::{Config, Limits, Server, SessionOptions};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// Long enough for a loaded CI machine; a correct run never gets near it.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub const TOKEN: &str = "test-token-0123456789";

pub struct TestServer {
    pub url: String,
    /// `/metrics` without the token, as `--metrics-listen` serves it.
    pub metrics_url: String,
    processes: agentplane_node_agent::process::ProcessManager,
    pub client: Client,
    pub shutdown: CancellationToken,
    pub task: Option<tokio::task::JoinHandle<agentplane_node_agent::Result<()>>>,
    data: tempfile::TempDir,
    options: SessionOptions,
}

/// Where the tests install the real agents' CLIs: one directory for every test
/// binary of a build, so that each pinned version is fetched and unpacked once.
pub fn shared_agents_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("agents")
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(Limits::default()).await
    }

    pub async fn start_with(limits: Limits) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), limits, SessionOptions::default(), None).await
    }

    pub async fn start_with_sessions(options: SessionOptions) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), Limits::default(), options, None).await
    }

    /// A node agent that serves `/v1/resources` from `source`, as `agentplane up`'s does.
    pub async fn start_with_resources(source: std::sync::Arc<dyn ResourceSource>) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), Limits::default(), SessionOptions::default(), Some(source)).await
    }

    /// A node agent that installs agents into [`shared_agents_dir`].
    pub async fn start_with_agents() -> Self {
        Self::start_with_sessions(SessionOptions { agents_dir: Some(shared_agents_dir()), ..SessionOptions::default() })
            .await
    }

    /// Stops this node agent and starts another on the same data directory (and a new port).
    pub async fn restart(self) -> Self {
        self.restart_with(|_| {}).await
    }

    /// [`TestServer::restart`], calling `between` with the data directory while no node
    /// agent has it (to plant what an older or crashed node agent would have left).
    pub async fn restart_with(mut self, between: impl FnOnce(&std::path::Path)) -> Self {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(PATIENCE, task).await.expect("the server stops").unwrap().unwrap();
        }
        let data = std::mem::replace(&mut self.data, tempfile::tempdir().unwrap());
        // The old node agent's hold on the data directory goes with it, as with a process exiting.
        let options = self.options.clone();
        drop(self);
        between(&data.path().join("data"));
        Self::start_in(data, Limits::default(), options, None).await
    }

    /// Where the node agent keeps its data.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.data.path().join("data")
    }

    async fn start_in(
        data: tempfile::TempDir,
        limits: Limits,
        sessions: SessionOptions,
        resources: Option<std::sync::Arc<dyn ResourceSource>>,
    ) -> Self {
        Self::start_serving(data, limits, sessions, resources, Vec::new()).await
    }

    /// A node agent whose file API serves `fs_roots` (`--fs-root`).
    pub async fn start_with_fs_roots(fs_roots: Vec<std::path::PathBuf>) -> Self {
        Self::start_serving(tempfile::tempdir().unwrap(), Limits::default(), SessionOptions::default(), None, fs_roots)
            .await
    }

    async fn start_serving(
        data: tempfile::TempDir,
        limits: Limits,
        sessions: SessionOptions,
        resources: Option<std::sync::Arc<dyn ResourceSource>>,
        fs_roots: Vec<std::path::PathBuf>,
    ) -> Self {
        // The node agent's log, shown with a failing test's output (RUST_LOG to change).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "agentplane_node_agent=debug".into()),
            )
            .with_test_writer()
            .try_init();
        let shutdown = CancellationToken::new();
        let config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            listen_unix: None,
            token: Some(TOKEN.into()),
            data_dir: data.path().join("data"),
            cors_origins: vec!["https://app.example".into()],
            limits,
            fs_roots,
        };
        let options = sessions.clone();
        let mut server = Server::bind_with(config, sessions, shutdown.clone()).await.unwrap();
        if let Some(source) = resources {
            server.set_resources(source);
        }
        let url = format!("http://{}", server.local_addr().expect("a TCP listener"));
        let metrics_addr = server.serve_metrics("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let metrics_url = format!("http://{metrics_addr}/metrics");
        let processes = server.processes();
        let task = tokio::spawn(server.run());
        let client = Client::new(&url, Some(TOKEN.into())).unwrap();
        TestServer { url, metrics_url, processes, client, shutdown, task: Some(task), data, options }
    }

    pub fn anonymous(&self) -> Client {
        Client::new(&self.url, None).unwrap()
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(PATIENCE, task).await.expect("the server stops").unwrap().unwrap();
        }
    }

    pub async fn spawn_pty(&self, command: &str, args: &[&str]) -> ProcessInfo {
        self.client
            .create_process(&CreateProcessRequest {
                command: command.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                pty: Some(PtySize { rows: 24, cols: 80 }),
                env: [("PS1".to_string(), "$ ".to_string())].into(),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// An interactive bash without the user's rc files, prompt `$ `.
    pub async fn spawn_bash(&self) -> ProcessInfo {
        self.spawn_pty("bash", &["--norc", "--noprofile", "-i"]).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        // A test that ended (or failed) without `stop` leaves nothing running behind it.
        self.processes.kill_all();
    }
}

pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// What a terminal client received, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Bytes(Vec<u8>),
    Control(ControlMessage),
    Closed,
}

pub struct Term {
    socket: TerminalSocket,
    /// Offset announced by `ready`.
    pub ready: u64,
    /// Every byte received since `ready`.
    pub bytes: Vec<u8>,
    /// Every control message received after `ready`.
    pub controls: Vec<ControlMessage>,
    /// Where the next `read_until` starts looking.
    mark: usize,
    pub closed: bool,
}

impl Term {
    pub async fn open(client: &Client, id: &str, offset: Option<u64>) -> Term {
        let socket = client.connect(id, &ConnectQuery { offset, ..Default::default() }).await.unwrap();
        Self::from_socket(socket).await
    }

    pub async fn from_socket(socket: TerminalSocket) -> Term {
        let mut term = Term { socket, ready: 0, bytes: Vec::new(), controls: Vec::new(), mark: 0, closed: false };
        match term.next_frame().await {
            Frame::Control(ControlMessage::Ready { offset }) => term.ready = offset,
            other => panic!("expected ready first, got {other:?}"),
        }
        term.controls.clear();
        term
    }

    pub async fn next_frame(&mut self) -> Frame {
        loop {
            let Ok(message) = tokio::time::timeout(PATIENCE, self.socket.next()).await else {
                panic!(
                    "timed out waiting for a frame; since the last match got {:?} and controls {:?}",
                    String::from_utf8_lossy(&self.bytes[self.mark..]),
                    self.controls
                );
            };
            let frame = match message {
                Some(Ok(Message::Binary(bytes))) => Frame::Bytes(bytes.to_vec()),
                Some(Ok(Message::Text(text))) => Frame::Control(serde_json::from_str(text.as_str()).unwrap()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => Frame::Closed,
                Some(Ok(_)) => continue,
            };
            match &frame {
                Frame::Bytes(bytes) => self.bytes.extend_from_slice(bytes),
                Frame::Control(control) => self.controls.push(control.clone()),
                Frame::Closed => self.closed = true,
            }
            return frame;
        }
    }

    /// Reads until `needle` appears after the previous match; returns the text up to it.
    pub async fn read_until(&mut self, needle: &str) -> String {
        loop {
            if let Some(at) = find(&self.bytes[self.mark..], needle.as_bytes()) {
                let text = String::from_utf8_lossy(&self.bytes[self.mark..self.mark + at + needle.len()]).into_owned();
                self.mark += at + needle.len();
                return text;
            }
            if self.closed {
                panic!(
                    "connection closed before {needle:?} appeared; got {:?}",
                    String::from_utf8_lossy(&self.bytes[self.mark..])
                );
            }
            self.next_frame().await;
        }
    }

    /// Reads until every needle has appeared after the previous match, in any order.
    pub async fn read_until_all(&mut self, needles: &[&str]) {
        loop {
            let window = &self.bytes[self.mark..];
            if needles.iter().all(|n| find(window, n.as_bytes()).is_some()) {
                self.mark = self.bytes.len();
                return;
            }
            if self.closed {
                panic!(
                    "connection closed before all of {needles:?} appeared; got {:?}",
                    String::from_utf8_lossy(window)
                );
            }
            self.next_frame().await;
        }
    }

    pub async fn type_text(&mut self, text: &str) {
        self.socket.send(Message::Binary(text.as_bytes().to_vec().into())).await.unwrap();
    }

    pub async fn control(&mut self, message: &ControlMessage) {
        let text = serde_json::to_string(message).unwrap();
        self.socket.send(Message::Text(text.into())).await.unwrap();
    }

    /// Reads to the end; returns the exit message.
    pub async fn wait_exit(&mut self) -> ControlMessage {
        loop {
            if let Some(exit) = self.controls.iter().find(|c| matches!(c, ControlMessage::Exit { .. })) {
                return exit.clone();
            }
            if self.closed {
                panic!("closed without an exit message");
            }
            self.next_frame().await;
        }
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }

    /// The absolute offset just past the last byte received.
    pub fn offset(&self) -> u64 {
        self.ready + self.bytes.len() as u64
    }
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One process as /proc shows it. Parsed here, independently of the node agent's
/// own /proc reading, so that the tests check it rather than agree with it.
#[derive(Debug, Clone)]
pub struct ProcStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
}

pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces and parentheses.
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    Some(ProcStat {
        pid,
        comm: stat[open + 1..close].to_string(),
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
    })
}

/// Every process that is alive (not a zombie).
pub fn live_processes() -> Vec<ProcStat> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<u32>().ok())
        .filter_map(proc_stat)
        .filter(|p| !matches!(p.state, 'Z' | 'X'))
        .collect()
}

/// Live processes whose process group is `pgid`.
pub fn live_group_members(pgid: u32) -> Vec<u32> {
    live_processes().into_iter().filter(|p| p.pgrp == pgid).map(|p| p.pid).collect()
}

/// Live processes of the session `sid` (a terminal's shell and all of its jobs), as (pid, process group).
pub fn live_session_members(sid: u32) -> Vec<(u32, u32)> {
    live_processes().into_iter().filter(|p| p.session == sid).map(|p| (p.pid, p.pgrp)).collect()
}

/// Live children of `pid` whose command is `comm`.
pub fn children_named(pid: u32, comm: &str) -> Vec<u32> {
    live_processes().into_iter().filter(|p| p.ppid == pid && p.comm == comm).map(|p| p.pid).collect()
}

/// Polls a condition of the operating system (no event exists for it), failing after PATIENCE.
pub async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    within(what, async {
        let mut delay = Duration::from_millis(1);
        while !condition() {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(50));
        }
    })
    .await
}

/// Events of session `id` with a sequence above `after`, read from its SSE stream as
/// they come, up to and including the first that `stop` matches. Panics, showing what
/// it saw, after `patience`, on a gap, or when the stream ends first.
pub async fn session_events_until(
    client: &Client,
    id: &str,
    after: u64,
    patience: Duration,
    what: &str,
    stop: impl Fn(&agentplane_node_agent::universal::UniversalEvent) -> bool,
) -> Vec<agentplane_node_agent::universal::UniversalEvent> {
    use agentplane_node_agent::client::SessionStreamItem;
    let mut seen = Vec::new();
    let read = async {
        let mut stream =
            client.session_events_sse(id, Some(after), None).await.expect("the session's event stream opens");
        while let Some(item) = stream.next().await {
            match item.expect("the session's event stream") {
                SessionStreamItem::Event(event) => {
                    let done = stop(&event);
                    seen.push(*event);
                    if done {
                        return true;
                    }
                }
                SessionStreamItem::Gap(gap) => panic!("a gap in the events of {id}: {gap:?}"),
            }
        }
        false
    };
    match tokio::time::timeout(patience, read).await {
        Ok(true) => seen,
        Ok(false) => panic!("the events of {id} ended before {what}: {seen:#?}"),
        Err(_) => panic!("no {what} in the events of {id} within {patience:?}: {seen:#?}"),
    }
}

/// The events of session `id` after `after`, up to the end of turn `turn`; panics if
/// the session ends first.
pub async fn turn_events(
    client: &Client,
    id: &str,
    after: u64,
    turn: u64,
    patience: Duration,
) -> Vec<agentplane_node_agent::universal::UniversalEvent> {
    use agentplane_node_agent::universal::EventData;
    let events = session_events_until(client, id, after, patience, &format!("the end of turn {turn}"), |e| {
        matches!(e.data, EventData::TurnEnded { turn: t, .. } if t == turn)
            || matches!(e.data, EventData::SessionEnded { .. })
    })
    .await;
    let last = events.last().expect("one event at least");
    assert!(
        !matches!(last.data, EventData::SessionEnded { .. }),
        "the session ended before turn {turn} did: {events:#?}"
    );
    events
}

/// Fails, listing them, if any of `events` is an `agent.unparsed`: a native line no
/// converter understood.
pub fn assert_nothing_unparsed(events: &[agentplane_node_agent::universal::UniversalEvent]) {
    use agentplane_node_agent::universal::EventType;
    let unparsed: Vec<_> = events.iter().filter(|e| e.kind() == EventType::AgentUnparsed).collect();
    assert!(unparsed.is_empty(), "unparsed: {unparsed:#?}");
}

/// The usage a scripted model server reported with `answers`, summed as the
/// universal `Usage` counts it (no cost: the server names none).
pub fn reported_usage(answers: &[agentplane_model_server::ReportedUsage]) -> agentplane_node_agent::universal::Usage {
    let mut sum = agentplane_node_agent::universal::Usage::default();
    for answer in answers {
        sum.input_tokens += answer.input;
        sum.output_tokens += answer.output;
        sum.cache_read_tokens += answer.cache_read;
        sum.cache_write_tokens += answer.cache_write;
    }
    sum
}

/// The usage on a turn's `turn.ended` (the last of `events`).
pub fn turn_usage(
    events: &[agentplane_node_agent::universal::UniversalEvent],
) -> Option<agentplane_node_agent::universal::Usage> {
    match events.last().map(|e| &e.data) {
        Some(agentplane_node_agent::universal::EventData::TurnEnded { usage, .. }) => *usage,
        other => panic!("not a turn.ended: {other:?}"),
    }
}
