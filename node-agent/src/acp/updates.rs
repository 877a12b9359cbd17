//! The universal events of a session as ACP `session/update`s: what an editor shows
//! of a conversation. Pure: one [`Updates`] per session remembers what it has shown
//! of each item (so that a completed item adds only what its deltas did not), and
//! turns each event into the updates it means, in order.
//!
//! | universal event | ACP update |
//! |---|---|
//! | assistant message: started with text, deltas, completed | `agent_message_chunk` (each piece once) |
//! | reasoning item | `agent_thought_chunk` |
//! | user message (replayed history only) | `user_message_chunk` |
//! | tool call started or completed | `tool_call`, then `tool_call_update` |
//! | tool result | `tool_call_update` of its call: status and output |
//! | file change | `tool_call` of kind `edit` with the file's location |
//! | a todo tool's list (Claude's `TodoWrite`, Codex's `update_plan`) | `plan` |
//! | permission request | `session/request_permission` (not an update: see `mod.rs`) |

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::universal::{EventData, Item, ItemKind, ItemStatus, PermissionReply, PermissionRequest, Role, TurnStatus};

/// The most item ids remembered: a conversation's items are far fewer; past this the
/// oldest knowledge is dropped (a completed item then shows its whole text again).
const MAX_ITEMS: usize = 4096;

#[derive(Default)]
pub struct Updates {
    /// Per item id: its kind and how much of its text was shown.
    items: HashMap<String, Shown>,
    /// Tool calls announced (`tool_call` sent), so that later news is an update.
    calls: std::collections::HashSet<String>,
    /// Of those, the ones not finished yet, oldest first: a turn that ends cut short
    /// or failed marks them failed, so that no editor shows them running for ever.
    open: Vec<String>,
}

struct Shown {
    kind: ItemKind,
    role: Option<Role>,
    text: String,
}

impl Updates {
    /// The updates `event` means. `replay`: the history of a loaded session, where the
    /// user's own messages are shown too (live, the editor shows what it sent).
    pub fn of(&mut self, event: &EventData, replay: bool) -> Vec<Value> {
        if self.items.len() > MAX_ITEMS {
            self.items.clear();
        }
        match event {
            EventData::ItemStarted { item } => self.started(item, replay),
            EventData::ItemDelta { item_id, delta } => self.delta(item_id, delta),
            EventData::ItemCompleted { item } => self.completed(item, replay),
            EventData::TurnEnded { status, .. } => {
                let open = std::mem::take(&mut self.open);
                if *status == TurnStatus::Completed {
                    return Vec::new();
                }
                open.into_iter()
                    .map(|id| json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "failed"}))
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// Notes whether the call `id` is still under way after news of `status`.
    fn track(&mut self, id: &str, status: Option<&str>) {
        let finished = matches!(status, Some("completed" | "failed"));
        let known = self.open.iter().position(|o| o == id);
        match (finished, known) {
            (true, Some(at)) => {
                self.open.remove(at);
            }
            (false, None) if self.open.len() < MAX_ITEMS => self.open.push(id.to_string()),
            _ => {}
        }
    }

    fn started(&mut self, item: &Item, replay: bool) -> Vec<Value> {
        match item.kind {
            ItemKind::Message | ItemKind::Reasoning => {
                let text = item.text.clone().unwrap_or_default();
                self.items.insert(item.id.clone(), Shown { kind: item.kind, role: item.role, text: text.clone() });
                chunk(item.kind, item.role, &text, replay).into_iter().collect()
            }
            ItemKind::ToolCall => {
                self.items.insert(item.id.clone(), Shown { kind: item.kind, role: None, text: String::new() });
                self.calls.insert(item.id.clone());
                let call = tool_call(item);
                self.track(&item.id, call["status"].as_str());
                plan_of(item).into_iter().chain([call]).collect()
            }
            _ => Vec::new(),
        }
    }

    fn delta(&mut self, item_id: &str, delta: &str) -> Vec<Value> {
        // A delta of an item never announced is not text to show: an agent's status
        // item (Claude's stop reason), say. A message's text shows when it completes.
        let Some(shown) = self.items.get_mut(item_id) else { return Vec::new() };
        match shown.kind {
            ItemKind::Message | ItemKind::Reasoning => {
                shown.text.push_str(delta);
                chunk(shown.kind, shown.role, delta, false).into_iter().collect()
            }
            // A tool call's arguments streaming in: shown whole when it completes.
            _ => Vec::new(),
        }
    }

    fn completed(&mut self, item: &Item, replay: bool) -> Vec<Value> {
        match item.kind {
            ItemKind::Message | ItemKind::Reasoning => {
                let text = item.text.as_deref().unwrap_or_default();
                let rest = match self.items.remove(&item.id) {
                    // What the deltas did not show: all of it when they showed something else.
                    Some(shown) => text.strip_prefix(shown.text.as_str()).unwrap_or(text).to_string(),
                    None => text.to_string(),
                };
                let role = item.role;
                chunk(item.kind, role, &rest, replay).into_iter().collect()
            }
            ItemKind::ToolCall => {
                self.items.remove(&item.id);
                if self.calls.contains(&item.id) {
                    let mut update = json!({"sessionUpdate": "tool_call_update", "toolCallId": item.id});
                    if let Some(input) = &item.input {
                        update["rawInput"] = input.clone();
                        update["title"] = json!(title(item));
                    }
                    if let Some(status) = item.status {
                        update["status"] = json!(status_of(status));
                    }
                    self.track(&item.id, update["status"].as_str());
                    plan_of(item).into_iter().chain([update]).collect()
                } else {
                    self.calls.insert(item.id.clone());
                    let call = tool_call(item);
                    self.track(&item.id, call["status"].as_str());
                    plan_of(item).into_iter().chain([call]).collect()
                }
            }
            ItemKind::ToolResult => {
                let Some(call) = item.call_id.clone() else { return Vec::new() };
                let status = match item.status {
                    Some(ItemStatus::Failed | ItemStatus::Denied) => "failed",
                    _ => "completed",
                };
                let mut update = json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status});
                if let Some(output) = &item.output {
                    update["content"] = json!([{"type": "content", "content": {"type": "text", "text": output}}]);
                    update["rawOutput"] = json!({"output": output});
                }
                self.track(&call, Some(status));
                if self.calls.insert(call.clone()) {
                    // A result of a call never announced: announce it first.
                    let call_item =
                        Item { id: call, kind: ItemKind::ToolCall, tool: item.tool.clone(), ..Default::default() };
                    return vec![tool_call(&call_item), update];
                }
                vec![update]
            }
            ItemKind::FileChange => {
                let path = item.path.clone().unwrap_or_default();
                let mut call = json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": item.id,
                    "title": format!("Edit {path}"),
                    "kind": "edit",
                    "status": "completed",
                });
                if !path.is_empty() {
                    call["locations"] = json!([{"path": path}]);
                }
                vec![call]
            }
            ItemKind::Status => Vec::new(),
        }
    }
}

/// A piece of text of a message or of reasoning, as its chunk; `None` when empty, or
/// for a user's message shown live.
fn chunk(kind: ItemKind, role: Option<Role>, text: &str, replay: bool) -> Option<Value> {
    if text.is_empty() {
        return None;
    }
    let update = match (kind, role) {
        (ItemKind::Reasoning, _) => "agent_thought_chunk",
        (_, Some(Role::User)) if replay => "user_message_chunk",
        (_, Some(Role::User) | Some(Role::System)) => return None,
        _ => "agent_message_chunk",
    };
    Some(json!({"sessionUpdate": update, "content": {"type": "text", "text": text}}))
}

/// A tool call as ACP announces one.
fn tool_call(item: &Item) -> Value {
    let mut call = json!({
        "sessionUpdate": "tool_call",
        "toolCallId": item.id,
        "title": title(item),
        "kind": kind_of(item.tool.as_deref().unwrap_or_default()),
        "status": item.status.map_or("pending", status_of),
    });
    if let Some(input) = &item.input {
        call["rawInput"] = input.clone();
        if let Some(path) = path_in(input) {
            call["locations"] = json!([{"path": path}]);
        }
    }
    call
}

/// What a person reads of a tool call: the command it runs, the file it touches, or
/// the tool's name.
fn title(item: &Item) -> String {
    let tool = item.tool.as_deref().unwrap_or("tool");
    let input = item.input.as_ref();
    if let Some(command) = input.and_then(|i| i.get("command")) {
        let command = match command {
            Value::String(s) => s.clone(),
            Value::Array(words) => words.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "),
            _ => String::new(),
        };
        if !command.is_empty() {
            return format!("`{}`", cut(&command, 200));
        }
    }
    match input.and_then(path_in) {
        Some(path) => format!("{tool} {}", cut(&path, 200)),
        None => tool.to_string(),
    }
}

fn path_in(input: &Value) -> Option<String> {
    ["file_path", "path", "filePath", "absolute_path"]
        .iter()
        .find_map(|key| input.get(*key).and_then(Value::as_str))
        .map(str::to_string)
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// ACP's kind of a tool, from its name in any agent.
fn kind_of(tool: &str) -> &'static str {
    let tool = tool.to_ascii_lowercase();
    let tool = tool.rsplit("__").next().unwrap_or(&tool);
    match tool {
        "bash" | "shell" | "exec" | "exec_command" | "command" | "run_shell_command" | "local_shell" => "execute",
        "read" | "view" | "read_file" | "read_many_files" | "cat" => "read",
        "edit" | "write" | "multiedit" | "apply_patch" | "str_replace" | "write_file" | "replace" | "patch"
        | "notebookedit" | "create" => "edit",
        "grep" | "glob" | "search" | "find" | "ls" | "list" | "list_directory" | "search_file_content" | "codebase" => {
            "search"
        }
        "webfetch" | "fetch" | "web_fetch" | "websearch" | "web_search" | "google_web_search" => "fetch",
        "think" | "todowrite" | "update_plan" | "todo_write" => "think",
        "delete" | "rm" => "delete",
        "move" | "mv" => "move",
        _ => "other",
    }
}

fn status_of(status: ItemStatus) -> &'static str {
    match status {
        ItemStatus::InProgress => "in_progress",
        ItemStatus::Completed => "completed",
        ItemStatus::Failed | ItemStatus::Denied => "failed",
    }
}

/// A todo tool's list as ACP's plan: Claude's `TodoWrite` (`todos`: content and
/// status) and Codex's `update_plan` (`plan`: step and status).
fn plan_of(item: &Item) -> Option<Value> {
    let tool = item.tool.as_deref()?.to_ascii_lowercase();
    let input = item.input.as_ref()?;
    let (list, text_key) = match tool.as_str() {
        "todowrite" | "todo_write" => (input.get("todos")?.as_array()?, "content"),
        "update_plan" => (input.get("plan")?.as_array()?, "step"),
        _ => return None,
    };
    let entries: Vec<Value> = list
        .iter()
        .filter_map(|entry| {
            let content = entry.get(text_key)?.as_str()?;
            let status = match entry.get("status").and_then(Value::as_str) {
                Some("completed") => "completed",
                Some("in_progress") => "in_progress",
                _ => "pending",
            };
            let priority = match entry.get("priority").and_then(Value::as_str) {
                Some("high") => "high",
                Some("low") => "low",
                _ => "medium",
            };
            Some(json!({"content": content, "status": status, "priority": priority}))
        })
        .collect();
    Some(json!({"sessionUpdate": "plan", "entries": entries}))
}

/// The tool call a permission request is about, as `session/request_permission`
/// shows it, and the options it offers (each option's id is our reply's name).
pub fn permission_request(session_id: &str, request: &PermissionRequest) -> Value {
    let call_id = request.item_id.clone().unwrap_or_else(|| request.id.clone());
    let item = Item {
        id: call_id.clone(),
        kind: ItemKind::ToolCall,
        tool: Some(request.tool.clone()),
        input: Some(request.input.clone()),
        ..Default::default()
    };
    let options: Vec<Value> = request
        .options
        .iter()
        .map(|reply| {
            let (id, name, kind) = match reply {
                PermissionReply::Once => ("once", "Allow once", "allow_once"),
                PermissionReply::Always => ("always", "Allow always", "allow_always"),
                PermissionReply::Reject => ("reject", "Reject", "reject_once"),
            };
            json!({"optionId": id, "name": name, "kind": kind})
        })
        .collect();
    json!({
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": call_id,
            "title": title(&item),
            "kind": kind_of(&request.tool),
            "status": "pending",
            "rawInput": request.input,
        },
        "options": options,
    })
}

/// The reply an ACP permission outcome chose: `None` when the editor cancelled (or
/// chose an option that was not offered).
pub fn permission_reply(outcome: &Value, offered: &[PermissionReply]) -> Option<PermissionReply> {
    let reply = match selected_option(outcome)? {
        "once" => PermissionReply::Once,
        "always" => PermissionReply::Always,
        "reject" => PermissionReply::Reject,
        _ => return None,
    };
    offered.contains(&reply).then_some(reply)
}

/// The `optionId` an answer to `session/request_permission` selected; `None` when
/// it was cancelled (or is not an answer).
pub fn selected_option(answer: &Value) -> Option<&str> {
    let outcome = answer.get("outcome")?;
    if outcome.get("outcome").and_then(Value::as_str) != Some("selected") {
        return None;
    }
    outcome.get("optionId").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, role: Role, text: Option<&str>) -> Item {
        Item {
            id: id.into(),
            kind: ItemKind::Message,
            role: Some(role),
            text: text.map(Into::into),
            ..Default::default()
        }
    }

    fn texts(updates: &[Value]) -> Vec<(String, String)> {
        updates
            .iter()
            .map(|u| {
                let kind = u["sessionUpdate"].as_str().unwrap().to_string();
                (kind, u["content"]["text"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    }

    #[test]
    fn an_answer_streams_each_piece_once_and_its_completion_adds_only_what_was_missing() {
        let mut updates = Updates::default();
        let mut all = Vec::new();
        all.extend(updates.of(&EventData::ItemStarted { item: message("a", Role::Assistant, Some("He")) }, false));
        all.extend(updates.of(&EventData::ItemDelta { item_id: "a".into(), delta: "llo".into() }, false));
        all.extend(
            updates.of(&EventData::ItemCompleted { item: message("a", Role::Assistant, Some("Hello!")) }, false),
        );
        assert_eq!(
            texts(&all),
            [("agent_message_chunk", "He"), ("agent_message_chunk", "llo"), ("agent_message_chunk", "!")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // A delta of an item never started is not shown (Claude's stop reason on its
        // status item); a message that only completes is shown whole; the user's
        // only in a replay.
        assert!(
            updates
                .of(&EventData::ItemDelta { item_id: "status".into(), delta: " (end_turn)".into() }, false)
                .is_empty()
        );
        let whole = updates.of(&EventData::ItemCompleted { item: message("b", Role::Assistant, Some("Hi")) }, false);
        assert_eq!(texts(&whole), [("agent_message_chunk".to_string(), "Hi".to_string())]);
        let user = EventData::ItemCompleted { item: message("u", Role::User, Some("hello")) };
        assert!(updates.of(&user, false).is_empty());
        assert_eq!(texts(&updates.of(&user, true)), [("user_message_chunk".to_string(), "hello".to_string())]);
    }

    #[test]
    fn reasoning_is_a_thought_and_a_tool_call_is_announced_once_then_updated_by_its_result() {
        let mut updates = Updates::default();
        let thought =
            Item { id: "r".into(), kind: ItemKind::Reasoning, text: Some("hmm".into()), ..Default::default() };
        assert_eq!(
            texts(&updates.of(&EventData::ItemCompleted { item: thought }, false)),
            [("agent_thought_chunk".to_string(), "hmm".to_string())]
        );
        let call = Item {
            id: "t1".into(),
            kind: ItemKind::ToolCall,
            tool: Some("Bash".into()),
            input: Some(json!({"command": "echo hi"})),
            status: Some(ItemStatus::InProgress),
            ..Default::default()
        };
        let announced = updates.of(&EventData::ItemStarted { item: call.clone() }, false);
        assert_eq!(announced.len(), 1);
        assert_eq!(announced[0]["sessionUpdate"], "tool_call");
        assert_eq!(announced[0]["kind"], "execute");
        assert_eq!(announced[0]["title"], "`echo hi`");
        assert_eq!(announced[0]["status"], "in_progress");
        let again = updates.of(&EventData::ItemCompleted { item: call }, false);
        assert_eq!(again[0]["sessionUpdate"], "tool_call_update");
        let result = Item {
            id: "t1-result".into(),
            kind: ItemKind::ToolResult,
            call_id: Some("t1".into()),
            output: Some("hi\n".into()),
            status: Some(ItemStatus::Completed),
            ..Default::default()
        };
        let done = updates.of(&EventData::ItemCompleted { item: result }, false);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0]["toolCallId"], "t1");
        assert_eq!(done[0]["status"], "completed");
        assert_eq!(done[0]["content"][0]["content"]["text"], "hi\n");
        // The result of a call never announced announces it first.
        let orphan =
            Item { id: "x".into(), kind: ItemKind::ToolResult, call_id: Some("t9".into()), ..Default::default() };
        let both = updates.of(&EventData::ItemCompleted { item: orphan }, false);
        assert_eq!(
            both.iter().map(|u| u["sessionUpdate"].as_str().unwrap()).collect::<Vec<_>>(),
            ["tool_call", "tool_call_update"]
        );
    }

    #[test]
    fn a_turn_cut_short_fails_the_calls_it_left_running_and_only_those() {
        let mut updates = Updates::default();
        let call = |id: &str| Item {
            id: id.into(),
            kind: ItemKind::ToolCall,
            tool: Some("bash".into()),
            status: Some(ItemStatus::InProgress),
            ..Default::default()
        };
        updates.of(&EventData::ItemStarted { item: call("done") }, false);
        updates.of(&EventData::ItemStarted { item: call("stuck") }, false);
        let result =
            Item { id: "r".into(), kind: ItemKind::ToolResult, call_id: Some("done".into()), ..Default::default() };
        updates.of(&EventData::ItemCompleted { item: result }, false);
        let ended = |status| EventData::TurnEnded { turn: 1, status, error: None, usage: None };
        let failed = updates.of(&ended(TurnStatus::Interrupted), false);
        assert_eq!(failed, [json!({"sessionUpdate": "tool_call_update", "toolCallId": "stuck", "status": "failed"})]);
        assert!(updates.of(&ended(TurnStatus::Interrupted), false).is_empty(), "told once");
        updates.of(&EventData::ItemStarted { item: call("next") }, false);
        assert!(updates.of(&ended(TurnStatus::Completed), false).is_empty(), "a completed turn leaves them be");
    }

    #[test]
    fn a_todo_list_is_a_plan() {
        let mut updates = Updates::default();
        let todo = Item {
            id: "t".into(),
            kind: ItemKind::ToolCall,
            tool: Some("TodoWrite".into()),
            input: Some(json!({"todos": [
                {"content": "read", "status": "completed", "activeForm": "reading"},
                {"content": "write", "status": "in_progress"},
                {"content": "test"},
            ]})),
            ..Default::default()
        };
        let out = updates.of(&EventData::ItemCompleted { item: todo }, false);
        assert_eq!(out[0]["sessionUpdate"], "plan");
        assert_eq!(
            out[0]["entries"],
            json!([
                {"content": "read", "status": "completed", "priority": "medium"},
                {"content": "write", "status": "in_progress", "priority": "medium"},
                {"content": "test", "status": "pending", "priority": "medium"},
            ])
        );
        assert_eq!(out[1]["sessionUpdate"], "tool_call");
    }

    #[test]
    fn a_permission_offers_exactly_the_replies_the_agent_accepts_and_takes_only_those() {
        let request = PermissionRequest {
            id: "perm-1".into(),
            tool: "bash".into(),
            input: json!({"command": "rm -rf /tmp/x"}),
            options: vec![PermissionReply::Once, PermissionReply::Reject],
            item_id: Some("t1".into()),
        };
        let asked = permission_request("s", &request);
        assert_eq!(asked["toolCall"]["toolCallId"], "t1");
        assert_eq!(asked["toolCall"]["kind"], "execute");
        let kinds: Vec<&str> =
            asked["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["allow_once", "reject_once"]);
        let chose = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
        assert_eq!(permission_reply(&chose("once"), &request.options), Some(PermissionReply::Once));
        assert_eq!(permission_reply(&chose("reject"), &request.options), Some(PermissionReply::Reject));
        assert_eq!(permission_reply(&chose("always"), &request.options), None, "not offered");
        assert_eq!(permission_reply(&json!({"outcome": {"outcome": "cancelled"}}), &request.options), None);
        assert_eq!(permission_reply(&json!({}), &request.options), None);
    }
}
