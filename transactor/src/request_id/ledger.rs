//! One cell's request-id ledger: commits a transaction carrying a request id
//! at most once, replays the committed answer to every retry, and answers
//! whether an id committed — fencing it first when it did not.
//!
//! - One index seek on the way in (`record::find`): a resend finds its
//!   committed record and is replayed without a commit; another request
//!   under a used id is refused. The record's uniqueness is the backstop for
//!   an exact duplicate that slips past (a caller that left mid-commit).
//! - Concurrent submissions of one id on this owner queue behind one another
//!   (one lock per id in flight) and the later ones replay; across owners the
//!   unique index is the backstop.
//! - A replay is fenced like a commit: it answers only while this cell still
//!   holds the lease, since the value it reads may hold a batch Corium
//!   installed before a post-append fence that then refused it (seed 2008 of
//!   the simulation tier, `docs/design/0007-fault-suite.md`).
//! - Every failure says whether anything may have committed
//!   ([`LedgerError::Unknown`]) or provably did not.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use corium_db::Db;
use corium_fleet_wire::outcome::Cause;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::Edn;
use corium_store::RootStore;
use corium_transactor::node::{DbState, NodeError, TransactorNode};

use super::{answer, record};

/// Who chose a transaction's request id.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Origin {
    /// The caller sent it: it is part of the caller's contract.
    Client,
    /// The ingress assigned it because the caller sent none: where it cannot
    /// be used, the ingress sends the call again without it.
    Ingress,
}

/// What happened to one id-carrying transaction.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Outcome {
    /// Committed by this call.
    Committed,
    /// Committed earlier under the same id; this is its answer again.
    Replayed,
}

/// Whether an id committed, as [`Ledger::status`] found it.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestStatus {
    /// Committed; the answer it had.
    Committed(pb::TransactResponse),
    /// Never committed and now never will.
    NotCommitted {
        /// The `t` of the fence marker.
        fenced_at: u64,
    },
}

/// Why a request id cannot be used on a database.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Unsupported {
    /// The database was created outside Corium Fleet.
    NoAttributes,
    /// The transaction names a tempid the fleet reserves.
    ReservedTempid(String),
    /// The transaction is a saga step: it commits to the saga's branch, and
    /// ids are recorded in databases only.
    SagaBranch,
}

/// Why the ledger could not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The request is wrong; nothing was committed by it.
    #[error("{0}")]
    Invalid(String),
    /// The id cannot be used here; nothing was committed.
    #[error("request ids cannot be used: {0:?}")]
    Unsupported(Unsupported),
    /// Corium refused the transaction before committing it.
    #[error(transparent)]
    Refused(NodeError),
    /// Storage failed before anything was committed.
    #[error(transparent)]
    Unavailable(NodeError),
    /// The id is time-ordered (a version-7 UUID) and older than the retention window:
    /// its record, if it had one, may have been retracted, so whether it
    /// committed can no longer be told; nothing was committed or fenced.
    #[error("request id older than the {} s retention window", window.as_secs())]
    Expired {
        /// The retention window.
        window: std::time::Duration,
    },
    /// The outcome is unknown: the commit failed after its append may have
    /// landed, or the committed answer cannot be given now.
    #[error("{reason}")]
    Unknown {
        /// Why, in the client-safe vocabulary.
        cause: Cause,
        /// The underlying error, for the typed detail and the log.
        reason: String,
    },
}

impl LedgerError {
    fn unknown(cause: Cause, reason: impl std::fmt::Display) -> Self {
        Self::Unknown {
            cause,
            reason: reason.to_string(),
        }
    }

    /// A commit that failed: unknown when it may have appended, else the
    /// given refusal.
    fn after_commit(error: NodeError) -> Result<NodeError, Self> {
        if crate::error::is_storage_failure(&error) {
            Err(Self::unknown(Cause::StorageFailed, error))
        } else if crate::error::is_deposed(&error) {
            Err(Self::unknown(Cause::LeaseMoved, error))
        } else {
            Ok(error)
        }
    }
}

/// Who sends a request id, and whether the record it writes says so.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Sender {
    /// The sender's owner tag.
    pub owner: record::Owner,
    /// Whether records name their owner: only once every live member of
    /// the fleet reads owners (`key.rs`); until then they are anyone's, as
    /// before owners existed.
    pub recorded: bool,
    /// An operator asking about an id sees every record (`status` only; a
    /// transaction is always its own sender's).
    pub operator: bool,
}

impl Sender {
    /// The owner a record written now carries.
    fn written(self) -> Option<record::Owner> {
        self.recorded.then_some(self.owner)
    }

    /// The owner a lookup compares records with (`None`: sees all).
    fn reading(&self, as_operator: bool) -> Option<&record::Owner> {
        (!(as_operator && self.operator)).then_some(&self.owner)
    }
}

/// The database a ledger call works on.
#[derive(Clone, Copy)]
pub struct Database<'a> {
    /// The cell's Corium node.
    pub node: &'a TransactorNode,
    /// The database's name.
    pub name: &'a str,
    /// The shared store, for the replay's lease check.
    pub store: &'a dyn RootStore,
    /// The cell's log read-ahead: a replay reads its record with Corium's
    /// `tx_range`, which reads the whole log (see `read_ahead`).
    pub read_ahead: &'a Arc<crate::read_ahead::ReadAhead>,
    /// How long records are kept (`None`: for ever).
    pub retention: Option<std::time::Duration>,
}

impl Database<'_> {
    /// Whether `id` carries its own time (a version-7 UUID) and is older than the
    /// retention window: an id whose record may be gone.
    fn expired(&self, id: uuid::Uuid) -> Result<(), LedgerError> {
        let Some(window) = self.retention else {
            return Ok(());
        };
        if id.get_version_num() != 7 {
            return Ok(());
        }
        // A v7 id's first 48 bits are its Unix time in milliseconds.
        let millis = i64::try_from(id.as_u128() >> 80).unwrap_or(i64::MAX);
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        if millis < corium_fleet_common::owner::now_unix_ms().saturating_sub(window_ms) {
            return Err(LedgerError::Expired { window });
        }
        Ok(())
    }
}

/// Per-cell state: one lock per id in flight.
#[derive(Default)]
pub struct Ledger {
    in_flight: Mutex<HashMap<uuid::Uuid, Arc<tokio::sync::Mutex<()>>>>,
}

impl Ledger {
    fn lock_for(&self, id: uuid::Uuid) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(
            self.in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(id)
                .or_default(),
        )
    }

    fn release(&self, id: uuid::Uuid, lock: &Arc<tokio::sync::Mutex<()>>) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only the last holder removes the entry (2: the map's and ours).
        if Arc::strong_count(lock) <= 2 {
            in_flight.remove(&id);
        }
    }

    /// Runs `work` holding `id`'s lock.
    async fn locked<T>(&self, id: uuid::Uuid, work: impl Future<Output = T>) -> T {
        let lock = self.lock_for(id);
        let result = {
            let _turn = lock.lock().await;
            work.await
        };
        self.release(id, &lock);
        result
    }

    /// Commits `request` under `id` at most once, or replays the answer of
    /// the transaction that already carries `id`. `commit` runs Corium's
    /// commit of the given bytes; what it returns beside the result (the
    /// call's admission permit) is held until the answer is ready, so a
    /// drain waits for a replay too.
    ///
    /// # Errors
    /// A [`LedgerError`] saying whether anything may have committed.
    #[tracing::instrument(name = "request_id_ledger", level = "info", skip_all, fields(request_id = %id))]
    pub async fn transact<C, Fut, Held>(
        &self,
        on: Database<'_>,
        id: uuid::Uuid,
        sender: Sender,
        request: &pb::TransactRequest,
        commit: C,
    ) -> Result<(pb::TransactResponse, Outcome), LedgerError>
    where
        C: FnOnce(Vec<u8>, Option<u64>) -> Fut,
        Fut: Future<Output = (Result<pb::TransactResponse, NodeError>, Held)>,
    {
        self.locked(id, transact_locked(on, id, sender, request, commit))
            .await
    }

    /// Whether `sender`'s `id` committed: the committed answer, or — after
    /// committing a fence marker under `id` so that nothing can commit under
    /// it later — "not committed". Another principal's id is "not
    /// committed" for this sender (its request under that id never did, and
    /// never will: the id is taken), with nothing written and nothing of
    /// the other's record given away.
    ///
    /// # Errors
    /// A [`LedgerError`]; asking again is always safe.
    pub async fn status<C, Fut, Held>(
        &self,
        on: Database<'_>,
        id: uuid::Uuid,
        sender: Sender,
        commit: C,
    ) -> Result<RequestStatus, LedgerError>
    where
        C: FnOnce(Vec<u8>, Option<u64>) -> Fut,
        Fut: Future<Output = (Result<pb::TransactResponse, NodeError>, Held)>,
    {
        self.locked(id, status_locked(on, id, sender, commit)).await
    }
}

async fn state_of(on: Database<'_>) -> Result<Arc<DbState>, LedgerError> {
    on.node.db_state(on.name).await.map_err(|error| {
        if crate::error::is_storage_failure(&error) {
            LedgerError::Unavailable(error)
        } else {
            LedgerError::Refused(error)
        }
    })
}

async fn transact_locked<C, Fut, Held>(
    on: Database<'_>,
    id: uuid::Uuid,
    sender: Sender,
    request: &pb::TransactRequest,
    commit: C,
) -> Result<(pb::TransactResponse, Outcome), LedgerError>
where
    C: FnOnce(Vec<u8>, Option<u64>) -> Fut,
    Fut: Future<Output = (Result<pb::TransactResponse, NodeError>, Held)>,
{
    let digest = record::Digest::of(request);
    let state = state_of(on).await?;
    // Refusals in Corium's own words, as the same request without an id
    // would get them.
    let (Edn::Vector(forms) | Edn::List(forms)) =
        codec::decode_edn(&request.tx_data).map_err(|error| LedgerError::Refused(error.into()))?
    else {
        return Err(LedgerError::Refused(NodeError::BadRequest(
            "tx-data must be a vector".into(),
        )));
    };
    let db = state.db();
    if !record::supported(&db) {
        return Err(LedgerError::Unsupported(Unsupported::NoAttributes));
    }
    let caller = sender.reading(false);
    if let Some(found) = record::find(&db, id, Some(&digest), caller) {
        let requested = record::request_identity(&super::shape::of(&db, &forms));
        return found_answer(on, &state, id, found, requested.as_ref()).await;
    }
    on.expired(id)?;
    let (tx, written) = record::augmented(&db, id, &digest, sender.written(), forms)
        .map_err(|record::Reserved(tempid)| LedgerError::Unsupported(Unsupported::ReservedTempid(tempid)))?;
    let (committed, _held) = commit(codec::encode_edn(&tx), request.expected_basis_t).await;
    match committed {
        Ok(response) => answer::normalise(response, &written)
            .map(|response| (response, Outcome::Committed))
            .map_err(|error| LedgerError::unknown(Cause::StorageFailed, error)),
        Err(error) => {
            let refusal = LedgerError::after_commit(error)?;
            // Refused by the database: an exact duplicate that committed
            // meanwhile (its record's uniqueness) is answered; anything
            // else is the refusal.
            match record::find(&state.db(), id, Some(&digest), caller) {
                Some(found) => found_answer(on, &state, id, found, written.identity.as_ref()).await,
                None => Err(LedgerError::Refused(refusal)),
            }
        }
    }
}

/// The answer to a request whose id is already recorded as `found`.
/// `requested`: the identity of the request's one tempid, if it has one.
async fn found_answer(
    on: Database<'_>,
    state: &DbState,
    id: uuid::Uuid,
    found: record::Found,
    requested: Option<&(corium_core::EntityId, corium_core::Value)>,
) -> Result<(pb::TransactResponse, Outcome), LedgerError> {
    let t = found.tx().sequence();
    match found {
        record::Found::Same(tx) => Ok((replay(on, state, tx, requested).await?, Outcome::Replayed)),
        record::Found::Fenced(_) => Err(LedgerError::Invalid(format!(
            "corium-request-id {id} was fenced by a request-status query (t={t}): this request never \
             committed and never will; send it under a new id"
        ))),
        record::Found::Other(_) => Err(LedgerError::Invalid(format!(
            "corium-request-id {id} was already used by a different transaction (t={t}) in {:?}; \
             nothing was committed. Use a new id for a new transaction",
            on.name
        ))),
        // Nothing of the other principal's record: not its `t`, not
        // whether it committed or was fenced.
        record::Found::Foreign(_) => Err(LedgerError::Invalid(format!(
            "corium-request-id {id} belongs to another caller; nothing was committed. Use a new \
             id (a random UUID) for a new transaction"
        ))),
    }
}

async fn status_locked<C, Fut, Held>(
    on: Database<'_>,
    id: uuid::Uuid,
    sender: Sender,
    commit: C,
) -> Result<RequestStatus, LedgerError>
where
    C: FnOnce(Vec<u8>, Option<u64>) -> Fut,
    Fut: Future<Output = (Result<pb::TransactResponse, NodeError>, Held)>,
{
    let state = state_of(on).await?;
    let db = state.db();
    if !record::supported(&db) {
        return Err(LedgerError::Unsupported(Unsupported::NoAttributes));
    }
    let caller = sender.reading(true);
    if let Some(found) = record::find(&db, id, None, caller) {
        return answer(on, &state, found).await;
    }
    // Never fence an id whose record may have expired: "not committed"
    // would be a guess.
    on.expired(id)?;
    let fence_marker = record::fence_marker(&db, id, sender.written());
    let (committed, _held) = commit(codec::encode_edn(&fence_marker), None).await;
    match committed {
        Ok(response) => Ok(RequestStatus::NotCommitted {
            fenced_at: response.basis_t,
        }),
        Err(error) => {
            let refusal = LedgerError::after_commit(error)?;
            // A commit under the id slipped in (from another owner's
            // recovery): answer it.
            match record::find(&state.db(), id, None, caller) {
                Some(found) => answer(on, &state, found).await,
                None => Err(LedgerError::Refused(refusal)),
            }
        }
    }
}

/// The status of an id found recorded as `found`.
async fn answer(
    on: Database<'_>,
    state: &DbState,
    found: record::Found,
) -> Result<RequestStatus, LedgerError> {
    match found {
        record::Found::Fenced(tx) => {
            fence(on, state).await?;
            Ok(RequestStatus::NotCommitted {
                fenced_at: tx.sequence(),
            })
        }
        record::Found::Same(tx) | record::Found::Other(tx) => {
            replay(on, state, tx, None).await.map(RequestStatus::Committed)
        }
        // Not this sender's: its own request under the id never committed
        // and never will (a transaction of its under the id is refused).
        // Nothing is written, and the answer carries the basis now, as a
        // fresh fence's would, fenced by this cell's lease like every answer.
        record::Found::Foreign(_) => {
            fence(on, state).await?;
            Ok(RequestStatus::NotCommitted {
                fenced_at: state.db().basis_t(),
            })
        }
    }
}

/// Whether this cell still holds the lease it read `state` under: the
/// replay's fence. The transaction is in this value, so it was durable
/// before now; answering is safe only while this cell holds the lease (a
/// successor's recovery then includes it).
async fn fence(on: Database<'_>, state: &DbState) -> Result<(), LedgerError> {
    match corium_transactor::lease::verify(on.store, on.name, &state.lease()).await {
        Ok(()) => Ok(()),
        Err(corium_transactor::lease::LeaseError::Lost) => Err(LedgerError::unknown(
            Cause::LeaseMoved,
            "the lease moved before the committed answer could be given",
        )),
        Err(error) => Err(LedgerError::unknown(Cause::StorageFailed, error)),
    }
}

/// Rebuilds the answer of the committed transaction `tx` from the database
/// value and the transaction's log record, fenced. `requested`: the
/// identity of the one tempid of the request answered again (none for a
/// status query), see [`answer::answer_tempids`].
async fn replay(
    on: Database<'_>,
    state: &DbState,
    tx: corium_core::EntityId,
    requested: Option<&(corium_core::EntityId, corium_core::Value)>,
) -> Result<pb::TransactResponse, LedgerError> {
    let db: Db = state.db();
    let t = tx.sequence();
    let records = on
        .read_ahead
        .whole_log_read(state.tx_range(t, Some(t + 1)))
        .await
        .map_err(|error| LedgerError::unknown(Cause::StorageFailed, error))?;
    let Some(record) = records.into_iter().find(|record| record.t == t) else {
        return Err(LedgerError::unknown(
            Cause::StorageFailed,
            format!("transaction t={t} of {:?} is not in the log", on.name),
        ));
    };
    let tx_data = codec::encode_datoms(&record.datoms, db.interner())
        .map_err(|error| LedgerError::unknown(Cause::StorageFailed, error))?;
    let response = pb::TransactResponse {
        basis_before: t - 1,
        basis_t: t,
        tx_instant: record.tx_instant,
        tempids: answer::encode_tempids(&answer::answer_tempids(&db, tx, &record.datoms, requested)),
        tx_data,
    };
    fence(on, state).await?;
    Ok(response)
}
