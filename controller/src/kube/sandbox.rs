//! Sandboxes on a cluster: an external one is ready while its heartbeat is recent (or
//! its endpoint answers, when nobody registers it); a managed one (see `managed`) is
//! made and removed under its finalizer. A Sandbox turning ready or not re-drives
//! everything placed on it, and the lifecycle events of a ready one's node agent come
//! back as reconciles of the Processes they concern.

use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::{Kind, Process, Sandbox, SandboxStatus, Session};
use agentplane_node_agent::client::{Client, ClientError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use super::error::Result;
use super::{Context, Metrics, ReconcileError, SANDBOX_FINALIZER, env, requeue};
use crate::conditions::{self, READY};
use crate::follow::Seen;
use crate::node_agent::NodeAgent;

/// Why there is no client for a Sandbox's node agent: said in its `Ready` condition.
#[derive(Debug, thiserror::Error)]
enum NoClient {
    #[error(transparent)]
    Token(#[from] env::EnvError),
    #[error("it has no endpoint")]
    NoEndpoint,
    #[error("endpoint {endpoint:?}: {source}")]
    Endpoint {
        endpoint: String,
        #[source]
        source: ClientError,
    },
}

/// A Sandbox's node agent writes its heartbeat into the status: that is news.
pub(super) fn heartbeat(sandbox: &Sandbox) -> Option<u64> {
    let beat = sandbox.status.as_ref().and_then(|s| s.last_heartbeat.as_ref()).map(|t| t.0.as_second());
    Some(beat.map_or(0, |s| s as u64))
}

pub(super) async fn reconcile_sandbox(
    sandbox: Arc<Sandbox>,
    ctx: Arc<Context>,
) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "Sandbox");
    look(sandbox, &ctx).await
}

/// An external Sandbox is looked at; a managed one (or one that was, and still has
/// things made for it) is made and removed under its finalizer.
pub(super) async fn look(sandbox: Arc<Sandbox>, ctx: &Context) -> std::result::Result<Action, ReconcileError> {
    let finalized = sandbox.finalizers().iter().any(|f| f == SANDBOX_FINALIZER);
    if !sandbox.spec.is_managed() && !finalized {
        return Ok(look_at_sandbox(&sandbox, ctx).await?);
    }
    let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Sandbox> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, SANDBOX_FINALIZER, sandbox, |event| async {
        match event {
            Finalizer::Apply(sandbox) if sandbox.spec.is_managed() => ctx.apply_managed(&sandbox).await,
            // Given an endpoint since: what was made for it goes, then it is external.
            Finalizer::Apply(sandbox) => {
                ctx.delete_made(&sandbox).await?;
                let kept: Vec<&String> = sandbox.finalizers().iter().filter(|f| *f != SANDBOX_FINALIZER).collect();
                let patch = serde_json::json!({
                    "metadata": {"finalizers": kept, "resourceVersion": sandbox.resource_version()}
                });
                api.patch(&sandbox.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
                look_at_sandbox(&sandbox, ctx).await
            }
            Finalizer::Cleanup(sandbox) => ctx.cleanup_managed(&sandbox).await,
        }
    })
    .await;
    result.map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

/// Decides whether a Sandbox is ready, tells the reconcile core, writes the status,
/// and re-drives what is placed on it when its readiness changed.
async fn look_at_sandbox(sandbox: &Sandbox, ctx: &Context) -> Result<Action> {
    let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
    let name = sandbox.name_any();
    let key = ctx.sandboxes.key(Some(&namespace), &name);
    let generation = sandbox.metadata.generation;
    let mut status = SandboxStatus { observed_generation: generation, ..Default::default() };
    let before = sandbox.status.clone().unwrap_or_default();
    status.conditions = before.conditions.clone();

    let (ready, reason, message, after) = match ctx.sandbox_client(sandbox, &namespace).await {
        Err(why) => (false, "TokenUnavailable", why.to_string(), Some(Duration::from_secs(30))),
        Ok(client) => match &before.last_heartbeat {
            Some(beat) => {
                let age = ctx.heartbeat_age(&key, beat);
                let grace = ctx.config.heartbeat_grace;
                if age <= grace {
                    ctx.sandboxes.insert(&key, client.clone());
                    let left = grace.saturating_sub(age) + Duration::from_millis(200);
                    (
                        true,
                        "HeartbeatRecent",
                        format!("the node agent reported within {}s", grace.as_secs()),
                        Some(left),
                    )
                } else {
                    (false, "HeartbeatLate", format!("no heartbeat for {}s or more", grace.as_secs()), None)
                }
            }
            // Nobody registers this Sandbox: ask its endpoint.
            None => {
                let asked = crate::sandboxes::ask(&client).await;
                if asked.ready {
                    ctx.sandboxes.insert(&key, client.clone());
                }
                (asked.ready, asked.reason, asked.message, Some(Duration::from_secs(10)))
            }
        },
    };
    if ready {
        if let Ok(handle) = ctx.sandboxes.get(&key) {
            ctx.follow_sandbox(&key, &namespace, &name, Arc::clone(&handle.node));
        }
    } else {
        ctx.sandboxes.set_not_ready(&key, message.clone());
        ctx.unfollow_sandbox(&key);
    }
    conditions::set(&mut status.conditions, READY, ready, reason, message.clone(), generation);
    let was_ready = conditions::get(&before.conditions, READY).map(|c| c.status == "True");
    if was_ready != Some(ready) {
        ctx.readiness_changed(sandbox, &namespace, &name, ready, "Heartbeat", &message).await;
    }
    // Only the fields the controller owns; the node agent's go untouched.
    let owned = SandboxStatus {
        observed_generation: status.observed_generation,
        conditions: status.conditions.clone(),
        ..Default::default()
    };
    let theirs = SandboxStatus {
        observed_generation: before.observed_generation,
        conditions: before.conditions.clone(),
        ..Default::default()
    };
    let api: Api<Sandbox> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.write_status(&api, sandbox, Some(&theirs), &owned, "Sandbox").await?;
    Ok(requeue(after))
}

impl Context {
    /// How long ago, on this controller's clock, the heartbeat last changed. One not
    /// seen before counts as new: a restarted controller gives every node agent a
    /// full grace period.
    fn heartbeat_age(&self, key: &str, beat: &Time) -> Duration {
        let now = std::time::Instant::now();
        let mut seen = self.heartbeats.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(key) {
            Some((last, at)) if last == beat => now.duration_since(*at),
            _ => {
                seen.insert(key.to_string(), (beat.clone(), now));
                Duration::ZERO
            }
        }
    }

    async fn sandbox_client(&self, sandbox: &Sandbox, namespace: &str) -> std::result::Result<Client, NoClient> {
        let token = match &sandbox.spec.token_secret_ref {
            Some(selector) => Some(env::secret_key(&self.client, namespace, &selector.name, &selector.key).await?),
            None => None,
        };
        let endpoint = sandbox.endpoint().ok_or(NoClient::NoEndpoint)?;
        Client::new(endpoint, token).map_err(|source| NoClient::Endpoint { endpoint: endpoint.to_string(), source })
    }

    /// A Sandbox turned ready or not: an event, and everything placed on it learns of
    /// it (re-driven when it comes back, told why not when it goes).
    pub(super) async fn readiness_changed(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        name: &str,
        ready: bool,
        action: &str,
        message: &str,
    ) {
        let (kind, why) = if ready { (KubeEventType::Normal, "Ready") } else { (KubeEventType::Warning, "NotReady") };
        self.event(sandbox, kind, why, action, message);
        self.redrive(namespace, name).await;
    }

    /// Queues every Process and Session of `namespace` placed on sandbox `name`.
    pub(super) async fn redrive(&self, namespace: &str, name: &str) {
        requeue_placed_on(&self.process_store, &self.process_trigger, namespace, name, Process::placed_sandbox).await;
        requeue_placed_on(&self.session_store, &self.session_trigger, namespace, name, Session::placed_sandbox).await;
    }

    pub(super) fn follow_sandbox(&self, key: &str, namespace: &str, name: &str, node: Arc<dyn NodeAgent>) {
        let (store, trigger) = (self.process_store.clone(), self.process_trigger.clone());
        let (sweep, swept) = (self.sweep_trigger.clone(), key.to_string());
        let (namespace, name, shutdown) = (namespace.to_string(), name.to_string(), self.shutdown.clone());
        self.sandbox_followers.follow(key.to_string(), None, move || {
            Some(async move {
                // Turns the node agent's lifecycle events into reconciles of the Processes
                // they concern, so an exit is recorded (and a restart made) at once.
                crate::follow::follow_lifecycle(node, shutdown, move |seen| {
                    let (store, trigger, namespace, name) =
                        (store.clone(), trigger.clone(), namespace.clone(), name.clone());
                    // Connected (again): whatever went meanwhile is looked for. A full
                    // queue leaves it to the next sweep.
                    if matches!(seen, Seen::Everything) {
                        let _ = sweep.try_send(swept.clone());
                    }
                    async move {
                        match seen {
                            Seen::Everything => {
                                requeue_placed_on(&store, &trigger, &namespace, &name, Process::placed_sandbox).await
                            }
                            Seen::Resource(key) if key.kind == Kind::Process => {
                                trigger.send(ObjectRef::new(&key.name).within(&key.namespace)).await.is_ok()
                            }
                            Seen::Resource(_) => true,
                        }
                    }
                })
                .await
            })
        });
    }

    pub(super) fn unfollow_sandbox(&self, key: &str) {
        self.sandbox_followers.stop(key);
    }
}

/// Queues every cached object of `namespace` placed on sandbox `name`; false once
/// nobody takes them any more.
async fn requeue_placed_on<K>(
    store: &Store<K>,
    trigger: &mpsc::Sender<ObjectRef<K>>,
    namespace: &str,
    name: &str,
    sandbox_of: impl Fn(&K) -> &str,
) -> bool
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let keys: Vec<_> = store
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace) && sandbox_of(o) == name)
        .map(|o| ObjectRef::from_obj(&*o))
        .collect();
    for key in keys {
        if trigger.send(key).await.is_err() {
            return false;
        }
    }
    true
}
