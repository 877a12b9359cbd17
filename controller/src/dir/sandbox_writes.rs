//! The folders some managed sandbox can write (a workspace it names, a writable bind):
//! never read as desired state. A process in a sandbox writing `pwn.yaml` into its
//! workspace under the watched folder must not have `up` run it on the host, nor an
//! env file there feed a resource's environment.
//!
//! A folder is recorded here before its sandbox first starts, by path and by identity
//! (device, inode: a folder renamed or reached through a symlink is still known), and
//! the record is kept in the state directory, so a restarted `up` skips it from its
//! first scan on, and what a sandbox wrote stays unread after the sandbox is gone. A
//! record is dropped only when its folder no longer exists anywhere the scan looks.
//! Files owned by a sandbox's host uid are skipped too, wherever they are.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::file_id::FileId;

/// One folder given to a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// Canonical.
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// The Sandbox it was given to (for messages).
    pub sandbox: String,
}

/// What the scan must not read, at one moment.
#[derive(Debug, Default)]
pub struct Writable {
    granted: Vec<Granted>,
    ids: HashSet<FileId>,
}

impl Writable {
    /// The grant covering a folder or file whose canonical path is `real` and whose
    /// identity is `id`, if any.
    pub fn covering(&self, real: &Path, id: Option<FileId>) -> Option<&Granted> {
        if let Some(id) = id
            && self.ids.contains(&id)
        {
            return self.granted.iter().find(|g| (g.dev, g.ino) == id);
        }
        self.granted.iter().find(|g| real.starts_with(&g.path))
    }

    /// Whether no folder is given to any sandbox (then nothing is covered, whatever its path).
    pub fn is_empty(&self) -> bool {
        self.granted.is_empty()
    }

    /// Whether something owned by `uid` was written by a sandbox.
    pub fn owned_by_sandbox(uid: u32) -> bool {
        super::managed::identity::is_sandbox_uid(uid)
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.granted.iter().map(|g| g.path.as_path())
    }
}

/// The record, shared by the scan, the env file reader and the sandboxes' supervisor.
#[derive(Debug)]
pub struct SandboxWrites {
    file: PathBuf,
    current: Mutex<Arc<Writable>>,
}

impl SandboxWrites {
    /// Loads the record kept in the state directory `state` (none yet: empty).
    pub fn load(state: &Path) -> SandboxWrites {
        let file = state.join("sandbox-writable.json");
        let granted: Vec<Granted> =
            fs::read(&file).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default();
        SandboxWrites { file, current: Mutex::new(Arc::new(writable(granted))) }
    }

    /// What is not to be read, now.
    pub fn snapshot(&self) -> Arc<Writable> {
        Arc::clone(&self.current.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records `folder` as writable by `sandbox`, durably, before the sandbox runs.
    pub fn grant(&self, sandbox: &str, folder: &Path) -> std::io::Result<()> {
        let path = fs::canonicalize(folder)?;
        let meta = fs::metadata(&path)?;
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.granted.iter().any(|g| g.path == path && (g.dev, g.ino) == (meta.dev(), meta.ino())) {
            return Ok(());
        }
        let mut granted = current.granted.clone();
        granted.retain(|g| g.path != path);
        granted.push(Granted { path, dev: meta.dev(), ino: meta.ino(), sandbox: sandbox.to_string() });
        self.persist(&granted)?;
        *current = Arc::new(writable(granted));
        Ok(())
    }

    /// Drops the records of folders that are gone: their path does not exist and no
    /// folder the scan saw (`seen`) has their identity.
    pub fn prune(&self, seen: &HashSet<FileId>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let kept: Vec<Granted> =
            current.granted.iter().filter(|g| g.path.exists() || seen.contains(&(g.dev, g.ino))).cloned().collect();
        if kept.len() != current.granted.len() && self.persist(&kept).is_ok() {
            *current = Arc::new(writable(kept));
        }
    }

    fn persist(&self, granted: &[Granted]) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(granted).map_err(std::io::Error::other)?;
        let temporary = self.file.with_extension("json.tmp");
        fs::write(&temporary, text)?;
        fs::rename(&temporary, &self.file)
    }
}

fn writable(granted: Vec<Granted>) -> Writable {
    let ids = granted.iter().map(|g| (g.dev, g.ino)).collect();
    Writable { granted, ids }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_kept_across_a_restart_and_follows_a_renamed_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        fs::create_dir_all(&state).unwrap();
        let proj = tmp.path().join("proj");
        fs::create_dir_all(&proj).unwrap();
        let writes = SandboxWrites::load(&state);
        writes.grant("box", &proj).unwrap();
        let real = fs::canonicalize(&proj).unwrap();
        assert!(writes.snapshot().covering(&real.join("pwn.yaml"), None).is_some());

        let again = SandboxWrites::load(&state);
        assert_eq!(again.snapshot().covering(&real, None).map(|g| g.sandbox.as_str()), Some("box"));
        // Renamed: known by its identity, not pruned while the scan still sees it.
        let moved = tmp.path().join("proj2");
        fs::rename(&proj, &moved).unwrap();
        let meta = fs::metadata(&moved).unwrap();
        let id = (meta.dev(), meta.ino());
        again.prune(&HashSet::from([id]));
        assert!(again.snapshot().covering(&fs::canonicalize(&moved).unwrap(), Some(id)).is_some());
        // Gone from everywhere the scan looks: forgotten.
        fs::remove_dir(&moved).unwrap();
        again.prune(&HashSet::new());
        assert!(again.snapshot().covering(&real, Some(id)).is_none());
        assert!(SandboxWrites::load(&state).snapshot().covering(&real, None).is_none());
    }
}
