//! The cluster store: the same resources as CRDs on a Kubernetes API server, driven by
//! kube-runtime controllers on the shared reconcile core.
//!
//! - Each kind is watched once; a reflector keeps the cache, and only changes of
//!   generation (which deletion bumps), a restart request (see `restart`) and, for
//!   Sandboxes and pools, finalizers trigger a reconcile, so the controller's own
//!   writes never come back as work. Sandboxes also pass on a heartbeat.
//! - Status goes out by server-side apply under one field manager, and only when it
//!   differs from what the API server holds. A Process or Session pass starts from the
//!   status written last, which the cache may not have yet (`written`).
//! - Sessions, and Processes whose deletion changes other objects, carry a finalizer:
//!   deleting one stops what runs for it on its node agent first. The pass that adds
//!   it goes on to apply (`finalize`), so a new resource is one reconcile. Any other
//!   Process carries none: its run is stopped when the watch sees it go, and by a
//!   sweep of its node agent for one missed (`process`, `clean_up_after_processes`).
//! - Events go to the API server off the workers (`events`), so a status never waits
//!   behind one.
//! - What happens on a node agent (an exit, a session event) comes back as a
//!   reconcile of the resource concerned, through bounded channels, without waiting
//!   for a resync.
//! - An external Sandbox (with `spec.endpoint`) is ready while the heartbeat its node
//!   agent writes is recent (or, for one nobody registers, while its endpoint
//!   answers). A managed one (without) is a Pod, a token Secret and a NetworkPolicy
//!   the controller makes and removes (`managed`, `pods`), ready while its node agent
//!   answers; the Pod watch brings its changes. A Sandbox turning ready or not ready
//!   re-drives every resource placed on it.
//! - A Session or Process naming `sandboxTemplate` is placed on a Sandbox of its own
//!   from that template (a warm pool's, or a new one) before the reconcile core sees
//!   it (`pools`); pools are reconciled beside the other kinds.
//!
//! Where each job lives: this file holds the configuration, the shared `Context`, the
//! wiring of the controllers (`run`), the watch helpers, the error policy and the
//! status and Event writes; one file per kind holds its reconcile (`process`,
//! `session`, `sandbox`, `pools`, with `managed` and `pods` for managed Sandboxes);
//! `election` runs the controllers under a leader Lease; `register` is the node
//! agent's side (its Sandbox and heartbeat); `env` reads values from Secrets.

pub mod egress;
pub mod egress_counts;
mod election;
mod env;
pub mod error;
mod events;
mod finalize;
mod lend;
mod managed;
pub mod pods;
mod pools;
mod power;
mod process;
pub mod register;
mod sandbox;
mod session;
mod written;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::follow::Followers;
use agentplane_crds::{Process, Sandbox, SandboxTemplate, SandboxWarmPool, Session};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::process::ProcessReconciler;
use crate::sandboxes::Sandboxes;
use crate::session::SessionReconciler;
use error::{Error, Result};

pub use crate::metrics::Metrics;
pub use election::{Election, run_elected};
pub use error::Error as StoreError;
pub use managed::SANDBOX_FINALIZER;
use process::reconcile_process;
use sandbox::{heartbeat, look, reconcile_sandbox};
use session::reconcile_session;

/// The field manager of every status the controller writes.
pub const FIELD_MANAGER: &str = "agentplane-controller";
/// The finalizer that stops a resource's process or session before it goes.
pub const FINALIZER: &str = "agentplane.dev/cleanup";
/// Capacity of the channels that turn node-agent events into reconciles.
const TRIGGER_CAPACITY: usize = 1024;

#[derive(Debug, Clone)]
pub struct KubeStoreConfig {
    /// Namespaces to watch; empty means all.
    pub namespaces: Vec<String>,
    /// Reconciles run at once, per kind.
    pub concurrency: u16,
    /// A Sandbox whose heartbeat is older than this is not ready.
    pub heartbeat_grace: Duration,
    /// This replica's name in Events.
    pub instance: String,
    /// The image of a managed Sandbox's Pod when its podTemplate names none.
    pub sandbox_image: String,
    /// The cluster's egress proxy, which sandboxes with `network: allowlist` reach the
    /// network through (and which swaps their credentials in); without it, an allowlist
    /// is what a NetworkPolicy can say (IP blocks), and credentials are refused.
    pub egress_proxy: Option<egress::EgressProxy>,
}

/// The image managed sandboxes run by default: the one this controller was built as.
pub fn default_sandbox_image() -> String {
    format!("ghcr.io/agentplane/agentplane:{}", env!("CARGO_PKG_VERSION"))
}

impl Default for KubeStoreConfig {
    fn default() -> Self {
        KubeStoreConfig {
            namespaces: Vec::new(),
            concurrency: 32,
            heartbeat_grace: Duration::from_secs(30),
            instance: "agentplane-controller".into(),
            sandbox_image: default_sandbox_image(),
            egress_proxy: None,
        }
    }
}

/// Shared by the three controllers.
struct Context {
    client: kube::Client,
    config: KubeStoreConfig,
    sandboxes: Arc<Sandboxes>,
    processes: ProcessReconciler,
    sessions: SessionReconciler,
    /// Kubernetes Events, published off the workers.
    events: events::Events,
    /// The Process and Session statuses written last (see `written`).
    written: written::Written,
    metrics: Metrics,
    process_store: Store<Process>,
    session_store: Store<Session>,
    /// Sandboxes as last seen (what Sessions and Processes lend credentials to).
    sandbox_store: Store<Sandbox>,
    template_store: Store<SandboxTemplate>,
    process_trigger: mpsc::Sender<ObjectRef<Process>>,
    session_trigger: mpsc::Sender<ObjectRef<Session>>,
    /// A pool member changed or was claimed: its pool looks again.
    pool_trigger: mpsc::Sender<ObjectRef<SandboxWarmPool>>,
    /// A suspended sandbox was woken: it looks again (see `power`).
    sandbox_trigger: mpsc::Sender<ObjectRef<Sandbox>>,
    /// A sandbox (by key) whose node agent is swept for runs of gone Processes (see
    /// `process`).
    sweep_trigger: mpsc::Sender<String>,
    /// Sandboxes this controller suspended for being idle, and those asked to wake
    /// since (see `power`).
    sleepers: power::SharedSleepers,
    /// Each Sandbox's last heartbeat and when this controller first saw it: freshness
    /// is judged on this clock, so a node agent's skewed clock cannot make it look
    /// alive or dead (the node lifecycle controller judges kubelets the same way).
    heartbeats: Mutex<HashMap<String, (Time, std::time::Instant)>>,
    /// The lifecycle stream followed for each ready sandbox, by sandbox key.
    sandbox_followers: Followers<String>,
    /// The event stream followed for each live Session, with the uid it follows.
    session_followers: Followers<ObjectRef<Session>>,
    shutdown: CancellationToken,
}

/// Why a reconcile failed; kube-runtime retries it after a delay.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<Error>>),
    #[error(transparent)]
    Store(#[from] Error),
}

/// Runs the controllers until `shutdown`; `metrics` counts what they do.
pub async fn run(
    client: kube::Client,
    config: KubeStoreConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<()> {
    let sandboxes = Arc::new(Sandboxes::namespaced());
    let (process_trigger, process_rx) = mpsc::channel(TRIGGER_CAPACITY);
    let (session_trigger, session_rx) = mpsc::channel(TRIGGER_CAPACITY);
    let (pool_trigger, pool_rx) = mpsc::channel(TRIGGER_CAPACITY);
    let (sandbox_trigger, sandbox_rx) = mpsc::channel(TRIGGER_CAPACITY);
    let (sweep_trigger, sweep_rx) = mpsc::channel::<String>(TRIGGER_CAPACITY);
    // Processes as the watch saw them go (see `process`); a full queue leaves one to
    // the sweep.
    let (gone_tx, gone_rx) = mpsc::channel::<Process>(TRIGGER_CAPACITY);

    let watch_config = watcher::Config::default().any_semantic();
    let (process_store, process_writer) = reflector::store::<Process>();
    let (session_store, session_writer) = reflector::store::<Session>();
    let (sandbox_store, sandbox_writer) = reflector::store::<Sandbox>();
    let (template_store, template_writer) = reflector::store::<SandboxTemplate>();
    let (pool_store, pool_writer) = reflector::store::<SandboxWarmPool>();
    let process_stream = watch_all::<Process>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(process_writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(process)) = event
                && gone_tx.try_send(process.clone()).is_err()
            {
                debug!(process = %process.name_any(), "the queue of gone processes is full; left to the sweep");
            }
        })
        .applied_objects()
        .predicate_filter(
            // Not on finalizers: deletion bumps `generation`, and the pass that adds
            // ours goes on to apply (`finalize`).
            predicates::generation.combine(crate::restart::predicate),
            Default::default(),
        );
    let session_stream = watch_all::<Session>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(session_writer)
        .applied_objects()
        .predicate_filter(
            // Not on finalizers: deletion bumps `generation`, and the pass that adds
            // ours goes on to apply (`finalize`).
            predicates::generation.combine(crate::restart::predicate),
            Default::default(),
        );
    let sandbox_stream = watch_all::<Sandbox>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(sandbox_writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation.combine(predicates::finalizers).combine(heartbeat).combine(pools::claim_state),
            Default::default(),
        );
    let pool_stream = watch_all::<SandboxWarmPool>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(pool_writer)
        .applied_objects()
        .predicate_filter(predicates::generation.combine(predicates::finalizers), Default::default());
    // A template appearing or changing is news to the pools made of it.
    let template_stream = watch_all::<SandboxTemplate>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(template_writer)
        .applied_objects();
    // The Pods of managed Sandboxes: any change of one (scheduled, running, gone) is a
    // reconcile of the Sandbox that owns it.
    let pod_selector = format!("{}={}", pods::APP_LABEL.0, pods::APP_LABEL.1);
    let pod_stream = watch_all::<Pod>(&client, &config.namespaces, watch_config.labels(&pod_selector))
        .default_backoff()
        .touched_objects();

    let recorder = Recorder::new(
        client.clone(),
        Reporter { controller: FIELD_MANAGER.into(), instance: Some(config.instance.clone()) },
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        processes: ProcessReconciler::new(Arc::clone(&sandboxes)),
        sessions: SessionReconciler::new(Arc::clone(&sandboxes)),
        sandboxes,
        config: config.clone(),
        events: events::Events::start(recorder, metrics.events_dropped.clone()),
        written: Default::default(),
        metrics: metrics.clone(),
        process_store: process_store.clone(),
        session_store: session_store.clone(),
        sandbox_store: sandbox_store.clone(),
        template_store,
        process_trigger,
        session_trigger,
        pool_trigger,
        sandbox_trigger,
        sweep_trigger,
        sleepers: Default::default(),
        heartbeats: Mutex::new(HashMap::new()),
        sandbox_followers: Followers::default(),
        session_followers: Followers::default(),
        shutdown: shutdown.clone(),
    });

    if let Some(url) = config.egress_proxy.as_ref().and_then(|e| e.counts.clone()) {
        tokio::spawn(egress_counts::follow_counts(client.clone(), url, sandbox_store.clone(), shutdown.clone()));
    }

    tokio::spawn(clean_up_after_processes(Arc::clone(&ctx), gone_rx, sweep_rx));

    let controller_config = ControllerConfig::default().concurrency(config.concurrency);
    let stop = shutdown.clone();
    let sandbox_controller = Controller::for_stream(sandbox_stream, sandbox_store.clone())
        .owns_stream(pod_stream)
        .with_config(controller_config.clone())
        .reconcile_on(ReceiverStream::new(sandbox_rx))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile_sandbox, error_policy, Arc::clone(&ctx))
        .for_each(|_| async {});
    let sandbox_task = tokio::spawn(sandbox_controller);

    // Processes and Sessions wait for the first list of Sandboxes, and each of those
    // to be looked at once, so a restart does not report them all as on an unknown
    // sandbox for a moment.
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        r = store_ready(&sandbox_store) => r.map_err(|e| Error::Config(format!("the Sandbox cache never filled: {e}")))?,
    }
    for sandbox in sandbox_store.state() {
        debug!(sandbox = %sandbox.name_any(), "first look");
        if let Err(e) = look(Arc::clone(&sandbox), &ctx).await {
            warn!(sandbox = %sandbox.name_any(), error = %e, "cannot look at the sandbox yet");
        }
    }

    debug!("starting the Process and Session controllers");
    let stop = shutdown.clone();
    let process_controller = Controller::for_stream(process_stream, process_store.clone())
        .with_config(controller_config.clone())
        .reconcile_on(ReceiverStream::new(process_rx))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile_process, error_policy, Arc::clone(&ctx))
        .for_each(|_| async {});
    let stop = shutdown.clone();
    let pools_of_template = {
        let pools = pool_store.clone();
        move |template: SandboxTemplate| {
            let (namespace, name) = (template.namespace(), template.name_any());
            pools
                .state()
                .into_iter()
                .filter(|p| p.namespace() == namespace && p.spec.template == name)
                .map(|p| ObjectRef::from_obj(&*p))
                .collect::<Vec<_>>()
        }
    };
    let pool_controller = Controller::for_stream(pool_stream, pool_store)
        .watches_stream(template_stream, pools_of_template)
        .with_config(controller_config.clone())
        .reconcile_on(ReceiverStream::new(pool_rx))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(pools::reconcile_pool, error_policy, Arc::clone(&ctx))
        .for_each(|_| async {});
    let stop = shutdown.clone();
    let session_controller = Controller::for_stream(session_stream, session_store.clone())
        .with_config(controller_config)
        .reconcile_on(ReceiverStream::new(session_rx))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile_session, error_policy, Arc::clone(&ctx))
        .for_each(|_| async {});
    let ready = {
        let metrics = metrics.clone();
        let (p, s) = (process_store.clone(), session_store.clone());
        async move {
            if store_ready(&p).await.is_ok() && store_ready(&s).await.is_ok() {
                metrics.set_ready(true);
                info!("caches synced; reconciling");
            }
        }
    };
    tokio::join!(process_controller, session_controller, pool_controller, ready);
    let _ = sandbox_task.await;
    ctx.stop_followers();
    Ok(())
}

/// Stops the runs of gone Processes: those the watch saw go (`gone`), and on the node
/// agents of the sandboxes in `sweeps` and, every `SWEEP_EVERY`, of every sandbox (see
/// `process`). Ends at shutdown: a replica that lost the lease sweeps no more.
async fn clean_up_after_processes(ctx: Arc<Context>, gone: mpsc::Receiver<Process>, sweeps: mpsc::Receiver<String>) {
    /// Deleted Processes stopped at once.
    const AT_ONCE: usize = 16;
    let stopped = ReceiverStream::new(gone).for_each_concurrent(AT_ONCE, |process| {
        let ctx = Arc::clone(&ctx);
        async move { ctx.process_gone(process).await }
    });
    let swept = async {
        let mut sweeps = sweeps;
        let mut every = tokio::time::interval(process::SWEEP_EVERY);
        every.tick().await;
        loop {
            let keys = tokio::select! {
                _ = ctx.shutdown.cancelled() => return,
                key = sweeps.recv() => match key {
                    Some(key) => vec![key],
                    None => return,
                },
                _ = every.tick() => ctx
                    .sandbox_store
                    .state()
                    .iter()
                    .map(|s| ctx.sandboxes.key(s.metadata.namespace.as_deref(), &s.name_any()))
                    .collect(),
            };
            for key in keys {
                ctx.sweep(&key).await;
            }
        }
    };
    tokio::select! {
        _ = async { tokio::join!(stopped, swept) } => {}
        _ = ctx.shutdown.cancelled() => {}
    }
}

/// `Store::wait_until_ready` from a second task: the store's readiness is a oneshot
/// whose receiver keeps one waker, so a waiter beside the controller's own may never
/// be woken. Polling again now and then sees the memoized result.
async fn store_ready<K>(store: &Store<K>) -> std::result::Result<(), reflector::store::WriterDropped>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        if let Ok(result) = tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready()).await {
            return result;
        }
    }
}

/// A watcher on every namespace, or on each of `namespaces`.
fn watch_all<K>(
    client: &kube::Client,
    namespaces: &[String],
    config: watcher::Config,
) -> futures_util::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default,
{
    if namespaces.is_empty() {
        return watcher(Api::<K>::all(client.clone()), config).boxed();
    }
    let streams = namespaces.iter().map(|ns| watcher(Api::<K>::namespaced(client.clone(), ns), config.clone()).boxed());
    futures_util::stream::select_all(streams).boxed()
}

fn error_policy<K: Resource<DynamicType = ()>>(obj: Arc<K>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let kind = match K::kind(&()).as_ref() {
        "Process" => "Process",
        "Session" => "Session",
        "SandboxWarmPool" => "SandboxWarmPool",
        _ => "Sandbox",
    };
    warn!(kind, name = %obj.meta().name.as_deref().unwrap_or_default(), error = %error, "reconcile failed; retrying");
    Metrics::count(&ctx.metrics.reconcile_errors, kind);
    Action::requeue(Duration::from_secs(5))
}

fn requeue(after: Option<Duration>) -> Action {
    after.map_or_else(Action::await_change, Action::requeue)
}

impl Context {
    fn stop_followers(&self) {
        self.session_followers.stop_all();
        self.sandbox_followers.stop_all();
    }

    /// Server-side applies `status` when it differs from `before` (compared as the API
    /// server stores it: times to the second).
    async fn write_status<K, S>(
        &self,
        api: &Api<K>,
        obj: &K,
        before: Option<&S>,
        status: &S,
        kind: &'static str,
    ) -> Result<()>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
        S: Serialize,
    {
        let new = serde_json::to_value(status).map_err(|e| Error::Config(format!("a status serializes: {e}")))?;
        let old = before.map(serde_json::to_value).transpose().map_err(|e| Error::Config(e.to_string()))?;
        if old.as_ref() == Some(&new) {
            return Ok(());
        }
        let name = obj.meta().name.clone().unwrap_or_default();
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name},
            "status": new,
        });
        Metrics::count(&self.metrics.status_writes, kind);
        api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
        self.written.record(kind, obj.meta().uid.as_deref(), &patch["status"]);
        Ok(())
    }

    /// Queues a Kubernetes Event about `obj`; failing to publish it is logged, never
    /// fatal, and a reconcile never waits for it.
    fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: KubeEventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1024).collect()),
            action: action.into(),
            secondary: None,
        };
        self.events.publish(obj.object_ref(&()), event);
    }
}
