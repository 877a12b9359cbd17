//! `agentplane up`: the embedded default. A node agent (the sandbox `local`) and the
//! controller on a watched directory, in one process, with no cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentplane_controller::dir::state::{StateDir, UpInfo};
use agentplane_controller::dir::store::{DirStore, DirStoreConfig};
use agentplane_controller::node_agent::embedded::Embedded;
use agentplane_controller::sandboxes::Sandboxes;
use agentplane_node_agent::client::Client;
use agentplane_node_agent::{Config, Limits, Server, SessionOptions};
use anyhow::{Context, bail};
use clap::Args;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
pub struct UpArgs {
    /// The directory of resources to watch (created if missing): `*.yaml` and `*.yml`
    /// files, in any subfolders, several documents per file.
    #[arg(long, env = "AGENTPLANE_DIR", default_value = "agentplane.d")]
    dir: PathBuf,
    /// Where status is kept (default DIR/.agentplane). Never the user's files.
    #[arg(long, env = "AGENTPLANE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Address of the embedded node agent (port 0 picks a free one; the CLI finds it
    /// from the directory).
    #[arg(long, env = "AGENTPLANE_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Bearer token for the node agent (default: a random one, kept in the state directory).
    #[arg(long, env = "AGENTPLANE_TOKEN", hide_env_values = true, conflicts_with = "no_token")]
    token: Option<String>,
    /// Serve the node agent without authentication: for local experiments only.
    #[arg(long, env = "AGENTPLANE_NO_TOKEN")]
    no_token: bool,
    /// Resources reconciled at once.
    #[arg(long, env = "AGENTPLANE_WORKERS", default_value_t = 32)]
    workers: usize,
    /// Most processes running at once.
    #[arg(long, env = "AGENTPLANE_MAX_PROCESSES", default_value_t = 4096)]
    max_processes: usize,
    /// Most agent sessions live at once (ended ones do not count): each real agent
    /// is a process of hundreds of MB.
    #[arg(long, env = "AGENTPLANE_MAX_SESSIONS", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    max_sessions: u64,
    /// Also serve Prometheus metrics (`/metrics`: the node agent's and the
    /// controller's) on this address, without the token (on the node agent's address
    /// they need it).
    #[arg(long, env = "AGENTPLANE_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Where agent CLIs are installed (default: the state directory's); folders may
    /// share one. Managed sandboxes see it read-only.
    #[arg(long, env = "AGENTPLANE_AGENTS_DIR")]
    agents_dir: Option<PathBuf>,
    /// Seconds between full rescans of the directory, besides the file events.
    #[arg(long, env = "AGENTPLANE_RESYNC_SECONDS", default_value_t = 30)]
    resync_seconds: u64,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    crate::node_agent::init_logging();
    std::fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = args.dir.canonicalize().with_context(|| format!("resolving {}", args.dir.display()))?;
    let mut store_config = DirStoreConfig::new(&dir);
    if let Some(state_dir) = &args.state_dir {
        store_config.state_dir = state_dir.clone();
    }
    store_config.workers = args.workers;
    store_config.resync = Duration::from_secs(args.resync_seconds.max(1));
    let state = StateDir::new(&store_config.state_dir);
    state.create()?;
    let _lock = state.lock()?;
    let token = match (args.token, args.no_token) {
        (Some(token), _) => Some(token),
        (None, true) => None,
        (None, false) => Some(agentplane_node_agent::random::hex(24)),
    };
    if token.as_ref().is_some_and(|t| t.len() < 8) {
        bail!("the token must be at least 8 characters");
    }

    let shutdown = CancellationToken::new();
    crate::node_agent::watch_stop_signals(shutdown.clone())?;
    let config = Config {
        listen: args.listen,
        listen_unix: None,
        token: token.clone(),
        data_dir: state.node_agent_dir(),
        cors_origins: Vec::new(),
        limits: Limits { max_running: args.max_processes, max_exited: args.max_processes, ..Limits::default() },
        fs_roots: Vec::new(),
    };
    let agents_dir = match &args.agents_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?
        }
        None => state.node_agent_dir().join("agents"),
    };
    let sessions = SessionOptions {
        agents_dir: Some(agents_dir.clone()),
        max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
        ..SessionOptions::default()
    };
    let mut server = Server::bind_with(config, sessions, shutdown.clone()).await?;
    // One scrape for both halves of `up`: the controller's registry after the node agent's.
    let controller_metrics = agentplane_controller::metrics::Metrics::new();
    // This process holds the folder's lock, as a controller replica holds the Lease.
    controller_metrics.leader.set(1);
    store_config.metrics = controller_metrics.clone();
    server.metrics().add_source(Arc::new(move |out: &mut String| {
        out.push_str(agentplane_node_agent::metrics::without_eof(&controller_metrics.encode()?));
        Ok(())
    }));
    let metrics_at = match args.metrics_listen {
        Some(addr) => Some(server.serve_metrics(addr).await?),
        None => None,
    };
    let url = format!("http://{}", server.local_addr().context("up's node agent listens on TCP")?);
    // Managed Sandboxes: this binary runs their node agents, with the agent CLIs the
    // embedded node agent installs, and the user's folder and this state hidden.
    let binary = std::env::current_exe().context("finding this program, to start sandboxes with")?;
    // `cargo install` puts the node agent alone beside this binary; a build without it
    // runs `agentplane node-agent` in its sandboxes.
    let node_agent = binary.with_file_name("agentplane-node-agent");
    store_config.launch = Some(agentplane_controller::dir::managed::LaunchConfig {
        node_agent: node_agent.is_file().then_some(node_agent),
        binary,
        agents_dir,
        root: state.sandboxes_dir(),
        masked: vec![dir.clone(), state.root().canonicalize().unwrap_or_else(|_| state.root().to_path_buf())],
    });
    let sandboxes = Arc::new(Sandboxes::new());
    // Its Processes' calls are made in process; the rest over its API.
    let embedded = Embedded::new(server.in_process(), Client::new(&url, token.clone())?);
    sandboxes.insert_node(agentplane_crds::LOCAL_SANDBOX, Arc::new(embedded), None);
    let store = DirStore::open(store_config, sandboxes)?;
    // The embedded node agent serves the store's resources (`/v1/resources`) to the inspector.
    server.set_resources(Arc::new(store.clone()));
    // Kept after the stop, so that `get` can say how old the status it shows is.
    let run = state.write_run_started()?;
    state.write_up(&UpInfo { url: url.clone(), token, pid: std::process::id(), dir: dir.clone() })?;

    // The flags as given, quoted: the hints are meant to be pasted.
    let flags = crate::printing::flags(&[
        ("--dir", Some(args.dir.as_os_str())),
        ("--state-dir", args.state_dir.as_deref().map(std::path::Path::as_os_str)),
    ]);
    eprintln!("agentplane up: watching {} (status in {})", dir.display(), state.root().display());
    eprintln!("  node agent (sandbox `local`): {url}");
    // A code, not the token: it is used once, within 10 minutes, from the fragment.
    let code = server.requires_token().then(|| server.login_code().0);
    eprintln!("  inspector: {}", crate::ui::inspector_url(&url, code.as_deref()));
    if let Some(addr) = metrics_at {
        eprintln!("  metrics: http://{addr}/metrics");
    }
    eprintln!("  see:    agentplane get processes{flags}");
    eprintln!("  attach: agentplane attach process/NAME{flags}");
    if code.is_some() {
        eprintln!("  ui:     agentplane ui{flags}   (a new inspector link: each logs in once)");
    }

    // Said again once every resource found has been taken once: what starting them
    // logged (sessions resuming, sandboxes starting) would otherwise bury the link.
    let mut first_pass = store.first_pass();
    let inspector = crate::ui::inspector_url(&url, code.as_deref());
    let ready_state = state.root().to_path_buf();
    tokio::spawn(async move {
        if first_pass.wait_for(|done| *done).await.is_ok() {
            // One write, so that a reader of the log never sees the first line alone.
            let said = format!("agentplane up: ready; status in {}\n  inspector: {inspector}\n", ready_state.display());
            eprint!("{said}");
        }
    });
    let server_task = tokio::spawn(server.run());
    let store_result = store.run(shutdown.clone()).await;
    shutdown.cancel();
    let served = server_task.await.context("the node agent task")?;
    state.remove_up();
    if let Err(e) = state.write_run_stopped(&run) {
        tracing::warn!(error = %e, "the time of this stop could not be recorded");
    }
    store_result?;
    served?;
    tracing::info!("stopped");
    Ok(())
}
