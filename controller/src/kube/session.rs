//! Sessions on a cluster: the reconcile core's Session reconcile under the cleanup
//! finalizer (its env, git credentials and MCP servers' values from Secrets of its
//! namespace), the sandbox it is placed on, its status written back, an Event on each
//! change of phase, and its event stream followed while it is live.

use std::sync::Arc;

use agentplane_crds::{Key, Kind, Session, SessionPhase};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType as KubeEventType;
use kube::runtime::finalizer::Event as Finalizer;
use kube::runtime::reflector::ObjectRef;

use super::error::Result;
use super::{Context, FINALIZER, Metrics, ReconcileError, env, finalize, lend, pools, requeue};
use crate::conditions::{self, READY};
use crate::session::SessionInput;

pub(super) async fn reconcile_session(
    session: Arc<Session>,
    ctx: Arc<Context>,
) -> std::result::Result<Action, ReconcileError> {
    Metrics::count(&ctx.metrics.reconciles, "Session");
    let namespace = session.namespace().unwrap_or_else(|| "default".into());
    let api: Api<Session> = Api::namespaced(ctx.client.clone(), &namespace);
    // The status this controller wrote last, which the cache may not have yet.
    let session = ctx.written.freshest(session);
    let uid = session.metadata.uid.clone();
    let result = finalize::finalized(&api, FINALIZER, true, session, |event| async {
        match event {
            Finalizer::Apply(session) => ctx.apply_session(&api, &session).await,
            Finalizer::Cleanup(session) => {
                ctx.stop_following(&ObjectRef::from_obj(&*session));
                let mut placed = (*session).clone();
                if let Some(sandbox) = session.status.as_ref().and_then(|s| s.sandbox.clone()) {
                    placed.spec.sandbox = sandbox;
                }
                ctx.sessions.cleanup(&placed).await?;
                ctx.take_back(&namespace, &lend::owner("Session", &namespace, &session.name_any()), None).await?;
                if session.spec.sandbox_template.is_some() {
                    ctx.finish_claims(&namespace, session.uid().as_deref()).await?;
                }
                ctx.event(
                    &*session,
                    KubeEventType::Normal,
                    "Ended",
                    "Delete",
                    "ended on its node agent before deletion",
                );
                ctx.written.forget(uid.as_deref());
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
            .map_err(|e| crate::mcp::context(server, "env", e.to_string()))?;
        let headers = env::resolve(client, namespace, &crate::mcp::header_vars(&server.headers), &[])
            .await
            .map_err(|e| crate::mcp::context(server, "headers", e.to_string()))?;
        resolved.push(crate::mcp::resolved(server, env, headers));
    }
    Ok(resolved)
}

impl Context {
    async fn apply_session(self: &Context, api: &Api<Session>, session: &Session) -> Result<Action> {
        let namespace = session.namespace().unwrap_or_default();
        let env = env::resolve(&self.client, &namespace, &session.spec.env, &session.spec.env_from)
            .await
            .map_err(|e| e.to_string());
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
        let owner = lend::owner("Session", &namespace, &session.name_any());
        let env = self
            .with_credentials(
                env,
                &namespace,
                &owner,
                &placed.spec.sandbox,
                &session.spec.credentials,
                &session.spec.env,
            )
            .await?;
        let git_credentials = match session.spec.workspace.as_ref().and_then(|w| w.git.as_ref()?.credentials.as_ref()) {
            Some(source) => env::resolve_git_credentials(&self.client, &namespace, source)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
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
                Some(SessionPhase::Installing) => self.event(
                    session,
                    KubeEventType::Normal,
                    "Installing",
                    "Install",
                    &format!("installing {:?}", session.spec.agent),
                ),
                Some(SessionPhase::AwaitingInput) => self.event(
                    session,
                    KubeEventType::Normal,
                    "AwaitingInput",
                    "Ask",
                    "the agent waits for an answer in spec.replies",
                ),
                Some(SessionPhase::Failed) => {
                    let why = conditions::get(&status.conditions, READY).map(|c| c.message.clone()).unwrap_or_default();
                    self.event(session, KubeEventType::Warning, "Failed", "Run", &why)
                }
                Some(SessionPhase::Ended) => {
                    self.event(session, KubeEventType::Normal, "Ended", "End", "the session ended")
                }
                _ if was == Some(SessionPhase::Installing) => {
                    self.event(session, KubeEventType::Normal, "Installed", "Install", "the agent is installed")
                }
                _ => {}
            }
        }
        let live = crate::follow::session_is_live(status);
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
}
