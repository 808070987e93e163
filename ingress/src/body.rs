//! The response body type the ingress returns, and a status as a response.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::http::{HeaderMap, HeaderValue, Response};

/// The error type of a response body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body: the owner's bytes, streamed (or buffered) through.
pub(crate) type Body = UnsyncBoxBody<Bytes, BoxError>;

/// `grpc-status: 14` (`UNAVAILABLE`) trailers with `message`, for a stream
/// the ingress ends itself: a subscription resumes from its last basis.
/// `message` holds none of the words a stock Corium peer resends a write on
/// (`outcome::STOCK_RETRY_WORDS`).
#[must_use]
pub(crate) fn unavailable_trailers(message: impl Into<String>) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if tonic::Status::unavailable(message)
        .add_header(&mut trailers)
        .is_err()
    {
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
    }
    trailers
}

/// A gRPC error as a trailers-only HTTP response.
#[must_use]
pub(crate) fn status_response(status: &tonic::Status) -> Response<Body> {
    status.clone().into_http::<Body>()
}

/// A response body that holds `guard` until the body is dropped: a stream
/// keeps its places (the client's open-call slot, its connection's
/// activity) for its whole life, not just until the response headers.
struct Holding<G> {
    inner: Body,
    _guard: G,
}

impl<G: Unpin> hyper::body::Body for Holding<G> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// `response` with `guard` held by its body until the body is dropped.
#[must_use]
pub(crate) fn holding<G: Unpin + Send + 'static>(response: Response<Body>, guard: G) -> Response<Body> {
    use http_body_util::BodyExt as _;
    response.map(|inner| Holding { inner, _guard: guard }.boxed_unsync())
}
