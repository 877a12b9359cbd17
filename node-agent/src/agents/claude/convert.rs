//! Claude Code's stream-json output (`claude -p --output-format stream-json --verbose
//! --include-partial-messages`) into universal events.
//!
//! Items take Claude's own ids where it has them, so that a block's `item.started`,
//! its `item.delta`s and its `item.completed` agree: a tool call is its `toolu_...`
//! id and its result `<that id>-result`; a text or thinking block is
//! `<message id>-<block index>`; each model response is also a `status` item named by
//! its message id, which the lines that only mark progress (`content_block_stop`,
//! `message_delta`) extend. The `assistant` line that repeats a streamed block whole
//! completes it (Claude sends it before the block's `content_block_stop`); without
//! partial messages it is the only line of the block.
//!
//! A `result` line's `usage` is the turn's tokens (summed over its model calls) and
//! its `total_cost_usd` what the conversation has cost so far (a resumed `claude`
//! restores the total of the process before it): the turn's cost is the difference
//! from the previous `result`'s total (see [`Converter::take_usage`]).
//!
//! `control_request can_use_tool` becomes `permission.requested`, except for
//! `ExitPlanMode` (plan approval) and `AskUserQuestion`, which become
//! `question.requested`; the driver answers them (see the parent module).

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::agents::convert::{add_usage, count_at, dollars, unparsed};
use crate::universal::{
    EventData, Item, ItemKind, ItemStatus, PermissionReply, PermissionRequest, Question, QuestionRequest, Role, Usage,
};

/// The tool whose call asks the user to approve a plan.
pub const EXIT_PLAN_MODE: &str = "ExitPlanMode";
/// The tool whose call asks the user questions.
pub const ASK_USER_QUESTION: &str = "AskUserQuestion";
/// The answers to a plan approval.
pub const APPROVE_PLAN: &str = "approve";
pub const KEEP_PLANNING: &str = "keep planning";

/// A content block under way.
#[derive(Debug, Clone)]
struct Block {
    message: String,
    index: u64,
    id: String,
    kind: ItemKind,
    tool: Option<String>,
    text: String,
    completed: bool,
}

#[derive(Default)]
pub struct Converter {
    /// Claude's session id, from `system/init` (or any line that carries it).
    session_id: Option<String>,
    /// The model response under way (its message id).
    message: Option<String>,
    stop_reason: Option<String>,
    blocks: Vec<Block>,
    /// Blocks completed by `assistant` lines, per message (to name unstreamed ones).
    completed_per_message: HashMap<String, u64>,
    /// Tool calls the user rejected: their results are `denied`.
    denied: HashSet<String>,
    /// Numbers items of lines that carry no id of their own...
    counter: u64,
    /// ...after this converter's random tag, so that a converter of the same session
    /// after a restart names none the same.
    tag: Option<String>,
    /// The usage of the `result` lines since the driver last took it.
    usage: Option<Usage>,
    /// `total_cost_usd` at the previous `result`.
    cost_so_far: f64,
}

impl Converter {
    /// Claude's id of the conversation, once a line said it.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// `total_cost_usd` as of the last `result` (for the driver to save)...
    pub fn cost_so_far(&self) -> f64 {
        self.cost_so_far
    }

    /// ...and to give a converter of the same conversation after a restart (0 for a
    /// conversation that starts afresh).
    pub fn set_cost_so_far(&mut self, total: f64) {
        self.cost_so_far = total;
    }

    /// The user rejected the tool call `tool_use_id`: its result is a denial.
    pub fn denied(&mut self, tool_use_id: &str) {
        self.denied.insert(tool_use_id.to_string());
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let tag = self.tag.get_or_insert_with(|| {
            let mut bytes = [0u8; 4];
            getrandom::fill(&mut bytes).expect("the OS random source works");
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        });
        format!("{prefix}-{tag}-{}", self.counter)
    }

    /// An item id from a line's `uuid`, else a counter.
    fn line_id(&mut self, line: &Value, prefix: &str) -> String {
        match line.get("uuid").and_then(Value::as_str) {
            Some(uuid) => format!("{prefix}-{uuid}"),
            None => self.next_id(prefix),
        }
    }

    fn status(&mut self, line: &Value, prefix: &str, text: String) -> EventData {
        let id = self.line_id(line, prefix);
        EventData::ItemCompleted { item: status_item(id, text, ItemStatus::Completed) }
    }

    fn convert_value(&mut self, line: &Value) -> Vec<EventData> {
        if let Some(id) = line.get("session_id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
            self.session_id = Some(id.to_string());
        }
        let kind = line.get("type").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "system" => vec![self.system(line)],
            "stream_event" => self.stream_event(line),
            "assistant" => self.assistant(line),
            "user" => self.user(line),
            "result" => self.result(line),
            "control_request" => vec![self.control_request(line)],
            "control_response" => vec![self.control_response(line)],
            "control_cancel_request" => {
                let id = str_at(line, &["request_id"]).unwrap_or_default().to_string();
                vec![self.status(line, "cancel", format!("claude withdrew its request {id}"))]
            }
            "keep_alive" => vec![self.status(line, "keep-alive", "claude is alive".into())],
            "rate_limit_event" => vec![self.status(
                line,
                "rate-limit",
                format!("rate limit: {}", line.get("rate_limit_info").unwrap_or(&Value::Null)),
            )],
            "tool_progress" => {
                let tool = str_at(line, &["tool_name"]).unwrap_or("a tool").to_string();
                vec![self.status(line, "tool-progress", format!("{tool} is running"))]
            }
            _ => vec![unparsed(format!("a claude line of unknown type {kind:?}"))],
        }
    }

    fn system(&mut self, line: &Value) -> EventData {
        let subtype = str_at(line, &["subtype"]).unwrap_or("?").to_string();
        let text = match subtype.as_str() {
            "init" => format!(
                "claude session {} started: model {}, permission mode {}, cwd {}",
                str_at(line, &["session_id"]).unwrap_or("?"),
                str_at(line, &["model"]).unwrap_or("?"),
                str_at(line, &["permissionMode"]).unwrap_or("?"),
                str_at(line, &["cwd"]).unwrap_or("?"),
            ),
            "status" => format!("status: {}", str_at(line, &["status"]).unwrap_or("none")),
            "api_retry" => format!(
                "retrying the model API (attempt {} of {}): {}",
                line.get("attempt").unwrap_or(&Value::Null),
                line.get("max_retries").unwrap_or(&Value::Null),
                str_at(line, &["error"]).unwrap_or("unknown error"),
            ),
            other => format!("system: {other}"),
        };
        let id = match subtype.as_str() {
            "init" => self.line_id(line, "init"),
            _ => self.line_id(line, "system"),
        };
        EventData::ItemCompleted { item: status_item(id, text, ItemStatus::Completed) }
    }

    fn stream_event(&mut self, line: &Value) -> Vec<EventData> {
        let Some(event) = line.get("event") else {
            return vec![unparsed("a stream_event without an event")];
        };
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match str_at(event, &["type"]).unwrap_or_default() {
            "message_start" => {
                let id =
                    str_at(event, &["message", "id"]).map(str::to_string).unwrap_or_else(|| self.next_id("response"));
                self.message = Some(id.clone());
                self.stop_reason = None;
                vec![EventData::ItemStarted { item: status_item(id, "model response".into(), ItemStatus::InProgress) }]
            }
            "content_block_start" => {
                let message = self.current_message();
                let block = event.get("content_block").cloned().unwrap_or(Value::Null);
                let (kind, id, tool) = match str_at(&block, &["type"]).unwrap_or_default() {
                    "text" => (ItemKind::Message, format!("{message}-{index}"), None),
                    "thinking" | "redacted_thinking" => (ItemKind::Reasoning, format!("{message}-{index}"), None),
                    "tool_use" | "server_tool_use" | "mcp_tool_use" => {
                        let id =
                            str_at(&block, &["id"]).map(str::to_string).unwrap_or_else(|| format!("{message}-{index}"));
                        (ItemKind::ToolCall, id, str_at(&block, &["name"]).map(str::to_string))
                    }
                    _ => (ItemKind::Status, format!("{message}-{index}"), None),
                };
                self.blocks.retain(|b| !(b.message == message && b.index == index));
                self.blocks.push(Block {
                    message,
                    index,
                    id: id.clone(),
                    kind,
                    tool: tool.clone(),
                    text: String::new(),
                    completed: false,
                });
                let role = (kind == ItemKind::Message).then_some(Role::Assistant);
                vec![EventData::ItemStarted {
                    item: Item { id, kind, role, tool, status: Some(ItemStatus::InProgress), ..Default::default() },
                }]
            }
            "content_block_delta" => {
                let delta = event.get("delta").cloned().unwrap_or(Value::Null);
                let text = ["text", "thinking", "partial_json"]
                    .iter()
                    .find_map(|k| str_at(&delta, &[k]))
                    .unwrap_or_default()
                    .to_string();
                let message = self.current_message();
                let item_id = match self.blocks.iter_mut().find(|b| b.message == message && b.index == index) {
                    Some(block) => {
                        block.text.push_str(&text);
                        block.id.clone()
                    }
                    None => format!("{message}-{index}"),
                };
                vec![EventData::ItemDelta { item_id, delta: text }]
            }
            "content_block_stop" => {
                let message = self.current_message();
                let Some(block) = self.blocks.iter_mut().find(|b| b.message == message && b.index == index) else {
                    return vec![EventData::ItemDelta { item_id: message, delta: String::new() }];
                };
                if block.completed {
                    // The `assistant` line completed it already.
                    let item_id = block.message.clone();
                    return vec![EventData::ItemDelta { item_id, delta: String::new() }];
                }
                block.completed = true;
                let block = block.clone();
                vec![EventData::ItemCompleted { item: streamed_item(&block) }]
            }
            "message_delta" => {
                let stop_reason = str_at(event, &["delta", "stop_reason"]).map(str::to_string);
                let delta = stop_reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default();
                self.stop_reason = stop_reason;
                vec![EventData::ItemDelta { item_id: self.current_message(), delta }]
            }
            "message_stop" => {
                let id = self.current_message();
                let text = match &self.stop_reason {
                    Some(reason) => format!("model response ({reason})"),
                    None => "model response".into(),
                };
                self.message = None;
                self.blocks.retain(|b| b.message != id);
                vec![EventData::ItemCompleted { item: status_item(id, text, ItemStatus::Completed) }]
            }
            "ping" => vec![EventData::ItemDelta { item_id: self.current_message(), delta: String::new() }],
            "error" => {
                vec![EventData::Error {
                    message: str_at(event, &["error", "message"]).unwrap_or("a stream error").to_string(),
                    code: Some("stream_error".into()),
                }]
            }
            other => vec![unparsed(format!("a claude stream event of unknown type {other:?}"))],
        }
    }

    fn current_message(&mut self) -> String {
        match &self.message {
            Some(id) => id.clone(),
            None => {
                let id = self.next_id("response");
                self.message = Some(id.clone());
                id
            }
        }
    }

    fn assistant(&mut self, line: &Value) -> Vec<EventData> {
        let message = line.get("message").cloned().unwrap_or(Value::Null);
        let message_id = str_at(&message, &["id"]).map(str::to_string).unwrap_or_else(|| self.next_id("message"));
        let mut events = Vec::new();
        for block in message.get("content").and_then(Value::as_array).into_iter().flatten() {
            let item = match str_at(block, &["type"]).unwrap_or_default() {
                "text" => {
                    let id = self.complete_block(&message_id, ItemKind::Message, None);
                    Item {
                        id,
                        kind: ItemKind::Message,
                        role: Some(Role::Assistant),
                        text: str_at(block, &["text"]).map(str::to_string),
                        status: Some(ItemStatus::Completed),
                        ..Default::default()
                    }
                }
                "thinking" | "redacted_thinking" => {
                    let id = self.complete_block(&message_id, ItemKind::Reasoning, None);
                    let text = str_at(block, &["thinking"]).map(str::to_string);
                    Item {
                        id,
                        kind: ItemKind::Reasoning,
                        text,
                        status: Some(ItemStatus::Completed),
                        ..Default::default()
                    }
                }
                "tool_use" | "server_tool_use" | "mcp_tool_use" => {
                    let tool_id = str_at(block, &["id"]).map(str::to_string);
                    let id = self.complete_block(&message_id, ItemKind::ToolCall, tool_id.as_deref());
                    Item {
                        id,
                        kind: ItemKind::ToolCall,
                        tool: str_at(block, &["name"]).map(str::to_string),
                        input: block.get("input").cloned(),
                        status: Some(ItemStatus::Completed),
                        ..Default::default()
                    }
                }
                other => {
                    let id = self.complete_block(&message_id, ItemKind::Status, None);
                    status_item(id, format!("assistant content of type {other}"), ItemStatus::Completed)
                }
            };
            events.push(EventData::ItemCompleted { item });
        }
        if let Some(error) = str_at(line, &["error"]) {
            events.push(EventData::Error {
                message: format!("the model API failed: {error}"),
                code: Some(error.to_string()),
            });
        }
        if events.is_empty() {
            let id = self.next_id(&message_id);
            events.push(EventData::ItemCompleted {
                item: status_item(id, "an empty assistant message".into(), ItemStatus::Completed),
            });
        }
        events
    }

    /// The id of the block an `assistant` line completes: the streamed one of that
    /// message and kind (or that tool call id) not completed yet, else a new one.
    fn complete_block(&mut self, message: &str, kind: ItemKind, tool_id: Option<&str>) -> String {
        let found = self
            .blocks
            .iter_mut()
            .find(|b| b.message == message && b.kind == kind && !b.completed && tool_id.is_none_or(|id| b.id == id));
        *self.completed_per_message.entry(message.to_string()).or_default() += 1;
        match found {
            Some(block) => {
                block.completed = true;
                block.id.clone()
            }
            None => match tool_id {
                Some(id) => id.to_string(),
                None => format!("{message}-c{}", self.completed_per_message[message]),
            },
        }
    }

    fn user(&mut self, line: &Value) -> Vec<EventData> {
        let mut events = Vec::new();
        match line.get("message").and_then(|m| m.get("content")) {
            Some(Value::String(text)) => {
                let id = self.line_id(line, "user");
                events.push(EventData::ItemCompleted { item: user_item(id, text.clone()) });
            }
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    match str_at(block, &["type"]).unwrap_or_default() {
                        "tool_result" => {
                            let call_id = str_at(block, &["tool_use_id"]).unwrap_or_default().to_string();
                            let status = if self.denied.contains(&call_id) {
                                ItemStatus::Denied
                            } else if block.get("is_error").and_then(Value::as_bool).unwrap_or(false) {
                                ItemStatus::Failed
                            } else {
                                ItemStatus::Completed
                            };
                            let item = Item {
                                id: format!("{call_id}-result"),
                                kind: ItemKind::ToolResult,
                                call_id: Some(call_id),
                                output: Some(content_text(block.get("content"))),
                                status: Some(status),
                                ..Default::default()
                            };
                            events.push(EventData::ItemCompleted { item });
                        }
                        "text" => {
                            let id = self.line_id(line, "user");
                            let id = format!("{id}-{}", events.len());
                            events.push(EventData::ItemCompleted {
                                item: user_item(id, str_at(block, &["text"]).unwrap_or_default().to_string()),
                            });
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if events.is_empty() {
            events.push(self.status(line, "user", "a user message with nothing to show".into()));
        }
        events
    }

    fn result(&mut self, line: &Value) -> Vec<EventData> {
        let subtype = str_at(line, &["subtype"]).unwrap_or("?").to_string();
        let is_error = line.get("is_error").and_then(Value::as_bool).unwrap_or(subtype != "success");
        let mut text =
            format!("turn {subtype}: {} model turns", line.get("num_turns").and_then(Value::as_u64).unwrap_or(0));
        let denials: Vec<String> = line
            .get("permission_denials")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|d| str_at(d, &["tool_name"]).unwrap_or("a tool").to_string())
            .collect();
        if !denials.is_empty() {
            text.push_str(&format!("; permission denied for {}", denials.join(", ")));
        }
        if let Some(usage) = line.get("usage").filter(|u| u.is_object()) {
            let cost = line.get("total_cost_usd").and_then(Value::as_f64).map(|total| {
                // A total below the last one is a `claude` that counts from zero again
                // (it restores the total only when it resumes the conversation it saved).
                let turn = if total >= self.cost_so_far { total - self.cost_so_far } else { total };
                self.cost_so_far = total;
                dollars(turn)
            });
            let usage = Usage {
                input_tokens: count_at(usage, "/input_tokens"),
                output_tokens: count_at(usage, "/output_tokens"),
                cache_read_tokens: count_at(usage, "/cache_read_input_tokens"),
                cache_write_tokens: count_at(usage, "/cache_creation_input_tokens"),
                cost_usd: cost,
            };
            add_usage(&mut self.usage, usage);
        }
        let status = if is_error { ItemStatus::Failed } else { ItemStatus::Completed };
        let id = self.line_id(line, "result");
        let mut events = vec![EventData::ItemCompleted { item: status_item(id, text, status) }];
        if is_error {
            events.push(EventData::Error { message: result_error(line), code: Some(subtype) });
        }
        events
    }

    fn control_request(&mut self, line: &Value) -> EventData {
        let id = str_at(line, &["request_id"]).unwrap_or_default().to_string();
        let request = line.get("request").cloned().unwrap_or(Value::Null);
        match str_at(&request, &["subtype"]).unwrap_or_default() {
            "can_use_tool" => {
                let tool = str_at(&request, &["tool_name"]).unwrap_or_default().to_string();
                let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
                match tool.as_str() {
                    EXIT_PLAN_MODE => EventData::QuestionRequested(plan_question(id, &input)),
                    ASK_USER_QUESTION => match user_questions(id.clone(), &input) {
                        Some(questions) => EventData::QuestionRequested(questions),
                        None => EventData::PermissionRequested(permission(id, tool, input, &request)),
                    },
                    _ => EventData::PermissionRequested(permission(id, tool, input, &request)),
                }
            }
            other => {
                self.status(line, "control", format!("claude asks {other:?}, which the node agent does not answer"))
            }
        }
    }

    fn control_response(&mut self, line: &Value) -> EventData {
        let response = line.get("response").cloned().unwrap_or(Value::Null);
        let id = str_at(&response, &["request_id"]).unwrap_or("?").to_string();
        match str_at(&response, &["subtype"]).unwrap_or_default() {
            "error" => EventData::Error {
                message: format!(
                    "claude refused the request {id}: {}",
                    str_at(&response, &["error"]).unwrap_or("no reason given")
                ),
                code: Some("control_error".into()),
            },
            _ => self.status(line, "control", format!("claude accepted the request {id}")),
        }
    }
}

impl crate::agents::convert::Converter for Converter {
    fn convert(&mut self, line: &str) -> Vec<EventData> {
        match serde_json::from_str::<Value>(line) {
            Ok(value) if value.is_object() => {
                let events = self.convert_value(&value);
                if events.is_empty() { vec![unparsed("a claude line that converted to nothing")] } else { events }
            }
            Ok(_) => vec![unparsed("a claude line that is not a JSON object")],
            Err(e) => vec![unparsed(format!("a claude line that is not JSON: {e}"))],
        }
    }

    fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(value, |v, key| v.get(key))?.as_str()
}

fn status_item(id: String, text: String, status: ItemStatus) -> Item {
    Item {
        id,
        kind: ItemKind::Status,
        role: Some(Role::System),
        text: Some(text),
        status: Some(status),
        ..Default::default()
    }
}

fn user_item(id: String, text: String) -> Item {
    Item {
        id,
        kind: ItemKind::Message,
        role: Some(Role::User),
        text: Some(text),
        status: Some(ItemStatus::Completed),
        ..Default::default()
    }
}

/// A streamed block completed by its `content_block_stop` (no `assistant` line for it).
fn streamed_item(block: &Block) -> Item {
    let mut item = Item {
        id: block.id.clone(),
        kind: block.kind,
        tool: block.tool.clone(),
        status: Some(ItemStatus::Completed),
        ..Default::default()
    };
    match block.kind {
        ItemKind::ToolCall => {
            item.input = Some(serde_json::from_str(&block.text).unwrap_or_else(|_| Value::String(block.text.clone())))
        }
        ItemKind::Message => {
            item.role = Some(Role::Assistant);
            item.text = Some(block.text.clone());
        }
        _ => item.text = Some(block.text.clone()),
    }
    item
}

/// A tool result's content: a string, or blocks whose text is joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks.iter().filter_map(|b| str_at(b, &["text"])).collect::<Vec<_>>().join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// What a failed `result` line says went wrong.
pub fn result_error(line: &Value) -> String {
    if let Some(result) = str_at(line, &["result"]).filter(|r| !r.is_empty()) {
        return result.to_string();
    }
    let errors: Vec<String> = line
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| e.as_str().map(str::to_string).unwrap_or_else(|| e.to_string()))
        .collect();
    if errors.is_empty() {
        format!("claude ended the turn with {}", str_at(line, &["subtype"]).unwrap_or("an error"))
    } else {
        errors.join("; ")
    }
}

fn permission(id: String, tool: String, input: Value, request: &Value) -> PermissionRequest {
    PermissionRequest {
        id,
        tool,
        input,
        options: vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject],
        item_id: str_at(request, &["tool_use_id"]).map(str::to_string),
    }
}

/// Plan approval: `ExitPlanMode`'s plan, to approve or to keep planning.
pub fn plan_question(id: String, input: &Value) -> QuestionRequest {
    let plan = str_at(input, &["plan"]).unwrap_or("(no plan given)");
    QuestionRequest {
        id,
        questions: vec![Question {
            question: format!("Claude has a plan. Approve it and start?\n\n{plan}"),
            header: Some("plan".into()),
            options: vec![APPROVE_PLAN.into(), KEEP_PLANNING.into()],
            multi_select: false,
        }],
    }
}

/// `AskUserQuestion`'s questions (`questions: [{question, header, options: [{label}], multiSelect}]`).
pub fn user_questions(id: String, input: &Value) -> Option<QuestionRequest> {
    let questions = input.get("questions")?.as_array()?;
    let questions = questions
        .iter()
        .map(|q| Question {
            question: str_at(q, &["question"]).unwrap_or_default().to_string(),
            header: str_at(q, &["header"]).map(str::to_string),
            options: q
                .get("options")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|o| o.as_str().or_else(|| str_at(o, &["label"])).map(str::to_string))
                .collect(),
            multi_select: q.get("multiSelect").and_then(Value::as_bool).unwrap_or(false),
        })
        .collect::<Vec<_>>();
    (!questions.is_empty()).then_some(QuestionRequest { id, questions })
}
