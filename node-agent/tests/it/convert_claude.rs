//! Claude Code's recorded stream-json transcripts through the claude converter: every
//! line becomes events none of which is `agent.unparsed`, and the events say what the
//! transcript holds (text, tool calls and results, the permission request).

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::agents::convert::Converter;
use agentplane_node_agent::universal::*;
use serde_json::json;

fn transcript(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every line's events, checked to be known and at least one a line.
fn convert(name: &str) -> Vec<EventData> {
    let mut converter = AgentId::Claude.converter();
    let mut all = Vec::new();
    for (n, line) in transcript(name).lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let events = converter.convert(line);
        assert!(!events.is_empty(), "{name}:{}: no events", n + 1);
        for event in &events {
            assert!(!matches!(event, EventData::AgentUnparsed { .. }), "{name}:{}: {event:?} for {line}", n + 1);
        }
        all.extend(events);
    }
    all
}

fn completed(events: &[EventData], kind: ItemKind) -> Vec<&Item> {
    events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemCompleted { item } if item.kind == kind => Some(item),
            _ => None,
        })
        .collect()
}

#[test]
fn the_text_transcript_is_one_completed_assistant_message() {
    let events = convert("claude-text.jsonl");
    let messages = completed(&events, ItemKind::Message);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].role, Some(Role::Assistant));
    assert_eq!(messages[0].text.as_deref(), Some("hello from fake model (2 messages in context)"));
    let statuses = completed(&events, ItemKind::Status);
    assert!(
        statuses.iter().any(|s| s.text.as_deref().unwrap_or_default().contains("24f59f9a-96d8-48d8-9c6a-76e33baa75de")),
        "{statuses:?}"
    );
}

#[test]
fn the_tool_transcript_streams_a_call_its_result_and_the_answer() {
    let events = convert("claude-tool.jsonl");
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].id, "toolu_048afd4eb6cc4276a4a97e62");
    assert_eq!(calls[0].tool.as_deref(), Some("Bash"));
    assert_eq!(calls[0].input, Some(json!({"command": "echo hi", "description": "Print hi"})));
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id.as_deref(), Some("toolu_048afd4eb6cc4276a4a97e62"));
    assert_eq!(results[0].output.as_deref(), Some("hi"));
    assert_eq!(results[0].status, Some(ItemStatus::Completed));

    // The answer: started, streamed in deltas that add up to it, completed under the same id.
    let answer =
        completed(&events, ItemKind::Message).into_iter().find(|m| m.role == Some(Role::Assistant)).unwrap().clone();
    assert_eq!(answer.text.as_deref(), Some("tool result received: hi"));
    let started = events.iter().any(|e| matches!(e, EventData::ItemStarted { item } if item.id == answer.id));
    assert!(started, "no item.started for {}", answer.id);
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemDelta { item_id, delta } if *item_id == answer.id => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "tool result received: hi");
    // Each item completes once.
    let mut ids: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemCompleted { item } => Some(item.id.as_str()),
            _ => None,
        })
        .collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all, "an item completed twice");
}

#[test]
fn the_permission_transcript_asks_for_the_bash_call() {
    let events = convert("claude-permission-allow.jsonl");
    let requests: Vec<&PermissionRequest> = events
        .iter()
        .filter_map(|e| match e {
            EventData::PermissionRequested(request) => Some(request),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 1);
    let request = requests[0];
    assert_eq!(request.id, "c93ebaa7-96fb-4d36-83c6-046017f8ca3b");
    assert_eq!(request.tool, "Bash");
    assert_eq!(request.input["command"], "touch created-by-permission-test.txt");
    assert_eq!(request.options, vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    assert_eq!(request.item_id.as_deref(), Some("toolu_0fb1466fc990452c9fcf386d"));
    let texts: Vec<&str> = completed(&events, ItemKind::Message).iter().filter_map(|m| m.text.as_deref()).collect();
    assert_eq!(
        texts,
        ["tool result received: (Bash completed with no output)", "hello from fake model (6 messages in context)"]
    );
}

#[test]
fn plan_approval_is_a_question_and_unknown_lines_are_unparsed() {
    let mut converter = AgentId::Claude.converter();
    let line = json!({"type": "control_request", "request_id": "r1", "request": {"subtype": "can_use_tool", "tool_name": "ExitPlanMode", "input": {"plan": "1. write the file"}, "tool_use_id": "toolu_1"}});
    let events = converter.convert(&line.to_string());
    let [EventData::QuestionRequested(question)] = events.as_slice() else { panic!("{events:?}") };
    assert_eq!(question.id, "r1");
    assert!(question.questions[0].question.contains("1. write the file"));
    assert_eq!(question.questions[0].options, ["approve", "keep planning"]);

    for line in [r#"{"type":"made_up_type","x":1}"#, "not json at all", "[1,2]"] {
        let events = converter.convert(line);
        assert!(matches!(events.as_slice(), [EventData::AgentUnparsed { reason: Some(_) }]), "{line}: {events:?}");
    }
    let events = converter.convert(r#"{"type":"stream_event","event":{"type":"made_up_event"}}"#);
    assert!(matches!(events.as_slice(), [EventData::AgentUnparsed { .. }]), "{events:?}");
}

#[test]
fn a_failed_result_is_an_error_and_a_rejected_call_is_denied() {
    let mut converter = agentplane_node_agent::agents::claude::Converter::default();
    converter.denied("toolu_9");
    let result = json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "The user did not allow this Bash call.", "is_error": true}]}});
    let events = converter.convert(&result.to_string());
    let [EventData::ItemCompleted { item }] = events.as_slice() else { panic!("{events:?}") };
    assert_eq!(item.status, Some(ItemStatus::Denied));
    let failed = json!({"type": "result", "subtype": "error_during_execution", "is_error": true, "num_turns": 1, "errors": ["boom"], "permission_denials": [{"tool_name": "Bash"}]});
    let events = converter.convert(&failed.to_string());
    assert!(events.iter().any(|e| matches!(e, EventData::Error { message, .. } if message == "boom")), "{events:?}");
    assert!(events.iter().any(|e| matches!(e, EventData::ItemCompleted { item } if item.text.as_deref().unwrap_or_default().contains("permission denied for Bash"))));
}

/// Every claude transcript in the test data, the recorded ones and those our own
/// end-to-end runs with the pinned CLI wrote (`claude-<version>-*.jsonl`).
#[test]
fn every_claude_transcript_converts_without_unparsed_lines() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("claude-") && n.ends_with(".jsonl"))
        .collect();
    names.sort();
    assert!(names.len() >= 5, "{names:?}");
    for name in &names {
        convert(name);
    }
}

#[test]
fn the_pinned_cli_s_own_transcripts_hold_the_calls_and_the_denial() {
    let events = convert("claude-2.1.330-text-tool.jsonl");
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].input.as_ref().unwrap()["command"], "echo hi");
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results[0].output.as_deref(), Some("hi"));
    assert!(completed(&events, ItemKind::Message).iter().any(|m| m.text.as_deref() == Some("tool said: hi")));

    let events = convert("claude-2.1.330-permissions.jsonl");
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].status, Some(ItemStatus::Completed));
    // Without the driver's word that the user rejected it, a denial reads as a failed call.
    assert_eq!(results[1].status, Some(ItemStatus::Failed));
    assert!(results[1].output.as_deref().unwrap_or_default().contains("did not allow"));
}

/// The usage the converter collected by the end of each turn (each `result` line).
fn turn_usages(name: &str) -> Vec<Option<Usage>> {
    let mut converter = AgentId::Claude.converter();
    let mut usages = Vec::new();
    for line in transcript(name).lines().filter(|l| !l.trim().is_empty()) {
        converter.convert(line);
        if line.contains(r#""type":"result""#) {
            usages.push(converter.take_usage());
        }
    }
    usages
}

#[test]
fn each_result_gives_its_turns_tokens_and_what_it_added_to_the_cost() {
    // One process, three turns: `usage` is each turn's, `total_cost_usd` the process's
    // so far (0.010376, 0.031608..., 0.042516...).
    let usage = |input, output, cost| Usage {
        input_tokens: input,
        output_tokens: output,
        cost_usd: Some(cost),
        ..Default::default()
    };
    assert_eq!(
        turn_usages("claude-2.1.330-text-tool.jsonl"),
        [Some(usage(2549, 9, 0.010376)), Some(usage(5233, 15, 0.021232)), Some(usage(2682, 9, 0.010908))]
    );
    // Nothing was reported before the first result, nor after the last.
    let mut converter = AgentId::Claude.converter();
    assert_eq!(converter.take_usage(), None);
}
