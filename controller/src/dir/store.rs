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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agentplane_crds::{SandboxStatus, SessionPhase};
use agentplane_node_agent::client::Client;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::env::{EnvFiles, EnvWatch, referenced_files, resolve_env};
use super::parse::{Declared, FileError, parse_file};
use super::sandbox_writes::{SandboxWrites, Writable};
use super::state::StateDir;
use crate::conditions::{self, READY};
use crate::follow::{Followers, Seen};
use crate::node_agent::NodeAgent;
use crate::process::{Backoff, ProcessInput, ProcessReconciler};
use crate::queue::WorkQueue;
use crate::session::{SessionInput, SessionReconciler};
use agentplane_crds::{Key, Kind, Object};

/// What a reconcile takes from the index: the object, why its latest file was not
/// taken, its resolved environment, and (for a Process) the session it feeds.
type Prepared = (
    Object,
    Option<String>,
    std::result::Result<BTreeMap<String, String>, String>,
    std::result::Result<Option<String>, String>,
);
use crate::sandboxes::Sandboxes;
use crate::{Result, annotations};

mod claims;
mod sandboxes;
mod view;

pub use view::view;

/// How long a burst of file events may keep arriving before the rescan: long enough
/// to take an editor's save or a `git checkout` as one change, short enough not to be
/// felt. Never longer than `SETTLE_MAX`.
const SETTLE: Duration = Duration::from_millis(5);
const SETTLE_MAX: Duration = Duration::from_millis(100);
/// How long after an env file is created or changed the resources that read it are
/// looked at, when no "closed after writing" event came first.
const ENV_SETTLE: Duration = Duration::from_millis(100);
/// How long a resource must stay undeclared before it is cleaned up. A file rewritten
/// by replacing it (`git checkout`, many editors) or saved in place (truncated, then
/// written) is briefly absent or empty; a rescan that lands in between must not stop
/// what it declares. Updates and new resources are taken at once.
const DELETE_GRACE: Duration = Duration::from_secs(1);
/// How soon a failed cleanup is tried again.
const CLEANUP_RETRY: Duration = Duration::from_secs(5);
/// Larger than any sensible file of resources: a log or a dump saved as `.yaml` by
/// mistake is reported, not read into memory.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Deeper than any sensible repository. Loops are stopped by walking each real
/// directory once; this bounds a tree that is merely very deep.
const MAX_DEPTH: usize = 32;
/// How many workers one sandbox's resources may hold at once: a quarter of the default
/// 32, so a node agent that answers slowly (each call bounded by the client's
/// timeouts) never holds them all. The embedded node agent is not limited.
const WORKERS_PER_SANDBOX: usize = 8;
/// When a resource finds its sandbox's share taken, it is looked at again after this.
const BUSY_SANDBOX_RETRY: Duration = Duration::from_millis(250);

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

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
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
                    index.resources.insert(object.key(), Entry { object, problem: None, missing_since: None });
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
                sessions: SessionReconciler::new(Arc::clone(&sandboxes)),
                followers: Followers::default(),
                sandboxes,
                managed,
                sandbox_followers: Followers::default(),
                config,
                wake,
                wake_rx: Mutex::new(Some(wake_rx)),
                opened_at: time::OffsetDateTime::now_utc(),
            }
        });
        Ok(DirStore { inner })
    }

    pub fn state(&self) -> &StateDir {
        &self.inner.state
    }

    /// Watches, reconciles and writes status until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        let inner = &self.inner;
        let mut wake_rx = inner.wake_rx.lock().unwrap_or_else(|e| e.into_inner()).take().expect("run is called once");
        let mut watcher = super::watch::DirWatcher::new(inner.wake.clone(), env_file_events(inner))?;
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
            .watch(restart_wake)
            .map_err(|e| warn!(error = %e, "restart requests are seen at the periodic rescan only"))
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

/// The files the store reads under `dir` (see `walk`), by path relative to `dir`: what
/// a tool editing the directory must look at to see what the store will see.
pub fn yaml_files(dir: &Path, skip: &Path) -> BTreeMap<String, PathBuf> {
    let writes = SandboxWrites::load(skip);
    walk(dir, skip, &writes).files.into_iter().map(|(relative, (path, _))| (relative, path)).collect()
}

pub use super::file_id::FileId;

/// What one walk of the directory found.
#[derive(Default)]
struct Walked {
    /// The resource files, by path relative to the directory, each real file once.
    files: BTreeMap<String, (PathBuf, Stamp)>,
    /// Every directory walked, once: the path it was walked by and its canonical path.
    dirs: BTreeMap<FileId, (PathBuf, PathBuf)>,
    /// Symlinks that lead to a directory already walked (a loop, or an alias), with the
    /// path that directory was walked by: skipped.
    skipped: BTreeMap<PathBuf, PathBuf>,
    /// Folders and files skipped because a sandbox can write them (or wrote them), with
    /// the folder given to the sandbox that covers them (or none: owned by a sandbox).
    sandbox_written: BTreeMap<PathBuf, Option<PathBuf>>,
    /// The identities of the folders given to sandboxes that the walk came across.
    writable_seen: HashSet<FileId>,
}

/// Whether what the walk found at `path` (canonical `real`, identity `id`, owner `uid`)
/// is a sandbox's to write: answers the folder given to it (or none when only its owner
/// says so).
fn sandbox_written(writes: &SandboxWrites, real: &Path, id: FileId, uid: u32) -> Option<Option<PathBuf>> {
    if let Some(granted) = writes.snapshot().covering(real, Some(id)) {
        return Some(Some(granted.path.clone()));
    }
    Writable::owned_by_sandbox(uid).then_some(None)
}

/// A directory waiting to be walked. Ordered so that the walk is the same whatever
/// order `read_dir` gives: directories reached through fewer symlinks first (the real
/// tree before any alias of it), then by path.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    links: usize,
    path: PathBuf,
    real: PathBuf,
    depth: usize,
    id: FileId,
    via_link: bool,
}

/// The `*.yaml` and `*.yml` files under `dir`, by path relative to it. Hidden entries
/// (the state directory, `.git`, editors' swap files, the `..data` directories of a
/// Kubernetes volume) are skipped; symlinks are followed, but each real directory is
/// walked once (by the path with the fewest symlinks, then the first in path order) and
/// each real file is taken once (the same way), so a link to a parent is not a loop and
/// an alias of a folder does not declare its resources twice. What a sandbox can write
/// (see `sandbox_writes`) is never taken, whatever path leads there.
fn walk(dir: &Path, skip: &Path, writes: &SandboxWrites) -> Walked {
    use std::os::unix::fs::MetadataExt;
    let mut walked = Walked::default();
    let Ok(root) = fs::metadata(dir) else { return walked };
    let real_root = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let real_skip = fs::canonicalize(skip).unwrap_or_else(|_| skip.to_path_buf());
    // Each real file once: the candidate with the fewest symlinks, then the first path.
    let mut files: HashMap<FileId, (usize, String, PathBuf, Stamp)> = HashMap::new();
    let mut pending = BTreeSet::from([Pending {
        links: 0,
        path: dir.to_path_buf(),
        real: real_root,
        depth: 0,
        id: (root.dev(), root.ino()),
        via_link: false,
    }]);
    while let Some(current) = pending.pop_first() {
        if let Some((first, _)) = walked.dirs.get(&current.id) {
            if current.via_link {
                walked.skipped.insert(current.path, first.clone());
            }
            continue;
        }
        let Ok(entries) = fs::read_dir(&current.path) else { continue };
        walked.dirs.insert(current.id, (current.path.clone(), current.real.clone()));
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name_text = name.to_string_lossy();
            if name_text.starts_with('.') {
                continue;
            }
            let path = entry.path();
            if path.starts_with(skip) {
                continue;
            }
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            let Ok(meta) = fs::metadata(&path) else { continue };
            let links = current.links + usize::from(is_link);
            let id = (meta.dev(), meta.ino());
            let real = if is_link {
                let Ok(real) = fs::canonicalize(&path) else { continue };
                real
            } else {
                current.real.join(&name)
            };
            if let Some(granted) = sandbox_written(writes, &real, id, meta.uid()) {
                if meta.is_dir() {
                    walked.writable_seen.insert(id);
                }
                walked.sandbox_written.insert(path, granted);
                continue;
            }
            if meta.is_dir() {
                // The state directory, whatever path leads to it.
                if real.starts_with(&real_skip) || current.depth >= MAX_DEPTH {
                    continue;
                }
                if let Some((first, _)) = walked.dirs.get(&id) {
                    if is_link {
                        walked.skipped.insert(path, first.clone());
                    }
                    continue;
                }
                pending.insert(Pending { links, path, real, depth: current.depth + 1, id, via_link: is_link });
            } else if meta.is_file() && (name_text.ends_with(".yaml") || name_text.ends_with(".yml")) {
                let relative = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
                let candidate = (links, relative, path, Stamp::of(&meta));
                match files.get(&id) {
                    Some(kept) if (kept.0, &kept.1) <= (candidate.0, &candidate.1) => {}
                    _ => {
                        files.insert(id, candidate);
                    }
                }
            }
        }
    }
    walked.files = files.into_values().map(|(_, relative, path, stamp)| (relative, (path, stamp))).collect();
    walked
}

/// A resource file's text. The walk saw a regular file of a sensible size, but it may
/// have been replaced since (by a FIFO, whose read would block a rescan for ever) or
/// grown: opened without blocking, checked again, and read up to the limit only.
fn read_resource_file(path: &Path) -> std::result::Result<String, String> {
    use super::read::{self, Refused};
    let file = read::open(path, true).map_err(|e| format!("cannot read it: {e}"))?;
    let bytes = read::regular_bytes(&file, MAX_FILE_BYTES).map_err(|refused| match refused {
        Refused::Io(e) => format!("cannot read it: {e}"),
        Refused::NotRegular(_) => "it is not a regular file: only regular files are read".to_string(),
        Refused::TooLarge => format!("it holds more than a resource file may hold ({MAX_FILE_BYTES} bytes)"),
    })?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())
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

    /// Rescans the directory off the async runtime; returns what changed, and the
    /// directories to watch.
    async fn scan(self: Arc<Self>) -> (Vec<Key>, BTreeMap<FileId, PathBuf>) {
        tokio::task::spawn_blocking(move || self.scan_now()).await.unwrap_or_default()
    }

    fn scan_now(&self) -> (Vec<Key>, BTreeMap<FileId, PathBuf>) {
        let started = std::time::Instant::now();
        let walked = walk(&self.dir, self.state.root(), &self.writes);
        self.report_skipped(&walked.skipped);
        self.report_sandbox_written(&walked.sandbox_written);
        self.writes.prune(&walked.writable_seen);
        let mut dirs: BTreeMap<FileId, PathBuf> = walked.dirs.into_iter().map(|(id, (_, real))| (id, real)).collect();
        // The folders of env files are watched too, walked or not (`.secrets/`).
        for folder in self.env_watch.lock().unwrap_or_else(|e| e.into_inner()).folders() {
            use std::os::unix::fs::MetadataExt;
            if let Ok(meta) = fs::metadata(&folder)
                && meta.is_dir()
            {
                dirs.entry((meta.dev(), meta.ino())).or_insert(folder);
            }
        }
        let changed = self.take(walked.files);
        debug!(changed = changed.len(), elapsed_ms = started.elapsed().as_secs_f64() * 1000.0, "scanned");
        (changed, dirs)
    }

    /// Says once (not at every rescan) what is not read because a sandbox can write it.
    fn report_sandbox_written(&self, written: &BTreeMap<PathBuf, Option<PathBuf>>) {
        let mut reported = self.sandbox_written.lock().unwrap_or_else(|e| e.into_inner());
        for (path, granted) in written {
            if !reported.contains_key(path) {
                match granted {
                    Some(folder) => info!(
                        path = %path.display(),
                        folder = %folder.display(),
                        "not read: a sandbox can write there (what a sandbox writes is never desired state)"
                    ),
                    None => warn!(
                        path = %path.display(),
                        "not read: a sandbox's user owns it (what a sandbox writes is never desired state)"
                    ),
                }
            }
        }
        *reported = written.clone();
    }

    /// Says once (not at every rescan) which symlinks lead to a folder already walked.
    fn report_skipped(&self, skipped: &BTreeMap<PathBuf, PathBuf>) {
        let mut reported = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        for (link, walked_as) in skipped {
            if !reported.contains(link) {
                warn!(
                    link = %link.display(),
                    folder = %walked_as.display(),
                    "a symlink leads to a folder already walked (a loop or an alias): skipped, its files are taken once"
                );
            }
        }
        *reported = skipped.keys().cloned().collect();
    }

    /// Takes the directory's files as they are now; returns the resources that changed.
    fn take(&self, found: BTreeMap<String, (PathBuf, Stamp)>) -> Vec<Key> {
        // Looked at again with what is granted now: a sandbox started while the walk
        // ran may have written there since.
        let writes = self.writes.snapshot();
        let found: BTreeMap<String, (PathBuf, Stamp)> = found
            .into_iter()
            .filter(|(_, (path, _))| {
                use std::os::unix::fs::MetadataExt;
                let real = fs::canonicalize(path);
                let meta = fs::metadata(path);
                match (real, meta) {
                    (Ok(real), Ok(meta)) => {
                        writes.covering(&real, None).is_none() && !Writable::owned_by_sandbox(meta.uid())
                    }
                    _ => true,
                }
            })
            .collect();
        let mut index = self.lock();
        let index = &mut *index;
        {
            // Resource files read before that a sandbox can write now: no longer read,
            // and said so on the Sandbox (its `Workspace` condition).
            let mut hidden = self.hidden_resources.lock().unwrap_or_else(|e| e.into_inner());
            hidden.retain(|relative, _| self.dir.join(relative).exists());
            for relative in index.files.keys().filter(|r| !found.contains_key(*r)) {
                if let Ok(real) = fs::canonicalize(self.dir.join(relative))
                    && let Some(granted) = writes.covering(&real, None)
                {
                    hidden.insert(relative.clone(), granted.path.clone());
                }
            }
        }
        index.files.retain(|path, _| found.contains_key(path));
        for (relative, (path, stamp)) in &found {
            if index.files.get(relative).is_some_and(|f| f.stamp == *stamp) {
                continue;
            }
            let parsed = if stamp.len > MAX_FILE_BYTES {
                Err(FileError {
                    file: relative.clone(),
                    line: None,
                    column: None,
                    message: format!("{} bytes is more than a resource file may hold ({MAX_FILE_BYTES})", stamp.len),
                })
            } else {
                match read_resource_file(path) {
                    Ok(text) => parse_file(relative, &text),
                    Err(message) => Err(FileError { file: relative.clone(), line: None, column: None, message }),
                }
            };
            index.files.insert(relative.clone(), FileEntry { stamp: *stamp, parsed });
        }

        // Who declares what.
        let mut claims: BTreeMap<Key, Vec<(&str, &Declared)>> = BTreeMap::new();
        let mut errors: BTreeMap<String, FileError> = BTreeMap::new();
        for (file, entry) in &index.files {
            match &entry.parsed {
                Ok(declared) => {
                    for d in declared {
                        claims.entry(d.object.key()).or_default().push((file.as_str(), d));
                    }
                }
                Err(e) => {
                    errors.insert(file.clone(), e.clone());
                }
            }
        }
        let mut problems: BTreeMap<Key, String> = BTreeMap::new();
        let mut taken: BTreeMap<Key, (&str, &Declared)> = BTreeMap::new();
        for (key, claimants) in claims {
            if claimants.len() == 1 {
                taken.insert(key, claimants[0]);
                continue;
            }
            let files: Vec<&str> = claimants.iter().map(|(f, _)| *f).collect();
            let message = format!("{key} is declared in {}: keep it in one file", files.join(" and "));
            for (file, declared) in &claimants {
                errors.entry(file.to_string()).or_insert_with(|| FileError {
                    file: file.to_string(),
                    line: Some(declared.line),
                    column: None,
                    message: message.clone(),
                });
            }
            problems.insert(key, message);
        }

        let mut changed = Vec::new();
        let now = conditions::now();
        for (key, (file, declared)) in &taken {
            let source = format!("{file}#{}", declared.document);
            match index.resources.get_mut(key) {
                // Being cleaned up: declared again, it comes back as a new resource
                // once the cleanup is done.
                Some(entry) if entry.object.meta().deletion_timestamp.is_some() => {}
                Some(entry) => {
                    entry.missing_since = None;
                    let mut dirty = false;
                    if !entry.object.same_spec(&declared.object) {
                        entry.object.take_spec(&declared.object);
                        let meta = entry.object.meta_mut();
                        meta.generation = Some(meta.generation.unwrap_or(0) + 1);
                        dirty = true;
                    }
                    let declared_meta = declared.object.meta();
                    let meta = entry.object.meta_mut();
                    let mut annotations = declared_meta.annotations.clone().unwrap_or_default();
                    annotations.insert(annotations::SOURCE.to_string(), source.clone());
                    if meta.labels != declared_meta.labels || meta.annotations.as_ref() != Some(&annotations) {
                        meta.labels = declared_meta.labels.clone();
                        meta.annotations = Some(annotations);
                        dirty = true;
                    }
                    let requeue = dirty || entry.problem.is_some();
                    entry.problem = None;
                    if dirty {
                        match self.state.write(&entry.object) {
                            Ok(()) => {
                                index.unrecorded.remove(key);
                            }
                            Err(e) => {
                                warn!(resource = %key, error = %e, "cannot record the resource");
                                let what = "its new spec cannot be recorded in the state directory";
                                index
                                    .unrecorded
                                    .insert(key.clone(), unrecorded(key, file, Some(declared.line), what, &e));
                            }
                        }
                    }
                    if requeue {
                        changed.push(key.clone());
                    }
                }
                None => {
                    let mut object = declared.object.clone();
                    let meta = object.meta_mut();
                    meta.uid = Some(uuid::Uuid::new_v4().to_string());
                    meta.generation = Some(1);
                    meta.creation_timestamp = Some(now.clone());
                    meta.annotations.get_or_insert_with(BTreeMap::new).insert(annotations::SOURCE.to_string(), source);
                    // Recorded (with its uid) before anything is started for it, so a
                    // controller killed right after starting it adopts it after a restart.
                    if let Err(e) = self.state.write(&object) {
                        // Tried again at the next rescan; said where the CLI looks meanwhile.
                        warn!(resource = %key, error = %e, "cannot record the resource; it is not started");
                        let what = "cannot be recorded in the state directory, so it is not started";
                        index.unrecorded.insert(key.clone(), unrecorded(key, file, Some(declared.line), what, &e));
                        continue;
                    }
                    index.unrecorded.remove(key);
                    index.resources.insert(key.clone(), Entry { object, problem: None, missing_since: None });
                    changed.push(key.clone());
                }
            }
        }

        // What is no longer declared: held at its last good spec when its file is broken
        // or its name is claimed twice, cleaned up otherwise.
        let mut recheck = None;
        let held_files: BTreeSet<&str> =
            index.files.iter().filter(|(_, f)| f.parsed.is_err()).map(|(p, _)| p.as_str()).collect();
        for (key, entry) in index.resources.iter_mut() {
            // What the store made itself (from a template) no file declares: pools and
            // claims decide when it goes.
            if taken.contains_key(key) || super::pools::is_store_owned(entry.object.meta()) {
                continue;
            }
            let problem = match problems.get(key) {
                Some(problem) => Some(problem.clone()),
                None => entry
                    .source_file()
                    .filter(|f| held_files.contains(f))
                    .and_then(|f| errors.get(f))
                    .map(|e| e.to_string()),
            };
            if let Some(problem) = problem {
                if entry.problem.as_ref() != Some(&problem) {
                    entry.problem = Some(problem);
                    changed.push(key.clone());
                }
                continue;
            }
            if entry.object.meta().deletion_timestamp.is_none() {
                let since = *entry.missing_since.get_or_insert_with(std::time::Instant::now);
                let left = DELETE_GRACE.saturating_sub(since.elapsed());
                if !left.is_zero() {
                    recheck = Some(recheck.map_or(left, |r: Duration| r.min(left)));
                    continue;
                }
                entry.object.meta_mut().deletion_timestamp = Some(now.clone());
                if let Err(e) = self.state.write(&entry.object) {
                    warn!(resource = %key, error = %e, "cannot record the deletion");
                    let what = "its deletion cannot be recorded in the state directory";
                    let file = entry.source_file().unwrap_or_default();
                    index.unrecorded.insert(key.clone(), unrecorded(key, file, None, what, &e));
                }
                changed.push(key.clone());
            }
        }

        index.unrecorded.retain(|key, _| taken.contains_key(key) || index.resources.contains_key(key));
        for error in index.unrecorded.values() {
            errors.entry(error.file.clone()).or_insert_with(|| error.clone());
        }
        if errors != index.errors {
            for error in errors.values().filter(|e| !index.errors.contains_key(&e.file)) {
                warn!(error = %error, "file not taken");
            }
            if let Err(e) = self.state.write_errors(&errors) {
                warn!(error = %e, "cannot record the file errors");
            }
            index.errors = errors;
        }
        if let Some(after) = recheck
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Look again once the grace of what went missing is over.
            let wake = self.wake.clone();
            runtime.spawn(async move {
                tokio::time::sleep(after).await;
                let _ = wake.try_send(());
            });
        }
        changed
    }

    /// Whether `process` runs on a node agent this `up` runs and stops with itself: the
    /// embedded one (`local`) or a managed sandbox's. An external one lives on its own.
    fn runs_on_own_node_agent(&self, process: &agentplane_crds::Process) -> bool {
        let name = process.placed_sandbox();
        let index = self.lock();
        // Sandboxes sort first, and are known by name alone in this store.
        let declared = index.resources.iter().take_while(|(key, _)| key.kind == Kind::Sandbox).find_map(
            |(key, entry)| match &entry.object {
                Object::Sandbox(sandbox) if key.name == name => Some(sandbox.spec.is_managed()),
                _ => None,
            },
        );
        match declared {
            Some(managed) => managed && self.managed.get().is_some(),
            None => name == agentplane_crds::LOCAL_SANDBOX,
        }
    }

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

    async fn reconcile(self: &Arc<Self>, key: &Key) {
        let this = Arc::clone(self);
        let k = key.clone();
        let prepared = tokio::task::spawn_blocking(move || this.prepare(&k)).await.ok().flatten();
        let Some((object, problem, env, session)) = prepared else { return };
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
            Object::Process(process) => {
                if process.metadata.deletion_timestamp.is_some() {
                    let cleaned = self.processes.cleanup(&process).await;
                    if cleaned.is_ok() {
                        self.finish_claims(process.metadata.uid.clone()).await;
                    }
                    return self.forget_once_clean(key, process.metadata.uid.clone(), cleaned).await;
                }
                let own_node_agent_since = self.runs_on_own_node_agent(&process).then_some(self.opened_at);
                let input =
                    ProcessInput { process: &process, env, spec_problem: problem, session, own_node_agent_since };
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
            Object::SandboxTemplate(template) => {
                // Nothing runs from a template itself; the pools that wait for it go on.
                if template.metadata.deletion_timestamp.is_some() {
                    self.forget(key, template.metadata.uid.clone()).await;
                }
                self.enqueue_kind(Kind::SandboxWarmPool);
            }
            Object::SandboxWarmPool(pool) => {
                if pool.metadata.deletion_timestamp.is_some() {
                    let (this, k) = (Arc::clone(self), key.clone());
                    let _ = tokio::task::spawn_blocking(move || this.drain_pool(&k)).await;
                    self.forget(key, pool.metadata.uid.clone()).await;
                    return;
                }
                let (this, k, uid) = (Arc::clone(self), key.clone(), pool.metadata.uid.clone());
                let status = tokio::task::spawn_blocking(move || this.reconcile_pool(&k, &pool, problem))
                    .await
                    .unwrap_or_default();
                self.write_status(key, uid, move |object| match object {
                    Object::SandboxWarmPool(p) if p.status.as_ref() != Some(&status) => {
                        p.status = Some(status);
                        true
                    }
                    _ => false,
                })
                .await;
            }
            Object::Sandbox(mut sandbox) => {
                // A claim that finished is kept for its TTL, then deleted like any other.
                if sandbox.metadata.deletion_timestamp.is_none()
                    && let Some(left) = super::pools::ttl_left(&sandbox.metadata, &conditions::now())
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
                let status = self.reconcile_sandbox(&sandbox, problem, env).await;
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
            Object::Session(session) => {
                if session.metadata.deletion_timestamp.is_some() {
                    self.stop_following(key);
                    let cleaned = self.sessions.cleanup(&session).await;
                    if cleaned.is_ok() {
                        self.finish_claims(session.metadata.uid.clone()).await;
                    }
                    return self.forget_once_clean(key, session.metadata.uid.clone(), cleaned).await;
                }
                let git_credentials =
                    match session.spec.workspace.as_ref().and_then(|w| w.git.as_ref()?.credentials.clone()) {
                        // Files are read off the runtime, as env files are.
                        Some(source) => {
                            let (this, s) = (Arc::clone(self), session.clone());
                            tokio::task::spawn_blocking(move || this.git_credentials(&s, &source).map(Some))
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

    /// A snapshot of the resource, its problem, and (for a Process) its environment.
    #[allow(clippy::type_complexity)]
    fn prepare(&self, key: &Key) -> Option<Prepared> {
        let mut session_sandbox = None;
        let mut claimed = None;
        let (object, problem, session) = {
            let mut index = self.lock();
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
                Err(why) => problem = Some(why),
            }
        }
        crate::restart::Requests::new(self.state.root()).overlay(object.meta_mut());
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
        };
        self.watch_env_files(key, &object, &files);
        Some((object, problem, env, session))
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
                let env = resolve_env(&files, &server.env, &[]).map_err(|e| crate::mcp::context(server, "env", e))?;
                let headers = resolve_env(&files, &crate::mcp::header_vars(&server.headers), &[])
                    .map_err(|e| crate::mcp::context(server, "headers", e))?;
                Ok(crate::mcp::resolved(server, env, headers))
            })
            .collect()
    }

    /// A Session's git credentials, from files beside its YAML (read like env files).
    fn git_credentials(
        &self,
        session: &agentplane_crds::Session,
        source: &agentplane_crds::GitCredentialsSource,
    ) -> std::result::Result<agentplane_node_agent::model::GitCredentials, String> {
        let base =
            source_file(&session.metadata).map(|f| self.dir.join(f)).and_then(|f| f.parent().map(Path::to_path_buf));
        let writable = self.writes.snapshot();
        let files = EnvFiles {
            root: &self.root,
            base: base.as_deref().unwrap_or(&self.dir),
            sandbox_writable: Some(&writable),
        };
        super::env::resolve_git_credentials(&files, source)
    }

    /// Remembers which files `object` reads, so that their events bring it in.
    fn watch_env_files(&self, key: &Key, object: &Object, files: &EnvFiles<'_>) {
        let references: Vec<&str> = match object {
            _ if object.meta().deletion_timestamp.is_some() => Vec::new(),
            Object::Process(p) => referenced_files(&p.spec.env, &p.spec.env_from).collect(),
            Object::Session(s) => referenced_files(&s.spec.env, &s.spec.env_from)
                .chain(crate::mcp::referenced_files(&s.spec.mcp_servers))
                .collect(),
            Object::Sandbox(s) => referenced_files(&s.spec.env, &[]).collect(),
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

    async fn write_status(
        self: &Arc<Self>,
        key: &Key,
        uid: Option<String>,
        update: impl FnOnce(&mut Object) -> bool + Send + 'static,
    ) {
        let this = Arc::clone(self);
        let key = key.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let mut index = this.lock();
            let Some(entry) = index.resources.get_mut(&key) else { return };
            // Replaced by another resource of the same name meanwhile: not ours to write.
            if entry.object.meta().uid != uid {
                return;
            }
            if !update(&mut entry.object) {
                return;
            }
            match this.state.write(&entry.object) {
                Ok(()) => {
                    crate::metrics::Metrics::count(&this.config.metrics.status_writes, key.kind.as_str());
                    if index.unrecorded.remove(&key).is_some() {
                        // The next rescan writes the file errors without it.
                        let _ = this.wake.try_send(());
                    }
                }
                Err(e) => {
                    warn!(resource = %key, error = %e, "cannot write the status");
                    let what = "its status cannot be written to the state directory";
                    let error = unrecorded(&key, entry.source_file().unwrap_or_default(), None, what, &e);
                    index.unrecorded.insert(key.clone(), error.clone());
                    index.errors.entry(error.file.clone()).or_insert(error);
                    if let Err(e) = this.state.write_errors(&index.errors) {
                        warn!(error = %e, "cannot record the file errors");
                    }
                }
            }
        })
        .await;
    }

    /// Forgets a resource whose cleanup succeeded; tries the cleanup again later otherwise.
    async fn forget_once_clean(self: &Arc<Self>, key: &Key, uid: Option<String>, cleaned: Result<()>) {
        match cleaned {
            Ok(()) => self.forget(key, uid).await,
            Err(e) => {
                warn!(resource = %key, error = %e, "cleanup failed; trying again");
                self.queue.add_after(key.clone(), CLEANUP_RETRY);
            }
        }
    }

    /// Forgets a cleaned-up resource; a file that declares it again brings it back new.
    async fn forget(self: &Arc<Self>, key: &Key, uid: Option<String>) {
        let this = Arc::clone(self);
        let k = key.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let mut index = this.lock();
            if index.resources.get(&k).is_some_and(|e| e.object.meta().uid == uid) {
                index.resources.remove(&k);
                this.env_watch.lock().unwrap_or_else(|e| e.into_inner()).set(&k, Vec::new());
                if let Err(e) = this.state.remove(&k) {
                    warn!(resource = %k, error = %e, "cannot remove the record");
                }
            }
        })
        .await;
        info!(resource = %key, "cleaned up and forgotten");
        let _ = self.wake.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_never_takes_what_a_sandbox_can_write_however_it_is_reached() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        for folder in ["proj/deep", "mine", ".agentplane"] {
            fs::create_dir_all(d.join(folder)).unwrap();
        }
        for file in ["proj/pwn.yaml", "proj/deep/pwn2.yaml", "mine/ok.yaml"] {
            fs::write(d.join(file), "").unwrap();
        }
        // Another path to the same folder, and to one file in it.
        symlink("proj", d.join("alias")).unwrap();
        symlink("../proj/pwn.yaml", d.join("mine/link.yaml")).unwrap();
        let writes = SandboxWrites::load(&d.join(".agentplane"));
        writes.grant("box", &d.join("proj")).unwrap();
        let walked = walk(&d, &d.join(".agentplane"), &writes);
        assert_eq!(walked.files.keys().collect::<Vec<_>>(), ["mine/ok.yaml"]);
        let real = fs::canonicalize(d.join("proj")).unwrap();
        assert_eq!(walked.sandbox_written.get(&d.join("proj")), Some(&Some(real.clone())));
        assert_eq!(walked.sandbox_written.get(&d.join("alias")), Some(&Some(real.clone())));
        assert_eq!(walked.sandbox_written.get(&d.join("mine/link.yaml")), Some(&Some(real)));
        // Renamed, it is still the sandbox's.
        fs::rename(d.join("proj"), d.join("moved")).unwrap();
        fs::remove_file(d.join("alias")).unwrap();
        let walked = walk(&d, &d.join(".agentplane"), &writes);
        assert_eq!(walked.files.keys().collect::<Vec<_>>(), ["mine/ok.yaml"]);
    }

    #[test]
    fn a_walk_takes_each_real_folder_and_file_once() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        for folder in ["sub", "loop", "l1", ".agentplane/resources"] {
            fs::create_dir_all(d.join(folder)).unwrap();
        }
        for file in ["web.yaml", "sub/x.yaml", ".agentplane/resources/no.yaml"] {
            fs::write(d.join(file), "").unwrap();
        }
        symlink("..", d.join("loop/a")).unwrap();
        symlink("..", d.join("loop/b")).unwrap();
        symlink("..", d.join("l1/up")).unwrap();
        symlink("sub", d.join("alias")).unwrap();
        symlink("web.yaml", d.join("link.yaml")).unwrap();
        symlink(".agentplane", d.join("state")).unwrap();
        let walked = walk(&d, &d.join(".agentplane"), &SandboxWrites::load(&d.join(".agentplane")));
        assert_eq!(walked.files.keys().collect::<Vec<_>>(), ["sub/x.yaml", "web.yaml"]);
        let mut dirs: Vec<&PathBuf> = walked.dirs.values().map(|(path, _)| path).collect();
        dirs.sort();
        assert_eq!(dirs, [&d, &d.join("l1"), &d.join("loop"), &d.join("sub")]);
        let skipped: Vec<(&PathBuf, &PathBuf)> = walked.skipped.iter().collect();
        assert_eq!(
            skipped,
            [
                (&d.join("alias"), &d.join("sub")),
                (&d.join("l1/up"), &d),
                (&d.join("loop/a"), &d),
                (&d.join("loop/b"), &d)
            ]
        );
    }

    /// What the walk took for a regular file may be something else by the time it is read.
    #[test]
    fn a_resource_file_is_read_without_blocking_and_up_to_its_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_resource_file(&fifo));
        });
        let read = rx.recv_timeout(Duration::from_secs(10)).expect("reading a FIFO must not block");
        assert_eq!(read.unwrap_err(), "it is not a regular file: only regular files are read");
        let big = tmp.path().join("big.yaml");
        fs::write(&big, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(read_resource_file(&big).unwrap_err().starts_with("it holds more than"));
        fs::write(&big, "a: 1\n").unwrap();
        assert_eq!(read_resource_file(&big).unwrap(), "a: 1\n");
    }
}
