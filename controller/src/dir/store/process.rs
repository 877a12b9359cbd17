//! Processes in the directory store: the reconcile core's Process reconcile fed from
//! the index, its status written back with where it was placed, its cleanup (and the
//! end of its claim on a sandbox) when no file declares it any more.

use super::*;

impl Inner {
    /// Whether `process` runs on a node agent this `up` runs and stops with itself: the
    /// embedded one (`local`) or a managed sandbox's. An external one lives on its own.
    fn runs_on_own_node_agent(&self, process: &agentplane_crds::Process) -> bool {
        let name = process.placed_sandbox();
        let declared = self.lock().declared_sandbox(name).map(|sandbox| sandbox.spec.is_managed());
        match declared {
            Some(managed) => managed && self.managed.get().is_some(),
            None => name == agentplane_crds::LOCAL_SANDBOX,
        }
    }

    pub(super) async fn reconcile_process(
        self: &Arc<Self>,
        key: &Key,
        process: agentplane_crds::Process,
        problem: Option<String>,
        env: Env,
        session: std::result::Result<Option<String>, String>,
    ) {
        if process.metadata.deletion_timestamp.is_some() {
            let cleaned = self.processes.cleanup(&process).await;
            if cleaned.is_ok() {
                self.finish_claims(process.metadata.uid.clone()).await;
            }
            return self.forget_once_clean(key, process.metadata.uid.clone(), cleaned).await;
        }
        let own_node_agent_since = self.runs_on_own_node_agent(&process).then_some(self.opened_at);
        let input = ProcessInput { process: &process, env, spec_problem: problem, session, own_node_agent_since };
        let reconciled = self.processes.reconcile(input).await;
        let mut status = reconciled.status;
        // Placed elsewhere than its spec says (see `prepare`): said in its status.
        let placed = Some(process.spec.sandbox.clone());
        self.write_status(key, process.metadata.uid.clone(), move |object| match object {
            Object::Process(p)
                if {
                    status.sandbox = placed.filter(|s| *s != p.spec.sandbox);
                    p.status.as_ref() != Some(&status)
                } =>
            {
                p.status = Some(status);
                true
            }
            _ => false,
        })
        .await;
        if let Some(after) = reconciled.requeue_after {
            self.queue.add_after(key.clone(), after);
        }
    }
}
