//! Committing on a cell: Corium's commit in a task of its own, and a whole
//! `Transact` — through the request-id ledger when it carries an id.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use corium_protocol::pb;
use corium_store::RootStore;
use corium_transactor::node::NodeError;

use super::{Admission, Cell};
use crate::request_id::{Database, LedgerError, Origin, Outcome, Sender, Unsupported};

/// A `Transact` a cell answered.
#[derive(Debug)]
pub struct Transacted {
    /// The answer.
    pub response: pb::TransactResponse,
    /// How: committed now (with or without a request id), or the replay of
    /// the id's earlier commit.
    pub outcome: Outcome,
}

/// Why a `Transact` on a cell failed.
#[derive(Debug, thiserror::Error)]
pub enum TransactError {
    /// Corium's commit of a transaction without a request id failed.
    #[error(transparent)]
    Commit(NodeError),
    /// The request-id ledger could not answer the transaction under `id`.
    #[error("request {id}: {error}")]
    Ledger {
        /// The request id.
        id: uuid::Uuid,
        /// Who chose it.
        origin: Origin,
        /// What went wrong.
        error: LedgerError,
    },
}

impl Cell {
    /// Commits `tx_data` to `db` (this cell's database, or a saga branch of
    /// it, which Corium hosts beside it) in a task of its own.
    ///
    /// Corium's group commit runs in the leading caller's future: a caller
    /// that goes away (its deadline, a reset stream) while the batch's log
    /// append is in flight cancels the leader after the append may have
    /// landed and before the log's next `t` advances, and every later append
    /// then fails as a "corrupt transaction log" until the lease moves. A
    /// spawned commit runs to its end whatever the caller does. Found by the
    /// simulation tier (docs/design/0007-fault-suite.md).
    ///
    /// A commit that fails in storage marks the cell for reset: whether the
    /// append landed is unknown (a lost acknowledgement leaves the same
    /// stale next `t`), and only recovery from storage knows.
    ///
    /// # Errors
    /// Corium's error for the transaction.
    ///
    /// The task holds the call's admission permit while it runs, so a drain
    /// (handoff, eviction, shutdown) waits for a commit whose caller left;
    /// the permit comes back with the answer.
    pub async fn commit(
        &self,
        permit: Admission,
        db: &str,
        tx_data: Vec<u8>,
        expected_basis_t: Option<u64>,
    ) -> (Result<pb::TransactResponse, NodeError>, Option<Admission>) {
        let node = Arc::clone(&self.node);
        let db = db.to_owned();
        let (result, permit) = match tokio::spawn(async move {
            let result = node.transact_at(&db, &tx_data, expected_basis_t).await;
            (result, permit)
        })
        .await
        {
            Ok((result, permit)) => (result, Some(permit)),
            Err(error) => (
                Err(NodeError::GroupCommit(format!("commit task failed: {error}"))),
                None,
            ),
        };
        if let Err(error) = &result
            && crate::error::is_storage_failure(error)
        {
            self.storage_failed.store(true, Ordering::Release);
        }
        (result, permit)
    }

    /// Whether a commit failed in storage since the cell opened.
    #[must_use]
    pub fn storage_failed(&self) -> bool {
        self.storage_failed.load(Ordering::Acquire)
    }

    /// Runs one `Transact` on this cell: under `id` through the
    /// request-id ledger (committed at most once, replayed after; the id is
    /// `sender`'s; records kept for `retention`), else as Corium's plain
    /// commit. The admission `permit` is held until the answer.
    ///
    /// # Errors
    /// [`TransactError`]; a commit that failed in storage also marks the
    /// cell for reset.
    #[tracing::instrument(name = "commit", level = "info", skip_all, fields(db = %self.db, request_id = id.map(|(id, _)| id.to_string())))]
    pub async fn transact(
        &self,
        permit: Admission,
        request: pb::TransactRequest,
        id: Option<(uuid::Uuid, Origin)>,
        sender: Sender,
        store: &dyn RootStore,
        retention: Option<std::time::Duration>,
    ) -> Result<Transacted, TransactError> {
        let db = request.db.clone();
        let commit = |tx_data, basis| self.commit(permit, &db, tx_data, basis);
        let Some((id, origin)) = id else {
            let (committed, _permit) = commit(request.tx_data, request.expected_basis_t).await;
            return committed
                .map(|response| Transacted {
                    response,
                    outcome: Outcome::Committed,
                })
                .map_err(TransactError::Commit);
        };
        if db != self.db {
            // A saga step: a request id is recorded in a database, and a
            // branch is not one (its steps are squashed into the database
            // when the saga commits).
            return Err(TransactError::Ledger {
                id,
                origin,
                error: LedgerError::Unsupported(Unsupported::SagaBranch),
            });
        }
        let on = Database {
            node: self.node.as_ref(),
            name: &self.db,
            store,
            read_ahead: &self.read_ahead,
            retention,
        };
        self.ledger
            .transact(on, id, sender, &request, commit)
            .await
            .map(|(response, outcome)| Transacted { response, outcome })
            .map_err(|error| TransactError::Ledger { id, origin, error })
    }
}
