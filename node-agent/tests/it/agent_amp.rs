//! The old pure-JS amp CLI (`@sourcegraph/amp@0.0.1767830505-ga62310`, installed by
//! the node agent from the npm registry) through the node agent's HTTP API, with
//! `AMP_URL` at the scripted model server: what works (a text turn, a tool call under
//! bypass, a resume after the node agent restarts), and what cannot (a command amp
//! would ask about is refused, `permission_denied`, or waits for an approval `-x`
//! cannot give until the turn's timeout kills it, `timeout`), never a hang.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentplane_model_server::ModelServer;
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;

const INSTALL_PATIENCE: Duration = Duration::from_secs(600);
const TURN_PATIENCE: Duration = Duration::from_secs(180);

/// Installs amp once per test binary (see `install_pi_once` in agent_pi.rs for why).
async fn install_amp_once() {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let installer = agentplane_node_agent::agents::install::Installer::new(shared_agents_dir());
            let install = installer.ensure(agentplane_node_agent::agents::AgentId::Amp, None);
            tokio::time::timeout(INSTALL_PATIENCE, install).await.expect("amp installs in time").expect("amp installs");
        })
        .await;
}

struct Dirs {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() }
    }
}

fn amp_session(model: &ModelServer, dirs: &Dirs, permission_mode: PermissionMode) -> CreateSessionRequest {
    let env: BTreeMap<String, String> = [
        ("HOME".to_string(), dirs.home.path().display().to_string()),
        ("AMP_URL".to_string(), model.url()),
        ("AMP_API_KEY".to_string(), "test-key".to_string()),
    ]
    .into();
    CreateSessionRequest {
        agent: "amp".into(),
        permission_mode: Some(permission_mode),
        working_dir: Some(dirs.work.path().display().to_string()),
        env,
        ..Default::default()
    }
}

fn turn_status(events: &[UniversalEvent]) -> TurnStatus {
    match &events.last().unwrap().data {
        EventData::TurnEnded { status, .. } => *status,
        other => panic!("not a turn end: {other:?}"),
    }
}

fn completed(events: &[UniversalEvent], kind: ItemKind) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == kind && item.role != Some(Role::User) => {
                Some(item.clone())
            }
            _ => None,
        })
        .collect()
}

fn reply_text(events: &[UniversalEvent]) -> String {
    completed(events, ItemKind::Message)
        .last()
        .and_then(|m| m.text.clone())
        .unwrap_or_else(|| panic!("no assistant message in {events:#?}"))
}

fn error_event(events: &[UniversalEvent]) -> (String, Option<String>) {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::Error { message, code } => Some((message.clone(), code.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error event in {events:#?}"))
}

/// The `messages` of the model server's Messages requests that hold `text` (amp also
/// asks the model for a thread title, in a request of its own).
fn requests_with(model: &ModelServer, text: &str) -> Vec<String> {
    model
        .requests()
        .into_iter()
        .filter(|r| r.uri.contains("/v1/messages"))
        .map(|r| r.body["messages"].to_string())
        .filter(|messages| messages.contains(text))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amp_answers_runs_a_tool_under_bypass_and_resumes_after_a_restart() {
    install_amp_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs::new();
    server.client.create_session("amp", &amp_session(&model, &dirs, PermissionMode::Bypass)).await.unwrap();

    // A message that looks like an option is still a message.
    server.client.send_message("amp", "--help say hello").await.unwrap();
    let first = turn_events(&server.client, "amp", 0, 1, TURN_PATIENCE).await;
    assert_nothing_unparsed(&first);
    assert_eq!(turn_status(&first), TurnStatus::Completed, "{first:#?}");
    // The turn's usage is its assistant messages': what the model server reported to
    // the conversation's requests. Amp asks Haiku for the thread's title on the side
    // (with a tool of its own); its stream reports none of that call.
    let conversation_usage = || model.usage().into_iter().filter(|u| !u.model.contains("haiku")).collect::<Vec<_>>();
    let first_answers = conversation_usage();
    assert_eq!(turn_usage(&first), Some(reported_usage(&first_answers)), "{:#?}", model.usage());
    let thread = first
        .iter()
        .find_map(|e| match &e.data {
            EventData::SessionStarted { agent_session_id, .. } => agent_session_id.clone(),
            _ => None,
        })
        .expect("the thread is known from the start");
    assert!(thread.starts_with("T-"), "{thread}");
    assert!(reply_text(&first).starts_with("scripted reply: "), "{first:#?}");
    assert!(!requests_with(&model, "--help say hello").is_empty(), "the model got the message as it was");
    assert!(
        model.requests().iter().any(|r| r.uri == "/api/internal?getUserInfo"),
        "amp asked the scripted server who it is"
    );

    // A tool call under bypass: amp runs it and the model quotes the output.
    let offset = first.last().unwrap().sequence;
    server.client.send_message("amp", "please [[run:echo hi]]").await.unwrap();
    let second = turn_events(&server.client, "amp", offset, 2, TURN_PATIENCE).await;
    assert_nothing_unparsed(&second);
    assert_eq!(turn_status(&second), TurnStatus::Completed, "{second:#?}");
    let calls = completed(&second, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{second:#?}");
    assert_eq!(calls[0].tool.as_deref(), Some("Bash"));
    let results = completed(&second, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id.as_deref(), Some(calls[0].id.as_str()));
    assert_eq!(results[0].output.as_deref().map(str::trim), Some("hi"));
    let answer = reply_text(&second);
    assert!(answer.starts_with("tool said: ") && answer.contains("hi"), "{answer}");
    let answers = conversation_usage();
    let reported = reported_usage(&answers[first_answers.len()..]);
    assert_eq!((answers.len(), turn_usage(&second)), (3, Some(reported)), "{:#?}", model.usage());
    assert_eq!(server.client.get_session("amp").await.unwrap().usage, reported_usage(&answers));
    // The second turn continued the same thread: the first message was in its context.
    assert!(requests_with(&model, "[[run:echo hi]]").iter().any(|m| m.contains("say hello")));

    // The node agent restarts: amp continues its thread, with the earlier messages in context.
    let server = server.restart().await;
    let offset = second.last().unwrap().sequence;
    server.client.send_message("amp", "after the restart").await.unwrap();
    let third = turn_events(&server.client, "amp", offset, 3, TURN_PATIENCE).await;
    assert_nothing_unparsed(&third);
    assert_eq!(turn_status(&third), TurnStatus::Completed, "{third:#?}");
    assert!(third.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id, .. } if agent_session_id.as_deref() == Some(thread.as_str()))));
    let resumed = requests_with(&model, "after the restart");
    assert!(resumed.iter().any(|m| m.contains("say hello") && m.contains("[[run:echo hi]]")), "{resumed:#?}");
    server.client.end_session("amp").await.unwrap();
}

/// The conversation goes on in another node agent with a new, empty HOME (a new
/// sandbox, the old one deleted): amp keeps no file the node agent carries, the
/// thread's id travels in the record, and `threads continue` takes the thread from
/// amp's server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_in_another_node_agent_with_a_new_home() {
    install_amp_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs::new();
    server.client.create_session("moved", &amp_session(&model, &dirs, PermissionMode::Bypass)).await.unwrap();
    server.client.send_message("moved", "remember the word albatross").await.unwrap();
    let first = turn_events(&server.client, "moved", 0, 1, TURN_PATIENCE).await;
    assert_eq!(turn_status(&first), TurnStatus::Completed, "{first:#?}");
    let before = server.client.get_session("moved").await.unwrap();
    let thread = before.agent_session_id.clone().expect("amp's thread");
    let tar = server.client.conversation("moved").await.unwrap();
    server.stop().await;
    let Dirs { home: old_home, work } = dirs;
    drop(old_home);

    let elsewhere = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work };
    let asked_before = model.requests().len();
    elsewhere.client.stage_conversation("moved", tar, before.last_sequence).await.unwrap();
    elsewhere.client.create_session("moved", &amp_session(&model, &dirs, PermissionMode::Bypass)).await.unwrap();
    elsewhere.client.send_message("moved", "what was the word?").await.unwrap();
    let second = turn_events(&elsewhere.client, "moved", before.last_sequence, 2, TURN_PATIENCE).await;
    assert_nothing_unparsed(&second);
    assert_eq!(turn_status(&second), TurnStatus::Completed, "{second:#?}");
    assert_eq!(second[0].sequence, before.last_sequence + 1, "the log goes on");
    assert!(
        second.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id, .. } if agent_session_id.as_deref() == Some(thread.as_str()))),
        "{second:#?}"
    );
    // The new HOME has no copy of the thread: amp took it from its server.
    let fetched = model.requests().into_iter().skip(asked_before).any(|r| r.uri == format!("/api/threads/{thread}"));
    assert!(fetched, "amp asked its server for the thread: {:#?}", model.requests());
    let moved = requests_with(&model, "what was the word?");
    let answer = reply_text(&first);
    assert!(
        moved.iter().any(|m| m.contains("remember the word albatross") && m.contains(&answer)),
        "the earlier turn is in context: {moved:#?}"
    );
    elsewhere.client.end_session("moved").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_amp_would_ask_about_fails_the_turn_instead_of_hanging() {
    install_amp_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs::new();
    let mut request = amp_session(&model, &dirs, PermissionMode::Default);
    request.env.insert("AGENTPLANE_AMP_TURN_TIMEOUT_SECS".into(), "20".into());
    // amp's `--mode`: `smart` is the one mode amp runs with `--stream-json`.
    request.agent_mode = Some("smart".into());
    server.client.create_session("asks", &request).await.unwrap();
    // amp's default rules ask before `git push`, which `-x` cannot do: amp either
    // refuses the call (permission_denied) or, in some runs, waits for an approval
    // nobody can give, until the turn's timeout kills it (timeout). Never a hang.
    let asked = Instant::now();
    server.client.send_message("asks", "please [[run:git push origin main]]").await.unwrap();
    let turn = turn_events(&server.client, "asks", 0, 1, TURN_PATIENCE).await;
    assert_nothing_unparsed(&turn);
    assert_eq!(turn_status(&turn), TurnStatus::Failed, "{turn:#?}");
    let (message, code) = error_event(&turn);
    assert!(matches!(code.as_deref(), Some("permission_denied" | "timeout")), "{code:?}: {message}");
    assert!(asked.elapsed() < Duration::from_secs(120), "the session's timeout, not the default");
    let calls = completed(&turn, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "the call amp wanted to make is reported: {turn:#?}");
    assert!(completed(&turn, ItemKind::ToolResult).is_empty(), "nothing ran");

    // The session goes on.
    let offset = turn.last().unwrap().sequence;
    server.client.send_message("asks", "never mind").await.unwrap();
    let next = turn_events(&server.client, "asks", offset, 2, TURN_PATIENCE).await;
    assert_nothing_unparsed(&next);
    assert_eq!(turn_status(&next), TurnStatus::Completed, "{next:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_its_timeout_is_killed_and_fails_with_timeout() {
    install_amp_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs::new();
    let mut request = amp_session(&model, &dirs, PermissionMode::Bypass);
    request.env.insert("AGENTPLANE_AMP_TURN_TIMEOUT_SECS".into(), "15".into());
    server.client.create_session("slow", &request).await.unwrap();
    let marker = dirs.work.path().join("finished");
    let command = format!("sleep 300 && touch {}", marker.display());
    server.client.send_message("slow", &format!("please [[run:{command}]]")).await.unwrap();
    let asked = Instant::now();
    let turn = turn_events(&server.client, "slow", 0, 1, TURN_PATIENCE).await;
    assert_eq!(turn_status(&turn), TurnStatus::Failed, "{turn:#?}");
    let (message, code) = error_event(&turn);
    assert_eq!(code.as_deref(), Some("timeout"), "{message}");
    assert!(asked.elapsed() < Duration::from_secs(120), "the timeout cut the turn short");
    assert_eq!(completed(&turn, ItemKind::ToolCall).len(), 1, "amp was running the tool: {turn:#?}");
    // The tool's `sleep` went with amp's process group.
    let sleeping = live_processes().into_iter().filter(|p| p.comm == "sleep").any(|p| {
        std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| String::from_utf8_lossy(&c).contains("300"))
            && std::fs::read_link(format!("/proc/{}/cwd", p.pid))
                .is_ok_and(|cwd| cwd == dirs.work.path().canonicalize().unwrap())
    });
    assert!(!sleeping, "the tool's command was killed");
}

#[tokio::test]
async fn modes_amp_lacks_are_refused() {
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs::new();
    let error =
        server.client.create_session("plan", &amp_session(&model, &dirs, PermissionMode::Plan)).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("mode_not_supported"), "{error}");
    let moded =
        CreateSessionRequest { agent_mode: Some("rush".into()), ..amp_session(&model, &dirs, PermissionMode::Bypass) };
    assert_eq!(
        server.client.create_session("moded", &moded).await.unwrap_err().problem_code(),
        Some("mode_not_supported")
    );
    let mut bad = amp_session(&model, &dirs, PermissionMode::Bypass);
    bad.env.insert("AGENTPLANE_AMP_TURN_TIMEOUT_SECS".into(), "soon".into());
    assert_eq!(server.client.create_session("bad", &bad).await.unwrap_err().problem_code(), Some("invalid_request"));
    let agent = server.client.get_agent("amp").await.unwrap();
    assert!(!agent.capabilities.permissions && agent.capabilities.resume);
    let modes = server.client.agent_modes("amp").await.unwrap();
    let names: Vec<_> = modes.agent_modes.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(names, ["smart"], "amp runs --stream-json in no other mode");
    assert_eq!(modes.permission_modes, [PermissionMode::Default, PermissionMode::Bypass]);
}
