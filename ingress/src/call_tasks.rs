//! A client connection's calls run inside the connection's own task.
//!
//! hyper's HTTP/2 server hands every stream to an executor; with tokio's,
//! each call was a task of its own, so a unary call crossed tasks four times
//! (the connection task accepts it and wakes the call's task, which queues
//! the answer and wakes the connection task to write it, plus the spawn and
//! the task's allocation). [`CallTasks`] is the executor hyper is given
//! instead: it queues each call's future for [`WithCalls`], the future the
//! connection task runs, which polls the hyper connection and the calls side
//! by side. A call's answer is queued and written in the same pass, as
//! `HAProxy` and Envoy do: a connection and all its calls belong to one
//! thread (design note 0018 has the measurement).
//!
//! What a task of its own gave and this keeps: a call that panics ends
//! alone (caught, logged, its stream reset by hyper as the future drops);
//! the connection is done only when its calls are; no pass runs forever
//! (bounded rounds, then the task yields to the runtime).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt as _};

/// Rounds of "connection, then calls" in one poll before yielding.
const ROUNDS_PER_POLL: usize = 32;

/// Calls handed over by hyper, not yet polled.
///
/// No waker: hyper hands a call over only while [`WithCalls`] polls it (a
/// stream is accepted inside the connection's poll, an upgrade inside a
/// call's), and every poll takes what was handed over before it returns.
#[derive(Default)]
struct Handed {
    calls: Mutex<Vec<BoxFuture<'static, ()>>>,
}

/// The executor a client connection gives hyper: calls are queued for the
/// connection's own task ([`WithCalls`]), never spawned.
#[derive(Clone, Default)]
pub(crate) struct CallTasks(Arc<Handed>);

impl<F> hyper::rt::Executor<F> for CallTasks
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        self.0
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::pin(call));
    }
}

/// A client connection and its calls, driven together; ready when the
/// connection has ended and every call with it.
pub(crate) struct WithCalls<C: Future> {
    /// hyper's connection future.
    connection: Pin<Box<C>>,
    /// Its outcome, once it ended (calls may still be finishing).
    ended: Option<C::Output>,
    handed: Arc<Handed>,
    calls: FuturesUnordered<BoxFuture<'static, ()>>,
}

impl<C: Future> WithCalls<C> {
    /// `connection`, whose executor is `tasks`.
    pub(crate) fn new(connection: C, tasks: &CallTasks) -> Self {
        Self {
            connection: Box::pin(connection),
            ended: None,
            handed: Arc::clone(&tasks.0),
            calls: FuturesUnordered::new(),
        }
    }

    /// The connection itself (hyper's graceful shutdown).
    pub(crate) fn connection(&mut self) -> Pin<&mut C> {
        self.connection.as_mut()
    }

    /// Moves the calls hyper handed over into the set polled here; `true`
    /// if there were any.
    fn take_handed(&mut self) -> bool {
        let handed = std::mem::take(
            &mut *self
                .handed
                .calls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let any = !handed.is_empty();
        for call in handed {
            self.calls.push(
                std::panic::AssertUnwindSafe(call)
                    .catch_unwind()
                    .map(|outcome| {
                        if outcome.is_err() {
                            tracing::error!("a call panicked; its stream is reset, the connection goes on");
                        }
                    })
                    .boxed(),
            );
        }
        any
    }
}

impl<C: Future> Future for WithCalls<C>
where
    C::Output: Unpin,
{
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        for _ in 0..ROUNDS_PER_POLL {
            // The connection reads what arrived (handing over new calls)
            // and writes what the calls queued in the last round.
            if this.ended.is_none()
                && let Poll::Ready(outcome) = this.connection.as_mut().poll(cx)
            {
                this.ended = Some(outcome);
            }
            let mut progressed = this.take_handed();
            // Every call that can go on, until none can.
            while let Poll::Ready(Some(())) = this.calls.poll_next_unpin(cx) {
                progressed = true;
            }
            progressed |= this.take_handed();
            if !progressed {
                if this.calls.is_empty()
                    && let Some(outcome) = this.ended.take()
                {
                    return Poll::Ready(outcome);
                }
                return Poll::Pending;
            }
        }
        // Still busy: let the runtime run other connections first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor as _;

    /// A connection that hands over `calls` calls on its first poll and
    /// ends once they all ran.
    struct Scripted {
        tasks: CallTasks,
        calls: usize,
        ran: Arc<std::sync::atomic::AtomicUsize>,
        started: bool,
    }

    impl Future for Scripted {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<usize> {
            if !self.started {
                self.started = true;
                for _ in 0..self.calls {
                    let ran = Arc::clone(&self.ran);
                    self.tasks.execute(async move {
                        tokio::task::yield_now().await;
                        ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    });
                }
            }
            Poll::Ready(self.calls)
        }
    }

    /// Drives `connection` and its calls to the end (bounded).
    async fn run<C: Future<Output = usize>>(connection: C, tasks: &CallTasks) -> usize {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            WithCalls::new(connection, tasks),
        )
        .await
        .expect("the connection and its calls end")
    }

    #[tokio::test]
    async fn a_connection_is_done_when_its_calls_are() {
        let tasks = CallTasks::default();
        let ran = Arc::default();
        let connection = Scripted {
            tasks: tasks.clone(),
            calls: 3,
            ran: Arc::clone(&ran),
            started: false,
        };
        assert_eq!(run(connection, &tasks).await, 3);
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_call_that_panics_ends_alone() {
        let tasks = CallTasks::default();
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let after = Arc::clone(&ran);
        tasks.execute(async { panic!("boom") });
        tasks.execute(async move {
            after.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        assert_eq!(run(std::future::ready(7), &tasks).await, 7);
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
