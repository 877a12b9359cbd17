//! pi's converter on the recorded native transcripts (`pi --mode rpc`, `pi -p --mode json`).

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::universal::{EventData, EventType, Item, ItemKind, ItemStatus, Usage};

fn transcript(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Converts every line with one converter, as a driver does; each line's events.
fn convert(text: &str) -> Vec<(String, Vec<EventData>)> {
    let mut converter = AgentId::Pi.converter();
    text.lines().filter(|l| !l.trim().is_empty()).map(|line| (line.to_string(), converter.convert(line))).collect()
}

fn all(converted: &[(String, Vec<EventData>)]) -> Vec<EventData> {
    converted.iter().flat_map(|(_, events)| events.clone()).collect()
}

fn assert_every_line_understood(converted: &[(String, Vec<EventData>)]) {
    for (line, events) in converted {
        assert!(!events.is_empty(), "no event for {line}");
        assert!(events.iter().all(|e| e.kind() != EventType::AgentUnparsed), "unparsed: {line} -> {events:?}");
    }
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

/// The deltas of one item, joined.
fn deltas(events: &[EventData], id: &str) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemDelta { item_id, delta } if item_id == id => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_rpc_transcript_converts_without_unparsed_lines() {
    let converted = convert(&transcript("pi-rpc.jsonl"));
    assert_eq!(converted.len(), 49);
    assert_every_line_understood(&converted);
    let events = all(&converted);

    // The tool call, with pi's id, its tool and arguments, and its result.
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].id, "call_496091d59c144e46bf850a26");
    assert_eq!(calls[0].tool.as_deref(), Some("bash"));
    assert_eq!(calls[0].input, Some(serde_json::json!({"command": "echo hi"})));
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].call_id.as_deref(), Some("call_496091d59c144e46bf850a26"));
    assert_eq!(results[0].output.as_deref(), Some("hi\n"));
    assert_eq!(results[0].status, Some(ItemStatus::Completed));
    // The tool's output streamed as the new suffix of each update.
    assert_eq!(deltas(&events, &results[0].id), "hi\n");

    // Two assistant texts, streamed: the deltas add up to the completed text.
    let messages = completed(&events, ItemKind::Message);
    let texts: Vec<_> = messages.iter().map(|m| m.text.clone().unwrap_or_default()).collect();
    assert_eq!(texts, ["tool result received: hi", "hello from fake model (6 messages in context)"]);
    for message in &messages {
        assert_eq!(deltas(&events, &message.id), message.text.clone().unwrap());
        assert!(events.iter().any(|e| matches!(e, EventData::ItemStarted { item } if item.id == message.id)));
    }
    // Item ids are unique (a message's and a status item's alike).
    let mut ids: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemCompleted { item } => Some(item.id.clone()),
            _ => None,
        })
        .collect();
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count);
    // The get_state response names pi's session.
    let last = &converted.last().unwrap().1;
    assert!(
        matches!(&last[0], EventData::ItemCompleted { item } if item.text.as_deref().is_some_and(|t| t.contains("01a202f8-fd30-7706-a87d-a73631ea6281"))),
        "{last:?}"
    );
}

#[test]
fn the_json_transcript_converts_without_unparsed_lines() {
    let converted = convert(&transcript("pi-text.jsonl"));
    assert_every_line_understood(&converted);
    let events = all(&converted);
    let messages = completed(&events, ItemKind::Message);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].text.as_deref(), Some("hello from fake model (2 messages in context)"));
    // The user's own message is the session manager's to report, not the converter's.
    assert!(messages.iter().all(|m| m.text.as_deref() != Some("say hello")));
    let first = &converted[0].1;
    assert!(
        matches!(&first[0], EventData::ItemCompleted { item } if item.kind == ItemKind::Status && item.text.as_deref().unwrap().contains("01a202f8-b5d8-741b-8238-1059678dadc4"))
    );
}

#[test]
fn errors_become_error_events_and_unknown_lines_unparsed() {
    let mut converter = AgentId::Pi.converter();
    let failed = r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"Connection error."}}"#;
    assert_eq!(converter.convert(failed), vec![EventData::Error { message: "Connection error.".into(), code: None }]);
    let refused = r#"{"id":"x","type":"response","command":"prompt","success":false,"error":"busy"}"#;
    assert!(matches!(&converter.convert(refused)[..], [EventData::Error { message, .. }] if message.contains("busy")));
    for line in [
        r#"{"type":"brand_new_event"}"#,
        r#"{"no":"type"}"#,
        "not json at all",
        r#"{"type":"message_start","message":{"role":"alien"}}"#,
    ] {
        let events = converter.convert(line);
        assert_eq!(events.len(), 1, "{line}");
        assert_eq!(events[0].kind(), EventType::AgentUnparsed, "{line}");
    }
}

#[test]
fn the_assistant_messages_usage_and_cost_are_the_turns() {
    // One model call of 10 input and 5 output tokens, which pi prices at 0 (its model
    // configuration gives no price).
    let mut converter = AgentId::Pi.converter();
    for line in transcript("pi-text.jsonl").lines().filter(|l| !l.trim().is_empty()) {
        converter.convert(line);
    }
    let recorded = Usage { input_tokens: 10, output_tokens: 5, cost_usd: Some(0.0), ..Default::default() };
    assert_eq!(converter.take_usage(), Some(recorded));
    // A message_end with counts (pi's `input` leaves the cached tokens out).
    let line = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input":201,"output":31,"cacheRead":4001,"cacheWrite":501,"totalTokens":4734,"cost":{"input":0.001,"output":0.002,"cacheRead":0.0004,"cacheWrite":0.0001,"total":0.0035}},"stopReason":"stop"}}"#;
    converter.convert(line);
    let usage = Usage {
        input_tokens: 201,
        output_tokens: 31,
        cache_read_tokens: 4001,
        cache_write_tokens: 501,
        cost_usd: Some(0.0035),
    };
    assert_eq!(converter.take_usage(), Some(usage));
}
