//! Activation: opening a database's cell on this node (Corium acquires the
//! lease by CAS and recovers), one at a time per database, and releasing a
//! lease a closed cell of this process still holds.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Host, Refusal, now_unix_ms};
use crate::cell::{Cell, OpenError};

impl Host {
    /// The lock that serialises activations (and handoffs, and creates) of
    /// `db` here.
    pub(crate) fn activation_lock(&self, db: &str) -> Arc<tokio::sync::Mutex<()>> {
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
    /// [`Refusal::NotOwner`] when another owner won the lease or this node
    /// is shutting down; [`Refusal::Unverifiable`] on storage failure;
    /// [`Refusal::OverBudget`] or [`Refusal::TooLarge`] when the memory
    /// budget has no room (`memory.rs`); [`Refusal::KeyMissing`] when the
    /// database is encrypted under a key this node lacks.
    #[tracing::instrument(name = "activation", level = "info", skip(self))]
    pub async fn activate(self: &Arc<Self>, db: &str, takeover: bool) -> Result<Arc<Cell>, Refusal> {
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
        self.make_room(db).await?;
        let started = Instant::now();
        let mut opened = Box::pin(Cell::open(&self.template, db)).await;
        if let Err(OpenError::Held { owner, .. }) = &opened
            && self.template.is_own(owner)
            && !self.is_closing(db)
        {
            // A closed cell of this process still holds the lease: a renewal
            // that was in flight when it was released re-extended it. That
            // cell is deposed (it commits nothing more), so releasing its
            // lease here is safe; then open again, once.
            if self.reclaim_own_lease(db, owner).await {
                opened = Box::pin(Cell::open(&self.template, db)).await;
            }
        }
        match opened {
            Ok(cell) => {
                self.metrics.recovery_seconds.observe(started.elapsed());
                cell.opened_in(started.elapsed());
                self.await_first_renewal(&cell, started).await;
                self.install(Arc::clone(&cell));
                self.metrics.activations.fetch_add(1, Ordering::Relaxed);
                if takeover {
                    self.metrics.takeovers.fetch_add(1, Ordering::Relaxed);
                }
                self.metrics.activation_seconds.observe(started.elapsed());
                self.check_opened(&cell).await?;
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
            Err(OpenError::Unknown(_)) => Err(Refusal::UnknownDatabase(db.to_owned())),
            Err(OpenError::Node(error)) => {
                self.metrics.activation_failures.fetch_add(1, Ordering::Relaxed);
                if let Some(key_id) = crate::error::missing_key(&error) {
                    return Err(self.key_missing(db, key_id));
                }
                Err(self.unverifiable(db, "activation failed", &error))
            }
        }
    }

    /// The refusal of a database encrypted under a key this node lacks,
    /// logged where it is decided (once per activation attempt; the ingress
    /// moves on to the next candidate).
    pub(crate) fn key_missing(&self, db: &str, key_id: String) -> Refusal {
        tracing::warn!(
            db,
            key_id = %key_id,
            "not opening an encrypted database: this node lacks its key (start it with --storage-key naming it)"
        );
        Refusal::KeyMissing {
            node: self.config.node_id.clone(),
            db: db.to_owned(),
            key_id,
        }
    }

    /// Corium acquires a database's lease, recovers it, and only then starts
    /// renewing (its first renewal runs at once). `Cell::open` renews the
    /// lease meanwhile, but on a store slower than the TTL (each renewal a
    /// read and a CAS) the open can still return with the lease it acquired
    /// expired, and the ownership check would answer the first caller
    /// `UNAVAILABLE`. Waits (at most the storage timeout) until Corium's
    /// renewal lands.
    async fn await_first_renewal(&self, cell: &Cell, started: Instant) {
        let expired = |lease: &corium_transactor::lease::Lease| lease.expires_unix_ms <= now_unix_ms();
        if !matches!(cell.lease().await, Ok(lease) if expired(&lease)) {
            return;
        }
        let open_ms = started.elapsed().as_millis();
        let deadline = Instant::now() + self.config.storage_timeout;
        while Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            match cell.lease().await {
                Ok(lease) if expired(&lease) => {}
                _ => break,
            }
        }
        tracing::warn!(
            db = %cell.db,
            open_ms,
            lease_ttl_ms = self.config.lease_ttl.as_millis(),
            waited_ms = started.elapsed().as_millis() - open_ms,
            "the open outlasted the lease ttl; waited for its first renewal (another candidate may take a database over while it opens: raise --lease-ttl-ms above the longest open)"
        );
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
    pub(super) async fn reclaim_own_lease(&self, db: &str, owner: &str) -> bool {
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
}
