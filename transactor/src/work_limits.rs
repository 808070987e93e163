//! Overload shedding at the node: how much client work runs at once, how
//! long a call may wait for its turn, how much one database and one
//! principal may take. A call over a limit is refused `RESOURCE_EXHAUSTED`
//! with a retry hint (`corium_fleet_wire::overload`) before it does any
//! work, so a resend is safe and latency stays bounded instead of growing
//! with the queue.
//!
//! The limits apply to the client surface: every `Transactor`, `Catalog`,
//! `PeerServer` and `Requests` call takes a place at the node's front door
//! (`service/admit.rs`); the fleet's own calls (activation, handoff, status)
//! are never shed, so overload cannot stop ownership from moving. A wait for
//! a basis holds no place (`waiters.rs`). The per-principal rate is enforced here, at the node that does
//! the work, so that neither several ingresses nor their retries can give
//! one principal more than its allowance at a node.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_common::counted::{Counted, Counts};
use corium_fleet_wire::overload::Scope;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The node's work limits, resolved from flags.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct WorkLimitsConfig {
    /// Client calls running at once on this node.
    pub max_inflight: usize,
    /// Calls waiting for a place; one more is refused at once.
    pub max_queued: usize,
    /// How long a call may wait for a place before it is refused.
    pub max_queue_wait: Duration,
    /// Calls running or waiting at once for one database, so one hot
    /// database cannot take every place on the node.
    pub max_per_database: usize,
    /// Calls a second one principal may start on this node (0: no limit).
    /// The burst is one second's worth.
    pub rate_per_principal: u32,
}

impl Default for WorkLimitsConfig {
    fn default() -> Self {
        Self {
            max_inflight: 256,
            max_queued: 1024,
            max_queue_wait: Duration::from_millis(500),
            max_per_database: 128,
            rate_per_principal: 0,
        }
    }
}

/// Why a call was refused (the `reason` label of the refusal counter).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Shed {
    /// Every place was taken and the queue was full.
    QueueFull,
    /// The call waited `max_queue_wait` without getting a place.
    QueueTimeout,
    /// Its database had `max_per_database` calls already.
    Database,
    /// Its principal was over `rate_per_principal`.
    Rate,
    /// A wait for a basis found no place among the node's waits
    /// (`waiters.rs`; counted there).
    Waits,
}

impl Shed {
    /// The metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::QueueTimeout => "queue_timeout",
            Self::Database => "database",
            Self::Rate => "rate",
            Self::Waits => "waits",
        }
    }

    /// Every reason a work place is refused for, for metrics.
    pub const ALL: [Self; 4] = [Self::QueueFull, Self::QueueTimeout, Self::Database, Self::Rate];
}

/// A token bucket: `rate` tokens a second, at most `burst` saved.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, rate: f64, burst: f64, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.updated = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
        }
    }
}

/// A call refused for the node's load, before it did any work: what
/// refused it, how far the refusal reaches, and when to try again. The
/// service edge turns it into `RESOURCE_EXHAUSTED` with the hint
/// (`service/status.rs`).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Overloaded {
    /// Which limit refused (the metric label).
    pub reason: Shed,
    /// Whom the refusal is about: the node, one database, one caller.
    pub scope: Scope,
    /// What the caller reads: the limit, and that a retry is safe.
    pub message: String,
    /// When a retry may find a place.
    pub retry_after: Duration,
}

/// The node's work limits and their state.
pub(crate) struct WorkLimits {
    config: WorkLimitsConfig,
    places: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// Calls running or waiting per database.
    per_database: Counts<String>,
    /// One bucket per principal seen in the last minute (bounded).
    buckets: moka::sync::Cache<String, Arc<Mutex<Bucket>>>,
    /// Calls refused, by [`Shed`] reason (in [`Shed::ALL`] order).
    shed: [std::sync::atomic::AtomicU64; 4],
    /// Calls given a place since start.
    admitted: std::sync::atomic::AtomicU64,
}

/// A call's place; dropping it frees the place (and the database's count).
pub(crate) struct WorkPermit {
    _place: OwnedSemaphorePermit,
    _database: Counted<String>,
}

impl WorkLimits {
    /// Limits as configured.
    #[must_use]
    pub(crate) fn new(config: WorkLimitsConfig) -> Arc<Self> {
        Arc::new(Self {
            places: Arc::new(Semaphore::new(config.max_inflight.max(1))),
            config,
            waiting: AtomicUsize::new(0),
            per_database: Counts::new(),
            buckets: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_mins(1))
                .build(),
            shed: Default::default(),
            admitted: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Writes the limits' series: calls running and waiting, and refusals
    /// by reason.
    pub(crate) fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        scrape.gauge(
            "corium_fleet_calls_running",
            "Client calls running on this node (at most --max-inflight-calls).",
            self.running(),
        );
        scrape.gauge(
            "corium_fleet_calls_waiting",
            "Client calls waiting for a place (at most --max-queued-calls).",
            self.waiting(),
        );
        scrape.counters(
            "corium_fleet_calls_shed_total",
            "Client calls refused RESOURCE_EXHAUSTED before doing any work, by reason.",
            Shed::ALL
                .iter()
                .zip(&self.shed)
                .map(|(reason, count)| ([("reason", reason.label())], count.load(Ordering::Relaxed))),
        );
    }

    /// Calls waiting for a place now.
    #[must_use]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Calls running now.
    #[must_use]
    pub(crate) fn running(&self) -> usize {
        self.config.max_inflight.max(1) - self.places.available_permits()
    }

    /// Calls given a place since start (status views derive a rate).
    #[must_use]
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// The limit of calls running at once.
    #[must_use]
    pub(crate) fn max_inflight(&self) -> usize {
        self.config.max_inflight.max(1)
    }

    /// A place for a call of `principal` on `db`, waiting at most
    /// `max_queue_wait` (or `deadline`, if sooner) for one.
    ///
    /// # Errors
    /// Which limit refused the call.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        principal: &str,
        db: &str,
        deadline: Option<Duration>,
    ) -> Result<WorkPermit, Overloaded> {
        let entered = async {
            self.rate(principal)?;
            let database = self.database(db)?;
            let place = match Arc::clone(&self.places).try_acquire_owned() {
                Ok(place) => place,
                Err(_) => self.wait(deadline).await?,
            };
            Ok(WorkPermit {
                _place: place,
                _database: database,
            })
        }
        .await;
        match &entered {
            Ok(_) => {
                self.admitted.fetch_add(1, Ordering::Relaxed);
            }
            Err(Overloaded { reason, .. }) => {
                let index = Shed::ALL.iter().position(|shed| shed == reason).unwrap_or(0);
                self.shed[index].fetch_add(1, Ordering::Relaxed);
            }
        }
        entered
    }

    /// Takes one of `principal`'s calls from its rate without a place (a
    /// wait, which holds no place, still counts against the caller's rate).
    ///
    /// # Errors
    /// The rate refused the call.
    pub(crate) fn charge(&self, principal: &str) -> Result<(), Overloaded> {
        self.rate(principal).inspect_err(|_| {
            let index = Shed::ALL.iter().position(|shed| *shed == Shed::Rate).unwrap_or(0);
            self.shed[index].fetch_add(1, Ordering::Relaxed);
        })
    }

    fn rate(&self, principal: &str) -> Result<(), Overloaded> {
        if self.config.rate_per_principal == 0 {
            return Ok(());
        }
        let rate = f64::from(self.config.rate_per_principal);
        let burst = rate.max(1.0);
        let bucket = self.buckets.get_with_by_ref(principal, || {
            Arc::new(Mutex::new(Bucket {
                tokens: burst,
                updated: Instant::now(),
            }))
        });
        let taken = bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(rate, burst, Instant::now());
        taken.map_err(|wait| Overloaded {
            reason: Shed::Rate,
            scope: Scope::Caller,
            message: format!(
                "principal {principal} is over its limit of {} calls a second on this node; retry later",
                self.config.rate_per_principal
            ),
            retry_after: wait,
        })
    }

    fn database(&self, db: &str) -> Result<Counted<String>, Overloaded> {
        self.per_database
            .enter(db, self.config.max_per_database)
            .ok_or_else(|| Overloaded {
                reason: Shed::Database,
                scope: Scope::Database,
                message: format!(
                    "database {db:?} has {} calls in progress on its owner, its limit; retry later",
                    self.config.max_per_database
                ),
                retry_after: Duration::from_millis(100),
            })
    }

    async fn wait(&self, deadline: Option<Duration>) -> Result<OwnedSemaphorePermit, Overloaded> {
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _left = Waiting(&self.waiting);
        if queued >= self.config.max_queued {
            return Err(Overloaded {
                reason: Shed::QueueFull,
                scope: Scope::Node,
                message: format!(
                    "the node is overloaded: {} calls running and {} waiting; retry later",
                    self.config.max_inflight, self.config.max_queued
                ),
                retry_after: self.config.max_queue_wait,
            });
        }
        let wait = deadline.map_or(self.config.max_queue_wait, |left| {
            left.min(self.config.max_queue_wait)
        });
        match tokio::time::timeout(wait, Arc::clone(&self.places).acquire_owned()).await {
            Ok(Ok(place)) => Ok(place),
            // The semaphore is never closed; a timeout is the overload.
            Ok(Err(_)) | Err(_) => Err(Overloaded {
                reason: Shed::QueueTimeout,
                scope: Scope::Node,
                message: format!(
                    "the node is overloaded: no place for the call within {} ms; retry later",
                    wait.as_millis()
                ),
                retry_after: self.config.max_queue_wait,
            }),
        }
    }
}

/// Counts a waiting call out when it stops waiting.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(config: WorkLimitsConfig) -> Arc<WorkLimits> {
        WorkLimits::new(config)
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_node_queues_within_the_wait_then_refuses_with_a_hint() {
        let limits = limits(WorkLimitsConfig {
            max_inflight: 1,
            max_queued: 1,
            max_queue_wait: Duration::from_millis(200),
            ..WorkLimitsConfig::default()
        });
        let first = limits.enter("p", "a", None).await.expect("a place");
        // The second waits; a third finds the queue full at once.
        let waiter = tokio::spawn({
            let limits = Arc::clone(&limits);
            async move {
                limits
                    .enter("p", "b", None)
                    .await
                    .map(drop)
                    .map_err(|refused| refused.reason)
            }
        });
        tokio::task::yield_now().await;
        assert_eq!(limits.waiting(), 1);
        let refused = limits.enter("p", "c", None).await.err().expect("refused");
        assert_eq!(refused.reason, Shed::QueueFull);
        assert_eq!(refused.scope, Scope::Node);
        // The waiter times out at the queue wait, not later.
        assert_eq!(waiter.await.unwrap(), Err(Shed::QueueTimeout));
        assert_eq!(limits.waiting(), 0);
        drop(first);
        assert_eq!(limits.running(), 0);
        assert!(limits.enter("p", "a", None).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_freed_in_time_admits_the_waiter() {
        let limits = limits(WorkLimitsConfig {
            max_inflight: 1,
            ..WorkLimitsConfig::default()
        });
        let first = limits.enter("p", "a", None).await.expect("a place");
        let waiter = tokio::spawn({
            let limits = Arc::clone(&limits);
            async move { limits.enter("p", "b", None).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(first);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn one_database_cannot_take_every_place() {
        let limits = limits(WorkLimitsConfig {
            max_per_database: 2,
            ..WorkLimitsConfig::default()
        });
        let one = limits.enter("p", "hot", None).await.expect("first");
        let two = limits.enter("p", "hot", None).await.expect("second");
        let refused = limits.enter("p", "hot", None).await.err().expect("refused");
        assert_eq!(refused.reason, Shed::Database);
        assert_eq!(refused.scope, Scope::Database);
        assert!(
            limits.enter("p", "cold", None).await.is_ok(),
            "other databases still run"
        );
        drop(two);
        assert!(limits.enter("p", "hot", None).await.is_ok());
        // Counts of finished calls are forgotten.
        drop(one);
        assert_eq!(limits.per_database.keys(), 0);
    }

    #[tokio::test]
    async fn the_rate_is_per_principal_and_hints_the_next_token() {
        let limits = limits(WorkLimitsConfig {
            rate_per_principal: 2,
            ..WorkLimitsConfig::default()
        });
        assert!(limits.enter("alice", "a", None).await.is_ok());
        assert!(limits.enter("alice", "a", None).await.is_ok());
        let refused = limits.enter("alice", "a", None).await.err().expect("refused");
        assert_eq!(refused.reason, Shed::Rate);
        let hint = refused.retry_after;
        assert!(
            hint > Duration::ZERO && hint <= Duration::from_millis(500),
            "{hint:?}"
        );
        assert!(
            limits.enter("bob", "a", None).await.is_ok(),
            "another principal has its own"
        );
    }
}
