//! Sessions: one conversation with an agent each, driven by a task of its own, its
//! state and events kept in the data directory so that it survives a restart of the
//! node agent.
//!
//! One job a file: [`record`] is the session's data and its state machine (every
//! change of state, pure); [`session`] the live session clients change (messages,
//! replies, end), each change made under the event log's append step so that events
//! read in the order the changes happened; [`turn`] a turn, and the session's side of
//! its driver's context; [`runner`] the task that installs the agent, launches its
//! driver and runs the queued messages as turns; [`manager`] all sessions (create,
//! restart, end, load, shutdown); [`persist`] their files on disk; [`log`] the event
//! log; [`feed`] processes that feed a session.

pub mod conversation;
pub mod feed;
pub mod log;
mod manager;
mod persist;
mod record;
mod runner;
mod session;
mod turn;

pub use manager::{SessionManager, SessionOptions};
pub use record::{SessionRecord, validate_id};
pub use session::Session;
