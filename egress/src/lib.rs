//! Egress of a sandbox with `network: allowlist`: the allowlist, and the two halves that
//! enforce it. A crate of its own because its two halves run in different places: the
//! controller serves the proxy outside the sandbox (and on a cluster it is a Deployment
//! of its own), and the node agent runs the bridges inside; it depends on neither.
//!
//! Such a sandbox runs in its own network namespace, where only loopback exists. Its one
//! way out is a [`Proxy`] that runs outside the sandbox (in the controller) on a Unix
//! socket bind-mounted into it: it takes `CONNECT host:port` and absolute-form `http://`
//! requests and opens only the destinations its [`Allowlist`] names, answering 403 to the
//! rest and counting them, so the controller can say what was refused. Inside the
//! sandbox the node agent runs the bridges that make that socket reachable over TCP on the
//! sandbox's own loopback: [`hand_to_proxy`] for `HTTP_PROXY`/`HTTPS_PROXY`, which hands
//! each connection's socket to the proxy whole (so the proxy is the one relay on the
//! path), and [`tunnel_port`] so an allowlisted loopback service of the host (a model
//! server on `127.0.0.1:8089`) answers at the same address inside, with no proxy settings
//! at all. [`bridge_to_unix`] relays bytes to a Unix socket (the controller's way to a
//! node agent's API); it never passes a descriptor, so nothing of the host's goes in.
//!
//! Destinations are matched by name as written, never through DNS: a name is resolved only
//! once it is allowed, when the proxy connects, outside the sandbox.
//!
//! For hosts whose requests carry credentials, the proxy ends the sandbox's TLS with a
//! leaf from the sandbox's own [`Authority`] and speaks TLS again to the host through
//! [`Upstream`], so the request headers can be read and rewritten between the two.
//!
//! The modules: `allowlist` (entries and matching), `head` (reading and rewriting
//! request heads), `proxy` (the [`Proxy`] outside the sandbox), `handoff` (a sandbox's
//! connection passed to the proxy, and the checks on what arrives), `bridge` (the other
//! bridges, and the accept loop every listener shares), `tls` (both TLS ends of an
//! intercepted connection).

mod allowlist;
mod bridge;
mod credentials;
mod gateway;
mod handoff;
mod head;
mod proxy;
mod relay;
mod splice;
#[cfg(test)]
mod testing;
mod tls;

/// Where HTTP(S)_PROXY points inside a sandbox with `network: allowlist`: the node
/// agent serves the proxy's socket there ([`hand_to_proxy`]).
pub const SANDBOX_PROXY_ADDR: &str = "127.0.0.1:3128";

pub use allowlist::{Allowlist, loopback_tunnels};
pub use bridge::{bridge_to_unix, bridge_to_unix_when, tunnel_port};
pub use credentials::{CredentialCount, Credentials, NewCredential};
pub use gateway::Gateway;
pub use handoff::hand_to_proxy;
pub use proxy::{Interception, Proxy};
pub use tls::{Authority, Upstream};

use std::io;
use std::path::PathBuf;

/// The buffer of each direction of a relay: tokio's default (8 KiB) made a hop cost a
/// core at a few hundred MiB/s; 64 KiB halves the proxy's CPU per byte (measured with
/// the egress_proxy benchmark).
pub(crate) const RELAY_BUFFER: usize = 64 * 1024;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What failed: a bad allowlist entry, a tunnel through the proxy, or TLS to an
/// intercepted host.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An allowlist entry that names no destination; `problem` says how to write it.
    #[error("network allowlist entry {entry:?}: {problem}")]
    InvalidEntry { entry: String, problem: String },
    /// The proxy's Unix socket could not be reached from inside the sandbox.
    #[error("could not reach the network proxy at {}: {source}", socket.display())]
    ProxyUnreachable {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing to or reading from the proxy failed while a tunnel was being opened.
    #[error("talking to the network proxy about {target}: {source}")]
    ProxyIo {
        target: String,
        #[source]
        source: io::Error,
    },
    /// The proxy's answer to `CONNECT` was not a response head (garbage, too long, too
    /// slow, or the connection closed).
    #[error("the network proxy's answer to CONNECT {target} was unreadable: {problem}")]
    ProxyAnswerUnreadable { target: String, problem: String },
    /// A credential the proxy cannot hold as given; `problem` never shows its value.
    #[error("credential {name}: {problem}")]
    InvalidCredential { name: String, problem: String },
    /// The proxy refused the tunnel (403: not in the allowlist) or could not open it.
    #[error("the network proxy answered {status} to CONNECT {target}")]
    TunnelRefused { target: String, status: u16 },
    /// A host TLS cannot be intercepted for: neither a DNS name nor an IP address.
    #[error("cannot intercept TLS to {host:?}: {problem}")]
    InvalidTlsHost { host: String, problem: String },
    /// The sandbox's certificate authority could not make its certificate or a leaf.
    #[error("the sandbox's TLS certificate authority failed {0}")]
    Authority(String),
    /// The trust store for hosts' certificates is empty or unreadable.
    #[error("no trust store for TLS to intercepted hosts: {0}")]
    TrustStore(String),
    /// TLS to an intercepted host failed: `problem` says why (certificate unknown, name
    /// mismatch, expired, no answer).
    #[error("TLS to {host} failed: {problem}")]
    Tls { host: String, problem: String },
}
