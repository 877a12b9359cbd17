//! What both stores do around the reconcilers, once: following a node agent's
//! lifecycle events and a live session's events (so an exit, a turn ending or a
//! question asked is reflected at once, not at the next resync), deciding which
//! sessions are live, and resolving a Process's `sessionRef`. Each store keeps only
//! how it queues a resource again (its work queue, or kube-runtime's trigger).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentplane_crds::{Key, Kind, Process, Session, SessionPhase, SessionStatus};
use agentplane_node_agent::model::{LifecycleEvent, LifecycleEventType};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::annotations;
use crate::node_agent::NodeAgent;
use crate::session::{SessionReconciler, node_session_id};

/// Reconnects back off from this, doubling to `FOLLOW_MAX`.
const FOLLOW_MIN: Duration = Duration::from_millis(100);
const FOLLOW_MAX: Duration = Duration::from_secs(5);

/// What a node agent's lifecycle events ask the store to look at again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Everything on that node agent: the stream (re)started, or missed events (a gap,
    /// or the node agent restarted and lost what it ran).
    Everything,
    /// One resource whose process exited or went.
    Resource(Key),
}

/// Follows `node`'s lifecycle events until `shutdown`, reconnecting with a back-off,
/// and tells `seen` what to look at again; stops when `seen` answers false (nobody
/// takes them any more).
pub async fn follow_lifecycle<F, Fut>(node: Arc<dyn NodeAgent>, shutdown: CancellationToken, mut seen: F)
where
    F: FnMut(Seen) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut last: Option<u64> = None;
    let mut delay = FOLLOW_MIN;
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            s = node.lifecycle_events(last) => s,
        };
        match stream {
            Ok(mut events) => {
                delay = FOLLOW_MIN;
                // What happened before this stream began (an exit between the store's
                // start and now, or during an outage) is looked at now.
                if !seen(Seen::Everything).await {
                    return;
                }
                while let Some(message) = tokio::select! { _ = shutdown.cancelled() => return, m = events.next() => m }
                {
                    let Ok(message) = message else { break };
                    if let Some(id) = message.id.as_deref().and_then(|id| id.parse().ok()) {
                        last = Some(id);
                    }
                    let wanted = match message.event.as_deref() {
                        Some("gap" | "reset") => Some(Seen::Everything),
                        _ => resource_of(&message.data).map(Seen::Resource),
                    };
                    if let Some(wanted) = wanted
                        && !seen(wanted).await
                    {
                        return;
                    }
                }
            }
            Err(e) => debug!(error = %e, "node agent events unavailable"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(FOLLOW_MAX);
    }
}

/// The resource a lifecycle event's process belongs to, when it exited or went.
fn resource_of(data: &str) -> Option<Key> {
    let event = serde_json::from_str::<LifecycleEvent>(data).ok()?;
    if !matches!(event.kind, LifecycleEventType::ProcessExited | LifecycleEventType::ProcessDeleted) {
        return None;
    }
    let key = event.process.annotations.get(annotations::RESOURCE)?.parse::<Key>().ok()?;
    matches!(key.kind, Kind::Process | Kind::Session | Kind::Sandbox).then_some(key)
}

/// Whether a session is live on its node agent: its events are worth following.
pub fn session_is_live(status: &SessionStatus) -> bool {
    !matches!(status.phase, Some(SessionPhase::Ended | SessionPhase::Failed | SessionPhase::Pending) | None)
}

/// The tasks following one thing each (a session's events, a sandbox's lifecycle), by
/// the store's key, with the uid of what they follow: a resource recreated under the
/// same name is followed anew.
pub struct Followers<K> {
    tasks: Mutex<HashMap<K, (Option<String>, tokio::task::AbortHandle)>>,
}

impl<K: Hash + Eq + Clone> Default for Followers<K> {
    fn default() -> Self {
        Followers { tasks: Mutex::new(HashMap::new()) }
    }
}

impl<K: Hash + Eq + Clone> Followers<K> {
    /// Starts `task` for `key` unless one for the same uid still runs; a task of an
    /// earlier uid is stopped.
    pub fn follow<T: Future<Output = ()> + Send + 'static>(
        &self,
        key: K,
        uid: Option<String>,
        task: impl FnOnce() -> Option<T>,
    ) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if tasks.get(&key).is_some_and(|(u, handle)| *u == uid && !handle.is_finished()) {
            return;
        }
        let Some(task) = task() else { return };
        let handle = tokio::spawn(task).abort_handle();
        if let Some((_, old)) = tasks.insert(key, (uid, handle)) {
            old.abort();
        }
    }

    pub fn stop<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some((_, handle)) = self.tasks.lock().unwrap_or_else(|e| e.into_inner()).remove(key) {
            handle.abort();
        }
    }

    pub fn stop_all(&self) {
        for (_, (_, handle)) in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            handle.abort();
        }
    }
}

impl<K: Hash + Eq + Clone> Followers<K> {
    /// Follows a live session's events (see `session::follow_events`), calling `notify`
    /// at each, from `last` on.
    pub fn session<F, Fut>(&self, key: K, session: &Session, sessions: &SessionReconciler, last: Option<u64>, notify: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        self.follow(key, session.metadata.uid.clone(), || {
            let (node, id) = sessions.target(session)?;
            Some(crate::session::follow_events(node, id, last, notify))
        });
    }
}

/// What a Process's `sessionRef` resolves to, given the Session it names as the store
/// found it (`None`: no such Session in its namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRef {
    /// The node-agent id of that Session (`Ok(None)` without a `sessionRef`), or why
    /// the Process waits.
    pub id: Result<Option<String>, String>,
    /// The sandbox that Session runs on: where a Process naming no sandbox of its own
    /// runs.
    pub sandbox: Option<String>,
}

pub fn resolve_session_ref(process: &Process, namespace: &str, named: Option<&Session>) -> SessionRef {
    let Some(name) = &process.spec.session_ref else { return SessionRef { id: Ok(None), sandbox: None } };
    let sandbox = named.map(|s| s.placed_sandbox().to_string());
    let id = named
        .and_then(|s| s.metadata.uid.as_deref())
        .map(|uid| Some(node_session_id(uid)))
        .ok_or_else(|| format!("sessionRef names session {name:?}, which namespace {namespace:?} does not have"));
    SessionRef { id, sandbox }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_exited_or_went_names_a_resource() {
        use agentplane_node_agent::model::CreateProcessRequest;
        let event = |kind: LifecycleEventType, resource: &str| {
            let request = CreateProcessRequest {
                command: "x".into(),
                annotations: [(annotations::RESOURCE.to_string(), resource.to_string())].into(),
                ..Default::default()
            };
            let process = crate::node_agent::fake::process_info(&request, 1);
            serde_json::to_string(&LifecycleEvent { sequence: 1, kind, time: time::OffsetDateTime::now_utc(), process })
                .unwrap()
        };
        let key = Key { kind: Kind::Process, namespace: "ns".into(), name: "web".into() };
        assert_eq!(resource_of(&event(LifecycleEventType::ProcessExited, "Process/ns/web")), Some(key.clone()));
        assert_eq!(resource_of(&event(LifecycleEventType::ProcessDeleted, "Process/ns/web")), Some(key));
        assert_eq!(resource_of(&event(LifecycleEventType::ProcessCreated, "Process/ns/web")), None);
        assert_eq!(resource_of(&event(LifecycleEventType::ProcessExited, "SandboxWarmPool/ns/p")), None);
        assert_eq!(resource_of("not json"), None);
    }

    #[test]
    fn a_session_ref_names_the_sessions_id_and_sandbox_or_says_why_not() {
        let process: Process = serde_yaml_ng::from_str(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: p}\nspec: {command: x, sessionRef: chat}\n",
        )
        .unwrap();
        let mut session: Session = serde_yaml_ng::from_str(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat, uid: u1}\nspec: {agent: mock, sandbox: box}\n",
        )
        .unwrap();
        assert_eq!(
            resolve_session_ref(&process, "ns", Some(&session)),
            SessionRef { id: Ok(Some(node_session_id("u1"))), sandbox: Some("box".into()) }
        );
        // Placed on a claimed sandbox: that one.
        session.status = Some(SessionStatus { sandbox: Some("claimed-1".into()), ..Default::default() });
        assert_eq!(resolve_session_ref(&process, "ns", Some(&session)).sandbox.as_deref(), Some("claimed-1"));
        let missing = resolve_session_ref(&process, "ns", None);
        assert!(missing.id.unwrap_err().contains("sessionRef names session \"chat\""));
    }
}
