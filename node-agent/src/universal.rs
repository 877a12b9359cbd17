//! The universal event schema: one envelope and one set of event types for every
//! agent, so that clients read a Claude, Codex or mock conversation the same way.
//!
//! Drivers convert their agent's native output into [`EventData`]; the session
//! manager wraps each in an [`UniversalEvent`] envelope with a per-session sequence.
//! On the wire `type` and `data` sit side by side in the envelope (the enum is
//! adjacently tagged and flattened into it).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use utoipa::ToSchema;

/// Who produced an event: the agent (converted from its output), or the node agent
/// itself (session lifecycle, replies from clients, user messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventSource {
    Agent,
    Daemon,
}

/// One event of a session. The SSE `id:` is `sequence`, the SSE `event:` is `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UniversalEvent {
    /// Monotonic per session, from 1; never reused, also across node agent restarts.
    pub sequence: u64,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub time: OffsetDateTime,
    pub session_id: String,
    /// The agent's own id of the conversation, once the agent has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session_id: Option<String>,
    pub source: EventSource,
    /// `type` and `data`.
    #[serde(flatten)]
    pub data: EventData,
    /// The agent's native line this event was converted from, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

impl UniversalEvent {
    pub fn kind(&self) -> EventType {
        self.data.kind()
    }
}

/// The type of an event, as its name on the wire (`item.delta`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum EventType {
    #[serde(rename = "session.started")]
    SessionStarted,
    #[serde(rename = "session.ended")]
    SessionEnded,
    #[serde(rename = "turn.started")]
    TurnStarted,
    #[serde(rename = "turn.ended")]
    TurnEnded,
    #[serde(rename = "item.started")]
    ItemStarted,
    #[serde(rename = "item.delta")]
    ItemDelta,
    #[serde(rename = "item.completed")]
    ItemCompleted,
    #[serde(rename = "permission.requested")]
    PermissionRequested,
    #[serde(rename = "permission.resolved")]
    PermissionResolved,
    #[serde(rename = "question.requested")]
    QuestionRequested,
    #[serde(rename = "question.resolved")]
    QuestionResolved,
    #[serde(rename = "error")]
    Error,
    #[serde(rename = "agent.unparsed")]
    AgentUnparsed,
}

impl EventType {
    pub const ALL: [EventType; 13] = [
        EventType::SessionStarted,
        EventType::SessionEnded,
        EventType::TurnStarted,
        EventType::TurnEnded,
        EventType::ItemStarted,
        EventType::ItemDelta,
        EventType::ItemCompleted,
        EventType::PermissionRequested,
        EventType::PermissionResolved,
        EventType::QuestionRequested,
        EventType::QuestionResolved,
        EventType::Error,
        EventType::AgentUnparsed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SessionStarted => "session.started",
            EventType::SessionEnded => "session.ended",
            EventType::TurnStarted => "turn.started",
            EventType::TurnEnded => "turn.ended",
            EventType::ItemStarted => "item.started",
            EventType::ItemDelta => "item.delta",
            EventType::ItemCompleted => "item.completed",
            EventType::PermissionRequested => "permission.requested",
            EventType::PermissionResolved => "permission.resolved",
            EventType::QuestionRequested => "question.requested",
            EventType::QuestionResolved => "question.resolved",
            EventType::Error => "error",
            EventType::AgentUnparsed => "agent.unparsed",
        }
    }
}

/// What happened: the `type` of the envelope and its `data` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", content = "data")]
pub enum EventData {
    /// The agent is ready for messages (again, after a node agent restart, when `resumed`).
    #[serde(rename = "session.started", rename_all = "camelCase")]
    SessionStarted {
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_session_id: Option<String>,
        #[serde(default)]
        resumed: bool,
    },
    /// The last event of a session.
    #[serde(rename = "session.ended", rename_all = "camelCase")]
    SessionEnded {
        reason: EndReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    #[serde(rename = "turn.started", rename_all = "camelCase")]
    TurnStarted {
        /// Turns of this session, counted from 1.
        turn: u64,
    },
    #[serde(rename = "turn.ended", rename_all = "camelCase")]
    TurnEnded {
        turn: u64,
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The tokens of the turn, as its agent reported them; absent when the agent
        /// reports none (see docs/agents.md), never zeros in their place.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    #[serde(rename = "item.started", rename_all = "camelCase")]
    ItemStarted { item: Item },
    /// More text of an item that is under way.
    #[serde(rename = "item.delta", rename_all = "camelCase")]
    ItemDelta { item_id: String, delta: String },
    #[serde(rename = "item.completed", rename_all = "camelCase")]
    ItemCompleted { item: Item },
    #[serde(rename = "permission.requested", rename_all = "camelCase")]
    PermissionRequested(PermissionRequest),
    #[serde(rename = "permission.resolved", rename_all = "camelCase")]
    PermissionResolved {
        id: String,
        /// `None`: the request was cancelled (the session ended before a reply).
        reply: Option<PermissionReply>,
    },
    #[serde(rename = "question.requested", rename_all = "camelCase")]
    QuestionRequested(QuestionRequest),
    #[serde(rename = "question.resolved", rename_all = "camelCase")]
    QuestionResolved {
        id: String,
        outcome: QuestionOutcome,
        /// The answers, when `outcome` is `answered`: one list per question.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<Vec<Vec<String>>>,
    },
    #[serde(rename = "error", rename_all = "camelCase")]
    Error {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// A native line no converter understood; the line itself is the envelope's `raw`.
    #[serde(rename = "agent.unparsed", rename_all = "camelCase")]
    AgentUnparsed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl EventData {
    pub fn kind(&self) -> EventType {
        match self {
            EventData::SessionStarted { .. } => EventType::SessionStarted,
            EventData::SessionEnded { .. } => EventType::SessionEnded,
            EventData::TurnStarted { .. } => EventType::TurnStarted,
            EventData::TurnEnded { .. } => EventType::TurnEnded,
            EventData::ItemStarted { .. } => EventType::ItemStarted,
            EventData::ItemDelta { .. } => EventType::ItemDelta,
            EventData::ItemCompleted { .. } => EventType::ItemCompleted,
            EventData::PermissionRequested(_) => EventType::PermissionRequested,
            EventData::PermissionResolved { .. } => EventType::PermissionResolved,
            EventData::QuestionRequested(_) => EventType::QuestionRequested,
            EventData::QuestionResolved { .. } => EventType::QuestionResolved,
            EventData::Error { .. } => EventType::Error,
            EventData::AgentUnparsed { .. } => EventType::AgentUnparsed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum EndReason {
    /// A client ended it (`DELETE /v1/sessions/{id}`).
    Requested,
    /// The agent could not start or went away.
    Failed,
}

/// Tokens used, as the agent reports them: of one turn on `turn.ended`, summed over
/// a session's turns in its info. The four counts are disjoint, so that they add up
/// to every token processed: `inputTokens` is the input neither read from nor written
/// to the prompt cache (an agent that reports cached tokens as part of its input has
/// them taken out). Reasoning tokens are part of `outputTokens`, as providers bill them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct Usage {
    /// Input tokens neither read from nor written to the prompt cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// What the agent says the tokens cost, in US dollars, where it says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds `other` in; a cost is kept once either side has one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(other.cache_write_tokens);
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }

    /// This and `other`, summed.
    pub fn plus(mut self, other: &Usage) -> Usage {
        self.add(other);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    Completed,
    Failed,
    /// Cut short: the session ended during the turn.
    Interrupted,
}

/// One unit of a conversation: a message, a tool call and its result, reasoning, ...
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// Unique within the session; `item.delta` and `item.completed` name it.
    pub id: String,
    pub kind: ItemKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// For a tool call: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For a tool call: its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// For a tool result: what the tool printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// For a file change: the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    #[default]
    Message,
    ToolCall,
    ToolResult,
    Reasoning,
    FileChange,
    Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Failed,
    /// A tool call the user did not allow.
    Denied,
}

/// A client's answer to a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PermissionReply {
    /// Allow this call.
    Once,
    /// Allow this call and, for the rest of the session, every call of the same tool.
    Always,
    Reject,
}

/// The agent asks before running a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequest {
    /// Unique within the session; the `{pid}` of the reply route.
    pub id: String,
    pub tool: String,
    #[schema(value_type = Object)]
    pub input: Value,
    /// The replies the agent accepts.
    pub options: Vec<PermissionReply>,
    /// The tool-call item this request is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
}

/// The agent asks the user one or more questions at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuestionRequest {
    /// Unique within the session; the `{qid}` of the reply and reject routes.
    pub id: String,
    pub questions: Vec<Question>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Suggested answers (a client may offer free text as well).
    #[serde(default)]
    pub options: Vec<String>,
    /// Whether more than one option may be chosen.
    #[serde(default)]
    pub multi_select: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum QuestionOutcome {
    Answered,
    Rejected,
    /// The session ended before an answer.
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_has_type_and_data_side_by_side() {
        let event = UniversalEvent {
            sequence: 7,
            time: OffsetDateTime::UNIX_EPOCH,
            session_id: "s".into(),
            agent_session_id: Some("mock-1".into()),
            source: EventSource::Agent,
            data: EventData::ItemDelta { item_id: "i".into(), delta: "he".into() },
            raw: None,
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "sequence": 7, "time": "1970-01-01T00:00:00Z", "sessionId": "s", "agentSessionId": "mock-1",
                "source": "agent", "type": "item.delta", "data": {"itemId": "i", "delta": "he"}
            })
        );
        assert_eq!(serde_json::from_value::<UniversalEvent>(json).unwrap(), event);
        for kind in EventType::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        let item = Item { id: "t".into(), kind: ItemKind::ToolCall, ..Default::default() };
        assert_eq!(serde_json::to_value(&item).unwrap(), serde_json::json!({"id": "t", "kind": "tool_call"}));
    }
}
