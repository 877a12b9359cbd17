//! OpenCode's recorded native output (an `opencode serve` event stream with a
//! permission request, and `opencode run --format json` lines) through its converter:
//! every line converts to something known, and the items come out as a client needs them.

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::universal::*;

const TRANSCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/agent-transcripts");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{TRANSCRIPTS}/{name}")).unwrap()
}

/// The native lines of a transcript: SSE `data:` payloads, or JSON lines.
fn lines(name: &str) -> Vec<String> {
    read(name)
        .lines()
        .filter_map(|line| {
            if name.ends_with(".sse") {
                line.strip_prefix("data: ").map(str::to_string)
            } else {
                Some(line.to_string())
            }
        })
        .filter(|line| !line.trim().is_empty())
        .collect()
}

fn convert(name: &str) -> Vec<EventData> {
    let mut converter = AgentId::Opencode.converter();
    let mut all = Vec::new();
    for line in lines(name) {
        let events = converter.convert(&line);
        assert!(!events.is_empty(), "{line}");
        for event in &events {
            assert!(!matches!(event, EventData::AgentUnparsed { .. }), "unparsed {event:?} from {line}");
        }
        all.extend(events);
    }
    all
}

fn completed(events: &[EventData], kind: ItemKind) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemCompleted { item } if item.kind == kind => Some(item.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_serve_stream_with_a_permission_converts_completely() {
    let events = convert("opencode-serve-permission-once.sse");

    let permissions: Vec<&PermissionRequest> = events
        .iter()
        .filter_map(|e| match e {
            EventData::PermissionRequested(request) => Some(request),
            _ => None,
        })
        .collect();
    assert_eq!(permissions.len(), 1);
    let permission = permissions[0];
    assert_eq!(permission.id, "per_202f556bd001TckeNiCkVMWee6");
    assert_eq!(permission.tool, "bash");
    assert_eq!(permission.input["command"], "touch opencode-serve-made-this.txt");
    assert_eq!(permission.options, vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    // The request names the tool call's item.
    assert_eq!(permission.item_id.as_deref(), Some("prt_202f55601001rRV4Y5BZKPceUP"));
    assert!(
        events
            .contains(&EventData::PermissionResolved { id: permission.id.clone(), reply: Some(PermissionReply::Once) })
    );

    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "prt_202f55601001rRV4Y5BZKPceUP");
    assert_eq!(calls[0].tool.as_deref(), Some("bash"));
    assert_eq!(calls[0].status, Some(ItemStatus::Completed));
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id.as_deref(), Some("prt_202f55601001rRV4Y5BZKPceUP"));
    assert_eq!(results[0].output.as_deref(), Some("(no output)"));

    // Assistant text streams: started, deltas that add up to the completed text.
    let messages = completed(&events, ItemKind::Message);
    let texts: Vec<&str> = messages.iter().filter_map(|m| m.text.as_deref()).collect();
    assert_eq!(texts, ["tool result received: (no output)", "hello from fake model (6 messages in context)"]);
    for message in &messages {
        assert_eq!(message.role, Some(Role::Assistant));
        let started = events.iter().any(|e| matches!(e, EventData::ItemStarted { item } if item.id == message.id));
        assert!(started, "{message:?} started");
        let streamed: String = events
            .iter()
            .filter_map(|e| match e {
                EventData::ItemDelta { item_id, delta } if *item_id == message.id => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(Some(streamed.as_str()), message.text.as_deref());
    }
    // The user's own words are the node agent's to report: no assistant item for them.
    assert!(!events.iter().any(|e| matches!(e, EventData::ItemStarted { item } | EventData::ItemCompleted { item }
        if item.text.as_deref().is_some_and(|t| t.contains("TOOLCALL")) && item.kind != ItemKind::Status)));
}

#[test]
fn run_json_lines_convert_to_finished_items() {
    let text = convert("opencode-text.jsonl");
    let messages = completed(&text, ItemKind::Message);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].text.as_deref(), Some("hello from fake model (2 messages in context)"));
    assert_eq!(messages[0].id, "prt_202eb17d0001XnS7rFjlF394y3");

    let tool = convert("opencode-tool.jsonl");
    let calls = completed(&tool, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].input, Some(serde_json::json!({"command": "echo hi"})));
    let results = completed(&tool, ItemKind::ToolResult);
    assert_eq!(results[0].output.as_deref(), Some("hi\n"));
    assert_eq!(completed(&tool, ItemKind::Message)[0].text.as_deref(), Some("tool result received: hi"));
}

#[test]
fn unknown_lines_are_unparsed_and_errors_are_errors() {
    let mut converter = AgentId::Opencode.converter();
    for line in [
        "not json",
        r#"{"no":"type"}"#,
        r#"{"id":"evt_1","type":"something.new","properties":{}}"#,
        r#"{"type":"brand_new_run_line","part":{}}"#,
        r#"{"id":"evt_2","type":"message.part.updated","properties":{"part":{"id":"prt_1","type":"hologram"}}}"#,
    ] {
        let events = converter.convert(line);
        assert!(matches!(events.as_slice(), [EventData::AgentUnparsed { .. }]), "{line}: {events:?}");
    }
    let error = r#"{"directory":"/w","payload":{"id":"evt_3","type":"session.error","properties":{"sessionID":"ses_1","error":{"name":"APIError","data":{"message":"boom"}}}}}"#;
    assert_eq!(
        converter.convert(error),
        vec![EventData::Error { message: "boom".into(), code: Some("APIError".into()) }]
    );
    // A refused tool call is denied, with OpenCode's words as its result.
    let denied = r#"{"id":"evt_4","type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_9","type":"tool","tool":"bash","callID":"c","state":{"status":"error","input":{"command":"touch x"},"error":"The user rejected permission to use this specific tool call.","time":{"start":1,"end":2}}}}}"#;
    let events = converter.convert(denied);
    assert_eq!(completed(&events, ItemKind::ToolCall)[0].status, Some(ItemStatus::Denied));
    assert_eq!(completed(&events, ItemKind::ToolResult)[0].status, Some(ItemStatus::Denied));
}

#[test]
fn questions_and_their_answers_convert() {
    let mut converter = AgentId::Opencode.converter();
    let asked = r#"{"id":"evt_1","type":"question.asked","properties":{"id":"que_1","sessionID":"ses_1","questions":[{"question":"Which?","header":"Pick","options":[{"label":"a","description":"first"},{"label":"b","description":"second"}],"multiple":true}]}}"#;
    let expected = QuestionRequest {
        id: "que_1".into(),
        questions: vec![Question {
            question: "Which?".into(),
            header: Some("Pick".into()),
            options: vec!["a".into(), "b".into()],
            multi_select: true,
        }],
    };
    assert_eq!(converter.convert(asked), vec![EventData::QuestionRequested(expected)]);
    let replied = r#"{"id":"evt_2","type":"question.replied","properties":{"sessionID":"ses_1","requestID":"que_1","answers":[["a","b"]]}}"#;
    assert_eq!(
        converter.convert(replied),
        vec![EventData::QuestionResolved {
            id: "que_1".into(),
            outcome: QuestionOutcome::Answered,
            answers: Some(vec![vec!["a".into(), "b".into()]])
        }]
    );
    let rejected =
        r#"{"id":"evt_3","type":"question.rejected","properties":{"sessionID":"ses_1","requestID":"que_1"}}"#;
    assert_eq!(
        converter.convert(rejected),
        vec![EventData::QuestionResolved { id: "que_1".into(), outcome: QuestionOutcome::Rejected, answers: None }]
    );
}

#[test]
fn the_steps_tokens_and_cost_are_the_turns_usage_each_step_counted_once() {
    // Three steps (the call, the answer, the second message's answer), 10 in and 5 out
    // each; the bus repeats parts, which are counted once.
    let mut converter = AgentId::Opencode.converter();
    for line in lines("opencode-serve-permission-once.sse") {
        converter.convert(&line);
    }
    let usage = Usage { input_tokens: 30, output_tokens: 15, cost_usd: Some(0.0), ..Default::default() };
    assert_eq!(converter.take_usage(), Some(usage));
    assert_eq!(converter.take_usage(), None, "taken");
}
