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

use corium_protocol::{codec, pb};
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use corium_fleet_common::counted::{Counted, Counts};

use crate::cell::Cell;
use crate::config::SubscriptionLimits;

/// The stream a Subscribe call answers with: items until the owner stops serving.
pub(crate) type ItemStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeItem, Status>> + Send>>;

/// The status a subscriber sees when its owner stops serving: retryable, so
/// it resubscribes through the fleet address from its last basis.
fn moved(db: &str) -> Status {
    Status::unavailable(format!(
        "the owner of {db:?} stopped serving it (handoff, failover or shutdown); resubscribe from your last basis"
    ))
}

/// A place among the node's subscriptions, given back when dropped.
pub(crate) struct Admission {
    _node: Counted<()>,
    _principal: Counted<String>,
    /// Keeps the cell from idle eviction, and counts it per database; `None`
    /// for a hot standby's stream, which must let the database go idle.
    _cell: Option<crate::cell::Subscribed>,
}

/// The node's subscriptions: in all and per principal (per database is
/// counted on each cell).
#[derive(Default)]
pub(crate) struct Subscriptions {
    node: Counts<()>,
    by_principal: Counts<String>,
}

impl Subscriptions {
    /// Subscriptions open on the node now.
    pub(crate) fn open(&self) -> usize {
        self.node.get(&())
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
pub(crate) fn admit(
    cell: &Arc<Cell>,
    open: &Subscriptions,
    principal: &str,
    limits: SubscriptionLimits,
    keeps_alive: bool,
) -> Result<Admission, Status> {
    let cell_guard = keeps_alive.then(|| cell.subscribed());
    if cell.subscribers() > limits.per_database {
        return Err(full(format!(
            "{:?} has {} subscriptions on this node, its limit \
             (--max-subscriptions-per-database); retry later",
            cell.db, limits.per_database
        )));
    }
    let principal_place = open
        .by_principal
        .enter(principal, limits.per_principal)
        .ok_or_else(|| {
            full(format!(
                "principal {principal} has {} subscriptions on this node, its limit \
                 (--max-subscriptions-per-principal); retry later",
                limits.per_principal
            ))
        })?;
    let node_place = open.node.enter(&(), limits.per_node).ok_or_else(|| {
        full(format!(
            "this node serves {} subscriptions, its limit (--max-subscriptions); retry later",
            limits.per_node
        ))
    })?;
    Ok(Admission {
        _node: node_place,
        _principal: principal_place,
        _cell: cell_guard,
    })
}

/// Starts a subscription to `db` (the cell's database or a saga branch of
/// it) on `cell` from `from_basis_t`, holding `admission` for as long as it
/// lives.
///
/// # Errors
/// When the cell no longer hosts the database.
pub(crate) async fn stream(
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
                () = corium_fleet_common::signal::until_true(&mut closed) => {
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
