//! One pass over one resource: a snapshot of it from the index (its claim of a
//! sandbox, where it is placed, a restart request overlaid, its environment resolved),
//! a share of the workers for its sandbox, then the reconcile of its kind (`process`,
//! `session`, `sandboxes`, `claims`).

use super::*;

/// How many workers one sandbox's resources may hold at once: a quarter of the default
/// 32, so a node agent that answers slowly (each call bounded by the client's
/// timeouts) never holds them all. The embedded node agent is not limited.
const WORKERS_PER_SANDBOX: usize = 8;
/// When a resource finds its sandbox's share taken, it is looked at again after this.
const BUSY_SANDBOX_RETRY: Duration = Duration::from_millis(250);
/// How soon a new resource whose record could not be written is tried again.
const RECORD_RETRY: Duration = Duration::from_secs(5);

/// What a reconcile takes from the index.
pub(super) struct Prepared {
    pub(super) object: Object,
    /// Why its latest file was not taken.
    pub(super) problem: Option<String>,
    /// Its resolved environment.
    pub(super) env: Env,
    /// For a Process: the node-agent id of the session it feeds.
    pub(super) session: std::result::Result<Option<String>, String>,
}

impl Inner {
    /// A slot of `sandbox`'s share of the workers, if one is free.
    fn sandbox_slot(&self, sandbox: &str) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let semaphore = {
            let mut slots = self.sandbox_slots.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(
                slots
                    .entry(sandbox.to_string())
                    .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(WORKERS_PER_SANDBOX))),
            )
        };
        semaphore.try_acquire_owned().ok()
    }

    pub(super) async fn reconcile(self: &Arc<Self>, key: &Key) {
        let this = Arc::clone(self);
        let k = key.clone();
        let prepared = tokio::task::spawn_blocking(move || this.prepare(&k)).await.ok().flatten();
        let Some(Prepared { object, problem, env, session }) = prepared else { return };
        // Each sandbox's node agent is given a few workers at most: one that answers
        // slowly (or never, until the client's timeout) holds those, and the other
        // sandboxes' resources still get the rest. Looked at again shortly.
        let sandbox = match &object {
            Object::Process(p) => Some(p.spec.sandbox.as_str()),
            Object::Session(s) => Some(s.spec.sandbox.as_str()),
            _ => None,
        };
        let _slot = match sandbox.filter(|s| *s != agentplane_crds::LOCAL_SANDBOX) {
            Some(sandbox) => match self.sandbox_slot(sandbox) {
                Some(slot) => Some(slot),
                None => {
                    self.queue.add_after(key.clone(), BUSY_SANDBOX_RETRY);
                    return;
                }
            },
            None => None,
        };
        crate::metrics::Metrics::count(&self.config.metrics.reconciles, key.kind.as_str());
        match object {
            Object::Process(process) => self.reconcile_process(key, process, problem, env, session).await,
            Object::SandboxTemplate(template) => self.reconcile_template(key, template).await,
            Object::SandboxWarmPool(pool) => self.reconcile_pool(key, pool, problem).await,
            Object::Sandbox(sandbox) => self.reconcile_sandbox(key, sandbox, problem, env).await,
            Object::Session(session) => self.reconcile_session(key, session, problem, env).await,
        }
    }

    /// A snapshot of the resource, its problem, and (for a Process) its environment.
    fn prepare(&self, key: &Key) -> Option<Prepared> {
        let mut session_sandbox = None;
        let mut claimed = None;
        let (object, problem, session) = {
            let mut index = self.lock();
            let embedded = index.resources.get(key).is_some_and(|e| on_embedded_node_agent(&index, &e.object));
            if !embedded && !self.record_new(&mut index, key) {
                return None;
            }
            let template = match &index.resources.get(key)?.object {
                Object::Process(p) if p.metadata.deletion_timestamp.is_none() => p.spec.sandbox_template.clone(),
                Object::Session(s) if s.metadata.deletion_timestamp.is_none() => s.spec.sandbox_template.clone(),
                _ => None,
            };
            if let Some(template) = template {
                claimed = Some(self.claim(&mut index, key, &template));
            }
            let entry = index.resources.get(key)?;
            // The node-agent id of the Session a Process's sessionRef names.
            let session = match &entry.object {
                Object::Process(p) => {
                    let named = p.spec.session_ref.as_ref().and_then(|name| {
                        let named = Key { kind: Kind::Session, namespace: key.namespace.clone(), name: name.clone() };
                        match &index.resources.get(&named)?.object {
                            Object::Session(s) => Some(s),
                            _ => None,
                        }
                    });
                    let resolved = crate::follow::resolve_session_ref(p, &key.namespace, named);
                    session_sandbox = resolved.sandbox;
                    resolved.id
                }
                _ => Ok(None),
            };
            (entry.object.clone(), entry.problem.clone(), session)
        };
        // A restart request is the store's, not the file's: overlaid (see `restart`).
        let mut object = object;
        // A Process that feeds a Session and names no sandbox of its own runs where the
        // Session runs: the node agent that has that session.
        if let (Object::Process(p), Some(sandbox)) = (&mut object, session_sandbox)
            && p.spec.sandbox == agentplane_crds::LOCAL_SANDBOX
        {
            p.spec.sandbox = sandbox;
        }
        // A resource naming a template runs on the sandbox it claimed; until it has one,
        // it waits saying why (the reconcilers never run it elsewhere).
        let mut problem = problem;
        if let Some(claimed) = claimed {
            let (sandbox, template) = match &mut object {
                Object::Process(p) => (&mut p.spec.sandbox, &mut p.spec.sandbox_template),
                Object::Session(s) => (&mut s.spec.sandbox, &mut s.spec.sandbox_template),
                _ => unreachable!("only Processes and Sessions claim"),
            };
            match claimed {
                Ok(name) => {
                    *sandbox = name;
                    *template = None;
                }
                Err(why) => problem = Some(why.to_string()),
            }
        }
        crate::restart::Requests::new(self.state.root()).overlay(object.meta_mut());
        if object.kind() == Kind::Sandbox {
            crate::restart::Requests::suspends(self.state.root()).overlay(object.meta_mut());
            crate::restart::Requests::deletes(self.state.root()).overlay(object.meta_mut());
        }
        let base = source_file(object.meta()).map(|f| self.dir.join(f)).and_then(|f| f.parent().map(Path::to_path_buf));
        let writable = self.writes.snapshot();
        let files = EnvFiles {
            root: &self.root,
            base: base.as_deref().unwrap_or(&self.dir),
            sandbox_writable: Some(&writable),
        };
        let env = match &object {
            Object::Process(p) => resolve_env(&files, &p.spec.env, &p.spec.env_from),
            Object::Session(s) => resolve_env(&files, &s.spec.env, &s.spec.env_from),
            Object::Sandbox(s) => resolve_env(&files, &s.spec.env, &[]),
            Object::SandboxTemplate(_) | Object::SandboxWarmPool(_) => Ok(BTreeMap::new()),
        }
        .map_err(|e| e.to_string());
        let env = env.and_then(|env| self.lend_credentials(key, &object, &files, env));
        self.watch_env_files(key, &object, &files);
        Some(Prepared { object, problem, env, session })
    }

    /// A Session's or Process's environment with its credentials' placeholders, lent by
    /// the sandbox it runs on; what it was lent anywhere released when it has none (or
    /// is being deleted).
    fn lend_credentials(
        &self,
        key: &Key,
        object: &Object,
        files: &EnvFiles<'_>,
        mut env: BTreeMap<String, String>,
    ) -> std::result::Result<BTreeMap<String, String>, String> {
        let (sandbox, credentials, vars) = match object {
            Object::Process(p) => (&p.spec.sandbox, &p.spec.credentials, &p.spec.env),
            Object::Session(s) => (&s.spec.sandbox, &s.spec.credentials, &s.spec.env),
            _ => return Ok(env),
        };
        let Some(managed) = self.managed.get() else {
            return if credentials.is_empty() {
                Ok(env)
            } else {
                Err("credentials need a managed sandbox, which this controller does not start".into())
            };
        };
        let resolved = if object.meta().deletion_timestamp.is_some() {
            Vec::new()
        } else {
            crate::dir::env::resolve_credentials(files, credentials, vars).map_err(|e| e.to_string())?
        };
        let placeholders = managed.lend(sandbox, &key.to_string(), resolved)?;
        env.extend(placeholders);
        Ok(env)
    }

    /// Records a resource the rescan found new (with its uid) before anything is started
    /// for it, so an `up` killed right after starting it adopts it after a restart. Says
    /// whether it is recorded; one that cannot be is not started, the reason is shown
    /// where the CLI lists file errors, and it is tried again shortly. Not for one that
    /// runs on the embedded node agent (see `on_embedded_node_agent`).
    fn record_new(&self, index: &mut Index, key: &Key) -> bool {
        let Some(entry) = index.resources.get_mut(key) else { return false };
        if entry.recorded {
            return true;
        }
        match self.state.write(&entry.object) {
            Ok(()) => {
                entry.recorded = true;
                if index.unrecorded.remove(key).is_some() {
                    // The next rescan writes the file errors without it.
                    let _ = self.wake.try_send(());
                }
                true
            }
            Err(e) => {
                warn!(resource = %key, error = %e, "cannot record the resource; it is not started");
                let what = "cannot be recorded in the state directory, so it is not started";
                let error = unrecorded(key, entry.source_file().unwrap_or_default(), None, what, &e);
                index.unrecorded.insert(key.clone(), error.clone());
                index.errors.entry(error.file.clone()).or_insert(error);
                if let Err(e) = self.state.write_errors(&index.errors) {
                    warn!(error = %e, "cannot record the file errors");
                }
                self.queue.add_after(key.clone(), RECORD_RETRY);
                false
            }
        }
    }

    /// Remembers which files `object` reads, so that their events bring it in.
    fn watch_env_files(&self, key: &Key, object: &Object, files: &EnvFiles<'_>) {
        let references: Vec<&str> = match object {
            _ if object.meta().deletion_timestamp.is_some() => Vec::new(),
            Object::Process(p) => {
                referenced_files(&p.spec.env, &p.spec.env_from).chain(credential_files(&p.spec.credentials)).collect()
            }
            Object::Session(s) => referenced_files(&s.spec.env, &s.spec.env_from)
                .chain(crate::mcp::referenced_files(&s.spec.mcp_servers))
                .chain(credential_files(&s.spec.credentials))
                .collect(),
            Object::Sandbox(s) => {
                referenced_files(&s.spec.env, &[]).chain(credential_files(&s.spec.credentials)).collect()
            }
            Object::SandboxTemplate(_) | Object::SandboxWarmPool(_) => Vec::new(),
        };
        // Files outside the folder are refused, and the state directory is not watched.
        let paths = references
            .into_iter()
            .flat_map(|r| files.watched_paths(r))
            .filter(|p| p.starts_with(&self.root) && !p.starts_with(&self.real_state))
            .collect();
        if self.env_watch.lock().unwrap_or_else(|e| e.into_inner()).set(key, paths) {
            // A folder to watch that the walk does not: the rescan adds it.
            let _ = self.wake.try_send(());
        }
    }
}

/// Whether `object` is a Process or Session that runs on the embedded node agent (the
/// `local` sandbox, in `up`'s own process): its run cannot outlive `up`, so there is
/// nothing a restarted `up` could adopt, and a record written before its start would
/// buy nothing. Its first record is written with its first status, which saves a
/// write (and an inode) per new resource. One that names a template, feeds a Session
/// (which may run elsewhere) or is being deleted is not.
fn on_embedded_node_agent(index: &Index, object: &Object) -> bool {
    let sandbox = match object {
        _ if object.meta().deletion_timestamp.is_some() => return false,
        Object::Process(p) if p.spec.sandbox_template.is_none() && p.spec.session_ref.is_none() => &p.spec.sandbox,
        Object::Session(s) if s.spec.sandbox_template.is_none() => &s.spec.sandbox,
        _ => return false,
    };
    // A declared Sandbox of that name is not the embedded one.
    sandbox == agentplane_crds::LOCAL_SANDBOX && index.declared_sandbox(sandbox).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_agent::fake::FakeNodeAgent;

    const WEB: &str = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec: {command: sleep, args: ['1000']}\n";

    fn store(dir: &Path) -> (DirStore, Arc<FakeNodeAgent>) {
        let fake = FakeNodeAgent::new();
        let sandboxes = Arc::new(Sandboxes::new());
        sandboxes.insert_node(agentplane_crds::LOCAL_SANDBOX, Arc::clone(&fake) as Arc<dyn NodeAgent>, None);
        (DirStore::open(DirStoreConfig::new(dir), sandboxes).unwrap(), fake)
    }

    /// The one resource a rescan of `web.yaml` finds.
    async fn scan_web(inner: &Arc<Inner>) -> Key {
        let (changed, _) = Arc::clone(inner).scan().await;
        assert_eq!(changed.len(), 1, "{changed:?}");
        changed.into_iter().next().unwrap()
    }

    #[tokio::test]
    async fn a_new_resource_is_recorded_by_the_worker_that_starts_it_not_by_the_rescan() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("web.yaml"), WEB).unwrap();
        let (store, fake) = store(tmp.path());
        let inner = &store.inner;
        let key = scan_web(inner).await;
        assert!(inner.state.read(&key).is_none(), "the rescan wrote a record");
        assert_eq!(fake.count("create_process"), 0);

        inner.reconcile(&key).await;
        assert_eq!(fake.count("create_process"), 1);
        let record = inner.state.read(&key).expect("a record").unwrap();
        let held = inner.lock().resources[&key].object.clone();
        assert_eq!(record.meta().uid, held.meta().uid, "the record keeps the uid it was started with");
        let Object::Process(process) = record else { panic!("a Process") };
        assert_eq!(process.status.and_then(|s| s.phase), Some(agentplane_crds::ProcessPhase::Running));
    }

    #[tokio::test]
    async fn a_new_resource_that_cannot_be_recorded_is_not_started_and_says_why_until_it_can_be() {
        let tmp = tempfile::tempdir().unwrap();
        // On a node agent of its own, whose runs outlive `up`: only a record of its uid
        // lets a restarted `up` adopt the run rather than start it twice.
        fs::write(tmp.path().join("web.yaml"), WEB.replace("args: ['1000']", "args: ['1000'], sandbox: remote"))
            .unwrap();
        // A file where the folder of Process records must be: no record can be written.
        let blocker = tmp.path().join(".agentplane/resources/processes");
        fs::create_dir_all(blocker.parent().unwrap()).unwrap();
        fs::write(&blocker, "").unwrap();
        let (store, fake) = store(tmp.path());
        store.inner.sandboxes.insert_node("remote", Arc::clone(&fake) as Arc<dyn NodeAgent>, None);
        let inner = &store.inner;
        let key = scan_web(inner).await;

        inner.reconcile(&key).await;
        assert_eq!(fake.count("create_process"), 0, "started without a record: a restart would start it again");
        let errors = inner.state.read_errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0]
                .message
                .starts_with("Process/default/web: cannot be recorded in the state directory, so it is not started"),
            "{errors:?}"
        );

        fs::remove_file(&blocker).unwrap();
        inner.reconcile(&key).await;
        assert_eq!(fake.count("create_process"), 1);
        assert!(inner.state.read(&key).is_some());
        assert!(inner.lock().unrecorded.is_empty());
    }

    #[tokio::test]
    async fn on_the_embedded_node_agent_a_new_resource_is_first_recorded_with_its_status() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("web.yaml"), WEB).unwrap();
        let blocker = tmp.path().join(".agentplane/resources/processes");
        fs::create_dir_all(blocker.parent().unwrap()).unwrap();
        fs::write(&blocker, "").unwrap();
        let (store, fake) = store(tmp.path());
        let inner = &store.inner;
        let key = scan_web(inner).await;

        // Its run ends with `up`: started without a record first, and the status that
        // cannot be written is said.
        inner.reconcile(&key).await;
        assert_eq!(fake.count("create_process"), 1);
        let errors = inner.state.read_errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains("its status cannot be written to the state directory"), "{errors:?}");

        // Once it can be, the next pass (queued by the failure) writes its record, uid
        // and status together, though the status did not change.
        fs::remove_file(&blocker).unwrap();
        fake.take_calls();
        inner.reconcile(&key).await;
        assert_eq!(fake.count("create_process"), 0, "adopted, not started again");
        let Some(Ok(Object::Process(record))) = inner.state.read(&key) else { panic!("a record") };
        assert_eq!(record.metadata.uid, inner.lock().resources[&key].object.meta().uid);
        assert_eq!(record.status.and_then(|s| s.phase), Some(agentplane_crds::ProcessPhase::Running));
        assert!(inner.lock().unrecorded.is_empty());
    }
}
