//! The node agents the controller can reach, by sandbox.
//!
//! In the directory store a sandbox is known by its name alone (the implicit `local`
//! serves every namespace); in a cluster a Sandbox is namespaced and serves the
//! resources of its own namespace.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use agentplane_node_agent::client::Client;

use crate::node_agent::NodeAgent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::{Error, Result};

/// What an external Sandbox's node agent answers when asked how it is (both stores ask
/// a Sandbox that nothing registers): whether it is ready, why, and what it says of
/// itself, cut to what a status holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
    pub version: Option<String>,
}

/// Asks `node` how it is.
pub async fn ask(node: &dyn NodeAgent) -> Asked {
    match node.health().await {
        Ok(health) => Asked {
            ready: true,
            reason: "Healthy",
            message: "the node agent answers".into(),
            version: Some(crate::conditions::cut(health.version, 64)),
        },
        Err(e) => Asked { ready: false, reason: "Unreachable", message: e.to_string(), version: None },
    }
}

/// Why a resource naming `sandboxTemplate` waits. Both stores place such a resource
/// on a sandbox of its own before the reconcile core sees it (its snapshot then names
/// that sandbox and no template); one still naming a template was not placed (no such
/// template yet, a claim that failed), and running it anywhere else would give it less
/// isolation than it asked for, so the core keeps it Pending instead.
pub fn template_not_placed(template: &str) -> String {
    format!("sandboxTemplate {template:?}: no sandbox of that template is held for it yet; it runs nowhere else")
}

#[derive(Debug)]
pub struct SandboxHandle {
    pub name: String,
    /// Its node agent (the typed client; a fake in the reconcilers' tests).
    pub node: Arc<dyn NodeAgent>,
    /// Where agent CLIs are installed for it, when not by its own node agent: a
    /// managed sandbox sees the shared agents directory read-only, so the embedded
    /// node agent installs into it from outside.
    pub installer: Option<Arc<dyn NodeAgent>>,
}

/// Wakes a suspended sandbox (see [`Sandboxes::wake`]).
pub type Waker = Arc<dyn Fn() + Send + Sync>;

enum Entry {
    Ready(Arc<SandboxHandle>),
    /// Known but not usable now, and why (e.g. its heartbeat is late).
    NotReady(String),
    /// Suspended, and why; woken by `wake` when something has work for it (none: only
    /// its spec wakes it).
    Suspended(String, Option<Waker>),
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Ready(handle) => f.debug_tuple("Ready").field(handle).finish(),
            Entry::NotReady(why) => f.debug_tuple("NotReady").field(why).finish(),
            Entry::Suspended(why, waker) => f.debug_tuple("Suspended").field(why).field(&waker.is_some()).finish(),
        }
    }
}

#[derive(Debug, Default)]
pub struct Sandboxes {
    namespaced: bool,
    by_key: RwLock<HashMap<String, Entry>>,
}

impl Sandboxes {
    /// Sandboxes known by name alone (the directory store).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sandboxes that serve their own namespace (the cluster store).
    pub fn namespaced() -> Self {
        Sandboxes { namespaced: true, ..Self::default() }
    }

    /// The key of sandbox `name` as seen from a resource in `namespace`.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        if self.namespaced { format!("{}/{name}", namespace.unwrap_or("default")) } else { name.to_string() }
    }

    pub fn insert(&self, key: &str, client: Client) {
        self.insert_node(key, Arc::new(client), None);
    }

    /// A sandbox whose agent CLIs another node agent installs (see `SandboxHandle::installer`).
    pub fn insert_with_installer(&self, key: &str, client: Client, installer: Option<Arc<dyn NodeAgent>>) {
        self.insert_node(key, Arc::new(client), installer);
    }

    /// A sandbox reached through any [`NodeAgent`] (the reconcilers' tests give a fake).
    pub fn insert_node(&self, key: &str, node: Arc<dyn NodeAgent>, installer: Option<Arc<dyn NodeAgent>>) {
        let handle = Arc::new(SandboxHandle { name: key.to_string(), node, installer });
        self.write().insert(key.to_string(), Entry::Ready(handle));
    }

    /// The node agent of the implicit `local` sandbox, if there is one.
    pub fn local_node(&self) -> Option<Arc<dyn NodeAgent>> {
        self.get(agentplane_crds::LOCAL_SANDBOX).ok().map(|h| Arc::clone(&h.node))
    }

    pub fn set_not_ready(&self, key: &str, why: impl Into<String>) {
        self.write().insert(key.to_string(), Entry::NotReady(why.into()));
    }

    /// Sandbox `key` is suspended, saying why; `waker`, when there is one, wakes it.
    pub fn set_suspended(&self, key: &str, why: impl Into<String>, waker: Option<Waker>) {
        self.write().insert(key.to_string(), Entry::Suspended(why.into(), waker));
    }

    /// Wakes sandbox `key` if it is suspended and may be woken (something has work for
    /// it: a message to deliver, a reply); true when it was asked to wake.
    pub fn wake(&self, key: &str) -> bool {
        let waker = match self.by_key.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            Some(Entry::Suspended(_, Some(waker))) => Arc::clone(waker),
            _ => return false,
        };
        waker();
        true
    }

    pub fn remove(&self, key: &str) {
        self.write().remove(key);
    }

    /// The sandbox `name` of a resource with metadata `meta`.
    pub fn for_resource(&self, meta: &ObjectMeta, name: &str) -> Result<Arc<SandboxHandle>> {
        self.get(&self.key(meta.namespace.as_deref(), name))
    }

    pub fn get(&self, key: &str) -> Result<Arc<SandboxHandle>> {
        match self.by_key.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            Some(Entry::Ready(handle)) => Ok(Arc::clone(handle)),
            Some(Entry::NotReady(why)) => Err(Error::SandboxNotReady { sandbox: key.to_string(), why: why.clone() }),
            Some(Entry::Suspended(why, _)) => {
                Err(Error::SandboxSuspended { sandbox: key.to_string(), why: why.clone() })
            }
            None => Err(Error::SandboxNotFound(key.to_string())),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.by_key.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_agent::fake::FakeNodeAgent;

    #[tokio::test]
    async fn an_external_node_agent_is_ready_while_it_answers_and_says_why_not_when_it_does_not() {
        let fake = FakeNodeAgent::new();
        assert_eq!(
            ask(fake.as_ref()).await,
            Asked {
                ready: true,
                reason: "Healthy",
                message: "the node agent answers".into(),
                version: Some("fake".into())
            }
        );
        fake.set_unreachable(true);
        let asked = ask(fake.as_ref()).await;
        assert_eq!((asked.ready, asked.reason, asked.version), (false, "Unreachable", None));
        assert!(asked.message.contains("unreachable"), "{}", asked.message);
        // A sandbox known by name answers with its node agent, or with why not.
        let sandboxes = Sandboxes::new();
        sandboxes.insert_node("box", fake.clone(), None);
        assert_eq!(sandboxes.get("box").unwrap().name, "box");
        sandboxes.set_not_ready("box", "its heartbeat is late");
        assert!(
            matches!(sandboxes.get("box"), Err(Error::SandboxNotReady { why, .. }) if why == "its heartbeat is late")
        );
        assert!(matches!(sandboxes.get("other"), Err(Error::SandboxNotFound(_))));
    }
}
