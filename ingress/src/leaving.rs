//! A subscription ends when its connection leaves.
//!
//! A client connection closed for its age or for shutdown first tells its
//! subscriptions (`connection_life.rs`); each ends with `UNAVAILABLE`
//! trailers. A stock Corium peer then resubscribes from its last basis on a
//! new connection (after 100 ms; the node backfills the gap) and moves its
//! writes there, so the old connection falls quiet and its GOAWAY reaches a
//! client with nothing open on it. Ended by the ingress, a subscription is
//! lost to nobody: it carries only what the log already holds.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;

use crate::body::{Body, BoxError};

/// What a subscription ended here says: it may resume elsewhere.
const LEAVING: &str = "this ingress is going away; resume the subscription from its last basis";

/// A subscription's body that ends when `leaving` turns true.
struct Leaving {
    inner: Body,
    gone: Pin<Box<dyn Future<Output = ()> + Send>>,
    ended: bool,
}

/// `body`, ended with `UNAVAILABLE` trailers once `leaving` turns true (or
/// its sender is gone with the connection).
pub(crate) fn watched(body: Body, mut leaving: tokio::sync::watch::Receiver<bool>) -> Body {
    use http_body_util::BodyExt as _;
    let gone = Box::pin(async move { corium_fleet_common::signal::until_true(&mut leaving).await });
    Leaving {
        inner: body,
        gone,
        ended: false,
    }
    .boxed_unsync()
}

impl hyper::body::Body for Leaving {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.gone.as_mut().poll(cx).is_ready() {
            self.ended = true;
            return Poll::Ready(Some(Ok(Frame::trailers(crate::body::unavailable_trailers(
                LEAVING,
            )))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A body that never yields (a quiet subscription).
    fn quiet() -> Body {
        http_body_util::StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, BoxError>>())
            .boxed_unsync()
    }

    #[tokio::test]
    async fn a_quiet_subscription_ends_with_unavailable_when_its_connection_leaves() {
        let (leave, leaving) = tokio::sync::watch::channel(false);
        let mut body = watched(quiet(), leaving);
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), body.frame()).await;
        assert!(early.is_err(), "nothing ends it before the connection leaves");
        leave.send_replace(true);
        let frame = body.frame().await.expect("a frame").expect("not an error");
        let trailers = frame.into_trailers().expect("trailers");
        assert_eq!(
            trailers
                .get("grpc-status")
                .map(hyper::http::HeaderValue::as_bytes),
            Some(&b"14"[..])
        );
        let message = trailers.get("grpc-message").expect("a message").to_str().unwrap();
        assert!(
            !corium_fleet_wire::outcome::STOCK_RETRY_WORDS
                .iter()
                .any(|word| message.contains(word)),
            "{message}"
        );
        assert!(body.frame().await.is_none(), "and then it is over");
    }

    #[tokio::test]
    async fn frames_already_there_go_first() {
        let (leave, leaving) = tokio::sync::watch::channel(true);
        let data = http_body_util::Full::new(Bytes::from_static(b"report"))
            .map_err(|never| -> BoxError { match never {} })
            .boxed_unsync();
        let mut body = watched(data, leaving);
        let frame = body.frame().await.expect("a frame").expect("not an error");
        assert_eq!(frame.into_data().expect("data"), Bytes::from_static(b"report"));
        drop(leave);
    }
}
