//! One database followed: its value from the published index
//! ([`super::start`]), then every transaction its owner streams, decoded in
//! the writer's naming and folded in (`WarmValue::apply`), the value
//! offered to an open here kept in a slot.
//!
//! The stream is the owner's `corium.v1.Transactor/Subscribe`, over the
//! node-to-node mTLS, from the value's basis; it ends when the owner stops
//! serving (a move, a crash) or falls silent, and is resumed from the basis
//! applied, at the owner the registry names — or at once at the one a
//! `NotOwner` names. Keyword names new to the follower are looked up in the
//! metadata root, which the writer publishes before the transactions that
//! use them: a name the root does not have, or a transaction that does not
//! follow the basis, means the value is not the writer's, and the follower
//! starts again from the published index.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corium_core::KeywordInterner;
use corium_log::TxRecord;
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use corium_store::meta_root_name;
use corium_transactor::warm::WarmValue;
use futures::StreamExt as _;
use tokio::sync::watch;

use super::start::{self, Started};
use super::{HotStandbyCounts, Reach, Shared};
use crate::standby::OwnerNode;

/// Pause after a failed start or subscription, doubled up to the ceiling.
const RETRY_FLOOR: Duration = Duration::from_millis(100);
const RETRY_CEILING: Duration = Duration::from_secs(5);

/// A database followed; dropping it stops the follower.
pub(super) struct Follower {
    owner: watch::Sender<OwnerNode>,
    /// The value an open may take: the latest anchored one.
    value: Arc<Mutex<Option<WarmValue>>>,
    /// Datoms the value holds (what the memory budget charges).
    datoms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What ended one subscription.
enum Ended {
    /// The stream ended or failed: resume from the basis applied.
    Resume,
    /// The owner named another node as the holder: resume there.
    MovedTo(OwnerNode),
    /// The registry names another owner now.
    OwnerChanged,
    /// The value is not the writer's: start again from the index.
    Restart(String),
}

impl Follower {
    /// Starts following `db` at `owner`.
    pub(super) fn start(db: String, owner: OwnerNode, shared: Arc<Shared>) -> Self {
        let (owner, owner_rx) = watch::channel(owner);
        let value = Arc::new(Mutex::new(None));
        let datoms = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(db, owner_rx, shared, Arc::clone(&value), Arc::clone(&datoms)));
        Self {
            owner,
            value,
            datoms,
            task,
        }
    }

    /// Follows `owner` from now on (a no-op when it is the one followed).
    pub(super) fn follow(&self, owner: OwnerNode) {
        self.owner.send_if_modified(|current| {
            let changed = *current != owner;
            *current = owner;
            changed
        });
    }

    /// The latest value an open may take.
    pub(super) fn value(&self) -> Option<WarmValue> {
        self.value.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Datoms the value holds.
    pub(super) fn datoms(&self) -> u64 {
        self.datoms.load(Ordering::Relaxed)
    }
}

/// The follower's loop: start, subscribe, apply, resume — until dropped.
async fn run(
    db: String,
    mut owner: watch::Receiver<OwnerNode>,
    shared: Arc<Shared>,
    slot: Arc<Mutex<Option<WarmValue>>>,
    datoms: Arc<AtomicU64>,
) {
    let (reach, counts) = (&shared.reach, &shared.counts);
    let mut retry = RETRY_FLOOR;
    let mut state: Option<Started> = None;
    let mut moved_to: Option<OwnerNode> = None;
    loop {
        let following = match state.as_mut() {
            Some(following) => following,
            None => match start::load(&reach.base, reach.keyring.as_ref(), &db).await {
                Ok(started) => state.insert(started),
                Err(error @ start::StartError::KeyMissing(_)) => {
                    // Nothing here could use it: not followed (and not
                    // retried, which would read storage every few seconds
                    // for as long as this node stands by for it).
                    tracing::info!(db, %error, "not following as hot standby");
                    return;
                }
                Err(error) => {
                    tracing::debug!(db, %error, "hot standby cannot start; trying again");
                    pause(&mut retry).await;
                    continue;
                }
            },
        };
        let at = moved_to
            .take()
            .unwrap_or_else(|| owner.borrow_and_update().clone());
        let ended = subscribe(&db, &at, reach, following, &mut owner, &slot, &datoms, counts).await;
        match ended {
            Ok(Ended::Resume) | Err(_) => {
                // The owner may have died: its lease is watched to lapse.
                let _ = shared.lost.send(db.clone());
                pause(&mut retry).await;
            }
            Ok(Ended::MovedTo(holder)) => {
                retry = RETRY_FLOOR;
                moved_to = Some(holder);
            }
            Ok(Ended::OwnerChanged) => retry = RETRY_FLOOR,
            Ok(Ended::Restart(why)) => {
                tracing::info!(db, why, "hot standby starts again from the published index");
                counts.restarted.fetch_add(1, Ordering::Relaxed);
                state = None;
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
                datoms.store(0, Ordering::Relaxed);
                pause(&mut retry).await;
            }
        }
    }
}

async fn pause(retry: &mut Duration) {
    tokio::time::sleep(*retry).await;
    *retry = (*retry * 2).min(RETRY_CEILING);
}

/// One subscription at `at`, applying what it streams to `following`.
#[allow(clippy::too_many_arguments)]
async fn subscribe(
    db: &str,
    at: &OwnerNode,
    reach: &Reach,
    following: &mut Started,
    owner: &mut watch::Receiver<OwnerNode>,
    slot: &Mutex<Option<WarmValue>>,
    datoms: &AtomicU64,
    counts: &HotStandbyCounts,
) -> Result<Ended, crate::peer::PeerError> {
    let channel = reach.peers.channel(&at.endpoint, &at.node_id).await?;
    let basis = following.value.db().basis_t();
    // An unanchored value (loaded at a basis) asks for its basis
    // transaction again, to hold the record the open checks.
    let from_basis_t = if following.value.is_anchored() {
        basis
    } else {
        basis.saturating_sub(1)
    };
    let mut request = tonic::Request::new(pb::SubscribeRequest {
        db: db.to_owned(),
        protocol_version: corium_protocol::PROTOCOL_VERSION,
        from_basis_t,
    });
    // It lets the database go idle and never wakes it (the owner answers
    // `NotOwner` for one it does not have open).
    request.metadata_mut().insert(
        corium_fleet_wire::metadata::HOT_STANDBY,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    if let Some(token) = reach.peers.token()
        && let Ok(value) = format!("Bearer {token}").parse()
    {
        request.metadata_mut().insert("authorization", value);
    }
    let mut client = TransactorClient::new(channel);
    let answered = tokio::select! {
        answered = client.subscribe(request) => answered,
        changed = owner.changed() => {
            return Ok(if changed.is_ok() { Ended::OwnerChanged } else { Ended::Resume });
        }
    };
    let mut items = match answered {
        Ok(answer) => answer.into_inner(),
        Err(status) => return Ok(ended_by(&status)),
    };
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout(reach.silence, items.next()) => next,
            changed = owner.changed() => {
                return Ok(if changed.is_ok() { Ended::OwnerChanged } else { Ended::Resume });
            }
        };
        let item = match next {
            Err(_) | Ok(None) => return Ok(Ended::Resume),
            Ok(Some(Err(status))) => return Ok(ended_by(&status)),
            Ok(Some(Ok(item))) => item,
        };
        let Some(pb::subscribe_item::Item::Report(report)) = item.item else {
            continue;
        };
        if let Some(why) = take(reach, db, following, report).await {
            return Ok(Ended::Restart(why));
        }
        counts.applied.fetch_add(1, Ordering::Relaxed);
        if following.value.is_anchored() {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(following.value.clone());
        }
        datoms.store(
            u64::try_from(following.value.db().recorded_len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// What a refused or failed stream means for the follower.
fn ended_by(status: &tonic::Status) -> Ended {
    match corium_fleet_wire::not_owner::from_status(status) {
        Some(detail) if !detail.owner_id.is_empty() && !detail.route_endpoint.is_empty() => {
            Ended::MovedTo(OwnerNode {
                node_id: detail.owner_id,
                endpoint: detail.route_endpoint,
            })
        }
        _ => Ended::Resume,
    }
}

/// Folds one streamed transaction into the value; `Some(why)` when the value
/// cannot go on (a gap, a naming the writer does not have).
async fn take(reach: &Reach, db: &str, following: &mut Started, report: pb::TxReport) -> Option<String> {
    let basis = following.value.db().basis_t();
    if report.t <= basis && (following.value.is_anchored() || report.t < basis) {
        // Already applied (a resumed stream's overlap).
        return None;
    }
    let datoms = match decode(reach, db, &mut following.interner, &report.datoms).await {
        Ok(datoms) => datoms,
        Err(why) => return Some(why),
    };
    let record = TxRecord {
        t: report.t,
        tx_instant: report.tx_instant,
        datoms,
    };
    let taken = if report.t == basis {
        following.value.anchor(record)
    } else {
        following.value.apply(record)
    };
    taken.err().map(|refusal| refusal.to_string())
}

/// Decodes a streamed datom list in the writer's naming: keyword names the
/// follower has not seen are looked up in the metadata root, which the
/// writer published before this transaction.
async fn decode(
    reach: &Reach,
    db: &str,
    interner: &mut KeywordInterner,
    bytes: &[u8],
) -> Result<Vec<corium_core::Datom>, String> {
    let known = interner.len();
    let decoded =
        corium_protocol::codec::decode_datoms(bytes, interner).map_err(|error| error.to_string())?;
    if interner.len() == known {
        return Ok(decoded);
    }
    // New names: take the writer's ids for them.
    let meta = reach
        .base
        .get_root(&meta_root_name(db))
        .await
        .map_err(|error| format!("metadata root: {error}"))?
        .ok_or_else(|| "the metadata root is gone".to_owned())?;
    let (_, _, mut writers) =
        corium_protocol::codec::decode_metadata(&meta).map_err(|error| format!("metadata root: {error}"))?;
    let published = writers.len();
    let decoded =
        corium_protocol::codec::decode_datoms(bytes, &mut writers).map_err(|error| error.to_string())?;
    if writers.len() != published {
        return Err("a keyword the writer's metadata root does not name".to_owned());
    }
    *interner = writers;
    Ok(decoded)
}
