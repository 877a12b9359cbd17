//! The real pi CLI (`@mariozechner/pi-coding-agent`, installed by the node agent from
//! the npm registry) driven through the node agent's HTTP API, pointed at the
//! scripted model server over the Anthropic Messages API: a text turn, a tool call, a
//! second message to the same process, a resume after the node agent restarts, and
//! a clear `agent_process_exited` when pi dies.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use agentplane_model_server::ModelServer;
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;

/// Installing pi (a cold npm install) and starting node on a loaded 2-core machine.
const INSTALL_PATIENCE: Duration = Duration::from_secs(600);
/// One turn against the local model server.
const TURN_PATIENCE: Duration = Duration::from_secs(180);

struct Dirs {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

/// Installs pi into the tests' shared agents directory once per test binary: the
/// tests of this file run at once, and two installs of one version at the same time
/// in one process would share npm's scratch directory.
async fn install_pi_once() {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let installer = agentplane_node_agent::agents::install::Installer::new(shared_agents_dir());
            let install = installer.ensure(agentplane_node_agent::agents::AgentId::Pi, None);
            tokio::time::timeout(INSTALL_PATIENCE, install).await.expect("pi installs in time").expect("pi installs");
        })
        .await;
}

fn pi_session(model: &ModelServer, dirs: &Dirs) -> CreateSessionRequest {
    let env: BTreeMap<String, String> = [
        ("HOME".to_string(), dirs.home.path().display().to_string()),
        ("ANTHROPIC_BASE_URL".to_string(), model.url()),
        ("ANTHROPIC_API_KEY".to_string(), "test-key".to_string()),
    ]
    .into();
    CreateSessionRequest {
        agent: "pi".into(),
        permission_mode: Some(PermissionMode::Bypass),
        working_dir: Some(dirs.work.path().display().to_string()),
        env,
        ..Default::default()
    }
}

fn turn_end(events: &[UniversalEvent]) -> (TurnStatus, Option<String>) {
    match &events.last().unwrap().data {
        EventData::TurnEnded { status, error, .. } => (*status, error.clone()),
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
    let messages = completed(events, ItemKind::Message);
    messages.last().and_then(|m| m.text.clone()).unwrap_or_else(|| panic!("no assistant message in {events:#?}"))
}

/// The user texts of the model server's last Messages request.
fn last_request_texts(model: &ModelServer) -> String {
    let request =
        model.requests().into_iter().rev().find(|r| r.uri.contains("/v1/messages")).expect("a Messages request");
    request.body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_answers_runs_a_tool_and_resumes_after_a_restart() {
    let model = ModelServer::start().await.unwrap();
    install_pi_once().await;
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    let created = server.client.create_session("pi", &pi_session(&model, &dirs)).await.unwrap();
    assert_eq!(created.agent, "pi");

    // A text turn: streamed, then completed.
    server.client.send_message("pi", "say hello").await.unwrap();
    let first = turn_events(&server.client, "pi", 0, 1, INSTALL_PATIENCE).await;
    assert_nothing_unparsed(&first);
    assert_eq!(turn_end(&first), (TurnStatus::Completed, None), "{first:#?}");
    // The turn's usage: exactly what the model server reported to it.
    let no_cost = |usage: Usage| Usage { cost_usd: None, ..usage };
    let first_answers = model.usage();
    assert_eq!(turn_usage(&first).map(no_cost), Some(reported_usage(&first_answers)), "{first_answers:#?}");
    let started = first.iter().find_map(|e| match &e.data {
        EventData::SessionStarted { agent_session_id, resumed, .. } => Some((agent_session_id.clone(), *resumed)),
        _ => None,
    });
    let (pi_session_id, resumed) = started.expect("session.started");
    assert!(!resumed);
    let pi_session_id = pi_session_id.expect("pi's session id is known from the start");
    let reply = reply_text(&first);
    assert_eq!(reply, "scripted reply: 1 messages in context");
    let message = completed(&first, ItemKind::Message).pop().unwrap();
    let deltas: String = first
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemDelta { item_id, delta } if *item_id == message.id => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, reply, "the text streamed as deltas");
    assert!(first.iter().any(|e| e.raw.is_some()), "native lines are kept as raw");
    // The driver wrote pi's model config into the session's HOME.
    let models = std::fs::read_to_string(dirs.home.path().join(".pi/agent/models.json")).unwrap();
    assert!(models.contains(&model.url()) && models.contains("anthropic-messages"), "{models}");
    assert!(!models.contains("test-key"), "the key is named, not written");

    // A tool call in the same pi process: the call, its result, the answer quoting it.
    let offset = first.last().unwrap().sequence;
    server.client.send_message("pi", "please [[run:echo hi]]").await.unwrap();
    let second = turn_events(&server.client, "pi", offset, 2, TURN_PATIENCE).await;
    assert_nothing_unparsed(&second);
    assert_eq!(turn_end(&second).0, TurnStatus::Completed, "{second:#?}");
    let calls = completed(&second, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{second:#?}");
    assert_eq!(calls[0].tool.as_deref(), Some("bash"));
    assert_eq!(calls[0].input.as_ref().and_then(|i| i.get("command")).and_then(|c| c.as_str()), Some("echo hi"));
    let results = completed(&second, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id.as_deref(), Some(calls[0].id.as_str()));
    assert_eq!(results[0].output.as_deref().map(str::trim), Some("hi"));
    assert_eq!(reply_text(&second), "tool said: hi");
    // Two model calls, the tool call and the answer; the session's usage is both turns'.
    let answers = model.usage();
    let reported = reported_usage(&answers[first_answers.len()..]);
    assert_eq!((answers.len(), turn_usage(&second).map(no_cost)), (3, Some(reported)), "{answers:#?}");
    let info = server.client.get_session("pi").await.unwrap();
    assert_eq!(no_cost(info.usage), reported_usage(&answers));

    // The node agent restarts: pi resumes its session, with the conversation in context.
    let server = server.restart().await;
    let info = server.client.get_session("pi").await.unwrap();
    assert_eq!(info.agent_session_id.as_deref(), Some(pi_session_id.as_str()));
    let offset = second.last().unwrap().sequence;
    server.client.send_message("pi", "after the restart").await.unwrap();
    let third = turn_events(&server.client, "pi", offset, 3, TURN_PATIENCE).await;
    assert_nothing_unparsed(&third);
    assert_eq!(turn_end(&third).0, TurnStatus::Completed, "{third:#?}");
    assert!(third.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id, .. } if agent_session_id.as_deref() == Some(pi_session_id.as_str()))));
    let context = last_request_texts(&model);
    for earlier in ["say hello", "[[run:echo hi]]", "after the restart"] {
        assert!(context.contains(earlier), "the resumed request holds {earlier:?}: {context}");
    }
    // user, assistant, user, tool call, tool result, assistant, user.
    assert_eq!(reply_text(&third), "scripted reply: 7 messages in context");
    server.client.end_session("pi").await.unwrap();
}

/// The conversation goes on in another node agent with a new, empty HOME (a new
/// sandbox, the old one deleted): pi's session file travels in the conversation's
/// tar, and the resumed pi finds it in the new HOME by the session's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_in_another_node_agent_with_a_new_home() {
    let model = ModelServer::start().await.unwrap();
    install_pi_once().await;
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    server.client.create_session("moved", &pi_session(&model, &dirs)).await.unwrap();
    server.client.send_message("moved", "remember the word albatross").await.unwrap();
    let first = turn_events(&server.client, "moved", 0, 1, INSTALL_PATIENCE).await;
    assert_eq!(turn_end(&first), (TurnStatus::Completed, None), "{first:#?}");
    let before = server.client.get_session("moved").await.unwrap();
    let pi_session_id = before.agent_session_id.clone().expect("pi's session id");
    let tar = server.client.conversation("moved").await.unwrap();
    server.stop().await;
    let Dirs { home: old_home, work } = dirs;
    drop(old_home);

    let elsewhere = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work };
    elsewhere.client.stage_conversation("moved", tar, before.last_sequence).await.unwrap();
    elsewhere.client.create_session("moved", &pi_session(&model, &dirs)).await.unwrap();
    elsewhere.client.send_message("moved", "what was the word?").await.unwrap();
    let second = turn_events(&elsewhere.client, "moved", before.last_sequence, 2, TURN_PATIENCE).await;
    assert_nothing_unparsed(&second);
    assert_eq!(turn_end(&second).0, TurnStatus::Completed, "{second:#?}");
    assert_eq!(second[0].sequence, before.last_sequence + 1, "the log goes on");
    assert!(
        second.iter().any(|e| matches!(&e.data, EventData::SessionStarted { resumed: true, agent_session_id, .. } if agent_session_id.as_deref() == Some(pi_session_id.as_str()))),
        "{second:#?}"
    );
    let context = last_request_texts(&model);
    for earlier in ["remember the word albatross", &reply_text(&first), "what was the word?"] {
        assert!(context.contains(earlier), "the moved request holds {earlier:?}: {context}");
    }
    // user, assistant, user.
    assert_eq!(reply_text(&second), "scripted reply: 3 messages in context");
    elsewhere.client.end_session("moved").await.unwrap();
}

/// pi's processes whose working directory is `dir`.
fn pi_processes_in(dir: &std::path::Path) -> Vec<u32> {
    live_processes()
        .into_iter()
        .filter(|p| std::fs::read_link(format!("/proc/{}/cwd", p.pid)).is_ok_and(|cwd| cwd == dir))
        // pi sets its process title: `pi` in comm and cmdline both.
        .filter(|p| p.comm == "pi")
        .map(|p| p.pid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_pi_fails_its_turn_clearly_and_the_next_turn_resumes() {
    let model = ModelServer::start().await.unwrap();
    install_pi_once().await;
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    server.client.create_session("doomed", &pi_session(&model, &dirs)).await.unwrap();
    server.client.send_message("doomed", "first").await.unwrap();
    let first = turn_events(&server.client, "doomed", 0, 1, INSTALL_PATIENCE).await;
    assert_eq!(turn_end(&first).0, TurnStatus::Completed, "{first:#?}");

    let work = dirs.work.path().canonicalize().unwrap();
    let pids = pi_processes_in(&work);
    assert_eq!(pids.len(), 1, "one pi per session");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0] as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    until("pi to be gone", || pi_processes_in(&work).is_empty()).await;

    let offset = first.last().unwrap().sequence;
    server.client.send_message("doomed", "are you there?").await.unwrap();
    let second = turn_events(&server.client, "doomed", offset, 2, TURN_PATIENCE).await;
    assert_eq!(turn_end(&second).0, TurnStatus::Failed, "{second:#?}");
    let error = second.iter().find_map(|e| match &e.data {
        EventData::Error { message, code } => Some((message.clone(), code.clone())),
        _ => None,
    });
    let (message, code) = error.expect("an error event");
    assert_eq!(code.as_deref(), Some("agent_process_exited"), "{message}");
    assert!(message.contains("exited"), "{message}");

    // The next message starts pi again on the same session.
    let offset = second.last().unwrap().sequence;
    server.client.send_message("doomed", "again").await.unwrap();
    let third = turn_events(&server.client, "doomed", offset, 3, TURN_PATIENCE).await;
    assert_nothing_unparsed(&third);
    assert_eq!(turn_end(&third).0, TurnStatus::Completed, "{third:#?}");
    assert!(last_request_texts(&model).contains("first"), "the restarted pi has the conversation");
    server.client.end_session("doomed").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_agent_stopping_mid_turn_does_not_wait_for_pi_and_the_turn_runs_again() {
    install_pi_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    server.client.create_session("long", &pi_session(&model, &dirs)).await.unwrap();
    // Longer than the restart may take (PATIENCE): a stop that waited for it would fail.
    server.client.send_message("long", "please [[run:sleep 25; echo late]]").await.unwrap();
    let running = session_events_until(
        &server.client,
        "long",
        0,
        INSTALL_PATIENCE,
        "pi running the tool",
        |e| matches!(&e.data, EventData::ItemStarted { item } if item.kind == ItemKind::ToolResult),
    )
    .await;
    let offset = running.last().unwrap().sequence;

    let server = server.restart().await;
    let turn = turn_events(&server.client, "long", offset, 1, TURN_PATIENCE).await;
    assert_nothing_unparsed(&turn);
    assert_eq!(turn_end(&turn).0, TurnStatus::Completed, "{turn:#?}");
    assert!(turn.iter().any(|e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })));
    // pi closes the call cut short with a result of its own ("No result provided"),
    // and the script answers that: what matters is that the turn ran again and ended.
    assert!(reply_text(&turn).starts_with("tool said: "), "{turn:#?}");
    server.client.end_session("long").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_speaks_chat_completions_when_the_session_names_an_openai_base_url() {
    install_pi_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    let mut request = pi_session(&model, &dirs);
    request.env.remove("ANTHROPIC_BASE_URL");
    request.env.remove("ANTHROPIC_API_KEY");
    request.env.insert("OPENAI_BASE_URL".into(), format!("{}/v1", model.url()));
    request.model = Some("scripted-chat".into());
    server.client.create_session("chat", &request).await.unwrap();
    server.client.send_message("chat", "please [[run:echo hi]]").await.unwrap();
    let turn = turn_events(&server.client, "chat", 0, 1, INSTALL_PATIENCE).await;
    assert_nothing_unparsed(&turn);
    assert_eq!(turn_end(&turn).0, TurnStatus::Completed, "{turn:#?}");
    assert_eq!(completed(&turn, ItemKind::ToolResult)[0].output.as_deref().map(str::trim), Some("hi"));
    assert_eq!(reply_text(&turn), "tool said: hi");
    let chat: Vec<_> = model.requests().into_iter().filter(|r| r.uri.contains("/chat/completions")).collect();
    assert!(!chat.is_empty() && chat.iter().all(|r| r.body["model"] == "scripted-chat"), "{chat:#?}");
    assert!(model.requests().iter().all(|r| !r.uri.contains("/v1/messages")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_offers_pi_only_its_read_only_tools() {
    install_pi_once().await;
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    let plan = CreateSessionRequest { permission_mode: Some(PermissionMode::Plan), ..pi_session(&model, &dirs) };
    server.client.create_session("plan", &plan).await.unwrap();
    server.client.send_message("plan", "please [[run:touch changed]]").await.unwrap();
    let turn = turn_events(&server.client, "plan", 0, 1, INSTALL_PATIENCE).await;
    assert_nothing_unparsed(&turn);
    assert_eq!(turn_end(&turn).0, TurnStatus::Completed, "{turn:#?}");
    let request =
        model.requests().into_iter().rev().find(|r| r.uri.contains("/v1/messages")).expect("a Messages request");
    let mut tools: Vec<String> =
        request.body["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    tools.sort();
    assert_eq!(tools, ["find", "grep", "ls", "read"]);
    assert_eq!(reply_text(&turn), "no shell tool offered to run \"touch changed\"");
    assert!(!dirs.work.path().join("changed").exists());
}

#[tokio::test]
async fn modes_pi_cannot_honour_are_refused() {
    let model = ModelServer::start().await.unwrap();
    let server = TestServer::start_with_agents().await;
    let dirs = Dirs { home: tempfile::tempdir().unwrap(), work: tempfile::tempdir().unwrap() };
    let asks = CreateSessionRequest { permission_mode: Some(PermissionMode::Default), ..pi_session(&model, &dirs) };
    let error = server.client.create_session("asks", &asks).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("mode_not_supported"), "{error}");
    let moded = CreateSessionRequest { agent_mode: Some("build".into()), ..pi_session(&model, &dirs) };
    let error = server.client.create_session("moded", &moded).await.unwrap_err();
    assert_eq!(error.problem_code(), Some("mode_not_supported"), "{error}");
    let modes = server.client.agent_modes("pi").await.unwrap();
    assert!(modes.agent_modes.is_empty());
    assert_eq!(modes.permission_modes, [PermissionMode::Plan, PermissionMode::Bypass]);
    let agent = server.client.get_agent("pi").await.unwrap();
    assert!(!agent.capabilities.permissions && agent.capabilities.resume && agent.capabilities.streaming_deltas);
}
