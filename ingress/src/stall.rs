//! A forwarded stream (a subscription) whose client stops taking messages
//! is ended after `--stream-stall-timeout-ms`: the node's stream is reset,
//! which frees its task, its buffer and its place under the node's
//! subscription limits, and the client's stream ends with `UNAVAILABLE`
//! once it reads again.
//!
//! A pump task moves the node's frames into a one-frame channel; the client
//! side reads from the channel. Waiting for the node (no new item yet) is
//! never a stall; only a frame the client has not taken within the timeout
//! is. At most one frame waits here, and the hop's flow-control window
//! (`upstream::connect`) bounds what the node has in flight.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Frame;

use crate::body::{Body, BoxError};
use crate::metrics::Metrics;

/// The client's side of a watched stream.
struct Watched {
    frames: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
    /// Set by the pump when it gave up on the client.
    stalled: Arc<AtomicBool>,
    timeout: Duration,
    /// Set once the closing trailers were sent.
    ended: bool,
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.frames.poll_recv(cx) {
            Poll::Ready(None) if self.stalled.load(Ordering::Acquire) => {
                self.ended = true;
                Poll::Ready(Some(Ok(Frame::trailers(stalled_trailers(self.timeout)))))
            }
            other => other,
        }
    }
}

/// `UNAVAILABLE` trailers for a stream ended because its client stopped
/// reading: a subscription resumes from its last basis.
fn stalled_trailers(timeout: Duration) -> hyper::http::HeaderMap {
    crate::body::unavailable_trailers(format!(
        "the stream was ended: its client took no message for {} ms; resume from the last basis",
        timeout.as_millis()
    ))
}

/// `inner` (a node's streamed answer), ended if its client takes no frame
/// for `timeout`.
pub(crate) fn watched(inner: Body, timeout: Duration, metrics: Arc<Metrics>) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let stalled = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stalled);
    tokio::spawn(async move {
        let mut inner = inner;
        loop {
            let frame = tokio::select! {
                frame = inner.frame() => frame,
                // The client went away while the node had nothing to send.
                () = tx.closed() => return,
            };
            let Some(frame) = frame else { return };
            match tokio::time::timeout(timeout, tx.send(frame)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    flag.store(true, Ordering::Release);
                    metrics.streams_stalled.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        "client took no message in time; ending its stream"
                    );
                    // Dropping `inner` resets the node's stream.
                    return;
                }
            }
        }
    });
    Watched {
        frames: rx,
        stalled,
        timeout,
        ended: false,
    }
    .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Source {
        left: usize,
        hang: bool,
        dropped: Arc<AtomicBool>,
    }
    impl Drop for Source {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::Release);
        }
    }
    impl hyper::body::Body for Source {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if self.left == 0 {
                return if self.hang {
                    Poll::Pending
                } else {
                    Poll::Ready(None)
                };
            }
            self.left -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"item")))))
        }
    }

    /// A node stream of `n` frames, then (optionally) nothing for ever.
    fn node(n: usize, then_hang: bool) -> (Body, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let source = Source {
            left: n,
            hang: then_hang,
            dropped: Arc::clone(&dropped),
        };
        (source.boxed_unsync(), dropped)
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_ended_and_the_node_stream_dropped() {
        let metrics = Arc::new(Metrics::default());
        let (inner, dropped) = node(100, true);
        let mut body = watched(inner, Duration::from_secs(5), Arc::clone(&metrics));
        // The client reads two frames, then stops.
        for _ in 0..2 {
            assert!(body.frame().await.unwrap().unwrap().is_data());
        }
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(dropped.load(Ordering::Acquire), "the node's stream was dropped");
        assert_eq!(metrics.streams_stalled.load(Ordering::Relaxed), 1);
        // What was queued, then the closing status.
        let mut last = None;
        while let Some(frame) = body.frame().await {
            last = Some(frame.unwrap());
        }
        let trailers = last.unwrap().into_trailers().expect("trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "14");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_node_is_not_a_stall_and_a_reader_gets_everything() {
        let metrics = Arc::new(Metrics::default());
        let (inner, dropped) = node(3, true);
        let mut body = watched(inner, Duration::from_secs(5), Arc::clone(&metrics));
        for _ in 0..3 {
            assert!(body.frame().await.unwrap().unwrap().is_data());
        }
        // Nothing from the node for a minute: still open.
        tokio::time::sleep(Duration::from_mins(1)).await;
        assert!(!dropped.load(Ordering::Acquire));
        assert_eq!(metrics.streams_stalled.load(Ordering::Relaxed), 0);
        // The client leaving ends the pump and drops the node's stream.
        drop(body);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(dropped.load(Ordering::Acquire));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_stream_ends_normally() {
        let metrics = Arc::new(Metrics::default());
        let (inner, _) = node(2, false);
        let body = watched(inner, Duration::from_secs(5), metrics);
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(&collected[..], b"itemitem");
    }
}
