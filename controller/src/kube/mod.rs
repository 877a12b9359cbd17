//! The cluster store: the same resources as CRDs on a Kubernetes API server, driven by
//! kube-runtime controllers on the shared reconcile core.
//!
//! - Each kind is watched once; a reflector keeps the cache, and only changes of
//!   generation or finalizers (or a restart request, see `restart`) trigger a
//!   reconcile, so the controller's own status writes never come back as work.
//!   Sandboxes also pass on a heartbeat.
//! - Status goes out by server-side apply under one field manager, and only when it
//!   differs from what the API server holds.
//! - Processes and Sessions carry a finalizer: deleting one stops what runs for it on
//!   its node agent first (`finalizer`, kube-runtime's helper).
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

mod env;
pub mod error;
mod managed;
pub mod pods;
mod pools;
pub mod register;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::follow::{Followers, Seen};
use crate::node_agent::NodeAgent;
use agentplane_crds::{
    Key, Kind, Process, ProcessPhase, Sandbox, SandboxStatus, SandboxTemplate, SandboxWarmPool, Session, SessionPhase,
};
use agentplane_node_agent::client::Client;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::conditions::{self, READY};
use crate::process::{ProcessInput, ProcessReconciler};
use crate::sandboxes::Sandboxes;
use crate::session::{SessionInput, SessionReconciler};
use error::{Error, Result};

pub use crate::metrics::Metrics;
pub use error::Error as StoreError;
pub use managed::SANDBOX_FINALIZER;

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
    recorder: Recorder,
    metrics: Metrics,
    process_store: Store<Process>,
    session_store: Store<Session>,
    template_store: Store<SandboxTemplate>,
    process_trigger: mpsc::Sender<ObjectRef<Process>>,
    session_trigger: mpsc::Sender<ObjectRef<Session>>,
    /// A pool member changed or was claimed: its pool looks again.
    pool_trigger: mpsc::Sender<ObjectRef<SandboxWarmPool>>,
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

/// A follower task and the uid of the object it follows.

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

    let watch_config = watcher::Config::default().any_semantic();
    let (process_store, process_writer) = reflector::store::<Process>();
    let (session_store, session_writer) = reflector::store::<Session>();
    let (sandbox_store, sandbox_writer) = reflector::store::<Sandbox>();
    let (template_store, template_writer) = reflector::store::<SandboxTemplate>();
    let (pool_store, pool_writer) = reflector::store::<SandboxWarmPool>();
    let process_stream = watch_all::<Process>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(process_writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation.combine(predicates::finalizers).combine(crate::restart::predicate),
            Default::default(),
        );
    let session_stream = watch_all::<Session>(&client, &config.namespaces, watch_config.clone())
        .default_backoff()
        .reflect(session_writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation.combine(predicates::finalizers).combine(crate::restart::predicate),
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
        recorder,
        metrics: metrics.clone(),
        process_store: process_store.clone(),
        session_store: session_store.clone(),
        template_store,
        process_trigger,
        session_trigger,
        pool_trigger,
        heartbeats: Mutex::new(HashMap::new()),
        sandbox_followers: Followers::default(),
        session_followers: Followers::default(),
        shutdown: shutdown.clone(),
    });

    let controller_config = ControllerConfig::default().concurrency(config.concurrency);
    let stop = shutdown.clone();
    let sandbox_controller = Controller::for_stream(sandbox_stream, sandbox_store.clone())
        .owns_stream(pod_stream)
        .with_config(controller_config.clone())
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

/// A Sandbox's node agent writes its heartbeat into the status: that is news.
fn heartbeat(sandbox: &Sandbox) -> Option<u64> {
    let beat = sandbox.status.as_ref().and_then(|s| s.last_heartbeat.as_ref()).map(|t| t.0.as_second());
    Some(beat.map_or(0, |s| s as u64))
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

// ---------------------------------------------------------------------------------
// Processes

async fn reconcile_process(process: Arc<Process>, ctx: Arc<Context>) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "Process");
    let namespace = process.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Process> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, FINALIZER, process, |event| async {
        match event {
            Finalizer::Apply(process) => ctx.apply_process(&api, &process).await,
            Finalizer::Cleanup(process) => {
                // Stopped where it ran: the sandbox it was placed on, when not its spec's.
                let mut placed = (*process).clone();
                if let Some(sandbox) = process.status.as_ref().and_then(|s| s.sandbox.clone()) {
                    placed.spec.sandbox = sandbox;
                }
                ctx.processes.cleanup(&placed).await?;
                if process.spec.sandbox_template.is_some() {
                    ctx.finish_claims(&namespace, process.uid().as_deref()).await?;
                }
                ctx.event(
                    &*process,
                    KubeEventType::Normal,
                    "Stopped",
                    "Delete",
                    "stopped on its node agent before deletion",
                )
                .await;
                Ok(Action::await_change())
            }
        }
    })
    .await;
    result.map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

impl Context {
    async fn apply_process(&self, api: &Api<Process>, process: &Process) -> Result<Action> {
        let namespace = process.namespace().unwrap_or_default();
        let env = env::resolve(&self.client, &namespace, &process.spec.env, &process.spec.env_from).await;
        let mut session_sandbox = None;
        let session = match &process.spec.session_ref {
            None => Ok(None),
            Some(name) => {
                let found = self.session_store.get(&ObjectRef::new(name).within(&namespace));
                session_sandbox = found.as_ref().and_then(|s| s.status.as_ref()?.sandbox.clone());
                let uid = found.and_then(|s| s.metadata.uid.clone());
                uid.map(|uid| Some(crate::session::node_session_id(&uid))).ok_or_else(|| {
                    format!("sessionRef names session {name:?}, which namespace {namespace:?} does not have")
                })
            }
        };
        let held = process.status.as_ref().and_then(|s| s.sandbox.as_deref());
        let placement = match &process.spec.sandbox_template {
            Some(template) => {
                let claimer =
                    Key { kind: Kind::Process, namespace: namespace.clone(), name: process.name_any() }.to_string();
                self.place(&claimer, &process.metadata, held, template).await?
            }
            // A Process that feeds a Session and names no sandbox of its own runs where
            // the Session was placed: the node agent that has that session.
            None if process.spec.sandbox == agentplane_crds::LOCAL_SANDBOX => {
                session_sandbox.map_or(pools::Placement::Unplaced, pools::Placement::Placed)
            }
            None => pools::Placement::Unplaced,
        };
        let mut placed = process.clone();
        let problem = placement.apply(&mut placed.spec.sandbox, &mut placed.spec.sandbox_template);
        // Node agents here outlive the controller: what one no longer has, it lost.
        let input = ProcessInput { process: &placed, env, spec_problem: problem, session, own_node_agent_since: None };
        let reconciled = self.processes.reconcile(input).await;
        let mut status = reconciled.status;
        if let Some(sandbox) = placement.placed() {
            status.sandbox = Some(sandbox.to_string()).filter(|s| *s != process.spec.sandbox);
        }
        let before = process.status.as_ref();
        self.write_status(api, process, before, &status, "Process").await?;
        self.process_events(process, before, &status).await;
        Ok(requeue(placement.requeue(reconciled.requeue_after)))
    }

    async fn process_events(
        &self,
        process: &Process,
        before: Option<&agentplane_crds::ProcessStatus>,
        after: &agentplane_crds::ProcessStatus,
    ) {
        let (was, is) = (before.and_then(|s| s.phase), after.phase);
        let started_again = before.and_then(|s| s.pid) != after.pid && after.pid.is_some();
        if is == Some(ProcessPhase::Running) && (was != is || started_again) {
            let note = after.pid.map_or_else(|| "started".into(), |p| format!("started, pid {p}"));
            self.event(process, KubeEventType::Normal, "Started", "Start", &note).await;
        }
        if was == is {
            return;
        }
        let exit = match (after.exit_code, &after.signal) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("killed by {signal}"),
            _ => "exited".into(),
        };
        match is {
            Some(ProcessPhase::Succeeded) | Some(ProcessPhase::Stopped) => {
                self.event(process, KubeEventType::Normal, "Exited", "Exit", &exit).await
            }
            Some(ProcessPhase::BackOff) => {
                self.event(process, KubeEventType::Warning, "BackOff", "Restart", &exit).await
            }
            Some(ProcessPhase::Failed) => {
                let why = conditions::get(&after.conditions, READY).map(|c| c.message.clone()).unwrap_or(exit);
                self.event(process, KubeEventType::Warning, "Failed", "Exit", &why).await
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------
// Sessions

async fn reconcile_session(session: Arc<Session>, ctx: Arc<Context>) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "Session");
    let namespace = session.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Session> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, FINALIZER, session, |event| async {
        match event {
            Finalizer::Apply(session) => ctx.apply_session(&api, &session).await,
            Finalizer::Cleanup(session) => {
                ctx.stop_following(&ObjectRef::from_obj(&*session));
                let mut placed = (*session).clone();
                if let Some(sandbox) = session.status.as_ref().and_then(|s| s.sandbox.clone()) {
                    placed.spec.sandbox = sandbox;
                }
                ctx.sessions.cleanup(&placed).await?;
                if session.spec.sandbox_template.is_some() {
                    ctx.finish_claims(&namespace, session.uid().as_deref()).await?;
                }
                ctx.event(
                    &*session,
                    KubeEventType::Normal,
                    "Ended",
                    "Delete",
                    "ended on its node agent before deletion",
                )
                .await;
                Ok(Action::await_change())
            }
        }
    })
    .await;
    result.map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

/// A Session's MCP servers, their `env` and `headers` values from Secrets of its
/// namespace (as `env` is resolved).
async fn mcp_servers(
    client: &kube::Client,
    namespace: &str,
    servers: &[agentplane_crds::McpServerSpec],
) -> std::result::Result<Vec<agentplane_node_agent::model::McpServer>, String> {
    crate::mcp::check(servers)?;
    let mut resolved = Vec::new();
    for server in servers {
        let env = env::resolve(client, namespace, &server.env, &[])
            .await
            .map_err(|e| crate::mcp::context(server, "env", e))?;
        let headers = env::resolve(client, namespace, &crate::mcp::header_vars(&server.headers), &[])
            .await
            .map_err(|e| crate::mcp::context(server, "headers", e))?;
        resolved.push(crate::mcp::resolved(server, env, headers));
    }
    Ok(resolved)
}

impl Context {
    async fn apply_session(self: &Context, api: &Api<Session>, session: &Session) -> Result<Action> {
        let namespace = session.namespace().unwrap_or_default();
        let env = env::resolve(&self.client, &namespace, &session.spec.env, &session.spec.env_from).await;
        let held = session.status.as_ref().and_then(|s| s.sandbox.as_deref());
        let ended = session.status.as_ref().and_then(|s| s.phase) == Some(SessionPhase::Ended);
        let placement = match (&session.spec.sandbox_template, held) {
            // An ended Session claims nothing more: it stays where it was, even once
            // that sandbox is gone after its TTL.
            (Some(_), Some(held)) if ended => pools::Placement::Placed(held.to_string()),
            (Some(template), _) => {
                let claimer =
                    Key { kind: Kind::Session, namespace: namespace.clone(), name: session.name_any() }.to_string();
                self.place(&claimer, &session.metadata, held, template).await?
            }
            (None, _) => pools::Placement::Unplaced,
        };
        let mut placed = session.clone();
        let problem = placement.apply(&mut placed.spec.sandbox, &mut placed.spec.sandbox_template);
        let git_credentials = match session.spec.workspace.as_ref().and_then(|w| w.git.as_ref()?.credentials.as_ref()) {
            Some(source) => env::resolve_git_credentials(&self.client, &namespace, source).await.map(Some),
            None => Ok(None),
        };
        let reconciled = self
            .sessions
            .reconcile(SessionInput {
                session: &placed,
                env,
                spec_problem: problem,
                git_credentials,
                mcp_servers: mcp_servers(&self.client, &namespace, &session.spec.mcp_servers).await,
            })
            .await;
        let mut status = reconciled.status.clone();
        if let Some(sandbox) = placement.placed() {
            status.sandbox = Some(sandbox.to_string()).filter(|s| *s != session.spec.sandbox);
        }
        let status = &status;
        let before = session.status.as_ref();
        self.write_status(api, session, before, status, "Session").await?;
        if status.phase == Some(SessionPhase::Ended) && session.spec.sandbox_template.is_some() {
            self.finish_claims(&namespace, session.uid().as_deref()).await?;
        }
        let session = &placed;
        let (was, is) = (before.and_then(|s| s.phase), status.phase);
        if was != is {
            match is {
                Some(SessionPhase::Installing) => {
                    self.event(
                        session,
                        KubeEventType::Normal,
                        "Installing",
                        "Install",
                        &format!("installing {:?}", session.spec.agent),
                    )
                    .await
                }
                Some(SessionPhase::AwaitingInput) => {
                    self.event(
                        session,
                        KubeEventType::Normal,
                        "AwaitingInput",
                        "Ask",
                        "the agent waits for an answer in spec.replies",
                    )
                    .await
                }
                Some(SessionPhase::Failed) => {
                    let why = conditions::get(&status.conditions, READY).map(|c| c.message.clone()).unwrap_or_default();
                    self.event(session, KubeEventType::Warning, "Failed", "Run", &why).await
                }
                Some(SessionPhase::Ended) => {
                    self.event(session, KubeEventType::Normal, "Ended", "End", "the session ended").await
                }
                _ if was == Some(SessionPhase::Installing) => {
                    self.event(session, KubeEventType::Normal, "Installed", "Install", "the agent is installed").await
                }
                _ => {}
            }
        }
        let live = crate::follow::session_is_live(&status);
        let last = status.last_event_sequence;
        let key = ObjectRef::from_obj(session);
        if live {
            self.follow_session(key, session, last);
        } else {
            self.stop_following(&key);
        }
        Ok(requeue(placement.requeue(reconciled.requeue_after)))
    }

    /// Follows a live session's events, so what happens in it (a turn ending, a
    /// question asked) is reflected in its status without waiting for a resync.
    fn follow_session(&self, key: ObjectRef<Session>, session: &Session, last: Option<u64>) {
        let (trigger, shutdown, k) = (self.session_trigger.clone(), self.shutdown.clone(), key.clone());
        let notify = move || {
            let (trigger, shutdown, k) = (trigger.clone(), shutdown.clone(), k.clone());
            async move { !shutdown.is_cancelled() && trigger.send(k).await.is_ok() }
        };
        self.session_followers.session(key, session, &self.sessions, last, notify);
    }

    fn stop_following(&self, key: &ObjectRef<Session>) {
        self.session_followers.stop(key);
    }

    fn stop_followers(&self) {
        self.session_followers.stop_all();
        self.sandbox_followers.stop_all();
    }
}

// ---------------------------------------------------------------------------------
// Sandboxes

async fn reconcile_sandbox(sandbox: Arc<Sandbox>, ctx: Arc<Context>) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "Sandbox");
    look(sandbox, &ctx).await
}

/// An external Sandbox is looked at; a managed one (or one that was, and still has
/// things made for it) is made and removed under its finalizer.
async fn look(sandbox: Arc<Sandbox>, ctx: &Context) -> std::result::Result<Action, ReconcileError> {
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
        Err(why) => (false, "TokenUnavailable", why, Some(Duration::from_secs(30))),
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

    async fn sandbox_client(&self, sandbox: &Sandbox, namespace: &str) -> std::result::Result<Client, String> {
        let token = match &sandbox.spec.token_secret_ref {
            Some(selector) => Some(env::secret_key(&self.client, namespace, &selector.name, &selector.key).await?),
            None => None,
        };
        let endpoint = sandbox.endpoint().ok_or_else(|| "it has no endpoint".to_string())?;
        Client::new(endpoint, token).map_err(|e| format!("endpoint {endpoint:?}: {e}"))
    }

    /// A Sandbox turned ready or not: an event, and everything placed on it learns of
    /// it (re-driven when it comes back, told why not when it goes).
    async fn readiness_changed(
        &self,
        sandbox: &Sandbox,
        namespace: &str,
        name: &str,
        ready: bool,
        action: &str,
        message: &str,
    ) {
        let (kind, why) = if ready { (KubeEventType::Normal, "Ready") } else { (KubeEventType::Warning, "NotReady") };
        self.event(sandbox, kind, why, action, message).await;
        self.redrive(namespace, name).await;
    }

    /// Queues every Process and Session of `namespace` placed on sandbox `name`.
    async fn redrive(&self, namespace: &str, name: &str) {
        requeue_placed_on(&self.process_store, &self.process_trigger, namespace, name, Process::placed_sandbox).await;
        requeue_placed_on(&self.session_store, &self.session_trigger, namespace, name, Session::placed_sandbox).await;
    }

    fn follow_sandbox(&self, key: &str, namespace: &str, name: &str, node: Arc<dyn NodeAgent>) {
        let (store, trigger) = (self.process_store.clone(), self.process_trigger.clone());
        let (namespace, name, shutdown) = (namespace.to_string(), name.to_string(), self.shutdown.clone());
        self.sandbox_followers.follow(key.to_string(), None, move || {
            Some(async move {
                // Turns the node agent's lifecycle events into reconciles of the Processes
                // they concern, so an exit is recorded (and a restart made) at once.
                crate::follow::follow_lifecycle(node, shutdown, move |seen| {
                    let (store, trigger, namespace, name) =
                        (store.clone(), trigger.clone(), namespace.clone(), name.clone());
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

    fn unfollow_sandbox(&self, key: &str) {
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

// ---------------------------------------------------------------------------------
// Writing back

impl Context {
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
        Ok(())
    }

    /// Publishes a Kubernetes Event about `obj`; failing to is logged, never fatal.
    async fn event<K: Resource<DynamicType = ()>>(
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
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            debug!(reason, error = %e, "cannot publish an event");
        }
    }
}

// ---------------------------------------------------------------------------------
// Leader election

/// The Lease that decides which replica reconciles.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    /// This replica's name in the Lease (unique among replicas).
    pub identity: String,
    /// How long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

/// Runs the controllers, under `election` when given: a replica waits for the Lease,
/// reconciles while it holds it, and stops with an error the moment it loses it (so
/// two replicas never both write; the Deployment restarts it as a standby).
pub async fn run_elected(
    client: kube::Client,
    config: KubeStoreConfig,
    metrics: Metrics,
    election: Option<Election>,
    shutdown: CancellationToken,
) -> Result<()> {
    let Some(election) = election else {
        metrics.leader.set(1);
        return run(client, config, metrics, shutdown).await;
    };
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &election.lease)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(election.duration.as_secs().max(2))
        .with_grace(election.grace.as_secs().max(1))
        .with_field_manager(FIELD_MANAGER)
        .build()
        .await
        .map_err(|e| Error::Config(format!("leader election Lease {}/{}: {e}", election.namespace, election.lease)))?;
    let (mut leader, lease_task) = manager.watch().await;
    // A standby is ready: it answers probes while it waits.
    metrics.set_ready(true);
    info!(identity = %election.identity, lease = %election.lease, "waiting for the leader Lease");
    while !*leader.borrow_and_update() {
        tokio::select! {
            _ = shutdown.cancelled() => return release(leader, lease_task).await,
            changed = leader.changed() => if changed.is_err() {
                return Err(Error::Config("the leader election task ended".into()));
            },
        }
    }
    info!(identity = %election.identity, "became the leader");
    metrics.leader.set(1);
    let work = shutdown.child_token();
    let controllers = tokio::spawn(run(client, config, metrics.clone(), work.clone()));
    let lost = async {
        loop {
            if leader.changed().await.is_err() || !*leader.borrow_and_update() {
                return;
            }
        }
    };
    let outcome = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        _ = lost => Err(Error::Config("lost the leader Lease; stopping so that only the new leader writes".into())),
    };
    work.cancel();
    metrics.leader.set(0);
    let _ = controllers.await;
    let released = release(leader, lease_task).await;
    outcome.and(released)
}

/// Gives the Lease back so a standby takes over at once rather than after it expires.
async fn release(
    leader: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
) -> Result<()> {
    drop(leader);
    match task.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Config(format!("releasing the leader Lease: {e}"))),
        Err(e) => Err(Error::Config(format!("the leader election task: {e}"))),
    }
}
