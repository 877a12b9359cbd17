//! The state directory beside the user's files (default `DIR/.agentplane/`): what the
//! directory store knows that the files do not say. One JSON file per resource
//! (metadata with uid and generation, the last good spec, the status), the errors of
//! the files that were not taken, and how to reach a running `agentplane up`.
//!
//! Files are replaced atomically (written aside, then renamed), so a reader or a
//! controller killed mid-write sees the old or the new version, never half of one.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::parse::{FileError, Key, Kind, Object};
use crate::{Error, Result};

pub const DEFAULT_STATE_DIR: &str = ".agentplane";

#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
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

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn create(&self) -> Result<()> {
        fs::create_dir_all(self.root.join("resources"))
            .map_err(|e| Error::io(format!("creating the state directory {}", self.root.display()), e))
    }

    pub fn node_agent_dir(&self) -> PathBuf {
        self.root.join("node-agent")
    }

    pub fn record_path(&self, key: &Key) -> PathBuf {
        self.root.join("resources").join(key.kind.plural()).join(&key.namespace).join(format!("{}.json", key.name))
    }

    /// Every stored resource; a record that cannot be read is reported and skipped.
    pub fn load_all(&self) -> Vec<std::result::Result<Object, String>> {
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

    pub fn read(&self, key: &Key) -> Option<std::result::Result<Object, String>> {
        let path = self.record_path(key);
        path.exists().then(|| read_record(&path))
    }

    pub fn write(&self, object: &Object) -> Result<()> {
        let path = self.record_path(&object.key());
        let mut body = serde_json::to_vec_pretty(&object.to_json()).expect("JSON serializes");
        body.push(b'\n');
        write_atomically(&path, &body, false)
    }

    pub fn remove(&self, key: &Key) -> Result<()> {
        let path = self.record_path(key);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
        }
    }

    pub fn errors_path(&self) -> PathBuf {
        self.root.join("errors.json")
    }

    pub fn write_errors(&self, errors: &BTreeMap<String, FileError>) -> Result<()> {
        let list: Vec<&FileError> = errors.values().collect();
        let mut body = serde_json::to_vec_pretty(&list).expect("JSON serializes");
        body.push(b'\n');
        write_atomically(&self.errors_path(), &body, false)
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

    /// Holds the directory for one `agentplane up`: two controllers on one directory
    /// would each start every process.
    pub fn lock(&self) -> Result<nix::fcntl::Flock<fs::File>> {
        let path = self.root.join("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|_| Error::AlreadyRunning(self.root.display().to_string()))
    }
}

fn read_record(path: &Path) -> std::result::Result<Object, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let value = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Object::from_json(value).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_atomically(path: &Path, body: &[u8], private: bool) -> Result<()> {
    let dir = path.parent().expect("state files live in a directory");
    let context = |what: &str| format!("{what} {}", path.display());
    fs::create_dir_all(dir).map_err(|e| Error::io(context("creating the directory of"), e))?;
    let name = path.file_name().expect("a file name").to_string_lossy();
    let aside = dir.join(format!(".{name}.tmp"));
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
