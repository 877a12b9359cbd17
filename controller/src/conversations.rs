//! Conversations kept outside their sandbox, so that a Session outlives it: after
//! each turn the Session reconcile packs its conversation on the node agent (`GET
//! /v1/sessions/{id}/conversation`: the record's history, the event log, the agent
//! CLI's own files) and keeps it here, one file per Session by uid; when the session
//! is missing where it runs (its sandbox deleted and declared again, its folder
//! lost, a template's sandbox made anew), what is kept is staged there before the
//! session is created, which continues it.
//!
//! In the directory store this is `STATE/conversations/<uid>.tar`, outside every
//! sandbox folder (the state directory is masked in each) and readable by the
//! controller's user only. What a node agent packed came out of a sandbox: it is kept
//! as bytes, at most the node agent's limit, never unpacked or read here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// Where a store keeps its Sessions' conversations.
#[derive(Debug)]
pub struct Conversations {
    dir: PathBuf,
    /// The newest event sequence kept, by uid (read from `<uid>.through` beside the tar
    /// when not known yet: a restarted controller packs nothing again that is kept).
    kept: Mutex<HashMap<String, u64>>,
}

impl Conversations {
    pub fn new(dir: PathBuf) -> Conversations {
        Conversations { dir, kept: Mutex::new(HashMap::new()) }
    }

    /// Where they are kept (said in the `Durable` condition).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn path(&self, uid: &str) -> Option<PathBuf> {
        crate::restart::is_plain_uid(uid).then(|| self.dir.join(format!("{uid}.tar")))
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest sequence of Session `uid`'s that is kept (or was tried).
    pub fn kept_through(&self, uid: &str) -> Option<u64> {
        if let Some(through) = self.kept().get(uid).copied() {
            return Some(through);
        }
        // A few bytes, read once per Session and controller.
        let through = std::fs::read_to_string(self.path(uid)?.with_extension("through")).ok()?.trim().parse().ok()?;
        self.kept().insert(uid.to_string(), through);
        Some(through)
    }

    /// Keeps `tar`, Session `uid`'s conversation through event `sequence` (written
    /// whole, then renamed over the one before).
    pub async fn keep(&self, uid: &str, sequence: u64, tar: Vec<u8>) -> std::io::Result<()> {
        let path = self.path(uid).ok_or_else(|| std::io::Error::other(format!("{uid:?} is not a uid")))?;
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            write_private(&dir, &path, &tar)?;
            write_private(&dir, &path.with_extension("through"), sequence.to_string().as_bytes())
        })
        .await
        .map_err(std::io::Error::other)??;
        self.kept().insert(uid.to_string(), sequence);
        Ok(())
    }

    /// Notes that keeping Session `uid`'s conversation through `sequence` was tried
    /// (kept or not, it is tried again only past it).
    pub fn attempted(&self, uid: &str, sequence: u64) {
        let mut kept = self.kept();
        let newest = kept.entry(uid.to_string()).or_default();
        *newest = (*newest).max(sequence);
    }

    /// What is kept of Session `uid`, if anything.
    pub async fn kept_tar(&self, uid: &str) -> Option<Vec<u8>> {
        let path = self.path(uid)?;
        match tokio::task::spawn_blocking(move || std::fs::read(path)).await {
            Ok(Ok(tar)) => Some(tar),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Ok(Err(error)) => {
                tracing::error!(uid, %error, "cannot read a kept conversation");
                None
            }
            Err(_) => None,
        }
    }

    /// Forgets Session `uid`'s conversation (the Session is gone).
    pub async fn forget(&self, uid: &str) {
        self.kept().remove(uid);
        let Some(path) = self.path(uid) else { return };
        let _ = tokio::task::spawn_blocking(move || {
            for path in [path.with_extension("through"), path] {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot remove a kept conversation")
                    }
                    _ => {}
                }
            }
        })
        .await;
    }
}

/// Writes `path` in `dir` (made mode 0700) through a temporary file, mode 0600.
fn write_private(dir: &std::path::Path, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn kept_by_uid_replaced_whole_and_forgotten() {
        let state = tempfile::tempdir().unwrap();
        let kept = Conversations::new(state.path().join("conversations"));
        let uid = "7f1e2d3c-aaaa-4bbb-8ccc-ddddeeeeffff";
        assert_eq!(kept.kept_tar(uid).await, None);
        kept.keep(uid, 4, b"first".to_vec()).await.unwrap();
        kept.keep(uid, 9, b"second".to_vec()).await.unwrap();
        assert_eq!(kept.kept_tar(uid).await.as_deref(), Some(&b"second"[..]));
        assert_eq!(kept.kept_through(uid), Some(9));
        // A restarted controller knows what is kept without packing it again.
        let restarted = Conversations::new(state.path().join("conversations"));
        assert_eq!(restarted.kept_through(uid), Some(9));
        use std::os::unix::fs::PermissionsExt;
        let mode =
            std::fs::metadata(state.path().join(format!("conversations/{uid}.tar"))).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Never a path: a uid with a separator or dots names nothing.
        for bad in ["../escape", "a/b", "", ".."] {
            assert!(kept.keep(bad, 1, b"x".to_vec()).await.is_err(), "{bad:?}");
            assert_eq!(kept.kept_tar(bad).await, None);
        }
        assert!(!state.path().join("escape.tar").exists());
        kept.forget(uid).await;
        assert_eq!((kept.kept_tar(uid).await, kept.kept_through(uid)), (None, None));
        assert_eq!(std::fs::read_dir(state.path().join("conversations")).unwrap().count(), 0);
    }
}
