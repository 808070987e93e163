//! The node's memory budget (`--memory-budget-mib`): what the node holds is
//! estimated from its parts, kept under the budget by evicting idle
//! databases and handing the largest away, and an activation that finds no
//! room is refused instead of taking the process past its limit.
//!
//! What counts: a fixed base for the process, each open database by its
//! history (datoms Corium recorded, times a per-datom figure measured by
//! `make bench`'s `history` scenario), and what read-ahead and warm
//! standbys hold. The budget is enforced on this estimate, not on the
//! resident set: glibc's allocator keeps freed pages, so the resident set
//! does not fall when a database is evicted and a loop driven by it would
//! evict everything. The resident set is reported beside the estimate.
//!
//! Caches are told apart from firm memory: hot standbys (whole database
//! values followed for a promotion in place), warm standbys (log records and
//! index blobs kept for a takeover) and read replicas are rebuilt on
//! demand, so they are dropped first past the budget (hot standbys before
//! the rest), warm standbys fill
//! at most half the room firm memory leaves, and the load a node publishes
//! to its peers counts only its firm memory — a node whose caches fill it
//! still takes activations, dropping them (design note 0021).
//!
//! Order, as issue 37 asks: the activations' read-ahead is bounded by its
//! own budget and drops on its own; past the budget, warm standbys and read
//! replicas (caches) are dropped first, then idle
//! databases go (least recently used, then the largest), then the
//! largest database is handed to another candidate (whose own activation
//! refuses it if that node has no room, so nothing cascades); an
//! activation still without room is refused.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Host, Refusal};
use crate::cell::Cell;

/// Bytes an open database holds per datom it ever recorded (current and
/// history indexes, Corium's published segments, the recorded list), while
/// it is written: `make bench`'s `history` scenario measured ~18.7 KB per
/// transaction of ~3 datoms (an item, its instant, its request key) at
/// 5,000 transactions (design note 0021). Conservative on purpose: the
/// budget exists so that the resident set never reaches the limit.
pub(crate) const BYTES_PER_DATOM: u64 = 6_000;
/// What the process holds with no database open (runtime, pools, the
/// binary's pages), from the same scenario.
pub(crate) const BASE_BYTES: u64 = 40 << 20;
/// A database idle this long may be evicted to make room.
const EVICTABLE_AFTER: Duration = Duration::from_secs(5);
/// How often the budget is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// At most one database handed away for memory per this interval: long
/// enough for the previous one's memory to be freed and measured, so a node
/// under pressure does not empty itself faster than it needs to.
const HANDOFF_EVERY: Duration = Duration::from_secs(5);
/// Past its budget, a node still admits writes while a candidate has room
/// for the database (the budget's loop is moving one there) — up to this
/// share of its budget (per cent); past it, every write that grows memory is
/// refused until the node is back under.
const WRITES_AT_MOST_PERCENT: u64 = 125;
/// How fresh the allocator's reading a write is admitted on must be.
const FRESH_FOR: Duration = Duration::from_millis(10);
/// Memory a database's first index publication in a cell takes for a moment,
/// as a multiple of what the database holds: Corium rebuilds every chunk of
/// every index then (measured: a 110 MiB database written at once peaked
/// 370 MiB above it during its first publication; design note 0030). Kept in
/// reserve while a database has writes its cell has not yet published.
const FIRST_PUBLICATION_FACTOR: u64 = 3;
/// The per-datom figure measured from the heap is kept within these bounds
/// (a handful of datoms over a large base would otherwise give nonsense).
const MEASURED_PER_DATOM: std::ops::RangeInclusive<u64> = 200..=50_000;
/// How long a database found too large for the budget is refused without
/// being opened again.
const TOO_LARGE_FOR: Duration = Duration::from_mins(5);

const MIB: u64 = 1024 * 1024;

/// The memory budget's own state: what the process held before any
/// database, and whether writes that grow memory are refused.
pub(crate) struct Budget {
    /// The heap jemalloc accounted for when the node started (nothing
    /// open): what the process holds of its own. `None` without jemalloc.
    base_heap: Option<u64>,
    /// What is resident but not the heap (code, stacks, the runtime's own
    /// pages), measured at start: resident set less the allocator's pages.
    outside_heap: u64,
    /// Set while the node is over its budget with no candidate to hand a
    /// database to: writes that grow memory are refused.
    refusing_writes: std::sync::atomic::AtomicBool,
    /// Bytes a datom cost at the last check ([`MemoryUse::per_datom`]).
    per_datom: std::sync::atomic::AtomicU64,
    /// The reserve for first publications at the last check
    /// ([`MemoryUse::reserved`]).
    reserved: std::sync::atomic::AtomicU64,
    /// What the caches held at the last check (hot and warm standbys, read
    /// replicas): dropped before a write is refused, so not counted then.
    caches: std::sync::atomic::AtomicU64,
    /// The allocator's last reading of what the node holds, and when: what
    /// a write is admitted on ([`FRESH_FOR`]).
    fresh: std::sync::Mutex<Option<(Instant, u64)>>,
    /// Wakes the budget's loop at once (a write found the node past it).
    act_now: tokio::sync::Notify,
}

impl Budget {
    /// Measures the process as it starts (from the allocator, when
    /// `from_allocator` and jemalloc is the global allocator).
    #[must_use]
    pub(crate) fn measure(from_allocator: bool) -> Self {
        let heap = crate::allocator::heap().filter(|_| from_allocator);
        let outside_heap = match (heap, corium_fleet_common::memory::resident_bytes()) {
            (Some(heap), Some(resident)) => resident.saturating_sub(heap.resident),
            _ => 0,
        };
        Self {
            base_heap: heap.map(|heap| heap.allocated),
            outside_heap,
            refusing_writes: std::sync::atomic::AtomicBool::new(false),
            per_datom: std::sync::atomic::AtomicU64::new(BYTES_PER_DATOM),
            reserved: std::sync::atomic::AtomicU64::new(0),
            caches: std::sync::atomic::AtomicU64::new(0),
            fresh: std::sync::Mutex::new(None),
            act_now: tokio::sync::Notify::new(),
        }
    }

    /// What the node holds now by the allocator (at most [`FRESH_FOR`]
    /// old); `None` when it is not measured from the allocator.
    fn fresh_used(&self) -> Option<u64> {
        self.base_heap?;
        let mut fresh = self
            .fresh
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, used)) = *fresh
            && at.elapsed() < FRESH_FOR
        {
            return Some(used);
        }
        let used = crate::allocator::heap()?
            .resident
            .saturating_add(self.outside_heap);
        *fresh = Some((Instant::now(), used));
        Some(used)
    }

    /// Bytes a datom cost at the last check.
    #[must_use]
    pub(crate) fn per_datom(&self) -> u64 {
        self.per_datom.load(Ordering::Relaxed)
    }

    /// Whether writes that grow memory are refused now.
    #[must_use]
    pub(crate) fn refusing_writes(&self) -> bool {
        self.refusing_writes.load(Ordering::Relaxed)
    }
}

/// Memory a node holds beside its cells that can be dropped and rebuilt
/// (read replicas, hot standbys): charged to the budget, and dropped first
/// past it.
pub(crate) trait DroppableMemory: Send + Sync {
    /// The datoms it holds (charged at [`BYTES_PER_DATOM`], like a cell's).
    fn datoms(&self) -> u64;
    /// Drops all of it.
    fn drop_all(&self);
}

/// The node's memory as the budget sees it.
#[derive(Clone, Debug, Default)]
pub struct MemoryUse {
    /// The budget in bytes (`None`: no budget).
    pub budget: Option<u64>,
    /// The estimate of what the node holds: base + databases + read-ahead
    /// + warm standbys + read replicas.
    pub used: u64,
    /// The process's resident set, when the system tells it.
    pub resident: Option<u64>,
    /// What the read replicas hold (part of `used`; a cache).
    pub replicas: u64,
    /// What warm standbys hold (part of `used`; a cache).
    pub warm: u64,
    /// What hot standbys hold (part of `used`; a cache, dropped first).
    pub hot: u64,
    /// Bytes a datom costs: measured from the allocator's heap over every
    /// datom held (`measured`), else [`BYTES_PER_DATOM`].
    pub per_datom: u64,
    /// Whether `used` is the allocator's own accounting (jemalloc's resident
    /// pages plus what is outside its heap) rather than an estimate from
    /// datoms.
    pub measured: bool,
    /// Memory kept in reserve for the first index publication of each open
    /// database with writes its cell has not yet published
    /// ([`FIRST_PUBLICATION_FACTOR`]); counted against the budget, not part
    /// of `used`.
    pub reserved: u64,
    /// Each open database's estimate.
    pub databases: HashMap<String, u64>,
}

impl MemoryUse {
    /// Whether the node holds more than its budget.
    #[must_use]
    pub fn over(&self) -> bool {
        self.budget
            .is_some_and(|budget| self.used.saturating_add(self.reserved) > budget)
    }

    /// What the node holds that is not a cache: `used` less warm standbys
    /// and read replicas (what it publishes to its peers as used).
    #[must_use]
    pub fn firm(&self) -> u64 {
        self.used
            .saturating_sub(self.replicas)
            .saturating_sub(self.warm)
            .saturating_sub(self.hot)
    }

    /// The budget's room left by firm memory (`None`: no budget).
    #[must_use]
    pub fn room_for_caches(&self) -> Option<u64> {
        self.budget.map(|budget| budget.saturating_sub(self.firm()))
    }
}

/// An open database's datoms, and whether its cell has writes it has not yet
/// published while it has published nothing since it opened (its next
/// publication rebuilds every chunk: [`FIRST_PUBLICATION_FACTOR`]).
pub(crate) async fn database_shape(cell: &Cell) -> (u64, bool) {
    cell.node.db_state(&cell.db).await.map_or((0, false), |state| {
        let db = state.db();
        let unpublished =
            state.index_basis() == cell.opened_index_basis && db.basis_t() > state.index_basis();
        (u64::try_from(db.recorded_len()).unwrap_or(u64::MAX), unpublished)
    })
}

/// The datoms an open database has recorded.
pub(crate) async fn database_datoms(cell: &Cell) -> u64 {
    let datoms = cell
        .node
        .db_state(&cell.db)
        .await
        .map_or(0, |state| state.db().recorded_len());
    u64::try_from(datoms).unwrap_or(u64::MAX)
}

/// What a datom costs, measured: the heap beyond the process's own (less
/// the read-ahead's and warm standbys' bytes, which are counted as they
/// are) over every datom held, within [`MEASURED_PER_DATOM`].
fn measured_per_datom(heap: u64, base: u64, other_bytes: u64, datoms: u64) -> u64 {
    if datoms == 0 {
        return BYTES_PER_DATOM;
    }
    let data = heap.saturating_sub(base).saturating_sub(other_bytes);
    (data / datoms).clamp(*MEASURED_PER_DATOM.start(), *MEASURED_PER_DATOM.end())
}

/// Databases found too large for this node's budget, and their estimate.
#[derive(Default)]
pub(crate) struct TooLarge(std::sync::Mutex<HashMap<String, (u64, Instant)>>);

impl TooLarge {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Instant)>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The estimate of `db`, if it was found too large lately.
    fn get(&self, db: &str) -> Option<u64> {
        let mut found = self.lock();
        found.retain(|_, (_, at)| at.elapsed() < TOO_LARGE_FOR);
        found.get(db).map(|(bytes, _)| *bytes)
    }

    fn insert(&self, db: &str, bytes: u64) {
        self.lock().insert(db.to_owned(), (bytes, Instant::now()));
    }
}

impl Host {
    /// The node's memory now.
    ///
    /// With jemalloc, what the node holds is the allocator's own accounting
    /// (the pages it keeps, plus what was outside its heap at start), and
    /// each part's share is its datoms times the cost of a datom measured
    /// from its live heap; else an estimate from datoms at
    /// [`BYTES_PER_DATOM`].
    pub async fn memory_use(&self) -> MemoryUse {
        let mut datoms = HashMap::new();
        let mut unpublished = Vec::new();
        for cell in self.cells() {
            let (count, pending) = database_shape(&cell).await;
            if pending {
                unpublished.push(cell.db.clone());
            }
            datoms.insert(cell.db.clone(), count);
        }
        let replica_datoms = self.droppable.get().map_or(0, |droppable| droppable.datoms());
        let hot_datoms = DroppableMemory::datoms(self.template.hot_standbys.as_ref());
        let warm = u64::try_from(self.template.read_ahead.warm.usage().1).unwrap_or(u64::MAX);
        let read_ahead = self.template.read_ahead.held_bytes();
        let all_datoms = datoms
            .values()
            .sum::<u64>()
            .saturating_add(replica_datoms)
            .saturating_add(hot_datoms);
        let heap = crate::allocator::heap().zip(self.budget.base_heap);
        let per_datom = heap.map_or(BYTES_PER_DATOM, |(heap, base)| {
            measured_per_datom(heap.allocated, base, read_ahead.saturating_add(warm), all_datoms)
        });
        let databases: HashMap<String, u64> = datoms
            .into_iter()
            .map(|(db, datoms)| (db, datoms.saturating_mul(per_datom)))
            .collect();
        let replicas = replica_datoms.saturating_mul(per_datom);
        let hot = hot_datoms.saturating_mul(per_datom);
        // Only when measured: the estimate from datoms is conservative enough
        // already (it charges what a database holds once published).
        let reserved = if heap.is_some() {
            unpublished
                .iter()
                .filter_map(|db| databases.get(db))
                .sum::<u64>()
                .saturating_mul(FIRST_PUBLICATION_FACTOR)
        } else {
            0
        };
        let used = match heap {
            // The pages the allocator keeps (live data, and freed pages until
            // its decay returns them) and what is outside its heap: the
            // resident set as the allocator and the start saw it.
            Some((heap, _)) => heap.resident.saturating_add(self.budget.outside_heap),
            None => BASE_BYTES
                .saturating_add(databases.values().sum())
                .saturating_add(read_ahead)
                .saturating_add(warm)
                .saturating_add(replicas)
                .saturating_add(hot),
        };
        MemoryUse {
            budget: self.config.memory_budget,
            used,
            resident: corium_fleet_common::memory::resident_bytes(),
            databases,
            replicas,
            warm,
            hot,
            per_datom,
            measured: heap.is_some(),
            reserved,
        }
    }

    /// Whether the last check found the node over its budget (a cache that
    /// would grow asks this before it does).
    #[must_use]
    pub(crate) fn is_over_memory_budget(&self) -> bool {
        self.config.memory_budget.is_some_and(|budget| {
            self.metrics
                .memory_used_bytes
                .load(Ordering::Relaxed)
                .saturating_add(self.budget.reserved.load(Ordering::Relaxed))
                > budget
        })
    }

    /// Drops the node's caches (warm standbys, read replicas) when `usage`
    /// says it is over its budget and they hold anything; returns whether
    /// it dropped any.
    fn drop_caches(&self, usage: &MemoryUse, budget: u64) -> bool {
        if !usage.over() {
            return false;
        }
        // Hot standbys first: each holds a whole database, and the next
        // round starts them again once there is room.
        if usage.hot > 0 {
            tracing::info!(
                hot_mib = usage.hot / MIB,
                used_mib = usage.used / MIB,
                budget_mib = budget / MIB,
                "over the memory budget; dropping hot standbys"
            );
            DroppableMemory::drop_all(self.template.hot_standbys.as_ref());
            return true;
        }
        if usage.warm.saturating_add(usage.replicas) == 0 {
            return false;
        }
        tracing::info!(
            warm_mib = usage.warm / MIB,
            replicas_mib = usage.replicas / MIB,
            used_mib = usage.used / MIB,
            budget_mib = budget / MIB,
            "over the memory budget; dropping caches (warm standbys, read replicas)"
        );
        self.template.read_ahead.warm.drop_all();
        if usage.replicas > 0
            && let Some(droppable) = self.droppable.get()
        {
            droppable.drop_all();
        }
        true
    }

    /// Stores `usage` in the node's gauges (the firm part is what the
    /// registry record publishes).
    fn record(&self, usage: &MemoryUse) {
        let gauges = [
            (&self.metrics.memory_used_bytes, usage.used),
            (&self.metrics.memory_firm_bytes, usage.firm()),
            (&self.metrics.memory_replica_bytes, usage.replicas),
        ];
        for (gauge, value) in gauges {
            gauge.store(value, Ordering::Relaxed);
        }
        self.budget.per_datom.store(usage.per_datom, Ordering::Relaxed);
        self.budget.reserved.store(usage.reserved, Ordering::Relaxed);
        self.budget
            .caches
            .store(usage.used.saturating_sub(usage.firm()), Ordering::Relaxed);
    }

    fn over_budget(&self, db: &str, usage: &MemoryUse) -> Refusal {
        Refusal::OverBudget {
            node: self.config.node_id.clone(),
            db: db.to_owned(),
            used_mib: usage.used / MIB,
            budget_mib: usage.budget.unwrap_or(0) / MIB,
        }
    }

    fn too_large(&self, db: &str, needs: u64) -> Refusal {
        Refusal::TooLarge {
            node: self.config.node_id.clone(),
            db: db.to_owned(),
            needs_mib: needs / MIB,
            budget_mib: self.config.memory_budget.unwrap_or(0) / MIB,
        }
    }

    /// Before opening `db`: refuses a database found too large lately, and
    /// evicts idle databases while the node is over its budget; refuses when
    /// it still is.
    ///
    /// # Errors
    /// [`Refusal::TooLarge`], [`Refusal::OverBudget`].
    pub(crate) async fn make_room(&self, db: &str) -> Result<(), Refusal> {
        let Some(budget) = self.config.memory_budget else {
            return Ok(());
        };
        if let Some(needs) = self.too_large.get(db) {
            self.metrics.memory_refusals.fetch_add(1, Ordering::Relaxed);
            return Err(self.too_large(db, needs));
        }
        // The last check (a second ago at most) found room: an activation
        // does not measure every open database again (that would make each
        // one cost as much as the node holds).
        if !self.is_over_memory_budget() {
            return Ok(());
        }
        let mut usage = self.memory_use().await;
        if self.drop_caches(&usage, budget) {
            usage = self.memory_use().await;
            self.record(&usage);
        }
        if !usage.over() {
            return Ok(());
        }
        // Another candidate with room takes it at once; evicting here
        // would make this caller wait for drains.
        if let Some(redirect) = self.to_roomier_candidates(db, &usage) {
            return Err(redirect);
        }
        let freed = self
            .evict_idle(
                &usage,
                usage.used.saturating_add(usage.reserved).saturating_sub(budget),
            )
            .await;
        let usage = self.memory_use().await;
        if usage.over() {
            self.metrics.memory_refusals.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                db,
                used_mib = usage.used / MIB,
                budget_mib = budget / MIB,
                freed_mib = freed / MIB,
                "over the memory budget; activation refused"
            );
            return Err(self.over_budget(db, &usage));
        }
        Ok(())
    }

    /// The other candidates of `db` whose last published load shows room
    /// for `bytes` more, in rank order.
    fn roomier_candidates(&self, db: &str, bytes: u64) -> Vec<corium_fleet_common::placement::Member> {
        self.candidates(db)
            .into_iter()
            .filter(|member| {
                member.node_id != self.config.node_id && self.loads.has_memory_room(&member.node_id, bytes)
            })
            .collect()
    }

    /// When other candidates of `db` have room: a `NotOwner` listing only
    /// them, so the caller (the ingress, an SDK) activates it there. Never
    /// this node, and never a candidate whose load shows it full, so two
    /// full nodes do not send a call back and forth: the last candidate
    /// with no room refuses. A hint as fresh as the registry (one period).
    fn to_roomier_candidates(&self, db: &str, usage: &MemoryUse) -> Option<Refusal> {
        let roomier = self.roomier_candidates(db, 0);
        let first = roomier.first()?;
        self.metrics.memory_redirects.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            db,
            used_mib = usage.used / MIB,
            budget_mib = usage.budget.unwrap_or(0) / MIB,
            to = %first.node_id,
            "over the memory budget; activation sent to a candidate with room"
        );
        let Refusal::NotOwner(mut detail) = self.not_owner(db, None) else {
            return None;
        };
        detail
            .candidates
            .retain(|candidate| roomier.iter().any(|member| member.node_id == candidate.node_id));
        Some(Refusal::NotOwner(detail))
    }

    /// After `cell` opened: a database whose estimate alone is past the
    /// budget is a poison database — released at once and refused for a
    /// while, so it cannot take the node (or, handed on, any other) down.
    ///
    /// # Errors
    /// [`Refusal::TooLarge`] (the cell is released first).
    pub(super) async fn check_opened(&self, cell: &Arc<Cell>) -> Result<(), Refusal> {
        let Some(budget) = self.config.memory_budget else {
            return Ok(());
        };
        let needs = database_datoms(cell)
            .await
            .saturating_mul(self.budget.per_datom());
        if BASE_BYTES.saturating_add(needs) <= budget {
            return Ok(());
        }
        self.too_large.insert(&cell.db, needs);
        self.metrics.memory_refusals.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(db = %cell.db, needs_mib = needs / MIB, budget_mib = budget / MIB, "database too large for the memory budget; released");
        self.close_and_release(cell).await;
        Err(self.too_large(&cell.db, needs))
    }

    /// Evicts idle databases, least recently used first, until `needed`
    /// bytes of estimate are gone or none is left; returns the bytes freed.
    async fn evict_idle(&self, usage: &MemoryUse, needed: u64) -> u64 {
        let mut idle: Vec<(Duration, Arc<Cell>)> = self
            .cells()
            .into_iter()
            .filter_map(|cell| {
                cell.idle_for()
                    .filter(|idle| *idle >= EVICTABLE_AFTER)
                    .map(|idle| (idle, cell))
            })
            .collect();
        // Longest idle first.
        idle.sort_by_key(|(idle_for, _)| std::cmp::Reverse(*idle_for));
        let mut freed = 0;
        for (idle_for, cell) in idle {
            if freed >= needed {
                break;
            }
            let bytes = usage.databases.get(&cell.db).copied().unwrap_or(0);
            tracing::info!(db = %cell.db, idle_ms = idle_for.as_millis(), estimate_mib = bytes / MIB, "over the memory budget; evicting an idle database");
            self.metrics.memory_evictions.fetch_add(1, Ordering::Relaxed);
            self.evict_for_memory(&cell).await;
            freed += bytes;
        }
        freed
    }

    /// Before a write to `cell`'s database. Under the budget (by the
    /// allocator's fresh reading, else the last check's), it goes on. Past
    /// it, the budget's loop is woken to move a database away, and the write
    /// goes on only while a candidate has room for this database and the
    /// node is under [`WRITES_AT_MOST_PERCENT`] of its budget; otherwise it
    /// is refused. Reads are never refused here; what was acknowledged
    /// stays; the refusal lifts once the node is under its budget again (a
    /// database deleted, handed away or evicted).
    ///
    /// # Errors
    /// [`Refusal::WritesRefused`], naming the database, its size, the node
    /// and the budget.
    pub(crate) async fn admit_growth(&self, cell: &Cell) -> Result<(), Refusal> {
        let Some(budget) = self.config.memory_budget else {
            return Ok(());
        };
        let refusing = self.budget.refusing_writes();
        // Firm memory (caches are dropped before a write is refused) and the
        // reserve for first publications.
        let used = match self.budget.fresh_used() {
            Some(used) => used
                .saturating_sub(self.budget.caches.load(Ordering::Relaxed))
                .saturating_add(self.budget.reserved.load(Ordering::Relaxed)),
            // Estimated from datoms: the last check's figure, and a fresh one
            // when it would refuse (a second is long enough for an eviction to
            // have made room).
            None if refusing || self.is_over_memory_budget() => {
                let usage = self.memory_use().await;
                usage.firm().saturating_add(usage.reserved)
            }
            None => self.metrics.memory_firm_bytes.load(Ordering::Relaxed),
        };
        if used <= budget && !refusing {
            return Ok(());
        }
        if refusing && used <= budget {
            // Room returned: admitted again (the loop re-arms the refusal at
            // its next check if the node is past its budget again).
            self.budget.refusing_writes.store(false, Ordering::Relaxed);
            return Ok(());
        }
        self.budget.act_now.notify_one();
        let db_bytes = database_datoms(cell)
            .await
            .saturating_mul(self.budget.per_datom());
        let movable = used <= budget / 100 * WRITES_AT_MOST_PERCENT
            && !self.roomier_candidates(&cell.db, db_bytes).is_empty();
        if !refusing && movable {
            return Ok(());
        }
        self.metrics.memory_write_refusals.fetch_add(1, Ordering::Relaxed);
        Err(Refusal::WritesRefused {
            node: self.config.node_id.clone(),
            db: cell.db.clone(),
            db_mib: db_bytes / MIB,
            used_mib: used / MIB,
            budget_mib: budget / MIB,
        })
    }

    /// Starts or stops refusing writes that grow memory, saying so once.
    fn refuse_writes(&self, refuse: bool, usage: &MemoryUse) {
        if self.budget.refusing_writes.swap(refuse, Ordering::Relaxed) == refuse {
            return;
        }
        let (used_mib, budget_mib) = (usage.used / MIB, usage.budget.unwrap_or(0) / MIB);
        if refuse {
            tracing::warn!(
                used_mib,
                budget_mib,
                "over the memory budget and no candidate has room; refusing writes until there is"
            );
        } else {
            tracing::info!(
                used_mib,
                budget_mib,
                "back under the memory budget; writes admitted again"
            );
        }
    }

    /// Keeps the node under its budget until `shutdown`. Every second, when
    /// over it: drops its caches; evicts idle databases; hands the largest
    /// open database — idle or busy — to a candidate with room for it (at
    /// most one per [`HANDOFF_EVERY`]); and when no candidate has room,
    /// refuses writes that grow memory until the node is back under it.
    /// Without a budget it only keeps the gauges.
    pub(crate) async fn keep_within_budget(self: Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        let budget = self.config.memory_budget;
        self.metrics
            .memory_budget_bytes
            .store(budget.unwrap_or(0), Ordering::Relaxed);
        let mut last_handoff: Option<Instant> = None;
        let mut every = corium_fleet_common::every::Every::new(CHECK_EVERY, shutdown);
        while every.tick_or(&self.budget.act_now).await {
            if self.is_stopping() {
                return;
            }
            let usage = self.memory_use().await;
            self.record(&usage);
            if self.budget.refusing_writes() && budget.is_none_or(|budget| usage.used <= budget) {
                self.refuse_writes(false, &usage);
            }
            let Some(budget) = budget.filter(|_| usage.over()) else {
                continue;
            };
            // Caches first: warm standbys are read again by the next
            // refresh, replicas rebuilt on the next read.
            if self.drop_caches(&usage, budget) {
                continue;
            }
            let excess = usage.used.saturating_add(usage.reserved).saturating_sub(budget);
            let freed = self.evict_idle(&usage, excess).await;
            if freed >= excess || last_handoff.is_some_and(|at| at.elapsed() < HANDOFF_EVERY) {
                continue;
            }
            let largest = usage
                .databases
                .iter()
                .max_by_key(|(_, bytes)| **bytes)
                .map(|(db, bytes)| (db.clone(), *bytes));
            let Some((db, bytes)) = largest else { continue };
            // Only to a candidate with room for it: a full one would refuse
            // it, and one it would fill would hand it back (a database that
            // fits nowhere stays where it is, with no moves to and fro).
            let others = self.roomier_candidates(&db, bytes);
            if others.is_empty() {
                tracing::debug!(db = %db, "over the memory budget; no other candidate has room");
                self.refuse_writes(true, &usage);
                continue;
            }
            last_handoff = Some(Instant::now());
            self.metrics.memory_handoffs.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(db = %db, estimate_mib = bytes / MIB, used_mib = usage.used / MIB, budget_mib = budget / MIB, to = %others[0].node_id, "over the memory budget; handing the largest database away");
            self.hand_to_first(&db, others, "memory").await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datom_costs_the_heap_beyond_the_base_over_the_datoms_held() {
        // 100 MiB heap, 20 MiB the process's own, 10 MiB read ahead, 70,000
        // datoms: 1,048 bytes a datom.
        let mib = 1024 * 1024;
        assert_eq!(measured_per_datom(100 * mib, 20 * mib, 10 * mib, 70_000), 1_048);
        // Nothing held: the constant.
        assert_eq!(measured_per_datom(100 * mib, 20 * mib, 0, 0), BYTES_PER_DATOM);
        // A handful of datoms over a base: bounded.
        assert_eq!(
            measured_per_datom(100 * mib, 20 * mib, 0, 3),
            *MEASURED_PER_DATOM.end()
        );
        assert_eq!(
            measured_per_datom(10 * mib, 20 * mib, 0, 3),
            *MEASURED_PER_DATOM.start()
        );
    }

    #[test]
    fn over_means_past_the_budget() {
        let mut usage = MemoryUse {
            budget: Some(100),
            used: 100,
            ..MemoryUse::default()
        };
        assert!(!usage.over());
        usage.used = 101;
        assert!(usage.over());
        usage.budget = None;
        assert!(!usage.over(), "no budget is never over");
    }

    #[test]
    fn caches_are_not_firm_and_leave_their_room_to_the_rest() {
        let usage = MemoryUse {
            budget: Some(100),
            used: 90,
            warm: 20,
            replicas: 10,
            ..MemoryUse::default()
        };
        assert_eq!(usage.firm(), 60);
        assert_eq!(usage.room_for_caches(), Some(40));
        let over_on_firm = MemoryUse {
            budget: Some(100),
            used: 130,
            warm: 10,
            ..MemoryUse::default()
        };
        assert_eq!(over_on_firm.room_for_caches(), Some(0));
        assert_eq!(MemoryUse::default().room_for_caches(), None);
    }
}
