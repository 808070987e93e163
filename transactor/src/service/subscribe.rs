//! The fleet's own `Subscribe`: handshake, gapless backfill from the durable
//! log, then live items, ending with a retryable status when the cell stops
//! serving (eviction, deposition, shutdown) or the client goes away.
//!
//! Corium's `TransactorSvc::subscribe` cannot be used from a cell: its task
//! blocks in the broadcast receive and keeps the whole database state alive
//! after the cell is dropped, even after the client disconnects (design note
//! 0002). This is the same protocol over Corium's public `DbState` API, with
//! a select on the cell's closing and on the client's channel.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use corium_protocol::{codec, pb};
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::cell::Cell;

/// The stream a Subscribe call answers with: items until the owner stops serving.
pub type ItemStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeItem, Status>> + Send>>;

/// The status a subscriber sees when its owner stops serving: retryable, so
/// it resubscribes through the fleet address from its last basis.
fn moved(db: &str) -> Status {
    Status::unavailable(format!(
        "the owner of {db:?} stopped serving it (handoff, failover or shutdown); resubscribe from your last basis"
    ))
}

/// Subscriptions open per principal on this node; an entry lives while it
/// is above zero.
pub type ByPrincipal = Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>;

/// How many subscriptions this node serves at once: in all, per database,
/// per principal.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Limits {
    /// On this node.
    pub per_node: usize,
    /// For one database.
    pub per_database: usize,
    /// For one principal (every anonymous caller is the one anonymous
    /// principal).
    pub per_principal: usize,
}

/// A place among the node's subscriptions, given back when dropped.
pub struct Admission {
    node: Arc<AtomicUsize>,
    by_principal: ByPrincipal,
    principal: String,
    /// Keeps the cell from idle eviction, and counts it per database.
    _cell: crate::cell::Subscribed,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.node.fetch_sub(1, Ordering::AcqRel);
        let mut open = self
            .by_principal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.principal);
            }
        }
    }
}

/// A subscription refused for want of a place: retry later (a place comes
/// back when a subscriber leaves).
fn full(message: String) -> Status {
    corium_fleet_wire::overload::refused_for(
        corium_fleet_wire::overload::Scope::Streams,
        message,
        std::time::Duration::from_secs(1),
    )
}

/// Admits one more subscription of `principal` on `cell`, within `limits`.
///
/// # Errors
/// `RESOURCE_EXHAUSTED` with a retry hint when a limit is reached.
pub fn admit(
    cell: &Arc<Cell>,
    (node, by_principal): (&Arc<AtomicUsize>, &ByPrincipal),
    principal: &str,
    limits: Limits,
) -> Result<Admission, Status> {
    let cell_guard = cell.subscribed();
    if cell.subscribers() > limits.per_database {
        return Err(full(format!(
            "{:?} has {} subscriptions on this node, its limit \
             (--max-subscriptions-per-database); retry later",
            cell.db, limits.per_database
        )));
    }
    {
        let mut open = by_principal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(principal.to_owned()).or_insert(0);
        if *count >= limits.per_principal {
            if *count == 0 {
                open.remove(principal);
            }
            return Err(full(format!(
                "principal {principal} has {} subscriptions on this node, its limit \
                 (--max-subscriptions-per-principal); retry later",
                limits.per_principal
            )));
        }
        *count += 1;
    }
    // From here the admission (and its drop) owns the principal's place.
    let admission = Admission {
        node: Arc::clone(node),
        by_principal: Arc::clone(by_principal),
        principal: principal.to_owned(),
        _cell: cell_guard,
    };
    if node.fetch_add(1, Ordering::AcqRel) >= limits.per_node {
        // Dropping the admission gives back both places.
        drop(admission);
        return Err(full(format!(
            "this node serves {} subscriptions, its limit (--max-subscriptions); retry later",
            limits.per_node
        )));
    }
    Ok(admission)
}

/// Starts a subscription to `db` (the cell's database or a saga branch of
/// it) on `cell` from `from_basis_t`, holding `admission` for as long as it
/// lives.
///
/// # Errors
/// When the cell no longer hosts the database.
pub async fn stream(
    cell: &Arc<Cell>,
    db: &str,
    admission: Admission,
    from_basis_t: u64,
    heartbeat_interval_ms: u64,
) -> Result<ItemStream, Status> {
    let state = cell
        .node
        .db_state(db)
        .await
        .map_err(|error| crate::service::status::node_status(&error))?;
    // Register for live items before taking the basis snapshot, and drop
    // live reports at or below the last backfilled `t`: nothing falls
    // between backfill and live.
    let mut live = state.stream_items();
    let (schema, interner) = state.handshake_snapshot();
    let basis = state.db().basis_t();
    let index_basis = state.index_basis();
    let mut closed = cell.closed();
    let db = db.to_owned();
    let read_ahead = Arc::clone(&cell.read_ahead);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<pb::SubscribeItem, Status>>(64);
    tokio::spawn(async move {
        // The cell is not idle, and the place is taken, while this lives.
        let _admission = admission;
        let item = |item| Ok(pb::SubscribeItem { item: Some(item) });
        if tx
            .send(item(pb::subscribe_item::Item::Handshake(pb::Handshake {
                basis_t: basis,
                index_basis_t: index_basis,
                schema,
                heartbeat_interval_ms,
            })))
            .await
            .is_err()
        {
            return;
        }
        let mut last_sent = from_basis_t;
        // One read of the range. Corium 0.1.90's native log answers any
        // `tx_range` by reading and decoding the whole log, then filtering
        // (`corium-log` `read_native_merged`), so reading in steps would
        // repeat that work once per step, and the read is one bulk read
        // (`ReadAhead::whole_log`); the encoded items in flight are bounded
        // by the channel, the subscriptions by `admit`.
        if from_basis_t < basis {
            let read = state.tx_range(from_basis_t + 1, Some(basis + 1));
            let records = match read_ahead.whole_log_read(read).await {
                Ok(records) => records,
                Err(error) => {
                    let _ = tx.send(Err(crate::service::status::node_status(&error))).await;
                    return;
                }
            };
            for record in records {
                let datoms = match codec::encode_datoms(&record.datoms, &interner) {
                    Ok(datoms) => datoms,
                    Err(error) => {
                        let _ = tx.send(Err(Status::internal(error.to_string()))).await;
                        return;
                    }
                };
                let report = pb::TxReport {
                    t: record.t,
                    tx_instant: effective_instant(&record),
                    datoms,
                };
                if tx
                    .send(item(pb::subscribe_item::Item::Report(report)))
                    .await
                    .is_err()
                {
                    return;
                }
                last_sent = record.t;
            }
        }
        // The state is not needed for the live phase; do not keep it alive.
        drop(state);
        loop {
            let next = tokio::select! {
                next = live.recv() => next,
                () = crate::until_true(&mut closed) => {
                    let _ = tx.send(Err(moved(&db))).await;
                    return;
                }
                () = tx.closed() => return,
            };
            let forward = match next {
                Ok(pb::subscribe_item::Item::Report(report)) => {
                    if report.t <= last_sent {
                        continue;
                    }
                    last_sent = report.t;
                    pb::subscribe_item::Item::Report(report)
                }
                Ok(other) => other,
                Err(RecvError::Lagged(_)) => {
                    let _ = tx
                        .send(Err(Status::data_loss("subscription lagged; resubscribe")))
                        .await;
                    return;
                }
                Err(RecvError::Closed) => {
                    let _ = tx.send(Err(moved(&db))).await;
                    return;
                }
            };
            if tx.send(item(forward)).await.is_err() {
                return;
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// A transaction's instant: one the data asserted (imports date their own
/// transactions), else the one recorded.
fn effective_instant(record: &corium_log::TxRecord) -> i64 {
    corium_db::bootstrap::asserted_instant(record.t, &record.datoms).unwrap_or(record.tx_instant)
}
