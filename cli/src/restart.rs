//! `agentplane restart process/NAME` (or `session/NAME`): run it again now, with its
//! restart back-off reset, as `kubectl rollout restart` does for a Deployment; a
//! Session's agent restarts, resuming its conversation. The
//! verb only asks (an annotation in a cluster, a request beside the status in a watched
//! directory, never an edit of the user's file); the controller honours each request
//! once and records that it did (see `agentplane_controller::restart`).

use agentplane_crds::DesiredState;
use agentplane_crds::{Key, Kind, Object};
use anyhow::bail;
use clap::Args;

use crate::resources::{kind_word, parse_refs, ref_name};
use crate::store::{Store, StoreArgs};

#[derive(Args, Debug)]
pub struct RestartArgs {
    /// process/NAME or session/NAME; several at once, or KIND NAME ...
    #[arg(required = true, add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    resources: Vec<String>,
    /// The namespace of the resources (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn restart(args: RestartArgs) -> anyhow::Result<i32> {
    let refs = parse_refs(&args.resources, None)?;
    if let Some((kind, name)) = refs.iter().find(|(kind, _)| *kind == Kind::Sandbox) {
        bail!("{}/{name}: a sandbox is not restarted; restart the processes and sessions on it", kind_word(*kind));
    }
    let store = Store::open(&args.store).await?;
    // One moment for all: each resource's request is as new as the others'.
    let at = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339)?;
    let mut failed = false;
    for (kind, name) in refs {
        let key = Key { kind, namespace: store.namespace(args.namespace.as_deref()), name };
        if let Err(error) = restart_one(&store, &key, &at).await {
            eprintln!("error: {error:#}");
            failed = true;
        }
    }
    if let Store::Dir(workspace) = &store
        && !failed
        && workspace.up().is_none()
    {
        eprintln!("agentplane up is not running on {}: the restart is made when it runs", workspace.dir.display());
    }
    Ok(if failed { 1 } else { 0 })
}

async fn restart_one(store: &Store, key: &Key, at: &str) -> anyhow::Result<()> {
    let object = match store {
        Store::Dir(workspace) => workspace.taken(key)?,
        Store::Kube(_) => store.require(key).await?,
    };
    if let Object::Process(process) = &object
        && process.spec.desired_state == DesiredState::Stopped
    {
        bail!("{} is stopped (spec.desiredState: Stopped): set it to Running to run it", ref_name(key));
    }
    if let Object::Session(session) = &object
        && session.spec.ended
    {
        bail!("{} has ended (spec.ended): there is no agent to restart", ref_name(key));
    }
    store.request_restart(key, at).await?;
    println!("{} restart requested", ref_name(key));
    Ok(())
}
