//! Restarting a Process (or Session) on request, as `kubectl rollout restart` does for
//! a Deployment: a person asks once (`agentplane restart process/web`), the controller
//! honours the request once, and records that it did.
//!
//! The request is the annotation `agentplane.dev/restartedAt` (when it was asked, in
//! RFC 3339) on the resource. In a cluster the CLI patches it onto the object. In the
//! directory store the user's file is the declaration and stays untouched (`git
//! status` stays clean): the CLI writes the request beside the status, in
//! `STATE/restarts/<uid>`, and the store overlays it on the object it hands the
//! reconcile. Keyed by uid, a request never outlives its resource's identity: a
//! resource deleted and declared again is another one, with no request.
//!
//! A Process honours it by counting the request as part of what its run was started
//! from (`spec_hash`): a new request is a new run, with the restart back-off reset,
//! exactly as a changed command is. `status.specHash` then records that it was
//! honoured, so a resync, a controller restart or the same request seen again starts
//! nothing more.
//!
//! A Session honours it when its node-agent session has failed: the node agent starts
//! it again in the same conversation (`POST /v1/sessions/{id}/restart`, resumed by the
//! agent's own id, its queued messages kept). Either way the request is recorded in
//! `status.restartedAt`, so it never applies to a failure that comes later.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::{Error, Result};

/// Whether `uid` may name a file of the state directory: a uid is a UUID, and
/// anything else could name a path elsewhere.
pub fn is_plain_uid(uid: &str) -> bool {
    !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The annotation that asks for a restart; its value is when it was asked.
pub const RESTARTED_AT: &str = "agentplane.dev/restartedAt";
/// Longest request value taken: a timestamp is 35 bytes; anything far longer was not
/// written by `agentplane restart`.
const MAX_REQUEST_BYTES: u64 = 256;

/// The restart a resource asks for, if any.
pub fn requested(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations.as_ref()?.get(RESTARTED_AT).map(String::as_str).filter(|v| !v.is_empty())
}

/// For kube-runtime's `predicate_filter`: a changed request is a change worth a
/// reconcile, though it changes neither generation nor finalizers.
pub fn predicate<K: kube::Resource>(object: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let value = requested(object.meta())?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    Some(hasher.finish())
}

/// The annotation that asks for a managed sandbox to be suspended now, as if idle
/// (`agentplane suspend sandbox/NAME`); its value is when it was asked. A request made
/// before the node agent's current start has been honoured (or overtaken by a wake).
pub const SUSPEND_REQUESTED_AT: &str = "agentplane.dev/suspendRequestedAt";

/// The annotation that asks for a Sandbox the store made from a template (no file
/// declares it) to be deleted (`agentplane delete sandbox/NAME`); its value is when.
/// What holds it claims another, and a Session on it goes on there.
pub const DELETE_REQUESTED_AT: &str = "agentplane.dev/deleteRequestedAt";

/// The restart requests of a directory store: `STATE/restarts/<uid>`, each holding
/// the annotation's value (and, the same way, its suspend requests in
/// `STATE/suspends/<uid>`).
#[derive(Debug, Clone)]
pub struct Requests {
    dir: PathBuf,
    annotation: &'static str,
}

impl Requests {
    pub fn new(state_root: &Path) -> Requests {
        Requests { dir: state_root.join("restarts"), annotation: RESTARTED_AT }
    }

    /// The requests to suspend a managed sandbox now.
    pub fn suspends(state_root: &Path) -> Requests {
        Requests { dir: state_root.join("suspends"), annotation: SUSPEND_REQUESTED_AT }
    }

    /// The requests to delete a sandbox the store made.
    pub fn deletes(state_root: &Path) -> Requests {
        Requests { dir: state_root.join("deletes"), annotation: DELETE_REQUESTED_AT }
    }

    /// Every kind of request a directory store keeps.
    pub fn all(state_root: &Path) -> [Requests; 3] {
        [Requests::new(state_root), Requests::suspends(state_root), Requests::deletes(state_root)]
    }

    /// Removes the request of the resource `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        if let Some(path) = self.path(uid) {
            let _ = fs::remove_file(path);
        }
    }

    /// The directory the requests are written to, created if missing (to watch it).
    pub fn dir(&self) -> Result<&Path> {
        fs::create_dir_all(&self.dir).map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        Ok(&self.dir)
    }

    fn path(&self, uid: &str) -> Option<PathBuf> {
        is_plain_uid(uid).then(|| self.dir.join(uid))
    }

    /// Asks for a restart of the resource `uid`, as of `at`; replaces an earlier request.
    pub fn request(&self, uid: &str, at: &str) -> Result<()> {
        let Some(path) = self.path(uid) else { return Err(Error::Config(format!("{uid:?} is not a resource uid"))) };
        let dir = self.dir()?;
        let aside = dir.join(format!(".{uid}.{}.tmp", std::process::id()));
        let written = (|| -> std::io::Result<()> {
            let mut file = fs::File::create(&aside)?;
            file.write_all(at.as_bytes())?;
            file.sync_all()?;
            fs::rename(&aside, &path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&aside);
            return Err(Error::io(format!("writing {}", path.display()), e));
        }
        Ok(())
    }

    /// The request for the resource `uid`, if there is a readable one.
    pub fn read(&self, uid: &str) -> Option<String> {
        let path = self.path(uid)?;
        let meta = fs::symlink_metadata(&path).ok()?;
        // Only a small regular file: never a FIFO that blocks or a device that never ends.
        if !meta.is_file() || meta.len() > MAX_REQUEST_BYTES {
            return None;
        }
        let value = fs::read_to_string(&path).ok()?.trim().to_string();
        (!value.is_empty()).then_some(value)
    }

    /// Puts the resource's request, if any, on `meta` as its annotation.
    pub fn overlay(&self, meta: &mut ObjectMeta) {
        let Some(at) = meta.uid.as_deref().and_then(|uid| self.read(uid)) else { return };
        meta.annotations.get_or_insert_with(Default::default).insert(self.annotation.to_string(), at);
    }

    /// Wakes `wake` whenever a request is written. One slot is enough: a pending
    /// wake-up already means "look at everything".
    pub fn watch(&self, wake: tokio::sync::mpsc::Sender<()>) -> Result<notify::RecommendedWatcher> {
        use notify::Watcher;
        let dir = self.dir()?;
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if !matches!(&event, Ok(e) if e.kind.is_access()) {
                let _ = wake.try_send(());
            }
        })
        .map_err(|e| Error::Config(format!("watching restart requests: {e}")))?;
        watcher
            .watch(dir, notify::RecursiveMode::NonRecursive)
            .map_err(|e| Error::Config(format!("watching {}: {e}", dir.display())))?;
        Ok(watcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_overlaid_on_its_resource_only() {
        let dir = tempfile::tempdir().unwrap();
        let requests = Requests::new(dir.path());
        let uid = "0b5c7a52-2f8e-4bd4-9d5e-6a1f0c6f2e11";
        let mut meta = ObjectMeta { uid: Some(uid.into()), ..Default::default() };
        requests.overlay(&mut meta);
        assert_eq!(requested(&meta), None);

        requests.request(uid, "2026-11-25T02:00:00.5Z").unwrap();
        requests.overlay(&mut meta);
        assert_eq!(requested(&meta), Some("2026-11-25T02:00:00.5Z"));
        requests.request(uid, "2026-11-25T02:01:00Z").unwrap();
        requests.overlay(&mut meta);
        assert_eq!(requested(&meta), Some("2026-11-25T02:01:00Z"), "the latest request");

        let mut other = ObjectMeta { uid: Some("another".into()), ..Default::default() };
        requests.overlay(&mut other);
        assert_eq!(requested(&other), None);
        assert!(requests.request("../escape", "x").is_err());
        assert_eq!(requests.read("../escape"), None);
        let names: Vec<_> =
            fs::read_dir(dir.path().join("restarts")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [uid], "nothing left aside");
    }
}
