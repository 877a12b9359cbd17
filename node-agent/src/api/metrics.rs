//! `/metrics`: the node agent's Prometheus metrics, and the layer that counts each
//! HTTP request by route template and status.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next as MiddlewareNext;
use axum::response::{IntoResponse, Response};

use crate::error::{Error, Result};
use crate::metrics::Snapshot;

use super::{AppState, Route, route};

/// `/metrics` alone and without the token, for `--metrics-listen`'s own address.
pub fn metrics_router(state: AppState) -> Router {
    super::served(ROUTES).with_state(state)
}

pub(super) const ROUTES: &[Route] = &[route!(metrics)];

/// Counts each request by its route template (`MatchedPath`, set by routing before
/// this layer runs) and status.
pub(super) async fn count_request(State(state): State<AppState>, request: Request, next: MiddlewareNext) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().clone();
    let response = next.run(request).await;
    state.metrics.http_request(method.as_str(), &route, response.status().as_u16());
    response
}

/// Prometheus metrics of this node agent (OpenMetrics text): what exists now
/// (processes, sessions, pending requests) and what happened since it started.
#[utoipa::path(get, path = "/metrics", tag = "system", responses((status = 200, content_type = "application/openmetrics-text", description = "OpenMetrics text")))]
pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response> {
    let mut now = Snapshot::default();
    for process in state.processes.list(None, None) {
        let running = !process.run_state().is_exited();
        *now.processes.entry(if running { "running" } else { "exited" }.to_string()).or_default() += 1;
    }
    for session in state.sessions.list() {
        let info = session.info();
        let state_name = serde_json::to_value(info.state).ok().and_then(|v| v.as_str().map(str::to_string));
        *now.sessions.entry((info.agent.clone(), state_name.unwrap_or_default())).or_default() += 1;
        if !info.pending_permissions.is_empty() {
            *now.requests_pending.entry((info.agent.clone(), "permission")).or_default() +=
                info.pending_permissions.len();
        }
        if !info.pending_questions.is_empty() {
            *now.requests_pending.entry((info.agent.clone(), "question")).or_default() += info.pending_questions.len();
        }
    }
    let text = state
        .metrics
        .encode(&now)
        .map_err(|e| Error::io("encoding the metrics", std::io::Error::other(e.to_string())))?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}
