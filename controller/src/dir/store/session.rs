//! Sessions in the directory store: the reconcile core's Session reconcile fed from
//! the index (its git credentials and MCP servers' values read from files beside its
//! YAML), its status written back, its event stream followed while it is live, and its
//! cleanup when no file declares it any more.

use super::*;

impl Inner {
    pub(super) async fn reconcile_session(
        self: &Arc<Self>,
        key: &Key,
        session: agentplane_crds::Session,
        problem: Option<String>,
        env: Env,
    ) {
        if session.metadata.deletion_timestamp.is_some() {
            self.stop_following(key);
            let cleaned = self.sessions.cleanup(&session).await;
            if cleaned.is_ok() {
                self.finish_claims(session.metadata.uid.clone()).await;
            }
            return self.forget_once_clean(key, session.metadata.uid.clone(), cleaned).await;
        }
        let git_credentials = match session.spec.workspace.as_ref().and_then(|w| w.git.as_ref()?.credentials.clone()) {
            // Files are read off the runtime, as env files are.
            Some(source) => {
                let (this, s) = (Arc::clone(self), session.clone());
                tokio::task::spawn_blocking(move || {
                    this.git_credentials(&s, &source).map(Some).map_err(|e| e.to_string())
                })
                .await
                .unwrap_or_else(|e| Err(format!("reading the workspace's credentials: {e}")))
            }
            None => Ok(None),
        };
        let reconciled = self
            .sessions
            .reconcile(SessionInput {
                session: &session,
                env,
                spec_problem: problem,
                git_credentials,
                mcp_servers: if session.spec.mcp_servers.is_empty() {
                    Ok(Vec::new())
                } else {
                    // Files are read off the runtime, as env files are.
                    let (this, s) = (Arc::clone(self), session.clone());
                    tokio::task::spawn_blocking(move || this.mcp_servers(&s))
                        .await
                        .unwrap_or_else(|e| Err(format!("reading the MCP servers' values: {e}")))
                },
            })
            .await;
        let live = crate::follow::session_is_live(&reconciled.status);
        let last = reconciled.status.last_event_sequence;
        if reconciled.status.phase == Some(SessionPhase::Ended) {
            self.finish_claims(session.metadata.uid.clone()).await;
        }
        let mut status = reconciled.status;
        let placed = Some(session.spec.sandbox.clone());
        self.write_status(key, session.metadata.uid.clone(), move |object| match object {
            Object::Session(s)
                if {
                    status.sandbox = placed.filter(|p| *p != s.spec.sandbox);
                    s.status.as_ref() != Some(&status)
                } =>
            {
                s.status = Some(status);
                true
            }
            _ => false,
        })
        .await;
        if live {
            self.follow(key, &session, last);
        } else {
            self.stop_following(key);
        }
        if let Some(after) = reconciled.requeue_after {
            self.queue.add_after(key.clone(), after);
        }
    }

    /// Follows a live session's events, so that what happens in it (a turn ending, a
    /// question asked) is reflected in its status without waiting for a resync.
    fn follow(self: &Arc<Self>, key: &Key, session: &agentplane_crds::Session, last: Option<u64>) {
        let (inner, k) = (Arc::clone(self), key.clone());
        let notify = move || {
            inner.queue.add(k.clone());
            std::future::ready(true)
        };
        self.followers.session(key.clone(), session, &self.sessions, last, notify);
    }

    fn stop_following(&self, key: &Key) {
        self.followers.stop(key);
    }

    /// A Session's MCP servers, their `env` and `headers` values from files beside its
    /// YAML (read like env files).
    fn mcp_servers(
        &self,
        session: &agentplane_crds::Session,
    ) -> std::result::Result<Vec<agentplane_node_agent::model::McpServer>, String> {
        let servers = &session.spec.mcp_servers;
        crate::mcp::check(servers)?;
        let base =
            source_file(&session.metadata).map(|f| self.dir.join(f)).and_then(|f| f.parent().map(Path::to_path_buf));
        let writable = self.writes.snapshot();
        let files = EnvFiles {
            root: &self.root,
            base: base.as_deref().unwrap_or(&self.dir),
            sandbox_writable: Some(&writable),
        };
        servers
            .iter()
            .map(|server| {
                let env = resolve_env(&files, &server.env, &[])
                    .map_err(|e| crate::mcp::context(server, "env", e.to_string()))?;
                let headers = resolve_env(&files, &crate::mcp::header_vars(&server.headers), &[])
                    .map_err(|e| crate::mcp::context(server, "headers", e.to_string()))?;
                Ok(crate::mcp::resolved(server, env, headers))
            })
            .collect()
    }

    /// A Session's git credentials, from files beside its YAML (read like env files).
    fn git_credentials(
        &self,
        session: &agentplane_crds::Session,
        source: &agentplane_crds::GitCredentialsSource,
    ) -> std::result::Result<agentplane_node_agent::model::GitCredentials, crate::dir::env::ResolveError> {
        let base =
            source_file(&session.metadata).map(|f| self.dir.join(f)).and_then(|f| f.parent().map(Path::to_path_buf));
        let writable = self.writes.snapshot();
        let files = EnvFiles {
            root: &self.root,
            base: base.as_deref().unwrap_or(&self.dir),
            sandbox_writable: Some(&writable),
        };
        crate::dir::env::resolve_git_credentials(&files, source)
    }
}
