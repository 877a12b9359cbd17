//! `agentplane suspend sandbox/NAME` and `agentplane resume sandbox/NAME`: put a managed
//! sandbox to sleep now, as if it were idle, and wake it. Like `restart`, the verbs only
//! ask and never edit the user's file: `spec.suspend` is the declaration that holds a
//! sandbox suspended, and these are one-off requests beside it.
//!
//! `suspend` writes the request beside the status (`STATE/suspends/<uid>`, see
//! `agentplane_controller::restart`); `up` honours it once. Anything that wakes an idle
//! sandbox wakes it (a message, a reply, a client of its endpoint). `resume` is such a
//! client: it asks the sandbox's endpoint, which wakes it and answers once it serves.

use std::time::Duration;

use agentplane_crds::{Key, Kind, Object, SandboxPhase};
use agentplane_node_agent::client::Timeouts;
use anyhow::{Context, bail};
use clap::Args;

use crate::resources::{parse_refs, ref_name};
use crate::store::{Store, StoreArgs};
use crate::workspace::Workspace;

/// How long `resume` waits for a sandbox to serve again (its endpoint waits up to 30 s).
const WAKE_PATIENCE: Duration = Duration::from_secs(45);

#[derive(Args, Debug)]
pub struct SuspendArgs {
    /// sandbox/NAME; several at once, or sandbox NAME ...
    #[arg(required = true, add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    sandboxes: Vec<String>,
    /// The namespace of the resources (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

/// The managed Sandboxes `args` name, in the folder store.
async fn sandboxes(args: &SuspendArgs, verb: &str) -> anyhow::Result<(Store, Vec<Key>)> {
    let refs = parse_refs(&args.sandboxes, Some(Kind::Sandbox))?;
    if let Some((kind, name)) = refs.iter().find(|(kind, _)| *kind != Kind::Sandbox) {
        bail!(
            "{}: only a sandbox is {verb}",
            ref_name(&Key { kind: *kind, namespace: String::new(), name: name.clone() })
        );
    }
    let store = Store::open(&args.store).await?;
    if matches!(store, Store::Kube(_)) {
        bail!("suspend and resume are served by the folder store (agentplane up) only so far, not on a cluster");
    }
    let namespace = store.namespace(args.namespace.as_deref());
    let keys = refs.into_iter().map(|(kind, name)| Key { kind, namespace: namespace.clone(), name }).collect();
    Ok((store, keys))
}

fn managed(workspace: &Workspace, key: &Key) -> anyhow::Result<agentplane_crds::Sandbox> {
    let Object::Sandbox(sandbox) = workspace.taken(key)? else { bail!("{} is not a sandbox", ref_name(key)) };
    if !sandbox.spec.is_managed() {
        bail!("{} has an endpoint: it runs elsewhere, and `up` does not suspend it", ref_name(key));
    }
    Ok(sandbox)
}

fn phase(sandbox: &agentplane_crds::Sandbox) -> Option<SandboxPhase> {
    sandbox.status.as_ref()?.phase
}

pub async fn suspend(args: SuspendArgs) -> anyhow::Result<i32> {
    let (store, keys) = sandboxes(&args, "suspended").await?;
    let Store::Dir(workspace) = &store else { unreachable!("refused above") };
    let at = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339)?;
    let requests = agentplane_controller::restart::Requests::suspends(workspace.state.root());
    let mut failed = false;
    for key in keys {
        let asked = managed(workspace, &key).and_then(|sandbox| {
            if phase(&sandbox) == Some(SandboxPhase::Suspended) {
                println!("{} is suspended already", ref_name(&key));
                return Ok(());
            }
            let uid = sandbox.metadata.uid.with_context(|| format!("{} has no uid in its record", ref_name(&key)))?;
            requests.request(&uid, &at).map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("{} suspend requested", ref_name(&key));
            Ok(())
        });
        if let Err(error) = asked {
            eprintln!("error: {error:#}");
            failed = true;
        }
    }
    if !failed && workspace.up().is_none() {
        eprintln!("agentplane up is not running on {}: nothing of it runs", workspace.dir.display());
    }
    Ok(if failed { 1 } else { 0 })
}

pub async fn resume(args: SuspendArgs) -> anyhow::Result<i32> {
    let (store, keys) = sandboxes(&args, "resumed").await?;
    let Store::Dir(workspace) = &store else { unreachable!("refused above") };
    let mut failed = false;
    for key in keys {
        if let Err(error) = resume_one(workspace, &key).await {
            eprintln!("error: {error:#}");
            failed = true;
        }
    }
    Ok(if failed { 1 } else { 0 })
}

async fn resume_one(workspace: &Workspace, key: &Key) -> anyhow::Result<()> {
    let sandbox = managed(workspace, key)?;
    if sandbox.spec.suspend {
        let file = agentplane_controller::dir::store::source_file(&sandbox.metadata).unwrap_or("its file");
        bail!("{} is held suspended by spec.suspend: true (in {file}): set it to false to resume it", ref_name(key));
    }
    if phase(&sandbox) != Some(SandboxPhase::Suspended) {
        let phase = phase(&sandbox).map(|p| format!("{p:?}")).unwrap_or_else(|| "not started".into());
        println!("{} is not suspended ({phase})", ref_name(key));
        return Ok(());
    }
    // Its endpoint wakes it and answers once the node agent serves again.
    let client = workspace.node_agent_for(&Object::Sandbox(sandbox))?.with_other_timeouts(Timeouts {
        answer: WAKE_PATIENCE,
        health: WAKE_PATIENCE,
        ..Timeouts::default()
    })?;
    client.activity().await.with_context(|| format!("waking {}", ref_name(key)))?;
    println!("{} resumed", ref_name(key));
    Ok(())
}
