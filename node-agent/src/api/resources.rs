//! `/v1/resources`: the resources of the store that `agentplane up` runs beside its
//! node agent, listed whole, and the same list again over SSE each time it changes;
//! and the one thing a page may ask of them, waking a suspended sandbox.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;

use crate::error::{Error, Problem, Result};
use crate::model::{ResourceList, SandboxWake};
use crate::resources::{ResourceSource, Wake, WakeRefused};

use super::{AppState, Json, PathIds, Route, route};

/// How long after a change the list is taken: a burst of status writes (a rescan,
/// many processes starting) becomes one event, and the change still arrives well
/// within a second.
const SETTLE: Duration = Duration::from_millis(50);

pub(super) const ROUTES: &[Route] = &[route!(list_resources), route!(resource_events), route!(wake_sandbox)];

fn source(state: &AppState) -> Result<Arc<dyn ResourceSource>> {
    state.resources.clone().ok_or_else(|| Error::NotFound("resources are served by `agentplane up`".into()))
}

/// The list as it is now, taken off the async runtime (the store may hold its lock).
async fn snapshot(source: &Arc<dyn ResourceSource>) -> Result<ResourceList> {
    let source = Arc::clone(source);
    tokio::task::spawn_blocking(move || source.snapshot())
        .await
        .map_err(|e| Error::io("listing the resources", std::io::Error::other(e.to_string())))
}

/// Every resource of the store (Processes, Sessions, Sandboxes, templates and pools),
/// with its phase, reason, conditions, file, and the node-agent id to open it by;
/// and the files that were not taken. Served by `agentplane up` only: a plain node
/// agent answers `not_found`.
#[utoipa::path(get, path = "/v1/resources", tag = "resources",
    responses(
        (status = 200, body = ResourceList),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: not served by `agentplane up`"),
    ))]
async fn list_resources(State(state): State<AppState>) -> Result<Json<ResourceList>> {
    Ok(Json(snapshot(&source(&state)?).await?))
}

/// The whole list as an event `resources` (`id:` = its revision): one at once, then
/// another each time something in it changes. Reconnecting needs no `Last-Event-ID`:
/// every event is complete.
#[utoipa::path(get, path = "/v1/resources/sse", tag = "resources",
    responses(
        (status = 200, content_type = "text/event-stream", body = ResourceList, description = "`event: resources`, `id:` the revision, `data:` the list"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: not served by `agentplane up`"),
    ))]
async fn resource_events(
    State(state): State<AppState>,
) -> Result<Sse<impl Stream<Item = std::result::Result<Event, Infallible>>>> {
    let source = source(&state)?;
    struct Cursor {
        source: Arc<dyn ResourceSource>,
        changes: tokio::sync::watch::Receiver<u64>,
        shutdown: tokio_util::sync::CancellationToken,
        /// The revision of the last list sent; none before the first.
        sent: Option<u64>,
    }
    let cursor = Cursor { changes: source.subscribe(), source, shutdown: state.shutdown.clone(), sent: None };
    let stream = futures_util::stream::unfold(cursor, |mut cursor| async move {
        loop {
            if cursor.sent.is_some() {
                tokio::select! {
                    changed = cursor.changes.changed() => if changed.is_err() { return None },
                    () = cursor.shutdown.cancelled() => return None,
                }
                tokio::select! {
                    () = tokio::time::sleep(SETTLE) => {}
                    () = cursor.shutdown.cancelled() => return None,
                }
            }
            // Seen before the list is taken: a change while it is taken makes another.
            cursor.changes.borrow_and_update();
            let Ok(list) = snapshot(&cursor.source).await else { return None };
            if cursor.sent == Some(list.revision) {
                continue;
            }
            cursor.sent = Some(list.revision);
            let data = serde_json::to_string(&list).expect("the list serializes");
            let event = Event::default().event("resources").id(list.revision.to_string()).data(data);
            return Some((Ok(event), cursor));
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Wakes a managed Sandbox suspended for being idle or by `agentplane suspend`, as a
/// client of its endpoint would, and answers at once: the list (and its stream) shows
/// it `Starting`, then `Ready`. One that is not suspended is left as it is
/// (`woken: false`). One held by `spec.suspend: true` is not woken: only its file
/// releases it.
#[utoipa::path(post, path = "/v1/resources/sandboxes/{namespace}/{name}/wake", tag = "resources",
    params(
        ("namespace" = String, Path, description = "The Sandbox's namespace (`default` unless its file names one)"),
        ("name" = String, Path, description = "The Sandbox's name"),
    ),
    responses(
        (status = 200, body = SandboxWake, description = "Asked to wake, or not suspended (`woken` says which)"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: no such Sandbox, or not served by `agentplane up`"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: held by `spec.suspend: true`, or an external Sandbox (with an `endpoint`) that is never suspended here"),
    ))]
async fn wake_sandbox(State(state): State<AppState>, PathIds(namespace, name): PathIds) -> Result<Json<SandboxWake>> {
    let source = source(&state)?;
    let (ns, n) = (namespace.clone(), name.clone());
    // Off the runtime, as the list: the store looks the sandbox up under its lock.
    let woke = tokio::task::spawn_blocking(move || source.wake_sandbox(&ns, &n))
        .await
        .map_err(|e| Error::io("waking the sandbox", std::io::Error::other(e.to_string())))?;
    let sandbox = format!("sandbox/{name} (namespace {namespace})");
    match woke {
        Ok(wake) => {
            tracing::info!(%namespace, %name, ?wake, "wake asked for");
            Ok(Json(SandboxWake { woken: wake == Wake::Waking }))
        }
        Err(WakeRefused::NotFound) => Err(Error::NotFound(format!("no {sandbox}"))),
        Err(WakeRefused::NotManaged) => Err(Error::Conflict(format!(
            "{sandbox} has an endpoint: it runs elsewhere, and `agentplane up` neither suspends nor wakes it"
        ))),
        Err(WakeRefused::HeldBySpec { file }) => Err(Error::Conflict(format!(
            "{sandbox} is held suspended by spec.suspend: true: set spec.suspend: false in {} to wake it",
            file.as_deref().unwrap_or("the spec it was made from")
        ))),
        Err(WakeRefused::Unsupported) => {
            Err(Error::NotFound("this store does not wake sandboxes: waking is served by `agentplane up`".into()))
        }
    }
}
