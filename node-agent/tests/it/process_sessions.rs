//! Processes that feed a session (`sessionId` on `POST /v1/processes`), with the
//! built-in mock agent on a real node agent: the process as a `tool_result` item, its
//! output carried to the agent with the next message, its end with the session's.

use crate::common;

use agentplane_node_agent::client::{Client, SessionStreamItem};
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

async fn mock_session(client: &Client, id: &str) {
    client.create_session(id, &CreateSessionRequest { agent: "mock".into(), ..Default::default() }).await.unwrap();
}

fn feeding(session: &str, command: &str, args: &[&str]) -> CreateProcessRequest {
    CreateProcessRequest {
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        session_id: Some(session.into()),
        ..Default::default()
    }
}

/// A session's events over SSE, from the first; waits are on events, never on time.
struct Events {
    stream: BoxStream<'static, agentplane_node_agent::client::ClientResult<SessionStreamItem>>,
}

impl Events {
    async fn open(client: &Client, id: &str) -> Events {
        Events { stream: client.session_events_sse(id, None, None).await.unwrap() }
    }

    /// Events up to and including the first that matches.
    async fn until(&mut self, what: &str, matches: impl Fn(&UniversalEvent) -> bool) -> Vec<UniversalEvent> {
        let mut seen = Vec::new();
        loop {
            match within(what, self.stream.next()).await {
                Some(Ok(SessionStreamItem::Event(event))) => {
                    let done = matches(&event);
                    seen.push(*event);
                    if done {
                        return seen;
                    }
                }
                Some(Ok(SessionStreamItem::Gap(gap))) => panic!("unexpected gap {gap:?}"),
                Some(Err(e)) => panic!("stream failed: {e}"),
                None => panic!("the stream ended before {what}; got {seen:#?}"),
            }
        }
    }
}

fn process_item<'a>(
    events: &'a [UniversalEvent],
    kind: EventType,
    process: &str,
) -> Option<(&'a UniversalEvent, &'a Item)> {
    let id = format!("process-{process}");
    events.iter().find_map(|e| match &e.data {
        EventData::ItemStarted { item } | EventData::ItemCompleted { item } if e.kind() == kind && item.id == id => {
            Some((e, item))
        }
        _ => None,
    })
}

fn completed_with(id: String) -> impl Fn(&UniversalEvent) -> bool {
    move |e| matches!(&e.data, EventData::ItemCompleted { item } if item.id == id)
}

#[tokio::test]
async fn a_process_feeds_its_session_and_the_next_message_carries_its_output() {
    let server = TestServer::start().await;
    mock_session(&server.client, "s1").await;
    let mut events = Events::open(&server.client, "s1").await;

    let process = server
        .client
        .create_process(&feeding("s1", "sh", &["-c", "echo built 42 targets; echo warning: slow >&2; exit 3"]))
        .await
        .unwrap();
    assert_eq!(process.session_id.as_deref(), Some("s1"));
    let seen = events.until("the process's item.completed", completed_with(format!("process-{}", process.id))).await;

    let (started_event, started) =
        process_item(&seen, EventType::ItemStarted, &process.id).expect("item.started first");
    assert_eq!(started_event.source, EventSource::Daemon);
    assert_eq!(started.kind, ItemKind::ToolResult);
    assert_eq!(started.status, Some(ItemStatus::InProgress));
    let (completed_event, completed) = process_item(&seen, EventType::ItemCompleted, &process.id).unwrap();
    assert!(started_event.sequence < completed_event.sequence);
    assert_eq!(completed_event.source, EventSource::Daemon);
    assert_eq!(completed.kind, ItemKind::ToolResult);
    assert_eq!(completed.status, Some(ItemStatus::Failed), "exit 3 is a failure");
    let input = completed.input.as_ref().unwrap();
    assert_eq!(input["exitCode"], 3);
    assert_eq!(input["command"], "sh");
    assert_eq!(input["processId"], process.id.as_str());
    let output = completed.output.as_deref().unwrap();
    assert_eq!(output, "built 42 targets\n--- stderr ---\nwarning: slow\n");

    // The listing knows which processes feed which session.
    let listed = server
        .client
        .list_processes(&ListProcessesQuery { session: Some("s1".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [process.id.as_str()]);
    let other = server
        .client
        .list_processes(&ListProcessesQuery { session: Some("other".into()), ..Default::default() })
        .await
        .unwrap();
    assert!(other.is_empty());

    // The mock quotes what it received: the output came first, then the message.
    server.client.send_message("s1", "what happened?").await.unwrap();
    let turn = events.until("the first turn's end", |e| e.kind() == EventType::TurnEnded).await;
    let user = turn
        .iter()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::User) => item.text.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(user, "what happened?", "the user's item keeps the person's own text");
    let reply = turn
        .iter()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
            _ => None,
        })
        .unwrap();
    let delivered = "Output of `sh -c 'echo built 42 targets; echo warning: slow >&2; exit 3'` (exit 3):\n```\n\
                     built 42 targets\n--- stderr ---\nwarning: slow\n```\n\nwhat happened?";
    assert!(reply.ends_with(delivered), "the agent got the output with the message: {reply:?}");

    // Delivered once: the next message goes alone.
    server.client.send_message("s1", "thanks").await.unwrap();
    let turn = events.until("the second turn's end", |e| e.kind() == EventType::TurnEnded).await;
    let reply = turn
        .iter()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
            _ => None,
        })
        .unwrap();
    assert!(reply.ends_with("to: thanks"), "{reply:?}");
    server.stop().await;
}

#[tokio::test]
async fn long_output_is_cut_to_its_tail_and_says_so() {
    let server = TestServer::start().await;
    mock_session(&server.client, "long").await;
    let mut events = Events::open(&server.client, "long").await;
    // 100,000 bytes of digits then a last line: more than the 64 KiB that reach the session.
    let process = server
        .client
        .create_process(&feeding("long", "sh", &["-c", "head -c 100000 /dev/zero | tr '\\0' 7; echo; echo the end"]))
        .await
        .unwrap();
    let seen = events.until("the process's item.completed", completed_with(format!("process-{}", process.id))).await;
    let (_, completed) = process_item(&seen, EventType::ItemCompleted, &process.id).unwrap();
    assert_eq!(completed.status, Some(ItemStatus::Completed));
    let output = completed.output.as_deref().unwrap();
    let total = 100_000 + 1 + "the end\n".len();
    let cut = total - 64 * 1024;
    assert!(output.starts_with(&format!("[{cut} earlier bytes cut]\n777")), "{}", &output[..80]);
    assert!(output.ends_with("7\nthe end\n"));
    assert_eq!(output.len(), format!("[{cut} earlier bytes cut]\n").len() + 64 * 1024);
    server.stop().await;
}

#[tokio::test]
async fn ending_a_session_stops_its_processes_and_only_those() {
    let server = TestServer::start().await;
    mock_session(&server.client, "s2").await;
    let mut events = Events::open(&server.client, "s2").await;
    let fed = server.client.create_process(&feeding("s2", "sleep", &["1000"])).await.unwrap();
    let unrelated = server
        .client
        .create_process(&CreateProcessRequest {
            command: "sleep".into(),
            args: vec!["1000".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    events.until("the process's item.started", |e| e.kind() == EventType::ItemStarted).await;

    server.client.end_session("s2").await.unwrap();
    // Stopped by the time the end is answered.
    let info = server.client.get_process(&fed.id).await.unwrap();
    assert_eq!(info.status, ProcessStatus::Exited);
    assert_eq!(info.signal.as_deref(), Some("SIGTERM"));
    assert!(live_group_members(fed.pid).is_empty());
    let unrelated = server.client.get_process(&unrelated.id).await.unwrap();
    assert_eq!(unrelated.status, ProcessStatus::Running, "a process of no session runs on");

    // Nothing follows session.ended, not even the stopped process's exit.
    let rest = events.until("session.ended", |e| e.kind() == EventType::SessionEnded).await;
    assert!(process_item(&rest, EventType::ItemCompleted, &fed.id).is_none());
    assert!(within("the stream's end", events.stream.next()).await.is_none());

    // An ended session takes no more processes.
    let ended = server.client.create_process(&feeding("s2", "true", &[])).await.unwrap_err();
    assert_eq!(ended.problem_code(), Some("conflict"));
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_session_is_a_problem_and_nothing_runs() {
    let server = TestServer::start().await;
    let unknown = server.client.create_process(&feeding("nobody", "true", &[])).await.unwrap_err();
    assert_eq!(unknown.problem_code(), Some("session_not_found"), "{unknown}");
    assert!(unknown.to_string().contains("nobody"), "{unknown}");
    assert!(server.client.list_processes(&ListProcessesQuery::default()).await.unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn output_waiting_for_the_next_turn_survives_a_restart() {
    let server = TestServer::start().await;
    mock_session(&server.client, "kept").await;
    let mut events = Events::open(&server.client, "kept").await;
    let process = server.client.create_process(&feeding("kept", "echo", &["before the restart"])).await.unwrap();
    events.until("the process's item.completed", completed_with(format!("process-{}", process.id))).await;
    drop(events);

    let server = server.restart().await;
    server.client.send_message("kept", "and now?").await.unwrap();
    let mut events = Events::open(&server.client, "kept").await;
    let turn = events.until("the turn's end", |e| e.kind() == EventType::TurnEnded).await;
    let reply = turn
        .iter()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
            _ => None,
        })
        .unwrap();
    assert!(
        reply.ends_with("Output of `echo 'before the restart'` (exit 0):\n```\nbefore the restart\n```\n\nand now?"),
        "{reply:?}"
    );
    server.stop().await;
}
