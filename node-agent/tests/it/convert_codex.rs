//! Codex's converter on recorded native transcripts (app-server JSON-RPC and
//! `codex exec --json`): every line converts, none to `agent.unparsed`, and the events
//! say what happened (streamed text, tool calls with their results, approvals).

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::universal::*;

fn transcript(name: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts").join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

/// Each line's events, with the line, through one converter (as a driver reads a stream).
fn convert(name: &str) -> Vec<(String, Vec<EventData>)> {
    let mut converter = AgentId::Codex.converter();
    transcript(name).into_iter().map(|line| (line.clone(), converter.convert(&line))).collect()
}

fn events(name: &str) -> Vec<EventData> {
    convert(name).into_iter().flat_map(|(_, events)| events).collect()
}

fn completed(events: &[EventData]) -> Vec<&Item> {
    events.iter().filter_map(|e| if let EventData::ItemCompleted { item } = e { Some(item) } else { None }).collect()
}

#[test]
fn every_line_of_every_codex_transcript_converts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent-transcripts");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("codex-") && n.ends_with(".jsonl"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "the codex transcripts are there: {names:?}");
    for name in names {
        for (line, events) in convert(&name) {
            assert!(!events.is_empty(), "{name}: no event for {line}");
            for event in &events {
                assert_ne!(event.kind(), EventType::AgentUnparsed, "{name}: {line} became {event:?}");
            }
        }
    }
}

#[test]
fn app_server_text_streams_as_deltas_that_add_up_to_the_completed_message() {
    let events = events("codex-appserver-approve.jsonl");
    let id = "msg_d9b58f2d60614ff586ed5589";
    let started = events
        .iter()
        .any(|e| matches!(e, EventData::ItemStarted { item } if item.id == id && item.role == Some(Role::Assistant)));
    assert!(started);
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            EventData::ItemDelta { item_id, delta } if item_id == id => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let message = completed(&events).into_iter().find(|i| i.id == id).expect("the completed message");
    assert_eq!(message.kind, ItemKind::Message);
    assert_eq!(message.text.as_deref(), Some("hello from fake model (6 messages in context)"));
    assert_eq!(deltas, "hello from fake model (6 messages in context)");
}

#[test]
fn app_server_approval_becomes_a_permission_request_about_the_command_item() {
    let events = events("codex-appserver-approve.jsonl");
    let requests: Vec<&PermissionRequest> =
        events.iter().filter_map(|e| if let EventData::PermissionRequested(r) = e { Some(r) } else { None }).collect();
    assert_eq!(requests.len(), 1);
    let request = requests[0];
    assert_eq!(request.tool, "shell");
    assert_eq!(request.item_id.as_deref(), Some("call_340aa0db44db411cba329743"));
    assert_eq!(request.input["command"], "/bin/bash -lc 'touch codex-appserver-made-this.txt'");
    assert_eq!(request.options, [PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
    // The call it is about, and the call's result once it ran.
    let items = completed(&events);
    let call = items.iter().find(|i| i.id == "call_340aa0db44db411cba329743").expect("the call");
    assert_eq!(
        (call.kind, call.tool.as_deref(), call.status),
        (ItemKind::ToolCall, Some("shell"), Some(ItemStatus::Completed))
    );
    let result = items.iter().find(|i| i.kind == ItemKind::ToolResult).expect("the result");
    assert_eq!(result.call_id.as_deref(), Some("call_340aa0db44db411cba329743"));
    assert_eq!(result.output.as_deref(), Some("exit code 0"));
    // The user's messages, as codex echoes them.
    let users: Vec<_> =
        items.iter().filter(|i| i.role == Some(Role::User)).map(|i| i.text.clone().unwrap_or_default()).collect();
    assert_eq!(users, ["TOOLCALL{touch codex-appserver-made-this.txt}", "second turn on same thread"]);
}

#[test]
fn status_items_have_ids_unique_in_the_stream() {
    let events = events("codex-appserver-approve.jsonl");
    let ids: Vec<&str> =
        completed(&events).iter().filter(|i| i.kind == ItemKind::Status).map(|i| i.id.as_str()).collect();
    let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
    assert!(ids.len() > 10);
    assert_eq!(unique.len(), ids.len());
}

#[test]
fn exec_json_tool_call_gives_call_result_and_answer_and_the_metadata_warning_is_an_error() {
    let events = events("codex-tool.jsonl");
    let started = events
        .iter()
        .find_map(|e| if let EventData::ItemStarted { item } = e { Some(item) } else { None })
        .expect("the call starts");
    assert_eq!(
        (started.id.as_str(), started.kind, started.status),
        ("item_1", ItemKind::ToolCall, Some(ItemStatus::InProgress))
    );
    assert_eq!(started.input.as_ref().unwrap()["command"], "/bin/bash -lc 'echo hi'");
    let items = completed(&events);
    let result = items.iter().find(|i| i.kind == ItemKind::ToolResult).expect("a result");
    assert_eq!((result.call_id.as_deref(), result.output.as_deref()), (Some("item_1"), Some("hi\n")));
    let answer = items.iter().find(|i| i.role == Some(Role::Assistant)).expect("an answer");
    assert!(answer.text.as_deref().unwrap().starts_with("tool result received"));
    assert!(events.iter().any(|e| matches!(e, EventData::Error { message, .. } if message.contains("gpt-5"))));
}

#[test]
fn exec_json_text_turn() {
    let events = events("codex-text.jsonl");
    let kinds: Vec<EventType> = events.iter().map(EventData::kind).collect();
    assert_eq!(kinds, [EventType::ItemCompleted; 4]);
    let items = completed(&events);
    assert_eq!(items[2].text.as_deref(), Some("hello from fake model (4 messages in context)"));
    assert_eq!(items[3].kind, ItemKind::Status);
}

#[test]
fn a_recorded_bypass_run_has_the_shell_output_as_the_result_of_its_call() {
    // Recorded by agent_codex's tool test (its `record`), from the real codex 0.169.0.
    let events = events("codex-e2e-bypass-tool.jsonl");
    let items = completed(&events);
    let call = items.iter().find(|i| i.kind == ItemKind::ToolCall).expect("a call");
    let result = items.iter().find(|i| i.kind == ItemKind::ToolResult).expect("a result");
    assert_eq!(result.call_id.as_ref(), Some(&call.id));
    assert_eq!(result.output.as_deref(), Some("hi-from-the-shell\n"));
}

#[test]
fn token_usage_is_summed_per_turn_as_data_not_text() {
    // Two model calls in the first turn (10 in, 5 out each, as `last` says), one in the
    // second; `total` is the thread's so far and is not added up.
    let mut converter = AgentId::Codex.converter();
    let mut usages = Vec::new();
    for line in transcript("codex-appserver-approve.jsonl") {
        for event in converter.convert(&line) {
            if let EventData::ItemCompleted { item } = &event {
                let text = item.text.as_deref().unwrap_or_default();
                assert!(!text.contains("tokens:") && !text.contains(" input,"), "usage as text: {text}");
            }
        }
        if line.contains(r#""method":"turn/completed""#) {
            usages.push(converter.take_usage());
        }
    }
    let usage = |input, output| Usage { input_tokens: input, output_tokens: output, ..Default::default() };
    assert_eq!(usages, [Some(usage(20, 10)), Some(usage(10, 5))]);
    // Cached input is part of codex's `inputTokens`: it is counted apart.
    let line = r#"{"method":"thread/tokenUsage/updated","params":{"threadId":"t","turnId":"u","tokenUsage":{"total":{"totalTokens":999,"inputTokens":900,"cachedInputTokens":0,"outputTokens":99},"last":{"totalTokens":4236,"inputTokens":4202,"cachedInputTokens":4001,"cacheWriteInputTokens":0,"outputTokens":31,"reasoningOutputTokens":0}}}}"#;
    converter.convert(line);
    assert_eq!(
        converter.take_usage(),
        Some(Usage { input_tokens: 201, output_tokens: 31, cache_read_tokens: 4001, ..Default::default() })
    );
}
