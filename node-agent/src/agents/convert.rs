//! Converters: an agent's native output, line by line, into universal events.
//!
//! Every native line becomes at least one event. A line no converter understands
//! becomes `agent.unparsed` with the line kept as the envelope's `raw`: never dropped.
//! Converters are stateful (an item's id across its deltas, a tool call's name when
//! its result comes), so one lives as long as the stream it reads.

use crate::universal::{EventData, Item, ItemKind, ItemStatus, Role};

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

/// The converter of an agent that has no native output (the mock).
pub struct Unconverted;

impl Converter for Unconverted {
    fn convert(&mut self, _line: &str) -> Vec<EventData> {
        vec![unparsed("this agent has no native output to convert")]
    }
}
