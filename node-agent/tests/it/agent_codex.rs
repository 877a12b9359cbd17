//! The real codex CLI (`@openai/codex`, installed by the node agent from the npm
//! registry at its pinned version) driven through a node agent's HTTP API against the
//! scripted model server: text, tool calls, permissions allowed and denied, a second
//! message, a resume after the node agent restarts. Waits are on events; the long
//! timeout covers the first install on a loaded machine and only turns a hang into a
//! failure.

use crate::common;

use std::time::Duration;

use agentplane_model_server::ModelServer;
use agentplane_node_agent::client::{Client, SessionStreamItem};
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// The first session installs codex (tens of seconds) and each starts an app-server.
const AGENT_PATIENCE: Duration = Duration::from_secs(300);

struct Fixture {
    model: ModelServer,
    /// The session's HOME: codex's config and thread store live under it.
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture {
            model: ModelServer::start().await.unwrap(),
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn session(&self, permission_mode: PermissionMode) -> CreateSessionRequest {
        let env = [
            ("OPENAI_BASE_URL".to_string(), format!("{}/v1", self.model.url())),
            ("OPENAI_API_KEY".to_string(), "sk-scripted".to_string()),
            ("HOME".to_string(), self.home.path().display().to_string()),
        ];
        CreateSessionRequest {
            agent: "codex".into(),
            model: Some("gpt-5.5".into()),
            permission_mode: Some(permission_mode),
            working_dir: Some(self.work.path().display().to_string()),
            env: env.into(),
            ..Default::default()
        }
    }

    /// The `input` of every Responses request codex made, oldest first.
    fn responses_inputs(&self) -> Vec<String> {
        self.model
            .requests()
            .into_iter()
            .filter(|r| r.uri.starts_with("/v1/responses"))
            .map(|r| r.body["input"].to_string())
            .collect()
    }
}

/// A session's SSE stream, read from the start.
struct Events {
    stream: BoxStream<'static, agentplane_node_agent::client::ClientResult<SessionStreamItem>>,
    seen: Vec<UniversalEvent>,
    mark: usize,
}

impl Events {
    async fn open(client: &Client, id: &str) -> Events {
        Events::open_after(client, id, 0).await
    }

    /// The stream of the events with a sequence above `after`.
    async fn open_after(client: &Client, id: &str, after: u64) -> Events {
        Events { stream: client.session_events_sse(id, Some(after), None).await.unwrap(), seen: Vec::new(), mark: 0 }
    }

    async fn next(&mut self) -> Option<UniversalEvent> {
        let next = tokio::time::timeout(AGENT_PATIENCE, self.stream.next()).await.unwrap_or_else(|_| {
            panic!("timed out waiting for a session event; so far: {:#?}", &self.seen[self.mark..])
        });
        match next {
            Some(Ok(SessionStreamItem::Event(event))) => {
                self.seen.push(*event.clone());
                Some(*event)
            }
            Some(Ok(SessionStreamItem::Gap(gap))) => panic!("unexpected gap {gap:?}"),
            Some(Err(e)) => panic!("stream failed: {e}"),
            None => None,
        }
    }

    /// Events since the previous `until`, up to and including the first that matches.
    async fn until(&mut self, what: &str, matches: impl Fn(&UniversalEvent) -> bool) -> Vec<UniversalEvent> {
        loop {
            if let Some(at) = self.seen[self.mark..].iter().position(&matches) {
                let events = self.seen[self.mark..self.mark + at + 1].to_vec();
                self.mark += at + 1;
                return events;
            }
            if self.next().await.is_none() {
                panic!("the stream ended before {what}; got {:#?}", &self.seen[self.mark..]);
            }
        }
    }

    /// The events of the turn under way, up to its `turn.ended`, which must be completed.
    async fn turn(&mut self) -> Vec<UniversalEvent> {
        let events = self.until("turn.ended", |e| e.kind() == EventType::TurnEnded).await;
        match &events.last().unwrap().data {
            EventData::TurnEnded { status: TurnStatus::Completed, .. } => events,
            other => panic!("the turn did not complete: {other:?}; events: {events:#?}"),
        }
    }

    /// Writes the native lines seen so far to `<CARGO_TARGET_TMPDIR>/transcripts/codex-<name>.jsonl`,
    /// where converter tests can take recorded transcripts from.
    fn record(&self, name: &str) {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("transcripts");
        std::fs::create_dir_all(&dir).unwrap();
        let mut lines: Vec<&str> = Vec::new();
        for raw in self.seen.iter().filter_map(|e| e.raw.as_deref()) {
            // The events of one native line carry it each.
            if lines.last() != Some(&raw) {
                lines.push(raw);
            }
        }
        std::fs::write(dir.join(format!("codex-{name}.jsonl")), lines.join("\n") + "\n").unwrap();
    }

    fn assert_all_parsed(&self) {
        let unparsed: Vec<_> = self.seen.iter().filter(|e| e.kind() == EventType::AgentUnparsed).collect();
        assert!(unparsed.is_empty(), "native lines nobody understood: {unparsed:#?}");
    }
}

fn answer(events: &[UniversalEvent]) -> String {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item }
                if item.role == Some(Role::Assistant) && item.kind == ItemKind::Message =>
            {
                item.text.clone()
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no assistant message in {events:#?}"))
}

fn completed(events: &[UniversalEvent], kind: ItemKind) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == kind => Some(item.clone()),
            _ => None,
        })
        .collect()
}

async fn create(server: &TestServer, id: &str, request: &CreateSessionRequest) {
    tokio::time::timeout(AGENT_PATIENCE, server.client.create_session(id, request))
        .await
        .expect("the session is created in time")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_streams_and_a_second_message_sees_the_first() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "text", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "text").await;
    server.client.send_message("text", "hello codex").await.unwrap();
    let turn = events.turn().await;
    // The turn's usage is what the model server reported to the turn's calls (codex
    // makes no others), its cached input counted apart.
    let first_usage = fixture.model.usage();
    assert_eq!(turn_usage(&turn), Some(reported_usage(&first_usage)), "{first_usage:#?}");

    let text = answer(&turn);
    assert!(text.starts_with("scripted reply: "), "{text}");
    let message_id =
        completed(&turn, ItemKind::Message).into_iter().find(|i| i.role == Some(Role::Assistant)).unwrap().id;
    let deltas: Vec<String> = turn
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemDelta { item_id, delta } if *item_id == message_id => Some(delta.clone()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "the answer streams: {deltas:?}");
    assert_eq!(deltas.concat(), text);
    let users = turn
        .iter()
        .filter(|e| matches!(&e.data, EventData::ItemCompleted { item } if item.role == Some(Role::User)))
        .count();
    assert_eq!(users, 1, "the user's message once, from the node agent, not echoed again from codex");
    let thread = server.client.get_session("text").await.unwrap().agent_session_id.expect("codex's thread id");
    // What codex said while it started comes first, in its order.
    let statuses: Vec<String> = completed(&turn, ItemKind::Status).into_iter().filter_map(|i| i.text).collect();
    let ready = statuses.iter().position(|t| t.starts_with("codex app-server ready")).expect("initialize's answer");
    let started = statuses.iter().position(|t| *t == format!("thread {thread} started")).expect("thread/started");
    assert!(ready < started, "{statuses:#?}");

    server.client.send_message("text", "and a second message").await.unwrap();
    let second = events.turn().await;
    let answered = fixture.model.usage();
    assert_eq!(turn_usage(&second), Some(reported_usage(&answered[first_usage.len()..])), "{answered:#?}");
    // The session's usage is both turns'.
    let session = server.client.get_session("text").await.unwrap();
    assert_eq!(session.usage, reported_usage(&answered));
    let inputs = fixture.responses_inputs();
    let last = inputs.last().unwrap();
    assert!(last.contains("hello codex") && last.contains(&text) && last.contains("and a second message"), "{last}");
    let counted = |t: &str| t.trim_start_matches("scripted reply: ").split(' ').next().unwrap().parse::<u32>().unwrap();
    assert!(counted(&answer(&second)) > counted(&text), "more messages in context the second time");
    assert_eq!(server.client.get_session("text").await.unwrap().agent_session_id, Some(thread));
    events.assert_all_parsed();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_runs_and_the_answer_quotes_its_output() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "tool", &fixture.session(PermissionMode::Bypass)).await;
    let mut events = Events::open(&server.client, "tool").await;
    server.client.send_message("tool", "say it [[run:echo hi-from-the-shell]]").await.unwrap();
    let turn = events.turn().await;

    let call = completed(&turn, ItemKind::ToolCall).pop().expect("a tool call");
    assert_eq!(call.tool.as_deref(), Some("shell"));
    assert!(call.input.as_ref().unwrap()["command"].as_str().unwrap().contains("echo hi-from-the-shell"), "{call:?}");
    let result = completed(&turn, ItemKind::ToolResult).pop().expect("a tool result");
    assert_eq!((result.call_id.as_deref(), result.status), (Some(call.id.as_str()), Some(ItemStatus::Completed)));
    assert!(turn.iter().all(|e| e.kind() != EventType::PermissionRequested), "bypass asks nothing");
    let text = answer(&turn);
    assert!(text.starts_with("tool said: ") && text.contains("hi-from-the-shell"), "{text}");
    // Two model calls, the call and the answer: the turn's usage is both.
    let answered = fixture.model.usage();
    assert_eq!((answered.len(), turn_usage(&turn)), (2, Some(reported_usage(&answered))), "{answered:#?}");
    events.record("e2e-bypass-tool");
    events.assert_all_parsed();
    server.stop().await;
}

/// Runs `touch` behind a permission request answered with `reply`; returns the turn.
async fn touch_with(reply: PermissionReply, file: &str) -> (Fixture, Vec<UniversalEvent>) {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "hitl", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "hitl").await;
    server.client.send_message("hitl", &format!("make it [[run:touch {file}]]")).await.unwrap();
    let asked = events.until("permission.requested", |e| e.kind() == EventType::PermissionRequested).await;
    let EventData::PermissionRequested(request) = &asked.last().unwrap().data else { unreachable!() };
    assert_eq!(request.tool, "shell");
    assert!(request.input["command"].as_str().unwrap().contains(&format!("touch {file}")), "{request:?}");
    assert!(!fixture.work.path().join(file).exists(), "nothing runs before the reply");
    let info = server.client.get_session("hitl").await.unwrap();
    assert_eq!((info.state, info.pending_permissions.len()), (SessionState::AwaitingInput, 1));
    // The call the request is about was announced.
    let call_id = request.item_id.clone().expect("the request names its tool call");
    assert!(asked.iter().any(
        |e| matches!(&e.data, EventData::ItemStarted { item } if item.id == call_id && item.kind == ItemKind::ToolCall)
    ));

    server.client.reply_permission("hitl", &request.id, reply).await.unwrap();
    let mut turn = events.turn().await;
    events.record(&format!("e2e-{reply:?}").to_lowercase());
    events.assert_all_parsed();
    let resolved = turn.iter().any(
        |e| matches!(&e.data, EventData::PermissionResolved { id, reply: Some(r) } if *id == request.id && *r == reply),
    );
    assert!(resolved, "{turn:#?}");
    turn.retain(|e| e.sequence > asked.last().unwrap().sequence);
    server.stop().await;
    (fixture, turn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_allowed_once_runs_the_command() {
    let (fixture, turn) = touch_with(PermissionReply::Once, "allowed.txt").await;
    assert!(fixture.work.path().join("allowed.txt").exists(), "the command ran");
    let result = completed(&turn, ItemKind::ToolResult).pop().expect("a tool result");
    assert_eq!(result.status, Some(ItemStatus::Completed));
    assert!(answer(&turn).starts_with("tool said: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_rejected_runs_nothing_and_the_model_hears_so() {
    let (fixture, turn) = touch_with(PermissionReply::Reject, "denied.txt").await;
    assert!(!fixture.work.path().join("denied.txt").exists(), "the command did not run");
    let call = completed(&turn, ItemKind::ToolCall).pop().expect("the call ends");
    assert_eq!(call.status, Some(ItemStatus::Denied));
    // Codex tells the model the call was declined and the turn goes on.
    let last = fixture.responses_inputs().pop().unwrap();
    assert!(last.contains("function_call_output"), "{last}");
    assert!(answer(&turn).starts_with("tool said: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_agent_resumes_the_codex_thread() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "resume", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "resume").await;
    server.client.send_message("resume", "remember the word avocado").await.unwrap();
    events.turn().await;
    let thread = server.client.get_session("resume").await.unwrap().agent_session_id.expect("a thread id");
    events.assert_all_parsed();

    let server = server.restart().await;
    let mut events = Events::open(&server.client, "resume").await;
    let started =
        events.until("the resumed start", |e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })).await;
    let EventData::SessionStarted { agent_session_id, .. } = &started.last().unwrap().data else { unreachable!() };
    assert_eq!(agent_session_id.as_deref(), Some(thread.as_str()), "the same codex thread");
    server.client.send_message("resume", "what was the word?").await.unwrap();
    let turn = events.turn().await;
    let last = fixture.responses_inputs().pop().unwrap();
    assert!(
        last.contains("avocado") && last.contains("what was the word?"),
        "the earlier conversation is in context: {last}"
    );
    assert!(answer(&turn).starts_with("scripted reply: "));
    assert_eq!(server.client.get_session("resume").await.unwrap().agent_session_id, Some(thread));
    events.record("e2e-resumed");
    events.assert_all_parsed();
    server.stop().await;
}

/// The thread goes on in another node agent with a new, empty HOME (a new sandbox,
/// the old one deleted): its rollout travels in the conversation's tar, and
/// `thread/resume` finds it in the new HOME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_in_another_node_agent_with_a_new_home() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "moved", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "moved").await;
    server.client.send_message("moved", "remember the word avocado").await.unwrap();
    let first = events.turn().await;
    let before = server.client.get_session("moved").await.unwrap();
    let thread = before.agent_session_id.clone().expect("a thread id");
    let tar = server.client.conversation("moved").await.unwrap();
    drop(events);
    server.stop().await;
    let Fixture { model, home: old_home, work } = fixture;
    drop(old_home);

    let elsewhere = TestServer::start_with_agents().await;
    let fixture = Fixture { model, home: tempfile::tempdir().unwrap(), work };
    elsewhere.client.stage_conversation("moved", tar, before.last_sequence).await.unwrap();
    create(&elsewhere, "moved", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open_after(&elsewhere.client, "moved", before.last_sequence).await;
    elsewhere.client.send_message("moved", "what was the word?").await.unwrap();
    let turn = events.turn().await;
    assert_eq!(turn[0].sequence, before.last_sequence + 1, "the log goes on");
    assert!(
        turn.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id: Some(a), .. } if *a == thread)),
        "{turn:#?}"
    );
    let last = fixture.responses_inputs().pop().unwrap();
    assert!(
        last.contains("remember the word avocado")
            && last.contains(&answer(&first))
            && last.contains("what was the word?"),
        "the earlier turn is in context: {last}"
    );
    events.assert_all_parsed();
    elsewhere.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_mode_codex_lacks_is_refused() {
    let server = TestServer::start_with_agents().await;
    let fixture = Fixture::new().await;
    let request = CreateSessionRequest { agent_mode: Some("build".into()), ..fixture.session(PermissionMode::Default) };
    let error = server.client.create_session("mode", &request).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("mode_not_supported"));
    server.stop().await;
}

/// The processes whose working directory is `dir` (the session's codex, and what it runs).
fn processes_in(dir: &std::path::Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap();
    live_processes()
        .into_iter()
        .filter(|p| std::fs::read_link(format!("/proc/{}/cwd", p.pid)).is_ok_and(|cwd| cwd == dir))
        .map(|p| p.pid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_that_dies_fails_its_turn_and_the_next_message_resumes_the_thread() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "crash", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "crash").await;
    server.client.send_message("crash", "remember the word quince, then [[run:touch crash.txt]]").await.unwrap();
    let asked = events.until("permission.requested", |e| e.kind() == EventType::PermissionRequested).await;
    let EventData::PermissionRequested(request) = &asked.last().unwrap().data else { unreachable!() };
    let thread = server.client.get_session("crash").await.unwrap().agent_session_id.expect("a thread id");

    let codex = processes_in(fixture.work.path());
    assert!(!codex.is_empty(), "codex runs in the session's working directory");
    for pid in &codex {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), nix::sys::signal::Signal::SIGKILL);
    }
    server.client.reply_permission("crash", &request.id, PermissionReply::Once).await.unwrap();
    let failed = events.until("turn.ended", |e| e.kind() == EventType::TurnEnded).await;
    assert!(
        matches!(failed.last().unwrap().data, EventData::TurnEnded { status: TurnStatus::Failed, .. }),
        "{failed:#?}"
    );
    let error = failed.iter().find_map(|e| match &e.data {
        EventData::Error { message, code } => Some((message.clone(), code.clone())),
        _ => None,
    });
    let (message, code) = error.expect("an error says why");
    assert_eq!(code.as_deref(), Some("agent_process_exited"));
    assert!(message.contains("exited"), "{message}");
    assert!(!fixture.work.path().join("crash.txt").exists());

    server.client.send_message("crash", "still there?").await.unwrap();
    let turn = events.turn().await;
    assert!(answer(&turn).starts_with("scripted reply: "));
    let last = fixture.responses_inputs().pop().unwrap();
    assert!(last.contains("quince") && last.contains("still there?"), "the thread was resumed: {last}");
    assert_eq!(server.client.get_session("crash").await.unwrap().agent_session_id, Some(thread));
    events.record("e2e-crash");
    events.assert_all_parsed();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_allowed_always_is_not_asked_again_for_the_same_command() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "always", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "always").await;
    server.client.send_message("always", "[[run:touch always.txt]]").await.unwrap();
    let asked = events.until("permission.requested", |e| e.kind() == EventType::PermissionRequested).await;
    let EventData::PermissionRequested(request) = &asked.last().unwrap().data else { unreachable!() };
    server.client.reply_permission("always", &request.id, PermissionReply::Always).await.unwrap();
    events.turn().await;
    assert!(fixture.work.path().join("always.txt").exists());
    std::fs::remove_file(fixture.work.path().join("always.txt")).unwrap();

    server.client.send_message("always", "again [[run:touch always.txt]]").await.unwrap();
    let turn = events.turn().await;
    assert!(turn.iter().all(|e| e.kind() != EventType::PermissionRequested), "not asked again: {turn:#?}");
    assert!(fixture.work.path().join("always.txt").exists(), "it ran again");
    events.assert_all_parsed();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_permission_request_settles_the_lost_turn_and_the_thread_goes_on() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "pending", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "pending").await;
    server.client.send_message("pending", "remember the word medlar, then [[run:touch pending.txt]]").await.unwrap();
    let asked = events.until("permission.requested", |e| e.kind() == EventType::PermissionRequested).await;
    let EventData::PermissionRequested(request) = &asked.last().unwrap().data else { unreachable!() };

    let server = server.restart().await;
    let info = server.client.get_session("pending").await.unwrap();
    assert_eq!(info.pending_permissions, vec![request.clone()], "the request is offered again");
    let mut events = Events::open(&server.client, "pending").await;
    events.until("the resumed start", |e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })).await;
    server.client.reply_permission("pending", &request.id, PermissionReply::Once).await.unwrap();
    let lost = events.until("turn.ended", |e| e.kind() == EventType::TurnEnded).await;
    assert!(matches!(lost.last().unwrap().data, EventData::TurnEnded { status: TurnStatus::Failed, .. }), "{lost:#?}");
    assert!(
        lost.iter().any(|e| matches!(&e.data, EventData::Error { code: Some(code), .. } if code == "turn_interrupted"))
    );
    assert!(!fixture.work.path().join("pending.txt").exists(), "codex lost the call with its process");
    let info = server.client.get_session("pending").await.unwrap();
    assert!(info.pending_permissions.is_empty() && info.state == SessionState::Idle, "{info:?}");

    server.client.send_message("pending", "what was the word?").await.unwrap();
    events.turn().await;
    let last = fixture.responses_inputs().pop().unwrap();
    assert!(last.contains("medlar") && last.contains("what was the word?"), "{last}");
    events.assert_all_parsed();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_asks_nothing_and_writes_nothing_and_the_variant_is_the_effort() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    let request = CreateSessionRequest { variant: Some("low".into()), ..fixture.session(PermissionMode::Plan) };
    create(&server, "plan", &request).await;
    let mut events = Events::open(&server.client, "plan").await;
    server.client.send_message("plan", "[[run:touch planned.txt]]").await.unwrap();
    let turn = events.turn().await;
    assert!(turn.iter().all(|e| e.kind() != EventType::PermissionRequested), "nothing to approve in a plan");
    assert!(!fixture.work.path().join("planned.txt").exists(), "a read-only sandbox");
    // The sandbox refused the write, and the model was told (codex 0.169 reports no
    // command item for a sandboxed command under `never`).
    let text = answer(&turn);
    assert!(text.contains("Read-only file system"), "{text}");
    let body = fixture.model.requests().pop().unwrap().body;
    assert_eq!((body["model"].as_str(), body["reasoning"]["effort"].as_str()), (Some("gpt-5.5"), Some("low")));
    events.assert_all_parsed();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_is_down_fails_the_turn_with_a_timeout_rather_than_a_hang() {
    let fixture = Fixture::new().await;
    // A port held bound and never listened on: connecting is refused, and no other test
    // can take it over while this one runs (a port merely freed again could be).
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = held.local_addr().unwrap();
    let server = TestServer::start_with_agents().await;
    let mut request = fixture.session(PermissionMode::Default);
    request.env.insert("OPENAI_BASE_URL".into(), format!("http://{closed}/v1"));
    create(&server, "down", &request).await;
    let mut events = Events::open(&server.client, "down").await;
    server.client.send_message("down", "hello?").await.unwrap();
    let turn = events.until("turn.ended", |e| e.kind() == EventType::TurnEnded).await;
    assert!(matches!(turn.last().unwrap().data, EventData::TurnEnded { status: TurnStatus::Failed, .. }), "{turn:#?}");
    // Codex retries an unreachable provider without end; the driver gives up with `timeout`.
    let timeout = turn.iter().any(|e| matches!(&e.data, EventData::Error { code: Some(code), message } if code == "timeout" && message.contains("model provider")));
    assert!(timeout, "an error says why: {turn:#?}");
    events.assert_all_parsed();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_mid_turn_stops_its_codex() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "end", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "end").await;
    server.client.send_message("end", "[[run:touch never.txt]]").await.unwrap();
    events.until("permission.requested", |e| e.kind() == EventType::PermissionRequested).await;
    assert!(!processes_in(fixture.work.path()).is_empty());
    server.client.end_session("end").await.unwrap();
    events.until("session.ended", |e| e.kind() == EventType::SessionEnded).await;
    until("codex to be gone", || processes_in(fixture.work.path()).is_empty()).await;
    assert!(!fixture.work.path().join("never.txt").exists());
    server.stop().await;
}

/// Codex's `request_user_input` tool: its questions, with their options, answered
/// through the API; the model gets the answer as the tool's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_asks_for_input_and_gets_the_answer_given_through_the_api() {
    let fixture = Fixture::new().await;
    let server = TestServer::start_with_agents().await;
    create(&server, "ask", &fixture.session(PermissionMode::Default)).await;
    let mut events = Events::open(&server.client, "ask").await;
    let ask = r#"[[tool:request_user_input {"questions": [{"id": "colour", "header": "Colour", "question": "Which colour?", "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]}]}]]"#;
    server.client.send_message("ask", &format!("ask me {ask}")).await.unwrap();
    let asked = events
        .until("question.requested", |e| matches!(e.kind(), EventType::QuestionRequested | EventType::TurnEnded))
        .await;
    let EventData::QuestionRequested(question) = &asked.last().unwrap().data else {
        panic!("the turn ended without a question: {asked:#?}")
    };
    assert_eq!(question.questions.len(), 1, "{question:?}");
    assert_eq!(question.questions[0].question, "Which colour?");
    assert_eq!(question.questions[0].header.as_deref(), Some("Colour"));
    assert_eq!(question.questions[0].options, vec!["red".to_string(), "blue".to_string()]);
    assert!(
        asked.last().unwrap().raw.as_deref().is_some_and(|r| r.contains("requestUserInput")),
        "it carries codex's request"
    );
    assert_eq!(server.client.get_session("ask").await.unwrap().state, SessionState::AwaitingInput);
    server.client.reply_question("ask", &question.id, vec![vec!["blue".into()]]).await.unwrap();
    let turn = events.turn().await;
    assert!(turn.iter().any(|e| matches!(&e.data, EventData::QuestionResolved { id, outcome: QuestionOutcome::Answered, .. } if *id == question.id)));
    // The model was given the answer as the tool's output, and quoted it.
    let text = answer(&turn);
    assert!(text.starts_with("tool said: ") && text.contains("blue") && !text.contains("red"), "{text}");
    assert!(fixture.responses_inputs().last().unwrap().contains("blue"));
    events.record("e2e-question");
    events.assert_all_parsed();
    server.stop().await;
}
