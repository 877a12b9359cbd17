//! The walk of the watched folder: which files are resource files (each real file
//! once, whatever symlinks lead to it), which folders are watched, and what is never
//! read because a sandbox can write it; and the reading of one resource file, bounded
//! and without blocking.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::FileId;
use crate::dir::sandbox_writes::{SandboxWrites, Writable};

/// Larger than any sensible file of resources: a log or a dump saved as `.yaml` by
/// mistake is reported, not read into memory.
pub(super) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Why a resource file was not read: said in the file's error, which the CLI lists.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    #[error("cannot read it: {0}")]
    Io(#[source] std::io::Error),
    #[error("it is not a regular file: only regular files are read")]
    NotRegular,
    #[error("it holds more than a resource file may hold ({MAX_FILE_BYTES} bytes)")]
    TooLarge,
    #[error("it is not UTF-8 text")]
    NotUtf8,
}

/// Deeper than any sensible repository. Loops are stopped by walking each real
/// directory once; this bounds a tree that is merely very deep.
const MAX_DEPTH: usize = 32;

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) len: u64,
    pub(super) mtime: i64,
    pub(super) mtime_nsec: i64,
    pub(super) ctime: i64,
    pub(super) ctime_nsec: i64,
}

impl Stamp {
    pub(super) fn of(meta: &fs::Metadata) -> Stamp {
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

/// The files the store reads under `dir` (see `walk`), by path relative to `dir`: what
/// a tool editing the directory must look at to see what the store will see.
pub fn yaml_files(dir: &Path, skip: &Path) -> BTreeMap<String, PathBuf> {
    let writes = SandboxWrites::load(skip);
    walk(dir, skip, &writes).files.into_iter().map(|(relative, (path, _))| (relative, path)).collect()
}

/// What one walk of the directory found.
#[derive(Default)]
pub(super) struct Walked {
    /// The resource files, by path relative to the directory, each real file once.
    pub(super) files: BTreeMap<String, (PathBuf, Stamp)>,
    /// Every directory walked, once: the path it was walked by and its canonical path.
    pub(super) dirs: BTreeMap<FileId, (PathBuf, PathBuf)>,
    /// Symlinks that lead to a directory already walked (a loop, or an alias), with the
    /// path that directory was walked by: skipped.
    pub(super) skipped: BTreeMap<PathBuf, PathBuf>,
    /// Folders and files skipped because a sandbox can write them (or wrote them), with
    /// the folder given to the sandbox that covers them (or none: owned by a sandbox).
    pub(super) sandbox_written: BTreeMap<PathBuf, Option<PathBuf>>,
    /// The identities of the folders given to sandboxes that the walk came across.
    pub(super) writable_seen: HashSet<FileId>,
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
pub(super) fn walk(dir: &Path, skip: &Path, writes: &SandboxWrites) -> Walked {
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
pub(super) fn read_resource_file(path: &Path) -> std::result::Result<String, ReadError> {
    use crate::dir::read::{self, Refused};
    let file = read::open(path, true).map_err(ReadError::Io)?;
    let bytes = read::regular_bytes(&file, MAX_FILE_BYTES).map_err(|refused| match refused {
        Refused::Io(e) => ReadError::Io(e),
        Refused::NotRegular(_) => ReadError::NotRegular,
        Refused::TooLarge => ReadError::TooLarge,
    })?;
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        assert_eq!(read.unwrap_err().to_string(), "it is not a regular file: only regular files are read");
        let big = tmp.path().join("big.yaml");
        fs::write(&big, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(read_resource_file(&big).unwrap_err().to_string().starts_with("it holds more than"));
        fs::write(&big, "a: 1\n").unwrap();
        assert_eq!(read_resource_file(&big).unwrap(), "a: 1\n");
    }
}
