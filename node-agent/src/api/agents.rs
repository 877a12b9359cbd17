//! The agents this node agent can drive: listing, install (with progress over SSE),
//! modes and models.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

use crate::agents::AgentId;
use crate::error::{Error, Problem, Result};
use crate::model::*;

use super::{AppState, Json, RawBody, Route, route};

/// Each route with its document (see `processes::routes`).
pub(super) const ROUTES: &[Route] =
    &[route!(list_agents), route!(get_agent), route!(install_agent), route!(agent_modes), route!(agent_models)];

/// The agents this node agent can drive.
#[utoipa::path(get, path = "/v1/agents", tag = "agents", responses((status = 200, body = AgentList)))]
async fn list_agents(State(state): State<AppState>) -> Json<AgentList> {
    let host = state.sessions.host();
    let mut agents = Vec::with_capacity(AgentId::ALL.len());
    for agent in AgentId::ALL {
        agents.push(agent.info(host).await);
    }
    Json(AgentList { agents })
}

/// One agent.
#[utoipa::path(get, path = "/v1/agents/{agent}", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentInfo), (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent")))]
async fn get_agent(
    State(state): State<AppState>,
    axum::extract::Path(agent): axum::extract::Path<String>,
) -> Result<Json<AgentInfo>> {
    let agent = AgentId::parse(&agent).ok_or(Error::AgentNotFound(agent))?;
    Ok(Json(agent.info(state.sessions.host()).await))
}

/// An agent id from a route's path (`unsupported_agent`, 404).
fn agent_from_path(agent: String) -> Result<AgentId> {
    AgentId::parse(&agent).ok_or(Error::AgentNotFound(agent))
}

/// Installs an agent's CLI from the npm registry (the user's npm configuration
/// applies), verified against the registry's integrity. The same version again is a
/// no-op (`alreadyInstalled`) unless `reinstall`. With `Accept: text/event-stream` the
/// answer is an SSE stream of `install.progress` events ending in `install.completed`
/// (an `InstallResult`) or `install.failed` (a problem document). The install goes on
/// if the client goes away.
#[utoipa::path(post, path = "/v1/agents/{agent}/install", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    request_body(content = Option<InstallRequest>, description = "Optional: the pinned version by default"),
    responses(
        // One 200 with both bodies: two `status = 200` entries would keep only the last.
        (status = 200, description = "Installed, or already there (`application/json`); with `Accept: text/event-stream`, `install.progress` events, then `install.completed` (an `InstallResult`) or `install.failed` (a `Problem`)",
            content((InstallResult = "application/json"), (InstallProgress = "text/event-stream"))),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request: not an exact version, or the built-in mock"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent"),
        (status = 502, body = Problem, content_type = "application/problem+json", description = "install_failed, with npm's error; what was installed before is untouched"),
    ))]
async fn install_agent(
    State(state): State<AppState>,
    axum::extract::Path(agent): axum::extract::Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response> {
    let agent = agent_from_path(agent)?;
    let request: InstallRequest = if body.iter().all(u8::is_ascii_whitespace) {
        InstallRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| Error::InvalidRequest(format!("invalid install request: {e}")))?
    };
    let options = crate::agents::install::InstallOptions { version: request.version, reinstall: request.reinstall };
    // Refused now, as a problem, rather than as the end of a progress stream.
    crate::agents::install::check(agent, &options)?;
    let wants_sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    // Progress is small and cumulative: a few phase changes wait for room, counts
    // beyond this are dropped (the next one carries the totals).
    let (tx, mut rx) = mpsc::channel::<InstallProgress>(64);
    let host = Arc::clone(state.sessions.host());
    // Its own task, so that a client going away does not leave a half-done install.
    let install = tokio::spawn(async move {
        let outcome = host.installer.install(agent, &options, Some(&tx)).await;
        outcome.map(|o| InstallResult {
            agent: agent.as_str().to_string(),
            version: o.installed.version,
            path: o.installed.bin.display().to_string(),
            already_installed: o.already_installed,
            integrity: o.integrity,
        })
    });
    let joined = |joined: std::result::Result<Result<InstallResult>, tokio::task::JoinError>| {
        joined.unwrap_or_else(|e| Err(Error::InstallFailed(format!("the install stopped: {e}"))))
    };
    if !wants_sse {
        // Nobody reads the progress: dropped now, so the installer's sends fail at once.
        // Kept, it filled after 64 counts and the next phase change waited for room for
        // ever (an agent of 376 tarballs, such as pi, never finished installing).
        drop(rx);
        return Ok(Json(joined(install.await)?).into_response());
    }
    let shutdown = state.shutdown.clone();
    let stream = async_stream_of(move |out| async move {
        while let Some(progress) = rx.recv().await {
            let data = serde_json::to_string(&progress).expect("progress serializes");
            if out.send(Event::default().event("install.progress").data(data)).await.is_err() {
                return;
            }
        }
        let event = tokio::select! {
            result = install => match joined(result) {
                Ok(result) => Event::default().event("install.completed").data(serde_json::to_string(&result).expect("results serialize")),
                Err(error) => Event::default().event("install.failed").data(serde_json::to_string(&error.to_problem()).expect("problems serialize")),
            },
            () = shutdown.cancelled() => return,
        };
        let _ = out.send(event).await;
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// A stream fed by a task through a bounded channel (one event in flight: the task
/// goes at the client's pace).
fn async_stream_of<F, Fut>(produce: F) -> impl Stream<Item = std::result::Result<Event, Infallible>>
where
    F: FnOnce(mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(produce(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// The agent's own modes (`agentMode`) and the permission modes its driver accepts.
#[utoipa::path(get, path = "/v1/agents/{agent}/modes", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentModes), (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent")))]
async fn agent_modes(axum::extract::Path(agent): axum::extract::Path<String>) -> Result<Json<AgentModes>> {
    Ok(Json(crate::agents::catalog::modes(agent_from_path(agent)?)))
}

/// The models a session's `model` may name, as far as the node agent knows them
/// (`source` says from where; `note` what else the agent takes).
#[utoipa::path(get, path = "/v1/agents/{agent}/models", tag = "agents", params(("agent" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentModels), (status = 404, body = Problem, content_type = "application/problem+json", description = "unsupported_agent")))]
async fn agent_models(axum::extract::Path(agent): axum::extract::Path<String>) -> Result<Json<AgentModels>> {
    Ok(Json(crate::agents::catalog::models(agent_from_path(agent)?)))
}
