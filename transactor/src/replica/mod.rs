//! Hosted read replicas: `corium.v1.PeerServer` reads (`Query`, `Pull`,
//! `Datoms`, `TxRange`, `DbStats`) answered on this node from an on-demand
//! replica of the database that follows its owner, so query work spreads
//! over the fleet instead of landing on the lease holder (Corium's fleet
//! design: "hosted peer servers can maintain on-demand read replicas and
//! evict them when idle").
//!
//! A replica is a stock `corium_peer::Connection` subscribed to the owner,
//! served by stock `corium_peer::server::PeerServerSvc` with the node's
//! guard, so its answers are Corium's own. What the fleet adds:
//!
//! - where it follows from: the owner named by the database's lease,
//!   reached over the node-to-node mTLS (its certificate must name that
//!   node); a database nobody owns is activated at its candidates first;
//! - that it still follows: [`Replica`] asks the owner for its basis every
//!   `--replica-follow-interval-ms` and refuses reads once it has not heard
//!   from it in three periods or has not applied what the owner had one
//!   period ago; when the lease moves (a `NotOwner`, or an owner that stops
//!   answering and another holder in the lease root) it follows the new
//!   holder with what it holds — its subscription goes through this node's
//!   relay, which resubscribes it there from its basis (design note 0023) —
//!   and it is retired only when the database is gone or no owner answers
//!   for 40 periods;
//! - how far it must be: a read waits, within its deadline, until the
//!   replica has applied the `corium-min-basis` the client sent and the
//!   basis its view names (an as-of or since `t`, as far as the owner has
//!   got: a stock peer server answers a view past its basis with its
//!   present), else refuses `UNAVAILABLE` with a retry hint — never an
//!   answer from behind it;
//! - how many: at most `--max-replicas`, evicted after `--replica-idle-ms`
//!   unused, which drops the connection (its memory and its subscription);
//! - where the work runs: on the process's read threads ([`on_read_threads`]),
//!   at a lower CPU priority, so a query (which Corium executes inline, as
//!   CPU work on the calling thread) never starves the node's writes.
//!
//! Layout: this file holds [`Replicas`], the node's set; `follow.rs` one
//! [`Replica`] and its follow probe; `owner.rs` who holds the lease;
//! `relay.rs` the loopback relay the replicas subscribe through and each
//! one's seat at it; `counts.rs` the metrics; `error.rs` why a replica
//! cannot serve a read now ([`ReplicaError`]).

mod counts;
mod error;
mod follow;
mod owner;
mod relay;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use corium_fleet_common::names;
use corium_protocol::authz::Guard;
pub(crate) use counts::ReadCounts;
pub(crate) use error::ReplicaError;
pub(crate) use follow::Replica;
pub(crate) use relay::{Relay, RelayedStream};

use crate::config::ReplicaSettings as Settings;

use crate::host::{Host, Refusal};
use owner::owner;

/// The nice value of the read threads: a replica's work (applying the
/// owner's stream, answering queries) yields the CPU to the node's own
/// writes when both want it.
const READ_NICE: i32 = 10;

/// The process's read runtime, started on the first read: as many threads
/// as cores, each at [`READ_NICE`]. One per process (every host in it shares
/// it), never dropped. `None` when it could not start (no threads to be
/// had): reads then run on the node's own threads, at its priority.
fn read_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(std::thread::available_parallelism().map_or(2, std::num::NonZero::get))
                .thread_name("corium-reads")
                .on_thread_start(|| {
                    // On Linux a nice value is per thread: this one only.
                    if let Err(error) = rustix::process::setpriority_process(None, READ_NICE) {
                        tracing::warn!(%error, "read thread keeps the default priority");
                    }
                })
                .enable_all()
                .build()
                .inspect_err(|error| {
                    tracing::error!(%error, "read threads did not start; reads run on the node's own threads");
                })
                .ok()
        })
        .as_ref()
}

/// Runs `work` on the read threads and waits for it. Whatever `work`
/// spawns (a replica's stream, its probe) runs there too.
///
/// # Panics
/// When `work` panics (the panic goes on in the caller).
pub(crate) async fn on_read_threads<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    let Some(runtime) = read_runtime() else {
        return work.await;
    };
    match runtime.spawn(work).await {
        Ok(value) => value,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// The node's read replicas, by database name.
pub(crate) struct Replicas {
    cache: moka::future::Cache<String, Arc<Replica>>,
    settings: Settings,
    /// Where every replica of this node subscribes (`relay.rs`).
    relay: Arc<Relay>,
    /// Reads and replicas, counted.
    pub counts: Arc<ReadCounts>,
}

impl Replicas {
    /// An empty set under `settings`, its replicas subscribing through
    /// `relay`.
    #[must_use]
    pub(crate) fn new(settings: Settings, relay: Arc<Relay>) -> Self {
        let counts = Arc::new(ReadCounts::default());
        let evicted = Arc::clone(&counts);
        let cache = moka::future::Cache::builder()
            .max_capacity(settings.max)
            .time_to_idle(settings.idle)
            .eviction_listener(move |_db, _replica, _cause| {
                evicted.evictions.fetch_add(1, Ordering::Relaxed);
            })
            .build();
        Self {
            cache,
            settings,
            relay,
            counts,
        }
    }

    /// Replicas held now: built less dropped (the cache's own count lags
    /// until its pending work runs).
    #[must_use]
    pub(crate) fn active(&self) -> u64 {
        let built = self.counts.activations.load(Ordering::Relaxed);
        built.saturating_sub(self.counts.evictions.load(Ordering::Relaxed))
    }

    /// The largest lag of any replica, in transactions behind what its owner
    /// last reported.
    #[must_use]
    pub(crate) fn max_lag(&self) -> u64 {
        self.cache
            .iter()
            .map(|(_, replica)| replica.lag())
            .max()
            .unwrap_or(0)
    }

    /// Writes the replica series.
    pub(crate) fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        scrape.gauge(
            "corium_fleet_replicas",
            "Read replicas this node holds.",
            self.active(),
        );
        scrape.gauge(
            "corium_fleet_replica_lag_transactions",
            "The largest number of transactions any replica was behind its owner at its last probe.",
            self.max_lag(),
        );
        scrape.counters(
            "corium_fleet_replica_reads_total",
            "PeerServer reads by outcome: served at once, served after waiting for a basis, refused (behind or not following).",
            [
                ("served", &self.counts.served),
                ("waited", &self.counts.waited),
                ("refused", &self.counts.refused),
            ]
            .map(|(result, value)| ([("result", result)], load(value))),
        );
        scrape.counter(
            "corium_fleet_replica_activations_total",
            "Read replicas built (a subscription to the owner and its backfill).",
            load(&self.counts.activations),
        );
        scrape.counter(
            "corium_fleet_replica_evictions_total",
            "Read replicas dropped: idle past --replica-idle-ms, over --max-replicas, their database deleted, or no owner to follow.",
            load(&self.counts.evictions),
        );
        scrape.counter(
            "corium_fleet_replica_owner_changes_total",
            "Read replicas that went on following a new owner after an ownership move, their state kept (only the tail sent).",
            load(&self.counts.owner_changes),
        );
    }

    /// The replicas as the memory budget sees them: what they hold, and a
    /// way to drop them all (they are rebuilt on the next read).
    #[must_use]
    pub(crate) fn memory(&self) -> Arc<dyn crate::host::DroppableMemory> {
        Arc::new(ReplicaMemory(self.cache.clone()))
    }

    /// Applies idle and capacity evictions now (moka applies them lazily,
    /// on cache operations; an idle node performs none).
    pub(crate) async fn sweep(&self) {
        self.cache.run_pending_tasks().await;
    }

    /// The replica of `db` that follows its owner now, built if there is
    /// none (once however many reads wait for it), within `within`.
    ///
    /// # Errors
    /// `NOT_FOUND` for an unknown database, `INVALID_ARGUMENT` for a name
    /// that can name none, `UNAVAILABLE` (with a retry hint) when no replica
    /// can follow an owner now or hosted reads are off here.
    pub(crate) async fn get(
        &self,
        host: &Arc<Host>,
        guard: &Guard,
        db: &str,
        within: Duration,
    ) -> Result<Arc<Replica>, ReplicaError> {
        if self.settings.max == 0 {
            // Nothing read: another replica can answer.
            return Err(ReplicaError::not_now(
                "this node serves no read replicas (--max-replicas 0); try another".into(),
                Duration::ZERO,
            ));
        }
        if let Some(replica) = self.cache.get(db).await {
            if !replica.is_retired() {
                return Ok(replica);
            }
            self.cache.invalidate(db).await;
        }
        // A replica holds its database's whole history: not on a node past
        // its memory budget (nothing was read; another replica or the owner
        // answers).
        if host.memory_use().await.over() {
            return Err(ReplicaError::not_now(
                format!(
                    "node {} is at its memory budget and builds no read replica of {db:?} now; try another",
                    host.config.node_id
                ),
                Duration::from_secs(1),
            ));
        }
        // Boxed: a connection's set-up is a large future.
        let open = Box::pin(async {
            let replica = self.open(host, guard, db).await?;
            self.counts.activations.fetch_add(1, Ordering::Relaxed);
            Ok::<_, ReplicaError>(replica)
        });
        match tokio::time::timeout(within, self.cache.try_get_with(db.to_owned(), open)).await {
            Ok(Ok(replica)) => Ok(replica),
            Ok(Err(error)) => Err(ReplicaError::Shared(error)),
            Err(_) => Err(ReplicaError::not_now(
                format!("the read replica of {db:?} is still loading; retry"),
                self.settings.follow_interval,
            )),
        }
    }

    /// Builds a replica of `db` following its current owner (activating
    /// the database at its candidates when nobody holds it).
    async fn open(&self, host: &Arc<Host>, guard: &Guard, db: &str) -> Result<Arc<Replica>, ReplicaError> {
        names::check(db).map_err(Refusal::from)?;
        let (node, endpoint) = owner(host, names::home(db)).await.map_err(|error| {
            if error.is_about_the_name() {
                // Answers about the name: final.
                error
            } else {
                // Ownership in motion, storage not answering: nothing was
                // read, another replica or a later try may answer.
                ReplicaError::NoOwner {
                    db: db.to_owned(),
                    cause: Box::new(error),
                    retry_after: self.settings.follow_interval,
                }
            }
        })?;
        let cache = self.cache.clone();
        let retire: follow::Retire = Arc::new(move |db: String| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.invalidate(&db).await });
        });
        let (host, guard, db) = (Arc::clone(host), guard.clone(), db.to_owned());
        let following = follow::Following {
            interval: self.settings.follow_interval,
            relay: Arc::clone(&self.relay),
            counts: Arc::clone(&self.counts),
            retire,
        };
        // Its stream and probe are spawned where it connects: on the read
        // threads.
        on_read_threads(async move { Replica::connect(&host, guard, &db, &node, &endpoint, following).await })
            .await
    }
}

/// The read replicas' memory, for the budget (`host/memory.rs`).
struct ReplicaMemory(moka::future::Cache<String, Arc<Replica>>);

impl crate::host::DroppableMemory for ReplicaMemory {
    fn datoms(&self) -> u64 {
        self.0
            .iter()
            .map(|(_, replica)| u64::try_from(replica.recorded_datoms()).unwrap_or(u64::MAX))
            .sum()
    }

    fn drop_all(&self) {
        self.0.invalidate_all();
    }
}
