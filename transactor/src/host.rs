//! The host: every cell of one node, and the ownership decision made before
//! any owner-dependent call is served.
//!
//! The decision, in order (brief, invariants 1–5):
//! 1. validate the fleet metadata (route header = body, at most one hop);
//! 2. a live cell for the database: serve, unless the caller routed on a
//!    different lease version (typed `NotOwner`) or the lease could not be
//!    renewed recently (`UNAVAILABLE`: ownership cannot be verified);
//! 3. otherwise read the database root from storage (`UNAVAILABLE` when that
//!    fails; `NOT_FOUND` when the catalog has no such database): another live
//!    owner → `NotOwner` naming it; no live owner and this node a candidate →
//!    activate here. A node that is not a candidate answers `NotOwner`
//!    listing the candidates *without* reading storage (invariant 5: it never
//!    touches the roots of databases it is not a candidate for).
//!
//! Handoff (admin RPC, drain on SIGTERM, rebalancing after a membership
//! change) is here too: stop admitting, drain, release, and ask the target
//! to activate at once; meanwhile this node answers `NotOwner` naming the
//! target. `docs/design/0005-placement-and-handoff.md` has the protocol.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_common::metadata::{self, MetadataError, Routing};
use corium_fleet_common::not_owner::{self, Candidate, NotOwner};
use corium_fleet_common::placement::Member;
use corium_fleet_common::placement_map;
use corium_fleet_proto::fleet::HandoffResponse;
use corium_store::{DbRoot, FullStore, db_root_name, meta_root_name};
use futures::StreamExt as _;
use tonic::Status;

use crate::cell::{Cell, OpenError, Template};
use crate::config::Config;
use crate::counting::{CountingStore, RootOps};
use crate::metrics::Metrics;
use crate::peer::Peers;

pub use corium_fleet_common::owner::{node_of, now_unix_ms};

/// Databases handed off at once during a drain.
const DRAIN_PARALLELISM: usize = 16;
/// How often a handoff asks its target again when the target still saw
/// this node's released lease (a late renewal; see `hand`).
const RELEASE_RACE_RETRIES: usize = 5;

/// What storage says about one database.
#[derive(Clone, Debug)]
pub struct RootView {
    /// The catalog entry exists.
    pub exists: bool,
    pub root: Option<DbRoot>,
}

impl RootView {
    /// The owner id and version of an unexpired lease, if any.
    #[must_use]
    pub fn live_owner(&self, now_ms: i64) -> Option<&DbRoot> {
        self.root
            .as_ref()
            .filter(|root| !root.owner.is_empty() && root.lease_expires_unix_ms > now_ms)
    }
}

/// All cells of one node.
pub struct Host {
    pub config: Config,
    pub template: Template,
    pub base: Arc<dyn FullStore>,
    pub metrics: Arc<Metrics>,
    pub incarnation: String,
    /// Placement members: the static `--member` list, or the live node
    /// registry, refreshed in the background.
    pub members: crate::registry::Members,
    /// The operator's placement map (empty without `--placement-map`).
    pub map: placement_map::Watched,
    /// How this node asks a peer to activate (handoff, drain).
    pub peers: Peers,
    /// Root operations per database (`/debug/root-ops`).
    pub root_ops: Arc<CountingStore>,
    /// Databases being handed off, and to whom: requests for them are
    /// answered with a `NotOwner` naming the target until it serves.
    handing_off: Mutex<HashMap<String, Member>>,
    /// Databases whose cell is draining and releasing (eviction, handoff,
    /// shutdown): not served, not re-activated, until the release is done.
    closing: Mutex<std::collections::HashSet<String>>,
    /// Signalled whenever a cell is installed or removed, so the registry
    /// record's owned list (what candidates watch) is republished soon.
    pub owned_changed: Arc<tokio::sync::Notify>,
    cells: Mutex<HashMap<String, Arc<Cell>>>,
    /// One activation at a time per database on this node.
    activating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Set once shutdown begins: no new activations.
    stopping: std::sync::atomic::AtomicBool,
}

impl Host {
    #[must_use]
    pub fn new(
        config: Config,
        template: Template,
        root_ops: Arc<CountingStore>,
        map: placement_map::Map,
        peers: Peers,
        incarnation: String,
    ) -> Arc<Self> {
        let base: Arc<dyn FullStore> = Arc::clone(&root_ops) as Arc<dyn FullStore>;
        Arc::new(Self {
            members: crate::registry::Members::new(config.members.clone()),
            map: placement_map::Watched::new(map),
            peers,
            root_ops,
            handing_off: Mutex::new(HashMap::new()),
            closing: Mutex::new(std::collections::HashSet::new()),
            owned_changed: Arc::new(tokio::sync::Notify::new()),
            config,
            template,
            base,
            metrics: Arc::new(Metrics::default()),
            incarnation,
            cells: Mutex::new(HashMap::new()),
            activating: Mutex::new(HashMap::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The live cell for `db`, if this node hosts it.
    #[must_use]
    pub fn cell(&self, db: &str) -> Option<Arc<Cell>> {
        self.cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(db)
            .cloned()
    }

    /// Every live cell.
    #[must_use]
    pub fn cells(&self) -> Vec<Arc<Cell>> {
        self.cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Ranked candidates of `db` over the live members (the placement map
    /// first, else rendezvous).
    #[must_use]
    pub fn candidates(&self, db: &str) -> Vec<Member> {
        placement_map::candidates(db, &self.members.get(), self.config.replicas, &self.map.get())
            .into_iter()
            .cloned()
            .collect()
    }

    /// The candidates `db` will have once this node has left: where a drain
    /// hands it.
    #[must_use]
    pub fn successors(&self, db: &str) -> Vec<Member> {
        let others: Vec<Member> = self
            .members
            .get()
            .iter()
            .filter(|member| member.node_id != self.config.node_id)
            .cloned()
            .collect();
        placement_map::candidates(db, &others, self.config.replicas, &self.map.get())
            .into_iter()
            .cloned()
            .collect()
    }

    /// This node's rank among the candidates of `db`.
    #[must_use]
    pub fn rank(&self, db: &str) -> Option<usize> {
        self.candidates(db)
            .iter()
            .position(|member| member.node_id == self.config.node_id)
    }

    /// Root operations per database since start.
    #[must_use]
    pub fn root_ops(&self) -> std::collections::BTreeMap<String, RootOps> {
        self.root_ops.snapshot()
    }

    fn unavailable(&self, db: &str, what: &str, error: &dyn std::fmt::Display) -> Status {
        self.metrics.storage_unavailable.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(db, %error, "{what}");
        Status::unavailable(format!(
            "cannot verify ownership of {db:?}: {what}: {error}; retry later"
        ))
    }

    /// Reads the catalog entry and root of `db`, bounded by the storage timeout.
    ///
    /// # Errors
    /// `UNAVAILABLE` when storage does not answer in time or fails.
    pub async fn read_root(&self, db: &str) -> Result<RootView, Status> {
        let read = async {
            let meta = self.base.get_root(&meta_root_name(db)).await?;
            let root = self.base.get_root(&db_root_name(db)).await?;
            Ok::<_, corium_store::StoreError>((meta.is_some(), root.as_deref().and_then(DbRoot::decode)))
        };
        match tokio::time::timeout(self.config.storage_timeout, read).await {
            Ok(Ok((exists, root))) => Ok(RootView { exists, root }),
            Ok(Err(error)) => Err(self.unavailable(db, "storage read failed", &error)),
            Err(_) => Err(self.unavailable(db, "storage read timed out", &"no answer")),
        }
    }

    /// Ranked candidates of `db` as the wire type; while this node shuts
    /// down, the candidates it leaves behind.
    #[must_use]
    pub fn candidate_list(&self, db: &str) -> Vec<Candidate> {
        let candidates = if self.is_stopping() {
            self.successors(db)
        } else {
            self.candidates(db)
        };
        candidates
            .iter()
            .enumerate()
            .map(|(rank, member)| Candidate {
                node_id: member.node_id.clone(),
                zone: member.zone.clone(),
                endpoint: member.endpoint.clone(),
                rank: u32::try_from(rank).unwrap_or(u32::MAX),
            })
            .collect()
    }

    /// The typed `NotOwner` answer for `db`, with the owner hint taken from
    /// the root (a hint: the hinted node verifies its own lease).
    pub fn not_owner(&self, db: &str, owner: Option<&DbRoot>) -> Status {
        match owner {
            Some(root) => {
                self.not_owner_hint(db, node_of(&root.owner), root.lease_version, &root.owner_endpoint)
            }
            None => self.not_owner_hint(db, "", 0, ""),
        }
    }

    /// The typed `NotOwner` answer naming an explicit owner.
    pub fn not_owner_hint(
        &self,
        db: &str,
        owner_id: &str,
        lease_version: u64,
        route_endpoint: &str,
    ) -> Status {
        self.metrics.not_owner.fetch_add(1, Ordering::Relaxed);
        not_owner::to_status(&NotOwner {
            database: db.to_owned(),
            owner_id: owner_id.to_owned(),
            lease_version,
            retryable: true,
            route_endpoint: route_endpoint.to_owned(),
            candidates: self.candidate_list(db),
            last_basis_t: 0,
        })
    }

    /// Validates fleet metadata, counting rejections.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming what is wrong.
    pub fn check_metadata(&self, map: &tonic::metadata::MetadataMap, db: &str) -> Result<Routing, Status> {
        metadata::check(map, db).map_err(|error| {
            match error {
                MetadataError::RouteMismatch { .. } => &self.metrics.rejected_route_mismatch,
                MetadataError::TooManyHops(_) => &self.metrics.rejected_hop,
                _ => &self.metrics.rejected_route_mismatch,
            }
            .fetch_add(1, Ordering::Relaxed);
            Status::invalid_argument(error.to_string())
        })
    }

    /// The cell that must serve an owner-dependent call for `db`, after the
    /// ownership decision described in the module docs.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT`, `NOT_FOUND`, typed `NotOwner`, or `UNAVAILABLE`.
    pub async fn owner(
        self: &Arc<Self>,
        map: &tonic::metadata::MetadataMap,
        db: &str,
    ) -> Result<Arc<Cell>, Status> {
        let routing = self.check_metadata(map, db)?;
        if let Some(cell) = self.cell(db) {
            return self.check_cell(&cell, &routing).await.map(|()| cell);
        }
        if let Some(target) = self.handoff_target(db) {
            return Err(self.not_owner_hint(db, &target.node_id, 0, &target.endpoint));
        }
        if self.is_closing(db) {
            // Draining and releasing here: retry in a moment.
            return Err(self.not_owner(db, None));
        }
        if self.rank(db).is_none() || self.is_stopping() {
            // Not a candidate: never read this database's roots; the
            // candidates know its owner.
            return Err(self.not_owner(db, None));
        }
        let view = self.read_root(db).await?;
        if !view.exists {
            return Err(Status::not_found(format!("unknown database {db:?}")));
        }
        let now = now_unix_ms();
        if let Some(owner) = view.live_owner(now)
            && !self.template.is_own(&owner.owner)
        {
            if node_of(&owner.owner) == self.config.node_id {
                // A previous run of this node holds the lease until it
                // expires: no live owner to name; retry.
                return Err(self.not_owner(db, None));
            }
            return Err(self.not_owner(db, Some(owner)));
        }
        // No live owner, or only a closed cell of this very process (whose
        // lease `activate` reclaims).
        let cell = self.activate(db, false).await?;
        self.check_cell(&cell, &routing).await?;
        Ok(cell)
    }

    async fn check_cell(&self, cell: &Cell, routing: &Routing) -> Result<(), Status> {
        if let Some(version) = routing.lease_version
            && version != cell.lease_version
        {
            return Err(self.not_owner_hint(
                &cell.db,
                &self.config.node_id,
                cell.lease_version,
                &self.config.advertise,
            ));
        }
        let lease = cell
            .lease()
            .await
            .map_err(|error| self.unavailable(&cell.db, "cell lost its database", &error))?;
        if lease.expires_unix_ms <= now_unix_ms() {
            // Renewals have been failing (storage unreachable): this node
            // can no longer prove it holds the lease.
            return Err(self.unavailable(
                &cell.db,
                "write lease could not be renewed",
                &"lease expired locally",
            ));
        }
        Ok(())
    }

    fn activation_lock(&self, db: &str) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(
            self.activating
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(db.to_owned())
                .or_default(),
        )
    }

    /// Opens the cell for `db` here (lease acquire + recovery), one at a
    /// time per database. `takeover` marks an activation after another
    /// owner's lease lapsed.
    ///
    /// # Errors
    /// `NotOwner` when another owner won the lease or this node is shutting
    /// down; `UNAVAILABLE` on storage failure.
    pub async fn activate(self: &Arc<Self>, db: &str, takeover: bool) -> Result<Arc<Cell>, Status> {
        let lock = self.activation_lock(db);
        let _guard = lock.lock().await;
        if let Some(cell) = self.cell(db) {
            return Ok(cell);
        }
        if self.stopping.load(Ordering::Acquire) {
            // Shutting down: nothing was taken; the candidates this node
            // leaves behind serve it (a `NotOwner`, which every client
            // resends, rather than an error a stock client gives up on).
            return Err(self.not_owner(db, None));
        }
        let started = Instant::now();
        let mut opened = Cell::open(&self.template, db).await;
        if let Err(OpenError::Held { owner, .. }) = &opened
            && self.template.is_own(owner)
            && !self.is_closing(db)
        {
            // A closed cell of this process still holds the lease: a renewal
            // that was in flight when it was released re-extended it. That
            // cell is deposed (it commits nothing more), so releasing its
            // lease here is safe; then open again, once.
            if self.reclaim_own_lease(db, owner).await {
                opened = Cell::open(&self.template, db).await;
            }
        }
        match opened {
            Ok(cell) => {
                self.metrics.recovery_seconds.observe(started.elapsed());
                self.install(Arc::clone(&cell));
                self.metrics.activations.fetch_add(1, Ordering::Relaxed);
                if takeover {
                    self.metrics.takeovers.fetch_add(1, Ordering::Relaxed);
                }
                self.metrics.activation_seconds.observe(started.elapsed());
                tracing::info!(
                    db,
                    lease_version = cell.lease_version,
                    takeover,
                    elapsed_ms = started.elapsed().as_millis(),
                    "database activated"
                );
                Ok(cell)
            }
            Err(OpenError::Held { .. }) => {
                // Another node won the race; point the caller at it.
                let view = self.read_root(db).await?;
                Err(self.not_owner(db, view.live_owner(now_unix_ms())))
            }
            Err(OpenError::Unknown(_)) => Err(Status::not_found(format!("unknown database {db:?}"))),
            Err(OpenError::Node(error)) => {
                self.metrics.activation_failures.fetch_add(1, Ordering::Relaxed);
                Err(self.unavailable(db, "activation failed", &error))
            }
        }
    }

    /// Releases `db`'s lease if a closed cell of this process holds it.
    pub async fn release_own(&self, db: &str) {
        if self.cell(db).is_some() || self.is_closing(db) {
            return;
        }
        let Ok(view) = self.read_root(db).await else {
            return;
        };
        if let Some(root) = view
            .root
            .filter(|root| self.template.is_own(&root.owner) && root.lease_expires_unix_ms != 0)
        {
            self.reclaim_own_lease(db, &root.owner).await;
        }
    }

    /// Releases the lease a closed cell of this process (`owner`) still
    /// holds on `db`. Returns whether it was released.
    async fn reclaim_own_lease(&self, db: &str, owner: &str) -> bool {
        let Ok(view) = self.read_root(db).await else {
            return false;
        };
        let Some(root) = view.root.filter(|root| root.owner == owner) else {
            return false;
        };
        let held = corium_transactor::lease::Lease {
            owner: root.owner.clone(),
            version: root.lease_version,
            expires_unix_ms: root.lease_expires_unix_ms,
            endpoint: root.owner_endpoint.clone(),
        };
        match corium_transactor::lease::release(self.base.as_ref(), db, &held).await {
            Ok(()) => {
                tracing::info!(
                    db,
                    owner,
                    lease_version = held.version,
                    "released a lease a closed cell of this process still held"
                );
                true
            }
            Err(error) => {
                tracing::warn!(db, owner, %error, "cannot release the lease of a closed cell");
                false
            }
        }
    }

    /// Registers a freshly opened cell and starts its monitor.
    pub fn install(self: &Arc<Self>, cell: Arc<Cell>) {
        self.cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(cell.db.clone(), Arc::clone(&cell));
        self.owned_changed.notify_one();
        tokio::spawn(Arc::clone(self).monitor(cell));
    }

    /// Removes `cell` if it is still the registered one.
    fn remove(&self, cell: &Arc<Cell>) {
        let mut cells = self
            .cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cells
            .get(&cell.db)
            .is_some_and(|current| Arc::ptr_eq(current, cell))
        {
            cells.remove(&cell.db);
            self.owned_changed.notify_one();
        }
    }

    /// Watches one cell until it closes: drops it when Corium deposes it,
    /// evicts it (graceful release) once idle past the configured interval,
    /// and counts lease renewals (expiry moving forward) and renewal failures
    /// (expiry passing).
    async fn monitor(self: Arc<Self>, cell: Arc<Cell>) {
        let mut deposed = cell.node.shutdown_watch();
        let mut closed = cell.closed();
        let period = (self.config.lease_ttl / 3).max(Duration::from_millis(50));
        let mut last_expiry = cell.lease().await.map(|lease| lease.expires_unix_ms).unwrap_or(0);
        let mut failing = false;
        // Consecutive ticks on which this node was not a candidate.
        let mut misplaced = 0u32;
        loop {
            tokio::select! {
                changed = deposed.changed() => {
                    let stopped = changed.is_err();
                    let reason = if stopped { None } else { deposed.borrow().clone() };
                    if stopped || reason.is_some() {
                        self.metrics.depositions.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(db = %cell.db, lease_version = cell.lease_version, reason = reason.as_deref().unwrap_or("node stopped"), "cell deposed; dropping it");
                        cell.close();
                        self.remove(&cell);
                        return;
                    }
                }
                _ = closed.changed() => {
                    self.remove(&cell);
                    return;
                }
                () = tokio::time::sleep(period) => {
                    if let Some(limit) = self.config.idle_evict_after
                        && cell.idle_for().is_some_and(|idle| idle >= limit)
                    {
                        tracing::info!(db = %cell.db, lease_version = cell.lease_version, idle_ms = limit.as_millis(), "idle; releasing the lease and evicting");
                        self.metrics.idle_evictions.fetch_add(1, Ordering::Relaxed);
                        self.evict(&cell).await;
                        return;
                    }
                    if self.rank(&cell.db).is_some() || self.is_stopping() {
                        misplaced = 0;
                    } else {
                        misplaced += 1;
                        // Twice in a row, so a momentary membership blip
                        // does not move anything.
                        if misplaced >= 2 {
                            let candidates = self.candidates(&cell.db);
                            if !candidates.is_empty() {
                                tracing::info!(db = %cell.db, to = %candidates[0].node_id, "no longer a candidate; handing off");
                                self.metrics.rebalances.fetch_add(1, Ordering::Relaxed);
                                let host = Arc::clone(&self);
                                let db = cell.db.clone();
                                tokio::spawn(async move { host.hand_to_first(&db, candidates, "rebalance").await });
                                return;
                            }
                        }
                    }
                    let Ok(lease) = cell.lease().await else { continue };
                    if lease.expires_unix_ms > last_expiry {
                        self.metrics.lease_renewals.fetch_add(1, Ordering::Relaxed);
                        last_expiry = lease.expires_unix_ms;
                        failing = false;
                    } else if !failing && lease.expires_unix_ms <= now_unix_ms() {
                        failing = true;
                        self.metrics.lease_renewal_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(db = %cell.db, lease_version = cell.lease_version, "lease renewal failed; not serving until it recovers");
                    }
                }
            }
        }
    }

    /// Publishes `cell`'s indexes (bounded by the drain timeout), so the
    /// next owner's recovery replays a short log tail. Failures only cost
    /// that owner a longer recovery.
    async fn publish_indexes(&self, cell: &Cell) {
        let started = Instant::now();
        match tokio::time::timeout(self.config.drain_timeout, cell.node.request_index(&cell.db)).await {
            Ok(Ok(basis)) => {
                tracing::debug!(db = %cell.db, index_basis_t = basis, elapsed_ms = started.elapsed().as_millis(), "indexes published before release")
            }
            Ok(Err(error)) => tracing::warn!(db = %cell.db, %error, "cannot publish indexes before release"),
            Err(_) => tracing::warn!(db = %cell.db, "publishing indexes before release timed out"),
        }
    }

    /// Gracefully evicts one cell: publish its indexes, stop routing to it,
    /// drain, release, drop.
    pub async fn evict(&self, cell: &Arc<Cell>) {
        self.publish_indexes(cell).await;
        let drained = self.close_and_release(cell).await;
        self.metrics.evictions.fetch_add(1, Ordering::Relaxed);
        tracing::info!(db = %cell.db, lease_version = cell.lease_version, drained, "lease released");
    }

    /// Stops routing to `cell` (closing: not served, not re-activated while
    /// this runs), drains it and releases its lease. Returns whether every
    /// call in flight finished within the drain timeout.
    async fn close_and_release(&self, cell: &Arc<Cell>) -> bool {
        let closing = self.closing_guard(&cell.db);
        self.remove(cell);
        let drained = cell
            .evict(&self.base, self.config.drain_timeout, self.rerelease_window())
            .await;
        drop(closing);
        drained
    }

    /// Resets `cell` in the background if a commit on it failed in storage
    /// (see `Cell::commit`).
    pub fn reset_if_failed(self: &Arc<Self>, cell: &Arc<Cell>) {
        if cell.storage_failed() {
            let (host, cell) = (Arc::clone(self), Arc::clone(cell));
            tokio::spawn(async move { host.reset(&cell).await });
        }
    }

    /// Drops a cell whose in-memory state may no longer match storage and
    /// releases its lease, so the next request recovers the database from
    /// storage (crash-only: recovery is the one path that knows what is
    /// durable). No index publication first: storage just failed.
    pub async fn reset(&self, cell: &Arc<Cell>) {
        let current = self.cell(&cell.db);
        if !current.is_some_and(|current| Arc::ptr_eq(&current, cell)) {
            return;
        }
        let drained = self.close_and_release(cell).await;
        self.metrics.resets.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(db = %cell.db, lease_version = cell.lease_version, drained, "cell reset after a commit failed in storage; the next request recovers it from storage");
    }

    /// Drops a cell whose database was deleted (its lease record is gone).
    pub fn forget(&self, cell: &Arc<Cell>) {
        cell.close();
        self.remove(cell);
    }

    /// How long an evicted cell's lease is watched for a late renewal: one
    /// renewal period plus a second.
    fn rerelease_window(&self) -> Duration {
        self.config.lease_ttl / 3 + Duration::from_secs(1)
    }

    fn is_closing(&self, db: &str) -> bool {
        self.closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(db)
    }

    /// Marks `db` closing until the guard drops.
    fn closing_guard(&self, db: &str) -> Closing<'_> {
        self.closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(db.to_owned());
        Closing {
            host: self,
            db: db.to_owned(),
        }
    }

    /// The node a database is being handed to, while the handoff runs.
    fn handoff_target(&self, db: &str) -> Option<Member> {
        self.handing_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(db)
            .cloned()
    }

    /// Hands `db`, owned here, to the live candidate `target`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for this node as target, `FAILED_PRECONDITION`
    /// for a target that is not a live candidate, a typed `NotOwner` when
    /// this node does not hold the lease — in each case nothing changes —
    /// and `ABORTED` when the lease was released but the target did not
    /// activate (the database is then cold and activates on its next
    /// request).
    pub async fn handoff(self: &Arc<Self>, db: &str, target: &str) -> Result<HandoffResponse, Status> {
        if self.cell(db).is_none() {
            // Not held here: name the holder so the caller can ask it.
            let view = self.read_root(db).await?;
            if !view.exists {
                return Err(Status::not_found(format!("unknown database {db:?}")));
            }
            return Err(self.not_owner(db, view.live_owner(now_unix_ms())));
        }
        if target == self.config.node_id {
            return Err(Status::invalid_argument(format!(
                "{target:?} already owns {db:?}; hand it to another candidate"
            )));
        }
        let candidates = self.candidates(db);
        let Some(member) = candidates.iter().find(|member| member.node_id == target).cloned() else {
            let names: Vec<&str> = candidates.iter().map(|member| member.node_id.as_str()).collect();
            return Err(Status::failed_precondition(format!(
                "{target:?} is not a live candidate for {db:?} (candidates: {})",
                names.join(", ")
            )));
        };
        self.hand(db, member, "admin").await
    }

    /// The handoff itself, once the target is chosen.
    async fn hand(
        self: &Arc<Self>,
        db: &str,
        target: Member,
        reason: &'static str,
    ) -> Result<HandoffResponse, Status> {
        let lock = self.activation_lock(db);
        let _guard = lock.lock().await;
        let Some(cell) = self.cell(db) else {
            let view = self.read_root(db).await?;
            return Err(self.not_owner(db, view.live_owner(now_unix_ms())));
        };
        // Publish the indexes first, while still serving: the target then
        // recovers from a fresh index instead of replaying the whole log
        // tail, which is most of a handoff's unavailability on storage
        // where the log is one root per record.
        self.publish_indexes(&cell).await;
        let started = Instant::now();
        self.handing_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(db.to_owned(), target.clone());
        let closing = self.closing_guard(db);
        self.remove(&cell);
        let drained = cell
            .evict(&self.base, self.config.drain_timeout, self.rerelease_window())
            .await;
        drop(closing);
        self.metrics.evictions.fetch_add(1, Ordering::Relaxed);
        let mut activated = self.peers.activate(&target.endpoint, db).await;
        for _ in 0..RELEASE_RACE_RETRIES {
            // The target still saw this node's lease: a renewal in flight
            // re-extended it after the release (the race `cell::rerelease`
            // clears within its next pass, ~100 ms). Ask again shortly.
            let ours = activated
                .as_ref()
                .err()
                .and_then(not_owner::from_status)
                .is_some_and(|detail| {
                    detail.owner_id == self.config.node_id && detail.lease_version == cell.lease_version
                });
            if !ours {
                break;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
            activated = self.peers.activate(&target.endpoint, db).await;
        }
        self.handing_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(db);
        let elapsed = started.elapsed();
        match activated {
            Ok(answer) => {
                self.metrics.handoffs.fetch_add(1, Ordering::Relaxed);
                self.metrics.handoff_seconds.observe(elapsed);
                tracing::info!(
                    db,
                    to = %target.node_id,
                    from_version = cell.lease_version,
                    lease_version = answer.lease_version,
                    reason,
                    drained,
                    unavailable_ms = elapsed.as_millis(),
                    "database handed off"
                );
                Ok(HandoffResponse {
                    database: db.to_owned(),
                    from_node_id: self.config.node_id.clone(),
                    to_node_id: target.node_id.clone(),
                    lease_version: answer.lease_version,
                    unavailable_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                    drained,
                })
            }
            Err(status) => {
                self.metrics.handoff_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(db, to = %target.node_id, reason, error = status.message(), "handoff target did not activate; the database is cold");
                Err(Status::aborted(format!(
                    "released {db:?} but {} did not activate it ({}: {}); it activates on its next request",
                    target.node_id,
                    status.code(),
                    status.message()
                )))
            }
        }
    }

    /// Hands `db` to the first of `targets` that activates it; when the
    /// first does not, the lease is already released and the others are
    /// asked in turn. A database nobody takes stays released (cold) and
    /// activates on a candidate at its next request.
    async fn hand_to_first(self: &Arc<Self>, db: &str, targets: Vec<Member>, reason: &'static str) {
        let mut targets = targets.into_iter();
        let Some(first) = targets.next() else { return };
        match self.hand(db, first, reason).await {
            Err(status) if status.code() == tonic::Code::Aborted => {}
            _ => return,
        }
        for target in targets {
            match self.peers.activate(&target.endpoint, db).await {
                Ok(answer) => {
                    self.metrics.handoffs.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(db, to = %target.node_id, lease_version = answer.lease_version, reason, "database handed off to a later candidate");
                    return;
                }
                Err(status) => {
                    tracing::warn!(db, to = %target.node_id, error = status.message(), "candidate did not activate");
                }
            }
        }
    }

    /// Shutdown (drain): stop activating, then hand each owned database to
    /// its next live candidate (release, then that candidate acquires at
    /// once), so no database waits out a TTL. A database no successor takes
    /// is left released: its next request activates it on a candidate.
    pub async fn release_all(self: &Arc<Self>) {
        self.stopping.store(true, Ordering::Release);
        let cells = self.cells();
        let started = Instant::now();
        let count = cells.len();
        futures::stream::iter(cells)
            .map(|cell| {
                let host = Arc::clone(self);
                async move {
                    let successors = host.successors(&cell.db);
                    if successors.is_empty() {
                        host.evict(&cell).await;
                    } else {
                        host.hand_to_first(&cell.db, successors, "drain").await;
                    }
                }
            })
            .buffer_unordered(DRAIN_PARALLELISM)
            .collect::<Vec<()>>()
            .await;
        tracing::info!(
            databases = count,
            elapsed_ms = started.elapsed().as_millis(),
            "drain finished"
        );
    }

    /// Whether shutdown has begun.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// Clears a database's closing mark when dropped.
struct Closing<'a> {
    host: &'a Host,
    db: String,
}

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.host
            .closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.db);
    }
}
