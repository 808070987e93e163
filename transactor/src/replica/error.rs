//! Why a hosted read cannot be answered from a replica now, typed; the
//! service edge makes the status the caller sees (`service/status.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::host::Refusal;
use crate::peer::PeerError;

/// Why a read replica cannot serve a read now.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicaError {
    /// Nothing was read: try again (here or at another replica) after
    /// `retry_after`. `UNAVAILABLE` with the standard retry hint.
    #[error("{message}")]
    NotNow {
        /// What the caller is told.
        message: String,
        /// How soon to try again.
        retry_after: Duration,
    },
    /// The ownership decision's "no" about the database.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The owner cannot be reached as itself.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// No owner to follow now, for `cause` (ownership in motion, storage
    /// not answering): nothing was read. `UNAVAILABLE` with a retry hint,
    /// naming the cause's status.
    #[error("no owner of {db:?} to follow now: {cause}")]
    NoOwner {
        /// The database.
        db: String,
        /// Why there is none.
        cause: Box<ReplicaError>,
        /// How soon to try again.
        retry_after: Duration,
    },
    /// A call at the replicas' relay without this process's relay secret
    /// and a live replica's id (`relay.rs`): `UNAUTHENTICATED`.
    #[error("the replica relay answers only this node's read replicas")]
    NotAReplica,
    /// The owner's own answer to a relayed call, passed on as it was.
    #[error("{}", .0.message())]
    Relayed(Box<tonic::Status>),
    /// The failed build of a replica that other reads waited for as well
    /// (one build per database): its error, shared.
    #[error(transparent)]
    Shared(Arc<ReplicaError>),
}

impl ReplicaError {
    /// Nothing was read: try again after `retry_after`.
    pub(crate) fn not_now(message: String, retry_after: Duration) -> Self {
        Self::NotNow { message, retry_after }
    }

    /// Whether this is final about the name (an unknown database, a name
    /// that can name none), not about ownership in motion.
    pub(crate) fn is_about_the_name(&self) -> bool {
        match self {
            Self::Refused(Refusal::UnknownDatabase(_) | Refusal::InvalidName(_) | Refusal::Metadata(_)) => {
                true
            }
            Self::Shared(inner) => inner.is_about_the_name(),
            _ => false,
        }
    }
}
