//! Where the resource verbs find resources: the watched directory of a local
//! `agentplane up` (the default), or a Kubernetes cluster (`--kubeconfig`). The verbs
//! ask a `Store` and print what it answers the same way whichever store it is.

use std::path::PathBuf;
use std::time::Duration;

use agentplane_crds::Session;
use agentplane_crds::{Key, Object};
use agentplane_node_agent::client::Client;
use anyhow::bail;
use clap::Args;
use futures_util::StreamExt;
use futures_util::stream::LocalBoxStream;

use crate::cluster::Cluster;
use crate::resources::SpecItem;
use crate::workspace::{DirArgs, Workspace, watch_state};

// Where `get` names these from, since before they moved to `resources`.
pub use crate::resources::{Change, Events, Selection};

/// The directory flags, or a cluster's.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Work on the resources of a Kubernetes cluster, reached with this kubeconfig,
    /// instead of a watched directory.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long, requires = "kubeconfig")]
    pub context: Option<String>,
}

pub enum Store {
    Dir(Workspace),
    Kube(Cluster),
}

impl Store {
    pub async fn open(args: &StoreArgs) -> anyhow::Result<Store> {
        match &args.kubeconfig {
            Some(kubeconfig) => Ok(Store::Kube(Cluster::connect(kubeconfig, args.context.as_deref()).await?)),
            None => Ok(Store::Dir(Workspace::new(&args.dir))),
        }
    }

    /// The namespace a verb works in: the one given, else the kubeconfig context's.
    pub fn namespace(&self, given: Option<&str>) -> String {
        let default = match self {
            Store::Dir(_) => "default",
            Store::Kube(cluster) => cluster.default_namespace(),
        };
        given.unwrap_or(default).to_string()
    }

    pub async fn require(&self, key: &Key) -> anyhow::Result<Object> {
        match self {
            Store::Dir(workspace) => workspace.require(key),
            Store::Kube(cluster) => cluster.get(key).await,
        }
    }

    /// The selected resources, sorted.
    pub async fn select(&self, selection: &Selection) -> anyhow::Result<Vec<Object>> {
        match self {
            Store::Dir(workspace) => {
                if !workspace.dir.is_dir() {
                    bail!(
                        "{} does not exist: give the directory `agentplane up --dir` watches (--dir or AGENTPLANE_DIR), or a cluster's --kubeconfig",
                        workspace.dir.display()
                    );
                }
                dir_select(workspace, selection)
            }
            Store::Kube(cluster) => match &selection.name {
                Some(name) => Ok(vec![cluster.get(&selection.key(name)).await?]),
                None => cluster.list(selection.kind, selection.scope()).await,
            },
        }
    }

    /// Every change of the selection from now on, until the stream is dropped.
    pub fn changes<'a>(&'a self, selection: &'a Selection) -> anyhow::Result<LocalBoxStream<'a, Change>> {
        match self {
            Store::Dir(workspace) => dir_changes(workspace, selection),
            Store::Kube(cluster) => Ok(cluster.watch(selection)),
        }
    }

    /// What a person should know of the store itself: the files it could not take.
    pub fn problems(&self) -> Vec<String> {
        match self {
            Store::Dir(workspace) => workspace.state.read_errors().iter().map(ToString::to_string).collect(),
            Store::Kube(_) => Vec::new(),
        }
    }

    /// The node agent that runs a Process or Session.
    pub async fn node_agent(&self, object: &Object) -> anyhow::Result<Client> {
        match self {
            Store::Dir(workspace) => workspace.node_agent_for(object),
            Store::Kube(cluster) => cluster.node_agent(object).await,
        }
    }

    /// The node agent to show a Process's output from, or in a few words why there is none.
    pub async fn output_source(&self, object: &Object) -> Result<Client, String> {
        match self {
            Store::Dir(workspace) => workspace.node_agent_for(object).map_err(|e| format!("{e:#}")),
            Store::Kube(cluster) => cluster.node_agent(object).await.map_err(|e| format!("{e:#}")),
        }
    }

    pub async fn events(&self, object: &Object) -> Events {
        match self {
            Store::Dir(_) => Events::NotKept,
            Store::Kube(cluster) => cluster.events(object).await,
        }
    }

    /// The Session as stored, when the store has it (the directory store may not yet).
    pub async fn session(&self, key: &Key) -> anyhow::Result<Option<Session>> {
        let object = match self {
            Store::Dir(workspace) => workspace.record(key).ok().flatten(),
            Store::Kube(cluster) => Some(cluster.get(key).await?),
        };
        Ok(match object {
            Some(Object::Session(session)) => Some(session),
            _ => None,
        })
    }

    /// Appends `item` to the Session's spec; returns how many items its list then
    /// holds, and the file it was written to (directory store).
    ///
    /// Either store refuses a reply to an id that the Session's status does not list
    /// as pending, naming those that are.
    pub async fn append(&self, key: &Key, item: &SpecItem) -> anyhow::Result<(usize, Option<String>)> {
        match self {
            Store::Dir(workspace) => {
                workspace.append_to_session(key, item).await.map(|(count, file)| (count, Some(file)))
            }
            Store::Kube(cluster) => cluster.append(key, item).await.map(|count| (count, None)),
        }
    }
}

impl Store {
    /// Declares a new resource: in the directory store a file of its own
    /// (`DIR/NAME.yaml`), on a cluster a create. Either refuses one that exists.
    pub async fn create(&self, object: &Object) -> anyhow::Result<()> {
        match self {
            Store::Dir(workspace) => workspace.declare(object).await,
            Store::Kube(cluster) => cluster.create(object).await,
        }
    }

    /// Asks the controller to restart a Process or Session once, with the back-off
    /// reset; returns the resource as it was.
    pub async fn request_restart(&self, key: &Key, at: &str) -> anyhow::Result<Object> {
        match self {
            Store::Dir(workspace) => workspace.request_restart(key, at),
            Store::Kube(cluster) => cluster.request_restart(key, at).await,
        }
    }
}

fn dir_select(workspace: &Workspace, selection: &Selection) -> anyhow::Result<Vec<Object>> {
    match &selection.name {
        Some(name) => Ok(vec![workspace.require(&selection.key(name))?]),
        None => Ok(workspace.records(selection.kind, selection.scope())),
    }
}

/// The whole selection again after each change of the state directory.
fn dir_changes<'a>(workspace: &'a Workspace, selection: &'a Selection) -> anyhow::Result<LocalBoxStream<'a, Change>> {
    let (watcher, changes) = watch_state(&workspace.state)?;
    let stream = futures_util::stream::unfold((watcher, changes), move |(watcher, mut changes)| async move {
        changes.recv().await?;
        // Let a burst of writes land before reading them.
        tokio::time::sleep(Duration::from_millis(20)).await;
        while changes.try_recv().is_ok() {}
        // NAME may be gone for now, and come back.
        let objects = dir_select(workspace, selection).unwrap_or_default();
        Some((Change::All(objects), (watcher, changes)))
    });
    Ok(stream.boxed_local())
}
