//! Watching the directory with `notify`. Events only wake the store up: the store then
//! rescans (cheaply: a file is read again only when its size, mtime or inode changed),
//! so a burst of events, a lost one, a renamed-in file or a whole tree replaced at once
//! all come out the same: the directory as it is now.
//!
//! Each directory the rescan walks is watched on its own (not recursively from the
//! top), so the state directory and other hidden ones (`.git`) are not watched at all:
//! the kernel does not even queue an event for a status write. After every rescan the
//! set of watched directories follows the tree; a directory created between two scans
//! wakes its parent's watch, and the rescan that follows finds what is inside it.
//!
//! Watches are kept by what the kernel keys them by: the directory's (device, inode).
//! Two paths to one directory (a folder and a symlinked alias of it) share one inotify
//! watch descriptor, so each real directory is watched once, at its canonical path (no
//! symlink in it), and unwatched only when no path to it is walked any more. Watching a
//! symlink's path instead would let its removal take the real folder's watch with it:
//! `notify` drops the watch of a path whose deletion it sees.

use std::collections::BTreeMap;
use std::path::PathBuf;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::file_id::FileId;
use crate::{Error, Result};

pub struct DirWatcher {
    watcher: RecommendedWatcher,
    /// Each watched directory, at the canonical path it is watched by.
    watched: BTreeMap<FileId, PathBuf>,
}

impl DirWatcher {
    /// A watcher that wakes the store through `wake`. One slot is enough: a full
    /// channel already means "rescan". Every event is also shown to `seen` (on the
    /// watcher's thread: it must not block), which looks for the files resources read.
    pub fn new(wake: mpsc::Sender<()>, seen: impl Fn(&notify::Event) + Send + 'static) -> Result<Self> {
        let handler = move |event: notify::Result<notify::Event>| {
            // Overflow and the like are errors: they mean "rescan" too.
            if !matches!(&event, Ok(e) if e.kind.is_access()) {
                let _ = wake.try_send(());
            }
            if let Ok(event) = &event {
                seen(event);
            }
        };
        let watcher =
            notify::recommended_watcher(handler).map_err(|e| Error::Config(format!("watching files: {e}")))?;
        Ok(DirWatcher { watcher, watched: BTreeMap::new() })
    }

    /// Watches exactly `dirs` (canonical paths, by directory) from now on. Returns the
    /// directories added: what changed in them between the walk that found them and now
    /// raised no event, so the caller walks again (and looks again at what reads files
    /// there).
    pub fn sync(&mut self, dirs: BTreeMap<FileId, PathBuf>) -> Result<Vec<PathBuf>> {
        // Gone, or moved (a renamed folder): unwatched before anything is watched, since
        // the old and the new path of one directory are one kernel watch.
        for (id, path) in &self.watched {
            if dirs.get(id) != Some(path) {
                let _ = self.watcher.unwatch(path);
            }
        }
        let mut failed = None;
        let mut added = Vec::new();
        let mut watched = BTreeMap::new();
        for (id, dir) in dirs {
            if self.watched.get(&id) == Some(&dir) {
                watched.insert(id, dir);
                continue;
            }
            match self.watcher.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    added.push(dir.clone());
                    watched.insert(id, dir);
                }
                // Removed since the walk: the next rescan drops it anyway.
                Err(e) if dir.exists() => failed = Some(Error::Config(format!("watching {}: {e}", dir.display()))),
                Err(_) => {}
            }
        }
        self.watched = watched;
        failed.map_or(Ok(added), Err)
    }
}
