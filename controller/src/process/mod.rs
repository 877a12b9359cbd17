//! Reconciling a `Process`: converge the node agent's process to the spec and say how
//! it went.
//!
//! The node-agent process id derives from the resource's uid, so a reconcile first
//! looks for what exists and adopts it. The process carries the digest of what it was
//! started from (`agentplane.dev/spec-hash`): a spec whose digest differs means a new
//! run, and so does a restart asked for with `agentplane restart` (see `restart`): both
//! reset the restart back-off. The status is computed from the spec, the last status
//! and what the node agent reports; restart back-off is derived from the recorded exit
//! time, never from when the reconcile happens to run.
//!
//! A node agent keeps no process across its own restart (killed, out of memory): a run
//! the status records as running that its node agent no longer has was lost with it.
//! That run has ended, how is unknown, and its restart policy decides as for any exit
//! (`Never` is not run again but `Failed`, reason `NodeAgentLost`), so a node agent
//! that keeps dying does not run a `Never` command once per life.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::{DesiredState, Process, ProcessPhase, ProcessStatus, RestartPolicy};
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::ClientError;
use agentplane_node_agent::model::{
    CreateProcessRequest, DeleteProcessQuery, ProcessInfo, ProcessStatus as NodeStatus, PtySize,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::conditions::{self, READY, Status};
use crate::node_agent::NodeAgent;
use crate::sandboxes::Sandboxes;
use crate::{Error, Reconciled, Result, annotations};

/// How long to wait before looking again at something that could not be reached.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(5);
/// How long before trying again to start a program that could not be started.
const RETRY_START: Duration = Duration::from_secs(30);
/// How soon a Process waiting for the Session it names looks again: the look is a
/// lookup in the store's own index, no request to anything.
const RETRY_SESSION: Duration = Duration::from_secs(2);
/// The `Ready` reason of a run lost with its node agent; kept while the run is judged
/// (failed, or backing off before its restart), which is how later passes know that
/// its exit is unknown rather than never recorded.
pub const NODE_AGENT_LOST: &str = "NodeAgentLost";

/// Restart back-off, as the kubelet's: the first restart is immediate, then 10 s
/// doubling to 5 min; a run that lasted 10 minutes resets it.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

impl Backoff {
    /// The wait before the next restart, given the restarts so far and how long the
    /// last run lasted.
    pub fn delay(&self, restarts: u32, ran_for: Option<Duration>) -> Duration {
        if restarts == 0 || ran_for.is_some_and(|d| d >= self.reset_after) {
            return Duration::ZERO;
        }
        let factor = 2u32.saturating_pow(restarts.saturating_sub(1).min(16));
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// The node-agent id of a Process resource's process.
pub fn node_process_id(uid: &str) -> String {
    format!("proc-{uid}")
}

/// The runs in `runs` that a store started for a Process it no longer has: the id is
/// the one it gives (`node_process_id`) and agrees with the run's annotations, the
/// annotations name a Process of a namespace the store looks after (`watched`), and
/// that Process's uid is not in `live`. A run anyone else made (the API, an SDK, a
/// Session's agent, another namespace's controller) is never one.
///
/// `live` must be read after `runs` was listed: a run listed for a Process made since
/// then has its uid in `live`, and a run started after the list is not in `runs`.
pub fn orphans<'a>(
    runs: &'a [ProcessInfo],
    live: &std::collections::HashSet<String>,
    watched: impl Fn(&str) -> bool,
) -> Vec<&'a ProcessInfo> {
    runs.iter()
        .filter(|run| {
            let Some(uid) = run.annotations.get(annotations::UID) else { return false };
            let resource =
                run.annotations.get(annotations::RESOURCE).and_then(|k| k.parse::<agentplane_crds::Key>().ok());
            resource.is_some_and(|key| key.kind == agentplane_crds::Kind::Process && watched(&key.namespace))
                && run.id == node_process_id(uid)
                && !live.contains(uid)
        })
        .collect()
}

/// What a store hands the reconcile besides the resource itself.
pub struct ProcessInput<'a> {
    pub process: &'a Process,
    /// The spec's environment with every reference resolved, or why it could not be.
    pub env: std::result::Result<BTreeMap<String, String>, String>,
    /// Why the latest declared spec was not taken (the store keeps the last good one).
    pub spec_problem: Option<String>,
    /// The node-agent id of the Session `spec.sessionRef` names (`Ok(None)` without
    /// one), or why it has none yet: the process waits for it.
    pub session: std::result::Result<Option<String>, String>,
    /// When the store started the node agent the process runs on together with itself,
    /// if it did: `up` runs its embedded and managed node agents as its children and
    /// they stop when it stops. A run older than that ended with the previous `up` (a
    /// stop the user asked for, or `up` killed): it is started again, as everything
    /// declared is when `up` starts, and is no lost run. None where node agents
    /// outlive the controller (a cluster, an external sandbox).
    pub own_node_agent_since: Option<OffsetDateTime>,
}

pub struct ProcessReconciler {
    pub sandboxes: Arc<Sandboxes>,
    pub backoff: Backoff,
}

/// The launch-relevant part of a spec: a change to any of it starts a new run. Size,
/// desired state, restart policy and stop settings are applied to a running process.
#[derive(Serialize)]
struct Launch<'a> {
    command: &'a str,
    args: &'a [String],
    cwd: &'a Option<String>,
    env: &'a BTreeMap<String, String>,
    tty: bool,
    stdin: bool,
    tag: &'a Option<String>,
    session_ref: &'a Option<String>,
    /// A restart asked for (see `restart`): each new request is a new run. Left out
    /// when there is none, so the digests of runs started before requests existed hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    restarted_at: Option<&'a str>,
}

pub fn spec_hash(process: &Process, env: &BTreeMap<String, String>) -> String {
    let spec = &process.spec;
    let launch = Launch {
        command: &spec.command,
        args: &spec.args,
        cwd: &spec.cwd,
        env,
        tty: spec.tty.is_some(),
        stdin: spec.stdin,
        tag: &spec.tag,
        session_ref: &spec.session_ref,
        restarted_at: crate::restart::requested(&process.metadata),
    };
    let digest = Sha256::digest(serde_json::to_vec(&launch).expect("a launch serializes"));
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn resource_key(process: &Process) -> String {
    agentplane_crds::Key {
        kind: agentplane_crds::Kind::Process,
        namespace: process.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        name: process.metadata.name.clone().unwrap_or_default(),
    }
    .to_string()
}

fn not_found(e: &ClientError) -> bool {
    e.code() == Some(ProblemCode::ProcessNotFound)
}

#[derive(Debug, PartialEq, Eq)]
enum Exit {
    Succeeded,
    Failed,
    Restart,
}

/// What became of a run its node agent has no process for, from the last status alone
/// (the node agent forgets every process when it restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Never started (its start failed, or it waits to), or it ended with `up`'s
    /// previous life (see `ProcessInput::own_node_agent_since`): started now.
    NotStarted,
    /// It exited and the status has its exit (the node agent's record may be gone).
    Exited,
    /// The status says it runs, and its node agent has no such process: it was lost
    /// with its node agent, which restarted while it ran. It has ended; how is unknown.
    Lost,
}

fn missing_run(prev: &ProcessStatus, own_node_agent_since: Option<OffsetDateTime>) -> Missing {
    match prev.phase {
        Some(ProcessPhase::Succeeded | ProcessPhase::Failed | ProcessPhase::BackOff) => Missing::Exited,
        // Exited before its start was answered: judged on the pass after, its record gone since.
        Some(ProcessPhase::Running) if prev.exited_at.is_some() => Missing::Exited,
        Some(ProcessPhase::Running) => {
            let started = prev.started_at.as_ref().map(|t| to_offset(t.0));
            match (started, own_node_agent_since) {
                (Some(started), Some(since)) if started < since => Missing::NotStarted,
                _ => Missing::Lost,
            }
        }
        _ => Missing::NotStarted,
    }
}

fn after_exit(policy: RestartPolicy, exit_code: Option<i32>) -> Exit {
    let succeeded = exit_code == Some(0);
    match (policy, succeeded) {
        (RestartPolicy::Never, true) | (RestartPolicy::OnFailure, true) => Exit::Succeeded,
        (RestartPolicy::Never, false) => Exit::Failed,
        _ => Exit::Restart,
    }
}

const LOST_MESSAGE: &str =
    "its node agent restarted while it ran (killed, or out of memory): it ended there, and how it exited is unknown";

/// A status under construction, with the facts that every path sets.
struct Step<'a> {
    process: &'a Process,
    status: ProcessStatus,
    generation: Option<i64>,
}

impl Step<'_> {
    fn ready(&mut self, status: impl Into<Status>, reason: &str, message: impl Into<String>) {
        conditions::set(&mut self.status.conditions, READY, status, reason, message, self.generation);
    }

    fn done(self, requeue_after: Option<Duration>) -> Reconciled<ProcessStatus> {
        Reconciled { status: self.status, requeue_after }
    }

    fn unreachable(mut self, sandbox: &str, e: &ClientError) -> Reconciled<ProcessStatus> {
        if self.status.phase.is_none() {
            self.status.phase = Some(ProcessPhase::Pending);
        }
        self.ready(Status::Unknown, "NodeAgentUnreachable", format!("sandbox {sandbox:?}: {e}"));
        self.done(Some(RETRY_UNREACHABLE))
    }

    fn running(&mut self, info: &ProcessInfo, hash: &str) {
        let status = &mut self.status;
        status.phase = Some(ProcessPhase::Running);
        status.pid = Some(info.pid);
        status.started_at = Some(conditions::time(info.created_at));
        status.exit_code = None;
        status.signal = None;
        status.exited_at = None;
        status.spec_hash = Some(hash.to_string());
        self.ready(true, "Running", format!("running as pid {}", info.pid));
    }

    /// The run the status records was lost with its node agent: no pid, no exit (it is
    /// unknown), and `Ready` says so until the run is judged.
    fn lost(&mut self) {
        let status = &mut self.status;
        status.pid = None;
        status.exit_code = None;
        status.signal = None;
        status.exited_at = None;
        self.ready(false, NODE_AGENT_LOST, LOST_MESSAGE);
    }

    /// Whether the last run was lost with its node agent (see `lost`): its exit is unknown.
    fn was_lost(&self) -> bool {
        let ready = conditions::get(&self.status.conditions, READY);
        self.status.exit_code.is_none() && ready.is_some_and(|c| c.reason == NODE_AGENT_LOST)
    }

    fn exited(&mut self, info: &ProcessInfo) {
        let status = &mut self.status;
        status.pid = None;
        status.started_at = Some(conditions::time(info.created_at));
        status.exit_code = info.exit_code;
        status.signal = info.signal.as_deref().map(|s| crate::conditions::cut(s.to_string(), 32));
        status.exited_at = info.exited_at.map(conditions::time);
    }

    fn exit_description(&self) -> String {
        if self.was_lost() {
            return LOST_MESSAGE.to_string();
        }
        match (&self.status.signal, self.status.exit_code) {
            (Some(signal), _) => format!("killed by {signal}"),
            (None, Some(code)) => format!("exited with code {code}"),
            (None, None) => "exited".to_string(),
        }
    }
}

impl ProcessReconciler {
    pub fn new(sandboxes: Arc<Sandboxes>) -> Self {
        ProcessReconciler { sandboxes, backoff: Backoff::default() }
    }

    pub async fn reconcile(&self, input: ProcessInput<'_>) -> Reconciled<ProcessStatus> {
        let process = input.process;
        let spec = &process.spec;
        let generation = process.metadata.generation;
        let prev = process.status.clone().unwrap_or_default();
        let mut step = Step { process, status: prev.clone(), generation };
        step.status.observed_generation = generation;
        conditions::set_valid(&mut step.status.conditions, input.spec_problem.as_deref(), generation);
        let Some(uid) = process.metadata.uid.as_deref() else {
            step.status.phase.get_or_insert(ProcessPhase::Pending);
            step.ready(false, "NoUid", "the store gave this resource no uid");
            return step.done(None);
        };
        if let Some(template) = &spec.sandbox_template {
            // Not placed by its store: never run anywhere else instead, it asked for a
            // sandbox of its own.
            step.status.phase.get_or_insert(ProcessPhase::Pending);
            step.ready(false, "SandboxNotClaimed", crate::sandboxes::template_not_placed(template));
            return step.done(None);
        }
        let sandbox = match self.sandboxes.for_resource(&process.metadata, &spec.sandbox) {
            Ok(sandbox) => sandbox,
            Err(e) => {
                step.status.phase.get_or_insert(ProcessPhase::Pending);
                step.ready(false, e.reason(), e.to_string());
                return step.done(Some(RETRY_START));
            }
        };
        let client = sandbox.node.as_ref();
        let id = node_process_id(uid);
        step.status.connect_url = spec.tty.map(|_| client.connect_url(&id).to_string());
        let env = match input.env {
            Ok(env) => env,
            Err(problem) => {
                step.status.phase.get_or_insert(ProcessPhase::Pending);
                step.ready(false, "EnvNotResolved", problem);
                return step.done(Some(RETRY_START));
            }
        };
        let session = match input.session {
            Ok(session) => session,
            Err(problem) => {
                step.status.phase.get_or_insert(ProcessPhase::Pending);
                step.ready(false, "SessionNotFound", problem);
                return step.done(Some(RETRY_SESSION));
            }
        };
        let hash = spec_hash(process, &env);
        // Never reconciled before: nothing to look at but what a create would find (an
        // id taken by a run of a controller that died before writing status is adopted
        // in `start`). Saves a request per new resource.
        if prev.phase.is_none() && spec.desired_state == DesiredState::Running {
            return self.start(step, client, &id, &hash, env, session).await;
        }
        let mut observed = match client.get_process(&id).await {
            Ok(info) => Some(info),
            Err(e) if not_found(&e) => None,
            Err(e) => return step.unreachable(&spec.sandbox, &e),
        };

        if spec.desired_state == DesiredState::Stopped {
            if let Some(info) = &observed {
                let info = if info.status == NodeStatus::Running {
                    match client.delete_process(&id, &self.stop_query(process, false)).await {
                        Ok(info) => info,
                        Err(e) if not_found(&e) => info.clone(),
                        Err(e) => return step.unreachable(&spec.sandbox, &e),
                    }
                } else {
                    info.clone()
                };
                step.exited(&info);
            }
            step.status.phase = Some(ProcessPhase::Stopped);
            step.status.pid = None;
            step.ready(true, "Stopped", "stopped, as desired");
            return step.done(None);
        }

        // A run of another spec (or of an earlier, stopped life) makes way for a new one.
        let fresh = prev.phase == Some(ProcessPhase::Stopped) || prev.spec_hash.as_deref() != Some(hash.as_str());
        let stale = observed.as_ref().is_some_and(|info| {
            info.annotations.get(annotations::SPEC_HASH) != Some(&hash) || (fresh && info.status == NodeStatus::Exited)
        });
        if stale {
            if let Err(e) = client.delete_process(&id, &self.stop_query(process, true)).await
                && !not_found(&e)
            {
                return step.unreachable(&spec.sandbox, &e);
            }
            observed = None;
        }
        if fresh {
            step.status.restarts = 0;
            return self.start(step, client, &id, &hash, env, session).await;
        }

        let exited = match observed {
            Some(info) if info.status == NodeStatus::Running => {
                if let Some(tty) = spec.tty {
                    let want = PtySize { rows: tty.rows, cols: tty.cols };
                    if info.size != Some(want)
                        && let Err(e) = client.resize(&id, want).await
                        && !not_found(&e)
                    {
                        return step.unreachable(&spec.sandbox, &e);
                    }
                }
                step.running(&info, &hash);
                return step.done(None);
            }
            Some(info) => {
                step.exited(&info);
                true
            }
            None => match missing_run(&prev, input.own_node_agent_since) {
                Missing::NotStarted => false,
                Missing::Exited => true,
                Missing::Lost => {
                    step.lost();
                    true
                }
            },
        };
        if !exited {
            return self.start(step, client, &id, &hash, env, session).await;
        }
        let lost = step.was_lost();
        if !lost && step.status.exit_code.is_none() && step.status.signal.is_none() && step.status.exited_at.is_none() {
            // It never started (the start failed): try again now and then unless told never to.
            if spec.restart_policy == RestartPolicy::Never {
                return step.done(None);
            }
            return self.start(step, client, &id, &hash, env, session).await;
        }
        match after_exit(spec.restart_policy, step.status.exit_code) {
            Exit::Succeeded => {
                step.status.phase = Some(ProcessPhase::Succeeded);
                step.ready(false, "Succeeded", "exited with code 0");
                step.done(None)
            }
            Exit::Failed => {
                step.status.phase = Some(ProcessPhase::Failed);
                let message = step.exit_description();
                step.ready(false, if lost { NODE_AGENT_LOST } else { "Failed" }, message);
                step.done(None)
            }
            Exit::Restart => {
                let now = OffsetDateTime::now_utc();
                // A lost run's end is unknown: the back-off counts from when it was
                // found lost, the moment `Ready` turned false for it.
                let lost_at = lost
                    .then(|| conditions::get(&step.status.conditions, READY).map(|c| c.last_transition_time.0))
                    .flatten();
                let exited_at = step.status.exited_at.as_ref().map(|t| t.0).or(lost_at);
                let started_at = step.status.started_at.as_ref().map(|t| t.0);
                let ran_for = match (started_at, exited_at) {
                    (Some(s), Some(e)) => e.duration_since(s).try_into().ok(),
                    _ => None,
                };
                let delay = self.backoff.delay(step.status.restarts, ran_for);
                let due = exited_at.map(|e| to_offset(e) + delay).unwrap_or(now);
                if due > now {
                    step.status.phase = Some(ProcessPhase::BackOff);
                    let message = format!(
                        "{}; restarting in {:.0} s",
                        step.exit_description(),
                        (due - now).as_seconds_f64().ceil()
                    );
                    step.ready(false, if lost { NODE_AGENT_LOST } else { "BackOff" }, message);
                    let wait = (due - now).try_into().unwrap_or(Duration::from_secs(1));
                    return step.done(Some(wait));
                }
                if let Err(e) = client.delete_process(&id, &self.stop_query(process, true)).await
                    && !not_found(&e)
                {
                    return step.unreachable(&spec.sandbox, &e);
                }
                step.status.restarts = step.status.restarts.saturating_add(1);
                self.start(step, client, &id, &hash, env, session).await
            }
        }
    }

    fn stop_query(&self, process: &Process, purge: bool) -> DeleteProcessQuery {
        DeleteProcessQuery {
            signal: process.spec.stop_signal.clone(),
            timeout: process.spec.stop_timeout_seconds.map(f64::from),
            purge,
        }
    }

    async fn start(
        &self,
        mut step: Step<'_>,
        client: &dyn NodeAgent,
        id: &str,
        hash: &str,
        env: BTreeMap<String, String>,
        session: Option<String>,
    ) -> Reconciled<ProcessStatus> {
        let process = step.process;
        let spec = &process.spec;
        let uid = process.metadata.uid.clone().unwrap_or_default();
        let request = CreateProcessRequest {
            id: Some(id.to_string()),
            command: spec.command.clone(),
            args: spec.args.clone(),
            cwd: spec.cwd.clone(),
            env,
            pty: spec.tty.map(|t| PtySize { rows: t.rows, cols: t.cols }),
            stdin: spec.stdin,
            tag: spec.tag.clone(),
            label: Some(resource_key(process)),
            annotations: BTreeMap::from([
                (annotations::RESOURCE.to_string(), resource_key(process)),
                (annotations::UID.to_string(), uid),
                (annotations::SPEC_HASH.to_string(), hash.to_string()),
            ]),
            session_id: session,
        };
        let created = match client.create_process(&request).await {
            Ok(info) => Ok(info),
            // Started by an earlier pass whose answer was lost: adopt it if it runs this
            // spec, else replace it.
            Err(e) if e.code() == Some(ProblemCode::ProcessAlreadyExists) => match client.get_process(id).await {
                Ok(info) if info.annotations.get(annotations::SPEC_HASH).map(String::as_str) == Some(hash) => Ok(info),
                Ok(_) => match client.delete_process(id, &self.stop_query(process, true)).await {
                    Ok(_) => client.create_process(&request).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match created {
            Ok(info) if info.status == NodeStatus::Running => {
                step.running(&info, hash);
                step.done(None)
            }
            Ok(info) => {
                // Exited before we looked: judge it on the next pass, which the exit event brings.
                step.status.spec_hash = Some(hash.to_string());
                step.exited(&info);
                step.status.phase = Some(ProcessPhase::Running);
                step.done(Some(Duration::ZERO))
            }
            Err(e @ ClientError::Problem(_))
                if matches!(
                    e.code(),
                    Some(ProblemCode::SpawnFailed | ProblemCode::InvalidRequest | ProblemCode::LimitExceeded)
                ) =>
            {
                step.status.phase = Some(ProcessPhase::Failed);
                step.status.pid = None;
                step.status.exit_code = None;
                step.status.signal = None;
                step.status.exited_at = None;
                step.status.spec_hash = Some(hash.to_string());
                step.ready(false, "StartFailed", e.to_string());
                let retry = spec.restart_policy != RestartPolicy::Never;
                step.done(retry.then_some(RETRY_START))
            }
            Err(e) => step.unreachable(&spec.sandbox, &e),
        }
    }

    /// Stops and forgets each run on `node` whose Process is gone (see `orphans`),
    /// with the default signal and grace; says how many it stopped.
    pub async fn sweep(
        &self,
        node: &dyn NodeAgent,
        live: impl FnOnce() -> std::collections::HashSet<String>,
        watched: impl Fn(&str) -> bool,
    ) -> std::result::Result<usize, ClientError> {
        let runs = node.list_processes().await?;
        let live = live();
        let mut stopped = 0;
        for run in orphans(&runs, &live, watched) {
            let query = DeleteProcessQuery { purge: true, ..Default::default() };
            match node.delete_process(&run.id, &query).await {
                Ok(_) => stopped += 1,
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(stopped)
    }

    /// Stops and forgets the resource's process. Idempotent; nothing to do is success.
    pub async fn cleanup(&self, process: &Process) -> Result<()> {
        let Some(uid) = process.metadata.uid.as_deref() else { return Ok(()) };
        let sandbox = match self.sandboxes.for_resource(&process.metadata, &process.spec.sandbox) {
            Ok(sandbox) => sandbox,
            // Nothing can run on a sandbox we never knew.
            Err(Error::SandboxNotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        match sandbox.node.delete_process(&node_process_id(uid), &self.stop_query(process, true)).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(source) => Err(Error::NodeAgent { sandbox: process.spec.sandbox.clone(), source }),
        }
    }
}

fn to_offset(ts: k8s_openapi::jiff::Timestamp) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(ts.as_nanosecond()).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_immediate_then_doubles_to_a_cap_and_resets_after_a_long_run() {
        let b = Backoff::default();
        let quick = Some(Duration::from_secs(1));
        let delays: Vec<u64> = (0..8).map(|n| b.delay(n, quick).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(b.delay(5, Some(Duration::from_secs(601))), Duration::ZERO);
        assert_eq!(b.delay(u32::MAX, quick), b.max);
    }

    fn at(text: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(text.parse().unwrap())
    }

    fn status(phase: ProcessPhase, started: &str) -> ProcessStatus {
        ProcessStatus { phase: Some(phase), pid: Some(42), started_at: Some(at(started)), ..Default::default() }
    }

    #[test]
    fn a_run_its_node_agent_no_longer_has_was_lost_unless_it_exited_or_never_started() {
        let running = status(ProcessPhase::Running, "2026-11-25T02:00:00Z");
        assert_eq!(missing_run(&running, None), Missing::Lost);
        // On a node agent that `up` started after this run began: it ended with the
        // previous `up`, and runs again as everything declared does at `up`.
        let up_started = to_offset(at("2026-11-26T00:00:00Z").0);
        assert_eq!(missing_run(&running, Some(up_started)), Missing::NotStarted);
        // A node agent of this `up` that restarted under it (the OOM killer): lost.
        let later = status(ProcessPhase::Running, "2026-11-27T02:00:00Z");
        assert_eq!(missing_run(&later, Some(up_started)), Missing::Lost);
        // Its exit was seen before its record went: judged by that exit.
        let exited = ProcessStatus { exited_at: Some(at("2026-11-25T02:00:01Z")), exit_code: Some(3), ..running };
        assert_eq!(missing_run(&exited, None), Missing::Exited);
        for phase in [ProcessPhase::Succeeded, ProcessPhase::Failed, ProcessPhase::BackOff] {
            assert_eq!(missing_run(&status(phase, "2026-11-25T02:00:00Z"), None), Missing::Exited, "{phase:?}");
        }
        assert_eq!(missing_run(&ProcessStatus::default(), None), Missing::NotStarted);
        let pending = ProcessStatus { phase: Some(ProcessPhase::Pending), ..Default::default() };
        assert_eq!(missing_run(&pending, None), Missing::NotStarted);
    }

    #[test]
    fn a_lost_run_is_judged_as_an_unknown_failure_by_its_restart_policy() {
        // Lost: no exit code, which is no success.
        assert_eq!(after_exit(RestartPolicy::Never, None), Exit::Failed);
        assert_eq!(after_exit(RestartPolicy::OnFailure, None), Exit::Restart);
        assert_eq!(after_exit(RestartPolicy::Always, None), Exit::Restart);
        let yaml = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: sleep}\n";
        let process: Process = serde_yaml_ng::from_str(yaml).unwrap();
        let mut step =
            Step { process: &process, status: status(ProcessPhase::Running, "2026-11-25T02:00:00Z"), generation: None };
        step.ready(true, "Running", "running as pid 42");
        assert!(!step.was_lost());
        step.lost();
        // Later passes know it from the status alone: no exit recorded, and why.
        assert!(step.was_lost());
        assert_eq!(step.status.pid, None);
        assert!(step.exit_description().contains("unknown"), "{}", step.exit_description());
        let ready = conditions::get(&step.status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", NODE_AGENT_LOST));
        // A run that was started again and exited is judged by its own exit.
        step.status.exit_code = Some(1);
        assert!(!step.was_lost());
    }

    #[test]
    fn the_hash_covers_what_starts_a_new_run_and_not_what_a_running_process_takes() {
        let yaml = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: sleep, args: ['1'], tty: {rows: 24, cols: 80}}\n";
        let base: Process = serde_yaml_ng::from_str(yaml).unwrap();
        let env = BTreeMap::new();
        let h = spec_hash(&base, &env);
        let mut resized = base.clone();
        resized.spec.tty = Some(agentplane_crds::TtySize { rows: 50, cols: 100 });
        resized.spec.desired_state = DesiredState::Stopped;
        resized.spec.restart_policy = RestartPolicy::Always;
        assert_eq!(spec_hash(&resized, &env), h);
        let mut other = base.clone();
        other.spec.args = vec!["2".into()];
        assert_ne!(spec_hash(&other, &env), h);
        let mut piped = base.clone();
        piped.spec.tty = None;
        assert_ne!(spec_hash(&piped, &env), h);
        let env2 = BTreeMap::from([("A".to_string(), "1".to_string())]);
        assert_ne!(spec_hash(&base, &env2), h);
    }

    #[test]
    fn each_restart_request_is_a_new_run_and_none_keeps_the_digest_of_before() {
        let yaml = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: sleep, args: ['1']}\n";
        let base: Process = serde_yaml_ng::from_str(yaml).unwrap();
        let env = BTreeMap::new();
        // The digest of this spec before restart requests existed: a controller
        // upgraded under a running process must not restart it.
        assert_eq!(spec_hash(&base, &env), "807a27eac196fe50");
        let asked = |at: &str| {
            let mut p = base.clone();
            p.metadata.annotations = Some(BTreeMap::from([(crate::restart::RESTARTED_AT.to_string(), at.to_string())]));
            spec_hash(&p, &env)
        };
        let first = asked("2026-11-25T02:00:00Z");
        assert_ne!(first, spec_hash(&base, &env));
        assert_eq!(asked("2026-11-25T02:00:00Z"), first, "the same request is honoured once");
        assert_ne!(asked("2026-11-25T02:05:00Z"), first);
        assert_eq!(asked(""), spec_hash(&base, &env), "an empty value asks nothing");
    }
}

#[cfg(test)]
mod scenarios;
