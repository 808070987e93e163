//! The SDK's error: what went wrong and, through [`Error::kind`], what the
//! caller should do about it.

use corium_fleet_wire::kind::ErrorKind;
use corium_fleet_wire::not_owner::{self, NotOwner};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work (bad endpoint, unreadable TLS files).
    #[error("configuration: {0}")]
    Config(String),
    /// The fleet address could not be reached within the retry budget.
    #[error("cannot reach {endpoint}: {detail}")]
    Connect {
        /// The fleet address.
        endpoint: String,
        /// Why it could not be reached.
        detail: String,
    },
    /// The node answered that it does not hold the database's lease, and
    /// retries within the budget did not find the holder.
    #[error("not the owner of {:?} (owner {:?}, lease version {})", .0.database, .0.owner_id, .0.lease_version)]
    NotOwner(Box<NotOwner>),
    /// A transaction's outcome is unknown: the last attempt may or may not
    /// have committed. Retrying with the same `request_id`
    /// ([`crate::Database::transact_with_id`]) is safe: it commits at most
    /// once and returns the committed answer if there is one.
    #[error("outcome of request {request_id} is unknown after {attempts} attempts: {last}")]
    Ambiguous {
        /// The id to retry with, or to ask about
        /// ([`crate::Database::request_status`]).
        request_id: String,
        /// Attempts made (the first included).
        attempts: u32,
        /// The status the last attempt ended with.
        last: tonic::Status,
    },
    /// Any other status from the fleet.
    #[error("{0}")]
    Status(tonic::Status),
    /// A response could not be decoded.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// The kind of a status: what a caller does about it.
#[must_use]
pub fn status_kind(status: &tonic::Status) -> ErrorKind {
    if let Some(detail) = not_owner::from_status(status) {
        return not_owner::kind(&detail);
    }
    match status.code() {
        tonic::Code::Unavailable
        | tonic::Code::DeadlineExceeded
        | tonic::Code::Aborted
        | tonic::Code::ResourceExhausted => ErrorKind::RetryLater,
        tonic::Code::Internal | tonic::Code::DataLoss | tonic::Code::Unknown => ErrorKind::PageSomeone,
        // Refused credentials: the same token is refused again, so a retry
        // only hammers the fleet's authentication; the caller must change
        // the token (or its grants). Listed by name, every code is, so
        // that no code is classified by accident.
        tonic::Code::Unauthenticated
        | tonic::Code::PermissionDenied
        | tonic::Code::InvalidArgument
        | tonic::Code::NotFound
        | tonic::Code::AlreadyExists
        | tonic::Code::FailedPrecondition
        | tonic::Code::OutOfRange
        | tonic::Code::Unimplemented
        | tonic::Code::Cancelled
        | tonic::Code::Ok => ErrorKind::GiveUp,
    }
}

impl Error {
    /// What the caller should do.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) | Self::Protocol(_) => ErrorKind::PageSomeone,
            Self::Connect { .. } | Self::Ambiguous { .. } => ErrorKind::RetryLater,
            Self::NotOwner(detail) => not_owner::kind(detail),
            Self::Status(status) => status_kind(status),
        }
    }

    /// The status, when the error is one.
    #[must_use]
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Self::Status(status) | Self::Ambiguous { last: status, .. } => Some(status),
            _ => None,
        }
    }

    pub(crate) fn from_status(status: tonic::Status) -> Self {
        match not_owner::from_status(&status) {
            Some(detail) => Self::NotOwner(Box::new(detail)),
            None => Self::Status(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_codes_and_typed_details() {
        assert_eq!(
            status_kind(&tonic::Status::unavailable("x")),
            ErrorKind::RetryLater
        );
        assert_eq!(
            status_kind(&tonic::Status::invalid_argument("x")),
            ErrorKind::GiveUp
        );
        assert_eq!(status_kind(&tonic::Status::not_found("x")), ErrorKind::GiveUp);
        assert_eq!(status_kind(&tonic::Status::internal("x")), ErrorKind::PageSomeone);
        assert_eq!(
            status_kind(&tonic::Status::unauthenticated("x")),
            ErrorKind::GiveUp
        );
        assert_eq!(
            status_kind(&tonic::Status::permission_denied("x")),
            ErrorKind::GiveUp
        );
        let hint = not_owner::to_status(&NotOwner {
            database: "d".into(),
            owner_id: "n".into(),
            lease_version: 3,
            retryable: true,
            route_endpoint: "http://n".into(),
            candidates: Vec::new(),
            last_basis_t: 0,
        });
        assert_eq!(status_kind(&hint), ErrorKind::RetryAtHint);
        assert!(matches!(Error::from_status(hint), Error::NotOwner(detail) if detail.lease_version == 3));
    }
}
