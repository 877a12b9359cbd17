//! Writing the user's files of a watched directory safely: one edit at a time, only
//! over the file that was read, never half of one, and through symlinks.
//!
//! Every verb that edits a user's file (`send`, `reply`, `delete`, `apply`) holds the
//! edit lock of the state directory (`edit.lock`, an `flock`, not the `lock` that
//! `agentplane up` holds) from reading the file to replacing it, so that two edits
//! never start from the same version and one of them lost. An editor or a script that
//! does not take the lock can still write in between: before replacing a file the edit
//! checks that it is still the file it read (same device and inode) with the same
//! bytes, else it reports `Changed` and the verb starts over from the new version.
//!
//! A file that is a symlink is edited through to its target: the new version is
//! written beside the target and renamed over it, so the link stays a link.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentplane_controller::dir::state::StateDir;
use anyhow::{Context, bail};
use nix::fcntl::{Flock, FlockArg};

/// The lock file in the state directory.
pub const EDIT_LOCK: &str = "edit.lock";
/// How long an edit waits for another one on the same directory: edits take
/// milliseconds, so this much means one is stuck (a stopped process holding it).
const LOCK_PATIENCE: Duration = Duration::from_secs(30);
/// An edit started again when its file changed under it: this many times, not
/// forever, when something keeps writing the file.
pub const EDIT_ATTEMPTS: usize = 10;
/// More links in a row than this is a loop (Linux's own limit is 40).
const MAX_LINKS: usize = 40;

/// Held while a verb edits files of a watched directory; released when dropped.
pub struct EditLock {
    _lock: Flock<fs::File>,
}

/// Takes the edit lock of `state`, waiting (off the async runtime) while another
/// verb holds it.
pub async fn lock(state: &StateDir) -> anyhow::Result<EditLock> {
    state.create().map_err(|e| anyhow::anyhow!("{e}"))?;
    let path = state.root().join(EDIT_LOCK);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => return Ok(EditLock { _lock: lock }),
        Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
        Err((_, errno)) => bail!("locking {}: {errno}", path.display()),
    };
    // A blocking `flock` cannot be cancelled: on timeout its thread is left waiting,
    // and ends with the process.
    let waiting = tokio::task::spawn_blocking(move || Flock::lock(file, FlockArg::LockExclusive));
    match tokio::time::timeout(LOCK_PATIENCE, waiting).await {
        Ok(Ok(Ok(lock))) => Ok(EditLock { _lock: lock }),
        Ok(Ok(Err((_, errno)))) => bail!("locking {}: {errno}", path.display()),
        Ok(Err(join)) => bail!("locking {}: {join}", path.display()),
        Err(_) => bail!(
            "another agentplane has been editing these files for {}s (it holds {}): try again when it is done",
            LOCK_PATIENCE.as_secs(),
            path.display()
        ),
    }
}

/// Which file a path led to when it was read: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

/// Reads a file, and which file it was, from one open (so the two agree).
pub fn read(path: &Path) -> std::io::Result<(FileId, String)> {
    let mut file = fs::File::open(path)?;
    let meta = file.metadata()?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok((FileId { dev: meta.dev(), ino: meta.ino() }, text))
}

/// What happened to an edit.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    Written,
    /// The file is no longer what was read: nothing was written; read it again.
    Changed,
}

/// Replaces the file at `path` (through symlinks) with `body`, if it is still the file
/// `id` holding `text`. Call with the edit lock held.
pub fn replace(path: &Path, id: FileId, text: &str, body: &[u8]) -> anyhow::Result<Outcome> {
    let target = resolve(path)?;
    if !unchanged(&target, id, text)? {
        return Ok(Outcome::Changed);
    }
    write_atomically(&target, body)?;
    Ok(Outcome::Written)
}

/// Removes the file at `path` (a symlink itself, not its target: the declaration leaves
/// the watched directory, the file it pointed to is not this directory's to delete),
/// if it is still the file `id` holding `text`. Call with the edit lock held.
pub fn remove(path: &Path, id: FileId, text: &str) -> anyhow::Result<Outcome> {
    let target = resolve(path)?;
    if !unchanged(&target, id, text)? {
        return Ok(Outcome::Changed);
    }
    fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    Ok(Outcome::Written)
}

fn unchanged(target: &Path, id: FileId, text: &str) -> anyhow::Result<bool> {
    match read(target) {
        Ok((now, now_text)) => Ok(now == id && now_text == text),
        // Gone, or no longer text: changed, and the next read says how.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData) => Ok(false),
        Err(e) => Err(e).with_context(|| format!("reading {}", target.display())),
    }
}

/// The file a path names once every symlink in its last component is followed; the
/// path itself when it is not a link (or does not exist yet).
pub fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link =
                    fs::read_link(&current).with_context(|| format!("reading the link {}", current.display()))?;
                current = match current.parent() {
                    Some(parent) if link.is_relative() => parent.join(link),
                    _ => link,
                };
            }
            _ => return Ok(current),
        }
    }
    bail!("{}: too many levels of symbolic links", path.display())
}

/// Replaces a file at once, following symlinks to the file they name: written beside
/// that file under a hidden name (the store skips those), then renamed over it,
/// keeping its permissions.
pub fn write_atomically(path: &Path, body: &[u8]) -> anyhow::Result<()> {
    let path = resolve(path)?;
    let dir = path.parent().context("a file to write has a directory")?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = path.file_name().context("a file name")?.to_string_lossy();
    let aside = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = fs::File::create(&aside)?;
        file.write_all(body)?;
        file.sync_all()?;
        if let Ok(meta) = fs::metadata(&path) {
            fs::set_permissions(&aside, meta.permissions())?;
        }
        fs::rename(&aside, &path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&aside);
    }
    result.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_since_it_was_read_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        fs::write(&path, "one\n").unwrap();
        let (id, text) = read(&path).unwrap();

        // Another writer's bytes, in place.
        fs::write(&path, "two\n").unwrap();
        assert_eq!(replace(&path, id, &text, b"mine\n").unwrap(), Outcome::Changed);
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");

        // The same bytes in another file renamed over it.
        let (id, text) = read(&path).unwrap();
        fs::write(dir.path().join("b"), "two\n").unwrap();
        fs::rename(dir.path().join("b"), &path).unwrap();
        assert_eq!(replace(&path, id, &text, b"mine\n").unwrap(), Outcome::Changed);
        assert_eq!(remove(&path, id, &text).unwrap(), Outcome::Changed);
        assert!(path.exists());

        // Gone.
        let (id, text) = read(&path).unwrap();
        fs::remove_file(&path).unwrap();
        assert_eq!(replace(&path, id, &text, b"mine\n").unwrap(), Outcome::Changed);
        assert!(!path.exists());

        fs::write(&path, "three\n").unwrap();
        let (id, text) = read(&path).unwrap();
        assert_eq!(replace(&path, id, &text, b"mine\n").unwrap(), Outcome::Written);
        assert_eq!(fs::read_to_string(&path).unwrap(), "mine\n");
    }

    #[test]
    fn links_are_followed_to_the_file_they_name() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        fs::write(dir.path().join("real/a.yaml"), "one\n").unwrap();
        std::os::unix::fs::symlink("real/a.yaml", dir.path().join("link1")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("link1"), dir.path().join("link2")).unwrap();
        let link = dir.path().join("link2");
        assert_eq!(resolve(&link).unwrap(), dir.path().join("real/a.yaml"));

        let (id, text) = read(&link).unwrap();
        assert_eq!(replace(&link, id, &text, b"two\n").unwrap(), Outcome::Written);
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(fs::symlink_metadata(dir.path().join("link1")).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(dir.path().join("real/a.yaml")).unwrap(), "two\n");

        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        assert!(resolve(&dir.path().join("loop")).is_err());
        assert!(write_atomically(&dir.path().join("loop"), b"x").is_err());
    }

    #[tokio::test]
    async fn the_lock_is_held_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().join(".agentplane"));
        let held = lock(&state).await.unwrap();
        let file = fs::OpenOptions::new().write(true).open(state.root().join(EDIT_LOCK)).unwrap();
        let Err((file, _)) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else { panic!("the lock is held") };
        drop(held);
        assert!(Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok(), "released");
    }
}
