//! OpenCode's native output into universal events. Two shapes come in, one JSON
//! value a line:
//!
//! - `opencode serve` bus events (`GET /event` or `GET /global/event` SSE `data:`
//!   payloads, `{id, type, properties}`, the latter wrapped in `{directory, payload}`):
//!   message parts as they change (`message.part.updated`), text as it streams
//!   (`message.part.delta`), permission and question requests, session status;
//! - `opencode run --format json` lines (`{type: step_start|text|tool_use|step_finish|
//!   reasoning|error, part}`), each a part that is already finished.
//!
//! Items are named by OpenCode's own part ids (unique and stable across a restart of
//! the node agent), status items by the bus event's id. Bus events that mean nothing
//! to a client (a session's metadata changed, a plugin loaded) become status items;
//! an event type this module does not know becomes `agent.unparsed`.
//!
//! Each `step-finish` part holds the tokens and cost of one model call (OpenCode
//! counts cached input apart from `input`, and reasoning apart from `output`: it is
//! added back, as the universal `Usage` counts reasoning as output); summed, once a
//! part however often it is updated, they are the turn's usage (see
//! [`Converter::take_usage`]).

use std::collections::HashMap;

use serde_json::Value;

use crate::agents::convert::{add_usage, count_at, unparsed};
use crate::universal::{
    EventData, Item, ItemKind, ItemStatus, PermissionReply, PermissionRequest, Question, QuestionOutcome,
    QuestionRequest, Role, Usage,
};

/// Bus events that change nothing a client follows; each becomes a status item.
const BOOKKEEPING: [&str; 27] = [
    "server.connected",
    "server.heartbeat",
    "server.instance.disposed",
    "global.disposed",
    "session.created",
    "session.updated",
    "session.deleted",
    "session.diff",
    "session.compacted",
    "message.removed",
    "message.part.removed",
    "plugin.added",
    "catalog.updated",
    "reference.updated",
    "integration.updated",
    "integration.connection.updated",
    "models-dev.refreshed",
    "project.updated",
    "project.directories.updated",
    "vcs.branch.updated",
    "todo.updated",
    "lsp.updated",
    "file.watcher.updated",
    "installation.updated",
    "installation.update-available",
    "mcp.tools.changed",
    "command.executed",
];

#[derive(Debug, Default)]
struct PartState {
    kind: ItemKind,
    started: bool,
    completed: bool,
    /// The text streamed so far (text and reasoning parts).
    text: String,
}

#[derive(Default)]
pub struct Converter {
    /// Message id → its role, from `message.updated`.
    roles: HashMap<String, String>,
    parts: HashMap<String, PartState>,
    /// A tool call's `callID` → its part id (the tool-call item's id).
    calls: HashMap<String, String>,
    /// Numbers status items of lines that carry no id of their own.
    anonymous: u64,
    /// The usage of the `step-finish` parts since the driver last took it...
    usage: Option<Usage>,
    /// ...each part counted once (by its id).
    steps_counted: std::collections::HashSet<String>,
}

impl super::super::convert::Converter for Converter {
    fn convert(&mut self, line: &str) -> Vec<EventData> {
        let value: Value = match serde_json::from_str(line) {
            Ok(value) => value,
            Err(e) => return vec![unparsed(format!("not JSON: {e}"))],
        };
        // `/global/event` wraps the bus event with the instance's directory.
        let value = match value.get("payload") {
            Some(payload) if payload.is_object() => payload.clone(),
            _ => value,
        };
        let Some(kind) = value.get("type").and_then(Value::as_str) else {
            return vec![unparsed("an opencode line without a type")];
        };
        let events = if let Some(properties) = value.get("properties") {
            let id = value.get("id").and_then(Value::as_str).map(str::to_string);
            self.bus_event(kind, properties, id)
        } else {
            self.run_line(kind, &value)
        };
        if events.is_empty() { vec![unparsed("an opencode line with nothing in it to convert")] } else { events }
    }

    fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }
}

impl Converter {
    fn status(&mut self, id: Option<String>, text: impl Into<String>) -> EventData {
        let id = id.unwrap_or_else(|| {
            self.anonymous += 1;
            format!("opencode-status-{}", self.anonymous)
        });
        crate::agents::convert::status(id, text)
    }

    fn bus_event(&mut self, kind: &str, properties: &Value, id: Option<String>) -> Vec<EventData> {
        let text = |key: &str| properties.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        match kind {
            "message.updated" => {
                let Some(info) = properties.get("info") else { return vec![unparsed("message.updated without info")] };
                let role = info.get("role").and_then(Value::as_str).unwrap_or_default().to_string();
                if let Some(message) = info.get("id").and_then(Value::as_str) {
                    self.roles.insert(message.to_string(), role.clone());
                }
                match info.get("error") {
                    Some(error) if !error.is_null() => vec![error_event(error)],
                    _ => vec![self.status(id, format!("{role} message updated"))],
                }
            }
            "message.part.updated" => match properties.get("part") {
                Some(part) => self.part(part, id),
                None => vec![unparsed("message.part.updated without a part")],
            },
            "message.part.delta" => {
                let part_id = text("partID");
                let delta = text("delta");
                if part_id.is_empty() || text("field") != "text" {
                    return vec![self.status(id, format!("{} of a part changed", text("field")))];
                }
                let mut events = Vec::new();
                let state = self.parts.entry(part_id.clone()).or_default();
                if !state.started {
                    state.started = true;
                    events.push(EventData::ItemStarted {
                        item: text_item(&part_id, state.kind, None, ItemStatus::InProgress),
                    });
                }
                state.text.push_str(&delta);
                events.push(EventData::ItemDelta { item_id: part_id, delta });
                events
            }
            "permission.asked" => {
                let request_id = text("id");
                if request_id.is_empty() {
                    return vec![unparsed("permission.asked without an id")];
                }
                let mut input = properties.get("metadata").cloned().unwrap_or(Value::Null);
                if input.as_object().is_none_or(|o| o.is_empty()) {
                    input = serde_json::json!({"patterns": properties.get("patterns").cloned().unwrap_or_default()});
                }
                let item_id = properties
                    .pointer("/tool/callID")
                    .and_then(Value::as_str)
                    .and_then(|call| self.calls.get(call).cloned().or_else(|| Some(call.to_string())));
                vec![EventData::PermissionRequested(PermissionRequest {
                    id: request_id,
                    tool: text("permission"),
                    input,
                    options: vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject],
                    item_id,
                })]
            }
            "permission.replied" => {
                let reply = match properties.get("reply").and_then(Value::as_str) {
                    Some("once") => PermissionReply::Once,
                    Some("always") => PermissionReply::Always,
                    Some("reject") => PermissionReply::Reject,
                    _ => return vec![unparsed("permission.replied with an unknown reply")],
                };
                vec![EventData::PermissionResolved { id: text("requestID"), reply: Some(reply) }]
            }
            "question.asked" => {
                let questions = properties
                    .get("questions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|q| Question {
                        question: q.get("question").and_then(Value::as_str).unwrap_or_default().to_string(),
                        header: q.get("header").and_then(Value::as_str).map(str::to_string),
                        options: q
                            .get("options")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(|o| o.get("label").and_then(Value::as_str).map(str::to_string))
                            .collect(),
                        multi_select: q.get("multiple").and_then(Value::as_bool).unwrap_or(false),
                    })
                    .collect();
                vec![EventData::QuestionRequested(QuestionRequest { id: text("id"), questions })]
            }
            "question.replied" => {
                let answers = serde_json::from_value(properties.get("answers").cloned().unwrap_or_default()).ok();
                vec![EventData::QuestionResolved { id: text("requestID"), outcome: QuestionOutcome::Answered, answers }]
            }
            "question.rejected" => vec![EventData::QuestionResolved {
                id: text("requestID"),
                outcome: QuestionOutcome::Rejected,
                answers: None,
            }],
            "session.status" => {
                let status = properties.get("status").cloned().unwrap_or_default();
                let text = match status.get("type").and_then(Value::as_str) {
                    Some("retry") => format!(
                        "retrying (attempt {}): {}",
                        status.get("attempt").and_then(Value::as_u64).unwrap_or_default(),
                        status.get("message").and_then(Value::as_str).unwrap_or_default()
                    ),
                    Some(other) => other.to_string(),
                    None => return vec![unparsed("session.status without a status")],
                };
                vec![self.status(id, text)]
            }
            "session.idle" => vec![self.status(id, "idle")],
            "session.error" => match properties.get("error") {
                Some(error) => vec![error_event(error)],
                None => {
                    vec![EventData::Error { message: "opencode reported an error without details".into(), code: None }]
                }
            },
            "file.edited" => {
                let path = text("file");
                let id = id.unwrap_or_else(|| format!("file-{path}"));
                vec![EventData::ItemCompleted {
                    item: Item {
                        id,
                        kind: ItemKind::FileChange,
                        path: Some(path),
                        status: Some(ItemStatus::Completed),
                        ..Default::default()
                    },
                }]
            }
            _ if BOOKKEEPING.contains(&kind) => vec![self.status(id, kind.to_string())],
            _ => vec![unparsed(format!("unknown opencode event {kind:?}"))],
        }
    }

    /// One `opencode run --format json` line: a finished part.
    fn run_line(&mut self, kind: &str, value: &Value) -> Vec<EventData> {
        match (kind, value.get("part")) {
            ("step_start" | "step_finish" | "text" | "reasoning" | "tool_use", Some(part)) => {
                let mut part = part.clone();
                // A run line's text part is whole even when it carries no end time.
                if matches!(kind, "text" | "reasoning") && part.pointer("/time/end").is_none() {
                    part["time"]["end"] = Value::from(0);
                }
                self.part(&part, None)
            }
            ("error", _) => vec![error_event(value.get("error").unwrap_or(value))],
            _ => vec![unparsed(format!("unknown opencode run line {kind:?}"))],
        }
    }

    fn part(&mut self, part: &Value, event_id: Option<String>) -> Vec<EventData> {
        let field = |key: &str| part.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        let part_id = field("id");
        if part_id.is_empty() {
            return vec![unparsed("a part without an id")];
        }
        let status_id = event_id.unwrap_or_else(|| format!("{part_id}-status"));
        match field("type").as_str() {
            kind @ ("text" | "reasoning") => {
                let item_kind = if kind == "text" { ItemKind::Message } else { ItemKind::Reasoning };
                if self.roles.get(&field("messageID")).is_some_and(|role| role == "user") {
                    return vec![self.status(Some(status_id), "the user's message was recorded")];
                }
                let text = field("text");
                let done = part.pointer("/time/end").is_some_and(|end| !end.is_null());
                let state = self.parts.entry(part_id.clone()).or_default();
                state.kind = item_kind;
                if state.completed {
                    return vec![self.status(Some(status_id), format!("{kind} part updated"))];
                }
                let mut events = Vec::new();
                if done {
                    state.completed = true;
                    state.text = text.clone();
                    events.push(EventData::ItemCompleted {
                        item: text_item(&part_id, item_kind, Some(text), ItemStatus::Completed),
                    });
                } else if !state.started {
                    state.started = true;
                    state.text = text.clone();
                    events.push(EventData::ItemStarted {
                        item: text_item(&part_id, item_kind, Some(text), ItemStatus::InProgress),
                    });
                } else if let Some(rest) = text.strip_prefix(state.text.as_str()).filter(|rest| !rest.is_empty()) {
                    // The whole text so far, without a delta event: send what is new.
                    let rest = rest.to_string();
                    state.text = text;
                    events.push(EventData::ItemDelta { item_id: part_id, delta: rest });
                } else {
                    events.push(self.status(Some(status_id), format!("{kind} part updated")));
                }
                events
            }
            "tool" => self.tool(part, &part_id, status_id),
            "step-start" => vec![self.status(Some(status_id), "step started")],
            "step-finish" => {
                if let Some(tokens) = part.get("tokens").filter(|t| t.is_object())
                    && self.steps_counted.insert(part_id.clone())
                {
                    let usage = Usage {
                        input_tokens: count_at(tokens, "/input"),
                        output_tokens: count_at(tokens, "/output").saturating_add(count_at(tokens, "/reasoning")),
                        cache_read_tokens: count_at(tokens, "/cache/read"),
                        cache_write_tokens: count_at(tokens, "/cache/write"),
                        cost_usd: part.get("cost").and_then(Value::as_f64),
                    };
                    add_usage(&mut self.usage, usage);
                }
                vec![self.status(Some(status_id), format!("step finished: {}", field("reason")))]
            }
            "patch" => part
                .get("files")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .enumerate()
                .map(|(i, path)| EventData::ItemCompleted {
                    item: Item {
                        id: format!("{part_id}-{i}"),
                        kind: ItemKind::FileChange,
                        path: Some(path.to_string()),
                        status: Some(ItemStatus::Completed),
                        ..Default::default()
                    },
                })
                .collect(),
            other @ ("snapshot" | "agent" | "subtask" | "retry" | "compaction" | "file") => {
                vec![self.status(Some(status_id), format!("{other} part"))]
            }
            other => vec![unparsed(format!("unknown opencode part type {other:?}"))],
        }
    }

    fn tool(&mut self, part: &Value, part_id: &str, status_id: String) -> Vec<EventData> {
        let tool = part.get("tool").and_then(Value::as_str).unwrap_or_default().to_string();
        if let Some(call) = part.get("callID").and_then(Value::as_str) {
            self.calls.insert(call.to_string(), part_id.to_string());
        }
        let state = part.get("state").cloned().unwrap_or_default();
        let input = state.get("input").cloned().filter(|i| i.as_object().is_none_or(|o| !o.is_empty()));
        let call = |status: ItemStatus| Item {
            id: part_id.to_string(),
            kind: ItemKind::ToolCall,
            tool: Some(tool.clone()),
            input: input.clone(),
            status: Some(status),
            ..Default::default()
        };
        let result = |status: ItemStatus, output: String| Item {
            id: format!("{part_id}-result"),
            kind: ItemKind::ToolResult,
            tool: Some(tool.clone()),
            call_id: Some(part_id.to_string()),
            output: Some(output),
            status: Some(status),
            ..Default::default()
        };
        let progress = self
            .parts
            .entry(part_id.to_string())
            .or_insert_with(|| PartState { kind: ItemKind::ToolCall, ..Default::default() });
        if progress.completed {
            return vec![self.status(Some(status_id), format!("tool {tool} updated"))];
        }
        let status = state.get("status").and_then(Value::as_str).unwrap_or_default();
        match status {
            "pending" | "running" if !progress.started => {
                progress.started = true;
                vec![EventData::ItemStarted { item: call(ItemStatus::InProgress) }]
            }
            "pending" | "running" => vec![self.status(Some(status_id), format!("tool {tool} {status}"))],
            "completed" => {
                progress.completed = true;
                let output = state.get("output").and_then(Value::as_str).unwrap_or_default().to_string();
                vec![
                    EventData::ItemCompleted { item: call(ItemStatus::Completed) },
                    EventData::ItemCompleted { item: result(ItemStatus::Completed, output) },
                ]
            }
            "error" => {
                progress.completed = true;
                let error = state.get("error").and_then(Value::as_str).unwrap_or_default().to_string();
                // OpenCode words a refused permission so ("The user rejected permission ...").
                let outcome = if error.contains("rejected") { ItemStatus::Denied } else { ItemStatus::Failed };
                vec![
                    EventData::ItemCompleted { item: call(outcome) },
                    EventData::ItemCompleted { item: result(outcome, error) },
                ]
            }
            other => vec![unparsed(format!("unknown opencode tool state {other:?}"))],
        }
    }
}

fn text_item(id: &str, kind: ItemKind, text: Option<String>, status: ItemStatus) -> Item {
    Item { id: id.to_string(), kind, role: Some(Role::Assistant), text, status: Some(status), ..Default::default() }
}

/// An OpenCode error object (`{name, data: {message}}`) as an `error` event.
fn error_event(error: &Value) -> EventData {
    let name = error.get("name").and_then(Value::as_str).map(str::to_string);
    let message = error
        .pointer("/data/message")
        .and_then(Value::as_str)
        .or_else(|| error.get("message").and_then(Value::as_str))
        .map(str::to_string)
        .or_else(|| name.clone())
        .unwrap_or_else(|| error.to_string());
    EventData::Error { message, code: name }
}
