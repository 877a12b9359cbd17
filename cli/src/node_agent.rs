//! `agentplane node-agent`: flags, logging and signals around the node agent server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentplane_controller::kube::register::{self, Registration};
use agentplane_crds::SecretKeySelector;
use agentplane_node_agent::{Config, Limits, Server};
use anyhow::{Context, bail};
use clap::Args;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NodeAgentArgs {
    /// Without a command: serve.
    #[command(subcommand)]
    command: Option<NodeAgentCommand>,
    /// Address to listen on.
    #[arg(long, env = "AGENTPLANE_LISTEN", default_value = "127.0.0.1:2468")]
    listen: SocketAddr,
    /// Listen on this Unix socket instead of --listen.
    #[arg(long, env = "AGENTPLANE_LISTEN_UNIX", value_name = "PATH", conflicts_with = "register")]
    listen_unix: Option<PathBuf>,
    /// Serve on the Unix socket the starting process handed over (systemd's
    /// LISTEN_FDS protocol): how `up` starts a managed sandbox's node agent, whose
    /// socket is bound where nothing in the sandbox can replace it.
    #[arg(long, conflicts_with_all = ["listen_unix", "register"])]
    listen_inherited: bool,
    /// The socket taken by `take_inherited_listener`.
    #[arg(skip)]
    inherited: Option<std::os::unix::net::UnixListener>,
    /// Bearer token every client must present (at least 8 characters).
    #[arg(long, env = "AGENTPLANE_TOKEN", hide_env_values = true, conflicts_with_all = ["no_token", "token_stdin"])]
    token: Option<String>,
    /// Read the token from the first line of standard input: it is then in no
    /// environment and no command line for the programs it runs to find (how the
    /// controller starts a managed sandbox).
    #[arg(long, conflicts_with = "no_token")]
    token_stdin: bool,
    /// Stop, as on SIGTERM (with everything it runs), once standard input closes: a
    /// program that starts a node agent of its own keeps the pipe open, and when that
    /// program goes, however it goes (SIGKILL included), so does the node agent. With
    /// --token-stdin the first line is still the token.
    #[arg(long)]
    stop_with_stdin: bool,
    /// Print `ready URL` on standard output once serving, URL being where it listens
    /// (`http://127.0.0.1:PORT`, or `unix:PATH`): for a supervisor to wait on, and
    /// to learn the port when --listen asked for port 0.
    #[arg(long)]
    announce_ready: bool,
    /// Inside a managed sandbox with `network: allowlist`: the controller's proxy,
    /// a Unix socket bound in; it is served on 127.0.0.1:3128 for HTTP(S)_PROXY.
    #[arg(long, value_name = "PATH", hide = true)]
    proxy_socket: Option<PathBuf>,
    /// With --proxy-socket: a loopback `HOST:PORT` the allowlist names, served on the
    /// same port inside and tunnelled through the proxy (repeatable).
    #[arg(long = "tunnel", value_name = "HOST:PORT", hide = true, requires = "proxy_socket")]
    tunnels: Vec<String>,
    /// Serve without authentication: for local experiments only.
    #[arg(long, env = "AGENTPLANE_NO_TOKEN")]
    no_token: bool,
    /// Where the node agent keeps its state (default ~/.local/share/agentplane/node-agent).
    #[arg(long, env = "AGENTPLANE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where agent CLIs are installed (default DATA_DIR/agents); node agents may share one.
    #[arg(long, env = "AGENTPLANE_AGENTS_DIR")]
    agents_dir: Option<PathBuf>,
    /// A browser origin allowed to call the API (repeat for several; none by default).
    #[arg(long = "cors-origin", env = "AGENTPLANE_CORS_ORIGINS", value_delimiter = ',')]
    cors_origins: Vec<String>,
    /// A directory the file API (`/v1/fs/...`) may read and write, with everything
    /// below it (repeat for several; the environment variable takes a colon-separated
    /// list). Relative paths of clients are taken against the first. Default: the
    /// working directory.
    #[arg(long = "fs-root", env = "AGENTPLANE_FS_ROOTS", value_name = "PATH", value_delimiter = ':')]
    fs_roots: Vec<PathBuf>,
    /// Most processes running at once.
    #[arg(long, env = "AGENTPLANE_MAX_PROCESSES", default_value_t = 256)]
    max_processes: usize,
    /// Most agent sessions live at once (ended ones do not count): each real agent
    /// is a process of hundreds of MB.
    #[arg(long, env = "AGENTPLANE_MAX_SESSIONS", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    max_sessions: u64,
    /// Also serve Prometheus metrics (`/metrics`) on this address, without the token
    /// (on the API's address they need it).
    #[arg(long, env = "AGENTPLANE_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Exited processes remembered before the oldest are forgotten.
    #[arg(long, env = "AGENTPLANE_MAX_EXITED", default_value_t = 256)]
    max_exited: usize,
    /// Bytes of output kept per stream of each process.
    #[arg(long, env = "AGENTPLANE_OUTPUT_BUFFER_BYTES", default_value_t = 1024 * 1024)]
    output_buffer_bytes: usize,
    /// Seconds between a stop signal and SIGKILL.
    #[arg(long, env = "AGENTPLANE_STOP_TIMEOUT", default_value_t = 10.0)]
    stop_timeout: f64,
    /// Milliseconds output waits for an attached client that fell behind before it
    /// is overwritten (that client then gets a gap marker).
    #[arg(long, env = "AGENTPLANE_SLOW_CLIENT_TIMEOUT_MS", default_value_t = 500)]
    slow_client_timeout_ms: u64,
    #[command(flatten)]
    registration: RegisterArgs,
}

impl NodeAgentArgs {
    /// With --listen-inherited, takes the socket handed over and removes the variables
    /// that named it, so no program the node agent runs sees them. Called while the
    /// process has one thread (it edits the environment).
    pub fn take_inherited_listener(&mut self) -> anyhow::Result<()> {
        if !self.listen_inherited || self.command.is_some() {
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

/// Tools that run without a node agent.
#[derive(clap::Subcommand, Debug)]
pub enum NodeAgentCommand {
    /// Convert an agent's native transcript (stdin: JSON lines, or SSE `data:` lines)
    /// into universal events (stdout: one JSON envelope a line).
    Convert(crate::convert::ConvertArgs),
    /// Say where the scripted model server went: it is a test tool, not in this binary;
    /// from a checkout, `cargo run -p agentplane-model-server -- --listen ADDR` serves it.
    ModelServer(ModelServerArgs),
    /// Print the node agent's OpenAPI 3.1 document (what `/v1/openapi.json` serves),
    /// without serving: the TypeScript SDK's types are generated from it.
    Openapi,
}

#[derive(Args, Debug)]
pub struct ModelServerArgs {
    /// Taken so that an old command line gets the pointer, with its own address.
    #[arg(long, hide = true)]
    listen: Option<std::net::SocketAddr>,
}

/// Where the scripted model server went: a binary of its own crate, so that the release
/// binary carries no test tool; the exit code is 2, a usage error.
fn model_server(args: &ModelServerArgs) -> i32 {
    let listen = args.listen.map_or_else(|| "127.0.0.1:8089".to_string(), |addr| addr.to_string());
    eprintln!(
        "agentplane: the scripted model server is a test tool, not part of this binary.\n\
         From a checkout of agentplane, run:\n  cargo run -p agentplane-model-server -- --listen {listen}\n\
         (docs/testing.md says more)"
    );
    2
}

/// `agentplane node-agent [COMMAND]`: serves, or runs one of its tools; the exit code.
pub async fn main(mut args: NodeAgentArgs) -> anyhow::Result<i32> {
    match args.command.take() {
        Some(NodeAgentCommand::Convert(convert)) => crate::convert::run(convert).await,
        Some(NodeAgentCommand::ModelServer(options)) => Ok(model_server(&options)),
        Some(NodeAgentCommand::Openapi) => {
            print!("{}", agentplane_node_agent::api::openapi_document());
            Ok(0)
        }
        None => run(args).await.map(|()| 0),
    }
}

/// Registration as a Sandbox in a Kubernetes cluster (see `agentplane_controller::kube::register`).
#[derive(Args, Debug)]
#[command(next_help_heading = "Registration in a cluster")]
pub struct RegisterArgs {
    /// Register as a Sandbox in a Kubernetes cluster, and keep its heartbeat while serving.
    #[arg(long)]
    register: bool,
    /// The Sandbox's name (required with --register).
    #[arg(
        long = "sandbox",
        env = "AGENTPLANE_SANDBOX",
        value_name = "NAME",
        required_if_eq("register", "true"),
        value_parser = parse_name
    )]
    sandbox: Option<String>,
    /// The Sandbox's namespace [default: the kubeconfig's namespace, else `default`].
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    sandbox_namespace: Option<String>,
    /// The http(s) URL the controller reaches this node agent at: the Sandbox's
    /// spec.endpoint (required with --register).
    #[arg(
        long,
        env = "AGENTPLANE_ADVERTISE_URL",
        value_name = "URL",
        required_if_eq("register", "true"),
        value_parser = parse_endpoint
    )]
    advertise_url: Option<String>,
    /// The Secret holding this node agent's token, as NAME or NAME:KEY (the key
    /// defaults to `token`): the Sandbox's spec.tokenSecretRef.
    #[arg(long, env = "AGENTPLANE_TOKEN_SECRET", value_name = "NAME[:KEY]", value_parser = parse_token_secret)]
    token_secret: Option<SecretKeySelector>,
    /// The kubeconfig to register with [default: $KUBECONFIG, else ~/.kube/config,
    /// else the pod's ServiceAccount].
    // Not `env = "KUBECONFIG"`: that variable may list several files, which
    // `kube::Config::infer` merges and a single path cannot.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Seconds between heartbeats.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    heartbeat_interval: u64,
}

/// Why a registration flag's value is refused; clap prints it after the flag's name.
#[derive(Debug, thiserror::Error)]
enum FlagError {
    /// What the registration's own check says of a name or an endpoint, whole.
    #[error("{0}")]
    Refused(String),
    #[error("{value:?} has an empty key after ':' (give NAME, or NAME:KEY)")]
    EmptySecretKey { value: String },
}

fn parse_name(value: &str) -> Result<String, FlagError> {
    register::validate_name(value).map(|()| value.to_string()).map_err(FlagError::Refused)
}

fn parse_endpoint(value: &str) -> Result<String, FlagError> {
    register::validate_endpoint(value).map(|()| value.to_string()).map_err(FlagError::Refused)
}

/// `NAME` or `NAME:KEY`, the key `token` when absent.
fn parse_token_secret(value: &str) -> Result<SecretKeySelector, FlagError> {
    let (name, key) = value.split_once(':').unwrap_or((value, "token"));
    register::validate_name(name).map_err(FlagError::Refused)?;
    if key.is_empty() {
        return Err(FlagError::EmptySecretKey { value: value.to_string() });
    }
    Ok(SecretKeySelector { name: name.to_string(), key: key.to_string() })
}

impl RegisterArgs {
    /// The cluster and what to register as, or `None` without --register. Everything
    /// that can be wrong with the flags or the kubeconfig is found here, before the
    /// node agent starts: what the cluster does wrong later is only logged.
    async fn resolve(self, serves_with_token: bool) -> anyhow::Result<Option<(kube::Client, Registration)>> {
        if !self.register {
            return Ok(None);
        }
        let (Some(name), Some(endpoint)) = (self.sandbox, self.advertise_url) else {
            bail!("--register needs --sandbox and --advertise-url");
        };
        let config = crate::kubeconfig::load(self.kubeconfig.as_deref(), None).await?;
        let registration = Registration {
            name,
            namespace: self.sandbox_namespace.unwrap_or_else(|| config.default_namespace.clone()),
            endpoint,
            token_secret: self.token_secret,
            heartbeat_interval: Duration::from_secs(self.heartbeat_interval),
            node_agent_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        registration.validate()?;
        warn_about_token(&registration, serves_with_token);
        let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
        Ok(Some((client, registration)))
    }
}

/// The controller authenticates with the Secret the Sandbox names; a mismatch is
/// allowed (the Secret may be set later by hand) but worth saying.
fn warn_about_token(registration: &Registration, serves_with_token: bool) {
    match (&registration.token_secret, serves_with_token) {
        (None, true) => tracing::warn!(
            "registering without --token-secret: the controller has no token to call this node agent with"
        ),
        (Some(secret), false) => tracing::warn!(
            secret = %secret.name,
            "--token-secret is given but the node agent serves without a token (--no-token)"
        ),
        _ => {}
    }
}

/// Registration beside the server: the token stops it, the handle says how it ended.
struct Registering {
    stop: CancellationToken,
    task: JoinHandle<agentplane_controller::kube::error::Result<()>>,
}

impl Registering {
    fn start(
        cluster: kube::Client,
        registration: Registration,
        server: &Server,
        token: Option<String>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Self> {
        let addr = server.local_addr().context("registration needs a TCP listener")?;
        let node = agentplane_node_agent::client::Client::new(&agentplane_node_agent::server::local_url(addr), token)
            .context("cannot build a client of this node agent")?;
        let stop = shutdown.child_token();
        let task = tokio::spawn(register::run(cluster, registration, node, stop.clone()));
        Ok(Registering { stop, task })
    }

    async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!("registration ended: {error}"),
            Err(error) => tracing::error!("registration ended abnormally: {error}"),
        }
    }
}

pub async fn run(mut args: NodeAgentArgs) -> anyhow::Result<()> {
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
    let cluster = args.registration.resolve(token.is_some()).await?;
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
    // The inspector, logged in by a one-time code (never the token) in the fragment.
    if let Some(addr) = server.local_addr() {
        let code = server.requires_token().then(|| server.login_code().0);
        eprintln!(
            "inspector: {}",
            crate::ui::inspector_url(&agentplane_node_agent::server::local_url(addr), code.as_deref())
        );
    }
    if args.announce_ready {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {url}").and_then(|()| out.flush()).context("announcing readiness on stdout")?;
    }
    let registering = match cluster {
        Some((cluster, registration)) => {
            Some(Registering::start(cluster, registration, &server, config.token.clone(), &shutdown)?)
        }
        None => None,
    };
    let served = server.run().await;
    // Also when serving failed: registration must not outlive the server it announces.
    if let Some(registering) = registering {
        registering.stop().await;
    }
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
    use agentplane_controller::dir::managed::SANDBOX_PROXY_ADDR;
    use agentplane_egress as netproxy;
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
