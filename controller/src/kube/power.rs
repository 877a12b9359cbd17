//! Suspending a managed Sandbox on a cluster and waking it (`spec.suspend`,
//! `idleTimeoutSeconds`): suspended, its Pod is deleted and everything else it has
//! is kept (its data claim, where its sessions and its agents' HOME are, its token
//! and its NetworkPolicy); woken, a Pod is made again from the same spec.
//!
//! - `spec.suspend: true` holds it suspended (reason `Requested`) until the spec says
//!   `false`; nothing else wakes it.
//! - With `idleTimeoutSeconds`, a ready sandbox whose node agent reports itself idle
//!   for that long (`GET /v1/activity`: no turn, no message or reply waiting, no
//!   client following, no output) is suspended (reason `Idle`). Work for it wakes it:
//!   the Session reconcile asks through `Sandboxes::wake`, which here marks it woken
//!   and reconciles it at once. The status says it is suspended, so a restarted
//!   controller keeps it so until work comes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentplane_crds::{Sandbox, SandboxPhase, SandboxStatus};
use agentplane_node_agent::client::Client;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tracing::info;

use super::Context;
use super::error::Result;
use crate::conditions::{self, READY};

/// Why a sandbox is suspended (its `Ready` reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// `spec.suspend: true`: only the spec wakes it.
    Requested,
    /// Idle for its `idleTimeoutSeconds`: work for it wakes it.
    Idle,
}

impl Why {
    pub(super) fn reason(self) -> &'static str {
        match self {
            Why::Requested => "Requested",
            Why::Idle => "Idle",
        }
    }
}

/// What this controller knows of the sandboxes it suspended for being idle, by key:
/// those asleep (its own status write may not be in its cache yet when the deleted
/// Pod's event comes back), and those asked to wake since.
#[derive(Debug, Default)]
pub(super) struct Sleepers {
    asleep: HashSet<String>,
    woken: HashSet<String>,
}

pub(super) type SharedSleepers = Arc<Mutex<Sleepers>>;

/// How often a ready sandbox with `idleTimeoutSeconds` is asked how long it has been
/// idle: half its timeout, at least every second and at most every ten.
pub(super) fn idle_poll(timeout_seconds: u32) -> Duration {
    Duration::from_millis(u64::from(timeout_seconds) * 500).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Whether a sandbox stays (or goes) suspended before its Pod is looked at: held by
/// its spec, or suspended for being idle (as its status says, or as this controller
/// did: `asleep`) and not `woken` since.
pub(super) fn held_asleep(sandbox: &Sandbox, before: &SandboxStatus, asleep: bool, woken: bool) -> Option<Why> {
    if sandbox.spec.suspend {
        return Some(Why::Requested);
    }
    let idle = asleep || is_suspended(before, Why::Idle);
    (idle && sandbox.spec.idle_timeout_seconds.is_some() && !woken).then_some(Why::Idle)
}

/// Whether the status says the sandbox is suspended for `why`.
pub(super) fn is_suspended(status: &SandboxStatus, why: Why) -> bool {
    status.phase == Some(SandboxPhase::Suspended)
        && conditions::get(&status.conditions, READY).is_some_and(|c| c.reason == why.reason())
}

impl Context {
    fn sleepers(&self) -> std::sync::MutexGuard<'_, Sleepers> {
        self.sleepers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether sandbox `key` stays suspended now (see [`held_asleep`]): `Err(woken)`
    /// when it is awake, `woken` true when it wakes now from a sleep of this
    /// controller's. A wake asked for is honoured here, and forgotten with the sleep
    /// it ended.
    pub(super) fn stays_asleep(
        &self,
        sandbox: &Sandbox,
        before: &SandboxStatus,
        key: &str,
    ) -> std::result::Result<Why, bool> {
        let mut sleepers = self.sleepers();
        let (asleep, woken) = (sleepers.asleep.contains(key), sleepers.woken.contains(key));
        match held_asleep(sandbox, before, asleep, woken) {
            Some(why) => Ok(why),
            None => {
                sleepers.asleep.remove(key);
                sleepers.woken.remove(key);
                Err(asleep || woken)
            }
        }
    }

    /// What wakes sandbox `sandbox` (key `key`), suspended for being idle: marks it
    /// woken and reconciles it now.
    pub(super) fn waker(&self, sandbox: &Sandbox, key: &str) -> crate::sandboxes::Waker {
        let (sleepers, key) = (Arc::clone(&self.sleepers), key.to_string());
        let (trigger, object) = (self.sandbox_trigger.clone(), ObjectRef::from_obj(sandbox));
        Arc::new(move || {
            sleepers.lock().unwrap_or_else(|e| e.into_inner()).woken.insert(key.clone());
            // Full: a reconcile of it is queued already, and it sees the mark.
            let _ = trigger.try_send(object.clone());
        })
    }

    /// Whether a ready sandbox has been idle for its `idleTimeoutSeconds`.
    pub(super) async fn idle_enough(&self, sandbox: &Sandbox, client: &Client) -> bool {
        let Some(timeout) = sandbox.spec.idle_timeout_seconds else { return false };
        match client.activity().await {
            Ok(report) => report.busy.is_empty() && report.idle_seconds >= u64::from(timeout),
            // Not answering is not idleness.
            Err(_) => false,
        }
    }

    /// Suspends the sandbox for `why`: its Pod deleted (what else it has is kept).
    /// Answers what the status says of it.
    pub(super) async fn suspend(
        &self,
        sandbox: &Sandbox,
        pods: &Api<Pod>,
        uid: &str,
        why: Why,
        before: &SandboxStatus,
        status: &mut SandboxStatus,
    ) -> Result<super::managed::Observed> {
        let name = kube::ResourceExt::name_any(sandbox);
        if why == Why::Idle {
            let key = self.sandboxes.key(kube::ResourceExt::namespace(sandbox).as_deref(), &name);
            let mut sleepers = self.sleepers();
            sleepers.asleep.insert(key.clone());
            sleepers.woken.remove(&key);
        }
        if let Some(pod) = pods.get_opt(&name).await?.filter(|p| super::managed::controlled_by(p, uid)) {
            info!(sandbox = %name, reason = why.reason(), "suspending the sandbox: deleting its Pod");
            super::managed::delete_owned(pods, &pod).await?;
        }
        (status.endpoint, status.started_at, status.node_agent_version, status.runs_on) = (None, None, None, None);
        let since = before.suspended_at.clone().filter(|_| before.phase == Some(SandboxPhase::Suspended));
        status.suspended_at = Some(since.unwrap_or_else(conditions::now));
        let message = match why {
            Why::Requested => "suspended by spec.suspend: true: its Pod is deleted, its data claim and token kept; \
                               spec.suspend: false wakes it"
                .to_string(),
            Why::Idle => format!(
                "suspended after {}s idle: its Pod is deleted, its data claim and token kept; a message or reply for \
                 a session on it, or spec.suspend: false, wakes it",
                sandbox.spec.idle_timeout_seconds.unwrap_or_default()
            ),
        };
        Ok(super::managed::Observed::new(SandboxPhase::Suspended, why.reason(), message, Duration::from_secs(60)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentplane_crds::SandboxSpec;

    fn sandbox(suspend: bool, idle: Option<u32>) -> Sandbox {
        Sandbox::new("box", SandboxSpec { suspend, idle_timeout_seconds: idle, ..Default::default() })
    }

    fn suspended(reason: &str) -> SandboxStatus {
        let mut status = SandboxStatus { phase: Some(SandboxPhase::Suspended), ..Default::default() };
        conditions::set(&mut status.conditions, READY, false, reason, "", None);
        status
    }

    #[test]
    fn the_spec_holds_it_and_idleness_lasts_until_work_wakes_it() {
        let awake = SandboxStatus { phase: Some(SandboxPhase::Ready), ..Default::default() };
        assert_eq!(held_asleep(&sandbox(true, None), &awake, false, false), Some(Why::Requested));
        assert_eq!(held_asleep(&sandbox(true, Some(3)), &suspended("Idle"), false, true), Some(Why::Requested), "held");
        assert_eq!(held_asleep(&sandbox(false, Some(3)), &suspended("Idle"), false, false), Some(Why::Idle));
        assert_eq!(held_asleep(&sandbox(false, Some(3)), &suspended("Idle"), false, true), None, "woken");
        assert_eq!(held_asleep(&sandbox(false, Some(3)), &suspended("Requested"), false, false), None, "let go");
        assert_eq!(held_asleep(&sandbox(false, None), &suspended("Idle"), false, false), None, "no timeout any more");
        assert_eq!(held_asleep(&sandbox(false, Some(3)), &awake, false, false), None);
        // Suspended here, its status not read back yet: still asleep until woken.
        assert_eq!(held_asleep(&sandbox(false, Some(3)), &awake, true, false), Some(Why::Idle));
        assert_eq!(held_asleep(&sandbox(false, Some(3)), &awake, true, true), None);
    }

    #[test]
    fn idleness_is_asked_often_enough_for_the_timeout_and_not_more() {
        assert_eq!(idle_poll(1), Duration::from_secs(1));
        assert_eq!(idle_poll(6), Duration::from_secs(3));
        assert_eq!(idle_poll(600), Duration::from_secs(10));
    }
}
