//! Watching the directory with `notify`. Events only wake the store up: the store then
//! rescans (cheaply: a file is read again only when its size, mtime or inode changed),
//! so a burst of events, a lost one, a renamed-in file or a whole tree replaced at once
//! all come out the same: the directory as it is now.

use std::path::{Path, PathBuf};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::{Error, Result};

/// Watches `dir` recursively, ignoring what happens under `ignore` (the state
/// directory: status writes must not wake the store). A wake-up channel of one slot is
/// enough: a full channel already means "rescan".
pub fn watch(dir: &Path, ignore: PathBuf, wake: mpsc::Sender<()>) -> Result<RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| {
        let relevant = match &event {
            Ok(event) => event.paths.is_empty() || event.paths.iter().any(|p| !p.starts_with(&ignore)),
            Err(_) => true, // overflow and the like: rescan
        };
        if relevant && !matches!(&event, Ok(e) if e.kind.is_access()) {
            let _ = wake.try_send(());
        }
    };
    let mut watcher = notify::recommended_watcher(handler)
        .map_err(|e| Error::Config(format!("watching {}: {e}", dir.display())))?;
    watcher
        .watch(dir, RecursiveMode::Recursive)
        .map_err(|e| Error::Config(format!("watching {}: {e}", dir.display())))?;
    Ok(watcher)
}
