//! `agentplane node-agent`: flags, logging and signals around the node agent server.

use std::path::PathBuf;
use std::time::Duration;

use agentplane_controller::kube::register::{self, Registration};
use agentplane_crds::SecretKeySelector;
use agentplane_node_agent::Server;

use crate::serve;
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
    #[command(flatten)]
    serve: serve::ServeArgs,
    #[command(flatten)]
    registration: RegisterArgs,
}

impl NodeAgentArgs {
    /// See [`serve::ServeArgs::take_inherited_listener`]; a tool takes no socket.
    pub fn take_inherited_listener(&mut self) -> anyhow::Result<()> {
        if self.command.is_some() {
            return Ok(());
        }
        self.serve.take_inherited_listener()
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

/// Serves, registered with a cluster when `--register` asks.
pub async fn run(args: NodeAgentArgs) -> anyhow::Result<()> {
    if args.registration.register && (args.serve.listen_unix.is_some() || args.serve.listen_inherited) {
        bail!("--register needs a TCP --listen: the controller reaches the node agent over the network");
    }
    serve::run(args.serve, Cluster { registration: Some(args.registration), registering: None }).await
}

/// What `agentplane node-agent` adds to serving: the inspector's address, and the
/// registration with a cluster.
struct Cluster {
    registration: Option<RegisterArgs>,
    registering: Option<Registering>,
}

impl serve::Around for Cluster {
    type Prepared = Option<(kube::Client, Registration)>;

    async fn prepare(&mut self, serves_with_token: bool) -> anyhow::Result<Self::Prepared> {
        match self.registration.take() {
            Some(registration) => registration.resolve(serves_with_token).await,
            None => Ok(None),
        }
    }

    fn started(
        &mut self,
        prepared: Self::Prepared,
        server: &Server,
        token: Option<String>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        // The inspector, logged in by a one-time code (never the token) in the fragment.
        if let Some(addr) = server.local_addr() {
            let code = server.requires_token().then(|| server.login_code().0);
            eprintln!(
                "inspector: {}",
                crate::ui::inspector_url(&agentplane_node_agent::server::local_url(addr), code.as_deref())
            );
        }
        if let Some((cluster, registration)) = prepared {
            self.registering = Some(Registering::start(cluster, registration, server, token, shutdown)?);
        }
        Ok(())
    }

    async fn stopped(self) {
        // Also when serving failed: registration must not outlive the server it announces.
        if let Some(registering) = self.registering {
            registering.stop().await;
        }
    }
}

pub use serve::{init_logging, watch_stop_signals};
