//! The directory store behind `agentplane up`: resources are the YAML files under a
//! directory, status lives in the state directory beside them.
//!
//! The store is level-triggered: any change wakes a rescan, and the rescan compares the
//! directory as it is now with what the store holds. A file that does not parse keeps
//! the resources it last declared at their last good spec, with the error in their
//! `Valid` condition; a resource declared by two files is an error on both, and keeps
//! its last good spec too. A resource no file declares any more is cleaned up (its
//! process stopped) before it is forgotten, even when the file went away while no
//! controller was running: the state directory remembers it.
//!
//! Where each job lives: this file holds the store's types, its opening and its run
//! loop (watching, rescans, workers, the node agents' events); `walk` finds the
//! resource files and reads one; `scan` takes them into the index; `reconcile` makes
//! one pass over one resource and hands it to its kind: `process`, `session`,
//! `sandboxes` (external and managed Sandboxes), `claims` (templates, warm pools and
//! the sandboxes claimed from them); `status` writes status back and forgets what was
//! cleaned up; `view` serves the index to the node agent's `/v1/resources`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentplane_crds::{SandboxStatus, SessionPhase};
use agentplane_node_agent::client::Client;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::env::{EnvFiles, EnvWatch, credential_files, referenced_files, resolve_env};
use super::parse::{Declared, FileError, parse_file};
use super::sandbox_writes::{SandboxWrites, Writable};
use super::state::StateDir;
use crate::conditions::{self, READY};
use crate::follow::{Followers, Seen};
use crate::node_agent::NodeAgent;
use crate::process::{Backoff, ProcessInput, ProcessReconciler};
use crate::queue::WorkQueue;
use crate::sandboxes::Sandboxes;
use crate::session::{SessionInput, SessionReconciler};
use crate::{Result, annotations};
use agentplane_crds::{Key, Kind, Object};

mod claims;
mod process;
mod reconcile;
mod sandboxes;
mod scan;
mod session;
mod status;
mod view;
mod walk;

pub use super::file_id::FileId;
pub use view::view;
pub use walk::yaml_files;

use walk::Stamp;

/// A resource's environment as resolved from its spec, or why it cannot be.
type Env = std::result::Result<BTreeMap<String, String>, String>;

/// How long a burst of file events may keep arriving before the rescan: long enough
/// to take an editor's save or a `git checkout` as one change, short enough not to be
/// felt. Never longer than `SETTLE_MAX`.
const SETTLE: Duration = Duration::from_millis(5);
const SETTLE_MAX: Duration = Duration::from_millis(100);
/// How long after an env file is created or changed the resources that read it are
/// looked at, when no "closed after writing" event came first.
const ENV_SETTLE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct DirStoreConfig {
    /// The watched directory.
    pub dir: PathBuf,
    /// Where status is kept (usually `dir/.agentplane`).
    pub state_dir: PathBuf,
    /// How many resources are reconciled at once.
    pub workers: usize,
    /// How often everything is looked at again without being asked.
    pub resync: Duration,
    pub backoff: Backoff,
    /// Where reconciles and status writes are counted (`agentplane up` serves them
    /// with the node agent's metrics).
    pub metrics: crate::metrics::Metrics,
    /// How managed Sandboxes (no `endpoint`) are started; without it they are not.
    pub launch: Option<super::managed::LaunchConfig>,
}

impl DirStoreConfig {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        DirStoreConfig {
            state_dir: dir.join(super::state::DEFAULT_STATE_DIR),
            dir,
            workers: 32,
            resync: Duration::from_secs(30),
            backoff: Backoff::default(),
            metrics: crate::metrics::Metrics::new(),
            launch: None,
        }
    }
}

struct FileEntry {
    stamp: Stamp,
    parsed: std::result::Result<Vec<Declared>, FileError>,
}

struct Entry {
    object: Object,
    /// Why the latest declaration was not taken, if it was not.
    problem: Option<String>,
    /// Since when no file declares it (see `DELETE_GRACE`).
    missing_since: Option<std::time::Instant>,
    /// Whether the state directory has an up-to-date record of it (with its uid). A new
    /// resource is recorded by the worker that first takes it, before anything is
    /// started for it (see `Inner::record_new`), or on the embedded node agent with its
    /// first status; never by the rescan that found it. False again after a failed write.
    recorded: bool,
}

impl Entry {
    fn source_file(&self) -> Option<&str> {
        source_file(self.object.meta())
    }
}

/// The file (relative to the watched directory) that declares a stored resource, from
/// its `agentplane.dev/source` annotation.
pub fn source_file(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    let source = meta.annotations.as_ref()?.get(annotations::SOURCE)?;
    Some(source.rsplit_once('#').map_or(source.as_str(), |(file, _)| file))
}

#[derive(Default)]
struct Index {
    files: HashMap<String, FileEntry>,
    resources: BTreeMap<Key, Entry>,
    errors: BTreeMap<String, FileError>,
    /// Resources whose record could not be written (a full disk, a file where the state
    /// directory needs a folder): shown in the file errors the CLI lists, since a
    /// resource that is not recorded has no status to carry it.
    unrecorded: BTreeMap<Key, FileError>,
}

impl Index {
    /// The Sandbox declared under `name`, if one is (Sandboxes sort first, and are known
    /// by name alone in this store).
    fn declared_sandbox(&self, name: &str) -> Option<&agentplane_crds::Sandbox> {
        self.resources.iter().take_while(|(key, _)| key.kind == Kind::Sandbox).find_map(|(key, entry)| {
            match &entry.object {
                Object::Sandbox(sandbox) if key.name == name => Some(sandbox),
                _ => None,
            }
        })
    }
}

/// A failed write of a resource's record, as a file error of the file that declares it.
fn unrecorded(key: &Key, file: &str, line: Option<usize>, what: &str, error: &crate::Error) -> FileError {
    FileError { file: file.to_string(), line, column: None, message: format!("{key}: {what}: {error}") }
}

struct Inner {
    dir: PathBuf,
    /// `dir` with every symlink resolved: env files are read only under it.
    root: PathBuf,
    /// The state directory, canonical: env files there are not watched.
    real_state: PathBuf,
    /// Which resources read which env files (see `EnvWatch`).
    env_watch: Mutex<EnvWatch<Key>>,
    /// The symlinks the last walk skipped (see `report_skipped`).
    skipped: Mutex<BTreeSet<PathBuf>>,
    /// What sandboxes can write: never read (see `sandbox_writes`).
    writes: Arc<SandboxWrites>,
    /// What the last walk did not read because a sandbox can write it.
    sandbox_written: Mutex<BTreeMap<PathBuf, Option<PathBuf>>>,
    /// Resource files that were read until a sandbox could write them (relative path,
    /// and the folder given to the sandbox).
    hidden_resources: Mutex<BTreeMap<String, PathBuf>>,
    /// Each sandbox's share of the workers (see `sandbox_slot`).
    sandbox_slots: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    state: StateDir,
    index: Mutex<Index>,
    queue: Arc<WorkQueue<Key>>,
    processes: ProcessReconciler,
    sessions: SessionReconciler,
    /// The event stream followed for each live Session, by resource (and its uid).
    followers: Followers<Key>,
    sandboxes: Arc<Sandboxes>,
    /// The managed Sandboxes' node agents (set once, right after the store is made).
    managed: std::sync::OnceLock<super::managed::Managed>,
    /// The lifecycle events followed on each managed sandbox's node agent, as on the
    /// embedded one's: an exit there is seen at once, not at the next resync.
    sandbox_followers: Followers<String>,
    config: DirStoreConfig,
    wake: mpsc::Sender<()>,
    wake_rx: Mutex<Option<mpsc::Receiver<()>>>,
    /// When the store opened: the node agents of this `up` (the embedded one, the
    /// managed sandboxes') started with it, so a run older than this ended with the
    /// previous `up` (see `ProcessInput::own_node_agent_since`).
    opened_at: time::OffsetDateTime,
    /// True once every resource found at the start has been reconciled once.
    first_pass: tokio::sync::watch::Sender<bool>,
}

#[derive(Clone)]
pub struct DirStore {
    inner: Arc<Inner>,
}

impl DirStore {
    /// Opens the store: the state directory is created if missing and what it remembers
    /// is loaded, so resources keep their uid across restarts.
    pub fn open(config: DirStoreConfig, sandboxes: Arc<Sandboxes>) -> Result<Self> {
        let state = StateDir::new(&config.state_dir);
        state.create()?;
        let mut index = Index::default();
        for record in state.load_all() {
            match record {
                Ok(object) => {
                    index
                        .resources
                        .insert(object.key(), Entry { object, problem: None, missing_since: None, recorded: true });
                }
                Err(e) => warn!(error = %e, "a state record could not be read; it is ignored"),
            }
        }
        let writes = Arc::new(SandboxWrites::load(state.root()));
        let mut processes = ProcessReconciler::new(Arc::clone(&sandboxes));
        processes.backoff = config.backoff;
        // One slot: a pending wake-up already means "rescan".
        let (wake, wake_rx) = mpsc::channel(1);
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let managed = std::sync::OnceLock::new();
            if let Some(launch) = config.launch.clone() {
                let weak = weak.clone();
                let changed = Arc::new(move |name: &str| {
                    if let Some(inner) = weak.upgrade() {
                        inner.sandbox_changed(name);
                    }
                });
                let _ = managed.set(super::managed::Managed::new(
                    launch,
                    Arc::clone(&sandboxes),
                    Arc::clone(&writes),
                    changed,
                ));
            }
            Inner {
                root: fs::canonicalize(&config.dir).unwrap_or_else(|_| config.dir.clone()),
                dir: config.dir.clone(),
                skipped: Mutex::new(BTreeSet::new()),
                writes: Arc::clone(&writes),
                sandbox_written: Mutex::new(BTreeMap::new()),
                hidden_resources: Mutex::new(BTreeMap::new()),
                sandbox_slots: Mutex::new(HashMap::new()),
                real_state: fs::canonicalize(&config.state_dir).unwrap_or_else(|_| config.state_dir.clone()),
                env_watch: Mutex::new(EnvWatch::default()),
                state,
                index: Mutex::new(index),
                queue: WorkQueue::new(),
                processes,
                // Outside every sandbox folder: a Session outlives its sandbox.
                sessions: SessionReconciler::keeping(
                    Arc::clone(&sandboxes),
                    Arc::new(crate::conversations::Conversations::new(config.state_dir.join("conversations"))),
                ),
                followers: Followers::default(),
                sandboxes,
                managed,
                sandbox_followers: Followers::default(),
                config,
                wake,
                wake_rx: Mutex::new(Some(wake_rx)),
                opened_at: time::OffsetDateTime::now_utc(),
                first_pass: tokio::sync::watch::Sender::new(false),
            }
        });
        Ok(DirStore { inner })
    }

    pub fn state(&self) -> &StateDir {
        &self.inner.state
    }

    /// Turns true once every resource found when `run` started has been reconciled
    /// once (`up` then says it is ready, after what starting them logged).
    pub fn first_pass(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.first_pass.subscribe()
    }

    /// Watches, reconciles and writes status until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        let inner = &self.inner;
        let mut wake_rx = inner.wake_rx.lock().unwrap_or_else(|e| e.into_inner()).take().expect("run is called once");
        let mut watcher = super::watch::DirWatcher::new(inner.wake.clone(), env_file_events(inner))?;
        // Not awaited: a walk that finds files before it is done waits for it.
        tokio::task::spawn_blocking(crate::dir::parse::compile_schemas);
        // The top is watched before the first walk, so nothing changed during it is missed.
        if let Ok(meta) = fs::metadata(&inner.dir) {
            use std::os::unix::fs::MetadataExt;
            watcher.sync(BTreeMap::from([((meta.dev(), meta.ino()), inner.root.clone())]))?;
        }
        // Walk until every directory found is watched.
        loop {
            let (_, dirs) = inner.clone().scan().await;
            if watcher.sync(dirs)?.is_empty() {
                break;
            }
        }
        // Everything is looked at once after a start: the node agent may have lost what it ran.
        inner.enqueue_all();
        {
            let (queue, first_pass) = (Arc::clone(&inner.queue), inner.first_pass.clone());
            tokio::spawn(async move {
                queue.idle().await;
                first_pass.send_replace(true);
            });
        }
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..inner.config.workers.max(1) {
            let inner = Arc::clone(inner);
            workers.spawn(async move {
                while let Some(key) = inner.queue.next().await {
                    inner.reconcile(&key).await;
                    inner.queue.done(&key);
                }
            });
        }
        if let Ok(local) = inner.sandboxes.get(agentplane_crds::LOCAL_SANDBOX) {
            workers.spawn(follow_node_agent(Arc::clone(inner), Arc::clone(&local.node), shutdown.clone()));
        }
        let mut resync = tokio::time::interval(inner.config.resync);
        resync.reset();
        // A restart asked for with `agentplane restart` is looked at at once (see `restart`;
        // one slot, as for `wake`).
        let (restart_wake, mut restart_rx) = mpsc::channel(1);
        let _restarts = crate::restart::Requests::new(inner.state.root())
            .watch(restart_wake.clone())
            .map_err(|e| warn!(error = %e, "restart requests are seen at the periodic rescan only"))
            .ok();
        let _suspends = crate::restart::Requests::suspends(inner.state.root())
            .watch(restart_wake.clone())
            .map_err(|e| warn!(error = %e, "suspend requests are seen at the periodic rescan only"))
            .ok();
        let _deletes = crate::restart::Requests::deletes(inner.state.root())
            .watch(restart_wake)
            .map_err(|e| warn!(error = %e, "delete requests are seen at the periodic rescan only"))
            .ok();
        loop {
            let all = tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(()) = restart_rx.recv() => true,
                Some(()) = wake_rx.recv() => {
                    settle(&mut wake_rx).await;
                    false
                }
                _ = resync.tick() => true,
            };
            loop {
                let (changed, dirs) = inner.clone().scan().await;
                for key in changed {
                    inner.queue.add(key);
                }
                match watcher.sync(dirs) {
                    Ok(added) if added.is_empty() => break,
                    Ok(added) => {
                        // An env file written before its folder was watched raised no event.
                        let readers = inner.env_watch.lock().unwrap_or_else(|e| e.into_inner()).readers_in(&added);
                        for key in readers {
                            inner.queue.add(key);
                        }
                        continue;
                    }
                    Err(e) => {
                        warn!(error = %e, "a directory is not watched; the periodic rescan still covers it");
                        break;
                    }
                }
            }
            if all {
                inner.enqueue_all();
            }
        }
        inner.queue.close();
        workers.abort_all();
        while workers.join_next().await.is_some() {}
        if let Some(managed) = inner.managed.get() {
            managed.shutdown().await;
        }
        Ok(())
    }
}

/// What brings in at once the resources that read an env file when it is written,
/// created, renamed into place or removed: called on the file watcher's thread.
fn env_file_events(inner: &Arc<Inner>) -> impl Fn(&notify::Event) + Send + 'static {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    let inner = Arc::clone(inner);
    let runtime = tokio::runtime::Handle::current();
    move |event| {
        let closed = matches!(event.kind, EventKind::Access(AccessKind::Close(AccessMode::Write)));
        if !(closed || event.kind.is_create() || event.kind.is_modify() || event.kind.is_remove()) {
            return;
        }
        let readers = inner.env_watch.lock().unwrap_or_else(|e| e.into_inner()).readers(&event.paths);
        // A delayed add runs on a timer of the runtime.
        let _runtime = runtime.enter();
        for key in readers {
            if closed {
                inner.queue.add(key);
            } else {
                // A file being written raises several events: read it once it is closed
                // (above), or a moment after the first event (a rename into place).
                inner.queue.add_after(key, ENV_SETTLE);
            }
        }
    }
}

async fn settle(wake_rx: &mut mpsc::Receiver<()>) {
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        let quiet = tokio::time::sleep(SETTLE);
        tokio::select! {
            _ = quiet => return,
            _ = tokio::time::sleep_until(deadline) => return,
            Some(()) = wake_rx.recv() => continue,
        }
    }
}

/// Turns the node agent's lifecycle events into reconciles of the resources they
/// concern, so an exit is recorded (and a restart made) without waiting for a resync.
async fn follow_node_agent(inner: Arc<Inner>, node: Arc<dyn NodeAgent>, shutdown: CancellationToken) {
    crate::follow::follow_lifecycle(node, shutdown, move |seen| {
        match seen {
            Seen::Everything => inner.enqueue_all(),
            Seen::Resource(key) => inner.queue.add(key),
        }
        std::future::ready(true)
    })
    .await
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enqueue_all(&self) {
        let keys: Vec<Key> = self.lock().resources.keys().cloned().collect();
        for key in keys {
            self.queue.add(key);
        }
    }
}
