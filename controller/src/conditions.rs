//! Conditions in the Kubernetes `metav1.Condition` shape.
//!
//! `lastTransitionTime` moves only when a condition's status flips, so a reconcile that
//! changes nothing computes a status equal to the stored one and writes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use time::OffsetDateTime;

pub const READY: &str = "Ready";
/// The longest message a condition keeps. Kubernetes allows 32768 bytes; a message here
/// is read in `agentplane get`, `describe` and the inspector, and the longest the
/// stores build on purpose (a spec problem naming its file and line; a node agent's
/// error, which quotes at most 1 KiB of what it sent, with its URL) fit well under
/// 4 KiB. A status holds a few conditions, so its record stays a few KiB whatever a
/// node agent or a file says, and a status patch stays small.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The spec as stored parsed and validated (directory store: the file is good).
pub const VALID: &str = "Valid";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(value: bool) -> Self {
        if value { Status::True } else { Status::False }
    }
}

pub fn now() -> Time {
    Time(jiff_now())
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// `message` cut to [`MAX_MESSAGE_BYTES`] on a character boundary; when cut, it says
/// how long it was.
fn bounded(message: String) -> String {
    cut(message, MAX_MESSAGE_BYTES)
}

/// `text` cut to `max` bytes on a character boundary; when cut, it says how long it
/// was. For every string a node agent answers that goes into a status: a node agent
/// is hostile input, and a status is written whole at every change.
pub fn cut(mut message: String, max: usize) -> String {
    if message.len() <= max {
        return message;
    }
    let told = format!("… ({} bytes in all)", message.len());
    let room = max.saturating_sub(told.len());
    let end = (0..=room).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
    message.truncate(end);
    message.push_str(&told);
    message
}

/// Sets one condition, keeping its transition time unless its status changes. Every
/// condition's message passes here, so it is bounded here (see [`MAX_MESSAGE_BYTES`]).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: impl Into<Status>,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let status = status.into().as_str().to_string();
    let message = bounded(message.into());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now();
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            observed_generation: generation,
            last_transition_time: now(),
        }),
    }
}

/// `Valid`: whether the latest declared spec was taken; when it was not, the store
/// keeps the last good one in force, and the message says so.
pub fn set_valid(conditions: &mut Vec<Condition>, problem: Option<&str>, generation: Option<i64>) {
    match problem {
        // Never an empty message: server-side apply on API servers before 1.22 turns
        // an empty string into null, which the schema then refuses.
        None => set(conditions, VALID, true, "Valid", "the spec is in force", generation),
        Some(problem) => set(
            conditions,
            VALID,
            false,
            "InvalidSpec",
            format!("{problem} (the last valid spec stays in force)"),
            generation,
        ),
    }
}

pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The condition that says why a resource is not ready or not running (`agentplane
/// get`'s REASON, the inspector's reason): a spec that was not taken first, then any
/// other condition that is false, then `Ready` when not true. None when all is well,
/// and when a not-ready reason only names a phase where nothing is wrong (`Succeeded`,
/// `Starting`).
pub fn explaining<'a>(phase: Option<&str>, conditions: &'a [Condition]) -> Option<&'a Condition> {
    const FINE: [&str; 5] = ["Succeeded", "Stopped", "Ended", "Installing", "Starting"];
    let invalid = get(conditions, VALID).filter(|c| c.status == "False");
    let other = conditions.iter().find(|c| c.type_ != VALID && c.type_ != READY && c.status == "False");
    let ready = get(conditions, READY)
        .filter(|c| c.status != "True" && !(Some(c.reason.as_str()) == phase && FINE.contains(&c.reason.as_str())));
    invalid.or(other).or(ready)
}

/// A node agent's timestamp as a Kubernetes `Time`.
pub fn time(at: OffsetDateTime) -> Time {
    let ts =
        k8s_openapi::jiff::Timestamp::new(at.unix_timestamp(), at.nanosecond() as i32).unwrap_or_else(|_| jiff_now());
    Time(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message built from what a node agent said (or a file) may be any length: the
    /// condition keeps its start, cut on a character boundary, and says how long it was.
    #[test]
    fn a_message_is_kept_to_its_bound_whatever_it_was_built_from() {
        let mut conditions = Vec::new();
        let huge = format!("unexpected answer 500: {}", "é".repeat(512 * 1024));
        set(&mut conditions, READY, false, "NodeAgentUnreachable", huge.clone(), Some(1));
        let message = &conditions[0].message;
        assert!(message.len() <= MAX_MESSAGE_BYTES, "a message of {} bytes", message.len());
        assert!(message.starts_with("unexpected answer 500: éé"), "{message:.100}");
        assert!(message.ends_with(&format!("({} bytes in all)", huge.len())), "{}", &message[message.len() - 60..]);
        // Updated in place the same way; a short message is kept whole.
        set(&mut conditions, READY, false, "NodeAgentUnreachable", "x".repeat(MAX_MESSAGE_BYTES + 1), Some(1));
        assert!(conditions[0].message.len() <= MAX_MESSAGE_BYTES);
        set(&mut conditions, READY, true, "Running", "running as pid 7", Some(1));
        assert_eq!(conditions[0].message, "running as pid 7");
        let exact = "y".repeat(MAX_MESSAGE_BYTES);
        set(&mut conditions, READY, true, "Running", exact.clone(), Some(1));
        assert_eq!(conditions[0].message, exact);
    }
}
