//! The ownership decision's "no", typed: why a node will not serve an
//! owner-dependent call for a database. The service edge maps it to a
//! status once (`From<Refusal> for Status`); nothing on the way decides on
//! a status.

use corium_fleet_wire::kind::ErrorKind;
use corium_fleet_wire::metadata::MetadataError;
use corium_fleet_wire::not_owner::{self, NotOwner};
use tonic::Status;

/// Why a node refuses an owner-dependent call.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The fleet metadata is wrong (route header ≠ body, a second hop, a
    /// value that does not parse): `INVALID_ARGUMENT`.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// This node is not the lease holder (or cannot be now): a typed
    /// `NotOwner` naming the holder or the candidates. Decided before the
    /// call ran, so any caller may send it again.
    #[error("not the lease holder of {:?}", .0.database)]
    NotOwner(Box<NotOwner>),
    /// The name can name no database (Corium's rule): `INVALID_ARGUMENT`,
    /// decided before any storage read.
    #[error(transparent)]
    InvalidName(#[from] corium_fleet_common::names::InvalidName),
    /// The catalog has no such database: `NOT_FOUND`.
    #[error("unknown database {0:?}")]
    UnknownDatabase(String),
    /// Ownership cannot be verified (storage failed or did not answer, the
    /// lease could not be renewed, activation failed): `UNAVAILABLE`, never
    /// a guess (invariant 4).
    #[error("cannot verify ownership of {db:?}: {what}: {detail}; retry later")]
    Unverifiable {
        /// The database.
        db: String,
        /// What failed.
        what: &'static str,
        /// The underlying error.
        detail: String,
    },
}

impl Refusal {
    /// What the caller should do.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Metadata(_) | Self::InvalidName(_) | Self::UnknownDatabase(_) => ErrorKind::GiveUp,
            Self::NotOwner(detail) => not_owner::kind(detail),
            Self::Unverifiable { .. } => ErrorKind::RetryLater,
        }
    }
}

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotOwner(detail) => not_owner::to_status(&detail),
            Refusal::Metadata(error) => Self::invalid_argument(error.to_string()),
            Refusal::InvalidName(error) => Self::invalid_argument(error.to_string()),
            Refusal::UnknownDatabase(_) => Self::not_found(refusal.to_string()),
            Refusal::Unverifiable { .. } => Self::unavailable(refusal.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
