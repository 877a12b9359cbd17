//! The real Gemini CLI (`@google/gemini-cli`, installed by the node agent from the
//! npm registry at its pinned version), driven over ACP by a real node agent and
//! pointed at the scripted model server: a streamed answer, a shell tool call, a
//! permission allowed and one denied through the HTTP API, plan mode, a CLI that
//! dies under its session, and a resume after the node agent restarts.
//!
//! Slow tier: the first test to run installs the CLI (about 30 s), each session
//! starts a node.js CLI (several seconds on a loaded machine).

use crate::common;

use std::time::Duration;

use agentplane_model_server::ModelServer;
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;

/// Long enough for an npm install and a cold CLI start on a loaded 2-core machine;
/// a correct run never gets near it.
const AGENT_PATIENCE: Duration = Duration::from_secs(300);

/// A scratch HOME and working directory for one session, and the model server.
struct Setup {
    model: ModelServer,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Setup {
    async fn new() -> Setup {
        Setup {
            model: ModelServer::start().await.unwrap(),
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn request(&self, permission_mode: PermissionMode) -> CreateSessionRequest {
        let env = [
            ("HOME".to_string(), self.home.path().display().to_string()),
            ("GOOGLE_GEMINI_BASE_URL".to_string(), self.model.url()),
            ("GEMINI_API_KEY".to_string(), "test-key".to_string()),
        ];
        CreateSessionRequest {
            agent: "gemini".into(),
            permission_mode: Some(permission_mode),
            working_dir: Some(self.work.path().display().to_string()),
            env: env.into(),
            ..Default::default()
        }
    }
}

/// A session's events from `after` until one matches; returns those up to it.
async fn until(
    client: &Client,
    id: &str,
    after: u64,
    what: &str,
    matches: impl Fn(&UniversalEvent) -> bool,
) -> Vec<UniversalEvent> {
    session_events_until(client, id, after, AGENT_PATIENCE, what, matches).await
}

async fn started(client: &Client, id: &str) -> Vec<UniversalEvent> {
    until(client, id, 0, "session.started", |e| {
        e.kind() == EventType::SessionStarted || e.kind() == EventType::SessionEnded
    })
    .await
}

/// Sends a message and waits for its turn to end.
async fn turn(client: &Client, id: &str, message: &str) -> Vec<UniversalEvent> {
    let after = client.get_session(id).await.unwrap().last_sequence;
    client.send_message(id, message).await.unwrap();
    until(client, id, after, "turn.ended", |e| e.kind() == EventType::TurnEnded).await
}

fn turn_status(events: &[UniversalEvent]) -> TurnStatus {
    match &events.last().unwrap().data {
        EventData::TurnEnded { status, .. } => *status,
        other => panic!("not a turn end: {other:?}"),
    }
}

fn assistant_text(events: &[UniversalEvent]) -> String {
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
            _ => None,
        })
        .collect();
    texts.last().cloned().unwrap_or_else(|| panic!("no assistant message among {events:#?}"))
}

fn items(events: &[UniversalEvent], kind: ItemKind) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == kind => Some(item.clone()),
            _ => None,
        })
        .collect()
}

fn permission_request(events: &[UniversalEvent]) -> PermissionRequest {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::PermissionRequested(request) => Some(request.clone()),
            _ => None,
        })
        .expect("a permission request")
}

/// What Gemini CLI reports of a turn's usage over ACP: the input and output tokens
/// of the model calls since the previous turn, its input counting the cached tokens
/// in (it reports no cached count of its own).
#[derive(Default)]
struct GeminiUsage {
    answers: usize,
    sum: Usage,
}

impl GeminiUsage {
    fn turn(&mut self, model: &ModelServer, events: &[UniversalEvent]) {
        let answered = model.usage();
        let reported = reported_usage(&answered[self.answers..]);
        let expected = Usage {
            input_tokens: reported.input_tokens + reported.cache_read_tokens,
            output_tokens: reported.output_tokens,
            ..Usage::default()
        };
        let usage = turn_usage(events);
        assert_eq!(usage, Some(expected), "answers {:#?}", &answered[self.answers..]);
        self.answers = answered.len();
        self.sum.add(&expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_a_tool_call_and_a_resume_after_a_restart() {
    let setup = Setup::new().await;
    let server = TestServer::start_with_agents().await;
    server.client.create_session("g", &setup.request(PermissionMode::Bypass)).await.unwrap();
    let start = started(&server.client, "g").await;
    let EventData::SessionStarted { agent_session_id: Some(gemini_id), .. } = &start.last().unwrap().data else {
        panic!("the session did not start: {start:#?}")
    };
    let gemini_id = gemini_id.clone();
    // The driver wrote what the CLI needs into the session's HOME.
    let settings = std::fs::read_to_string(setup.home.path().join(".gemini/settings.json")).unwrap();
    assert!(settings.contains("gemini-api-key"), "{settings}");

    let first = turn(&server.client, "g", "hello gemini").await;
    assert_eq!(turn_status(&first), TurnStatus::Completed, "{first:#?}");
    let mut usage = GeminiUsage::default();
    usage.turn(&setup.model, &first);
    let text = assistant_text(&first);
    assert_eq!(text, "scripted reply: 1 messages in context");
    let deltas: String = first
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, text, "the answer streams in deltas that add up to it");
    assert!(first.iter().filter(|e| e.kind() == EventType::ItemDelta).count() >= 2);
    let request = &setup.model.requests()[0];
    assert!(request.uri.starts_with("/v1beta/models/gemini-2.5-pro:streamGenerateContent"), "{}", request.uri);

    let second = turn(&server.client, "g", "please [[run:echo hi]]").await;
    assert_eq!(turn_status(&second), TurnStatus::Completed, "{second:#?}");
    usage.turn(&setup.model, &second);
    let calls = items(&second, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{second:#?}");
    assert_eq!(
        (calls[0].tool.as_deref(), &calls[0].input.as_ref().unwrap()["command"]),
        (Some("run_shell_command"), &serde_json::json!("echo hi"))
    );
    let results = items(&second, ItemKind::ToolResult);
    assert_eq!(
        (results[0].call_id.as_deref(), results[0].status),
        (Some(calls[0].id.as_str()), Some(ItemStatus::Completed))
    );
    assert_eq!(assistant_text(&second), "tool said: hi", "the model saw the command's output");
    assert!(second.iter().all(|e| e.kind() != EventType::PermissionRequested), "bypass never asks");
    let before = server.client.get_session("g").await.unwrap();
    assert_eq!(before.usage, usage.sum, "the session's usage is its turns'");

    let server = server.restart().await;
    let resumed = until(&server.client, "g", before.last_sequence, "the resumed start", |e| {
        matches!(e.data, EventData::SessionStarted { resumed: true, .. } | EventData::SessionEnded { .. })
    })
    .await;
    assert!(
        matches!(&resumed.last().unwrap().data, EventData::SessionStarted { agent_session_id: Some(id), .. } if *id == gemini_id),
        "{resumed:#?}"
    );
    let asked_before = setup.model.requests().len();
    let third = turn(&server.client, "g", "still there?").await;
    assert_eq!(turn_status(&third), TurnStatus::Completed, "{third:#?}");
    let count: usize = assistant_text(&third)
        .strip_prefix("scripted reply: ")
        .and_then(|t| t.strip_suffix(" messages in context"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a scripted reply: {third:#?}"));
    assert!(count >= 5, "the resumed conversation holds the earlier turns: {count}");
    let last = setup.model.requests().into_iter().skip(asked_before).last().expect("the resumed turn asked the model");
    let body = last.body.to_string();
    assert!(
        body.contains("hello gemini") && body.contains("[[run:echo hi]]") && body.contains("still there?"),
        "{body}"
    );
    // Nothing of the replayed history came back as new events.
    assert_eq!(items(&third, ItemKind::ToolCall).len(), 0, "{third:#?}");
    assert_eq!(
        third
            .iter()
            .filter(|e| matches!(&e.data, EventData::ItemCompleted { item } if item.role == Some(Role::Assistant)))
            .count(),
        1
    );

    let all = until(&server.client, "g", 0, "everything", |e| e.sequence == third.last().unwrap().sequence).await;
    assert_nothing_unparsed(&all);
    server.client.end_session("g").await.unwrap();
}

/// The conversation goes on in another node agent with a new, empty HOME (a new
/// sandbox, the old one deleted): Gemini's chat travels in the conversation's tar,
/// and `session/load` finds it in the new HOME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_in_another_node_agent_with_a_new_home() {
    let setup = Setup::new().await;
    let server = TestServer::start_with_agents().await;
    server.client.create_session("moved", &setup.request(PermissionMode::Bypass)).await.unwrap();
    started(&server.client, "moved").await;
    let first = turn(&server.client, "moved", "remember the word albatross").await;
    assert_eq!(turn_status(&first), TurnStatus::Completed, "{first:#?}");
    let before = server.client.get_session("moved").await.unwrap();
    let gemini_id = before.agent_session_id.clone().expect("gemini's session id");
    let tar = server.client.conversation("moved").await.unwrap();
    server.stop().await;
    let Setup { model, home: old_home, work } = setup;
    drop(old_home);

    let elsewhere = TestServer::start_with_agents().await;
    let setup = Setup { model, home: tempfile::tempdir().unwrap(), work };
    elsewhere.client.stage_conversation("moved", tar, before.last_sequence).await.unwrap();
    elsewhere.client.create_session("moved", &setup.request(PermissionMode::Bypass)).await.unwrap();
    let asked_before = setup.model.requests().len();
    // From the staged log's end: the resumed start may come before the message.
    elsewhere.client.send_message("moved", "what was the word?").await.unwrap();
    let second =
        until(&elsewhere.client, "moved", before.last_sequence, "turn.ended", |e| e.kind() == EventType::TurnEnded)
            .await;
    assert_eq!(turn_status(&second), TurnStatus::Completed, "{second:#?}");
    assert_eq!(second[0].sequence, before.last_sequence + 1, "the log goes on");
    assert!(
        second.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id: Some(id), .. } if *id == gemini_id)),
        "{second:#?}"
    );
    let last = setup.model.requests().into_iter().skip(asked_before).last().expect("the moved turn asked the model");
    let body = last.body.to_string();
    assert!(
        body.contains("remember the word albatross")
            && body.contains(&assistant_text(&first))
            && body.contains("what was the word?"),
        "the earlier turn is in context: {body}"
    );
    assert_nothing_unparsed(&second);
    elsewhere.client.end_session("moved").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_asked_and_answered_through_http() {
    let setup = Setup::new().await;
    let server = TestServer::start_with_agents().await;
    server.client.create_session("p", &setup.request(PermissionMode::Default)).await.unwrap();
    started(&server.client, "p").await;

    let after = server.client.get_session("p").await.unwrap().last_sequence;
    server.client.send_message("p", "[[run:touch allowed.txt]]").await.unwrap();
    let asked =
        until(&server.client, "p", after, "a permission request", |e| e.kind() == EventType::PermissionRequested).await;
    let request = permission_request(&asked);
    assert_eq!(
        (request.tool.as_str(), &request.input["command"]),
        ("run_shell_command", &serde_json::json!("touch allowed.txt"))
    );
    assert_eq!(request.options, [PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    assert!(!setup.work.path().join("allowed.txt").exists(), "nothing runs before the answer");
    assert_eq!(server.client.get_session("p").await.unwrap().state, SessionState::AwaitingInput);
    server.client.reply_permission("p", &request.id, PermissionReply::Once).await.unwrap();
    let allowed = until(&server.client, "p", after, "turn.ended", |e| e.kind() == EventType::TurnEnded).await;
    assert_eq!(turn_status(&allowed), TurnStatus::Completed, "{allowed:#?}");
    assert!(setup.work.path().join("allowed.txt").exists(), "the allowed command ran");
    assert!(allowed.iter().any(|e| matches!(&e.data, EventData::PermissionResolved { id, reply: Some(PermissionReply::Once) } if *id == request.id)));
    let result = &items(&allowed, ItemKind::ToolResult)[0];
    // The request names its tool call; its own id is the node agent's, not the call's.
    assert_eq!((result.call_id.as_deref(), result.status), (request.item_id.as_deref(), Some(ItemStatus::Completed)));
    assert_eq!(assistant_text(&allowed), "tool said: (empty)");

    let after = allowed.last().unwrap().sequence;
    server.client.send_message("p", "[[run:touch denied.txt]]").await.unwrap();
    let asked =
        until(&server.client, "p", after, "a permission request", |e| e.kind() == EventType::PermissionRequested).await;
    let request = permission_request(&asked);
    server.client.reply_permission("p", &request.id, PermissionReply::Reject).await.unwrap();
    let denied = until(&server.client, "p", after, "turn.ended", |e| e.kind() == EventType::TurnEnded).await;
    assert_eq!(turn_status(&denied), TurnStatus::Completed, "{denied:#?}");
    assert!(!setup.work.path().join("denied.txt").exists(), "the denied command did not run");
    let result = &items(&denied, ItemKind::ToolResult)[0];
    // The request names its tool call; its own id is the node agent's, not the call's.
    assert_eq!((result.call_id.as_deref(), result.status), (request.item_id.as_deref(), Some(ItemStatus::Denied)));
    assert!(assistant_text(&denied).contains("canceled by the user"), "the model heard of the refusal: {denied:#?}");

    // `always`: this call runs, and the next one of the same command does without asking.
    let after = denied.last().unwrap().sequence;
    server.client.send_message("p", "[[run:touch always1.txt]]").await.unwrap();
    let asked =
        until(&server.client, "p", after, "a permission request", |e| e.kind() == EventType::PermissionRequested).await;
    server.client.reply_permission("p", &permission_request(&asked).id, PermissionReply::Always).await.unwrap();
    let always = until(&server.client, "p", after, "turn.ended", |e| e.kind() == EventType::TurnEnded).await;
    assert_eq!(turn_status(&always), TurnStatus::Completed, "{always:#?}");
    assert!(setup.work.path().join("always1.txt").exists());
    let unasked = turn(&server.client, "p", "[[run:touch always2.txt]]").await;
    assert_eq!(turn_status(&unasked), TurnStatus::Completed, "{unasked:#?}");
    assert!(unasked.iter().all(|e| e.kind() != EventType::PermissionRequested), "allowed always: {unasked:#?}");
    assert!(setup.work.path().join("always2.txt").exists());

    let all = until(&server.client, "p", 0, "everything", |e| e.sequence == unasked.last().unwrap().sequence).await;
    assert_nothing_unparsed(&all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_offers_no_shell_and_agent_modes_are_refused() {
    let setup = Setup::new().await;
    let server = TestServer::start_with_agents().await;
    let refused = server
        .client
        .create_session(
            "m",
            &CreateSessionRequest { agent_mode: Some("build".into()), ..setup.request(PermissionMode::Plan) },
        )
        .await;
    assert_eq!(refused.unwrap_err().problem_code(), Some("mode_not_supported"));

    server.client.create_session("plan", &setup.request(PermissionMode::Plan)).await.unwrap();
    started(&server.client, "plan").await;
    let events = turn(&server.client, "plan", "[[run:touch planned.txt]]").await;
    assert_eq!(turn_status(&events), TurnStatus::Completed, "{events:#?}");
    assert_eq!(assistant_text(&events), "no shell tool offered to run \"touch planned.txt\"");
    let tools = setup.model.requests().last().unwrap().body["tools"].clone();
    assert!(!tools.to_string().contains("run_shell_command"), "plan mode offers the model no shell: {tools}");
    assert!(!setup.work.path().join("planned.txt").exists());
    assert_nothing_unparsed(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_dies_fails_its_turn_with_its_exit_and_the_next_turn_resumes() {
    let setup = Setup::new().await;
    let server = TestServer::start_with_agents().await;
    server.client.create_session("d", &setup.request(PermissionMode::Bypass)).await.unwrap();
    started(&server.client, "d").await;
    let first = turn(&server.client, "d", "remember me").await;
    assert_eq!(turn_status(&first), TurnStatus::Completed, "{first:#?}");

    // The CLI of this session: the node process whose environment has its HOME.
    let home = format!("HOME={}", setup.home.path().display());
    let gemini: Vec<u32> = live_processes()
        .into_iter()
        .filter(|p| {
            let environ = std::fs::read(format!("/proc/{}/environ", p.pid)).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
            environ.split(|b| *b == 0).any(|v| v == home.as_bytes())
                && String::from_utf8_lossy(&cmdline).contains("--acp")
        })
        .map(|p| p.pid)
        .collect();
    assert!(!gemini.is_empty(), "the session's CLI runs");
    for pid in &gemini {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    }
    until_gone(&gemini).await;

    let failed = turn(&server.client, "d", "are you there?").await;
    assert_eq!(turn_status(&failed), TurnStatus::Failed, "{failed:#?}");
    let error = failed.iter().find_map(|e| match &e.data {
        EventData::Error { message, code } => Some((message.clone(), code.clone())),
        _ => None,
    });
    let (message, code) = error.unwrap_or_else(|| panic!("an error event: {failed:#?}"));
    assert_eq!(code.as_deref(), Some("agent_process_exited"), "{message}");

    // The next turn starts the CLI again on the same conversation.
    let again = turn(&server.client, "d", "and now?").await;
    assert_eq!(turn_status(&again), TurnStatus::Completed, "{again:#?}");
    let body = setup.model.requests().last().unwrap().body.to_string();
    assert!(body.contains("remember me") && body.contains("and now?"), "{body}");
    assert_nothing_unparsed(&again);
}

async fn until_gone(pids: &[u32]) {
    let gone = async {
        while pids.iter().any(|pid| proc_stat(*pid).is_some_and(|p| !matches!(p.state, 'Z' | 'X'))) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(AGENT_PATIENCE, gone).await.expect("the CLI dies");
}
