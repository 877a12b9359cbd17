//! Gemini CLI's native output into universal events. Two dialects, told apart by
//! their shape, so that one converter reads either transcript:
//!
//! - the Agent Client Protocol of `gemini --acp` (JSON-RPC 2.0 lines: `session/update`
//!   notifications, `session/request_permission` requests, responses to the client's
//!   requests), which the driver speaks;
//! - `gemini -p ... -o stream-json` (`init`, `message`, `tool_use`, `tool_result`,
//!   `result`, `error`), its one-shot headless mode.
//!
//! Text comes in chunks: the first opens a message item (`item.started`), each is an
//! `item.delta`, and whatever comes next (a tool call, the end of the prompt)
//! completes it with the whole text.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::agents::convert::{add_usage, count_at, unparsed};
use crate::universal::{EventData, Item, ItemKind, ItemStatus, PermissionReply, PermissionRequest, Role, Usage};

/// A text item under way (an answer or reasoning), built from chunks.
struct Open {
    id: String,
    kind: ItemKind,
    text: String,
}

#[derive(Default)]
pub struct Converter {
    /// The turn under way, for item ids that stay unique across the processes of a
    /// session (the driver sets it; a transcript counts prompts).
    turn: u64,
    /// Items started so far, for ids.
    count: u64,
    open: Option<Open>,
    /// Tool calls seen, by id: what a later update or result lacks.
    calls: HashMap<String, Item>,
    /// The usage of the prompts answered since the driver last took it.
    usage: Option<Usage>,
}

impl Converter {
    /// Item ids from here on name turn `turn`.
    pub fn begin_turn(&mut self, turn: u64) {
        self.turn = turn;
    }

    fn next_id(&mut self, what: &str) -> String {
        self.count += 1;
        format!("t{}-{what}-{}", self.turn, self.count)
    }

    /// Completes the text item under way, if any.
    fn close(&mut self, events: &mut Vec<EventData>) {
        if let Some(open) = self.open.take() {
            let role = (open.kind == ItemKind::Message).then_some(Role::Assistant);
            let item = Item {
                id: open.id,
                kind: open.kind,
                role,
                text: Some(open.text),
                status: Some(ItemStatus::Completed),
                ..Default::default()
            };
            events.push(EventData::ItemCompleted { item });
        }
    }

    /// A chunk of assistant text or reasoning: opens an item when none of its kind is
    /// under way, then adds the chunk as a delta.
    fn chunk(&mut self, kind: ItemKind, text: &str, events: &mut Vec<EventData>) {
        if self.open.as_ref().is_some_and(|o| o.kind != kind) {
            self.close(events);
        }
        if self.open.is_none() {
            let id = self.next_id(if kind == ItemKind::Reasoning { "reasoning" } else { "message" });
            let role = (kind == ItemKind::Message).then_some(Role::Assistant);
            events.push(EventData::ItemStarted {
                item: Item { id: id.clone(), kind, role, status: Some(ItemStatus::InProgress), ..Default::default() },
            });
            self.open = Some(Open { id, kind, text: String::new() });
        }
        if let Some(open) = self.open.as_mut() {
            open.text.push_str(text);
            events.push(EventData::ItemDelta { item_id: open.id.clone(), delta: text.to_string() });
        }
    }

    /// A status line: something the agent reports that is not conversation.
    fn status(&mut self, text: String) -> EventData {
        let id = self.next_id("status");
        EventData::ItemCompleted {
            item: Item {
                id,
                kind: ItemKind::Status,
                text: Some(text),
                status: Some(ItemStatus::Completed),
                ..Default::default()
            },
        }
    }

    /// The events of a tool call that ended: the call, completed, and its result.
    fn finish_call(&mut self, id: &str, status: ItemStatus, output: Option<String>, events: &mut Vec<EventData>) {
        let mut call = self.calls.remove(id).unwrap_or_else(|| Item {
            id: id.to_string(),
            kind: ItemKind::ToolCall,
            ..Default::default()
        });
        call.status = Some(status);
        events.push(EventData::ItemCompleted { item: call });
        let result = Item {
            id: format!("{id}-result"),
            kind: ItemKind::ToolResult,
            call_id: Some(id.to_string()),
            output,
            status: Some(status),
            ..Default::default()
        };
        events.push(EventData::ItemCompleted { item: result });
    }

    /// The result of a tool call the user did not allow (the CLI sends no update for it).
    pub fn denied(&mut self, id: &str) -> Vec<EventData> {
        let mut events = Vec::new();
        self.finish_call(id, ItemStatus::Denied, Some("permission denied".into()), &mut events);
        events
    }

    fn acp(&mut self, message: &Value) -> Vec<EventData> {
        let mut events = Vec::new();
        match message.get("method").and_then(Value::as_str) {
            Some("session/update") => {
                self.update(message.pointer("/params/update").unwrap_or(&Value::Null), &mut events)
            }
            Some("session/request_permission") => {
                self.permission(message.get("params").unwrap_or(&Value::Null), &mut events)
            }
            Some(method) => {
                events.push(unparsed(format!("gemini asked for {method:?}, which this client does not offer")))
            }
            None => self.response(message, &mut events),
        }
        events
    }

    fn update(&mut self, update: &Value, events: &mut Vec<EventData>) {
        let text = || update.pointer("/content/text").and_then(Value::as_str);
        match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("agent_message_chunk") => match text() {
                Some(text) => self.chunk(ItemKind::Message, text, events),
                None => events.push(unparsed("a message chunk that is not text")),
            },
            Some("agent_thought_chunk") => match text() {
                Some(text) => self.chunk(ItemKind::Reasoning, text, events),
                None => events.push(unparsed("a thought chunk that is not text")),
            },
            // History replayed by `session/load` (the driver skips these: the session's
            // log has them already).
            Some("user_message_chunk") => {
                self.close(events);
                let id = self.next_id("user");
                let item = Item {
                    id,
                    kind: ItemKind::Message,
                    role: Some(Role::User),
                    text: text().map(str::to_string),
                    ..Default::default()
                };
                events.push(EventData::ItemCompleted { item });
            }
            Some("tool_call") => {
                self.close(events);
                let Some(id) = update.get("toolCallId").and_then(Value::as_str) else {
                    events.push(unparsed("a tool call without an id"));
                    return;
                };
                let call = tool_call(id, update);
                match terminal_status(update) {
                    Some(status) => {
                        self.calls.insert(id.to_string(), call);
                        self.finish_call(id, status, content_text(update), events);
                    }
                    None => {
                        self.calls.insert(id.to_string(), call.clone());
                        events.push(EventData::ItemStarted { item: call });
                    }
                }
            }
            Some("tool_call_update") => {
                self.close(events);
                let Some(id) = update.get("toolCallId").and_then(Value::as_str) else {
                    events.push(unparsed("a tool call update without an id"));
                    return;
                };
                match terminal_status(update) {
                    Some(status) => self.finish_call(id, status, content_text(update), events),
                    None => {
                        // Still under way: the call as it stands now.
                        let call = self.calls.entry(id.to_string()).or_insert_with(|| tool_call(id, update));
                        call.status = Some(ItemStatus::InProgress);
                        events.push(EventData::ItemStarted { item: call.clone() });
                    }
                }
            }
            Some("plan") => {
                self.close(events);
                let entries: Vec<String> = update
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        let status = e.get("status").and_then(Value::as_str).unwrap_or("pending");
                        format!("[{status}] {}", e.get("content").and_then(Value::as_str).unwrap_or_default())
                    })
                    .collect();
                events.push(self.status(format!("plan:\n{}", entries.join("\n"))));
            }
            Some("available_commands_update") => {
                // Also the end of a replayed history: what follows is new.
                self.close(events);
                let count = update.get("availableCommands").and_then(Value::as_array).map_or(0, Vec::len);
                events.push(self.status(format!("{count} slash commands available")));
            }
            Some("current_mode_update") => {
                self.close(events);
                let mode = update.get("currentModeId").and_then(Value::as_str).unwrap_or("unknown");
                events.push(self.status(format!("approval mode: {mode}")));
            }
            Some(other) => events.push(unparsed(format!("an unknown session update {other:?}"))),
            None => events.push(unparsed("a session update without a type")),
        }
    }

    /// A permission request: the tool call it is about starts, and the request
    /// (named by the tool call's id, unique in the session) is announced.
    fn permission(&mut self, params: &Value, events: &mut Vec<EventData>) {
        self.close(events);
        let tool_call_value = params.get("toolCall").unwrap_or(&Value::Null);
        let Some(id) = tool_call_value.get("toolCallId").and_then(Value::as_str) else {
            events.push(unparsed("a permission request without a tool call id"));
            return;
        };
        let mut call = tool_call(id, tool_call_value);
        call.status = Some(ItemStatus::InProgress);
        self.calls.insert(id.to_string(), call.clone());
        let options = reply_options(params);
        let request = PermissionRequest {
            id: id.to_string(),
            tool: call.tool.clone().unwrap_or_default(),
            input: call.input.clone().unwrap_or(Value::Null),
            options,
            item_id: Some(id.to_string()),
        };
        events.push(EventData::ItemStarted { item: call });
        events.push(EventData::PermissionRequested(request));
    }

    /// A response to one of the client's requests.
    fn response(&mut self, message: &Value, events: &mut Vec<EventData>) {
        self.close(events);
        if let Some(error) = message.get("error") {
            let mut text =
                error.get("message").and_then(Value::as_str).unwrap_or("gemini answered with an error").to_string();
            if let Some(details) = error.pointer("/data/details").and_then(Value::as_str) {
                text = format!("{text}: {details}");
            }
            events.push(EventData::Error { message: text, code: Some("agent_error".into()) });
            return;
        }
        let Some(result) = message.get("result") else {
            events.push(unparsed("a JSON-RPC message that is neither a request, a notification nor a response"));
            return;
        };
        if let Some(reason) = result.get("stopReason").and_then(Value::as_str) {
            // The end of a prompt: the next prompt's items get the next turn's ids.
            self.turn += 1;
            if let Some(usage) = prompt_usage(result) {
                add_usage(&mut self.usage, usage);
            }
            if events.is_empty() {
                events.push(self.status(format!("stop reason: {reason}")));
            }
        } else if let Some(info) = result.get("agentInfo") {
            let name = info.get("name").and_then(Value::as_str).unwrap_or("gemini");
            let version = info.get("version").and_then(Value::as_str).unwrap_or("?");
            events.push(self.status(format!("{name} {version}")));
        } else if let Some(session) = result.get("sessionId").and_then(Value::as_str) {
            events.push(self.status(format!("session {session}")));
        } else if let Some(mode) = result.pointer("/modes/currentModeId").and_then(Value::as_str) {
            events.push(self.status(format!("session loaded, approval mode {mode}")));
        } else {
            events.push(self.status("done".into()));
        }
    }

    fn stream_json(&mut self, message: &Value, kind: &str) -> Vec<EventData> {
        let mut events = Vec::new();
        let str_of = |key: &str| message.get(key).and_then(Value::as_str);
        match kind {
            "init" => {
                self.close(&mut events);
                self.turn += 1;
                let session = str_of("session_id").unwrap_or("?");
                let model = str_of("model").unwrap_or("?");
                events.push(self.status(format!("session {session}, model {model}")));
            }
            "message" => {
                let content = str_of("content").unwrap_or_default();
                match str_of("role") {
                    Some("assistant") if message.get("delta").and_then(Value::as_bool) == Some(true) => {
                        self.chunk(ItemKind::Message, content, &mut events)
                    }
                    Some("assistant") => {
                        self.close(&mut events);
                        let id = self.next_id("message");
                        let item = Item {
                            id,
                            kind: ItemKind::Message,
                            role: Some(Role::Assistant),
                            text: Some(content.to_string()),
                            status: Some(ItemStatus::Completed),
                            ..Default::default()
                        };
                        events.push(EventData::ItemCompleted { item });
                    }
                    Some("user") => {
                        self.close(&mut events);
                        let id = self.next_id("user");
                        let item = Item {
                            id,
                            kind: ItemKind::Message,
                            role: Some(Role::User),
                            text: Some(content.to_string()),
                            ..Default::default()
                        };
                        events.push(EventData::ItemCompleted { item });
                    }
                    other => events.push(unparsed(format!("a message of role {other:?}"))),
                }
            }
            "tool_use" => {
                self.close(&mut events);
                let Some(id) = str_of("tool_id") else {
                    events.push(unparsed("a tool use without an id"));
                    return events;
                };
                let call = Item {
                    id: id.to_string(),
                    kind: ItemKind::ToolCall,
                    tool: str_of("tool_name").map(str::to_string),
                    input: message.get("parameters").cloned(),
                    status: Some(ItemStatus::InProgress),
                    ..Default::default()
                };
                self.calls.insert(id.to_string(), call.clone());
                events.push(EventData::ItemStarted { item: call });
            }
            "tool_result" => {
                self.close(&mut events);
                let Some(id) = str_of("tool_id") else {
                    events.push(unparsed("a tool result without an id"));
                    return events;
                };
                let status =
                    if str_of("status") == Some("success") { ItemStatus::Completed } else { ItemStatus::Failed };
                let output = match message.get("output") {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                    None => message.pointer("/error/message").and_then(Value::as_str).map(str::to_string),
                };
                self.finish_call(id, status, output, &mut events);
            }
            "result" => {
                self.close(&mut events);
                if let Some(stats) = message.get("stats").filter(|s| s.is_object()) {
                    // `input` is the input that was not cached (`input_tokens` counts it in).
                    let cached = count_at(stats, "/cached");
                    let input = match stats.get("input").and_then(Value::as_u64) {
                        Some(input) => input,
                        None => count_at(stats, "/input_tokens").saturating_sub(cached),
                    };
                    let usage = Usage {
                        input_tokens: input,
                        output_tokens: count_at(stats, "/output_tokens"),
                        cache_read_tokens: cached,
                        ..Usage::default()
                    };
                    add_usage(&mut self.usage, usage);
                }
                match str_of("status") {
                    Some("success") | None => {
                        if events.is_empty() {
                            events.push(self.status("result: success".into()));
                        }
                    }
                    Some(status) => {
                        let message = message
                            .pointer("/error/message")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("gemini ended with {status}"), str::to_string);
                        events.push(EventData::Error { message, code: Some("agent_error".into()) });
                    }
                }
            }
            "error" => {
                self.close(&mut events);
                let message = str_of("message").map_or_else(|| message.to_string(), str::to_string);
                let code = str_of("severity").map(|s| format!("agent_{s}")).or(Some("agent_error".into()));
                events.push(EventData::Error { message, code });
            }
            other => events.push(unparsed(format!("an unknown stream-json type {other:?}"))),
        }
        events
    }
}

/// The usage of a `session/prompt` answer: ACP's `usage` where the CLI gives it
/// (its `inputTokens` counts the cached ones in: they are taken out), else Gemini
/// CLI's own `_meta.quota.token_count`, which has no cached count.
fn prompt_usage(result: &Value) -> Option<Usage> {
    if let Some(usage) = result.get("usage").filter(|u| u.is_object()) {
        let cache_read = count_at(usage, "/cachedReadTokens");
        let cache_write = count_at(usage, "/cachedWriteTokens");
        return Some(Usage {
            input_tokens: count_at(usage, "/inputTokens").saturating_sub(cache_read).saturating_sub(cache_write),
            output_tokens: count_at(usage, "/outputTokens"),
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            cost_usd: None,
        });
    }
    let counts = result.pointer("/_meta/quota/token_count").filter(|c| c.is_object())?;
    Some(Usage {
        input_tokens: count_at(counts, "/input_tokens"),
        output_tokens: count_at(counts, "/output_tokens"),
        ..Usage::default()
    })
}

impl crate::agents::convert::Converter for Converter {
    fn convert(&mut self, line: &str) -> Vec<EventData> {
        let message: Value = match serde_json::from_str(line) {
            Ok(message) => message,
            Err(e) => return vec![unparsed(format!("not JSON: {e}"))],
        };
        if message.get("jsonrpc").is_some() {
            return self.acp(&message);
        }
        match message.get("type").and_then(Value::as_str) {
            Some(kind) => {
                let kind = kind.to_string();
                self.stream_json(&message, &kind)
            }
            None => vec![unparsed("neither a JSON-RPC message nor a stream-json event")],
        }
    }

    fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }
}

/// A tool call as an item: the tool's name is the prefix of Gemini CLI's call ids
/// (`run_shell_command__run_shell_command_<time>_0`), else the ACP kind; the input is
/// what ACP shows (the title is the command line for a shell call).
fn tool_call(id: &str, value: &Value) -> Item {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("other");
    let tool = match id.split_once("__") {
        Some((name, _)) if !name.is_empty() => name.to_string(),
        _ => kind.to_string(),
    };
    let title = value.get("title").and_then(Value::as_str).unwrap_or_default();
    let mut input = json!({"title": title, "kind": kind});
    if kind == "execute" {
        input["command"] = json!(title);
    }
    if let Some(text) = content_text(value) {
        input["description"] = json!(text);
    }
    if let Some(locations) = value.get("locations").and_then(Value::as_array).filter(|l| !l.is_empty()) {
        input["locations"] = Value::Array(locations.clone());
    }
    let status = match value.get("status").and_then(Value::as_str) {
        Some("completed") => ItemStatus::Completed,
        Some("failed") => ItemStatus::Failed,
        _ => ItemStatus::InProgress,
    };
    Item {
        id: id.to_string(),
        kind: ItemKind::ToolCall,
        tool: Some(tool),
        input: Some(input),
        status: Some(status),
        ..Default::default()
    }
}

/// `completed` or `failed`: the call is over.
fn terminal_status(value: &Value) -> Option<ItemStatus> {
    match value.get("status").and_then(Value::as_str) {
        Some("completed") => Some(ItemStatus::Completed),
        Some("failed") => Some(ItemStatus::Failed),
        _ => None,
    }
}

/// The text of an ACP tool call's `content` blocks (diffs shown by their path).
fn content_text(value: &Value) -> Option<String> {
    let parts: Vec<String> = value
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|block| match block.get("type").and_then(Value::as_str) {
            Some("content") => block.pointer("/content/text").and_then(Value::as_str).map(str::to_string),
            Some("diff") => block.get("path").and_then(Value::as_str).map(|p| format!("diff of {p}")),
            _ => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The universal replies a permission request offers, from its options' kinds.
fn reply_options(params: &Value) -> Vec<PermissionReply> {
    let kinds: Vec<&str> = params
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("kind").and_then(Value::as_str))
        .collect();
    let mut options = Vec::new();
    if kinds.contains(&"allow_once") {
        options.push(PermissionReply::Once);
    }
    if kinds.contains(&"allow_always") {
        options.push(PermissionReply::Always);
    }
    if kinds.iter().any(|k| k.starts_with("reject")) {
        options.push(PermissionReply::Reject);
    }
    options
}

/// The option of a permission request that carries `reply`: its id, by its ACP kind
/// (`allow_once`, `allow_always`, `reject_once`), falling back on the nearest kind.
pub fn option_for(params: &Value, reply: PermissionReply) -> Option<String> {
    let options = params.get("options").and_then(Value::as_array)?;
    let wanted: &[&str] = match reply {
        PermissionReply::Once => &["allow_once", "allow_always"],
        PermissionReply::Always => &["allow_always", "allow_once"],
        PermissionReply::Reject => &["reject_once", "reject_always"],
    };
    wanted.iter().find_map(|kind| {
        options
            .iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
            .and_then(|o| o.get("optionId"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::convert::Converter as _;

    #[test]
    fn chunks_open_a_message_that_the_end_of_the_prompt_completes() {
        let mut c = Converter::default();
        c.begin_turn(2);
        let chunk = |t: &str| {
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": t}}}}).to_string()
        };
        let first = c.convert(&chunk("hel"));
        assert!(
            matches!(&first[..], [EventData::ItemStarted { item }, EventData::ItemDelta { delta, .. }] if item.id == "t2-message-1" && delta == "hel")
        );
        assert!(
            matches!(&c.convert(&chunk("lo"))[..], [EventData::ItemDelta { item_id, .. }] if item_id == "t2-message-1")
        );
        let end = c.convert(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#);
        assert!(
            matches!(&end[..], [EventData::ItemCompleted { item }] if item.text.as_deref() == Some("hello") && item.role == Some(Role::Assistant))
        );
        // The next prompt's items are the next turn's.
        assert!(
            matches!(&c.convert(&chunk("x"))[..], [EventData::ItemStarted { item }, _] if item.id.starts_with("t3-"))
        );
    }

    #[test]
    fn a_permission_request_starts_its_call_and_asks() {
        let mut c = Converter::default();
        let line = r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s","options":[{"optionId":"proceed_always","name":"Allow for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"run_shell_command__run_shell_command_1_0","status":"pending","title":"touch a.txt","content":[{"type":"content","content":{"type":"text","text":"[current working directory /w] (run a command)"}}],"locations":[],"kind":"execute"}}}"#;
        let events = c.convert(line);
        let [EventData::ItemStarted { item }, EventData::PermissionRequested(request)] = &events[..] else {
            panic!("{events:?}")
        };
        assert_eq!(item.tool.as_deref(), Some("run_shell_command"));
        assert_eq!(request.id, "run_shell_command__run_shell_command_1_0");
        assert_eq!(request.input["command"], "touch a.txt");
        assert_eq!(request.options, vec![PermissionReply::Once, PermissionReply::Always, PermissionReply::Reject]);
        let params: Value = serde_json::from_str::<Value>(line).unwrap()["params"].clone();
        assert_eq!(option_for(&params, PermissionReply::Once).as_deref(), Some("proceed_once"));
        assert_eq!(option_for(&params, PermissionReply::Always).as_deref(), Some("proceed_always"));
        assert_eq!(option_for(&params, PermissionReply::Reject).as_deref(), Some("cancel"));
        let denied = c.denied("run_shell_command__run_shell_command_1_0");
        assert!(
            matches!(&denied[..], [EventData::ItemCompleted { item: call }, EventData::ItemCompleted { item: result }]
            if call.tool.as_deref() == Some("run_shell_command") && result.status == Some(ItemStatus::Denied))
        );
    }

    #[test]
    fn errors_and_strangers() {
        let mut c = Converter::default();
        let events = c.convert(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"Internal error","data":{"details":"Invalid session identifier"}}}"#);
        assert!(
            matches!(&events[..], [EventData::Error { message, .. }] if message == "Internal error: Invalid session identifier")
        );
        for line in [
            "not json",
            "{}",
            r#"{"type":"mystery"}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"new_thing"}}}"#,
        ] {
            assert!(matches!(&c.convert(line)[..], [EventData::AgentUnparsed { .. }]), "{line}");
        }
    }
}
