//! Sandboxes in the directory store: an external one is asked for its health, a
//! managed one is started and watched by `dir::managed`, its host paths resolved and
//! confined first; and what is placed on a sandbox is looked at again when it changes.

use super::*;

/// The condition on a Sandbox that names its workspace.
const WORKSPACE: &str = "Workspace";

/// Why a managed Sandbox's spec cannot run in a folder as written: said in its `Ready`
/// condition (`InvalidSpec`), while the last good spec keeps running.
#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("network: none and allowlist need isolation: bubblewrap (a network namespace)")]
    NetworkNeedsIsolation,
    #[error("allow is only used with network: allowlist")]
    AllowWithoutAllowlist,
    #[error(
        "credentials need isolation: bubblewrap and network: allowlist: the proxy outside swaps them in, and \
         anything else would leave the values where the sandbox's programs can read them"
    )]
    CredentialsNeedProxy,
    #[error(transparent)]
    Credentials(#[from] crate::dir::env::ResolveError),
    #[error(transparent)]
    Allowlist(#[from] agentplane_egress::Error),
    #[error(transparent)]
    Limits(#[from] crate::dir::managed::cgroup::LimitError),
    #[error("podTemplate is for a cluster; in a folder the sandbox is a bubblewrap process")]
    PodTemplate,
    #[error("binds.path {0:?}: write an absolute path")]
    RelativeBindPath(String),
    #[error("{what} {written:?} ({}): {source}", path.display())]
    Unresolved {
        what: &'static str,
        written: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{what} {written:?} leads to {}, which holds or is inside the state directory {}: never bound into a sandbox",
        real.display(),
        state.display()
    )]
    IntoState { what: &'static str, written: String, real: PathBuf, state: PathBuf },
    #[error(
        "{what} is the watched folder {} or holds it: a sandbox writes only a folder of its own (such as \
         ./{name}-workspace), and what it can write is never read as resources",
        root.display()
    )]
    HoldsWatchedFolder { what: String, root: PathBuf, name: String },
    #[error("{what} holds this Sandbox's own file {file}: what a sandbox can write is never read as resources")]
    HoldsOwnFile { what: String, file: String },
    #[error(
        "workspace {written:?} leads to {}, outside the watched folder {}: name it in binds to grant it",
        real.display(),
        root.display()
    )]
    WorkspaceOutside { written: String, real: PathBuf, root: PathBuf },
}

/// Resolves a host path a Sandbox names (relative to its file's folder), refusing one
/// that leads into the state directory, where every sandbox's token is kept.
fn sandbox_host_path(
    base: &Path,
    state: &Path,
    written: &str,
    what: &'static str,
) -> std::result::Result<PathBuf, SpecError> {
    let path = base.join(written);
    let real = match fs::canonicalize(&path) {
        Ok(real) => real,
        Err(source) => return Err(SpecError::Unresolved { what, written: written.to_string(), path, source }),
    };
    if real.starts_with(state) || state.starts_with(&real) {
        return Err(SpecError::IntoState { what, written: written.to_string(), real, state: state.to_path_buf() });
    }
    Ok(real)
}

/// The folders a managed Sandbox's host paths are resolved against.
struct Folders {
    /// The watched folder, as given.
    dir: PathBuf,
    /// The watched folder, canonical.
    root: PathBuf,
    /// The state directory, canonical.
    state: PathBuf,
}

/// A folder a sandbox may write must be one of its own: not the watched folder, not one
/// holding it, not the one holding the Sandbox's own file. What a sandbox can write is
/// never read as resources (see `sandbox_writes`), so any of those would hide the
/// user's resources, or the Sandbox itself.
fn own_folder(
    folders: &Folders,
    sandbox: &agentplane_crds::Sandbox,
    real: &Path,
    what: &str,
) -> std::result::Result<(), SpecError> {
    if folders.root.starts_with(real) {
        return Err(SpecError::HoldsWatchedFolder {
            what: what.to_string(),
            root: folders.root.clone(),
            name: sandbox.metadata.name.as_deref().unwrap_or("sandbox").to_string(),
        });
    }
    if let Some(file) = source_file(&sandbox.metadata)
        && folders.root.join(file).starts_with(real)
    {
        return Err(SpecError::HoldsOwnFile { what: what.to_string(), file: file.to_string() });
    }
    Ok(())
}

/// What a managed Sandbox's spec asks for, its host paths resolved and confined:
/// the workspace inside the watched folder or a path the spec binds; nothing that
/// leads into the state directory.
fn desired_of(
    folders: &Folders,
    sandbox: &agentplane_crds::Sandbox,
    env: BTreeMap<String, String>,
    writable: &crate::dir::sandbox_writes::Writable,
) -> std::result::Result<crate::dir::managed::Desired, SpecError> {
    use agentplane_crds::{Isolation, NetworkMode};
    let spec = &sandbox.spec;
    let isolation = spec.isolation.unwrap_or(Isolation::Bubblewrap);
    if isolation == Isolation::None && spec.network != NetworkMode::Host {
        return Err(SpecError::NetworkNeedsIsolation);
    }
    if !spec.allow.is_empty() && spec.network != NetworkMode::Allowlist {
        return Err(SpecError::AllowWithoutAllowlist);
    }
    if spec.network == NetworkMode::Allowlist {
        agentplane_egress::Allowlist::parse(&spec.allow)?;
    }
    crate::dir::managed::cgroup::Wanted::from_spec(spec.limits.as_ref())?;
    if spec.pod_template.is_some() {
        return Err(SpecError::PodTemplate);
    }
    if !spec.credentials.is_empty() && (isolation != Isolation::Bubblewrap || spec.network != NetworkMode::Allowlist) {
        return Err(SpecError::CredentialsNeedProxy);
    }
    let base = source_file(&sandbox.metadata)
        .map(|f| folders.dir.join(f))
        .and_then(|f| f.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| folders.dir.clone());
    let files = crate::dir::env::EnvFiles { root: &folders.root, base: &base, sandbox_writable: Some(writable) };
    let credentials = crate::dir::env::resolve_credentials(&files, &spec.credentials, &spec.env)?;
    for credential in &credentials {
        agentplane_egress::Allowlist::parse(&credential.hosts)?;
    }
    let mut binds = Vec::new();
    for bind in &spec.binds {
        let host = sandbox_host_path(&base, &folders.state, &bind.host_path, "binds.hostPath")?;
        let inside = match &bind.path {
            Some(path) if Path::new(path).is_absolute() => PathBuf::from(path),
            Some(path) => return Err(SpecError::RelativeBindPath(path.clone())),
            None => host.clone(),
        };
        if bind.writable {
            own_folder(folders, sandbox, &host, &format!("binds.hostPath {:?}", bind.host_path))?;
        }
        binds.push((host, inside, bind.writable));
    }
    let workspace = match &spec.workspace {
        Some(written) => {
            let real = sandbox_host_path(&base, &folders.state, written, "workspace")?;
            if !real.starts_with(&folders.root) && !binds.iter().any(|(host, _, _)| real.starts_with(host)) {
                return Err(SpecError::WorkspaceOutside { written: written.clone(), real, root: folders.root.clone() });
            }
            own_folder(folders, sandbox, &real, &format!("workspace {written:?}"))?;
            Some(real)
        }
        None => None,
    };
    Ok(crate::dir::managed::Desired {
        isolation,
        network: spec.network,
        allow: spec.allow.clone(),
        limits: spec.limits.clone(),
        workspace,
        binds,
        env,
        credentials,
    })
}

impl Inner {
    /// A Sandbox: deleted once its claimer's TTL is over, removed (a managed one stopped)
    /// when deleted, looked at and its status written otherwise.
    pub(super) async fn reconcile_sandbox(
        self: &Arc<Self>,
        key: &Key,
        mut sandbox: agentplane_crds::Sandbox,
        problem: Option<String>,
        env: Env,
    ) {
        // A claim that finished is kept for its TTL, then deleted like any other.
        if sandbox.metadata.deletion_timestamp.is_none()
            && let Some(left) = crate::dir::pools::ttl_left(&sandbox.metadata, &conditions::now())
        {
            if !left.is_zero() {
                self.queue.add_after(key.clone(), left);
            } else {
                let (this, k) = (Arc::clone(self), key.clone());
                if let Ok(Some(marked)) = tokio::task::spawn_blocking(move || this.mark_deleted(&k)).await {
                    sandbox = marked;
                }
            }
        }
        // One the store made, deleted by `agentplane delete`: what holds it claims
        // another (see `claims`), where a Session goes on.
        let asked =
            sandbox.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(crate::restart::DELETE_REQUESTED_AT));
        if sandbox.metadata.deletion_timestamp.is_none()
            && asked
            && crate::dir::pools::is_store_owned(&sandbox.metadata)
        {
            let (this, k) = (Arc::clone(self), key.clone());
            if let Ok(Some(marked)) = tokio::task::spawn_blocking(move || this.mark_deleted(&k)).await {
                info!(sandbox = %key, "deleting the sandbox, as asked");
                sandbox = marked;
            }
        }
        if sandbox.metadata.deletion_timestamp.is_some() {
            match (self.managed.get(), sandbox.spec.is_managed()) {
                (Some(managed), true) => {
                    self.sandbox_followers.stop(&key.name);
                    managed.remove(&key.name).await;
                    if let Some(uid) = &sandbox.metadata.uid {
                        managed.remove_leftover(&key.name, uid);
                    }
                }
                _ => self.sandboxes.remove(&key.name),
            }
            self.forget(key, sandbox.metadata.uid.clone()).await;
            return;
        }
        let status = self.sandbox_status(&sandbox, problem, env).await;
        self.write_status(key, sandbox.metadata.uid.clone(), move |object| match object {
            Object::Sandbox(s) if s.status.as_ref() != Some(&status) => {
                s.status = Some(status);
                true
            }
            _ => false,
        })
        .await;
        self.queue.add_after(key.clone(), Duration::from_secs(30));
    }

    /// A managed sandbox changed (started, died, refused a connection): it and what
    /// runs on it are looked at again.
    pub(super) fn sandbox_changed(&self, name: &str) {
        let keys: Vec<Key> = self
            .lock()
            .resources
            .iter()
            .filter(|(key, entry)| match &entry.object {
                Object::Sandbox(_) | Object::SandboxWarmPool(_) => {
                    key.kind == Kind::SandboxWarmPool || key.name == name
                }
                Object::SandboxTemplate(_) => false,
                Object::Process(p) => p.placed_sandbox() == name,
                Object::Session(s) => s.placed_sandbox() == name,
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            self.queue.add(key);
        }
    }

    pub(super) async fn reconcile_managed(
        self: &Arc<Self>,
        sandbox: &agentplane_crds::Sandbox,
        mut status: SandboxStatus,
        env: Env,
    ) -> SandboxStatus {
        let generation = sandbox.metadata.generation;
        let name = sandbox.metadata.name.as_deref().unwrap_or_default();
        let Some(managed) = self.managed.get() else {
            status.phase = Some(agentplane_crds::SandboxPhase::Pending);
            let why = "this controller does not start sandboxes: give the Sandbox an endpoint";
            conditions::set(&mut status.conditions, READY, false, "NotManagedHere", why, generation);
            return status;
        };
        let uid = sandbox.metadata.uid.clone().unwrap_or_default();
        let desired = match env {
            Ok(env) => {
                let folders =
                    Folders { dir: self.dir.clone(), root: self.root.clone(), state: self.real_state.clone() };
                let sandbox = sandbox.clone();
                let writable = self.writes.snapshot();
                // Paths are resolved on the file system: off the async threads.
                tokio::task::spawn_blocking(move || {
                    desired_of(&folders, &sandbox, env, &writable).map_err(|e| e.to_string())
                })
                .await
                .unwrap_or_else(|e| Err(format!("resolving the sandbox's paths: {e}")))
            }
            Err(problem) => Err(problem),
        };
        let desired = match desired {
            Ok(desired) => desired,
            Err(problem) => {
                // The last good spec keeps running; a sandbox never started stays pending.
                if managed.observed(name).is_none() {
                    status.phase = Some(agentplane_crds::SandboxPhase::Pending);
                }
                conditions::set(&mut status.conditions, READY, false, "InvalidSpec", problem, generation);
                return status;
            }
        };
        let workspace = desired.workspace.clone();
        let asked = sandbox.metadata.annotations.as_ref().and_then(|a| a.get(crate::restart::SUSPEND_REQUESTED_AT));
        let power = crate::dir::managed::Power {
            suspend: sandbox.spec.suspend,
            idle_timeout: sandbox.spec.idle_timeout_seconds.map(|s| Duration::from_secs(s.into())),
            asked: asked.and_then(|at| at.parse().ok()),
        };
        let observed = managed.ensure(name, &uid, desired, power).await;
        status.suspended_at = observed.suspended_at;
        status.phase = Some(observed.phase);
        status.endpoint = observed.endpoint;
        status.isolation = Some(observed.isolation.to_string());
        status.runs_on = observed.pid.map(|pid| format!("pid {pid} on this machine"));
        status.started_at = observed.started_at;
        status.restarts = observed.restarts;
        status.applied_limits = observed.applied_limits;
        status.host_uid = observed.host_uid;
        status.seccomp = observed.seccomp.map(str::to_string);
        status.denied_connections = observed.denied;
        status.last_denied = observed.last_denied;
        status.credentials = observed.credentials.into_iter().map(crate::credential_status).collect();
        status.node_agent_version = Some(env!("CARGO_PKG_VERSION").to_string());
        status.template = crate::dir::pools::template_of(&sandbox.metadata).map(str::to_string);
        status.claimed_by = crate::dir::pools::claimed_by(&sandbox.metadata).map(str::to_string);
        let ready = observed.phase == agentplane_crds::SandboxPhase::Ready;
        if ready && let Ok(handle) = self.sandboxes.get(name) {
            // It reconnects by itself across restarts of the node agent; stopped when
            // the sandbox goes.
            self.sandbox_followers.follow(name.to_string(), None, || {
                Some(follow_node_agent(Arc::clone(self), Arc::clone(&handle.node), CancellationToken::new()))
            });
        }
        conditions::set(&mut status.conditions, READY, ready, observed.reason, observed.message, generation);
        self.set_workspace_condition(&mut status, workspace.as_deref(), generation);
        status
    }

    /// `Workspace`, for a Sandbox that names its workspace: the folder is the sandbox's,
    /// and what lies there is never read as resources; `False` when resource files that
    /// were there are no longer read because of it.
    fn set_workspace_condition(&self, status: &mut SandboxStatus, workspace: Option<&Path>, generation: Option<i64>) {
        let Some(workspace) = workspace else {
            status.conditions.retain(|c| c.type_ != WORKSPACE);
            return;
        };
        let held: Vec<String> = self
            .hidden_resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, granted)| granted.as_path() == workspace)
            .map(|(relative, _)| relative.clone())
            .collect();
        let shown = workspace.strip_prefix(&self.root).unwrap_or(workspace).display().to_string();
        if held.is_empty() {
            let message = format!("{shown} is this sandbox's own: what lies there is never read as resources");
            conditions::set(&mut status.conditions, WORKSPACE, true, "OwnFolder", message, generation);
        } else {
            let message = format!(
                "{} resource file(s) in {shown} are not read ({}): what a sandbox can write is never read as \
                 resources; move them out of its workspace",
                held.len(),
                held.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            );
            conditions::set(&mut status.conditions, WORKSPACE, false, "HoldsResources", message, generation);
        }
    }

    pub(super) async fn sandbox_status(
        self: &Arc<Self>,
        sandbox: &agentplane_crds::Sandbox,
        problem: Option<String>,
        env: Env,
    ) -> SandboxStatus {
        let mut status = sandbox.status.clone().unwrap_or_default();
        let generation = sandbox.metadata.generation;
        status.observed_generation = generation;
        let name = sandbox.metadata.name.as_deref().unwrap_or_default();
        conditions::set_valid(&mut status.conditions, problem.as_deref(), generation);
        if name == agentplane_crds::LOCAL_SANDBOX {
            conditions::set(
                &mut status.conditions,
                READY,
                false,
                "Reserved",
                "`local` is the embedded node agent; give this sandbox another name",
                generation,
            );
            return status;
        }
        let Some(endpoint) = sandbox.spec.endpoint.as_deref() else {
            return self.reconcile_managed(sandbox, status, env).await;
        };
        let client = match Client::new(endpoint, None) {
            Ok(client) => client,
            Err(e) => {
                conditions::set(&mut status.conditions, READY, false, "InvalidEndpoint", e.to_string(), generation);
                return status;
            }
        };
        let asked = crate::sandboxes::ask(&client).await;
        if asked.ready {
            status.node_agent_version = asked.version;
            status.last_heartbeat =
                Some(Time(conditions::now().0.round(k8s_openapi::jiff::Unit::Second).unwrap_or(conditions::now().0)));
            self.sandboxes.insert(name, client);
        } else {
            self.sandboxes.remove(name);
        }
        conditions::set(&mut status.conditions, READY, asked.ready, asked.reason, asked.message, generation);
        status
    }
}
