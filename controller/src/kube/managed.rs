//! A managed Sandbox on a cluster (one without `spec.endpoint`): the controller keeps
//! its token Secret, its NetworkPolicy and its Pod (see `pods` for what they hold),
//! replaces the Pod when it is deleted or ends, says in the status where the node
//! agent runs and whether it answers, and removes everything when the Sandbox goes.
//!
//! - What exists is looked up by name and by owner (this Sandbox's uid, as the
//!   controller owner) before anything is made: a reconcile converges, it never makes
//!   a second Pod, and it never takes over or deletes an object someone else owns.
//! - The NetworkPolicy is in place before the Pod is created, so a sandbox never runs
//!   unrestricted for a moment.
//! - A Pod made from an earlier spec is not replaced on its own (its sessions would
//!   go with it): the `UpToDate` condition says so, and deleting it brings the new one.
//! - The token is generated once into the Secret and read from there; it is never
//!   logged and never in the status.

use std::time::Duration;

use agentplane_crds::{NetworkMode, Sandbox, SandboxPhase, SandboxStatus};
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::Client;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{debug, info};

use super::error::{Error, Result};
use super::pods::{self, Made};
use super::power;
use super::{Context, FIELD_MANAGER};
use crate::conditions::{self, READY};

/// The finalizer that removes a managed Sandbox's Pod, Secret and NetworkPolicy before
/// it goes (owner references would, but only where a garbage collector runs).
pub const SANDBOX_FINALIZER: &str = "agentplane.dev/sandbox";
/// The condition that says whether the Pod was made from the current spec.
const UP_TO_DATE: &str = "UpToDate";
/// The condition that says whether the sandbox's sessions and HOME outlive its Pod.
const DURABLE: &str = "Durable";
/// The condition that says whether every `allow` entry is enforced.
const ALLOWLIST_ENFORCED: &str = "AllowlistEnforced";
/// How long one probe of the node agent may take: a Pod IP that drops packets must
/// not hold a reconcile for a TCP timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Looks again this soon while the Pod runs and its node agent does not answer yet.
const STARTING_POLL: Duration = Duration::from_millis(500);
/// Probes a ready node agent this often (a Pod event comes sooner when it dies).
const READY_POLL: Duration = Duration::from_secs(10);
/// Looks again after this without news (the Pod watch normally comes first).
const IDLE_POLL: Duration = Duration::from_secs(60);

/// What was found of the sandbox's node agent in this pass.
pub(super) struct Observed {
    phase: SandboxPhase,
    reason: &'static str,
    message: String,
    /// Set when the node agent answers with the token.
    client: Option<Client>,
    requeue: Duration,
}

impl Observed {
    pub(super) fn new(
        phase: SandboxPhase,
        reason: &'static str,
        message: impl Into<String>,
        requeue: Duration,
    ) -> Observed {
        Observed { phase, reason, message: message.into(), client: None, requeue }
    }
}

/// Whether `obj` is controlled by the object with `uid`.
pub(super) fn controlled_by(obj: &impl Resource, uid: &str) -> bool {
    obj.meta().owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid)
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

impl Context {
    /// Converges a managed Sandbox and writes its status.
    pub(super) async fn apply_managed(&self, sandbox: &Sandbox) -> Result<Action> {
        let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
        let name = sandbox.name_any();
        let key = self.sandboxes.key(Some(&namespace), &name);
        // A claim that finished is kept for its TTL, then deleted like any other.
        let ttl_left = self.expire(sandbox).await?;
        if ttl_left.is_some_and(|left| left.is_zero()) {
            return Ok(Action::await_change());
        }
        let generation = sandbox.metadata.generation;
        let before = sandbox.status.clone().unwrap_or_default();
        // What was last known of the Pod stays until this pass learns better (a spec
        // that cannot be made now does not erase where the node agent runs).
        let mut status = SandboxStatus { observed_generation: generation, ..managed_fields(&before) };
        status.template = crate::templates::template_of(&sandbox.metadata).map(str::to_string);
        status.claimed_by = crate::templates::claimed_by(&sandbox.metadata).map(str::to_string);

        let mut observed = self.converge(sandbox, &namespace, &name, &before, &mut status).await?;
        if let Some(client) = &observed.client
            && self.idle_enough(sandbox, client).await
        {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let uid = sandbox.uid().unwrap_or_default();
            observed = self.suspend(sandbox, &pods, &uid, power::Why::Idle, &before, &mut status).await?;
        }
        status.phase = Some(observed.phase);
        conditions::set(
            &mut status.conditions,
            READY,
            observed.client.is_some(),
            observed.reason,
            &observed.message,
            generation,
        );

        // The reconcile core uses the node agent while it answers; whatever is placed
        // on the sandbox learns when that changes.
        let endpoint_changed = before.endpoint != status.endpoint;
        if endpoint_changed {
            self.unfollow_sandbox(&key);
        }
        let ready = observed.client.is_some();
        match observed.client {
            Some(client) => {
                self.sandboxes.insert(&key, client.clone());
                self.follow_sandbox(&key, &namespace, &name, std::sync::Arc::new(client));
            }
            // Suspended: what is placed on it waits, and work for it wakes one that
            // sleeps for being idle (one held by its spec wakes only by the spec).
            None if observed.phase == SandboxPhase::Suspended => {
                let waker = (observed.reason == power::Why::Idle.reason()).then(|| self.waker(sandbox, &key));
                self.sandboxes.set_suspended(&key, observed.message.clone(), waker);
                self.unfollow_sandbox(&key);
            }
            None => {
                self.sandboxes.set_not_ready(&key, observed.message.clone());
                self.unfollow_sandbox(&key);
            }
        }
        let was_ready = conditions::get(&before.conditions, READY).map(|c| c.status == "True");
        if was_ready != Some(ready) || (ready && endpoint_changed) {
            self.readiness_changed(sandbox, &namespace, &name, ready, "Probe", &observed.message).await;
        }
        if before.restarts < status.restarts {
            let note = format!("Pod {namespace}/{name} replaced ({} so far)", status.restarts);
            self.event(sandbox, KubeEventType::Warning, "PodReplaced", "Replace", &note);
        }

        let owned = managed_fields(&status);
        let theirs = managed_fields(&before);
        let api: Api<Sandbox> = Api::namespaced(self.client.clone(), &namespace);
        self.write_status(&api, sandbox, Some(&theirs), &owned, "Sandbox").await?;
        // Its pool counts ready members from the API server: told once it is written.
        if before.phase != status.phase {
            self.member_changed(sandbox).await;
        }
        // Awake with an idle timeout: asked again soon enough to suspend it on time.
        let requeue = match sandbox.spec.idle_timeout_seconds {
            Some(timeout) if ready => observed.requeue.min(power::idle_poll(timeout)),
            _ => observed.requeue,
        };
        Ok(Action::requeue(ttl_left.map_or(requeue, |left| left.min(requeue))))
    }

    /// Makes what is missing, and finds out how the node agent is doing.
    async fn converge(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        name: &str,
        before: &SandboxStatus,
        status: &mut SandboxStatus,
    ) -> Result<Observed> {
        let generation = sandbox.metadata.generation;
        let uid = sandbox.uid().unwrap_or_default();
        // A sandbox behind the egress proxy: its token (and CA) first, since its
        // credentials' placeholders come from it.
        let egress_token = match &self.config.egress_proxy {
            Some(_) if sandbox.spec.network == NetworkMode::Allowlist => {
                match self.egress_token(sandbox, namespace, name, &uid).await? {
                    Ok(token) => Some(token),
                    Err(why) => return Ok(Observed::new(SandboxPhase::Failed, "NameTaken", why, IDLE_POLL)),
                }
            }
            _ => None,
        };
        let egress = match (&self.config.egress_proxy, &egress_token) {
            (Some(proxy), Some(token)) => Some(pods::EgressFor { proxy, token }),
            _ => None,
        };
        // Its data on a claim of its own, unless its podTemplate gives the data volume.
        let claim = match template_gives_data(sandbox) {
            true => None,
            false => self.data_claim(sandbox, namespace, name, &uid, status).await?,
        };
        let made = match pods::make(sandbox, &self.config.sandbox_image, egress, claim.as_deref()) {
            Ok(made) => made,
            Err(problem) => {
                return Ok(Observed::new(SandboxPhase::Failed, "InvalidSpec", problem.to_string(), IDLE_POLL));
            }
        };
        if template_gives_data(sandbox) {
            let (durable, message) = match &made.data_claim {
                Some(claim) => (
                    true,
                    format!(
                        "its sessions, HOME and workspace are on the podTemplate's claim {claim}: they outlive the Pod"
                    ),
                ),
                None => (
                    false,
                    "the podTemplate's data volume is not a PersistentVolumeClaim: sessions and HOME go with each Pod"
                        .to_string(),
                ),
            };
            conditions::set(&mut status.conditions, DURABLE, durable, "TemplateVolume", message, generation);
        }
        status.isolation = Some(made.isolation.clone());
        status.applied_limits = made.applied.clone();
        status.conditions.retain(|c| c.type_ != ALLOWLIST_ENFORCED);
        if sandbox.spec.network == NetworkMode::Allowlist {
            let (enforced, reason, message) = if let Some(proxy) = egress.map(|e| e.proxy) {
                (
                    true,
                    "EgressProxy",
                    format!(
                        "every allow entry is enforced by name by the egress proxy at {}; NetworkPolicy {name} lets \
                         the Pod reach only the proxy and DNS (this holds where the cluster's network plugin enforces \
                         NetworkPolicy)",
                        proxy.address
                    ),
                )
            } else if made.not_enforced.is_empty() {
                (true, "AllEnforced", "every allow entry is an IP block of the NetworkPolicy".to_string())
            } else {
                (
                    false,
                    "HostNamesNotEnforced",
                    format!(
                        "a NetworkPolicy names IP blocks, not hosts: {} cannot be allowed on a cluster and \
                         stay unreachable (allow their addresses instead)",
                        made.not_enforced.join(", ")
                    ),
                )
            };
            conditions::set(&mut status.conditions, ALLOWLIST_ENFORCED, enforced, reason, message, generation);
        }

        let token = match self.token(sandbox, namespace, name, &uid).await? {
            Ok(token) => token,
            Err(why) => return Ok(Observed::new(SandboxPhase::Failed, "NameTaken", why, IDLE_POLL)),
        };
        if let Err(why) = self.network_policy(&made, namespace, name, &uid).await? {
            return Ok(Observed::new(SandboxPhase::Failed, "NameTaken", why, IDLE_POLL));
        }

        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let key = self.sandboxes.key(Some(namespace), name);
        // Woken: its next Pod is no replacement of one that was lost.
        let waking = match self.stays_asleep(sandbox, before, &key) {
            Ok(why) => return self.suspend(sandbox, &pods, &uid, why, before, status).await,
            Err(woken) => woken || before.phase == Some(SandboxPhase::Suspended),
        };
        status.suspended_at = None;
        let pod = match pods.get_opt(name).await? {
            Some(pod) if !controlled_by(&pod, &uid) => {
                let why = format!("Pod {name} exists and is not this Sandbox's: rename one of them");
                return Ok(Observed::new(SandboxPhase::Failed, "NameTaken", why, IDLE_POLL));
            }
            Some(pod) => pod,
            None => {
                // A Pod was made before (it is in the status): this one replaces it.
                let replacing = !waking && (before.runs_on.is_some() || before.restarts > 0);
                let restarts = if replacing { before.restarts + 1 } else { before.restarts };
                let mut pod = made.pod.clone();
                pod.annotations_mut().insert(pods::RESTARTS_ANNOTATION.into(), restarts.to_string());
                match pods
                    .create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &pod)
                    .await
                {
                    Ok(created) => {
                        info!(sandbox = %name, namespace, restarts, "created the sandbox's Pod");
                        created
                    }
                    // Not valid as the spec makes it (a missing RuntimeClass, a quota):
                    // said in the status until the spec or the cluster changes.
                    Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                        (status.endpoint, status.started_at, status.node_agent_version) = (None, None, None);
                        let phase = if replacing { SandboxPhase::Restarting } else { SandboxPhase::Pending };
                        let why = format!("the Pod cannot be created: {}", e.message);
                        return Ok(Observed::new(phase, "PodNotCreated", why, Duration::from_secs(30)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        self.observe_pod(sandbox, &pods, &pod, &made, &token, status).await
    }

    /// The status of a Pod that exists, and whether its node agent answers.
    async fn observe_pod(
        &self,
        sandbox: &Sandbox,
        pods: &Api<Pod>,
        pod: &Pod,
        made: &Made,
        token: &str,
        status: &mut SandboxStatus,
    ) -> Result<Observed> {
        let generation = sandbox.metadata.generation;
        let name = pod.name_any();
        let namespace = pod.namespace().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_status = pod.status.clone().unwrap_or_default();
        if let Some(restarts) = pod.annotations().get(pods::RESTARTS_ANNOTATION).and_then(|n| n.parse().ok()) {
            status.restarts = restarts;
        }
        let node = spec.node_name.as_deref().filter(|n| !n.is_empty());
        status.runs_on = Some(format!("Pod {namespace}/{name} on {}", node.unwrap_or("unscheduled")));
        status.isolation = Some(match &spec.runtime_class_name {
            Some(class) => format!("pod (runtimeClassName {class})"),
            None => "pod".into(),
        });
        status.started_at = pod_status.start_time.clone();
        status.endpoint = pod_status.pod_ip.as_deref().filter(|ip| !ip.is_empty()).map(|ip| match ip.contains(':') {
            true => format!("http://[{ip}]:{}", pods::PORT),
            false => format!("http://{ip}:{}", pods::PORT),
        });

        let current = pod.annotations().get(pods::SPEC_HASH_ANNOTATION) == Some(&made.hash);
        if current {
            conditions::set(
                &mut status.conditions,
                UP_TO_DATE,
                true,
                "PodCurrent",
                "the Pod runs the current spec",
                generation,
            );
        } else {
            let why = format!(
                "the Pod was made from an earlier spec; it is not replaced on its own (what runs in it would \
                 go): `kubectl delete pod -n {namespace} {name}` to start the current one"
            );
            conditions::set(&mut status.conditions, UP_TO_DATE, false, "PodOutdated", why, generation);
        }

        let restarting = status.restarts > 0;
        let waiting = if restarting { SandboxPhase::Restarting } else { SandboxPhase::Pending };
        if pod.metadata.deletion_timestamp.is_some() {
            let why = "the Pod is being deleted; a new one replaces it once it is gone";
            return Ok(Observed::new(SandboxPhase::Restarting, "PodTerminating", why, IDLE_POLL));
        }
        let phase = pod_status.phase.as_deref().unwrap_or("Pending");
        if matches!(phase, "Failed" | "Succeeded") {
            // It will not run again: it goes, and the next pass makes its replacement.
            let how = match (pod_status.reason.as_deref(), pod_status.message.as_deref()) {
                (Some(reason), Some(message)) => format!(", {reason}: {message}"),
                (Some(one), None) | (None, Some(one)) => format!(", {one}"),
                (None, None) => String::new(),
            };
            info!(sandbox = %name, namespace = %namespace, phase, "replacing the sandbox's ended Pod");
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
                ..Default::default()
            };
            match pods.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                Err(e) => return Err(e.into()),
            }
            let why = format!("the Pod ended ({phase}{how}); replacing it");
            return Ok(Observed::new(SandboxPhase::Restarting, "PodEnded", why, Duration::from_secs(1)));
        }
        let Some(endpoint) = status.endpoint.clone().filter(|_| phase == "Running") else {
            return Ok(Observed::new(waiting, "PodPending", pending_reason(pod), IDLE_POLL));
        };

        // An observer: the controller's own streams are not activity that keeps an
        // idle sandbox awake.
        let client =
            Client::new(&endpoint, Some(token.to_string())).map_err(|e| Error::Config(e.to_string()))?.observing();
        let probe = async {
            let health = client.health().await?;
            // Health answers anyone: a call that needs the token shows it is this one.
            let query = agentplane_node_agent::model::ListProcessesQuery {
                tag: Some("agentplane.dev/probe".into()),
                ..Default::default()
            };
            client.list_processes(&query).await?;
            Ok::<_, agentplane_node_agent::client::ClientError>(health)
        };
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(health)) => {
                status.node_agent_version = Some(crate::conditions::cut(health.version, 64));
                let mut observed = Observed::new(
                    SandboxPhase::Ready,
                    "NodeAgentReady",
                    format!("the node agent answers at {endpoint}"),
                    READY_POLL,
                );
                observed.client = Some(client);
                Ok(observed)
            }
            Ok(Err(e)) if e.code() == Some(ProblemCode::Unauthorized) => {
                let why = format!(
                    "the node agent refuses the token of Secret {}: it was replaced after the Pod started; \
                     delete the Pod to start one with the current token",
                    pods::secret_name(&sandbox.name_any())
                );
                Ok(Observed::new(SandboxPhase::Failed, "TokenRefused", why, IDLE_POLL))
            }
            Ok(Err(e)) => {
                let why = format!("the Pod runs; its node agent does not answer yet: {e}");
                Ok(Observed::new(SandboxPhase::Starting, "NodeAgentStarting", why, STARTING_POLL))
            }
            Err(_) => {
                let why = format!("the Pod runs; its node agent did not answer within {}s", PROBE_TIMEOUT.as_secs());
                Ok(Observed::new(SandboxPhase::Starting, "NodeAgentStarting", why, STARTING_POLL))
            }
        }
    }

    /// The claim the sandbox's data volume is on: this Sandbox's `<name>-data`, made
    /// when missing from its `volumeClaimTemplate` or the cluster's default
    /// StorageClass. `None` (emptyDirs, which go with each Pod) when there is no class
    /// to make it of, or the name is someone else's. `Durable` says which.
    async fn data_claim(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        name: &str,
        uid: &str,
        status: &mut SandboxStatus,
    ) -> Result<Option<String>> {
        let claim_name = pods::claim_name(name);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let on_claim = |class: Option<&str>| {
            format!(
                "its sessions, its agents' HOME and its workspace are on PersistentVolumeClaim {claim_name}{}: they \
                 outlive the Pod (deleted, replaced or suspended), and go with the Sandbox",
                class.map(|c| format!(" (StorageClass {c})")).unwrap_or_default()
            )
        };
        let (claim, durable, reason, message) = match claims.get_opt(&claim_name).await? {
            Some(claim) if !controlled_by(&claim, uid) => (
                None,
                false,
                "ClaimNameTaken",
                format!(
                    "PersistentVolumeClaim {claim_name} exists and is not this Sandbox's: its sessions and HOME are \
                     on emptyDirs and go with each Pod; rename one of them"
                ),
            ),
            Some(claim) => {
                let class = claim.spec.as_ref().and_then(|s| s.storage_class_name.clone());
                (Some(claim_name.clone()), true, "Claim", on_claim(class.as_deref()))
            }
            None => {
                let template = sandbox.spec.volume_claim_template.clone().unwrap_or_default();
                let class = match template.storage_class_name {
                    Some(class) => Ok(Some(class)),
                    None => self.default_storage_class().await,
                };
                match class {
                    Ok(Some(class)) => {
                        let claim = pods::claim(sandbox, &class, template.storage.as_deref());
                        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                        match claims.create(&params, &claim).await {
                            Ok(_) => {
                                info!(sandbox = %name, namespace, claim = %claim_name, storage_class = %class, "made the sandbox's data claim")
                            }
                            Err(e) if is_status(&e, 409) => {}
                            Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                                let why = format!(
                                    "PersistentVolumeClaim {claim_name} cannot be created ({}): sessions and HOME are \
                                     on emptyDirs and go with each Pod",
                                    e.message
                                );
                                conditions::set(
                                    &mut status.conditions,
                                    DURABLE,
                                    false,
                                    "ClaimNotCreated",
                                    why,
                                    sandbox.metadata.generation,
                                );
                                return Ok(None);
                            }
                            Err(e) => return Err(e.into()),
                        }
                        (Some(claim_name.clone()), true, "Claim", on_claim(Some(&class)))
                    }
                    Ok(None) => (
                        None,
                        false,
                        "NoStorageClass",
                        "no StorageClass is marked default and spec.volumeClaimTemplate names none: its sessions, \
                         HOME and workspace are on emptyDirs and go with each Pod (a conversation starts anew in a \
                         replaced Pod)"
                            .to_string(),
                    ),
                    Err(why) => (
                        None,
                        false,
                        "StorageClassUnknown",
                        format!(
                            "the cluster's default StorageClass cannot be read ({why}): its sessions and HOME are on emptyDirs"
                        ),
                    ),
                }
            }
        };
        conditions::set(&mut status.conditions, DURABLE, durable, reason, message, sandbox.metadata.generation);
        Ok(claim)
    }

    /// The StorageClass marked default, if any (the newest, as the API server picks).
    async fn default_storage_class(&self) -> std::result::Result<Option<String>, String> {
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        let list = classes.list(&Default::default()).await.map_err(|e| e.to_string())?;
        Ok(pods::default_storage_class(&list.items))
    }

    /// The sandbox's token: from its Secret, which is made (once) when missing.
    /// `Ok(Err(why))` when the name is taken by a Secret that is not this Sandbox's.
    async fn token(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<std::result::Result<String, String>> {
        let secret_name = pods::secret_name(name);
        let made = || Ok(vec![(pods::TOKEN_KEY.to_string(), agentplane_node_agent::random::hex(24).into_bytes())]);
        let secret = match self.owned_secret(sandbox, namespace, &secret_name, uid, "token", made).await? {
            Ok(secret) => secret,
            Err(why) => return Ok(Err(why)),
        };
        Ok(secret_text(&secret, &secret_name, pods::TOKEN_KEY))
    }

    /// The proxy token of a sandbox that goes through the egress proxy, from its egress
    /// Secret (made once, with the sandbox's CA).
    async fn egress_token(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<std::result::Result<String, String>> {
        let secret_name = super::egress::secret_name(name);
        let made = || {
            // The controller's own trust store, with the sandbox's CA after it.
            let bundle = std::env::var_os("SSL_CERT_FILE")
                .and_then(|f| std::fs::read(f).ok())
                .or_else(|| std::fs::read("/etc/ssl/certs/ca-certificates.crt").ok())
                .unwrap_or_default();
            super::egress::new_secret_data(namespace, name, &bundle)
        };
        let secret =
            match self.owned_secret(sandbox, namespace, &secret_name, uid, "egress proxy token and CA", made).await? {
                Ok(secret) => secret,
                Err(why) => return Ok(Err(why)),
            };
        Ok(secret_text(&secret, &secret_name, super::egress::TOKEN_KEY))
    }

    /// The Secret `secret_name` this Sandbox owns, made from `data` when missing (never
    /// changed after); an error when someone else's has the name.
    async fn owned_secret(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        secret_name: &str,
        uid: &str,
        what: &str,
        data: impl FnOnce() -> std::result::Result<Vec<(String, Vec<u8>)>, String>,
    ) -> Result<std::result::Result<Secret, String>> {
        let name = sandbox.name_any();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        match secrets.get_opt(secret_name).await? {
            Some(secret) if !controlled_by(&secret, uid) => Ok(Err(format!(
                "Secret {secret_name} exists and is not this Sandbox's: the controller keeps the {what} there; \
                 rename the Sandbox or that Secret"
            ))),
            Some(secret) => Ok(Ok(secret)),
            None => {
                let data = match data() {
                    Ok(data) => data,
                    Err(why) => return Ok(Err(format!("making Secret {secret_name}: {why}"))),
                };
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(secret_name.to_string()),
                        namespace: Some(namespace.to_string()),
                        labels: Some(pods::sandbox_labels(&name)),
                        owner_references: sandbox.controller_owner_ref(&()).map(|o| vec![o]),
                        ..Default::default()
                    },
                    data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
                    immutable: Some(true),
                    type_: Some("Opaque".into()),
                    ..Default::default()
                };
                let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                let created = secrets.create(&params, &secret).await?;
                debug!(sandbox = %name, namespace, secret = %secret_name, "made the sandbox's {what} Secret");
                Ok(Ok(created))
            }
        }
    }

    /// Puts the NetworkPolicy `made` asks for in place (or removes ours when none is).
    /// `Ok(Err(why))` when the name is taken by a policy that is not this Sandbox's.
    async fn network_policy(
        &self,
        made: &Made,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<std::result::Result<(), String>> {
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), namespace);
        let existing = policies.get_opt(name).await?;
        match (&made.network_policy, existing) {
            (_, Some(policy)) if !controlled_by(&policy, uid) => Ok(Err(format!(
                "NetworkPolicy {name} exists and is not this Sandbox's: the sandbox cannot be restricted as its \
                 network asks; rename one of them"
            ))),
            (Some(desired), existing) => {
                let hash = |p: &NetworkPolicy| p.annotations().get(pods::POLICY_HASH_ANNOTATION).cloned();
                if existing.as_ref().map(hash) != Some(hash(desired)) {
                    policies.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(desired)).await?;
                    debug!(sandbox = %name, namespace, "applied the sandbox's NetworkPolicy");
                }
                Ok(Ok(()))
            }
            (None, Some(policy)) => {
                delete_owned(&policies, &policy).await?;
                Ok(Ok(()))
            }
            (None, None) => Ok(Ok(())),
        }
    }

    /// Removes what was made for a managed Sandbox (what is already gone, or someone
    /// else's, is left alone) and tells what was placed on it.
    pub(super) async fn cleanup_managed(&self, sandbox: &Sandbox) -> Result<Action> {
        let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
        let name = sandbox.name_any();
        self.delete_made(sandbox).await?;
        let key = self.sandboxes.key(Some(&namespace), &name);
        self.unfollow_sandbox(&key);
        self.sandboxes.remove(&key);
        self.redrive(&namespace, &name).await;
        self.member_changed(sandbox).await;
        let note = "its Pod, NetworkPolicy and token Secret deleted";
        self.event(sandbox, KubeEventType::Normal, "Deleted", "Delete", note);
        Ok(Action::await_change())
    }

    /// Deletes the Pod, NetworkPolicy and Secret this Sandbox controls.
    pub(super) async fn delete_made(&self, sandbox: &Sandbox) -> Result<()> {
        let namespace = sandbox.namespace().unwrap_or_else(|| "default".into());
        let name = sandbox.name_any();
        let uid = sandbox.uid().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &namespace);
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
        if let Some(pod) = pods.get_opt(&name).await?.filter(|p| controlled_by(p, &uid)) {
            delete_owned(&pods, &pod).await?;
        }
        if let Some(policy) = policies.get_opt(&name).await?.filter(|p| controlled_by(p, &uid)) {
            delete_owned(&policies, &policy).await?;
        }
        for secret_name in [pods::secret_name(&name), super::egress::secret_name(&name)] {
            if let Some(secret) = secrets.get_opt(&secret_name).await?.filter(|s| controlled_by(s, &uid)) {
                delete_owned(&secrets, &secret).await?;
            }
        }
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &namespace);
        if let Some(claim) = claims.get_opt(&pods::claim_name(&name)).await?.filter(|c| controlled_by(c, &uid)) {
            delete_owned(&claims, &claim).await?;
        }
        info!(sandbox = %name, namespace = %namespace, "deleted what was made for the sandbox");
        Ok(())
    }
}

/// Whether the Sandbox's podTemplate gives the data volume itself.
fn template_gives_data(sandbox: &Sandbox) -> bool {
    let volumes = sandbox.spec.pod_template.as_ref().and_then(|t| t["spec"]["volumes"].as_array().cloned());
    volumes.into_iter().flatten().any(|v| v["name"] == "data")
}

/// Deletes `obj` if it is still the same object; gone already is fine.
pub(super) async fn delete_owned<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: obj.meta().uid.clone(), resource_version: None }),
        ..Default::default()
    };
    match api.delete(obj.meta().name.as_deref().unwrap_or_default(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Why a Pod that exists does not run yet, from what the scheduler and kubelet say.
fn pending_reason(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == pods::CONTAINER)
        .and_then(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            [Some(w.reason.as_deref().unwrap_or("Waiting")), w.message.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ")
        });
    if let Some(waiting) = waiting {
        return format!("the node agent's container waits: {waiting}");
    }
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| c.message.clone().or(c.reason.clone()).unwrap_or_default());
    match (pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), unscheduled) {
        (_, Some(why)) if !why.is_empty() => format!("the Pod is not scheduled: {why}"),
        (None, _) => "the Pod waits to be scheduled".into(),
        (Some(node), _) if status.pod_ip.is_some() => format!("the Pod is starting on {node}"),
        (Some(node), _) => format!("the Pod is scheduled on {node} and not started yet"),
    }
}

/// The status fields the controller owns on a managed Sandbox.
fn managed_fields(status: &SandboxStatus) -> SandboxStatus {
    SandboxStatus {
        observed_generation: status.observed_generation,
        phase: status.phase,
        node_agent_version: status.node_agent_version.clone(),
        endpoint: status.endpoint.clone(),
        isolation: status.isolation.clone(),
        runs_on: status.runs_on.clone(),
        started_at: status.started_at.clone(),
        restarts: status.restarts,
        applied_limits: status.applied_limits.clone(),
        template: status.template.clone(),
        claimed_by: status.claimed_by.clone(),
        conditions: status.conditions.clone(),
        suspended_at: status.suspended_at.clone(),
        ..Default::default()
    }
}

/// A key of a Secret as text, or why it is not there.
fn secret_text(secret: &Secret, secret_name: &str, key: &str) -> std::result::Result<String, String> {
    match secret.data.as_ref().and_then(|d| d.get(key)).map(|b| String::from_utf8_lossy(&b.0).into_owned()) {
        Some(text) if !text.is_empty() => Ok(text),
        _ => Err(format!("Secret {secret_name} has no key {key:?}: delete it to have a new one made")),
    }
}
