//! The life of one client connection: it is closed with a GOAWAY (calls in
//! flight finish, new ones go to a new connection) when it has had no call
//! open for `--max-connection-idle-ms`, when it is older than
//! `--max-connection-age-ms` (jittered, so clients spread over ingress pods
//! added later instead of reconnecting in step), or when the ingress shuts
//! down.
//!
//! An idle connection costs a file descriptor and a slot under the
//! connection caps; a client that opens one and never sends a request (or
//! never finishes its headers) holds both only until the idle bound.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Calls open on one connection, and when the last one ended.
pub(crate) struct Activity {
    born: Instant,
    open: AtomicUsize,
    /// Milliseconds after `born` when the last call ended.
    last_ms: AtomicU64,
}

/// One open call; the connection is busy while it lives (with the
/// response body, so a stream keeps its connection busy).
pub(crate) struct OpenCall(Arc<Activity>);

impl Drop for OpenCall {
    fn drop(&mut self) {
        let activity = &self.0;
        let now = u64::try_from(activity.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        activity.last_ms.fetch_max(now, Ordering::AcqRel);
        activity.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    /// A new connection's activity: no call yet.
    #[must_use]
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            born: Instant::now(),
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        })
    }

    /// Marks a call open until the guard drops.
    #[must_use]
    pub(crate) fn call(self: &Arc<Self>) -> OpenCall {
        self.open.fetch_add(1, Ordering::AcqRel);
        OpenCall(Arc::clone(self))
    }

    /// When the connection, idle since its last call, reaches `idle`;
    /// `None` while a call is open.
    fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.born + Duration::from_millis(self.last_ms.load(Ordering::Acquire)) + idle)
    }
}

/// How long connections live.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Life {
    /// Close after this long with no call open.
    pub idle: Option<Duration>,
    /// Close at this age, ±10 %.
    pub age: Option<Duration>,
}

/// Why the ingress closed a connection (if it did).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Closed {
    /// The client closed it, or it failed.
    ByClient,
    /// No call open for the idle bound.
    Idle,
    /// Its maximum age.
    Aged,
    /// The ingress is shutting down.
    Shutdown,
}

/// `age` ± 10 %, drawn per connection.
fn jittered(age: Duration) -> Duration {
    let draw = uuid::Uuid::new_v4().as_u64_pair().0 % 2001;
    // 0.9 … 1.1 in steps of 0.0001.
    age.mul_f64(0.9 + f64::from(u32::try_from(draw).unwrap_or(1000)) / 10_000.0)
}

/// Drives `connection` to its end, asking it to close (`close`: hyper's
/// graceful shutdown) when `life` or `shutdown` says so. `close` is told
/// why before the connection can send anything of it, so whatever it
/// counts is counted before the client can see the close.
pub(crate) async fn run<C, E>(
    connection: C,
    close: impl Fn(Pin<&mut C>, Closed),
    activity: &Activity,
    life: Life,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> (Result<(), E>, Closed)
where
    C: Future<Output = Result<(), E>>,
{
    let mut connection = std::pin::pin!(connection);
    let aged_at = life.age.map(|age| activity.born + jittered(age));
    let mut closed = Closed::ByClient;
    loop {
        let idle_at = life.idle.map(|idle| {
            activity
                .idle_deadline(idle)
                // Busy: look again one idle period from now.
                .unwrap_or_else(|| Instant::now() + idle)
        });
        let wake = match (idle_at, aged_at) {
            (Some(idle), Some(aged)) => Some(idle.min(aged)),
            (idle, aged) => idle.or(aged),
        };
        let open = closed == Closed::ByClient;
        tokio::select! {
            result = connection.as_mut() => return (result, closed),
            () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if open && wake.is_some() => {
                let now = Instant::now();
                if aged_at.is_some_and(|aged| now >= aged) {
                    closed = Closed::Aged;
                } else if life.idle.and_then(|idle| activity.idle_deadline(idle)).is_some_and(|at| now >= at) {
                    closed = Closed::Idle;
                }
                if closed != Closed::ByClient {
                    close(connection.as_mut(), closed);
                }
            }
            _ = shutdown.wait_for(|stop| *stop), if open => {
                closed = Closed::Shutdown;
                close(connection.as_mut(), closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that ends when asked to close (or never).
    struct Fake {
        closing: Option<Instant>,
    }

    impl Future for Fake {
        type Output = Result<(), ()>;
        fn poll(self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
            if self.closing.is_some() {
                std::task::Poll::Ready(Ok(()))
            } else {
                std::task::Poll::Pending
            }
        }
    }

    fn close(mut fake: Pin<&mut Fake>, _: Closed) {
        fake.closing = Some(Instant::now());
    }

    fn never() -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        std::mem::forget(tx);
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_idle_bound_and_a_busy_one_is_not() {
        let activity = Activity::new();
        let life = Life {
            idle: Some(Duration::from_secs(10)),
            age: None,
        };
        // A call open for 25 s keeps it; the idle clock starts when it ends.
        let call = activity.call();
        let started = Instant::now();
        let ended = tokio::spawn({
            async move {
                tokio::time::sleep(Duration::from_secs(25)).await;
                drop(call);
            }
        });
        let (result, closed) = run(Fake { closing: None }, close, &activity, life, never()).await;
        ended.await.unwrap();
        assert!(result.is_ok());
        assert_eq!(closed, Closed::Idle);
        let lived = started.elapsed();
        assert!(
            lived >= Duration::from_secs(35) && lived < Duration::from_secs(46),
            "{lived:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_closed_at_its_jittered_age_even_when_busy() {
        let activity = Activity::new();
        let _busy = activity.call();
        let life = Life {
            idle: Some(Duration::from_secs(10)),
            age: Some(Duration::from_secs(100)),
        };
        let started = Instant::now();
        let (_, closed) = run(Fake { closing: None }, close, &activity, life, never()).await;
        assert_eq!(closed, Closed::Aged);
        let lived = started.elapsed();
        assert!(
            lived >= Duration::from_secs(90) && lived <= Duration::from_secs(111),
            "{lived:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_closes_at_once() {
        let activity = Activity::new();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let life = Life {
            idle: None,
            age: None,
        };
        let stop = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = tx.send(true);
            tx
        });
        let (_, closed) = run(Fake { closing: None }, close, &activity, life, rx).await;
        assert_eq!(closed, Closed::Shutdown);
        drop(stop.await);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..1000 {
            let age = jittered(Duration::from_secs(100));
            assert!(
                age >= Duration::from_secs(90) && age <= Duration::from_secs(110),
                "{age:?}"
            );
        }
    }
}
