//! `agentplane node-agent`: flags, logging and signals around the node agent server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentplane_node_agent::{Config, Limits, Server};
use anyhow::{Context, bail};
use clap::Args;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
pub struct NodeAgentArgs {
    /// Address to listen on.
    #[arg(long, env = "AGENTPLANE_LISTEN", default_value = "127.0.0.1:2468")]
    listen: SocketAddr,
    /// Bearer token every client must present (at least 8 characters).
    #[arg(long, env = "AGENTPLANE_TOKEN", hide_env_values = true, conflicts_with = "no_token")]
    token: Option<String>,
    /// Serve without authentication: for local experiments only.
    #[arg(long, env = "AGENTPLANE_NO_TOKEN")]
    no_token: bool,
    /// Where the node agent keeps its state (default ~/.local/share/agentplane/node-agent).
    #[arg(long, env = "AGENTPLANE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// A browser origin allowed to call the API (repeat for several; none by default).
    #[arg(long = "cors-origin", env = "AGENTPLANE_CORS_ORIGINS", value_delimiter = ',')]
    cors_origins: Vec<String>,
    /// Most processes running at once.
    #[arg(long, env = "AGENTPLANE_MAX_PROCESSES", default_value_t = 256)]
    max_processes: usize,
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
}

pub async fn run(args: NodeAgentArgs) -> anyhow::Result<()> {
    init_logging();
    let token = match (args.token, args.no_token) {
        (Some(token), false) => Some(token),
        (None, true) => None,
        _ => bail!("give a token (--token or AGENTPLANE_TOKEN), or --no-token to serve without authentication"),
    };
    if args.output_buffer_bytes == 0 {
        bail!("--output-buffer-bytes must be positive");
    }
    if !args.stop_timeout.is_finite() || args.stop_timeout < 0.0 {
        bail!("--stop-timeout must be a positive number of seconds");
    }
    let data_dir = match args.data_dir {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let config = Config {
        listen: args.listen,
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
    };
    let shutdown = CancellationToken::new();
    // Before any process can start: see `watch_stop_signals`.
    watch_stop_signals(shutdown.clone())?;
    let server = Server::bind(config.clone(), shutdown.clone()).await?;
    tracing::info!(
        listen = %server.local_addr(),
        data_dir = %config.data_dir.display(),
        auth = config.token.is_some(),
        "node agent ready"
    );
    server.run().await?;
    tracing::info!("node agent stopped");
    Ok(())
}

pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person watching; logs collected to files stay plain.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
        tracing::info!(signal = name, "shutting down");
        shutdown.cancel();
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
