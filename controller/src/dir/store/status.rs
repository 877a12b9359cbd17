//! What the store writes back: a resource's status into its record in the state
//! directory (only when it changed, and only to the resource it was computed for), and
//! the forgetting of a resource once its cleanup is done.

use super::*;

/// How soon a resource whose status could not be written is looked at again.
const STATUS_RETRY: Duration = Duration::from_secs(5);
/// How soon a failed cleanup is tried again.
const CLEANUP_RETRY: Duration = Duration::from_secs(5);

impl Inner {
    pub(super) async fn write_status(
        self: &Arc<Self>,
        key: &Key,
        uid: Option<String>,
        update: impl FnOnce(&mut Object) -> bool + Send + 'static,
    ) {
        let this = Arc::clone(self);
        let key = key.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let mut index = this.lock();
            let Some(entry) = index.resources.get_mut(&key) else { return };
            // Replaced by another resource of the same name meanwhile: not ours to write.
            if entry.object.meta().uid != uid {
                return;
            }
            // Written when it changed, and when the record is behind (its first write, or
            // one that failed before).
            if !update(&mut entry.object) && entry.recorded {
                return;
            }
            match this.state.write(&entry.object) {
                Ok(()) => {
                    entry.recorded = true;
                    crate::metrics::Metrics::count(&this.config.metrics.status_writes, key.kind.as_str());
                    if index.unrecorded.remove(&key).is_some() {
                        // The next rescan writes the file errors without it.
                        let _ = this.wake.try_send(());
                    }
                }
                Err(e) => {
                    warn!(resource = %key, error = %e, "cannot write the status");
                    // The record is behind: written again by a pass shortly.
                    entry.recorded = false;
                    this.queue.add_after(key.clone(), STATUS_RETRY);
                    let what = "its status cannot be written to the state directory";
                    let error = unrecorded(&key, entry.source_file().unwrap_or_default(), None, what, &e);
                    index.unrecorded.insert(key.clone(), error.clone());
                    index.errors.entry(error.file.clone()).or_insert(error);
                    if let Err(e) = this.state.write_errors(&index.errors) {
                        warn!(error = %e, "cannot record the file errors");
                    }
                }
            }
        })
        .await;
    }

    /// Forgets a resource whose cleanup succeeded; tries the cleanup again later otherwise.
    pub(super) async fn forget_once_clean(self: &Arc<Self>, key: &Key, uid: Option<String>, cleaned: Result<()>) {
        match cleaned {
            Ok(()) => self.forget(key, uid).await,
            Err(e) => {
                warn!(resource = %key, error = %e, "cleanup failed; trying again");
                self.queue.add_after(key.clone(), CLEANUP_RETRY);
            }
        }
    }

    /// Forgets a cleaned-up resource; a file that declares it again brings it back new.
    pub(super) async fn forget(self: &Arc<Self>, key: &Key, uid: Option<String>) {
        let this = Arc::clone(self);
        let k = key.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let mut index = this.lock();
            if index.resources.get(&k).is_some_and(|e| e.object.meta().uid == uid) {
                index.resources.remove(&k);
                this.env_watch.lock().unwrap_or_else(|e| e.into_inner()).set(&k, Vec::new());
                if let Err(e) = this.state.remove(&k) {
                    warn!(resource = %k, error = %e, "cannot remove the record");
                }
                // Its requests go with it (a uid is never reused).
                if let Some(uid) = &uid {
                    crate::restart::Requests::all(this.state.root()).iter().for_each(|r| r.forget(uid));
                }
            }
        })
        .await;
        info!(resource = %key, "cleaned up and forgotten");
        let _ = self.wake.try_send(());
    }
}
