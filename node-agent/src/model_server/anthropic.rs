//! The scripted model server's anthropic API. To be written: it answers 501 until then.

use axum::response::Response;

pub async fn messages() -> Response {
    super::unimplemented_protocol("anthropic")
}
