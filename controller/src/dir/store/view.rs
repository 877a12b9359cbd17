//! The store as a node agent serves it at `/v1/resources` (`agentplane up` hands its
//! embedded node agent the store as its `ResourceSource`): every resource the index
//! holds, as `agentplane get` would show it, and the files that were not taken.
//! Taken from memory; the change signal is the state directory's, which every change
//! the store makes goes through. And the inspector's Wake of a suspended sandbox,
//! which asks the sandbox's waker as a client of its endpoint would.

use agentplane_node_agent::model::{
    FileError as FileErrorView, ResourceCondition, ResourceKind, ResourceList, ResourceView,
};
use agentplane_node_agent::resources::{ResourceSource, Wake, WakeRefused};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;

impl ResourceSource for DirStore {
    fn snapshot(&self) -> ResourceList {
        // Copied under the lock, described after it: status writes wait on that lock.
        let (objects, errors, revision) = {
            let index = self.inner.lock();
            let objects: Vec<Object> = index.resources.values().map(|e| e.object.clone()).collect();
            let errors: Vec<FileError> = index.errors.values().cloned().collect();
            (objects, errors, self.inner.state.revision())
        };
        ResourceList {
            resources: objects.iter().map(view).collect(),
            file_errors: errors.into_iter().map(file_error).collect(),
            revision,
        }
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.state.subscribe()
    }

    fn wake_sandbox(&self, namespace: &str, name: &str) -> Result<Wake, WakeRefused> {
        let key = Key { kind: Kind::Sandbox, namespace: namespace.to_string(), name: name.to_string() };
        let (managed, held, file) = match self.inner.lock().resources.get(&key).map(|e| &e.object) {
            Some(Object::Sandbox(s)) => {
                (s.spec.is_managed(), s.spec.suspend, source_file(&s.metadata).map(str::to_string))
            }
            _ => return Err(WakeRefused::NotFound),
        };
        if !managed {
            return Err(WakeRefused::NotManaged);
        }
        // The spec is the store's word on a hold: the supervisor registers no waker for
        // a held sandbox, so `wake` alone could not tell a hold from an awake sandbox.
        if held {
            return Err(WakeRefused::HeldBySpec { file });
        }
        let sandboxes = &self.inner.sandboxes;
        Ok(if sandboxes.wake(&sandboxes.key(Some(namespace), name)) { Wake::Waking } else { Wake::NotSuspended })
    }
}

fn file_error(error: FileError) -> FileErrorView {
    FileErrorView {
        file: error.file,
        line: error.line.map(|l| l as u64),
        column: error.column.map(|c| c as u64),
        message: error.message,
    }
}

/// One resource as the inspector lists it.
pub fn view(object: &Object) -> ResourceView {
    let meta = object.meta();
    let key = object.key();
    let deleting = meta.deletion_timestamp.is_some();
    let mut times: Vec<&Time> = meta.creation_timestamp.iter().chain(meta.deletion_timestamp.iter()).collect();
    let (kind, phase, conditions, sandbox, spec, status) = match object {
        Object::Process(p) => {
            let status = p.status.as_ref();
            times.extend(status.iter().flat_map(|s| s.started_at.iter().chain(s.exited_at.iter())));
            (
                ResourceKind::Process,
                Some(word(&status.and_then(|s| s.phase))),
                status.map(|s| s.conditions.as_slice()),
                Some(p.placed_sandbox().to_string()),
                serde_json::to_value(&p.spec).ok(),
                status.and_then(|s| serde_json::to_value(s).ok()),
            )
        }
        Object::Session(s) => {
            let status = s.status.as_ref();
            (
                ResourceKind::Session,
                Some(word(&status.and_then(|s| s.phase))),
                status.map(|s| s.conditions.as_slice()),
                Some(s.placed_sandbox().to_string()),
                serde_json::to_value(&s.spec).ok(),
                status.and_then(|s| serde_json::to_value(s).ok()),
            )
        }
        Object::Sandbox(s) => {
            let status = s.status.as_ref();
            times.extend(status.iter().flat_map(|s| s.started_at.iter().chain(s.last_heartbeat.iter())));
            let phase = match &s.spec.endpoint {
                Some(_) => "External".to_string(),
                None => word(&status.and_then(|s| s.phase)),
            };
            (
                ResourceKind::Sandbox,
                Some(phase),
                status.map(|s| s.conditions.as_slice()),
                None,
                serde_json::to_value(&s.spec).ok(),
                status.and_then(|s| serde_json::to_value(s).ok()),
            )
        }
        Object::SandboxTemplate(t) => {
            (ResourceKind::SandboxTemplate, None, None, None, serde_json::to_value(&t.spec).ok(), None)
        }
        Object::SandboxWarmPool(p) => {
            let status = p.status.as_ref();
            (
                ResourceKind::SandboxWarmPool,
                None,
                status.map(|s| s.conditions.as_slice()),
                None,
                serde_json::to_value(&p.spec).ok(),
                status.and_then(|s| serde_json::to_value(s).ok()),
            )
        }
    };
    let conditions = conditions.unwrap_or_default();
    times.extend(conditions.iter().map(|c| &c.last_transition_time));
    let phase = match phase {
        Some(_) if deleting => Some("Terminating".to_string()),
        phase => phase,
    };
    let explaining = conditions::explaining(phase.as_deref(), conditions);
    let message =
        explaining.or_else(|| conditions::get(conditions, READY)).map(|c| c.message.clone()).filter(|m| !m.is_empty());
    let uid = meta.uid.clone();
    ResourceView {
        kind,
        namespace: key.namespace,
        name: key.name,
        phase,
        reason: explaining.map(|c| c.reason.clone()),
        message,
        conditions: conditions.iter().map(condition).collect(),
        file: source_file(meta).map(str::to_string),
        sandbox,
        process_id: uid.as_deref().filter(|_| kind == ResourceKind::Process).map(crate::process::node_process_id),
        session_id: uid.as_deref().filter(|_| kind == ResourceKind::Session).map(crate::session::node_session_id),
        uid,
        updated_at: times.into_iter().map(|t| t.0).max().map(|t| t.to_string()),
        spec,
        status,
    }
}

/// A phase as the YAML spells it (`Running`), `Pending` before there is one.
fn word<T: serde::Serialize>(phase: &Option<T>) -> String {
    match phase.as_ref().map(serde_json::to_value) {
        Some(Ok(serde_json::Value::String(s))) => s,
        _ => "Pending".to_string(),
    }
}

fn condition(c: &Condition) -> ResourceCondition {
    ResourceCondition {
        kind: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_transition_time: c.last_transition_time.0.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::dir::parse::parse_file;

    fn parsed(text: &str) -> Object {
        parse_file("team/web.yaml", text).unwrap().remove(0).object
    }

    #[test]
    fn a_process_is_viewed_with_its_phase_reason_file_and_node_agent_id() {
        let mut object = parsed(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec: {command: sleep, args: ['1']}\n",
        );
        let meta = object.meta_mut();
        meta.uid = Some("u1".into());
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(annotations::SOURCE.into(), "team/web.yaml#1".into());
        let fresh = view(&object);
        assert_eq!(
            (fresh.kind, fresh.name.as_str(), fresh.namespace.as_str(), fresh.phase.as_deref()),
            (ResourceKind::Process, "web", "default", Some("Pending"))
        );
        assert_eq!(fresh.file.as_deref(), Some("team/web.yaml"));
        assert_eq!(fresh.process_id.as_deref(), Some("proc-u1"));
        assert_eq!((fresh.session_id, fresh.sandbox.as_deref()), (None, Some("local")));
        assert_eq!(fresh.spec.unwrap()["command"], "sleep");

        let Object::Process(process) = &mut object else { unreachable!() };
        let mut status =
            agentplane_crds::ProcessStatus { phase: Some(agentplane_crds::ProcessPhase::Failed), ..Default::default() };
        conditions::set(&mut status.conditions, READY, false, "BackOff", "restarting in 10s", None);
        conditions::set(&mut status.conditions, "Valid", true, "Valid", "", None);
        process.status = Some(status);
        let failed = view(&object);
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
        assert_eq!(failed.reason.as_deref(), Some("BackOff"));
        assert_eq!(failed.message.as_deref(), Some("restarting in 10s"));
        assert_eq!(failed.conditions.len(), 2);
        assert_eq!(failed.conditions[0].kind, "Ready");
        assert!(failed.updated_at.is_some());
        assert_eq!(failed.status.unwrap()["phase"], "Failed");

        object.meta_mut().deletion_timestamp = Some(conditions::now());
        assert_eq!(view(&object).phase.as_deref(), Some("Terminating"));
    }

    #[test]
    fn a_session_has_its_session_id_and_a_template_no_phase() {
        let mut session =
            parsed("apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: s}\nspec: {agent: mock}\n");
        session.meta_mut().uid = Some("u2".into());
        let viewed = view(&session);
        assert_eq!((viewed.session_id.as_deref(), viewed.process_id), (Some("sess-u2"), None));
        assert_eq!(viewed.file, None, "no source annotation: made by the store");
        let template = parsed(
            "apiVersion: agentplane.dev/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: t}\nspec: {sandbox: {}}\n",
        );
        let viewed = view(&template);
        assert_eq!((viewed.kind, viewed.phase, viewed.reason), (ResourceKind::SandboxTemplate, None, None));
    }

    /// A store over an empty folder holding `objects`, as if a scan had taken them.
    fn store_of(dir: &std::path::Path, sandboxes: Arc<Sandboxes>, objects: Vec<Object>) -> DirStore {
        let store = DirStore::open(DirStoreConfig::new(dir), sandboxes).unwrap();
        let mut index = store.inner.lock();
        for object in objects {
            index.resources.insert(object.key(), Entry { object, problem: None, missing_since: None, recorded: true });
        }
        drop(index);
        store
    }

    fn sandbox(name: &str, spec: &str) -> Object {
        let mut object = parsed(&format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata: {{name: {name}}}\nspec: {spec}\n"
        ));
        object
            .meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert(annotations::SOURCE.into(), format!("boxes/{name}.yaml#1"));
        object
    }

    #[tokio::test]
    async fn waking_asks_the_waker_of_a_suspended_managed_sandbox_and_refuses_what_it_cannot_wake() {
        let dir = tempfile::tempdir().unwrap();
        let sandboxes = Arc::new(Sandboxes::new());
        let woken = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&woken);
        sandboxes.set_suspended("idle", "idle", Some(Arc::new(move || _ = count.fetch_add(1, Ordering::SeqCst))));
        // The supervisor of a held sandbox registers no waker.
        sandboxes.set_suspended("held", "held by its spec", None);
        sandboxes.set_not_ready("starting", "starting");
        let process = parsed(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec: {command: sleep}\n",
        );
        let store = store_of(
            dir.path(),
            Arc::clone(&sandboxes),
            vec![
                sandbox("idle", "{idleTimeoutSeconds: 2}"),
                sandbox("held", "{suspend: true}"),
                sandbox("starting", "{}"),
                sandbox("remote", "{endpoint: 'http://127.0.0.1:1'}"),
                process,
            ],
        );

        assert_eq!(store.wake_sandbox("default", "idle"), Ok(Wake::Waking));
        assert_eq!(woken.load(Ordering::SeqCst), 1, "the waker was called once");
        assert_eq!(store.wake_sandbox("default", "starting"), Ok(Wake::NotSuspended));
        assert_eq!(
            store.wake_sandbox("default", "held"),
            Err(WakeRefused::HeldBySpec { file: Some("boxes/held.yaml".into()) })
        );
        assert_eq!(store.wake_sandbox("default", "remote"), Err(WakeRefused::NotManaged));
        // Neither a sandbox the store does not hold, one of another namespace, nor
        // another kind of the same name.
        assert_eq!(store.wake_sandbox("default", "nothing"), Err(WakeRefused::NotFound));
        assert_eq!(store.wake_sandbox("team", "idle"), Err(WakeRefused::NotFound));
        assert_eq!(store.wake_sandbox("default", "web"), Err(WakeRefused::NotFound));
        assert_eq!(woken.load(Ordering::SeqCst), 1, "nothing else woke it");
    }
}
