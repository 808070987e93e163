//! The statuses the node's callers see, made here and nowhere else: from
//! the front door's typed refusals, the ownership decision's, the node's
//! limits, and Corium's errors for commits, reads and the request-id ledger.
//!
//! Two rules shape them (`docs/design/0009-stock-client-statuses.md`):
//! a write that may have committed is never answered in words a stock
//! client resends (it gets the typed `OutcomeUnknown`), and a refusal made
//! before anything ran keeps the words that make a stock client fail over
//! (`standby` in a `NotOwner`).

use corium_fleet_wire::not_owner;
use corium_fleet_wire::outcome::{self, Cause};
use tonic::Status;

use super::refused::Refused;
use crate::cell::{CreateError, TransactError};
use crate::error::{is_deposed, is_storage_failure};
use crate::fork::ReserveError;
use crate::host::{HandoffError, Refusal};
use crate::peer::PeerError;
use crate::principal::Unidentified;
use crate::replica::ReplicaError;
use crate::request_id::{LedgerError, Origin, Unsupported};
use crate::work_limits::Overloaded;

impl From<Refused> for Status {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Denied(error) => error.to_status(),
            Refused::Filtered => Self::unimplemented(refused.to_string()),
            Refused::NotOperator { .. } => Self::permission_denied(refused.to_string()),
            Refused::Ownership(refusal) => refusal.into(),
            Refused::Overloaded(overloaded) => overloaded.into(),
            Refused::OutOfReach(_) => Self::out_of_range(refused.to_string()),
        }
    }
}

impl From<Overloaded> for Status {
    fn from(overloaded: Overloaded) -> Self {
        corium_fleet_wire::overload::refused_for(overloaded.scope, overloaded.message, overloaded.retry_after)
    }
}

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Self {
        refusal_status(&refusal)
    }
}

/// The status of the ownership decision's "no".
fn refusal_status(refusal: &Refusal) -> Status {
    match refusal {
        Refusal::NotOwner(detail) => not_owner::to_status(detail),
        Refusal::Metadata(error) => Status::invalid_argument(error.to_string()),
        Refusal::InvalidName(error) => Status::invalid_argument(error.to_string()),
        Refusal::UnknownDatabase(_) => Status::not_found(refusal.to_string()),
        Refusal::Unverifiable { .. } => Status::unavailable(refusal.to_string()),
        Refusal::OverBudget { .. } | Refusal::TooLarge { .. } | Refusal::WritesRefused { .. } => {
            Status::resource_exhausted(refusal.to_string())
        }
        Refusal::KeyMissing { node, db, key_id } => {
            corium_fleet_wire::key_missing::with_message(refusal.to_string(), db, node, key_id)
        }
    }
}

impl From<PeerError> for Status {
    fn from(error: PeerError) -> Self {
        match error {
            PeerError::Answered(status) => status,
            other => peer_status(&other),
        }
    }
}

/// The status of a call to a peer that failed: the peer's own answer, or
/// why it could not be reached.
fn peer_status(error: &PeerError) -> Status {
    match error {
        PeerError::Material(_) | PeerError::Unreachable { .. } => Status::unavailable(error.to_string()),
        PeerError::Endpoint { .. } => Status::invalid_argument(error.to_string()),
        PeerError::Cleartext(_) => Status::failed_precondition(error.to_string()),
        PeerError::Tls(_) => Status::internal(error.to_string()),
        PeerError::Answered(status) => status.clone(),
    }
}

impl From<HandoffError> for Status {
    fn from(error: HandoffError) -> Self {
        match error {
            HandoffError::Refused(refusal) => refusal.into(),
            HandoffError::Unreachable(error) => error.into(),
            HandoffError::OwnTarget { .. } => Self::invalid_argument(error.to_string()),
            HandoffError::NotCandidate { .. } => Self::failed_precondition(error.to_string()),
            HandoffError::NotActivated { .. } => Self::aborted(error.to_string()),
        }
    }
}

impl From<ReserveError> for Status {
    fn from(error: ReserveError) -> Self {
        match error {
            ReserveError::Storage { .. } => Self::unavailable(error.to_string()),
            ReserveError::Running { .. } | ReserveError::Concurrent { .. } => {
                Self::aborted(error.to_string())
            }
        }
    }
}

impl From<Unidentified> for Status {
    fn from(error: Unidentified) -> Self {
        match error {
            Unidentified::NotFromIngress => Self::permission_denied(error.to_string()),
            Unidentified::NotText | Unidentified::Envelope(_) => Self::unauthenticated(error.to_string()),
            Unidentified::Denied(error) => error.to_status(),
        }
    }
}

impl From<ReplicaError> for Status {
    fn from(error: ReplicaError) -> Self {
        replica_status(&error)
    }
}

/// The status of a read a replica cannot serve now: `UNAVAILABLE` with the
/// standard retry hint when nothing was read and another try may answer.
fn replica_status(error: &ReplicaError) -> Status {
    match error {
        ReplicaError::NotNow { message, retry_after } => {
            corium_fleet_wire::overload::unavailable(message.clone(), *retry_after)
        }
        ReplicaError::Refused(refusal) => refusal_status(refusal),
        ReplicaError::Peer(error) => peer_status(error),
        ReplicaError::NoOwner {
            db,
            cause,
            retry_after,
        } => {
            let cause = replica_status(cause);
            corium_fleet_wire::overload::unavailable(
                format!(
                    "no owner of {db:?} to follow now ({}: {}); retry",
                    cause.code(),
                    cause.message()
                ),
                *retry_after,
            )
        }
        ReplicaError::NotAReplica => Status::unauthenticated(error.to_string()),
        ReplicaError::Relayed(status) => status.as_ref().clone(),
        ReplicaError::Shared(error) => replica_status(error),
    }
}

/// The status of a database that could not be created.
pub(crate) fn create_status(error: CreateError) -> Status {
    match error {
        CreateError::Schema(message) => Status::invalid_argument(message),
        CreateError::Open(error) => node_status(&error),
        CreateError::Corium(status) => status,
        CreateError::Created(error) => Status::internal(error.to_string()),
    }
}

/// The status the caller of a `Transact` on `db` gets for `error`: an
/// `OutcomeUnknown` for a write that may have committed, Corium's own words
/// for a refusal.
#[must_use]
pub(crate) fn transact_status(error: TransactError, db: &str) -> Status {
    match error {
        TransactError::Commit(error) => commit_status(db, None, &error),
        TransactError::Ledger { id, origin, error } => ledger_status(db, &id, origin, error),
    }
}

/// The status a client sees for a Corium node error outside a commit (a
/// read, an ownership check, an activation): a failure in storage is
/// `UNAVAILABLE` ("retry later": nothing was written), where Corium 0.1.90
/// answers `INTERNAL`; everything else keeps Corium's mapping. A commit's
/// failure goes through [`commit_status`] instead.
#[must_use]
pub(crate) fn node_status(error: &corium_transactor::node::NodeError) -> Status {
    if is_storage_failure(error) {
        Status::unavailable(format!("storage failed: {error}; retry later"))
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
pub(crate) fn commit_status(
    db: &str,
    request_id: Option<&uuid::Uuid>,
    error: &corium_transactor::node::NodeError,
) -> Status {
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
pub(crate) fn write_status(db: &str, status: Status) -> Status {
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
pub(crate) fn ledger_status(db: &str, id: &uuid::Uuid, origin: Origin, error: LedgerError) -> Status {
    match error {
        LedgerError::Invalid(message) => Status::invalid_argument(message),
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
                    Status::failed_precondition(format!(
                        "corium-request-id cannot be used on {db:?}: {reason}; or send no corium-request-id"
                    ))
                }
                (Origin::Client, Unsupported::ReservedTempid(_)) => Status::invalid_argument(reason),
            }
        }
        LedgerError::Expired { window } => Status::failed_precondition(format!(
            "corium-request-id {id} is older than the request-id retention window ({} s): its record may \
             be gone, so it can no longer be told whether it committed, and it is not committed again; \
             nothing was done. Send a new transaction under a new id",
            window.as_secs()
        )),
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

    use super::{Refusal, Status};
    use super::{commit_status, node_status, write_status};
    use corium_fleet_wire::kind::ErrorKind;
    use corium_fleet_wire::metadata::MetadataError;
    use corium_fleet_wire::not_owner::{self, NotOwner};

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

    #[test]
    fn each_refusal_maps_to_its_status_and_kind() {
        let not_owner = Refusal::NotOwner(Box::new(NotOwner {
            database: "d".into(),
            retryable: true,
            ..NotOwner::default()
        }));
        assert_eq!(not_owner.kind(), ErrorKind::RetryLater);
        let status = Status::from(not_owner);
        assert!(not_owner::from_status(&status).is_some());
        assert!(status.message().contains("standby"));
        let unverifiable = Refusal::Unverifiable {
            db: "d".into(),
            what: "storage read failed",
            detail: "connection refused".into(),
        };
        assert_eq!(unverifiable.kind(), ErrorKind::RetryLater);
        assert_eq!(Status::from(unverifiable).code(), tonic::Code::Unavailable);
        let unknown = Refusal::UnknownDatabase("d".into());
        assert_eq!(unknown.kind(), ErrorKind::GiveUp);
        assert_eq!(Status::from(unknown).code(), tonic::Code::NotFound);
        let metadata = Refusal::Metadata(MetadataError::TooManyHops(2));
        assert_eq!(Status::from(metadata).code(), tonic::Code::InvalidArgument);
    }

    /// The statuses the typed errors of handoffs, fork reservations, peers,
    /// the front door's identification and read replicas become: the codes
    /// and words callers saw when these modules made the statuses themselves.
    #[test]
    fn module_errors_keep_their_codes_and_words() {
        use super::{HandoffError, PeerError, ReplicaError, ReserveError, Unidentified};
        let check = |status: Status, code: tonic::Code, message: &str| {
            assert_eq!((status.code(), status.message()), (code, message));
        };
        check(
            HandoffError::OwnTarget {
                target: "n1".into(),
                db: "d".into(),
            }
            .into(),
            tonic::Code::InvalidArgument,
            "\"n1\" already owns \"d\"; hand it to another candidate",
        );
        check(
            HandoffError::NotCandidate {
                target: "n9".into(),
                db: "d".into(),
                candidates: "n1, n2".into(),
            }
            .into(),
            tonic::Code::FailedPrecondition,
            "\"n9\" is not a live candidate for \"d\" (candidates: n1, n2)",
        );
        check(
            HandoffError::NotActivated {
                db: "d".into(),
                target: "n2".into(),
                answer: Status::unavailable("gone"),
            }
            .into(),
            tonic::Code::Aborted,
            &format!(
                "released \"d\" but n2 did not activate it ({}: gone); it activates on its next request",
                tonic::Code::Unavailable
            ),
        );
        check(
            HandoffError::Refused(Refusal::UnknownDatabase("d".into())).into(),
            tonic::Code::NotFound,
            "unknown database \"d\"",
        );
        check(
            ReserveError::Running {
                target: "t".into(),
                node: "n1".into(),
            }
            .into(),
            tonic::Code::Aborted,
            "a fork into \"t\" is already running on n1; retry when it finishes",
        );
        check(
            ReserveError::Concurrent { target: "t".into() }.into(),
            tonic::Code::Aborted,
            "a fork into \"t\" started concurrently; retry when it finishes",
        );
        check(
            PeerError::Cleartext("http://n1:7001".into()).into(),
            tonic::Code::FailedPrecondition,
            "peer endpoint http://n1:7001 is not https:// but this node's internal routes are mutual TLS",
        );
        check(
            PeerError::Answered(Status::not_found("no")).into(),
            tonic::Code::NotFound,
            "no",
        );
        check(
            Unidentified::NotFromIngress.into(),
            tonic::Code::PermissionDenied,
            "corium-principal is accepted only from an ingress over mTLS",
        );
        check(
            Unidentified::NotText.into(),
            tonic::Code::Unauthenticated,
            "corium-principal is not text",
        );
        let not_now = Status::from(ReplicaError::not_now(
            "later".into(),
            std::time::Duration::from_secs(1),
        ));
        check(not_now.clone(), tonic::Code::Unavailable, "later");
        assert!(corium_fleet_wire::overload::retry_after(&not_now).is_some());
        let no_owner = Status::from(ReplicaError::NoOwner {
            db: "d".into(),
            cause: Box::new(ReplicaError::Refused(Refusal::Unverifiable {
                db: "d".into(),
                what: "storage read failed",
                detail: "refused".into(),
            })),
            retry_after: std::time::Duration::from_millis(100),
        });
        check(
            no_owner,
            tonic::Code::Unavailable,
            &format!(
                "no owner of \"d\" to follow now ({}: cannot verify ownership of \"d\": storage read failed: refused; retry later); retry",
                tonic::Code::Unavailable
            ),
        );
    }
}
