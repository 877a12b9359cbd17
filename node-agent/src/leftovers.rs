//! Children that outlived a node agent which had no chance to stop them (`kill -9`,
//! the OOM killer, a crash).
//!
//! Programs on pipes keep running when their node agent dies, and nothing could reach
//! them again: a new node agent knows nothing of them, and a controller that starts
//! them anew would run them twice. So every child gets the data directory's id in its
//! environment (`AGENTPLANE_NODE_AGENT_ID`), set before it is spawned, so there is no
//! moment at which a child exists unmarked, and inherited by whatever it starts in
//! turn. A node agent starting on that data directory kills every process that carries
//! the mark: only one node agent at a time may use a data directory (a lock says so),
//! so whatever carries it is left over from one that died.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The environment variable that marks a node agent's children.
pub const MARK_VARIABLE: &str = "AGENTPLANE_NODE_AGENT_ID";

#[derive(Debug, Clone)]
pub struct ChildRegistry {
    id: String,
    _lock: Arc<Flock<fs::File>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("another node agent uses the data directory {0}")]
    InUse(String),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

impl ChildRegistry {
    /// Takes the data directory for this node agent and reads (or makes) its id.
    pub fn open(data_dir: &Path) -> Result<Self, RegistryError> {
        let io = |what: &str, e| RegistryError::Io(format!("{what} in {}", data_dir.display()), e);
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(data_dir.join("lock"))
            .map_err(|e| io("opening the lock", e))?;
        let lock = Flock::lock(lock, FlockArg::LockExclusiveNonblock)
            .map_err(|_| RegistryError::InUse(data_dir.display().to_string()))?;
        let path = data_dir.join("id");
        let id = match fs::read_to_string(&path) {
            Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
            _ => {
                let id = crate::random::hex(16);
                let mut file = fs::File::create(&path).map_err(|e| io("writing the id", e))?;
                file.write_all(id.as_bytes()).map_err(|e| io("writing the id", e))?;
                id
            }
        };
        Ok(ChildRegistry { id, _lock: Arc::new(lock) })
    }

    /// The mark to put in every child's environment.
    pub fn mark(&self) -> (&'static str, &str) {
        (MARK_VARIABLE, &self.id)
    }

    /// Kills every process carrying this data directory's mark; returns how many there
    /// were. Looks again until none is left, in case one forked while being killed.
    /// Blocking: reads /proc.
    pub fn kill_leftovers(&self) -> usize {
        let needle = format!("{MARK_VARIABLE}={}", self.id);
        let me = std::process::id();
        let mut killed = 0;
        for _ in 0..10 {
            let marked = marked_processes(&needle, me);
            if marked.is_empty() {
                break;
            }
            for pid in &marked {
                let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
            }
            killed += marked.len();
        }
        if killed > 0 {
            tracing::warn!(
                killed,
                "killed processes left running by a node agent on this data directory that did not stop"
            );
        }
        killed
    }
}

/// Live processes (not zombies) whose environment holds `needle`.
fn marked_processes(needle: &str, me: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = fs::read(entry.path().join("environ")) else { continue };
        if !environ.split(|b| *b == 0).any(|var| var == needle.as_bytes()) {
            continue;
        }
        let zombie = fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| stat.rfind(')').and_then(|i| stat.get(i + 2..i + 3)).map(|s| s == "Z"))
            .unwrap_or(false);
        if !zombie {
            found.push(pid);
        }
    }
    found
}
