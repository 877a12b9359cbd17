//! The scripted model server's amp API. To be written: it answers 501 until then.

use axum::response::Response;

pub async fn api() -> Response {
    super::unimplemented_protocol("amp")
}
