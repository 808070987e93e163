//! A scale model of the control plane (issue 17, item 7): many nodes and a
//! large catalog in one process, over one real store, without starting a
//! process per node. What runs is the fleet's and Corium's own code where it
//! can be called without a node:
//!
//! - registry renewals: [`registry::register`] and [`registry::keep`] per
//!   modelled node, at the node's defaults (record TTL 10 s, renewed every
//!   3 s), each record listing the active databases the node owns;
//! - the registry read: one [`registry::follow`] per node, every
//!   min(registry renewal, lease TTL / 3) (5 s / 3 at the defaults;
//!   [`registry::period`]), as
//!   `transactor/src/lib.rs` spawns it: every record in one bulk prefix read
//!   (the opened store's `prefix_read`: one query on `PostgreSQL`, counted by
//!   [`CountedPrefixRead`]; on the filesystem `ListThenRead` over the
//!   counting store, a listing and a get per record), handed to an `on_read`
//!   that sets the node's members view ([`Members::set_live`]) and sends the
//!   records into the node's watch channel;
//! - lease renewals: Corium's own `corium_transactor::lease::renew` per
//!   active database every lease TTL / 3 (5 s / 3), as Corium's
//!   `spawn_maintenance` (corium-transactor 0.1.90, `node.rs` 1259–1290)
//!   does, followed by the one root read of `refresh_keys_if_stale`
//!   (`node.rs` 3436–3445), which is modelled (a private method);
//! - the standby watcher: `transactor/src/standby.rs` `watch` needs a
//!   `Host`, so its loop is reimplemented here: one round per registry
//!   snapshot from the node's channel (no registry read of its own), the
//!   `watched` filter (every record but this node's, their owned lists,
//!   those this node does not own and is a candidate for), then
//!   [`roots::read`] of each, calling the same store function;
//! - placement: [`placement::candidates`] over the modelled members, the
//!   owner being the first candidate.
//!
//! Store operations are counted per kind by a wrapper, over a fixed window
//! after a warm-up; every loop stops on a signal. A round's operations
//! divided by the rounds done give "per round"; times the rounds the real
//! schedule asks for, "at schedule" (what a fleet would ask of the store
//! even when this one process on a shared machine falls behind).
//! The moved-owner counts are pure placement computation over the catalog.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use corium_fleet_common::owner::now_unix_ms;
use corium_fleet_common::placement::{self, Member};
use corium_fleet_store::postgres::PoolOptions;
use corium_fleet_store::prefix_read::{ListThenRead, PrefixRead};
use corium_fleet_store::registry::{self, Members, Record};
use corium_fleet_store::{Opened, Storage, roots};
use corium_store::{FullStore, RootStore, db_root_name};
use corium_transactor::lease::{self, Lease};
use serde::Serialize;
use tokio::sync::watch;

/// The node's defaults (`transactor/src/config/mod.rs`).
const LEASE_TTL: Duration = Duration::from_secs(5);
const REGISTRY_TTL: Duration = Duration::from_secs(10);
const REGISTRY_RENEW: Duration = Duration::from_secs(3);
const STORAGE_TIMEOUT: Duration = Duration::from_secs(5);
const REPLICAS: usize = placement::DEFAULT_REPLICAS;

/// How often a node reads the registry, by the nodes' own rule
/// ([`registry::period`]): 5 s / 3 at the defaults.
fn registry_period() -> Duration {
    registry::period(REGISTRY_RENEW, LEASE_TTL)
}

/// One modelled fleet: `nodes` nodes, `active` leased databases.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) nodes: usize,
    pub(crate) active: usize,
}

/// The scenario's result.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) backend: String,
    pub(crate) catalog: usize,
    pub(crate) replicas: usize,
    pub(crate) lease_ttl_ms: u64,
    pub(crate) registry_renew_ms: u64,
    /// The period of each node's one registry read (follow and watcher).
    pub(crate) registry_read_ms: u64,
    pub(crate) window_s: f64,
    pub(crate) runs: Vec<Run>,
    pub(crate) moves: Vec<Moves>,
    pub(crate) load: String,
}

/// One modelled fleet's storage traffic.
#[derive(Debug, Serialize)]
pub(crate) struct Run {
    pub(crate) nodes: usize,
    pub(crate) active: usize,
    /// Databases the watchers of all nodes follow together.
    pub(crate) watched: usize,
    pub(crate) kinds: Vec<Kind>,
    pub(crate) measured_per_s: f64,
    pub(crate) at_schedule_per_s: f64,
    /// Whether every node's members view held all `nodes` at the end.
    pub(crate) members_seen: bool,
    pub(crate) setup_s: f64,
    pub(crate) load: String,
}

/// Storage operations of one kind.
#[derive(Debug, Serialize)]
pub(crate) struct Kind {
    pub(crate) name: &'static str,
    /// Root reads (gets, listings, bulk prefix reads) per second, as
    /// measured.
    pub(crate) reads_per_s: f64,
    /// Root writes (CAS, deletes) per second, as measured.
    pub(crate) writes_per_s: f64,
    /// Rounds done per second, as measured, and as the schedule asks.
    pub(crate) rounds_per_s: f64,
    pub(crate) rounds_due_per_s: f64,
    /// Operations per round (the watcher's: per node and round).
    pub(crate) ops_per_round: f64,
    /// Where `ops_per_round` comes from: "measured", or "code" (what the
    /// code does per round: keep and follow always, the watcher when the
    /// store let it finish no round in the window). Follow's round is one
    /// query on `PostgreSQL`, a listing and a get per record elsewhere.
    pub(crate) per_round_from: &'static str,
    /// Operations per second at the real schedule.
    pub(crate) at_schedule_per_s: f64,
}

/// Owners and candidate sets moved by one membership change.
#[derive(Debug, Serialize)]
pub(crate) struct Moves {
    pub(crate) event: &'static str,
    pub(crate) zones: usize,
    pub(crate) nodes_before: usize,
    pub(crate) databases: usize,
    pub(crate) owners_moved: usize,
    pub(crate) owners_moved_share: f64,
    /// The least any placement must move: 1/(N+1) on a join, the leaving
    /// node's share on a leave.
    pub(crate) owners_ideal_share: f64,
    pub(crate) candidate_sets_changed: usize,
    pub(crate) candidate_sets_share: f64,
    /// R/(N+1) on a join, R/N on a leave.
    pub(crate) candidate_sets_ideal_share: f64,
}

/// The counting wrapper (a module of its own: `delegate_blobs!` names
/// `Result`, which this file's result type would shadow).
mod counting {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use async_trait::async_trait;
    use corium_fleet_store::prefix_read::{PrefixRead, PrefixRows};
    use corium_store::{FullStore, RootStore, StoreError};

    /// Operation counts of one kind.
    #[derive(Default)]
    pub(super) struct Ops {
        pub(super) gets: AtomicU64,
        /// Listings and bulk prefix reads.
        pub(super) lists: AtomicU64,
        pub(super) writes: AtomicU64,
    }

    #[derive(Clone, Copy, Debug, Default)]
    pub(super) struct Count {
        pub(super) gets: u64,
        pub(super) lists: u64,
        pub(super) writes: u64,
    }

    impl Ops {
        pub(super) fn snapshot(&self) -> Count {
            Count {
                gets: self.gets.load(Ordering::Relaxed),
                lists: self.lists.load(Ordering::Relaxed),
                writes: self.writes.load(Ordering::Relaxed),
            }
        }
    }

    /// The shared store, counting root operations into one kind.
    pub(super) struct Counted {
        pub(super) inner: Arc<dyn FullStore>,
        pub(super) ops: Arc<Ops>,
    }

    corium_fleet_store::delegate_blobs!(Counted, inner);

    #[async_trait]
    impl RootStore for Counted {
        async fn get_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
            self.ops.gets.fetch_add(1, Ordering::Relaxed);
            self.inner.get_root(name).await
        }

        async fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<(), StoreError> {
            self.ops.writes.fetch_add(1, Ordering::Relaxed);
            self.inner.cas_root(name, expected, new).await
        }

        async fn delete_root(&self, name: &str) -> Result<(), StoreError> {
            self.ops.writes.fetch_add(1, Ordering::Relaxed);
            self.inner.delete_root(name).await
        }

        async fn list_roots(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
            self.ops.lists.fetch_add(1, Ordering::Relaxed);
            self.inner.list_roots(prefix).await
        }
    }

    /// The opened store's bulk prefix read, counting each read as one
    /// operation (one query on `PostgreSQL`).
    pub(super) struct CountedPrefixRead {
        pub(super) inner: Arc<dyn PrefixRead>,
        pub(super) ops: Arc<Ops>,
    }

    #[async_trait]
    impl PrefixRead for CountedPrefixRead {
        async fn read_prefix(&self, prefix: &str, max_bytes: usize) -> Result<PrefixRows, StoreError> {
            self.ops.lists.fetch_add(1, Ordering::Relaxed);
            self.inner.read_prefix(prefix, max_bytes).await
        }

        async fn list_after(&self, prefix: &str, after: &str) -> Result<Vec<String>, StoreError> {
            self.ops.lists.fetch_add(1, Ordering::Relaxed);
            self.inner.list_after(prefix, after).await
        }
    }
}

use counting::{Count, Counted, CountedPrefixRead, Ops};

/// The kinds counted, in table order. The watcher reads no registry of its
/// own any more: its records come from `follow`.
const KINDS: [&str; 4] = [
    "registry renewal (keep)",
    "registry read (follow)",
    "watcher: roots",
    "lease renewal",
];

/// The watchers' rounds: begun (one per registry snapshot), and complete
/// (every watched root read without a failure or timeout) with their root
/// operations.
#[derive(Default)]
struct Rounds {
    begun: AtomicU64,
    whole: AtomicU64,
    whole_ops: AtomicU64,
}

#[derive(Clone, Copy)]
struct RoundCount {
    begun: u64,
    whole: u64,
    whole_ops: u64,
}

impl Rounds {
    fn snapshot(&self) -> RoundCount {
        RoundCount {
            begun: self.begun.load(Ordering::Relaxed),
            whole: self.whole.load(Ordering::Relaxed),
            whole_ops: self.whole_ops.load(Ordering::Relaxed),
        }
    }
}

fn node_id(i: usize) -> String {
    format!("node-{i:03}")
}

fn database(i: usize) -> String {
    format!("db-{i:06}")
}

fn members(nodes: usize, zones: usize) -> Vec<Member> {
    (0..nodes)
        .map(|i| Member {
            node_id: node_id(i),
            zone: if zones > 1 {
                format!("z{}", i % zones)
            } else {
                String::new()
            },
            weight: 1,
            endpoint: format!("http://{}", node_id(i)),
        })
        .collect()
}

/// Sleeps `offset` unless `stop` comes first; whether to go on.
async fn after(offset: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(offset) => true,
        _ = stop.wait_for(|stop| *stop) => false,
    }
}

/// `offset` of `i` among `n` spread over `period` (timers of different
/// processes are not aligned).
fn stagger(period: Duration, i: usize, n: usize) -> Duration {
    let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    period / n * u32::try_from(i).unwrap_or(0)
}

#[allow(clippy::cast_precision_loss)]
fn share(part: usize, whole: usize) -> f64 {
    part as f64 / whole.max(1) as f64
}

/// Owners and candidate sets moved when a node joins and when one leaves,
/// over `catalog` databases and `nodes` members in `zones` zones.
#[allow(clippy::cast_precision_loss)]
fn moves(catalog: usize, nodes: usize, zones: usize) -> Vec<Moves> {
    let before = members(nodes, zones);
    let joined = members(nodes + 1, zones);
    let mut left = before.clone();
    let gone = left.remove(nodes / 2);
    let ids = |list: Vec<&Member>| list.into_iter().map(|m| m.node_id.clone()).collect::<Vec<_>>();
    let (mut join_owner, mut join_set, mut leave_owner, mut leave_set, mut gone_owned) = (0, 0, 0, 0, 0);
    for i in 0..catalog {
        let db = database(i);
        let was = ids(placement::candidates(&db, &before, REPLICAS));
        let set: BTreeSet<&String> = was.iter().collect();
        if was[0] == gone.node_id {
            gone_owned += 1;
        }
        for (after, owner, changed) in [
            (&joined, &mut join_owner, &mut join_set),
            (&left, &mut leave_owner, &mut leave_set),
        ] {
            let now = ids(placement::candidates(&db, after, REPLICAS));
            if now[0] != was[0] {
                *owner += 1;
            }
            if now.iter().collect::<BTreeSet<_>>() != set {
                *changed += 1;
            }
        }
    }
    let replicas = REPLICAS as f64;
    vec![
        Moves {
            event: "join",
            zones,
            nodes_before: nodes,
            databases: catalog,
            owners_moved: join_owner,
            owners_moved_share: share(join_owner, catalog),
            owners_ideal_share: 1.0 / (nodes + 1) as f64,
            candidate_sets_changed: join_set,
            candidate_sets_share: share(join_set, catalog),
            candidate_sets_ideal_share: replicas / (nodes + 1) as f64,
        },
        Moves {
            event: "leave",
            zones,
            nodes_before: nodes,
            databases: catalog,
            owners_moved: leave_owner,
            owners_moved_share: share(leave_owner, catalog),
            owners_ideal_share: share(gone_owned, catalog),
            candidate_sets_changed: leave_set,
            candidate_sets_share: share(leave_set, catalog),
            candidate_sets_ideal_share: replicas / nodes as f64,
        },
    ]
}

/// A fresh, empty store: a temporary directory, or a new `PostgreSQL`
/// database on the server at `postgres`.
async fn fresh_store(postgres: Option<&str>, dir: &std::path::Path) -> anyhow::Result<Opened> {
    let storage = match postgres {
        Some(base) => match corium_fleet_tests::Backend::postgres(base) {
            corium_fleet_tests::Backend::Postgres { url } => Storage::Postgres { url },
            _ => anyhow::bail!("not a PostgreSQL backend"),
        },
        None => Storage::Filesystem,
    };
    Ok(corium_fleet_store::open_store(
        &storage,
        dir,
        Duration::from_secs(30),
        PoolOptions::sized(corium_fleet_store::DEFAULT_POOL_SIZE),
    )
    .await?)
}

/// Runs `work` over `items` on `lanes` concurrent tasks.
async fn in_lanes<T, F, Fut>(items: Vec<T>, lanes: usize, work: F) -> anyhow::Result<()>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let work = Arc::new(work);
    let mut queues: Vec<Vec<T>> = (0..lanes).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        queues[i % lanes].push(item);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for queue in queues {
        let work = Arc::clone(&work);
        tasks.spawn(async move {
            for item in queue {
                work(item).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Models one fleet of `shape` over a fresh store and counts its storage
/// operations over `window` after `warmup`.
#[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
async fn model(
    postgres: Option<&str>,
    shape: Shape,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Run> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let opened = fresh_store(postgres, dir.path()).await?;
    let base = Arc::clone(&opened.store);
    let fleet = members(shape.nodes, 1);
    // Placement of the active databases: candidate indices, owner first.
    let active: Vec<(String, Vec<usize>)> = (0..shape.active)
        .map(|i| {
            let db = database(i);
            let ranked = placement::candidates(&db, &fleet, REPLICAS)
                .iter()
                .map(|m| fleet.iter().position(|f| f.node_id == m.node_id).unwrap_or(0))
                .collect();
            (db, ranked)
        })
        .collect();
    let candidates: Arc<HashMap<String, Vec<usize>>> = Arc::new(active.iter().cloned().collect());
    let ttl_ms = i64::try_from(LEASE_TTL.as_millis())?;
    // Each active database's lease, acquired with Corium's own function.
    let leases: Arc<std::sync::Mutex<HashMap<String, Lease>>> = Arc::default();
    {
        let (store, leases) = (Arc::clone(&base), Arc::clone(&leases));
        in_lanes(active.clone(), 16, move |(db, ranked)| {
            let (store, leases) = (Arc::clone(&store), Arc::clone(&leases));
            let owner = format!("{}/inc-{}", node_id(ranked[0]), ranked[0]);
            async move {
                let held = lease::acquire(store.as_ref(), &db, &owner, "http://model", ttl_ms, now_unix_ms())
                    .await?;
                leases
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(db, held);
                Ok(())
            }
        })
        .await?;
    }
    let mut owned: Vec<Vec<String>> = vec![Vec::new(); shape.nodes];
    for (db, ranked) in &active {
        owned[ranked[0]].push(db.clone());
    }
    let registry_ttl_ms = i64::try_from(REGISTRY_TTL.as_millis())?;
    let records: Vec<Record> = (0..shape.nodes)
        .map(|i| Record {
            node_id: node_id(i),
            incarnation: format!("inc-{i}"),
            zone: String::new(),
            weight: 1,
            endpoint: fleet[i].endpoint.clone(),
            expires_unix_ms: now_unix_ms() + registry_ttl_ms,
            owned: owned[i].clone(),
            load: None,
            features: Vec::new(),
            storage_keys: Vec::new(),
        })
        .collect();
    for record in &records {
        registry::register(base.as_ref(), record).await?;
    }
    let setup_s = started.elapsed().as_secs_f64();

    let ops: Vec<Arc<Ops>> = KINDS.iter().map(|_| Arc::default()).collect();
    let counted = |kind: usize| -> Arc<dyn FullStore> {
        Arc::new(Counted {
            inner: Arc::clone(&base),
            ops: Arc::clone(&ops[kind]),
        })
    };
    let (stop, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let rounds: Arc<Rounds> = Arc::default();
    // Empty at first: holding all N at the end shows `follow` fed them.
    let views: Vec<Members> = (0..shape.nodes).map(|_| Members::default()).collect();
    let lease_period = (LEASE_TTL / 3).max(Duration::from_millis(50));
    let registry_period = registry_period();
    for (i, record) in records.into_iter().enumerate() {
        // registry::keep, as `transactor/src/lib.rs` spawns it.
        let (store, mut stopped_i) = (counted(0), stopped.clone());
        let published = owned[i].clone();
        let offset = stagger(REGISTRY_RENEW, i, shape.nodes);
        tasks.spawn(async move {
            if after(offset, &mut stopped_i).await {
                registry::keep(
                    store,
                    record,
                    REGISTRY_TTL,
                    REGISTRY_RENEW,
                    move || (published.clone(), None),
                    Arc::new(tokio::sync::Notify::new()),
                    stopped_i,
                )
                .await;
            }
        });
        // registry::follow, the node's one registry read (lib.rs): the
        // members view and the watcher's records.
        let reader: Arc<dyn PrefixRead> = if postgres.is_some() {
            Arc::new(CountedPrefixRead {
                inner: Arc::clone(&opened.prefix_read),
                ops: Arc::clone(&ops[1]),
            })
        } else {
            Arc::new(ListThenRead(counted(1)))
        };
        let (records_tx, mut records_rx) = watch::channel(Arc::new(Vec::<Record>::new()));
        let (view, mut stopped_i) = (views[i].clone(), stopped.clone());
        let offset = stagger(registry_period, i, shape.nodes);
        tasks.spawn(async move {
            if after(offset, &mut stopped_i).await {
                registry::follow(
                    reader,
                    registry_period,
                    STORAGE_TIMEOUT,
                    move |records| {
                        view.set_live(&records);
                        records_tx.send_replace(Arc::new(records));
                    },
                    stopped_i,
                )
                .await;
            }
        });
        // The standby watcher (standby.rs `watch`): one round per registry
        // snapshot. Its root reads are counted twice: into the kind's totals
        // and into this node's own counts, which delimit its complete
        // rounds.
        let mine: Arc<Ops> = Arc::default();
        let roots_store: Arc<dyn FullStore> = Arc::new(Counted {
            inner: counted(2),
            ops: Arc::clone(&mine),
        });
        let rounds = Arc::clone(&rounds);
        let (me, incarnation) = (node_id(i), format!("inc-{i}"));
        let (candidates, mut stopped_i) = (Arc::clone(&candidates), stopped.clone());
        tasks.spawn(async move {
            loop {
                // Ends with the follow task (its sender dropped) or the stop.
                tokio::select! {
                    changed = records_rx.changed() => if changed.is_err() { return },
                    _ = stopped_i.wait_for(|stop| *stop) => return,
                }
                let records = Arc::clone(&records_rx.borrow_and_update());
                rounds.begun.fetch_add(1, Ordering::Relaxed);
                let at_start = mine.snapshot();
                // `watched`: host.cell(db).is_none() && host.rank(db).is_some():
                // not owned here, a candidate here (placement computed once
                // for the static members; the same answer `rank_of` gives).
                let dbs: BTreeSet<&String> = records
                    .iter()
                    .filter(|record| !(record.node_id == me && record.incarnation == incarnation))
                    .flat_map(|record| record.owned.iter())
                    .filter(|db| {
                        candidates
                            .get(*db)
                            .is_some_and(|ranked| ranked[0] != i && ranked.contains(&i))
                    })
                    .collect();
                let mut whole = true;
                for db in dbs {
                    if *stopped_i.borrow() {
                        return;
                    }
                    whole &= roots::read(roots_store.as_ref(), db, STORAGE_TIMEOUT)
                        .await
                        .is_ok();
                }
                if whole {
                    let now = mine.snapshot();
                    let ops = now.gets + now.lists - at_start.gets - at_start.lists;
                    rounds.whole_ops.fetch_add(ops, Ordering::Relaxed);
                    rounds.whole.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    // Corium's lease renewal per active database (node.rs 1259–1290).
    for (k, (db, _)) in active.iter().enumerate() {
        let store = counted(3);
        let mut stopped_k = stopped.clone();
        let Some(mut held) = leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(db)
        else {
            continue;
        };
        let db = db.clone();
        let offset = stagger(lease_period, k, shape.active);
        tasks.spawn(async move {
            if !after(offset, &mut stopped_k).await {
                return;
            }
            let mut ticker = tokio::time::interval(lease_period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stopped_k.wait_for(|stop| *stop) => return,
                }
                if let Ok(renewed) = lease::renew(store.as_ref(), &db, &held, ttl_ms, now_unix_ms()).await {
                    held = renewed;
                }
                // refresh_keys_if_stale's read of the root (node.rs 3436–3445).
                let _ = store.get_root(&db_root_name(&db)).await;
            }
        });
    }

    tokio::time::sleep(warmup).await;
    let before: Vec<Count> = ops.iter().map(|ops| ops.snapshot()).collect();
    let rounds_before = rounds.snapshot();
    let measured_from = Instant::now();
    tokio::time::sleep(window).await;
    let after_window: Vec<Count> = ops.iter().map(|ops| ops.snapshot()).collect();
    let rounds_after = rounds.snapshot();
    let seconds = measured_from.elapsed().as_secs_f64();
    let members_seen = views.iter().all(|view| view.get().len() == shape.nodes);
    let _ = stop.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        tasks.abort_all();
    }

    let watched: usize = active.iter().map(|(_, ranked)| ranked.len() - 1).sum();
    let nodes = shape.nodes as f64;
    let due = [
        nodes / REGISTRY_RENEW.as_secs_f64(),
        nodes / registry_period.as_secs_f64(),
        nodes / registry_period.as_secs_f64(),
        shape.active as f64 / lease_period.as_secs_f64(),
    ];
    let mut kinds = Vec::new();
    let watcher_rounds = (rounds_after.begun - rounds_before.begun) as f64;
    let whole_rounds = (rounds_after.whole - rounds_before.whole) as f64;
    let whole_ops = (rounds_after.whole_ops - rounds_before.whole_ops) as f64;
    for (k, name) in KINDS.iter().enumerate() {
        let (a, b) = (after_window[k], before[k]);
        let reads = (a.gets - b.gets + a.lists - b.lists) as f64;
        let writes = (a.writes - b.writes) as f64;
        // A round: a CAS of keep and of a renewal, a listing or bulk read of
        // follow, a registry snapshot taken by the watcher.
        let rounds = match k {
            0 | 3 => writes,
            2 => watcher_rounds,
            _ => (a.lists - b.lists) as f64,
        };
        // Per round: keep and follow as their code does it (registry: a get
        // and a CAS; one query on PostgreSQL, a listing and a get per record
        // elsewhere), confirmed where the store keeps up; the watcher's from
        // its complete rounds (two gets, `meta:` and `db:`, per watched
        // database); a renewal's as measured.
        let (ops_per_round, per_round_from) = match k {
            0 => (2.0, "code"),
            1 if postgres.is_some() => (1.0, "code"),
            1 => (1.0 + nodes, "code"),
            2 if whole_rounds == 0.0 => (2.0 * watched as f64 / nodes, "code"),
            2 => (whole_ops / whole_rounds, "measured"),
            _ if rounds > 0.0 => ((reads + writes) / rounds, "measured"),
            _ => (0.0, "measured"),
        };
        kinds.push(Kind {
            name,
            reads_per_s: reads / seconds,
            writes_per_s: writes / seconds,
            rounds_per_s: rounds / seconds,
            rounds_due_per_s: due[k],
            ops_per_round,
            per_round_from,
            at_schedule_per_s: ops_per_round * due[k],
        });
    }
    Ok(Run {
        nodes: shape.nodes,
        active: shape.active,
        watched,
        measured_per_s: kinds.iter().map(|k| k.reads_per_s + k.writes_per_s).sum(),
        at_schedule_per_s: kinds.iter().map(|k| k.at_schedule_per_s).sum(),
        kinds,
        members_seen,
        setup_s,
        load: crate::stats::load(),
    })
}

/// Runs the model for each of `shapes` (catalog of `catalog` databases) over
/// `PostgreSQL` (a fresh database each) when `postgres` is given, else the
/// filesystem store; then the moved-owner counts.
///
/// # Errors
/// The store cannot be opened or set up.
pub(crate) async fn run(
    postgres: Option<&str>,
    catalog: usize,
    shapes: &[Shape],
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Result> {
    let mut runs = Vec::new();
    for shape in shapes {
        anyhow::ensure!(
            shape.active <= catalog,
            "more active databases than the catalog holds"
        );
        runs.push(model(postgres, *shape, warmup, window).await?);
    }
    let nodes = shapes.iter().map(|shape| shape.nodes).max().unwrap_or(100);
    let mut all_moves = Vec::new();
    for zones in [1, 3] {
        all_moves.extend(moves(catalog, nodes, zones));
    }
    Ok(Result {
        backend: if postgres.is_some() {
            "postgres"
        } else {
            "filesystem"
        }
        .to_owned(),
        catalog,
        replicas: REPLICAS,
        lease_ttl_ms: u64::try_from(LEASE_TTL.as_millis())?,
        registry_renew_ms: u64::try_from(REGISTRY_RENEW.as_millis())?,
        registry_read_ms: u64::try_from(registry_period().as_millis())?,
        window_s: window.as_secs_f64(),
        runs,
        moves: all_moves,
        load: crate::stats::load(),
    })
}
