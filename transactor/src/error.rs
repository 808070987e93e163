//! The node's error type and its coarse kind.

use corium_fleet_common::kind::ErrorKind;

/// Why a node could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot open storage {storage}: {source}")]
    Storage {
        storage: String,
        #[source]
        source: corium_store::StoreError,
    },
    #[error("storage {0} did not answer within the storage timeout")]
    StorageTimeout(String),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl Error {
    /// What the caller (an operator, a supervisor) should do.
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) => ErrorKind::GiveUp,
            Self::Storage { .. } | Self::StorageTimeout(_) => ErrorKind::RetryLater,
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

/// The status a client sees for a Corium node error (every call the fleet
/// makes into a cell maps its errors here).
///
/// Corium 0.1.90 answers `INTERNAL` when a commit fails in storage (the log
/// append, the post-append lease fence, the metadata publish: `Store`,
/// `Log`, `Lease`, `GroupCommit`, and a transaction's own store/log
/// errors), though its own docs call these "every batched caller retries".
/// Whether such a commit landed is unknown, and `INTERNAL` tells stock
/// clients and the ingress to give up. The fleet answers `UNAVAILABLE`
/// instead: retry later, with the same request id to stay exactly-once.
/// Found by the simulation tier (a crash before a log append answered
/// `INTERNAL`); see `docs/design/0007-fault-suite.md`. Everything else keeps
/// Corium's mapping.
#[must_use]
pub fn node_status(error: &corium_transactor::node::NodeError) -> tonic::Status {
    if is_storage_failure(error) {
        tonic::Status::unavailable(format!(
            "storage failed: {error}; retry later (a commit's outcome is unknown: retry it with the same corium-request-id)"
        ))
    } else {
        corium_transactor::server::to_status(error)
    }
}

#[cfg(test)]
mod tests {
    use corium_transactor::node::NodeError;

    use super::node_status;

    #[test]
    fn storage_failures_are_retryable_and_the_rest_keeps_coriums_mapping() {
        let aborted = node_status(&NodeError::GroupCommit(
            "native transaction log store failed".into(),
        ));
        assert_eq!(aborted.code(), tonic::Code::Unavailable);
        assert!(aborted.message().contains("corium-request-id"), "{aborted:?}");
        assert_eq!(
            node_status(&NodeError::BadRequest("no".into())).code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            node_status(&NodeError::UnknownDb("a".into())).code(),
            tonic::Code::NotFound
        );
    }
}
