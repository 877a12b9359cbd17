//! The statuses this controller wrote last, by object uid.
//!
//! The cache (the reflector) sees a status write only when its watch event comes back,
//! a moment after the write. A pass that runs in that moment (a Sandbox re-driving what
//! is placed on it, right after a Process started) read the status from before the
//! write: it started a lost process anew with `restarts: 0` instead of restarting it.
//! Only this controller writes Process and Session statuses, so the last one it wrote
//! is never older than the cache's, and a pass starts from that one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentplane_crds::{Process, ProcessStatus, Session, SessionStatus};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A resource whose status the controller writes and remembers.
pub(super) trait Remembered: Resource + Clone {
    type Status: DeserializeOwned;
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
}

impl Remembered for Process {
    type Status = ProcessStatus;
    fn status_mut(&mut self) -> &mut Option<ProcessStatus> {
        &mut self.status
    }
}

impl Remembered for Session {
    type Status = SessionStatus;
    fn status_mut(&mut self) -> &mut Option<SessionStatus> {
        &mut self.status
    }
}

#[derive(Default)]
pub(super) struct Written {
    statuses: Mutex<HashMap<String, Value>>,
}

impl Written {
    /// Remembers `status` as written for the object `uid` of `kind` (other kinds are not
    /// remembered: nothing reads them back).
    pub(super) fn record(&self, kind: &str, uid: Option<&str>, status: &Value) {
        if let (true, Some(uid)) = (matches!(kind, "Process" | "Session"), uid) {
            self.lock().insert(uid.to_string(), status.clone());
        }
    }

    /// The object with the status written last, where that is not what the cache has.
    pub(super) fn freshest<K: Remembered>(&self, obj: Arc<K>) -> Arc<K> {
        let Some(uid) = obj.meta().uid.as_deref() else { return obj };
        let Some(status) = self.lock().get(uid).cloned() else { return obj };
        let Ok(status) = serde_json::from_value::<K::Status>(status) else { return obj };
        let mut fresh = (*obj).clone();
        *fresh.status_mut() = Some(status);
        Arc::new(fresh)
    }

    /// Forgets an object gone.
    pub(super) fn forget(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.lock().remove(uid);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Value>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(status: Option<Value>) -> Arc<Process> {
        let mut value = serde_json::json!({
            "apiVersion": "agentplane.dev/v1alpha1", "kind": "Process",
            "metadata": {"name": "svc", "uid": "u1"}, "spec": {"command": "sleep"},
        });
        if let Some(status) = status {
            value["status"] = status;
        }
        Arc::new(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn a_pass_starts_from_the_status_written_last_not_the_cache_s_older_one() {
        let written = Written::default();
        // Nothing written yet: the cache's object as it is.
        let cached = process(None);
        assert!(written.freshest(Arc::clone(&cached)).status.is_none());
        let running = serde_json::json!({"phase": "Running", "pid": 42, "restarts": 1});
        written.record("Process", Some("u1"), &running);
        // The cache has not seen the write yet.
        let fresh = written.freshest(cached);
        let status = fresh.status.as_ref().unwrap();
        assert_eq!((status.pid, status.restarts), (Some(42), 1));
        // Gone: forgotten, and the cache's is taken again.
        written.forget(Some("u1"));
        assert!(written.freshest(process(None)).status.is_none());
        // Kinds nothing reads back are not kept.
        written.record("Sandbox", Some("u1"), &running);
        assert!(written.freshest(process(None)).status.is_none());
    }
}
