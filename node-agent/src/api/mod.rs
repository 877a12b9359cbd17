//! The HTTP API under `/v1`: REST lifecycle calls, output by offset, the terminal
//! WebSocket, lifecycle events over SSE, agents and sessions (events by offset and
//! over SSE), login codes for a browser page, the resources of `agentplane up`, and
//! the OpenAPI document generated from these handlers; and the web inspector's files
//! at `/ui/`.
//!
//! One module per resource, each with its `routes()`: [`processes`], [`agents`],
//! [`sessions`], [`login`], [`resources`] and [`metrics`], and [`ui`] for the static
//! files; here what they share (the state, the extractors whose rejections are problem
//! documents, authentication) and the OpenAPI document.

mod acp;
mod agents;
mod fs;
mod login;
mod metrics;
mod processes;
mod resources;
mod sessions;
mod ui;

pub use ui::CONTENT_SECURITY_POLICY;

pub use metrics::metrics_router;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next as MiddlewareNext};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowOrigin, CorsLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::auth::Auth;
use crate::error::{Error, Problem, Result};
use crate::metrics::Metrics;
use crate::model::*;
use crate::process::ProcessManager;
use crate::resources::ResourceSource;
use crate::sessions::SessionManager;
use crate::universal::*;

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub processes: ProcessManager,
    pub sessions: SessionManager,
    pub auth: Arc<Auth>,
    pub allowed_origins: Arc<Vec<HeaderValue>>,
    /// Fired on shutdown: open streams and sockets end so the server can stop.
    pub shutdown: CancellationToken,
    /// What `/metrics` serves; the processes and sessions count into the same.
    pub metrics: Metrics,
    /// What `/v1/resources` serves: `agentplane up`'s store; without one those
    /// routes answer `not_found`.
    pub resources: Option<Arc<dyn ResourceSource>>,
    /// What `/v1/fs/...` serves: the file roots, opened at start.
    pub fs: Arc<crate::fs::FsRoots>,
    /// Where this node agent reaches its own API (`/v1/acp` drives sessions through a
    /// client of it): its TCP address and its own token; `None` on a Unix socket.
    pub own_address: Option<Arc<OwnAddress>>,
    /// What keeps this node agent busy (`/v1/activity`): streams count their clients.
    pub activity: Arc<crate::activity::Activity>,
}

/// A node agent's own URL and token (see [`AppState::own_address`]).
pub struct OwnAddress {
    pub url: String,
    pub token: Option<String>,
}

/// A JSON body whose rejection is a problem document.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(Error))]
struct Json<T>(T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// A raw body whose rejection (too large) is a problem document.
struct RawBody(bytes::Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Error;

    async fn from_request(request: Request, state: &S) -> Result<Self> {
        Ok(RawBody(bytes::Bytes::from_request(request, state).await?))
    }
}

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Error))]
struct Query<T>(T);

/// The `{id}` of a process route.
struct PathId(String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self> {
        let axum::extract::Path(id) = axum::extract::Path::<String>::from_request_parts(parts, state).await?;
        Ok(PathId(id))
    }
}

/// The `{id}` and the `{pid}` or `{qid}` of a session request route.
struct PathIds(String, String);

impl<S: Send + Sync> FromRequestParts<S> for PathIds {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self> {
        let axum::extract::Path((id, request)) =
            axum::extract::Path::<(String, String)>::from_request_parts(parts, state).await?;
        Ok(PathIds(id, request))
    }
}

/// One path's handlers: how to serve them, and how to describe them. Both come from
/// the same `#[utoipa::path]` of each handler (see [`route!`]), so a route cannot be
/// served without being described; describing waits until the document is asked for.
pub(super) struct Route {
    /// The path and its method router: cheap, what the server needs at start.
    serve: fn() -> (String, axum::routing::MethodRouter<AppState>),
    /// The same with the path's part of the document (its operations and schemas):
    /// built only for `/v1/openapi.json` and `agentplane node-agent openapi`.
    document: fn() -> utoipa_axum::router::UtoipaMethodRouter<AppState>,
}

/// A [`Route`] of handlers serving one path (each with its `#[utoipa::path]`).
macro_rules! route {
    ($first:ident $(, $handler:ident)* $(,)?) => {
        $crate::api::Route::new(
            || {
                use utoipa::Path as _;
                use utoipa_axum::PathItemExt as _;
                utoipa_axum::paste! {
                    let path = <[<__path_ $first>]>::path();
                    let mut router = axum::routing::MethodRouter::new();
                    for method in <[<__path_ $first>]>::methods() {
                        router = router.on(method.to_method_filter(), $first);
                    }
                    $(
                        debug_assert_eq!(path, <[<__path_ $handler>]>::path(), "one route!, one path");
                        for method in <[<__path_ $handler>]>::methods() {
                            router = router.on(method.to_method_filter(), $handler);
                        }
                    )*
                }
                (path, router)
            },
            || utoipa_axum::routes!($first $(, $handler)*),
        )
    };
}
pub(super) use route;

impl Route {
    pub(super) const fn new(
        serve: fn() -> (String, axum::routing::MethodRouter<AppState>),
        document: fn() -> utoipa_axum::router::UtoipaMethodRouter<AppState>,
    ) -> Self {
        Route { serve, document }
    }
}

/// A router serving `routes` (without their document).
fn served<'a>(routes: impl IntoIterator<Item = &'a Route>) -> Router<AppState> {
    routes.into_iter().fold(Router::new(), |router, route| {
        let (path, methods) = (route.serve)();
        router.route(&path, methods)
    })
}

/// Every path the API serves, module by module.
fn all_routes() -> impl Iterator<Item = &'static Route> {
    [
        ROUTES,
        processes::ROUTES,
        agents::ROUTES,
        sessions::ROUTES,
        login::ROUTES,
        resources::ROUTES,
        metrics::ROUTES,
        fs::ROUTES,
        acp::ROUTES,
    ]
    .into_iter()
    .flatten()
}

const ROUTES: &[Route] = &[route!(health), route!(openapi_json), route!(activity)];

/// The OpenAPI document: what `/v1/openapi.json` serves and `agentplane node-agent
/// openapi` prints. Built once, when first asked for: building it touches every
/// operation's and schema's code, a third of an idle node agent's memory when it was
/// built at start.
pub fn openapi() -> &'static utoipa::openapi::OpenApi {
    static DOCUMENT: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let routes = all_routes()
            .fold(OpenApiRouter::with_openapi(ApiDoc::openapi()), |router, route| router.routes((route.document)()));
        let mut document = routes.into_openapi();
        utoipa::Modify::modify(&ApiConventions, &mut document);
        document
    })
}

pub fn router(state: AppState) -> Router {
    let api = served(all_routes());
    let api = api
        .fallback(|uri: axum::http::Uri| async move { Error::RouteNotFound(uri.path().to_string()) })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        // The inspector's files hold no data: outside authentication (see `ui`).
        .merge(ui::routes())
        // Outside authentication, so that refused requests are counted too.
        .layer(middleware::from_fn_with_state(state.clone(), metrics::count_request))
        .layer(tower_http::trace::TraceLayer::new_for_http());
    let api = if state.allowed_origins.is_empty() {
        api
    } else {
        // Outside authentication, so that preflight requests (which carry no token) are answered.
        api.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(state.allowed_origins.iter().cloned()))
                .allow_methods(tower_http::cors::Any)
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, "last-event-id".parse().expect("valid")]),
        )
    };
    api.with_state(state)
}

async fn authenticate(State(state): State<AppState>, request: Request, next: MiddlewareNext) -> Response {
    let path = request.uri().path();
    // Health, and the exchange of a login code (the code is its credential).
    if path == "/v1/health" || path == login::EXCHANGE_PATH || !state.auth.enabled() {
        return next.run(request).await;
    }
    let header = request.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
    if state.auth.check_bearer(header) || ticket_grants(&state, &request) {
        return next.run(request).await;
    }
    Error::Unauthorized.into_response()
}

/// A WebSocket request carrying a valid single-use ticket for this very process, or
/// for `/v1/acp`.
fn ticket_grants(state: &AppState, request: &Request) -> bool {
    let Some(ticket) = request.uri().query().and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("ticket=")))
    else {
        return false;
    };
    let path = request.uri().path();
    if path == acp::TICKET_SCOPE {
        return state.auth.redeem_ticket(ticket, acp::TICKET_SCOPE);
    }
    let Some(id) = path.strip_prefix("/v1/processes/").and_then(|rest| rest.strip_suffix("/connect")) else {
        return false;
    };
    match state.processes.get(id) {
        Ok(process) => state.auth.redeem_ticket(ticket, &process.id),
        Err(_) => false,
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentplane node agent",
        description = "Persistent processes, terminals and agent sessions in a sandbox. Every route but health and the exchange of a login code needs `Authorization: Bearer TOKEN`. Errors are RFC 7807 problem documents with `urn:agentplane:error:*` types."
    ),
    // The paths come from the routes themselves (`documented_routes`).
    components(schemas(Problem, ControlMessage, LifecycleEvent, UniversalEvent, EventData, EventType, EventSource, Gap, InstallProgress)),
    tags(
        (name = "processes", description = "Processes and terminals"),
        (name = "agents", description = "The agents this node agent can drive"),
        (name = "sessions", description = "Conversations with agents, as universal events"),
        (name = "auth", description = "Logging a browser page in with a one-time code"),
        (name = "files", description = "Files inside the node agent's file roots"),
        (name = "resources", description = "The resources of `agentplane up`'s store (served by `up` only)"),
        (name = "acp", description = "The Agent Client Protocol over a WebSocket, for editors"),
        (name = "system", description = "Health and the API document")
    )
)]
pub struct ApiDoc;

/// What holds for every route: the bearer token, and errors as problem documents
/// (a `default` response, so every status an operation can fail with is described).
/// Applied once the routes have added their paths.
struct ApiConventions;

impl utoipa::Modify for ApiConventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
        let problem = ResponseBuilder::new()
            .description("An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>`")
            .content(
                "application/problem+json",
                ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                operation.responses.responses.insert("default".to_string(), problem.clone().into());
            }
        }
    }
}

/// Liveness; with the exchange of a login code, the only API route that needs no token.
#[utoipa::path(get, path = "/v1/health", tag = "system", security(()), responses((status = 200, body = Health)))]
async fn health() -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}

/// What keeps this node agent busy now, and for how long nothing has: sessions in a
/// turn (or preparing, installing, starting, with messages queued or a reply awaited),
/// clients following a stream, and processes' output. A client that sends
/// `X-Agentplane-Observer` on a stream is not counted. A controller suspends an idle
/// sandbox by it (`idleTimeoutSeconds`).
#[utoipa::path(get, path = "/v1/activity", tag = "system", responses((status = 200, body = ActivityReport)))]
async fn activity(State(state): State<AppState>) -> Json<ActivityReport> {
    let mut busy = Vec::new();
    for session in state.sessions.list() {
        let info = session.info();
        let doing = match info.state {
            SessionState::Idle | SessionState::Ended | SessionState::Failed => continue,
            SessionState::Preparing => "preparing its workspace",
            SessionState::Installing => "installing its agent",
            SessionState::Starting => "starting its agent",
            SessionState::Running => "in a turn",
            SessionState::AwaitingInput => "waiting for a reply",
        };
        busy.push(format!("session {}: {doing}", info.id));
    }
    Json(state.activity.report(busy, state.metrics.output_total()))
}

/// The OpenAPI document, as `/v1/openapi.json` serves it, pretty-printed with a
/// final newline: what `agentplane node-agent openapi` prints and the SDK's types are
/// generated from.
pub fn openapi_document() -> String {
    let mut text = openapi().to_pretty_json().expect("the document serializes");
    text.push('\n');
    text
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json", body = Object)))]
async fn openapi_json() -> Json<&'static utoipa::openapi::OpenApi> {
    Json(openapi())
}
