//! Processes on a cluster: the reconcile core's Process reconcile, the sandbox it is
//! placed on (a claimed one from its template, or its Session's), its status written
//! back and an Event on each turn of its life.
//!
//! What a deleted Process leaves behind is cleaned in one of two ways:
//! - A Process whose deletion must change other objects (it holds a sandbox claimed
//!   from its template, or lends credentials to its Sandbox) carries the cleanup
//!   finalizer, and `kubectl delete` returns once its run is stopped and those are
//!   given back.
//! - Any other Process (most of them) carries none: the API server is spared a write
//!   per Process. Its run is stopped when the watch sees it go (`gone`), and a sweep of
//!   each ready sandbox's node agent (`sweep`) stops any run whose Process the
//!   controller no longer has: one deleted while no controller ran, or while the watch
//!   was broken. The sweep runs whenever the controller (re)connects to a node agent's
//!   events, and every `SWEEP_EVERY`.

use std::sync::Arc;

use agentplane_crds::{Key, Kind, Process, ProcessPhase};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::runtime::finalizer::Event as Finalizer;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info};

use super::error::Result;
use super::{Context, FINALIZER, Metrics, ReconcileError, env, finalize, lend, pools, requeue};
use crate::conditions::{self, READY};
use crate::process::ProcessInput;

pub(super) async fn reconcile_process(
    process: Arc<Process>,
    ctx: Arc<Context>,
) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "Process");
    let namespace = process.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Process> = Api::namespaced(ctx.client.clone(), &namespace);
    // The status this controller wrote last, which the cache may not have yet.
    let process = ctx.written.freshest(process);
    let uid = process.metadata.uid.clone();
    let needed = needs_finalizer(&process);
    let result = finalize::finalized(&api, FINALIZER, needed, process, |event| async {
        match event {
            Finalizer::Apply(process) => ctx.apply_process(&api, &process).await,
            Finalizer::Cleanup(process) => {
                ctx.stop_where_placed(&process).await?;
                ctx.take_back(&namespace, &lend::owner("Process", &namespace, &process.name_any()), None).await?;
                if process.spec.sandbox_template.is_some() {
                    ctx.finish_claims(&namespace, process.uid().as_deref()).await?;
                }
                ctx.event(
                    &*process,
                    KubeEventType::Normal,
                    "Stopped",
                    "Delete",
                    "stopped on its node agent before deletion",
                );
                ctx.written.forget(uid.as_deref());
                Ok(Action::await_change())
            }
        }
    })
    .await;
    result.map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

/// How often every ready sandbox's node agent is swept besides on (re)connection.
pub(super) const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Whether deleting `process` must change other objects before it goes: a sandbox
/// claimed from its template is marked finished, credentials lent to its Sandbox are
/// taken back. Its run alone needs no finalizer (see the module's doc).
fn needs_finalizer(process: &Process) -> bool {
    process.spec.sandbox_template.is_some() || !process.spec.credentials.is_empty()
}

impl Context {
    /// `process` was deleted (its last state, as the watch saw it go). One that needed
    /// the finalizer was cleaned under it (its last state may no longer show it: the
    /// removal came first); any other has its run stopped here. A failure is left to
    /// the sweep.
    pub(super) async fn process_gone(&self, process: Process) {
        let uid = process.metadata.uid.clone();
        self.written.forget(uid.as_deref());
        if needs_finalizer(&process) || process.finalizers().iter().any(|f| f == FINALIZER) {
            return;
        }
        match self.stop_where_placed(&process).await {
            Ok(()) => self.event(&process, KubeEventType::Normal, "Stopped", "Delete", "stopped on its node agent"),
            Err(e) => {
                debug!(process = %process.name_any(), error = %e, "cannot stop a deleted process yet; the sweep will")
            }
        }
    }

    /// Stops and forgets `process`'s run where it ran: the sandbox it was placed on, when
    /// not its spec's.
    async fn stop_where_placed(&self, process: &Process) -> crate::Result<()> {
        let mut placed = process.clone();
        if let Some(sandbox) = process.status.as_ref().and_then(|s| s.sandbox.clone()) {
            placed.spec.sandbox = sandbox;
        }
        self.processes.cleanup(&placed).await
    }

    /// Stops each run on sandbox `key`'s node agent whose Process this controller does
    /// not have (see `ProcessReconciler::sweep`), once the Process cache is filled.
    pub(super) async fn sweep(&self, key: &str) {
        if super::store_ready(&self.process_store).await.is_err() {
            return;
        }
        let Ok(sandbox) = self.sandboxes.get(key) else { return };
        let live = || self.process_store.state().iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let namespaces = &self.config.namespaces;
        let watched = |namespace: &str| namespaces.is_empty() || namespaces.iter().any(|n| n == namespace);
        match self.processes.sweep(sandbox.node.as_ref(), live, watched).await {
            Ok(0) => {}
            Ok(stopped) => info!(sandbox = key, stopped, "stopped runs whose Process is gone"),
            Err(e) => debug!(sandbox = key, error = %e, "cannot sweep the node agent yet"),
        }
    }

    async fn apply_process(&self, api: &Api<Process>, process: &Process) -> Result<Action> {
        let namespace = process.namespace().unwrap_or_default();
        let env = env::resolve(&self.client, &namespace, &process.spec.env, &process.spec.env_from)
            .await
            .map_err(|e| e.to_string());
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
        let owner = lend::owner("Process", &namespace, &process.name_any());
        let env = self
            .with_credentials(
                env,
                &namespace,
                &owner,
                &placed.spec.sandbox,
                &process.spec.credentials,
                &process.spec.env,
            )
            .await?;
        // Node agents here outlive the controller: what one no longer has, it lost.
        let input = ProcessInput { process: &placed, env, spec_problem: problem, session, own_node_agent_since: None };
        let reconciled = self.processes.reconcile(input).await;
        let mut status = reconciled.status;
        if let Some(sandbox) = placement.placed() {
            status.sandbox = Some(sandbox.to_string()).filter(|s| *s != process.spec.sandbox);
        }
        let before = process.status.as_ref();
        self.write_status(api, process, before, &status, "Process").await?;
        self.process_events(process, before, &status);
        Ok(requeue(placement.requeue(reconciled.requeue_after)))
    }

    fn process_events(
        &self,
        process: &Process,
        before: Option<&agentplane_crds::ProcessStatus>,
        after: &agentplane_crds::ProcessStatus,
    ) {
        let (was, is) = (before.and_then(|s| s.phase), after.phase);
        let started_again = before.and_then(|s| s.pid) != after.pid && after.pid.is_some();
        if is == Some(ProcessPhase::Running) && (was != is || started_again) {
            let note = after.pid.map_or_else(|| "started".into(), |p| format!("started, pid {p}"));
            self.event(process, KubeEventType::Normal, "Started", "Start", &note);
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
                self.event(process, KubeEventType::Normal, "Exited", "Exit", &exit)
            }
            Some(ProcessPhase::BackOff) => self.event(process, KubeEventType::Warning, "BackOff", "Restart", &exit),
            Some(ProcessPhase::Failed) => {
                let why = conditions::get(&after.conditions, READY).map(|c| c.message.clone()).unwrap_or(exit);
                self.event(process, KubeEventType::Warning, "Failed", "Exit", &why)
            }
            _ => {}
        }
    }
}
