//! Templates and warm pools on a cluster: a `SandboxWarmPool` keeps `replicas` ready,
//! unclaimed Sandboxes of its `SandboxTemplate`, and a Session or Process naming
//! `sandboxTemplate` is placed on one of its own (`place`), kept for its lifetime and
//! deleted `ttlSecondsAfterFinished` after it ended or went.
//!
//! - Sandboxes made here are real Sandbox objects, named `POOL-xxxxxx` (a pool's) or
//!   `TEMPLATE-xxxxxx` (made for a claimer), annotated as in the directory store
//!   (`crate::templates`); `apply_managed` then makes their Pods as for any other.
//! - Who holds one is found on the API server, not in the cache: a claim is also a
//!   label (`agentplane.dev/claimed-uid`), listed fresh on every placement, so a
//!   reconcile that runs before the cache saw its own claim finds it rather than
//!   taking a second sandbox.
//! - A claim is a merge patch carrying the member's `resourceVersion`: of two claimers
//!   (two reconciles, or two controller replicas) the API server lets one through and
//!   answers the other 409, which then tries the next member, and in the end makes a
//!   sandbox of its own. The pool's deletion of a surplus member carries the same
//!   precondition, so it never deletes one claimed a moment before.
//! - Pool members are controlled by their pool (a garbage collector removes them with
//!   it); a claim takes that owner reference away and gives none: a claimed sandbox
//!   outlives its claimer by the TTL, which an owner reference to the claimer would cut
//!   short (the collector deletes at once). The claimer's finalizer marks it finished,
//!   and the Sandbox's own reconcile deletes it when the TTL is over; the pool's
//!   finalizer deletes its unclaimed members, since no collector may run.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::{Sandbox, SandboxPhase, SandboxTemplate, SandboxWarmPool, SandboxWarmPoolStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::error::{Error, Result};
use super::{Context, FIELD_MANAGER, FINALIZER, Metrics, ReconcileError, store_ready};
use crate::conditions::{self, READY};
use crate::templates::{self, CLAIMED_UID, POOL, TEMPLATE};

/// Looks at a pool again after this without news (member changes come sooner).
const POOL_RESYNC: Duration = Duration::from_secs(30);
/// Names tried before giving up making a sandbox (a clash of 6 random hex digits is
/// rare; several in a row means something else is wrong).
const NAME_ATTEMPTS: usize = 5;
/// How often a resource whose template is missing looks for it again.
const WAITING_RETRY: Duration = Duration::from_secs(10);
/// How long a placement waits for the template cache to fill after a restart.
const TEMPLATE_CACHE_WAIT: Duration = Duration::from_secs(5);

/// Where a Session or Process naming `sandboxTemplate` runs.
pub(super) enum Placement {
    /// It names no template.
    Unplaced,
    /// On this sandbox, which it holds.
    Placed(String),
    /// Not yet, and why.
    Waiting(String),
}

impl Placement {
    /// Points the snapshot the reconcile core sees at the sandbox; answers the
    /// problem to report while it waits (the template stays set, so the core never
    /// runs it elsewhere).
    pub(super) fn apply(&self, sandbox: &mut String, template: &mut Option<String>) -> Option<String> {
        match self {
            Placement::Unplaced => None,
            Placement::Placed(name) => {
                *sandbox = name.clone();
                *template = None;
                None
            }
            Placement::Waiting(why) => Some(why.clone()),
        }
    }

    /// When to look again: a resource waiting for its template is looked at again now
    /// and then (a template's arrival is news to its pools, not to its claimers).
    pub(super) fn requeue(&self, after: Option<Duration>) -> Option<Duration> {
        match self {
            Placement::Waiting(_) => Some(after.map_or(WAITING_RETRY, |a| a.min(WAITING_RETRY))),
            _ => after,
        }
    }

    pub(super) fn placed(&self) -> Option<&str> {
        match self {
            Placement::Placed(name) => Some(name),
            _ => None,
        }
    }
}

fn is_ready(sandbox: &Sandbox) -> bool {
    sandbox.status.as_ref().and_then(|s| s.phase) == Some(SandboxPhase::Ready)
}

fn is_live(sandbox: &Sandbox) -> bool {
    sandbox.metadata.deletion_timestamp.is_none()
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// A Sandbox's claim, as far as it matters for reconciling it: who holds it and
/// whether they finished. Annotations do not change the generation, so this is what
/// brings a claim and its end to the Sandbox's reconcile (status, TTL).
pub(super) fn claim_state(sandbox: &Sandbox) -> Option<u64> {
    let meta = &sandbox.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (templates::claimed_uid(meta), templates::finished_at(meta)).hash(&mut hasher);
    Some(hasher.finish())
}

pub(super) async fn reconcile_pool(
    pool: Arc<SandboxWarmPool>,
    ctx: Arc<Context>,
) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "SandboxWarmPool");
    let namespace = pool.namespace().unwrap_or_else(|| "default".into());
    let api: Api<SandboxWarmPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, FINALIZER, pool, |event| async {
        match event {
            Finalizer::Apply(pool) => ctx.apply_pool(&api, &pool).await,
            Finalizer::Cleanup(pool) => ctx.drain_pool(&pool).await,
        }
    })
    .await;
    result.map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

impl Context {
    /// Keeps `replicas` unclaimed members: makes what is missing, deletes what is over
    /// (those not ready first), and says how many are ready.
    async fn apply_pool(&self, api: &Api<SandboxWarmPool>, pool: &SandboxWarmPool) -> Result<Action> {
        let namespace = pool.namespace().unwrap_or_else(|| "default".into());
        let name = pool.name_any();
        let generation = pool.metadata.generation;
        let before = pool.status.clone();
        let mut status = SandboxWarmPoolStatus {
            observed_generation: generation,
            conditions: before.as_ref().map(|s| s.conditions.clone()).unwrap_or_default(),
            ..Default::default()
        };
        conditions::set_valid(&mut status.conditions, None, generation);
        let sandboxes: Api<Sandbox> = Api::namespaced(self.client.clone(), &namespace);
        let mut members = self.pool_members(&sandboxes, &name).await?;
        let wanted = pool.spec.replicas as usize;
        match self.template_store.get(&ObjectRef::new(&pool.spec.template).within(&namespace)) {
            None => {
                let why = format!("no SandboxTemplate {:?} in namespace {namespace:?}", pool.spec.template);
                conditions::set(&mut status.conditions, READY, false, "TemplateNotFound", why, generation);
            }
            Some(template) => {
                while members.len() < wanted {
                    let annotations = BTreeMap::from([(POOL.to_string(), name.clone())]);
                    let owner = pool.controller_owner_ref(&());
                    let made = self.make_sandbox(&sandboxes, &template, &name, annotations, None, owner).await?;
                    info!(pool = %name, namespace, sandbox = %made.name_any(), "made a sandbox for the warm pool");
                    members.push(made);
                }
                // Over: the not-ready ones go first.
                members.sort_by_key(|s| !is_ready(s));
                while members.len() > wanted {
                    let extra = members.pop().expect("more than wanted");
                    // Only as it was listed: one claimed since is not the pool's any more.
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: extra.uid(),
                            resource_version: extra.resource_version(),
                        }),
                        ..Default::default()
                    };
                    match sandboxes.delete(&extra.name_any(), &params).await {
                        Ok(_) => {
                            info!(pool = %name, namespace, sandbox = %extra.name_any(), "deleted a surplus sandbox")
                        }
                        Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let ready = members.iter().filter(|s| is_ready(s)).count();
                let message = format!("{ready} of {wanted} ready");
                conditions::set(&mut status.conditions, READY, ready >= wanted, "Replicas", message, generation);
            }
        }
        status.replicas = members.len() as u32;
        status.ready_replicas = members.iter().filter(|s| is_ready(s)).count() as u32;
        status.sandboxes = members.iter().map(|s| s.name_any()).collect();
        status.sandboxes.sort();
        self.write_status(api, pool, before.as_ref(), &status, "SandboxWarmPool").await?;
        Ok(Action::requeue(POOL_RESYNC))
    }

    /// A deleted pool takes its unclaimed members with it (claimed ones stay with
    /// their claimers); a member claimed meanwhile is left alone.
    async fn drain_pool(&self, pool: &SandboxWarmPool) -> Result<Action> {
        let namespace = pool.namespace().unwrap_or_else(|| "default".into());
        let sandboxes: Api<Sandbox> = Api::namespaced(self.client.clone(), &namespace);
        for member in self.pool_members(&sandboxes, &pool.name_any()).await? {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: member.uid(), resource_version: member.resource_version() }),
                ..Default::default()
            };
            match sandboxes.delete(&member.name_any(), &params).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                Err(e) => return Err(e.into()),
            }
        }
        info!(pool = %pool.name_any(), namespace, "deleted the pool's unclaimed sandboxes");
        Ok(Action::await_change())
    }

    /// The pool's unclaimed members not being deleted, as the API server has them now.
    async fn pool_members(&self, sandboxes: &Api<Sandbox>, pool: &str) -> Result<Vec<Sandbox>> {
        let unclaimed = ListParams::default().labels(&format!("!{CLAIMED_UID}"));
        let listed = sandboxes.list(&unclaimed).await?;
        Ok(listed.items.into_iter().filter(|s| is_live(s) && templates::pool_of(&s.metadata) == Some(pool)).collect())
    }

    /// Creates a managed Sandbox of `template` named `prefix-xxxxxx` (another name
    /// when that one is taken).
    async fn make_sandbox(
        &self,
        sandboxes: &Api<Sandbox>,
        template: &SandboxTemplate,
        prefix: &str,
        mut annotations: BTreeMap<String, String>,
        labels: Option<BTreeMap<String, String>>,
        owner: Option<OwnerReference>,
    ) -> Result<Sandbox> {
        let mut spec = template.spec.sandbox.clone();
        // A template's sandbox is always managed.
        spec.endpoint = None;
        annotations.insert(TEMPLATE.into(), template.name_any());
        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        for _ in 0..NAME_ATTEMPTS {
            let sandbox = Sandbox {
                metadata: ObjectMeta {
                    name: Some(templates::random_name(prefix)),
                    annotations: Some(annotations.clone()),
                    labels: labels.clone(),
                    owner_references: owner.clone().map(|o| vec![o]),
                    ..Default::default()
                },
                spec: spec.clone(),
                status: None,
            };
            match sandboxes.create(&params, &sandbox).await {
                Ok(made) => return Ok(made),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Config(format!("no free name for a sandbox {prefix}-xxxxxx after {NAME_ATTEMPTS} tries")))
    }

    /// Places `claimer` (`Kind/namespace/name`, with metadata `meta`) on a sandbox of
    /// `template`: the one it holds (`held`, its `status.sandbox`, is looked at first),
    /// else a ready member of a warm pool of that template (which then refills), else
    /// a new one.
    pub(super) async fn place(
        &self,
        claimer: &str,
        meta: &ObjectMeta,
        held: Option<&str>,
        template: &str,
    ) -> Result<Placement> {
        let Some(uid) = meta.uid.as_deref() else {
            return Ok(Placement::Waiting("it has no uid yet".into()));
        };
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let sandboxes: Api<Sandbox> = Api::namespaced(self.client.clone(), &namespace);
        let holds = |s: &Sandbox| is_live(s) && templates::claimed_uid(&s.metadata) == Some(uid);
        if let Some(held) = held
            && sandboxes.get_opt(held).await?.is_some_and(|s| holds(&s))
        {
            return Ok(Placement::Placed(held.to_string()));
        }
        let mine = ListParams::default().labels(&format!("{CLAIMED_UID}={uid}"));
        if let Some(found) = sandboxes.list(&mine).await?.items.into_iter().find(|s| holds(s)) {
            return Ok(Placement::Placed(found.name_any()));
        }

        let _ = tokio::time::timeout(TEMPLATE_CACHE_WAIT, store_ready(&self.template_store)).await;
        let Some(found) = self.template_store.get(&ObjectRef::new(template).within(&namespace)) else {
            return Ok(Placement::Waiting(format!(
                "sandboxTemplate {template:?}: no SandboxTemplate of that name in namespace {namespace:?}"
            )));
        };
        let ttl = found.spec.ttl_seconds_after_finished;
        let claim = templates::claim_annotations(claimer, uid, ttl);
        let label = BTreeMap::from([(CLAIMED_UID.to_string(), uid.to_string())]);

        let unclaimed = ListParams::default().labels(&format!("!{CLAIMED_UID}"));
        let mut ready: Vec<Sandbox> = sandboxes
            .list(&unclaimed)
            .await?
            .items
            .into_iter()
            .filter(|s| {
                is_live(s)
                    && is_ready(s)
                    && templates::template_of(&s.metadata) == Some(template)
                    && templates::pool_of(&s.metadata).is_some()
            })
            .collect();
        // Claimers at once start at different members, so most claims pass first time.
        ready.sort_by_key(|s| s.name_any());
        if !ready.is_empty() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            uid.hash(&mut hasher);
            let start = (hasher.finish() % ready.len() as u64) as usize;
            ready.rotate_left(start);
        }
        for member in ready {
            let name = member.name_any();
            let patch = serde_json::json!({
                "metadata": {
                    // The precondition: someone else's claim since the list is a 409.
                    "resourceVersion": member.resource_version(),
                    "annotations": BTreeMap::from(claim.clone()),
                    "labels": label,
                    // No longer the pool's (see the module's doc).
                    "ownerReferences": null,
                }
            });
            match sandboxes.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    info!(resource = %claimer, sandbox = %name, "claimed a ready sandbox from its warm pool");
                    if let Some(pool) = templates::pool_of(&member.metadata) {
                        let _ = self.pool_trigger.send(ObjectRef::new(pool).within(&namespace)).await;
                    }
                    return Ok(Placement::Placed(name));
                }
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => {
                    debug!(resource = %claimer, sandbox = %name, "claimed by another first; trying the next");
                }
                Err(e) => return Err(e.into()),
            }
        }
        let made = self.make_sandbox(&sandboxes, &found, template, BTreeMap::from(claim), Some(label), None).await?;
        info!(resource = %claimer, sandbox = %made.name_any(), "made a sandbox of its own from its template");
        Ok(Placement::Placed(made.name_any()))
    }

    /// Marks the sandboxes the resource `uid` holds finished: each is deleted after its
    /// TTL (see `expire`).
    pub(super) async fn finish_claims(&self, namespace: &str, uid: Option<&str>) -> Result<()> {
        let Some(uid) = uid else { return Ok(()) };
        let sandboxes: Api<Sandbox> = Api::namespaced(self.client.clone(), namespace);
        let mine = ListParams::default().labels(&format!("{CLAIMED_UID}={uid}"));
        for sandbox in sandboxes.list(&mine).await?.items {
            if !is_live(&sandbox) || templates::finished_at(&sandbox.metadata).is_some() {
                continue;
            }
            let now = conditions::now().0.to_string();
            let patch = serde_json::json!({"metadata": {"annotations": {templates::FINISHED_AT: now}}});
            match sandboxes.patch(&sandbox.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => info!(sandbox = %sandbox.name_any(), namespace, "its claimer finished; kept for its TTL"),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// A finished claim's sandbox: deleted once its TTL is over (`None`: nothing to do
    /// now), else how long to wait.
    pub(super) async fn expire(&self, sandbox: &Sandbox) -> Result<Option<Duration>> {
        let Some(left) = templates::ttl_left(&sandbox.metadata, &conditions::now()) else { return Ok(None) };
        if !left.is_zero() {
            return Ok(Some(left));
        }
        let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
        let sandboxes: Api<Sandbox> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: sandbox.uid(), resource_version: None }),
            ..Default::default()
        };
        match sandboxes.delete(&sandbox.name_any(), &params).await {
            Ok(_) => {
                info!(sandbox = %sandbox.name_any(), namespace, "its claimer finished and its TTL is over; deleted")
            }
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
            Err(e) => {
                warn!(sandbox = %sandbox.name_any(), error = %e, "cannot delete the finished sandbox");
                return Err(e.into());
            }
        }
        Ok(Some(Duration::ZERO))
    }

    /// Tells the pool of an unclaimed member that the member changed.
    pub(super) async fn member_changed(&self, sandbox: &Sandbox) {
        if templates::claimed_uid(&sandbox.metadata).is_some() {
            return;
        }
        if let (Some(pool), Some(namespace)) = (templates::pool_of(&sandbox.metadata), sandbox.namespace()) {
            let _ = self.pool_trigger.send(ObjectRef::new(pool).within(&namespace)).await;
        }
    }
}
