//! Sessions on disk: `data_dir/sessions/<id>/session.json` (the [`SessionRecord`],
//! rewritten atomically on every change of state, readable by the node agent's user
//! only) beside `events.jsonl` (see [`super::log`]). Creating a session's directory,
//! writing its record, and loading every session a previous run left. Blocking file
//! I/O: callers run these off the async runtime.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::log::EventLog;
use super::record::{SessionRecord, validate_id};
use crate::agents::AgentId;
use crate::error::{Error, Result};

/// The record file in a session's directory.
pub(super) const RECORD: &str = "session.json";
/// The event log in a session's directory.
pub(super) const EVENTS: &str = "events.jsonl";

/// A session a previous run left: its agent, directory, record and log.
pub(super) type Loaded = (AgentId, PathBuf, SessionRecord, EventLog);

/// Writes `session.json` (a temporary file renamed over it). Readable by the node
/// agent's user only: it holds the session's environment. Not fsynced: this survives
/// the node agent crashing, as the event log does, not the machine losing power.
pub(super) fn write_record(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_private(&dir.join(RECORD), bytes)
}

/// Writes `path` (a temporary file renamed over it), readable by the node agent's
/// user only.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&temporary, path)
}

/// Makes a new session's directory (mode 0700) with its record and an empty log
/// keeping `capacity` events in memory. A directory already there (left by a session
/// that could not be loaded) is `session_already_exists`: not to be mixed with a new one.
pub(super) fn create(dir: &Path, record: &SessionRecord, capacity: usize) -> Result<EventLog> {
    make_dir(dir, &record.id)?;
    let bytes = serde_json::to_vec_pretty(record).expect("records serialize");
    write_record(dir, &bytes).map_err(|e| Error::io("saving the session", e))?;
    EventLog::open(&dir.join(EVENTS), &record.id, capacity, 0, false)
        .map_err(|e| Error::io("creating the event log", e))
}

/// [`create`], continuing the conversation in the tar `staged` (see
/// [`super::conversation`]): its log is the new session's, its history goes into
/// `record`, its agent's files into the agent's HOME, and sequences go on after
/// `floor`. What it began is removed when it fails.
pub(super) fn create_continuing(
    dir: &Path,
    record: &mut SessionRecord,
    capacity: usize,
    staged: &[u8],
    floor: u64,
) -> Result<EventLog> {
    make_dir(dir, &record.id)?;
    let made = (|| {
        let home = record.agent_home();
        let agent = AgentId::parse(&record.agent).ok_or_else(|| Error::UnsupportedAgent(record.agent.clone()))?;
        let folders = match &home {
            Some(home) => {
                let env = |name: &str| record.agent_env_var(name);
                super::conversation::agent_folders(agent, &env, home)
            }
            None => Vec::new(),
        };
        let earlier = super::conversation::unpack(staged, dir, home.as_deref(), agent, &folders)?;
        record.continue_from(earlier, floor);
        let bytes = serde_json::to_vec_pretty(&*record).expect("records serialize");
        write_record(dir, &bytes).map_err(|e| Error::io("saving the session", e))?;
        EventLog::open(&dir.join(EVENTS), &record.id, capacity, record.last_sequence, false)
            .map_err(|e| Error::io("opening the event log it brought", e))
    })();
    if made.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    made
}

/// Makes a new session's directory (mode 0700, its parents too).
fn make_dir(dir: &Path, id: &str) -> Result<()> {
    let context = || format!("creating the session directory {}", dir.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.parent().expect("under the root"))
        .map_err(|e| Error::io(context(), e))?;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::SessionAlreadyExists(id.to_string()));
        }
        Err(e) => return Err(Error::io(context(), e)),
    }
    Ok(())
}

/// Every session under `root`; one that does not load is logged and left alone.
pub(super) fn load_all(root: &Path, events_in_memory: usize) -> Result<Vec<Loaded>> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading {}", root.display()), e)),
    };
    let mut loaded = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        match load_one(&dir, events_in_memory) {
            Ok(Some(session)) => loaded.push(session),
            Ok(None) => {}
            Err(error) => tracing::error!(dir = %dir.display(), %error, "could not load a session; leaving it alone"),
        }
    }
    Ok(loaded)
}

/// A file of a session's directory that does not read as one.
fn unreadable(what: impl Into<String>, why: impl std::fmt::Display) -> Error {
    Error::io(what, std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string()))
}

/// The session in `dir`; `None` when there is no record (not a session's directory).
fn load_one(dir: &Path, events_in_memory: usize) -> Result<Option<Loaded>> {
    let bytes = match std::fs::read(dir.join(RECORD)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(RECORD, e)),
    };
    let record: SessionRecord = serde_json::from_slice(&bytes).map_err(|e| unreadable(RECORD, e))?;
    let named = dir.file_name().and_then(|n| n.to_str());
    if named != Some(record.id.as_str()) || validate_id(&record.id).is_err() {
        return Err(unreadable(RECORD, format!("it names session {:?}", record.id)));
    }
    // Saved by a node agent that kept git credentials on disk: the file is written
    // again without them at once (what was read still serves a clone left to make,
    // from memory, as for a session created in this run).
    if record.workspace.as_ref().and_then(|w| w.git.as_ref()).is_some_and(|g| g.credentials.is_some()) {
        let bytes = serde_json::to_vec_pretty(&record).expect("records serialize");
        write_record(dir, &bytes).map_err(|e| Error::io("removing git credentials from session.json", e))?;
        tracing::info!(session = %record.id, "removed the git credentials an earlier node agent saved");
    }
    // The SSH key of a clone the previous node agent was killed in (or stopped) during.
    if crate::workspace::remove_key_dirs(dir) {
        tracing::info!(session = %record.id, "removed the SSH key of a clone that was cut off");
    }
    let agent =
        AgentId::parse(&record.agent).ok_or_else(|| unreadable(RECORD, format!("unknown agent {:?}", record.agent)))?;
    let finished = record.state.is_final();
    // An ended session keeps nothing in memory: its events are read from the file.
    let capacity = if finished { 0 } else { events_in_memory };
    let log = EventLog::open(&dir.join(EVENTS), &record.id, capacity, record.last_sequence, finished)
        .map_err(|e| Error::io(EVENTS, e))?;
    Ok(Some((agent, dir.to_path_buf(), record, log)))
}
