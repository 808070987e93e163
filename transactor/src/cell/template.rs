//! What every cell of a node is opened with: the shared store, the view
//! kind, and the `NodeConfig` rules of the cell seam (design note 0002).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use corium_store::FullStore;
use corium_transactor::StoreSpec;
use corium_transactor::node::NodeConfig;

use crate::{read_ahead, view};

/// Everything a node needs to open cells; shared by all of them.
pub struct Template {
    /// The node's shared store (counted), which every cell's view wraps.
    pub base: Arc<dyn FullStore>,
    /// The storage-backend kind of the cell view registered for the base
    /// store's log placement (`view::kind_for`).
    pub view_kind: &'static str,
    /// The node's data directory (Corium's filesystem log lives under it).
    pub data_dir: std::path::PathBuf,
    /// `<node-id>/<incarnation>`, unique per process. Every cell's lease
    /// owner is this prefix plus a per-process generation
    /// (`<node-id>/<incarnation>.<n>`), so no two cells — across processes
    /// or one after another in a process — ever hold a lease under the same
    /// owner id: Corium re-acquires a lease at the *same* version for the
    /// same owner, and each activation must fence everything before it.
    pub owner_prefix: String,
    /// The next cell generation.
    pub generation: AtomicU64,
    /// This node's internal endpoint, written into each lease it takes.
    pub advertise: String,
    /// The lease TTL every cell acquires with.
    pub lease_ttl_ms: i64,
    /// The node's log read-ahead for activations (`read_ahead.rs`).
    pub read_ahead: read_ahead::Budget,
    /// The databases this node follows as their first standby: every open
    /// is offered their values (Corium's warm start, `hot_standby`).
    pub hot_standbys: Arc<crate::hot_standby::HotStandbys>,
    /// The node's keys (`--storage-key`): every cell opens with them, so a
    /// database encrypted at rest under one of them opens here, as on a
    /// stock transactor given the same keys.
    pub keys: corium_fleet_store::keys::StorageKeys,
}

impl Template {
    /// Whether a lease owner is one of this process's cells.
    #[must_use]
    pub fn is_own(&self, owner: &str) -> bool {
        owner
            .strip_prefix(self.owner_prefix.as_str())
            .is_some_and(|rest| rest.starts_with('.'))
    }

    pub(super) fn node_config(
        &self,
        db: Option<&str>,
        fork_targets: &view::ForkTargets,
        read_ahead: Option<&Arc<read_ahead::ReadAhead>>,
    ) -> NodeConfig {
        let mut config = NodeConfig::new(self.data_dir.clone());
        config.store = StoreSpec::new(
            self.view_kind,
            view::config(&self.base, db, fork_targets, read_ahead),
        );
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        config.owner = format!("{}.{generation}", self.owner_prefix);
        config.lease_ttl_ms = self.lease_ttl_ms;
        // Never wait for a held lease: the fleet decides when to retry.
        config.lease_wait_ms = 0;
        // Corium's HA standby poller never exits and would re-acquire an
        // evicted cell's lease; the fleet does standby itself.
        config.ha = false;
        // GC is node-wide work over every root; a cell must not run it.
        config.gc_interval = None;
        config.advertise = Some(self.advertise.clone());
        // A hot standby's value, when this node follows the database, is
        // offered after the lease is won; Corium checks it against the log.
        config.keyring.clone_from(&self.keys.keyring);
        config.warm_start =
            Some(Arc::clone(&self.hot_standbys) as Arc<dyn corium_transactor::warm::WarmStart>);
        config
    }
}
