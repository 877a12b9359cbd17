//! ACP over a WebSocket (`GET /v1/acp`): the same mapping as `agentplane acp`
//! (`crate::acp`), served by the node agent itself for editors that reach it over the
//! network with ACP's remote transport. Each text message is one JSON-RPC message.
//! The socket is opened with a single-use ticket (`POST /v1/acp/ticket`, as for
//! terminals) or the bearer header: never the token in a URL.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use utoipa::{IntoParams, ToSchema};

use super::{AppState, Json, Query, Route, route};
use crate::acp::{OnNodeAgent, Options};
use crate::error::{Error, Problem, Result};
use crate::model::{CreateSessionRequest, PermissionMode, Ticket};

/// What a ticket for `/v1/acp` is for (no process id looks like a path).
pub(super) const TICKET_SCOPE: &str = "/v1/acp";
/// The largest message taken from the editor: a prompt with embedded files fits.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// Bytes in flight between the socket and the protocol, each way.
const PIPE: usize = 256 * 1024;

pub(super) const ROUTES: &[Route] = &[route!(acp_ticket), route!(acp_socket)];

/// Query of `GET /v1/acp`: what the editor's sessions are.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AcpQuery {
    /// The agent of every session made on this socket (`GET /v1/agents`).
    pub agent: String,
    /// Its mode, model and permission mode; absent: the agent's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    /// A ticket from `POST /v1/acp/ticket`, for clients that cannot send headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
}

/// A short-lived single-use ticket to open `/v1/acp` without the token.
#[utoipa::path(post, path = "/v1/acp/ticket", tag = "acp", responses((status = 200, body = Ticket)))]
async fn acp_ticket(State(state): State<AppState>) -> Json<Ticket> {
    let (ticket, expires_at) = state.auth.issue_ticket(TICKET_SCOPE);
    Json(Ticket { ticket, expires_at })
}

/// The Agent Client Protocol over a WebSocket: one JSON-RPC message per text message.
/// Sessions made here run on this node agent with the query's agent; they end when
/// the socket closes (their events stay, for `session/load` on a later socket).
/// Only a node agent serving TCP has it (one on a Unix socket answers `conflict`).
#[utoipa::path(get, path = "/v1/acp", tag = "acp", params(AcpQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_request, unsupported_agent"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: served on a Unix socket"),
    ))]
async fn acp_socket(
    State(state): State<AppState>,
    Query(query): Query<AcpQuery>,
    headers: HeaderMap,
    upgrade: std::result::Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response> {
    super::processes::check_origin(&state, &headers)?;
    if crate::agents::AgentId::parse(&query.agent).is_none() {
        return Err(Error::UnsupportedAgent(query.agent));
    }
    let Some(own) = state.own_address.clone() else {
        return Err(Error::Conflict(
            "this node agent serves a Unix socket: run `agentplane acp` where it is reachable instead".into(),
        ));
    };
    let client = crate::client::Client::new(&own.url, own.token.clone())
        .map_err(|e| Error::InvalidRequest(format!("a client of this node agent's own address: {e}")))?;
    let upgrade = upgrade.map_err(|e| Error::InvalidRequest(format!("not a WebSocket request: {}", e.body_text())))?;
    let upgrade = upgrade.max_message_size(MAX_MESSAGE).max_frame_size(MAX_MESSAGE);
    let create = CreateSessionRequest {
        agent: query.agent.clone(),
        agent_mode: query.agent_mode,
        model: query.model,
        permission_mode: query.permission_mode,
        ..Default::default()
    };
    let options = Options { create, client_cwd: false, title: format!("agentplane: {}", query.agent) };
    let maker = Arc::new(OnNodeAgent { client, end_on_exit: true });
    let following = state.activity.follow(&headers);
    Ok(upgrade.on_upgrade(move |socket| async move {
        serve(socket, maker, options, state).await;
        drop(following);
    }))
}

/// Pumps the socket's text messages in as lines and the protocol's lines out as text
/// messages, until either side closes or the node agent stops.
async fn serve(socket: WebSocket, maker: Arc<OnNodeAgent>, options: Options, state: AppState) {
    let (mut sink, mut source) = socket.split();
    let (to_protocol, from_socket) = tokio::io::duplex(PIPE);
    let (to_socket, from_protocol) = tokio::io::duplex(PIPE);
    let inbound = async move {
        let mut to_protocol = to_protocol;
        while let Some(Ok(message)) = source.next().await {
            let text = match message {
                Message::Text(text) => text,
                Message::Close(_) => break,
                _ => continue,
            };
            // One message is one line: a newline inside it would split it.
            let line = text.as_str().replace('\n', " ");
            if to_protocol.write_all(line.as_bytes()).await.is_err() || to_protocol.write_all(b"\n").await.is_err() {
                break;
            }
        }
    };
    let outbound = async move {
        let mut lines = tokio::io::BufReader::new(from_protocol).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if sink.send(Message::Text(line.into())).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    };
    let protocol = crate::acp::serve(maker, options, tokio::io::BufReader::new(from_socket), to_socket);
    let outbound = tokio::spawn(outbound);
    tokio::select! {
        _ = async { tokio::join!(inbound, protocol) } => {}
        () = state.shutdown.cancelled() => {}
    }
    let _ = outbound.await;
}
