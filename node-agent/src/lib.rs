//! The agentplane node agent: one per sandbox, it runs processes, terminals and agent
//! sessions and serves them over HTTP (REST, SSE, WebSocket). It knows nothing of Kubernetes; the
//! controller is just one of its clients, and [`client::Client`] is how they all talk to it.

pub mod acp;
pub mod activity;
pub mod agents;
pub mod api;
pub mod auth;
pub mod client;
pub mod driver;
pub mod error;
pub mod events;
pub mod fs;
pub mod in_process;
pub mod leftovers;
pub mod metrics;
pub mod model;
pub mod output;
pub mod process;
pub mod random;
pub mod reaper;
pub mod resources;
pub mod server;
pub mod sessions;
pub mod signals;
pub mod universal;
pub mod workspace;

pub use error::{Error, Problem, ProblemCode, Result};

/// The environment variable a node agent may take its token from. Never handed on to
/// what it runs: a program holding its node agent's token could answer its own
/// permission requests.
pub const TOKEN_VARIABLE: &str = "AGENTPLANE_TOKEN";
/// Set by the controller in a managed sandbox's environment: the isolation around this
/// node agent (`bubblewrap`), for drivers whose agent would sandbox itself.
pub const ISOLATION_VARIABLE: &str = "AGENTPLANE_ISOLATION";
pub use process::Limits;
pub use server::{Config, Server};
pub use sessions::SessionOptions;
