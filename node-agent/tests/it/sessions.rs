//! Sessions with the built-in mock agent, through the typed client on a real node
//! agent: every universal event type, permissions, questions, queueing, events by
//! offset and over SSE (with resume and gaps), restarts, and the errors.

use crate::common;

use agentplane_node_agent::SessionOptions;
use agentplane_node_agent::client::{Client, SessionStreamItem};
use agentplane_node_agent::model::*;
use agentplane_node_agent::universal::*;
use common::*;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

fn mock() -> CreateSessionRequest {
    CreateSessionRequest { agent: "mock".into(), ..Default::default() }
}

/// A session's SSE stream, read from the start; waits are on events, never on time.
struct Events {
    stream: BoxStream<'static, agentplane_node_agent::client::ClientResult<SessionStreamItem>>,
    seen: Vec<UniversalEvent>,
    /// Where the next `until` starts looking.
    mark: usize,
}

impl Events {
    async fn open(client: &Client, id: &str) -> Events {
        let stream = client.session_events_sse(id, None, None).await.unwrap();
        Events { stream, seen: Vec::new(), mark: 0 }
    }

    async fn next(&mut self) -> Option<UniversalEvent> {
        match within("a session event", self.stream.next()).await {
            Some(Ok(SessionStreamItem::Event(event))) => {
                if let Some(last) = self.seen.last() {
                    assert_eq!(event.sequence, last.sequence + 1, "sequences are contiguous");
                }
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

    async fn until_type(&mut self, kind: EventType) -> Vec<UniversalEvent> {
        self.until(kind.as_str(), |e| e.kind() == kind).await
    }

    async fn turn(&mut self) -> Vec<UniversalEvent> {
        self.until_type(EventType::TurnEnded).await
    }
}

fn kinds(events: &[UniversalEvent]) -> Vec<EventType> {
    events.iter().map(UniversalEvent::kind).collect()
}

/// The completed assistant message among `events`.
fn reply_text(events: &[UniversalEvent]) -> String {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.role == Some(Role::Assistant) => item.text.clone(),
            _ => None,
        })
        .expect("an assistant message")
}

fn turn_status(events: &[UniversalEvent]) -> TurnStatus {
    match &events.last().unwrap().data {
        EventData::TurnEnded { status, .. } => *status,
        other => panic!("not a turn end: {other:?}"),
    }
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

fn question_request(events: &[UniversalEvent]) -> QuestionRequest {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::QuestionRequested(request) => Some(request.clone()),
            _ => None,
        })
        .expect("a question")
}

fn tool_result(events: &[UniversalEvent]) -> Item {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::ItemCompleted { item } if item.kind == ItemKind::ToolResult => Some(item.clone()),
            _ => None,
        })
        .expect("a tool result")
}

#[tokio::test]
async fn the_mock_agent_is_listed_with_its_capabilities() {
    let server = TestServer::start().await;
    let agents = server.client.list_agents().await.unwrap();
    let ids: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["claude", "codex", "opencode", "pi", "gemini", "amp", "mock"]);
    let mock = agents.iter().find(|a| a.id == "mock").unwrap();
    assert_eq!((mock.id.as_str(), mock.installed, mock.path.as_deref()), ("mock", true, None));
    assert_eq!(mock.version.as_deref(), Some(server.client.health().await.unwrap().version.as_str()));
    assert!(mock.credentials_available);
    assert_eq!(
        mock.capabilities,
        AgentCapabilities { permissions: true, questions: true, resume: true, streaming_deltas: true, mcp: false }
    );
    assert_eq!(&server.client.get_agent("mock").await.unwrap(), mock);
    let unknown = server.client.get_agent("clippy").await.unwrap_err();
    assert_eq!(unknown.problem_code(), Some("unsupported_agent"));
}

#[tokio::test]
async fn a_message_gets_a_streamed_reply() {
    let server = TestServer::start().await;
    let created = server
        .client
        .create_session("chat", &CreateSessionRequest { model: Some("m1".into()), ..mock() })
        .await
        .unwrap();
    assert_eq!((created.id.as_str(), created.agent.as_str(), created.model.as_deref()), ("chat", "mock", Some("m1")));
    assert_eq!(
        (created.messages_received, created.turns_completed, created.permission_mode),
        (0, 0, PermissionMode::Default)
    );
    let mut events = Events::open(&server.client, "chat").await;
    let started = events.until_type(EventType::SessionStarted).await;
    let EventData::SessionStarted { agent, agent_session_id, resumed } = &started[0].data else { panic!() };
    assert_eq!((agent.as_str(), *resumed), ("mock", false));
    let agent_session_id = agent_session_id.clone().unwrap();
    assert!(agent_session_id.starts_with("mock-"), "{agent_session_id}");
    assert_eq!((started[0].sequence, started[0].source), (1, EventSource::Daemon));

    let accepted = server.client.send_message("chat", "hello there").await.unwrap();
    assert_eq!(accepted.messages_received, 1);
    let turn = events.turn().await;
    use EventType::*;
    let deltas = turn.iter().filter(|e| e.kind() == ItemDelta).count();
    assert!(deltas >= 2, "several deltas: {:?}", kinds(&turn));
    let mut expected = vec![TurnStarted, ItemCompleted, ItemStarted];
    expected.extend(std::iter::repeat_n(ItemDelta, deltas));
    expected.extend([ItemCompleted, TurnEnded]);
    assert_eq!(kinds(&turn), expected);
    let EventData::ItemCompleted { item: user } = &turn[1].data else { panic!() };
    assert_eq!((user.role, user.text.as_deref()), (Some(Role::User), Some("hello there")));
    let text = reply_text(&turn);
    assert_eq!(text, "mock reply #1 to: hello there");
    let streamed: String = turn
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ItemDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, text, "the deltas add up to the message");
    assert_eq!(turn_status(&turn), TurnStatus::Completed);
    for event in &turn {
        assert_eq!(
            (event.session_id.as_str(), event.agent_session_id.as_deref()),
            ("chat", Some(agent_session_id.as_str()))
        );
        assert_eq!(event.raw, None);
    }
    assert!(turn.iter().any(|e| e.source == EventSource::Agent));

    let info = server.client.get_session("chat").await.unwrap();
    assert_eq!((info.state, info.turns_completed, info.messages_received), (SessionState::Idle, 1, 1));
    assert_eq!(info.agent_session_id.as_deref(), Some(agent_session_id.as_str()));
    assert_eq!(info.last_sequence, turn.last().unwrap().sequence);

    // A second turn counts on.
    server.client.send_message("chat", "again").await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #2 to: again");
}

#[tokio::test]
async fn the_mock_emits_every_event_type() {
    let server = TestServer::start().await;
    server.client.create_session("all", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "all").await;
    server
        .client
        .send_message("all", "with reasoning, an unparsed line, a permission to run ls and a question")
        .await
        .unwrap();
    let asked = events.until_type(EventType::PermissionRequested).await;
    let request = permission_request(&asked);
    server.client.reply_permission("all", &request.id, PermissionReply::Once).await.unwrap();
    let asked = events.until_type(EventType::QuestionRequested).await;
    let question = question_request(&asked);
    server.client.reply_question("all", &question.id, vec![vec!["yes".into()]]).await.unwrap();
    events.turn().await;
    server.client.send_message("all", "now fail").await.unwrap();
    let failed = events.turn().await;
    assert_eq!(turn_status(&failed), TurnStatus::Failed);
    assert!(failed.iter().any(|e| matches!(&e.data, EventData::Error { code: Some(c), .. } if c == "mock_failure")));
    server.client.send_message("all", "still there?").await.unwrap();
    assert_eq!(
        reply_text(&events.turn().await),
        "mock reply #3 to: still there?",
        "a failed turn leaves the session usable"
    );
    server.client.end_session("all").await.unwrap();
    while events.next().await.is_some() {}
    let mut seen: Vec<EventType> = kinds(&events.seen);
    seen.dedup();
    for kind in EventType::ALL {
        assert!(seen.contains(&kind), "{} in {seen:?}", kind.as_str());
    }
    let unparsed = events.seen.iter().find(|e| e.kind() == EventType::AgentUnparsed).unwrap();
    assert!(unparsed.raw.as_deref().is_some_and(|r| r.contains("native line")), "the native line is kept");
    let reasoning = events
        .seen
        .iter()
        .any(|e| matches!(&e.data, EventData::ItemCompleted { item } if item.kind == ItemKind::Reasoning));
    assert!(reasoning);
    assert_eq!(events.seen.last().unwrap().kind(), EventType::SessionEnded, "session.ended is last");
}

#[tokio::test]
async fn permissions_once_reject_and_always() {
    let server = TestServer::start().await;
    server.client.create_session("perm", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "perm").await;

    // Once: the tool call completes with its result.
    server.client.send_message("perm", "ask permission to run touch x").await.unwrap();
    let asked = events.until_type(EventType::PermissionRequested).await;
    let request = permission_request(&asked);
    assert_eq!((request.tool.as_str(), &request.input), ("bash", &serde_json::json!({"command": "touch x"})));
    assert_eq!(request.options, vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    let tool_started = asked
        .iter()
        .find(|e| matches!(&e.data, EventData::ItemStarted { item } if item.kind == ItemKind::ToolCall))
        .unwrap();
    let EventData::ItemStarted { item: call } = &tool_started.data else { panic!() };
    assert_eq!(request.item_id.as_deref(), Some(call.id.as_str()));
    let waiting = server.client.get_session("perm").await.unwrap();
    assert_eq!(waiting.state, SessionState::AwaitingInput);
    assert_eq!(waiting.pending_permissions, vec![request.clone()]);
    let answered = server.client.reply_permission("perm", &request.id, PermissionReply::Once).await.unwrap();
    assert!(answered.pending_permissions.is_empty());
    let turn = events.turn().await;
    assert!(
        matches!(&turn[0].data, EventData::PermissionResolved { id, reply: Some(PermissionReply::Once) } if *id == request.id)
    );
    assert_eq!(turn[0].source, EventSource::Daemon);
    let result = tool_result(&turn);
    assert_eq!(
        (result.output.as_deref(), result.status, result.call_id.as_deref()),
        (Some("ran: touch x"), Some(ItemStatus::Completed), Some(call.id.as_str()))
    );
    assert!(
        turn.iter().any(|e| matches!(&e.data, EventData::ItemCompleted { item } if item.kind == ItemKind::ToolCall))
    );
    assert!(!std::path::Path::new("x").exists(), "the mock runs nothing");
    assert_eq!(turn_status(&turn), TurnStatus::Completed);

    // Reject: the result is denied, the turn still answers.
    server.client.send_message("perm", "permission to run rm -rf /").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    server.client.reply_permission("perm", &request.id, PermissionReply::Reject).await.unwrap();
    let turn = events.turn().await;
    assert_eq!(tool_result(&turn).status, Some(ItemStatus::Denied));
    assert!(reply_text(&turn).contains("not allowed to run `rm -rf /`"));

    // Always: remembered for later calls of the same tool.
    server.client.send_message("perm", "permission to run make").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    server.client.reply_permission("perm", &request.id, PermissionReply::Always).await.unwrap();
    assert_eq!(tool_result(&events.turn().await).output.as_deref(), Some("ran: make"));
    server.client.send_message("perm", "permission to run make install").await.unwrap();
    let turn = events.turn().await;
    assert!(!kinds(&turn).contains(&EventType::PermissionRequested), "not asked again: {:?}", kinds(&turn));
    assert_eq!(tool_result(&turn).output.as_deref(), Some("ran: make install"));
}

#[tokio::test]
async fn bypass_runs_tools_without_asking() {
    let server = TestServer::start().await;
    let request = CreateSessionRequest {
        permission_mode: Some(PermissionMode::Bypass),
        agent_mode: Some("build".into()),
        ..mock()
    };
    let info = server.client.create_session("yolo", &request).await.unwrap();
    assert_eq!((info.permission_mode, info.agent_mode.as_deref()), (PermissionMode::Bypass, Some("build")));
    let mut events = Events::open(&server.client, "yolo").await;
    server.client.send_message("yolo", "permission to run ls").await.unwrap();
    let turn = events.turn().await;
    assert!(!kinds(&turn).contains(&EventType::PermissionRequested));
    assert_eq!(tool_result(&turn).output.as_deref(), Some("ran: ls"));
}

#[tokio::test]
async fn questions_answered_and_rejected() {
    let server = TestServer::start().await;
    server.client.create_session("q", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "q").await;
    server.client.send_message("q", "a question for you").await.unwrap();
    let question = question_request(&events.until_type(EventType::QuestionRequested).await);
    assert_eq!(question.questions.len(), 1);
    assert_eq!(question.questions[0].options, vec!["yes", "no"]);
    assert!(!question.questions[0].multi_select);
    let waiting = server.client.get_session("q").await.unwrap();
    assert_eq!(
        (waiting.state, waiting.pending_questions.clone()),
        (SessionState::AwaitingInput, vec![question.clone()])
    );
    server.client.reply_question("q", &question.id, vec![vec!["no".into()]]).await.unwrap();
    let turn = events.turn().await;
    assert!(
        matches!(&turn[0].data, EventData::QuestionResolved { outcome: QuestionOutcome::Answered, answers: Some(a), .. } if a == &vec![vec!["no".to_string()]])
    );
    assert_eq!(reply_text(&turn), "mock reply #1 to: a question for you (answer: \"no\")");

    server.client.send_message("q", "another question").await.unwrap();
    let question = question_request(&events.until_type(EventType::QuestionRequested).await);
    server.client.reject_question("q", &question.id).await.unwrap();
    let turn = events.turn().await;
    assert!(matches!(
        &turn[0].data,
        EventData::QuestionResolved { outcome: QuestionOutcome::Rejected, answers: None, .. }
    ));
    assert!(reply_text(&turn).ends_with("(question rejected)"));
    assert_eq!(server.client.get_session("q").await.unwrap().state, SessionState::Idle);
}

#[tokio::test]
async fn replies_are_idempotent_and_a_different_one_conflicts() {
    let server = TestServer::start().await;
    server.client.create_session("idem", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "idem").await;
    server.client.send_message("idem", "permission to run date, then a question").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    let unknown = server.client.reply_permission("idem", "nope", PermissionReply::Once).await.unwrap_err();
    assert_eq!(unknown.problem_code(), Some("permission_not_found"));
    server.client.reply_permission("idem", &request.id, PermissionReply::Once).await.unwrap();
    server.client.reply_permission("idem", &request.id, PermissionReply::Once).await.unwrap();
    let conflict = server.client.reply_permission("idem", &request.id, PermissionReply::Reject).await.unwrap_err();
    assert_eq!(conflict.problem_code(), Some("conflict"));

    let question = question_request(&events.until_type(EventType::QuestionRequested).await);
    let wrong = server.client.reply_question("idem", &question.id, vec![]).await.unwrap_err();
    assert_eq!(wrong.problem_code(), Some("invalid_request"), "one list of answers per question");
    let unknown = server.client.reject_question("idem", "nope").await.unwrap_err();
    assert_eq!(unknown.problem_code(), Some("question_not_found"));
    let answers = vec![vec!["yes".to_string()]];
    server.client.reply_question("idem", &question.id, answers.clone()).await.unwrap();
    server.client.reply_question("idem", &question.id, answers).await.unwrap();
    let conflict = server.client.reject_question("idem", &question.id).await.unwrap_err();
    assert_eq!(conflict.problem_code(), Some("conflict"));
    let conflict = server.client.reply_question("idem", &question.id, vec![vec!["no".into()]]).await.unwrap_err();
    assert_eq!(conflict.problem_code(), Some("conflict"));
    let turn = events.turn().await;
    let resolved =
        turn.iter().filter(|e| matches!(e.kind(), EventType::PermissionResolved | EventType::QuestionResolved)).count();
    assert_eq!(resolved, 1, "the question was resolved once (the permission's came before)");
    assert_eq!(kinds(&events.seen).iter().filter(|k| **k == EventType::PermissionResolved).count(), 1);
}

#[tokio::test]
async fn messages_sent_during_a_turn_run_afterwards_in_order() {
    let server = TestServer::start().await;
    server.client.create_session("queue", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "queue").await;
    server.client.send_message("queue", "permission to run sleep").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    for message in ["first", "second", "third"] {
        server.client.send_message("queue", message).await.unwrap();
    }
    let waiting = server.client.get_session("queue").await.unwrap();
    assert_eq!(
        (waiting.messages_received, waiting.turns_completed, waiting.state),
        (4, 0, SessionState::AwaitingInput)
    );
    server.client.reply_permission("queue", &request.id, PermissionReply::Once).await.unwrap();
    events.turn().await;
    for (n, message) in [(2, "first"), (3, "second"), (4, "third")] {
        assert_eq!(reply_text(&events.turn().await), format!("mock reply #{n} to: {message}"));
    }
    let info = server.client.get_session("queue").await.unwrap();
    assert_eq!((info.turns_completed, info.state), (4, SessionState::Idle));
}

#[tokio::test]
async fn events_by_offset_with_limit_and_has_more() {
    let server = TestServer::start().await;
    server.client.create_session("pages", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "pages").await;
    server.client.send_message("pages", "one two three four five six seven eight nine ten").await.unwrap();
    events.turn().await;
    let last = events.seen.last().unwrap().sequence;
    let all = server.client.session_events("pages", &SessionEventsQuery::default()).await.unwrap();
    assert_eq!(all.events, events.seen, "the same events by offset as over SSE");
    assert!(!all.has_more && all.gap.is_none());
    let mut offset = 0;
    let mut paged = Vec::new();
    loop {
        let page = server
            .client
            .session_events("pages", &SessionEventsQuery { offset: Some(offset), limit: Some(3) })
            .await
            .unwrap();
        assert!(page.events.len() <= 3);
        assert!(page.events.iter().all(|e| e.sequence > offset), "offset is exclusive");
        offset = page.events.last().map_or(offset, |e| e.sequence);
        paged.extend(page.events);
        if !page.has_more {
            break;
        }
    }
    assert_eq!(paged, events.seen);
    assert_eq!(offset, last);
    let past = server
        .client
        .session_events("pages", &SessionEventsQuery { offset: Some(last + 100), limit: None })
        .await
        .unwrap();
    assert!(past.events.is_empty() && !past.has_more);
    // The largest offset a client can send: `offset + 1` wrapped to 0 and answered
    // with the whole log.
    let max = server
        .client
        .session_events("pages", &SessionEventsQuery { offset: Some(u64::MAX), limit: None })
        .await
        .unwrap();
    assert!(max.events.is_empty() && !max.has_more && max.gap.is_none(), "{max:?}");
}

#[tokio::test]
async fn sse_resumes_after_last_event_id() {
    let server = TestServer::start().await;
    server.client.create_session("resume", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "resume").await;
    server.client.send_message("resume", "hello").await.unwrap();
    events.turn().await;
    let cut = events.seen[3].sequence;
    drop(events);
    // Away for a turn; Last-Event-ID wins over offset.
    server.client.send_message("resume", "while away").await.unwrap();
    let mut resumed = server.client.session_events_sse("resume", Some(1), Some(cut)).await.unwrap();
    let mut sequences = Vec::new();
    loop {
        let Some(Ok(SessionStreamItem::Event(event))) = within("an event", resumed.next()).await else {
            panic!("an event")
        };
        sequences.push(event.sequence);
        if matches!(event.data, EventData::TurnEnded { turn: 2, .. }) {
            break;
        }
    }
    assert_eq!(sequences, (cut + 1..=*sequences.last().unwrap()).collect::<Vec<_>>());
    // From an offset, without Last-Event-ID.
    let mut from_offset = server.client.session_events_sse("resume", Some(2), None).await.unwrap();
    let Some(Ok(SessionStreamItem::Event(first))) = within("an event", from_offset.next()).await else { panic!() };
    assert_eq!(first.sequence, 3);
}

#[tokio::test]
async fn old_events_come_from_the_file_and_lost_ones_are_a_gap() {
    // Four events in memory: everything older is read back from events.jsonl.
    let server = TestServer::start_with_sessions(SessionOptions { events_in_memory: 4, ..Default::default() }).await;
    server.client.create_session("small", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "small").await;
    for n in 0..3 {
        server.client.send_message("small", &format!("message {n}")).await.unwrap();
        events.turn().await;
    }
    let total = events.seen.len();
    assert!(total > 20);
    let mut late = Events::open(&server.client, "small").await;
    while late.seen.len() < total {
        late.next().await.unwrap();
    }
    assert_eq!(late.seen, events.seen, "a late reader gets everything, from the start");

    // Lines lost from the file (here: cut by hand): the stream says so, then goes on.
    let file = server.data_dir().join("sessions/small/events.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: Vec<&str> = text.lines().skip(10).collect();
    std::fs::write(&file, kept.join("\n") + "\n").unwrap();
    let mut stream = server.client.session_events_sse("small", None, None).await.unwrap();
    let Some(Ok(SessionStreamItem::Gap(gap))) = within("a gap", stream.next()).await else { panic!("a gap first") };
    assert_eq!((gap.from, gap.to), (1, 11));
    let Some(Ok(SessionStreamItem::Event(event))) = within("an event", stream.next()).await else { panic!() };
    assert_eq!(event.sequence, 11);
    let page =
        server.client.session_events("small", &SessionEventsQuery { offset: Some(0), limit: Some(2) }).await.unwrap();
    assert_eq!(page.gap, Some(gap));
    assert_eq!(page.events.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![11, 12]);
    assert!(page.has_more);
}

#[tokio::test]
async fn a_restarted_node_agent_resumes_its_sessions() {
    let server = TestServer::start().await;
    server.client.create_session("long", &mock()).await.unwrap();
    server.client.create_session("done", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "long").await;
    server.client.send_message("long", "hello").await.unwrap();
    events.turn().await;
    server.client.send_message("long", "permission to run make").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    server.client.send_message("long", "queued behind it").await.unwrap();
    let before = server.client.get_session("long").await.unwrap();
    server.client.end_session("done").await.unwrap();

    let server = server.restart().await;
    assert!(events.next().await.is_none(), "open streams end when the node agent stops");
    let after = server.client.get_session("long").await.unwrap();
    assert_eq!(after.pending_permissions, vec![request.clone()], "the pending request is offered again");
    assert_eq!(after.state, SessionState::AwaitingInput);
    assert_eq!(
        (after.agent_session_id.clone(), after.messages_received, after.turns_completed),
        (before.agent_session_id.clone(), 3, 1)
    );
    assert_eq!(server.client.get_session("done").await.unwrap().state, SessionState::Ended, "ended stays ended");
    let listed: Vec<String> = server.client.list_sessions().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed, vec!["long", "done"]);

    let mut events = Events::open(&server.client, "long").await;
    let resumed = events
        .until("the resumed start", |e: &UniversalEvent| {
            matches!(e.data, EventData::SessionStarted { resumed: true, .. })
        })
        .await;
    let restarted_at = resumed.last().unwrap().sequence;
    assert_eq!(restarted_at, before.last_sequence + 1, "sequences continue, none reused");
    server.client.reply_permission("long", &request.id, PermissionReply::Once).await.unwrap();
    let turn = events.turn().await;
    assert_eq!(tool_result(&turn).output.as_deref(), Some("ran: make"));
    assert_eq!(reply_text(&turn), "mock reply #2 to: permission to run make (ran `make`)");
    assert_eq!(reply_text(&events.turn().await), "mock reply #3 to: queued behind it", "the queue survived too");
    server.client.send_message("long", "after the restart").await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #4 to: after the restart");
    assert!(events.seen.iter().all(|e| e.agent_session_id == before.agent_session_id || e.sequence == 1));
}

#[tokio::test]
async fn ending_a_session_interrupts_its_turn_and_ends_its_stream() {
    let server = TestServer::start().await;
    server.client.create_session("bye", &mock()).await.unwrap();
    let mut events = Events::open(&server.client, "bye").await;
    server.client.send_message("bye", "permission to run ls").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    let ended = server.client.end_session("bye").await.unwrap();
    assert_eq!(ended.state, SessionState::Ended);
    assert!(ended.ended_at.is_some() && ended.pending_permissions.is_empty());
    let tail = events.until_type(EventType::SessionEnded).await;
    assert_eq!(kinds(&tail), vec![EventType::TurnEnded, EventType::PermissionResolved, EventType::SessionEnded]);
    assert_eq!(turn_status(&tail[..1]), TurnStatus::Interrupted);
    assert!(events.next().await.is_none(), "the stream ends after session.ended");
    assert_eq!(server.client.end_session("bye").await.unwrap(), ended, "ending again answers the same");
    let late = server.client.reply_permission("bye", &request.id, PermissionReply::Once).await.unwrap_err();
    assert_eq!(late.problem_code(), Some("conflict"));
    let late = server.client.send_message("bye", "hello?").await.unwrap_err();
    assert_eq!(late.problem_code(), Some("conflict"));
    assert_eq!(server.client.list_sessions().await.unwrap(), vec![ended]);
    // A finished session's stream replays and ends.
    let mut replay = Events::open(&server.client, "bye").await;
    while replay.next().await.is_some() {}
    assert_eq!(replay.seen, events.seen);
}

#[tokio::test]
async fn session_errors_are_problems_with_stable_codes() {
    let server = TestServer::start().await;
    let client = &server.client;
    let code = |e: agentplane_node_agent::client::ClientError| e.problem_code().map(str::to_string);
    server.client.create_session("taken", &mock()).await.unwrap();
    let cases = [
        (
            "unknown agent",
            client.create_session("a1", &CreateSessionRequest { agent: "clippy".into(), ..mock() }).await,
            "unsupported_agent",
        ),
        (
            "unknown mode",
            client.create_session("a2", &CreateSessionRequest { agent_mode: Some("yolo".into()), ..mock() }).await,
            "mode_not_supported",
        ),
        (
            "other version",
            client
                .create_session("a3", &CreateSessionRequest { agent_version: Some("0.0.0-x".into()), ..mock() })
                .await,
            "invalid_request",
        ),
        ("bad id", client.create_session("-bad", &mock()).await, "invalid_request"),
        ("id too long", client.create_session(&"x".repeat(64), &mock()).await, "invalid_request"),
        (
            "missing working dir",
            client
                .create_session("a4", &CreateSessionRequest { working_dir: Some("/no/such/dir".into()), ..mock() })
                .await,
            "invalid_request",
        ),
        ("same id again", client.create_session("taken", &mock()).await, "session_already_exists"),
        ("unknown session", client.get_session("nope").await, "session_not_found"),
        ("message to unknown", client.send_message("nope", "hi").await, "session_not_found"),
        ("empty message", client.send_message("taken", "").await, "invalid_request"),
        ("end unknown", client.end_session("nope").await, "session_not_found"),
    ];
    for (what, result, want) in cases {
        assert_eq!(result.map_err(code).err().flatten().as_deref(), Some(want), "{what}");
    }
    assert!(
        client.session_events("nope", &SessionEventsQuery::default()).await.unwrap_err().problem_code()
            == Some("session_not_found")
    );
    assert!(
        client.session_events_sse("nope", None, None).await.err().unwrap().problem_code() == Some("session_not_found")
    );
    // Raw requests: the body is problem+json, and what serde rejects is invalid_request.
    let raw = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", server.url);
    let requests = [
        (
            raw.post(url("/v1/sessions/b1")).json(&serde_json::json!({"agent": "mock", "permissionMode": "sometimes"})),
            400,
            "invalid_request",
        ),
        (
            raw.post(url("/v1/sessions/b2")).json(&serde_json::json!({"agent": "mock", "colour": "red"})),
            400,
            "invalid_request",
        ),
        (
            raw.post(url("/v1/sessions/taken/permissions/p/reply")).json(&serde_json::json!({"reply": "maybe"})),
            400,
            "invalid_request",
        ),
        (raw.get(url("/v1/sessions/taken/events/sse")).header("last-event-id", "yesterday"), 400, "invalid_request"),
        (raw.get(url("/v1/sessions/taken/events?limit=many")), 400, "invalid_request"),
        // A version is checked at creation, not when the install runs later.
        (
            raw.post(url("/v1/sessions/b3")).json(&serde_json::json!({"agent": "mock", "agentVersion": "$(id)"})),
            400,
            "invalid_request",
        ),
        (
            raw.post(url("/v1/sessions/b4")).json(&serde_json::json!({"agent": "claude", "agentVersion": "latest"})),
            400,
            "invalid_request",
        ),
        // Unknown fields are refused on install as everywhere else (a `registry` here
        // was ignored and answered 200).
        (
            raw.post(url("/v1/agents/amp/install"))
                .json(&serde_json::json!({"version": "0.0.0-does-not-exist", "registry": "http://evil"})),
            400,
            "invalid_request",
        ),
        (raw.put(url("/v1/sessions/taken")), 405, "method_not_allowed"),
        (raw.get(url("/v1/agents/clippy")), 404, "unsupported_agent"),
    ];
    for (request, status, want) in requests {
        let response = request.bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["type"], format!("urn:agentplane:error:{want}"), "{body}");
    }
    // Nothing of that was created.
    let ids: Vec<String> = client.list_sessions().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, vec!["taken"]);
}

#[tokio::test]
async fn a_real_agent_that_cannot_be_installed_fails_its_session_with_install_failed() {
    let agents = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_sessions(SessionOptions {
        agents_dir: Some(agents.path().to_path_buf()),
        ..SessionOptions::default()
    })
    .await;
    let request = CreateSessionRequest {
        agent: "pi".into(),
        agent_version: Some("0.0.0-no-such-version".into()),
        ..Default::default()
    };
    let created = server.client.create_session("nopi", &request).await.unwrap();
    assert_eq!(created.agent_version.as_deref(), Some("0.0.0-no-such-version"));
    let mut events = Events::open(&server.client, "nopi").await;
    let failed = events.until_type(EventType::SessionEnded).await;
    let error = failed
        .iter()
        .find_map(|e| match &e.data {
            EventData::Error { message, code } => Some((message.clone(), code.clone())),
            _ => None,
        })
        .expect("an error event");
    assert_eq!(error.1.as_deref(), Some("install_failed"), "{error:?}");
    assert!(error.0.contains("0.0.0-no-such-version"), "npm's error names the version: {}", error.0);
    let info = server.client.get_session("nopi").await.unwrap();
    assert_eq!(info.state, SessionState::Failed);
    // Nothing half-installed is left behind (the install's lock file may stay).
    let left: Vec<_> = std::fs::read_dir(agents.path().join("pi"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The hex part of a public request id: `perm-<hex>` or `q-<hex>`.
fn random_part(id: &str) -> &str {
    let hex = id.rsplit('-').next().unwrap_or_default();
    assert!(hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id:?} is not 128 random bits");
    hex
}

#[tokio::test]
async fn request_ids_are_unguessable_and_a_native_id_is_no_reply() {
    let server = TestServer::start().await;
    let client = &server.client;
    let mut ids = Vec::new();
    for session in ["one", "two"] {
        client.create_session(session, &mock()).await.unwrap();
        let mut events = Events::open(client, session).await;
        client.send_message(session, "permission to run make").await.unwrap();
        let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
        random_part(&request.id);
        // The mock's own id for it: what an attacker writing a reply ahead would guess.
        let refused = client.reply_permission(session, "turn-1-permission", PermissionReply::Once).await;
        assert_eq!(refused.unwrap_err().problem_code(), Some("permission_not_found"), "{session}");
        let waiting = client.get_session(session).await.unwrap();
        assert_eq!(waiting.pending_permissions, vec![request.clone()], "still pending after the native id");
        ids.push(request.id.clone());
        client.reply_permission(session, &request.id, PermissionReply::Once).await.unwrap();
        events.turn().await;

        client.send_message(session, "permission to run make again").await.unwrap();
        let second = permission_request(&events.until_type(EventType::PermissionRequested).await);
        random_part(&second.id);
        ids.push(second.id.clone());
        client.reply_permission(session, &second.id, PermissionReply::Reject).await.unwrap();
        events.turn().await;

        client.send_message(session, "a question for you").await.unwrap();
        let question = question_request(&events.until_type(EventType::QuestionRequested).await);
        random_part(&question.id);
        let refused = client.reply_question(session, "turn-3-question", vec![vec!["yes".into()]]).await;
        assert_eq!(refused.unwrap_err().problem_code(), Some("question_not_found"), "{session}");
        ids.push(question.id.clone());
        client.reply_question(session, &question.id, vec![vec!["yes".into()]]).await.unwrap();
        assert!(reply_text(&events.turn().await).contains("answer: \"yes\""));
    }
    let distinct: std::collections::HashSet<&str> = ids.iter().map(|id| random_part(id)).collect();
    assert_eq!(distinct.len(), ids.len(), "every request has its own id: {ids:?}");
}

#[tokio::test]
async fn live_sessions_are_limited_and_ended_ones_do_not_count() {
    let server = TestServer::start_with_sessions(SessionOptions { max_sessions: 2, ..SessionOptions::default() }).await;
    let client = &server.client;
    client.create_session("a", &mock()).await.unwrap();
    client.create_session("b", &mock()).await.unwrap();
    let refused = client.create_session("c", &mock()).await.unwrap_err();
    assert_eq!(refused.problem_code(), Some("limit_exceeded"), "{refused}");
    assert!(refused.to_string().contains("--max-sessions"), "{refused}");
    assert!(client.get_session("c").await.is_err(), "nothing of it was created");
    client.end_session("a").await.unwrap();
    client.create_session("c", &mock()).await.unwrap();
    assert_eq!(client.create_session("d", &mock()).await.unwrap_err().problem_code(), Some("limit_exceeded"));

    // Resumed sessions count as well.
    let server = server.restart().await;
    assert_eq!(server.client.create_session("d", &mock()).await.unwrap_err().problem_code(), Some("limit_exceeded"));
}

/// The `error` event's message among `events`.
fn error_message(events: &[UniversalEvent]) -> String {
    events
        .iter()
        .find_map(|e| match &e.data {
            EventData::Error { message, .. } => Some(message.clone()),
            _ => None,
        })
        .expect("an error event")
}

#[tokio::test]
async fn a_failed_session_restarts_into_the_same_conversation() {
    let scratch = tempfile::tempdir().unwrap();
    let (work, aside) = (scratch.path().join("work"), scratch.path().join("aside"));
    std::fs::create_dir(&work).unwrap();
    let server = TestServer::start().await;
    let request = CreateSessionRequest {
        working_dir: Some(work.display().to_string()),
        label: Some("Session/default/chat".into()),
        ..mock()
    };
    let created = server.client.create_session("chat", &request).await.unwrap();
    assert_eq!(created.label.as_deref(), Some("Session/default/chat"));
    assert_eq!(server.client.restart_session("nope").await.unwrap_err().problem_code(), Some("session_not_found"));
    let mut events = Events::open(&server.client, "chat").await;
    server.client.send_message("chat", "hello").await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #1 to: hello");
    server.client.send_message("chat", "permission to run make").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    server.client.send_message("chat", "queued behind it").await.unwrap();
    let before = server.client.get_session("chat").await.unwrap();

    // Its working directory goes while the node agent is down: resumed, it cannot start.
    std::fs::rename(&work, &aside).unwrap();
    let server = server.restart().await;
    let client = &server.client;
    let mut events = Events::open(client, "chat").await;
    let failed = events.until_type(EventType::SessionEnded).await;
    assert!(error_message(&failed).contains("does not exist"), "{failed:#?}");
    assert!(events.next().await.is_none(), "the stream ends with the failure");
    let first_end = events.seen.last().unwrap().sequence;
    let info = client.get_session("chat").await.unwrap();
    assert_eq!((info.state, info.messages_received), (SessionState::Failed, 3));
    assert_eq!(client.send_message("chat", "hello?").await.unwrap_err().problem_code(), Some("conflict"));

    // Restarted while the directory is still gone: it runs again, and fails again.
    let again = client.restart_session("chat").await.unwrap();
    assert!(matches!(again.state, SessionState::Starting | SessionState::Failed), "{again:?}");
    let mut events = Events::open(client, "chat").await;
    events.until("the second failure", |e| e.kind() == EventType::SessionEnded && e.sequence > first_end).await;
    assert!(events.next().await.is_none());
    assert_eq!(client.get_session("chat").await.unwrap().state, SessionState::Failed);

    // Back, and restarted: the same conversation goes on where it was.
    std::fs::rename(&aside, &work).unwrap();
    let restarted = client.restart_session("chat").await.unwrap();
    assert!(matches!(restarted.state, SessionState::Starting | SessionState::AwaitingInput), "{restarted:?}");
    assert_eq!(restarted.messages_received, 3, "nothing accepted is counted twice");
    // Live again: asked again, its agent restarts once more between turns, in the
    // same conversation (the turn waiting for its reply is not cut).
    let twice = client.restart_session("chat").await.unwrap();
    assert!(!twice.state.is_final(), "{twice:?}");
    let mut events = Events::open(client, "chat").await;
    let resumed =
        events.until("the resumed start", |e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })).await;
    let started = resumed.last().unwrap();
    assert!(started.sequence > first_end, "sequences continue across the failures");
    assert_eq!(started.agent_session_id, before.agent_session_id, "the agent's own conversation");
    // The request pending when it failed is offered again, and the turn goes on.
    let waiting = client.get_session("chat").await.unwrap();
    assert_eq!(waiting.pending_permissions, vec![request.clone()]);
    client.reply_permission("chat", &request.id, PermissionReply::Once).await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #2 to: permission to run make (ran `make`)");
    assert_eq!(reply_text(&events.turn().await), "mock reply #3 to: queued behind it", "the queue was kept");
    client.send_message("chat", "after the restart").await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #4 to: after the restart");
    let after = client.get_session("chat").await.unwrap();
    assert_eq!(after.state, SessionState::Idle);
    assert_eq!(
        (after.agent_session_id, after.messages_received, after.turns_completed, after.error, after.ended_at),
        (before.agent_session_id, 4, 4, None, None)
    );
    assert_eq!(after.label.as_deref(), Some("Session/default/chat"), "kept across restarts");

    // Ended on purpose is not failed: no restart.
    client.end_session("chat").await.unwrap();
    assert_eq!(client.restart_session("chat").await.unwrap_err().problem_code(), Some("conflict"));
}

/// A live session's agent restarts between turns (never in the middle of one), in the
/// same conversation, with the environment the restart gives (an env file edited after
/// the session started); without one it keeps what it has. An ended one does not.
#[tokio::test]
async fn a_live_session_restarts_its_agent_between_turns_with_a_new_env_in_the_same_conversation() {
    let server = TestServer::start().await;
    let client = &server.client;
    let env = std::collections::BTreeMap::from([("KEY".to_string(), "placeholder".to_string())]);
    client.create_session("chat", &CreateSessionRequest { env, ..mock() }).await.unwrap();
    let mut events = Events::open(client, "chat").await;
    client.send_message("chat", "what is $KEY").await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #1 to: what is $KEY (KEY=placeholder)");
    let before = client.get_session("chat").await.unwrap();

    // Asked mid-turn: the turn waiting for its permission is not cut; the restart
    // comes after it, before the next message's turn.
    client.send_message("chat", "permission to run true").await.unwrap();
    let request = permission_request(&events.until_type(EventType::PermissionRequested).await);
    let new_env = std::collections::BTreeMap::from([("KEY".to_string(), "sk-real".to_string())]);
    let asked = client.restart_session_with("chat", &RestartSessionRequest { env: Some(new_env) }).await.unwrap();
    assert_eq!(asked.state, SessionState::AwaitingInput, "{asked:?}");
    client.send_message("chat", "and now $KEY").await.unwrap();
    client.reply_permission("chat", &request.id, PermissionReply::Once).await.unwrap();
    let turn = events.turn().await;
    assert_eq!(reply_text(&turn), "mock reply #2 to: permission to run true (ran `true`)");
    assert!(!turn.iter().any(|e| matches!(e.data, EventData::SessionStarted { .. })), "not restarted mid-turn");
    let restarted =
        events.until("the restart", |e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })).await;
    assert_eq!(restarted.last().unwrap().agent_session_id, before.agent_session_id, "the same conversation");
    assert_eq!(reply_text(&events.turn().await), "mock reply #3 to: and now $KEY (KEY=sk-real)");

    // No body: restarted with what it has.
    client.restart_session("chat").await.unwrap();
    events.until("the second restart", |e| matches!(e.data, EventData::SessionStarted { resumed: true, .. })).await;
    client.send_message("chat", "still $KEY").await.unwrap();
    assert_eq!(reply_text(&events.turn().await), "mock reply #4 to: still $KEY (KEY=sk-real)");
    let after = client.get_session("chat").await.unwrap();
    assert_eq!((after.messages_received, after.turns_completed, after.state), (4, 4, SessionState::Idle));

    // A body that is no restart request is refused; an ended session is not restarted.
    let bad = reqwest::Client::new()
        .post(format!("{}/v1/sessions/chat/restart", server.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{\"environment\": {}}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.headers()["content-type"], "application/problem+json");
    client.end_session("chat").await.unwrap();
    assert_eq!(client.restart_session("chat").await.unwrap_err().problem_code(), Some("conflict"));
}

#[tokio::test]
async fn a_label_with_a_line_break_is_refused() {
    let server = TestServer::start().await;
    let request = CreateSessionRequest { label: Some("Session/default/x\nforged log line".into()), ..mock() };
    let refused = server.client.create_session("x", &request).await.unwrap_err();
    assert_eq!(refused.problem_code(), Some("invalid_request"), "{refused}");
}

#[tokio::test]
async fn restart_and_label_are_in_the_openapi_document() {
    let server = TestServer::start().await;
    let doc: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/openapi.json", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let restart = &doc["paths"]["/v1/sessions/{id}/restart"]["post"];
    for status in ["200", "404", "409", "429"] {
        assert!(restart["responses"][status].is_object(), "restart answers {status}: {restart}");
    }
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["CreateSessionRequest"]["properties"]["label"].is_object());
    assert!(schemas["SessionInfo"]["properties"]["label"].is_object());
}

#[tokio::test]
async fn a_restart_counts_against_the_session_limit() {
    let scratch = tempfile::tempdir().unwrap();
    let work = scratch.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let server = TestServer::start_with_sessions(SessionOptions { max_sessions: 1, ..SessionOptions::default() }).await;
    let request = CreateSessionRequest { working_dir: Some(work.display().to_string()), ..mock() };
    server.client.create_session("a", &request).await.unwrap();
    std::fs::remove_dir(&work).unwrap();
    let server = server.restart().await;
    let client = &server.client;
    Events::open(client, "a").await.until_type(EventType::SessionEnded).await;
    assert_eq!(client.get_session("a").await.unwrap().state, SessionState::Failed);
    client.create_session("b", &mock()).await.unwrap();
    std::fs::create_dir(&work).unwrap();
    let refused = client.restart_session("a").await.unwrap_err();
    assert_eq!(refused.problem_code(), Some("limit_exceeded"), "{refused}");
    assert_eq!(client.get_session("a").await.unwrap().state, SessionState::Failed, "left as it was");
    client.end_session("b").await.unwrap();
    let restarted = client.restart_session("a").await.unwrap();
    // Its runner may already have started it by the time the answer is made.
    assert!(matches!(restarted.state, SessionState::Starting | SessionState::Idle), "{restarted:?}");
}

/// A session's conversation packed by one node agent and staged in another (a new
/// sandbox's) goes on there: its counts (so a declared message is taken once across
/// both), its agent's own id, its old events by offset, and new events after the
/// newest any client saw. The environment stays behind: the new one is the create
/// request's.
#[tokio::test]
async fn a_conversation_moves_to_another_node_agent_and_goes_on() {
    let first = TestServer::start().await;
    let with_env =
        |value: &str| CreateSessionRequest { env: [("PRIVATE".to_string(), value.to_string())].into(), ..mock() };
    first.client.create_session("move", &with_env("first-secret")).await.unwrap();
    let mut events = Events::open(&first.client, "move").await;
    first.client.send_declared_message("move", "hello", Some(0)).await.unwrap();
    let turn = events.turn().await;
    assert_eq!(reply_text(&turn), "mock reply #1 to: hello");
    let before = first.client.get_session("move").await.unwrap();
    let tar = first.client.conversation("move").await.unwrap();
    assert!(!String::from_utf8_lossy(&tar).contains("first-secret"), "no value of the environment travels");
    let err = first.client.conversation("nobody").await.unwrap_err();
    assert_eq!(err.code(), Some(agentplane_node_agent::ProblemCode::SessionNotFound));
    first.stop().await;

    let second = TestServer::start().await;
    // A client followed the first node agent past what was packed: none of those
    // sequences is given again.
    let seen = before.last_sequence + 5;
    let err = second.client.stage_conversation("other", tar.clone(), seen).await.unwrap_err();
    assert_eq!(err.code(), Some(agentplane_node_agent::ProblemCode::InvalidRequest), "another session's tar: {err}");
    let staged = second.client.stage_conversation("move", tar.clone(), seen).await.unwrap();
    assert_eq!((staged.bytes, staged.last_sequence), (tar.len() as u64, seen));
    let info = second.client.create_session("move", &with_env("second")).await.unwrap();
    assert_eq!(
        (info.declared_messages_received, info.turns_completed, info.agent_session_id.clone()),
        (1, 1, before.agent_session_id.clone())
    );
    assert_eq!(info.created_at, before.created_at, "one conversation, created once");
    let err = second.client.stage_conversation("move", tar, 0).await.unwrap_err();
    assert_eq!(err.code(), Some(agentplane_node_agent::ProblemCode::SessionAlreadyExists));

    // The old events are read back by offset, as they were.
    let page =
        second.client.session_events("move", &SessionEventsQuery { offset: Some(0), limit: None }).await.unwrap();
    let old: Vec<u64> = page.events.iter().map(|e| e.sequence).take_while(|s| *s <= before.last_sequence).collect();
    assert_eq!(old, (1..=before.last_sequence).collect::<Vec<_>>());
    assert_eq!(page.events[..old.len()], events.seen[..old.len()], "the same events");

    // The declared message already taken is not taken again; the next is.
    second.client.send_declared_message("move", "hello", Some(0)).await.unwrap();
    // Numbers between the newest packed and the newest seen are skipped, not lost:
    // followed from where the client was.
    let stream = second.client.session_events_sse("move", Some(seen), None).await.unwrap();
    let mut events = Events { stream, seen: Vec::new(), mark: 0 };
    let resumed = events
        .until("the resumed start", |e: &UniversalEvent| {
            matches!(e.data, EventData::SessionStarted { resumed: true, .. })
        })
        .await;
    assert_eq!(resumed.last().unwrap().sequence, seen + 1, "events go on after the newest seen");
    second.client.send_declared_message("move", "again", Some(1)).await.unwrap();
    let turn = events.turn().await;
    assert_eq!(reply_text(&turn), "mock reply #2 to: again");
    let after = second.client.get_session("move").await.unwrap();
    assert_eq!((after.declared_messages_received, after.turns_completed), (2, 2));
}
