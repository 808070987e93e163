//! Hot standbys: the first standby of an active database keeps the
//! database's value current from the owner's acknowledged stream, in the
//! writer's naming and with its indexes built, so that a handoff or a
//! takeover here promotes it in place — Corium's warm start
//! (`corium_transactor::warm`, the fleet's patch, `docs/upstream/0002`) —
//! instead of rebuilding the whole history from storage.
//!
//! Which databases: those this node is the first standby of (the registry
//! says another process owns them and this node is their highest-ranked
//! other candidate, `standby::first_standby_of`), at most
//! `--hot-standbys`, in name order. A database nobody owns is not followed
//! (its next request activates it); one this node owns is not either.
//!
//! Safety: a follower applies only what an owner streamed, and an owner
//! streams a transaction once it acknowledged it (after the durable append
//! and the fence); it never tails the log, which could hold a deposed
//! writer's unacknowledged appends. Corium takes a value only after the new
//! lease is won and only when the log's record at the value's basis is the
//! transaction the value last applied (`WarmValue`'s checks); anything else
//! recovers from storage as before. Fencing does not change.
//!
//! Memory: each follower holds a whole database value. What they hold is
//! charged to the node's budget as a cache and is the first thing dropped
//! past it (`host/memory.rs`); the next round starts them again when there
//! is room.
//!
//! Layout: this file — the node's followers, Corium's [`WarmStart`] over
//! them, their series; [`follower`] — one database followed; [`start`] — a
//! follower's first value, from the published index.

mod follower;
mod start;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corium_fleet_store::registry::Record;
use corium_store::FullStore;
use corium_transactor::warm::{WarmRefusal, WarmStart, WarmValue};

use crate::host::Host;
use crate::peer::Peers;
use crate::standby::OwnerNode;

use follower::Follower;

/// The node's hot standbys.
pub struct HotStandbys {
    /// Most databases followed at once (`--hot-standbys`; 0: none).
    max: usize,
    /// What every follower shares: how it reaches storage and owners, the
    /// counts, where it reports a broken stream.
    shared: Arc<Shared>,
    followers: Mutex<HashMap<String, Follower>>,
    /// Databases whose owner's stream broke, for [`Self::run`] to watch
    /// their lease for a lapse (`standby::take_over_when_lapsed`).
    lost: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
    /// Offer values that diverge from the log (the fault seam
    /// `Hooks::refuse_warm_starts`): every warm start is refused.
    diverge: bool,
}

/// How a follower reaches the shared store (the published index, the
/// database's naming) and the owner (its stream, over the node-to-node
/// mTLS).
pub(crate) struct Reach {
    pub(crate) base: Arc<dyn FullStore>,
    pub(crate) peers: Peers,
    /// How long a stream may be silent before it is dropped and resumed
    /// (a few owner heartbeats).
    pub(crate) silence: Duration,
    /// The node's keys (`--storage-key`): an encrypted database's published
    /// index is read through its data keys.
    pub(crate) keyring: Option<Arc<dyn corium_crypt::Keyring>>,
}

/// What a follower has besides [`Reach`]: the node's counts, and where it
/// says its owner's stream broke.
pub(crate) struct Shared {
    pub(crate) reach: Reach,
    pub(crate) counts: HotStandbyCounts,
    pub(crate) lost: tokio::sync::mpsc::UnboundedSender<String>,
}

/// What hot standbys did, for `/metrics`.
#[derive(Default)]
pub(crate) struct HotStandbyCounts {
    /// Followers started.
    pub(crate) started: AtomicU64,
    /// Followers that had to start again from the published index (their
    /// stream skipped a transaction, or the naming did not match).
    pub(crate) restarted: AtomicU64,
    /// Transactions applied from owners' streams.
    pub(crate) applied: AtomicU64,
    /// Opens that took a follower's value (the tail applied from the log).
    pub(crate) promoted: AtomicU64,
    /// Opens that refused a follower's value and recovered from storage.
    pub(crate) refused: AtomicU64,
    /// Transactions the promoted opens applied from the log after the
    /// followers' bases.
    pub(crate) promoted_tail: AtomicU64,
    /// Times all followers were dropped for the memory budget.
    pub(crate) dropped_for_memory: AtomicU64,
}

impl HotStandbys {
    /// At most `max` followers, reaching storage and owners through `reach`;
    /// `diverge` (a fault seam) spoils every offer so Corium refuses it.
    #[must_use]
    pub(crate) fn new(max: usize, reach: Reach, diverge: bool) -> Arc<Self> {
        let (lost, lost_rx) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Self {
            max,
            shared: Arc::new(Shared {
                reach,
                counts: HotStandbyCounts::default(),
                lost,
            }),
            followers: Mutex::new(HashMap::new()),
            lost: Mutex::new(Some(lost_rx)),
            diverge,
        })
    }

    fn followers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Follower>> {
        self.followers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows the databases this node is the first standby of, one round
    /// per registry read, until `stop`; a database whose owner's stream
    /// broke is watched for its lease to lapse
    /// (`standby::take_over_when_lapsed`).
    pub(crate) async fn run(
        self: Arc<Self>,
        host: Arc<Host>,
        mut registry: tokio::sync::watch::Receiver<Arc<Vec<Record>>>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let Some(mut lost) = self.lost.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        if self.max == 0 {
            return;
        }
        loop {
            tokio::select! {
                changed = registry.changed() => if changed.is_err() { break },
                Some(db) = lost.recv() => {
                    tokio::spawn(crate::standby::take_over_when_lapsed(Arc::clone(&host), db));
                    continue;
                }
                () = corium_fleet_common::signal::until_true(&mut stop) => break,
            }
            if host.is_stopping() {
                break;
            }
            let records = Arc::clone(&registry.borrow_and_update());
            let wanted: BTreeMap<String, OwnerNode> = crate::standby::first_standby_of(&host, &records)
                .into_iter()
                .take(self.max)
                .collect();
            self.follow_only(wanted, &host);
        }
        self.followers().clear();
    }

    /// Follows exactly `wanted` (each at its owner), skipping databases
    /// hosted here and, while the node is over its memory budget, starting
    /// none.
    fn follow_only(&self, wanted: BTreeMap<String, OwnerNode>, host: &Host) {
        let over_budget = host.is_over_memory_budget();
        let mut followers = self.followers();
        followers.retain(|db, _| wanted.contains_key(db) && host.cell(db).is_none());
        for (db, owner) in wanted {
            if host.cell(&db).is_some() {
                continue;
            }
            match followers.get(&db) {
                Some(follower) => follower.follow(owner),
                None if !over_budget => {
                    self.shared.counts.started.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(db, owner = %owner.node_id, "following as hot standby");
                    let follower = Follower::start(db.clone(), owner, Arc::clone(&self.shared));
                    followers.insert(db, follower);
                }
                None => {}
            }
        }
    }

    /// Follows `db` at `owner` now (this node just handed it there, and is
    /// its first standby), without waiting for the next registry round.
    pub(crate) fn follow_now(&self, db: &str, owner: OwnerNode) {
        if self.max == 0 {
            return;
        }
        let mut followers = self.followers();
        if let Some(follower) = followers.get(db) {
            follower.follow(owner);
            return;
        }
        if followers.len() >= self.max {
            return;
        }
        self.shared.counts.started.fetch_add(1, Ordering::Relaxed);
        let follower = Follower::start(db.to_owned(), owner, Arc::clone(&self.shared));
        followers.insert(db.to_owned(), follower);
    }

    /// The basis this node's follower of `db` has applied (the owner's
    /// acknowledged stream up to it), if it follows `db`.
    #[must_use]
    pub(crate) fn basis(&self, db: &str) -> Option<u64> {
        let value = self.followers().get(db).and_then(Follower::value)?;
        Some(value.db().basis_t())
    }

    /// Databases followed now.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.followers().len()
    }

    /// Writes the hot-standby series.
    pub(crate) fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        let counts = &self.shared.counts;
        scrape.gauge(
            "corium_fleet_hot_standbys",
            "Databases this node follows as their first standby (--hot-standbys), kept current from the owner's stream.",
            self.len(),
        );
        scrape.gauge(
            "corium_fleet_hot_standby_datoms",
            "Datoms the hot standbys hold (charged to the memory budget as a cache).",
            crate::host::DroppableMemory::datoms(self),
        );
        scrape.counter(
            "corium_fleet_hot_standby_starts_total",
            "Hot standbys started from the published index.",
            load(&counts.started),
        );
        scrape.counter(
            "corium_fleet_hot_standby_restarts_total",
            "Hot standbys that started again from the published index (a gap in the stream, or a naming mismatch).",
            load(&counts.restarted),
        );
        scrape.counter(
            "corium_fleet_hot_standby_applied_total",
            "Transactions hot standbys applied from their owners' acknowledged streams.",
            load(&counts.applied),
        );
        scrape.counters(
            "corium_fleet_hot_standby_promotions_total",
            "Opens offered a hot standby's value: taken (promoted in place, only the tail read from the log) or refused (recovered from storage).",
            [("taken", &counts.promoted), ("refused", &counts.refused)]
                .map(|(outcome, value)| ([("outcome", outcome)], load(value))),
        );
        scrape.counter(
            "corium_fleet_hot_standby_promoted_tail_total",
            "Transactions promoted opens applied from the log after the hot standbys' bases.",
            load(&counts.promoted_tail),
        );
        scrape.counter(
            "corium_fleet_hot_standby_memory_drops_total",
            "Times every hot standby was dropped because the node was over its memory budget.",
            load(&counts.dropped_for_memory),
        );
    }
}

impl WarmStart for HotStandbys {
    fn offer(&self, db: &str) -> Option<WarmValue> {
        let value = self.followers().get(db).and_then(Follower::value)?;
        if self.diverge {
            return Some(diverged(&value));
        }
        Some(value)
    }

    fn taken(&self, db: &str, outcome: Result<u64, WarmRefusal>) {
        // Either way this follower is done: the database is open here now,
        // or its value did not fit (a new follower starts from the index).
        self.followers().remove(db);
        match outcome {
            Ok(tail) => {
                self.shared.counts.promoted.fetch_add(1, Ordering::Relaxed);
                self.shared
                    .counts
                    .promoted_tail
                    .fetch_add(tail, Ordering::Relaxed);
                tracing::info!(db, tail, "hot standby promoted in place");
            }
            Err(refusal) => {
                self.shared.counts.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(db, %refusal, "hot standby's value refused; recovered from storage");
            }
        }
    }
}

/// `value` with a basis record the log does not hold (an instant no
/// transaction has): what a follower that applied a deposed writer's
/// unacknowledged append would offer, which Corium must refuse.
fn diverged(value: &WarmValue) -> WarmValue {
    let db = value.db().clone();
    let record = corium_log::TxRecord {
        t: db.basis_t(),
        tx_instant: i64::MIN,
        datoms: Vec::new(),
    };
    WarmValue::new(db, 0, 0, Some(record))
}

impl crate::host::DroppableMemory for HotStandbys {
    fn datoms(&self) -> u64 {
        self.followers().values().map(Follower::datoms).sum()
    }

    fn drop_all(&self) {
        let dropped = std::mem::take(&mut *self.followers());
        if !dropped.is_empty() {
            self.shared
                .counts
                .dropped_for_memory
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}
