//! The router alone, called with `oneshot` (no socket): what holds for every route
//! whatever its handler, such as the answer to a body too large.

use std::sync::Arc;

use agentplane_node_agent::agents::AgentHost;
use agentplane_node_agent::api::{AppState, router};
use agentplane_node_agent::auth::Auth;
use agentplane_node_agent::process::ProcessManager;
use agentplane_node_agent::sessions::SessionManager;
use agentplane_node_agent::{Limits, SessionOptions};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const TOKEN: &str = "router-test-token";

/// A router over a fresh data directory, and the directory (kept while it is used).
async fn app() -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let host = AgentHost::new(dir.path().to_path_buf(), dir.path().join("agents"));
    let sessions =
        SessionManager::load(dir.path().join("sessions"), host, SessionOptions::default(), shutdown.child_token())
            .await
            .unwrap();
    let state = AppState {
        processes: ProcessManager::new(Limits::default()),
        sessions,
        auth: Arc::new(Auth::new(Some(TOKEN.into()))),
        allowed_origins: Arc::new(Vec::new()),
        shutdown,
        metrics: Default::default(),
        resources: None,
        fs: Arc::new(agentplane_node_agent::fs::FsRoots::open(&[dir.path().to_path_buf()]).unwrap()),
        own_address: None,
        activity: agentplane_node_agent::activity::Activity::new(),
    };
    (router(state), dir)
}

fn request(method: Method, path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap()
}

/// Status, content type and problem code of an answer.
async fn answer(app: &axum::Router, request: Request<Body>) -> (StatusCode, String, serde_json::Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, content_type, body)
}

/// Every route that reads a body.
const BODY_ROUTES: [&str; 11] = [
    "/v1/processes",
    "/v1/processes/p1/signal",
    "/v1/processes/p1/resize",
    "/v1/processes/p1/input",
    "/v1/agents/claude/install",
    "/v1/sessions/s1",
    "/v1/sessions/s1/messages",
    "/v1/sessions/s1/permissions/p1/reply",
    "/v1/sessions/s1/questions/q1/reply",
    "/v1/sessions/s1/questions/q1/reject",
    "/v1/auth/exchange",
];

#[tokio::test]
async fn a_body_too_large_is_413_problem_json_on_every_route() {
    let (app, _dir) = app().await;
    // A JSON string of 3 MiB: well-formed, only too large.
    let big = format!("{{\"message\":\"{}\"}}", "a".repeat(3 << 20));
    for path in BODY_ROUTES {
        let (status, content_type, body) = answer(&app, request(Method::POST, path, big.clone())).await;
        if path.ends_with("/reject") {
            // Reads no body: the size is not its concern.
            assert_ne!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
            continue;
        }
        assert_eq!(
            (status, content_type.as_str(), body["type"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "application/problem+json", Some("urn:agentplane:error:payload_too_large")),
            "{path}: {body}"
        );
        assert_eq!(body["status"], 413, "{path}");
    }
    // A body that does not say its length up front is cut at the same limit.
    let chunks = futures_util::stream::iter(
        (0..40).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 100 * 1024]))),
    );
    let (status, content_type, body) =
        answer(&app, request(Method::POST, "/v1/sessions/s1/messages", Body::from_stream(chunks))).await;
    assert_eq!((status, content_type.as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "application/problem+json"), "{body}");
}
