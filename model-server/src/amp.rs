//! The scripted model server's Amp API: what the pure-JS amp CLI
//! (`@sourcegraph/amp@0.0.1767830505-ga62310`, `AMP_URL` pointed here) asks of its
//! server besides the model (which it calls at `/api/provider/anthropic/v1/messages`,
//! served by the Anthropic module).
//!
//! amp calls `POST /api/internal?<method>` with `{"method", "params"}` and reads
//! `{"ok": true, "result": ..}`. Seen in text, tool and resumed turns:
//! - `getUserInfo`: who the key belongs to. amp reads `features` (a list) before
//!   anything else, and compares `id` with a resumed thread's creator.
//! - `getThreadLinkInfo` (on `threads continue`): the thread's `creatorUserID`, the
//!   same user, else amp refuses to continue "a thread created by another user".
//! - `uploadThread` (thread sync): the thread is kept, by id, and served back at
//!   `GET /api/threads/{id}`, which amp asks for when its local copy of a thread is
//!   missing: `amp threads new` exits without waiting for its local write, so a
//!   loaded machine can lose it, and the real server is amp's fallback.
//! - `getCreditsByRequestId` (billing, after each model request): an empty result.
//!
//! Any other method gets `{"ok": false, "error": {"code": "not-implemented"}}`, so that
//! a new need of amp shows in its log and in this server's request log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;

/// The one user this server knows.
pub const USER_ID: &str = "user-agentplane";

/// The threads amp uploaded, by id: the newest version of each. A test server's
/// few threads; nothing is ever evicted.
#[derive(Clone, Default)]
pub struct Threads(Arc<Mutex<HashMap<String, Value>>>);

impl Threads {
    fn keep(&self, thread: &Value) {
        let Some(id) = thread.get("id").and_then(Value::as_str) else { return };
        let version = |t: &Value| t.get("v").and_then(Value::as_u64).unwrap_or(0);
        let mut threads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if threads.get(id).is_none_or(|kept| version(kept) <= version(thread)) {
            threads.insert(id.to_string(), thread.clone());
        }
    }

    fn get(&self, id: &str) -> Option<Value> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }
}

/// `ANY /api/{*rest}`.
pub async fn api(State(shared): State<Shared>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    if request.method() == Method::GET
        && let Some(id) = path.strip_prefix("/api/threads/")
    {
        return match shared.amp_threads.get(id) {
            Some(thread) => Json(thread).into_response(),
            None => not_found(&format!("no thread {id}")),
        };
    }
    if path != "/api/internal" {
        return not_found(&format!("the scripted model server has no amp API {path}"));
    }
    // The method is the query (`/api/internal?getUserInfo`), and the body's `method`.
    let method = request.uri().query().unwrap_or_default().split('&').next().unwrap_or_default().to_string();
    if method == "uploadThread" {
        let body = axum::body::to_bytes(request.into_body(), 64 << 20).await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if let Some(thread) = body.pointer("/params/thread") {
            shared.amp_threads.keep(thread);
        }
    }
    match result_of(&method) {
        Some(result) => Json(json!({"ok": true, "result": result})).into_response(),
        None => Json(json!({"ok": false, "error": {"code": "not-implemented", "message": format!("the scripted model server does not answer {method:?}")}}))
            .into_response(),
    }
}

fn not_found(message: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"ok": false, "error": {"code": "not-found", "message": message}})))
        .into_response()
}

/// The answer to one internal method, if this server knows it.
pub fn result_of(method: &str) -> Option<Value> {
    Some(match method {
        "getUserInfo" => json!({
            "id": USER_ID,
            "email": "agentplane@example.invalid",
            "username": "agentplane",
            "features": [],
            "team": null,
        }),
        "getThreadLinkInfo" => json!({"creatorUserID": USER_ID}),
        "uploadThread" | "getCreditsByRequestId" => json!({}),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_has_features_and_owns_its_threads() {
        let user = result_of("getUserInfo").unwrap();
        assert!(user["features"].is_array());
        assert_eq!(result_of("getThreadLinkInfo").unwrap()["creatorUserID"], user["id"]);
        assert!(result_of("deleteEverything").is_none());
    }

    #[test]
    fn the_newest_version_of_a_thread_is_kept() {
        let threads = Threads::default();
        threads.keep(&json!({"id": "T-1", "v": 2, "messages": ["b"]}));
        threads.keep(&json!({"id": "T-1", "v": 1, "messages": ["a"]}));
        assert_eq!(threads.get("T-1").unwrap()["v"], 2);
        threads.keep(&json!({"no": "id"}));
        assert!(threads.get("T-2").is_none());
    }
}
