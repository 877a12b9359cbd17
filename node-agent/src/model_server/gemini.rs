//! The scripted model server's gemini API. To be written: it answers 501 until then.

use axum::response::Response;

pub async fn generate() -> Response {
    super::unimplemented_protocol("gemini")
}
