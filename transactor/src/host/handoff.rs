//! Handing a database to another node (admin RPC, drain on SIGTERM,
//! rebalancing after a membership change): publish the indexes, have the
//! target read the log ahead, stop admitting, drain, release, and ask the
//! target to activate at once;
//! meanwhile this node answers `NotOwner` naming the target.
//! `docs/design/0005-placement-and-handoff.md` has the protocol.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use corium_fleet_common::placement::Member;
use corium_fleet_proto::fleet::HandoffResponse;
use corium_fleet_wire::not_owner;
use futures::StreamExt as _;
use tonic::Status;

use super::{Host, Refusal, now_unix_ms};
use crate::peer::PeerError;

/// Why a handoff did not happen (or did not complete); the service edge
/// makes its status (`service/status.rs`).
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The ownership decision's "no": the database is not held here (a
    /// typed `NotOwner` naming its holder), unknown, or unverifiable.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The target already owns the database: `INVALID_ARGUMENT`.
    #[error("{target:?} already owns {db:?}; hand it to another candidate")]
    OwnTarget {
        /// The target (this node).
        target: String,
        /// The database.
        db: String,
    },
    /// The target is not a live candidate: `FAILED_PRECONDITION`.
    #[error("{target:?} is not a live candidate for {db:?} (candidates: {candidates})")]
    NotCandidate {
        /// The target asked for.
        target: String,
        /// The database.
        db: String,
        /// The live candidates, comma separated.
        candidates: String,
    },
    /// The target could not be reached before the lease was let go:
    /// nothing changed.
    #[error(transparent)]
    Unreachable(#[from] PeerError),
    /// The lease was released but the target did not activate: `ABORTED`
    /// (the database is cold and activates on its next request).
    #[error(
        "released {db:?} but {target} did not activate it ({}: {}); it activates on its next request",
        .answer.code(),
        .answer.message()
    )]
    NotActivated {
        /// The database.
        db: String,
        /// The target.
        target: String,
        /// The target's answer.
        answer: Status,
    },
}

/// Databases handed off at once when a drain starts.
const DRAIN_PARALLELISM: usize = 16;
/// Most databases handed off at once: the pace doubles up to this when the
/// drain would otherwise miss its deadline.
const MAX_DRAIN_PARALLELISM: usize = 256;
/// How often a drain looks at its pace.
const DRAIN_PACE_CHECK: Duration = Duration::from_millis(250);
/// How often a handoff asks its target again when the target still saw
/// this node's released lease (a late renewal; see `hand`).
const RELEASE_RACE_RETRIES: usize = 5;

impl Host {
    /// The node a database is being handed to, while the handoff runs.
    pub(super) fn handoff_target(&self, db: &str) -> Option<Member> {
        self.handing_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(db)
            .cloned()
    }

    /// Hands `db`, owned here, to the live candidate `target`.
    ///
    /// # Errors
    /// [`HandoffError::OwnTarget`] for this node as target,
    /// [`HandoffError::NotCandidate`] for a target that is not a live
    /// candidate, a typed `NotOwner` when this node does not hold the lease
    /// — in each case nothing changes — and [`HandoffError::NotActivated`]
    /// when the lease was released but the target did not activate (the
    /// database is then cold and activates on its next request).
    pub async fn handoff(self: &Arc<Self>, db: &str, target: &str) -> Result<HandoffResponse, HandoffError> {
        if self.cell(db).is_none() {
            // Not held here: name the holder so the caller can ask it.
            let view = self.read_root(db).await?;
            if !view.exists {
                return Err(Refusal::UnknownDatabase(db.to_owned()).into());
            }
            return Err(self.not_owner(db, view.live_owner(now_unix_ms())).into());
        }
        if target == self.config.node_id {
            return Err(HandoffError::OwnTarget {
                target: target.to_owned(),
                db: db.to_owned(),
            });
        }
        let candidates = self.candidates(db);
        let Some(member) = candidates.iter().find(|member| member.node_id == target).cloned() else {
            let names: Vec<&str> = candidates.iter().map(|member| member.node_id.as_str()).collect();
            return Err(HandoffError::NotCandidate {
                target: target.to_owned(),
                db: db.to_owned(),
                candidates: names.join(", "),
            });
        };
        self.hand(db, member, "admin").await
    }

    /// The handoff itself, once the target is chosen.
    async fn hand(
        self: &Arc<Self>,
        db: &str,
        target: Member,
        reason: &'static str,
    ) -> Result<HandoffResponse, HandoffError> {
        let lock = self.activation_lock(db);
        let _guard = lock.lock().await;
        let Some(cell) = self.cell(db) else {
            let view = self.read_root(db).await?;
            return Err(self.not_owner(db, view.live_owner(now_unix_ms())).into());
        };
        // Publish the indexes first, while still serving: the target then
        // recovers from a fresh index instead of replaying the whole log
        // tail, which is most of a handoff's unavailability on storage
        // where the log is one root per record. Not when the move is for
        // memory: a publication encodes every index anew (memory as large as
        // the database, for a moment) just when the node has none to spare,
        // and the target reads the tail instead (or promotes its hot
        // standby, which needs no index).
        if reason != "memory" {
            self.publish_indexes(&cell).await;
        }
        // A target that cannot be reached, or whose certificate does not
        // name it, is found out before the lease is let go: nothing changes.
        // The same connection then carries the activation.
        let peer = self.peers.connect(&target.endpoint, &target.node_id).await?;
        // The target reads the log now, while this node still serves, so
        // its activation reads only what is committed from here on. Best
        // effort: a target that cannot read ahead activates as usual.
        match peer.prepare(db).await {
            Ok(prepared) => tracing::debug!(
                db,
                target = %target.node_id,
                records = prepared.records,
                index_blobs = prepared.index_blobs,
                read_ms = prepared.read_ms,
                "target read the log ahead"
            ),
            Err(status) => tracing::info!(
                db,
                target = %target.node_id,
                code = ?status.code(),
                message = status.message(),
                "target did not read the log ahead; it will read it when it activates"
            ),
        }
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
        let mut activated = peer.activate(db).await;
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
            activated = peer.activate(db).await;
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
                self.follow_after_handoff(db, &target);
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
                Err(HandoffError::NotActivated {
                    db: db.to_owned(),
                    target: target.node_id.clone(),
                    answer: status,
                })
            }
        }
    }

    /// After handing `db` to `target`: when this node is now its first
    /// standby, its hot standby starts at once (not at the next registry
    /// round), from the index this handoff just published.
    fn follow_after_handoff(&self, db: &str, target: &Member) {
        if self.is_stopping() || self.is_over_memory_budget() {
            return;
        }
        let first_standby = self
            .candidates(db)
            .into_iter()
            .find(|member| member.node_id != target.node_id);
        if first_standby.is_some_and(|member| member.node_id == self.config.node_id) {
            self.template.hot_standbys.follow_now(
                db,
                crate::standby::OwnerNode {
                    node_id: target.node_id.clone(),
                    endpoint: target.endpoint.clone(),
                },
            );
        }
    }

    /// Hands `db` to the first of `targets` that activates it; when the
    /// first does not, the lease is already released and the others are
    /// asked in turn. A database nobody takes stays released (cold) and
    /// activates on a candidate at its next request.
    pub(super) async fn hand_to_first(
        self: &Arc<Self>,
        db: &str,
        targets: Vec<Member>,
        reason: &'static str,
    ) {
        let mut targets = targets.into_iter();
        let Some(first) = targets.next() else { return };
        match self.hand(db, first, reason).await {
            Err(HandoffError::NotActivated { .. }) => {}
            _ => return,
        }
        for target in targets {
            match self.peers.activate(&target.endpoint, &target.node_id, db).await {
                Ok(answer) => {
                    self.metrics.handoffs.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(db, to = %target.node_id, lease_version = answer.lease_version, reason, "database handed off to a later candidate");
                    return;
                }
                Err(error) => {
                    tracing::warn!(db, to = %target.node_id, %error, "candidate did not activate");
                }
            }
        }
    }

    /// Shutdown (drain): stop activating, then hand each owned database to
    /// its next live candidate (release, then that candidate acquires at
    /// once), so no database waits out a TTL, within `--drain-deadline-ms`:
    ///
    /// - handoffs start 16 at a time; every 250 ms the pace is compared with
    ///   the time left, and the number at once doubles (up to 256) while
    ///   the rest would not be done in time;
    /// - after the last moment to start one (the deadline less a reserve of
    ///   a fifth of it, at least 2 s, which a handoff in progress needs to
    ///   finish), the databases left are only released: one lease write each,
    ///   and their next request activates them on a candidate at once;
    /// - a database with no live successor is released as well.
    pub async fn release_all(self: &Arc<Self>) {
        self.stopping.store(true, Ordering::Release);
        let cells = self.cells();
        let started = Instant::now();
        let count = cells.len();
        let deadline = self.config.drain_deadline;
        let reserve = (deadline / 5).max(Duration::from_secs(2)).min(deadline);
        let last_start = started + deadline.saturating_sub(reserve);
        let slots = Arc::new(tokio::sync::Semaphore::new(DRAIN_PARALLELISM));
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let released = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pacer = tokio::spawn(pace(
            Arc::clone(&slots),
            Arc::clone(&done),
            count,
            started,
            last_start,
        ));
        futures::stream::iter(cells)
            .map(|cell| {
                let host = Arc::clone(self);
                let (slots, done, released) = (Arc::clone(&slots), Arc::clone(&done), Arc::clone(&released));
                async move {
                    let successors = host.successors(&cell.db);
                    let slot = if successors.is_empty() {
                        None
                    } else {
                        slots.acquire_owned().await.ok()
                    };
                    if slot.is_some() && Instant::now() < last_start {
                        host.hand_to_first(&cell.db, successors, "drain").await;
                    } else {
                        // Too late to hand over (or no one to hand to): let
                        // the lease go; the successor takes it on demand.
                        host.close_and_release(&cell).await;
                        host.metrics.evictions.fetch_add(1, Ordering::Relaxed);
                        released.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(slot);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
            .buffer_unordered(MAX_DRAIN_PARALLELISM)
            .collect::<Vec<()>>()
            .await;
        pacer.abort();
        tracing::info!(
            databases = count,
            released = released.load(Ordering::Relaxed),
            elapsed_ms = started.elapsed().as_millis(),
            deadline_ms = deadline.as_millis(),
            "drain finished"
        );
    }
}

/// Widens a drain while its pace would miss `last_start`: doubles the
/// handoffs at once (up to [`MAX_DRAIN_PARALLELISM`]) whenever the
/// databases left, at the rate so far, would take longer than the time left.
async fn pace(
    slots: Arc<tokio::sync::Semaphore>,
    done: Arc<std::sync::atomic::AtomicUsize>,
    count: usize,
    started: Instant,
    last_start: Instant,
) {
    let mut width = DRAIN_PARALLELISM;
    loop {
        tokio::time::sleep(DRAIN_PACE_CHECK).await;
        let now = Instant::now();
        let finished = done.load(Ordering::Relaxed);
        if finished >= count || now >= last_start {
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let rate = finished as f64 / started.elapsed().as_secs_f64().max(1e-3);
        #[allow(clippy::cast_precision_loss)]
        let needed = (count - finished) as f64 / rate.max(1e-3);
        let left = last_start.saturating_duration_since(now).as_secs_f64();
        if needed > left && width < MAX_DRAIN_PARALLELISM {
            let wider = (width * 2).min(MAX_DRAIN_PARALLELISM);
            slots.add_permits(wider - width);
            tracing::info!(
                from = width,
                to = wider,
                left = count - finished,
                "drain behind its deadline; handing more over at once"
            );
            width = wider;
        }
    }
}
