//! OpenCode for real: `opencode-ai` installed from the npm registry by the node agent,
//! driven through `opencode serve`, talking Chat Completions to the scripted model
//! server. Text, tool calls, permissions allowed and refused, several turns, two
//! sessions on one server, and resume after a node-agent restart.
//!
//! Slow tier: each test starts an `opencode serve` (seconds), and the first run of a
//! build installs the CLI.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use agentplane_model_server::{LoggedRequest, ModelServer, ReportedUsage};
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;
use serde_json::Value;

/// An install and a cold `opencode serve` on a loaded two-core machine.
const SLOW: Duration = Duration::from_secs(300);

struct Fixture {
    node: TestServer,
    model: ModelServer,
    /// The sessions' HOME: OpenCode's config and session store.
    home: tempfile::TempDir,
    /// The sessions' working directory.
    work: tempfile::TempDir,
    /// In the servers' environment, to find them among processes.
    marker: String,
}

impl Fixture {
    async fn start() -> Fixture {
        let marker = format!(
            "{}-{}",
            std::process::id(),
            tempfile::tempdir().unwrap().path().file_name().unwrap().to_string_lossy()
        );
        Fixture {
            node: TestServer::start_with_agents().await,
            model: ModelServer::start().await.unwrap(),
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            marker,
        }
    }

    fn request(&self, permission_mode: PermissionMode) -> CreateSessionRequest {
        let env = BTreeMap::from([
            ("HOME".to_string(), self.home.path().display().to_string()),
            ("OPENAI_BASE_URL".to_string(), format!("{}/v1", self.model.url())),
            ("OPENAI_API_KEY".to_string(), "test-key".to_string()),
            ("AGENTPLANE_TEST_MARKER".to_string(), self.marker.clone()),
        ]);
        CreateSessionRequest {
            agent: "opencode".into(),
            permission_mode: Some(permission_mode),
            working_dir: Some(self.work.path().display().to_string()),
            env,
            ..Default::default()
        }
    }

    fn client(&self) -> &Client {
        &self.node.client
    }

    /// The model requests of the conversation (OpenCode's title requests offer no tools).
    fn agent_requests(&self) -> Vec<LoggedRequest> {
        self.model
            .requests()
            .into_iter()
            .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
            .collect()
    }

    /// The usage the model server reported to the conversation's requests (those that offer tools).
    fn conversation_usage(&self) -> Vec<ReportedUsage> {
        self.model.usage().into_iter().filter(|u| u.tools > 0).collect()
    }

    /// `opencode serve` processes started with this fixture's environment.
    fn servers(&self) -> Vec<u32> {
        live_processes()
            .into_iter()
            .filter(|p| {
                let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
                let environ = std::fs::read(format!("/proc/{}/environ", p.pid)).unwrap_or_default();
                let marker = format!("AGENTPLANE_TEST_MARKER={}", self.marker);
                cmdline.split(|b| *b == 0).any(|arg| arg == b"serve")
                    && environ.split(|b| *b == 0).any(|var| var == marker.as_bytes())
            })
            .map(|p| p.pid)
            .collect()
    }
}

/// Every event of a session up to the end of turn `turn` (or of the session).
async fn until_turn_ended(client: &Client, id: &str, turn: u64) -> Vec<UniversalEvent> {
    session_events_until(client, id, 0, SLOW, &format!("the end of turn {turn} of {id}"), |e| {
        matches!(e.data, EventData::TurnEnded { turn: t, .. } if t == turn)
            || matches!(e.data, EventData::SessionEnded { .. })
    })
    .await
}

/// Waits for a permission request of the session, and returns it.
async fn until_permission(client: &Client, id: &str) -> PermissionRequest {
    let wait = async {
        loop {
            let session = client.get_session(id).await.unwrap();
            if let Some(request) = session.pending_permissions.first() {
                return request.clone();
            }
            assert!(session.error.is_none(), "the session failed: {:?}", session.error);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(SLOW, wait).await.expect("a permission request")
}

/// The events of turn `turn` only.
fn turn_events(events: &[UniversalEvent], turn: u64) -> Vec<UniversalEvent> {
    let start = events
        .iter()
        .position(|e| matches!(e.data, EventData::TurnStarted { turn: t } if t == turn))
        .expect("the turn started");
    events[start..]
        .iter()
        .take_while(|e| !matches!(e.data, EventData::TurnEnded { turn: t, .. } if t == turn))
        .cloned()
        .collect()
}

fn turn_status(events: &[UniversalEvent], turn: u64) -> (TurnStatus, Option<String>) {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::TurnEnded { turn: t, status, error, .. } if *t == turn => Some((*status, error.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("turn {turn} did not end: {events:#?}"))
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

fn assistant_texts(events: &[UniversalEvent]) -> Vec<String> {
    completed(events, ItemKind::Message)
        .into_iter()
        .filter(|i| i.role == Some(Role::Assistant))
        .filter_map(|i| i.text)
        .collect()
}

/// The number of messages in a Chat Completions request's conversation (system left out).
fn conversation_length(request: &LoggedRequest) -> usize {
    request.body["messages"].as_array().map(|m| m.iter().filter(|m| m["role"] != "system").count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_streams_and_a_second_message_continues_the_conversation() {
    let fx = Fixture::start().await;
    let client = fx.client();
    client.create_session("text", &fx.request(PermissionMode::Default)).await.unwrap();
    client.send_message("text", "hello there").await.unwrap();
    let events = until_turn_ended(client, "text", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    // The turn's usage is its steps': what the model server reported to the
    // conversation's requests (the title request, which offers no tools, is not one).
    let first = fx.conversation_usage();
    assert_eq!(turn_usage(&events).map(|u| Usage { cost_usd: None, ..u }), Some(reported_usage(&first)), "{first:#?}");
    let turn = turn_events(&events, 1);
    assert_eq!(assistant_texts(&turn), ["scripted reply: 1 messages in context"]);
    // Streamed: the message started, came in several deltas, then completed.
    let messages = completed(&turn, ItemKind::Message);
    let message = messages.iter().find(|m| m.role == Some(Role::Assistant)).expect("the assistant's message");
    let started = turn.iter().any(|e| matches!(&e.data, EventData::ItemStarted { item } if item.id == message.id));
    let deltas: Vec<&str> = turn
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemDelta { item_id, delta } if *item_id == message.id => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(started, "{turn:#?}");
    assert!(deltas.len() >= 2, "{deltas:?}");
    assert_eq!(deltas.concat(), "scripted reply: 1 messages in context");
    let session = client.get_session("text").await.unwrap();
    let agent_session_id = session.agent_session_id.expect("an agentSessionId");
    assert!(agent_session_id.starts_with("ses_"), "{agent_session_id}");
    // Converted lines keep their native line.
    assert!(turn.iter().filter(|e| e.source == EventSource::Agent).all(|e| e.raw.is_some()));

    client.send_message("text", "and again").await.unwrap();
    let events = until_turn_ended(client, "text", 2).await;
    assert_eq!(turn_status(&events, 2), (TurnStatus::Completed, None));
    let both = fx.conversation_usage();
    let second = turn_usage(&events).map(|u| Usage { cost_usd: None, ..u });
    assert_eq!(second, Some(reported_usage(&both[first.len()..])), "{both:#?}");
    let usage = client.get_session("text").await.unwrap().usage;
    assert_eq!(Usage { cost_usd: None, ..usage }, reported_usage(&both), "the session's usage is both turns'");
    assert_eq!(assistant_texts(&turn_events(&events, 2)), ["scripted reply: 3 messages in context"]);
    let last = fx.agent_requests().pop().expect("a model request");
    assert_eq!(last.uri, "/v1/chat/completions");
    assert_eq!(conversation_length(&last), 3, "{:#}", last.body["messages"]);
    assert_nothing_unparsed(&events);
    assert_eq!(client.get_session("text").await.unwrap().agent_session_id.as_deref(), Some(agent_session_id.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_runs_and_its_result_reaches_the_model() {
    let fx = Fixture::start().await;
    let client = fx.client();
    // A bare model name is a model of the provider the driver configures.
    let request = CreateSessionRequest { model: Some("scripted-model".into()), ..fx.request(PermissionMode::Bypass) };
    client.create_session("tool", &request).await.unwrap();
    client.send_message("tool", "please [[run:echo hi]]").await.unwrap();
    let events = until_turn_ended(client, "tool", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{events:#?}");
    assert_eq!(calls[0].tool.as_deref(), Some("bash"));
    assert_eq!(calls[0].input.as_ref().and_then(|i| i["command"].as_str()), Some("echo hi"));
    assert_eq!(calls[0].status, Some(ItemStatus::Completed));
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results[0].call_id.as_deref(), Some(calls[0].id.as_str()));
    assert_eq!(results[0].output.as_deref().map(str::trim), Some("hi"));
    assert_eq!(assistant_texts(&events).last().map(String::as_str), Some("tool said: hi"));
    assert!(fx.agent_requests().iter().all(|r| r.body["model"] == "scripted-model"));
    // Two steps, the call and the answer: the turn's usage is both, and OpenCode's cost
    // of a model it has no price for is 0.
    let answered = fx.conversation_usage();
    let usage = turn_usage(&events).expect("opencode reports usage");
    assert_eq!((answered.len(), Usage { cost_usd: None, ..usage }), (2, reported_usage(&answered)), "{answered:#?}");
    assert_eq!(usage.cost_usd, Some(0.0));
    // Bypass: nothing was asked.
    assert!(!events.iter().any(|e| e.kind() == EventType::PermissionRequested));
    assert_nothing_unparsed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_allowed_runs_the_command_and_one_refused_does_not() {
    let fx = Fixture::start().await;
    let client = fx.client();
    client.create_session("ask", &fx.request(PermissionMode::Default)).await.unwrap();

    client.send_message("ask", "[[run:touch allowed.txt]]").await.unwrap();
    let request = until_permission(client, "ask").await;
    assert_eq!(request.tool, "bash");
    assert_eq!(request.input["command"], "touch allowed.txt");
    assert!(!fx.work.path().join("allowed.txt").exists(), "ran before it was allowed");
    client.reply_permission("ask", &request.id, PermissionReply::Once).await.unwrap();
    let events = until_turn_ended(client, "ask", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    assert!(fx.work.path().join("allowed.txt").exists());
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls[0].status, Some(ItemStatus::Completed));
    assert_eq!(request.item_id.as_deref(), Some(calls[0].id.as_str()));
    assert!(events.iter().any(
        |e| e.data == EventData::PermissionResolved { id: request.id.clone(), reply: Some(PermissionReply::Once) }
    ));

    client.send_message("ask", "[[run:touch refused.txt]]").await.unwrap();
    let request = until_permission(client, "ask").await;
    assert_eq!(request.input["command"], "touch refused.txt");
    client.reply_permission("ask", &request.id, PermissionReply::Reject).await.unwrap();
    let events = until_turn_ended(client, "ask", 2).await;
    assert!(!fx.work.path().join("refused.txt").exists());
    let turn = turn_events(&events, 2);
    let calls = completed(&turn, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{turn:#?}");
    assert_eq!(calls[0].status, Some(ItemStatus::Denied));
    assert_nothing_unparsed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_share_one_server_and_get_their_own_events() {
    let fx = Fixture::start().await;
    let client = fx.client();
    client.create_session("one", &fx.request(PermissionMode::Default)).await.unwrap();
    client.create_session("two", &fx.request(PermissionMode::Default)).await.unwrap();
    client.send_message("one", "first session").await.unwrap();
    client.send_message("two", "second session").await.unwrap();
    let one = until_turn_ended(client, "one", 1).await;
    let two = until_turn_ended(client, "two", 1).await;
    assert_eq!(turn_status(&one, 1).0, TurnStatus::Completed, "{one:#?}");
    assert_eq!(turn_status(&two, 1).0, TurnStatus::Completed, "{two:#?}");
    assert_eq!(assistant_texts(&one), ["scripted reply: 1 messages in context"]);
    assert_eq!(assistant_texts(&two), ["scripted reply: 1 messages in context"]);
    let (a, b) = (client.get_session("one").await.unwrap(), client.get_session("two").await.unwrap());
    assert_ne!(a.agent_session_id, b.agent_session_id);
    // Each session's events carry only its own OpenCode session.
    for (events, own) in [(&one, &a), (&two, &b)] {
        let own = own.agent_session_id.clone().unwrap();
        for event in events.iter().filter_map(|e| e.raw.as_deref()) {
            let value: Value = serde_json::from_str(event).unwrap();
            let session = value["payload"]["properties"]["sessionID"].as_str();
            assert_eq!(session, Some(own.as_str()), "{event}");
        }
    }
    assert_eq!(fx.servers().len(), 1, "one opencode serve for both sessions");
    assert_nothing_unparsed(&one);
    assert_nothing_unparsed(&two);

    // The server goes with its last session.
    client.end_session("one").await.unwrap();
    client.end_session("two").await.unwrap();
    tokio::time::timeout(SLOW, async {
        while !fx.servers().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the server stops after its last session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_after_the_node_agent_restarts() {
    let mut fx = Fixture::start().await;
    fx.node.client.create_session("resumed", &fx.request(PermissionMode::Default)).await.unwrap();
    fx.node.client.send_message("resumed", "remember me").await.unwrap();
    let events = until_turn_ended(&fx.node.client, "resumed", 1).await;
    assert_eq!(turn_status(&events, 1).0, TurnStatus::Completed, "{events:#?}");
    let before = fx.node.client.get_session("resumed").await.unwrap().agent_session_id.expect("an agentSessionId");
    let old_servers = fx.servers();
    assert_eq!(old_servers.len(), 1);

    let node = std::mem::replace(&mut fx.node, TestServer::start().await);
    fx.node = node.restart().await;
    // The old server went with the old node agent.
    assert!(fx.servers().iter().all(|pid| !old_servers.contains(pid)));

    fx.node.client.send_message("resumed", "do you remember").await.unwrap();
    let events = until_turn_ended(&fx.node.client, "resumed", 2).await;
    assert_eq!(turn_status(&events, 2), (TurnStatus::Completed, None), "{events:#?}");
    assert_eq!(fx.node.client.get_session("resumed").await.unwrap().agent_session_id.as_deref(), Some(before.as_str()));
    assert_eq!(assistant_texts(&turn_events(&events, 2)), ["scripted reply: 3 messages in context"]);
    let last = fx.agent_requests().pop().expect("a model request");
    let messages = last.body["messages"].to_string();
    assert!(messages.contains("remember me") && messages.contains("do you remember"), "{messages}");
    assert_nothing_unparsed(&events);
}

/// The conversation goes on in another node agent with a new, empty HOME (a new
/// sandbox, the old one deleted): OpenCode's storage travels in the conversation's
/// tar, and the new `opencode serve` finds the session there by its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_in_another_node_agent_with_a_new_home() {
    let fx = Fixture::start().await;
    fx.client().create_session("moved", &fx.request(PermissionMode::Default)).await.unwrap();
    fx.client().send_message("moved", "remember the word albatross").await.unwrap();
    let events = until_turn_ended(fx.client(), "moved", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    let answer = assistant_texts(&turn_events(&events, 1)).pop().expect("an answer");
    let before = fx.client().get_session("moved").await.unwrap();
    let id = before.agent_session_id.clone().expect("an agentSessionId");
    let tar = fx.client().conversation("moved").await.unwrap();
    let Fixture { node, model, home: old_home, work, marker } = fx;
    node.stop().await;
    drop(old_home);

    let fx = Fixture {
        node: TestServer::start_with_agents().await,
        model,
        home: tempfile::tempdir().unwrap(),
        work,
        marker,
    };
    fx.client().stage_conversation("moved", tar, before.last_sequence).await.unwrap();
    fx.client().create_session("moved", &fx.request(PermissionMode::Default)).await.unwrap();
    fx.client().send_message("moved", "what was the word?").await.unwrap();
    let events = session_events_until(fx.client(), "moved", before.last_sequence, SLOW, "the end of turn 2", |e| {
        matches!(e.data, EventData::TurnEnded { turn: 2, .. } | EventData::SessionEnded { .. })
    })
    .await;
    assert_eq!(turn_status(&events, 2), (TurnStatus::Completed, None), "{events:#?}");
    assert_eq!(events[0].sequence, before.last_sequence + 1, "the log goes on");
    assert!(
        events.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id: Some(a), .. } if *a == id)),
        "{events:#?}"
    );
    assert_eq!(assistant_texts(&turn_events(&events, 2)), ["scripted reply: 3 messages in context"]);
    let messages = fx.agent_requests().pop().expect("a model request").body["messages"].to_string();
    assert!(
        messages.contains("remember the word albatross")
            && messages.contains(&answer)
            && messages.contains("what was the word?"),
        "the earlier turn is in context: {messages}"
    );
    assert_nothing_unparsed(&events);
    fx.client().end_session("moved").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_fails_clearly_when_the_server_dies_and_the_next_turn_starts_another() {
    let fx = Fixture::start().await;
    let client = fx.client();
    client.create_session("crash", &fx.request(PermissionMode::Default)).await.unwrap();
    client.send_message("crash", "[[run:touch never.txt]]").await.unwrap();
    // The turn is under way (it waits for a reply) when the server goes.
    until_permission(client, "crash").await;
    let servers = fx.servers();
    assert_eq!(servers.len(), 1);
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(servers[0] as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let events = until_turn_ended(client, "crash", 1).await;
    let (status, error) = turn_status(&events, 1);
    assert_eq!(status, TurnStatus::Failed);
    let error = error.expect("why the turn failed");
    assert!(error.contains("agent process exited"), "{error}");
    assert!(!fx.work.path().join("never.txt").exists());

    client.send_message("crash", "still there?").await.unwrap();
    let events = until_turn_ended(client, "crash", 2).await;
    assert_eq!(turn_status(&events, 2), (TurnStatus::Completed, None), "{events:#?}");
    let new_servers = fx.servers();
    assert_eq!(new_servers.len(), 1);
    assert_ne!(new_servers, servers);
    // The conversation goes on in the same OpenCode session, kept under HOME.
    assert!(assistant_texts(&turn_events(&events, 2))[0].starts_with("scripted reply: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_pending_at_a_restart_is_answered_after_it() {
    let mut fx = Fixture::start().await;
    fx.node.client.create_session("waiting", &fx.request(PermissionMode::Default)).await.unwrap();
    fx.node.client.send_message("waiting", "[[run:touch after-restart.txt]]").await.unwrap();
    let request = until_permission(&fx.node.client, "waiting").await;

    let node = std::mem::replace(&mut fx.node, TestServer::start().await);
    fx.node = node.restart().await;
    // The client answers the request it has; the resumed turn asked OpenCode again and
    // takes that answer for its new request.
    let session = fx.node.client.get_session("waiting").await.unwrap();
    assert_eq!(session.pending_permissions.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [request.id.as_str()]);
    fx.node.client.reply_permission("waiting", &request.id, PermissionReply::Once).await.unwrap();
    let events = until_turn_ended(&fx.node.client, "waiting", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    assert!(fx.work.path().join("after-restart.txt").exists());
    // No second request reached the client.
    let requested = events.iter().filter(|e| e.kind() == EventType::PermissionRequested).count();
    assert_eq!(requested, 1, "{events:#?}");
    assert!(fx.node.client.get_session("waiting").await.unwrap().pending_permissions.is_empty());
    assert_nothing_unparsed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_runs_opencodes_plan_agent_and_unknown_modes_are_refused() {
    let fx = Fixture::start().await;
    let client = fx.client();
    let refused = client
        .create_session(
            "yolo",
            &CreateSessionRequest { agent_mode: Some("yolo".into()), ..fx.request(PermissionMode::Default) },
        )
        .await;
    assert_eq!(refused.err().and_then(|e| e.problem_code().map(str::to_string)).as_deref(), Some("mode_not_supported"));

    client.create_session("plan", &fx.request(PermissionMode::Plan)).await.unwrap();
    client.send_message("plan", "make a plan").await.unwrap();
    let events = until_turn_ended(client, "plan", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    // OpenCode records which of its agents answered.
    let agents: Vec<String> = events
        .iter()
        .filter_map(|e| e.raw.as_deref())
        .filter_map(|raw| serde_json::from_str::<Value>(raw).ok())
        .filter(|v| {
            v["payload"]["type"] == "message.updated" && v["payload"]["properties"]["info"]["role"] == "assistant"
        })
        .filter_map(|v| v["payload"]["properties"]["info"]["agent"].as_str().map(str::to_string))
        .collect();
    assert!(!agents.is_empty() && agents.iter().all(|a| a == "plan"), "{agents:?}");
    assert_nothing_unparsed(&events);
}

/// Waits on the session's events for a question in turn `turn`, and returns it; a
/// turn that ends without one fails the test, showing the turn's events.
async fn until_question(client: &Client, id: &str, turn: u64) -> QuestionRequest {
    let in_turn = std::cell::Cell::new(false);
    let events = session_events_until(client, id, 0, SLOW, &format!("a question in turn {turn}"), |e| {
        if matches!(e.data, EventData::TurnStarted { turn: t } if t == turn) {
            in_turn.set(true);
        }
        in_turn.get()
            && matches!(
                e.data,
                EventData::QuestionRequested(_) | EventData::TurnEnded { .. } | EventData::SessionEnded { .. }
            )
    })
    .await;
    match &events.last().expect("an event").data {
        EventData::QuestionRequested(question) => question.clone(),
        _ => panic!("turn {turn} of {id} ended without a question: {:#?}", turn_events(&events, turn)),
    }
}

/// OpenCode's `question` tool: its questions, with their options, answered through
/// the API; the model gets the answer as the tool's result. A rejected one ends the
/// tool call without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_asks_a_question_and_gets_the_answer_given_through_the_api() {
    let fx = Fixture::start().await;
    let client = fx.client();
    client.create_session("q", &fx.request(PermissionMode::Default)).await.unwrap();
    let ask = r#"[[tool:question {"questions": [{"question": "Which colour?", "header": "Colour", "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]}]}]]"#;

    client.send_message("q", &format!("ask me {ask}")).await.unwrap();
    let question = until_question(client, "q", 1).await;
    assert_eq!(question.questions.len(), 1, "{question:?}");
    assert_eq!(question.questions[0].question, "Which colour?");
    assert_eq!(question.questions[0].options, vec!["red".to_string(), "blue".to_string()]);
    client.reply_question("q", &question.id, vec![vec!["blue".into()]]).await.unwrap();
    let events = until_turn_ended(client, "q", 1).await;
    assert_eq!(turn_status(&events, 1), (TurnStatus::Completed, None), "{events:#?}");
    assert!(events.iter().any(|e| matches!(&e.data, EventData::QuestionResolved { id, outcome: QuestionOutcome::Answered, .. } if *id == question.id)));
    let told = assistant_texts(&events).last().cloned().expect("a reply");
    assert!(told.starts_with("tool said: ") && told.contains("blue") && !told.contains("\"red\""), "{told}");

    client.send_message("q", &format!("again {ask}")).await.unwrap();
    let question = until_question(client, "q", 2).await;
    client.reject_question("q", &question.id).await.unwrap();
    let events = until_turn_ended(client, "q", 2).await;
    assert!(events.iter().any(|e| matches!(&e.data, EventData::QuestionResolved { id, outcome: QuestionOutcome::Rejected, .. } if *id == question.id)));
    let turn = turn_events(&events, 2);
    assert!(!assistant_texts(&turn).iter().any(|t| t.contains("blue")), "{turn:#?}");
    assert_nothing_unparsed(&events);
}
