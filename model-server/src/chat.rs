//! The scripted model server's OpenAI Chat Completions API (`POST /v1/chat/completions`),
//! as OpenCode (through `@ai-sdk/openai-compatible`) and pi call it.
//!
//! A request's `messages` (system, user, assistant with `tool_calls`, `tool` results;
//! content as a string or as an array of parts) and `tools` become a [`Conversation`];
//! the script's [`Reply`] goes back streamed (SSE chunks, text in several deltas, a
//! tool call as `delta.tool_calls`, a final chunk with `finish_reason`, usage when
//! `stream_options.include_usage` asks, then `data: [DONE]`) or as one JSON object.
//! OpenCode's per-session title request is an ordinary request without tools: the
//! script answers it with text like any other.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Conversation, Message, Reply, ReportedUsage, Shared, Tool};

pub async fn completions(State(shared): State<Shared>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": format!("the body is not JSON: {e}")}})),
            )
                .into_response();
        }
    };
    let conversation = conversation(&request);
    let reply = conversation.reply();
    let tools = conversation.tools.len();
    let model = request.get("model").and_then(Value::as_str).unwrap_or("scripted").to_string();
    if request.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        // Usage is reported (and logged) only when the client asks for it.
        let include_usage = request.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
        let usage = include_usage.then(|| shared.report_usage("chat", &model, tools, false));
        let body: String = stream_chunks(&reply, &model, usage.as_ref())
            .iter()
            .map(|chunk| format!("data: {chunk}\n\n"))
            .chain(std::iter::once("data: [DONE]\n\n".to_string()))
            .collect();
        ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
    } else {
        let usage = shared.report_usage("chat", &model, tools, false);
        axum::Json(completion(&reply, &model, &usage)).into_response()
    }
}

/// The conversation a Chat Completions request carries. System messages are left
/// out: they are the CLI's, not the conversation's.
pub fn conversation(request: &Value) -> Conversation {
    let mut messages = Vec::new();
    for message in request.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let content = message.get("content").map(content_text).unwrap_or_default();
        match message.get("role").and_then(Value::as_str) {
            Some("user") => messages.push(Message::User(content)),
            Some("assistant") => {
                if !content.is_empty() {
                    messages.push(Message::Assistant(content));
                }
                for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or_default();
                    messages.push(Message::ToolCall { name: name.to_string() });
                }
            }
            Some("tool") => messages.push(Message::ToolResult(content)),
            _ => {}
        }
    }
    let tools = request
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|tool| {
            let function = tool.get("function")?;
            Some(Tool {
                name: function.get("name")?.as_str()?.to_string(),
                schema: function.get("parameters").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    Conversation { messages, tools }
}

/// A message's content as text: a string, or the text parts of an array joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                _ => part.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

const CALL_ID: &str = "call_scripted_1";

/// Chat Completions' `usage`: its prompt count includes the cached tokens.
fn usage_json(usage: &ReportedUsage) -> Value {
    let prompt = usage.input + usage.cache_read;
    json!({
        "prompt_tokens": prompt, "completion_tokens": usage.output, "total_tokens": prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    })
}

fn chunk(model: &str, delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
}

/// The streamed chunks of a reply, without the closing `[DONE]`; with `usage`, a
/// last chunk carries it (as `stream_options.include_usage` asks).
pub fn stream_chunks(reply: &Reply, model: &str, usage: Option<&ReportedUsage>) -> Vec<Value> {
    let mut chunks = vec![chunk(model, json!({"role": "assistant", "content": ""}), None)];
    let finish = match reply {
        Reply::Text(text) => {
            chunks.extend(text_pieces(text).into_iter().map(|piece| chunk(model, json!({"content": piece}), None)));
            "stop"
        }
        Reply::ToolCall { tool, arguments } => {
            let arguments = arguments.to_string();
            let (head, tail) = arguments.split_at(arguments.len() / 2);
            // The arguments come in two pieces, as real providers stream them.
            chunks.push(chunk(
                model,
                json!({"tool_calls": [{"index": 0, "id": CALL_ID, "type": "function", "function": {"name": tool, "arguments": head}}]}),
                None,
            ));
            chunks.push(chunk(model, json!({"tool_calls": [{"index": 0, "function": {"arguments": tail}}]}), None));
            "tool_calls"
        }
    };
    chunks.push(chunk(model, json!({}), Some(finish)));
    if let Some(usage) = usage {
        let mut last = chunk(model, json!({}), None);
        last["choices"] = json!([]);
        last["usage"] = usage_json(usage);
        chunks.push(last);
    }
    chunks
}

/// Text cut after each space, so that it streams in several deltas.
fn text_pieces(text: &str) -> Vec<String> {
    let pieces: Vec<String> = text.split_inclusive(' ').map(str::to_string).collect();
    if pieces.is_empty() { vec![String::new()] } else { pieces }
}

/// The non-streaming answer to a reply.
pub fn completion(reply: &Reply, model: &str, usage: &ReportedUsage) -> Value {
    let (message, finish) = match reply {
        Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Reply::ToolCall { tool, arguments } => (
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": CALL_ID, "type": "function", "function": {"name": tool, "arguments": arguments.to_string()}}],
            }),
            "tool_calls",
        ),
    };
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage_json(usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Value {
        json!({
            "model": "fake-model",
            "messages": [
                {"role": "system", "content": "you are a coding agent"},
                {"role": "user", "content": [{"type": "text", "text": "first"}]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "go [[run:touch x]]"},
            ],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "description": {"type": "string"}}}}}],
        })
    }

    #[test]
    fn messages_and_tools_become_the_conversation() {
        let mut request = request();
        let conversation = conversation(&request);
        assert_eq!(
            conversation.messages,
            vec![
                Message::User("first".into()),
                Message::Assistant("ok".into()),
                Message::User("go [[run:touch x]]".into())
            ]
        );
        assert_eq!(conversation.tools.len(), 1);
        assert_eq!(conversation.tools[0].name, "bash");
        assert_eq!(
            conversation.reply(),
            Reply::ToolCall {
                tool: "bash".into(),
                arguments: json!({"command": "touch x", "description": "run a command"})
            }
        );

        let messages = request["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "done\n"}));
        let conversation = super::conversation(&request);
        assert_eq!(
            &conversation.messages[3..],
            &[Message::ToolCall { name: "bash".into() }, Message::ToolResult("done\n".into())]
        );
        assert_eq!(conversation.reply(), Reply::Text("tool said: done".into()));
    }

    /// Joins what the chunks stream, the way a client does.
    fn assemble(chunks: &[Value]) -> (String, String, String, Option<String>) {
        let (mut text, mut name, mut arguments, mut finish) = (String::new(), String::new(), String::new(), None);
        for chunk in chunks {
            let Some(choice) = chunk["choices"].get(0) else {
                continue;
            };
            text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
                name.push_str(call["function"]["name"].as_str().unwrap_or(""));
                arguments.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish = Some(reason.to_string());
            }
        }
        (text, name, arguments, finish)
    }

    #[test]
    fn text_streams_in_several_chunks_then_stop() {
        let chunks = stream_chunks(&Reply::Text("scripted reply: 1 messages in context".into()), "m", None);
        let text_chunks = chunks
            .iter()
            .filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()))
            .count();
        assert!(text_chunks >= 2, "{chunks:?}");
        let (text, name, _, finish) = assemble(&chunks);
        assert_eq!(text, "scripted reply: 1 messages in context");
        assert_eq!(name, "");
        assert_eq!(finish.as_deref(), Some("stop"));
        assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    }

    #[test]
    fn a_tool_call_streams_its_id_name_and_arguments_then_usage() {
        let reply = Reply::ToolCall { tool: "bash".into(), arguments: json!({"command": "echo hi"}) };
        let usage = ReportedUsage {
            api: "chat",
            model: "m".into(),
            tools: 0,
            input: 1,
            output: 2,
            cache_read: 3,
            cache_write: 0,
        };
        let chunks = stream_chunks(&reply, "m", Some(&usage));
        let (text, name, arguments, finish) = assemble(&chunks);
        assert_eq!(text, "");
        assert_eq!(name, "bash");
        assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"command": "echo hi"}));
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        assert!(chunks.iter().any(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"] == CALL_ID));
        // The prompt count includes the cached tokens.
        assert_eq!(
            chunks.last().unwrap()["usage"],
            json!({"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 3}})
        );
    }

    #[test]
    fn a_completion_without_streaming_is_one_object() {
        let usage = ReportedUsage {
            api: "chat",
            model: "m".into(),
            tools: 0,
            input: 1,
            output: 2,
            cache_read: 3,
            cache_write: 0,
        };
        let text = completion(&Reply::Text("hi".into()), "m", &usage);
        assert_eq!(text["choices"][0]["message"]["content"], "hi");
        assert_eq!(text["choices"][0]["finish_reason"], "stop");
        let call =
            completion(&Reply::ToolCall { tool: "bash".into(), arguments: json!({"command": "ls"}) }, "m", &usage);
        assert_eq!(call["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], r#"{"command":"ls"}"#);
        assert_eq!(call["choices"][0]["finish_reason"], "tool_calls");
    }

    #[tokio::test]
    async fn the_server_answers_streaming_and_plain_requests() {
        let server = crate::ModelServer::start().await.unwrap();
        let client = reqwest::Client::new();
        let mut body = request();
        body["stream"] = json!(true);
        let streamed = client.post(format!("{}/v1/chat/completions", server.url())).json(&body).send().await.unwrap();
        assert_eq!(streamed.headers()[header::CONTENT_TYPE], "text/event-stream");
        let text = streamed.text().await.unwrap();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        assert!(text.contains(r#""finish_reason":"tool_calls""#), "{text}");

        body["stream"] = json!(false);
        body["messages"] = json!([{"role": "user", "content": "hello"}]);
        let plain: Value = client
            .post(format!("{}/chat/completions", server.url()))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(plain["choices"][0]["message"]["content"], "scripted reply: 1 messages in context");
        assert_eq!(server.requests().len(), 2);
        assert_eq!(server.requests()[1].uri, "/chat/completions");
        // The streamed request did not ask for usage: only the plain answer reported one.
        assert_eq!(server.usage().len(), 1);
        assert_eq!(plain["usage"]["prompt_tokens"], 201 + 4001);
    }
}
