//! The node agent's tests, one binary: the HTTP contract and real programs on real
//! PTYs and pipes through the real server, the real agent CLIs against the scripted
//! model server, and the converters on recorded transcripts.
//!
//! One binary links the crate's dependencies once; its tests run in parallel
//! threads (see docs/testing.md for the groups that must not).

mod common;

mod agent_amp;
mod agent_claude;
mod agent_codex;
mod agent_gemini;
mod agent_opencode;
mod agent_pi;
mod api;
mod convert_amp;
mod convert_claude;
mod convert_codex;
mod convert_gemini;
mod convert_opencode;
mod convert_pi;
mod fs;
mod inspector;
mod install;
mod mcp;
mod metrics;
mod output_order;
mod pipes;
mod process_sessions;
mod properties;
mod resources_wake;
mod router;
mod sessions;
mod terminals;
mod workspaces;
