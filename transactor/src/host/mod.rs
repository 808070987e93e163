//! The host: every cell of one node, and what decides and changes who
//! serves each database.
//!
//! Layout:
//! - this file — the cells, placement as this node sees it, closing marks;
//! - [`ownership`] — the decision before every owner-dependent call;
//! - [`refusal`] — its typed "no", mapped to a status at the service edge;
//! - [`activation`] — opening a cell (acquire + recover);
//! - [`lifecycle`] — a cell's monitor, eviction, reset;
//! - [`handoff`] — moving a database to another node, and the drain;
//! - [`memory`] — the memory budget: estimates, eviction, refusal;
//! - [`balance`] — load-aware placement: calls per second measured,
//!   published, and evened out by moves;
//! - [`retention`] — request records older than the window retracted.

mod activation;
pub(crate) mod balance;
mod handoff;
mod lifecycle;
mod memory;
mod ownership;
mod refusal;
mod retention;

pub(crate) use handoff::HandoffError;
pub(crate) use memory::DroppableMemory;
pub(crate) use refusal::Refusal;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use corium_fleet_common::placement::Member;
use corium_fleet_common::placement_map;
use corium_fleet_wire::not_owner::Candidate;
use corium_store::FullStore;

use crate::cell::{Cell, Template};
use crate::config::Config;
use crate::counting::{CountingStore, RootOps};
use crate::metrics::Metrics;
use crate::peer::Peers;

pub(crate) use corium_fleet_common::owner::{node_of, now_unix_ms};

pub(crate) use corium_fleet_store::RootView;

/// The formats this build reads beyond the first release's, listed in its
/// registry record: the fleet writes one only when every live member lists
/// it (`corium_fleet_store::registry::Features`).
pub(crate) const FEATURES: &[&str] = &[corium_fleet_store::registry::OWNED_REQUEST_IDS];

/// All cells of one node.
pub struct Host {
    /// The node's validated configuration.
    pub config: Config,
    /// What every cell is opened with.
    pub template: Template,
    /// The shared store, counted (the same store the template's views wrap).
    pub base: Arc<dyn FullStore>,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// This process's incarnation (a fresh UUID per start): tells two
    /// processes with one node id apart.
    pub incarnation: String,
    /// Placement members: the static `--member` list, or the live node
    /// registry, refreshed in the background.
    pub members: corium_fleet_store::registry::Members,
    /// The formats every live member reads (from the registry): what this
    /// node may write now.
    pub features: corium_fleet_store::registry::Features,
    /// Every live member's last published load (from the registry): where
    /// an activation this node has no memory for is sent instead.
    pub loads: corium_fleet_store::registry::Loads,
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
    /// Databases with a takeover pending at their lease's expiry
    /// (`standby::take_over_when_lapsed`).
    lapse_watches: Mutex<std::collections::HashSet<String>>,
    /// Databases found too large for the memory budget: refused without
    /// opening them again for a while.
    too_large: memory::TooLarge,
    /// The memory budget's own state (what the process held at start,
    /// whether writes are refused).
    budget: memory::Budget,
    /// Load-aware placement: the last interval's rates and the moves made.
    pub moves: balance::Moves,
    /// Memory held beside the cells that the budget charges and drops
    /// first (the node's read replicas), once the node has them.
    pub(crate) droppable: std::sync::OnceLock<Arc<dyn DroppableMemory>>,
    /// Told of every commit under a request id (the test seam; `None` in
    /// production).
    pub after_commit: Option<crate::seams::CommitObserver>,
}

impl Host {
    /// A host with no cells yet.
    #[must_use]
    pub fn new(
        config: Config,
        template: Template,
        root_ops: Arc<CountingStore>,
        peers: Peers,
        incarnation: String,
        after_commit: Option<crate::seams::CommitObserver>,
    ) -> Arc<Self> {
        let base: Arc<dyn FullStore> = Arc::clone(&root_ops) as Arc<dyn FullStore>;
        let budget = memory::Budget::measure(config.memory_from_allocator);
        Arc::new(Self {
            members: corium_fleet_store::registry::Members::new(config.membership.members.clone()),
            features: corium_fleet_store::registry::Features::default(),
            loads: corium_fleet_store::registry::Loads::default(),
            // Empty until the node loads its `--placement-map`.
            map: placement_map::Watched::new(placement_map::Map::default()),
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
            lapse_watches: Mutex::new(std::collections::HashSet::new()),
            too_large: memory::TooLarge::default(),
            budget,
            moves: balance::Moves::default(),
            droppable: std::sync::OnceLock::new(),
            after_commit,
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
        placement_map::candidates(
            db,
            &self.members.get(),
            self.config.membership.replicas,
            &self.map.get(),
        )
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
        placement_map::candidates(db, &others, self.config.membership.replicas, &self.map.get())
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
                lacks_storage_key: false,
            })
            .collect()
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
    pub(super) fn remove(&self, cell: &Arc<Cell>) {
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

    pub(super) fn is_closing(&self, db: &str) -> bool {
        self.closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(db)
    }

    /// Marks `db` closing until the guard drops.
    pub(super) fn closing_guard(&self, db: &str) -> Closing<'_> {
        self.closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(db.to_owned());
        Closing {
            host: self,
            db: db.to_owned(),
        }
    }

    /// Marks a takeover pending at `db`'s lease expiry; `false` when one
    /// already is.
    pub(crate) fn lapse_watch(&self, db: &str) -> bool {
        self.lapse_watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(db.to_owned())
    }

    /// Clears `db`'s pending takeover mark.
    pub(crate) fn lapse_watched(&self, db: &str) {
        self.lapse_watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(db);
    }

    /// Whether shutdown has begun.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// Clears a database's closing mark when dropped.
pub(super) struct Closing<'a> {
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
