//! The scripted model server's responses API. To be written: it answers 501 until then.

use axum::response::Response;

pub async fn create() -> Response {
    super::unimplemented_protocol("responses")
}
