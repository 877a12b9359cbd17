//! The file API's ground: the roots a node agent serves files from, how a client's
//! path becomes a place inside one of them, and the operations on it.
//!
//! Confinement does not rest on checking strings. Each root is opened once, at start,
//! as a directory handle ([`cap_std::fs::Dir`]), and every operation goes through it:
//! cap-std resolves a path beneath the handle (with `openat2(RESOLVE_BENEATH)` where
//! the kernel has it, a component-by-component walk otherwise) and refuses one that
//! leads out, through `..` or a symlink, whenever it is resolved, so a symlink swapped
//! in after a check is refused too. Client paths are cleaned lexically first
//! (`a/../b` is `b`, `..` past a root is refused) so that what a client names and
//! what is reported back are the same absolute path.
//!
//! Everything here blocks: callers run it on `spawn_blocking` or their own thread.
//! [`tar`] packs and unpacks trees through the same handles, [`watch`] reports changes;
//! [`tar_guard`] bounds what a tar stream from elsewhere can make its reader hold
//! (the CLI reads downloads through it too).

pub mod tar;
pub mod tar_guard;
pub mod watch;

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};

use crate::error::{Error, Result};
use crate::model::{FsEntry, FsEntryType};

/// The set-user-id and set-group-id bits, which the file API never sets: a set-id
/// file runs as its owner (the node agent's user) or group for whoever executes it,
/// so one made through the API would lend that identity to anyone who can run it,
/// not only to whom the API let write it. Dropped from a mode given (`PUT ?mode=`),
/// from the mode a rewrite keeps of the file it replaces (bits a program in the
/// sandbox set do not pass to bytes written through the API), and from tar entries.
pub const SET_ID_BITS: u32 = 0o6000;

/// The directories this node agent serves files from, opened at start.
#[derive(Debug)]
pub struct FsRoots {
    roots: Vec<Root>,
}

#[derive(Debug)]
struct Root {
    /// Canonical, absolute.
    path: PathBuf,
    dir: Dir,
}

/// A client's path, cleaned: a root and the components below it (none: the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsPath {
    root: usize,
    components: Vec<String>,
    /// Absolute: what the client is told.
    display: String,
}

impl FsPath {
    /// The absolute path, as a client addresses it.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Which root (an index into [`FsRoots::paths`]).
    pub fn root_index(&self) -> usize {
        self.root
    }

    /// True for a root itself.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// Below its root, `/`-joined (`.` for the root).
    fn relative(&self) -> PathBuf {
        if self.components.is_empty() { PathBuf::from(".") } else { self.components.iter().collect() }
    }

    fn child(&self, name: &str) -> FsPath {
        let mut components = self.components.clone();
        components.push(name.to_string());
        let display = if self.display.ends_with('/') {
            format!("{}{name}", self.display)
        } else {
            format!("{}/{name}", self.display)
        };
        FsPath { root: self.root, components, display }
    }
}

impl FsRoots {
    /// Opens `paths` (the working directory when there are none), each canonicalized.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        let paths = if paths.is_empty() {
            vec![std::env::current_dir().map_err(|e| Error::io("reading the working directory", e))?]
        } else {
            paths.to_vec()
        };
        let mut roots = Vec::with_capacity(paths.len());
        for path in paths {
            let canonical = std::fs::canonicalize(&path).map_err(|e| {
                Error::InvalidRequest(format!("the file root {} cannot be opened: {e}", path.display()))
            })?;
            let dir = Dir::open_ambient_dir(&canonical, cap_std::ambient_authority()).map_err(|e| {
                Error::InvalidRequest(format!("the file root {} is not an open-able directory: {e}", path.display()))
            })?;
            roots.push(Root { path: canonical, dir });
        }
        Ok(FsRoots { roots })
    }

    /// The roots, canonical.
    pub fn paths(&self) -> Vec<&Path> {
        self.roots.iter().map(|root| root.path.as_path()).collect()
    }

    /// A client's path as a place inside a root: relative paths are taken against the
    /// first root, absolute ones must lie inside one (the deepest that holds it).
    pub fn resolve(&self, path: &str) -> Result<FsPath> {
        if path.is_empty() {
            return Err(Error::InvalidRequest("the path is empty".into()));
        }
        if path.contains('\0') {
            return Err(Error::InvalidRequest("the path contains a NUL byte".into()));
        }
        let forbidden = || Error::ForbiddenPath(format!("{path:?} is outside the node agent's file roots"));
        if Path::new(path).is_absolute() {
            let cleaned = clean(Path::new(path), Vec::new(), false).ok_or_else(forbidden)?;
            let (index, root) = self
                .roots
                .iter()
                .enumerate()
                .filter(|(_, root)| starts_with(&cleaned, &root.path))
                .max_by_key(|(_, root)| root.path.components().count())
                .ok_or_else(forbidden)?;
            let skip = root.path.components().count() - 1;
            let components = cleaned[skip..].to_vec();
            Ok(self.place(index, components))
        } else {
            let components = clean(Path::new(path), Vec::new(), true).ok_or_else(forbidden)?;
            Ok(self.place(0, components))
        }
    }

    fn place(&self, root: usize, components: Vec<String>) -> FsPath {
        let mut display = self.roots[root].path.to_string_lossy().into_owned();
        for component in &components {
            if !display.ends_with('/') {
                display.push('/');
            }
            display.push_str(component);
        }
        FsPath { root, components, display }
    }

    fn root_dir(&self, path: &FsPath) -> &Dir {
        &self.roots[path.root].dir
    }

    /// The directory holding `path` and its last component; a root has none.
    pub fn parent(&self, path: &FsPath) -> Result<(Dir, String)> {
        let Some((name, parents)) = path.components.split_last() else {
            return Err(Error::ForbiddenPath(format!("{} is a file root: it cannot be changed", path.display)));
        };
        let root = self.root_dir(path);
        let dir =
            if parents.is_empty() { root.try_clone() } else { root.open_dir(parents.iter().collect::<PathBuf>()) };
        let dir = dir.map_err(|e| fs_error(e, path.display()))?;
        Ok((dir, name.clone()))
    }

    /// `path` as an open directory (following symlinks that stay inside the root).
    pub fn open_dir(&self, path: &FsPath) -> Result<Dir> {
        let root = self.root_dir(path);
        let dir = if path.is_root() { root.try_clone() } else { root.open_dir(path.relative()) };
        dir.map_err(|e| fs_error(e, path.display()))
    }

    /// `lstat`: a symlink is reported as one, with its target.
    pub fn stat(&self, path: &FsPath) -> Result<FsEntry> {
        if path.is_root() {
            let metadata = self.root_dir(path).dir_metadata().map_err(|e| fs_error(e, path.display()))?;
            let name = self.roots[path.root].path.file_name().map(|n| n.to_string_lossy().into_owned());
            return Ok(entry(name.unwrap_or_default(), path.display.clone(), &metadata, None));
        }
        let (dir, name) = self.parent(path)?;
        stat_in(&dir, &name, path)
    }

    /// A directory's entries, by name.
    pub fn entries(&self, path: &FsPath) -> Result<Vec<FsEntry>> {
        let dir = self.open_dir(path)?;
        let mut entries = Vec::new();
        for item in dir.entries().map_err(|e| fs_error(e, path.display()))? {
            let item = item.map_err(|e| fs_error(e, path.display()))?;
            let name = item.file_name().to_string_lossy().into_owned();
            // Gone between the listing and the look: not an error, just not there.
            match stat_in(&dir, &name, &path.child(&name)) {
                Ok(entry) => entries.push(entry),
                Err(Error::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// A regular file opened for reading (symlinks inside the root followed) and its size.
    pub fn open_file(&self, path: &FsPath) -> Result<(std::fs::File, Metadata)> {
        if path.is_root() {
            return Err(Error::IsADirectory(format!("{} is a directory", path.display)));
        }
        // Non-blocking: opening a FIFO for reading would otherwise wait for a writer
        // forever (it is refused below); a regular file ignores the flag.
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(nix::libc::O_NONBLOCK);
        let file = self.root_dir(path).open_with(path.relative(), &options).map_err(|e| fs_error(e, path.display()))?;
        let metadata = file.metadata().map_err(|e| fs_error(e, path.display()))?;
        if metadata.is_dir() {
            return Err(Error::IsADirectory(format!("{} is a directory", path.display)));
        }
        if !metadata.is_file() {
            return Err(Error::InvalidRequest(format!("{} is not a regular file", path.display)));
        }
        Ok((file.into_std(), metadata))
    }

    /// Where a write of `path` lands: its directory (created with `parents`) and name.
    /// A symlink at `path` is followed when it stays inside the root, so the file it
    /// names is replaced, not the link.
    pub fn write_target(&self, path: &FsPath, parents: bool) -> Result<(Dir, String, FsPath)> {
        if path.is_root() {
            return Err(Error::IsADirectory(format!("{} is a directory", path.display)));
        }
        let root = self.root_dir(path);
        let mut path = path.clone();
        if let Ok(metadata) = root.symlink_metadata(path.relative())
            && metadata.file_type().is_symlink()
        {
            let real = root.canonicalize(path.relative()).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => {
                    Error::NotFound(format!("{} is a symlink to nothing: write its target instead", path.display))
                }
                _ => fs_error(e, path.display()),
            })?;
            let components = clean(&real, Vec::new(), true)
                .ok_or_else(|| Error::ForbiddenPath(format!("{} leads outside its file root", path.display)))?;
            path = self.place(path.root, components);
            if path.is_root() {
                return Err(Error::IsADirectory(format!("{} is a directory", path.display)));
            }
        }
        if parents && path.components.len() > 1 {
            let parent: PathBuf = path.components[..path.components.len() - 1].iter().collect();
            if let Err(error) = root.create_dir_all(&parent) {
                // mkdir says only "exists" for a symlink in the way; the lookup says
                // where it leads (out of the root: refused).
                let error = root.metadata(&parent).err().unwrap_or(error);
                return Err(fs_error(error, path.display()));
            }
        }
        let (dir, name) = self.parent(&path)?;
        Ok((dir, name, path))
    }

    /// Creates a directory and its missing parents; `Ok(false)` when it already was one.
    pub fn mkdir(&self, path: &FsPath) -> Result<(bool, FsEntry)> {
        let root = self.root_dir(path);
        if !path.is_root() {
            match root.metadata(path.relative()) {
                Ok(metadata) if metadata.is_dir() => {}
                Ok(_) => return Err(Error::Conflict(format!("{} exists and is not a directory", path.display))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    root.create_dir_all(path.relative()).map_err(|e| fs_error(e, path.display()))?;
                    return Ok((true, self.stat(path)?));
                }
                Err(e) => return Err(fs_error(e, path.display())),
            }
        }
        Ok((false, self.stat(path)?))
    }

    /// Renames `from` to `to`, refusing to replace what is there unless `overwrite`.
    pub fn rename(&self, from: &FsPath, to: &FsPath, overwrite: bool) -> Result<FsEntry> {
        let (from_dir, from_name) = self.parent(from)?;
        let (to_dir, to_name) = self.parent(to)?;
        from_dir.symlink_metadata(&from_name).map_err(|e| fs_error(e, from.display()))?;
        if !overwrite {
            // Checked, then renamed: another writer in between is replaced. rename(2)
            // has no portable "do not replace"; the window is one system call wide.
            match to_dir.symlink_metadata(&to_name) {
                Ok(_) => return Err(Error::Conflict(format!("{} exists (set overwrite to replace it)", to.display))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(fs_error(e, to.display())),
            }
        }
        from_dir.rename(&from_name, &to_dir, &to_name).map_err(|e| match e.raw_os_error() {
            Some(code) if code == nix::libc::EXDEV => {
                Error::InvalidRequest(format!("{} and {} are on different filesystems", from.display, to.display))
            }
            Some(code) if code == nix::libc::EINVAL => {
                Error::InvalidRequest(format!("{} cannot be moved into itself", from.display))
            }
            _ => fs_error(e, to.display()),
        })?;
        stat_in(&to_dir, &to_name, to)
    }

    /// Deletes a file, a symlink (never followed) or a directory (with everything in
    /// it when `recursive`). A root itself is refused.
    pub fn delete(&self, path: &FsPath, recursive: bool) -> Result<()> {
        let (dir, name) = self.parent(path)?;
        let metadata = dir.symlink_metadata(&name).map_err(|e| fs_error(e, path.display()))?;
        let removed = if metadata.is_dir() {
            if recursive { dir.remove_dir_all(&name) } else { dir.remove_dir(&name) }
        } else {
            dir.remove_file_or_symlink(&name)
        };
        removed.map_err(|e| fs_error(e, path.display()))
    }

    /// The real path of a directory or file to watch, confined to its root at the time
    /// of the call (the watcher itself is path-based).
    pub fn watch_path(&self, path: &FsPath) -> Result<PathBuf> {
        let root = &self.roots[path.root];
        let real = root.dir.canonicalize(path.relative()).map_err(|e| fs_error(e, path.display()))?;
        // Through `components`: the root itself comes back as `.`, which would
        // otherwise name every event `/root/./x`.
        Ok(root.path.join(real).components().collect())
    }
}

/// `lstat` of `name` in `dir`, as an entry at `path`.
fn stat_in(dir: &Dir, name: &str, path: &FsPath) -> Result<FsEntry> {
    let metadata = dir.symlink_metadata(name).map_err(|e| fs_error(e, path.display()))?;
    let target = if metadata.file_type().is_symlink() {
        let target = dir.read_link_contents(name).map_err(|e| fs_error(e, path.display()))?;
        Some(target.to_string_lossy().into_owned())
    } else {
        None
    };
    Ok(entry(name.to_string(), path.display.clone(), &metadata, target))
}

fn entry(name: String, path: String, metadata: &Metadata, target: Option<String>) -> FsEntry {
    let file_type = metadata.file_type();
    let kind = if file_type.is_symlink() {
        FsEntryType::Symlink
    } else if file_type.is_dir() {
        FsEntryType::Directory
    } else if file_type.is_file() {
        FsEntryType::File
    } else {
        FsEntryType::Other
    };
    FsEntry {
        name,
        path,
        kind,
        size: metadata.len(),
        mode: metadata.mode() & 0o7777,
        mtime: rfc3339(metadata.mtime(), metadata.mtime_nsec()),
        target,
    }
}

/// A modification time as RFC 3339 (UTC).
pub fn rfc3339(seconds: i64, nanoseconds: i64) -> String {
    let nanos = i128::from(seconds) * 1_000_000_000 + i128::from(nanoseconds);
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// `path` cleaned lexically into components below `/` (or below a root, for a
/// relative path with `confined`): `.` dropped, `..` taking one off. `None` when a
/// `..` climbs past the start of a relative path.
fn clean(path: &Path, mut components: Vec<String>, confined: bool) -> Option<Vec<String>> {
    for component in path.components() {
        match component {
            Component::Normal(name) => components.push(name.to_string_lossy().into_owned()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                // `/..` is `/`; `..` above a root is an escape.
                if components.pop().is_none() && confined {
                    return None;
                }
            }
        }
    }
    Some(components)
}

/// Whether the cleaned absolute `components` lie at or below `root`.
fn starts_with(components: &[String], root: &Path) -> bool {
    let root: Vec<String> = root
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    components.len() >= root.len() && components[..root.len()] == root[..]
}

/// Whether cap-std refused `error` for leading out of the root (it says so with a
/// permission error of its own, not the kernel's).
fn is_escape(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::PermissionDenied && error.raw_os_error().is_none()
}

/// A failed file operation on `path`, as the error a client is told.
pub fn fs_error(error: io::Error, path: &str) -> Error {
    use nix::libc;
    if is_escape(&error) {
        return Error::ForbiddenPath(format!("{path} leads outside the node agent's file roots"));
    }
    match error.raw_os_error() {
        Some(libc::ENOENT) => Error::NotFound(format!("{path}: no such file or directory")),
        Some(libc::ENOTDIR) => Error::NotADirectory(format!("{path}: a component of it is not a directory")),
        Some(libc::EISDIR) => Error::IsADirectory(format!("{path} is a directory")),
        Some(libc::ENOTEMPTY) => {
            Error::DirectoryNotEmpty(format!("{path} is a directory that is not empty (delete it with recursive=true)"))
        }
        Some(libc::EEXIST) => Error::Conflict(format!("{path} exists")),
        Some(libc::ELOOP) => Error::ForbiddenPath(format!("{path} goes through a symlink")),
        Some(libc::EACCES) | Some(libc::EPERM) => Error::Forbidden(format!("{path}: permission denied")),
        Some(libc::ENAMETOOLONG) => Error::InvalidRequest(format!("{path}: name too long")),
        _ => match error.kind() {
            io::ErrorKind::NotFound => Error::NotFound(format!("{path}: no such file or directory")),
            _ => Error::io(path.to_string(), error),
        },
    }
}

/// Options to open a file without following a symlink at its last component.
fn nofollow(mut options: OpenOptions) -> OpenOptions {
    options.follow(FollowSymlinks::No);
    options
}

/// The ending of a temporary file that will become a new file.
pub const TEMPORARY_NEW: &str = ".agentplane-new";
/// The ending of a temporary file that will replace a file.
pub const TEMPORARY_REPLACING: &str = ".agentplane-part";

/// Creates a new file for writing in `dir` under a fresh hidden name next to `name`
/// (where a later rename makes it `name` atomically); answers the file and the name.
/// The name's ending says whether `name` is there already ([`TEMPORARY_REPLACING`]) or
/// not ([`TEMPORARY_NEW`]), so a watch can tell the rename that ends a write as the
/// creation or change of `name` it is (see [`watch`]).
pub fn create_temporary(dir: &Dir, name: &str) -> io::Result<(std::fs::File, String)> {
    let ending = if dir.symlink_metadata(name).is_ok() { TEMPORARY_REPLACING } else { TEMPORARY_NEW };
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    let options = nofollow(options);
    for _ in 0..8 {
        // Short enough for a name of 255 bytes plus the suffix to stay a valid name.
        let stem: String = name.chars().take(200).collect();
        let temporary = format!(".{stem}.{}{ending}", crate::random::hex(6));
        match dir.open_with(&temporary, &options) {
            Ok(file) => return Ok((file.into_std(), temporary)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name"))
}

/// Removes a temporary file left by a failed write; nothing to do if it is gone.
pub fn remove_temporary(dir: &Dir, name: &str) {
    if let Err(error) = dir.remove_file(name)
        && error.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(%error, name, "could not remove a temporary file");
    }
}

/// Opens a directory in `dir` by one name, refusing a symlink there.
fn open_dir_nofollow(dir: &Dir, name: &str) -> io::Result<Dir> {
    dir.open_dir_nofollow(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_and_confined() {
        let root = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let roots = FsRoots::open(&[root.path().to_path_buf(), other.path().to_path_buf()]).unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let resolved = roots.resolve("a/./b/../c").unwrap();
        assert_eq!(resolved.components, vec!["a", "c"]);
        assert_eq!(resolved.display(), format!("{}/a/c", base.display()));
        assert!(roots.resolve(".").unwrap().is_root());
        assert!(matches!(roots.resolve("../x"), Err(Error::ForbiddenPath(_))));
        assert!(matches!(roots.resolve("a/../../x"), Err(Error::ForbiddenPath(_))));
        assert!(matches!(roots.resolve("/etc/passwd"), Err(Error::ForbiddenPath(_))));
        let in_other = format!("{}/x/y", std::fs::canonicalize(other.path()).unwrap().display());
        let resolved = roots.resolve(&in_other).unwrap();
        assert_eq!((resolved.root, resolved.components.clone()), (1, vec!["x".to_string(), "y".to_string()]));
        // Out of a root by `..` in an absolute path.
        assert!(matches!(roots.resolve(&format!("{}/../x", base.display())), Err(Error::ForbiddenPath(_))));
        assert!(matches!(roots.resolve(""), Err(Error::InvalidRequest(_))));
    }
}
