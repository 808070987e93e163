//! A forwarded response body whose upstream breaks mid-stream ends with a
//! proper gRPC status instead of an HTTP/2 reset.
//!
//! When the owner dies while streaming (a subscription, or a unary answer
//! cut short), the server side would reset the client's stream with `INTERNAL_ERROR`,
//! which clients report as an opaque `INTERNAL` "h2 protocol error". The
//! ingress ends the stream with trailers `grpc-status: 14` (`UNAVAILABLE`)
//! instead: a subscription resumes from its last basis, and the text says a
//! write cut here has an unknown outcome, in words no stock client resends a
//! write on. (A forwarded `Transact` with a request id is buffered whole by
//! the proxy, so a break there is retried instead of reaching this.)

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame};

use crate::body::BoxError;
use crate::upstream::ResponseBody;

/// The upstream body, ending in `UNAVAILABLE` trailers if it breaks.
pub(crate) struct StreamEnd {
    inner: ResponseBody,
    /// Set once the replacement trailers were sent.
    ended: bool,
}

impl StreamEnd {
    /// Wraps a node's response body.
    #[must_use]
    pub(crate) const fn new(inner: ResponseBody) -> Self {
        Self { inner, ended: false }
    }

    /// The response body type the proxy returns.
    #[must_use]
    pub(crate) fn boxed(inner: ResponseBody) -> crate::body::Body {
        Self::new(inner).boxed_unsync()
    }
}

/// What a stream cut mid-way ends with (`grpc-status: 14`). The text never
/// contains the words stock Corium peers resend a transaction on
/// (`outcome::STOCK_RETRY_WORDS`): a unary answer cut here is an unknown
/// outcome. The h2 error goes to the log, not to the client (its text may
/// say "connection").
const BROKE_OFF: &str = "the lease holder's answer broke off mid-stream; a subscription may resume from its \
                         last basis, and a write's outcome is unknown";

impl Body for StreamEnd {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(error))) => {
                tracing::info!(%error, "upstream stream broke; ending it with UNAVAILABLE");
                self.ended = true;
                Poll::Ready(Some(Ok(Frame::trailers(crate::body::unavailable_trailers(
                    BROKE_OFF,
                )))))
            }
            other => {
                other.map(|frame| frame.map(|result| result.map_err(|error| Box::new(error) as BoxError)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
