//! `agentplane controller`: the cluster store, as an operator runs it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentplane_controller::kube::{Election, KubeStoreConfig, Metrics, run_elected};
use anyhow::Context as _;
use clap::{ArgAction, Args};
use tokio_util::sync::CancellationToken;

use crate::node_agent::{init_logging, watch_stop_signals};

/// How the controller and the egress proxy reach the cluster.
#[derive(Args, Debug)]
struct Cluster {
    /// A kubeconfig file; without it, the in-cluster config or ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    context: Option<String>,
}

#[derive(Args, Debug)]
pub struct ControllerArgs {
    #[command(flatten)]
    cluster: Cluster,
    /// A namespace to watch (repeat for several; default: all namespaces).
    #[arg(long = "namespace", short = 'n', env = "AGENTPLANE_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Where to serve Prometheus metrics (`/metrics`).
    #[arg(long, env = "AGENTPLANE_METRICS_LISTEN", default_value = "0.0.0.0:8080")]
    metrics_listen: SocketAddr,
    /// Where to serve `/healthz` and `/readyz`.
    #[arg(long, env = "AGENTPLANE_HEALTH_LISTEN", default_value = "0.0.0.0:8081")]
    health_listen: SocketAddr,
    /// Hold a Lease so that only one replica reconciles (`--leader-election=false` to run alone).
    #[arg(long, env = "AGENTPLANE_LEADER_ELECTION", default_value_t = true, action = ArgAction::Set)]
    leader_election: bool,
    /// The Lease's namespace (default: this pod's namespace, else the kubeconfig's).
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// The Lease's name.
    #[arg(long, default_value = "agentplane-controller")]
    leader_election_lease: String,
    /// Seconds a leader that stopped renewing keeps the Lease.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// This replica's identity in the Lease and in Events (default: the pod's name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Reconciles run at once, per kind.
    #[arg(long, default_value_t = 32)]
    concurrency: u16,
    /// Seconds after which a Sandbox whose node agent stopped reporting is not ready.
    #[arg(long, default_value_t = 30)]
    heartbeat_grace: u64,
    /// The image of a managed Sandbox's Pod (one without spec.endpoint) when its
    /// podTemplate names none; it must hold `agentplane`, and node and npm for agent
    /// installs (the repository's Dockerfile builds one) [default: this version's
    /// ghcr.io/agentplane/agentplane].
    #[arg(long, env = "AGENTPLANE_SANDBOX_IMAGE", value_name = "IMAGE")]
    sandbox_image: Option<String>,
    /// The cluster's egress proxy (`agentplane egress-proxy`) as sandbox Pods reach it,
    /// `HOST:PORT` (manifests/egress-proxy.yaml: agentplane-egress.agentplane-system.svc:3128).
    /// With it, a Sandbox with `network: allowlist` reaches the network only through the
    /// proxy, which enforces its entries by name and swaps its credentials in.
    #[arg(long, env = "AGENTPLANE_EGRESS_PROXY", value_name = "HOST:PORT")]
    egress_proxy: Option<String>,
    /// The namespace the egress proxy's Pods run in (a sandbox's NetworkPolicy lets it
    /// reach those Pods only).
    #[arg(long, env = "AGENTPLANE_EGRESS_PROXY_NAMESPACE", default_value = "agentplane-system")]
    egress_proxy_namespace: String,
    /// Where every replica of the egress proxy answers `/counts`, `http://HOST:PORT`,
    /// HOST resolving to each (manifests/egress-proxy.yaml: the headless Service
    /// http://agentplane-egress-replicas.agentplane-system.svc:8080). With it, each
    /// Sandbox's status shows what the proxy counted for it (`credentials`,
    /// `deniedConnections`, `lastDenied`); without it, only the proxy's metrics do.
    #[arg(long, env = "AGENTPLANE_EGRESS_PROXY_COUNTS", value_name = "URL", requires = "egress_proxy")]
    egress_proxy_counts: Option<String>,
}

/// `agentplane egress-proxy`: the cluster's egress proxy (see docs/cluster.md).
#[derive(Args, Debug)]
pub struct EgressProxyArgs {
    #[command(flatten)]
    cluster: Cluster,
    /// A namespace whose Sandboxes it serves (repeat for several; default: all).
    #[arg(long = "namespace", short = 'n', env = "AGENTPLANE_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Where sandbox Pods reach it.
    #[arg(long, env = "AGENTPLANE_EGRESS_LISTEN", default_value = "0.0.0.0:3128")]
    listen: SocketAddr,
    /// Where to serve Prometheus metrics (`/metrics`): what each sandbox's proxy refused,
    /// sent and blocked.
    #[arg(long, env = "AGENTPLANE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

pub async fn run_egress_proxy(args: EgressProxyArgs) -> anyhow::Result<()> {
    init_logging();
    let (client, _) = kube_client(&args.cluster).await?;
    let shutdown = CancellationToken::new();
    watch_stop_signals(shutdown.clone())?;
    let options = agentplane_controller::kube::egress::ProxyOptions {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        namespaces: args.namespaces,
    };
    agentplane_controller::kube::egress::serve_proxy(client, options, shutdown).await.map_err(anyhow::Error::msg)
}

/// A client for the cluster, with the namespace it defaults to.
async fn kube_client(cluster: &Cluster) -> anyhow::Result<(kube::Client, String)> {
    let config = crate::kubeconfig::load(cluster.kubeconfig.as_deref(), cluster.context.as_deref()).await?;
    let namespace = config.default_namespace.clone();
    Ok((kube::Client::try_from(config).context("building the Kubernetes client")?, namespace))
}

pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    init_logging();
    if args.concurrency == 0 {
        anyhow::bail!("--concurrency must be at least 1");
    }
    let (client, default_namespace) = kube_client(&args.cluster).await?;
    let identity = args.identity.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "controller".into());
        format!("{host}-{}", &uuid_suffix())
    });
    let config = KubeStoreConfig {
        namespaces: args.namespaces,
        concurrency: args.concurrency,
        heartbeat_grace: Duration::from_secs(args.heartbeat_grace.max(1)),
        instance: identity.clone(),
        sandbox_image: args.sandbox_image.clone().unwrap_or_else(agentplane_controller::kube::default_sandbox_image),
        egress_proxy: args.egress_proxy.clone().map(|address| agentplane_controller::kube::egress::EgressProxy {
            address,
            namespace: args.egress_proxy_namespace.clone(),
            counts: args.egress_proxy_counts.clone(),
        }),
    };
    let election = args.leader_election.then(|| Election {
        namespace: args.leader_election_namespace.clone().unwrap_or(default_namespace),
        lease: args.leader_election_lease.clone(),
        identity: identity.clone(),
        duration: Duration::from_secs(args.lease_duration.max(2)),
        grace: Duration::from_secs((args.lease_duration / 3).max(1)),
    });
    let shutdown = CancellationToken::new();
    watch_stop_signals(shutdown.clone())?;
    let metrics = Metrics::new();
    let bound = agentplane_controller::metrics::serve(
        metrics.clone(),
        Some(args.metrics_listen),
        Some(args.health_listen),
        shutdown.clone(),
    )
    .await
    .context("serving metrics and health")?;
    tracing::info!(
        identity = %identity,
        leader_election = args.leader_election,
        namespaces = ?config.namespaces,
        listening = ?bound,
        "controller starting"
    );
    let result = run_elected(client, config, metrics, election, shutdown.clone()).await;
    shutdown.cancel();
    result.map_err(Into::into)
}

fn uuid_suffix() -> String {
    agentplane_node_agent::random::hex(4)
}
