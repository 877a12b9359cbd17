//! Binding, serving, and the orderly shutdown: stop accepting, end open streams,
//! stop every process (stop signal to each group, then SIGKILL) and every session
//! runner (sessions stay saved, to resume on the next start), return.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::http::HeaderValue;
use axum::serve::ListenerExt;
use tokio_util::sync::CancellationToken;

use crate::agents::AgentHost;
use crate::api::{AppState, router};
use crate::auth::Auth;
use crate::error::{Error, Result};
use crate::leftovers::{ChildRegistry, RegistryError};
use crate::metrics::Metrics;
use crate::process::{Limits, ProcessManager};
use crate::resources::ResourceSource;
use crate::sessions::{SessionManager, SessionOptions};

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Listen on this Unix socket instead of `listen` (a managed sandbox in a network
    /// namespace of its own is reached only through a socket bound out of it).
    pub listen_unix: Option<PathBuf>,
    /// `None` serves without authentication (`--no-token`).
    pub token: Option<String>,
    pub data_dir: PathBuf,
    /// Origins allowed to call from a browser; none by default.
    pub cors_origins: Vec<String>,
    pub limits: Limits,
    /// The directories `/v1/fs/...` serves (`--fs-root`); none: the working directory.
    pub fs_roots: Vec<PathBuf>,
}

pub struct Server {
    listener: Listener,
    state: AppState,
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Server {
    /// Validates the configuration, prepares the data directory, resumes the sessions
    /// kept there and binds the socket.
    pub async fn bind(config: Config, shutdown: CancellationToken) -> Result<Self> {
        Self::bind_with(config, SessionOptions::default(), shutdown).await
    }

    /// [`Server::bind`] with session options other than the defaults.
    pub async fn bind_with(config: Config, sessions: SessionOptions, shutdown: CancellationToken) -> Result<Self> {
        Self::bind_on(config, sessions, None, shutdown).await
    }

    /// [`Server::bind_with`], serving on a Unix socket someone else bound and handed
    /// over (a managed sandbox's, bound where nothing inside can replace it).
    pub async fn bind_inherited(
        config: Config,
        sessions: SessionOptions,
        listener: std::os::unix::net::UnixListener,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        Self::bind_on(config, sessions, Some(listener), shutdown).await
    }

    async fn bind_on(
        config: Config,
        sessions: SessionOptions,
        inherited: Option<std::os::unix::net::UnixListener>,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        if let Some(token) = &config.token
            && token.len() < 8
        {
            return Err(Error::InvalidRequest("the token must be at least 8 characters".into()));
        }
        if config.limits.output_buffer_bytes == 0 {
            return Err(Error::InvalidRequest("the output buffer size must be positive".into()));
        }
        let allowed_origins = config
            .cors_origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim_end_matches('/'))
                    .map_err(|_| Error::InvalidRequest(format!("--cors-origin {o:?} is not a valid origin")))
            })
            .collect::<Result<Vec<_>>>()?;
        tokio::fs::create_dir_all(&config.data_dir)
            .await
            .map_err(|e| Error::io(format!("creating the data directory {}", config.data_dir.display()), e))?;
        let listener = match (inherited, &config.listen_unix) {
            (Some(listener), _) => {
                listener.set_nonblocking(true).map_err(|e| Error::io("using the socket handed over", e))?;
                Listener::Unix(
                    tokio::net::UnixListener::from_std(listener)
                        .map_err(|e| Error::io("using the socket handed over", e))?,
                )
            }
            (None, Some(path)) => {
                // A socket left by a node agent that died is in the way; a live one
                // holds the data directory's lock, taken below, so two never serve.
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(format!("removing the old socket {}", path.display()), e)),
                }
                Listener::Unix(
                    tokio::net::UnixListener::bind(path)
                        .map_err(|e| Error::io(format!("listening on {}", path.display()), e))?,
                )
            }
            (None, None) => Listener::Tcp(
                tokio::net::TcpListener::bind(config.listen)
                    .await
                    .map_err(|e| Error::io(format!("listening on {}", config.listen), e))?,
            ),
        };
        let children = ChildRegistry::open(&config.data_dir).map_err(|e| match e {
            RegistryError::InUse(dir) => {
                Error::InvalidRequest(format!("another node agent uses the data directory {dir}"))
            }
            RegistryError::Io(context, source) => Error::io(context, source),
        })?;
        let reaper = children.clone();
        tokio::task::spawn_blocking(move || reaper.kill_leftovers()).await.unwrap_or(0);
        if sessions.events_in_memory == 0 || sessions.max_queued_messages == 0 || sessions.max_sessions == 0 {
            return Err(Error::InvalidRequest(
                "session event memory, message queue and the session limit must be positive".into(),
            ));
        }
        let fs = Arc::new(crate::fs::FsRoots::open(&config.fs_roots)?);
        let agents_dir = sessions.agents_dir.clone().unwrap_or_else(|| config.data_dir.join("agents"));
        let metrics = Metrics::new();
        let host = AgentHost::metered(config.data_dir.clone(), agents_dir, metrics.clone());
        let sessions =
            SessionManager::load(config.data_dir.join("sessions"), host, sessions, shutdown.child_token()).await?;
        // Not a client yet: only `/v1/acp` needs one, built per socket.
        let own_address = match &listener {
            Listener::Tcp(tcp) => {
                let addr = tcp.local_addr().map_err(|e| Error::io("reading the listening address", e))?;
                Some(Arc::new(crate::api::OwnAddress { url: local_url(addr), token: config.token.clone() }))
            }
            Listener::Unix(_) => None,
        };
        let state = AppState {
            processes: ProcessManager::metered(config.limits.clone(), Some(children), metrics.clone()),
            sessions,
            auth: Arc::new(Auth::new(config.token.clone())),
            allowed_origins: Arc::new(allowed_origins),
            shutdown,
            metrics,
            resources: None,
            fs,
            own_address,
            activity: crate::activity::Activity::new(),
        };
        Ok(Server { listener, state })
    }

    /// The TCP address it serves on; `None` on a Unix socket.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(listener) => Some(listener.local_addr().expect("a bound listener has an address")),
            Listener::Unix(_) => None,
        }
    }

    pub fn processes(&self) -> ProcessManager {
        self.state.processes.clone()
    }

    pub fn sessions(&self) -> SessionManager {
        self.state.sessions.clone()
    }

    /// The process calls of this node agent's API, made without HTTP: for the program
    /// that runs it (`agentplane up`'s store, on sandbox `local`).
    pub fn in_process(&self) -> crate::in_process::InProcess {
        crate::in_process::InProcess { processes: self.state.processes.clone(), sessions: self.state.sessions.clone() }
    }

    /// Serves `/v1/resources` and `/v1/resources/sse` from `source` (what `agentplane
    /// up` does with its store); without it they answer `not_found`.
    pub fn set_resources(&mut self, source: Arc<dyn ResourceSource>) {
        self.state.resources = Some(source);
    }

    /// A one-time login code, as `POST /v1/auth/codes` mints: for the link to the
    /// inspector (`/ui/#code=CODE`) printed at startup.
    pub fn login_code(&self) -> (String, time::OffsetDateTime) {
        self.state.auth.issue_login_code()
    }

    /// Whether clients need a token (not `--no-token`).
    pub fn requires_token(&self) -> bool {
        self.state.auth.enabled()
    }

    /// What `/metrics` serves: add another registry's text with [`Metrics::add_source`].
    pub fn metrics(&self) -> Metrics {
        self.state.metrics.clone()
    }

    /// Serves `/metrics` without the token on an address of its own (`--metrics-listen`),
    /// until the shutdown token fires; answers the bound address.
    pub async fn serve_metrics(&self, addr: SocketAddr) -> Result<SocketAddr> {
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::io(format!("listening on {addr}"), e))?;
        let bound = listener.local_addr().map_err(|e| Error::io("reading the metrics address", e))?;
        let app = crate::api::metrics_router(self.state.clone());
        let stop = self.state.shutdown.clone();
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
                tracing::warn!(%error, "the metrics server stopped");
            }
        });
        Ok(bound)
    }

    /// Serves until the shutdown token fires, then stops every process and session runner.
    pub async fn run(self) -> Result<()> {
        let Server { listener, state } = self;
        let shutdown = state.shutdown.clone();
        let processes = state.processes.clone();
        let sessions = state.sessions.clone();
        let stop_timeout = processes.limits().stop_timeout;
        let app = router(state);
        let served = match listener {
            Listener::Tcp(listener) => {
                // Keystrokes and echoes are tiny writes: Nagle would hold them back.
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned()).await
            }
            Listener::Unix(listener) => {
                axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned()).await
            }
        };
        tokio::join!(processes.shutdown(stop_timeout), sessions.shutdown());
        served.map_err(|e| Error::io("serving HTTP", e))
    }
}

/// The server's own address as a client reaches it: a wildcard address is not one
/// to connect to.
pub fn local_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}
