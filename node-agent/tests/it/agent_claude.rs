//! Sessions with the real Claude Code CLI, installed by the node agent from the npm
//! registry (the pinned version) and pointed at the scripted model server: a text
//! turn, a tool call, a permission allowed and one denied through the HTTP API, a
//! second message to the same process, a resume after the node agent restarts, and
//! Claude's own questions (plan approval, `AskUserQuestion`) answered through the API.
//! Slow (the first run installs claude): `cargo test -p agentplane-node-agent --test agent_claude`.

use crate::common;

use std::time::Duration;

use agentplane_model_server::{Conversation, Message, ModelServer, anthropic};
use agentplane_node_agent::client::{Client, SessionStreamItem};
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// A turn of a real CLI on a loaded machine; the first one includes installing it.
const TURN_PATIENCE: Duration = Duration::from_secs(240);

/// A session's SSE stream; waits are on events, never on time.
struct Events {
    stream: BoxStream<'static, agentplane_node_agent::client::ClientResult<SessionStreamItem>>,
    seen: Vec<UniversalEvent>,
    mark: usize,
}

impl Events {
    async fn open(client: &Client, id: &str, offset: Option<u64>) -> Events {
        let stream = client.session_events_sse(id, offset, None).await.unwrap();
        Events { stream, seen: Vec::new(), mark: 0 }
    }

    /// Events since the previous call, up to and including the next `turn.ended`.
    async fn turn(&mut self) -> Vec<UniversalEvent> {
        loop {
            if let Some(at) = self.seen[self.mark..].iter().position(|e| e.kind() == EventType::TurnEnded) {
                let events = self.seen[self.mark..self.mark + at + 1].to_vec();
                self.mark += at + 1;
                return events;
            }
            self.next(&format!("a turn.ended after {:#?}", &self.seen[self.mark..])).await;
        }
    }

    /// Events up to the next permission request.
    async fn permission(&mut self, model: &ModelServer) -> PermissionRequest {
        self.request(model, "a permission.requested", |data| match data {
            EventData::PermissionRequested(request) => Some(request.clone()),
            _ => None,
        })
        .await
    }

    /// Events up to the next question.
    async fn question(&mut self, model: &ModelServer) -> QuestionRequest {
        self.request(model, "a question.requested", |data| match data {
            EventData::QuestionRequested(request) => Some(request.clone()),
            _ => None,
        })
        .await
    }

    /// Events up to the next one `pick` takes; a turn that ends first fails the
    /// test with what Claude said and what the model was asked.
    async fn request<T>(&mut self, model: &ModelServer, what: &str, pick: impl Fn(&EventData) -> Option<T>) -> T {
        loop {
            if let Some((at, found)) =
                self.seen[self.mark..].iter().enumerate().find_map(|(at, e)| pick(&e.data).map(|found| (at, found)))
            {
                self.mark += at + 1;
                return found;
            }
            if let Some(ended) = self.seen[self.mark..].iter().find(|e| e.kind() == EventType::TurnEnded) {
                let raws: Vec<&str> = self.seen[self.mark..].iter().filter_map(|e| e.raw.as_deref()).collect();
                let asked: Vec<String> = model
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}", r.uri, r.body.get("messages").map(|m| m.to_string()).unwrap_or_default()))
                    .collect();
                panic!(
                    "the turn ended ({ended:?}) without {what}; claude said {raws:#?}; the model was asked {asked:#?}"
                );
            }
            self.next(what).await;
        }
    }

    async fn next(&mut self, what: &str) {
        match tokio::time::timeout(TURN_PATIENCE, self.stream.next()).await {
            Ok(Some(Ok(SessionStreamItem::Event(event)))) => {
                assert_ne!(event.kind(), EventType::AgentUnparsed, "an unparsed line: {:?}", event.raw);
                self.seen.push(*event);
            }
            Ok(Some(Ok(SessionStreamItem::Gap(gap)))) => panic!("unexpected gap {gap:?}"),
            Ok(Some(Err(e))) => panic!("the stream failed: {e}"),
            Ok(None) => panic!("the stream ended before {what}; got {:#?}", &self.seen[self.mark..]),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

struct Setup {
    server: TestServer,
    model: ModelServer,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Setup {
    async fn new() -> Setup {
        let server = TestServer::start_with_agents().await;
        let model = ModelServer::start().await.unwrap();
        Setup { server, model, home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() }
    }

    fn request(&self) -> CreateSessionRequest {
        Setup::request_with(&self.model, &self.home, &self.work)
    }

    /// The conversations of the model requests that carry Claude's tools (its side
    /// requests, if any, carry none), oldest first.
    fn conversations(&self) -> Vec<Conversation> {
        self.model
            .requests()
            .iter()
            .filter(|r| r.uri.starts_with("/v1/messages") && !r.uri.contains("count_tokens"))
            .map(|r| anthropic::conversation(&r.body))
            .filter(|c| !c.tools.is_empty())
            .collect()
    }
}

/// Whether a user turn of the conversation holds `text` (Claude Code adds reminders to it).
fn mentions(conversation: &Conversation, text: &str) -> bool {
    conversation.messages.iter().any(|m| matches!(m, Message::User(t) if t.contains(text)))
}

fn status(events: &[UniversalEvent]) -> (TurnStatus, Option<String>) {
    match &events.last().unwrap().data {
        EventData::TurnEnded { status, error, .. } => (*status, error.clone()),
        other => panic!("not a turn.ended: {other:?}"),
    }
}

fn completed(events: &[UniversalEvent], kind: ItemKind) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == kind && e.source == EventSource::Agent => {
                Some(item.clone())
            }
            _ => None,
        })
        .collect()
}

fn reply_text(events: &[UniversalEvent]) -> String {
    let messages = completed(events, ItemKind::Message);
    let texts: Vec<String> =
        messages.iter().filter(|m| m.role == Some(Role::Assistant)).filter_map(|m| m.text.clone()).collect();
    texts.last().cloned().unwrap_or_else(|| panic!("no assistant message in {events:#?}"))
}

/// Checks each turn's usage against what the model server reported meanwhile, and
/// the session's against their sum.
#[derive(Default)]
struct UsageCheck {
    /// Model answers accounted for so far.
    answers: usize,
    sum: Usage,
}

impl UsageCheck {
    /// A turn's `turn.ended` carries exactly the tokens of the answers since the
    /// previous turn (every one a call of the conversation's: Claude Code makes no side
    /// requests with its nonessential traffic off), and a cost: the `result` line's
    /// `total_cost_usd` counts from the process's start, the turn's is the difference.
    fn turn(&mut self, model: &ModelServer, events: &[UniversalEvent]) {
        let answered = model.usage();
        let reported = reported_usage(&answered[self.answers..]);
        let usage = turn_usage(events).expect("claude reports usage");
        assert_eq!(Usage { cost_usd: None, ..usage }, reported, "answers {:#?}", &answered[self.answers..]);
        assert!(usage.cost_usd.is_some_and(|c| c > 0.0), "{usage:?}");
        self.answers = answered.len();
        self.sum.add(&usage);
    }

    /// The session's usage is the sum of its turns'.
    fn session(&self, session: &SessionInfo) {
        assert_eq!(Usage { cost_usd: None, ..session.usage }, Usage { cost_usd: None, ..self.sum });
        let (cost, sum) = (session.usage.cost_usd.unwrap(), self.sum.cost_usd.unwrap());
        assert!((cost - sum).abs() < 1e-9, "{cost} != {sum}");
    }
}

fn assert_completed(events: &[UniversalEvent]) {
    assert_eq!(status(events), (TurnStatus::Completed, None), "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_a_tool_call_and_a_second_message_in_one_process() {
    let setup = Setup::new().await;
    let client = &setup.server.client;
    client.create_session("c1", &setup.request()).await.unwrap();
    let mut events = Events::open(client, "c1", None).await;

    let mut usage = UsageCheck::default();
    client.send_message("c1", "hello claude").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    usage.turn(&setup.model, &turn);
    // The script counts the messages of the request (Claude Code sends its context as one more).
    let first = setup.conversations().last().cloned().expect("claude asked the model");
    assert!(mentions(&first, "hello claude"), "{first:?}");
    let expected = format!("scripted reply: {} messages in context", first.messages.len());
    assert_eq!(reply_text(&turn), expected);
    // The text streamed: deltas of the completed message's id add up to its text.
    let message = completed(&turn, ItemKind::Message).into_iter().find(|m| m.role == Some(Role::Assistant)).unwrap();
    let deltas: Vec<&str> = turn
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemDelta { item_id, delta } if *item_id == message.id => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "{deltas:?}");
    assert_eq!(deltas.concat(), expected);
    let session = client.get_session("c1").await.unwrap();
    let id = session.agent_session_id.clone().expect("an agent session id");
    // The events carry Claude's id, as Claude said it in its init line.
    let init = completed(&turn, ItemKind::Status)
        .into_iter()
        .find(|s| s.text.as_deref().unwrap_or_default().starts_with("claude session"))
        .unwrap();
    assert!(init.text.unwrap().contains(&id));

    client.send_message("c1", "now [[run:echo hi]]").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    usage.turn(&setup.model, &turn);
    let calls = completed(&turn, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].tool.as_deref(), Some("Bash"));
    assert_eq!(calls[0].input.as_ref().unwrap()["command"], "echo hi");
    let results = completed(&turn, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id.as_ref(), Some(&calls[0].id));
    assert_eq!(results[0].output.as_deref().map(str::trim), Some("hi"));
    assert_eq!(reply_text(&turn), "tool said: hi");

    // One process: the same conversation, which the model sees grow.
    client.send_message("c1", "and a third").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    usage.turn(&setup.model, &turn);
    usage.session(&client.get_session("c1").await.unwrap());
    let conversations = setup.conversations();
    let last = conversations.last().unwrap();
    assert!(mentions(last, "hello claude"), "{last:?}");
    assert!(last.messages.contains(&Message::ToolResult("hi".into())), "{last:?}");
    assert_eq!(reply_text(&turn), format!("scripted reply: {} messages in context", last.messages.len()));
    assert_eq!(client.get_session("c1").await.unwrap().agent_session_id, Some(id));
    let inits = setup
        .server
        .client
        .session_events("c1", &SessionEventsQuery::default())
        .await
        .unwrap()
        .events
        .iter()
        .filter(|e| {
            e.raw.as_deref().unwrap_or_default().contains("\"subtype\":\"initialize\"")
                || e.raw.as_deref().unwrap_or_default().contains("\"request_id\":\"initialize\"")
        })
        .count();
    assert_eq!(inits, 1, "claude was initialized once: one process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_allowed_and_one_denied_through_the_api() {
    let setup = Setup::new().await;
    let client = &setup.server.client;
    client.create_session("p1", &setup.request()).await.unwrap();
    let mut events = Events::open(client, "p1", None).await;
    let allowed = setup.work.path().join("allowed.txt");
    let denied = setup.work.path().join("denied.txt");

    client.send_message("p1", "please [[run:touch allowed.txt]]").await.unwrap();
    let request = events.permission(&setup.model).await;
    assert_eq!(request.tool, "Bash");
    assert_eq!(request.input["command"], "touch allowed.txt");
    assert_eq!(request.options, vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    let announced = events
        .seen
        .iter()
        .find(|e| matches!(&e.data, EventData::PermissionRequested(p) if p.id == request.id))
        .unwrap();
    assert!(
        announced.raw.as_deref().is_some_and(|r| r.contains("\"can_use_tool\"")),
        "it carries Claude's request: {announced:?}"
    );
    assert!(!allowed.exists(), "nothing ran before the reply");
    assert_eq!(client.get_session("p1").await.unwrap().state, SessionState::AwaitingInput);
    client.reply_permission("p1", &request.id, PermissionReply::Once).await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert!(turn.iter().any(|e| matches!(&e.data, EventData::PermissionResolved { id, reply: Some(PermissionReply::Once) } if *id == request.id)));
    assert!(allowed.exists(), "the allowed command ran");
    assert_eq!(completed(&turn, ItemKind::ToolResult)[0].status, Some(ItemStatus::Completed));

    client.send_message("p1", "then [[run:touch denied.txt]]").await.unwrap();
    let request = events.permission(&setup.model).await;
    assert_eq!(request.input["command"], "touch denied.txt");
    client.reply_permission("p1", &request.id, PermissionReply::Reject).await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert!(turn.iter().any(|e| matches!(&e.data, EventData::PermissionResolved { id, reply: Some(PermissionReply::Reject) } if *id == request.id)));
    assert!(!denied.exists(), "the rejected command did not run");
    let result = completed(&turn, ItemKind::ToolResult).pop().unwrap();
    assert_eq!(result.status, Some(ItemStatus::Denied), "{result:?}");
    // The model is told: its next request ends with the denial as the tool's result.
    let conversations = setup.conversations();
    let Some(Message::ToolResult(output)) = conversations.last().unwrap().messages.last().cloned() else {
        panic!("the last request does not end with a tool result: {:?}", conversations.last())
    };
    assert!(output.contains("did not allow"), "{output}");
    assert_eq!(reply_text(&turn), format!("tool said: {}", output.trim()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_resumes_after_the_node_agent_restarts() {
    let setup = Setup::new().await;
    let Setup { server, model, home, work } = setup;
    let setup_request = Setup::request_with(&model, &home, &work);
    server.client.create_session("r1", &setup_request).await.unwrap();
    let mut events = Events::open(&server.client, "r1", None).await;
    let mut usage = UsageCheck::default();
    server.client.send_message("r1", "remember the word pelican").await.unwrap();
    let first_turn = events.turn().await;
    assert_completed(&first_turn);
    usage.turn(&model, &first_turn);
    let before = server.client.get_session("r1").await.unwrap();
    let id = before.agent_session_id.clone().expect("an agent session id");
    drop(events);

    let server = server.restart().await;
    // The usage so far was saved with the session.
    assert_eq!(server.client.get_session("r1").await.unwrap().usage, before.usage);
    let mut events = Events::open(&server.client, "r1", Some(before.last_sequence)).await;
    server.client.send_message("r1", "what was the word?").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    usage.turn(&model, &turn);
    usage.session(&server.client.get_session("r1").await.unwrap());
    // The resumed claude's total goes on from the first process's: the turn cost the difference.
    let total = turn
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e.raw.as_deref()?).ok())
        .find_map(|line| line["total_cost_usd"].as_f64())
        .expect("a result line with a total cost");
    let costs = (turn_usage(&first_turn).unwrap().cost_usd.unwrap(), turn_usage(&turn).unwrap().cost_usd.unwrap());
    assert!((costs.0 + costs.1 - total).abs() < 1e-9 && costs.1 < total, "{costs:?}, total {total}");
    assert!(turn.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id: Some(a), .. } if *a == id)), "{turn:#?}");
    assert_eq!(server.client.get_session("r1").await.unwrap().agent_session_id, Some(id));
    let requests: Vec<Conversation> = model
        .requests()
        .iter()
        .filter(|r| r.uri.starts_with("/v1/messages"))
        .map(|r| anthropic::conversation(&r.body))
        .filter(|c| !c.tools.is_empty())
        .collect();
    let last = requests.last().unwrap();
    assert!(mentions(last, "remember the word pelican"), "the earlier turn is in context: {last:?}");
    assert!(last.messages.contains(&Message::Assistant(reply_text(&first_turn))), "{last:?}");
    assert_eq!(reply_text(&turn), format!("scripted reply: {} messages in context", last.messages.len()));
    server.stop().await;
}

/// An interrupt while Claude waits for a permission: the turn ends `interrupted`, the
/// command never runs, the claude process is stopped and a new one resumes the
/// conversation, whose next turn has the earlier one in context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_cuts_a_turn_short_and_the_next_resumes_the_conversation() {
    let setup = Setup::new().await;
    let client = &setup.server.client;
    client.create_session("i1", &setup.request()).await.unwrap();
    let mut events = Events::open(client, "i1", None).await;
    client.send_message("i1", "remember the word heron").await.unwrap();
    assert_completed(&events.turn().await);
    let first = claude_pids(setup.home.path());
    assert_eq!(first.len(), 1, "one claude: {first:?}");

    client.send_message("i1", "please [[run:touch interrupted.txt]]").await.unwrap();
    let request = events.permission(&setup.model).await;
    client.interrupt_session("i1").await.unwrap();
    let turn = events.turn().await;
    assert_eq!(status(&turn), (TurnStatus::Interrupted, None), "{turn:#?}");
    assert!(
        turn.iter().any(|e| matches!(&e.data, EventData::PermissionResolved { id, reply: None } if *id == request.id))
    );
    assert!(!setup.work.path().join("interrupted.txt").exists(), "the command did not run");

    client.send_message("i1", "what was the word?").await.unwrap();
    let next = events.turn().await;
    assert_completed(&next);
    assert!(
        next.iter().chain(&turn).any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, .. })),
        "the agent started again, resuming: {next:#?}"
    );
    let now = claude_pids(setup.home.path());
    assert!(now.len() == 1 && now != first, "the interrupted claude was replaced: {first:?} then {now:?}");
    let last = setup.conversations().last().cloned().unwrap();
    assert!(mentions(&last, "remember the word heron"), "the earlier turn is in context: {last:?}");
    assert_eq!(reply_text(&next), format!("scripted reply: {} messages in context", last.messages.len()));
}

/// The live `claude` processes whose HOME is `home` (the session's).
fn claude_pids(home: &std::path::Path) -> Vec<u32> {
    let needle = format!("HOME={}", home.display());
    let with_home: Vec<ProcStat> = live_processes()
        .into_iter()
        .filter(|p| {
            let environ = std::fs::read(format!("/proc/{}/environ", p.pid)).unwrap_or_default();
            environ.split(|b| *b == 0).any(|var| var == needle.as_bytes())
        })
        .collect();
    // Not its children (a tool's shell inherits the HOME).
    with_home.iter().filter(|p| !with_home.iter().any(|q| q.pid == p.ppid)).map(|p| p.pid).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_killed_mid_turn_fails_the_turn_and_the_next_resumes() {
    let setup = Setup::new().await;
    let client = &setup.server.client;
    client.create_session("k1", &setup.request()).await.unwrap();
    let mut events = Events::open(client, "k1", None).await;
    client.send_message("k1", "remember the word heron").await.unwrap();
    assert_completed(&events.turn().await);
    client.send_message("k1", "then [[run:touch killed.txt]]").await.unwrap();
    let request = events.permission(&setup.model).await;
    let pids = claude_pids(setup.home.path());
    assert_eq!(pids.len(), 1, "one claude for the session: {pids:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0] as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    client.reply_permission("k1", &request.id, PermissionReply::Once).await.unwrap();
    let turn = events.turn().await;
    let (status, error) = status(&turn);
    assert_eq!(status, TurnStatus::Failed, "{turn:#?}");
    assert!(error.as_deref().unwrap_or_default().contains("exit"), "{error:?}");
    assert!(
        turn.iter()
            .any(|e| matches!(&e.data, EventData::Error { code: Some(code), .. } if code == "agent_process_exited")),
        "{turn:#?}"
    );
    assert!(!setup.work.path().join("killed.txt").exists());

    client.send_message("k1", "are you back?").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    let last = setup.conversations().last().cloned().unwrap();
    assert!(mentions(&last, "remember the word heron"), "the resumed claude has the earlier turns: {last:?}");
    assert!(mentions(&last, "are you back?"));
    let pids_after = claude_pids(setup.home.path());
    assert_eq!(pids_after.len(), 1, "{pids_after:?}");
    assert_ne!(pids_after, pids);
}

impl Setup {
    fn request_with(model: &ModelServer, home: &tempfile::TempDir, work: &tempfile::TempDir) -> CreateSessionRequest {
        CreateSessionRequest {
            agent: "claude".into(),
            working_dir: Some(work.path().display().to_string()),
            env: [
                ("ANTHROPIC_BASE_URL".to_string(), model.url()),
                ("ANTHROPIC_API_KEY".to_string(), "sk-ant-scripted".to_string()),
                ("HOME".to_string(), home.path().display().to_string()),
            ]
            .into(),
            ..Default::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_says_what_it_can_and_refuses_agent_modes() {
    let server = TestServer::start_with_agents().await;
    let agent = server.client.get_agent("claude").await.unwrap();
    assert!(
        agent.capabilities.permissions
            && agent.capabilities.questions
            && agent.capabilities.resume
            && agent.capabilities.streaming_deltas
    );
    let request =
        CreateSessionRequest { agent: "claude".into(), agent_mode: Some("build".into()), ..Default::default() };
    let error = server.client.create_session("m1", &request).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("mode_not_supported"), "{error}");
    server.stop().await;
}

/// The conversation packed by one node agent and staged in another, with a HOME of
/// its own (a new sandbox's): Claude resumes its own session there from the file the
/// tar brought, and its next turn has the earlier one in context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_in_another_node_agent_with_a_new_home() {
    let Setup { server, model, home, work } = Setup::new().await;
    server.client.create_session("moved", &Setup::request_with(&model, &home, &work)).await.unwrap();
    let mut events = Events::open(&server.client, "moved", None).await;
    server.client.send_message("moved", "remember the word albatross").await.unwrap();
    let first_turn = events.turn().await;
    assert_completed(&first_turn);
    let before = server.client.get_session("moved").await.unwrap();
    let id = before.agent_session_id.clone().expect("an agent session id");
    let tar = server.client.conversation("moved").await.unwrap();
    drop(events);
    server.stop().await;

    let elsewhere = TestServer::start_with_agents().await;
    let new_home = tempfile::tempdir().unwrap();
    elsewhere.client.stage_conversation("moved", tar, before.last_sequence).await.unwrap();
    elsewhere.client.create_session("moved", &Setup::request_with(&model, &new_home, &work)).await.unwrap();
    let saved: Vec<_> = walkdir(new_home.path()).into_iter().filter(|p| p.ends_with(format!("{id}.jsonl"))).collect();
    assert_eq!(saved.len(), 1, "Claude's session file is in the new HOME: {saved:?}");
    let mut events = Events::open(&elsewhere.client, "moved", Some(before.last_sequence)).await;
    elsewhere.client.send_message("moved", "what was the word?").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert_eq!(turn[0].sequence, before.last_sequence + 1, "the log goes on");
    assert!(
        turn.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id: Some(a), .. } if *a == id)),
        "{turn:#?}"
    );
    let conversations = Setup { server: elsewhere, model, home: new_home, work }.conversations();
    let last = conversations.last().unwrap();
    assert!(mentions(last, "remember the word albatross"), "the earlier turn is in context: {last:?}");
    assert!(last.messages.contains(&Message::Assistant(reply_text(&first_turn))), "{last:?}");
}

/// Every file below `dir`.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walkdir(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// A restart while Claude waits for a permission: the request stays open across it,
/// its reply is given to the resumed Claude when it asks for the same call again
/// (the interrupted message is sent again), and the turn completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_pending_across_a_restart_is_answered_after_it() {
    let Setup { server, model, home, work } = Setup::new().await;
    let request = Setup::request_with(&model, &home, &work);
    server.client.create_session("w1", &request).await.unwrap();
    let mut events = Events::open(&server.client, "w1", None).await;
    server.client.send_message("w1", "remember the word ibis").await.unwrap();
    assert_completed(&events.turn().await);
    server.client.send_message("w1", "then [[run:touch across.txt]]").await.unwrap();
    let pending = events.permission(&model).await;
    let before = server.client.get_session("w1").await.unwrap();
    drop(events);

    let server = server.restart().await;
    let session = server.client.get_session("w1").await.unwrap();
    assert_eq!(session.pending_permissions.iter().map(|p| p.id.clone()).collect::<Vec<_>>(), vec![pending.id.clone()]);
    let mut events = Events::open(&server.client, "w1", Some(before.last_sequence)).await;
    server.client.reply_permission("w1", &pending.id, PermissionReply::Once).await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert!(work.path().join("across.txt").exists(), "the command allowed across the restart ran");
    let requests: Vec<&UniversalEvent> = turn.iter().filter(|e| e.kind() == EventType::PermissionRequested).collect();
    assert!(requests.is_empty(), "Claude's second ask was answered with the kept reply: {requests:#?}");
    assert_eq!(reply_text(&turn), "tool said: (Bash completed with no output)");
    server.stop().await;
}

/// What the model was last given as a tool's result.
fn last_tool_result(setup: &Setup) -> String {
    let conversations = setup.conversations();
    match conversations.last().and_then(|c| c.messages.last()) {
        Some(Message::ToolResult(output)) => output.clone(),
        other => panic!("the last request does not end with a tool result: {other:?}"),
    }
}

fn question_resolved(events: &[UniversalEvent], question: &str) -> (QuestionOutcome, Option<Vec<Vec<String>>>) {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::QuestionResolved { id, outcome, answers } if id == question => Some((*outcome, answers.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no question.resolved for {question} in {events:#?}"))
}

/// Plan mode: Claude's `ExitPlanMode` is a question showing the plan from Claude's
/// plan file. Rejected, Claude is told to keep planning (and still refuses commands);
/// approved, the plan's tool call completes and Claude leaves plan mode, so a
/// command is asked about instead of being refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_a_question_rejected_then_approved_through_the_api() {
    let setup = Setup::new().await;
    let client = &setup.server.client;
    let request = CreateSessionRequest { permission_mode: Some(PermissionMode::Plan), ..setup.request() };
    client.create_session("pl1", &request).await.unwrap();
    let mut events = Events::open(client, "pl1", None).await;
    let plan = "[[tool:ExitPlanMode {}]]";

    // Claude names its plan file in plan mode's instructions; the plan is what the
    // model writes there (written here as the model would with Claude's Write tool).
    client.send_message("pl1", "think about touching planned.txt").await.unwrap();
    assert_completed(&events.turn().await);
    let plan_file = setup
        .model
        .requests()
        .iter()
        .find_map(|r| {
            let body = r.body.to_string();
            let at = body.find("create your plan at ")? + "create your plan at ".len();
            let end = body[at..].find(".md")? + at + ".md".len();
            Some(std::path::PathBuf::from(&body[at..end]))
        })
        .expect("plan mode's instructions name the plan file");
    assert!(plan_file.starts_with(setup.home.path()), "{plan_file:?}");
    std::fs::create_dir_all(plan_file.parent().unwrap()).unwrap();
    std::fs::write(&plan_file, "1. touch planned.txt\n").unwrap();

    client.send_message("pl1", &format!("done planning {plan}")).await.unwrap();
    let question = events.question(&setup.model).await;
    assert_eq!(question.questions.len(), 1, "{question:?}");
    assert!(question.questions[0].question.contains("1. touch planned.txt"), "the plan file's plan: {question:?}");
    assert_eq!(question.questions[0].options, vec!["approve".to_string(), "keep planning".to_string()]);
    assert_eq!(client.get_session("pl1").await.unwrap().state, SessionState::AwaitingInput);
    client.reject_question("pl1", &question.id).await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert_eq!(question_resolved(&turn, &question.id), (QuestionOutcome::Rejected, None));
    let told = last_tool_result(&setup);
    assert!(told.contains("keep planning"), "{told}");
    assert_eq!(reply_text(&turn), format!("tool said: {}", told.trim()));
    // Still planning: a command is refused without asking anyone.
    client.send_message("pl1", "[[run:touch early.txt]]").await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert!(!turn.iter().any(|e| e.kind() == EventType::PermissionRequested), "{turn:#?}");
    assert!(!setup.work.path().join("early.txt").exists());
    let refused = completed(&turn, ItemKind::ToolResult).pop().expect("the command's result");
    assert!(matches!(refused.status, Some(ItemStatus::Failed | ItemStatus::Denied)), "{refused:?}");

    client.send_message("pl1", &format!("a better plan {plan}")).await.unwrap();
    let question = events.question(&setup.model).await;
    client.reply_question("pl1", &question.id, vec![vec!["approve".into()]]).await.unwrap();
    let turn = events.turn().await;
    assert_completed(&turn);
    assert_eq!(
        question_resolved(&turn, &question.id),
        (QuestionOutcome::Answered, Some(vec![vec!["approve".to_string()]]))
    );
    let result = completed(&turn, ItemKind::ToolResult).pop().expect("the plan's tool result");
    assert_eq!(result.status, Some(ItemStatus::Completed), "{result:?}");
    let told = last_tool_result(&setup);
    assert!(!told.contains("keep planning"), "{told}");

    // Out of plan mode: a command is asked about (in plan mode Claude refuses it unasked).
    client.send_message("pl1", "now [[run:touch planned.txt]]").await.unwrap();
    let permission = events.permission(&setup.model).await;
    assert_eq!(permission.input["command"], "touch planned.txt");
    client.reply_permission("pl1", &permission.id, PermissionReply::Once).await.unwrap();
    assert_completed(&events.turn().await);
    assert!(setup.work.path().join("planned.txt").exists());
}

/// `AskUserQuestion`: Claude's questions, with their options, answered through the
/// API; Claude gets the answer as the tool's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_asks_a_question_and_gets_the_answer_given_through_the_api() {
    let setup = Setup::new().await;
    let client = &setup.server.client;
    client.create_session("aq1", &setup.request()).await.unwrap();
    let mut events = Events::open(client, "aq1", None).await;
    let ask = r#"[[tool:AskUserQuestion {"questions": [{"question": "Which colour?", "header": "Colour", "multiSelect": false, "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]}]}]]"#;

    client.send_message("aq1", &format!("ask me {ask}")).await.unwrap();
    let question = events.question(&setup.model).await;
    assert_eq!(question.questions.len(), 1, "{question:?}");
    let asked = &question.questions[0];
    assert_eq!(asked.question, "Which colour?");
    assert_eq!(asked.header.as_deref(), Some("Colour"));
    assert_eq!(asked.options, vec!["red".to_string(), "blue".to_string()]);
    assert!(!asked.multi_select);
    let announced =
        events.seen.iter().find(|e| matches!(&e.data, EventData::QuestionRequested(q) if q.id == question.id)).unwrap();
    assert!(
        announced.raw.as_deref().is_some_and(|r| r.contains("\"can_use_tool\"")),
        "it carries Claude's request: {announced:?}"
    );
    // A reply to an unknown question is an error, and the real one stays open.
    let error = client.reply_question("aq1", "no-such-question", vec![vec!["red".into()]]).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("question_not_found"), "{error}");
    client.reply_question("aq1", &question.id, vec![vec!["blue".into()]]).await.unwrap();
    // The same answer twice is fine; a different one is a conflict.
    client.reply_question("aq1", &question.id, vec![vec!["blue".into()]]).await.unwrap();
    let error = client.reply_question("aq1", &question.id, vec![vec!["red".into()]]).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("conflict"), "{error}");
    let turn = events.turn().await;
    assert_completed(&turn);
    assert_eq!(
        question_resolved(&turn, &question.id),
        (QuestionOutcome::Answered, Some(vec![vec!["blue".to_string()]]))
    );
    let told = last_tool_result(&setup);
    assert!(told.contains("\"blue\"") && !told.contains("\"red\""), "{told}");
    assert_eq!(reply_text(&turn), format!("tool said: {}", told.trim()));
}
