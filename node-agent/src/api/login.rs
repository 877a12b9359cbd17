//! Logging a browser page in without a token in any URL: an authenticated client (the
//! CLI, `up` itself) mints a one-time code, the page gets it in its URL's fragment
//! (never sent to a server) and exchanges it for a token of its own.

use axum::extract::State;

use crate::error::{Error, Problem, Result};
use crate::model::{BrowserToken, ExchangeCodeRequest, LoginCode};

use super::{AppState, Json, Route, route};

pub(super) const ROUTES: &[Route] = &[route!(issue_login_code), route!(exchange_login_code)];

/// The path of the exchange: with health, the only API route that needs no token.
pub(super) const EXCHANGE_PATH: &str = "/v1/auth/exchange";

/// A one-time login code: 128 random bits, valid for 10 minutes, single use; at most
/// 32 are kept unexchanged (minting more drops the oldest). `agentplane up` prints a
/// link carrying one (`/ui/#code=...`), `agentplane ui` another.
#[utoipa::path(post, path = "/v1/auth/codes", tag = "auth", responses((status = 200, body = LoginCode)))]
async fn issue_login_code(State(state): State<AppState>) -> Json<LoginCode> {
    let (code, expires_at) = state.auth.issue_login_code();
    Json(LoginCode { code, expires_at })
}

/// Exchanges a login code for a bearer token of the page's own (not the node agent's
/// token), accepted like it until the node agent stops; the 64 newest are kept. Needs
/// no token: the code is the credential. A code that is unknown, used or expired is
/// `unauthorized`.
#[utoipa::path(post, path = "/v1/auth/exchange", tag = "auth", security(()), request_body = ExchangeCodeRequest,
    responses(
        (status = 200, body = BrowserToken),
        (status = 401, body = Problem, content_type = "application/problem+json", description = "unauthorized: the code is unknown, used or expired"),
    ))]
async fn exchange_login_code(
    State(state): State<AppState>,
    Json(request): Json<ExchangeCodeRequest>,
) -> Result<Json<BrowserToken>> {
    match state.auth.exchange_login_code(&request.code) {
        Some(token) => Ok(Json(BrowserToken { token })),
        None => Err(Error::InvalidLoginCode),
    }
}
