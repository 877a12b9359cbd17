//! The scripted model server's chat API. To be written: it answers 501 until then.

use axum::response::Response;

pub async fn completions() -> Response {
    super::unimplemented_protocol("chat")
}
