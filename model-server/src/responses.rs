//! The scripted model server's OpenAI Responses API (`POST /v1/responses`), as codex
//! calls it: `input` is a list of items (messages with content parts, function and
//! custom tool calls and their outputs, reasoning), `tools` the functions offered.
//! The script's answer goes back as a streamed response (SSE: `response.created`,
//! `response.output_item.added`, text or argument deltas, `response.output_item.done`,
//! `response.completed` with usage) or, without `stream: true`, as one JSON response.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Conversation, Message, Reply, ReportedUsage, Shared, Tool};

/// Ids of responses and their items, unique within this process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id(prefix: &str) -> String {
    format!("{prefix}_{:06}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

pub async fn create(State(shared): State<Shared>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("the body is not JSON: {e}")),
    };
    let conversation = parse(&request);
    let reply = conversation.reply();
    let model = request.get("model").and_then(Value::as_str).unwrap_or("scripted").to_string();
    let mut item = output_item(&reply, &tool_type(&request, &reply));
    // A function `tool_search` loaded is called by its namespace and its own name.
    if let Reply::ToolCall { tool, .. } = &reply
        && let Some((_, (Some(namespace), name), _)) =
            searched_tools(&request).into_iter().find(|(full, ..)| full == tool)
    {
        item["namespace"] = json!(namespace);
        item["name"] = json!(name);
    }
    let usage = usage_json(&shared.report_usage("responses", &model, conversation.tools.len(), false));
    if request.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let body = stream(&model, &item, &usage);
        ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
    } else {
        axum::Json(response_object(&next_id("resp"), &model, "completed", vec![item], Some(usage))).into_response()
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"message": message, "type": "invalid_request_error"}}))).into_response()
}

/// The conversation of a Responses request. Developer and system messages (codex's
/// instructions) are not part of it; user messages are, codex's environment context
/// included.
pub fn parse(request: &Value) -> Conversation {
    let mut messages = Vec::new();
    match request.get("input") {
        Some(Value::String(text)) => messages.push(Message::User(text.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                if let Some(message) = parse_item(item) {
                    messages.push(message);
                }
            }
        }
        _ => {}
    }
    let mut tools: Vec<Tool> = request
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| {
                    // Codex's `tool_search` is a tool of its own type, without a name.
                    let searches = tool.get("type").and_then(Value::as_str) == Some(TOOL_SEARCH);
                    let name = if searches { TOOL_SEARCH } else { tool.get("name").and_then(Value::as_str)? };
                    let schema = tool.get("parameters").cloned().unwrap_or_else(|| json!({}));
                    Some(Tool { name: name.to_string(), schema })
                })
                .collect()
        })
        .unwrap_or_default();
    // Tools `tool_search` loaded (codex defers an MCP server's tools behind it) are
    // offered from then on, each named `NAMESPACE__NAME`.
    tools.extend(searched_tools(request).into_iter().map(|(name, _, schema)| Tool { name, schema }));
    Conversation { messages, tools }
}

/// Codex's tool that loads deferred tools (an MCP server's) by a query.
const TOOL_SEARCH: &str = "tool_search";

/// The functions the request's `tool_search_output` items loaded: `(NAMESPACE__NAME,
/// (namespace, name), schema)`; a function outside a namespace keeps its own name.
fn searched_tools(request: &Value) -> Vec<(String, (Option<String>, String), Value)> {
    let mut found = Vec::new();
    let outputs = request.get("input").and_then(Value::as_array).into_iter().flatten();
    for output in outputs.filter(|i| i.get("type").and_then(Value::as_str) == Some("tool_search_output")) {
        for tool in output.get("tools").and_then(Value::as_array).into_iter().flatten() {
            let namespace = tool.get("name").and_then(Value::as_str).filter(|_| tool.get("tools").is_some());
            let functions = match tool.get("tools").and_then(Value::as_array) {
                Some(inner) => inner.iter().collect(),
                None => vec![tool],
            };
            for function in functions {
                let Some(name) = function.get("name").and_then(Value::as_str) else { continue };
                let full = match namespace {
                    Some(namespace) => format!("{namespace}__{}", name.trim_start_matches('_')),
                    None => name.to_string(),
                };
                let schema = function.get("parameters").cloned().unwrap_or_else(|| json!({}));
                found.push((full, (namespace.map(str::to_string), name.to_string()), schema));
            }
        }
    }
    found
}

fn parse_item(item: &Value) -> Option<Message> {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
    match kind {
        "message" => {
            let text = content_text(item.get("content")?);
            match item.get("role").and_then(Value::as_str)? {
                "user" => Some(Message::User(text)),
                "assistant" => Some(Message::Assistant(text)),
                _ => None,
            }
        }
        "function_call" | "custom_tool_call" => {
            Some(Message::ToolCall { name: item.get("name").and_then(Value::as_str)?.to_string() })
        }
        "local_shell_call" => Some(Message::ToolCall { name: "local_shell".into() }),
        "tool_search_call" => Some(Message::ToolCall { name: TOOL_SEARCH.into() }),
        "tool_search_output" => Some(Message::ToolResult(item.get("tools").map(Value::to_string).unwrap_or_default())),
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
            Some(Message::ToolResult(item.get("output").map(content_text).unwrap_or_default()))
        }
        _ => None,
    }
}

/// The text of a content value: a string, or parts (`input_text`, `output_text`, ...) joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// The `type` of the tool a reply calls, as the request offered it.
fn tool_type(request: &Value, reply: &Reply) -> String {
    let Reply::ToolCall { tool, .. } = reply else { return String::new() };
    let offered = |kind: &str| {
        request.get("tools").and_then(Value::as_array).is_some_and(|tools| tools.iter().any(|t| t["type"] == kind))
    };
    if tool == TOOL_SEARCH && offered(TOOL_SEARCH) {
        return TOOL_SEARCH.to_string();
    }
    request
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| tools.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(tool)))
        .and_then(|t| t.get("type").and_then(Value::as_str))
        .unwrap_or("function")
        .to_string()
}

/// The completed output item of a reply.
fn output_item(reply: &Reply, tool_type: &str) -> Value {
    match reply {
        Reply::Text(text) => json!({
            "id": next_id("msg"), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
        Reply::ToolCall { arguments, .. } if tool_type == TOOL_SEARCH => json!({
            "id": next_id("tsc"), "type": "tool_search_call", "status": "completed",
            "call_id": next_id("call"), "execution": "client", "arguments": arguments,
        }),
        Reply::ToolCall { tool, arguments } if tool_type == "custom" => {
            // A freeform tool takes its input as plain text: the command.
            let input =
                arguments.get("command").or_else(|| arguments.get("cmd")).and_then(Value::as_str).unwrap_or_default();
            json!({"id": next_id("ctc"), "type": "custom_tool_call", "status": "completed", "call_id": next_id("call"), "name": tool, "input": input})
        }
        Reply::ToolCall { tool, arguments } => json!({
            "id": next_id("fc"), "type": "function_call", "status": "completed",
            "call_id": next_id("call"), "name": tool, "arguments": arguments.to_string(),
        }),
    }
}

/// The Responses API's `usage`: its input count includes the cached tokens.
fn usage_json(usage: &ReportedUsage) -> Value {
    let input = usage.input + usage.cache_read;
    json!({
        "input_tokens": input, "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + usage.output,
    })
}

fn response_object(id: &str, model: &str, status: &str, output: Vec<Value>, usage: Option<Value>) -> Value {
    json!({
        "id": id, "object": "response", "created_at": 0, "status": status, "model": model,
        "output": output, "usage": usage, "error": null, "incomplete_details": null,
    })
}

/// The SSE body of a streamed response: the item's text or arguments in two or more deltas.
fn stream(model: &str, item: &Value, usage: &Value) -> String {
    let id = next_id("resp");
    let item_id = item["id"].as_str().unwrap_or_default().to_string();
    let mut events =
        vec![json!({"type": "response.created", "response": response_object(&id, model, "in_progress", vec![], None)})];
    let mut started = item.clone();
    started["status"] = json!("in_progress");
    match item["type"].as_str() {
        Some("message") => {
            let text = item["content"][0]["text"].as_str().unwrap_or_default();
            started["content"] = json!([]);
            events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": started}));
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            events.push(json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0, "content_index": 0, "part": part}));
            for delta in chunks(text) {
                events.push(json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": delta}));
            }
            events.push(json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0, "content_index": 0, "text": text}));
            let part = json!({"type": "output_text", "text": text, "annotations": []});
            events.push(json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0, "content_index": 0, "part": part}));
        }
        Some("function_call") => {
            let arguments = item["arguments"].as_str().unwrap_or_default();
            started["arguments"] = json!("");
            events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": started}));
            for delta in chunks(arguments) {
                events.push(json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": 0, "delta": delta}));
            }
            events.push(json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": 0, "arguments": arguments}));
        }
        _ => events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": started})),
    }
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
    events.push(json!({"type": "response.completed", "response": response_object(&id, model, "completed", vec![item.clone()], Some(usage.clone()))}));
    let mut body = String::new();
    for (sequence, mut event) in events.into_iter().enumerate() {
        event["sequence_number"] = json!(sequence);
        let name = event["type"].as_str().unwrap_or_default().to_string();
        body.push_str(&format!("event: {name}\ndata: {event}\n\n"));
    }
    body
}

/// `text` in pieces that concatenate to it: two or more where it has two or more characters.
fn chunks(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    if words.len() >= 2 {
        return words.chunks(2).map(|c| c.concat()).collect();
    }
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 2 {
        return vec![text.to_string()];
    }
    let (head, tail) = chars.split_at(chars.len() / 2);
    vec![head.iter().collect(), tail.iter().collect()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request shaped like codex 0.169's: instructions as developer messages, the
    /// environment as a user message, `exec_command` among function tools, a custom tool.
    fn codex_request(input: Vec<Value>, stream: bool) -> Value {
        json!({
            "model": "gpt-5.5", "stream": stream,
            "input": input,
            "tools": [
                {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "login": {"type": "boolean"}}}},
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                {"type": "web_search"},
            ],
        })
    }

    fn message(role: &str, kind: &str, text: &str) -> Value {
        json!({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})
    }

    /// The `data:` payloads of an SSE body.
    fn events(body: &str) -> Vec<Value> {
        body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
    }

    #[test]
    fn a_deferred_mcp_tool_is_searched_for_then_called_by_namespace_and_name() {
        // Codex 0.169 offers an MCP server's tools only through `tool_search`.
        let marker = message("user", "input_text", "[[tool:*reveal_secret]]");
        let mut request = codex_request(vec![marker.clone()], false);
        request["tools"].as_array_mut().unwrap().push(json!({"type": "tool_search", "execution": "client", "parameters": {"properties": {"query": {}, "limit": {}}}}));
        let reply = parse(&request).reply();
        let search = output_item(&reply, &tool_type(&request, &reply));
        assert_eq!(search["type"], "tool_search_call");
        assert_eq!(search["arguments"], json!({"query": "reveal_secret", "limit": 8}));
        // What codex sent back (seen with 0.169), and the call that follows.
        let output = json!({"type": "tool_search_output", "call_id": search["call_id"], "execution": "client", "status": "completed", "tools": [
            {"type": "namespace", "name": "mcp__fixture", "description": "Tools in the mcp__fixture namespace.", "tools": [
                {"type": "function", "name": "reveal_secret", "defer_loading": true, "parameters": {"type": "object", "properties": {}}}]}]});
        let mut searched = search.clone();
        searched.as_object_mut().unwrap().remove("status");
        request["input"] = json!([marker, searched, output]);
        let conversation = parse(&request);
        assert!(conversation.tools.iter().any(|t| t.name == "mcp__fixture__reveal_secret"));
        let reply = conversation.reply();
        assert_eq!(reply, Reply::ToolCall { tool: "mcp__fixture__reveal_secret".into(), arguments: json!({}) });
        let found = searched_tools(&request);
        assert_eq!(found[0].1, (Some("mcp__fixture".to_string()), "reveal_secret".to_string()));
    }

    #[test]
    fn input_items_become_the_conversation() {
        let request = codex_request(
            vec![
                message("developer", "input_text", "You are Codex"),
                message("user", "input_text", "<environment_context>"),
                message("user", "input_text", "go [[run:ls]]"),
                json!({"type": "reasoning", "summary": []}),
                json!({"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}", "call_id": "c1"}),
                json!({"type": "function_call_output", "call_id": "c1", "output": "a.txt\n"}),
                message("assistant", "output_text", "tool said: a.txt"),
                json!({"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "patched"}]}),
            ],
            true,
        );
        let conversation = parse(&request);
        assert_eq!(
            conversation.messages,
            vec![
                Message::User("<environment_context>".into()),
                Message::User("go [[run:ls]]".into()),
                Message::ToolCall { name: "exec_command".into() },
                Message::ToolResult("a.txt\n".into()),
                Message::Assistant("tool said: a.txt".into()),
                Message::ToolResult("patched".into()),
            ]
        );
        assert_eq!(
            conversation.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["exec_command", "apply_patch"]
        );
        assert_eq!(parse(&json!({"input": "just text"})).messages, vec![Message::User("just text".into())]);
    }

    #[tokio::test]
    async fn a_text_reply_streams_in_deltas_and_completes_with_usage() {
        let request = codex_request(vec![message("user", "input_text", "hello there")], true);
        let response = create(State(Shared::default()), Bytes::from(request.to_string())).await;
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let events = events(std::str::from_utf8(&body).unwrap());
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types.first(), Some(&"response.created"));
        assert_eq!(types.last(), Some(&"response.completed"));
        let deltas: Vec<&str> = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert!(deltas.len() >= 2, "{deltas:?}");
        assert_eq!(deltas.concat(), "scripted reply: 1 messages in context");
        let done = events.iter().find(|e| e["type"] == "response.output_item.done").unwrap();
        assert_eq!(done["item"]["content"][0]["text"], "scripted reply: 1 messages in context");
        // The first answer's usage; the input count includes the cached tokens.
        let usage = &events.last().unwrap()["response"]["usage"];
        assert_eq!((&usage["input_tokens"], &usage["output_tokens"]), (&json!(201 + 4001), &json!(31)));
        assert_eq!(usage["input_tokens_details"]["cached_tokens"], 4001);
    }

    #[tokio::test]
    async fn a_run_marker_calls_the_shell_function_with_its_schema() {
        let request = codex_request(vec![message("user", "input_text", "please [[run:touch x]]")], true);
        let body = axum::body::to_bytes(
            create(State(Shared::default()), Bytes::from(request.to_string())).await.into_body(),
            usize::MAX,
        )
        .await
        .unwrap();
        let events = events(std::str::from_utf8(&body).unwrap());
        let done = events.iter().find(|e| e["type"] == "response.output_item.done").unwrap();
        assert_eq!(done["item"]["type"], "function_call");
        assert_eq!(done["item"]["name"], "exec_command");
        let arguments: Value = serde_json::from_str(done["item"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"cmd": "touch x"}));
        assert!(done["item"]["call_id"].as_str().unwrap().starts_with("call_"));
        let deltas: String = events
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, done["item"]["arguments"].as_str().unwrap());
    }

    #[tokio::test]
    async fn without_stream_the_answer_is_one_response_object_and_bad_json_is_refused() {
        let request = codex_request(
            vec![
                message("user", "input_text", "[[run]]"),
                json!({"type": "function_call_output", "call_id": "c", "output": "hi\n"}),
            ],
            false,
        );
        let response = create(State(Shared::default()), Bytes::from(request.to_string())).await;
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value =
            serde_json::from_slice(&axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap()).unwrap();
        assert_eq!(body["object"], "response");
        assert_eq!(body["output"][0]["content"][0]["text"], "tool said: hi");
        assert_eq!(
            create(State(Shared::default()), Bytes::from_static(b"{not json")).await.status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn chunks_concatenate_to_the_text() {
        assert_eq!(chunks("ab"), vec!["a", "b"]);
        assert_eq!(chunks("a b c").concat(), "a b c");
        assert_eq!(chunks(""), vec![""]);
        assert_eq!(chunks("{\"cmd\":\"ls\"}").len(), 2);
    }
}
