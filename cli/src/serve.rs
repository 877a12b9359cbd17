//! Serving the node agent: its flags and its life from start to stop, shared by the
//! two binaries that serve it. `agentplane node-agent` adds the inspector's address
//! and the registration with a cluster (see `node_agent`); `agentplane-node-agent`,
//! built from this file alone and what `up` starts in each managed sandbox, is only
//! this. It links no controller, no Kubernetes client and no CLI, so the code a node
//! agent touches lies together and an idle sandbox maps less of it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentplane_node_agent::{Config, Limits, Server};
use anyhow::{Context, bail};
use clap::Args;
use tokio_util::sync::CancellationToken;

/// How to serve.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "AGENTPLANE_LISTEN", default_value = "127.0.0.1:2468")]
    pub listen: SocketAddr,
    /// Listen on this Unix socket instead of --listen.
    #[arg(long, env = "AGENTPLANE_LISTEN_UNIX", value_name = "PATH")]
    pub listen_unix: Option<PathBuf>,
    /// Serve on the Unix socket the starting process handed over (systemd's
    /// LISTEN_FDS protocol): how `up` starts a managed sandbox's node agent, whose
    /// socket is bound where nothing in the sandbox can replace it.
    #[arg(long, conflicts_with = "listen_unix")]
    pub listen_inherited: bool,
    /// The socket taken by `take_inherited_listener`.
    #[arg(skip)]
    pub inherited: Option<std::os::unix::net::UnixListener>,
    /// Bearer token every client must present (at least 8 characters).
    #[arg(long, env = "AGENTPLANE_TOKEN", hide_env_values = true, conflicts_with_all = ["no_token", "token_stdin"])]
    pub token: Option<String>,
    /// Read the token from the first line of standard input: it is then in no
    /// environment and no command line for the programs it runs to find (how the
    /// controller starts a managed sandbox).
    #[arg(long, conflicts_with = "no_token")]
    pub token_stdin: bool,
    /// Stop, as on SIGTERM (with everything it runs), once standard input closes: a
    /// program that starts a node agent of its own keeps the pipe open, and when that
    /// program goes, however it goes (SIGKILL included), so does the node agent. With
    /// --token-stdin the first line is still the token.
    #[arg(long)]
    pub stop_with_stdin: bool,
    /// Print `ready URL` on standard output once serving, URL being where it listens
    /// (`http://127.0.0.1:PORT`, or `unix:PATH`): for a supervisor to wait on, and
    /// to learn the port when --listen asked for port 0.
    #[arg(long)]
    pub announce_ready: bool,
    /// Inside a managed sandbox with `network: allowlist`: the controller's proxy,
    /// a Unix socket bound in; it is served on 127.0.0.1:3128 for HTTP(S)_PROXY.
    #[arg(long, value_name = "PATH", hide = true)]
    pub proxy_socket: Option<PathBuf>,
    /// With --proxy-socket: a loopback `HOST:PORT` the allowlist names, served on the
    /// same port inside and tunnelled through the proxy (repeatable).
    #[arg(long = "tunnel", value_name = "HOST:PORT", hide = true, requires = "proxy_socket")]
    pub tunnels: Vec<String>,
    /// Serve without authentication: for local experiments only.
    #[arg(long, env = "AGENTPLANE_NO_TOKEN")]
    pub no_token: bool,
    /// Where the node agent keeps its state (default ~/.local/share/agentplane/node-agent).
    #[arg(long, env = "AGENTPLANE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where agent CLIs are installed (default DATA_DIR/agents); node agents may share one.
    #[arg(long, env = "AGENTPLANE_AGENTS_DIR")]
    pub agents_dir: Option<PathBuf>,
    /// A browser origin allowed to call the API (repeat for several; none by default).
    #[arg(long = "cors-origin", env = "AGENTPLANE_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// A directory the file API (`/v1/fs/...`) may read and write, with everything
    /// below it (repeat for several; the environment variable takes a colon-separated
    /// list). Relative paths of clients are taken against the first. Default: the
    /// working directory.
    #[arg(long = "fs-root", env = "AGENTPLANE_FS_ROOTS", value_name = "PATH", value_delimiter = ':')]
    pub fs_roots: Vec<PathBuf>,
    /// Most processes running at once.
    #[arg(long, env = "AGENTPLANE_MAX_PROCESSES", default_value_t = 256)]
    pub max_processes: usize,
    /// Most agent sessions live at once (ended ones do not count): each real agent
    /// is a process of hundreds of MB.
    #[arg(long, env = "AGENTPLANE_MAX_SESSIONS", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,
    /// Also serve Prometheus metrics (`/metrics`) on this address, without the token
    /// (on the API's address they need it).
    #[arg(long, env = "AGENTPLANE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Exited processes remembered before the oldest are forgotten.
    #[arg(long, env = "AGENTPLANE_MAX_EXITED", default_value_t = 256)]
    pub max_exited: usize,
    /// Bytes of output kept per stream of each process.
    #[arg(long, env = "AGENTPLANE_OUTPUT_BUFFER_BYTES", default_value_t = 1024 * 1024)]
    pub output_buffer_bytes: usize,
    /// Seconds between a stop signal and SIGKILL.
    #[arg(long, env = "AGENTPLANE_STOP_TIMEOUT", default_value_t = 10.0)]
    pub stop_timeout: f64,
    /// Milliseconds output waits for an attached client that fell behind before it
    /// is overwritten (that client then gets a gap marker).
    #[arg(long, env = "AGENTPLANE_SLOW_CLIENT_TIMEOUT_MS", default_value_t = 500)]
    pub slow_client_timeout_ms: u64,
}

impl ServeArgs {
    /// With --listen-inherited, takes the socket handed over and removes the variables
    /// that named it, so no program the node agent runs sees them. Called while the
    /// process has one thread (it edits the environment).
    pub fn take_inherited_listener(&mut self) -> anyhow::Result<()> {
        if !self.listen_inherited {
            return Ok(());
        }
        let mut fds = listenfd::ListenFd::from_env();
        let listener = fds
            .take_unix_listener(0)
            .context("--listen-inherited: the socket handed over is not a listening Unix socket")?
            .context("--listen-inherited: no socket was handed over (LISTEN_FDS)")?;
        self.inherited = Some(listener);
        Ok(())
    }
}

/// What a binary does around serving: before the server binds (`prepare`, with
/// whether it serves with a token), once it serves (`started`), and after it stopped.
pub trait Around {
    type Prepared;
    async fn prepare(&mut self, serves_with_token: bool) -> anyhow::Result<Self::Prepared>;
    fn started(
        &mut self,
        prepared: Self::Prepared,
        server: &Server,
        token: Option<String>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()>;
    async fn stopped(self);
}

/// Serves until a stop signal (or standard input closing, with --stop-with-stdin).
pub async fn run(mut args: ServeArgs, mut around: impl Around) -> anyhow::Result<()> {
    init_logging();
    let token = match (args.token, args.no_token, args.token_stdin) {
        (Some(token), false, false) => Some(token),
        (None, false, true) => Some(read_token_line()?),
        (None, true, false) => None,
        _ => bail!(
            "give a token (--token, AGENTPLANE_TOKEN or --token-stdin), or --no-token to serve without authentication"
        ),
    };
    if args.output_buffer_bytes == 0 {
        bail!("--output-buffer-bytes must be positive");
    }
    if !args.stop_timeout.is_finite() || args.stop_timeout < 0.0 {
        bail!("--stop-timeout must be a positive number of seconds");
    }
    if token.is_some() {
        // Its memory (and so its token) is then out of reach of the programs it runs,
        // which share its user: /proc/PID/mem and ptrace need it dumpable.
        nix::sys::prctl::set_dumpable(false).context("making the node agent non-dumpable")?;
    }
    let prepared = around.prepare(token.is_some()).await?;
    let data_dir = match args.data_dir {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let config = Config {
        listen: args.listen,
        listen_unix: args.listen_unix.clone(),
        token,
        data_dir,
        cors_origins: args.cors_origins,
        limits: Limits {
            max_running: args.max_processes,
            max_exited: args.max_exited,
            output_buffer_bytes: args.output_buffer_bytes,
            slow_client_timeout: Duration::from_millis(args.slow_client_timeout_ms),
            stop_timeout: Duration::from_secs_f64(args.stop_timeout),
        },
        fs_roots: args.fs_roots,
    };
    let shutdown = CancellationToken::new();
    // Before any process can start: see `watch_stop_signals`.
    watch_stop_signals(shutdown.clone())?;
    // PID 1 of a Pod or of a sandbox (`--as-pid-1`): orphans are ours to reap.
    agentplane_node_agent::reaper::start();
    if args.stop_with_stdin {
        watch_stdin_closing(shutdown.clone());
    }
    let sessions = agentplane_node_agent::SessionOptions {
        agents_dir: args.agents_dir,
        max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
        ..Default::default()
    };
    let inherited = args.inherited.take();
    let inherited_url = inherited.as_ref().and_then(|l| l.local_addr().ok()?.as_pathname().map(|p| p.to_path_buf()));
    let server = match inherited {
        Some(listener) => Server::bind_inherited(config.clone(), sessions, listener, shutdown.clone()).await?,
        None => Server::bind_with(config.clone(), sessions, shutdown.clone()).await?,
    };
    if let Some(socket) = &args.proxy_socket {
        serve_proxy_bridges(socket, &args.tunnels, &shutdown).await?;
    }
    if let Some(addr) = args.metrics_listen {
        let bound = server.serve_metrics(addr).await?;
        tracing::info!(metrics = %bound, "metrics served without the token");
    }
    // The log says `listen=ADDR` as it always has (scripts and benches read it);
    // `--announce-ready` prints a URL.
    let (listen, url) = match (server.local_addr(), args.listen_unix.as_ref().or(inherited_url.as_ref())) {
        (Some(addr), _) => (addr.to_string(), format!("http://{addr}")),
        (None, Some(path)) => (format!("unix:{}", path.display()), format!("unix:{}", path.display())),
        (None, None) => (String::new(), String::new()),
    };
    tracing::info!(
        listen = %listen,
        data_dir = %config.data_dir.display(),
        auth = config.token.is_some(),
        "node agent ready"
    );
    let started = around.started(prepared, &server, config.token.clone(), &shutdown);
    if started.is_ok() && args.announce_ready {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {url}").and_then(|()| out.flush()).context("announcing readiness on stdout")?;
    }
    let served = match started {
        Ok(()) => server.run().await.map_err(anyhow::Error::from),
        Err(error) => Err(error),
    };
    around.stopped().await;
    served?;
    tracing::info!("node agent stopped");
    Ok(())
}

/// The token from standard input's first line (see `--token-stdin`).
fn read_token_line() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).context("reading the token from standard input")?;
    let token = line.trim_end_matches(['\r', '\n']).to_string();
    if token.is_empty() {
        bail!("--token-stdin: standard input held no token");
    }
    Ok(token)
}

/// The controller's proxy on the sandbox's own loopback (see `--proxy-socket`), and a
/// tunnel for each allowed loopback service.
async fn serve_proxy_bridges(
    socket: &std::path::Path,
    tunnels: &[String],
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    use agentplane_egress::{self as netproxy, SANDBOX_PROXY_ADDR};
    let listener = tokio::net::TcpListener::bind(SANDBOX_PROXY_ADDR)
        .await
        .with_context(|| format!("serving the proxy on {SANDBOX_PROXY_ADDR}"))?;
    tokio::spawn(netproxy::hand_to_proxy(listener, socket.to_path_buf(), shutdown.clone()));
    for tunnel in tunnels {
        let (host, port) = tunnel
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(['[', ']']).to_string(), p.parse::<u16>().ok()?)))
            .with_context(|| format!("--tunnel {tunnel:?}: write HOST:PORT"))?;
        let bind = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        // `localhost` may name either loopback; the sandbox's own resolves to 127.0.0.1.
        let bind = if host == "localhost" { format!("127.0.0.1:{port}") } else { bind };
        // A port below 1024 needs a capability the sandbox does not have: that service
        // is still reached through the proxy, only not at its own address.
        match tokio::net::TcpListener::bind(&bind).await {
            Ok(listener) => {
                tokio::spawn(netproxy::tunnel_port(listener, socket.to_path_buf(), host, port, shutdown.clone()));
            }
            Err(error) => tracing::warn!(%bind, %error, "no tunnel at the allowed address; use the proxy for it"),
        }
    }
    Ok(())
}

pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn,notify::inotify=error".into()),
        )
        .with_writer(|| LogWriter)
        // Colour only for a person watching; logs collected to files stay plain.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Where log lines go: stderr, and nowhere once stderr cannot take them. A daemon whose
/// stderr was a pipe that closed (`agentplane up 2>&1 | tee up.log`, then Ctrl-C kills
/// `tee`) must go on and, above all, still shut down cleanly. tracing-subscriber
/// reports a failed write with `eprintln!`, which panics on a closed stderr: the panic
/// took the task that handles stop signals with it, and `up` then ignored SIGTERM.
/// So a failed write is reported as written, and the line is dropped.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::Write::flush(&mut std::io::stderr().lock());
        Ok(())
    }
}

/// Shuts down cleanly once standard input reaches its end (`--stop-with-stdin`): a
/// thread of its own reads and drops whatever comes until then (the token, read
/// before, came through the same handle).
fn watch_stdin_closing(shutdown: CancellationToken) {
    std::thread::spawn(move || {
        use std::io::Read;
        let mut sink = [0u8; 512];
        let mut stdin = std::io::stdin().lock();
        loop {
            match stdin.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        shutdown.cancel();
        tracing::info!("standard input closed: shutting down");
    });
}

/// Shuts down cleanly on SIGTERM, SIGINT, SIGQUIT and SIGHUP.
///
/// The handlers matter for the programs we run too: a signal *ignored* by the node
/// agent stays ignored in every child across exec, and a node agent started from a
/// script (`agentplane node-agent &` ignores SIGINT and SIGQUIT) or under `nohup`
/// would hand that on, so Ctrl-C or a stop signal would do nothing to its processes.
/// A handler, unlike an ignore, is reset to the default at exec. Under `nohup` a
/// hangup still does not stop the node agent: that is what the user asked for.
pub fn watch_stop_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let hangup_ignored = ignored_at_start(1);
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let mut quit = signal(SignalKind::quit()).context("handling SIGQUIT")?;
    let mut hup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    tokio::spawn(async move {
        let name = loop {
            tokio::select! {
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                _ = quit.recv() => break "SIGQUIT",
                _ = hup.recv() => {
                    if hangup_ignored {
                        tracing::info!("SIGHUP ignored: started under nohup");
                        continue;
                    }
                    break "SIGHUP";
                }
            }
        };
        // Cancelled before anything is logged: nothing said about stopping may keep it
        // from happening.
        shutdown.cancel();
        tracing::info!(signal = name, "shutting down");
    });
    Ok(())
}

/// Whether signal `number` was ignored when this process started (from /proc, which
/// needs no unsafe code to read).
fn ignored_at_start(number: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (number - 1)) != 0)
}

fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("agentplane/node-agent"));
    }
    let home = std::env::var_os("HOME").context("HOME is not set: pass --data-dir")?;
    Ok(PathBuf::from(home).join(".local/share/agentplane/node-agent"))
}
