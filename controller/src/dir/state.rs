//! The state directory beside the user's files (default `DIR/.agentplane/`): what the
//! directory store knows that the files do not say. One JSON file per resource
//! (metadata with uid and generation, the last good spec, the status), the errors of
//! the files that were not taken, how to reach a running `agentplane up`, and when
//! `up` last ran, so that a reader can tell a live status from an old one.
//!
//! Files are replaced atomically (written aside, then renamed), so a reader or a
//! controller killed mid-write sees the old or the new version, never half of one.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::parse::FileError;
use crate::{Error, Result};
use agentplane_crds::{IdentityError, Key, Kind, Object};

/// Why a resource's record in the state directory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: {source}", path.display())]
    Resource {
        path: PathBuf,
        #[source]
        source: IdentityError,
    },
}

pub const DEFAULT_STATE_DIR: &str = ".agentplane";

#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    /// Bumped by every write and removal through this handle (and its clones), failed
    /// ones too: the store's change signal (what `/v1/resources/sse` follows).
    changes: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

/// How the CLI reaches a running `agentplane up` (kept readable by its owner only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UpInfo {
    /// The embedded node agent's URL.
    pub url: String,
    pub token: Option<String>,
    pub pid: u32,
    /// The watched directory.
    pub dir: PathBuf,
}

/// When `agentplane up` last ran on this directory. Unlike `up.json` it stays after
/// `up` stops: the status records are then only as true as this says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UpRun {
    pub pid: u32,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: time::OffsetDateTime,
    /// Written by a graceful stop; absent after `kill -9` or a crash.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub stopped_at: Option<time::OffsetDateTime>,
}

/// Whether the status records are being kept up to date right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// An `agentplane up` holds the directory.
    Running,
    /// None does: the records say what was true when one last ran.
    NotRunning {
        /// The last run, if any `up` recorded one.
        last_run: Option<UpRun>,
        /// When a status record was last written (the newest record's mtime).
        last_write: Option<time::OffsetDateTime>,
    },
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateDir { root: root.into(), changes: std::sync::Arc::new(tokio::sync::watch::channel(0).0) }
    }

    /// Changes after each write or removal of a record or of the file errors made
    /// through this handle; its value is the revision. The store makes every change
    /// it holds in memory together with its write, under its lock, so a reader woken
    /// by this who takes that lock sees the change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many writes and removals this handle has made (see `subscribe`).
    pub fn revision(&self) -> u64 {
        *self.changes.borrow()
    }

    fn changed(&self) {
        self.changes.send_modify(|revision| *revision += 1);
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn create(&self) -> Result<()> {
        fs::create_dir_all(self.root.join("resources"))
            .map_err(|e| Error::io(format!("creating the state directory {}", self.root.display()), e))?;
        // It holds tokens (up's, each managed sandbox's): git never takes it, whatever
        // repository the watched folder is in.
        let ignore = self.root.join(".gitignore");
        if !ignore.exists() {
            fs::write(&ignore, "# agentplane's state: status and tokens, never committed.\n*\n")
                .map_err(|e| Error::io(format!("writing {}", ignore.display()), e))?;
        }
        Ok(())
    }

    /// Where managed sandboxes keep their own folders (see `managed::sandbox_dir`).
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.root.join("sandboxes")
    }

    pub fn node_agent_dir(&self) -> PathBuf {
        self.root.join("node-agent")
    }

    /// Where a resource's record is kept. Every reader and writer of records goes
    /// through here, so the name it picks for a long name is found again.
    pub fn record_path(&self, key: &Key) -> PathBuf {
        self.root.join("resources").join(key.kind.plural()).join(&key.namespace).join(record_file_name(&key.name))
    }

    /// Every stored resource; a record that cannot be read is reported and skipped.
    pub fn load_all(&self) -> Vec<std::result::Result<Object, RecordError>> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            let dir = self.root.join("resources").join(kind.plural());
            let Ok(namespaces) = fs::read_dir(&dir) else { continue };
            for namespace in namespaces.flatten() {
                let Ok(files) = fs::read_dir(namespace.path()) else { continue };
                for file in files.flatten() {
                    let path = file.path();
                    if path.extension().is_none_or(|e| e != "json") {
                        continue;
                    }
                    out.push(read_record(&path));
                }
            }
        }
        out
    }

    pub fn read(&self, key: &Key) -> Option<std::result::Result<Object, RecordError>> {
        let path = self.record_path(key);
        path.exists().then(|| read_record(&path))
    }

    pub fn write(&self, object: &Object) -> Result<()> {
        let path = self.record_path(&object.key());
        let mut body = serde_json::to_vec_pretty(&object.to_json()).expect("JSON serializes");
        body.push(b'\n');
        let written = write_by_exchange(&path, &body);
        self.changed();
        written
    }

    pub fn remove(&self, key: &Key) -> Result<()> {
        let path = self.record_path(key);
        let removed = match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
        };
        // The record's spare (see `write_by_exchange`) goes with it.
        let _ = fs::remove_file(aside_path(&path));
        self.changed();
        removed
    }

    pub fn errors_path(&self) -> PathBuf {
        self.root.join("errors.json")
    }

    pub fn write_errors(&self, errors: &BTreeMap<String, FileError>) -> Result<()> {
        let list: Vec<&FileError> = errors.values().collect();
        let mut body = serde_json::to_vec_pretty(&list).expect("JSON serializes");
        body.push(b'\n');
        let written = write_atomically(&self.errors_path(), &body, false);
        self.changed();
        written
    }

    pub fn read_errors(&self) -> Vec<FileError> {
        fs::read(self.errors_path()).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    pub fn up_path(&self) -> PathBuf {
        self.root.join("up.json")
    }

    pub fn write_up(&self, info: &UpInfo) -> Result<()> {
        let body = serde_json::to_vec_pretty(info).expect("JSON serializes");
        write_atomically(&self.up_path(), &body, true)
    }

    pub fn read_up(&self) -> Option<UpInfo> {
        fs::read(self.up_path()).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }

    pub fn remove_up(&self) {
        let _ = fs::remove_file(self.up_path());
    }

    pub fn run_path(&self) -> PathBuf {
        self.root.join("last-run.json")
    }

    /// Records that an `up` (this process) started now, with no stop yet.
    pub fn write_run_started(&self) -> Result<UpRun> {
        let run = UpRun { pid: std::process::id(), started_at: time::OffsetDateTime::now_utc(), stopped_at: None };
        self.write_run(&run)?;
        Ok(run)
    }

    /// Records that the run `started` stopped cleanly now.
    pub fn write_run_stopped(&self, started: &UpRun) -> Result<()> {
        self.write_run(&UpRun { stopped_at: Some(time::OffsetDateTime::now_utc()), ..started.clone() })
    }

    fn write_run(&self, run: &UpRun) -> Result<()> {
        let mut body = serde_json::to_vec_pretty(run).expect("JSON serializes");
        body.push(b'\n');
        write_atomically(&self.run_path(), &body, false)
    }

    pub fn read_run(&self) -> Option<UpRun> {
        fs::read(self.run_path()).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// Holds the directory for one `agentplane up`: two controllers on one directory
    /// would each start every process. A reader asking [`StateDir::liveness`] holds
    /// the lock for an instant, so a lock that is busy is asked again for a moment
    /// before another `up` is assumed to hold it.
    pub fn lock(&self) -> Result<nix::fcntl::Flock<fs::File>> {
        let path = self.lock_path();
        let mut file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
        loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(lock),
                Err((back, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < deadline => {
                    file = back;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(_) => return Err(Error::AlreadyRunning(self.root.display().to_string())),
            }
        }
    }

    /// Whether an `agentplane up` holds the directory now. The lock says it even after
    /// `kill -9`, where `up.json` stays behind and its pid may be reused.
    pub fn up_holds_lock(&self) -> bool {
        // Read-only: a reader never creates the lock file, and may lack write access.
        let Ok(file) = fs::File::open(self.lock_path()) else { return false };
        // A shared lock, dropped at once: taken means nobody holds the exclusive one.
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
            Ok(_probe) => false,
            Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
        }
    }

    /// Whether the status records are live, and if not, how old.
    pub fn liveness(&self) -> Liveness {
        if self.up_holds_lock() {
            return Liveness::Running;
        }
        Liveness::NotRunning { last_run: self.read_run(), last_write: self.last_status_write() }
    }

    /// When a resource's status was last written: the newest record's mtime.
    fn last_status_write(&self) -> Option<time::OffsetDateTime> {
        let mut newest: Option<std::time::SystemTime> = None;
        for kind in Kind::ALL {
            let Ok(namespaces) = fs::read_dir(self.root.join("resources").join(kind.plural())) else { continue };
            for namespace in namespaces.flatten() {
                let Ok(files) = fs::read_dir(namespace.path()) else { continue };
                for file in files.flatten() {
                    if let Ok(modified) = file.metadata().and_then(|m| m.modified()) {
                        newest = newest.max(Some(modified));
                    }
                }
            }
        }
        newest.map(time::OffsetDateTime::from)
    }
}

/// The longest file name ext4, xfs, btrfs and tmpfs take, in bytes.
const NAME_MAX: usize = 255;

/// `<name>.json` while it fits with the `.<file>.tmp` it is written through; past that
/// (names may have 253 characters) the name's start and its SHA-256. A valid name has
/// no `_`, so the long form is never another name's short one.
fn record_file_name(name: &str) -> String {
    use sha2::Digest;
    let plain = format!("{name}.json");
    if plain.len() + ".".len() + ".tmp".len() <= NAME_MAX {
        return plain;
    }
    let mut cut = name.len().min(100);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}_{:x}.json", &name[..cut], sha2::Sha256::digest(name.as_bytes()))
}

/// How many times a record that does not parse is read again: a reader that opened it
/// just before two rewrites in a row can see its spare being rewritten (see
/// `write_by_exchange`); the next open finds the current one. After the first few
/// tries, each waits a little, so a writer rewriting the same record back to back
/// (three tries were not always enough for one in a loop beside other work) is given
/// time to finish: at most about 20 ms in all, and only for a record that does not
/// parse.
const RECORD_READS: usize = 24;
const QUICK_READS: usize = 4;

fn read_record(path: &Path) -> std::result::Result<Object, RecordError> {
    let path_buf = || path.to_path_buf();
    let mut tries = 1;
    let value = loop {
        let bytes = fs::read(path).map_err(|source| RecordError::Read { path: path_buf(), source })?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => break value,
            Err(_) if tries < RECORD_READS => {
                if tries >= QUICK_READS {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                tries += 1;
            }
            Err(source) => return Err(RecordError::Json { path: path_buf(), source }),
        }
    };
    Object::from_json(value).map_err(|source| RecordError::Resource { path: path_buf(), source })
}

/// Where a state file is written before it takes its place: `.<file>.tmp` beside it.
fn aside_path(path: &Path) -> PathBuf {
    let name = path.file_name().expect("a file name").to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Replaces a record as `write_atomically` does (a reader, or a controller killed
/// mid-write, sees the old or the new version whole), without making and deleting an
/// inode per write: the new version is written into the record's spare (`.<file>.tmp`,
/// the previous version), which then trades places with the record in one
/// `renameat2(RENAME_EXCHANGE)`. A record is rewritten on every status change (and,
/// off the embedded node agent, written before its start); a rename over it deletes an
/// inode each time, and on ext4 every inode deleted in the last few seconds (minutes,
/// while its table block is dirty) is skipped, one by one, by each later allocation
/// in its group: 1,000 records dropped at once spent a second there. Where the file
/// system cannot exchange (EINVAL: not every one can), it renames as before.
fn write_by_exchange(path: &Path, body: &[u8]) -> Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    let context = |what: &str| format!("{what} {}", path.display());
    if !path.exists() {
        return write_atomically(path, body, false);
    }
    let aside = aside_path(path);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&aside)
        .map_err(|e| Error::io(context("writing"), e))?;
    file.write_all(body).map_err(|e| Error::io(context("writing"), e))?;
    drop(file);
    match renameat2(AT_FDCWD, &aside, AT_FDCWD, path, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => Ok(()),
        // The record went meanwhile (it never does under the store's lock), or the file
        // system cannot exchange: the spare takes its place by a plain rename.
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => {
            fs::rename(&aside, path).map_err(|e| Error::io(context("replacing"), e))
        }
        Err(e) => Err(Error::io(context("replacing"), e.into())),
    }
}

fn write_atomically(path: &Path, body: &[u8], private: bool) -> Result<()> {
    let dir = path.parent().expect("state files live in a directory");
    let context = |what: &str| format!("{what} {}", path.display());
    fs::create_dir_all(dir).map_err(|e| Error::io(context("creating the directory of"), e))?;
    let aside = aside_path(path);
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&aside).map_err(|e| Error::io(context("writing"), e))?;
    file.write_all(body).map_err(|e| Error::io(context("writing"), e))?;
    drop(file);
    fs::rename(&aside, path).map_err(|e| Error::io(context("replacing"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_name_has_a_record_file_that_fits() {
        assert_eq!(record_file_name("web"), "web.json");
        let longest_plain = "a".repeat(NAME_MAX - ".json".len() - ".".len() - ".tmp".len());
        assert_eq!(record_file_name(&longest_plain), format!("{longest_plain}.json"));
        let mut seen = std::collections::BTreeSet::new();
        for len in longest_plain.len() + 1..=253 {
            for last in ['a', 'b'] {
                let name = format!("{}{last}", "a".repeat(len - 1));
                let file = record_file_name(&name);
                assert!(file.len() + ".".len() + ".tmp".len() <= NAME_MAX, "{len}: {file}");
                assert!(seen.insert(file), "{name} shares its record file");
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let name = "x".repeat(253);
        let text = format!(
            "{{apiVersion: agentplane.dev/v1alpha1, kind: Process, metadata: {{name: {name}}}, spec: {{command: sleep}}}}"
        );
        let object = crate::dir::parse::parse_file("f.yaml", &text).unwrap().remove(0).object;
        state.write(&object).unwrap();
        assert_eq!(state.read(&object.key()).unwrap().unwrap(), object);
        assert_eq!(state.load_all().len(), 1);
    }

    fn process(command: &str) -> Object {
        let text = format!(
            "{{apiVersion: agentplane.dev/v1alpha1, kind: Process, metadata: {{name: web}}, spec: {{command: {command}}}}}"
        );
        crate::dir::parse::parse_file("f.yaml", &text).unwrap().remove(0).object
    }

    #[test]
    fn a_rewritten_record_trades_places_with_its_spare_instead_of_making_inodes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let mut inodes = std::collections::BTreeSet::new();
        for n in 0..6 {
            let object = process(&format!("run-{n}"));
            state.write(&object).unwrap();
            assert_eq!(state.read(&object.key()).unwrap().unwrap(), object, "write {n} reads back whole");
            inodes.insert(fs::metadata(state.record_path(&object.key())).unwrap().ino());
        }
        // A rename over the record would have made (and deleted) one inode per write.
        assert_eq!(inodes.len(), 2, "the record and its spare, used in turn: {inodes:?}");
        assert_eq!(state.load_all().len(), 1, "the spare is no record");
        let key = process("x").key();
        state.remove(&key).unwrap();
        let left: Vec<_> = fs::read_dir(state.record_path(&key).parent().unwrap()).unwrap().flatten().collect();
        assert!(left.is_empty(), "the spare goes with its record: {left:?}");
        assert!(state.read(&key).is_none());
    }

    #[test]
    fn a_record_read_while_it_is_rewritten_is_always_whole() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let first = process("first");
        state.write(&first).unwrap();
        let key = first.key();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (state, stop) = (state.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Lengths that differ, so a torn read would not parse.
                    state.write(&process(&"x".repeat(1 + (n % 300) as usize))).unwrap();
                    n += 1;
                }
            })
        };
        for _ in 0..5_000 {
            state.read(&key).unwrap().expect("a whole record");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
    }
}

/// When `up` runs, as a reader tells it.
#[cfg(test)]
mod liveness_tests {
    use super::*;

    #[test]
    fn liveness_follows_the_lock_and_the_last_run() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::new(tmp.path().join(".agentplane"));
        state.create().unwrap();
        assert_eq!(state.liveness(), Liveness::NotRunning { last_run: None, last_write: None });

        let lock = state.lock().unwrap();
        let run = state.write_run_started().unwrap();
        assert_eq!(state.liveness(), Liveness::Running, "a reader's probe sees the lock");
        assert!(state.lock().is_err(), "a second up is refused, the probe notwithstanding");
        state.write_run_stopped(&run).unwrap();
        drop(lock);

        let Liveness::NotRunning { last_run: Some(last), .. } = state.liveness() else { panic!("not running") };
        assert_eq!((last.pid, last.started_at), (run.pid, run.started_at));
        assert!(last.stopped_at.is_some_and(|stopped| stopped >= run.started_at));
        // A reader never creates the lock file, and its probe does not keep `up` out.
        let again = state.lock();
        assert!(again.is_ok());
    }
}
