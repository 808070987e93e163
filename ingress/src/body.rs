//! The response body type the ingress returns, and a status as a response.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::http::Response;

/// The error type of a response body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body: the owner's bytes, streamed (or buffered) through.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A gRPC error as a trailers-only HTTP response.
#[must_use]
pub fn status_response(status: &tonic::Status) -> Response<Body> {
    status.clone().into_http::<Body>()
}
