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

use std::collections::BTreeSet;
use std::path::PathBuf;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::{Error, Result};

pub struct DirWatcher {
    watcher: RecommendedWatcher,
    watched: BTreeSet<PathBuf>,
}

impl DirWatcher {
    /// A watcher that wakes the store through `wake`. One slot is enough: a full
    /// channel already means "rescan".
    pub fn new(wake: mpsc::Sender<()>) -> Result<Self> {
        let handler = move |event: notify::Result<notify::Event>| {
            // Overflow and the like are errors: they mean "rescan" too.
            if !matches!(&event, Ok(e) if e.kind.is_access()) {
                let _ = wake.try_send(());
            }
        };
        let watcher =
            notify::recommended_watcher(handler).map_err(|e| Error::Config(format!("watching files: {e}")))?;
        Ok(DirWatcher { watcher, watched: BTreeSet::new() })
    }

    /// Watches exactly `dirs` from now on. Returns whether a directory was added: what
    /// changed in it between the walk that found it and now raised no event, so the
    /// caller walks again.
    pub fn sync(&mut self, dirs: BTreeSet<PathBuf>) -> Result<bool> {
        for gone in self.watched.difference(&dirs) {
            let _ = self.watcher.unwatch(gone);
        }
        let mut failed = None;
        let mut added = false;
        let mut watched = BTreeSet::new();
        for dir in dirs {
            if self.watched.contains(&dir) {
                watched.insert(dir);
                continue;
            }
            match self.watcher.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    watched.insert(dir);
                    added = true;
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
