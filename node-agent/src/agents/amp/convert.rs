//! Amp's `--stream-json` lines (the pure-JS CLI's Claude-Code-like format) into
//! universal events: `system/init`, `user` (the prompt, or tool results), `assistant`
//! (whole messages: amp does not stream deltas in this format) and `result`.
//!
//! Each `assistant` message carries the usage of its model call (Anthropic's counts,
//! cached input apart); a `result` carries none, so the turn's usage is their sum
//! (see [`Converter::take_usage`]).

use serde_json::Value;

use crate::agents::convert::{add_usage, count_at, unparsed};
use crate::universal::{EventData, Item, ItemKind, ItemStatus, Role, Usage};

/// What amp says in a `result` when a tool needs an approval `-x` cannot ask for.
pub const APPROVAL_REQUIRED: &str = "require user approval";

#[derive(Default)]
pub struct Converter {
    /// Prefixes item ids; the driver sets one per turn (`amp` for a lone transcript).
    prefix: String,
    counter: u64,
    /// The usage of the `assistant` messages since the driver last took it.
    usage: Option<Usage>,
}

impl Converter {
    pub fn set_prefix(&mut self, prefix: impl Into<String>) {
        self.prefix = prefix.into();
        self.counter = 0;
    }

    fn next_id(&mut self, what: &str) -> String {
        self.counter += 1;
        let prefix = if self.prefix.is_empty() { "amp" } else { &self.prefix };
        format!("{prefix}-{what}-{}", self.counter)
    }

    fn status(&mut self, text: impl Into<String>) -> EventData {
        let id = self.next_id("status");
        super::super::convert::status(id, text)
    }

    fn convert_value(&mut self, line: &Value) -> Option<Vec<EventData>> {
        match line.get("type")?.as_str()? {
            "system" => match line.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    let thread = line.get("session_id").and_then(Value::as_str).unwrap_or("?");
                    Some(vec![self.status(format!("amp thread {thread}"))])
                }
                _ => None,
            },
            "user" => self.user(line.pointer("/message/content")?),
            "assistant" => {
                if let Some(usage) = line.pointer("/message/usage").filter(|u| u.is_object()) {
                    let usage = Usage {
                        input_tokens: count_at(usage, "/input_tokens"),
                        output_tokens: count_at(usage, "/output_tokens"),
                        cache_read_tokens: count_at(usage, "/cache_read_input_tokens"),
                        cache_write_tokens: count_at(usage, "/cache_creation_input_tokens"),
                        cost_usd: None,
                    };
                    add_usage(&mut self.usage, usage);
                }
                self.assistant(line.pointer("/message/content")?.as_array()?)
            }
            "result" => Some(vec![self.result(line)]),
            _ => None,
        }
    }

    /// The prompt (reported by the session manager itself) or tool results.
    fn user(&mut self, content: &Value) -> Option<Vec<EventData>> {
        let blocks = match content {
            Value::String(_) => return Some(vec![self.status("amp took the user's message")]),
            Value::Array(blocks) => blocks,
            _ => return None,
        };
        let mut events = Vec::new();
        let mut prompt = false;
        for block in blocks {
            match block.get("type").and_then(Value::as_str)? {
                "tool_result" => {
                    let call_id = block.get("tool_use_id").and_then(Value::as_str)?.to_string();
                    let failed = block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                    let item = Item {
                        id: format!("{call_id}-result"),
                        kind: ItemKind::ToolResult,
                        call_id: Some(call_id),
                        output: Some(tool_output(block.get("content").unwrap_or(&Value::Null))),
                        status: Some(if failed { ItemStatus::Failed } else { ItemStatus::Completed }),
                        ..Default::default()
                    };
                    events.push(EventData::ItemCompleted { item });
                }
                "text" | "image" => prompt = true,
                _ => return None,
            }
        }
        if prompt {
            events.push(self.status("amp took the user's message"));
        }
        Some(events)
    }

    fn assistant(&mut self, blocks: &[Value]) -> Option<Vec<EventData>> {
        let mut events = Vec::new();
        for block in blocks {
            let item = match block.get("type").and_then(Value::as_str)? {
                "text" => Item {
                    id: self.next_id("message"),
                    kind: ItemKind::Message,
                    role: Some(Role::Assistant),
                    text: block.get("text").and_then(Value::as_str).map(str::to_string),
                    status: Some(ItemStatus::Completed),
                    ..Default::default()
                },
                "thinking" => Item {
                    id: self.next_id("reasoning"),
                    kind: ItemKind::Reasoning,
                    text: block.get("thinking").and_then(Value::as_str).map(str::to_string),
                    status: Some(ItemStatus::Completed),
                    ..Default::default()
                },
                "tool_use" => Item {
                    id: block.get("id").and_then(Value::as_str)?.to_string(),
                    kind: ItemKind::ToolCall,
                    tool: block.get("name").and_then(Value::as_str).map(str::to_string),
                    input: block.get("input").cloned(),
                    status: Some(ItemStatus::Completed),
                    ..Default::default()
                },
                _ => return None,
            };
            events.push(EventData::ItemCompleted { item });
        }
        if events.is_empty() {
            events.push(self.status("amp sent an empty message"));
        }
        Some(events)
    }

    fn result(&mut self, line: &Value) -> EventData {
        let failed = line.get("is_error").and_then(Value::as_bool).unwrap_or(false);
        if !failed {
            let turns = line.get("num_turns").and_then(Value::as_u64).unwrap_or(0);
            return self.status(format!("amp finished ({turns} model turns)"));
        }
        let message = line
            .get("error")
            .or_else(|| line.get("result"))
            .and_then(Value::as_str)
            .unwrap_or("amp failed")
            .to_string();
        // `-x` cannot ask: a tool that needs an approval is refused.
        let code = message.contains(APPROVAL_REQUIRED).then(|| "permission_denied".to_string());
        EventData::Error { message, code }
    }
}

/// A tool result's text: amp's Bash answers `{"output": .., "exitCode": ..}` as a
/// JSON string, shown as its output; anything else as it is.
fn tool_output(content: &Value) -> String {
    match content {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(object)) if object.get("output").is_some_and(Value::is_string) => {
                object.get("output").and_then(Value::as_str).unwrap_or_default().to_string()
            }
            _ => text.clone(),
        },
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        Value::Null => String::new(),
        other => other.to_string(),
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
                Some(kind) => format!("an amp line of type {kind:?} this converter does not know"),
                None => "an amp line without a type".to_string(),
            })],
        }
    }

    fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }
}
