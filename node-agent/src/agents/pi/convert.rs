//! pi's native lines (`pi --mode rpc` and `pi --mode json`) into universal events.
//!
//! pi streams an assistant message as `message_update`s, each naming one content
//! block (`contentIndex`) and carrying both the increment (`delta`) and the whole
//! partial message. The partial is not a reliable source of increments: in the
//! recorded transcripts it runs ahead of the deltas (it is serialized after later
//! chunks arrived), so text deltas come from `delta` and the completed text from the
//! block's final `content`. Tool output is the other way round: each
//! `tool_execution_update` repeats the whole output so far, so its delta is the new
//! suffix.
//!
//! Items: one per content block of an assistant message (text → message, thinking →
//! reasoning, toolCall → tool_call with pi's call id), one tool_result per tool
//! execution. Lines that carry nothing for a client's transcript (agent and turn
//! boundaries, the echo of the user's message, rpc acknowledgements) become `status`
//! items, so that every line is accounted for.
//!
//! An assistant message's `message_end` carries the usage of its model call (input
//! without the cached tokens, `cacheRead`, `cacheWrite`, `output`, and `cost.total`
//! in dollars); their sum is the turn's usage (see [`Converter::take_usage`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::agents::convert::{add_usage, count_at, unparsed};
use crate::universal::{EventData, Item, ItemKind, ItemStatus, Role, Usage};

/// What the converter remembers of the assistant message under way.
#[derive(Default)]
struct Message {
    /// Its number in the stream, for item ids.
    number: u64,
    /// Item id and kind of each content block that started.
    blocks: BTreeMap<u64, (String, ItemKind)>,
    /// Blocks already completed.
    completed: BTreeSet<u64>,
}

#[derive(Default)]
pub struct Converter {
    /// Prefixes item ids; the driver sets one per turn so that ids stay unique in a
    /// session across pi processes (`pi` for a lone transcript).
    prefix: String,
    /// Counts items that have no native id.
    counter: u64,
    messages: u64,
    message: Option<Message>,
    /// Tool output emitted so far, by call id.
    tool_output: BTreeMap<String, String>,
    /// The usage of the assistant messages that ended since the driver last took it.
    usage: Option<Usage>,
}

impl Converter {
    /// Ids from now on start with `prefix` (e.g. `turn-3`).
    pub fn set_prefix(&mut self, prefix: impl Into<String>) {
        self.prefix = prefix.into();
        self.counter = 0;
        self.messages = 0;
        self.message = None;
    }

    fn next_id(&mut self, what: &str) -> String {
        self.counter += 1;
        format!("{}-{what}-{}", self.prefix_or_default(), self.counter)
    }

    fn prefix_or_default(&self) -> &str {
        if self.prefix.is_empty() { "pi" } else { &self.prefix }
    }

    fn status(&mut self, text: impl Into<String>) -> EventData {
        let id = self.next_id("status");
        super::super::convert::status(id, text)
    }

    fn convert_value(&mut self, line: &Value) -> Option<Vec<EventData>> {
        let kind = line.get("type")?.as_str()?;
        let events = match kind {
            "session" => {
                let id = line.get("id").and_then(Value::as_str).unwrap_or("?");
                vec![self.status(format!("pi session {id}"))]
            }
            "agent_start" => vec![self.status("pi started working on the message")],
            "agent_end" => vec![self.status("pi finished the message")],
            "turn_start" => vec![self.status("model turn started")],
            "turn_end" => {
                let reason = line.pointer("/message/stopReason").and_then(Value::as_str).unwrap_or("unknown");
                vec![self.status(format!("model turn ended ({reason})"))]
            }
            "message_start" => self.message_start(line.get("message")?)?,
            "message_update" => self.message_update(line.get("assistantMessageEvent")?)?,
            "message_end" => self.message_end(line.get("message")?)?,
            "tool_execution_start" => self.tool_start(line)?,
            "tool_execution_update" => self.tool_update(line)?,
            "tool_execution_end" => self.tool_end(line)?,
            "response" => self.response(line)?,
            "queue_update" => vec![self.status("queued messages changed")],
            "compaction_start" => vec![self.status("compacting the conversation")],
            "compaction_end" => match line.get("errorMessage").and_then(Value::as_str) {
                Some(error) => vec![EventData::Error { message: format!("compaction failed: {error}"), code: None }],
                None => vec![self.status("compacted the conversation")],
            },
            "auto_retry_start" => {
                let error = line.get("errorMessage").and_then(Value::as_str).unwrap_or("a transient error");
                vec![self.status(format!("retrying after {error}"))]
            }
            "auto_retry_end" => match line.get("finalError").and_then(Value::as_str) {
                Some(error) => vec![EventData::Error { message: error.to_string(), code: None }],
                None => vec![self.status("retry succeeded")],
            },
            "extension_error" => {
                let error = line.get("error").and_then(Value::as_str).unwrap_or("an extension failed");
                vec![EventData::Error { message: error.to_string(), code: None }]
            }
            _ => return None,
        };
        Some(events)
    }

    fn message_start(&mut self, message: &Value) -> Option<Vec<EventData>> {
        let role = message.get("role")?.as_str()?;
        Some(match role {
            "assistant" => {
                self.messages += 1;
                self.message = Some(Message { number: self.messages, ..Default::default() });
                vec![self.status("assistant message started")]
            }
            // The session manager reports the user's message itself.
            "user" => vec![self.status("pi took the user's message")],
            "toolResult" => vec![self.status("tool result sent to the model")],
            _ => return None,
        })
    }

    fn message_update(&mut self, event: &Value) -> Option<Vec<EventData>> {
        let kind = event.get("type")?.as_str()?;
        let index = event.get("contentIndex").and_then(Value::as_u64);
        let block = |index: Option<u64>| {
            let index = index?;
            event.pointer(&format!("/partial/content/{index}")).cloned()
        };
        Some(match kind {
            "start" => vec![self.status("the model started answering")],
            "text_start" | "thinking_start" | "toolcall_start" => {
                let index = index?;
                let block = block(Some(index)).unwrap_or(Value::Null);
                vec![EventData::ItemStarted { item: self.start_block(index, &block, kind) }]
            }
            "text_delta" | "thinking_delta" | "toolcall_delta" => {
                let index = index?;
                let delta = event.get("delta").and_then(Value::as_str).unwrap_or_default().to_string();
                let started = self.message.as_ref().and_then(|m| m.blocks.get(&index)).map(|(id, _)| id.clone());
                match started {
                    Some(item_id) => vec![EventData::ItemDelta { item_id, delta }],
                    // A delta of a block whose start was not seen: start it now.
                    None => {
                        let block = block(Some(index)).unwrap_or(Value::Null);
                        let item = self.start_block(index, &block, kind);
                        let item_id = item.id.clone();
                        vec![EventData::ItemStarted { item }, EventData::ItemDelta { item_id, delta }]
                    }
                }
            }
            "text_end" | "thinking_end" => {
                let index = index?;
                let text = event.get("content").and_then(Value::as_str).map(str::to_string);
                let block = block(Some(index)).unwrap_or(Value::Null);
                let text = text.or_else(|| block_text(&block));
                vec![EventData::ItemCompleted { item: self.complete_block(index, &block, text) }]
            }
            "toolcall_end" => {
                let index = index?;
                let call = event.get("toolCall").cloned().or_else(|| block(Some(index))).unwrap_or(Value::Null);
                vec![EventData::ItemCompleted { item: self.complete_block(index, &call, None) }]
            }
            "done" => {
                let reason = event.get("reason").and_then(Value::as_str).unwrap_or("stop");
                vec![self.status(format!("the model finished ({reason})"))]
            }
            "error" => {
                let message =
                    event.pointer("/error/errorMessage").and_then(Value::as_str).unwrap_or("the model request failed");
                vec![EventData::Error { message: message.to_string(), code: None }]
            }
            _ => return None,
        })
    }

    /// The item of a content block that starts streaming.
    fn start_block(&mut self, index: u64, block: &Value, event: &str) -> Item {
        let kind = if event.starts_with("thinking") {
            ItemKind::Reasoning
        } else if event.starts_with("toolcall") {
            ItemKind::ToolCall
        } else {
            ItemKind::Message
        };
        let id = self.block_id(index, kind, block);
        let message = self.message.get_or_insert_with(Message::default);
        message.blocks.insert(index, (id.clone(), kind));
        let mut item = Item { id, kind, status: Some(ItemStatus::InProgress), ..Default::default() };
        match kind {
            ItemKind::ToolCall => item.tool = block.get("name").and_then(Value::as_str).map(str::to_string),
            _ => item.role = Some(Role::Assistant),
        }
        item
    }

    /// A tool call's id is pi's (its result names it); text and thinking blocks get
    /// ids of the message and the block's index.
    fn block_id(&mut self, index: u64, kind: ItemKind, block: &Value) -> String {
        if kind == ItemKind::ToolCall
            && let Some(id) = block.get("id").and_then(Value::as_str)
        {
            return id.to_string();
        }
        let number = match &self.message {
            Some(message) => message.number,
            None => {
                self.messages += 1;
                self.message = Some(Message { number: self.messages, ..Default::default() });
                self.messages
            }
        };
        format!("{}-msg-{number}-{index}", self.prefix_or_default())
    }

    fn complete_block(&mut self, index: u64, block: &Value, text: Option<String>) -> Item {
        let known = self.message.as_ref().and_then(|m| m.blocks.get(&index)).cloned();
        let (id, kind) = match known {
            Some(known) => known,
            None => {
                let kind = block_kind(block).unwrap_or(ItemKind::Message);
                let id = self.block_id(index, kind, block);
                (id, kind)
            }
        };
        if let Some(message) = self.message.as_mut() {
            message.completed.insert(index);
        }
        let mut item = Item { id, kind, status: Some(ItemStatus::Completed), ..Default::default() };
        match kind {
            ItemKind::ToolCall => {
                item.tool = block.get("name").and_then(Value::as_str).map(str::to_string);
                item.input = block.get("arguments").cloned();
            }
            _ => {
                item.role = Some(Role::Assistant);
                item.text = text.or_else(|| block_text(block));
            }
        }
        item
    }

    fn message_end(&mut self, message: &Value) -> Option<Vec<EventData>> {
        let role = message.get("role")?.as_str()?;
        match role {
            "assistant" => {
                if let Some(usage) = message.get("usage").filter(|u| u.is_object()) {
                    let usage = Usage {
                        input_tokens: count_at(usage, "/input"),
                        output_tokens: count_at(usage, "/output"),
                        cache_read_tokens: count_at(usage, "/cacheRead"),
                        cache_write_tokens: count_at(usage, "/cacheWrite"),
                        cost_usd: usage.pointer("/cost/total").and_then(Value::as_f64),
                    };
                    add_usage(&mut self.usage, usage);
                }
            }
            "user" => return Some(vec![self.status("the user's message is in the conversation")]),
            "toolResult" => return Some(vec![self.status("tool result is in the conversation")]),
            _ => return None,
        }
        if self.message.is_none() {
            self.messages += 1;
            self.message = Some(Message { number: self.messages, ..Default::default() });
        }
        // Blocks that did not stream their end complete here, from the final message.
        let mut events = Vec::new();
        let content = message.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
        for (index, block) in content.iter().enumerate() {
            let index = index as u64;
            let done = self.message.as_ref().is_some_and(|m| m.completed.contains(&index));
            if !done && block_kind(block).is_some() {
                let item = self.complete_block(index, block, None);
                events.push(EventData::ItemCompleted { item });
            }
        }
        if message.get("stopReason").and_then(Value::as_str) == Some("error") || message.get("errorMessage").is_some() {
            let error = message.get("errorMessage").and_then(Value::as_str).unwrap_or("the model request failed");
            events.push(EventData::Error { message: error.to_string(), code: None });
        }
        self.message = None;
        if events.is_empty() {
            events.push(self.status("assistant message ended"));
        }
        Some(events)
    }

    fn tool_start(&mut self, line: &Value) -> Option<Vec<EventData>> {
        let call_id = line.get("toolCallId")?.as_str()?.to_string();
        self.tool_output.insert(call_id.clone(), String::new());
        let item = Item {
            id: result_id(&call_id),
            kind: ItemKind::ToolResult,
            tool: line.get("toolName").and_then(Value::as_str).map(str::to_string),
            input: line.get("args").cloned(),
            call_id: Some(call_id),
            status: Some(ItemStatus::InProgress),
            ..Default::default()
        };
        Some(vec![EventData::ItemStarted { item }])
    }

    fn tool_update(&mut self, line: &Value) -> Option<Vec<EventData>> {
        let call_id = line.get("toolCallId")?.as_str()?.to_string();
        let output = line.get("partialResult").map(result_text).unwrap_or_default();
        let sent = self.tool_output.entry(call_id.clone()).or_default();
        // Each update repeats the output so far: the delta is what is new. Output that
        // does not extend what was sent (truncated, rewritten) is sent whole.
        let delta = match output.strip_prefix(sent.as_str()) {
            Some(suffix) => suffix.to_string(),
            None => output.clone(),
        };
        *sent = output;
        Some(vec![EventData::ItemDelta { item_id: result_id(&call_id), delta }])
    }

    fn tool_end(&mut self, line: &Value) -> Option<Vec<EventData>> {
        let call_id = line.get("toolCallId")?.as_str()?.to_string();
        self.tool_output.remove(&call_id);
        let failed = line.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let item = Item {
            id: result_id(&call_id),
            kind: ItemKind::ToolResult,
            tool: line.get("toolName").and_then(Value::as_str).map(str::to_string),
            call_id: Some(call_id),
            output: Some(line.get("result").map(result_text).unwrap_or_default()),
            status: Some(if failed { ItemStatus::Failed } else { ItemStatus::Completed }),
            ..Default::default()
        };
        Some(vec![EventData::ItemCompleted { item }])
    }

    /// An rpc response to a command the driver sent.
    fn response(&mut self, line: &Value) -> Option<Vec<EventData>> {
        let command = line.get("command").and_then(Value::as_str).unwrap_or("command");
        if line.get("success").and_then(Value::as_bool) == Some(false) {
            let error = line.get("error").and_then(Value::as_str).unwrap_or("no reason given");
            return Some(vec![EventData::Error { message: format!("pi refused {command}: {error}"), code: None }]);
        }
        let text = match line.pointer("/data/sessionId").and_then(Value::as_str) {
            Some(session) => format!("pi answered {command} (session {session})"),
            None => format!("pi accepted {command}"),
        };
        Some(vec![self.status(text)])
    }
}

fn result_id(call_id: &str) -> String {
    format!("{call_id}-result")
}

fn block_kind(block: &Value) -> Option<ItemKind> {
    match block.get("type")?.as_str()? {
        "text" => Some(ItemKind::Message),
        "thinking" => Some(ItemKind::Reasoning),
        "toolCall" => Some(ItemKind::ToolCall),
        _ => None,
    }
}

fn block_text(block: &Value) -> Option<String> {
    block.get("text").or_else(|| block.get("thinking")).and_then(Value::as_str).map(str::to_string)
}

/// The text parts of a tool result (`{content: [{type: text, text}]}`), joined.
fn result_text(result: &Value) -> String {
    match result.get("content") {
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        Some(Value::String(text)) => text.clone(),
        _ => String::new(),
    }
}

impl crate::agents::convert::Converter for Converter {
    fn convert(&mut self, line: &str) -> Vec<EventData> {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            return vec![unparsed("not a JSON line")];
        };
        match self.convert_value(&value) {
            Some(events) if !events.is_empty() => events,
            _ => vec![unparsed(match value.get("type").and_then(Value::as_str) {
                Some(kind) => format!("a pi line of type {kind:?} this converter does not know"),
                None => "a pi line without a type".to_string(),
            })],
        }
    }

    fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }
}
