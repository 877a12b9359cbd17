//! Gemini CLI's recorded native transcripts through its converter: its headless
//! `-o stream-json` runs and its Agent Client Protocol sessions (`gemini --acp`),
//! recorded against the scripted model server. Every line converts to something
//! understood, and the conversation reads as it happened.

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::universal::*;

/// Each line of a transcript and the events it became.
fn convert(name: &str) -> Vec<(String, Vec<EventData>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut converter = AgentId::Gemini.converter();
    text.lines().filter(|l| !l.trim().is_empty()).map(|line| (line.to_string(), converter.convert(line))).collect()
}

fn events(name: &str) -> Vec<EventData> {
    let converted = convert(name);
    for (line, events) in &converted {
        assert!(!events.is_empty(), "no event for {line}");
        for event in events {
            assert!(!matches!(event, EventData::AgentUnparsed { .. }), "unparsed in {name}: {event:?} from {line}");
        }
    }
    converted.into_iter().flat_map(|(_, events)| events).collect()
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

fn assistant_texts(events: &[EventData]) -> Vec<String> {
    completed(events, ItemKind::Message)
        .into_iter()
        .filter(|i| i.role == Some(Role::Assistant))
        .filter_map(|i| i.text)
        .collect()
}

/// The deltas of each item, joined, must be its completed text.
fn assert_deltas_add_up(events: &[EventData]) {
    for item in completed(events, ItemKind::Message).iter().filter(|i| i.role == Some(Role::Assistant)) {
        let streamed: String = events
            .iter()
            .filter_map(|e| match e {
                EventData::ItemDelta { item_id, delta } if *item_id == item.id => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(Some(streamed.as_str()), item.text.as_deref(), "deltas of {}", item.id);
    }
}

#[test]
fn a_stream_json_text_run_is_one_streamed_answer() {
    let events = events("gemini-text.jsonl");
    assert_eq!(assistant_texts(&events), ["hello from fake model (1 messages in context)"]);
    assert_deltas_add_up(&events);
    let user: Vec<_> =
        completed(&events, ItemKind::Message).into_iter().filter(|i| i.role == Some(Role::User)).collect();
    assert_eq!(user[0].text.as_deref(), Some("say hello"));
    assert!(
        completed(&events, ItemKind::Status).iter().any(|s| s.text.as_deref().is_some_and(|t| t.contains("5acca239")))
    );
}

#[test]
fn a_stream_json_tool_run_has_a_call_and_its_result() {
    let events = events("gemini-tool-yolo.jsonl");
    let started = events.iter().find_map(|e| match e {
        EventData::ItemStarted { item } if item.kind == ItemKind::ToolCall => Some(item.clone()),
        _ => None,
    });
    let call = started.expect("a tool call starts");
    assert_eq!(call.tool.as_deref(), Some("run_shell_command"));
    assert_eq!(call.input.as_ref().unwrap()["command"], "echo hi");
    let results = completed(&events, ItemKind::ToolResult);
    assert_eq!(results.len(), 1);
    assert_eq!((results[0].call_id.as_deref(), results[0].output.as_deref()), (Some(call.id.as_str()), Some("hi")));
    assert_eq!(results[0].status, Some(ItemStatus::Completed));
    assert!(assistant_texts(&events)[0].starts_with("tool result received"));
}

#[test]
fn an_acp_session_streams_answers_runs_tools_and_asks() {
    let events = events("gemini-acp-permission.jsonl");
    let texts = assistant_texts(&events);
    assert_eq!(texts[0], "scripted reply: 1 messages in context");
    assert_eq!(texts[1], "tool said: hi");
    assert_eq!(texts[2], "tool said: (empty)");
    assert!(texts[3].contains("was canceled by the user"), "{texts:?}");
    assert_deltas_add_up(&events);
    // `echo hi` runs without asking; `touch` asks, twice (allowed, then denied).
    let requests: Vec<PermissionRequest> = events
        .iter()
        .filter_map(|e| match e {
            EventData::PermissionRequested(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[0].tool.as_str(), &requests[0].input["command"]),
        ("run_shell_command", &serde_json::json!("touch a.txt"))
    );
    assert_eq!(requests[0].options, [PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    assert_eq!(requests[0].item_id.as_deref(), Some(requests[0].id.as_str()));
    // The echo and the allowed touch complete; the denied one never reports back
    // (the driver completes it as denied).
    let calls = completed(&events, ItemKind::ToolCall);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].input.as_ref().unwrap()["command"], "echo hi");
    assert_eq!(calls[1].id, requests[0].id);
    // Item ids are unique, and each prompt's items carry its turn.
    let mut ids: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemStarted { item } => Some(item.id.clone()),
            _ => None,
        })
        .collect();
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "{ids:?}");
}

#[test]
fn an_acp_load_replays_the_history_before_the_next_answer() {
    let events = events("gemini-acp-load.jsonl");
    let texts = assistant_texts(&events);
    // The replay has the earlier conversation; the last answer saw all of it.
    assert_eq!(texts.first().map(String::as_str), Some("scripted reply: 1 messages in context"));
    assert_eq!(texts.last().map(String::as_str), Some("scripted reply: 16 messages in context"));
    let users: Vec<String> = completed(&events, ItemKind::Message)
        .into_iter()
        .filter(|i| i.role == Some(Role::User))
        .filter_map(|i| i.text)
        .collect();
    assert!(users.iter().any(|u| u == "[[run:touch a.txt]]"), "{users:?}");
    // Replayed tool calls arrive already done.
    assert!(completed(&events, ItemKind::ToolCall).len() >= 2);
}

#[test]
fn lines_it_does_not_know_are_unparsed_never_dropped() {
    let mut converter = AgentId::Gemini.converter();
    for line in [
        "plain text",
        r#"{"type":"telemetry"}"#,
        r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"something_new"}}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"fs/read_text_file","params":{"path":"/etc/passwd"}}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
    ] {
        let events = converter.convert(line);
        assert!(matches!(&events[..], [EventData::AgentUnparsed { reason: Some(_) }]), "{line}: {events:?}");
    }
}

/// The usage the converter collected by the end of each turn (`ends` says which line ends one).
fn turn_usages(name: &str, ends: impl Fn(&str) -> bool) -> Vec<Option<Usage>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut converter = AgentId::Gemini.converter();
    let mut usages = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        converter.convert(line);
        if ends(line) {
            usages.push(converter.take_usage());
        }
    }
    usages
}

#[test]
fn each_prompts_answer_and_each_headless_result_give_the_turns_tokens() {
    let usage = |input, output| Some(Usage { input_tokens: input, output_tokens: output, ..Default::default() });
    // ACP: the CLI's `_meta.quota.token_count` on each `session/prompt` answer.
    assert_eq!(
        turn_usages("gemini-acp-permission.jsonl", |l| l.contains("stopReason")),
        [usage(20, 10), usage(40, 20), usage(40, 20), usage(40, 20)]
    );
    // Headless stream-json: the `result` line's stats (`input` is the uncached input).
    assert_eq!(turn_usages("gemini-text.jsonl", |l| l.contains(r#""type":"result""#)), [usage(20, 10)]);
    assert_eq!(turn_usages("gemini-tool-yolo.jsonl", |l| l.contains(r#""type":"result""#)), [usage(30, 15)]);
}
