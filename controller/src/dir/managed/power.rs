//! Suspending a managed sandbox and waking it (`spec.suspend`, `idleTimeoutSeconds`,
//! `agentplane suspend`): what its spec says ([`Power`]), the supervisor's sleep and
//! its watch for idleness, and what a client of its endpoint waits for ([`Waking`]).

use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::SandboxPhase;
use agentplane_node_agent::client::Client;
use tokio::sync::watch;

use super::{Observed, READY_TIMEOUT, Supervisor};

/// How often an awake sandbox with `idleTimeoutSeconds` is asked how long it has been
/// idle (a request on the loopback).
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Whether the sandbox should be awake, from its spec: changing it never restarts an
/// awake node agent, unlike [`Desired`](super::Desired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Power {
    /// `spec.suspend`: suspended until it is false again.
    pub suspend: bool,
    /// `spec.idleTimeoutSeconds`: suspended after this long idle, woken by work.
    pub idle_timeout: Option<Duration>,
    /// `agentplane suspend`: suspended now as if idle, when asked after the node agent's
    /// current start (an earlier request was honoured, or overtaken by a wake).
    pub asked: Option<k8s_openapi::jiff::Timestamp>,
}

/// Why a sandbox is suspended (the `Ready` condition's reason).
const SUSPENDED_IDLE: &str = "Idle";
const SUSPENDED_REQUESTED: &str = "Requested";

/// Why a sandbox goes to sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// Idle for its `idleTimeoutSeconds`: woken by work.
    Idle,
    /// `agentplane suspend` asked: woken by work, as an idle one.
    Asked,
    /// `spec.suspend: true`: woken only when the spec lets go.
    Held,
}

impl Supervisor {
    /// What each connection to the sandbox's endpoint waits for.
    pub(super) fn waking(&self) -> Waking {
        Waking { observed: self.observed.subscribe(), wake: Arc::clone(&self.wake), name: self.name.clone() }
    }

    /// Suspended for `reason`, its node agent stopped, until it should wake: its spec
    /// lets go of it (one held by its spec wakes only that way), or something wakes one
    /// suspended for being idle or as asked. False when the sandbox is stopping instead.
    pub(super) async fn sleep(&mut self, why: Why) -> bool {
        use futures_util::FutureExt;
        // A wake that came while it was awake is not one for this sleep.
        let _ = self.wake.notified().now_or_never();
        let since = crate::conditions::now();
        // Held by the spec, it wakes when the spec lets go, even if that happened before
        // this first look.
        let mut was_held = why == Why::Held;
        loop {
            let held = self.power.borrow_and_update().suspend;
            if was_held && !held {
                return true;
            }
            was_held = held;
            let wake = Arc::clone(&self.wake);
            let waker: crate::sandboxes::Waker = Arc::new(move || wake.notify_one());
            let (reason, message, waker) = match (held, why) {
                (true, _) => (
                    SUSPENDED_REQUESTED,
                    "suspended, as spec.suspend asks: set it to false to wake it".to_string(),
                    None,
                ),
                (false, Why::Idle) => (
                    SUSPENDED_IDLE,
                    "suspended for being idle: a new message or reply, or any client of its endpoint, wakes it"
                        .to_string(),
                    Some(waker),
                ),
                (false, _) => (
                    SUSPENDED_REQUESTED,
                    "suspended, as `agentplane suspend` asked: a new message or reply, any client of its endpoint, or \
                     `agentplane resume` wakes it"
                        .to_string(),
                    Some(waker),
                ),
            };
            self.sandboxes.set_suspended(&self.name, message.clone(), waker);
            self.update(|o| {
                o.phase = SandboxPhase::Suspended;
                o.reason = reason;
                o.message = message;
                o.pid = None;
                o.held = held;
                o.suspended_at.get_or_insert_with(|| since.clone());
            });
            tokio::select! {
                _ = self.stop.cancelled() => return false,
                changed = self.power.changed() => if changed.is_err() {
                    return false;
                },
                _ = self.wake.notified(), if !held => return true,
            }
        }
    }

    /// Until the awake sandbox should be suspended: its spec says so, `agentplane
    /// suspend` asked since its node agent `started`, or the node agent has been idle for
    /// `idleTimeoutSeconds`. Answers why.
    pub(super) async fn until_suspended(&self, client: &Client, started: k8s_openapi::jiff::Timestamp) -> Why {
        let mut power = self.power.clone();
        loop {
            let Power { suspend, idle_timeout, asked } = *power.borrow_and_update();
            if suspend {
                return Why::Held;
            }
            if asked.is_some_and(|at| at > started) {
                return Why::Asked;
            }
            let idle = async {
                let Some(limit) = idle_timeout else { return std::future::pending().await };
                loop {
                    tokio::time::sleep(IDLE_POLL).await;
                    if let Ok(report) = client.activity().await
                        && Duration::from_secs(report.idle_seconds) >= limit
                    {
                        return;
                    }
                }
            };
            tokio::select! {
                changed = power.changed() => if changed.is_err() {
                    return std::future::pending().await;
                },
                () = idle => return Why::Idle,
            }
        }
    }
}

/// What a connection to a sandbox's endpoint waits for: the sandbox serving, woken
/// first if it is suspended for being idle.
#[derive(Clone)]
pub(super) struct Waking {
    observed: watch::Receiver<Observed>,
    wake: Arc<tokio::sync::Notify>,
    name: String,
}

impl Waking {
    pub(super) async fn awake(mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            {
                let observed = self.observed.borrow_and_update();
                match observed.phase {
                    SandboxPhase::Ready => return Ok(()),
                    SandboxPhase::Suspended if observed.held => {
                        return Err(format!(
                            "sandbox {} is suspended: its spec.suspend is true; set it to false to wake it",
                            self.name
                        ));
                    }
                    SandboxPhase::Suspended => self.wake.notify_one(),
                    SandboxPhase::Failed | SandboxPhase::Pending => {
                        return Err(format!("sandbox {} is not running: {}", self.name, observed.message));
                    }
                    SandboxPhase::Starting | SandboxPhase::Restarting => {}
                }
            }
            match tokio::time::timeout_at(deadline, self.observed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(format!("sandbox {} is stopping", self.name)),
                Err(_) => return Err(format!("sandbox {} did not serve within {READY_TIMEOUT:?}", self.name)),
            }
        }
    }
}
