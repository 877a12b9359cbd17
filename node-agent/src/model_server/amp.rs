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
//! - `uploadThread` (thread sync) and `getCreditsByRequestId` (billing, after each
//!   model request): acknowledged with an empty result.
//!
//! Any other method gets `{"ok": false, "error": {"code": "not-implemented"}}`, so that
//! a new need of amp shows in its log and in this server's request log.

use axum::Json;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The one user this server knows.
pub const USER_ID: &str = "user-agentplane";

pub async fn api(request: Request) -> Response {
    let path = request.uri().path();
    if path != "/api/internal" {
        let message = format!("the scripted model server has no amp API {path}");
        return (StatusCode::NOT_FOUND, Json(json!({"ok": false, "error": {"code": "not-found", "message": message}}))).into_response();
    }
    // The method is the query (`/api/internal?getUserInfo`), and the body's `method`.
    let method = request.uri().query().unwrap_or_default().split('&').next().unwrap_or_default().to_string();
    match result_of(&method) {
        Some(result) => Json(json!({"ok": true, "result": result})).into_response(),
        None => Json(json!({"ok": false, "error": {"code": "not-implemented", "message": format!("the scripted model server does not answer {method:?}")}}))
            .into_response(),
    }
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
}
