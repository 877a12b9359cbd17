//! Changes under a path, as `GET /v1/fs/watch` streams them: the `notify` crate's
//! events (inotify on Linux) made into created / modified / removed / renamed, in the
//! order they happened.
//!
//! The watcher calls back on its own thread; events go to the client through a
//! bounded channel. When the client reads too slowly the channel fills, events are
//! counted instead of kept, and the client is told how many with a `gap` event as
//! soon as there is room: memory stays bounded and the loss is said, not hidden.
//! Dropping the [`FsWatch`] (the client went) stops the watcher.
//!
//! A watch stays in the directory watched. `notify` follows symlinks when it walks a
//! tree by default, which put `root/link -> /outside` under watch; it is told not to.
//! That is not enough alone: the kernel follows a symlink swapped in for a directory
//! between the walk and the watch, so every event is also checked by its real path
//! (its directory resolved) and dropped unless it lies beneath the watched directory.

use std::path::{Path, PathBuf};

use notify::event::{EventKind, ModifyKind, RenameMode};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::model::{FsEvent, FsEventType};

/// Events waiting for one client: a burst (an `npm install`, a `git checkout`) makes
/// thousands; 1,024 of about 200 bytes each is a few hundred KiB per watching client
/// at most, and past that the client hears of a gap.
const CHANNEL_CAPACITY: usize = 1024;

/// A running watch; its events arrive on `events` until it is dropped.
pub struct FsWatch {
    pub events: mpsc::Receiver<FsEvent>,
    // Held for its drop, which stops the watch.
    _watcher: notify::RecommendedWatcher,
}

/// Starts watching `real` (a canonical path inside a root). Blocks while a recursive
/// watch walks the tree: call it on a blocking thread.
pub fn start(real: PathBuf, recursive: bool) -> Result<FsWatch> {
    let (sender, events) = mpsc::channel(CHANNEL_CAPACITY);
    let mut forwarder = Forwarder::new(sender, real.clone());
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher = notify::RecommendedWatcher::new(move |event| forwarder.handle(event), config)
        .map_err(|e| Error::io("starting a file watcher", std::io::Error::other(e)))?;
    let mode = if recursive { RecursiveMode::Recursive } else { RecursiveMode::NonRecursive };
    watcher.watch(&real, mode).map_err(|e| match e.kind {
        notify::ErrorKind::PathNotFound => Error::NotFound(format!("{}: no such file or directory", real.display())),
        notify::ErrorKind::MaxFilesWatch => Error::LimitExceeded(format!(
            "watching {} needs more inotify watches than the system allows (fs.inotify.max_user_watches)",
            real.display()
        )),
        _ => Error::io(format!("watching {}", real.display()), std::io::Error::other(e)),
    })?;
    Ok(FsWatch { events, _watcher: watcher })
}

struct Forwarder {
    sender: mpsc::Sender<FsEvent>,
    /// The watched directory or file, canonical.
    real: PathBuf,
    /// `real`, as a `gap` event names it.
    watched: String,
    /// Events dropped since the client last had room.
    lost: u64,
    /// A rename's first half (its tracker and old path), held until its second half
    /// says where it went; alone it is a removal (moved out of the watch).
    pending_from: Option<(usize, PathBuf)>,
}

impl Forwarder {
    fn new(sender: mpsc::Sender<FsEvent>, real: PathBuf) -> Self {
        let watched = real.to_string_lossy().into_owned();
        Forwarder { sender, real, watched, lost: 0, pending_from: None }
    }

    fn handle(&mut self, event: notify::Result<notify::Event>) {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, watched = %self.watched, "file watcher error");
                return;
            }
        };
        if event.need_rescan() {
            // The kernel's queue overflowed: events were lost, how many is unknown.
            self.flush_pending();
            self.deliver(FsEvent { kind: FsEventType::Gap, path: self.watched.clone(), from: None, missed: Some(0) });
            return;
        }
        let Some(path) = event.paths.first().cloned() else { return };
        match event.kind {
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) => {
                self.flush_pending();
                match event.tracker() {
                    Some(tracker) => self.pending_from = Some((tracker, path)),
                    None => self.emit(FsEventType::Removed, &path, None),
                }
            }
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
                let matches = self.pending_from.as_ref().is_some_and(|(t, _)| Some(*t) == event.tracker());
                // The matching `Both` follows at once and says it all.
                if !matches {
                    self.flush_pending();
                    self.emit(FsEventType::Created, &path, None);
                }
            }
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                self.pending_from = None;
                let to = event.paths.get(1).cloned().unwrap_or_else(|| path.clone());
                self.emit(FsEventType::Renamed, &to, Some(&path));
            }
            EventKind::Create(_) => {
                self.flush_pending();
                self.emit(FsEventType::Created, &path, None);
            }
            EventKind::Modify(_) => {
                self.flush_pending();
                self.emit(FsEventType::Modified, &path, None);
            }
            EventKind::Remove(_) => {
                self.flush_pending();
                self.emit(FsEventType::Removed, &path, None);
            }
            EventKind::Access(_) | EventKind::Any | EventKind::Other => {}
        }
    }

    fn flush_pending(&mut self) {
        if let Some((_, from)) = self.pending_from.take() {
            self.emit(FsEventType::Removed, &from, None);
        }
    }

    fn emit(&mut self, kind: FsEventType, path: &Path, from: Option<&Path>) {
        // Beneath the watched directory only, by real path: a path elsewhere, or one
        // through a symlink that leads elsewhere, is not the client's to see.
        if !self.beneath(path) || from.is_some_and(|from| !self.beneath(from)) {
            return;
        }
        // The file API's own temporary files are not news; the rename that ends a
        // write is the creation or the change of the file written.
        if temporary(path).is_some() {
            return;
        }
        let (kind, from) = match from.and_then(temporary) {
            Some(TemporaryKind::New) => (FsEventType::Created, None),
            Some(TemporaryKind::Replacing) => (FsEventType::Modified, None),
            None => (kind, from),
        };
        let event = FsEvent {
            kind,
            path: path.to_string_lossy().into_owned(),
            from: from.map(|from| from.to_string_lossy().into_owned()),
            missed: None,
        };
        self.deliver(event);
    }

    /// Whether `path` really lies beneath the watched path: its directory resolved
    /// (symlinks followed; when it is gone, the nearest one that exists), its own name
    /// put back. The name itself is not followed: a symlink inside that leads out is
    /// reported as the symlink it is.
    fn beneath(&self, path: &Path) -> bool {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return path == self.real };
        if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return false;
        }
        // Its directory may be gone already (a tree removed at once): the nearest
        // folder on the way that still exists is resolved, and the rest taken by name.
        let mut existing = parent;
        loop {
            match std::fs::canonicalize(existing) {
                Ok(real) => {
                    let rest = path.strip_prefix(existing).unwrap_or(Path::new(name));
                    return real.join(rest).starts_with(&self.real);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => match existing.parent() {
                    Some(up) => existing = up,
                    None => return false,
                },
                Err(_) => return false,
            }
        }
    }

    /// Sends `event`, or counts it lost when the client is behind; a gap first when
    /// events were lost since the client last had room.
    fn deliver(&mut self, event: FsEvent) {
        use mpsc::error::TrySendError;
        if self.lost > 0 {
            let gap =
                FsEvent { kind: FsEventType::Gap, path: self.watched.clone(), from: None, missed: Some(self.lost) };
            match self.sender.try_send(gap) {
                Ok(()) => self.lost = 0,
                Err(TrySendError::Full(_)) => {
                    self.lost += 1;
                    return;
                }
                Err(TrySendError::Closed(_)) => return,
            }
        }
        match self.sender.try_send(event) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(_)) => self.lost += 1,
        }
    }
}

enum TemporaryKind {
    New,
    Replacing,
}

/// What a temporary file of the file API's writes is for; `None` for any other path.
fn temporary(path: &Path) -> Option<TemporaryKind> {
    let name = path.file_name()?.to_str()?;
    if !name.starts_with('.') {
        None
    } else if name.ends_with(super::TEMPORARY_NEW) {
        Some(TemporaryKind::New)
    } else if name.ends_with(super::TEMPORARY_REPLACING) {
        Some(TemporaryKind::Replacing)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, RemoveKind};

    use super::*;

    /// A forwarder watching a real directory (events are checked against the real
    /// paths under it), written `/r` in these tests, and what it sends.
    struct Scene {
        forwarder: Forwarder,
        events: mpsc::Receiver<FsEvent>,
        real: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl Scene {
        fn new(capacity: usize) -> Scene {
            let dir = tempfile::tempdir().unwrap();
            let real = std::fs::canonicalize(dir.path()).unwrap();
            let (sender, events) = mpsc::channel(capacity);
            Scene { forwarder: Forwarder::new(sender, real.clone()), events, real, _dir: dir }
        }

        fn handle(&mut self, kind: EventKind, paths: &[&str], tracker: Option<usize>) {
            let mut event = notify::Event::new(kind);
            for path in paths {
                let path = match path.strip_prefix("/r") {
                    Some(rest) => PathBuf::from(format!("{}{rest}", self.real.display())),
                    None => PathBuf::from(path),
                };
                event = event.add_path(path);
            }
            if let Some(tracker) = tracker {
                event = event.set_tracker(tracker);
            }
            self.forwarder.handle(Ok(event));
        }

        fn drain(&mut self) -> Vec<(FsEventType, String, Option<String>, Option<u64>)> {
            let real = self.real.to_string_lossy().into_owned();
            let shown = |path: String| path.replacen(&real, "/r", 1);
            std::iter::from_fn(|| self.events.try_recv().ok())
                .map(|e| (e.kind, shown(e.path), e.from.map(shown), e.missed))
                .collect()
        }
    }

    #[test]
    fn a_rename_is_one_event_and_a_move_out_is_a_removal() {
        let mut s = Scene::new(16);
        let name = |mode| EventKind::Modify(ModifyKind::Name(mode));
        s.handle(EventKind::Create(CreateKind::File), &["/r/a"], None);
        s.handle(name(RenameMode::From), &["/r/a"], Some(7));
        s.handle(name(RenameMode::To), &["/r/b"], Some(7));
        s.handle(name(RenameMode::Both), &["/r/a", "/r/b"], Some(7));
        s.handle(name(RenameMode::From), &["/r/b"], Some(8));
        s.handle(EventKind::Remove(RemoveKind::File), &["/r/c"], None);
        s.handle(EventKind::Create(CreateKind::File), &["/elsewhere/x"], None);
        assert_eq!(
            s.drain(),
            vec![
                (FsEventType::Created, "/r/a".into(), None, None),
                (FsEventType::Renamed, "/r/b".into(), Some("/r/a".into()), None),
                (FsEventType::Removed, "/r/b".into(), None, None),
                (FsEventType::Removed, "/r/c".into(), None, None),
            ]
        );
    }

    #[test]
    fn a_write_through_a_temporary_file_is_a_create_or_a_change_of_the_file_written() {
        let mut s = Scene::new(16);
        let name = |mode| EventKind::Modify(ModifyKind::Name(mode));
        let written = EventKind::Modify(ModifyKind::Data(DataChange::Content));
        for (temporary, tracker) in [("/r/.a.0123ab.agentplane-new", 1), ("/r/.a.4567cd.agentplane-part", 2)] {
            s.handle(EventKind::Create(CreateKind::File), &[temporary], None);
            s.handle(written, &[temporary], None);
            s.handle(name(RenameMode::From), &[temporary], Some(tracker));
            s.handle(name(RenameMode::To), &["/r/a"], Some(tracker));
            s.handle(name(RenameMode::Both), &[temporary, "/r/a"], Some(tracker));
        }
        // A failed write's temporary file goes unseen too.
        s.handle(EventKind::Create(CreateKind::File), &["/r/.b.89abef.agentplane-new"], None);
        s.handle(EventKind::Remove(RemoveKind::File), &["/r/.b.89abef.agentplane-new"], None);
        assert_eq!(
            s.drain(),
            vec![(FsEventType::Created, "/r/a".into(), None, None), (FsEventType::Modified, "/r/a".into(), None, None)]
        );
    }

    #[test]
    fn a_slow_client_is_told_of_a_gap_where_it_fell() {
        let mut s = Scene::new(2);
        let modified = EventKind::Modify(ModifyKind::Data(DataChange::Content));
        for path in ["/r/1", "/r/2", "/r/3", "/r/4", "/r/5"] {
            s.handle(modified, &[path], None);
        }
        assert_eq!(s.drain().len(), 2);
        s.handle(modified, &["/r/6"], None);
        assert_eq!(
            s.drain(),
            vec![(FsEventType::Gap, "/r".into(), None, Some(3)), (FsEventType::Modified, "/r/6".into(), None, None)]
        );
    }

    /// An event whose path leads out through a symlink (a watch the kernel put on a
    /// directory swapped for a symlink) is dropped; the symlink itself, and a path
    /// through a symlink that stays inside, are reported.
    #[test]
    fn an_event_through_a_symlink_out_of_the_watch_is_dropped() {
        let mut s = Scene::new(16);
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), s.real.join("out")).unwrap();
        std::fs::create_dir(s.real.join("sub")).unwrap();
        std::os::unix::fs::symlink("sub", s.real.join("in")).unwrap();
        let created = EventKind::Create(CreateKind::File);
        s.handle(created, &["/r/out/secret"], None);
        s.handle(created, &["/r/out/deeper/secret"], None);
        s.handle(EventKind::Modify(ModifyKind::Name(RenameMode::Both)), &["/r/out/secret", "/r/mine"], Some(3));
        s.handle(created, &["/r/gone/x"], None);
        s.handle(created, &["/r/out"], None);
        s.handle(created, &["/r/in/x"], None);
        assert_eq!(
            s.drain(),
            vec![
                // Its folder is gone already (a tree removed at once): taken by its name.
                (FsEventType::Created, "/r/gone/x".into(), None, None),
                (FsEventType::Created, "/r/out".into(), None, None),
                (FsEventType::Created, "/r/in/x".into(), None, None)
            ]
        );
        // Not a name with `..` in it, whose folder is gone.
        s.handle(created, &["/r/gone/../../x"], None);
        assert_eq!(s.drain(), vec![]);
    }
}
