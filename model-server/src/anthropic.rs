//! The scripted model server's Anthropic Messages API (`POST /v1/messages`, which
//! Claude Code calls as `/v1/messages?beta=true`, and Amp's
//! `/api/provider/anthropic/v1/messages`): a request's `messages` and `tools` become a
//! [`Conversation`], the script's [`Reply`] goes back as one JSON message or, when the
//! request says `stream: true`, as the server-sent events Anthropic sends (text in
//! several `text_delta`s, a tool call's input in `input_json_delta`s).

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Conversation, Message, Reply, ReportedUsage, Shared, Tool};

/// Numbers the ids of responses and tool calls, so that each is unique per process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id(prefix: &str) -> String {
    format!("{prefix}_scripted{:06}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// `POST /v1/messages`.
pub async fn messages(State(shared): State<Shared>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return error(StatusCode::BAD_REQUEST, &format!("the body is not JSON: {e}"));
        }
    };
    let conversation = conversation(&request);
    let reply = conversation.reply();
    let model = request.get("model").and_then(Value::as_str).unwrap_or("scripted-model");
    let usage = shared.report_usage("anthropic", model, conversation.tools.len(), true);
    if request.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let body = render_stream(&reply, model, &usage);
        ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from(body))
            .into_response()
    } else {
        axum::Json(render_message(&reply, model, &usage)).into_response()
    }
}

/// `POST /v1/messages/count_tokens`: a rough count, which is all a client uses it for.
pub async fn count_tokens(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    axum::Json(json!({ "input_tokens": estimate_tokens(&request) })).into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})))
        .into_response()
}

/// About four bytes a token, at least one.
fn estimate_tokens(request: &Value) -> u64 {
    let bytes = request.get("messages").map(|m| m.to_string().len()).unwrap_or(0) as u64;
    (bytes / 4).max(1)
}

/// The conversation of a Messages request. `system`, thinking blocks, images and
/// `cache_control` mean nothing to the script and are skipped. Consecutive messages
/// of the user (Claude Code sends its environment as a second one) are one turn, as
/// the API takes them: its text (prompt and reminders, joined) and then the tool
/// results it carries, so that the results are what the script answers.
pub fn conversation(request: &Value) -> Conversation {
    // (role, texts, then tool calls or results) per turn.
    let mut turns: Vec<(String, Vec<String>, Vec<Message>)> = Vec::new();
    for message in request.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user").to_string();
        // Claude Code puts its environment in a message of role `system`: not the conversation.
        if role != "user" && role != "assistant" {
            continue;
        }
        if turns.last().is_none_or(|(last, _, _)| *last != role) {
            turns.push((role, Vec::new(), Vec::new()));
        }
        let Some((_, texts, after)) = turns.last_mut() else { continue };
        match message.get("content") {
            Some(Value::String(text)) => texts.push(text.clone()),
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => texts.extend(block.get("text").and_then(Value::as_str).map(str::to_string)),
                        Some("tool_use") => {
                            let name = block.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                            after.push(Message::ToolCall { name });
                        }
                        Some("tool_result") => after.push(Message::ToolResult(tool_result_text(block.get("content")))),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let mut messages = Vec::new();
    for (role, texts, after) in turns {
        let text = texts.into_iter().filter(|t| !t.is_empty()).collect::<Vec<_>>().join("\n");
        if !text.is_empty() {
            messages.push(if role == "assistant" { Message::Assistant(text) } else { Message::User(text) });
        }
        messages.extend(after);
    }
    let tools = request
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|tool| {
            let name = tool.get("name")?.as_str()?.to_string();
            Some(Tool { name, schema: tool.get("input_schema").cloned().unwrap_or(Value::Null) })
        })
        .collect();
    Conversation { messages, tools }
}

/// A tool result's content: a string, or text blocks (joined).
fn tool_result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => {
            blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// The content block and stop reason of a reply.
fn content_block(reply: &Reply) -> (Value, &'static str) {
    match reply {
        Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Reply::ToolCall { tool, arguments } => {
            (json!({"type": "tool_use", "id": next_id("toolu"), "name": tool, "input": arguments}), "tool_use")
        }
    }
}

/// The Messages API's `usage` of an answer (Anthropic counts cached input apart).
fn usage_json(usage: &ReportedUsage) -> Value {
    json!({
        "input_tokens": usage.input, "output_tokens": usage.output,
        "cache_creation_input_tokens": usage.cache_write, "cache_read_input_tokens": usage.cache_read,
    })
}

/// The reply as one Messages API response.
pub fn render_message(reply: &Reply, model: &str, usage: &ReportedUsage) -> Value {
    let (block, stop_reason) = content_block(reply);
    json!({
        "id": next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": usage_json(usage),
    })
}

/// The reply as Anthropic's server-sent events, the whole stream.
/// As the API does, `message_start` has the input counts (and one output token so
/// far) and `message_delta` the output count of the whole answer.
pub fn render_stream(reply: &Reply, model: &str, usage: &ReportedUsage) -> String {
    let (block, stop_reason) = content_block(reply);
    let mut start_usage = usage_json(usage);
    start_usage["output_tokens"] = json!(1);
    let mut out = String::new();
    let mut event = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": next_id("msg"), "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": start_usage,
        }}),
    );
    let (start, deltas) = match reply {
        Reply::Text(text) => {
            let deltas =
                pieces(text, 3).into_iter().map(|t| json!({"type": "text_delta", "text": t})).collect::<Vec<_>>();
            (json!({"type": "text", "text": ""}), deltas)
        }
        Reply::ToolCall { .. } => {
            let mut start = block.clone();
            start["input"] = json!({});
            let input = block.get("input").cloned().unwrap_or_else(|| json!({})).to_string();
            let deltas = split_at_chars(&input, 3)
                .into_iter()
                .map(|j| json!({"type": "input_json_delta", "partial_json": j}))
                .collect();
            (start, deltas)
        }
    };
    event("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": start}));
    event("ping", json!({"type": "ping"}));
    for delta in deltas {
        event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": delta}));
    }
    event("content_block_stop", json!({"type": "content_block_stop", "index": 0}));
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": usage.output}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    out
}

/// `text` in up to `n` pieces split after spaces, which concatenate to it (two or
/// more where the text has a space).
fn pieces(text: &str, n: usize) -> Vec<String> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    let per = words.len().div_ceil(n).max(1);
    words.chunks(per).map(|c| c.concat()).collect()
}

/// `text` in up to `n` pieces of about equal length, cut on character boundaries.
fn split_at_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let per = chars.len().div_ceil(n).max(1);
    chars.chunks(per).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage() -> ReportedUsage {
        ReportedUsage {
            api: "anthropic",
            model: "m".into(),
            tools: 0,
            input: 1,
            output: 2,
            cache_read: 3,
            cache_write: 4,
        }
    }

    fn bash_tool() -> Value {
        json!({"name": "Bash", "description": "runs", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}, "description": {"type": "string"}}}})
    }

    #[test]
    fn a_request_becomes_the_conversation_the_script_reads() {
        let request = json!({
            "model": "m", "system": [{"type": "text", "text": "you are", "cache_control": {"type": "ephemeral"}}],
            "tools": [bash_tool()],
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "echo hi"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "hi"}]},
                    {"type": "text", "text": "<system-reminder>x</system-reminder>", "cache_control": {"type": "ephemeral"}}
                ]},
            ],
        });
        let conversation = conversation(&request);
        assert_eq!(
            conversation.messages,
            vec![
                Message::User("first".into()),
                Message::Assistant("ok".into()),
                Message::ToolCall { name: "Bash".into() },
                Message::User("<system-reminder>x</system-reminder>".into()),
                Message::ToolResult("hi".into()),
            ]
        );
        assert_eq!(conversation.tools.len(), 1);
        let two_users = json!({"messages": [{"role": "user", "content": "go [[run]]"}, {"role": "user", "content": [{"type": "text", "text": "# Environment"}]}, {"role": "system", "content": [{"type": "text", "text": "env"}]}]});
        assert_eq!(super::conversation(&two_users).messages, vec![Message::User("go [[run]]\n# Environment".into())]);
        assert_eq!(conversation.tools[0].schema["properties"]["command"]["type"], "string");
        assert_eq!(conversation.reply(), Reply::Text("tool said: hi".into()));
    }

    #[test]
    fn a_marker_gets_a_tool_use_and_the_message_renders_whole() {
        let request = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "do [[run:touch f]]"}]}], "tools": [bash_tool()]});
        let reply = conversation(&request).reply();
        let message = render_message(&reply, "m", &usage());
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(message["content"][0]["type"], "tool_use");
        assert_eq!(message["content"][0]["name"], "Bash");
        assert_eq!(message["content"][0]["input"]["command"], "touch f");
        assert!(message["content"][0]["id"].as_str().unwrap().starts_with("toolu_"));
        let text = render_message(&Reply::Text("hello there".into()), "m", &usage());
        assert_eq!(text["content"], json!([{"type": "text", "text": "hello there"}]));
        assert_eq!(text["stop_reason"], "end_turn");
        assert_eq!(
            text["usage"],
            json!({"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4})
        );
    }

    /// The `data:` payloads of a stream, with their `event:` names checked against `type`.
    fn events(stream: &str) -> Vec<Value> {
        stream
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(name.strip_prefix("event: ").unwrap(), data["type"]);
                data
            })
            .collect()
    }

    #[test]
    fn text_streams_in_several_deltas() {
        let events =
            events(&render_stream(&Reply::Text("scripted reply: 1 messages in context".into()), "m", &usage()));
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types[0], "message_start");
        assert_eq!(types[1], "content_block_start");
        assert_eq!(&types[types.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
        let deltas: Vec<&str> = events.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
        assert!(deltas.len() >= 2, "{deltas:?}");
        assert_eq!(deltas.concat(), "scripted reply: 1 messages in context");
        assert_eq!(events[types.len() - 2]["delta"]["stop_reason"], "end_turn");
        // The input counts come first, the output count of the whole answer last.
        let start = &events[0]["message"]["usage"];
        assert_eq!(
            (&start["input_tokens"], &start["cache_read_input_tokens"], &start["cache_creation_input_tokens"]),
            (&json!(1), &json!(3), &json!(4))
        );
        assert_eq!(events[types.len() - 2]["usage"]["output_tokens"], 2);
    }

    #[test]
    fn a_tool_call_streams_its_input_as_json_deltas() {
        let reply = Reply::ToolCall { tool: "Bash".into(), arguments: json!({"command": "echo hi"}) };
        let events = events(&render_stream(&reply, "m", &usage()));
        assert_eq!(events[1]["content_block"]["type"], "tool_use");
        assert_eq!(events[1]["content_block"]["input"], json!({}));
        let json: String = events.iter().filter_map(|e| e["delta"]["partial_json"].as_str()).collect();
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), json!({"command": "echo hi"}));
        assert!(events.iter().filter(|e| e["delta"]["partial_json"].is_string()).count() >= 2);
        assert!(events.iter().any(|e| e["delta"]["stop_reason"] == "tool_use"));
    }
}
