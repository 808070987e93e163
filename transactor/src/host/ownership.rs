//! The ownership decision made before any owner-dependent call is served
//! (invariants 1–5 in `docs/invariants.md`), in order:
//!
//! 1. validate the fleet metadata (route header = body, at most one hop);
//!    a saga branch's call is decided as its database's (`names::home`);
//! 2. a live cell for the database: serve, unless the caller routed on a
//!    different lease version (`NotOwner`) or the lease could not be
//!    renewed recently (ownership cannot be verified);
//! 3. otherwise read the database root from storage (unverifiable when that
//!    fails; unknown when the catalog has no such database): another live
//!    owner → `NotOwner` naming it; no live owner and this node a candidate →
//!    activate here. A node that is not a candidate answers `NotOwner`
//!    listing the candidates *without* reading storage (invariant 5: it never
//!    touches the roots of databases it is not a candidate for).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use corium_fleet_wire::metadata::{self, MetadataError, Routing};
use corium_fleet_wire::not_owner::NotOwner;
use corium_store::DbRoot;

use super::{Host, Refusal, RootView, node_of, now_unix_ms};
use crate::cell::Cell;

impl Host {
    /// The refusal of a node that cannot verify ownership, counted and
    /// logged where it is decided.
    pub(crate) fn unverifiable(
        &self,
        db: &str,
        what: &'static str,
        error: &dyn std::fmt::Display,
    ) -> Refusal {
        self.metrics.storage_unavailable.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(db, %error, "{what}");
        Refusal::Unverifiable {
            db: db.to_owned(),
            what,
            detail: error.to_string(),
        }
    }

    /// Reads the catalog entry and root of `db`, bounded by the storage timeout.
    ///
    /// # Errors
    /// [`Refusal::Unverifiable`] when storage does not answer in time or fails.
    pub async fn read_root(&self, db: &str) -> Result<RootView, Refusal> {
        corium_fleet_store::roots::read(self.base.as_ref(), db, self.config.storage_timeout)
            .await
            .map_err(|error| self.unverifiable(db, "cannot read its lease", &error))
    }

    /// The typed `NotOwner` answer for `db`, with the owner hint taken from
    /// the root (a hint: the hinted node verifies its own lease).
    pub fn not_owner(&self, db: &str, owner: Option<&DbRoot>) -> Refusal {
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
    ) -> Refusal {
        self.metrics.not_owner.fetch_add(1, Ordering::Relaxed);
        Refusal::NotOwner(Box::new(NotOwner {
            database: db.to_owned(),
            owner_id: owner_id.to_owned(),
            lease_version,
            retryable: true,
            route_endpoint: route_endpoint.to_owned(),
            candidates: self.candidate_list(db),
            // What this node knows durable: its hot standby's basis (the
            // owner's acknowledged stream, applied), else nothing.
            last_basis_t: self.template.hot_standbys.basis(db).unwrap_or(0),
        }))
    }

    /// Validates fleet metadata, counting rejections.
    ///
    /// # Errors
    /// [`Refusal::Metadata`] naming what is wrong.
    pub fn check_metadata(&self, map: &tonic::metadata::MetadataMap, db: &str) -> Result<Routing, Refusal> {
        metadata::check(map, db).map_err(|error| {
            match error {
                MetadataError::TooManyHops(_) => &self.metrics.rejected_hop,
                _ => &self.metrics.rejected_route_mismatch,
            }
            .fetch_add(1, Ordering::Relaxed);
            Refusal::Metadata(error)
        })
    }

    /// The cell that must serve an owner-dependent call for `db`, after the
    /// ownership decision described in the module docs.
    ///
    /// # Errors
    /// A [`Refusal`]: bad metadata, an unknown database, not the holder, or
    /// ownership that cannot be verified.
    #[tracing::instrument(name = "ownership", level = "info", skip_all, fields(db = %db))]
    pub async fn owner(
        self: &Arc<Self>,
        map: &tonic::metadata::MetadataMap,
        db: &str,
    ) -> Result<Arc<Cell>, Refusal> {
        let (db, routing) = match self.open_owner(map, db).await? {
            Opened::Cell(cell) => return Ok(cell),
            Opened::Not { db, routing } => (db, routing),
        };
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
            return Err(Refusal::UnknownDatabase(db.to_owned()));
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

    /// The decision for a call that must not wake the database (a hot
    /// standby's subscription): this node's open cell for `db`, else a
    /// `NotOwner` — naming a handoff's target, else no one — without reading
    /// storage.
    ///
    /// # Errors
    /// As [`Self::owner`], and [`Refusal::NotOwner`] when the database is not
    /// open here.
    pub async fn owner_if_open(
        self: &Arc<Self>,
        map: &tonic::metadata::MetadataMap,
        db: &str,
    ) -> Result<Arc<Cell>, Refusal> {
        match self.open_owner(map, db).await? {
            Opened::Cell(cell) => Ok(cell),
            Opened::Not { db, .. } => Err(self.not_owner(db, None)),
        }
    }

    /// What both decisions start with: the name and the metadata, then this
    /// node's open cell (checked against the routing), or a handoff's
    /// target.
    async fn open_owner<'a>(
        &self,
        map: &tonic::metadata::MetadataMap,
        db: &'a str,
    ) -> Result<Opened<'a>, Refusal> {
        corium_fleet_common::names::check(db)?;
        let routing = self.check_metadata(map, db)?;
        // A saga branch is hosted by its database's cell and fenced by its
        // lease: the decision is that database's.
        let db = corium_fleet_common::names::home(db);
        if let Some(cell) = self.cell(db) {
            return self
                .check_cell(&cell, &routing)
                .await
                .map(|()| Opened::Cell(cell));
        }
        if let Some(target) = self.handoff_target(db) {
            return Err(self.not_owner_hint(db, &target.node_id, 0, &target.endpoint));
        }
        Ok(Opened::Not { db, routing })
    }

    async fn check_cell(&self, cell: &Cell, routing: &Routing) -> Result<(), Refusal> {
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
            .map_err(|error| self.unverifiable(&cell.db, "cell lost its database", &error))?;
        if lease.expires_unix_ms <= now_unix_ms() {
            // Renewals have been failing (storage unreachable): this node
            // can no longer prove it holds the lease.
            return Err(self.unverifiable(
                &cell.db,
                "write lease could not be renewed",
                &"lease expired locally",
            ));
        }
        Ok(())
    }
}

/// This node's open cell for a database, or the (home) database and the
/// routing the decision goes on with.
enum Opened<'a> {
    Cell(Arc<Cell>),
    Not { db: &'a str, routing: Routing },
}
