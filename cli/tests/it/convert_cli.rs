//! `agentplane node-agent convert --agent AGENT` on the native transcripts recorded
//! from the real CLIs: what holds whatever each converter makes of them (an event or
//! more for every native line, in order, each keeping its line), and, for Claude, that
//! its converter understands every line.

use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use agentplane_node_agent::universal::{EventSource, EventType, UniversalEvent};

fn transcript(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../node-agent/tests/data/agent-transcripts").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn convert(agent: &str, input: &str) -> Output {
    let mut child = Command::new(common::bin())
        .args(["node-agent", "convert", "--agent", agent])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Written from a thread: the output could fill its pipe before the input is all in.
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    output
}

/// The events of a conversion that must succeed.
fn converted(agent: &str, input: &str) -> Vec<UniversalEvent> {
    let output = convert(agent, input);
    assert!(output.status.success(), "convert --agent {agent} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a universal event ({e}): {line}")))
        .collect()
}

/// What holds for any converter: sequences 1..n, the envelope's fixed fields, and
/// every native line turned into one or more events that keep it as `raw`, in order.
fn assert_converts_every_line(events: &[UniversalEvent], native: &[&str]) {
    for (at, event) in events.iter().enumerate() {
        assert_eq!(event.sequence, at as u64 + 1, "sequences run from 1 without holes");
        assert_eq!(event.session_id, "convert");
        assert_eq!(event.source, EventSource::Agent);
    }
    // Consecutive events of one line share its `raw`: grouped, they give back the lines.
    let mut raws: Vec<&str> = Vec::new();
    for event in events {
        let raw = event.raw.as_deref().expect("every event keeps its native line");
        if raws.last() != Some(&raw) {
            raws.push(raw);
        }
    }
    let mut expected: Vec<&str> = native.to_vec();
    expected.dedup();
    assert_eq!(raws, expected, "each native line, in order, gave one or more events");
}

#[test]
fn a_claude_transcript_converts_line_by_line_and_garbage_is_kept_as_unparsed() {
    let fixture = transcript("claude-text.jsonl");
    let garbage = "this is not what claude prints {";
    let input = format!("{fixture}{garbage}\n\n");
    let events = converted("claude", &input);
    let mut native: Vec<&str> = fixture.lines().collect();
    native.push(garbage);
    assert_converts_every_line(&events, &native);
    let last = events.last().unwrap();
    assert_eq!(last.raw.as_deref(), Some(garbage));
    assert_eq!(last.kind(), EventType::AgentUnparsed, "a line nobody understands is kept, never dropped");
    assert_eq!(events.iter().filter(|e| e.raw.as_deref() == Some(garbage)).count(), 1);
}

#[test]
fn an_opencode_sse_transcript_converts_its_data_lines_only() {
    let fixture = transcript("opencode-serve-permission-once.sse");
    let events = converted("opencode", &fixture);
    let native: Vec<&str> = fixture.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert!(native.len() > 10, "the fixture has SSE data lines");
    assert_converts_every_line(&events, &native);
}

#[test]
fn every_agent_converts_its_transcripts() {
    let fixtures = [
        ("amp", "amp-old-text.jsonl"),
        ("amp", "amp-old-tool.jsonl"),
        ("claude", "claude-tool.jsonl"),
        ("claude", "claude-permission-allow.jsonl"),
        ("codex", "codex-text.jsonl"),
        ("codex", "codex-tool.jsonl"),
        ("codex", "codex-appserver-approve.jsonl"),
        ("gemini", "gemini-text.jsonl"),
        ("gemini", "gemini-tool-yolo.jsonl"),
        ("opencode", "opencode-text.jsonl"),
        ("opencode", "opencode-tool.jsonl"),
        ("pi", "pi-text.jsonl"),
        ("pi", "pi-rpc.jsonl"),
    ];
    for (agent, name) in fixtures {
        let fixture = transcript(name);
        let native: Vec<&str> = fixture.lines().filter(|l| !l.trim().is_empty()).collect();
        let events = converted(agent, &fixture);
        assert_converts_every_line(&events, &native);
    }
}

#[test]
fn an_unknown_agent_is_a_clear_error() {
    let output = convert("clippy", "{}\n");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("agent \"clippy\" is unknown") && stderr.contains("claude"), "{stderr}");
}

#[test]
fn empty_input_converts_to_nothing() {
    assert!(converted("codex", "").is_empty());
    assert!(converted("opencode", "event: message\n: keep-alive\n\n").is_empty(), "SSE framing is no native line");
}

/// Fails until the Claude converter lands: then every line of a plain text turn is understood.
#[test]
fn converted_claude_fixture_has_no_unparsed_lines() {
    let events = converted("claude", &transcript("claude-text.jsonl"));
    let unparsed: Vec<&str> =
        events.iter().filter(|e| e.kind() == EventType::AgentUnparsed).filter_map(|e| e.raw.as_deref()).collect();
    assert!(unparsed.is_empty(), "lines the claude converter did not understand: {unparsed:#?}");
    assert!(events.iter().any(|e| e.kind() == EventType::ItemCompleted), "the reply is an item");
}
