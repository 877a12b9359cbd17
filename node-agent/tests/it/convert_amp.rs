//! Amp's converter on the recorded `--stream-json` transcripts of the pure-JS CLI.

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::universal::{EventData, EventType, Item, ItemKind, ItemStatus, Usage};

fn convert(name: &str) -> Vec<(String, Vec<EventData>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut converter = AgentId::Amp.converter();
    text.lines().filter(|l| !l.trim().is_empty()).map(|line| (line.to_string(), converter.convert(line))).collect()
}

fn understood(converted: &[(String, Vec<EventData>)]) -> Vec<EventData> {
    for (line, events) in converted {
        assert!(!events.is_empty(), "no event for {line}");
        assert!(events.iter().all(|e| e.kind() != EventType::AgentUnparsed), "unparsed: {line} -> {events:?}");
    }
    converted.iter().flat_map(|(_, events)| events.clone()).collect()
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
fn a_text_turn_converts_without_unparsed_lines() {
    let converted = convert("amp-old-text.jsonl");
    assert_eq!(converted.len(), 4);
    let events = understood(&converted);
    let messages = completed(&events, ItemKind::Message);
    assert_eq!(messages.len(), 1, "the prompt is the session manager's to report: {messages:?}");
    assert_eq!(messages[0].text.as_deref(), Some("hello from fake model (1 messages in context)"));
    assert!(
        completed(&events, ItemKind::Status)[0]
            .text
            .as_deref()
            .unwrap()
            .contains("T-01a202f6-ce52-76e5-ba84-891eb7582f6a")
    );
    assert!(events.iter().all(|e| e.kind() != EventType::Error));
}

#[test]
fn a_tool_turn_converts_to_a_call_and_its_result() {
    let events = understood(&convert("amp-old-tool.jsonl"));
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "toolu_6f3b0f96e5f74b78847bd44a");
    assert_eq!(calls[0].tool.as_deref(), Some("Bash"));
    assert_eq!(calls[0].input, Some(serde_json::json!({"cmd": "echo hi"})));
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id.as_deref(), Some("toolu_6f3b0f96e5f74b78847bd44a"));
    // amp's `{"output", "exitCode"}` shows as the output.
    assert_eq!(results[0].output.as_deref(), Some("hi\n"));
    assert_eq!(results[0].status, Some(ItemStatus::Completed));
    let texts: Vec<_> = completed(&events, ItemKind::Message).into_iter().filter_map(|m| m.text).collect();
    assert_eq!(texts, ["tool result received: <output>hi\n</output>\n<exitCode>0</exitCode>"]);
}

#[test]
fn a_refused_approval_is_permission_denied_and_unknown_lines_unparsed() {
    let mut converter = AgentId::Amp.converter();
    let refused = r#"{"type":"result","subtype":"error_during_execution","duration_ms":291,"is_error":true,"num_turns":1,"error":"The following tools require user approval, which is not supported in stream JSON mode: Bash","session_id":"T-1"}"#;
    match &converter.convert(refused)[..] {
        [EventData::Error { message, code }] => {
            assert!(message.contains("Bash"));
            assert_eq!(code.as_deref(), Some("permission_denied"));
        }
        other => panic!("{other:?}"),
    }
    for line in [
        r#"{"type":"control_request"}"#,
        r#"{"type":"system","subtype":"brand_new"}"#,
        "{",
        r#"{"type":"assistant","message":{"content":[{"type":"hologram"}]}}"#,
    ] {
        let events = converter.convert(line);
        assert_eq!(events.len(), 1, "{line}");
        assert_eq!(events[0].kind(), EventType::AgentUnparsed, "{line}");
    }
}

#[test]
fn the_assistant_messages_usage_is_the_turns() {
    let usage = |name: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut converter = AgentId::Amp.converter();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            converter.convert(line);
        }
        converter.take_usage()
    };
    let tokens = |input, output| Some(Usage { input_tokens: input, output_tokens: output, ..Default::default() });
    assert_eq!(usage("amp-old-text.jsonl"), tokens(10, 5));
    // The tool call and the answer: two model calls.
    assert_eq!(usage("amp-old-tool.jsonl"), tokens(20, 10));
}
