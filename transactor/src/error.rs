//! The node's error type and its coarse kind.

use corium_fleet_wire::kind::ErrorKind;
use corium_fleet_wire::outcome::{self, Cause};

use crate::request_id::{LedgerError, Origin, Unsupported};

/// Why a node could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration the node cannot run with (flags, the placement map,
    /// a duplicate node id, TLS files).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The `--placement-map` file is unreadable or refused.
    #[error("--placement-map: {0}")]
    PlacementMap(#[from] corium_fleet_common::placement_map::LoadError),
    /// The node's TLS material could not be read.
    #[error(transparent)]
    Tls(#[from] corium_fleet_common::tls::TlsError),
    /// The storage backend cannot host cells.
    #[error(transparent)]
    Unshareable(#[from] crate::view::MemoryNotShared),
    /// The shared store could not be opened.
    #[error(transparent)]
    Open(#[from] corium_fleet_store::OpenError),
    /// The shared store failed while the node started.
    #[error("storage {storage} failed: {source}")]
    Storage {
        /// The storage, described without credentials.
        storage: String,
        /// Corium's error.
        #[source]
        source: corium_store::StoreError,
    },
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl Error {
    /// What the caller (an operator, a supervisor) should do.
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) | Self::PlacementMap(_) | Self::Tls(_) | Self::Unshareable(_) => {
                ErrorKind::GiveUp
            }
            Self::Open(_) | Self::Storage { .. } => ErrorKind::RetryLater,
            Self::Serve(_) => ErrorKind::PageSomeone,
        }
    }
}

/// Whether a Corium node error is a failure in storage (or of a commit
/// whose storage outcome is unknown), as opposed to a refusal of the request.
#[must_use]
pub fn is_storage_failure(error: &corium_transactor::node::NodeError) -> bool {
    use corium_transactor::TransactError;
    use corium_transactor::node::NodeError;
    match error {
        NodeError::Store(_) | NodeError::Log(_) | NodeError::Lease(_) | NodeError::GroupCommit(_) => true,
        NodeError::Transact(inner) => matches!(
            inner,
            TransactError::Log(_) | TransactError::Store(_) | TransactError::IndexTask(_)
        ),
        _ => false,
    }
}

/// Whether a Corium node error says this node lost the database's lease.
#[must_use]
pub fn is_deposed(error: &corium_transactor::node::NodeError) -> bool {
    use corium_transactor::TransactError;
    use corium_transactor::node::NodeError;
    matches!(
        error,
        NodeError::Deposed(_) | NodeError::Transact(TransactError::Deposed { .. })
    )
}

/// The status a client sees for a Corium node error outside a commit (a
/// read, an ownership check, an activation): a failure in storage is
/// `UNAVAILABLE` ("retry later": nothing was written), where Corium 0.1.90
/// answers `INTERNAL`; everything else keeps Corium's mapping. A commit's
/// failure goes through [`commit_status`] instead.
#[must_use]
pub fn node_status(error: &corium_transactor::node::NodeError) -> tonic::Status {
    if is_storage_failure(error) {
        tonic::Status::unavailable(format!("storage failed: {error}; retry later"))
    } else {
        corium_transactor::server::to_status(error)
    }
}

/// The status of a commit on `db` that failed with `error`, sent under
/// `request_id` (if any).
///
/// A commit that failed in storage or at its post-append fence may have
/// appended a record a successor recovers (Corium 0.1.90 answers these
/// `INTERNAL` and `FAILED_PRECONDITION "deposed…"`, and the second is one
/// its own peers resend): its outcome is unknown, and the answer is the
/// typed `OutcomeUnknown`, which no stock client resends
/// (`docs/design/0009-stock-client-statuses.md`). Every other error is
/// a refusal before the commit and keeps Corium's mapping.
#[must_use]
pub fn commit_status(
    db: &str,
    request_id: Option<&uuid::Uuid>,
    error: &corium_transactor::node::NodeError,
) -> tonic::Status {
    let cause = if is_storage_failure(error) {
        Cause::StorageFailed
    } else if is_deposed(error) {
        Cause::LeaseMoved
    } else {
        return corium_transactor::server::to_status(error);
    };
    let id = request_id.map(|id| id.hyphenated().to_string());
    outcome::to_status(db, id.as_deref(), cause, &error.to_string())
}

/// The prefix of Corium's `FAILED_PRECONDITION` text for a write whose
/// post-append fence found the lease moved (`NodeError::Deposed`,
/// `TransactError::Deposed`; pinned by a test below).
const CORIUM_DEPOSED_PREFIX: &str = "deposed";

/// A status Corium's own service answered for a write on `db` (saga merge or
/// finish, schema, key and catalog changes), made safe the same way as
/// [`commit_status`]. Corium's service returns only a `Status`, so its code
/// and its fixed `deposed` prefix are all there is to decide on: `INTERNAL`
/// (a store, log or lease failure) and `deposed…` may follow a durable
/// append, and become `OutcomeUnknown`.
#[must_use]
pub fn write_status(db: &str, status: tonic::Status) -> tonic::Status {
    let cause = match status.code() {
        tonic::Code::Internal => Cause::StorageFailed,
        tonic::Code::FailedPrecondition if status.message().starts_with(CORIUM_DEPOSED_PREFIX) => {
            Cause::LeaseMoved
        }
        _ => return status,
    };
    outcome::to_status(db, None, cause, status.message())
}

/// The status of a ledger failure on `db` for a transaction under `id`.
#[must_use]
pub fn ledger_status(db: &str, id: &uuid::Uuid, origin: Origin, error: LedgerError) -> tonic::Status {
    match error {
        LedgerError::Invalid(message) => tonic::Status::invalid_argument(message),
        LedgerError::Unsupported(why) => {
            let reason = match &why {
                Unsupported::NoAttributes => {
                    "it was created outside Corium Fleet and has no request-id attributes \
                     (add the schema in docs/design/0006-exactly-once.md with AlterSchema)"
                        .to_owned()
                }
                Unsupported::SagaBranch => {
                    "it is a saga step, which commits to the saga's branch, and request ids are \
                     recorded in databases only (a saga is made safe to retry by committing or \
                     aborting it)"
                        .to_owned()
                }
                Unsupported::ReservedTempid(tempid) => {
                    format!(
                        "the transaction names tempid {tempid:?}, and tempids starting with \"fleet.tempid/\" or \"fleet.schema/\" are reserved by Corium Fleet"
                    )
                }
            };
            match (origin, why) {
                (Origin::Ingress, _) => outcome::unsupported_status(db, &reason),
                (Origin::Client, Unsupported::NoAttributes | Unsupported::SagaBranch) => {
                    tonic::Status::failed_precondition(format!(
                        "corium-request-id cannot be used on {db:?}: {reason}; or send no corium-request-id"
                    ))
                }
                (Origin::Client, Unsupported::ReservedTempid(_)) => tonic::Status::invalid_argument(reason),
            }
        }
        LedgerError::Refused(error) => corium_transactor::server::to_status(&error),
        LedgerError::Unavailable(error) => node_status(&error),
        LedgerError::Unknown { cause, reason } => {
            outcome::to_status(db, Some(&id.hyphenated().to_string()), cause, &reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use corium_fleet_wire::outcome;
    use corium_transactor::TransactError;
    use corium_transactor::node::NodeError;

    use super::{commit_status, node_status, write_status};

    fn unknown(status: &tonic::Status) -> Option<outcome::OutcomeUnknown> {
        assert!(
            !outcome::stock_peer_resends(status.code(), status.message()),
            "a stock peer would resend {status:?}"
        );
        outcome::from_status(status)
    }

    #[test]
    fn reads_failing_in_storage_are_retryable_and_the_rest_keeps_coriums_mapping() {
        let failed = node_status(&NodeError::GroupCommit(
            "native transaction log store failed".into(),
        ));
        assert_eq!(failed.code(), tonic::Code::Unavailable);
        assert_eq!(
            node_status(&NodeError::BadRequest("no".into())).code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            node_status(&NodeError::UnknownDb("a".into())).code(),
            tonic::Code::NotFound
        );
    }

    #[test]
    fn commits_that_may_have_appended_answer_an_unknown_outcome() {
        let id = uuid::Uuid::new_v4();
        for error in [
            NodeError::GroupCommit("native transaction log store failed".into()),
            NodeError::Deposed("orders".into()),
            NodeError::Transact(TransactError::Deposed { published: 9 }),
        ] {
            let status = commit_status("orders", Some(&id), &error);
            let detail = unknown(&status).unwrap_or_else(|| panic!("{error}: {status:?}"));
            assert_eq!(detail.database, "orders");
            assert_eq!(detail.request_id, id.hyphenated().to_string());
            // Corium's own answer for the same error is one its peers resend
            // (deposed) or give up on (internal): the fleet's is neither.
            let corium = corium_transactor::server::to_status(&error);
            assert_ne!(corium.code(), status.code());
        }
        let refused = commit_status(
            "orders",
            None,
            &NodeError::BadRequest("tx-data must be a vector".into()),
        );
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(outcome::from_status(&refused).is_none());
    }

    #[test]
    fn coriums_own_write_answers_are_made_safe() {
        // Pins Corium 0.1.90's text for a fenced write: the prefix
        // `write_status` decides on.
        for error in [
            NodeError::Deposed("orders".into()),
            NodeError::Transact(TransactError::Deposed { published: 3 }),
            NodeError::Store(corium_store::StoreError::Io(std::io::Error::other("gone"))),
        ] {
            let corium = corium_transactor::server::to_status(&error);
            let status = write_status("orders", corium.clone());
            assert!(unknown(&status).is_some(), "{corium:?} → {status:?}");
        }
        let refused = corium_transactor::server::to_status(&NodeError::UnknownDb("orders".into()));
        assert_eq!(write_status("orders", refused).code(), tonic::Code::NotFound);
    }
}
