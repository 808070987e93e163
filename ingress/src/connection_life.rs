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
//!
//! A connection closed for its age or for shutdown *leaves* before its
//! GOAWAY: its subscriptions are ended first (`leaving.rs`; a stock Corium
//! peer resubscribes from its last basis on a new connection and moves its
//! writes there), and the GOAWAY goes out once the connection has been
//! quiet — no call open — for [`QUIET`], or at [`Life::settle`] at the
//! latest. A GOAWAY that reaches a client while a stream is open on the
//! connection makes tonic's client fail the *next* call it sends there
//! with `CANCELLED` "operation was canceled: connection closed", unsent
//! (hyper's HTTP/2 client drops it; measured: one failed stock write per
//! ingress SIGTERM in the upgrade test) — and a stock peer always has its
//! subscription open, and never resends a `CANCELLED` write.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long a leaving connection must have had no call open before its
/// GOAWAY: a stock peer whose subscription was ended resubscribes on a new
/// connection after 100 ms and sends its writes there from then on.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// How often a leaving connection with calls open looks again.
const RECHECK: Duration = Duration::from_millis(100);

/// Calls open on one connection, and when the last one ended.
pub(crate) struct Activity {
    born: Instant,
    open: AtomicUsize,
    /// Milliseconds after `born` when the last call ended.
    last_ms: AtomicU64,
    /// Turns true when the connection starts leaving (age or shutdown):
    /// its subscriptions end then (`leaving.rs`).
    leaving: tokio::sync::watch::Sender<bool>,
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
            leaving: tokio::sync::watch::channel(false).0,
        })
    }

    /// Turns true when the connection starts leaving.
    #[must_use]
    pub(crate) fn leaving(&self) -> tokio::sync::watch::Receiver<bool> {
        self.leaving.subscribe()
    }

    fn leave(&self) {
        self.leaving.send_replace(true);
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
    /// The longest a leaving connection waits to be quiet before its
    /// GOAWAY (below the shutdown's drain period, so calls sent before the
    /// GOAWAY still finish inside it).
    pub settle: Duration,
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
/// graceful shutdown) when `life` or `shutdown` says so: an idle connection
/// at once; one past its age or at shutdown leaves first (its subscriptions
/// end), then closes once quiet for [`QUIET`] or after `life.settle`.
/// `close` is told why before the connection can send anything of it, so
/// whatever it counts is counted before the client can see the close.
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
    // Leaving: the GOAWAY goes out when quiet, or at this instant.
    let mut settle_by: Option<Instant> = None;
    // The GOAWAY was sent: only the connection's end is awaited.
    let mut sent = false;
    loop {
        let wake = if sent {
            None
        } else if let Some(by) = settle_by {
            let quiet = activity
                .idle_deadline(QUIET)
                .unwrap_or_else(|| Instant::now() + RECHECK);
            Some(quiet.min(by))
        } else {
            let idle_at = life.idle.map(|idle| {
                activity
                    .idle_deadline(idle)
                    // Busy: look again one idle period from now.
                    .unwrap_or_else(|| Instant::now() + idle)
            });
            match (idle_at, aged_at) {
                (Some(idle), Some(aged)) => Some(idle.min(aged)),
                (idle, aged) => idle.or(aged),
            }
        };
        tokio::select! {
            result = connection.as_mut() => return (result, closed),
            () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                let now = Instant::now();
                if let Some(by) = settle_by {
                    let quiet = activity.idle_deadline(QUIET).is_some_and(|at| now >= at);
                    if quiet || now >= by {
                        close(connection.as_mut(), closed);
                        sent = true;
                    }
                } else if aged_at.is_some_and(|aged| now >= aged) {
                    closed = Closed::Aged;
                    activity.leave();
                    settle_by = Some(now + life.settle);
                } else if life.idle.and_then(|idle| activity.idle_deadline(idle)).is_some_and(|at| now >= at) {
                    closed = Closed::Idle;
                    close(connection.as_mut(), closed);
                    sent = true;
                }
            }
            _ = shutdown.wait_for(|stop| *stop), if !sent && closed != Closed::Shutdown => {
                closed = Closed::Shutdown;
                activity.leave();
                let by = Instant::now() + life.settle;
                settle_by = Some(settle_by.map_or(by, |earlier| earlier.min(by)));
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
            settle: Duration::from_secs(5),
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
            settle: Duration::from_secs(5),
        };
        let mut leaving = activity.leaving();
        let started = Instant::now();
        let (_, closed) = run(Fake { closing: None }, close, &activity, life, never()).await;
        assert_eq!(closed, Closed::Aged);
        assert!(*leaving.borrow_and_update(), "its subscriptions were told to end");
        // Busy all along: the GOAWAY waited the whole settle period.
        let lived = started.elapsed();
        assert!(
            lived >= Duration::from_secs(95) && lived <= Duration::from_secs(116),
            "{lived:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leaving_connection_closes_once_quiet_and_not_while_a_call_is_open() {
        let activity = Activity::new();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let life = Life {
            idle: None,
            age: None,
            settle: Duration::from_secs(30),
        };
        // A subscription open at shutdown ends when told (at once here); a
        // write in flight ends 2 s later; the GOAWAY follows one quiet
        // second after it, long before the settle bound.
        let subscription = activity.call();
        let write = activity.call();
        let mut leaving = activity.leaving();
        let calls = tokio::spawn(async move {
            leaving.wait_for(|leaving| *leaving).await.unwrap();
            drop(subscription);
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(write);
        });
        let started = Instant::now();
        let stop = tokio::spawn(async move {
            let _ = tx.send(true);
            tokio::time::sleep(Duration::from_mins(1)).await;
            tx
        });
        let (_, closed) = run(Fake { closing: None }, close, &activity, life, rx).await;
        assert_eq!(closed, Closed::Shutdown);
        let lived = started.elapsed();
        assert!(
            lived >= Duration::from_secs(3) && lived < Duration::from_millis(3_200),
            "the GOAWAY goes one quiet second after the last call: {lived:?}"
        );
        calls.await.unwrap();
        stop.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_closes_an_idle_connection_within_a_quiet_second() {
        let activity = Activity::new();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let life = Life {
            idle: None,
            age: None,
            settle: Duration::from_secs(5),
        };
        let stop = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = tx.send(true);
            tx
        });
        let started = Instant::now();
        let (_, closed) = run(Fake { closing: None }, close, &activity, life, rx).await;
        assert_eq!(closed, Closed::Shutdown);
        // Quiet since its start: the GOAWAY goes with the shutdown, at 1 s.
        let lived = started.elapsed();
        assert!(
            lived >= Duration::from_secs(1) && lived < Duration::from_millis(1_200),
            "{lived:?}"
        );
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
