//! Codex's native lines into universal events. Two dialects share one converter:
//!
//! - `codex app-server` JSON-RPC (what the driver speaks): notifications
//!   (`{"method": "item/completed", "params": ...}`), the server's requests to us
//!   (`{"method": "item/commandExecution/requestApproval", "id": 0, ...}`) and the
//!   responses to ours (`{"id": 1, "result": ...}`);
//! - `codex exec --json` events (`{"type": "item.completed", "item": ...}`).
//!
//! Items keep codex's ids (a tool call's result is `<id>-result`). Lines that only
//! report state (thread status, rate limits, warnings) become `status` items, so that
//! every line is kept in the stream with its meaning. Token usage is data, not text:
//! `thread/tokenUsage/updated` comes after each model call with its counts (`last`;
//! `total` is the thread's so far), and their sum is the turn's usage, which the
//! driver puts on `turn.ended` (see [`Converter::take_usage`]); the line itself is a
//! status item that says only that usage was reported. Codex counts cached input as
//! part of `inputTokens`: it is taken out, as the universal `Usage` counts it apart.

use serde_json::{Value, json};

use crate::agents::convert::{add_usage, count_at, unparsed};
use crate::universal::{
    EventData, Item, ItemKind, ItemStatus, PermissionReply, PermissionRequest, Question, QuestionRequest, Role, Usage,
};

/// The tool name of codex's shell commands in permission requests and tool calls.
pub const SHELL_TOOL: &str = "shell";
/// The tool name of codex's file edits.
pub const PATCH_TOOL: &str = "apply_patch";

pub struct Converter {
    /// Makes the ids of status items unique within a session (one converter per
    /// app-server process, and a session may see several).
    prefix: String,
    statuses: u64,
    /// Result items of commands whose output is streaming (started, not yet completed).
    streaming_results: std::collections::HashSet<String>,
    /// The usage reported since the driver last took it.
    usage: Option<Usage>,
}

impl Default for Converter {
    fn default() -> Self {
        Converter::with_prefix("codex")
    }
}

impl crate::agents::convert::Converter for Converter {
    fn convert(&mut self, line: &str) -> Vec<EventData> {
        match serde_json::from_str::<Value>(line) {
            Ok(value @ Value::Object(_)) => self.convert_value(&value),
            Ok(_) => vec![unparsed("not a JSON object")],
            Err(e) => vec![unparsed(format!("not JSON: {e}"))],
        }
    }

    fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }
}

/// Codex's counts of one model call (app-server camelCase, or `codex exec`'s
/// snake_case), its cached input taken out of its input.
fn codex_usage(counts: &Value) -> Usage {
    let either = |camel: &str, snake: &str| count_at(counts, camel).max(count_at(counts, snake));
    let input = either("/inputTokens", "/input_tokens");
    let cache_read = either("/cachedInputTokens", "/cached_input_tokens");
    let cache_write = either("/cacheWriteInputTokens", "/cache_write_input_tokens");
    Usage {
        input_tokens: input.saturating_sub(cache_read).saturating_sub(cache_write),
        output_tokens: either("/outputTokens", "/output_tokens"),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        cost_usd: None,
    }
}

impl Converter {
    pub fn with_prefix(prefix: impl Into<String>) -> Converter {
        Converter { prefix: prefix.into(), statuses: 0, streaming_results: Default::default(), usage: None }
    }

    pub fn convert_value(&mut self, value: &Value) -> Vec<EventData> {
        let events = if let Some(method) = value.get("method").and_then(Value::as_str) {
            let params = value.get("params").unwrap_or(&Value::Null);
            match value.get("id") {
                Some(id) => self.server_request(method, id, params),
                None => self.notification(method, params),
            }
        } else if value.get("id").is_some() {
            self.response(value)
        } else if let Some(kind) = value.get("type").and_then(Value::as_str) {
            self.exec_event(kind, value)
        } else {
            vec![unparsed("neither a JSON-RPC message nor a codex exec event")]
        };
        if events.is_empty() { vec![unparsed("a codex line with nothing in it to convert")] } else { events }
    }

    fn status(&mut self, text: impl Into<String>) -> EventData {
        self.statuses += 1;
        super::super::convert::status(format!("{}-status-{}", self.prefix, self.statuses), text)
    }

    fn notification(&mut self, method: &str, params: &Value) -> Vec<EventData> {
        let text = |key: &str| params.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        match method {
            "item/started" => match params.get("item") {
                Some(item) => app_item(item, false),
                None => vec![unparsed("item/started without an item")],
            },
            "item/completed" => match params.get("item") {
                Some(item) => {
                    if let Some(id) = str_of(item, "id") {
                        self.streaming_results.remove(&format!("{id}-result"));
                    }
                    app_item(item, true)
                }
                None => vec![unparsed("item/completed without an item")],
            },
            "item/agentMessage/delta"
            | "item/reasoning/textDelta"
            | "item/reasoning/summaryTextDelta"
            | "item/plan/delta"
            | "item/commandExecution/outputDelta"
            | "item/fileChange/outputDelta" => {
                match (params.get("itemId").and_then(Value::as_str), params.get("delta").and_then(Value::as_str)) {
                    (Some(item_id), Some(delta)) if method == "item/commandExecution/outputDelta" => {
                        // A command's output streams into its result item, which starts with it.
                        let result_id = format!("{item_id}-result");
                        let mut events = Vec::new();
                        if self.streaming_results.insert(result_id.clone()) {
                            let item = Item {
                                id: result_id.clone(),
                                kind: ItemKind::ToolResult,
                                call_id: Some(item_id.to_string()),
                                status: Some(ItemStatus::InProgress),
                                ..Default::default()
                            };
                            events.push(EventData::ItemStarted { item });
                        }
                        events.push(EventData::ItemDelta { item_id: result_id, delta: delta.to_string() });
                        events
                    }
                    (Some(item_id), Some(delta)) => {
                        vec![EventData::ItemDelta { item_id: item_id.to_string(), delta: delta.to_string() }]
                    }
                    _ => vec![unparsed(format!("{method} without itemId or delta"))],
                }
            }
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("codex reported an error")
                    .to_string();
                let retrying = params.get("willRetry").and_then(Value::as_bool).unwrap_or(false);
                let code = Some(if retrying { "codex_error_retrying" } else { "codex_error" }.to_string());
                vec![EventData::Error { message, code }]
            }
            "thread/started" => {
                let id = params.pointer("/thread/id").and_then(Value::as_str).unwrap_or("?");
                vec![self.status(format!("thread {id} started"))]
            }
            "thread/status/changed" => {
                let kind = params.pointer("/status/type").and_then(Value::as_str).unwrap_or("unknown");
                let flags: Vec<&str> = params
                    .pointer("/status/activeFlags")
                    .and_then(Value::as_array)
                    .map(|f| f.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let text = if flags.is_empty() {
                    format!("thread {kind}")
                } else {
                    format!("thread {kind} ({})", flags.join(", "))
                };
                vec![self.status(text)]
            }
            "turn/started" => vec![self.status("turn started")],
            "turn/completed" => {
                let status = params.pointer("/turn/status").and_then(Value::as_str).unwrap_or("completed");
                let mut events = Vec::new();
                if let Some(message) = params.pointer("/turn/error/message").and_then(Value::as_str) {
                    events.push(EventData::Error {
                        message: message.to_string(),
                        code: Some("codex_turn_failed".into()),
                    });
                }
                events.push(self.status(format!("turn {status}")));
                events
            }
            "thread/tokenUsage/updated" => {
                if let Some(last) = params.pointer("/tokenUsage/last") {
                    add_usage(&mut self.usage, codex_usage(last));
                }
                vec![self.status("token usage reported (the turn's is on its turn.ended)")]
            }
            "account/rateLimits/updated" => vec![self.status("rate limits updated")],
            "serverRequest/resolved" => {
                let id = params.get("requestId").map(Value::to_string).unwrap_or_default();
                vec![self.status(format!("request {id} resolved"))]
            }
            "configWarning" | "warning" | "guardianWarning" | "deprecationNotice" | "windows/worldWritableWarning" => {
                let summary = [text("summary"), text("message")]
                    .into_iter()
                    .find(|s| !s.is_empty())
                    .unwrap_or_else(|| method.to_string());
                vec![self.status(format!("{method}: {summary}"))]
            }
            "remoteControl/status/changed" => vec![self.status(format!("remote control {}", text("status")))],
            "turn/diff/updated" => vec![self.status("turn diff updated")],
            "turn/plan/updated" => {
                let steps: Vec<String> = params
                    .get("plan")
                    .and_then(Value::as_array)
                    .map(|plan| {
                        plan.iter()
                            .map(|s| {
                                format!(
                                    "[{}] {}",
                                    s.get("status").and_then(Value::as_str).unwrap_or("?"),
                                    s.get("step").and_then(Value::as_str).unwrap_or("")
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                vec![self.status(format!("plan: {}", steps.join("; ")))]
            }
            "item/reasoning/summaryPartAdded" => vec![self.status("reasoning summary part added")],
            // The rest of app-server's notifications (its 0.169 schema) that only report state.
            "thread/name/updated"
            | "thread/compacted"
            | "thread/closed"
            | "thread/archived"
            | "thread/unarchived"
            | "thread/deleted"
            | "thread/reverted"
            | "thread/readState/changed"
            | "thread/settings/updated"
            | "thread/section/changed"
            | "thread/attachment/updated"
            | "thread/goal/updated"
            | "thread/goal/cleared"
            | "thread/prediction/updated"
            | "thread/queue/changed"
            | "thread/project/updated"
            | "thread/environment/connected"
            | "thread/environment/disconnected"
            | "project/changed"
            | "model/rerouted"
            | "model/verification"
            | "model/safetyBuffering/updated"
            | "modelProvider/authRecoveryStarted"
            | "modelProvider/authRecoveryCompleted"
            | "turn/moderationMetadata"
            | "skills/changed"
            | "app/list/updated"
            | "fs/changed"
            | "mcpServer/startupStatus/updated"
            | "mcpServer/oauthLogin/completed"
            | "item/mcpToolCall/progress"
            | "item/autoApprovalReview/started"
            | "item/autoApprovalReview/completed"
            | "autoApprovalReview/strictReviewRequired"
            | "item/commandExecution/terminalInteraction"
            | "item/fileChange/patchUpdated"
            | "account/updated"
            | "account/login/completed"
            | "hook/started"
            | "hook/completed" => vec![self.status(method.to_string())],
            _ => vec![unparsed(format!("unknown codex notification {method:?}"))],
        }
    }

    fn server_request(&mut self, method: &str, id: &Value, params: &Value) -> Vec<EventData> {
        match permission_request(method, id, params) {
            Some(request) => vec![EventData::PermissionRequested(request)],
            None => match question_request(method, id, params) {
                Some(request) => vec![EventData::QuestionRequested(request)],
                None => vec![unparsed(format!("unknown codex request {method:?}"))],
            },
        }
    }

    fn response(&mut self, value: &Value) -> Vec<EventData> {
        let id = value.get("id").map(Value::to_string).unwrap_or_default();
        if let Some(error) = value.get("error") {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("codex refused a request");
            return vec![EventData::Error {
                message: format!("codex answered request {id} with an error: {message}"),
                code: Some("codex_rpc_error".into()),
            }];
        }
        let Some(result) = value.get("result") else {
            return vec![unparsed("a response with neither result nor error")];
        };
        let text = if let Some(agent) = result.get("userAgent").and_then(Value::as_str) {
            format!("codex app-server ready ({agent})")
        } else if let Some(thread) = result.pointer("/thread/id").and_then(Value::as_str) {
            let model = result.get("model").and_then(Value::as_str).unwrap_or("?");
            format!("thread {thread} ready (model {model})")
        } else if let Some(turn) = result.pointer("/turn/id").and_then(Value::as_str) {
            format!("turn {turn} accepted")
        } else {
            format!("codex answered request {id}")
        };
        vec![self.status(text)]
    }

    fn exec_event(&mut self, kind: &str, value: &Value) -> Vec<EventData> {
        match kind {
            "thread.started" => {
                let id = value.get("thread_id").and_then(Value::as_str).unwrap_or("?");
                vec![self.status(format!("thread {id} started"))]
            }
            "turn.started" => vec![self.status("turn started")],
            "turn.completed" => {
                // `codex exec`'s usage is the turn's.
                if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
                    add_usage(&mut self.usage, codex_usage(usage));
                }
                vec![self.status("turn completed")]
            }
            "turn.failed" => {
                let message =
                    value.pointer("/error/message").and_then(Value::as_str).unwrap_or("the turn failed").to_string();
                vec![EventData::Error { message, code: Some("codex_turn_failed".into()) }]
            }
            "error" => {
                let message =
                    value.get("message").and_then(Value::as_str).unwrap_or("codex reported an error").to_string();
                vec![EventData::Error { message, code: Some("codex_error".into()) }]
            }
            "item.started" | "item.updated" | "item.completed" => match value.get("item") {
                Some(item) => exec_item(item, kind),
                None => vec![unparsed(format!("{kind} without an item"))],
            },
            _ => vec![unparsed(format!("unknown codex exec event {kind:?}"))],
        }
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// One app-server `ThreadItem`, started or completed.
fn app_item(item: &Value, completed: bool) -> Vec<EventData> {
    let Some(id) = str_of(item, "id").map(str::to_string) else {
        return vec![unparsed("an item without an id")];
    };
    let kind = str_of(item, "type").unwrap_or_default();
    let wrap = |item: Item| if completed { EventData::ItemCompleted { item } } else { EventData::ItemStarted { item } };
    let progress = if completed { ItemStatus::Completed } else { ItemStatus::InProgress };
    match kind {
        "userMessage" | "agentMessage" | "plan" => {
            let text = if kind == "userMessage" {
                item.get("content")
                    .and_then(Value::as_array)
                    .map(|parts| parts.iter().filter_map(|p| str_of(p, "text")).collect::<Vec<_>>().join(""))
                    .unwrap_or_default()
            } else {
                str_of(item, "text").unwrap_or_default().to_string()
            };
            let role = if kind == "userMessage" { Role::User } else { Role::Assistant };
            let text = if completed || !text.is_empty() { Some(text) } else { None };
            vec![wrap(Item {
                id,
                kind: ItemKind::Message,
                role: Some(role),
                text,
                status: Some(progress),
                ..Default::default()
            })]
        }
        "reasoning" => {
            let join = |key: &str| {
                item.get(key)
                    .and_then(Value::as_array)
                    .map(|p| p.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n"))
            };
            let text = [join("summary"), join("content")]
                .into_iter()
                .flatten()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("\n");
            let text = if completed || !text.is_empty() { Some(text) } else { None };
            vec![wrap(Item {
                id,
                kind: ItemKind::Reasoning,
                role: Some(Role::Assistant),
                text,
                status: Some(progress),
                ..Default::default()
            })]
        }
        "commandExecution" => {
            let input = json!({"command": item.get("command"), "cwd": item.get("cwd")});
            let status = tool_status(str_of(item, "status"), completed);
            let call = Item {
                id: id.clone(),
                kind: ItemKind::ToolCall,
                tool: Some(SHELL_TOOL.into()),
                input: Some(input),
                status: Some(status),
                ..Default::default()
            };
            let mut events = vec![wrap(call)];
            if completed {
                let mut output = str_of(item, "aggregatedOutput").unwrap_or_default().to_string();
                if output.is_empty() {
                    if let Some(code) = item.get("exitCode").and_then(Value::as_i64) {
                        output = format!("exit code {code}");
                    } else if status == ItemStatus::Denied {
                        output = "declined by the user".into();
                    }
                }
                events.push(tool_result(&id, output, status));
            }
            events
        }
        "fileChange" => {
            let changes = item.get("changes").and_then(Value::as_array).cloned().unwrap_or_default();
            let paths: Vec<&str> = changes.iter().filter_map(|c| str_of(c, "path")).collect();
            let diffs: Vec<&str> = changes.iter().filter_map(|c| str_of(c, "diff")).collect();
            let status = tool_status(str_of(item, "status"), completed);
            vec![wrap(Item {
                id,
                kind: ItemKind::FileChange,
                path: Some(paths.join(", ")),
                text: Some(diffs.join("\n")),
                status: Some(status),
                ..Default::default()
            })]
        }
        "mcpToolCall" | "dynamicToolCall" | "collabAgentToolCall" => {
            let tool = match (str_of(item, "server"), str_of(item, "tool")) {
                (Some(server), Some(tool)) => format!("{server}/{tool}"),
                (_, Some(tool)) => tool.to_string(),
                _ => kind.to_string(),
            };
            let input = item.get("arguments").or_else(|| item.get("prompt")).cloned();
            let status = tool_status(str_of(item, "status"), completed);
            let mut events = vec![wrap(Item {
                id: id.clone(),
                kind: ItemKind::ToolCall,
                tool: Some(tool),
                input,
                status: Some(status),
                ..Default::default()
            })];
            if completed {
                let output = [item.get("result"), item.get("contentItems"), item.get("error")]
                    .into_iter()
                    .flatten()
                    .find(|v| !v.is_null())
                    .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
                    .unwrap_or_default();
                events.push(tool_result(&id, output, status));
            }
            events
        }
        "webSearch" => {
            let input = json!({"query": item.get("query")});
            vec![wrap(Item {
                id,
                kind: ItemKind::ToolCall,
                tool: Some("web_search".into()),
                input: Some(input),
                status: Some(progress),
                ..Default::default()
            })]
        }
        "hookPrompt" | "functionCallOutput" | "subAgentActivity" | "imageView" | "sleep" | "imageGeneration"
        | "enteredReviewMode" | "exitedReviewMode" | "contextCompaction" => {
            let text = match kind {
                "imageView" => format!("viewed image {}", str_of(item, "path").unwrap_or("?")),
                "contextCompaction" => "context compacted".to_string(),
                other => other.to_string(),
            };
            vec![wrap(Item {
                id,
                kind: ItemKind::Status,
                role: Some(Role::System),
                text: Some(text),
                status: Some(progress),
                ..Default::default()
            })]
        }
        other => vec![unparsed(format!("unknown codex item type {other:?}"))],
    }
}

/// A tool item's status from codex's (`inProgress`, `completed`, `failed`, `declined`).
fn tool_status(status: Option<&str>, completed: bool) -> ItemStatus {
    match status {
        Some("failed") => ItemStatus::Failed,
        Some("declined") => ItemStatus::Denied,
        Some("completed") => ItemStatus::Completed,
        _ if completed => ItemStatus::Completed,
        _ => ItemStatus::InProgress,
    }
}

fn tool_result(call_id: &str, output: String, status: ItemStatus) -> EventData {
    EventData::ItemCompleted {
        item: Item {
            id: format!("{call_id}-result"),
            kind: ItemKind::ToolResult,
            call_id: Some(call_id.to_string()),
            output: Some(output),
            status: Some(status),
            ..Default::default()
        },
    }
}

/// One `codex exec --json` item.
fn exec_item(item: &Value, event: &str) -> Vec<EventData> {
    let Some(id) = str_of(item, "id").map(str::to_string) else {
        return vec![unparsed("an item without an id")];
    };
    let completed = event == "item.completed";
    let wrap = |item: Item| if completed { EventData::ItemCompleted { item } } else { EventData::ItemStarted { item } };
    let progress = if completed { ItemStatus::Completed } else { ItemStatus::InProgress };
    let text = str_of(item, "text").map(str::to_string);
    match str_of(item, "type").unwrap_or_default() {
        "agent_message" => vec![wrap(Item {
            id,
            kind: ItemKind::Message,
            role: Some(Role::Assistant),
            text,
            status: Some(progress),
            ..Default::default()
        })],
        "reasoning" => vec![wrap(Item {
            id,
            kind: ItemKind::Reasoning,
            role: Some(Role::Assistant),
            text,
            status: Some(progress),
            ..Default::default()
        })],
        "command_execution" => {
            let status = match str_of(item, "status") {
                Some("failed") => ItemStatus::Failed,
                Some("declined") => ItemStatus::Denied,
                Some("completed") => ItemStatus::Completed,
                _ => ItemStatus::InProgress,
            };
            let input = json!({"command": item.get("command")});
            let call = Item {
                id: id.clone(),
                kind: ItemKind::ToolCall,
                tool: Some(SHELL_TOOL.into()),
                input: Some(input),
                status: Some(status),
                ..Default::default()
            };
            let mut events = vec![wrap(call)];
            if completed {
                events.push(tool_result(
                    &id,
                    str_of(item, "aggregated_output").unwrap_or_default().to_string(),
                    status,
                ));
            }
            events
        }
        "file_change" => {
            let paths: Vec<&str> = item
                .get("changes")
                .and_then(Value::as_array)
                .map(|c| c.iter().filter_map(|c| str_of(c, "path")).collect())
                .unwrap_or_default();
            let status = if str_of(item, "status") == Some("failed") { ItemStatus::Failed } else { progress };
            vec![wrap(Item {
                id,
                kind: ItemKind::FileChange,
                path: Some(paths.join(", ")),
                status: Some(status),
                ..Default::default()
            })]
        }
        "mcp_tool_call" => {
            let tool = format!("{}/{}", str_of(item, "server").unwrap_or("?"), str_of(item, "tool").unwrap_or("?"));
            let call = Item {
                id: id.clone(),
                kind: ItemKind::ToolCall,
                tool: Some(tool),
                input: item.get("arguments").cloned(),
                status: Some(progress),
                ..Default::default()
            };
            let mut events = vec![wrap(call)];
            if completed {
                let output = item.get("result").or_else(|| item.get("error")).map(Value::to_string).unwrap_or_default();
                events.push(tool_result(&id, output, progress));
            }
            events
        }
        "web_search" => {
            let input = json!({"query": item.get("query")});
            vec![wrap(Item {
                id,
                kind: ItemKind::ToolCall,
                tool: Some("web_search".into()),
                input: Some(input),
                status: Some(progress),
                ..Default::default()
            })]
        }
        "todo_list" => {
            let steps: Vec<String> = item
                .get("items")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .map(|i| {
                            format!(
                                "[{}] {}",
                                if i["completed"] == true { "x" } else { " " },
                                str_of(i, "text").unwrap_or("")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            vec![wrap(Item {
                id,
                kind: ItemKind::Status,
                role: Some(Role::Assistant),
                text: Some(steps.join("\n")),
                status: Some(progress),
                ..Default::default()
            })]
        }
        "error" => {
            let message = str_of(item, "message").unwrap_or("codex reported an error").to_string();
            vec![EventData::Error { message, code: Some("codex_error".into()) }]
        }
        other => vec![unparsed(format!("unknown codex exec item type {other:?}"))],
    }
}

/// The permission request of an app-server approval request (command or file change).
pub fn permission_request(method: &str, rpc_id: &Value, params: &Value) -> Option<PermissionRequest> {
    let item_id = str_of(params, "itemId").map(str::to_string);
    let (tool, input) = match method {
        "item/commandExecution/requestApproval" => {
            let mut input = json!({"command": params.get("command"), "cwd": params.get("cwd")});
            if let Some(reason) = str_of(params, "reason") {
                input["reason"] = json!(reason);
            }
            (SHELL_TOOL, input)
        }
        "item/fileChange/requestApproval" => {
            (PATCH_TOOL, json!({"reason": params.get("reason"), "grantRoot": params.get("grantRoot")}))
        }
        _ => return None,
    };
    let id = format!(
        "{}-approval-{}",
        item_id.as_deref().unwrap_or("codex"),
        rpc_id.as_str().map(str::to_string).unwrap_or_else(|| rpc_id.to_string())
    );
    Some(PermissionRequest {
        id,
        tool: tool.to_string(),
        input,
        options: vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject],
        item_id,
    })
}

/// The question of an app-server `item/tool/requestUserInput` request.
pub fn question_request(method: &str, rpc_id: &Value, params: &Value) -> Option<QuestionRequest> {
    if method != "item/tool/requestUserInput" {
        return None;
    }
    let questions = params
        .get("questions")
        .and_then(Value::as_array)?
        .iter()
        .map(|q| Question {
            question: str_of(q, "question").unwrap_or_default().to_string(),
            header: str_of(q, "header").map(str::to_string),
            options: q
                .get("options")
                .and_then(Value::as_array)
                .map(|o| o.iter().filter_map(|o| str_of(o, "label").map(str::to_string)).collect())
                .unwrap_or_default(),
            multi_select: false,
        })
        .collect();
    let item_id = str_of(params, "itemId").unwrap_or("codex");
    let id =
        format!("{item_id}-question-{}", rpc_id.as_str().map(str::to_string).unwrap_or_else(|| rpc_id.to_string()));
    Some(QuestionRequest { id, questions })
}

/// The ids of the questions of an `item/tool/requestUserInput` request, in order (the
/// answer maps each to its answers).
pub fn question_ids(params: &Value) -> Vec<String> {
    params
        .get("questions")
        .and_then(Value::as_array)
        .map(|q| q.iter().filter_map(|q| str_of(q, "id").map(str::to_string)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::convert::Converter as _;

    fn one(converter: &mut Converter, line: Value) -> Vec<EventData> {
        converter.convert(&line.to_string())
    }

    #[test]
    fn unknown_and_malformed_lines_are_unparsed() {
        let mut c = Converter::default();
        for line in ["not json", "[1,2]", r#"{"method":"brand/new"}"#, r#"{"type":"brand.new"}"#, r#"{"hello":1}"#] {
            let events = c.convert(line);
            assert!(matches!(events.as_slice(), [EventData::AgentUnparsed { .. }]), "{line}: {events:?}");
        }
        let unknown_item = json!({"method": "item/completed", "params": {"item": {"type": "teleport", "id": "x"}}});
        assert!(matches!(one(&mut c, unknown_item).as_slice(), [EventData::AgentUnparsed { .. }]));
    }

    #[test]
    fn a_failed_command_gives_a_failed_call_and_result_and_a_declined_one_is_denied() {
        let mut c = Converter::default();
        let item = |status: &str| json!({"method": "item/completed", "params": {"item": {"type": "commandExecution", "id": "c1", "command": "false", "status": status, "aggregatedOutput": "", "exitCode": 1}}});
        match one(&mut c, item("failed")).as_slice() {
            [EventData::ItemCompleted { item: call }, EventData::ItemCompleted { item: result }] => {
                assert_eq!((call.status, result.status), (Some(ItemStatus::Failed), Some(ItemStatus::Failed)));
                assert_eq!(result.output.as_deref(), Some("exit code 1"));
            }
            other => panic!("{other:?}"),
        }
        match one(&mut c, item("declined")).as_slice() {
            [EventData::ItemCompleted { item: call }, _] => assert_eq!(call.status, Some(ItemStatus::Denied)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_user_input_request_becomes_a_question() {
        let line = json!({"method": "item/tool/requestUserInput", "id": 4, "params": {"itemId": "i", "threadId": "t", "turnId": "u", "isBlocking": true,
            "questions": [{"id": "color", "header": "Color", "question": "Which?", "options": [{"label": "red", "description": ""}, {"label": "blue", "description": ""}]}]}});
        match Converter::default().convert(&line.to_string()).as_slice() {
            [EventData::QuestionRequested(q)] => {
                assert_eq!(q.id, "i-question-4");
                assert_eq!(q.questions[0].options, ["red", "blue"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(question_ids(&line["params"]), ["color"]);
    }
}
