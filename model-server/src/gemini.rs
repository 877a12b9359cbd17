//! The scripted model server's Gemini API (what Gemini CLI calls with
//! `GOOGLE_GEMINI_BASE_URL`): `POST /v1beta/models/{model}:streamGenerateContent`
//! (SSE, `?alt=sse`), `:generateContent` (one JSON answer) and `:countTokens`.
//!
//! A request's `contents` (roles `user` and `model`; parts `text`, `functionCall`,
//! `functionResponse`) become the script's [`Conversation`], its
//! `tools[].functionDeclarations` its [`Tool`]s.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Conversation, Message, Reply, ReportedUsage, Shared, Tool};

/// The model version the answers name when the request's model is unreadable.
const DEFAULT_MODEL: &str = "gemini-2.5-pro";

pub async fn generate(State(shared): State<Shared>, Path(rest): Path<String>, body: Bytes) -> Response {
    let (model, method) = match rest.rsplit_once(':') {
        Some((model, method)) => (model.to_string(), method.to_string()),
        None => (DEFAULT_MODEL.to_string(), String::new()),
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    let conversation = conversation(&request);
    match method.as_str() {
        "streamGenerateContent" => {
            let usage = shared.report_usage("gemini", &model, conversation.tools.len(), false);
            stream(&model, &conversation.reply(), &usage)
        }
        "generateContent" => {
            let usage = shared.report_usage("gemini", &model, conversation.tools.len(), false);
            let mut answer = response(&model, answer_parts(&conversation.reply()), Some("STOP"));
            answer["usageMetadata"] = usage_json(&usage);
            axum::Json(answer).into_response()
        }
        "countTokens" => axum::Json(json!({"totalTokens": token_estimate(&request)})).into_response(),
        other => error(
            StatusCode::NOT_FOUND,
            format!("the scripted model server has no method {other:?} for model {model:?}"),
        ),
    }
}

/// The conversation a `generateContent` request carries.
pub fn conversation(request: &Value) -> Conversation {
    let mut messages = Vec::new();
    for content in request.get("contents").and_then(Value::as_array).into_iter().flatten() {
        let role = content.get("role").and_then(Value::as_str).unwrap_or("user");
        let mut text = String::new();
        for part in content.get("parts").and_then(Value::as_array).into_iter().flatten() {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(t) = part.get("text").and_then(Value::as_str) {
                text.push_str(t);
            } else if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                messages.push(Message::ToolCall { name });
            } else if let Some(response) = part.get("functionResponse") {
                messages.push(Message::ToolResult(tool_output(response.get("response").unwrap_or(&Value::Null))));
            }
        }
        if !text.is_empty() {
            messages.push(if role == "model" { Message::Assistant(text) } else { Message::User(text) });
        }
    }
    let mut tools = Vec::new();
    for group in request.get("tools").and_then(Value::as_array).into_iter().flatten() {
        for declaration in group.get("functionDeclarations").and_then(Value::as_array).into_iter().flatten() {
            let Some(name) = declaration.get("name").and_then(Value::as_str) else { continue };
            let schema = declaration
                .get("parametersJsonSchema")
                .or_else(|| declaration.get("parameters"))
                .cloned()
                .unwrap_or(json!({}));
            tools.push(Tool { name: name.to_string(), schema });
        }
    }
    Conversation { messages, tools }
}

/// What a tool printed, from a `functionResponse.response`. Gemini CLI wraps a shell
/// command's result (`<untrusted_context>`, `Output: ...`, `Process Group PGID: ...`);
/// the script quotes only the output.
fn tool_output(response: &Value) -> String {
    let text = match response.get("output").or_else(|| response.get("content")) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => response.to_string(),
    };
    match text.find("Output:") {
        Some(at) => {
            let rest = &text[at + "Output:".len()..];
            let end = [
                "\nError:",
                "\nExit Code:",
                "\nSignal:",
                "\nBackground PIDs:",
                "\nProcess Group PGID:",
                "\n</untrusted_context>",
            ]
            .iter()
            .filter_map(|marker| rest.find(marker))
            .min()
            .unwrap_or(rest.len());
            rest[..end].trim().to_string()
        }
        None => text,
    }
}

/// The parts of the model's answer.
fn answer_parts(reply: &Reply) -> Vec<Value> {
    match reply {
        Reply::Text(text) => vec![json!({"text": text})],
        Reply::ToolCall { tool, arguments } => vec![json!({"functionCall": {"name": tool, "args": arguments}})],
    }
}

/// Gemini's `usageMetadata`: its prompt count includes the cached tokens.
fn usage_json(usage: &ReportedUsage) -> Value {
    let prompt = usage.input + usage.cache_read;
    json!({
        "promptTokenCount": prompt, "candidatesTokenCount": usage.output,
        "cachedContentTokenCount": usage.cache_read, "totalTokenCount": prompt + usage.output,
    })
}

/// One answer (or chunk of one), without usage.
fn response(model: &str, parts: Vec<Value>, finish_reason: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(reason) = finish_reason {
        candidate["finishReason"] = json!(reason);
    }
    json!({
        "candidates": [candidate],
        "modelVersion": model,
    })
}

/// An SSE answer: text in two chunks (so that deltas show), a tool call in one; the
/// last chunk says `STOP` and carries the usage of the whole answer (on that one
/// only, so that a client summing chunks and one taking the last agree).
fn stream(model: &str, reply: &Reply, usage: &ReportedUsage) -> Response {
    let mut chunks = match reply {
        Reply::Text(text) => {
            let half = text.char_indices().map(|(i, _)| i).find(|&i| i >= text.len() / 2).unwrap_or(text.len());
            let (first, second) = text.split_at(half);
            vec![
                response(model, vec![json!({"text": first})], None),
                response(model, vec![json!({"text": second})], Some("STOP")),
            ]
        }
        call @ Reply::ToolCall { .. } => vec![response(model, answer_parts(call), Some("STOP"))],
    };
    if let Some(last) = chunks.last_mut() {
        last["usageMetadata"] = usage_json(usage);
    }
    let body: String = chunks.iter().map(|chunk| format!("data: {chunk}\r\n\r\n")).collect();
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(body))
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// A rough count for `countTokens`: four characters a token.
fn token_estimate(request: &Value) -> usize {
    request.to_string().len() / 4
}

/// An error in the shape of Google's APIs.
fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(json!({"error": {"code": status.as_u16(), "message": message, "status": "INVALID_ARGUMENT"}})))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell_request(contents: Value) -> Value {
        json!({
            "contents": contents,
            "tools": [{"functionDeclarations": [
                {"name": "read_file", "parametersJsonSchema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
                {"name": "run_shell_command", "parametersJsonSchema": {"type": "object", "properties": {
                    "command": {"type": "string"}, "description": {"type": "string"}}}}
            ]}]
        })
    }

    #[test]
    fn contents_become_the_conversation() {
        let request = shell_request(json!([
            {"role": "user", "parts": [{"text": "please "}, {"text": "[[run:echo hi]]"}]},
            {"role": "model", "parts": [{"text": "thinking", "thought": true}, {"functionCall": {"name": "run_shell_command", "args": {"command": "echo hi"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {
                "output": "<untrusted_context>\nOutput: hi\nProcess Group PGID: 1105\n</untrusted_context>"}}}]}
        ]));
        let conversation = conversation(&request);
        assert_eq!(
            conversation.messages,
            vec![
                Message::User("please [[run:echo hi]]".into()),
                Message::ToolCall { name: "run_shell_command".into() },
                Message::ToolResult("hi".into()),
            ]
        );
        assert_eq!(conversation.tools.len(), 2);
        assert_eq!(conversation.reply(), Reply::Text("tool said: hi".into()));
    }

    #[test]
    fn a_run_marker_calls_the_shell_tool_with_its_schema() {
        let request = shell_request(json!([{"role": "user", "parts": [{"text": "do [[run:echo hi]]"}]}]));
        let parts = answer_parts(&conversation(&request).reply());
        assert_eq!(
            parts,
            vec![
                json!({"functionCall": {"name": "run_shell_command", "args": {"command": "echo hi", "description": "run a command"}}})
            ]
        );
        // `parameters` (the older field) serves as well.
        let older = json!({"contents": [{"role": "user", "parts": [{"text": "[[run]]"}]}],
            "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": {"properties": {"command": {"type": "string"}}}}]}]});
        assert_eq!(
            conversation(&older).reply(),
            Reply::ToolCall { tool: "run_shell_command".into(), arguments: json!({"command": "echo hi"}) }
        );
    }

    #[test]
    fn tool_outputs_lose_gemini_clis_wrapping() {
        assert_eq!(tool_output(&json!({"output": "Output: a\nb\nExit Code: 1"})), "a\nb");
        assert_eq!(tool_output(&json!({"output": "plain"})), "plain");
        assert_eq!(tool_output(&json!({"error": "nope"})), r#"{"error":"nope"}"#);
    }

    #[tokio::test]
    async fn the_server_streams_text_in_chunks_and_answers_one_json() {
        let server = crate::ModelServer::start().await.unwrap();
        let client = reqwest::Client::new();
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]});
        let url = format!("{}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", server.url());
        let response = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
        let text = response.text().await.unwrap();
        let chunks: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        assert_eq!(chunks.len(), 2);
        let joined: String =
            chunks.iter().map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap()).collect();
        assert_eq!(joined, "scripted reply: 1 messages in context");
        assert_eq!(chunks[1]["candidates"][0]["finishReason"], "STOP");
        assert!(chunks[0]["candidates"][0].get("finishReason").is_none());
        // The last chunk carries the answer's usage, the prompt count with the cached tokens.
        assert!(chunks[0].get("usageMetadata").is_none());
        assert_eq!(
            chunks[1]["usageMetadata"],
            json!({"promptTokenCount": 201 + 4001, "candidatesTokenCount": 31, "cachedContentTokenCount": 4001, "totalTokenCount": 201 + 4001 + 31})
        );

        let url = format!("{}/v1beta/models/gemini-2.5-pro:generateContent", server.url());
        let one: Value = client.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
        assert_eq!(one["candidates"][0]["content"]["parts"][0]["text"], "scripted reply: 1 messages in context");
        let url = format!("{}/v1beta/models/gemini-2.5-pro:countTokens", server.url());
        let count: Value = client.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
        assert!(count["totalTokens"].as_u64().unwrap() > 0);
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[0].uri, "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse");
        let usage = server.usage();
        assert_eq!(usage.len(), 2, "countTokens reports no usage: {usage:?}");
        assert_eq!((usage[1].api, usage[1].model.as_str(), usage[1].input), ("gemini", "gemini-2.5-pro", 202));
    }
}
