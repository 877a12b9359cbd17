//! The web inspector at `/ui/`: a single-page app built into `ui/dist/` and embedded
//! in the binary when it is compiled (debug builds too), so what is served is exactly
//! the committed build, whatever the working directory. These files hold no data (the
//! page asks the API for it, with a token), so they are served without one.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::error::Error;

use super::AppState;

/// `ui/dist/` of the repository. A checkout without it still builds: `/ui/` then says
/// the inspector is not built.
#[derive(rust_embed::RustEmbed)]
#[folder = "../ui/dist/"]
#[allow_missing = true]
struct Inspector;

/// What the page may load and run: its own scripts only (no inline script, no
/// `eval`), and connections to this node agent or others (`connect-src`), never
/// framed by another page.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self' http: https: ws: wss:; frame-ancestors 'none'; base-uri 'none'";

/// Files under `assets/` carry a hash of their content in their name: cached for good.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Anything else (`index.html` first) is asked again each time, by its ETag.
const REVALIDATE: &str = "no-cache";

const NOT_BUILT: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>agentplane inspector</title></head>\n<body><h1>The inspector is not built</h1><p>This binary was built without <code>ui/dist/</code>. The API is served under <code>/v1/</code>.</p></body></html>\n";

/// `/ui`, `/ui/` and `/ui/<file>`; kept out of the OpenAPI document (they are no API).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route("/ui/{*path}", get(|Path(path): Path<String>, headers: HeaderMap| async move { serve(&path, &headers) }))
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed })
}

fn serve(path: &str, request: &HeaderMap) -> Response {
    let Some(file) = Inspector::get(path) else {
        if path == "index.html" {
            return html_headers(([(header::CACHE_CONTROL, REVALIDATE)], NOT_BUILT).into_response());
        }
        return Error::RouteNotFound(format!("/ui/{path}")).into_response();
    };
    let hash = file.metadata.sha256_hash();
    let etag = format!("\"{}\"", hash[..16].iter().map(|b| format!("{b:02x}")).collect::<String>());
    let cache = if path.starts_with("assets/") { IMMUTABLE } else { REVALIDATE };
    let content_type = content_type(file.metadata.mimetype());
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    let headers =
        [(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, cache.to_string()), (header::ETAG, etag)];
    let response = if fresh {
        (StatusCode::NOT_MODIFIED, headers).into_response()
    } else {
        (headers, file.data.into_owned()).into_response()
    };
    if content_type_is_html(&response) { html_headers(response) } else { nosniff(response) }
}

/// A text type with its charset (the build writes UTF-8).
fn content_type(mime: &str) -> String {
    let text = mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript" | "application/json" | "application/manifest+json" | "image/svg+xml"
        );
    if text && !mime.contains("charset") { format!("{mime}; charset=utf-8") } else { mime.to_string() }
}

fn content_type_is_html(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"))
}

fn nosniff(mut response: Response) -> Response {
    response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The page's own headers: what it may load, and that a link from it says nothing of
/// where it came from.
fn html_headers(response: Response) -> Response {
    let mut response = nosniff(response);
    if !response.headers().contains_key(header::CONTENT_TYPE) {
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    }
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_types_say_their_charset() {
        assert_eq!(content_type("text/html"), "text/html; charset=utf-8");
        assert_eq!(content_type("text/javascript"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("image/png"), "image/png");
        assert_eq!(content_type("font/woff2"), "font/woff2");
    }

    #[test]
    fn an_index_is_embedded() {
        // The placeholder, or the built inspector: either is a page.
        let index = Inspector::get("index.html").expect("ui/dist/index.html is committed");
        assert!(String::from_utf8_lossy(&index.data).to_ascii_lowercase().contains("<html"));
        assert_eq!(index.metadata.mimetype(), "text/html");
    }
}
