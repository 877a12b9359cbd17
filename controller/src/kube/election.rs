//! Leader election: of several controller replicas, the one holding a Lease reconciles;
//! the others wait as standbys and take over when it is released or expires.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::error::{Error, Result};
use super::{FIELD_MANAGER, KubeStoreConfig, Metrics, run};

/// The Lease that decides which replica reconciles.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    /// This replica's name in the Lease (unique among replicas).
    pub identity: String,
    /// How long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

/// Runs the controllers, under `election` when given: a replica waits for the Lease,
/// reconciles while it holds it, and stops with an error the moment it loses it (so
/// two replicas never both write; the Deployment restarts it as a standby).
pub async fn run_elected(
    client: kube::Client,
    config: KubeStoreConfig,
    metrics: Metrics,
    election: Option<Election>,
    shutdown: CancellationToken,
) -> Result<()> {
    let Some(election) = election else {
        metrics.leader.set(1);
        return run(client, config, metrics, shutdown).await;
    };
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &election.lease)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(election.duration.as_secs().max(2))
        .with_grace(election.grace.as_secs().max(1))
        .with_field_manager(FIELD_MANAGER)
        .build()
        .await
        .map_err(|e| Error::Config(format!("leader election Lease {}/{}: {e}", election.namespace, election.lease)))?;
    let (mut leader, lease_task) = manager.watch().await;
    // A standby is ready: it answers probes while it waits.
    metrics.set_ready(true);
    info!(identity = %election.identity, lease = %election.lease, "waiting for the leader Lease");
    while !*leader.borrow_and_update() {
        tokio::select! {
            _ = shutdown.cancelled() => return release(leader, lease_task).await,
            changed = leader.changed() => if changed.is_err() {
                return Err(Error::Config("the leader election task ended".into()));
            },
        }
    }
    info!(identity = %election.identity, "became the leader");
    metrics.leader.set(1);
    let work = shutdown.child_token();
    let controllers = tokio::spawn(run(client, config, metrics.clone(), work.clone()));
    let lost = async {
        loop {
            if leader.changed().await.is_err() || !*leader.borrow_and_update() {
                return;
            }
        }
    };
    let outcome = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        _ = lost => Err(Error::Config("lost the leader Lease; stopping so that only the new leader writes".into())),
    };
    work.cancel();
    metrics.leader.set(0);
    let _ = controllers.await;
    let released = release(leader, lease_task).await;
    outcome.and(released)
}

/// Gives the Lease back so a standby takes over at once rather than after it expires.
async fn release(
    leader: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
) -> Result<()> {
    drop(leader);
    match task.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Config(format!("releasing the leader Lease: {e}"))),
        Err(e) => Err(Error::Config(format!("the leader election task: {e}"))),
    }
}
