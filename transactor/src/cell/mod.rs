//! A cell: one database hosted as its own Corium `TransactorNode` over a
//! [`view`] of the shared store.
//!
//! Activation opens a cell (lease acquire + recovery, Corium's own code);
//! eviction drains in-flight calls, releases the lease and drops the cell;
//! deposition (Corium's shutdown watch fires) drops it without a release.
//! The rules behind this seam (`ha=false`, no GC in cells, unique owner per
//! incarnation, drain before release, the renewal race) are measured in
//! `docs/design/0002-cells.md`.
//!
//! Layout: this file — a cell, its opening and its admission gate;
//! [`template`] — what every cell of a node is opened with; `commit.rs` —
//! Corium's commit in a task of its own and a whole `Transact`;
//! `eviction.rs` — giving the lease back.

mod commit;
mod eviction;
pub(crate) mod template;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use corium_protocol::authz::Guard;
use corium_protocol::pb;
use corium_protocol::pb::catalog_server::Catalog;
use corium_transactor::lease::{self, Lease};
use corium_transactor::node::{NodeError, TransactorNode};
use corium_transactor::server::CatalogSvc;
use tokio::sync::{Semaphore, watch};

pub(crate) use commit::TransactError;
pub(crate) use template::Template;

use crate::read_ahead::ReadAhead;
use crate::view;

/// One call's admission to a cell (see `Cell::admit`).
pub(crate) type Admission = tokio::sync::OwnedSemaphorePermit;

/// Permits in a cell's admission gate. Drain takes them all.
const GATE_PERMITS: u32 = 1 << 20;

/// One hosted database.
pub struct Cell {
    /// The database this cell hosts.
    pub db: String,
    /// The Corium node hosting it, over a view of the shared store that
    /// shows it only this database.
    pub node: Arc<TransactorNode>,
    /// The lease version this cell acquired. It never changes while the cell
    /// lives (renewals keep the version), so it is what a forwarded request's
    /// `corium-lease-version` is compared with.
    pub lease_version: u64,
    /// Admission gate: every call holds a permit; drain takes all permits so
    /// nothing is in flight when the lease is released.
    gate: Arc<Semaphore>,
    /// Flips to true when the cell stops serving; ends its subscriptions.
    closed: watch::Sender<bool>,
    /// When the cell was opened; `last_used` counts milliseconds from here.
    opened: std::time::Instant,
    /// Milliseconds after `opened` of the last admitted call.
    last_used: AtomicU64,
    /// Live subscriptions: a subscribed database is never idle.
    subscribers: AtomicUsize,
    /// Calls admitted since the cell opened: its load, for load-aware
    /// placement (`host/balance.rs`).
    calls: AtomicU64,
    /// Request ids in flight on this cell (the durable record is in the
    /// database; see `request_id.rs`).
    pub ledger: crate::request_id::Ledger,
    /// Databases this cell's view may write while it forks into them.
    pub fork_targets: view::ForkTargets,
    /// The view's read-ahead of the log. Corium reads the whole log for any
    /// `tx_range`, so a range read holds [`ReadAhead::whole_log`] to make
    /// that one bulk read instead of one read per record.
    pub read_ahead: Arc<ReadAhead>,
    /// Set when a commit failed in storage: the cell's in-memory log state
    /// may no longer match storage, so it must be reset (`Host::reset`).
    storage_failed: std::sync::atomic::AtomicBool,
    /// Held while the fleet publishes this cell's indexes
    /// (`Host::publish_indexes`: a handoff, an eviction) and while
    /// `DeleteDatabase` deletes the database. Corium's publication writes the
    /// database root afresh when it is missing, so one still running when
    /// the delete removed the root would bring it back: the lease and index
    /// roots of a deleted database, which a new database of the same name
    /// then opens over (its first write fails "corrupt transaction log").
    pub(crate) publication: tokio::sync::Mutex<()>,
    /// How long its activation took, in milliseconds: what its next open
    /// will cost roughly, so how long it is worth keeping idle
    /// ([`Self::idle_limit`]).
    open_ms: AtomicU64,
    /// The database's published index basis when the cell opened. Until it
    /// moves, Corium's next publication in this cell rebuilds every index
    /// chunk (it carries chunks over only from a publication of its own):
    /// memory several times the database's, for a moment — what the memory
    /// budget keeps in reserve (`host/memory.rs`).
    pub opened_index_basis: u64,
}

/// An idle database is kept this many times its open time before it is
/// evicted (an open of 1 s: 10 minutes), when that is above the node's
/// `--idle-evict-after-ms`.
const IDLE_PER_OPEN: u32 = 600;
/// The longest an idle database is kept for its open time.
const IDLE_AT_MOST: Duration = Duration::from_hours(1);

/// Keeps a cell from looking idle while a subscription streams from it.
pub struct Subscribed {
    cell: Arc<Cell>,
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.cell.subscribers.fetch_sub(1, Ordering::AcqRel);
        self.cell.touch();
    }
}

/// Why a cell could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another owner holds an unexpired lease.
    #[error("lease for {db:?} is held by {owner} until {expires_unix_ms}")]
    Held {
        /// The database.
        db: String,
        /// The holder's lease owner id (`<node-id>/<incarnation>.<n>`).
        owner: String,
        /// When its lease expires, unless renewed.
        expires_unix_ms: i64,
    },
    /// The catalog has no such database.
    #[error("database {0:?} does not exist")]
    Unknown(String),
    /// Corium failed to open or recover it.
    #[error(transparent)]
    Node(#[from] NodeError),
}

/// Why a database could not be created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CreateError {
    /// The schema is not an EDN vector of attribute maps.
    #[error("{0}")]
    Schema(String),
    /// Corium could not open a node for it (storage, the lease).
    #[error(transparent)]
    Open(NodeError),
    /// Corium's catalog service refused or failed: its own answer, passed
    /// on as it is.
    #[error("{}", .0.message())]
    Corium(tonic::Status),
    /// Created, but its cell could not be opened over it.
    #[error("created, but its cell did not open: {0}")]
    Created(OpenError),
}

impl Cell {
    /// Opens the cell for an existing database: acquires its lease and
    /// recovers it.
    ///
    /// # Errors
    /// [`OpenError::Held`] when another owner holds an unexpired lease.
    pub async fn open(template: &Template, db: &str) -> Result<Arc<Self>, OpenError> {
        let fork_targets = view::ForkTargets::default();
        // The log is read in one go for the two recovery passes, then kept
        // a little for the first whole-log reads (a replay after a takeover).
        let read_ahead = template.read_ahead.start(db);
        let config = template.node_config(Some(db), &fork_targets, Some(&read_ahead));
        // Corium renews a lease only once the database is open: an open that
        // outlasts the TTL (a long history, a slow store) would let another
        // candidate take the database over meanwhile. Renew it here until
        // the open returns.
        let opened = keep_lease_while(
            Arc::clone(&template.base),
            template.lease_ttl_ms,
            db,
            &config.owner,
            Box::pin(TransactorNode::open(config.clone())),
        )
        .await;
        if opened.is_ok() {
            read_ahead.finish_keeping();
        } else {
            read_ahead.finish();
        }
        let node = match opened {
            Ok(node) => node,
            Err(NodeError::Lease(lease::LeaseError::Held {
                owner,
                expires_unix_ms,
            })) => {
                return Err(OpenError::Held {
                    db: db.to_owned(),
                    owner,
                    expires_unix_ms,
                });
            }
            Err(error) => return Err(error.into()),
        };
        if !node.list_dbs().iter().any(|name| name == db) {
            return Err(OpenError::Unknown(db.to_owned()));
        }
        Self::wrap(db, node, fork_targets, read_ahead).await
    }

    /// Creates the database through Corium's own catalog service (so its
    /// validation and error statuses are Corium's), with the request-id
    /// attributes added to its schema, and opens its cell.
    /// `Ok(None)` when the database already existed.
    ///
    /// # Errors
    /// [`CreateError`]: a schema that is no EDN vector, Corium's refusal of
    /// the name, schema or key, or storage.
    pub(crate) async fn create(
        template: &Template,
        mut request: pb::CreateDatabaseRequest,
    ) -> Result<Option<Arc<Self>>, CreateError> {
        let db = request.db.clone();
        // Every fleet database can take request ids (`request_id.rs`).
        request.schema =
            crate::request_id::record::with_schema(&request.schema).map_err(CreateError::Schema)?;
        let fork_targets = view::ForkTargets::default();
        let read_ahead = template.read_ahead.idle(&db);
        let node = TransactorNode::open(template.node_config(Some(&db), &fork_targets, Some(&read_ahead)))
            .await
            .map_err(CreateError::Open)?;
        if !node.list_dbs().is_empty() {
            // The catalog entry already exists and opening just acquired it;
            // give the lease straight back.
            node.release_leases().await;
            return Ok(None);
        }
        let created = CatalogSvc(Arc::clone(&node), Guard::disabled())
            .create_database(tonic::Request::new(request))
            .await
            .map_err(CreateError::Corium)?
            .into_inner()
            .created;
        if !created {
            return Ok(None);
        }
        Self::wrap(&db, node, fork_targets, read_ahead)
            .await
            .map(Some)
            .map_err(CreateError::Created)
    }

    async fn wrap(
        db: &str,
        node: Arc<TransactorNode>,
        fork_targets: view::ForkTargets,
        read_ahead: Arc<ReadAhead>,
    ) -> Result<Arc<Self>, OpenError> {
        let state = node.db_state(db).await?;
        let (lease_version, opened_index_basis) = (state.lease().version, state.index_basis());
        drop(state);
        Ok(Arc::new(Self {
            db: db.to_owned(),
            node,
            lease_version,
            gate: Arc::new(Semaphore::new(GATE_PERMITS as usize)),
            closed: watch::channel(false).0,
            opened: std::time::Instant::now(),
            last_used: AtomicU64::new(0),
            subscribers: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            ledger: crate::request_id::Ledger::default(),
            fork_targets,
            read_ahead,
            storage_failed: std::sync::atomic::AtomicBool::new(false),
            publication: tokio::sync::Mutex::new(()),
            open_ms: AtomicU64::new(0),
            opened_index_basis,
        }))
    }

    /// The lease as this cell holds it now (expiry moves with renewals).
    ///
    /// # Errors
    /// When Corium no longer hosts the database in this cell.
    pub async fn lease(&self) -> Result<Lease, NodeError> {
        Ok(self.node.db_state(&self.db).await?.lease())
    }

    /// Admits one call, or `None` when the cell is draining or closed. The
    /// permit is owned, so a commit task can keep it past its caller.
    pub fn admit(&self) -> Option<Admission> {
        let permit = Arc::clone(&self.gate).try_acquire_owned().ok()?;
        self.touch();
        self.calls.fetch_add(1, Ordering::Relaxed);
        Some(permit)
    }

    /// Calls admitted since the cell opened.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_used.fetch_max(now, Ordering::AcqRel);
    }

    /// Registers a subscription for as long as the guard lives.
    #[must_use]
    pub fn subscribed(self: &Arc<Self>) -> Subscribed {
        self.subscribers.fetch_add(1, Ordering::AcqRel);
        self.touch();
        Subscribed {
            cell: Arc::clone(self),
        }
    }

    /// Subscriptions open on this cell now.
    #[must_use]
    pub fn subscribers(&self) -> usize {
        self.subscribers.load(Ordering::Acquire)
    }

    /// How long the cell has had no call in flight and no subscription;
    /// `None` while it is in use.
    #[must_use]
    pub fn idle_for(&self) -> Option<Duration> {
        let in_flight = self.gate.available_permits() < GATE_PERMITS as usize;
        if in_flight || self.subscribers.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_used.load(Ordering::Acquire));
        Some(self.opened.elapsed().saturating_sub(last))
    }

    /// Records how long the cell's activation took.
    pub fn opened_in(&self, open: Duration) {
        self.open_ms.store(
            u64::try_from(open.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// How long this cell may stay idle before it is evicted: `floor` (the
    /// node's `--idle-evict-after-ms`), or [`IDLE_PER_OPEN`] times its open
    /// time when that is longer, at most [`IDLE_AT_MOST`] — so a small
    /// database costs nothing soon after its last call, and a large one is
    /// not reopened from its whole history for every sporadic call.
    #[must_use]
    pub fn idle_limit(&self, floor: Duration) -> Duration {
        idle_limit(floor, Duration::from_millis(self.open_ms.load(Ordering::Relaxed)))
    }

    /// A receiver that turns true when the cell stops serving.
    #[must_use]
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Marks the cell closed without releasing anything (deposition).
    pub fn close(&self) {
        self.gate.close();
        let _ = self.closed.send(true);
    }
}

/// Runs `open` (Corium's open of `db` in `base`, whose lease it acquires as
/// `owner` for `ttl_ms`) while renewing that lease every third of the TTL,
/// as Corium's own renewal will once the open returns. A renewal is Corium's `lease::renew`: a CAS
/// that holds only while the root still names `owner` at the version it
/// read, so it never extends a lease someone else holds, and Corium's own
/// renewals (reading the root afresh) go on after it.
async fn keep_lease_while<T>(
    base: Arc<dyn corium_store::FullStore>,
    ttl_ms: i64,
    db: &str,
    owner: &str,
    open: impl std::future::Future<Output = T>,
) -> T {
    // Spawned, so that renewals go on while the open computes; aborted when
    // this future ends or is dropped (a cancelled activation must not leave
    // a task renewing a lease no cell holds).
    let _renewal = AbortOnDrop(tokio::spawn(renew_while_opening(
        base,
        db.to_owned(),
        owner.to_owned(),
        ttl_ms,
    )));
    open.await
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The renewals of [`keep_lease_while`], until aborted.
async fn renew_while_opening(base: Arc<dyn corium_store::FullStore>, db: String, owner: String, ttl: i64) {
    let every = Duration::from_millis(u64::try_from(ttl / 3).unwrap_or(1).max(50));
    loop {
        tokio::time::sleep(every).await;
        let Ok(Some(bytes)) = base.get_root(&corium_store::db_root_name(&db)).await else {
            continue;
        };
        let Some(root) = corium_store::DbRoot::decode(&bytes) else {
            continue;
        };
        if root.owner != owner || root.lease_expires_unix_ms == 0 {
            continue;
        }
        let held = lease::Lease {
            owner: root.owner.clone(),
            version: root.lease_version,
            expires_unix_ms: root.lease_expires_unix_ms,
            endpoint: root.owner_endpoint.clone(),
        };
        let now = corium_fleet_common::owner::now_unix_ms();
        if let Err(error) = lease::renew(base.as_ref(), &db, &held, ttl, now).await {
            tracing::debug!(db, %error, "lease renewal during the open failed");
        }
    }
}

/// [`Cell::idle_limit`] of a database that took `open` to open.
fn idle_limit(floor: Duration, open: Duration) -> Duration {
    floor.max((open * IDLE_PER_OPEN).min(IDLE_AT_MOST))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_slow_to_open_is_kept_idle_longer_within_bounds() {
        let floor = Duration::from_secs(30);
        // A small database: the floor.
        assert_eq!(idle_limit(floor, Duration::from_millis(5)), floor);
        assert_eq!(idle_limit(floor, Duration::from_millis(50)), floor);
        // A second to open: ten minutes.
        assert_eq!(idle_limit(floor, Duration::from_secs(1)), Duration::from_mins(10));
        // Never past an hour, and never below the floor.
        assert_eq!(idle_limit(floor, Duration::from_mins(1)), IDLE_AT_MOST);
        assert_eq!(
            idle_limit(Duration::from_hours(2), Duration::from_secs(1)),
            Duration::from_hours(2)
        );
    }

    /// An open three TTLs long: with [`keep_lease_while`] another owner
    /// cannot acquire the lease meanwhile; without it, it can.
    #[tokio::test]
    async fn an_open_longer_than_the_ttl_keeps_its_lease() {
        const TTL_MS: i64 = 300;
        let open_for = Duration::from_millis(3 * 300);
        for kept in [true, false] {
            let base: Arc<dyn corium_store::FullStore> = Arc::new(corium_store::MemoryStore::default());
            let now = corium_fleet_common::owner::now_unix_ms;
            lease::acquire(base.as_ref(), "db", "opener", "a", TTL_MS, now())
                .await
                .unwrap();
            // Another candidate tries while the open is two TTLs in.
            let rival = {
                let base = Arc::clone(&base);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(2 * 300)).await;
                    lease::acquire(base.as_ref(), "db", "rival", "b", TTL_MS, now()).await
                })
            };
            let open = tokio::time::sleep(open_for);
            if kept {
                keep_lease_while(Arc::clone(&base), TTL_MS, "db", "opener", open).await;
            } else {
                open.await;
            }
            let taken = rival.await.unwrap();
            if kept {
                assert!(
                    matches!(taken, Err(lease::LeaseError::Held { ref owner, .. }) if owner == "opener"),
                    "the rival took the lease of an open that renews it: {taken:?}"
                );
            } else {
                assert!(taken.is_ok(), "without renewals the lease lapses: {taken:?}");
            }
        }
    }
}
