//! The cleanup finalizer around a reconcile, in one pass, and only where it is needed.
//!
//! kube-runtime's `finalizer` helper adds the finalizer and ends the pass; the watch
//! event of that patch then brings a second pass, which does the work. Here the pass
//! that adds the finalizer goes on to apply with the object the patch returned, and
//! the streams of Processes and Sessions are not triggered by finalizer changes
//! (deletion bumps `generation`), so a new resource costs one reconcile, not two.
//!
//! The caller says whether the object needs the finalizer now. One that does not (a
//! Process whose deletion changes no other object: its run is stopped from the watch
//! and by the sweep, see `process`) is applied without it, which saves the API server
//! a write per resource. Once added, it stays until deletion. Where it is on the
//! object, what is guaranteed stays the same: nothing is applied before the finalizer
//! is on it, and it is removed only after the cleanup succeeded. The errors are
//! kube-runtime's, so callers keep their error type.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error, Event};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Runs `reconcile` with `Apply` or `Cleanup` for `obj` under the finalizer `name`,
/// adding it first when `needed` (a cleanup that must run before the object goes).
pub(super) async fn finalized<K, F, Fut, E>(
    api: &Api<K>,
    name: &str,
    needed: bool,
    obj: Arc<K>,
    reconcile: F,
) -> Result<Action, Error<E>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: std::error::Error + 'static,
{
    let object_name = obj.meta().name.clone().ok_or(Error::UnnamedObject)?;
    let mut obj = obj;
    if needed && !obj.finalizers().iter().any(|f| f == name) && obj.meta().deletion_timestamp.is_none() {
        // The API server does not deduplicate finalizers: `test` makes a racing add
        // fail and retry rather than add it twice.
        let patch = match obj.finalizers() {
            [] => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": Value::Null},
                {"op": "add", "path": "/metadata/finalizers", "value": [name]},
            ]),
            present => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": present},
                {"op": "add", "path": "/metadata/finalizers/-", "value": name},
            ]),
        };
        let patched =
            api.patch(&object_name, &PatchParams::default(), &json_patch(patch)?).await.map_err(Error::AddFinalizer)?;
        obj = Arc::new(patched);
    }
    let index = obj.finalizers().iter().position(|f| f == name);
    match (index, obj.meta().deletion_timestamp.is_some()) {
        (_, false) => reconcile(Event::Apply(obj)).await.map_err(Error::ApplyFailed),
        (Some(i), true) => {
            // The finalizer stays when cleanup fails.
            let action = reconcile(Event::Cleanup(obj)).await.map_err(Error::CleanupFailed)?;
            // `test` fails rather than remove another's finalizer that moved to `i`.
            let path = format!("/metadata/finalizers/{i}");
            let patch = json!([{"op": "test", "path": path, "value": name}, {"op": "remove", "path": path}]);
            api.patch(&object_name, &PatchParams::default(), &json_patch(patch)?)
                .await
                .map_err(Error::RemoveFinalizer)?;
            Ok(action)
        }
        // Being deleted, and nothing of ours to run before it goes (another's
        // finalizer holds it): what is left is cleaned when it is gone.
        (None, true) => Ok(Action::await_change()),
    }
}

fn json_patch<E: std::error::Error + 'static>(patch: Value) -> Result<Patch<()>, Error<E>> {
    serde_json::from_value(patch).map(Patch::Json).map_err(|_| Error::InvalidFinalizer)
}
