//! Converters: an agent's native output, line by line, into universal events.
//!
//! Every native line becomes at least one event. A line no converter understands
//! becomes `agent.unparsed` with the line kept as the envelope's `raw`: never dropped.
//! Converters are stateful (an item's id across its deltas, a tool call's name when
//! its result comes), so one lives as long as the stream it reads.

use crate::universal::{EventData, Item, ItemKind, ItemStatus, Role, Usage};

pub use crate::driver::Converter;

/// The event for a line no converter understood.
pub fn unparsed(reason: impl Into<String>) -> EventData {
    EventData::AgentUnparsed { reason: Some(reason.into()) }
}

/// A completed `status` item from the system: something the agent reports that is
/// not conversation (a session id, a retry, token usage).
pub fn status(id: String, text: impl Into<String>) -> EventData {
    let item = Item {
        id,
        kind: ItemKind::Status,
        role: Some(Role::System),
        text: Some(text.into()),
        status: Some(ItemStatus::Completed),
        ..Default::default()
    };
    EventData::ItemCompleted { item }
}

/// Adds one report of usage to what a converter collected for the turn so far.
pub fn add_usage(collected: &mut Option<Usage>, usage: Usage) {
    *collected = Some(collected.unwrap_or_default().plus(&usage));
}

/// A token count at `path` in a native object: 0 when absent (agents leave out a
/// count they have none of).
pub fn count_at(value: &serde_json::Value, path: &str) -> u64 {
    value.pointer(path).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// A dollar amount rid of the tail that subtracting floating-point totals leaves
/// (0.04344 - 0.021224 is 0.022216000000000005): to the nanodollar.
pub fn dollars(amount: f64) -> f64 {
    (amount * 1e9).round() / 1e9
}

/// The converter of an agent that has no native output (the mock).
pub struct Unconverted;

impl Converter for Unconverted {
    fn convert(&mut self, _line: &str) -> Vec<EventData> {
        vec![unparsed("this agent has no native output to convert")]
    }
}
