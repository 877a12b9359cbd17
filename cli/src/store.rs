//! Where the resource verbs find resources: the watched directory of a local
//! `agentplane up` (the default), or a Kubernetes cluster (`--kubeconfig`). The verbs
//! ask a `Store` and print what it answers the same way whichever store it is.

use std::path::PathBuf;
use std::time::Duration;

use agentplane_controller::dir::parse::{Key, Kind, Object};
use agentplane_crds::{Reply, Session, SessionSpec};
use agentplane_node_agent::client::Client;
use anyhow::bail;
use clap::Args;
use futures_util::StreamExt;
use futures_util::stream::LocalBoxStream;
use k8s_openapi::api::core::v1::Event;
use serde::Serialize;

use crate::cluster::Cluster;
use crate::workspace::{DirArgs, Workspace, watch_state};

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

/// The resources a listing is about.
pub struct Selection {
    pub kind: Kind,
    pub namespace: String,
    pub all_namespaces: bool,
    /// Only this one.
    pub name: Option<String>,
}

impl Selection {
    pub fn scope(&self) -> Option<&str> {
        (!self.all_namespaces).then_some(self.namespace.as_str())
    }

    fn key(&self, name: &str) -> Key {
        Key { kind: self.kind, namespace: self.namespace.clone(), name: name.to_string() }
    }
}

/// What watching a selection learns.
pub enum Change {
    /// Everything selected, as it is now: what is not in it is gone.
    All(Vec<Object>),
    /// One resource, added or changed.
    Applied(Box<Object>),
    Deleted(Key),
}

/// What a store can tell of the events about a resource.
pub enum Events {
    /// The directory store records none.
    NotKept,
    Listed(Vec<Event>),
    /// Why they cannot be shown (a user may not be allowed to list them).
    Unavailable(String),
}

/// An item appended to a Session's spec: what `send` and `reply` add. Serialized as
/// the item itself, so that a file gets the same YAML either way.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum SpecItem {
    Message(String),
    Reply(Reply),
}

impl SpecItem {
    /// The list under `spec` it goes to.
    pub fn list(&self) -> &'static str {
        match self {
            SpecItem::Message(_) => "messages",
            SpecItem::Reply(_) => "replies",
        }
    }

    /// How many items that list holds.
    pub fn count(&self, spec: &SessionSpec) -> usize {
        match self {
            SpecItem::Message(_) => spec.messages.len(),
            SpecItem::Reply(_) => spec.replies.len(),
        }
    }

    /// Appends it to `spec`; returns how many items the list then holds.
    pub fn push(&self, spec: &mut SessionSpec) -> usize {
        match self {
            SpecItem::Message(text) => spec.messages.push(text.clone()),
            SpecItem::Reply(reply) => spec.replies.push(reply.clone()),
        }
        self.count(spec)
    }

    /// A reply must answer what the Session asks now: one saved for an id that is not
    /// pending would approve whatever request later comes with that id.
    pub fn check_answers(&self, session: &Session) -> anyhow::Result<()> {
        let SpecItem::Reply(reply) = self else { return Ok(()) };
        let status = session.status.clone().unwrap_or_default();
        let asked = status
            .pending_permissions
            .iter()
            .map(|p| p.id.as_str())
            .chain(status.pending_questions.iter().map(|q| q.id.as_str()));
        let asked: Vec<&str> = asked.collect();
        if asked.contains(&reply.id.as_str()) {
            return Ok(());
        }
        let name = session.metadata.name.clone().unwrap_or_default();
        let pending = if asked.is_empty() {
            "it asks nothing now".to_string()
        } else {
            format!("it waits for {}", asked.join(", "))
        };
        bail!(
            "session/{name} has no pending question or permission request {:?} ({pending}): see `agentplane describe session {name}`",
            reply.id
        )
    }
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
            // A running `up` embeds the only node agent the directory store drives.
            Store::Dir(workspace) => workspace.node_agent(),
            Store::Kube(cluster) => cluster.node_agent(object).await,
        }
    }

    /// The node agent to show a Process's output from, or in a few words why there is none.
    pub async fn output_source(&self, object: &Object) -> Result<Client, String> {
        match self {
            Store::Dir(workspace) => workspace.node_agent().map_err(|_| "agentplane up is not running".to_string()),
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
