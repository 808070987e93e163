//! A node's response body as an [`hyper::body::Body`]: DATA frames (their
//! flow-control capacity handed back as they pass), then trailers.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The body of a response from a node.
pub(crate) struct ResponseBody {
    inner: h2::RecvStream,
    /// Set once DATA ended; trailers come next.
    data_done: bool,
}

impl ResponseBody {
    pub(super) const fn new(inner: h2::RecvStream) -> Self {
        Self {
            inner,
            data_done: false,
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match ready!(self.inner.poll_data(cx)) {
                Some(Ok(data)) => {
                    // The bytes are ours now: let the node send more.
                    let _ = self.inner.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => self.data_done = true,
            }
        }
        match ready!(self.inner.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(error))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
